/**
 * The `--judge*` command-line options of eval and probe-judge (and of `train`, through the training
 * settings): the judge settings of lib/config/judge.ts as yargs options, and back from parsed flags
 * to a {@link JudgeConfig}. The judges themselves open through lib/judge/backends/.
 */
import type { Argv } from 'yargs';
import { JUDGE_DEFAULTS, judgeSettings, type JudgeConfig } from '../lib/config/judge.js';
import { judgeOptions } from '../lib/config/settings.js';
import { addSettings, parseList } from '../lib/config/schema.js';

/** Judge options as parsed by {@link addJudgeOptions} (camelCase yargs keys). */
export interface JudgeArgs {
  judge: JudgeConfig['kind'];
  judgeUrl?: string;
  judgeModel?: string;
  judgeMode: 'per-item' | 'per-plan';
  judgeConcurrency: number;
  judgeCache?: string;
  judgeTimeoutMs: number;
  judgeMaxRetries: number;
  judgeMaxTokens?: number;
  judgeNoThink: boolean;
  judgeBatch: number;
  judgeVariants?: 'pair' | 'all';
  judgeScoring: 'sequence-logprobs' | 'forward-logits';
  judgeScore: 'binary' | 'prob';
  judgeMaxNullRate: number;
}

const camel = (flag: string) => flag.replace(/-([a-z])/g, (_m, c: string) => c.toUpperCase());

/**
 * Adds the `--judge*` options (judgeOptions(): the one judge schema, with the registered backends' own rows) to a yargs builder. `defaults`:
 * the values flags take when not given (eval: kind http and {@link JUDGE_DEFAULTS}; an object
 * overrides some); `false` gives no defaults, so that only flags actually given override a config
 * file (train).
 */
export function addJudgeOptions<T>(y: Argv<T>, opts: { defaults?: Partial<JudgeConfig> | false } = {}): Argv<T & JudgeArgs> {
  const over = opts.defaults || {};
  const options = judgeOptions();
  const settings = judgeSettings().map((j, i) => ({ ...options[i]!, ...(j.key in over ? { default: over[j.key as keyof JudgeConfig] } : {}) }));
  return addSettings(y, settings, { withDefaults: opts.defaults !== false }) as unknown as Argv<T & JudgeArgs>;
}

/** The judge settings given on the command line (only flags that were given), as config keys. */
export function judgeFlagsToConfig(argv: Record<string, unknown>): Partial<JudgeConfig> {
  const out: Record<string, unknown> = {};
  for (const st of judgeSettings()) {
    const v = argv[camel(st.flag)] ?? argv[st.flag];
    if (v !== undefined) out[st.key] = st.type === 'list' ? parseList(st, v) : v;
  }
  return out as Partial<JudgeConfig>;
}

/** Full judge settings from parsed CLI options over `base` (default {@link JUDGE_DEFAULTS}). */
export function judgeConfigFromArgs(argv: Partial<JudgeArgs> | Record<string, unknown>, base: JudgeConfig = JUDGE_DEFAULTS): JudgeConfig {
  return { ...base, ...judgeFlagsToConfig(argv as Record<string, unknown>) } as JudgeConfig;
}

/** The jury's own flags, with their camelCase keys and defaults. */
const JURY_FLAGS = [
  { flag: '--judges', key: 'judges', byDefault: JUDGE_DEFAULTS.judges as unknown },
  { flag: '--judge-aggregation', key: 'judgeAggregation', byDefault: JUDGE_DEFAULTS.aggregation as unknown },
  { flag: '--jury-on-member-failure', key: 'juryOnMemberFailure', byDefault: JUDGE_DEFAULTS.juryOnMemberFailure as unknown },
] as const;

/**
 * The jury flags given (`--judges`, `--judge-aggregation`, `--jury-on-member-failure`): present in
 * `raw` (the process's arguments; camelCase spellings too), or holding a value other than their
 * default in `argv`. compare and leakage refuse them without `--judge jury` instead of ignoring them.
 */
export function juryFlagsGiven(argv: Record<string, unknown>, raw: string[] = process.argv.slice(2)): string[] {
  return JURY_FLAGS.filter(({ flag, key, byDefault }) => {
    const spellings = [flag, `--${key}`];
    if (raw.some((r) => spellings.some((s) => r === s || r.startsWith(`${s}=`)))) return true;
    const v = argv[key];
    return v !== undefined && v !== null && v !== byDefault;
  }).map((f) => f.flag);
}

/** The error for jury flags given without `--judge jury` (`use`: the command; `got`: what was given instead). */
export function juryFlagsError(use: string, flags: string[], got: string): Error {
  return new Error(`${use}: ${flags.join(', ')} ${flags.length > 1 ? 'need' : 'needs'} --judge jury (${got}); without it they would be ignored`);
}
