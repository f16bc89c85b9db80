/**
 * The `http` judge: an OpenAI-compatible endpoint (vLLM, SGLang, papergym-native serve), one
 * yes/no request per rubric item or one JSON request per plan (lib/judge/http.ts).
 */
import type { JudgeConfig } from '../../config/judge.js';
import { LlmClient, LlmLengthError } from '../../llm/client.js';
import { createHttpJudge, type CreateHttpJudgeOptions, type HttpJudge } from '../http.js';
import type { JudgeBackendOf } from './backend.js';

// Its kind's name in the judge config's type (lib/config/judge.ts JudgeKindNames).
declare module '../../config/judge.js' {
  interface JudgeKindNames {
    http: true;
  }
}

/** `chat_template_kwargs` body of the no-think switch. */
function extraBodyOf(c: Pick<JudgeConfig, 'noThink'>): Record<string, unknown> | undefined {
  return c.noThink ? { chat_template_kwargs: { enable_thinking: false } } : undefined;
}

/**
 * An HTTP judge from settings (disposable: close it, or `using`); `over` replaces options the
 * settings do not hold (a benchmark protocol's per-item prompt). Throws when url or model is missing.
 */
export function httpJudgeFromConfig(c: JudgeConfig, over: Partial<CreateHttpJudgeOptions> = {}): HttpJudge {
  if (!c.url || !c.model) throw new Error('--judge http needs --judge-url and --judge-model');
  return createHttpJudge({
    url: c.url,
    model: c.model,
    mode: c.mode,
    concurrency: c.concurrency,
    cachePath: c.cache ?? undefined,
    timeoutMs: c.timeoutMs,
    maxRetries: c.maxRetries,
    maxRetryAfterMs: c.maxRetryAfterMs,
    maxTokens: c.maxTokens ?? undefined,
    extraBody: extraBodyOf(c),
    logprobs: c.score === 'prob',
    variants: c.variants ?? undefined,
    ...over,
  });
}

export const httpBackend: JudgeBackendOf<'http'> = {
  kind: 'http',
  describe: 'an OpenAI-compatible endpoint (judge.url, judge.model)',
  settingKeys: ['url', 'model', 'mode', 'concurrency', 'cache', 'timeoutMs', 'maxRetries', 'maxRetryAfterMs', 'maxTokens', 'noThink'],
  // Its keys are core judge rows (a jury member reads them too); the rules that tie them are its own.
  settingsProblems: (c, prefix) => [
    ...(!c.url || !c.model ? [`${prefix}kind http needs ${prefix}url and ${prefix}model`] : []),
    ...(c.score === 'prob' && c.mode === 'per-plan'
      ? [`${prefix}score prob needs ${prefix}mode per-item (P(yes) is read from the verdict token of a one-word reply)`]
      : []),
  ],
  sharesPolicyWeights: () => false,
  answersFreeForm: () => true,
  resumableKeys: ['url'],
  withAnswerCache: (c, path) => (c.cache ? c : { ...c, cache: path }),
  label: (c) => `${c.model}@${c.url}`,
  /**
   * One real chat request ("Reply with the single word Yes.", 8 tokens, one retry) to the configured
   * endpoint and model. Any usable reply passes (a reply cut at max_tokens too); connection errors,
   * timeouts, any non-2xx status (a wrong path answering 404, a wrong model name, a missing key) and
   * unreadable bodies fail with an Error naming the endpoint.
   */
  async check(c, opts = {}) {
    if (!c.url || !c.model) throw new Error('judge http needs judge.url and judge.model (--judge-url, --judge-model)');
    const client = new LlmClient({
      baseUrl: c.url,
      model: c.model,
      timeoutMs: opts.timeoutMs ?? Math.min(c.timeoutMs, 60000),
      maxRetries: 1,
      minBackoffMs: 200,
      fetch: opts.fetch,
    });
    try {
      await client.chat({ messages: [{ role: 'user', content: 'Reply with the single word Yes.' }], temperature: 0, maxTokens: 8, extraBody: extraBodyOf(c) });
    } catch (e) {
      if (e instanceof LlmLengthError) return;
      throw new Error(
        `judge ${c.model} at ${c.url} failed the start-up check (${client.url}): ${(e as Error).message}; fix --judge-url / --judge-model or pass --judge local`,
      );
    }
  },
  open: async (c, ctx) => httpJudgeFromConfig(c, ctx.perItemPrompt ? { perItemPrompt: ctx.perItemPrompt } : {}),
};
