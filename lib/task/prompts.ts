/**
 * Prompts of the task (PaperGym, docs/design.md §6), the same everywhere a plan is written: the student
 * prompt (the question only) is used by every training stage, validation, eval and
 * `generate --input` questions; the OPSD teacher sees the question plus the instance rubric items
 * (privileged context). The data pipeline's own LLM prompts are lib/data/prompts.ts.
 */
import type { ChatMessage } from '../llm/messages.js';

/** Instruction wrapped around a research question for the policy (student and GRPO). */
export function studentMessages(question: string): ChatMessage[] {
  return [
    {
      role: 'user',
      content:
        'You are a research scientist. Write a concrete research plan that answers the research goal below: ' +
        'the method you would build and why it is novel, and the experiments that would test it (datasets, baselines, ' +
        'ablations, metrics).\n\nResearch goal:\n' +
        question.trim(),
    },
  ];
}

/** The OPSD teacher prompt: the student prompt plus the rubric the plan will be graded against. */
export function teacherMessages(question: string, rubric: { text: string }[]): ChatMessage[] {
  const items = rubric.map((r, i) => `${i + 1}. ${r.text}`).join('\n');
  const base = studentMessages(question)[0]!.content;
  return [
    {
      role: 'user',
      content: `${base}\n\nA reviewer will check the plan against these rubric items; make sure it satisfies them:\n${items}`,
    },
  ];
}
