/** Settings of `eval` (lib/config/settings.ts re-exports them; schema: lib/config/schema.ts). */
import type { Setting } from '../schema.js';
import { GENERAL_RUBRIC_ROW, LIMIT_ROW, PROGRESS_ROW } from './shared.js';
import { memoOn, registeredNames } from '../extensions.js';
import { DEFAULT_ALPHA } from '../reward.js';
import { judgeOptions } from './judge.js';
import { MODEL_OPTIONS } from './model.js';
import { SAMPLING_OPTIONS } from './sampling.js';

/** The eval paths' judge cache (lib/eval/run.ts evalJudgeCachePath): on by default, beside --out, never beside --data. */
export const EVAL_CACHE_MEANING = (kind: 'judge' | 'compare') =>
  `SQLite file caching judge answers by request hash (a killed run asks nothing twice); unset = <--out>.${kind}-cache.sqlite, without --out <per-user cache dir>/eval/<hash of the --data path>.${kind}-cache.sqlite` +
  (kind === 'judge' ? " (--suite: <--out>/judge-cache.sqlite); the local judge keeps each plan's verdicts there, keyed by its model's files" : '');

/** The judge settings of `eval`: judgeOptions() with the eval paths' default cache. */
export const evalJudgeOptions: () => readonly Setting[] = memoOn(
  () => [judgeOptions()],
  () => judgeOptions().map((o): Setting => (o.key === 'judgeCache' ? { ...o, meaning: EVAL_CACHE_MEANING('judge') } : o)),
);

export const EVAL_OPTIONS: readonly Setting[] = [
  ...MODEL_OPTIONS,
  {
    key: 'data',
    flag: 'data',
    type: 'path',
    default: null,
    values: 'a PaperGym JSONL or items written by `import` (required)',
    meaning: 'Benchmark items to evaluate',
    source: 'paper: evaluation benchmark (rubric coverage)',
  },
  {
    key: 'out',
    flag: 'out',
    type: 'path',
    default: null,
    values: 'a writable file',
    meaning: 'Per-item results JSONL (input of `report --eval`)',
    source: 'lm-evaluation-harness --log_samples',
  },
  {
    key: 'report',
    flag: 'report',
    type: 'path',
    default: null,
    values: 'a writable file',
    meaning: 'Report JSON (coverage with CIs, judge stats)',
    source: 'lm-evaluation-harness --output_path',
  },
  {
    key: 'plans',
    flag: 'plans',
    type: 'path',
    default: null,
    values: 'a writable file',
    meaning: 'Generated plans JSONL',
    source: 'lm-evaluation-harness --log_samples',
  },
  {
    key: 'split',
    flag: 'split',
    type: 'enum',
    choices: ['train', 'val', 'test'],
    default: null,
    meaning: 'Only items of this split; unset = all',
    source: 'datasets split',
  },
  LIMIT_ROW,
  { key: 'samples', flag: 'samples', type: 'integer', min: 1, default: 1, meaning: 'Plans per question', source: 'vLLM SamplingParams.n' },
  ...SAMPLING_OPTIONS,
  {
    key: 'general',
    flag: 'general',
    type: 'boolean',
    default: true,
    meaning: 'Also judge the general rubric items (--no-general to skip)',
    source: 'paper: general rubric items (docs/design.md §6)',
  },
  GENERAL_RUBRIC_ROW,
  {
    key: 'rewardAlpha',
    formerly: { flags: ['alpha'] },
    flag: 'reward-alpha',
    type: 'number',
    min: 0,
    max: 1,
    default: DEFAULT_ALPHA,
    meaning: 'Reward weight of the instance items',
    source: 'paper: reward mix, alpha = 0.7 (docs/design.md §6)',
  },
  {
    key: 'resamples',
    flag: 'resamples',
    type: 'integer',
    min: 0,
    default: 1000,
    meaning: 'Bootstrap resamples for the CIs (0 = no interval)',
    source: 'Efron & Tibshirani 1993 (percentile bootstrap)',
  },
  { key: 'seed', flag: 'seed', type: 'integer', min: 0, default: 0, meaning: 'Generation and bootstrap seed', source: 'vLLM SamplingParams.seed' },
  {
    key: 'chunk',
    flag: 'chunk',
    type: 'integer',
    min: 1,
    default: 8,
    meaning: 'Questions per generation call (judging overlaps the next chunk)',
    source: 'vLLM max_num_seqs',
  },
  {
    key: 'keepRaw',
    flag: 'keep-raw',
    type: 'boolean',
    default: false,
    meaning: "Keep the judge's raw answers in the rows",
    source: 'lm-evaluation-harness --log_samples',
  },
  {
    key: 'protocol',
    flag: 'protocol',
    type: 'enum',
    get choices() {
      return registeredNames('protocols', '--protocol choices');
    },
    default: null,
    meaning: "Scoring protocol (docs/eval.md); unset = the items' format's own (a PaperGym file: papergym); one that does not apply to the items is an error",
    source: "each benchmark's published scoring (lib/eval/protocols/)",
  },
  {
    key: 'protocolPrompt',
    flag: 'protocol-prompt',
    type: 'string',
    default: null,
    values: 'a prompt name under prompts/ (e.g. eval-criterion.v1)',
    meaning:
      "Judge prompt of the protocol's items; unset = the protocol's default, the authors' where it is public (HealthBench: eval-healthbench-grader.v1, simple-evals' grader); rows and summaries carry its name and hash",
    source: 'docs/eval.md (prompt sources)',
  },
  {
    key: 'suite',
    flag: 'suite',
    type: 'path',
    default: null,
    values: 'a suite YAML (benchmarks × models; docs/eval.md)',
    meaning:
      'Run several benchmarks for several models / adapters: one row per model, one column per benchmark, the average, bootstrap CIs, in --out DIR (suite.json, table.md, report.html); replaces --model / --data',
    source: 'paper: Table 1 layout',
  },
  {
    key: 'overwrite',
    flag: 'overwrite',
    type: 'boolean',
    default: false,
    meaning:
      "With --suite: write into an --out dir that already holds a suite's results (suite.json, table.md or rows), replacing them; without it such a dir is refused. --out unset = <suite file without .yaml>-results",
    source: 'lm-evaluation-harness / transformers overwrite_output_dir',
  },
  {
    key: 'rescore',
    flag: 'rescore',
    type: 'path',
    default: null,
    values: 'per-item rows JSONL (eval --out)',
    meaning: 'Recompute the score from recorded verdicts under --protocol, asking no judge (no --model / --data needed)',
    source: 'papergym-native (lib/eval/protocols/)',
  },
  PROGRESS_ROW,
];
