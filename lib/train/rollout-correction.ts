/**
 * Sampler–trainer agreement and rollout correction for GRPO (docs/design.md §5 "Sampler–trainer
 * agreement"). The sampler (a merged bf16 adapter under CUDA graphs) and the trainer (the unmerged
 * adapter in other kernels) give the same token slightly different logprobs; GRPO's ratio uses the
 * sampler's as π_old, so part of what the clip sees is this mismatch, not a policy change.
 *
 * Measured on the sampled tokens y_t ~ μ (μ the sampler, π the trainer, all logprobs at the
 * sampling temperature), with r_t = π(y_t)/μ(y_t) = exp(log π − log μ):
 * - mean and max |log π − log μ| over the tokens;
 * - KL(μ‖π) by the k3 estimator E_μ[r − 1 − log r] (Schulman 2020, "Approximating KL divergence";
 *   non-negative per token, unbiased for samples of μ; the estimator TRL's KL penalty uses, here
 *   between sampler and trainer — the gap verl reports as `rollout_corr/kl`).
 *
 * Corrections (`grpo.rolloutCorrection`; caps named as TRL's `vllm_importance_sampling_cap` C,
 * modes as TRL's `vllm_importance_sampling_mode` and verl's `rollout_is`), each a weight w_t ≥ 0
 * multiplied into the token's policy-gradient term (not the KL term), as TRL multiplies
 * `importance_sampling_ratio` into `per_token_loss` before adding β·KL; since w_t ≥ 0,
 * w·min(ρA, clip(ρ)A) = min(ρ(wA), clip(ρ)(wA)), so it is applied as the per-token advantage w_t·A:
 * - `none`: π_old = μ, w = 1 (the ratio's first value is π/μ: the mismatch);
 * - `token-tis`: π_old = μ, w_t = min(r_t, C) (TRL `token_truncate`; Yao et al. 2025 TIS);
 * - `sequence-mask`: π_old = μ, w_t = 0 for every token of a sequence whose ratio
 *   exp(Σ_t log r_t) > C, else 1 (TRL `sequence_mask`; Liu et al. 2025 MIS);
 * - `recompute`: π_old = π from the trainer's own forward before the update (its first ratio is 1
 *   up to the forward's numerics and LoRA dropout) and w_t = min(r_t, C) (TRL's default with
 *   `vllm_importance_sampling_correction`: TIS against recomputed old logprobs).
 * Every mode but `none` costs one no-grad forward of the step's completions (the trainer's log π),
 * timed in the step's `reference` phase.
 */
import type { RolloutCorrection } from '../config/train.js';

export type { RolloutCorrection };

/** Per completion: π_old for the ratio and the weight of each token (undefined = all 1). */
export interface Corrected {
  oldLogprobs: number[];
  weights?: number[];
}

/**
 * The π_old and token weights of one completion under `mode` (see the module doc). `sampler`: the
 * sampler's logprobs of its tokens (nats); `trainer`: the trainer's (needed for every mode but
 * `none`); `cap`: C > 0.
 * @throws RangeError when the two lists differ in length or C is not positive.
 */
export function correctRollout(mode: RolloutCorrection, sampler: number[], trainer: number[] | undefined, cap: number): Corrected {
  if (mode === 'none') return { oldLogprobs: sampler };
  if (!trainer || trainer.length !== sampler.length)
    throw new RangeError(`rollout correction ${mode}: ${trainer?.length ?? 0} trainer logprobs for ${sampler.length} sampled tokens`);
  if (!(cap > 0)) throw new RangeError(`rollout correction ${mode}: grpo.importanceSamplingCap must be > 0, got ${cap}`);
  const logRatio = sampler.map((m, t) => trainer[t]! - m);
  if (mode === 'sequence-mask') {
    const seq = Math.exp(logRatio.reduce((a, b) => a + b, 0));
    return { oldLogprobs: sampler, weights: sampler.map(() => (seq > cap ? 0 : 1)) };
  }
  const weights = logRatio.map((x) => Math.min(Math.exp(x), cap));
  return { oldLogprobs: mode === 'recompute' ? trainer : sampler, weights };
}

/** Sums of the agreement measures over tokens (adds across micro-batches and ranks; {@link agreementOf} turns them into means). */
export interface AgreementSums {
  tokens: number;
  sumAbs: number;
  maxAbs: number;
  sumK3: number;
}

/** The agreement sums of completions: `sampler[b][t]` and `trainer[b][t]` logprobs of the same tokens. */
export function agreementSums(sampler: number[][], trainer: number[][]): AgreementSums {
  const s: AgreementSums = { tokens: 0, sumAbs: 0, maxAbs: 0, sumK3: 0 };
  sampler.forEach((row, b) =>
    row.forEach((m, t) => {
      const x = trainer[b]![t]! - m;
      s.tokens += 1;
      s.sumAbs += Math.abs(x);
      s.maxAbs = Math.max(s.maxAbs, Math.abs(x));
      s.sumK3 += Math.exp(x) - 1 - x;
    }),
  );
  return s;
}

/** Adds agreement sums (ranks, micro-batches). */
export function addAgreement(a: AgreementSums, b: AgreementSums): AgreementSums {
  return { tokens: a.tokens + b.tokens, sumAbs: a.sumAbs + b.sumAbs, maxAbs: Math.max(a.maxAbs, b.maxAbs), sumK3: a.sumK3 + b.sumK3 };
}

/** Mean |Δ logprob|, max |Δ logprob| and the k3 KL(μ‖π) per token (nats); 0 without tokens. */
export function agreementOf(s: AgreementSums): { meanAbsLogprobDiff: number; maxAbsLogprobDiff: number; klK3: number; tokens: number } {
  const n = Math.max(1, s.tokens);
  return { meanAbsLogprobDiff: s.sumAbs / n, maxAbsLogprobDiff: s.maxAbs, klK3: s.sumK3 / n, tokens: s.tokens };
}

/**
 * Bin edges of the ratio histogram: ρ = exp(log π − log π_old) at the step's update, bins
 * [edges[i], edges[i+1]) with the first open below and the last open above; symmetric in log ρ
 * around 1 and spanning the clip range (1 ± 0.2 / 0.28) and far tails.
 */
export const RATIO_EDGES = [0.5, 0.8, 0.9, 0.95, 0.99, 0.999, 1.001, 1.01, 1.05, 1.1, 1.25, 2] as const;

/** Token counts per ratio bin: `edges.length + 1` counts (below the first edge … at or above the last). */
export function ratioHistogram(trainer: number[][], old: number[][], edges: readonly number[] = RATIO_EDGES): number[] {
  const counts = new Array<number>(edges.length + 1).fill(0);
  trainer.forEach((row, b) =>
    row.forEach((lp, t) => {
      const r = Math.exp(lp - old[b]![t]!);
      let i = 0;
      while (i < edges.length && r >= edges[i]!) i++;
      counts[i]! += 1;
    }),
  );
  return counts;
}
