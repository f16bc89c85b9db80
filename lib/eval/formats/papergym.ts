/**
 * PaperGym items (this project's format, lib/data/schema.ts; PaperGym-Innov / -Design are not
 * public): JSONL rows validated as PaperGym items; question, reference answer and split as they
 * are, rubric items with weight 1 and their dimension (lib/data/schema.ts paperGymToBenchmark).
 */
import { PAPERGYM_FORMAT, paperGymToBenchmark, validateItem } from '../../data/schema.js';
import type { DatasetFormat } from './types.js';
import { RowError } from './read.js';

export const papergym: DatasetFormat = {
  name: PAPERGYM_FORMAT,
  describe: 'PaperGym items (this project, lib/data/schema.ts): JSONL',
  files: ['jsonl', 'json'],
  columns: ['question', 'rubric', 'reference_answer'],
  protocol: 'papergym',
  prompt: 'plan',
  map(row, ctx) {
    const v = validateItem(row);
    if (!v.ok) throw new RowError(`not a PaperGym item: ${v.errors.join('; ')}`);
    return paperGymToBenchmark(v.item!, ctx.file, ctx.row);
  },
};
