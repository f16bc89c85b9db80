/**
 * Training config keys of the SFT baseline stage (`sft.*`), in docs order (lib/config/settings.ts assembles them).
 */
import type { Setting } from '../schema.js';

export const SFT_SETTINGS: readonly Setting[] = [
  // ---- SFT baseline ----
  {
    key: 'sft.steps',
    trl: [{ name: 'max_steps' }],
    flag: 'sft-steps',
    type: 'integer',
    min: 0,
    max: 1e9,
    default: 8,
    meaning: 'Optimizer steps of the SFT stage (0 = skip the stage)',
    source: 'TRL SFTConfig.max_steps; paper: SFT baseline',
  },
  {
    key: 'sft.lr',
    trl: [{ name: 'learning_rate' }],
    flag: 'sft-lr',
    type: 'number',
    min: 0,
    exclusiveMin: true,
    default: 1e-3,
    meaning: 'Peak learning rate of the SFT stage',
    source: 'TRL SFTConfig.learning_rate',
  },
  {
    key: 'sft.batchSize',
    flag: 'sft-batch-size',
    type: 'integer',
    min: 1,
    max: 65536,
    default: 2,
    meaning: 'Reference answers per SFT step (cross-entropy, token mean over the batch)',
    source: 'TRL SFTConfig.per_device_train_batch_size',
  },
  {
    key: 'sft.batchSizePerRank',
    trl: [{ name: 'per_device_train_batch_size' }],
    flag: 'sft-batch-size-per-rank',
    type: 'integer',
    min: 1,
    max: 65536,
    default: null,
    meaning:
      'Reference answers per SFT step per process: the global batch (sft.batchSize, recorded so in config.json) becomes this × the world size, so more processes train on more answers per step; unset = sft.batchSize is the global batch, split over the processes. Give one of the two',
    source: 'TRL SFTConfig.per_device_train_batch_size (global = per device × processes)',
  },
];
