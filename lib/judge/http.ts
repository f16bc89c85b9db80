/**
 * HTTP judge over any OpenAI-compatible `/v1/chat/completions` endpoint (vLLM, SGLang, hosted
 * APIs, or `papergym-native serve`); docs/design.md §6.
 *
 * Modes:
 * - `per-item` (the paper's): one request per plan × item with prompts/judge-per-item.v1.md; the
 *   answer is one word, read by `parseBinaryVerdict`.
 * - `per-plan`: one request per plan with all its items (prompts/judge-per-plan.v1.md), JSON
 *   output (`response_format` json_schema when the server supports it), read by
 *   `readPlanVerdicts` (unknown / duplicated ids counted in the stats). ~10–20× fewer requests;
 *   items are no longer judged independently.
 *
 * Transport (concurrency, retries with backoff, timeouts, think stripping) is the shared LLM client
 * (lib/llm/client.ts); this module adds its own bound on in-flight judge requests, de-duplicates
 * identical in-flight requests, caches answers by request hash (memory + optional SQLite) and
 * counts requests, cache hits and tokens. With `logprobs` (per-item) it records P(yes) at the
 * verdict position on each verdict (lib/judge/logprobs.ts, the local judge's formula). A request
 * that still fails yields `met: null,
 * error: true` for its items (counted in `stats().failures`) unless `failOnError` is set.
 */
import pLimit from 'p-limit';
import { disposedError } from '../errors.js';
import '../util/dispose.js';
import { LlmClient } from '../llm/client.js';
import { JudgeCache, requestHash, type CachedAnswer } from './cache.js';
import { checkJudgeRequests, countVerdicts, emptyStats, type Judge, type JudgeCallOptions, type JudgeRequest, type JudgeStats, type Verdict } from './types.js';
import { yesProbabilityFromChatLogprobs } from './logprobs.js';
import type { TokenLogprob } from '../llm/client.js';
import type { ChatMessage } from '../llm/messages.js';
export type { ChatMessage };
import {
  loadPrompt,
  parseBinaryVerdict,
  readPlanVerdicts,
  perItemMessage,
  perPlanMessage,
  perPlanSchema,
  verdictFromText,
  PER_ITEM_PROMPT,
  PER_PLAN_PROMPT,
  type PromptTemplate,
} from './verdict.js';

/** Alternatives per position asked for when P(yes) is wanted (the OpenAI maximum). */
export const JUDGE_TOP_LOGPROBS = 20;

/**
 * The subset of the shared LLM client the judge uses: `chat` resolves to the answer (thinking
 * stripped or not — the judge strips again) and its usage; it rejects after its own retries.
 */
export interface ChatLike {
  chat(req: {
    messages: ChatMessage[];
    temperature?: number;
    maxTokens?: number;
    responseFormat?: Record<string, unknown>;
    signal?: AbortSignal;
    extraBody?: Record<string, unknown>;
    topLogprobs?: number;
  }): Promise<{
    content: string;
    finishReason?: string | null;
    /** OpenAI chat `choices[0].logprobs.content`, when asked for and returned. */
    logprobs?: TokenLogprob[];
    usage?: { promptTokens?: number; completionTokens?: number; prompt_tokens?: number; completion_tokens?: number } | null;
  }>;
}

/** Options of {@link HttpJudge}. */
export interface HttpJudgeOptions {
  /** The transport (normally the shared LLM client pointed at the judge endpoint). */
  client: ChatLike;
  /** Served model name; part of the cache key and of `name`. */
  model: string;
  /** Endpoint, for `name` and the cache key (default ''). */
  url?: string;
  mode?: 'per-item' | 'per-plan';
  /** Max judge requests in flight from this judge (default 16). */
  concurrency?: number;
  /** Default 0 (greedy) — judgements should be reproducible. */
  temperature?: number;
  /** Max completion tokens; default 16 per-item (one word; raise it for reasoning judges), 64 + 24·items per-plan. */
  maxTokens?: number;
  /** Send `response_format: {type: 'json_schema'}` in per-plan mode (default true). */
  jsonSchema?: boolean;
  /** SQLite file for the persistent cache; omitted ⇒ in-memory cache only. */
  cachePath?: string;
  /** Disable the cache entirely (default false). */
  noCache?: boolean;
  /** Reject the whole `judge` call when a request fails after retries (default false: null verdicts). */
  failOnError?: boolean;
  /** Prompt templates (default the v1 files). */
  perItemPrompt?: PromptTemplate;
  perPlanPrompt?: PromptTemplate;
  /** Optional system message prepended to every request. */
  system?: string;
  /** Extra request body fields (e.g. `{chat_template_kwargs: {enable_thinking: false}}` for vLLM/SGLang/serve). Part of the cache key. */
  extraBody?: Record<string, unknown>;
  /**
   * Per-item mode: ask for `logprobs` + `top_logprobs: 20` and record P(yes) at the verdict
   * position on each verdict (`prob`, lib/judge/logprobs.ts). Default false. Servers that do not
   * return logprobs still give binary verdicts (`prob` absent; `stats().withProb` counts those with it).
   */
  logprobs?: boolean;
  /** Answer tokens for P(yes): 'pair' (Yes/No, default, as the local judge) or 'all' (casing/space variants). */
  variants?: 'pair' | 'all';
}

function usageOf(u: Awaited<ReturnType<ChatLike['chat']>>['usage']): { promptTokens: number; completionTokens: number } {
  return { promptTokens: u?.promptTokens ?? u?.prompt_tokens ?? 0, completionTokens: u?.completionTokens ?? u?.completion_tokens ?? 0 };
}

/** HTTP rubric judge (see the module docstring). Disposable: `using judge = createHttpJudge(…)` closes it at the end of the block. */
export class HttpJudge implements Judge, Disposable {
  readonly name: string;
  readonly mode: 'per-item' | 'per-plan';
  private readonly o: HttpJudgeOptions;
  private readonly limit: ReturnType<typeof pLimit>;
  private readonly cache?: JudgeCache;
  private readonly inflight = new Map<string, Promise<CachedAnswer>>();
  private readonly s: JudgeStats = emptyStats();
  private readonly itemPrompt: PromptTemplate;
  private readonly planPrompt: PromptTemplate;

  constructor(opts: HttpJudgeOptions) {
    this.o = opts;
    this.mode = opts.mode ?? 'per-item';
    this.name = `http:${this.mode}:${opts.model}${opts.url ? '@' + opts.url : ''}`;
    this.limit = pLimit(Math.max(1, opts.concurrency ?? 16));
    if (!opts.noCache) this.cache = new JudgeCache(opts.cachePath);
    this.itemPrompt = opts.perItemPrompt ?? loadPrompt(PER_ITEM_PROMPT);
    this.planPrompt = opts.perPlanPrompt ?? loadPrompt(PER_PLAN_PROMPT);
  }

  stats(): JudgeStats {
    return { ...this.s };
  }

  private closed = false;

  /** Closes the SQLite cache; later `judge` calls reject with `ERR_PG_DISPOSED`. Idempotent. */
  close(): void {
    if (this.closed) return;
    this.closed = true;
    this.cache?.close();
  }

  /** {@link close}, for `using`. */
  [Symbol.dispose](): void {
    this.close();
  }

  /** Sends (or reads from cache) one chat request; rejects only when the transport does. */
  private ask(
    messages: ChatMessage[],
    prompt: PromptTemplate,
    maxTokens: number,
    responseFormat: Record<string, unknown> | undefined,
    signal?: AbortSignal,
  ): Promise<CachedAnswer> {
    const temperature = this.o.temperature ?? 0;
    const extraBody = this.o.extraBody;
    const topLogprobs = this.o.logprobs && this.mode === 'per-item' ? JUDGE_TOP_LOGPROBS : undefined;
    const key = requestHash({
      v: 1,
      model: this.o.model,
      url: this.o.url ?? '',
      prompt: `${prompt.name}#${prompt.hash}`,
      messages,
      temperature,
      maxTokens,
      rf: responseFormat ?? null,
      extra: extraBody ?? null,
      ...(topLogprobs && { lp: topLogprobs, variants: this.o.variants ?? 'pair' }),
    });
    const hit = this.cache?.get(key);
    if (hit) {
      this.s.cacheHits++;
      return Promise.resolve(hit);
    }
    const pending = this.inflight.get(key);
    if (pending) {
      this.s.cacheHits++;
      return pending;
    }
    const p = this.limit(async () => {
      signal?.throwIfAborted();
      this.s.requests++;
      let res: Awaited<ReturnType<ChatLike['chat']>>;
      try {
        res = await this.o.client.chat({
          messages,
          temperature,
          maxTokens,
          ...(responseFormat ? { responseFormat } : {}),
          ...(extraBody ? { extraBody } : {}),
          ...(topLogprobs && { topLogprobs }),
          signal,
        });
      } catch (e) {
        // A truncated answer (finish_reason "length") is still an answer: "Yes, because …" cut at
        // max_tokens reads as yes; cut-off JSON or thinking reads as null (unparsed).
        const le = e as { name?: string; content?: unknown; usage?: Awaited<ReturnType<ChatLike['chat']>>['usage'] };
        if (le?.name !== 'LlmLengthError' || typeof le.content !== 'string') throw e;
        this.s.truncated++;
        res = { content: le.content, finishReason: 'length', usage: le.usage };
      }
      const u = usageOf(res.usage);
      this.s.promptTokens += u.promptTokens;
      this.s.completionTokens += u.completionTokens;
      const a: CachedAnswer = { content: res.content ?? '', ...u };
      if (topLogprobs && res.logprobs) {
        const p = yesProbabilityFromChatLogprobs(res.logprobs, { variants: this.o.variants, met: parseBinaryVerdict(a.content).met });
        if (p) a.prob = p.pYes;
      }
      this.cache?.set(key, a);
      return a;
    }).finally(() => this.inflight.delete(key));
    this.inflight.set(key, p);
    return p;
  }

  private messages(user: string): ChatMessage[] {
    return this.o.system
      ? [
          { role: 'system', content: this.o.system },
          { role: 'user', content: user },
        ]
      : [{ role: 'user', content: user }];
  }

  private failed(itemIds: string[], e: unknown, signal?: AbortSignal): Verdict[] {
    if (signal?.aborted) throw signal.reason ?? e;
    if (this.o.failOnError) throw e;
    this.s.failures++;
    const msg = `error: ${(e as Error)?.message ?? String(e)}`;
    return itemIds.map((itemId) => ({ itemId, met: null, raw: msg, error: true }));
  }

  /** Judges every request (see {@link Judge}); verdicts align with each request's items. */
  async judge(requests: JudgeRequest[], opts: JudgeCallOptions = {}): Promise<Verdict[][]> {
    if (this.closed) throw disposedError(`judge ${this.name}`);
    checkJudgeRequests(`judge ${this.name}`, requests);
    const { signal } = opts;
    let out: Verdict[][];
    if (this.mode === 'per-item') {
      const maxTokens = this.o.maxTokens ?? 16;
      out = await Promise.all(
        requests.map((r) =>
          Promise.all(
            r.items.map(async (it) => {
              try {
                const a = await this.ask(this.messages(perItemMessage(r.question, r.plan, it, this.itemPrompt)), this.itemPrompt, maxTokens, undefined, signal);
                const v = verdictFromText(it.id, a.content);
                if (a.prob !== undefined) v.prob = a.prob;
                return v;
              } catch (e) {
                return this.failed([it.id], e, signal)[0];
              }
            }),
          ),
        ),
      );
    } else {
      const rf =
        this.o.jsonSchema === false ? undefined : { type: 'json_schema', json_schema: { name: 'rubric_verdicts', schema: perPlanSchema, strict: true } };
      out = await Promise.all(
        requests.map(async (r) => {
          if (!r.items.length) return [];
          const maxTokens = this.o.maxTokens ?? 64 + 24 * r.items.length;
          try {
            const a = await this.ask(this.messages(perPlanMessage(r.question, r.plan, r.items, this.planPrompt)), this.planPrompt, maxTokens, rf, signal);
            const pr = readPlanVerdicts(a.content, r.items);
            this.s.unknownIds += pr.unknownIds.length;
            this.s.duplicateIds += pr.duplicateIds.length;
            return pr.verdicts;
          } catch (e) {
            return this.failed(
              r.items.map((i) => i.id),
              e,
              signal,
            );
          }
        }),
      );
    }
    for (const vs of out) countVerdicts(this.s, vs);
    return out;
  }
}

/** Options of {@link createHttpJudge}: the judge's options plus the transport's. */
export interface CreateHttpJudgeOptions extends Omit<HttpJudgeOptions, 'client' | 'url'> {
  /** Endpoint: `http://host:port`, `…/v1` or the full `…/chat/completions` URL. */
  url: string;
  /** Default: env PAPERGYM_LLM_API_KEY, then OPENAI_API_KEY. */
  apiKey?: string;
  /** Per-attempt timeout, ms (default 120000). */
  timeoutMs?: number;
  /** Retries after the first attempt (default 5). */
  maxRetries?: number;
  /** First backoff, ms (default 500; doubles per retry). */
  minBackoffMs?: number;
  /** Longest `Retry-After` honoured, ms (default 120000; longer: the backoff). */
  maxRetryAfterMs?: number;
  /** Largest reply read, bytes (default 32 MiB; larger: an unreadable reply). */
  maxReplyBytes?: number;
}

/**
 * An {@link HttpJudge} over the shared LLM client (lib/llm/client.ts): retries on 5xx / 429 /
 * timeouts / network errors with exponential backoff honouring `retry-after`, per-attempt timeouts.
 * The client's HTTP concurrency equals the judge's `concurrency` (default 16).
 */
export function createHttpJudge(o: CreateHttpJudgeOptions): HttpJudge {
  const client = new LlmClient({
    baseUrl: o.url,
    model: o.model,
    apiKey: o.apiKey,
    concurrency: o.concurrency ?? 16,
    timeoutMs: o.timeoutMs,
    maxRetries: o.maxRetries,
    minBackoffMs: o.minBackoffMs,
    maxRetryAfterMs: o.maxRetryAfterMs,
    maxReplyBytes: o.maxReplyBytes,
  });
  return new HttpJudge({ ...o, client });
}
