/**
 * The validation record of a stage and what the trainer decides from it (docs/design.md §6 "Best
 * state"): the mean score with a percentile bootstrap interval over its items, the best validation
 * so far under a minimum improvement, and the early-stop count.
 *
 * Rules (transformers' Trainer: `metric_for_best_model` with `greater_is_better`, and
 * EarlyStoppingCallback's `early_stopping_patience` / `early_stopping_threshold`):
 * - the first validation of a stage is its best; a later one becomes the best only when its score
 *   exceeds the best's by more than `earlyStopThreshold` (a tie or a noise-level rise does not move it);
 * - the early-stop count is the number of validations since the best: every validation that is not
 *   a new best counts (a fall, a tie and a rise within the threshold alike), a new best resets it to
 *   0; the stage ends when it reaches the patience K. (Before, a tie or any rise reset the count.)
 * Everything is recomputed from the stage's validation list, which each checkpoint carries, so a
 * resumed run makes the same decisions.
 */
import { quantile } from '../eval/report.js';
import { bootstrapMeans } from '../eval/protocols/score.js';

/** One validation of a stage: after `step` stage steps, mean `score` over the items, its interval. */
export interface ValidationPoint {
  step: number;
  score: number;
  /** Percentile bootstrap interval of the mean over the items (absent in checkpoints of earlier versions). */
  ci?: [number, number];
}

/**
 * Mean of `scores` and its percentile bootstrap interval (Efron & Tibshirani 1993, ch. 13): the
 * items are resampled with replacement `resamples` times (mulberry32 from `seed`), the interval is
 * the type-7 quantiles (1 − level)/2 and (1 + level)/2 of the resampled means. One item, or none:
 * the interval is the point. Units are those of the scores (r_spec in [0, 1]).
 */
export function bootstrapMean(scores: number[], seed: number, opts: { resamples?: number; level?: number } = {}): { mean: number; ci: [number, number] } {
  const n = scores.length;
  const mean = n ? scores.reduce((a, b) => a + b, 0) / n : NaN;
  if (n < 2) return { mean, ci: [mean, mean] };
  const level = opts.level ?? 0.95;
  // Each item its own cluster: the protocols' question bootstrap (same draws, same sums).
  const means = bootstrapMeans(new Map(scores.map((x, i) => [String(i), [x]])), (m) => m, opts.resamples ?? 1000, seed);
  means.sort((a, b) => a - b);
  return { mean, ci: [quantile(means, (1 - level) / 2), quantile(means, (1 + level) / 2)] };
}

/** The best validation of a list and the validations since it (see the module rules). */
export interface BestValidation {
  /** Index in the list. */
  index: number;
  point: ValidationPoint;
  /** Validations after the best that were not a new best: the early-stop count. */
  sinceBest: number;
}

/** The best of `history` under `earlyStopThreshold` (≥ 0, in score units); undefined for an empty list. */
export function bestValidation(history: readonly ValidationPoint[], earlyStopThreshold: number): BestValidation | undefined {
  let best: BestValidation | undefined;
  history.forEach((point, index) => {
    if (!best || point.score > best.point.score + earlyStopThreshold) best = { index, point, sinceBest: 0 };
    else best.sinceBest += 1;
  });
  return best;
}
