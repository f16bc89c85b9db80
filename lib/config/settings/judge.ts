/** Settings of the judge options of eval, probe-judge and judge-agreement (lib/config/settings.ts re-exports them; schema: lib/config/schema.ts). */
import type { Setting } from '../schema.js';
import { GENERAL_RUBRIC_ROW, JSON_TABLE_ROW, LIMIT_ROW } from './shared.js';
import { memoOn } from '../extensions.js';
import { judgeSettings } from '../judge.js';
import { DEVICE_AUTO } from './model.js';

/**
 * The `--judge*` options of eval and probe-judge (bin/judge-options.ts JudgeArgs reads them): the
 * judge settings of {@link judgeSettings} (in its order, one option per row) under their camelCase
 * option names, with the http judge as the default kind. A new judge option is one more core row
 * in lib/config/judge.ts, or a row of the backend that reads it.
 */
export const judgeOptions: () => readonly Setting[] = memoOn(
  () => [judgeSettings()],
  () =>
    judgeSettings().map((j) => ({
      ...j,
      key: j.key === 'kind' ? 'judge' : `judge${j.key[0]!.toUpperCase()}${j.key.slice(1)}`,
      label: `judge.${j.key}`,
      // A command option's former names are flags only (its key is the camelCase option name).
      formerly: j.formerly?.flags ? { flags: j.formerly.flags } : undefined,
      ...(j.key === 'kind' ? { default: 'http' } : {}),
    })),
);

export const PROBE_JUDGE_OPTIONS: readonly Setting[] = [
  {
    key: 'data',
    flag: 'data',
    type: 'path',
    default: null,
    values: 'a PaperGym JSONL (required)',
    meaning: 'Items whose rubrics the adversarial plans are judged against',
    source: 'paper: rubric items (docs/design.md §7)',
  },
  {
    key: 'model',
    flag: 'model',
    type: 'path',
    default: null,
    values: 'a Qwen3 checkpoint dir, or a Hub id org/name[@revision] (docs/hub.md)',
    meaning: '--judge local: the judge model (the base; adapter off)',
    source: 'transformers from_pretrained',
  },
  {
    key: 'attacks',
    flag: 'attacks',
    type: 'list',
    items: 'string',
    choices: ['restate', 'keywords', 'inject', 'empty', 'echo'],
    default: ['restate', 'keywords', 'inject', 'empty'],
    meaning: 'Adversarial plans to judge: restated question, keyword stuffing, grader injection, empty plan, echoed rubric',
    source: 'reward-hacking probes (docs/design.md §8)',
  },
  LIMIT_ROW,
  {
    key: 'general',
    flag: 'general',
    type: 'boolean',
    default: false,
    meaning: 'Also judge the general rubric items',
    source: 'paper: general rubric items (docs/design.md §6)',
  },
  GENERAL_RUBRIC_ROW,
  {
    key: 'out',
    flag: 'out',
    type: 'path',
    default: null,
    values: 'a writable file',
    meaning: 'Write the JSON report here',
    source: 'lm-evaluation-harness --output_path',
  },
  JSON_TABLE_ROW,
  {
    key: 'device',
    flag: 'device',
    type: 'string',
    default: 'auto',
    pattern: DEVICE_AUTO,
    values: 'auto | cpu | cuda | cuda:N',
    meaning: '--judge local: device; auto = cuda when the addon sees a GPU, else cpu',
    source: 'transformers device_map',
  },
  {
    key: 'dtype',
    flag: 'dtype',
    type: 'enum',
    choices: ['float32', 'bfloat16', 'float16'],
    default: null,
    meaning: '--judge local: weight dtype; unset = bfloat16 on CUDA, float32 on CPU',
    source: 'transformers torch_dtype',
  },
];

/** `judge-agreement` (bin/commands/judge-agreement.ts); the judges come from --judges (a YAML list, lib/config/judge.ts). */
export const JUDGE_AGREEMENT_OPTIONS: readonly Setting[] = [
  {
    key: 'data',
    flag: 'data',
    type: 'path',
    default: null,
    values: 'a PaperGym JSONL (required unless --rows)',
    meaning: 'Items whose rubric items every judge decides',
    source: 'paper: rubric items (docs/design.md §7)',
  },
  {
    key: 'plans',
    flag: 'plans',
    type: 'path',
    default: null,
    values: 'plans JSONL (required): {questionId, sample?, plan} per line, as eval --plans writes',
    meaning: 'The plans every judge grades',
    source: 'papergym-native eval --plans',
  },
  {
    key: 'labels',
    flag: 'labels',
    type: 'path',
    default: null,
    values: 'labels JSONL: {questionId, sample?, itemId, label: true | false} per line',
    meaning: "People's verdicts: each judge's agreement, precision, recall and F1 against them",
    source: "HealthBench meta-eval (grader vs physicians' labels)",
  },
  {
    key: 'rows',
    flag: 'rows',
    type: 'list',
    items: 'string',
    repeatable: true,
    default: null,
    values: '[name=]rows.jsonl, two or more (eval --out of the same items, one judge each)',
    meaning:
      "Agreement of recorded verdicts instead of asking --judges: Cohen's and Fleiss' κ and Krippendorff's α; ResearchQA rows (five levels) also ordinal and nominal α over the levels",
    source: "Krippendorff 2011 (α); the eval rows' verdicts",
  },
  {
    key: 'model',
    flag: 'model',
    type: 'path',
    default: null,
    values: 'a Qwen3 checkpoint dir, or a Hub id org/name[@revision] (docs/hub.md)',
    meaning: 'Local judges in --judges: the judge model (the base; adapter off)',
    source: 'transformers from_pretrained',
  },
  {
    key: 'out',
    flag: 'out',
    type: 'path',
    default: null,
    values: 'a writable file',
    meaning: 'Write the JSON report (agreement, per-member health, stats) here',
    source: 'lm-evaluation-harness --output_path',
  },
  {
    key: 'resamples',
    flag: 'resamples',
    type: 'integer',
    min: 0,
    default: 1000,
    meaning: 'Bootstrap resamples (clusters: questions); 0 = no interval',
    source: 'scipy.stats.bootstrap n_resamples',
  },
  { key: 'seed', flag: 'seed', type: 'integer', min: 0, default: 0, meaning: 'Bootstrap seed', source: 'numpy random seed' },
  JSON_TABLE_ROW,
  {
    key: 'device',
    flag: 'device',
    type: 'string',
    default: 'auto',
    pattern: DEVICE_AUTO,
    values: 'auto | cpu | cuda | cuda:N',
    meaning: 'Local judges: device; auto = cuda when the addon sees a GPU, else cpu',
    source: 'transformers device_map',
  },
  {
    key: 'dtype',
    flag: 'dtype',
    type: 'enum',
    choices: ['float32', 'bfloat16', 'float16'],
    default: null,
    meaning: 'Local judges: weight dtype; unset = bfloat16 on CUDA, float32 on CPU',
    source: 'transformers torch_dtype',
  },
];
