/**
 * A free-form chat judge for the protocols whose answer is not a yes/no per rubric item
 * (ResearchQA's five levels, `compare`'s N-way preference): an OpenAI-compatible endpoint (the
 * `--judge http` settings), requests concurrent up to `--judge-concurrency`, every answer cached in
 * SQLite (lib/judge/cache.ts) keyed by the judge (model @ url), the prompt's name and hash, the
 * messages, the decoding parameters and the attempt number — so a killed run asks nothing twice
 * when it is rerun, and a retry after an unreadable reply is a new question, not the cached one.
 */
import type { JudgeConfig } from '../config/judge.js';
import { judgeAnswersFreeForm } from '../judge/backends/index.js';
import { JudgeCache, requestHash } from '../judge/cache.js';
import type { PromptTemplate } from '../judge/verdict.js';
import pLimit, { type LimitFunction } from 'p-limit';
import { LlmAbortError, LlmClient, LlmLengthError } from '../llm/client.js';
import type { ChatMessage } from '../llm/messages.js';

/** One answer: the text, or null with the error when the request failed after retries. */
export interface ChatAnswer {
  content: string | null;
  error?: string;
  cached: boolean;
}

/** Counters of a {@link ChatJudge}. */
export interface ChatJudgeStats {
  /** HTTP requests sent to the endpoint (the client's retries included): what the server counts. */
  requests: number;
  /** Answers served from the cache (no request). */
  cacheHits: number;
  /** Questions whose request failed after the client's retries (answered `content: null`). */
  failures: number;
  /** Questions cut off by an abort (a jury member left out or stopped, Ctrl-C): sent or not, no answer. */
  aborted: number;
  promptTokens: number;
  completionTokens: number;
}

/** Observer of a {@link ChatJudge}'s calls (the progress display, lib/data/progress.ts Progress fits it). */
export interface ChatJudgeObserver {
  /** A live request started. */
  callStart(): void;
  /** A live request ended: answered (with its usage), failed or aborted. */
  callEnd(r: { promptTokens?: number; completionTokens?: number; failed?: boolean; aborted?: boolean }): void;
  /** An answer served from the cache. */
  call(fromCache: boolean): void;
}

/** Asks an endpoint free-form judge questions, cached and concurrent. */
export class ChatJudge {
  readonly name: string;
  private readonly client: LlmClient;
  private readonly cache: JudgeCache;
  private readonly counters: Omit<ChatJudgeStats, 'requests'> = { cacheHits: 0, failures: 0, aborted: 0, promptTokens: 0, completionTokens: 0 };
  private readonly slots: LimitFunction;
  /** Told of every call (set by the command for its progress display). */
  observer?: ChatJudgeObserver;

  /**
   * @param c judge settings of a kind that answers free-form (judgeAnswersFreeForm: http) (url, model, concurrency, timeoutMs, maxRetries, noThink)
   * @param cachePath SQLite answer cache (created); undefined = memory only
   * @throws Error when the kind does not answer free-form or url / model are missing
   */
  constructor(
    private readonly c: JudgeConfig,
    cachePath: string | undefined,
    opts: { fetch?: typeof fetch } = {},
  ) {
    if (!judgeAnswersFreeForm(c) || !c.url || !c.model)
      throw new Error(`this protocol asks a free-form judge question: it needs --judge http with --judge-url and --judge-model (got --judge ${c.kind})`);
    this.name = `${c.model}@${c.url}`;
    this.client = new LlmClient({
      baseUrl: c.url,
      model: c.model,
      concurrency: c.concurrency,
      timeoutMs: c.timeoutMs,
      maxRetries: c.maxRetries,
      maxRetryAfterMs: c.maxRetryAfterMs,
      fetch: opts.fetch,
    });
    this.cache = new JudgeCache(cachePath);
    this.slots = pLimit(Math.max(1, c.concurrency));
  }

  /** Requests on the wire / waiting for a slot, {@link slot}'s waiting work included (for the progress display). */
  load(): { active: number; queued: number } {
    const l = this.client.load();
    return { active: l.active, queued: l.queued + this.slots.pendingCount };
  }

  /**
   * Runs `fn` (its questions and what is done with their answers) in one of the judge's
   * `concurrency` slots. Work waiting for a slot starts only after the work before it has finished,
   * bookkeeping included — so a check at its start sees every answer before it (a jury member
   * declared failed is asked nothing more: lib/eval/compare.ts compareSystemsWithJury).
   */
  slot<T>(fn: () => Promise<T>): Promise<T> {
    return this.slots(fn);
  }

  /**
   * One question. Temperature 0. Rejects only on abort (`signal`); a failed request resolves
   * with `content: null` and the error; an answer cut at `maxTokens` is returned (and cached) as it is.
   */
  async ask(prompt: PromptTemplate, messages: ChatMessage[], o: { maxTokens: number; attempt?: number; signal?: AbortSignal }): Promise<ChatAnswer> {
    const key = requestHash(['chat-judge', this.name, prompt.name, prompt.hash, messages, o.maxTokens, this.c.noThink, o.attempt ?? 0]);
    const hit = this.cache.get(key);
    if (hit) {
      this.counters.cacheHits++;
      this.observer?.call(true);
      return { content: hit.content, cached: true };
    }
    this.observer?.callStart();
    try {
      const r = await this.client.chat({
        messages,
        temperature: 0,
        maxTokens: o.maxTokens,
        signal: o.signal,
        extraBody: this.c.noThink ? { chat_template_kwargs: { enable_thinking: false } } : undefined,
      });
      this.counters.promptTokens += r.usage.promptTokens ?? 0;
      this.counters.completionTokens += r.usage.completionTokens ?? 0;
      this.cache.set(key, { content: r.content, promptTokens: r.usage.promptTokens ?? 0, completionTokens: r.usage.completionTokens ?? 0 });
      this.observer?.callEnd({ promptTokens: r.usage.promptTokens, completionTokens: r.usage.completionTokens });
      return { content: r.content, cached: false };
    } catch (e) {
      if (e instanceof LlmAbortError || o.signal?.aborted) {
        this.counters.aborted++;
        this.observer?.callEnd({ aborted: true });
        throw e;
      }
      // An answer cut at max_tokens is still an answer (its verdict line may be there): read it, cache it.
      if (e instanceof LlmLengthError) {
        this.counters.promptTokens += e.usage.promptTokens ?? 0;
        this.counters.completionTokens += e.usage.completionTokens ?? 0;
        this.cache.set(key, { content: e.content, promptTokens: e.usage.promptTokens ?? 0, completionTokens: e.usage.completionTokens ?? 0 });
        this.observer?.callEnd({ promptTokens: e.usage.promptTokens, completionTokens: e.usage.completionTokens });
        return { content: e.content, cached: false };
      }
      this.observer?.callEnd({ failed: true });
      this.counters.failures++;
      return { content: null, error: (e as Error).message, cached: false };
    }
  }

  stats(): ChatJudgeStats {
    return { requests: this.client.stats().requests, ...this.counters };
  }

  close(): void {
    this.cache.close();
  }
}
