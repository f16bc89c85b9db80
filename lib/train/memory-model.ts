/**
 * The memory model of a training step: model shapes, the plan's inputs and settings, and the byte
 * formulas the phases are estimated with (lib/train/memory-plan.ts states the estimate and its
 * calibration; each stage's phases are its descriptor's, lib/train/stages/). Units: bytes.
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import type { Stage } from '../config/train.js';
import type { LoraTarget } from '../addon.js';

/** The shapes the estimate reads from a Qwen3 config.json. */
export interface ModelShape {
  hiddenSize: number;
  intermediateSize: number;
  numLayers: number;
  numHeads: number;
  numKvHeads: number;
  headDim: number;
  vocabSize: number;
  tiedEmbeddings: boolean;
}

/** Reads {@link ModelShape} from `<dir>/config.json`; throws naming the file on a missing field. */
export function readModelShape(dir: string): ModelShape {
  const path = join(dir, 'config.json');
  const c = JSON.parse(readFileSync(path, 'utf8')) as Record<string, unknown>;
  const num = (k: string, d?: number): number => {
    const v = c[k] ?? d;
    if (typeof v !== 'number' || !(v > 0)) throw new Error(`${path}: ${k} missing or not a positive number`);
    return v;
  };
  const heads = num('num_attention_heads');
  return {
    hiddenSize: num('hidden_size'),
    intermediateSize: num('intermediate_size'),
    numLayers: num('num_hidden_layers'),
    numHeads: heads,
    numKvHeads: num('num_key_value_heads', heads),
    headDim: num('head_dim', num('hidden_size') / heads),
    vocabSize: num('vocab_size'),
    tiedEmbeddings: c.tie_word_embeddings === true,
  };
}

/** Qwen3 shapes (docs/references.md "Qwen3 architecture"), for tests and `--max-memory` suggestions. */
export const QWEN3_SHAPES: Record<'qwen3-0.6b' | 'qwen3-1.7b' | 'qwen3-4b' | 'qwen3-8b', ModelShape> = {
  'qwen3-0.6b': { hiddenSize: 1024, intermediateSize: 3072, numLayers: 28, numHeads: 16, numKvHeads: 8, headDim: 128, vocabSize: 151936, tiedEmbeddings: true },
  'qwen3-1.7b': { hiddenSize: 2048, intermediateSize: 6144, numLayers: 28, numHeads: 16, numKvHeads: 8, headDim: 128, vocabSize: 151936, tiedEmbeddings: true },
  'qwen3-4b': { hiddenSize: 2560, intermediateSize: 9728, numLayers: 36, numHeads: 32, numKvHeads: 8, headDim: 128, vocabSize: 151936, tiedEmbeddings: true },
  'qwen3-8b': { hiddenSize: 4096, intermediateSize: 12288, numLayers: 36, numHeads: 32, numKvHeads: 8, headDim: 128, vocabSize: 151936, tiedEmbeddings: false },
};

/** Activation multiplier over the counted saved tensors (see the module doc: fitted, 3 points). */
export const KAPPA_ACT = 1.27;
/** No-grad forward transient multiplier (one point: reference logprobs at 1.7B). */
export const KAPPA_FWD = 2.5;
/** Relative tolerance within which the calibration points are reproduced. */
export const CALIBRATION_TOLERANCE = 0.03;
/** Default safety margin: the plan keeps every phase below budget × (1 − margin). */
export const DEFAULT_MARGIN = 0.1;

const GRPO_CHUNK_LOGITS = 16 * 2 ** 20;
const JSD_CHUNK_LOGITS = 64 * 2 ** 20;

/**
 * Each stage's section of the plan's inputs, keyed by stage name (its descriptor's `memory.inputs`
 * reads it from the config). A stage file adds its own by declaration merging
 * (`declare module '../memory-model.js' { interface PlanStageInputs { name: { … } } }`).
 */
// eslint-disable-next-line @typescript-eslint/no-empty-object-type
export interface PlanStageInputs {}

/** What the plan needs to know about the run. */
export interface PlanInputs extends PlanStageInputs {
  shape: ModelShape;
  /** Bytes per model element (2 for bf16 / fp16, 4 for fp32). */
  dtypeBytes: number;
  lora: { r: number; targetModules: string[]; dropout: number };
  stages: Stage[];
  /** Longest student / teacher prompt of the dataset, tokens. */
  promptTokens: { student: number; teacher: number };
  maxNewTokens: number;
  recompute: boolean;
  /** Memory the run may use, bytes (device memory, or the --max-memory cap when smaller). */
  budgetBytes: number;
  /** Fraction of the budget kept free (default {@link DEFAULT_MARGIN}). */
  margin?: number;
  /** Settings given by the user: kept as they are. */
  pinned?: {
    /** By stage name: its update micro-batch (`<stage>.microBatch`) was given. */
    microBatch?: Partial<Record<Stage, boolean>>;
    recompute?: boolean;
    rolloutRows?: boolean;
    judgeTokensPerCall?: boolean;
  };
  /** Given values of the pinned rollout rows / judge tokens (0 = not given). */
  rolloutRows?: number;
  judgeTokensPerCall?: number;
  /** The judge runs on the policy model (local judge). Default true. */
  localJudge?: boolean;
  /**
   * The rollouts sample from the adapter merged into the weights (adds M to the rollout phases):
   * true / false as given, 'auto' = on when the rollouts with the chosen rows fit with the copy.
   * Default false.
   */
  mergeAdapter?: boolean | 'auto';
  /**
   * The local judge scores groups while the rollout still decodes (adds the judge's working memory
   * to the GRPO rollout phase): true / false as given, 'auto' = on when both fit at once. Default false.
   */
  judgeOverlap?: boolean | 'auto';
}

/** The settings a plan chooses. */
export interface PlanSettings {
  /** The update micro-batch of each registered stage that has one (its descriptor's memory.microBatch), by stage name. */
  microBatch: Partial<Record<Stage, number>>;
  recompute: boolean;
  /** Rollout rows per decode batch (GRPO: a multiple of the group size). */
  rolloutRows: number;
  judgeTokensPerCall: number;
  /** The rollouts sample from the merged adapter (PlanInputs.mergeAdapter resolved). */
  mergeAdapter?: boolean;
  /** The local judge overlaps the GRPO rollout (PlanInputs.judgeOverlap resolved). */
  judgeOverlap?: boolean;
}

/** A phase of a step: a stage's rollouts and update (`rollout-<stage>`, `update-<stage>`), the local judge's calls, the reference logprobs, the optimizer. */
export type PlanPhase = `rollout-${Stage}` | `update-${Stage}` | 'judge' | 'reference' | 'optimizer';

export interface MemoryPlan extends PlanSettings {
  budgetBytes: number;
  /** budget × (1 − margin). */
  limitBytes: number;
  residentBytes: number;
  /** Expected peak allocated bytes per phase of the stages that run. */
  phases: Partial<Record<PlanPhase, number>>;
  /** Largest of `phases`. */
  peakBytes: number;
  /** Every phase is under limitBytes. */
  fits: boolean;
  /** Human-readable notes (what was chosen and why; what does not fit). */
  notes: string[];
}

const MODULE_DIMS: Record<LoraTarget, (s: ModelShape) => [number, number]> = {
  q_proj: (s) => [s.hiddenSize, s.numHeads * s.headDim],
  k_proj: (s) => [s.hiddenSize, s.numKvHeads * s.headDim],
  v_proj: (s) => [s.hiddenSize, s.numKvHeads * s.headDim],
  o_proj: (s) => [s.numHeads * s.headDim, s.hiddenSize],
  gate_proj: (s) => [s.hiddenSize, s.intermediateSize],
  up_proj: (s) => [s.hiddenSize, s.intermediateSize],
  down_proj: (s) => [s.intermediateSize, s.hiddenSize],
};

/** Base parameters (embedding counted once when tied). */
export function weightParams(s: ModelShape): number {
  const q = s.numHeads * s.headDim,
    k = s.numKvHeads * s.headDim;
  return (
    s.vocabSize * s.hiddenSize * (s.tiedEmbeddings ? 1 : 2) +
    s.numLayers * (s.hiddenSize * q + 2 * s.hiddenSize * k + q * s.hiddenSize + 3 * s.hiddenSize * s.intermediateSize)
  );
}

/** LoRA parameters: ℓ · r · Σ (in + out) over the target modules. */
export function loraParams(s: ModelShape, r: number, targets: string[]): number {
  let per = 0;
  for (const t of targets) {
    const d = MODULE_DIMS[t as LoraTarget];
    if (!d) throw new Error(`memory plan: unknown LoRA target module '${t}'`);
    const [i, o] = d(s);
    per += i + o;
  }
  return s.numLayers * r * per;
}

export function widths(s: ModelShape) {
  const h = s.hiddenSize,
    q = s.numHeads * s.headDim,
    k = s.numKvHeads * s.headDim,
    i = s.intermediateSize;
  return { h, q, k, i };
}

/** Saved activation elements per token per layer (E in the module doc). */
export function savedElementsPerToken(s: ModelShape, dropout: number): number {
  const { h, q, k, i } = widths(s);
  return 4 * h + 4 * q + 3 * k + 3 * i + (dropout > 0 ? 2 * h + q + i : 0);
}

/**
 * Bytes of the merged weights a rollout holds with mergeAdapter (M in the module doc): the fused
 * matrices with a target in the model dtype (native/model/qwen3.cc MergedLayers copies a fused
 * q/k/v or gate/up matrix whole when any member is targeted) plus the float32 copy of the largest
 * one while it is merged.
 */
export function mergedWeightBytes(s: ModelShape, targets: string[], dtypeBytes: number): number {
  const { h, q, k, i } = widths(s);
  const groups: [LoraTarget[], number][] = [
    [['q_proj', 'k_proj', 'v_proj'], h * (q + 2 * k)],
    [['o_proj'], q * h],
    [['gate_proj', 'up_proj'], 2 * h * i],
    [['down_proj'], i * h],
  ];
  const hit = groups.filter(([g]) => g.some((t) => targets.includes(t))).map(([, n]) => n);
  if (!hit.length) return 0;
  return s.numLayers * dtypeBytes * hit.reduce((a, n) => a + n, 0) + 4 * Math.max(...hit);
}

/** KV cache bytes per token (all layers, K and V). */
export function kvBytesPerToken(s: ModelShape, dtypeBytes: number): number {
  return s.numLayers * 2 * s.numKvHeads * s.headDim * dtypeBytes;
}

/** No-grad forward bytes per token (κ_fwd · F · b). */
export function forwardBytesPerToken(s: ModelShape, b: number): number {
  const { h, q, k, i } = widths(s);
  return KAPPA_FWD * (q + 2 * k + 3 * i + 4 * h) * b;
}

/** Rows padded to the decode's power-of-two bucket. */
export function bucket(rows: number): number {
  let p = 1;
  while (p < rows) p *= 2;
  return p;
}

/** Update (loss + backward) bytes above resident for `rows` sequences of `len` tokens. */
export function updateBytes(x: PlanInputs, rows: number, len: number, recompute: boolean, head: 'grpo' | 'jsd' | 'ce'): number {
  const s = x.shape,
    b = x.dtypeBytes,
    T = rows * len;
  const perLayer = KAPPA_ACT * T * savedElementsPerToken(s, x.lora.dropout) * b;
  const acts = recompute ? T * s.numLayers * s.hiddenSize * b + perLayer : perLayer * s.numLayers;
  const logits = T * s.vocabSize;
  const chunk = head === 'jsd' ? 2 * Math.min(JSD_CHUNK_LOGITS, logits) * 4 : Math.min(GRPO_CHUNK_LOGITS, logits) * 4;
  return acts + chunk + T * s.hiddenSize * (b + 4);
}

/** Bytes of the local judge's scoring calls in flight above resident: maxTokensPerCall · (KV + forward) per token. */
export function judgeWorkBytes(x: PlanInputs, maxTokensPerCall: number): number {
  return maxTokensPerCall * (kvBytesPerToken(x.shape, x.dtypeBytes) + forwardBytesPerToken(x.shape, x.dtypeBytes));
}
