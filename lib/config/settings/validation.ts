/**
 * Training config keys of validation and the best state (`validation.*`), in docs order (lib/config/settings.ts assembles them).
 */
import type { Setting } from '../schema.js';

export const VALIDATION_SETTINGS: readonly Setting[] = [
  // ---- validation, checkpoints, logging ----
  {
    key: 'validation.validateEvery',
    formerly: { keys: ['validation.every'] },
    resumable: true,
    trl: [{ name: 'eval_steps', alias: true }],
    flag: 'validate-every',
    type: 'integer',
    min: 0,
    max: 1e9,
    default: 4,
    meaning: 'Validate every N stage steps (greedy plans on val items, mean r_spec; 0 = never)',
    source: 'transformers TrainingArguments.eval_steps',
  },
  {
    key: 'validation.items',
    formerly: { keys: ['validation.maxItems'] },
    flag: 'validation-items',
    type: 'integer',
    min: 0,
    default: 2,
    meaning: 'Validation items used (the first N of split val; 0 = no validation)',
    source: 'transformers eval_dataset (subset)',
  },
  {
    key: 'validation.earlyStopThreshold',
    formerly: { keys: ['validation.minImprovement'] },
    flag: 'early-stop-threshold',
    type: 'number',
    min: 0,
    default: 0,
    meaning:
      'A validation is a new best only when its score beats the best by more than this; every other validation counts toward --early-stop-patience (lib/train/validation.ts)',
    source: 'transformers EarlyStoppingCallback.early_stopping_threshold',
  },
  {
    key: 'validation.loadBestAtEnd',
    flag: 'load-best-at-end',
    type: 'boolean',
    default: true,
    meaning:
      "Keep the adapter of each stage's best validation in <run>/best/<stage>/ and continue from it when the stage ends (the next stage, or final/, starts from the best state, not the last)",
    source: 'transformers TrainingArguments.load_best_model_at_end / metric_for_best_model',
  },
];
