/**
 * One definition of the judge options, shared by `eval`, `train` (CLI flags and the YAML `judge:`
 * section), `probe-judge` and the library: {@link JudgeConfig}. `--judge http` needs `--judge-url`
 * and `--judge-model`; `--judge local` needs a loaded model (the caller passes it — the frozen base
 * of the policy, adapter off). {@link checkJudge} is the start-up check (a real chat request, so a
 * URL answering 404 fails here, before any compute), {@link assertJudgeHealth} the null-rate stop.
 */
import type { Argv } from 'yargs';
import { createHttpJudge, type HttpJudge } from './http.js';
import { LlmClient, LlmLengthError } from '../llm/client.js';
import { JUDGE_DEFAULTS, type JudgeConfig } from './config.js';
import { JUDGE_OPTIONS, JUDGE_SETTINGS } from '../config/settings.js';
import { addSettings } from '../config/schema.js';

export { JUDGE_DEFAULTS, judgeConfigProblems, type JudgeConfig } from './config.js';
export { assertJudgeHealth, formatHealth } from './types.js';

/** Judge options as parsed by {@link addJudgeOptions} (camelCase yargs keys). */
export interface JudgeArgs {
  judge: 'http' | 'local';
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
 * Adds the `--judge*` options (lib/config/settings.ts JUDGE_OPTIONS: the one judge schema) to a
 * yargs builder. `defaults`: the values flags take when not given (eval: kind http and
 * {@link JUDGE_DEFAULTS}; an object overrides some); `false` gives no defaults, so that only flags
 * actually given override a config file (train).
 */
export function addJudgeOptions<T>(y: Argv<T>, opts: { defaults?: Partial<JudgeConfig> | false } = {}): Argv<T & JudgeArgs> {
  const over = opts.defaults || {};
  const settings = JUDGE_SETTINGS.map((j, i) => ({ ...JUDGE_OPTIONS[i]!, ...(j.key in over ? { default: over[j.key as keyof JudgeConfig] } : {}) }));
  return addSettings(y, settings, { withDefaults: opts.defaults !== false }) as unknown as Argv<T & JudgeArgs>;
}

/** The judge settings given on the command line (only flags that were given), as config keys. */
export function judgeFlagsToConfig(argv: Record<string, unknown>): Partial<JudgeConfig> {
  const out: Record<string, unknown> = {};
  for (const { flag, key } of JUDGE_SETTINGS) {
    const v = argv[camel(flag)] ?? argv[flag];
    if (v !== undefined) out[key] = v;
  }
  return out as Partial<JudgeConfig>;
}

/** Full judge settings from parsed CLI options over `base` (default {@link JUDGE_DEFAULTS}). */
export function judgeConfigFromArgs(argv: Partial<JudgeArgs> | Record<string, unknown>, base: JudgeConfig = JUDGE_DEFAULTS): JudgeConfig {
  return { ...base, ...judgeFlagsToConfig(argv as Record<string, unknown>) };
}

/** `chat_template_kwargs` body of the no-think switch. */
function extraBodyOf(c: Pick<JudgeConfig, 'noThink'>): Record<string, unknown> | undefined {
  return c.noThink ? { chat_template_kwargs: { enable_thinking: false } } : undefined;
}

/** An HTTP judge from settings (disposable: close it, or `using`); throws when url or model is missing. */
export function httpJudgeFromConfig(c: JudgeConfig): HttpJudge {
  if (!c.url || !c.model) throw new Error('--judge http needs --judge-url and --judge-model');
  return createHttpJudge({
    url: c.url,
    model: c.model,
    mode: c.mode,
    concurrency: c.concurrency,
    cachePath: c.cache ?? undefined,
    timeoutMs: c.timeoutMs,
    maxRetries: c.maxRetries,
    maxTokens: c.maxTokens ?? undefined,
    extraBody: extraBodyOf(c),
    logprobs: c.score === 'prob',
    variants: c.variants ?? undefined,
  });
}

/** An HTTP judge from parsed options; throws when url or model is missing. */
export function httpJudgeFromArgs(a: JudgeArgs): HttpJudge {
  return httpJudgeFromConfig(judgeConfigFromArgs(a));
}

/** Local-judge options from settings (for localJudgeForModel / openLocalJudge). */
export function localJudgeOptionsFromConfig(c: Pick<JudgeConfig, 'batch' | 'variants' | 'scoring'>): { batchSize: number; variants?: 'pair' | 'all'; scoring: 'sequence-logprobs' | 'forward-logits' } {
  return { batchSize: c.batch, variants: c.variants ?? undefined, scoring: c.scoring };
}

/** Local-judge options from parsed CLI options. */
export function localJudgeOptionsFromArgs(a: JudgeArgs): { batchSize: number; variants?: 'pair' | 'all'; scoring: 'sequence-logprobs' | 'forward-logits' } {
  return localJudgeOptionsFromConfig(judgeConfigFromArgs(a));
}

/**
 * Start-up check of an HTTP judge: one real chat request ("Reply with the single word Yes.", 8
 * tokens, one retry) to the configured endpoint and model. Any usable reply passes (a reply cut at
 * max_tokens too); connection errors, timeouts, any non-2xx status (a wrong path answering 404, a
 * wrong model name, a missing key) and unreadable bodies fail with an Error naming the endpoint.
 * A local judge needs no check.
 */
export async function checkJudge(c: JudgeConfig, opts: { timeoutMs?: number; fetch?: typeof fetch } = {}): Promise<void> {
  if (c.kind !== 'http') return;
  if (!c.url || !c.model) throw new Error('judge http needs judge.url and judge.model (--judge-url, --judge-model)');
  const client = new LlmClient({ baseUrl: c.url, model: c.model, timeoutMs: opts.timeoutMs ?? Math.min(c.timeoutMs, 60000), maxRetries: 1, minBackoffMs: 200, fetch: opts.fetch });
  try {
    await client.chat({ messages: [{ role: 'user', content: 'Reply with the single word Yes.' }], temperature: 0, maxTokens: 8, extraBody: extraBodyOf(c) });
  } catch (e) {
    if (e instanceof LlmLengthError) return;
    throw new Error(`judge ${c.model} at ${c.url} failed the start-up check (${client.url}): ${(e as Error).message}; fix --judge-url / --judge-model or pass --judge local`);
  }
}
