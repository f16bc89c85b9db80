/**
 * RubricHub (arXiv 2601.08430) and RaR (arXiv 2507.17746) explicit scores: a binary verdict c per
 * rubric item, score = Σ w·c / Σ positive w (/work/shared/BENCHMARKS.md). Pitfall polarity: a
 * negative-weight item (RaR's Pitfall −1/−2, RubricHub's negative points) describes a mistake;
 * c = 1 means the judge found the mistake in the answer, which subtracts |w|. Negative weights
 * are left out of the denominator (RaR's paper does not state the rule; this is the one used,
 * as HealthBench's), so a perfect answer scores 1 and an answer with pitfalls may score below 0
 * (not clipped). Null verdicts drop out of both sums. Prompt: prompts/eval-criterion.v1.md.
 */
import type { Protocol } from './types.js';
import { weightedScore } from './score.js';

const weighted = (name: string): Protocol => ({
  name,
  formula: 'Σ w·c / Σ positive w (c = 1 when met; a negative-weight pitfall met = the mistake is present and subtracts |w|); not clipped',
  verdict: 'binary',
  itemPrompt: 'eval-criterion.v1',
  planScore: (rows) => weightedScore(rows),
  groupsOf: () => [],
  finish: (m) => m,
});

export const rubrichubProtocol = weighted('rubrichub');
export const rarProtocol = weighted('rar');
