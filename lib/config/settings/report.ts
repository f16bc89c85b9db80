/** Settings of `report` (lib/config/settings.ts re-exports them; schema: lib/config/schema.ts). */
import type { Setting } from '../schema.js';

export const REPORT_OPTIONS: readonly Setting[] = [
  {
    key: 'out',
    flag: 'out',
    type: 'path',
    default: 'report.html',
    values: 'a writable .html file',
    meaning: 'Report file; plots go to NAME-plots/ beside it (NAME = the file name without .html) as SVG and PNG',
    source: 'TensorBoard / W&B report export',
  },
  {
    key: 'eval',
    flag: 'eval',
    type: 'list',
    items: 'string',
    repeatable: true,
    default: null,
    values: '[label=]rows.jsonl',
    meaning: 'Eval per-item rows (eval --out) to show: coverage with CIs; the first is compared with each other one by a paired bootstrap',
    source: 'Koehn 2004 (paired bootstrap resampling)',
  },
  {
    key: 'data',
    flag: 'data',
    type: 'path',
    default: null,
    values: 'a PaperGym JSONL',
    meaning: 'Dataset whose rubric texts label the hardest items',
    source: 'paper: rubric items (docs/design.md §7)',
  },
  {
    key: 'png',
    flag: 'png',
    type: 'boolean',
    default: true,
    meaning: 'Also write each plot as PNG (--no-png for SVG only)',
    source: 'matplotlib savefig formats',
  },
  {
    key: 'resamples',
    flag: 'resamples',
    type: 'integer',
    min: 0,
    default: 1000,
    meaning: 'Bootstrap resamples for eval CIs',
    source: 'Efron & Tibshirani 1993',
  },
  { key: 'title', flag: 'title', type: 'string', default: null, values: 'any text', meaning: 'Report title; unset = the run names', source: 'papergym-native' },
];
