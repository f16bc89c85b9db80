/** Settings of `compare` (lib/config/settings.ts re-exports them; schema: lib/config/schema.ts). */
import type { Setting } from '../schema.js';
import { PROGRESS_ROW } from './shared.js';
import { memoOn, registeredJudgeBackends } from '../extensions.js';
import { JUDGE_DEFAULTS, type JudgeConfig } from '../judge.js';
import { EVAL_CACHE_MEANING } from './eval.js';
import { judgeOptions } from './judge.js';

/**
 * `compare`'s options: {@link COMPARE_OPTIONS} and the judge options its N-way choice reads — one
 * OpenAI-compatible judge (`--judge http`, the default) or a jury of them (`--judge jury`). The
 * local judge's rows (`--judge-batch`, `--judge-scoring`) and the rubric verdict's (`--judge-mode`,
 * `--judge-variants`, `--judge-score`) are not offered: compare never reads them, and a strict parse
 * names them as unknown instead of ignoring them. Read after the registries loaded, as {@link judgeOptions}.
 */
export const compareOptions: () => readonly Setting[] = memoOn(
  () => [judgeOptions()],
  () => [
    ...COMPARE_OPTIONS,
    ...judgeOptions()
      .filter((o) => !['judgeMode', 'judgeBatch', 'judgeVariants', 'judgeScoring', 'judgeScore'].includes(o.key))
      .map((o): Setting => {
        if (o.key === 'judge')
          return {
            ...o,
            choices: registeredJudgeBackends()
              .filter((b) => b.hasMembers || b.answersFreeForm?.({ ...JUDGE_DEFAULTS, kind: b.kind as JudgeConfig['kind'] }))
              .map((b) => b.kind),
            meaning: 'Judge of the N-way choice: an OpenAI-compatible endpoint, or a jury of them (--judges); a local judge gives only yes/no verdicts',
          };
        if (o.key === 'judgeMaxTokens') return { ...o, meaning: 'http: max answer tokens of a choice; unset = 512' };
        if (o.key === 'judgeCache') return { ...o, meaning: EVAL_CACHE_MEANING('compare') };
        if (o.key === 'judgeMaxNullRate')
          return {
            ...o,
            meaning:
              'Write no win rate when more than this fraction of the judgements is null (failed requests, unreadable replies; with a jury, no readable member choice); a jury member also fails (stop) or is left out (continue) past it over its own answers (its maxNullRate in --judges wins)',
          };
        return o;
      }),
  ],
);

export const COMPARE_OPTIONS: readonly Setting[] = [
  {
    key: 'data',
    flag: 'data',
    type: 'path',
    default: null,
    values: 'items JSONL (PaperGym or written by import; required)',
    meaning: 'The questions the plans answer',
    source: 'paper: Table 2 win rates',
  },
  {
    key: 'plans',
    flag: 'plans',
    type: 'list',
    items: 'string',
    repeatable: true,
    default: null,
    values: '[name=]plans.jsonl, two or more (eval --plans)',
    meaning: 'One plans file per system; questions with a plan in every file are compared',
    source: 'paper: Table 2 (three-way win rate)',
  },
  {
    key: 'out',
    flag: 'out',
    type: 'path',
    default: null,
    values: 'a writable file',
    meaning: 'Every judgement (question, candidate order, winner, position) as JSONL',
    source: 'lm-evaluation-harness --log_samples',
  },
  {
    key: 'report',
    flag: 'report',
    type: 'path',
    default: null,
    values: 'a writable file',
    meaning: 'Win rates with CIs, ties, unreadable replies and the position bias as JSON',
    source: 'lm-evaluation-harness --output_path',
  },
  {
    key: 'resamples',
    flag: 'resamples',
    type: 'integer',
    min: 0,
    default: 1000,
    meaning: 'Bootstrap resamples (questions) for the win-rate CIs',
    source: 'Efron & Tibshirani 1993 (percentile bootstrap)',
  },
  { key: 'seed', flag: 'seed', type: 'integer', min: 0, default: 0, meaning: 'Bootstrap seed', source: 'numpy default_rng seed' },
  {
    key: 'winRate',
    flag: 'win-rate',
    type: 'enum',
    choices: ['choice', 'arena-hard'],
    default: 'choice',
    meaning:
      "choice: the N-way pick over every candidate order (the paper's Table 2); arena-hard: two systems (baseline first) judged on Arena-Hard's five-label scale in both positions, its score (a strong verdict counts 3, ties half, 100-round bootstrap) and AlpacaEval 2's length-controlled win rate beside the raw one",
    source: 'lmarena arena-hard-auto show_result.py; AlpacaEval 2 (arXiv 2404.04475)',
  },
  {
    key: 'keepRaw',
    flag: 'keep-raw',
    type: 'boolean',
    default: false,
    meaning: "Keep the judge's raw replies in --out",
    source: 'lm-evaluation-harness --log_samples',
  },
  PROGRESS_ROW,
];
