/**
 * ResearchQA (arXiv 2509.00496; `realliyifei/ResearchQA`): a JSON list (`test.json`, `valid.json`,
 * `full.json`); `query` → question; `rubric[].rubric_item` → item text, `rubric[].type` → type;
 * no weights (1 each), no reference answer. Row id: `id` when present, else `{file}#{row}`.
 */
import type { DatasetFormat } from './types.js';
import { list, obj, optText, RowError, stem, text } from './read.js';

export const researchqa: DatasetFormat = {
  name: 'researchqa',
  describe: 'ResearchQA (arXiv 2509.00496): JSON list, query + rubric[].rubric_item / type',
  files: ['json', 'jsonl'],
  columns: ['query', 'rubric'],
  protocol: 'researchqa',
  prompt: 'question',
  map(row, ctx) {
    const query = text(row, 'query');
    const rubric = list(row, 'rubric').map((r, k) => {
      const o = typeof r === 'string' ? { rubric_item: r } : obj(r, `rubric[${k}]`);
      const t = text(o, 'rubric_item', `rubric[${k}].rubric_item`);
      const type = optText(o, 'type');
      return { id: `r${k + 1}`, text: t, weight: 1, ...(type && { type }) };
    });
    if (!rubric.length) throw new RowError('rubric is empty');
    const own = row.id === undefined || row.id === null ? undefined : String(row.id);
    return {
      id: own ?? `${stem(ctx.file)}#${ctx.row}`,
      format: 'researchqa',
      question: query,
      rubric,
      ...(ctx.split && { split: ctx.split }),
      source: { dataset: 'researchqa', file: ctx.file, row: ctx.row, ...(own && { id: own }) },
    };
  },
};
