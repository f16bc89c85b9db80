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
import { closeSync, existsSync, fstatSync, openSync, readFileSync, readSync, readdirSync } from 'node:fs';
import { mkdir, open, readdir, rename, rm, writeFile } from 'node:fs/promises';
import { join, resolve } from 'node:path';
import { inputError } from '../errors.js';

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
 * `opts.beforeCommit` runs once everything is in the temp dir and synced, just before the rename
 * that makes the checkpoint the one `--resume` finds (the trainer appends the step's metrics line
 * there, so a crash never leaves a committed checkpoint without its step's line); when it throws,
 * nothing is committed and the error propagates.
 */
export async function writeCheckpoint(runDir: string, state: TrainerState, writeTensors: (dir: string) => Promise<void>, opts: { saveTotalLimit?: number | null; beforeCommit?: () => void | Promise<void> } = {}): Promise<string> {
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
  await opts.beforeCommit?.();
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

/** Bytes per element of the safetensors dtypes (the format's spec, huggingface/safetensors README). */
const DTYPE_BYTES: Record<string, number> = { F64: 8, I64: 8, U64: 8, F32: 4, I32: 4, U32: 4, F16: 2, BF16: 2, I16: 2, U16: 2, I8: 1, U8: 1, BOOL: 1, F8_E4M3: 1, F8_E5M2: 1 };

/**
 * Checks that `path` is a complete optimizer state file as `AdamW.saveState` writes it, reading
 * only its header: an 8-byte little-endian header length N, N bytes of JSON header, then the data
 * buffer (safetensors format); every tensor's `data_offsets` lie inside the data buffer and span
 * `product(shape) × dtype bytes`, and `__metadata__.step` is present. Used at resume, before any
 * step runs, so a truncated or corrupt file is reported up front instead of after a step's
 * rollouts and judging. Throws an `ERR_PG_INPUT` Error naming the file.
 */
export function checkOptimizerFile(path: string): void {
  const bad = (why: string) => inputError(`${path}: ${why} (corrupt optimizer state; delete it to restart the optimizer from zero, or resume from an earlier checkpoint)`);
  let fd: number;
  try {
    fd = openSync(path, 'r');
  } catch (e) {
    throw bad(`cannot open (${(e as NodeJS.ErrnoException).code ?? (e as Error).message})`);
  }
  try {
    const size = fstatSync(fd).size;
    const head = Buffer.alloc(8);
    if (size < 8 || readSync(fd, head, 0, 8, 0) !== 8) throw bad(`${size} bytes, shorter than the 8-byte safetensors header length`);
    const n = head.readBigUInt64LE(0);
    if (n > BigInt(size - 8)) throw bad(`safetensors header length ${n} exceeds the file size ${size} (truncated or corrupt file)`);
    const hb = Buffer.alloc(Number(n));
    if (readSync(fd, hb, 0, hb.length, 8) !== hb.length) throw bad('short read of the header');
    let header: Record<string, { dtype?: unknown; shape?: unknown; data_offsets?: unknown }>;
    try {
      header = JSON.parse(hb.toString('utf8')) as typeof header;
    } catch (e) {
      throw bad(`header is not JSON (${(e as Error).message})`);
    }
    if (!header || typeof header !== 'object' || Array.isArray(header)) throw bad('header is not a JSON object');
    const dataBytes = size - 8 - hb.length;
    for (const [name, t] of Object.entries(header)) {
      if (name === '__metadata__') continue;
      const per = DTYPE_BYTES[String(t?.dtype)];
      const off = t?.data_offsets;
      const shape = t?.shape;
      if (!per || !Array.isArray(off) || off.length !== 2 || !Array.isArray(shape)) throw bad(`tensor '${name}': malformed header entry`);
      const [b, e] = off as number[];
      const want = (shape as number[]).reduce((a, x) => a * x, 1) * per;
      if (!Number.isInteger(b) || !Number.isInteger(e) || b < 0 || e < b || e > dataBytes) throw bad(`tensor '${name}': data_offsets [${String(b)}, ${String(e)}) out of range (data buffer is ${dataBytes} bytes; truncated file?)`);
      if (e - b !== want) throw bad(`tensor '${name}': data_offsets span ${e - b} bytes, shape and dtype need ${want}`);
    }
    const meta = header.__metadata__ as Record<string, unknown> | undefined;
    if (!meta || typeof meta !== 'object' || meta.step === undefined) throw bad(`no 'step' in __metadata__ (not an optimizer state file)`);
  } finally {
    closeSync(fd);
  }
}
