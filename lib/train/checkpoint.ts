/**
 * Checkpoints: `<run>/checkpoints/step-<NNNNNN>/` holding the PEFT adapter
 * (`adapter_model.safetensors` + `adapter_config.json`), the optimizer state
 * (`optimizer.safetensors`) and `trainer_state.json` (stage, steps, data cursor, seeds, config).
 * Written atomically: everything goes to a temp dir beside it, which is renamed into place, then
 * `checkpoints/latest` (a one-line file naming the dir) is replaced by rename. A crash at any
 * moment leaves either the previous or the new checkpoint complete, never a half one. The tensor
 * files are written by the addon on worker threads and the small files here through fs/promises,
 * so a checkpoint in flight never blocks the event loop (HTTP judging, timers).
 */
import { existsSync, readFileSync, readdirSync } from 'node:fs';
import { mkdir, open, readdir, rename, rm, writeFile } from 'node:fs/promises';
import { join, resolve } from 'node:path';

/** Everything besides tensors needed to continue a run exactly. */
export interface TrainerState {
  version: 1;
  /** Index into config.stages of the stage in progress. */
  stageIndex: number;
  /** Optimizer steps completed in the current stage. */
  stageStep: number;
  /** Optimizer steps completed over all stages. */
  globalStep: number;
  /** Data order cursor: epoch and position in the epoch's seeded permutation. */
  cursor: { epoch: number; position: number };
  /** Validation history of the current stage (for early stopping). */
  validation: { step: number; score: number }[];
  /** True when the stage ended early (OPSD early stop). */
  stageDone: boolean;
  seed: number;
  /** The resolved config the run started with (resume checks compatibility). */
  config: unknown;
  /** Wall seconds of the run so far, across resumes. */
  wallSeconds: number;
  /** Per-stage summary so far (stages finished before a resume stay in the final table). */
  summary?: unknown[];
}

/** fsync of a file or directory (directories cannot be fsynced on every platform: ignored there). */
async function fsyncPath(path: string, isDir: boolean): Promise<void> {
  let fh;
  try {
    fh = await open(path, 'r');
    await fh.sync();
  } catch (e) {
    if (!isDir) throw e;
  } finally {
    await fh?.close();
  }
}

/**
 * Writes a checkpoint atomically. `writeTensors(tmpDir)` saves the adapter and optimizer state
 * into the temp dir. Returns the final checkpoint dir. Throws naming the path on I/O errors; the
 * previous checkpoint stays valid. Every file operation here is asynchronous.
 */
export async function writeCheckpoint(runDir: string, state: TrainerState, writeTensors: (dir: string) => Promise<void>, opts: { saveTotalLimit?: number | null } = {}): Promise<string> {
  const root = join(runDir, 'checkpoints');
  await mkdir(root, { recursive: true });
  const name = `step-${String(state.globalStep).padStart(6, '0')}`;
  const final = join(root, name);
  const tmp = join(root, `.tmp-${name}-${process.pid}`);
  await rm(tmp, { recursive: true, force: true });
  await mkdir(tmp, { recursive: true });
  await writeTensors(tmp);
  const statePath = join(tmp, 'trainer_state.json');
  await writeFile(statePath, JSON.stringify(state, null, 2));
  await fsyncPath(statePath, false);
  await fsyncPath(tmp, true);
  await rm(final, { recursive: true, force: true });
  await rename(tmp, final);
  const latestTmp = join(root, `.latest-${process.pid}`);
  await writeFile(latestTmp, name + '\n');
  await rename(latestTmp, join(root, 'latest'));
  await fsyncPath(root, true);
  if (opts.saveTotalLimit) await pruneCheckpoints(root, opts.saveTotalLimit, name);
  return final;
}

/**
 * Keeps the newest `limit` `step-*` checkpoints under `root` (by step number) and deletes the
 * others; `keep` (the one `latest` names) is never deleted. As transformers' save_total_limit.
 * Resolves with the deleted names.
 */
export async function pruneCheckpoints(root: string, limit: number, keep: string): Promise<string[]> {
  const steps = (await readdir(root)).filter((n) => /^step-\d+$/.test(n)).sort((a, b) => Number(a.slice(5)) - Number(b.slice(5)));
  const old = steps.slice(0, Math.max(0, steps.length - limit)).filter((n) => n !== keep);
  for (const n of old) await rm(join(root, n), { recursive: true, force: true });
  return old;
}

/**
 * Resolves `--resume DIR`: a checkpoint dir (has trainer_state.json), or a run dir / its
 * checkpoints dir (follows `latest`). Throws with a clear message when nothing usable is there.
 */
export function resolveCheckpoint(dir: string): { dir: string; runDir: string; state: TrainerState } {
  let d = resolve(dir);
  if (!existsSync(d)) throw new Error(`--resume ${dir}: no such directory`);
  if (!existsSync(join(d, 'trainer_state.json'))) {
    const root = existsSync(join(d, 'checkpoints')) ? join(d, 'checkpoints') : d;
    const latest = join(root, 'latest');
    if (existsSync(latest)) {
      d = join(root, readFileSync(latest, 'utf8').trim());
    } else {
      const steps = existsSync(root) ? readdirSync(root).filter((n) => /^step-\d+$/.test(n)).sort() : [];
      if (!steps.length) throw new Error(`--resume ${dir}: no checkpoint found (expected trainer_state.json or checkpoints/latest)`);
      d = join(root, steps[steps.length - 1]!);
    }
  }
  let state: TrainerState;
  try {
    state = JSON.parse(readFileSync(join(d, 'trainer_state.json'), 'utf8')) as TrainerState;
  } catch (e) {
    throw new Error(`--resume ${dir}: unreadable ${join(d, 'trainer_state.json')}: ${(e as Error).message}`);
  }
  if (state.version !== 1) throw new Error(`--resume ${dir}: unsupported trainer_state version ${String(state.version)}`);
  const runDir = resolve(d, '..', '..');
  return { dir: d, runDir, state };
}
