/**
 * MLflow tracker over MLflow's REST API (mlflow.org/docs/latest/rest-api.html), as the Python
 * client does: the server from `MLFLOW_TRACKING_URI` (http(s)://host:port; required), the
 * experiment `MLFLOW_EXPERIMENT_NAME` (default `papergym-native`, created when absent), auth from
 * `MLFLOW_TRACKING_TOKEN` (Bearer) or `MLFLOW_TRACKING_USERNAME` / `MLFLOW_TRACKING_PASSWORD` (Basic).
 *
 * - start: `experiments/get-by-name` (or `experiments/create`), `runs/create` (run_name = the run
 *   dir's name, tag `papergym.run_dir`), the resolved config as params (`runs/log-batch`, 100 per
 *   call, values cut to 6000 characters: MLflow's limit).
 * - each metrics row: `runs/log-batch` (metrics {key, value, timestamp ms, step}).
 * - artifacts: uploaded through the server's artifact proxy (`mlflow server` serves artifacts by
 *   default: PUT /api/2.0/mlflow-artifacts/artifacts/<path under mlflow-artifacts:/>); an artifact
 *   store the server does not proxy (s3://, a local path) is reported and skipped.
 * - finish: `runs/update` with status and end_time.
 */
import { readdirSync, readFileSync, statSync } from 'node:fs';
import { basename, join, relative } from 'node:path';
import type { Tracker, TrackerKind, TrackerStart } from './index.js';

const TIMEOUT_MS = 30_000;
const MAX_PARAM_VALUE = 6000;
const MAX_METRICS_PER_BATCH = 1000;
const ATTEMPTS = 3;

/** The MLflow REST client this tracker needs; errors name the endpoint and MLflow's error code. */
export class MlflowClient {
  private readonly headers: Record<string, string>;
  constructor(
    readonly base: string,
    env: NodeJS.ProcessEnv = process.env,
  ) {
    this.base = base.replace(/\/+$/, '');
    this.headers = {};
    if (env.MLFLOW_TRACKING_TOKEN) this.headers.authorization = `Bearer ${env.MLFLOW_TRACKING_TOKEN}`;
    else if (env.MLFLOW_TRACKING_USERNAME) {
      this.headers.authorization = `Basic ${Buffer.from(`${env.MLFLOW_TRACKING_USERNAME}:${env.MLFLOW_TRACKING_PASSWORD ?? ''}`).toString('base64')}`;
    }
  }

  /**
   * fetch with MLflow's client's retry rule: a connection error (e.g. a kept-alive socket the server
   * closed meanwhile) or HTTP 429 / 502 / 503 / 504 is tried again, 3 attempts in all, 0.5 s then 1 s apart.
   */
  private async fetchRetrying(url: string, init: () => RequestInit): Promise<Response> {
    for (let attempt = 1; ; attempt++) {
      try {
        const r = await fetch(url, init());
        if (attempt < ATTEMPTS && [429, 502, 503, 504].includes(r.status)) await r.text();
        else return r;
      } catch (e) {
        if (attempt >= ATTEMPTS || (e as Error).name === 'TimeoutError') throw e;
      }
      await new Promise((res) => setTimeout(res, 500 * 2 ** (attempt - 1)));
    }
  }

  async call<T>(method: 'GET' | 'POST', endpoint: string, body?: unknown): Promise<T> {
    const url = `${this.base}/api/2.0/mlflow/${endpoint}`;
    const init = (): RequestInit => ({
      method,
      headers: { ...this.headers, 'content-type': 'application/json' },
      signal: AbortSignal.timeout(TIMEOUT_MS),
      ...(body !== undefined ? { body: JSON.stringify(body) } : {}),
    });
    let r: Response;
    try {
      r = await this.fetchRetrying(url, init);
    } catch (e) {
      throw new Error(
        `MLflow ${method} ${endpoint}: ${(e as Error).message}${(e as { cause?: Error }).cause ? ` (${(e as { cause: Error }).cause.message})` : ''}`,
      );
    }
    const text = await r.text();
    if (!r.ok) {
      let code = '';
      try {
        code = (JSON.parse(text) as { error_code?: string }).error_code ?? '';
      } catch {
        /* not JSON */
      }
      const err = new Error(`MLflow ${method} ${endpoint}: HTTP ${r.status}${code ? ` ${code}` : ''} ${text.slice(0, 300)}`);
      throw Object.assign(err, { status: r.status, errorCode: code });
    }
    return (text ? JSON.parse(text) : {}) as T;
  }

  async upload(artifactPath: string, file: string): Promise<void> {
    const url = `${this.base}/api/2.0/mlflow-artifacts/artifacts/${artifactPath.split('/').map(encodeURIComponent).join('/')}`;
    const data = readFileSync(file);
    const init = (): RequestInit => ({
      method: 'PUT',
      headers: { ...this.headers, 'content-type': 'application/octet-stream' },
      body: data,
      signal: AbortSignal.timeout(TIMEOUT_MS * 4),
    });
    let r: Response;
    try {
      r = await this.fetchRetrying(url, init);
    } catch (e) {
      throw new Error(
        `MLflow artifact upload ${artifactPath}: ${(e as Error).message}${(e as { cause?: Error }).cause ? ` (${(e as { cause: Error }).cause.message})` : ''}`,
      );
    }
    if (!r.ok) throw new Error(`MLflow artifact upload ${artifactPath}: HTTP ${r.status} ${(await r.text()).slice(0, 300)}`);
  }
}

/** Every file under `p` (a file or a dir), with its path relative to `p`'s parent. */
function filesOf(p: string): { file: string; rel: string }[] {
  const root = join(p, '..');
  const out: { file: string; rel: string }[] = [];
  const walk = (q: string) => {
    if (statSync(q).isDirectory()) for (const e of readdirSync(q).sort()) walk(join(q, e));
    else out.push({ file: q, rel: relative(root, q) });
  };
  walk(p);
  return out;
}

export async function openMlflow(s: TrackerStart, env: NodeJS.ProcessEnv = process.env): Promise<Tracker> {
  const uri = env.MLFLOW_TRACKING_URI;
  if (!uri || !/^https?:\/\//.test(uri))
    throw new Error(`MLFLOW_TRACKING_URI must be the http(s) URL of an MLflow tracking server (got ${uri ? `'${uri}'` : 'nothing'})`);
  const c = new MlflowClient(uri, env);
  const expName = env.MLFLOW_EXPERIMENT_NAME || 'papergym-native';
  let experimentId: string;
  try {
    experimentId = (await c.call<{ experiment: { experiment_id: string } }>('GET', `experiments/get-by-name?experiment_name=${encodeURIComponent(expName)}`))
      .experiment.experiment_id;
  } catch (e) {
    if ((e as { errorCode?: string }).errorCode !== 'RESOURCE_DOES_NOT_EXIST') throw e;
    experimentId = (await c.call<{ experiment_id: string }>('POST', 'experiments/create', { name: expName })).experiment_id;
  }
  const tags = [
    { key: 'papergym.run_dir', value: s.runDir },
    { key: 'mlflow.source.name', value: 'papergym-native train' },
  ];
  if (s.resumed) tags.push({ key: 'papergym.resumed', value: 'true' });
  const run = await c.call<{ run: { info: { run_id: string; artifact_uri: string } } }>('POST', 'runs/create', {
    experiment_id: experimentId,
    run_name: s.runName,
    start_time: Date.now(),
    tags,
  });
  const runId = run.run.info.run_id;
  const artifactUri = run.run.info.artifact_uri;
  const params = Object.entries(s.params).map(([key, v]) => ({ key, value: String(v).slice(0, MAX_PARAM_VALUE) }));
  for (let i = 0; i < params.length; i += 100) await c.call('POST', 'runs/log-batch', { run_id: runId, params: params.slice(i, i + 100) });
  s.log(`--report-to mlflow: run ${runId} in experiment '${expName}' at ${c.base}`);
  return {
    name: 'mlflow',
    async logMetrics(step, scalars, wallTimeMs) {
      const metrics = Object.entries(scalars).map(([key, value]) => ({ key, value, timestamp: Math.round(wallTimeMs), step }));
      for (let i = 0; i < metrics.length; i += MAX_METRICS_PER_BATCH) {
        await c.call('POST', 'runs/log-batch', { run_id: runId, metrics: metrics.slice(i, i + MAX_METRICS_PER_BATCH) });
      }
    },
    async logArtifacts(paths) {
      const m = /^mlflow-artifacts:\/(.*)$/.exec(artifactUri);
      if (!m) {
        s.log(
          `--report-to mlflow: artifacts not uploaded: the run's artifact store ${artifactUri} is not proxied by the tracking server (start it with --serve-artifacts)`,
        );
        return;
      }
      const prefix = m[1]!.replace(/^\/+/, '');
      for (const p of paths) {
        try {
          statSync(p);
        } catch {
          continue;
        }
        for (const f of filesOf(p)) await c.upload(`${prefix}/${f.rel.split('\\').join('/')}`, f.file);
      }
      s.log(`--report-to mlflow: artifacts ${paths.map((p) => basename(p)).join(', ')} uploaded to ${artifactUri}`);
    },
    async finish(status) {
      await c.call('POST', 'runs/update', { run_id: runId, status, end_time: Date.now() });
    },
  };
}

/** The `--report-to mlflow` descriptor (./index.ts registers it). */
export const mlflowTracker: TrackerKind = {
  name: 'mlflow',
  describe: "an MLflow tracking server's REST API (MLFLOW_TRACKING_URI)",
  open: (s) => openMlflow(s),
};
