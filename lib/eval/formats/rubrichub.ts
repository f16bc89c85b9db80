/**
 * RubricHub (arXiv 2601.08430): Parquet, one file per domain (Science, Medical, …), verl style.
 * `prompt` (chat list) → messages, folded to the question; `Rubrics[].criterion` → item text,
 * `Rubrics[].points` → signed weight; `reward_model.ground_truth` (often empty) → reference answer
 * when not blank; `data_source` / `extra_info.index` → source id. `Rubrics` may also be read from
 * `reward_model.rubrics` (the mirror) when the top-level column is absent in a row.
 */
import type { DatasetFormat } from './types.js';
import { foldMessages, list, messages, obj, optText, RowError, stem, text, weight } from './read.js';

export const rubrichub: DatasetFormat = {
  name: 'rubrichub',
  describe: 'RubricHub (arXiv 2601.08430): Parquet per domain, prompt (chat) + Rubrics[].criterion / points',
  files: ['parquet', 'jsonl', 'json'],
  columns: ['prompt', 'Rubrics'],
  protocol: 'rubrichub',
  prompt: 'chat',
  map(row, ctx) {
    const ms = messages(row, 'prompt');
    const rm = row.reward_model && typeof row.reward_model === 'object' ? (row.reward_model as Record<string, unknown>) : undefined;
    const src = row.Rubrics !== undefined && row.Rubrics !== null ? row : rm && rm.rubrics ? { Rubrics: rm.rubrics } : row;
    const rubric = list(src, 'Rubrics').map((r, k) => {
      const o = obj(r, `Rubrics[${k}]`);
      return { id: `r${k + 1}`, text: text(o, 'criterion', `Rubrics[${k}].criterion`), weight: weight(o.points, `Rubrics[${k}].points`) };
    });
    if (!rubric.length) throw new RowError('Rubrics is empty');
    const ref = rm ? optText(rm, 'ground_truth') : undefined;
    const extra = row.extra_info && typeof row.extra_info === 'object' ? (row.extra_info as Record<string, unknown>) : undefined;
    const own = extra && extra.index !== undefined && extra.index !== null ? String(extra.index) : undefined;
    const domain = optText(row, 'data_source');
    return {
      id: own ? `${domain ? `${domain}/` : ''}${own}` : `${stem(ctx.file)}#${ctx.row}`,
      format: 'rubrichub',
      question: foldMessages(ms),
      messages: ms,
      ...(ref && { reference_answer: ref }),
      rubric,
      ...(ctx.split && { split: ctx.split }),
      ...(domain && { tags: [`domain:${domain}`] }),
      source: { dataset: 'rubrichub', file: ctx.file, row: ctx.row, ...(own && { id: own }) },
    };
  },
};
