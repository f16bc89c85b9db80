/**
 * Training config keys of checkpoints (`checkpoint.*`), in docs order (lib/config/settings.ts assembles them).
 */
import type { Setting } from '../schema.js';

export const CHECKPOINT_SETTINGS: readonly Setting[] = [
  {
    key: 'checkpoint.every',
    resumable: true,
    trl: [{ name: 'save_steps', alias: true }],
    flag: 'checkpoint-every',
    type: 'integer',
    min: 0,
    max: 1e9,
    default: 4,
    meaning: 'Checkpoint every N stage steps (also at the end of the run and on SIGINT; 0 = only then); report.html is rewritten at each checkpoint',
    source: 'transformers TrainingArguments.save_steps',
  },
  {
    key: 'checkpoint.saveTotalLimit',
    resumable: true,
    trl: [{ name: 'save_total_limit', alias: true }],
    flag: 'save-total-limit',
    type: 'integer',
    min: 1,
    default: null,
    meaning: 'Keep only the last N checkpoints (older step-* dirs are deleted after a new one is complete); unset = keep all',
    source: 'transformers TrainingArguments.save_total_limit',
  },
  {
    key: 'checkpoint.background',
    resumable: true,
    flag: 'checkpoint-background',
    type: 'boolean',
    default: true,
    meaning:
      'Write periodic checkpoints beside the next step: the step pays only the copy of the adapter, optimizer and snapshots into host memory (pinned on CUDA); a worker thread writes, syncs and commits them atomically while training goes on (false: written in the step, as before)',
    source: 'papergym-native (issue 36; the torch.distributed.checkpoint async_save pattern)',
  },
];
