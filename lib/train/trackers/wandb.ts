/**
 * Weights & Biases tracker through W&B's own Python SDK: a child process runs
 * `scripts/wandb_bridge.py` (JSON lines on stdin/stdout: init, log, artifacts, finish), so runs,
 * offline run dirs and `wandb sync` behave exactly as with TRL. W&B's settings are its environment
 * variables (`WANDB_MODE`, `WANDB_API_KEY`, `WANDB_PROJECT` — default `papergym-native`,
 * `WANDB_ENTITY`, `WANDB_DIR` — default the run dir). Needs `python3` (or `PYTHON`) with `wandb`.
 * Without an API key W&B refuses online mode; `WANDB_MODE=offline` writes `<run>/wandb/offline-run-*`
 * for a later `wandb sync`.
 */
import { spawn, type ChildProcessWithoutNullStreams } from 'node:child_process';
import { createInterface } from 'node:readline';
import { join } from 'node:path';
import { packageRoot } from '../../native.js';
import { python } from '../../model/checkpoints.js';
import type { Tracker, TrackerKind, TrackerStart } from './index.js';

const REPLY_TIMEOUT_MS = 120_000;

/** The bridge process: one command in flight at a time (the TrackerSet chains calls). */
class Bridge {
  private readonly child: ChildProcessWithoutNullStreams;
  private waiting: { resolve: (v: Record<string, unknown>) => void; reject: (e: Error) => void } | undefined;
  private exited: string | undefined;
  private stderr = '';
  constructor(env: NodeJS.ProcessEnv) {
    this.child = spawn(env.PYTHON ?? python, [join(packageRoot, 'scripts', 'wandb_bridge.py')], { env, stdio: ['pipe', 'pipe', 'pipe'] });
    this.child.stderr.on('data', (d: Buffer) => (this.stderr = (this.stderr + d.toString()).slice(-4000)));
    createInterface({ input: this.child.stdout }).on('line', (line) => {
      const w = this.waiting;
      this.waiting = undefined;
      if (!w) return;
      try {
        w.resolve(JSON.parse(line) as Record<string, unknown>);
      } catch {
        w.reject(new Error(`wandb bridge answered '${line.slice(0, 200)}'`));
      }
    });
    this.child.on('error', (e) => this.fail(`cannot run ${env.PYTHON ?? python}: ${e.message}`));
    this.child.on('exit', (code, sig) =>
      this.fail(`wandb bridge exited (${sig ?? code})${this.stderr ? `: ${this.stderr.trim().split('\n').slice(-3).join(' | ')}` : ''}`),
    );
    this.child.stdin.on('error', () => {});
  }
  private fail(why: string): void {
    this.exited ??= why;
    this.waiting?.reject(new Error(why));
    this.waiting = undefined;
  }
  async send(cmd: Record<string, unknown>): Promise<Record<string, unknown>> {
    if (this.exited) throw new Error(this.exited);
    const r = await new Promise<Record<string, unknown>>((resolve, reject) => {
      const t = setTimeout(() => this.fail(`wandb bridge did not answer '${String(cmd.op)}' within ${REPLY_TIMEOUT_MS / 1000} s`), REPLY_TIMEOUT_MS);
      this.waiting = { resolve: (v) => (clearTimeout(t), resolve(v)), reject: (e) => (clearTimeout(t), reject(e)) };
      this.child.stdin.write(JSON.stringify(cmd) + '\n');
    });
    if (r.ok !== true) throw new Error(String(r.error ?? 'wandb bridge error'));
    return r;
  }
  kill(): void {
    if (!this.exited) this.child.kill('SIGTERM');
  }
}

export async function openWandb(s: TrackerStart, env: NodeJS.ProcessEnv = process.env): Promise<Tracker> {
  const bridge = new Bridge({ ...env, WANDB_SILENT: env.WANDB_SILENT ?? 'true' });
  let r: Record<string, unknown>;
  try {
    r = await bridge.send({ op: 'init', project: 'papergym-native', name: s.runName, dir: s.runDir, config: s.params, tags: s.resumed ? ['resumed'] : [] });
  } catch (e) {
    bridge.kill();
    throw e;
  }
  s.log(`--report-to wandb: run ${String(r.id)} (${String(r.mode)}), files in ${String(r.dir)}`);
  return {
    name: 'wandb',
    async logMetrics(step, scalars) {
      await bridge.send({ op: 'log', step, data: scalars });
    },
    async logArtifacts(paths) {
      await bridge.send({ op: 'artifacts', paths });
    },
    async finish(status) {
      try {
        await bridge.send({ op: 'finish', exit_code: status === 'FINISHED' ? 0 : 1 });
      } finally {
        bridge.kill();
      }
    },
  };
}

/** The `--report-to wandb` descriptor (./index.ts registers it). */
export const wandbTracker: TrackerKind = {
  name: 'wandb',
  describe: 'Weights & Biases through its Python SDK (a bridge process; WANDB_MODE as set)',
  // The wandb library's own dir under the run dir it is given.
  runDirEntries: ['wandb'],
  open: (s) => openWandb(s),
};
