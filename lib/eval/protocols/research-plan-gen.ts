/**
 * ResearchPlanGen (Goel et al., arXiv 2512.23707; /work/shared/BENCHMARKS.md): the grader sees the
 * goal, the rubric item and the plan and checks the plan against the 7 general guidelines (handles
 * the criterion, detailed and specific, no overlooked flaws, well justified, cost-efficient,
 * ethical, consistent); an item counts 1 only if the plan violates none of them for it. Prompt: the
 * grader structured as the paper describes it (prompts/eval-research-plan-gen-grader.v1.md: the
 * goal, the numbered rubric, the reference solution as one possible approach, the 7 guidelines, a
 * JSON reply listing the violated guidelines; the authors' wording could not be read); a yes/no-only
 * judge gets prompts/judge-per-item.v1.md (the guidelines folded into one question). "met" is
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
  itemPrompt: 'eval-research-plan-gen-grader.v1',
  yesNoPrompt: 'judge-per-item.v1',
  judgeMaxTokens: 256,
  judgeQuestion: (it) =>
    [
      `Research goal:\n<goal>\n${it.question}\n</goal>`,
      `Grading rubric (numbered):\n<rubric>\n${it.rubric.map((r, k) => `${k + 1}. ${r.text}`).join('\n')}\n</rubric>`,
      ...(it.reference_answer
        ? [`Reference solution (one possible approach, not the only acceptable one):\n<reference>\n${it.reference_answer}\n</reference>`]
        : []),
    ].join('\n\n'),
  itemText: (r, k) => `${k + 1}. ${r.text}`,
  planScore(rows) {
    const read = rows.filter((r) => r.met !== null);
    return read.length ? read.filter((r) => r.met === true).length / read.length : null;
  },
  groupsOf: () => [],
  finish: (m) => m,
};
