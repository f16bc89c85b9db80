/**
 * ResearchPlanGen (Goel et al., arXiv 2512.23707; `facebook/research-plan-gen`): Parquet,
 * `{config}/{split}/*.parquet` with configs `ml`, `arxiv`, `pubmed`. `Goal` → question,
 * `Reference solution` (with a space) → reference answer, `Rubric` (list of strings) → items of
 * weight 1; `q_id` → id (else `{config}/{file}#{row}`), `article_id` kept as the source id.
 */
import type { DatasetFormat } from './types.js';
import { list, optText, RowError, stem, text } from './read.js';

export const researchPlanGen: DatasetFormat = {
  name: 'research-plan-gen',
  describe: 'ResearchPlanGen (arXiv 2512.23707): Parquet {config}/{split}/*.parquet, Goal / Rubric / Reference solution',
  files: ['parquet', 'jsonl', 'json'],
  columns: ['Goal', 'Rubric'],
  protocol: 'research-plan-gen',
  prompt: 'plan',
  map(row, ctx) {
    const goal = text(row, 'Goal');
    const rubric = list(row, 'Rubric').map((r, k) => {
      if (typeof r !== 'string' || !r.trim()) throw new RowError(`Rubric[${k}] has no criterion text`);
      return { id: `r${k + 1}`, text: r, weight: 1 };
    });
    const ref = optText(row, 'Reference solution');
    const qid = row.q_id === undefined || row.q_id === null ? undefined : String(row.q_id);
    const article = row.article_id === undefined || row.article_id === null ? undefined : String(row.article_id);
    const prefix = ctx.config ? `${ctx.config}/` : '';
    return {
      id: qid ? `${prefix}${qid}` : `${prefix}${stem(ctx.file)}#${ctx.row}`,
      format: 'research-plan-gen',
      question: goal,
      ...(ref && { reference_answer: ref }),
      rubric,
      ...(ctx.split && { split: ctx.split }),
      source: { dataset: 'research-plan-gen', file: ctx.file, row: ctx.row, ...(ctx.config && { config: ctx.config }), ...(article && { id: article }) },
    };
  },
};
