/**
 * HealthBench (arXiv 2505.08775; `openai/simple-evals` healthbench_eval.py): JSONL. `prompt` (chat
 * messages, often multi-turn) → messages, folded to the question text; `rubrics[].criterion` →
 * item text, `rubrics[].points` (integers −10…10, negative = undesirable behaviour) → signed
 * weight, `rubrics[].tags` kept, the `axis:…` tag → axis; `example_tags` → item tags;
 * `ideal_completions_data.ideal_completion` (some rows) → reference answer; `prompt_id` → id.
 */
import type { DatasetFormat } from './types.js';
import { foldMessages, list, messages, obj, optText, stem, text, weight } from './read.js';

export const healthbench: DatasetFormat = {
  name: 'healthbench',
  describe: 'HealthBench (arXiv 2505.08775): JSONL, prompt (chat) + rubrics[].criterion / points / tags',
  files: ['jsonl', 'json'],
  columns: ['prompt', 'rubrics'],
  protocol: 'healthbench',
  prompt: 'chat',
  map(row, ctx) {
    const ms = messages(row, 'prompt');
    const rubric = list(row, 'rubrics').map((r, k) => {
      const o = obj(r, `rubrics[${k}]`);
      const tags = Array.isArray(o.tags) ? o.tags.filter((t): t is string => typeof t === 'string') : [];
      const axis = tags.find((t) => t.startsWith('axis:'))?.slice(5);
      return {
        id: `r${k + 1}`,
        text: text(o, 'criterion', `rubrics[${k}].criterion`),
        weight: weight(o.points, `rubrics[${k}].points`),
        ...(tags.length && { tags }),
        ...(axis && { axis }),
      };
    });
    const ideal =
      row.ideal_completions_data && typeof row.ideal_completions_data === 'object'
        ? optText(row.ideal_completions_data as Record<string, unknown>, 'ideal_completion')
        : undefined;
    const tags = Array.isArray(row.example_tags) ? row.example_tags.filter((t): t is string => typeof t === 'string') : [];
    const own = optText(row, 'prompt_id');
    return {
      id: own ?? `${stem(ctx.file)}#${ctx.row}`,
      format: 'healthbench',
      question: foldMessages(ms),
      messages: ms,
      ...(ideal && { reference_answer: ideal }),
      rubric,
      ...(ctx.split && { split: ctx.split }),
      ...(tags.length && { tags }),
      source: { dataset: 'healthbench', file: ctx.file, row: ctx.row, ...(own && { id: own }) },
    };
  },
};
