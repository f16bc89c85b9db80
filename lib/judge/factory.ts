/**
 * Building a judge from CLI options (shared by `eval`, `probe-judge` and the training CLI).
 * `--judge http` needs `--judge-url` and `--judge-model`; `--judge local` needs a loaded model
 * (the caller passes it — the frozen base of the policy, adapter off).
 */
import type { Argv } from 'yargs';
import { createHttpJudge } from './http.js';
import type { Judge } from './types.js';

/** Judge options as parsed by {@link addJudgeOptions}. */
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
}

/** Adds the `--judge*` options to a yargs builder. */
export function addJudgeOptions<T>(y: Argv<T>): Argv<T & JudgeArgs> {
  return y
    .option('judge', { choices: ['http', 'local'] as const, default: 'http' as const, describe: 'judge backend: an OpenAI-compatible endpoint, or the local model with its adapter off' })
    .option('judge-url', { type: 'string', describe: 'judge endpoint (http://host:port/v1)' })
    .option('judge-model', { type: 'string', describe: 'served judge model name' })
    .option('judge-mode', { choices: ['per-item', 'per-plan'] as const, default: 'per-item' as const, describe: 'http: one request per item (yes/no) or per plan (JSON)' })
    .option('judge-concurrency', { type: 'number', default: 16, describe: 'http: requests in flight' })
    .option('judge-cache', { type: 'string', describe: 'http: SQLite file caching judge answers by request hash' })
    .option('judge-timeout-ms', { type: 'number', default: 120000, describe: 'http: per-attempt timeout' })
    .option('judge-max-retries', { type: 'number', default: 5, describe: 'http: retries after the first attempt' })
    .option('judge-max-tokens', { type: 'number', describe: 'http: max answer tokens (default 16 per-item, 64+24/item per-plan)' })
    .option('judge-no-think', { type: 'boolean', default: false, describe: 'http: send chat_template_kwargs.enable_thinking=false (vLLM, SGLang, serve)' })
    .option('judge-batch', { type: 'number', default: 16, describe: 'local: prompts per prefill batch' })
    .option('judge-variants', { choices: ['pair', 'all'] as const, describe: 'local: answer tokens Yes/No, or all casing/space variants summed (default: pair with sequence-logprobs, all with forward-logits)' })
    .option('judge-scoring', { choices: ['sequence-logprobs', 'forward-logits'] as const, default: 'sequence-logprobs' as const, describe: 'local: lm_head at the scored position only, or full forward logits' }) as unknown as Argv<T & JudgeArgs>;
}

/** An HTTP judge from parsed options; throws when url or model is missing. */
export function httpJudgeFromArgs(a: JudgeArgs): Judge {
  if (!a.judgeUrl || !a.judgeModel) throw new Error('--judge http needs --judge-url and --judge-model');
  return createHttpJudge({
    url: a.judgeUrl,
    model: a.judgeModel,
    mode: a.judgeMode,
    concurrency: a.judgeConcurrency,
    cachePath: a.judgeCache,
    timeoutMs: a.judgeTimeoutMs,
    maxRetries: a.judgeMaxRetries,
    maxTokens: a.judgeMaxTokens,
    extraBody: a.judgeNoThink ? { chat_template_kwargs: { enable_thinking: false } } : undefined,
  });
}

/** Local-judge options from parsed CLI options (for localJudgeForModel / openLocalJudge). */
export function localJudgeOptionsFromArgs(a: JudgeArgs): { batchSize: number; variants?: 'pair' | 'all'; scoring: 'sequence-logprobs' | 'forward-logits' } {
  return { batchSize: a.judgeBatch, variants: a.judgeVariants, scoring: a.judgeScoring };
}
