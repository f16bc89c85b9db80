/**
 * Fused, chunked training losses over the lm_head (docs/design.md §5), as standalone functions on JS
 * tensors (tests, benchmarks) and as model-integrated steps (see {@link sequenceLogprobs},
 * {@link opsdBackward}, {@link grpoBackward}). All math is fp32 (fp64 when the inputs are
 * Float64Array) from fp32-accumulated logits = hidden @ weightᵀ, chunked over tokens: the
 * [N, V] logits never exist for all tokens at once and the frozen weight gets no gradient. Each
 * fused loss has an unfused reference path (`fused: false`, plain autograd) for tests.
 *
 * Shapes: N tokens, H hidden size, V vocabulary, B sequences, T completion positions.
 * Errors: TypeError (code ERR_PG_ARG) for bad shapes / options; Error (ERR_PG_OOM) on OOM.
 */
import { native, type JsTensor } from '../native.js';

export type FloatTensor = JsTensor<Float32Array | Float64Array>;
export type IntTensor = JsTensor<Int32Array | BigInt64Array>;

/** Where the standalone loss runs; `dtype` casts hidden states and weight (e.g. 'bfloat16' on CUDA). */
export interface Placement {
  device?: 'cpu' | 'cuda' | `cuda:${number}`;
  dtype?: 'float32' | 'bfloat16' | 'float16';
}

export interface JsdArgs extends Placement {
  /** [N, H] student final-norm hidden states (gradient is returned for them). */
  studentHidden?: FloatTensor;
  /**
   * [N, V] student logits instead of hidden + weight (tests of the per-token math, e.g. with −inf
   * logits a matmul cannot produce; needs teacherLogits; returns perToken and gradStudentLogits).
   */
  studentLogits?: FloatTensor;
  /** [N, H] teacher hidden states (no gradient) … */
  teacherHidden?: FloatTensor;
  /** … or [N, V] teacher logits (fused path only). */
  teacherLogits?: FloatTensor;
  /** [V, H] frozen lm_head weight (not with studentLogits). */
  weight?: FloatTensor;
  /** [N] 1 = completion token, 0 = ignored (default all ones). */
  mask?: FloatTensor;
  /**
   * Mixture weight of the teacher, in [0, 1] (default 0.5). JSD_β = β·KL(T‖M) + (1−β)·KL(S‖M),
   * M = β·T + (1−β)·S. β = 0 is forward KL(T‖S), β = 1 is reverse KL(S‖T) (TRL's convention).
   */
  beta?: number;
  /** Softmax temperature τ applied to both logits (default 1). */
  temperature?: number;
  /** Tokens per chunk (0 = automatic ≈ 64 M logits per chunk). */
  chunkSize?: number;
  /** loss = Σ mask·JSD / normalizer; default Σ mask (token mean). Pass the window's token count when accumulating. */
  normalizer?: number;
  /** false = unfused reference. Default true. */
  fused?: boolean;
  /** Compute dLoss/dStudentHidden (default true). */
  grad?: boolean;
}

export interface JsdResult {
  /** Nats per normalised token. Exactly 0 when student == teacher; ≥ 0 up to rounding. */
  loss: number;
  /** [N, H] (float32, float64 for float64 inputs). */
  gradStudentHidden?: FloatTensor;
  /** With studentLogits: per-token JSD [N] and d loss / d studentLogits [N, V] (loss = mean over N). */
  perToken?: FloatTensor;
  gradStudentLogits?: FloatTensor;
}

/** Generalised JSD (GKD, Agarwal et al. 2024, Eq. 1; TRL generalized_jsd_loss). No cross-entropy term. */
export function jsdLoss(args: JsdArgs): Promise<JsdResult> {
  return native().jsdLoss(args);
}

export type GrpoAggregation = 'grpo' | 'dapo' | 'dr_grpo';

export interface GrpoArgs extends Placement {
  /** [B, T, H] hidden states at the positions that predict `tokens`. */
  hidden: FloatTensor;
  /** [V, H] frozen lm_head weight. */
  weight: FloatTensor;
  /** [B, T] completion token ids. */
  tokens: IntTensor;
  /** [B, T] logprobs of the policy that sampled (at the sampling temperature). */
  oldLogprobs: FloatTensor;
  /** [B, T] reference-policy logprobs (required when betaKl ≠ 0). */
  refLogprobs?: FloatTensor;
  /** [B] per-sequence (or [B, T] per-token) advantages. */
  advantages: FloatTensor;
  /** [B, T] completion mask (see masks.ts). */
  mask: FloatTensor;
  /** Lower / upper clip ε (defaults: `epsilon` = 0.2 for both; DAPO uses epsHigh 0.28). */
  epsilon?: number;
  epsLow?: number;
  epsHigh?: number;
  /** k3 KL coefficient (default 0). k3 = exp(x) − x − 1, x = clamp(ref − logp, ±20). */
  betaKl?: number;
  /** Sampling temperature T: logp = log softmax(logits / T). Default 1. */
  temperature?: number;
  /**
   * 'grpo': Σ_b (Σ_t mask·ℓ / |o_b|) / numSequences; 'dapo' (default): Σ mask·ℓ / numTokens;
   * 'dr_grpo': Σ mask·ℓ / (numSequences · maxCompletionLength) — TRL's three normalisers.
   */
  aggregation?: GrpoAggregation;
  /** Window normalisers (defaults: this call's B, Σ mask, T). Set them when accumulating micro-batches. */
  numSequences?: number;
  numTokens?: number;
  maxCompletionLength?: number;
  chunkSize?: number;
  fused?: boolean;
  grad?: boolean;
}

export interface GrpoMetrics {
  /** Masked mean of k3 over this call's completion tokens (0 when betaKl = 0). */
  meanKl: number;
  /** Masked token fractions as TRL logs them: low = ρ < 1−ε_low ∧ Â < 0; high = ρ > 1+ε_high ∧ Â > 0; region = either. */
  clipFraction: { low: number; high: number; region: number };
  /** Σ mask of this call (to combine fractions across micro-batches). */
  maskCount: number;
  /** [B·T] per-token logprobs under the current policy (detached). */
  logprobs: FloatTensor;
}

export interface GrpoResult extends GrpoMetrics {
  loss: number;
  /** [B, T, H]. */
  gradHidden?: FloatTensor;
}

/** Clipped-surrogate GRPO/DAPO/Dr.GRPO loss with k3 KL (docs/design.md §5; TRL GRPOTrainer._compute_loss). */
export function grpoLoss(args: GrpoArgs): Promise<GrpoResult> {
  return native().grpoLoss(args);
}

/** Per-token log softmax(hidden @ weightᵀ / temperature)[token], chunked, no grad. hidden [N, H], tokens [N] → [N]. */
export function selectedLogprobs(args: Placement & { hidden: FloatTensor; weight: FloatTensor; tokens: IntTensor; temperature?: number; chunkSize?: number }): Promise<FloatTensor> {
  return native().selectedLogprobs(args);
}

/** k3 = exp(x) − x − 1 with x = clamp(ref − logp, −20, 20): ≥ 0, 0 at logp = ref, finite for any input. */
export function k3(logprobs: FloatTensor, refLogprobs: FloatTensor): FloatTensor {
  return native().k3({ logprobs, refLogprobs });
}

// ---- model-integrated steps (native/loss/model_steps.cc) ----

/** A JS Model from Model.load (lib/model/qwen3.ts). */
// eslint-disable-next-line @typescript-eslint/no-explicit-any
export type NativeModelHandle = any;
export type AdapterChoice = 'active' | 'none' | (string & {});

export interface SequenceLogprobsArgs {
  /** [B, L] prompt + completion ids (right padded). */
  inputIds: IntTensor;
  /** [B, L] 1 = real token. */
  attentionMask: FloatTensor | JsTensor<Uint8Array | Int32Array>;
  /** [B, L] 1 at positions whose token's logprob is wanted (completion tokens); default attentionMask shifted. */
  completionMask?: FloatTensor | JsTensor<Uint8Array | Int32Array>;
  temperature?: number;
  /** 'active' (trainable adapter), 'none' (base = reference policy), or a snapshot name. */
  adapter?: AdapterChoice;
  chunkSize?: number;
}

/**
 * Per-token logprobs [B, L] of input_ids[:, t] given the prefix (position t predicted from t−1),
 * at `temperature`; position 0 and positions outside completionMask are 0. No grad.
 */
export function sequenceLogprobs(model: NativeModelHandle, args: SequenceLogprobsArgs): Promise<FloatTensor> {
  return native().sequenceLogprobs(model?.raw ?? model, args);
}

export interface OpsdBackwardArgs {
  /** [B, Ls] student prompt + completion. */
  studentIds: IntTensor;
  studentMask: JsTensor<Float32Array | Uint8Array | Int32Array>;
  /** [B, Lt] teacher prompt (question + rubric) + the same completion. */
  teacherIds: IntTensor;
  teacherMask: JsTensor<Float32Array | Uint8Array | Int32Array>;
  /** [B] index of the first completion token in each student / teacher row, and [B] completion lengths. */
  studentStart: IntTensor;
  teacherStart: IntTensor;
  completionLength: IntTensor;
  beta?: number;
  temperature?: number;
  /** Tokens of the whole optimizer window (Σ completion lengths); default this call's. */
  normalizer?: number;
  /** Teacher adapter: 'none' (fixed teacher, default), 'active' (detached current), or a snapshot (EMA). */
  teacher?: AdapterChoice;
  chunkSize?: number;
}

/** OPSD micro-batch: fused JSD over the completion tokens, grads accumulate into the LoRA parameters. */
export function opsdBackward(model: NativeModelHandle, args: OpsdBackwardArgs): Promise<{ loss: number; tokens: number }> {
  return native().opsdBackward(model?.raw ?? model, args);
}

export interface GrpoBackwardArgs extends Omit<GrpoArgs, 'hidden' | 'weight' | 'tokens' | 'mask' | 'oldLogprobs' | 'refLogprobs' | 'fused' | 'grad' | keyof Placement> {
  /** [B, L] prompt + completion ids. */
  inputIds: IntTensor;
  attentionMask: JsTensor<Float32Array | Uint8Array | Int32Array>;
  /** [B, L] 1 at completion tokens (see masks.ts), aligned with inputIds. */
  completionMask: FloatTensor | JsTensor<Uint8Array | Int32Array>;
  /** [B, L] aligned with inputIds (values outside completionMask ignored). */
  oldLogprobs: FloatTensor;
  refLogprobs?: FloatTensor;
}

/** GRPO micro-batch over the model: fused loss, grads accumulate into the LoRA parameters. */
export function grpoBackward(model: NativeModelHandle, args: GrpoBackwardArgs): Promise<GrpoResult> {
  return native().grpoBackward(model?.raw ?? model, args);
}
