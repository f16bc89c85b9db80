/**
 * --report-to (lib/train/trackers): a real tiny training run logs to TensorBoard, MLflow and W&B,
 * read back by each tracker's own reader (scripts/read_trackers.py): TensorBoard's
 * EventAccumulator, MLflow's MlflowClient against a real `mlflow server` started here on loopback,
 * W&B's own datastore reader on the offline run W&B's SDK wrote (WANDB_MODE=offline: nothing reaches
 * the W&B service). A tracker whose server starts failing mid-run warns and the run finishes.
 * A Python package that is missing skips its part with the reason printed (scripts/setup.sh
 * installs them from scripts/requirements.txt).
 */
import { expect } from 'chai';
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { createServer, type Server } from 'node:http';
import { existsSync, mkdtempSync, readFileSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { createServer as netServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { packageRoot } from '../lib/native.js';
import { runTraining } from '../lib/train/run.js';
import type { TrainConfig } from '../lib/config/train.js';
import { crc32c, maskedCrc, tfRecord } from '../lib/train/trackers/tensorboard.js';
import { parseReportTo, rowScalars, TrackerSet } from '../lib/train/trackers/index.js';
import { python } from './helpers/tiny.js';
import { cli } from './helpers/run.js';
import { userCacheDir } from '../lib/util/cache.js';

const can = (py: string, mod: string) => spawnSync(py, ['-c', `import ${mod}`], { stdio: 'ignore' }).status === 0;
/** MLflow lives in its own venv (scripts/setup.sh; it pins pyarrow<26): MLFLOW_PYTHON, that venv, or the main python. */
const mlflowPython = [process.env.MLFLOW_PYTHON, join(userCacheDir(), 'mlflow-venv', 'bin', 'python'), python].find(
  (p): p is string => !!p && (p === python || existsSync(p)) && can(p, 'mlflow'),
);
const has = (mod: string) => (mod === 'mlflow' ? mlflowPython !== undefined : can(python, mod));
const read = (...args: string[]) => {
  const py = args[0] === 'mlflow' ? mlflowPython! : python;
  const r = spawnSync(py, [join(packageRoot, 'scripts', 'read_trackers.py'), ...args], { encoding: 'utf8', maxBuffer: 64 << 20 });
  if (r.status !== 0) throw new Error(`read_trackers.py ${args[0]} exited ${r.status}: ${r.stderr.slice(-3000)}`);
  return JSON.parse(r.stdout) as Record<string, unknown>;
};
const freePort = () =>
  new Promise<number>((res) => {
    const s = netServer().listen(0, '127.0.0.1', () => {
      const p = (s.address() as { port: number }).port;
      s.close(() => res(p));
    });
  });

function flags(out: string, reportTo: string[]): Partial<TrainConfig> {
  return {
    out,
    seed: 3,
    stages: ['opsd', 'grpo'],
    sampling: { maxNewTokens: 6 } as TrainConfig['sampling'],
    opsd: { steps: 2, batchSize: 2 } as TrainConfig['opsd'],
    grpo: { steps: 1, questionsPerStep: 1, groupSize: 2 } as TrainConfig['grpo'],
    validation: { validateEvery: 0 } as TrainConfig['validation'],
    checkpoint: { every: 0 },
    log: { reportTo } as TrainConfig['log'],
  };
}

const metricsRows = (dir: string) =>
  readFileSync(join(dir, 'metrics.jsonl'), 'utf8')
    .trim()
    .split('\n')
    .map((l) => JSON.parse(l) as Record<string, unknown>);

describe('experiment trackers (--report-to)', function () {
  this.timeout(600_000);
  let tmp = '';
  before(() => (tmp = mkdtempSync(join(tmpdir(), 'pg-trackers-'))));
  after(() => rmSync(tmp, { recursive: true, force: true }));

  it('TFRecord framing: CRC-32C check value, masked CRC, record layout', () => {
    expect(crc32c(Buffer.from('123456789'))).to.equal(0xe3069283);
    expect(maskedCrc(Buffer.alloc(0))).to.equal((((0 >>> 15) | (0 << 17)) + 0xa282ead8) >>> 0);
    const r = tfRecord(Buffer.from('abc'));
    expect(r.length).to.equal(8 + 4 + 3 + 4);
    expect(Number(r.readBigUInt64LE(0))).to.equal(3);
    expect(r.readUInt32LE(8)).to.equal(maskedCrc(r.subarray(0, 8)));
    expect(r.readUInt32LE(15)).to.equal(maskedCrc(Buffer.from('abc')));
  });

  it('report-to values and metric rows', () => {
    expect(parseReportTo('tensorboard, mlflow')).to.deep.equal(['tensorboard', 'mlflow']);
    expect(parseReportTo(['none'])).to.deep.equal([]);
    expect(parseReportTo(['all'])).to.deep.equal(['tensorboard', 'mlflow', 'wandb']);
    expect(() => parseReportTo(['comet'])).to.throw(/unknown tracker 'comet'/);
    expect(
      rowScalars({ stage: 'grpo', step: 1, globalStep: 3, time: 'x', loss: 0.5, bad: NaN, phaseSeconds: { rollout: 1.5 }, flag: true, s: 'a' }),
    ).to.deep.equal({ 'grpo/loss': 0.5, 'grpo/phaseSeconds/rollout': 1.5 });
  });

  describe('a tiny run logging to all three, read back by their own readers', () => {
    const skip: string[] = [];
    let mlflowProc: ChildProcess | undefined;
    let mlflowUri = '';
    let runDir = '';
    const logs: string[] = [];

    before(async function () {
      for (const m of ['tensorboard', 'mlflow', 'wandb']) if (!has(m)) skip.push(m);
      if (skip.length)
        console.log(
          `    (python packages missing: ${skip.join(', ')}: those parts are skipped; pip install -r scripts/requirements.txt; mlflow: scripts/setup.sh makes its venv)`,
        );
      const want = ['tensorboard', 'mlflow', 'wandb'].filter((m) => !skip.includes(m));
      if (!want.length) this.skip();
      if (want.includes('mlflow')) {
        const port = await freePort();
        mlflowUri = `http://127.0.0.1:${port}`;
        const store = join(tmp, 'mlflow');
        mlflowProc = spawn(
          mlflowPython!,
          [
            '-m',
            'mlflow',
            'server',
            '--host',
            '127.0.0.1',
            '--port',
            String(port),
            '--workers',
            '1',
            '--backend-store-uri',
            `sqlite:///${store}/mlflow.db`,
            '--artifacts-destination',
            join(store, 'artifacts'),
          ],
          { stdio: ['ignore', 'ignore', 'pipe'], detached: false },
        );
        let err = '';
        mlflowProc.stderr!.on('data', (d: Buffer) => (err = (err + d.toString()).slice(-4000)));
        const t0 = Date.now();
        for (;;) {
          try {
            if ((await fetch(`${mlflowUri}/health`)).ok) break;
          } catch {
            /* not up yet */
          }
          if (mlflowProc.exitCode !== null || Date.now() - t0 > 240_000) throw new Error(`mlflow server did not start: ${err}`);
          await new Promise((r) => setTimeout(r, 500));
        }
        console.log(`    (mlflow server up in ${((Date.now() - t0) / 1000).toFixed(1)} s)`);
      }
      runDir = join(tmp, 'run');
      const env = { MLFLOW_TRACKING_URI: process.env.MLFLOW_TRACKING_URI, WANDB_MODE: process.env.WANDB_MODE };
      process.env.MLFLOW_TRACKING_URI = mlflowUri;
      process.env.WANDB_MODE = 'offline';
      try {
        await runTraining({ flags: flags(runDir, want), handleSignals: false, log: (l) => logs.push(l) });
      } finally {
        for (const [k, v] of Object.entries(env))
          if (v === undefined) delete process.env[k];
          else process.env[k] = v;
      }
    });
    after(() => {
      mlflowProc?.kill('SIGTERM');
    });

    const stepRows = () => metricsRows(runDir).filter((r) => typeof r.loss === 'number');

    it('starts every tracker and warns about none', () => {
      expect(logs.filter((l) => /warning: --report-to/.test(l))).to.deep.equal([]);
      for (const m of ['tensorboard', 'mlflow', 'wandb'].filter((x) => !skip.includes(x))) expect(logs).to.include(`--report-to: ${m} started`);
    });

    it('TensorBoard: every step row as scalars (EventAccumulator), the config as text', function () {
      if (skip.includes('tensorboard')) this.skip();
      const tb = read('tensorboard', join(runDir, 'tensorboard')) as { scalars: Record<string, [number, number][]>; texts: Record<string, string[]> };
      const rows = stepRows();
      expect(rows.length).to.equal(3);
      for (const r of rows) {
        const series = tb.scalars[`${String(r.stage)}/loss`]!;
        const at = series.find(([s]) => s === r.globalStep)!;
        expect(at, `${String(r.stage)} step ${String(r.globalStep)}`).to.not.equal(undefined);
        expect(at[1]).to.equal(Math.fround(r.loss as number));
      }
      expect(tb.scalars['grpo/reward/mean'] ?? tb.scalars['grpo/rewardMean']).to.not.equal(undefined);
      expect(tb.texts.config![0])
        .to.match(/\| lora\.r \| 8 \|/)
        .and.match(/\| log\.reportTo \|/);
      expect(tb.texts.artifacts![0]).to.include(join(runDir, 'final'));
    });

    it('MLflow: metrics, params and artifacts on the real server (MlflowClient), status FINISHED', function () {
      if (skip.includes('mlflow')) this.skip();
      const m = read('mlflow', mlflowUri, 'run') as {
        status: string;
        params: Record<string, string>;
        metrics: Record<string, [number, number][]>;
        artifacts: string[];
      };
      expect(m.status).to.equal('FINISHED');
      expect(m.params['lora.r']).to.equal('8');
      expect(m.params['grpo.groupSize']).to.equal('2');
      for (const r of stepRows()) {
        const at = m.metrics[`${String(r.stage)}/loss`]!.find(([s]) => s === r.globalStep)!;
        expect(at[1]).to.equal(r.loss);
      }
      expect(m.artifacts).to.include('report.html').and.include('summary.json');
      expect(m.artifacts.filter((a) => a.startsWith('final/'))).to.include.members(['final/adapter_config.json', 'final/adapter_model.safetensors']);
    });

    it('W&B: the offline run its SDK wrote holds every step, the config, the artifacts and exit code 0', function () {
      if (skip.includes('wandb')) this.skip();
      const w = read('wandb', runDir) as { history: Record<string, unknown>[]; artifacts: string[]; config: Record<string, unknown>; exit_code: number };
      const rows = stepRows();
      for (const r of rows) {
        const h = w.history.find((x) => x._step === r.globalStep && `${String(r.stage)}/loss` in x);
        expect(h, `${String(r.stage)} step ${String(r.globalStep)}`).to.not.equal(undefined);
        expect(h![`${String(r.stage)}/loss`]).to.equal(r.loss);
      }
      expect(w.config['lora.r']).to.equal(8);
      expect(w.artifacts.length).to.equal(3);
      expect(w.exit_code).to.equal(0);
    });
  });

  it('a tracker whose server fails mid-run warns once, is switched off, and the run finishes', async function () {
    // A loopback MLflow stand-in that accepts the run and its params, then answers 503.
    let calls = 0;
    let failed = 0;
    const srv: Server = createServer((req, res) => {
      let body = '';
      req.on('data', (d) => (body += d));
      req.on('end', () => {
        calls++;
        const url = req.url ?? '';
        const json = (code: number, o: unknown) => (res.writeHead(code, { 'content-type': 'application/json' }), res.end(JSON.stringify(o)));
        if (url.startsWith('/api/2.0/mlflow/experiments/get-by-name')) return json(200, { experiment: { experiment_id: '1' } });
        if (url === '/api/2.0/mlflow/runs/create') return json(200, { run: { info: { run_id: 'r1', artifact_uri: 'mlflow-artifacts:/1/r1/artifacts' } } });
        if (url === '/api/2.0/mlflow/runs/log-batch' && body.includes('"params"')) return json(200, {});
        failed++;
        json(503, { error_code: 'TEMPORARILY_UNAVAILABLE', message: 'down' });
      });
    });
    await new Promise<void>((r) => srv.listen(0, '127.0.0.1', r));
    const logs: string[] = [];
    const prev = process.env.MLFLOW_TRACKING_URI;
    process.env.MLFLOW_TRACKING_URI = `http://127.0.0.1:${(srv.address() as { port: number }).port}`;
    try {
      const out = join(tmp, 'failing');
      const s = await runTraining({ flags: flags(out, ['mlflow', 'tensorboard']), handleSignals: false, log: (l) => logs.push(l) });
      expect(s.globalStep).to.equal(3);
      const warn = logs.filter((l) => /warning: --report-to mlflow failed/.test(l));
      expect(warn.length).to.equal(1);
      expect(warn[0])
        .to.match(/HTTP 503 TEMPORARILY_UNAVAILABLE/)
        .and.match(/training continues/);
      expect(readdirSync(join(out, 'tensorboard')).length).to.equal(1); // the other tracker went on
      expect(metricsRows(out).filter((r) => typeof r.loss === 'number').length).to.equal(3);
      // 3 attempts of the first metrics call (MLflow's client's retries), then no more metrics or
      // artifacts: only the closing runs/update (3 attempts)
      expect(failed).to.equal(6);
    } finally {
      if (prev === undefined) delete process.env.MLFLOW_TRACKING_URI;
      else process.env.MLFLOW_TRACKING_URI = prev;
      await new Promise<void>((r) => srv.close(() => r()));
    }
    expect(calls).to.be.greaterThan(3);
  });

  it('a tracker that cannot start warns and the run goes on without it', async () => {
    const logs: string[] = [];
    const prev = process.env.MLFLOW_TRACKING_URI;
    delete process.env.MLFLOW_TRACKING_URI;
    try {
      const s = await runTraining({
        flags: { ...flags(join(tmp, 'nostart'), ['mlflow']), opsd: { steps: 1, batchSize: 2 } as TrainConfig['opsd'], stages: ['opsd'] },
        handleSignals: false,
        log: (l) => logs.push(l),
      });
      expect(s.globalStep).to.equal(1);
    } finally {
      if (prev !== undefined) process.env.MLFLOW_TRACKING_URI = prev;
    }
    expect(logs.some((l) => /warning: --report-to mlflow did not start \(MLFLOW_TRACKING_URI must be the http\(s\) URL/.test(l))).to.equal(true);
  });

  it('the train CLI: --report-to and the config file key log.reportTo', async () => {
    const yaml = join(tmp, 'cfg.yaml');
    writeFileSync(
      yaml,
      'stages: [opsd]\nopsd: { steps: 1, batchSize: 2 }\nsampling: { maxNewTokens: 4 }\nvalidation: { validateEvery: 0 }\nlog: { reportTo: [tensorboard] }\n',
    );
    const fromFile = await cli(['train', '--config', yaml, '--out', join(tmp, 'cli-yaml')]);
    expect(fromFile.code, fromFile.err).to.equal(0);
    expect(fromFile.err).to.match(/--report-to: tensorboard started/);
    expect(readdirSync(join(tmp, 'cli-yaml', 'tensorboard')).filter((f) => f.startsWith('events.out.tfevents.')).length).to.equal(1);
    const flag = await cli(['train', '--config', yaml, '--report-to', 'none', '--out', join(tmp, 'cli-none')]);
    expect(flag.code, flag.err).to.equal(0);
    expect(existsSync(join(tmp, 'cli-none', 'tensorboard'))).to.equal(false);
    const bad = await cli(['train', '--config', yaml, '--report-to', 'comet', '--out', join(tmp, 'cli-bad')]);
    expect(bad.code).to.not.equal(0);
    expect(bad.err)
      .to.match(/report-to/)
      .and.match(/comet/);
  });

  it('TrackerSet.log never throws into the trainer', async () => {
    const set = await TrackerSet.open([], {} as TrainConfig, { runDir: tmp, runName: 'x', resumed: false, log: () => {} });
    expect(() => set.log({ globalStep: 1, stage: 'opsd', loss: 1 })).to.not.throw();
    await set.finish('FINISHED', []);
  });
});
