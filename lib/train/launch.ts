/**
 * `train --nproc-per-node N`: starts N worker processes on this machine with torchrun's
 * environment (RANK = node rank · N + local rank, WORLD_SIZE = nnodes · N, LOCAL_RANK,
 * LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT) and the same command line; each worker runs
 * `train` as one rank (lib/train/dist.ts; on CUDA one GPU each, cuda:LOCAL_RANK). A worker started
 * by an external launcher (torchrun, SLURM scripts) reads the same environment.
 *
 * Signals: the workers run in their own process group; a SIGINT / SIGTERM to the launcher is
 * forwarded once to every worker (each finishes its step, rank 0 writes a checkpoint, all exit).
 * A worker that fails makes the launcher stop the others after `graceMs` (they normally exit
 * earlier by themselves: their next collective fails naming the rank).
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { createServer } from 'node:net';

export interface LaunchOptions {
  nprocPerNode: number;
  nnodes: number;
  nodeRank: number;
  masterAddr: string;
  masterPort: number;
  /** Worker command (default: this node process re-running its own argv). */
  command?: string;
  args?: string[];
  env?: NodeJS.ProcessEnv;
  /** After a worker fails, ms before the remaining ones get SIGTERM (default 30 s). */
  graceMs?: number;
  log?: (line: string) => void;
}

/** The marker a launched worker carries, so it runs as a rank instead of launching again. */
export const WORKER_ENV = 'PAPERGYM_DIST_WORKER';

/** Checks that `port` can be bound on this machine (rank 0's TCPStore will listen there). */
export async function checkPortFree(port: number, host = '0.0.0.0'): Promise<void> {
  await new Promise<void>((res, rej) => {
    const srv = createServer();
    srv.once('error', (e: NodeJS.ErrnoException) =>
      rej(new Error(`MASTER_PORT ${port} is not usable on this machine (${e.code ?? e.message}); pick another with --master-port`)),
    );
    srv.listen(port, host, () => srv.close(() => res()));
  });
}

/** Validates the launcher flags; throws naming the flag. */
export function checkLaunchOptions(o: LaunchOptions): void {
  const int = (v: number, name: string, min: number) => {
    if (!Number.isInteger(v) || v < min) throw new Error(`--${name} must be an integer >= ${min} (got ${v})`);
  };
  int(o.nprocPerNode, 'nproc-per-node', 1);
  int(o.nnodes, 'nnodes', 1);
  int(o.nodeRank, 'node-rank', 0);
  if (o.nodeRank >= o.nnodes) throw new Error(`--node-rank ${o.nodeRank} must be < --nnodes ${o.nnodes}`);
  int(o.masterPort, 'master-port', 1);
  if (o.masterPort > 65535) throw new Error(`--master-port ${o.masterPort} is not a TCP port`);
}

/**
 * Runs the workers of this node; resolves with the exit code for the launcher: 0 when all
 * succeeded, 130 when interrupted, else the first failing worker's code (1 for a signal).
 */
export async function launchWorkers(o: LaunchOptions): Promise<number> {
  checkLaunchOptions(o);
  const log = o.log ?? ((l: string) => process.stderr.write(l + '\n'));
  if (o.nodeRank === 0) await checkPortFree(o.masterPort);
  const world = o.nnodes * o.nprocPerNode;
  const cmd = o.command ?? process.execPath;
  const args = o.args ?? [...process.execArgv, ...process.argv.slice(1)];
  const children: { rank: number; proc: ChildProcess; done: boolean }[] = [];
  let firstFailure: number | undefined;
  let interrupted = false;
  log(
    `launching ${o.nprocPerNode} workers (ranks ${o.nodeRank * o.nprocPerNode}..${(o.nodeRank + 1) * o.nprocPerNode - 1} of ${world}; master ${o.masterAddr}:${o.masterPort})`,
  );
  const exits: Promise<void>[] = [];
  for (let local = 0; local < o.nprocPerNode; local++) {
    const rank = o.nodeRank * o.nprocPerNode + local;
    const env = {
      ...(o.env ?? process.env),
      RANK: String(rank),
      WORLD_SIZE: String(world),
      LOCAL_RANK: String(local),
      LOCAL_WORLD_SIZE: String(o.nprocPerNode),
      GROUP_RANK: String(o.nodeRank),
      MASTER_ADDR: o.masterAddr,
      MASTER_PORT: String(o.masterPort),
      [WORKER_ENV]: '1',
    };
    // Own process group: a terminal Ctrl-C reaches the launcher only, which forwards it once.
    const proc = spawn(cmd, args, { env, stdio: 'inherit', detached: true });
    log(`worker rank ${rank}: pid ${proc.pid}`);
    const c = { rank, proc, done: false };
    children.push(c);
    exits.push(
      new Promise<void>((res) => {
        proc.on('exit', (code, signal) => {
          c.done = true;
          const failed = code !== 0 && !(interrupted && code === 130);
          if (failed) {
            log(
              `worker rank ${rank} (pid ${proc.pid}) ${signal ? `was killed by ${signal}` : `exited with code ${code}`}${firstFailure === undefined ? `; stopping the other workers in ${(o.graceMs ?? 30000) / 1000}s unless they exit first` : ''}`,
            );
            if (firstFailure === undefined) {
              firstFailure = code ?? 1;
              const t = setTimeout(() => {
                for (const k of children) if (!k.done) k.proc.kill('SIGTERM');
              }, o.graceMs ?? 30000);
              t.unref();
            }
          }
          res();
        });
        proc.on('error', (e) => {
          log(`worker rank ${rank} could not start: ${e.message}`);
          c.done = true;
          firstFailure ??= 1;
          res();
        });
      }),
    );
  }
  const forward = (sig: NodeJS.Signals) => () => {
    interrupted = true;
    log(`${sig}: forwarding to the workers (each finishes its step; rank 0 writes a checkpoint)`);
    for (const c of children) if (!c.done) c.proc.kill(sig);
  };
  const onInt = forward('SIGINT');
  const onTerm = forward('SIGTERM');
  process.on('SIGINT', onInt);
  process.on('SIGTERM', onTerm);
  try {
    await Promise.all(exits);
  } finally {
    process.off('SIGINT', onInt);
    process.off('SIGTERM', onTerm);
  }
  if (firstFailure !== undefined) return firstFailure;
  return interrupted ? 130 : 0;
}
