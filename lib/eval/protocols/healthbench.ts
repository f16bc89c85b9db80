/**
 * HealthBench (arXiv 2505.08775; simple-evals healthbench_eval.py, /work/shared/BENCHMARKS.md): per
 * rubric item met / not met — for a negative-point item, "met" means the undesirable behaviour
 * occurred. Example score = Σ points of met items / Σ points of positive items (may be negative,
 * at most 1); benchmark = clip(mean over examples, 0, 1), each bootstrap resample's mean clipped
 * too; per axis / tag the same formula over the items carrying the tag (example tags apply to all
 * of an example's items); a tag without positive items is dropped. Null verdicts drop out of both
 * sums (counted, never 0), an example with none readable is skipped. Prompt: the authors' grader
 * (prompts/eval-healthbench-grader.v1.md, simple-evals GRADER_TEMPLATE: the conversation with the
 * completion as its last turn, the item as `[points] criterion`, a JSON reply
 * {explanation, criteria_met}); a yes/no-only judge gets prompts/eval-criterion.v1.md.
 */
import type { Protocol } from './types.js';
import { weightedScore } from './score.js';

export const healthbenchProtocol: Protocol = {
  name: 'healthbench',
  formula: 'example = Σ points of met items / Σ positive points (negative items: met = the bad behaviour occurred); benchmark = clip(mean, 0, 1)',
  verdict: 'binary',
  itemPrompt: 'eval-healthbench-grader.v1',
  yesNoPrompt: 'eval-criterion.v1',
  // The grader's JSON reply with its explanation (simple-evals' sampler default is 2048 tokens; an explanation is far shorter).
  judgeMaxTokens: 1024,
  // simple-evals grade_sample: "\n\n".join(f"{role}: {content}") over the prompt messages (then the completion).
  judgeQuestion: (it) => (it.messages?.length ? it.messages : [{ role: 'user', content: it.question }]).map((m) => `${m.role}: ${m.content}`).join('\n\n'),
  // str(RubricItem) = f"[{points}] {criterion}"
  itemText: (r) => `[${r.weight}] ${r.text}`,
  planScore: (rows) => weightedScore(rows),
  groupsOf: (r) => [...new Set([...(r.axis ? [`axis:${r.axis}`] : []), ...(r.tags ?? [])])],
  finish: (m) => Math.min(1, Math.max(0, m)),
};
