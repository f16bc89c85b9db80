/**
 * GPU memory plan of a training run, made before the first step: from the model shapes
 * (config.json), dtype, LoRA rank and targets, sequence lengths (longest prompt + max new tokens),
 * group size, questions per step and the memory budget (the device's memory, capped by
 * `--max-memory`), it estimates the peak allocated bytes of every phase of a step and chooses
 *   - the update micro-batch of each stage (OPSD, GRPO) and activation recompute,
 *   - the rows per decode batch of the rollouts (KV cache) and per reference-logprob call, and
 *   - the local judge's `maxTokensPerCall` (rows × tokens of its scoring calls in flight),
 * so that every phase fits under `budget × (1 − margin)`. Settings the user gave (flags, config
 * file) are kept as given; the plan then only reports whether they fit.
 *
 * ## The estimate (bytes; T = tokens of one call, ℓ = layers, b = dtype bytes)
 * Shapes: h hidden, i intermediate, q = heads·head_dim, k = kv_heads·head_dim, V vocabulary.
 *  - weights W = b · (V·h·(tied ? 1 : 2) + ℓ·(h·q + 2·h·k + q·h + 3·h·i))          (norms ignored)
 *  - LoRA P = ℓ · r · Σ_targets (in + out); float32 master + grad + AdamW m, v = 16·P bytes, plus
 *    4·P per adapter snapshot (GRPO's stage-start reference, an EMA teacher) and b·P for the
 *    per-forward cast of A/B to the model dtype.
 *  - resident R = W + LoRA state (above).
 *  - rollout: R + KV + sampler (+ M), KV = rows_bucket · (P_max + N) · ℓ · 2 · k · b (static cache,
 *    rows padded to the power-of-two bucket, full capacity), sampler = rows · V · 4 · 4 (fp32 logits,
 *    softmax, sort for top-k / top-p); M = the merged weights when the rollouts sample from the
 *    adapter merged in (generate's mergeAdapter): b · ℓ · the fused matrices with a target (q/k/v
 *    h·(q + 2k), o q·h, gate/up 2·h·i, down i·h) plus one float32 copy of the largest of them
 *    while merging.
 *  - judge (local, prefix sharing): R + maxTokensPerCall · (ℓ · 2 · k · b + κ_fwd · F · b), F the
 *    per-token forward width below: the prefix K/V copied into every suffix row (the copy path of
 *    prefixLogprobs; the shared-prefix attention of bf16 CUDA models holds one prefix row and
 *    transient per-layer buffers, so there this is an upper bound — measured at 1.7B shapes: the
 *    GRPO rollout phase with the judge inside peaked at 17.2 GB against this bound's 34.7). With the judge overlapping the rollout (grpo.judgeOverlap),
 *    the GRPO rollout phase holds both: rollout + the judge's part above R.
 *  - reference logprobs (no grad, in batches of the rollout rows): R + κ_fwd · T · F · b,
 *    F = q + 2k + 3i + 4h (q/k/v, gate, up, SwiGLU output and the residual/norm buffers of one layer).
 *  - update (loss + backward) of a micro-batch of T tokens:
 *      no recompute: R + κ_act · T · ℓ · E · b + head,
 *      recompute:    R + T · ℓ · h · b (each layer's saved input) + κ_act · T · E · b + head,
 *    E = 4h + 4q + 3k + 3i (what a layer's backward needs with a frozen base: the two norms'
 *    inputs and outputs, q/k before their norms, q/k/v after RoPE, the attention output (flash
 *    SDPA), gate and up, the SwiGLU output), plus h + q + h + i with LoRA dropout (the dropped
 *    copies of the four distinct LoRA inputs); head = the fused loss's fp32 logits chunk(s)
 *    (GRPO: one [C, V] buffer with C·V ≈ 16 M; JSD: two of ≈ 64 M; at most T·V) plus the [T, h] final hidden
 *    states and their fp32 gradient. OPSD adds the teacher's no-grad forward, which runs before the
 *    student's (its transient is below the student's saved activations and is not added).
 *  - optimizer: R (the multi-tensor AdamW works in place).
 *
 * ## Calibration (source: measured peaks on one H200, docs/performance.md)
 * κ_act = {@link KAPPA_ACT} is fitted to the three measured training steps of the `train` command
 * (`--preset`, random weights with the real shapes, embedded dataset: longest student prompt 207
 * tokens, longest teacher prompt 525, 1024 new tokens, LoRA r 64 on 7 modules with dropout 0.05,
 * bf16, no recompute): Qwen3-8B GRPO 108.9 GB (micro-batch 8), Qwen3-8B OPSD 64.3 GB (micro-batch
 * 4), Qwen3-1.7B GRPO 40.6 GB (micro-batch 8), GB = 1e9 bytes. With the value below the formula
 * reproduces them within {@link CALIBRATION_TOLERANCE} (test/memory-plan.test.ts checks it; the
 * fit gives 108.1, 64.7 and 40.3 GB: −0.7%, +0.6%, −0.7%).
 * κ_act > 1 covers what E does not count: backward's transient gradients of one layer, the
 * dropout masks, allocator rounding. κ_fwd = {@link KAPPA_FWD} is fitted to the one measured
 * no-grad forward (reference logprobs, 64 rows × 1231 tokens at 1.7B shapes: 15.75 GiB,
 * docs/performance.md §3; estimate 15.9 GiB) and gives the measured rollout peak (13.15 GiB,
 * same run) as 13.2 GiB. Out-of-sample checks against docs/performance.md §1 (LoRA r 64, dropout 0,
 * cross-entropy, 1.7B, 4 × 2048 tokens): with recompute 6.6 GB estimated vs 6.9 GB measured
 * (−4%); without recompute 26.9 vs 21.8 GB (+24%: with dropout 0 the fused LoRA path saves less
 * than E counts, so the estimate errs on the safe side). The plan prefers smaller micro-batches,
 * which need no extra compute, and turns recompute on only when micro-batch 1 does not fit.
 *
 * Units: bytes everywhere; GB in logs and flags = 1e9 bytes.
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import type { JudgeConfig } from '../config/judge.js';
import { judgeSharesPolicyWeights } from '../judge/backends/index.js';

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

/** What the plan needs to know about the run. */
export interface PlanInputs {
  shape: ModelShape;
  /** Bytes per model element (2 for bf16 / fp16, 4 for fp32). */
  dtypeBytes: number;
  lora: { r: number; targetModules: string[]; dropout: number };
  stages: ('sft' | 'opsd' | 'grpo')[];
  /** Longest student / teacher prompt of the dataset, tokens. */
  promptTokens: { student: number; teacher: number };
  maxNewTokens: number;
  opsd: { batchSize: number; microBatch: number; teacher: 'fixed' | 'current' | 'ema' };
  grpo: { questionsPerStep: number; groupSize: number; microBatch: number; betaKl: number; reference: 'stage-start' | 'base' };
  sft: { batchSize: number };
  recompute: boolean;
  /** Memory the run may use, bytes (device memory, or the --max-memory cap when smaller). */
  budgetBytes: number;
  /** Fraction of the budget kept free (default {@link DEFAULT_MARGIN}). */
  margin?: number;
  /** Settings given by the user: kept as they are. */
  pinned?: { opsdMicroBatch?: boolean; grpoMicroBatch?: boolean; recompute?: boolean; rolloutRows?: boolean; judgeMaxTokensPerCall?: boolean };
  /** Given values of the pinned rollout rows / judge tokens (0 = not given). */
  rolloutRows?: number;
  judgeMaxTokensPerCall?: number;
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
  opsdMicroBatch: number;
  grpoMicroBatch: number;
  recompute: boolean;
  /** Rollout rows per decode batch (GRPO: a multiple of the group size). */
  rolloutRows: number;
  judgeMaxTokensPerCall: number;
  /** The rollouts sample from the merged adapter (PlanInputs.mergeAdapter resolved). */
  mergeAdapter?: boolean;
  /** The local judge overlaps the GRPO rollout (PlanInputs.judgeOverlap resolved). */
  judgeOverlap?: boolean;
}

export type PlanPhase = 'rollout-opsd' | 'rollout-grpo' | 'judge' | 'reference' | 'update-opsd' | 'update-grpo' | 'update-sft' | 'optimizer';

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

const MODULE_DIMS: Record<string, (s: ModelShape) => [number, number]> = {
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
  const q = s.numHeads * s.headDim, k = s.numKvHeads * s.headDim;
  return s.vocabSize * s.hiddenSize * (s.tiedEmbeddings ? 1 : 2) + s.numLayers * (s.hiddenSize * q + 2 * s.hiddenSize * k + q * s.hiddenSize + 3 * s.hiddenSize * s.intermediateSize);
}

/** LoRA parameters: ℓ · r · Σ (in + out) over the target modules. */
export function loraParams(s: ModelShape, r: number, targets: string[]): number {
  let per = 0;
  for (const t of targets) {
    const d = MODULE_DIMS[t];
    if (!d) throw new Error(`memory plan: unknown LoRA target module '${t}'`);
    const [i, o] = d(s);
    per += i + o;
  }
  return s.numLayers * r * per;
}

function widths(s: ModelShape) {
  const h = s.hiddenSize, q = s.numHeads * s.headDim, k = s.numKvHeads * s.headDim, i = s.intermediateSize;
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
  const groups: [string[], number][] = [[['q_proj', 'k_proj', 'v_proj'], h * (q + 2 * k)], [['o_proj'], q * h], [['gate_proj', 'up_proj'], 2 * h * i], [['down_proj'], i * h]];
  const hit = groups.filter(([g]) => g.some((t) => targets.includes(t))).map(([, n]) => n);
  if (!hit.length) return 0;
  return s.numLayers * dtypeBytes * hit.reduce((a, n) => a + n, 0) + 4 * Math.max(...hit);
}

/** KV cache bytes per token (all layers, K and V). */
export function kvBytesPerToken(s: ModelShape, dtypeBytes: number): number {
  return s.numLayers * 2 * s.numKvHeads * s.headDim * dtypeBytes;
}

function forwardBytesPerToken(s: ModelShape, b: number): number {
  const { h, q, k, i } = widths(s);
  return KAPPA_FWD * (q + 2 * k + 3 * i + 4 * h) * b;
}

function bucket(rows: number): number {
  let p = 1;
  while (p < rows) p *= 2;
  return p;
}

/** Resident bytes: weights + LoRA master/grad/AdamW + snapshots + the per-forward cast. */
export function residentBytes(x: PlanInputs): number {
  const P = loraParams(x.shape, x.lora.r, x.lora.targetModules);
  let snapshots = 0;
  if (x.stages.includes('grpo') && x.grpo.reference === 'stage-start') snapshots += 1;
  if (x.stages.includes('opsd') && x.opsd.teacher === 'ema') snapshots += 1;
  return weightParams(x.shape) * x.dtypeBytes + 16 * P + 4 * P * snapshots + (x.dtypeBytes < 4 ? x.dtypeBytes * P : 0);
}

/** Update (loss + backward) bytes above resident for `rows` sequences of `len` tokens. */
export function updateBytes(x: PlanInputs, rows: number, len: number, recompute: boolean, head: 'grpo' | 'jsd' | 'ce'): number {
  const s = x.shape, b = x.dtypeBytes, T = rows * len;
  const perLayer = KAPPA_ACT * T * savedElementsPerToken(s, x.lora.dropout) * b;
  const acts = recompute ? T * s.numLayers * s.hiddenSize * b + perLayer : perLayer * s.numLayers;
  const logits = T * s.vocabSize;
  const chunk = head === 'jsd' ? 2 * Math.min(JSD_CHUNK_LOGITS, logits) * 4 : Math.min(GRPO_CHUNK_LOGITS, logits) * 4;
  return acts + chunk + T * s.hiddenSize * (b + 4);
}

/** Expected peak allocated bytes per phase for the given settings. */
export function estimatePhases(x: PlanInputs, st: PlanSettings): Partial<Record<PlanPhase, number>> {
  const s = x.shape, b = x.dtypeBytes, R = residentBytes(x), N = x.maxNewTokens;
  const kv = kvBytesPerToken(s, b);
  const sampler = (rows: number) => rows * s.vocabSize * 4 * 4;
  const out: Partial<Record<PlanPhase, number>> = {};
  const Ls = x.promptTokens.student + N, Lt = x.promptTokens.teacher + N;
  const merged = st.mergeAdapter ? mergedWeightBytes(s, x.lora.targetModules, b) : 0;
  if (x.stages.includes('opsd')) {
    const rows = Math.min(st.rolloutRows, x.opsd.batchSize);
    out['rollout-opsd'] = R + bucket(rows) * Ls * kv + sampler(bucket(rows)) + merged;
    out['update-opsd'] = R + updateBytes(x, st.opsdMicroBatch, Ls, st.recompute, 'jsd') + st.opsdMicroBatch * N * s.hiddenSize * b;
  }
  if (x.stages.includes('grpo')) {
    const G = x.grpo.groupSize, Q = x.grpo.questionsPerStep;
    const rows = Math.min(Q * G, Math.max(G, st.rolloutRows - (st.rolloutRows % G)));
    out['rollout-grpo'] = R + bucket(rows) * Ls * kv + sampler(bucket(rows)) + merged;
    if (x.localJudge !== false) {
      const judgeWork = st.judgeMaxTokensPerCall * (kv + forwardBytesPerToken(s, b));
      out.judge = R + judgeWork;
      if (st.judgeOverlap) out['rollout-grpo'] += judgeWork;
    }
    if (x.grpo.betaKl > 0) out.reference = R + rows * Ls * forwardBytesPerToken(s, b);
    out['update-grpo'] = R + updateBytes(x, st.grpoMicroBatch, Ls, st.recompute, 'grpo');
  }
  if (x.stages.includes('sft')) out['update-sft'] = R + updateBytes(x, x.sft.batchSize, Ls, st.recompute, 'ce');
  out.optimizer = R;
  return out;
}

function halvings(start: number): number[] {
  const out: number[] = [];
  for (let m = Math.max(1, Math.floor(start)); ; m = Math.max(1, Math.floor(m / 2))) {
    out.push(m);
    if (m === 1) break;
  }
  return out;
}

const JUDGE_TOKENS_MAX = 65536;
const JUDGE_TOKENS_MIN = 2048;

/**
 * Chooses the settings (see the module doc): for each stage the largest micro-batch (halving from
 * the configured one) whose update fits without recompute; if micro-batch 1 does not fit, recompute
 * on and again the largest micro-batch; the most rollout rows (halving from all rows of a step, in
 * whole groups) whose KV cache fits; the judge's maxTokensPerCall (halving from 65536, at least
 * 2048; with grpo.judgeOverlap on, also fitting beside the GRPO rollout). Pinned settings are kept.
 * Pure: no device access.
 */
export function planMemory(x: PlanInputs): MemoryPlan {
  const margin = x.margin ?? DEFAULT_MARGIN;
  const limit = x.budgetBytes * (1 - margin);
  const R = residentBytes(x);
  const notes: string[] = [];
  const pin = x.pinned ?? {};
  const Ls = x.promptTokens.student + x.maxNewTokens;
  const fitsUpdate = (rows: number, rc: boolean, head: 'grpo' | 'jsd') => R + updateBytes(x, rows, Ls, rc, head) + (head === 'jsd' ? rows * x.maxNewTokens * x.shape.hiddenSize * x.dtypeBytes : 0) <= limit;
  const chooseMb = (configured: number, pinned: boolean | undefined, head: 'grpo' | 'jsd', rc: boolean): number | undefined => {
    if (pinned) return configured;
    return halvings(configured).find((m) => fitsUpdate(m, rc, head));
  };
  const stagesWith = (st: 'opsd' | 'grpo') => x.stages.includes(st);
  let recompute = x.recompute;
  let opsdMb = x.opsd.microBatch, grpoMb = x.grpo.microBatch;
  const pick = (rc: boolean) => ({
    o: stagesWith('opsd') ? chooseMb(x.opsd.microBatch, pin.opsdMicroBatch, 'jsd', rc) : x.opsd.microBatch,
    g: stagesWith('grpo') ? chooseMb(x.grpo.microBatch, pin.grpoMicroBatch, 'grpo', rc) : x.grpo.microBatch,
  });
  let p = pick(recompute);
  if ((p.o === undefined || p.g === undefined) && !recompute && !pin.recompute) {
    recompute = true;
    notes.push('activation recompute on: micro-batch 1 does not fit without it');
    p = pick(true);
  }
  opsdMb = p.o ?? 1;
  grpoMb = p.g ?? 1;
  if (opsdMb < x.opsd.microBatch && stagesWith('opsd')) notes.push(`OPSD micro-batch ${x.opsd.microBatch} -> ${opsdMb}`);
  if (grpoMb < x.grpo.microBatch && stagesWith('grpo')) notes.push(`GRPO micro-batch ${x.grpo.microBatch} -> ${grpoMb}`);

  const G = x.grpo.groupSize, Q = x.grpo.questionsPerStep;
  const kv = kvBytesPerToken(x.shape, x.dtypeBytes);
  let rolloutRows: number;
  if (pin.rolloutRows && x.rolloutRows) {
    rolloutRows = x.rolloutRows;
  } else {
    const maxRows = Math.max(stagesWith('grpo') ? Q * G : 1, stagesWith('opsd') ? x.opsd.batchSize : 1);
    // The same rows batch the rollouts (KV cache) and the reference logprobs (no-grad forward).
    const fitsRows = (rows: number) => R + bucket(rows) * Ls * kv + bucket(rows) * x.shape.vocabSize * 16 <= limit
      && (!stagesWith('grpo') || x.grpo.betaKl <= 0 || R + rows * Ls * forwardBytesPerToken(x.shape, x.dtypeBytes) <= limit);
    const unit = stagesWith('grpo') ? G : 1;
    rolloutRows = unit;
    for (let r = maxRows; r >= unit; r = Math.floor(r / 2)) {
      const rr = Math.max(unit, r - (r % unit));
      if (fitsRows(rr)) {
        rolloutRows = rr;
        break;
      }
    }
  }
  // Merged-adapter rollouts: as given, or ('auto') when the rollouts with these rows fit with the copy.
  let mergeAdapter = x.mergeAdapter === true;
  if (x.mergeAdapter === 'auto') {
    const M = mergedWeightBytes(x.shape, x.lora.targetModules, x.dtypeBytes);
    mergeAdapter = R + bucket(rolloutRows) * Ls * kv + bucket(rolloutRows) * x.shape.vocabSize * 16 + M <= limit;
    if (!mergeAdapter) notes.push(`rollouts sample with the LoRA branch: the merged weights (${gb(M)} GB) do not fit beside ${rolloutRows} rollout rows`);
  }
  // With the overlap on (grpo.judgeOverlap on) the judge's calls must also fit beside the GRPO
  // rollout, so its maxTokensPerCall is chosen for both ('auto' decides below, with the standalone choice).
  const overlapOn = x.judgeOverlap === true && x.localJudge !== false && stagesWith('grpo');
  // The settings chosen so far; the judge's call size is chosen next.
  const chosen = { opsdMicroBatch: opsdMb, grpoMicroBatch: grpoMb, recompute, rolloutRows, mergeAdapter };
  const rolloutGrpo = (t: number, judgeOverlap: boolean) => estimatePhases(x, { ...chosen, judgeMaxTokensPerCall: t, judgeOverlap })['rollout-grpo'] ?? 0;
  const besideRollout = (t: number) => rolloutGrpo(t, true) <= limit;
  let judge: number;
  if (pin.judgeMaxTokensPerCall && x.judgeMaxTokensPerCall) {
    judge = x.judgeMaxTokensPerCall;
  } else {
    judge = JUDGE_TOKENS_MIN;
    let alone = JUDGE_TOKENS_MIN;
    for (let t = JUDGE_TOKENS_MAX; t >= JUDGE_TOKENS_MIN; t /= 2) {
      if (R + t * (kv + forwardBytesPerToken(x.shape, x.dtypeBytes)) <= limit) {
        alone = t;
        break;
      }
    }
    judge = alone;
    if (overlapOn) {
      for (let t = alone; t >= JUDGE_TOKENS_MIN && !besideRollout(t); t /= 2) judge = Math.max(JUDGE_TOKENS_MIN, t / 2);
      if (judge < alone) notes.push(`judge maxTokensPerCall ${alone} -> ${judge} to fit beside the rollout (grpo.judgeOverlap on)`);
    }
  }
  const settings: PlanSettings = { ...chosen, judgeMaxTokensPerCall: judge };
  // The local judge beside the GRPO rollout: as given, or ('auto') when both fit at once.
  if (x.localJudge !== false && stagesWith('grpo')) {
    settings.judgeOverlap = x.judgeOverlap === true;
    if (x.judgeOverlap === 'auto') {
      const both = rolloutGrpo(judge, true);
      settings.judgeOverlap = both <= limit;
      if (!settings.judgeOverlap) notes.push(`the local judge scores after the rollout: its ${gb(both - rolloutGrpo(judge, false))} GB do not fit beside the rollout`);
    }
  }
  const phases = estimatePhases(x, settings);
  const peak = Math.max(...Object.values(phases).map((v) => v ?? 0));
  const over = Object.entries(phases).filter(([, v]) => (v ?? 0) > limit).map(([k, v]) => `${k} ${gb(v!)} GB`);
  if (over.length) notes.push(`does not fit in ${gb(limit)} GB (budget ${gb(x.budgetBytes)} GB − ${Math.round(margin * 100)}% margin): ${over.join(', ')} — the run starts anyway: an out of memory halves the micro-batch, and one that still fails names the settings that fit`);
  return { ...settings, budgetBytes: x.budgetBytes, limitBytes: limit, residentBytes: R, phases, peakBytes: peak, fits: over.length === 0, notes };
}

/** Bytes → GB (1e9) with one decimal; two significant digits below 0.1 GB (a budget of 0.001 GB read "0.0"). */
export function gb(bytes: number): string {
  const v = bytes / 1e9;
  return v >= 0.05 || v === 0 ? v.toFixed(1) : v.toPrecision(2);
}

/** One-paragraph description of a plan for the run log. */
export function formatPlan(p: MemoryPlan): string {
  const ph = Object.entries(p.phases).map(([k, v]) => `${k} ${gb(v!)}`).join(', ');
  return `memory plan: budget ${gb(p.budgetBytes)} GB (limit ${gb(p.limitBytes)} GB); OPSD micro-batch ${p.opsdMicroBatch}, GRPO micro-batch ${p.grpoMicroBatch}, recompute ${p.recompute ? 'on' : 'off'}, rollout rows ${p.rolloutRows}${p.mergeAdapter ? ' (merged adapter)' : ''}, judge maxTokensPerCall ${p.judgeMaxTokensPerCall}${p.judgeOverlap ? ' (beside the rollout)' : ''}; expected peak GB per phase: ${ph}${p.notes.length ? `; ${p.notes.join('; ')}` : ''}`;
}

/**
 * Flags that would make the step fit in `budgetBytes` (for the error when micro-batch 1 with
 * recompute still runs out of memory): halves max new tokens, then questions per step / the OPSD
 * batch, until the plan fits; '' when nothing found. A merged adapter given as on
 * (`--merge-adapter on`) is given up (`--merge-adapter off`) before any of those cuts: the LoRA
 * branch samples the same policy, the cuts change the run. Likewise the local judge beside the
 * rollout (`--judge-overlap on` → `--judge-overlap off`): the same rewards, judged after the rollout.
 */
export function flagsThatFit(x: PlanInputs): string {
  let y: PlanInputs = { ...x, recompute: true, opsd: { ...x.opsd, microBatch: 1 }, grpo: { ...x.grpo, microBatch: 1 }, pinned: {} };
  for (let i = 0; i < 12; i++) {
    for (const merge of x.mergeAdapter === true ? [true, false] : [x.mergeAdapter]) {
      for (const overlap of x.judgeOverlap === true ? [true, false] : [x.judgeOverlap]) {
        if (!planMemory({ ...y, mergeAdapter: merge, judgeOverlap: overlap }).fits) continue;
        return [`--max-new-tokens ${y.maxNewTokens}`, `--recompute`, `--grpo-micro-batch 1`, `--opsd-micro-batch 1`, `--questions-per-step ${y.grpo.questionsPerStep}`, `--opsd-batch-size ${y.opsd.batchSize}`, ...(merge !== x.mergeAdapter ? ['--merge-adapter off'] : []), ...(overlap !== x.judgeOverlap ? ['--judge-overlap off'] : [])].join(' ');
      }
    }
    if (y.maxNewTokens > 64) y = { ...y, maxNewTokens: Math.floor(y.maxNewTokens / 2) };
    else if (y.grpo.questionsPerStep > 1 || y.opsd.batchSize > 1) y = { ...y, grpo: { ...y.grpo, questionsPerStep: Math.max(1, Math.floor(y.grpo.questionsPerStep / 2)) }, opsd: { ...y.opsd, batchSize: Math.max(1, Math.floor(y.opsd.batchSize / 2)) } };
    else break;
  }
  return '';
}

/** The config fields the run-level plan reads and sets (a subset of TrainConfig). */
export interface PlannableConfig {
  device: string;
  dtype: 'float32' | 'bfloat16' | 'float16' | null;
  stages: ('sft' | 'opsd' | 'grpo')[];
  lora: { r: number; targetModules: string[]; dropout: number };
  sampling: { maxNewTokens: number; mergeAdapter?: 'auto' | 'on' | 'off' };
  sft: { batchSize: number };
  opsd: { batchSize: number; microBatch: number; teacher: 'fixed' | 'current' | 'ema' };
  grpo: { questionsPerStep: number; groupSize: number; microBatch: number; betaKl: number; reference: 'stage-start' | 'base'; judgeOverlap?: 'auto' | 'on' | 'off' };
  judge: JudgeConfig;
  memory: { recompute: boolean; plan?: 'auto' | 'off'; maxMemoryGB?: number | null; rolloutRows?: number; judgeMaxTokensPerCall?: number };
}

/** Which memory settings the user gave (flags or config file); the plan keeps those. */
export type PinnedSettings = NonNullable<PlanInputs['pinned']>;

/** Reads the pinned settings from partial configs (CLI flags, the config file); presets do not pin. */
export function pinnedSettings(...given: (Record<string, unknown> | undefined)[]): PinnedSettings {
  const has = (sect: string, key: string) => given.some((g) => (g?.[sect] as Record<string, unknown> | undefined)?.[key] !== undefined);
  return {
    opsdMicroBatch: has('opsd', 'microBatch'),
    grpoMicroBatch: has('grpo', 'microBatch'),
    recompute: has('memory', 'recompute'),
    rolloutRows: has('memory', 'rolloutRows'),
    judgeMaxTokensPerCall: has('memory', 'judgeMaxTokensPerCall'),
  };
}

/**
 * The plan for a run (lib/train/run.ts): active when `memory.plan` is not 'off' and the device is
 * CUDA or `memory.maxMemoryGB` is set; budget = min(device memory, cap). `promptTokens` are the
 * dataset's longest student / teacher prompts. Returns the plan inputs and plan, or undefined when
 * inactive (CPU without a cap). Applies the plan's settings to `cfg` in place (except pinned ones).
 */
export function planForRun(cfg: PlannableConfig, o: { shape: ModelShape; promptTokens: { student: number; teacher: number }; deviceMemoryBytes?: number; pinned: PinnedSettings }): { inputs: PlanInputs; plan: MemoryPlan } | undefined {
  const m = cfg.memory;
  const cap = m.maxMemoryGB ? m.maxMemoryGB * 1e9 : undefined;
  if (m.plan === 'off' || (!cfg.device.startsWith('cuda') && cap === undefined)) return undefined;
  const budget = Math.min(cap ?? Infinity, o.deviceMemoryBytes ?? Infinity);
  if (!Number.isFinite(budget)) return undefined;
  const dtype = cfg.dtype ?? (cfg.device.startsWith('cuda') ? 'bfloat16' : 'float32');
  const inputs: PlanInputs = {
    shape: o.shape,
    dtypeBytes: dtype === 'float32' ? 4 : 2,
    lora: { r: cfg.lora.r, targetModules: cfg.lora.targetModules, dropout: cfg.lora.dropout },
    stages: cfg.stages,
    promptTokens: o.promptTokens,
    maxNewTokens: cfg.sampling.maxNewTokens,
    opsd: { batchSize: cfg.opsd.batchSize, microBatch: cfg.opsd.microBatch, teacher: cfg.opsd.teacher },
    grpo: { questionsPerStep: cfg.grpo.questionsPerStep, groupSize: cfg.grpo.groupSize, microBatch: cfg.grpo.microBatch, betaKl: cfg.grpo.betaKl, reference: cfg.grpo.reference },
    sft: { batchSize: cfg.sft.batchSize },
    recompute: m.recompute,
    budgetBytes: budget,
    pinned: o.pinned,
    rolloutRows: m.rolloutRows ?? 0,
    judgeMaxTokensPerCall: m.judgeMaxTokensPerCall ?? 0,
    localJudge: judgeSharesPolicyWeights(cfg.judge),
    mergeAdapter: cfg.sampling.mergeAdapter === 'on' ? true : cfg.sampling.mergeAdapter === 'auto' && cfg.device.startsWith('cuda') ? 'auto' : false,
    judgeOverlap: cfg.grpo.judgeOverlap === 'on' ? true : cfg.grpo.judgeOverlap === 'auto' && cfg.device.startsWith('cuda') ? 'auto' : false,
  };
  const plan = planMemory(inputs);
  cfg.opsd.microBatch = plan.opsdMicroBatch;
  cfg.grpo.microBatch = plan.grpoMicroBatch;
  m.recompute = plan.recompute;
  m.rolloutRows = plan.rolloutRows;
  m.judgeMaxTokensPerCall = plan.judgeMaxTokensPerCall;
  if (cfg.sampling.mergeAdapter === 'auto' && cfg.device.startsWith('cuda')) cfg.sampling.mergeAdapter = plan.mergeAdapter ? 'on' : 'off';
  if (cfg.grpo.judgeOverlap === 'auto' && cfg.device.startsWith('cuda') && plan.judgeOverlap !== undefined) cfg.grpo.judgeOverlap = plan.judgeOverlap ? 'on' : 'off';
  return { inputs, plan };
}
