/**
 * RubricHub (arXiv 2601.08430) and RaR (arXiv 2507.17746) explicit scores: a binary verdict c per
 * rubric item, score = Σ w·c / Σ positive w (/work/shared/BENCHMARKS.md). Pitfall polarity: a
 * negative-weight item (RaR's Pitfall −1/−2, RubricHub's negative points) describes a mistake;
 * c = 1 means the judge found the mistake in the answer, which subtracts |w|. Negative weights
 * are left out of the denominator (RaR's paper does not state the rule; this is the one used,
 * as HealthBench's), so a perfect answer scores 1 and an answer with pitfalls may score below 0
 * (not clipped). Null verdicts drop out of both sums; a plan with none readable is skipped.
 * Pitfall rule (the question the judge is asked, prompts/eval-weighted-criterion.v1.md): a pitfall is
 * written either as the mistake ("Claims that …") or as its avoidance ("Does not claim …"); both
 * name the same mistake, and the judge is asked whether the response MAKES it (never "is this
 * criterion met?", which on the second wording would subtract the weight from a correct answer).
 * The item is shown with its kind and weight ({@link weightedItemText}).
 */
import type { BenchmarkRubricItem } from '../../task/types.js';
import type { Protocol } from './types.js';

/** A weighted item as the judge sees it: `Criterion (weight 3): …` or `Pitfall — a mistake to avoid (weight −2): …`. */
export function weightedItemText(r: BenchmarkRubricItem): string {
  return r.weight < 0 ? `Pitfall, a mistake to avoid (weight ${r.weight}): ${r.text}` : `Criterion (weight ${r.weight}): ${r.text}`;
}
import { weightedScore } from './score.js';

const weighted = (name: string): Protocol => ({
  name,
  formula: 'Σ w·c / Σ positive w (c = 1 when met; a negative-weight pitfall met = the mistake is present and subtracts |w|); not clipped',
  verdict: 'binary',
  itemPrompt: 'eval-weighted-criterion.v1',
  itemText: weightedItemText,
  planScore: (rows) => weightedScore(rows),
  groupsOf: () => [],
  finish: (m) => m,
});

export const rubrichubProtocol = weighted('rubrichub');
export const rarProtocol = weighted('rar');
