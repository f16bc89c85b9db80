/**
 * ResearchPlanGen (Goel et al., arXiv 2512.23707; /work/shared/BENCHMARKS.md): the grader sees the
 * goal, the rubric item and the plan and checks the plan against the 7 general guidelines (handles
 * the criterion, detailed and specific, no overlooked flaws, well justified, cost-efficient,
 * ethical, consistent); an item counts 1 only if the plan violates none of them for it. The
 * guidelines are part of the per-item judge prompt (prompts/judge-per-item.v1.md), so "met" is
 * "passes with no guideline violated". Score = fraction of items passed; null verdicts drop out
 * of the fraction (counted, never a fail or a pass); a plan with no readable verdict is skipped.
 */
import { unsignedOnly } from './types.js';
import type { Protocol } from './types.js';

export const researchPlanGenProtocol: Protocol = {
  name: 'research-plan-gen',
  formula: 'fraction of rubric items passed (met with none of the 7 general guidelines violated); null verdicts left out',
  verdict: 'binary',
  inapplicable: (it) => unsignedOnly(it),
  planScore(rows) {
    const read = rows.filter((r) => r.met !== null);
    return read.length ? read.filter((r) => r.met === true).length / read.length : null;
  },
  groupsOf: () => [],
  finish: (m) => m,
};
