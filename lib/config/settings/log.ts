/**
 * Training config keys of logging and trackers (`log.*`), in docs order (lib/config/settings.ts assembles them).
 */
import type { Setting } from '../schema.js';
import { registeredNames } from '../extensions.js';

export const LOG_SETTINGS: readonly Setting[] = [
  {
    key: 'log.every',
    resumable: true,
    trl: [{ name: 'logging_steps', alias: true }],
    flag: 'log-every',
    type: 'integer',
    min: 1,
    max: 1e9,
    default: 1,
    meaning: 'Print a progress line every N steps (metrics.jsonl gets every step)',
    source: 'transformers TrainingArguments.logging_steps',
  },
  {
    key: 'log.profileStep',
    resumable: true,
    flag: 'profile-step',
    type: 'integer',
    min: 0,
    default: 0,
    meaning:
      'Profile the GPU kernels of this step of every stage (1-based; 0 = off; CUDA runs only): per phase, GPU busy time and time by kernel in <out>/profile/<stage>-step<N>.json (Kineto, the engine of torch.profiler; a phase that runs inside another phase counts in the outer one)',
    source: 'torch.profiler.profile (schedule: one active step)',
  },
  {
    key: 'log.reportTo',
    resumable: true,
    trl: [{ name: 'report_to', alias: true }],
    flag: 'report-to',
    type: 'list',
    items: 'string',
    get choices() {
      return [...registeredNames('trackers', '--report-to choices'), 'all', 'none'];
    },
    default: null,
    meaning:
      'Experiment trackers that get every metrics row, the resolved config as parameters and the final adapter and report as artifacts (docs/trackers.md); a failing tracker warns and training continues; unset / none = metrics.jsonl and report.html only',
    source: 'transformers TrainingArguments.report_to (TRL)',
  },
];
