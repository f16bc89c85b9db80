/**
 * Prompts of the training stages (PaperGym, DESIGN.md §6): the student sees the question only;
 * the OPSD teacher sees the question plus the instance rubric items (privileged context).
 */
export interface ChatMessage {
  role: 'system' | 'user' | 'assistant';
  content: string;
}

/** Instruction wrapped around a research question for the policy (student and GRPO). */
export function studentMessages(question: string): ChatMessage[] {
  return [
    {
      role: 'user',
      content:
        'You are a research scientist. Write a concrete research plan that answers the research goal below: ' +
        'the method you would build and why it is novel, and the experiments that would test it (datasets, baselines, ' +
        'ablations, metrics).\n\nResearch goal:\n' + question.trim(),
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
