/**
 * OpenAI-compatible chat client (`POST {base}/v1/chat/completions`) shared by the data pipeline
 * and the HTTP judge (docs/design.md §7 "LLM access").
 *
 * - bounded concurrency (p-limit; a slot is held per HTTP attempt, not during backoff sleeps)
 * - retries with exponential backoff + jitter only on what can succeed when repeated: connection
 *   errors, timeouts, HTTP 408/409/429/5xx, honouring `retry-after` (seconds or HTTP date) up to
 *   `maxRetryAfterMs` (past it, the backoff), every wait counted against the call's `deadlineMs`
 * - replies read up to `maxReplyBytes` (streamed ones too); a larger one is an unreadable reply
 * - a reply that cannot be read (an HTML page, an empty body, non-JSON, `choices: []`, no message,
 *   a 200 carrying an `error` object) fails at once with {@link LlmResponseError}, naming the
 *   endpoint and quoting the first 200 characters of the body
 * - per-attempt timeout (AbortSignal.timeout) combined with the caller's signal
 * - `message.content` as a string or an array of parts (OpenAI / Anthropic-style: `text` parts are
 *   joined; `thinking` / `reasoning` parts go to `reasoning`; a `refusal` is the answer);
 *   `reasoning_content` / `reasoning` fields go to `reasoning`; `<think>…</think>` in the text is
 *   moved to `reasoning` by the shared reader (lib/llm/think.ts)
 * - `logprobs` / `top_logprobs` requested on demand; `choices[0].logprobs.content` returned as is
 * - `finish_reason: "length"` rejected as {@link LlmLengthError} (not retried: the same request
 *   would be cut again; raise `maxTokens` instead)
 * - `chatJson`: JSON extracted from the answer and validated against a JSON Schema (ajv), one
 *   repair round-trip with the validation errors, then {@link LlmJsonError}
 * - API key from `apiKey` or the env (`PAPERGYM_LLM_API_KEY`, then `OPENAI_API_KEY`); it is sent
 *   only in the Authorization header and is redacted from every error message
 * - counters: requests, retries, failures, prompt/completion tokens (`stats()`)
 */
import { setMaxListeners } from 'node:events';
import pLimit, { type LimitFunction } from 'p-limit';
import { Ajv, type ValidateFunction } from 'ajv';
import { splitThink } from './think.js';
import type { ChatMessage } from './messages.js';
export type { ChatMessage };

/** OpenAI `response_format`. */
export type ResponseFormat =
  { type: 'text' } | { type: 'json_object' } | { type: 'json_schema'; json_schema: { name: string; schema: object; strict?: boolean } };

/** A chat request. `maxTokens` maps to `max_tokens`. */
export interface ChatRequest {
  messages: ChatMessage[];
  temperature?: number;
  maxTokens?: number;
  topP?: number;
  seed?: number;
  stop?: string[];
  responseFormat?: ResponseFormat | Record<string, unknown>;
  /** Cancels the call (including retries and backoff sleeps). */
  signal?: AbortSignal;
  /** Extra body fields passed through verbatim (e.g. `chat_template_kwargs` for vLLM). */
  extraBody?: Record<string, unknown>;
  /** Overrides the client's model for this call. */
  model?: string;
  /** Ask for the sampled tokens' logprobs (`logprobs: true`). */
  logprobs?: boolean;
  /** Alternatives per position (`top_logprobs`, 0–20; implies `logprobs`). */
  topLogprobs?: number;
}

/** One alternative token at a position (OpenAI chat `logprobs.content[i].top_logprobs[j]`). `logprob`: natural log. */
export interface TopLogprob {
  token: string;
  logprob: number;
  /** UTF-8 bytes of the token, when the server gives them. */
  bytes?: number[] | null;
}

/** One generated token with its logprob and the top alternatives (OpenAI chat `logprobs.content[i]`). */
export interface TokenLogprob extends TopLogprob {
  top_logprobs?: TopLogprob[];
}

/** Token usage of one call (summed over the attempt that succeeded). */
export interface ChatUsage {
  promptTokens: number;
  completionTokens: number;
  totalTokens: number;
}

/** Result of {@link LlmClient.chat}. */
export interface ChatResult {
  /** Answer text with `<think>` blocks removed and trimmed. */
  content: string;
  /** Removed reasoning (`<think>` text and/or the server's `reasoning_content`), if any. */
  reasoning?: string;
  finishReason: string | null;
  usage: ChatUsage;
  /** HTTP attempts this call took (1 = no retry). */
  attempts: number;
  model: string;
  /** `choices[0].logprobs.content` when the server returned it (over every generated token, thinking included when the server counts it). */
  logprobs?: TokenLogprob[];
}

/** Result of {@link LlmClient.chatJson}. */
export interface ChatJsonResult<T> extends ChatResult {
  value: T;
  /** True when the first answer was invalid and the repair round-trip fixed it. */
  repaired: boolean;
}

/** Options of {@link LlmClient}. */
export interface LlmClientOptions {
  /** `http://host:port`, `…/v1` or the full `…/v1/chat/completions` URL. */
  baseUrl: string;
  model: string;
  /** Default: env PAPERGYM_LLM_API_KEY, then OPENAI_API_KEY; none → no Authorization header. */
  apiKey?: string;
  /** Max HTTP requests in flight (default 8). */
  concurrency?: number;
  /** Per-attempt timeout in ms, headers and body (default 120000). */
  timeoutMs?: number;
  /** Retries after the first attempt (default 5). */
  maxRetries?: number;
  /** First backoff delay in ms (default 500); doubles per retry, with ±25 % jitter. */
  minBackoffMs?: number;
  /** Cap of the exponential backoff (default 30000). */
  maxBackoffMs?: number;
  /**
   * Longest `retry-after` honoured, ms (default 120000). A server asking for longer (`Retry-After:
   * 86400`) does not set our clock: the exponential backoff is used instead (as openai-python does
   * past its own cap), and every wait counts against `deadlineMs`.
   */
  maxRetryAfterMs?: number;
  /**
   * Longest one call may take, ms, attempts and waits together; a retry whose wait would pass it
   * ends the call with its last error, and an attempt's timeout is cut to what is left (default:
   * the retry schedule's worst case, (maxRetries + 1) × timeoutMs + maxRetries × max(maxBackoffMs,
   * maxRetryAfterMs)).
   */
  deadlineMs?: number;
  /**
   * Largest reply body read, bytes (default 32 MiB: a chat completion with top-20 logprobs of 8192
   * tokens is a few MB). A larger reply, streamed (chunked) or with a Content-Length, is abandoned
   * past the cap and the call fails with {@link LlmResponseError} (an unreadable reply, not retried).
   */
  maxReplyBytes?: number;
  /** Extra headers (never logged). */
  headers?: Record<string, string>;
  /** Injected fetch (tests). */
  fetch?: typeof fetch;
  /** Observer of retries etc. (messages never contain the key). */
  onEvent?: (e: LlmEvent) => void;
}

/** Events reported to `onEvent`. */
export type LlmEvent =
  { type: 'retry'; attempt: number; delayMs: number; reason: string } | { type: 'request'; attempt: number } | { type: 'response'; status: number; ms: number };

/** Counters of one client (cumulative). */
export interface LlmStats {
  /** HTTP attempts sent. */
  requests: number;
  /** Calls that returned a result. */
  succeeded: number;
  /** Calls that finally failed. */
  failed: number;
  retries: number;
  promptTokens: number;
  completionTokens: number;
  /** JSON repair round-trips. */
  repairs: number;
  /** Count per HTTP status / error kind (`timeout`, `network`). */
  byStatus: Record<string, number>;
}

/** Base error of the client. `retryable` tells the retry loop what to do. */
export class LlmError extends Error {
  retryable = false;
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = 'LlmError';
  }
}
/** Non-2xx HTTP answer. */
export class LlmHttpError extends LlmError {
  constructor(
    message: string,
    readonly status: number,
    readonly body: string,
    readonly retryAfterMs?: number,
  ) {
    super(message);
    this.name = 'LlmHttpError';
    this.retryable = [408, 409, 429].includes(status) || status >= 500;
  }
}
/** An attempt exceeded `timeoutMs`. */
export class LlmTimeoutError extends LlmError {
  constructor(message: string) {
    super(message);
    this.name = 'LlmTimeoutError';
    this.retryable = true;
  }
}
/** Connection refused/reset, malformed HTTP body, … */
export class LlmNetworkError extends LlmError {
  constructor(message: string, cause?: unknown) {
    super(message, { cause });
    this.name = 'LlmNetworkError';
    this.retryable = true;
  }
}
/**
 * A 2xx reply that cannot be used: an HTML page, an empty body, non-JSON, `choices: []`, no
 * message, or an `error` object. Not retried (the same request gets the same reply); `body` holds
 * the first 200 characters.
 */
export class LlmResponseError extends LlmError {
  constructor(
    message: string,
    readonly status: number,
    readonly body: string,
  ) {
    super(message);
    this.name = 'LlmResponseError';
  }
}
/** The server stopped because of `max_tokens` (`finish_reason: "length"`); `content` is the partial answer. */
export class LlmLengthError extends LlmError {
  constructor(
    message: string,
    readonly content: string,
    readonly usage: ChatUsage,
  ) {
    super(message);
    this.name = 'LlmLengthError';
  }
}
/** `chatJson`: the answer was not schema-valid JSON even after the repair round-trip. */
export class LlmJsonError extends LlmError {
  constructor(
    message: string,
    readonly content: string,
    readonly errors: string[],
  ) {
    super(message);
    this.name = 'LlmJsonError';
  }
}
/** The caller's signal aborted the call. */
export class LlmAbortError extends LlmError {
  constructor(message = 'LLM call aborted') {
    super(message);
    this.name = 'LlmAbortError';
  }
}

/**
 * Extract a JSON value from model text: the whole text, else a ```json fenced block, else the
 * first balanced `{…}` / `[…]` span (string-aware).
 * @throws SyntaxError when nothing parses
 */
export function extractJson(text: string): unknown {
  const t = text.trim();
  try {
    return JSON.parse(t);
  } catch {
    /* fall through */
  }
  const fence = /```(?:json)?\s*([\s\S]*?)```/i.exec(t);
  if (fence) {
    try {
      return JSON.parse(fence[1].trim());
    } catch {
      /* fall through */
    }
  }
  // bounded: at most 64 candidate starts (pathological answers cannot make this quadratic)
  let tries = 0;
  for (let start = 0; start < t.length && tries < 64; start++) {
    const c = t[start];
    if (c !== '{' && c !== '[') continue;
    tries++;
    const end = balancedEnd(t, start);
    if (end > start) {
      try {
        return JSON.parse(t.slice(start, end + 1));
      } catch {
        /* keep scanning */
      }
    }
  }
  throw new SyntaxError('no JSON value found in the answer');
}

/**
 * Index of the bracket closing the JSON object or array that opens at `start` (strings and escapes
 * skipped), or -1 when it never closes or brackets are mismatched.
 */
export function balancedEnd(s: string, start: number): number {
  const stack: string[] = [];
  let inStr = false;
  for (let i = start; i < s.length; i++) {
    const c = s[i];
    if (inStr) {
      if (c === '\\') i++;
      else if (c === '"') inStr = false;
      continue;
    }
    if (c === '"') inStr = true;
    else if (c === '{' || c === '[') stack.push(c === '{' ? '}' : ']');
    else if (c === '}' || c === ']') {
      if (stack.pop() !== c) return -1;
      if (!stack.length) return i;
    }
  }
  return -1;
}

/**
 * The body of `res` as text, read as a stream up to `maxBytes` (a reply with a larger
 * Content-Length is not read at all; a chunked one is cancelled once past the cap). `tooLarge`
 * says it was cut; `text` then holds what was read (its start, for the error).
 */
export async function readCapped(res: Response, maxBytes: number): Promise<{ text: string; tooLarge: boolean }> {
  const declared = Number(res.headers.get('content-length'));
  if (Number.isFinite(declared) && declared > maxBytes) {
    await res.body?.cancel().catch(() => undefined);
    return { text: '', tooLarge: true };
  }
  if (!res.body) return { text: await res.text(), tooLarge: false };
  const reader = res.body.getReader();
  const dec = new TextDecoder();
  let text = '';
  let bytes = 0;
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    bytes += value.byteLength;
    if (bytes > maxBytes) {
      text += dec.decode(value.subarray(0, Math.max(0, value.byteLength - (bytes - maxBytes))), { stream: true });
      await reader.cancel().catch(() => undefined);
      return { text, tooLarge: true };
    }
    text += dec.decode(value, { stream: true });
  }
  return { text: text + dec.decode(), tooLarge: false };
}

/** Parse a `retry-after` header (delta-seconds or HTTP date) into ms; undefined when absent/invalid. */
export function parseRetryAfter(v: string | null | undefined, now = Date.now()): number | undefined {
  if (!v) return undefined;
  const s = v.trim();
  if (/^\d+(\.\d+)?$/.test(s)) return Math.round(parseFloat(s) * 1000);
  const d = Date.parse(s);
  return Number.isNaN(d) ? undefined : Math.max(0, d - now);
}

/** Normalise a base URL to the chat-completions endpoint. */
export function chatCompletionsUrl(base: string): string {
  const b = base.replace(/\/+$/, '');
  if (/\/chat\/completions$/.test(b)) return b;
  if (/\/v\d+$/.test(b)) return `${b}/chat/completions`;
  return `${b}/v1/chat/completions`;
}

/** API key from the environment: PAPERGYM_LLM_API_KEY, then OPENAI_API_KEY. */
export function apiKeyFromEnv(env: NodeJS.ProcessEnv = process.env): string | undefined {
  return env.PAPERGYM_LLM_API_KEY || env.OPENAI_API_KEY || undefined;
}

function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) return reject(new LlmAbortError());
    const t = setTimeout(() => {
      signal?.removeEventListener('abort', onAbort);
      resolve();
    }, ms);
    const onAbort = () => {
      clearTimeout(t);
      reject(new LlmAbortError());
    };
    signal?.addEventListener('abort', onAbort, { once: true });
  });
}

/** Text of a content value: a string, or an array of parts (text joined; thinking/reasoning parts separated out). */
function readContent(c: unknown): { text: string; reasoning: string[] } {
  const reasoning: string[] = [];
  if (c === null || c === undefined) return { text: '', reasoning };
  if (typeof c === 'string') return { text: c, reasoning };
  if (!Array.isArray(c)) throw new TypeError(`message.content is ${typeof c}, not a string or an array of parts`);
  let text = '';
  for (const p of c) {
    if (typeof p === 'string') {
      text += p;
      continue;
    }
    if (!p || typeof p !== 'object') continue;
    const part = p as Record<string, unknown>;
    const type = String(part.type ?? '');
    if (/^(?:thinking|reasoning|reasoning_content|redacted_thinking)$/.test(type)) {
      const inner = part.thinking ?? part.reasoning ?? part.text ?? part.content;
      const r = typeof inner === 'string' ? inner : readContent(inner ?? null).text;
      if (r) reasoning.push(r);
    } else if (type === 'refusal' && typeof part.refusal === 'string') text += part.refusal;
    else if ((type === 'text' || type === 'output_text' || type === '') && typeof part.text === 'string') text += part.text;
    else if (type === 'text' && part.text && typeof part.text === 'object' && typeof (part.text as { value?: unknown }).value === 'string')
      text += (part.text as { value: string }).value;
  }
  return { text, reasoning };
}

/** A parsed chat completion, or the error that says why the body cannot be used. */
type Completion =
  { content: string; reasoning?: string; finishReason: string | null; usage: ChatUsage; logprobs?: TokenLogprob[] } | { error: LlmResponseError };

/**
 * Reads a 2xx chat-completions body. The content may be a string or an array of parts; thinking
 * (parts, `reasoning_content`, `reasoning`, `<think>` in the text) goes to `reasoning`.
 * Errors name the endpoint and quote the first 200 characters of the body.
 */
export function readCompletion(text: string, status: number, url: string, redact: (s: string) => string = (s) => s, contentType?: string | null): Completion {
  const quote = () => JSON.stringify(redact(text.slice(0, 200)));
  const fail = (why: string) => ({
    error: new LlmResponseError(`LLM reply from ${url} (HTTP ${status}) ${why}: ${quote()}`, status, redact(text.slice(0, 200))),
  });
  const t = text.trim();
  if (!t) return fail('has an empty body');
  if (/^<(?:!doctype|html|head|body|\?xml)/i.test(t) || (/text\/html/i.test(contentType ?? '') && t.startsWith('<')))
    return fail('is an HTML page, not a chat completion (is the URL the OpenAI-compatible /v1 endpoint?)');
  let json: {
    error?: unknown;
    choices?: {
      message?: { content?: unknown; reasoning_content?: unknown; reasoning?: unknown; refusal?: unknown };
      finish_reason?: string | null;
      logprobs?: { content?: TokenLogprob[] | null } | null;
    }[];
    usage?: { prompt_tokens?: number; completion_tokens?: number; total_tokens?: number };
  };
  try {
    json = JSON.parse(t);
  } catch {
    return fail('is not JSON');
  }
  if (!json || typeof json !== 'object' || Array.isArray(json)) return fail('is not a JSON object');
  if (json.error !== undefined && json.error !== null) {
    const e = json.error as { message?: unknown; type?: unknown; code?: unknown };
    const msg = typeof e === 'string' ? e : typeof e?.message === 'string' ? e.message : JSON.stringify(e);
    return fail(`carries an error (${redact(msg).slice(0, 200)})`);
  }
  if (!Array.isArray(json.choices)) return fail('has no choices array');
  if (!json.choices.length) return fail('has no choices (choices: [])');
  const choice = json.choices[0];
  const msg = choice?.message;
  if (!msg || typeof msg !== 'object') return fail('has no choices[0].message');
  let parts: { text: string; reasoning: string[] };
  try {
    parts = readContent(msg.content);
  } catch (e) {
    return fail(`has an unreadable message.content (${(e as Error).message})`);
  }
  if (!parts.text && typeof msg.refusal === 'string') parts.text = msg.refusal;
  const { content, reasoning: thinkText } = splitThink(parts.text);
  const fieldReasoning = [msg.reasoning_content, msg.reasoning]
    .map((r) => (typeof r === 'string' ? r : Array.isArray(r) ? readContent(r).text : ''))
    .filter((r) => r.trim());
  const reasoning = [...new Set([...fieldReasoning, ...parts.reasoning, ...(thinkText ? [thinkText] : [])].map((r) => r.trim()))].filter(Boolean).join('\n\n');
  const usage: ChatUsage = {
    promptTokens: json.usage?.prompt_tokens ?? 0,
    completionTokens: json.usage?.completion_tokens ?? 0,
    totalTokens: json.usage?.total_tokens ?? (json.usage?.prompt_tokens ?? 0) + (json.usage?.completion_tokens ?? 0),
  };
  const lp = choice.logprobs?.content;
  return { content, ...(reasoning && { reasoning }), finishReason: choice.finish_reason ?? null, usage, ...(Array.isArray(lp) && { logprobs: lp }) };
}

const ajv = new Ajv({ allErrors: true, strict: false });
const validators = new WeakMap<object, ValidateFunction>();
/** The ajv validator of a JSON Schema (compiled once per schema object). */
export function validatorFor(schema: object): ValidateFunction {
  let v = validators.get(schema);
  if (!v) {
    v = ajv.compile(schema);
    validators.set(schema, v);
  }
  return v;
}

/** Options of {@link LlmClient.chatJson}. */
export interface ChatJsonOptions {
  /** Repair round-trips after an invalid answer (default 1). */
  repairs?: number;
  /**
   * Send the schema as `response_format: json_schema` (guided decoding on vLLM/SGLang/OpenAI).
   * Default false: the prompt is expected to describe the format. Ignored when the request has
   * its own `responseFormat`.
   */
  useResponseFormat?: boolean;
  /** Schema name for `response_format` (default 'answer'). */
  schemaName?: string;
}

/**
 * The OpenAI-compatible client. One instance per endpoint + model; safe for concurrent use.
 *
 * ```ts
 * const llm = new LlmClient({ baseUrl: 'http://127.0.0.1:8000/v1', model: 'Qwen/Qwen3-8B' });
 * const { content, finishReason, usage } = await llm.chat({ messages, temperature: 0, maxTokens: 512 });
 * const { value } = await llm.chatJson<{ ok: boolean }>(schema, { messages });
 * ```
 */
export class LlmClient {
  readonly url: string;
  readonly model: string;
  private readonly apiKey?: string;
  private readonly limit: LimitFunction;
  private readonly opts: Required<
    Pick<LlmClientOptions, 'timeoutMs' | 'maxRetries' | 'minBackoffMs' | 'maxBackoffMs' | 'maxRetryAfterMs' | 'deadlineMs' | 'maxReplyBytes'>
  >;
  private readonly fetchImpl: typeof fetch;
  private readonly counters: LlmStats = { requests: 0, succeeded: 0, failed: 0, retries: 0, promptTokens: 0, completionTokens: 0, repairs: 0, byStatus: {} };

  constructor(private readonly options: LlmClientOptions) {
    if (!options.baseUrl) throw new Error('LlmClient: baseUrl is required');
    if (!options.model) throw new Error('LlmClient: model is required');
    this.url = chatCompletionsUrl(options.baseUrl);
    this.model = options.model;
    this.apiKey = options.apiKey ?? apiKeyFromEnv();
    this.limit = pLimit(Math.max(1, options.concurrency ?? 8));
    const timeoutMs = options.timeoutMs ?? 120_000;
    const maxRetries = options.maxRetries ?? 5;
    const maxBackoffMs = options.maxBackoffMs ?? 30_000;
    const maxRetryAfterMs = options.maxRetryAfterMs ?? 120_000;
    this.opts = {
      timeoutMs,
      maxRetries,
      minBackoffMs: options.minBackoffMs ?? 500,
      maxBackoffMs,
      maxRetryAfterMs,
      deadlineMs: options.deadlineMs ?? (maxRetries + 1) * timeoutMs + maxRetries * Math.max(maxBackoffMs, maxRetryAfterMs),
      maxReplyBytes: options.maxReplyBytes ?? 32 * 1024 * 1024,
    };
    this.fetchImpl = options.fetch ?? fetch;
  }

  /** A copy of the counters. */
  stats(): LlmStats {
    return { ...this.counters, byStatus: { ...this.counters.byStatus } };
  }

  /** HTTP requests on the wire now (`active`, at most `concurrency`) and requests waiting for a slot (`queued`). */
  load(): { active: number; queued: number } {
    return { active: this.limit.activeCount, queued: this.limit.pendingCount };
  }

  /** Max concurrent HTTP requests (settable). */
  get concurrency(): number {
    return this.limit.concurrency;
  }
  set concurrency(n: number) {
    this.limit.concurrency = Math.max(1, n);
  }

  /** Never expose the key (e.g. when a client is logged with console.log / util.inspect). */
  toJSON(): object {
    return { url: this.url, model: this.model, apiKey: this.apiKey ? '***' : undefined };
  }
  [Symbol.for('nodejs.util.inspect.custom')](): string {
    return `LlmClient(${this.url}, ${this.model}${this.apiKey ? ', key: ***' : ''})`;
  }

  private redact(s: string): string {
    return this.apiKey ? s.split(this.apiKey).join('***') : s;
  }

  private bump(key: string): void {
    this.counters.byStatus[key] = (this.counters.byStatus[key] ?? 0) + 1;
  }

  /**
   * One chat completion with retries.
   * @returns the answer without `<think>` blocks, the finish reason and token usage
   * @throws LlmLengthError (finish_reason length), LlmHttpError (non-retryable status, or retries
   *   exhausted), LlmTimeoutError, LlmNetworkError, LlmAbortError (caller's signal)
   */
  async chat(req: ChatRequest): Promise<ChatResult> {
    const body: Record<string, unknown> = {
      model: req.model ?? this.model,
      messages: req.messages,
      ...(req.temperature !== undefined && { temperature: req.temperature }),
      ...(req.maxTokens !== undefined && { max_tokens: req.maxTokens }),
      ...(req.topP !== undefined && { top_p: req.topP }),
      ...(req.seed !== undefined && { seed: req.seed }),
      ...(req.stop && { stop: req.stop }),
      ...(req.responseFormat && { response_format: req.responseFormat }),
      ...((req.logprobs || req.topLogprobs !== undefined) && { logprobs: true }),
      ...(req.topLogprobs !== undefined && { top_logprobs: req.topLogprobs }),
      ...req.extraBody,
      stream: false,
    };
    const payload = JSON.stringify(body);
    const deadline = Date.now() + this.opts.deadlineMs;
    // One caller signal (a command's Ctrl-C) is shared by every call of a run: each waiting call
    // holds one abort listener, removed when it ends, so their count is the calls waiting, not a
    // leak; Node's default of 10 would print a MaxListenersExceededWarning above the real message.
    if (req.signal) setMaxListeners(0, req.signal);
    let attempt = 0;
    for (;;) {
      attempt++;
      if (req.signal?.aborted) {
        this.counters.failed++;
        throw new LlmAbortError();
      }
      try {
        const r = await this.limit(() => this.attempt(payload, attempt, req.signal, deadline));
        this.counters.succeeded++;
        return { ...r, attempts: attempt, model: String(body.model) };
      } catch (e) {
        // Only the transport's own errors are retried (fetch failures were wrapped in attempt()).
        if (!(e instanceof LlmError)) {
          this.counters.failed++;
          throw e;
        }
        const err = e;
        if (!err.retryable || attempt > this.opts.maxRetries || req.signal?.aborted) {
          this.counters.failed++;
          throw req.signal?.aborted && !(err instanceof LlmLengthError) ? new LlmAbortError() : err;
        }
        const backoff = Math.min(this.opts.maxBackoffMs, this.opts.minBackoffMs * 2 ** (attempt - 1));
        let delay = Math.round(backoff * (0.75 + Math.random() * 0.5));
        // The server's retry-after up to the cap; past it, our own backoff (the server does not set our clock).
        const asked = err instanceof LlmHttpError ? err.retryAfterMs : undefined;
        if (asked !== undefined && asked <= this.opts.maxRetryAfterMs) delay = Math.max(asked, 0);
        // Every wait counts against the call's deadline: one that would pass it ends the call now.
        if (Date.now() + delay >= deadline) {
          this.counters.failed++;
          throw new LlmTimeoutError(
            `LLM call to ${this.url} gave up after ${attempt} attempt(s): waiting ${delay} ms${asked !== undefined ? ` (retry-after ${Math.round(asked / 1000)} s${asked > this.opts.maxRetryAfterMs ? `, above the ${this.opts.maxRetryAfterMs / 1000} s cap` : ''})` : ''} to retry would pass the call's deadline of ${this.opts.deadlineMs} ms; last error: ${err.message}`,
          );
        }
        this.counters.retries++;
        this.options.onEvent?.({ type: 'retry', attempt, delayMs: delay, reason: err.message });
        await sleep(delay, req.signal);
      }
    }
  }

  private async attempt(payload: string, attempt: number, signal?: AbortSignal, deadline = Infinity): Promise<Omit<ChatResult, 'attempts' | 'model'>> {
    // Aborted while it waited for a slot: never sent, so not counted as a request.
    if (signal?.aborted) throw new LlmAbortError();
    // The attempt's timeout, cut to what is left of the call's deadline.
    const timeoutMs = Math.max(1, Math.min(this.opts.timeoutMs, deadline - Date.now()));
    const timeout = AbortSignal.timeout(timeoutMs);
    const sig = signal ? AbortSignal.any([signal, timeout]) : timeout;
    const headers: Record<string, string> = { 'content-type': 'application/json', accept: 'application/json', ...this.options.headers };
    if (this.apiKey) headers.authorization = `Bearer ${this.apiKey}`;
    this.counters.requests++;
    this.options.onEvent?.({ type: 'request', attempt });
    const t0 = Date.now();
    let status = 0;
    let text: string;
    let retryAfter: string | null = null;
    let contentType: string | null = null;
    let tooLarge = false;
    try {
      const res = await this.fetchImpl(this.url, { method: 'POST', headers, body: payload, signal: sig });
      status = res.status;
      retryAfter = res.headers.get('retry-after');
      contentType = res.headers.get('content-type');
      const body = await readCapped(res, this.opts.maxReplyBytes);
      text = body.text;
      tooLarge = body.tooLarge;
    } catch (e) {
      if (timeout.aborted && !signal?.aborted) {
        this.bump('timeout');
        throw new LlmTimeoutError(`LLM request timed out after ${timeoutMs} ms (${this.url})`);
      }
      if (signal?.aborted) throw new LlmAbortError();
      this.bump('network');
      throw new LlmNetworkError(
        this.redact(
          `LLM request failed (${this.url}): ${(e as Error)?.message ?? e}${(e as { cause?: Error })?.cause ? ` (${(e as { cause: Error }).cause.message})` : ''}`,
        ),
        e,
      );
    }
    if (tooLarge) {
      this.bump('too-large');
      throw new LlmResponseError(
        `LLM reply from ${this.url} (HTTP ${status}) is unreadable: more than ${this.opts.maxReplyBytes} bytes (maxReplyBytes), abandoned at the cap; it begins ${JSON.stringify(this.redact(text.slice(0, 200)))}`,
        status,
        this.redact(text.slice(0, 200)),
      );
    }
    this.bump(String(status));
    this.options.onEvent?.({ type: 'response', status, ms: Date.now() - t0 });
    if (status < 200 || status >= 300) {
      const snippet = this.redact(text.slice(0, 500));
      throw new LlmHttpError(`LLM HTTP ${status} (${this.url}): ${snippet}`, status, snippet, parseRetryAfter(retryAfter));
    }
    const r = readCompletion(text, status, this.url, (x) => this.redact(x), contentType);
    if ('error' in r) {
      this.bump('bad-body');
      throw r.error;
    }
    const usage = r.usage;
    this.counters.promptTokens += usage.promptTokens;
    this.counters.completionTokens += usage.completionTokens;
    if (r.finishReason === 'length') {
      throw new LlmLengthError(`LLM answer truncated at max_tokens (finish_reason "length", ${usage.completionTokens} completion tokens)`, r.content, usage);
    }
    return {
      content: r.content,
      ...(r.reasoning && { reasoning: r.reasoning }),
      finishReason: r.finishReason,
      usage,
      ...(r.logprobs && { logprobs: r.logprobs }),
    };
  }

  /**
   * A chat completion whose answer must be JSON valid against `schema` (JSON Schema, ajv).
   * On invalid JSON or schema errors, one repair round-trip is made (the invalid answer and the
   * errors are shown to the model); then {@link LlmJsonError}.
   * @returns the parsed value plus the chat result of the call that produced it (usage summed)
   * @throws LlmJsonError, plus everything {@link chat} throws
   */
  async chatJson<T = unknown>(schema: object, req: ChatRequest, opts: ChatJsonOptions = {}): Promise<ChatJsonResult<T>> {
    const validate = validatorFor(schema);
    const repairs = opts.repairs ?? 1;
    const request: ChatRequest = { ...req };
    if (opts.useResponseFormat && !req.responseFormat) {
      request.responseFormat = { type: 'json_schema', json_schema: { name: opts.schemaName ?? 'answer', schema } };
    }
    let messages = [...req.messages];
    const total: ChatUsage = { promptTokens: 0, completionTokens: 0, totalTokens: 0 };
    let attempts = 0;
    for (let round = 0; ; round++) {
      const r = await this.chat({ ...request, messages });
      attempts += r.attempts;
      total.promptTokens += r.usage.promptTokens;
      total.completionTokens += r.usage.completionTokens;
      total.totalTokens += r.usage.totalTokens;
      let errors: string[];
      try {
        const value = extractJson(r.content);
        if (validate(value)) return { ...r, usage: total, attempts, value: value as T, repaired: round > 0 };
        errors = (validate.errors ?? []).slice(0, 20).map((e) => `${e.instancePath || '/'} ${e.message ?? 'invalid'}`);
      } catch (e) {
        errors = [`not valid JSON: ${(e as Error).message}`];
      }
      if (round >= repairs) {
        throw new LlmJsonError(`LLM answer is not valid JSON for the schema after ${round} repair(s): ${errors.join('; ')}`, r.content, errors);
      }
      this.counters.repairs++;
      messages = [
        ...req.messages,
        { role: 'assistant', content: r.content.slice(0, 20_000) },
        {
          role: 'user',
          content: `Your previous answer could not be used: ${errors.join('; ')}.\nReply again with only one JSON value that satisfies this JSON Schema, with no other text:\n${JSON.stringify(schema)}`,
        },
      ];
    }
  }
}
