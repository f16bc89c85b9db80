/** Settings of `subset` (lib/config/settings.ts re-exports them; schema: lib/config/schema.ts). */
import type { Setting } from '../schema.js';

export const SUBSET_OPTIONS: readonly Setting[] = [
  {
    key: 'data',
    flag: 'data',
    type: 'path',
    default: null,
    values: 'a PaperGym JSONL (required)',
    meaning: 'Items to draw subsets from',
    source: 'paper: Figure 3 data scaling',
  },
  {
    key: 'sizes',
    flag: 'sizes',
    type: 'list',
    items: 'number',
    default: null,
    values: 'sizes, e.g. 500,1000,2000,5000,10000,15000 (required)',
    meaning: 'Subset sizes; each subset contains the smaller ones',
    source: 'paper: Figure 3 (0.5k → 15k items)',
  },
  { key: 'seed', flag: 'seed', type: 'string', default: 'papergym', values: 'any string', meaning: 'Seed of the item order', source: 'datasets shuffle seed' },
  {
    key: 'outDir',
    flag: 'out-dir',
    type: 'path',
    default: null,
    values: 'a directory (required)',
    meaning: 'Where <name>-<size>.jsonl and subsets.json are written',
    source: 'papergym-native',
  },
  {
    key: 'domainMix',
    flag: 'domain-mix',
    type: 'string',
    default: null,
    values: 'DOMAIN=SHARE,...',
    meaning: "Keep every subset at this domain mix (items' source.domain)",
    source: 'paper: corpus about 50% CS, 25% physics, 25% economics',
  },
  {
    key: 'split',
    flag: 'split',
    type: 'enum',
    choices: ['train', 'val', 'test'],
    default: null,
    meaning: 'Draw only items of this split (unset: all)',
    source: 'datasets split',
  },
];
