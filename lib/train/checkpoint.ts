/**
 * Checkpoints: `<run>/checkpoints/step-<NNNNNN>/` holding the PEFT adapter
 * (`adapter_model.safetensors` + `adapter_config.json`), the optimizer state
 * (`optimizer.safetensors`) and `trainer_state.json` (stage, steps, data cursor, seeds, config).
 * Crash-safe: everything goes to a temp dir beside it, which is renamed into place, then
 * `checkpoints/latest` (a one-line file naming the dir) is replaced by rename; a rewrite of the
 * checkpoint `latest` names switches `latest` to the new copy before the old one is removed. A
 * crash at any moment leaves `latest` naming a complete checkpoint, the previous or the new one
 * (test/checkpoint-crash.test.ts kills the process in each window through PAPERGYM_FAULT). The tensor
 * files are written by the addon on worker threads and the small files here through fs/promises,
 * so a checkpoint in flight never blocks the event loop (HTTP judging, timers).
 */
import { closeSync, existsSync, fstatSync, openSync, readFileSync, readSync, readdirSync, statSync } from 'node:fs';
import { link, mkdir, open, readdir, rename, rm, stat, writeFile } from 'node:fs/promises';
import { basename, dirname, join, resolve } from 'node:path';
import { inputError } from '../errors.js';
import { upgradeSavedConfig } from '../config/renames.js';
import { ELEMENT_BYTES } from '../model/config-bounds.js';
import { reportPlotsDir } from '../report/html.js';

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
  /**
   * Byte size of every file of the checkpoint dir besides trainer_state.json, written by
   * writeCheckpoint; resume requires each (absent in checkpoints of earlier versions).
   */
  files?: Record<string, number>;
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
 * Named points of {@link writeCheckpoint} where the fault-injection hook can kill the process:
 * `PAPERGYM_FAULT=checkpoint:<point>` makes the process SIGKILL itself there (tests of crash
 * safety: each window of the write, without timing luck). Unset in normal use.
 * - `after-tensors`: the adapter and optimizer files are in the temp dir, trainer_state.json not yet;
 * - `before-commit`: the temp dir is complete and synced (beforeCommit ran), nothing renamed yet;
 * - `after-latest-tmp` (rewrite of the checkpoint `latest` names): `latest` names the complete temp dir;
 * - `after-remove-old` (rewrite): the old copy of the step is removed;
 * - `after-link` (rewrite): the new copy is linked into the step's name, `latest` still names the temp dir;
 * - `after-rename`: the new checkpoint has its step name, `latest` not yet switched;
 * - `after-latest`: `latest` names the new checkpoint, older ones not yet pruned.
 */
export const CHECKPOINT_FAULT_POINTS = [
  'after-tensors',
  'before-commit',
  'after-latest-tmp',
  'after-remove-old',
  'after-link',
  'after-rename',
  'after-latest',
] as const;

/** Kills this process at `point` when PAPERGYM_FAULT=checkpoint:<point> (see {@link CHECKPOINT_FAULT_POINTS}). */
function faultPoint(point: (typeof CHECKPOINT_FAULT_POINTS)[number]): void {
  if (process.env.PAPERGYM_FAULT === `checkpoint:${point}`) process.kill(process.pid, 'SIGKILL');
}

/** The names of `root` that a checkpoint write leaves only while it is in flight. */
const TEMP_NAME = /^\.(tmp|latest)-/;

/** Replaces `root/latest` by a file naming `name` (write a temp file, rename it over, sync the dir). */
async function pointLatest(root: string, name: string): Promise<void> {
  const latestTmp = join(root, `.latest-${process.pid}`);
  await writeFile(latestTmp, name + '\n');
  await fsyncPath(latestTmp, false);
  await rename(latestTmp, join(root, 'latest'));
  await fsyncPath(root, true);
}

/** The entry `root/latest` names, or undefined when there is no readable `latest`. */
function latestName(root: string): string | undefined {
  try {
    return readFileSync(join(root, 'latest'), 'utf8').trim();
  } catch {
    return undefined;
  }
}

/**
 * Writes a checkpoint so that a crash at any moment leaves `latest` naming a complete checkpoint
 * (the previous or the new one). `writeTensors(tmpDir)` saves the adapter and optimizer state into
 * a temp dir beside the checkpoints; trainer_state.json (with `files`, the byte size of every file
 * written) is added and synced, then:
 * - a new step: the temp dir is renamed to `step-NNNNNN` (an older copy of that step that `latest`
 *   does not name is removed first: nothing resumes from it), then `latest` is switched to it;
 * - a rewrite of the step `latest` names (a run stopped right after a resume): `latest` is switched
 *   to the complete temp dir first, the old copy removed, the new files hard-linked under the step's
 *   name, `latest` switched to it, the temp dir removed (write new, switch `latest`, remove old);
 * - then checkpoints past `saveTotalLimit` are pruned.
 * Returns the final checkpoint dir. Throws naming the path on I/O errors; the previous checkpoint
 * stays valid. Every file operation here is asynchronous.
 * `opts.beforeCommit` runs once everything is in the temp dir and synced, just before the rename
 * that makes the checkpoint the one `--resume` finds (the trainer appends the step's metrics line
 * there, so a crash never leaves a committed checkpoint without its step's line); when it throws,
 * nothing is committed and the error propagates. Leftover `.tmp-*` entries of a killed write are
 * removed by {@link cleanCheckpointTemps} at the next start.
 */
export async function writeCheckpoint(
  runDir: string,
  state: TrainerState,
  writeTensors: (dir: string) => Promise<void>,
  opts: { saveTotalLimit?: number | null; beforeCommit?: () => void | Promise<void> } = {},
): Promise<string> {
  const root = join(runDir, 'checkpoints');
  await mkdir(root, { recursive: true });
  const name = `step-${String(state.globalStep).padStart(6, '0')}`;
  const final = join(root, name);
  const tmpName = `.tmp-${name}-${process.pid}`;
  const tmp = join(root, tmpName);
  await rm(tmp, { recursive: true, force: true });
  // Not recursive: `root` exists, and a recursive mkdir reports a read-only file system as ENOENT.
  await mkdir(tmp).catch((e: NodeJS.ErrnoException) => {
    throw new Error(
      `${root}: cannot create the checkpoint's temp dir (${e.code ?? ''}${e.code === 'EROFS' ? ': read-only file system' : e.code === 'EACCES' ? ': permission denied' : ''}: ${e.message})`,
      { cause: e },
    );
  });
  await writeTensors(tmp);
  faultPoint('after-tensors');
  const files: Record<string, number> = {};
  for (const f of (await readdir(tmp)).sort()) {
    const st = await stat(join(tmp, f));
    if (st.isFile()) files[f] = st.size;
  }
  const statePath = join(tmp, 'trainer_state.json');
  await writeFile(statePath, JSON.stringify({ ...state, files }, null, 2));
  await fsyncPath(statePath, false);
  await fsyncPath(tmp, true);
  await opts.beforeCommit?.();
  faultPoint('before-commit');
  if (latestName(root) === name && existsSync(final)) {
    await pointLatest(root, tmpName);
    faultPoint('after-latest-tmp');
    await rm(final, { recursive: true, force: true });
    faultPoint('after-remove-old');
    const linking = join(root, `.tmp-link-${name}-${process.pid}`);
    await rm(linking, { recursive: true, force: true });
    await mkdir(linking);
    for (const f of await readdir(tmp)) await link(join(tmp, f), join(linking, f));
    await fsyncPath(linking, true);
    await rename(linking, final);
    faultPoint('after-link');
  } else {
    await rm(final, { recursive: true, force: true });
    await rename(tmp, final);
    faultPoint('after-rename');
  }
  await pointLatest(root, name);
  faultPoint('after-latest');
  await rm(tmp, { recursive: true, force: true });
  if (opts.saveTotalLimit) await pruneCheckpoints(root, opts.saveTotalLimit, name);
  return final;
}

/**
 * Writes `<runDir>/final` (the trained adapter, optimizer state and snapshots) so that it is
 * either complete or as it was: `writeTensors` fills a temp dir beside it (`.final-tmp-<pid>`),
 * which is synced and renamed in place of the old `final` (moved aside first, then removed).
 * Throws naming the path; a kill leaves `final` complete or absent, never half-written
 * ({@link finalDirComplete} tells, and `--resume` of a finished run rewrites it from `latest`).
 */
export async function writeFinalDir(runDir: string, writeTensors: (dir: string) => Promise<void>, name = 'final'): Promise<string> {
  // `name`: another dir of the run written the same way (a stage's best state, `best/<stage>`).
  const final = join(runDir, name);
  await mkdir(dirname(final), { recursive: true });
  const tmp = join(runDir, `.final-tmp-${process.pid}`);
  const old = join(runDir, `.final-old-${process.pid}`);
  await rm(tmp, { recursive: true, force: true });
  await mkdir(tmp);
  await writeTensors(tmp);
  for (const f of await readdir(tmp)) await fsyncPath(join(tmp, f), false);
  await fsyncPath(tmp, true);
  await rm(old, { recursive: true, force: true });
  if (existsSync(final)) await rename(final, old);
  await rename(tmp, final);
  await fsyncPath(runDir, true);
  await rm(old, { recursive: true, force: true });
  return final;
}

/**
 * Whether `<runDir>/final` holds every file of checkpoint `ck` (its trainer_state.json `files`,
 * that file itself excepted) with the same sizes: the final state a finished run writes next to its
 * last checkpoint. False when `final` is missing or was cut short (a write that failed before
 * {@link writeFinalDir} existed, or a disk that filled up).
 */
export function finalDirComplete(runDir: string, ck: { state: TrainerState }): boolean {
  const files = Object.entries(ck.state.files ?? {}).filter(([f]) => f !== 'trainer_state.json');
  if (!files.length) return existsSync(join(runDir, 'final', 'adapter_model.safetensors'));
  return files.every(([f, size]) => {
    try {
      return statSync(join(runDir, 'final', f)).size === size;
    } catch {
      return false;
    }
  });
}

/**
 * Removes what killed checkpoint writes left in `<runDir>/checkpoints`: `.tmp-*` dirs and
 * `.latest-*` files, except the entry `latest` names (a rewrite killed after switching `latest` to
 * its complete temp dir: that one is the run's checkpoint). Call it at the start of a run, with the
 * run dir locked (lib/util/lock.ts). Resolves with the removed names.
 */
export async function cleanCheckpointTemps(runDir: string): Promise<string[]> {
  const root = join(runDir, 'checkpoints');
  // A killed writeFinalDir's temp dirs (final/ itself is complete or absent).
  const finals = existsSync(runDir) ? (await readdir(runDir)).filter((n) => /^\.final-(tmp|old)-\d+$/.test(n)) : [];
  for (const n of finals) await rm(join(runDir, n), { recursive: true, force: true });
  if (!existsSync(root)) return finals;
  const keep = latestName(root);
  const gone = (await readdir(root)).filter((n) => TEMP_NAME.test(n) && n !== keep);
  for (const n of gone) await rm(join(root, n), { recursive: true, force: true });
  return [...finals, ...gone];
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

/** A name `latest` may hold: a checkpoint dir of the same `checkpoints/` (or the temp dir of a rewrite in flight). */
const LATEST_NAME = /^(step-\d+|\.tmp-step-\d+-\d+)$/;

/**
 * The entries a `train` run writes in its run dir (besides its lock), by what writes them; the
 * writers take their names from here, so {@link RUN_DIR_ENTRIES} cannot miss one.
 */
export const RUN_FILES = {
  config: 'config.json',
  metrics: 'metrics.jsonl',
  checkpoints: 'checkpoints',
  final: 'final',
  summary: 'summary.json',
  report: 'report.html',
  /** A stage's best state, `best/<stage>/` (lib/train/best-state.ts). */
  best: 'best',
  /** `--profile-step N`: the step's kernel profile per stage (lib/train/step-profile.ts). */
  profile: 'profile',
} as const;

/**
 * Everything a `train` run writes in its run dir (besides its lock and its trackers' own entries,
 * which each tracker's descriptor names: lib/train/trackers `runDirEntries`): what
 * `--overwrite-output-dir` clears.
 */
export const RUN_DIR_ENTRIES: readonly string[] = [...Object.values(RUN_FILES), basename(reportPlotsDir(RUN_FILES.report))];

/**
 * A run dir a `train` process left before its first checkpoint (killed, out of memory, a crash):
 * it holds the run's `config.json` but no checkpoint. Resolves with the saved config (the file's
 * settings; the run records beside them — modelDir, origins, batching, memoryPlan — left out) so
 * `--resume` can start it again from the start; undefined for anything else.
 */
export function restartableRun(dir: string): { runDir: string; config: Record<string, unknown> } | undefined {
  const d = resolve(dir);
  const ck = join(d, 'checkpoints');
  if (!existsSync(join(d, 'config.json')) || existsSync(join(d, 'trainer_state.json'))) return undefined;
  if (existsSync(ck) && (existsSync(join(ck, 'latest')) || readdirSync(ck).some((n) => /^step-\d+$/.test(n)))) return undefined;
  let saved: Record<string, unknown>;
  try {
    saved = JSON.parse(readFileSync(join(d, 'config.json'), 'utf8')) as Record<string, unknown>;
  } catch (e) {
    throw inputError(`--resume ${dir}: the run stopped before its first checkpoint and its ${join(d, 'config.json')} is unreadable (${(e as Error).message})`);
  }
  if (!saved || typeof saved !== 'object' || Array.isArray(saved)) throw inputError(`--resume ${dir}: ${join(d, 'config.json')} is not a JSON object`);
  const { modelDir: _m, origins: _o, batching: _b, memoryPlan: _p, ...config } = saved;
  upgradeSavedConfig(config, join(d, 'config.json'));
  return { runDir: d, config };
}

/**
 * Removes {@link RUN_DIR_ENTRIES} and `extra` (the trackers' entries) from `runDir` (the caller holds
 * the run lock); resolves with the names removed.
 */
export async function clearRunDir(runDir: string, extra: readonly string[] = []): Promise<string[]> {
  const gone = [...RUN_DIR_ENTRIES, ...extra].filter((f) => existsSync(join(runDir, f)));
  for (const f of gone) await rm(join(runDir, f), { recursive: true, force: true });
  return gone;
}

/**
 * Resolves `--resume DIR`: a checkpoint dir (has trainer_state.json), or a run dir / its
 * checkpoints dir (follows `latest`). `latest` must name an entry of that same checkpoints dir
 * (`step-NNNNNN`; no path, nothing outside the run dir). trainer_state.json is checked
 * ({@link checkTrainerState}) and, when it lists `files` (checkpoints of this version), every
 * listed file must be there with its size. Throws an `ERR_PG_INPUT` Error naming the path when
 * anything is missing or malformed.
 */
export function resolveCheckpoint(dir: string): {
  dir: string;
  runDir: string;
  state: TrainerState;
  /** The former keys its saved config was written with, read as today's (`grpo.betaKl → grpo.klCoef`); absent when none. */
  formerKeys?: string[];
} {
  let d = resolve(dir);
  if (!existsSync(d)) throw inputError(`--resume ${dir}: no such directory`);
  if (!existsSync(join(d, 'trainer_state.json'))) {
    const root = existsSync(join(d, 'checkpoints')) ? join(d, 'checkpoints') : d;
    const latest = join(root, 'latest');
    if (existsSync(latest)) {
      const name = readFileSync(latest, 'utf8').trim();
      if (!LATEST_NAME.test(name)) {
        throw inputError(`--resume ${dir}: ${latest} names '${name.slice(0, 200)}', not a checkpoint of this run (expected step-NNNNNN in ${root})`);
      }
      d = join(root, name);
      if (!existsSync(join(d, 'trainer_state.json')))
        throw inputError(`--resume ${dir}: ${latest} names ${name}, which has no trainer_state.json (incomplete or removed checkpoint)`);
    } else {
      const steps = existsSync(root)
        ? readdirSync(root)
            .filter((n) => /^step-\d+$/.test(n))
            .sort()
        : [];
      if (!steps.length) {
        // A run killed before its first checkpoint: runTraining starts it again ({@link restartableRun}).
        if (existsSync(join(d, 'config.json')))
          throw inputError(
            `--resume ${dir}: the run stopped before its first checkpoint (nothing to resume); start it again from the start with papergym-native train --out ${d} --overwrite-output-dir and its flags`,
          );
        throw inputError(`--resume ${dir}: no checkpoint found (expected trainer_state.json or checkpoints/latest)`);
      }
      d = join(root, steps[steps.length - 1]!);
    }
  }
  let state: TrainerState;
  const statePath = join(d, 'trainer_state.json');
  try {
    state = JSON.parse(readFileSync(statePath, 'utf8')) as TrainerState;
  } catch (e) {
    throw inputError(`--resume ${dir}: unreadable ${statePath}: ${(e as Error).message}`);
  }
  if (!state || typeof state !== 'object' || state.version !== 1)
    throw inputError(`--resume ${dir}: unsupported trainer_state version ${String(state?.version)}`);
  checkTrainerState(state, statePath);
  // A checkpoint written before a setting was renamed: its config read under today's keys (lib/config/renames.ts).
  const formerKeys = upgradeSavedConfig(state.config as Record<string, unknown>, statePath);
  for (const [f, bytes] of Object.entries(state.files ?? {})) {
    let size: number;
    try {
      size = statSync(join(d, f)).size;
    } catch {
      throw inputError(`--resume ${dir}: ${join(d, f)} is missing (every file of the checkpoint is needed: ${Object.keys(state.files!).join(', ')})`);
    }
    if (size !== bytes) throw inputError(`--resume ${dir}: ${join(d, f)} has ${size} bytes, the checkpoint wrote ${bytes} (truncated or replaced file)`);
  }
  const runDir = resolve(d, '..', '..');
  return { dir: d, runDir, state, ...(formerKeys.length ? { formerKeys } : {}) };
}

/**
 * Structural checks of a trainer_state.json (`where` names it in errors, code `ERR_PG_INPUT`):
 * non-negative safe integers for the steps, stage index, cursor and seed; stageStep ≤ globalStep;
 * finite non-negative wallSeconds; a config object whose `stages` list (when given) the stage index fits
 * (≤ its length: a finished run); `files` a map of byte sizes. Values a hand edit or a corrupt
 * write can give (a step of -1 or 1e12, a string) fail here instead of steering the run.
 */
export function checkTrainerState(state: TrainerState, where: string): void {
  const bad = (why: string) => inputError(`${where}: ${why} (corrupt or edited trainer state; resume from another checkpoint)`);
  const count = (v: unknown, what: string, max = Number.MAX_SAFE_INTEGER) => {
    if (typeof v !== 'number' || !Number.isSafeInteger(v) || v < 0 || v > max) throw bad(`${what} is ${JSON.stringify(v)}, not an integer in [0, ${max}]`);
  };
  // 1e9 optimizer steps is far past any run; 1e12 is a corrupt number.
  const MAX_STEPS = 1e9;
  count(state.globalStep, 'globalStep', MAX_STEPS);
  count(state.stageStep, 'stageStep', state.globalStep);
  count(state.seed, 'seed');
  const cfg = state.config as { stages?: unknown; seed?: unknown } | null;
  if (!cfg || typeof cfg !== 'object' || Array.isArray(cfg)) throw bad('config is not an object');
  count(state.stageIndex, 'stageIndex', Array.isArray(cfg.stages) ? cfg.stages.length : MAX_STEPS);
  if (cfg.seed !== undefined && cfg.seed !== state.seed) throw bad(`seed ${state.seed} differs from the config's seed ${JSON.stringify(cfg.seed)}`);
  if (!state.cursor || typeof state.cursor !== 'object') throw bad('cursor is missing');
  count(state.cursor.epoch, 'cursor.epoch', MAX_STEPS);
  count(state.cursor.position, 'cursor.position', MAX_STEPS);
  if (typeof state.wallSeconds !== 'number' || !Number.isFinite(state.wallSeconds) || state.wallSeconds < 0)
    throw bad(`wallSeconds is ${JSON.stringify(state.wallSeconds)}`);
  if (!Array.isArray(state.validation)) throw bad('validation is not a list');
  if (typeof state.stageDone !== 'boolean') throw bad(`stageDone is ${JSON.stringify(state.stageDone)}`);
  if (state.files !== undefined) {
    if (!state.files || typeof state.files !== 'object') throw bad('files is not a map of names to byte sizes');
    for (const [f, n] of Object.entries(state.files)) {
      if (f.includes('/') || f.includes('\\') || f.startsWith('.')) throw bad(`files names '${f}', not a file of the checkpoint dir`);
      count(n, `files['${f}']`);
    }
  }
}

/** Files every checkpoint of a run holds; `optimizer.safetensors` too once a stage has taken a step. */
export const CHECKPOINT_FILES = ['adapter_model.safetensors', 'adapter_config.json'] as const;

/** Keys of config.json that the trainer itself may change during a run (out-of-memory recovery, paths). */
const RUNTIME_KEYS = /^(memory(\.|$)|memoryPlan|origins|out$|model$|modelDir$|[a-z]+\.microBatch$)/;

function leaves(v: unknown, prefix = '', out: Map<string, unknown> = new Map()): Map<string, unknown> {
  if (v && typeof v === 'object' && !Array.isArray(v)) {
    for (const [k, x] of Object.entries(v)) leaves(x, prefix ? `${prefix}.${k}` : k, out);
  } else out.set(prefix, v);
  return out;
}

/**
 * The checks of `--resume` before any compute, on a checkpoint {@link resolveCheckpoint} found:
 * - every file a checkpoint holds is there ({@link CHECKPOINT_FILES}, and `optimizer.safetensors`
 *   once the stage has taken a step: a missing one would restart the optimizer silently), the
 *   optimizer file's header checked ({@link checkOptimizerFile}), the adapter's and optimizer's
 *   tensors checked finite ({@link checkTensorsFinite});
 * - the trainer state's config agrees with the run's `config.json` on every setting the run
 *   cannot change (a tampered learning rate, a checkpoint copied from another run): keys in
 *   `resumable`, memory settings and micro-batches (out-of-memory recovery changes them) are not
 *   compared; a run dir without config.json is not compared;
 * - the stage step fits the stage's step count when the config names one (`<stage>.steps`).
 * @throws Error (`ERR_PG_INPUT`) naming the file and the key.
 */
export function checkResumeCheckpoint(ck: { dir: string; runDir: string; state: TrainerState }, resumable: readonly string[]): void {
  const need = [...CHECKPOINT_FILES, ...(ck.state.stageStep > 0 || ck.state.files?.['optimizer.safetensors'] !== undefined ? ['optimizer.safetensors'] : [])];
  const missing = need.filter((f) => !existsSync(join(ck.dir, f)));
  if (missing.length) {
    throw inputError(
      `--resume ${ck.dir}: ${missing.join(', ')} missing from the checkpoint (it needs ${need.join(', ')}); resume from another checkpoint of ${join(ck.runDir, 'checkpoints')}`,
    );
  }
  if (need.includes('optimizer.safetensors')) checkOptimizerFile(join(ck.dir, 'optimizer.safetensors'));
  // The numbers too: NaN / Inf in the adapter or the optimizer's moments is refused, naming the tensor.
  for (const f of ['adapter_model.safetensors', ...(need.includes('optimizer.safetensors') ? ['optimizer.safetensors'] : [])])
    checkTensorsFinite(join(ck.dir, f));
  const cfg = ck.state.config as Record<string, unknown>;
  const stages = Array.isArray(cfg.stages) ? (cfg.stages as string[]) : [];
  const stage = stages[ck.state.stageIndex];
  const steps = stage ? (cfg[stage] as { steps?: unknown } | undefined)?.steps : undefined;
  if (typeof steps === 'number' && ck.state.stageStep > steps) {
    throw inputError(
      `--resume ${ck.dir}: trainer_state.json has ${ck.state.stageStep} ${stage} steps done, more than the run's ${stage}.steps ${steps} (corrupt or edited trainer state)`,
    );
  }
  const runCfgPath = join(ck.runDir, 'config.json');
  if (!existsSync(runCfgPath)) return;
  let runCfg: unknown;
  try {
    runCfg = JSON.parse(readFileSync(runCfgPath, 'utf8'));
  } catch (e) {
    throw inputError(`--resume ${ck.dir}: the run's ${runCfgPath} is unreadable (${(e as Error).message})`);
  }
  // Both configs under today's keys (a run begun before a rename, resumed since: lib/config/renames.ts).
  if (runCfg && typeof runCfg === 'object' && !Array.isArray(runCfg)) upgradeSavedConfig(runCfg as Record<string, unknown>, runCfgPath);
  const saved = leaves(runCfg);
  for (const [k, v] of leaves(cfg)) {
    if (!saved.has(k) || RUNTIME_KEYS.test(k) || resumable.some((r) => k === r || k.startsWith(`${r}.`))) continue;
    if (JSON.stringify(saved.get(k)) !== JSON.stringify(v)) {
      throw inputError(
        `--resume ${ck.dir}: trainer_state.json has ${k} = ${JSON.stringify(v)}, the run's ${runCfgPath} has ${JSON.stringify(saved.get(k))} (a tampered checkpoint or one of another run)`,
      );
    }
  }
}

/** Bit masks of the exponent of the float dtypes (all ones: Inf or NaN), IEEE 754 / bfloat16. */
const EXPONENT_MASK: Record<string, { bytes: 2 | 4; mask: number }> = {
  F32: { bytes: 4, mask: 0x7f800000 },
  BF16: { bytes: 2, mask: 0x7f80 },
  F16: { bytes: 2, mask: 0x7c00 },
};

/**
 * Checks every float tensor of the safetensors file `path` for NaN and ±Inf (issue 50 item 2: a
 * resumed state is not trusted for its numbers; NaN moments in a file of the right size would
 * otherwise be loaded and carried into the final adapter). F32, BF16 and F16 are tested by their
 * exponent bits (all ones: not finite; IEEE 754 binary32 / binary16, bfloat16), F64 by value;
 * integer tensors are skipped. Reads the data 16 MiB at a time.
 * @throws Error (`ERR_PG_INPUT`) naming the file, the tensor and the first bad element.
 */
export function checkTensorsFinite(path: string): void {
  const fd = openSync(path, 'r');
  try {
    const size = fstatSync(fd).size;
    const head = Buffer.alloc(8);
    if (size < 8 || readSync(fd, head, 0, 8, 0) !== 8) throw inputError(`${path}: not a safetensors file (${size} bytes)`);
    const n = Number(head.readBigUInt64LE(0));
    if (n > size - 8) throw inputError(`${path}: safetensors header length ${n} exceeds the file size ${size}`);
    const hb = Buffer.alloc(n);
    readSync(fd, hb, 0, n, 8);
    let header: Record<string, { dtype?: string; data_offsets?: [number, number] }>;
    try {
      header = JSON.parse(hb.toString('utf8')) as typeof header;
    } catch (e) {
      throw inputError(`${path}: safetensors header is not JSON (${(e as Error).message})`);
    }
    const base = 8 + n;
    const chunk = Buffer.alloc(16 << 20);
    for (const [name, t] of Object.entries(header)) {
      if (name === '__metadata__' || !t || !Array.isArray(t.data_offsets)) continue;
      const dtype = String(t.dtype);
      const bits = EXPONENT_MASK[dtype];
      if (!bits && dtype !== 'F64') continue;
      const per = bits?.bytes ?? 8;
      const [b, e] = t.data_offsets;
      for (let at = b; at < e;) {
        const len = Math.min(chunk.length - (chunk.length % per), e - at);
        const got = readSync(fd, chunk, 0, len, base + at);
        if (got !== len) throw inputError(`${path}: tensor '${name}': short read at byte ${base + at} (truncated file)`);
        const count = len / per;
        let bad = -1;
        if (dtype === 'F64') {
          const v = new Float64Array(chunk.buffer, chunk.byteOffset, count);
          for (let i = 0; i < count; i++)
            if (!Number.isFinite(v[i]!)) {
              bad = i;
              break;
            }
        } else {
          const v = per === 4 ? new Uint32Array(chunk.buffer, chunk.byteOffset, count) : new Uint16Array(chunk.buffer, chunk.byteOffset, count);
          const m = bits!.mask;
          for (let i = 0; i < count; i++)
            if ((v[i]! & m) === m) {
              bad = i;
              break;
            }
        }
        if (bad >= 0) {
          const index = (at - b) / per + bad;
          throw inputError(
            `${path}: tensor '${name}' holds a non-finite value (NaN or Inf) at element ${index}: a corrupt or tampered state is not resumed; resume from an earlier checkpoint`,
          );
        }
        at += len;
      }
    }
  } finally {
    closeSync(fd);
  }
}

/**
 * Checks that `path` is a complete optimizer state file as `AdamW.saveState` writes it, reading
 * only its header: an 8-byte little-endian header length N, N bytes of JSON header, then the data
 * buffer (safetensors format); every tensor's `data_offsets` lie inside the data buffer and span
 * `product(shape) × dtype bytes`, and `__metadata__.step` is present. Used at resume, before any
 * step runs, so a truncated or corrupt file is reported up front instead of after a step's
 * rollouts and judging. Throws an `ERR_PG_INPUT` Error naming the file.
 */
export function checkOptimizerFile(path: string): void {
  const bad = (why: string) =>
    inputError(`${path}: ${why} (corrupt optimizer state; delete it to restart the optimizer from zero, or resume from an earlier checkpoint)`);
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
      const per = ELEMENT_BYTES[String(t?.dtype)];
      const off = t?.data_offsets;
      const shape = t?.shape;
      if (!per || !Array.isArray(off) || off.length !== 2 || !Array.isArray(shape)) throw bad(`tensor '${name}': malformed header entry`);
      const [b, e] = off as number[];
      const want = (shape as number[]).reduce((a, x) => a * x, 1) * per;
      if (!Number.isInteger(b) || !Number.isInteger(e) || b < 0 || e < b || e > dataBytes)
        throw bad(`tensor '${name}': data_offsets [${String(b)}, ${String(e)}) out of range (data buffer is ${dataBytes} bytes; truncated file?)`);
      if (e - b !== want) throw bad(`tensor '${name}': data_offsets span ${e - b} bytes, shape and dtype need ${want}`);
    }
    const meta = header.__metadata__ as Record<string, unknown> | undefined;
    if (!meta || typeof meta !== 'object' || meta.step === undefined) throw bad(`no 'step' in __metadata__ (not an optimizer state file)`);
  } finally {
    closeSync(fd);
  }
}
