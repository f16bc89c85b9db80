/**
 * Rows several commands share, one row per setting (issue 51: one word per setting), so its flag,
 * range and meaning are the same wherever it is given. A command whose setting means something else
 * (`--out`, `--model`) keeps a row of its own.
 */
import type { Setting } from '../schema.js';

/** eval, probe-judge: the first N items. */
export const LIMIT_ROW: Setting = {
  key: 'limit',
  flag: 'limit',
  type: 'integer',
  min: 1,
  default: null,
  meaning: 'First N items only; unset = all',
  source: 'lm-evaluation-harness --limit',
};

/** eval, probe-judge: the general rubric file. */
export const GENERAL_RUBRIC_ROW: Setting = {
  key: 'generalRubric',
  flag: 'general-rubric',
  type: 'path',
  default: null,
  values: 'a general rubric JSON',
  meaning: 'General rubric file; unset = data/general-rubric.json',
  source: 'paper: general rubric items (docs/design.md §6)',
};

/** eval, compare, leakage, build-data: how progress is shown (lib/data/progress.ts). */
export const PROGRESS_ROW: Setting = {
  key: 'progress',
  flag: 'progress',
  type: 'enum',
  choices: ['auto', 'plain', 'none'],
  default: 'auto',
  meaning: 'Progress on stderr: a bar on a TTY, plain lines without one or under CI=true, or none',
  source: 'tqdm disable / HF_HUB_DISABLE_PROGRESS_BARS',
};

/** leakage, build-data: the interval of plain progress lines. */
export const PROGRESS_INTERVAL_ROW: Setting = {
  key: 'progressInterval',
  flag: 'progress-interval',
  type: 'number',
  min: 0,
  exclusiveMin: true,
  default: 5,
  meaning: 'Seconds between plain progress lines (no TTY, or CI=true)',
  source: 'tqdm mininterval',
};

/** probe-judge, judge-agreement: JSON output. */
export const JSON_TABLE_ROW: Setting = {
  key: 'json',
  flag: 'json',
  type: 'boolean',
  default: false,
  meaning: 'Print JSON instead of a table',
  source: 'papergym-native',
};
