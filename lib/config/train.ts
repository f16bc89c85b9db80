/**
 * Training configuration, merged as defaults < preset < config
 * file (YAML) < CLI flags. Presets carry the paper's settings (docs/design.md §6: LoRA r 64 / alpha 128; OPSD
 * lr 5e-6, 200 steps for 1.7B/4B and 400 for 8B; GRPO lr 1e-5, 200 steps for 1.7B/4B and 100 for
 * 8B, G = 8, KL 0.01). The embedded default (no model given) is a tiny random Qwen3 that trains in
 * minutes on 2 CPU cores.
 */
import { readFileSync } from 'node:fs';
import { parse as parseYaml } from 'yaml';
import { judgeConfigProblems, type JudgeConfig } from './judge.js';
import { CORE_TRAIN_SETTINGS, trainSettings } from './settings.js';
import { checkValue, expandAll, getPath, leafKeys, productProblems, setPath, type Setting } from './schema.js';
import { applyTrlConfigKeys, trlHint } from './trl.js';
import { formerKeyHint, upgradeFormerKeys } from './renames.js';
import { expandPath } from '../util/fs.js';
import { memoOn, registeredJudgeBackends, registeredStages } from './extensions.js';

/** A training stage's name: a key of {@link StageSections}. */
export type Stage = keyof StageSections;
export type Aggregation = 'grpo' | 'dapo' | 'dr_grpo';

/**
 * The stages' sections of the training config, by stage name. The built-in ones are here; a stage
 * file adds its own by declaration merging, which names it in {@link Stage} and types `cfg[name]`
 * (`declare module '…/config/train.js' { interface StageSections { name: { steps: number; lr: number } } }`;
 * its rows are the stage's `settings`, lib/config/extensions.ts).
 */
export interface StageSections {
  /** SFT baseline: cross-entropy on the reference answers; batchSize questions per step (one native call, chunked over tokens). */
  sft: { steps: number; lr: number; batchSize: number; batchSizePerRank?: number | null };
  opsd: {
    steps: number;
    lr: number;
    /** Questions per optimizer step over all ranks, the global batch (one student rollout each). */
    batchSize: number;
    /** Per-rank batch: set, the global batch is this × the world size (lib/train/dist.ts resolveBatches). */
    batchSizePerRank?: number | null;
    microBatch: number;
    /** Generalised JSD β (docs/design.md §5). */
    jsdBeta: number;
    teacher: 'fixed' | 'current' | 'ema';
    emaDecay: number;
    /** Stop OPSD after this many validations in a row without a new best (0 = never; lib/train/validation.ts). */
    earlyStopPatience: number;
    /** Completions per step whose tokens are diagnosed (lib/train/token-divergence.ts; row in lib/train/stages/opsd.ts). */
    diagnosticRows?: number;
  };
  grpo: {
    steps: number;
    lr: number;
    /** Questions per step over all ranks, the global batch. */
    questionsPerStep: number;
    /** Per-rank batch (`--questions-per-rank`): set, the global batch is this × the world size (lib/train/dist.ts resolveBatches). */
    questionsPerRank?: number | null;
    groupSize: number;
    microBatch: number;
    epsLow: number;
    epsHigh: number;
    klCoef: number;
    aggregation: Aggregation;
    advantageScale: 'group' | 'batch' | 'none';
    dropZeroVariance: boolean;
    reference: 'stage-start' | 'base';
    /**
     * Local judge: each group scored as soon as it finished, beside the decode of the others (the
     * model's read-only inference calls share it); 'auto' = on for CUDA when the memory plan fits
     * the judge beside the rollout (lib/train/memory-plan.ts), off without a plan.
     */
    judgeOverlap: 'auto' | 'on' | 'off';
    /** Reward mix r = α·r_spec + (1 − α)·r_gen. */
    rewardAlpha: number;
    /** Longest a step waits on the judge, ms from its first judge call (0 = no deadline; lib/train/trainer.ts judgeCall). */
    judgeStepTimeoutMs: number;
    /** Sampler–trainer correction, its cap C and the KL past which a step warns (rows in lib/train/stages/grpo.ts; lib/train/rollout-correction.ts). */
    rolloutCorrection?: RolloutCorrection;
    importanceSamplingCap?: number;
    agreementWarnKl?: number;
  };
}

/** The sampler–trainer correction modes (lib/train/rollout-correction.ts gives each formula). */
export type RolloutCorrection = 'none' | 'token-tis' | 'sequence-mask' | 'recompute';

export interface TrainConfig extends StageSections {
  /** Checkpoint dir of a HF Qwen3 model; null = the embedded tiny random model. */
  model: string | null;
  /** Branch, tag or commit of a Hub model id (null = main). */
  revision: string | null;
  /** Dataset JSONL (lib/data/schema.ts); null = the embedded sample dataset. */
  data: string | null;
  /** Output run dir; null = runs/<timestamp>. */
  out: string | null;
  device: string;
  /** Model dtype; null = bfloat16 on CUDA, float32 on CPU. */
  dtype: 'float32' | 'bfloat16' | 'float16' | null;
  stages: Stage[];
  seed: number;
  strict: boolean;
  /**
   * LoRA (peft semantics). `fp32Branch`: with a bf16 / fp16 model, false (default) runs the
   * LoRA matmuls in the model dtype with float32 master weights, gradients and optimizer state —
   * what transformers' Trainer / TRL do with bf16=True (torch.autocast); true runs the branch in
   * float32 as peft without autocast (slower: no tensor cores for its thin matmuls).
   */
  lora: { r: number; alpha: number; dropout: number; rslora: boolean; targetModules: string[]; fp32Branch: boolean };
  /**
   * `mergeAdapter`: the rollouts sample from the adapter merged into the base weights (generate's
   * `mergeAdapter`); 'auto' = on for CUDA when the memory plan fits the copy (lib/train/memory-plan.ts).
   */
  sampling: { temperature: number; topP: number; topK: number; maxNewTokens: number; thinking: boolean; mergeAdapter: 'auto' | 'on' | 'off' };
  optim: {
    weightDecay: number;
    maxGradNorm: number;
    adamBetas: [number, number];
    adamEps: number;
    lrSchedule: 'constant' | 'linear' | 'cosine';
    warmupSteps: number;
  };
  /** Judge settings, the same keys as `eval`'s `--judge-*` flags (lib/config/judge.ts). */
  judge: JudgeConfig;
  /**
   * `earlyStopThreshold`: a validation is a new best only above the best + this (transformers'
   * early_stopping_threshold); `loadBestAtEnd`: a stage ends on its best validation's adapter
   * (transformers' load_best_model_at_end; lib/train/validation.ts).
   */
  validation: { validateEvery: number; items: number; earlyStopThreshold?: number; loadBestAtEnd?: boolean };
  /** `saveTotalLimit`: keep the last N checkpoints (null = all), as transformers' save_total_limit. */
  /** `background`: write checkpoints beside the next step (host copy, then a worker thread); false writes them in the step. */
  checkpoint: { every: number; saveTotalLimit?: number | null; background?: boolean };
  /** `profileStep`: the 1-based step of each stage whose phases are kernel-profiled (0 = none). */
  /** `reportTo`: experiment trackers (lib/train/trackers: tensorboard, mlflow, wandb); null = none. */
  log: { every: number; profileStep: number; reportTo?: string[] | null };
  /**
   * GPU memory: per-layer activation recomputation in backward; releasing cached blocks between the
   * rollout and update phases; the memory plan (lib/train/memory-plan.ts: `plan` 'auto' = on CUDA or
   * when `maxMemory` is set, 'off' = settings as given), its cap in GB (1e9 bytes; null = the
   * device's memory), rollout rows per decode batch and the local judge's tokens per call (0 = chosen
   * by the plan; without a plan: GRPO micro-batch rows / the judge's default).
   */
  memory: {
    recompute: boolean;
    emptyCache: boolean;
    plan: 'auto' | 'off';
    maxMemory: number | null;
    rolloutRows: number;
    judgeTokensPerCall: number;
  };
}

/**
 * Defaults of every core key, built from the settings schema (lib/config/settings.ts): readable
 * before any registry has loaded. {@link trainDefaults} adds the registered stages' and judge
 * backends' own keys.
 */
export const DEFAULTS: TrainConfig = buildDefaults(CORE_TRAIN_SETTINGS);

/**
 * Defaults of every key of the training config: the core ones and the registered stages' and judge
 * backends' own (the same object until one is registered or removed; copy before changing it).
 * @throws Error when lib/train/stages/ or lib/judge/backends/ has not loaded.
 */
export const trainDefaults: () => TrainConfig = memoOn(
  () => [trainSettings()],
  () => buildDefaults(trainSettings()),
);

function buildDefaults(settings: readonly Setting[]): TrainConfig {
  const o: Record<string, unknown> = {};
  for (const st of settings) setPath(o, st.key, Array.isArray(st.default) ? [...st.default] : st.default);
  return o as unknown as TrainConfig;
}

export type DeepPartial<T> = { [K in keyof T]?: T[K] extends object ? (T[K] extends unknown[] ? T[K] : DeepPartial<T[K]>) : T[K] };

/** The paper's settings per model size (docs/design.md §6; OPSD sampling as siyan-zhao/OPSD). */
export const PRESETS: Record<'qwen3-1.7b' | 'qwen3-4b' | 'qwen3-8b', DeepPartial<TrainConfig>> = {
  'qwen3-1.7b': paperPreset(200, 200),
  'qwen3-4b': paperPreset(200, 200),
  'qwen3-8b': paperPreset(400, 100),
};

function paperPreset(opsdSteps: number, grpoSteps: number): DeepPartial<TrainConfig> {
  return {
    device: 'cuda',
    lora: { r: 64, alpha: 128, dropout: 0.05 },
    sampling: { temperature: 1.1, topP: 0.95, topK: 20, maxNewTokens: 1024, thinking: false },
    // OPSD micro-batch 16: measured on the H200 at 1.7B shapes (3 OPSD steps each), the update took
    // 1.56–1.93 s at 16 against 2.03–2.86 s at 8 and 2.06–2.69 s at 4; the memory plan halves it
    // where it does not fit (update-opsd 76 GB expected at 1.7B, 23 GB at 4).
    opsd: { steps: opsdSteps, lr: 5e-6, batchSize: 32, microBatch: 16, jsdBeta: 0.5 },
    grpo: { steps: grpoSteps, lr: 1e-5, questionsPerStep: 8, groupSize: 8, microBatch: 8, klCoef: 0.01, epsLow: 0.2, epsHigh: 0.2 },
    validation: { validateEvery: 25, items: 64 },
    checkpoint: { every: 25 },
  };
}

/** Deep merge of plain objects; arrays and scalars in `over` replace those in `base`. */
export function mergeConfig<T>(base: T, over: DeepPartial<T> | undefined): T {
  if (!over) return base;
  const out: Record<string, unknown> = { ...(base as Record<string, unknown>) };
  for (const [k, v] of Object.entries(over as Record<string, unknown>)) {
    if (v === undefined) continue;
    const b = out[k];
    if (v && typeof v === 'object' && !Array.isArray(v) && b && typeof b === 'object' && !Array.isArray(b)) {
      out[k] = mergeConfig(b, v as DeepPartial<typeof b>);
    } else {
      out[k] = v;
    }
  }
  return out as T;
}

/** A deprecation or notice line of the config layer, written to stderr unless the caller takes it. */
const stderrLine = (line: string): void => void process.stderr.write(`warning: ${line}\n`);

/**
 * Reads a YAML (or JSON) config file; throws naming the file on a parse error or unknown key. A
 * setting's former key (lib/config/renames.ts) is read as its key, with a deprecation line to `warn`.
 */
export function readConfigFile(path: string, warn: (line: string) => void = stderrLine): DeepPartial<TrainConfig> {
  let doc: unknown;
  try {
    doc = parseYaml(readFileSync(path, 'utf8'));
  } catch (e) {
    throw new Error(`config ${path}: ${(e as Error).message}`);
  }
  if (doc == null) return {};
  if (typeof doc !== 'object' || Array.isArray(doc)) throw new Error(`config ${path}: top level must be a mapping`);
  const known = trainDefaults() as unknown as Record<string, unknown>;
  // A renamed setting's former key (`grpo: {betaKl: …}`) moves to its key, with a deprecation line
  // (before the TRL names, so a TRL name given with it is refused naming the TRL name).
  for (const line of upgradeFormerKeys(doc as Record<string, unknown>, trainSettings(), `config ${path}`)) warn(line);
  // TRL's flat keys (`output_dir`, `num_generations`): an alias moves to its key, another TRL name gets a hint.
  applyTrlConfigKeys(doc as Record<string, unknown>, known, trainSettings(), path);
  checkKeys(doc as Record<string, unknown>, known, path, '');
  // PEFT's `target_modules: all-linear` (every linear layer but the output head).
  for (const st of trainSettings()) {
    const v = getPath(doc, st.key);
    if (st.all && v !== undefined) setPath(doc as Record<string, unknown>, st.key, expandAll(st, v));
    // `~` and $VARS in paths, as the shell expands them on the command line.
    if (st.type === 'path' && typeof v === 'string') setPath(doc as Record<string, unknown>, st.key, expandPath(v, `config ${path}: ${st.key}`));
  }
  return doc as DeepPartial<TrainConfig>;
}

function checkKeys(o: Record<string, unknown>, ref: Record<string, unknown>, file: string, prefix: string): void {
  for (const [k, v] of Object.entries(o)) {
    if (!(k in ref)) {
      const hint = trlHint(k, trainSettings(), 'key') ?? formerKeyHint(k, trainSettings());
      throw new Error(`config ${file}: unknown key ${prefix}${k}${hint ? `; ${hint}` : ''}`);
    }
    const r = ref[k];
    const section = r !== null && typeof r === 'object' && !Array.isArray(r);
    // A section (checkpoint:, judge:, …) given as a scalar or a list: say so, not "must be set" for each of its keys.
    // An empty section (`checkpoint:` with its keys commented out) sets nothing.
    if (section && v === null) {
      delete o[k];
      continue;
    }
    if (section && (typeof v !== 'object' || Array.isArray(v)))
      throw new Error(`config ${file}: ${prefix}${k} must be a mapping of its keys (${Object.keys(r as object).join(', ')}), got ${JSON.stringify(v)}`);
    if (v && typeof v === 'object' && !Array.isArray(v) && r && typeof r === 'object' && !Array.isArray(r)) {
      checkKeys(v as Record<string, unknown>, r as Record<string, unknown>, file, `${prefix}${k}.`);
    }
  }
}

/**
 * Validates every key against its schema entry (type, range, choices), then the rules that tie
 * keys together; throws an Error listing every problem, each naming the key and its flag.
 */
export function validateConfig(c: TrainConfig): TrainConfig {
  const errs: string[] = [];
  for (const st of trainSettings()) {
    const e = checkValue(st, getPath(c, st.key));
    if (e) errs.push(e);
  }
  if (!errs.length) {
    // Rules that tie a stage's keys together (its descriptor's settingsProblems, lib/train/stages/).
    for (const st of registeredStages()) errs.push(...(st.settingsProblems?.(c) ?? []));
    // Rules that tie judge keys together (lib/config/judge.ts; each key's own range is checked above).
    errs.push(...judgeConfigProblems(c.judge).map((e) => e.replace(/^judge\.kind http/, 'judge.kind http (--judge http)')));
    // Each stage's section has its own `steps` (lib/train/stages/: a stage's section is `<name>.*`).
    const steps = (s: Stage) => getPath(c, `${s}.steps`);
    if (c.stages.every((s) => steps(s) === 0)) errs.push(`every stage has 0 steps (${c.stages.map((s) => `${s}.steps`).join(', ')}); nothing to train`);
    if (new Set(c.stages).size !== c.stages.length) errs.push(`stages (--stages) names a stage twice: ${c.stages.join(',')}`);
    // Products of settings that set a step's memory (rollouts per step, tokens per step).
    const settings = trainSettings();
    errs.push(...productProblems(settings, (st) => getPath(c, st.key)));
  }
  if (errs.length) throw new Error(`invalid training config:\n  ${errs.join('\n  ')}`);
  return c;
}

/**
 * Each stage's batch, in its two scaling modes: `global` is the batch of one optimizer step over
 * all ranks (split over them: N processes take the same steps as one); `perRank`, when set, is the
 * batch of one rank, and the global batch becomes perRank × world size (TRL / verl's
 * per-device batch). lib/train/dist.ts resolveBatches applies it once the world size is known.
 * From the registered stages' `batch` (lib/config/extensions.ts StageSettings), in registration order.
 */
export function stageBatches(): { stage: Stage; global: string; perRank: string; unit: string }[] {
  return registeredStages("the stages' batches").flatMap((st) => (st.batch ? [{ stage: st.name as Stage, ...st.batch }] : []));
}

/**
 * Config keys a resumed run may change: the registered stages' own (step counts to extend a run,
 * micro-batches, …: each stage's `resumableKeys`) and every setting marked `resumable` (device,
 * judge endpoint, logging and trackers, checkpointing, validation interval, recomputation, merged
 * adapter). lib/train/run.ts applyResumeFlags enforces it; docs/config.md lists it from here.
 */
export function resumableKeys(): string[] {
  return [
    ...new Set([
      ...registeredStages('the resumable keys').flatMap((st) => st.resumableKeys ?? []),
      // A judge kind's own keys where it is judged (http's url), from its descriptor.
      ...registeredJudgeBackends('the resumable keys').flatMap((b) => (b.resumableKeys ?? []).map((k) => `judge.${k}`)),
      ...trainSettings()
        .filter((st) => st.resumable)
        .map((st) => st.key),
    ]),
  ];
}

/** Where a resolved value came from. */
export type Origin = 'default' | 'preset' | 'file' | 'flag';

/**
 * defaults < preset < config file < flags, then validated; `origins` maps every config key
 * (dotted, as in docs/config.md) to the layer its value came from.
 */
export function resolveConfigWithOrigins(opts: {
  preset?: keyof typeof PRESETS;
  file?: string;
  flags?: DeepPartial<TrainConfig>;
  /** Where the config file's deprecation lines go (default stderr). */
  warn?: (line: string) => void;
}): {
  config: TrainConfig;
  origins: Record<string, Origin>;
} {
  const settings = trainSettings();
  const origins: Record<string, Origin> = Object.fromEntries(settings.map((st) => [st.key, 'default' as Origin]));
  const mark = (layer: unknown, origin: Origin) => {
    for (const k of leafKeys(layer)) {
      // A leaf inside a list-valued key (none today) or the key itself.
      const key = settings.find((st) => k === st.key || k.startsWith(`${st.key}.`))?.key;
      if (key && getPath(layer, key) !== undefined) origins[key] = origin;
    }
  };
  let c = trainDefaults();
  if (opts.preset) {
    const p = PRESETS[opts.preset];
    if (!p) throw new Error(`unknown preset '${opts.preset}' (${Object.keys(PRESETS).join(' | ')})`);
    c = mergeConfig(c, p);
    mark(p, 'preset');
  }
  if (opts.file) {
    const f = readConfigFile(opts.file, opts.warn);
    c = mergeConfig(c, f);
    mark(f, 'file');
  }
  // Flags given as an object by a caller of the library: a former key is read as its key too.
  let flags = opts.flags;
  if (flags) {
    flags = structuredClone(flags);
    for (const line of upgradeFormerKeys(flags as Record<string, unknown>, settings, 'flags')) (opts.warn ?? stderrLine)(line);
  }
  c = mergeConfig(c, flags);
  mark(flags, 'flag');
  // A stage's batch is given one way, global or per rank: the later layer wins (a per-rank flag
  // over a file's or preset's global batch; a global flag over a file's per-rank batch), and both
  // in the same file or on the same command line are an error.
  const flagOf = (k: string) => `--${settings.find((st) => st.key === k)?.flag ?? k}`;
  const layer: Record<Origin, number> = { default: 0, preset: 1, file: 2, flag: 3 };
  for (const b of stageBatches()) {
    if (getPath(c, b.perRank) != null && layer[origins[b.global]!] > layer[origins[b.perRank]!]) {
      const off: Record<string, unknown> = {};
      setPath(off, b.perRank, null);
      c = mergeConfig(c, off as DeepPartial<TrainConfig>);
    }
  }
  const both = stageBatches().filter((b) => getPath(c, b.perRank) != null && origins[b.global] === origins[b.perRank]);
  if (both.length) {
    throw new Error(
      `invalid training config:\n  ${both.map((b) => `${b.global} (${flagOf(b.global)}, the global batch) and ${b.perRank} (${flagOf(b.perRank)}, the batch per process) are both given (${origins[b.global]} / ${origins[b.perRank]}); give one`).join('\n  ')}`,
    );
  }
  // A copy of its own: mergeConfig shares the sections (and lists) a layer left alone with the
  // defaults / preset, and the memory plan, out-of-memory recovery and the judge-overlap fallback
  // change the config in place — the next run of this process would inherit their choices.
  return { config: validateConfig(structuredClone(c)), origins };
}

/** defaults < preset < config file < flags, then validated. */
export function resolveConfig(opts: Parameters<typeof resolveConfigWithOrigins>[0]): TrainConfig {
  return resolveConfigWithOrigins(opts).config;
}
