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
import { native } from '../native.js';
import type {
  AddonModel,
  FloatTensor,
  GrpoArgs,
  GrpoBackwardArgs,
  GrpoResult,
  IdTensor,
  JsdArgs,
  JsdResult,
  JsTensor,
  OpsdBackwardArgs,
  SelectedLogprobsArgs,
  SequenceLogprobsArgs,
} from '../addon.js';

export type {
  AdapterChoice,
  FloatTensor,
  GrpoAggregation,
  GrpoArgs,
  GrpoBackwardArgs,
  GrpoMetrics,
  GrpoOptions,
  GrpoResult,
  JsdArgs,
  JsdResult,
  OpsdBackwardArgs,
  Placement,
  SelectedLogprobsArgs,
  SequenceLogprobsArgs,
} from '../addon.js';
/** Token ids (Int32Array or BigInt64Array). */
export type IntTensor = IdTensor;
/** A model from loadModel (the addon's Model). */
export type NativeModelHandle = AddonModel;

/** Generalised JSD (GKD, Agarwal et al. 2024, Eq. 1; TRL generalized_jsd_loss). No cross-entropy term. */
export function jsdLoss(args: JsdArgs): Promise<JsdResult> {
  return native().jsdLoss(args);
}

/** Clipped-surrogate GRPO/DAPO/Dr.GRPO loss with k3 KL (docs/design.md §5; TRL GRPOTrainer._compute_loss). */
export function grpoLoss(args: GrpoArgs): Promise<GrpoResult> {
  return native().grpoLoss(args);
}

/** Per-token log softmax(hidden @ weightᵀ / temperature)[token], chunked, no grad. hidden [N, H], tokens [N] → [N]. */
export function selectedLogprobs(args: SelectedLogprobsArgs): Promise<FloatTensor> {
  return native().selectedLogprobs(args);
}

/** k3 = exp(x) − x − 1 with x = clamp(ref − logp, −20, 20): ≥ 0, 0 at logp = ref, finite for any input. */
export function k3(logprobs: FloatTensor, refLogprobs: FloatTensor): FloatTensor {
  return native().k3({ logprobs, refLogprobs });
}

// ---- model-integrated steps (native/napi/model_steps.cc) ----

/**
 * Per-token logprobs [B, L] of input_ids[:, t] given the prefix (position t predicted from t−1),
 * at `temperature`; position 0 and positions outside completionMask are 0. No grad.
 */
export function sequenceLogprobs(model: NativeModelHandle, args: SequenceLogprobsArgs): Promise<JsTensor<Float32Array>> {
  return native().sequenceLogprobs(model, args);
}

/** OPSD micro-batch: fused JSD over the completion tokens, grads accumulate into the LoRA parameters. */
export function opsdBackward(model: NativeModelHandle, args: OpsdBackwardArgs): Promise<{ loss: number; tokens: number }> {
  return native().opsdBackward(model, args);
}

/** GRPO micro-batch over the model: fused loss, grads accumulate into the LoRA parameters. */
export function grpoBackward(model: NativeModelHandle, args: GrpoBackwardArgs): Promise<GrpoResult> {
  return native().grpoBackward(model, args);
}
