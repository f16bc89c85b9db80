/** Settings of `import` (lib/config/settings.ts re-exports them; schema: lib/config/schema.ts). */
import type { Setting } from '../schema.js';
import { registeredNames } from '../extensions.js';

export const IMPORT_OPTIONS: readonly Setting[] = [
  {
    key: 'format',
    flag: 'format',
    type: 'enum',
    get choices() {
      return registeredNames('formats', 'import --format choices');
    },
    default: null,
    meaning: 'Published format of the input (required; docs/data.md "Importing published benchmarks")',
    source: "the datasets' published schemas (lib/eval/formats/)",
  },
  {
    key: 'input',
    flag: 'input',
    type: 'path',
    default: null,
    values: 'a .json / .jsonl / .parquet file or a directory of them, or a Hub dataset hf://datasets/org/name[@revision][/path] (required)',
    meaning:
      'Published files; a directory is searched (Hub layout {config}/{split}/*.parquet, data/{split}-*.parquet); a Hub dataset fetches the files of --config / --split into the huggingface_hub cache (docs/hub.md)',
    source: 'Hugging Face Hub dataset layout; datasets load_dataset("hf://…")',
  },
  {
    key: 'revision',
    flag: 'revision',
    type: 'string',
    default: null,
    values: 'a branch, tag or commit sha',
    meaning: 'Revision of an hf://datasets/ input (unset = main)',
    source: 'datasets load_dataset(revision)',
  },
  {
    key: 'out',
    flag: 'out',
    type: 'path',
    default: null,
    values: 'a writable JSONL file (required)',
    meaning: 'Imported items (one benchmark item per line; input of eval, compare, leakage)',
    source: 'papergym-native (lib/data/schema.ts benchmarkItemJsonSchema)',
  },
  {
    key: 'config',
    flag: 'config',
    type: 'string',
    default: null,
    values: 'a dataset config name (ml, arxiv, pubmed, …)',
    meaning: 'Only files under this config directory',
    source: 'datasets load_dataset name',
  },
  {
    key: 'split',
    flag: 'split',
    type: 'string',
    default: null,
    values: 'train | test | valid | …',
    meaning: 'Only files of this split (directory or file-name prefix); also the split recorded on the items',
    source: 'datasets load_dataset split',
  },
  { key: 'limit', flag: 'limit', type: 'integer', min: 1, default: null, meaning: 'Write only the first N items', source: 'lm-evaluation-harness --limit' },
];
