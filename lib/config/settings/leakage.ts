/** Settings of `leakage` (lib/config/settings.ts re-exports them; schema: lib/config/schema.ts). */
import type { Setting } from '../schema.js';
import { PROGRESS_INTERVAL_ROW, PROGRESS_ROW } from './shared.js';
import { memoOn } from '../extensions.js';
import { judgeKindsWithMembers } from '../judge.js';
import { judgeOptions } from './judge.js';

export const LEAKAGE_OPTIONS: readonly Setting[] = [
  {
    key: 'data',
    flag: 'data',
    type: 'list',
    items: 'string',
    repeatable: true,
    default: null,
    values: 'PaperGym or imported items JSONL, one or more (required)',
    meaning: 'Datasets to audit, any imported format (chat prompts read as text); several give one table row each',
    source: 'paper: leakage audit across datasets (Table 3; docs/design.md §7)',
  },
  {
    key: 'llm',
    flag: 'llm',
    type: 'string',
    default: null,
    values: 'http(s)://host:port/v1',
    meaning: 'OpenAI-compatible base URL of the judge; unset = the lexical proxy only',
    source: 'OpenAI API base_url',
  },
  { key: 'model', flag: 'model', type: 'string', default: null, values: 'a served model name', meaning: 'Judge model name', source: 'OpenAI API model' },
  {
    key: 'state',
    flag: 'state',
    type: 'path',
    default: null,
    values: 'a SQLite file',
    meaning: 'Cache of judge calls; unset = <per-user cache dir>/leakage/<hash of the dataset path>.sqlite',
    source: 'papergym-native (docs/design.md §7)',
  },
  {
    key: 'threshold',
    flag: 'threshold',
    type: 'number',
    min: 0,
    max: 1,
    default: 0.6,
    meaning: 'Lexical-overlap threshold of the proxy',
    source: 'papergym-native (lib/data/leakage.ts)',
  },
  {
    key: 'out',
    flag: 'out',
    type: 'path',
    default: null,
    values: 'a writable file',
    meaning: 'Write the full per-item report as JSON',
    source: 'papergym-native',
  },
  { key: 'json', flag: 'json', type: 'boolean', default: false, meaning: 'Print the report as JSON', source: 'papergym-native' },
  {
    key: 'concurrency',
    flag: 'concurrency',
    type: 'integer',
    min: 1,
    default: 8,
    meaning: 'Max judge requests in flight',
    source: 'vLLM benchmark --max-concurrency',
  },
  {
    key: 'judgeConcurrency',
    flag: 'judge-concurrency',
    type: 'integer',
    min: 1,
    default: null,
    meaning: 'Max judge requests in flight, under the name eval and compare use; unset = --concurrency',
    source: 'vLLM benchmark --max-concurrency',
  },
  {
    key: 'timeout',
    flag: 'timeout',
    type: 'number',
    min: 0,
    exclusiveMin: true,
    default: 120,
    meaning: 'Per-request timeout in seconds',
    source: 'OpenAI client timeout',
  },
  {
    key: 'strict',
    flag: 'strict',
    type: 'boolean',
    default: false,
    meaning: 'Fail on invalid dataset rows instead of skipping them',
    source: 'papergym-native (docs/data.md)',
  },
  PROGRESS_ROW,
  PROGRESS_INTERVAL_ROW,
];

/**
 * `leakage`'s options: {@link LEAKAGE_OPTIONS} and, for a jury instead of --llm/--model
 * (bin/commands/leakage.ts), the judge options' `--judge` (taking jury only), `--judges`,
 * `--judge-aggregation`, `--jury-on-member-failure` and `--judge-max-null-rate` rows. Read after the
 * registries loaded, as {@link judgeOptions}.
 */
export const leakageOptions: () => readonly Setting[] = memoOn(
  () => [judgeOptions()],
  () => [
    ...LEAKAGE_OPTIONS,
    {
      ...judgeOptions().find((o) => o.key === 'judge')!,
      choices: judgeKindsWithMembers(),
      default: null,
      meaning: 'jury: judge each rubric item by the members of --judges (http each) instead of one --llm/--model judge; unset = --llm',
    },
    ...judgeOptions().filter((o) => ['judgeJudges', 'judgeAggregation', 'judgeOnMemberFailure', 'judgeMaxNullRate'].includes(o.key)),
  ],
);
