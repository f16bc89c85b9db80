/**
 * Training configuration, merged as defaults < preset < config
 * file (YAML) < CLI flags. Presets carry the paper's settings (DESIGN.md §6: LoRA r 64 / alpha 128; OPSD
 * lr 5e-6, 200 steps for 1.7B/4B and 400 for 8B; GRPO lr 1e-5, 200 steps for 1.7B/4B and 100 for
 * 8B, G = 8, KL 0.01). The embedded default (no model given) is a tiny random Qwen3 that trains in
 * minutes on 2 CPU cores.
 */
import { readFileSync } from 'node:fs';
import { parse as parseYaml } from 'yaml';

export type Stage = 'sft' | 'opsd' | 'grpo';
export type Aggregation = 'grpo' | 'dapo' | 'dr_grpo';

export interface TrainConfig {
  /** Checkpoint dir of a HF Qwen3 model; null = the embedded tiny random model. */
  model: string | null;
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
   * LoRA (peft semantics). `float32Branch`: with a bf16 / fp16 model, false (default) runs the
   * LoRA matmuls in the model dtype with float32 master weights, gradients and optimizer state —
   * what transformers' Trainer / TRL do with bf16=True (torch.autocast); true runs the branch in
   * float32 as peft without autocast (slower: no tensor cores for its thin matmuls).
   */
  lora: { r: number; alpha: number; dropout: number; useRslora: boolean; targetModules: string[]; float32Branch: boolean };
  sampling: { temperature: number; topP: number; topK: number; maxNewTokens: number; enableThinking: boolean };
  optim: { weightDecay: number; maxGradNorm: number; betas: [number, number]; eps: number; schedule: 'constant' | 'linear' | 'cosine'; warmupSteps: number };
  /** SFT baseline: cross-entropy on the reference answers; batchSize questions per step (one native call, chunked over tokens). */
  sft: { steps: number; lr: number; batchSize: number };
  opsd: {
    steps: number;
    lr: number;
    /** Questions per optimizer step (one student rollout each). */
    batchSize: number;
    microBatch: number;
    /** Generalised JSD β (DESIGN §5). */
    beta: number;
    teacher: 'fixed' | 'current' | 'ema';
    emaDecay: number;
    /** Stop OPSD after validation falls this many times in a row (0 = never). */
    earlyStopPatience: number;
  };
  grpo: {
    steps: number;
    lr: number;
    questionsPerStep: number;
    groupSize: number;
    microBatch: number;
    epsLow: number;
    epsHigh: number;
    betaKl: number;
    aggregation: Aggregation;
    scale: 'group' | 'batch' | 'none';
    dropZeroVariance: boolean;
    reference: 'stage-start' | 'base';
    /** Reward mix r = α·r_spec + (1 − α)·r_gen. */
    alpha: number;
  };
  judge: { kind: 'local' | 'http'; url: string | null; model: string | null; mode: 'per-item' | 'per-plan'; concurrency: number };
  validation: { every: number; maxItems: number };
  checkpoint: { every: number };
  log: { every: number };
  /**
   * GPU memory: per-layer activation recomputation in backward; releasing cached blocks between the
   * rollout and update phases; the memory plan (lib/train/memory-plan.ts: `plan` 'auto' = on CUDA or
   * when `maxMemoryGB` is set, 'off' = settings as given), its cap in GB (1e9 bytes; null = the
   * device's memory), rollout rows per decode batch and the local judge's tokens per call (0 = chosen
   * by the plan; without a plan: GRPO micro-batch rows / the judge's default).
   */
  memory: { recompute: boolean; emptyCacheBetweenPhases: boolean; plan: 'auto' | 'off'; maxMemoryGB: number | null; rolloutRows: number; judgeMaxTokensPerCall: number };
}

export const DEFAULTS: TrainConfig = {
  model: null,
  data: null,
  out: null,
  device: 'cpu',
  dtype: null,
  stages: ['opsd', 'grpo'],
  seed: 1234,
  strict: false,
  lora: { r: 8, alpha: 16, dropout: 0, useRslora: false, targetModules: ['q_proj', 'k_proj', 'v_proj', 'o_proj', 'gate_proj', 'up_proj', 'down_proj'], float32Branch: false },
  sampling: { temperature: 1.0, topP: 0.95, topK: 20, maxNewTokens: 24, enableThinking: false },
  optim: { weightDecay: 0, maxGradNorm: 1.0, betas: [0.9, 0.999], eps: 1e-8, schedule: 'constant', warmupSteps: 0 },
  sft: { steps: 8, lr: 1e-3, batchSize: 2 },
  opsd: { steps: 8, lr: 1e-3, batchSize: 2, microBatch: 2, beta: 0.5, teacher: 'fixed', emaDecay: 0.99, earlyStopPatience: 0 },
  grpo: {
    steps: 6, lr: 1e-3, questionsPerStep: 2, groupSize: 4, microBatch: 4, epsLow: 0.2, epsHigh: 0.28, betaKl: 0.01,
    aggregation: 'grpo', scale: 'group', dropZeroVariance: false, reference: 'stage-start', alpha: 0.7,
  },
  judge: { kind: 'local', url: null, model: null, mode: 'per-item', concurrency: 8 },
  validation: { every: 4, maxItems: 2 },
  checkpoint: { every: 4 },
  log: { every: 1 },
  memory: { recompute: false, emptyCacheBetweenPhases: false, plan: 'auto', maxMemoryGB: null, rolloutRows: 0, judgeMaxTokensPerCall: 0 },
};

type DeepPartial<T> = { [K in keyof T]?: T[K] extends object ? (T[K] extends unknown[] ? T[K] : DeepPartial<T[K]>) : T[K] };

/** The paper's settings per model size (DESIGN.md §6; OPSD sampling as siyan-zhao/OPSD). */
export const PRESETS: Record<'qwen3-1.7b' | 'qwen3-4b' | 'qwen3-8b', DeepPartial<TrainConfig>> = {
  'qwen3-1.7b': paperPreset(200, 200),
  'qwen3-4b': paperPreset(200, 200),
  'qwen3-8b': paperPreset(400, 100),
};

function paperPreset(opsdSteps: number, grpoSteps: number): DeepPartial<TrainConfig> {
  return {
    device: 'cuda',
    lora: { r: 64, alpha: 128, dropout: 0.05 },
    sampling: { temperature: 1.1, topP: 0.95, topK: 20, maxNewTokens: 1024, enableThinking: false },
    opsd: { steps: opsdSteps, lr: 5e-6, batchSize: 32, microBatch: 4, beta: 0.5 },
    grpo: { steps: grpoSteps, lr: 1e-5, questionsPerStep: 8, groupSize: 8, microBatch: 8, betaKl: 0.01, epsLow: 0.2, epsHigh: 0.2 },
    validation: { every: 25, maxItems: 64 },
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

/** Reads a YAML (or JSON) config file; throws naming the file on a parse error or unknown key. */
export function readConfigFile(path: string): DeepPartial<TrainConfig> {
  let doc: unknown;
  try {
    doc = parseYaml(readFileSync(path, 'utf8'));
  } catch (e) {
    throw new Error(`config ${path}: ${(e as Error).message}`);
  }
  if (doc == null) return {};
  if (typeof doc !== 'object' || Array.isArray(doc)) throw new Error(`config ${path}: top level must be a mapping`);
  checkKeys(doc as Record<string, unknown>, DEFAULTS as unknown as Record<string, unknown>, path, '');
  return doc as DeepPartial<TrainConfig>;
}

function checkKeys(o: Record<string, unknown>, ref: Record<string, unknown>, file: string, prefix: string): void {
  for (const [k, v] of Object.entries(o)) {
    if (!(k in ref)) throw new Error(`config ${file}: unknown key ${prefix}${k}`);
    const r = ref[k];
    if (v && typeof v === 'object' && !Array.isArray(v) && r && typeof r === 'object' && !Array.isArray(r)) {
      checkKeys(v as Record<string, unknown>, r as Record<string, unknown>, file, `${prefix}${k}.`);
    }
  }
}

/** Validates value ranges; throws an Error listing every problem. */
export function validateConfig(c: TrainConfig): TrainConfig {
  const errs: string[] = [];
  const pos = (v: number, n: string) => { if (!(Number.isFinite(v) && v > 0)) errs.push(`${n} must be > 0 (got ${v})`); };
  const nonneg = (v: number, n: string) => { if (!(Number.isFinite(v) && v >= 0)) errs.push(`${n} must be >= 0 (got ${v})`); };
  const int = (v: number, n: string) => { if (!Number.isInteger(v)) errs.push(`${n} must be an integer (got ${v})`); };
  if (!c.stages.length) errs.push('stages must name at least one of sft, opsd, grpo');
  for (const s of c.stages) if (!['sft', 'opsd', 'grpo'].includes(s)) errs.push(`unknown stage '${s}' (sft | opsd | grpo)`);
  for (const [v, n] of [[c.lora.r, 'lora.r'], [c.opsd.batchSize, 'opsd.batchSize'], [c.opsd.microBatch, 'opsd.microBatch'], [c.grpo.groupSize, 'grpo.groupSize'],
    [c.grpo.questionsPerStep, 'grpo.questionsPerStep'], [c.grpo.microBatch, 'grpo.microBatch'], [c.sft.batchSize, 'sft.batchSize'],
    [c.sampling.maxNewTokens, 'sampling.maxNewTokens']] as [number, string][]) { pos(v, n); int(v, n); }
  for (const [v, n] of [[c.opsd.steps, 'opsd.steps'], [c.grpo.steps, 'grpo.steps'], [c.sft.steps, 'sft.steps'], [c.checkpoint.every, 'checkpoint.every'], [c.validation.every, 'validation.every'], [c.seed, 'seed']] as [number, string][]) { nonneg(v, n); int(v, n); }
  for (const [v, n] of [[c.opsd.lr, 'opsd.lr'], [c.grpo.lr, 'grpo.lr'], [c.sft.lr, 'sft.lr'], [c.lora.alpha, 'lora.alpha']] as [number, string][]) pos(v, n);
  nonneg(c.sampling.temperature, 'sampling.temperature');
  if (!(c.sampling.topP > 0 && c.sampling.topP <= 1)) errs.push(`sampling.topP must be in (0, 1] (got ${c.sampling.topP})`);
  if (!(c.opsd.beta >= 0 && c.opsd.beta <= 1)) errs.push(`opsd.beta must be in [0, 1] (got ${c.opsd.beta})`);
  if (!(c.grpo.alpha >= 0 && c.grpo.alpha <= 1)) errs.push(`grpo.alpha must be in [0, 1] (got ${c.grpo.alpha})`);
  if (c.grpo.groupSize < 2) errs.push('grpo.groupSize must be >= 2 (advantages need a group)');
  if (c.opsd.batchSize % c.opsd.microBatch !== 0) errs.push('opsd.batchSize must be a multiple of opsd.microBatch');
  if (c.judge.kind === 'http' && (!c.judge.url || !c.judge.model)) errs.push('judge.kind http needs judge.url and judge.model');
  if (typeof c.lora.float32Branch !== 'boolean') errs.push(`lora.float32Branch must be true or false (got ${JSON.stringify(c.lora.float32Branch)})`);
  // memory plan (issue 21)
  const mem = c.memory;
  if (mem.maxMemoryGB !== null && mem.maxMemoryGB !== undefined && !(Number.isFinite(mem.maxMemoryGB) && mem.maxMemoryGB > 0)) errs.push(`memory.maxMemoryGB must be > 0 GB (got ${mem.maxMemoryGB})`);
  if (mem.plan !== undefined && mem.plan !== 'auto' && mem.plan !== 'off') errs.push(`memory.plan must be auto or off (got ${JSON.stringify(mem.plan)})`);
  for (const [v, n] of [[mem.rolloutRows ?? 0, 'memory.rolloutRows'], [mem.judgeMaxTokensPerCall ?? 0, 'memory.judgeMaxTokensPerCall']] as [number, string][]) { nonneg(v, n); int(v, n); }
  if (errs.length) throw new Error(`invalid training config:\n  ${errs.join('\n  ')}`);
  return c;
}

/** defaults < preset < config file < flags, then validated. */
export function resolveConfig(opts: { preset?: keyof typeof PRESETS; file?: string; flags?: DeepPartial<TrainConfig> }): TrainConfig {
  let c = DEFAULTS;
  if (opts.preset) {
    const p = PRESETS[opts.preset];
    if (!p) throw new Error(`unknown preset '${opts.preset}' (${Object.keys(PRESETS).join(' | ')})`);
    c = mergeConfig(c, p);
  }
  if (opts.file) c = mergeConfig(c, readConfigFile(opts.file));
  c = mergeConfig(c, opts.flags);
  return validateConfig(c);
}
