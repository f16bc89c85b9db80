/**
 * RaR-Science / RaR-Medicine (arXiv 2507.17746; `ScaleAI/RaR-*`): Parquet `data/{split}-*`.
 * `question` → question, `reference_answer` → reference answer, `rubric[].description` → item
 * text, `rubric[].title` → title, `rubric[].weight` → signed weight (Essential 5, Important 3–4,
 * Optional 1–2, Pitfall −1/−2). Rows with only `rubric_list` (plain strings) get weight 1.
 */
import type { DatasetFormat } from './types.js';
import { list, obj, optText, stem, text, weight } from './read.js';

export const rar: DatasetFormat = {
  name: 'rar',
  describe: 'RaR-Science / -Medicine (arXiv 2507.17746): Parquet data/{split}-*, question + rubric[].description / weight',
  files: ['parquet', 'jsonl', 'json'],
  columns: ['question', 'rubric'],
  protocol: 'rar',
  prompt: 'question',
  map(row, ctx) {
    const q = text(row, 'question');
    const rubric = list(row, 'rubric').map((r, k) => {
      const o = obj(r, `rubric[${k}]`);
      const title = optText(o, 'title');
      return {
        id: `r${k + 1}`,
        text: text(o, 'description', `rubric[${k}].description`),
        weight: weight(o.weight, `rubric[${k}].weight`),
        ...(title && { title }),
      };
    });
    const ref = optText(row, 'reference_answer');
    const own = row.id === undefined || row.id === null ? undefined : String(row.id);
    return {
      id: own ?? `${stem(ctx.file)}#${ctx.row}`,
      format: 'rar',
      question: q,
      ...(ref && { reference_answer: ref }),
      rubric,
      ...(ctx.split && { split: ctx.split }),
      source: { dataset: 'rar', file: ctx.file, row: ctx.row, ...(own && { id: own }) },
    };
  },
};
