/**
 * OpenAI-compatible chat server on node:http:
 * `GET /v1/models`, `POST /v1/chat/completions` (plain JSON and `stream: true` server-sent events).
 *
 * Two backends:
 * - a step-wise model backend ({@link ServeStepper}, lib/serve/stepper.ts; what `serve` uses):
 *   continuous batching. Each choice of each request is one row of the native decode engine with
 *   its own sampling settings (temperature, top_p, top_k, min_p, seed, max_tokens, stop ids,
 *   logprobs); a request that arrives while the batch decodes joins at the next step (its prefill
 *   runs in that step), finished rows leave at once and their KV slots are reused. At most
 *   `maxBatch` rows decode together; requests beyond that wait in a queue of `maxQueue` requests,
 *   and one that finds the queue full gets 429 (`code: "queue_full"`, `Retry-After: 1`); 503 while
 *   shutting down. A client that disconnects cancels its rows (queued or running).
 *   Tokens are detokenized incrementally (never splitting a UTF-8 character), so stop strings end
 *   decoding when they appear (the row is cancelled; `completion_tokens` counts the tokens up to and
 *   including the one that completed the stop string; the text is cut before the stop string) and
 *   `stream: true` sends each token's text as it is decoded (text that could be the start of a stop
 *   string or of a `<think>` tag is held back until it is decided).
 * - a whole-batch backend ({@link ServeBackend}, `generate`): requests within `batchWindowMs` that
 *   share their sampling parameters go into one call; stop strings are cut post hoc; streaming
 *   sends the text when the batch finishes (kept for test doubles and other batch engines).
 *
 * Request fields honoured: model (the served id, one of the served adapters — vLLM's
 * `--lora-modules`, whose rows decode with that adapter — or omitted), messages (string content or
 * text parts; roles system / developer / user / assistant (with `tool_calls`) / tool (with
 * `tool_call_id`), rendered by the chat template), tools (passed to the template), temperature
 * (default: `samplingDefaults`, the model's generation_config.json as vLLM's `--generation-config
 * auto`, else 1; 0 = greedy), top_p, top_k and min_p (vLLM extensions; the same defaults), max_tokens /
 * max_completion_tokens, n, seed, stop (strings), logprobs + top_logprobs (0-20; model backend),
 * ignore_eos (vLLM extension; model backend),
 * stream, stream_options.include_usage, chat_template_kwargs.enable_thinking (vLLM/SGLang style).
 * Ignored: response_format (no constrained decoding), tool_choice. Refused with a 400 naming the
 * parameter, as this sampler does not apply them: logit_bias, presence_penalty, frequency_penalty,
 * repetition_penalty, min_tokens (each accepted at its no-op value: {}, 0, 0, 1, 0).
 * `GET /v1/models/{id}` returns the model card (404 for another id). A bind address other than
 * loopback needs an API key, or `allowUnauthenticated` (said in the log; {@link checkBindAuth}).
 *
 * Logprobs: `choices[].logprobs.content[]` = `{token, logprob, bytes, top_logprobs: [{token,
 * logprob, bytes}]}` per completion token (the final stop id, e.g. `<|im_end|>`, is not part of the
 * content and has no entry; it is counted in completion_tokens). The values are the RAW model
 * distribution, log_softmax(logits) at temperature 1 before top-k / top-p / min-p — vLLM's default
 * (`--logprobs-mode raw_logprobs`) — so P(yes) read from top_logprobs equals the local judge's
 * (lib/judge/local.ts, which scores the same log_softmax). `token` is the token's text, or
 * `bytes:\xNN…` when its bytes are not valid UTF-8 alone; `bytes` its UTF-8 bytes.
 *
 * Thinking: text before `</think>` is returned as `message.reasoning_content`, the rest as content
 * (as vLLM does with a reasoning parser); streamed as `delta.reasoning_content` / `delta.content`.
 * Seeds: a request's choice i samples from its own generator (seed for choice 0, a mix of seed and
 * i for the others), so a seeded request gives the same completion alone or in any batch.
 * Errors use OpenAI's shape `{error: {message, type, param, code}}` with 400 / 401 / 403 / 404 / 405 /
 * 408 / 413 / 429 / 500 / 503.
 *
 * Hardening (issue 38 item 7): Host / Origin checks refuse cross-site requests (403), an optional
 * API key (401, constant-time comparison), header / whole-request timeouts (408), and a prompt that
 * cannot fit the context is refused before it is tokenized (lib/serve/stepper.ts PromptTooLongError).
 */
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { createHash, randomUUID, timingSafeEqual } from 'node:crypto';
import { hostname, networkInterfaces } from 'node:os';
import { splitThink, THINK_TAGS } from '../llm/think.js';
import type { ChatMessage } from '../llm/messages.js';
import { IncrementalDetokenizer, PromptTooLongError, type ServeStepper } from './stepper.js';
import { parseJsonKeepingFloats } from '../model/chat.js';
import type { EngineStep, EngineToken } from '../model/engine.js';
import type { SamplingSettings } from '../addon.js';

/** Sampling options of one backend call (shared by every prompt of the batch). */
export interface ServeGenerateOptions extends SamplingSettings<'n' | 'temperature' | 'topP' | 'topK' | 'maxNewTokens' | 'seed'> {
  /** undefined = the chat template's default. */
  enableThinking?: boolean;
  /** One of the served adapters (ChatServerOptions.adapters); unset = the served model. */
  adapter?: string;
  signal?: AbortSignal;
}

/** One generated completion. */
export interface ServeCompletion {
  text: string;
  finishReason: 'stop' | 'length';
  completionTokens: number;
}

/** What the server needs from a model: chat-rendered batched generation. */
export interface ServeBackend {
  /**
   * Step-wise model backend: when present (and `stepper()` returns one), requests are served by
   * continuous batching on it instead of `generate` (see the module doc). Created on first use.
   */
  stepper?: () => ServeStepper | undefined;
  /**
   * result[p] = the n completions of prompt p plus its prompt length in tokens, or `{error}` for a
   * prompt that cannot run (e.g. longer than the context; the server answers 400 for that request
   * only). Rejecting fails every request of the batch (500).
   */
  generate(prompts: ChatMessage[][], opts: ServeGenerateOptions): Promise<ServeResult[]>;
}

/** Per-prompt result of {@link ServeBackend.generate}. */
export type ServeResult = { promptTokens: number; completions: ServeCompletion[] } | { error: string };

/** Options of {@link ChatServer}. */
export interface ChatServerOptions {
  backend: ServeBackend;
  /** Served model id (`/v1/models`, the `model` field of requests and responses). */
  modelId: string;
  /**
   * Served LoRA adapters besides `modelId` (vLLM `--lora-modules name=path`): each name is listed
   * in `/v1/models` (with `parent` = modelId) and a request whose `model` is that name decodes with
   * that adapter (the backend's `adapter` option / row field).
   */
  adapters?: readonly string[];
  /**
   * Sampling defaults for a request that does not set them (the model's generation_config.json,
   * as vLLM's `--generation-config auto`); unset keys fall back to OpenAI's / vLLM's defaults
   * (temperature 1, top_p 1, top_k off, min_p 0).
   */
  samplingDefaults?: { temperature?: number; topP?: number; topK?: number; minP?: number };
  host?: string;
  /** 0 = any free port. */
  port?: number;
  /** Max prompts per backend call / rows decoding together on a step-wise backend (default 32; the stepper's maxRows caps it). */
  maxBatch?: number;
  /** Step-wise backend: requests waiting for a row at most, beyond which requests get 429 (default 256). */
  maxQueue?: number;
  /** Wait this long for more requests before starting an idle batch (default 5 ms). */
  batchWindowMs?: number;
  /** Default max_tokens (default 1024) and its cap (default 8192). */
  defaultMaxTokens?: number;
  maxTokensCap?: number;
  /** Max n per request (default 16). */
  maxN?: number;
  /** Server-wide thinking default when the request does not say (default: template's default). */
  enableThinking?: boolean;
  /** Body size limit, bytes (default 8 MiB). */
  maxBodyBytes?: number;
  /** Require `Authorization: Bearer <apiKey>` on every route but /health (constant-time comparison), as vLLM's --api-key. */
  apiKey?: string;
  /** Serve on a non-loopback address without `apiKey` (refused otherwise; {@link checkBindAuth}). */
  allowUnauthenticated?: boolean;
  /**
   * Host names accepted in the Host and Origin headers besides localhost, 127.0.0.1, [::1] and the
   * bind address (a wildcard bind adds this machine's host name and interface addresses); '*' = any.
   * Others get 403, so a web page in the user's browser cannot drive the server (cross-site POSTs
   * carry a foreign Origin; DNS rebinding a foreign Host).
   */
  allowedHosts?: readonly string[];
  /** Milliseconds a client has to send the headers (default 10 000) / the whole request (default 30 000); then 408. */
  headersTimeoutMs?: number;
  requestTimeoutMs?: number;
  log?: (line: string) => void;
}

/** Counters of a server. */
export interface ChatServerStats {
  requests: number;
  batches: number;
  /** Prompts generated (sum of batch sizes). */
  prompts: number;
  maxBatchSeen: number;
  promptTokens: number;
  completionTokens: number;
  errors: number;
  /** Step-wise backend: decode steps run, requests refused with 429, requests cancelled by a disconnect. */
  steps: number;
  rejected: number;
  cancelled: number;
  /** Step-wise backend now: rows decoding or queued in the engine, requests waiting for rows. */
  liveRows: number;
  queued: number;
}

class HttpError extends Error {
  constructor(
    readonly status: number,
    message: string,
    readonly type = 'invalid_request_error',
    readonly param: string | null = null,
    readonly code: string | null = null,
  ) {
    super(message);
  }
}

interface Params {
  n: number;
  temperature: number;
  topP: number;
  topK: number;
  minP: number;
  /** -1 = no logprobs; else top_logprobs (0..20). */
  topLogprobs: number;
  /** vLLM's ignore_eos: the tokenizer's stop ids do not end the completion. */
  ignoreEos?: boolean;
  tools?: unknown;
  maxNewTokens: number;
  /** The request set max_tokens / max_completion_tokens (else maxNewTokens is the server default, cut to the context left after the prompt). */
  maxTokensGiven?: boolean;
  seed?: number;
  enableThinking?: boolean;
  stop: string[];
  /** A served adapter's name (the request's `model`); unset = the served model. */
  adapter?: string;
}

interface Entry {
  messages: ChatMessage[];
  params: Params;
  key: string;
  cancelled: boolean;
  resolve: (r: ServeResult) => void;
  reject: (e: unknown) => void;
}

/**
 * OpenAI / vLLM sampling parameters the sampler does not apply, each with its no-op value (accepted):
 * given otherwise a request is refused with 400 naming it, never answered as if it had been applied
 * (a token biased by −100 was still sampled). Sources: OpenAI chat completions API reference
 * (logit_bias, presence_penalty, frequency_penalty), vLLM SamplingParams (repetition_penalty, min_tokens).
 */
export const UNAPPLIED_PARAMS: readonly { name: string; noop: (v: unknown) => boolean }[] = [
  { name: 'logit_bias', noop: (v) => !!v && typeof v === 'object' && !Array.isArray(v) && Object.keys(v).length === 0 },
  { name: 'presence_penalty', noop: (v) => v === 0 },
  { name: 'frequency_penalty', noop: (v) => v === 0 },
  { name: 'repetition_penalty', noop: (v) => v === 1 },
  { name: 'min_tokens', noop: (v) => v === 0 },
];

/** True for loopback bind addresses (localhost, 127.0.0.0/8, ::1). */
function isLoopback(host: string): boolean {
  const h = host.toLowerCase().replace(/^\[|\]$/g, '');
  return h === 'localhost' || h === '::1' || /^127\.\d+\.\d+\.\d+$/.test(h) || h === '::ffff:127.0.0.1';
}

/**
 * A non-loopback bind (`0.0.0.0`, `::`, a LAN address) serves anyone who can reach the port: it
 * needs an API key, or `allowUnauthenticated` given on purpose. Returns the log line of an
 * unauthenticated non-loopback server (undefined otherwise).
 * @throws Error naming --host, --api-key and --allow-unauthenticated when refused.
 */
export function checkBindAuth(host: string | undefined, apiKey: string | undefined, allowUnauthenticated: boolean | undefined): string | undefined {
  const h = host ?? '127.0.0.1';
  if (isLoopback(h) || apiKey) return undefined;
  if (!allowUnauthenticated)
    throw new Error(
      `--host ${h} is not a loopback address: anyone who can reach the port could use the model; pass --api-key KEY (or PAPERGYM_API_KEY), bind 127.0.0.1, or --allow-unauthenticated to serve without a key on purpose`,
    );
  return `warning: serving on ${h} without an API key (--allow-unauthenticated): anyone who can reach the port can use the model`;
}

function num(v: unknown, name: string, def: number, lo: number, hi: number, int = false): number {
  if (v === undefined || v === null) return def;
  // lo = Number.MIN_VALUE stands for "above 0": the range reads (0, hi].
  const range = lo === Number.MIN_VALUE ? `(0, ${hi}]` : `[${lo}, ${hi}]`;
  if (typeof v !== 'number' || !Number.isFinite(v) || v < lo || v > hi || (int && !Number.isInteger(v)))
    throw new HttpError(400, `${name} must be ${int ? 'an integer' : 'a number'} in ${range}`, 'invalid_request_error', name);
  return v;
}

function messagesOf(v: unknown): ChatMessage[] {
  if (!Array.isArray(v) || !v.length) throw new HttpError(400, 'messages must be a non-empty array', 'invalid_request_error', 'messages');
  return v.map((m, i) => {
    if (!m || typeof m !== 'object') throw new HttpError(400, `messages[${i}] must be an object`, 'invalid_request_error', 'messages');
    const mm = m as { role?: unknown; content?: unknown; tool_calls?: unknown; tool_call_id?: unknown; name?: unknown };
    const role = mm.role;
    if (role !== 'system' && role !== 'user' && role !== 'assistant' && role !== 'developer' && role !== 'tool')
      throw new HttpError(400, `messages[${i}].role must be system, developer, user, assistant or tool`, 'invalid_request_error', 'messages');
    const c = mm.content;
    let content: string;
    if (typeof c === 'string') content = c;
    else if (Array.isArray(c)) {
      content = c
        .map((p) => {
          if (p && typeof p === 'object' && (p as { type?: unknown }).type === 'text' && typeof (p as { text?: unknown }).text === 'string')
            return (p as { text: string }).text;
          throw new HttpError(400, `messages[${i}].content: only text parts are supported`, 'invalid_request_error', 'messages');
        })
        .join('');
    } else if (c === null || c === undefined) content = '';
    else throw new HttpError(400, `messages[${i}].content must be a string or text parts`, 'invalid_request_error', 'messages');
    const out: ChatMessage = { role: role === 'developer' ? 'system' : role, content };
    if (mm.tool_calls !== undefined && mm.tool_calls !== null) {
      if (role !== 'assistant' || !Array.isArray(mm.tool_calls))
        throw new HttpError(400, `messages[${i}].tool_calls must be an array on an assistant message`, 'invalid_request_error', 'messages');
      // The Qwen3 template reads tool_call.function.{name, arguments} (arguments: a JSON string or an object).
      mm.tool_calls.forEach((tc, j) => {
        const f = (tc as { function?: { name?: unknown } } | null)?.function;
        if (!f || typeof f.name !== 'string')
          throw new HttpError(400, `messages[${i}].tool_calls[${j}].function.name must be a string`, 'invalid_request_error', 'messages');
      });
      out.tool_calls = mm.tool_calls;
    }
    if (typeof mm.tool_call_id === 'string') out.tool_call_id = mm.tool_call_id;
    if (typeof mm.name === 'string') out.name = mm.name;
    return out;
  });
}

/** Cuts `text` at the first occurrence of any stop string. */
export function applyStop(text: string, stop: string[]): { text: string; stopped: boolean } {
  let cut = -1;
  for (const s of stop) {
    if (!s) continue;
    const i = text.indexOf(s);
    if (i >= 0 && (cut < 0 || i < cut)) cut = i;
  }
  return cut < 0 ? { text, stopped: false } : { text: text.slice(0, cut), stopped: true };
}

/** The OpenAI-compatible server (see the module docstring). */
/** Seed of choice `index` of a request seeded with `seed`: the seed itself for choice 0, else a splitmix64 mix of (seed, index), 48 bits. */
function rowSeed(seed: number, index: number): number {
  if (index === 0) return seed;
  const M = (1n << 64n) - 1n;
  let z = (BigInt(seed) + BigInt(index) * 0x9e3779b97f4a7c15n) & M;
  z = ((z ^ (z >> 30n)) * 0xbf58476d1ce4e5b9n) & M;
  z = ((z ^ (z >> 27n)) * 0x94d049bb133111ebn) & M;
  return Number((z ^ (z >> 31n)) & ((1n << 48n) - 1n));
}

/** Length of the longest suffix of `text` that is a proper prefix of one of `patterns`. */
function heldBack(text: string, patterns: string[]): number {
  let best = 0;
  for (const p of patterns) {
    if (!p) continue;
    for (let k = Math.min(p.length - 1, text.length); k > best; k--)
      if (text.endsWith(p.slice(0, k))) {
        best = k;
        break;
      }
  }
  return best;
}

interface StepChoice {
  index: number;
  rowId: number;
  detok: IncrementalDetokenizer;
  /** Decoded text so far (cut at a stop string). */
  text: string;
  /** Reasoning / content already streamed. */
  emR: string;
  emC: string;
  /** Tokens generated (the final stop id included). */
  tokens: number;
  lp: { token: string; logprob: number; bytes: number[]; top_logprobs: { token: string; logprob: number; bytes: number[] }[] }[];
  lpSent: number;
  finish: 'stop' | 'length' | null;
}

interface StepReq {
  params: Params;
  prompt: number[];
  stream: boolean;
  write: (choices: unknown[], extra?: Record<string, unknown>) => void;
  choices: StepChoice[];
  done: boolean;
  cancelled?: boolean;
  resolve: () => void;
  reject: (e: unknown) => void;
}

interface RowRef {
  req: StepReq;
  choice: StepChoice;
}

export class ChatServer {
  private server?: Server;
  private queue: Entry[] = [];
  private running = false;
  private timer?: NodeJS.Timeout;
  private st?: ServeStepper | null;
  private waitQ: StepReq[] = [];
  private rows = new Map<number, RowRef>();
  private rowsLive = 0;
  private nextRowId = 1;
  private pumping = false;
  private closing = false;
  private readonly s: ChatServerStats = {
    requests: 0,
    batches: 0,
    prompts: 0,
    maxBatchSeen: 0,
    promptTokens: 0,
    completionTokens: 0,
    errors: 0,
    steps: 0,
    rejected: 0,
    cancelled: 0,
    liveRows: 0,
    queued: 0,
  };
  private readonly created = Math.floor(Date.now() / 1000);
  /** `http://host:port/v1` once started. */
  url = '';

  constructor(private readonly o: ChatServerOptions) {}

  stats(): ChatServerStats {
    return { ...this.s, liveRows: this.rowsLive, queued: this.waitQ.length };
  }

  /** Starts listening; resolves with the base URL (`http://host:port/v1`) and port. */
  async start(): Promise<{ url: string; port: number }> {
    const unauthenticated = checkBindAuth(this.o.host, this.o.apiKey, this.o.allowUnauthenticated);
    if (unauthenticated) this.o.log?.(unauthenticated);
    // connectionsCheckingInterval: how often Node enforces the two timeouts (its default, 30 s, let a
    // trickling body hold a connection for a minute past the timeout).
    const server = createServer({ connectionsCheckingInterval: 500 }, (req, res) => {
      this.handle(req, res).catch((e) => this.fail(res, e));
    });
    server.keepAliveTimeout = 60_000;
    server.requestTimeout = this.o.requestTimeoutMs ?? 30_000;
    server.headersTimeout = Math.min(this.o.headersTimeoutMs ?? 10_000, server.requestTimeout);
    this.server = server;
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen(this.o.port ?? 0, this.o.host ?? '127.0.0.1', () => resolve());
    });
    const a = server.address() as AddressInfo;
    const host = a.family === 'IPv6' ? `[${a.address}]` : a.address;
    this.url = `http://${host}:${a.port}/v1`;
    return { url: this.url, port: a.port };
  }

  /** Stops accepting, rejects queued requests, closes connections. */
  async close(): Promise<void> {
    this.closing = true;
    if (this.timer) clearTimeout(this.timer);
    for (const e of this.queue.splice(0)) e.reject(new HttpError(503, 'server shutting down', 'server_error'));
    const down = new HttpError(503, 'server shutting down', 'server_error');
    for (const r of this.waitQ.splice(0)) {
      r.done = true;
      r.reject(down);
    }
    if (this.st) {
      for (const { req, choice } of this.rows.values()) {
        this.st.cancel(choice.rowId);
        if (!req.done) {
          req.done = true;
          req.reject(down);
        }
      }
      this.rows.clear();
      this.rowsLive = 0;
      await this.st.release();
    }
    const srv = this.server;
    this.server = undefined;
    if (!srv) return;
    srv.closeAllConnections();
    await new Promise<void>((r) => srv.close(() => r()));
  }

  private fail(res: ServerResponse, e: unknown): void {
    const he = e instanceof HttpError ? e : new HttpError(500, (e as Error)?.message ?? String(e), 'server_error');
    if (he.status >= 500) this.s.errors++;
    if (res.headersSent) {
      if (!res.writableEnded) {
        res.write(`data: ${JSON.stringify({ error: { message: he.message, type: he.type, param: he.param, code: he.code } })}\n\n`);
        res.end('data: [DONE]\n\n');
      }
      return;
    }
    res.writeHead(he.status, { 'content-type': 'application/json' });
    res.end(JSON.stringify({ error: { message: he.message, type: he.type, param: he.param, code: he.code } }));
  }

  private async body(req: IncomingMessage): Promise<unknown> {
    const limit = this.o.maxBodyBytes ?? 8 << 20;
    const chunks: Buffer[] = [];
    let size = 0;
    for await (const c of req) {
      size += (c as Buffer).length;
      if (size > limit) throw new HttpError(413, `request body over ${limit} bytes`);
      chunks.push(c as Buffer);
    }
    const text = Buffer.concat(chunks).toString('utf8');
    let b: unknown;
    try {
      b = JSON.parse(text);
    } catch {
      throw new HttpError(400, 'request body is not valid JSON');
    }
    // `tools` reach the chat template: read again keeping `1.0` a float, as transformers renders it (lib/model/chat.ts).
    if (b && typeof b === 'object' && Array.isArray((b as { tools?: unknown }).tools))
      (b as { tools: unknown }).tools = (parseJsonKeepingFloats(text) as { tools: unknown }).tools;
    return b;
  }

  private hostSet?: Set<string>;

  /** Host names (lower case, no port, IPv6 without brackets) accepted in Host / Origin. */
  private allowed(): Set<string> {
    if (this.hostSet) return this.hostSet;
    const set = new Set(['localhost', '127.0.0.1', '::1']);
    const bind = (this.o.host ?? '127.0.0.1').toLowerCase().replace(/^\[|\]$/g, '');
    set.add(bind);
    if (bind === '0.0.0.0' || bind === '::') {
      set.add(hostname().toLowerCase());
      for (const addrs of Object.values(networkInterfaces())) for (const a of addrs ?? []) set.add(a.address.toLowerCase());
    }
    for (const h of this.o.allowedHosts ?? []) set.add(h.toLowerCase().replace(/^\[|\]$/g, ''));
    this.hostSet = set;
    return set;
  }

  /** 403 unless Host (and Origin, when sent) name an allowed host; 401 unless the API key matches. */
  private guard(req: IncomingMessage, path: string): void {
    const any = (this.o.allowedHosts ?? []).includes('*');
    const nameOf = (hostPort: string) => {
      const h = hostPort.trim().toLowerCase();
      const v6 = /^\[([^\]]+)\](?::\d+)?$/.exec(h);
      return v6 ? v6[1]! : h.replace(/:\d+$/, '');
    };
    if (!any) {
      const host = req.headers.host;
      if (!host || !this.allowed().has(nameOf(host))) {
        throw new HttpError(
          403,
          `Host '${host ?? ''}' is not allowed (serve --allowed-hosts adds host names; localhost and the bind address are allowed)`,
          'invalid_request_error',
          null,
          'host_not_allowed',
        );
      }
      const origin = req.headers.origin;
      if (origin !== undefined) {
        let oh = '';
        try {
          oh = nameOf(new URL(origin).host);
        } catch {
          oh = '';
        }
        if (!oh || !this.allowed().has(oh)) {
          throw new HttpError(
            403,
            `Origin '${origin}' is not allowed: cross-site requests are refused (serve --allowed-hosts adds host names)`,
            'invalid_request_error',
            null,
            'origin_not_allowed',
          );
        }
      }
    }
    if (this.o.apiKey && path !== '/health' && path !== '/v1/health') {
      const auth = req.headers.authorization ?? '';
      const m = /^Bearer\s+(.+)$/i.exec(auth);
      const digest = (x: string) => createHash('sha256').update(x, 'utf8').digest();
      if (!m || !timingSafeEqual(digest(m[1]!.trim()), digest(this.o.apiKey))) {
        throw new HttpError(401, 'missing or wrong API key (send Authorization: Bearer <key>)', 'invalid_request_error', null, 'invalid_api_key');
      }
    }
  }

  private async handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const path = (req.url ?? '/').split('?')[0].replace(/\/+$/, '');
    this.guard(req, path);
    const card = (id: string, parent?: string) => ({ id, object: 'model', created: this.created, owned_by: 'papergym-native', ...(parent && { parent }) });
    // The base model, then each --lora-modules adapter (its parent the base), as vLLM lists them.
    const cards = [card(this.o.modelId), ...(this.o.adapters ?? []).map((a) => card(a, this.o.modelId))];
    if (path === '/v1/models' || path === '/models') {
      if (req.method !== 'GET') throw new HttpError(405, 'use GET');
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end(JSON.stringify({ object: 'list', data: cards }));
      return;
    }
    // GET /v1/models/{id} (OpenAI "retrieve model"; the official clients call it). Ids may hold '/'.
    const one = /^\/(?:v1\/)?models\/(.+)$/.exec(path);
    if (one) {
      if (req.method !== 'GET') throw new HttpError(405, 'use GET');
      let id: string;
      try {
        id = decodeURIComponent(one[1]!);
      } catch {
        id = one[1]!;
      }
      const found = cards.find((c) => c.id === id);
      if (!found)
        throw new HttpError(
          404,
          `The model \`${id}\` does not exist (serving ${cards.map((c) => c.id).join(', ')})`,
          'invalid_request_error',
          'model',
          'model_not_found',
        );
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end(JSON.stringify(found));
      return;
    }
    if (path === '/health' || path === '/v1/health') {
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end('{"status":"ok"}');
      return;
    }
    if (path !== '/v1/chat/completions' && path !== '/chat/completions')
      throw new HttpError(
        404,
        `no route ${req.method} ${path || '/'} (this server serves POST /v1/chat/completions and GET /v1/models)`,
        'invalid_request_error',
        null,
        'not_found',
      );
    if (req.method !== 'POST') throw new HttpError(405, 'use POST');
    this.s.requests++;
    const b = (await this.body(req)) as Record<string, unknown>;
    if (!b || typeof b !== 'object' || Array.isArray(b)) throw new HttpError(400, 'request body must be a JSON object');
    const adapter = typeof b.model === 'string' && this.o.adapters?.includes(b.model) ? b.model : undefined;
    if (b.model !== undefined && b.model !== this.o.modelId && adapter === undefined)
      throw new HttpError(
        404,
        `The model \`${String(b.model)}\` does not exist (serving ${[this.o.modelId, ...(this.o.adapters ?? [])].join(', ')})`,
        'invalid_request_error',
        'model',
        'model_not_found',
      );
    const messages = messagesOf(b.messages);
    for (const u of UNAPPLIED_PARAMS) {
      const v = b[u.name];
      if (v !== undefined && v !== null && !u.noop(v))
        throw new HttpError(
          400,
          `${u.name} is not supported by this server (its sampler applies temperature, top_p, top_k and min_p only); leave it out rather than have it ignored`,
          'invalid_request_error',
          u.name,
        );
    }
    const kw = (b.chat_template_kwargs ?? {}) as Record<string, unknown>;
    const et = kw.enable_thinking ?? b.enable_thinking;
    if (et !== undefined && typeof et !== 'boolean')
      throw new HttpError(400, 'chat_template_kwargs.enable_thinking must be a boolean', 'invalid_request_error', 'chat_template_kwargs');
    const stopRaw = b.stop;
    const stop =
      stopRaw === undefined || stopRaw === null
        ? []
        : typeof stopRaw === 'string'
          ? [stopRaw]
          : Array.isArray(stopRaw) && stopRaw.every((s) => typeof s === 'string')
            ? (stopRaw as string[])
            : (() => {
                throw new HttpError(400, 'stop must be a string or an array of strings', 'invalid_request_error', 'stop');
              })();
    const cap = this.o.maxTokensCap ?? 8192;
    const d = this.o.samplingDefaults ?? {};
    const params: Params = {
      n: num(b.n, 'n', 1, 1, this.o.maxN ?? 16, true),
      temperature: num(b.temperature, 'temperature', d.temperature ?? 1, 0, 2),
      topP: num(b.top_p, 'top_p', d.topP ?? 1, Number.MIN_VALUE, 1),
      topK: num(b.top_k, 'top_k', d.topK ?? 0, -1, 1e6, true),
      maxNewTokens: num(b.max_completion_tokens ?? b.max_tokens, 'max_tokens', Math.min(this.o.defaultMaxTokens ?? 1024, cap), 1, cap, true),
      maxTokensGiven: (b.max_completion_tokens ?? b.max_tokens) !== undefined && (b.max_completion_tokens ?? b.max_tokens) !== null,
      seed: b.seed === undefined || b.seed === null ? undefined : num(b.seed, 'seed', 0, 0, Number.MAX_SAFE_INTEGER, true),
      enableThinking: (et as boolean | undefined) ?? this.o.enableThinking,
      stop,
      minP: num(b.min_p, 'min_p', d.minP ?? 0, 0, 1),
      topLogprobs: -1,
      ...(adapter !== undefined && { adapter }),
    };
    if (params.topK < 0) params.topK = 0;
    if (b.logprobs !== undefined && b.logprobs !== null && typeof b.logprobs !== 'boolean')
      throw new HttpError(400, 'logprobs must be a boolean', 'invalid_request_error', 'logprobs');
    const topLogprobs = num(b.top_logprobs, 'top_logprobs', 0, 0, 20, true);
    if (b.top_logprobs !== undefined && b.top_logprobs !== null && b.logprobs !== true)
      throw new HttpError(400, 'top_logprobs requires logprobs: true', 'invalid_request_error', 'top_logprobs');
    if (b.logprobs === true) params.topLogprobs = topLogprobs;
    if (b.ignore_eos !== undefined && typeof b.ignore_eos !== 'boolean')
      throw new HttpError(400, 'ignore_eos must be a boolean', 'invalid_request_error', 'ignore_eos');
    params.ignoreEos = b.ignore_eos === true;
    if (b.tools !== undefined && b.tools !== null) {
      if (!Array.isArray(b.tools)) throw new HttpError(400, 'tools must be an array', 'invalid_request_error', 'tools');
      params.tools = b.tools;
    }
    if (b.stream !== undefined && b.stream !== null && typeof b.stream !== 'boolean')
      throw new HttpError(400, 'stream must be a boolean', 'invalid_request_error', 'stream');
    if (b.stream_options !== undefined && b.stream_options !== null && b.stream !== true)
      throw new HttpError(400, 'stream_options is only allowed with stream: true', 'invalid_request_error', 'stream_options');
    const stream = b.stream === true;
    const includeUsage = stream && !!(b.stream_options as { include_usage?: boolean } | undefined)?.include_usage;
    const stepper = this.stepper();
    if (stepper) return this.handleStep(stepper, res, messages, params, stream, includeUsage);
    const id = `chatcmpl-${randomUUID().replace(/-/g, '')}`;
    const created = Math.floor(Date.now() / 1000);
    const chunk = this.chunkWriter(res, id, created, params.adapter);
    const keepalive = stream ? this.openStream(res, chunk, params.n) : undefined;
    const entry = this.enqueue(messages, params);
    res.once('close', () => {
      if (!res.writableFinished) entry.cancelled = true;
    });
    let result: ServeResult;
    try {
      result = await entry.promise;
    } finally {
      if (keepalive) clearInterval(keepalive);
    }
    if ('error' in result) throw new HttpError(400, result.error, 'invalid_request_error', 'messages');
    const out = result;
    const choices = out.completions.map((c, index) => {
      const cut = applyStop(c.text, stop);
      const { content, reasoning } = splitThink(cut.text, { trim: false });
      return { index, content, reasoning, finish_reason: cut.stopped ? 'stop' : c.finishReason, tokens: c.completionTokens };
    });
    const completionTokens = choices.reduce((a, c) => a + c.tokens, 0);
    const usage = { prompt_tokens: out.promptTokens, completion_tokens: completionTokens, total_tokens: out.promptTokens + completionTokens };
    if (stream) {
      for (const c of choices) {
        if (c.reasoning) chunk([{ index: c.index, delta: { reasoning_content: c.reasoning }, logprobs: null, finish_reason: null }]);
        if (c.content) chunk([{ index: c.index, delta: { content: c.content }, logprobs: null, finish_reason: null }]);
        chunk([{ index: c.index, delta: {}, logprobs: null, finish_reason: c.finish_reason }]);
      }
      if (includeUsage) chunk([], { usage });
      res.end('data: [DONE]\n\n');
      return;
    }
    this.sendCompletion(
      res,
      id,
      created,
      choices.map((c) => ({ ...c, logprobs: null })),
      usage,
      params.adapter,
    );
  }

  // ---- step-wise backend: continuous batching ----

  private stepper(): ServeStepper | undefined {
    if (this.st === undefined) this.st = this.o.backend.stepper?.() ?? null;
    return this.st ?? undefined;
  }

  private maxRows(st: ServeStepper): number {
    return Math.max(1, Math.min(this.o.maxBatch ?? 32, st.maxRows));
  }

  private async handleStep(st: ServeStepper, res: ServerResponse, messages: ChatMessage[], p: Params, stream: boolean, includeUsage: boolean): Promise<void> {
    if (this.closing) throw new HttpError(503, 'server shutting down', 'server_error');
    const maxRows = this.maxRows(st);
    if (p.n > maxRows) throw new HttpError(400, `n must be at most ${maxRows} (the server's max batch)`, 'invalid_request_error', 'n');
    const queueFull = () => {
      if (this.waitQ.length < (this.o.maxQueue ?? 256)) return;
      this.s.rejected++;
      res.setHeader('retry-after', '1');
      throw new HttpError(
        429,
        `server busy: ${this.waitQ.length} requests already waiting (max queue ${this.o.maxQueue ?? 256}); retry later`,
        'rate_limit_error',
        null,
        'queue_full',
      );
    };
    queueFull();
    // A client that goes away while its prompt is encoded must not get rows on the engine: the
    // 'close' listener below is only registered after encode, and 'close' does not fire twice.
    let gone = false;
    const onGone = () => {
      if (!res.writableFinished) gone = true;
    };
    res.once('close', onGone);
    let ids: number[];
    try {
      ids = await st.encode(messages, { enableThinking: p.enableThinking, tools: p.tools });
    } catch (e) {
      if (e instanceof PromptTooLongError) throw new HttpError(400, e.message, 'invalid_request_error', 'messages');
      throw new HttpError(400, `messages cannot be rendered by the chat template: ${(e as Error).message}`, 'invalid_request_error', 'messages');
    } finally {
      res.off('close', onGone);
    }
    if (gone || res.destroyed) {
      this.s.cancelled++;
      return;
    }
    queueFull(); // requests that were encoded meanwhile may have filled it
    if (this.closing) throw new HttpError(503, 'server shutting down', 'server_error');
    // No max_tokens in the request: the server default, cut to what the context leaves after the
    // prompt (vLLM: max_model_len − prompt length), instead of a 400 about a max_tokens the client never sent.
    if (!p.maxTokensGiven && ids.length < st.capacity) p.maxNewTokens = Math.min(p.maxNewTokens, st.capacity - ids.length);
    if (!p.maxTokensGiven && ids.length >= st.capacity)
      throw new HttpError(400, `prompt of ${ids.length} tokens leaves no room in the context of ${st.capacity} tokens`, 'invalid_request_error', 'messages');
    if (ids.length + p.maxNewTokens > st.capacity)
      throw new HttpError(
        400,
        `prompt of ${ids.length} tokens + max_tokens ${p.maxNewTokens} exceeds the context of ${st.capacity}`,
        'invalid_request_error',
        'messages',
      );
    const id = `chatcmpl-${randomUUID().replace(/-/g, '')}`;
    const created = Math.floor(Date.now() / 1000);
    const write = this.chunkWriter(res, id, created, p.adapter);
    const r: StepReq = {
      params: p,
      prompt: ids,
      stream,
      write,
      choices: Array.from({ length: p.n }, (_, index) => ({
        index,
        rowId: this.nextRowId++,
        detok: new IncrementalDetokenizer(),
        text: '',
        emR: '',
        emC: '',
        tokens: 0,
        lp: [],
        lpSent: 0,
        finish: null,
      })),
      done: false,
      resolve: () => undefined,
      reject: () => undefined,
    };
    const finished = new Promise<void>((a, b) => {
      r.resolve = a;
      r.reject = b;
    });
    const keepalive = stream ? this.openStream(res, write, p.n) : undefined;
    res.once('close', () => {
      if (!r.done) this.cancelReq(st, r);
    });
    this.waitQ.push(r);
    this.pump(st).catch((e: Error) => this.o.log?.(`decode loop: ${e.message}`));
    try {
      await finished;
    } finally {
      if (keepalive) clearInterval(keepalive);
    }
    if (r.cancelled) return;
    const withLp = p.topLogprobs >= 0;
    const completionTokens = r.choices.reduce((a, c) => a + c.tokens, 0);
    const usage = { prompt_tokens: ids.length, completion_tokens: completionTokens, total_tokens: ids.length + completionTokens };
    this.s.promptTokens += ids.length;
    this.s.completionTokens += completionTokens;
    if (stream) {
      if (includeUsage) write([], { usage });
      res.end('data: [DONE]\n\n');
      return;
    }
    this.sendCompletion(
      res,
      id,
      created,
      r.choices.map((c) => ({ index: c.index, ...splitThink(c.text, { trim: false }), logprobs: withLp ? { content: c.lp } : null, finish_reason: c.finish })),
      usage,
      p.adapter,
    );
  }

  /** Writes one `data:` event of a streamed completion (OpenAI `chat.completion.chunk`), unless the client is gone. */
  private chunkWriter(res: ServerResponse, id: string, created: number, model = this.o.modelId): (choices: unknown[], extra?: Record<string, unknown>) => void {
    return (choices, extra = {}) => {
      if (!res.writableEnded && !res.destroyed)
        res.write(`data: ${JSON.stringify({ id, object: 'chat.completion.chunk', created, model, choices, ...extra })}\n\n`);
    };
  }

  /** Starts an event stream: the SSE head, the role chunk of each of the n choices, and a keep-alive comment every 15 s (the caller clears the timer). */
  private openStream(res: ServerResponse, chunk: (choices: unknown[]) => void, n: number): NodeJS.Timeout {
    res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache', connection: 'keep-alive' });
    chunk(Array.from({ length: n }, (_, index) => ({ index, delta: { role: 'assistant', content: '' }, logprobs: null, finish_reason: null })));
    return setInterval(() => res.write(': keep-alive\n\n'), 15_000);
  }

  /** The non-streamed reply: one OpenAI `chat.completion` body (reasoning as `reasoning_content` when the text has a think block). */
  private sendCompletion(
    res: ServerResponse,
    id: string,
    created: number,
    choices: { index: number; content: string; reasoning?: string; logprobs: unknown; finish_reason: string | null }[],
    usage: Record<string, number>,
    model = this.o.modelId,
  ): void {
    res.writeHead(200, { 'content-type': 'application/json' });
    res.end(
      JSON.stringify({
        id,
        object: 'chat.completion',
        created,
        model,
        choices: choices.map((c) => ({
          index: c.index,
          message: { role: 'assistant', content: c.content, ...(c.reasoning !== undefined ? { reasoning_content: c.reasoning } : {}) },
          logprobs: c.logprobs,
          finish_reason: c.finish_reason,
        })),
        usage,
      }),
    );
  }

  /** A client went away: its queued request is dropped, its running rows cancelled. */
  private cancelReq(st: ServeStepper, r: StepReq): void {
    r.done = true;
    r.cancelled = true;
    this.s.cancelled++;
    const qi = this.waitQ.indexOf(r);
    if (qi >= 0) this.waitQ.splice(qi, 1);
    else
      for (const c of r.choices)
        if (this.rows.has(c.rowId)) {
          st.cancel(c.rowId);
          this.rows.delete(c.rowId);
          this.rowsLive--;
        }
    r.resolve();
  }

  /** Adds waiting requests (FIFO) while their rows fit in the batch; returns how many were added. */
  private admit(st: ServeStepper): number {
    const maxRows = this.maxRows(st);
    let added = 0;
    while (this.waitQ.length && this.rowsLive + this.waitQ[0].params.n <= maxRows) {
      const r = this.waitQ.shift()!;
      const p = r.params;
      try {
        for (const c of r.choices) {
          st.add({
            id: c.rowId,
            prompt: r.prompt,
            temperature: p.temperature,
            topK: p.topK,
            topP: p.topP,
            minP: p.minP,
            seed: p.seed === undefined ? undefined : rowSeed(p.seed, c.index),
            maxNewTokens: p.maxNewTokens,
            stopIds: p.ignoreEos ? [] : [...st.stopIds],
            topLogprobs: p.topLogprobs,
            ...(p.adapter !== undefined && { adapter: p.adapter }),
          });
          this.rows.set(c.rowId, { req: r, choice: c });
          this.rowsLive++;
        }
      } catch (e) {
        for (const c of r.choices)
          if (this.rows.delete(c.rowId)) {
            st.cancel(c.rowId);
            this.rowsLive--;
          }
        r.done = true;
        r.reject(new HttpError(400, (e as Error).message, 'invalid_request_error'));
        continue;
      }
      this.s.prompts++;
      added++;
    }
    return added;
  }

  /**
   * The decode loop: runs while rows are live or requests wait. Pipelined: as soon as a step's
   * tokens are back, the next step starts on the engine (worker thread / GPU) while this step's
   * tokens are routed on the event loop (detokenized, checked for stop strings, streamed), so the
   * device does not wait for the event loop. A row a stop string or a disconnect ends while the
   * next step runs is cancelled on the engine at the step after; the one token it still gets is
   * dropped (its row is gone from `rows`).
   */
  private async pump(st: ServeStepper): Promise<void> {
    if (this.pumping) return;
    this.pumping = true;
    this.s.batches++;
    let next: Promise<EngineStep> | undefined;
    // The pipelined step may reject while the previous step's tokens are routed (no await on it
    // yet): mark it handled now so Node does not raise an unhandled rejection (which ends the
    // process); `await next` below still receives the error.
    const launch = (): Promise<EngineStep> => {
      const p = st.step();
      p.catch(() => undefined);
      return p;
    };
    try {
      for (;;) {
        if (!next) {
          this.admit(st);
          if (this.rowsLive === 0) break;
          next = launch();
        }
        let step: EngineStep;
        try {
          step = await next;
        } catch (e) {
          next = undefined;
          this.failRows(st, new HttpError(500, `generation failed: ${(e as Error).message}`, 'server_error'));
          continue;
        }
        next = undefined;
        this.s.steps++;
        this.s.maxBatchSeen = Math.max(this.s.maxBatchSeen, step.tokens.length);
        if (step.joined) this.o.log?.(`${step.joined} joined: ${step.tokens.length} rows decoding, ${step.waiting} waiting`);
        const added = this.admit(st);
        if (added > 0 || step.tokens.some((t) => t.finish === null && this.rows.has(t.id))) next = launch();
        try {
          await this.dispatch(st, step.tokens);
        } catch (e) {
          // Routing failed (detokenizer, token table): the rows' text is no longer known to be
          // complete, so their requests fail; the step in flight (if any) returns tokens for
          // cancelled rows, which are dropped.
          this.failRows(st, new HttpError(500, `generation failed: ${(e as Error).message}`, 'server_error'));
        }
      }
    } finally {
      this.pumping = false;
    }
  }

  /** Fails every request with live rows with `err` and cancels their rows on the engine (so none keeps decoding for nobody). */
  private failRows(st: ServeStepper, err: HttpError): void {
    for (const { req, choice } of this.rows.values()) {
      try {
        st.cancel(choice.rowId);
      } catch {
        // the engine already dropped the row
      }
      if (!req.done) {
        req.done = true;
        req.reject(err);
      }
    }
    this.rows.clear();
    this.rowsLive = 0;
  }

  /** Routes one step's tokens to their choices: detokenize, stop strings, stream, finish. */
  private async dispatch(st: ServeStepper, tokens: EngineToken[]): Promise<void> {
    const touched: { row: RowRef; t: EngineToken }[] = [];
    for (const t of tokens) {
      const row = this.rows.get(t.id);
      if (!row || row.req.done) continue;
      const c = row.choice;
      c.tokens++;
      const isStopId = t.finish === 'stop';
      if (!isStopId) {
        c.detok.push(t.token);
        if (row.req.params.topLogprobs >= 0) {
          const ti = st.tokenInfo(t.token);
          const top: { token: string; logprob: number; bytes: number[] }[] = [];
          if (t.topIds) t.topIds.forEach((tid, k) => top.push({ ...st.tokenInfo(tid), logprob: t.topLogprobs![k] }));
          c.lp.push({ token: ti.token, logprob: t.rawLogprob, bytes: ti.bytes, top_logprobs: top });
        }
      }
      touched.push({ row, t });
    }
    if (!touched.length) return;
    const windows = touched.flatMap(({ row }) => row.choice.detok.windows());
    const texts = await st.decodeBatch(windows);
    touched.forEach(({ row, t }, k) => {
      const { req, choice: c } = row;
      if (req.done) return;
      const final = t.finish !== null;
      const before = c.text.length;
      c.text += c.detok.accept(texts[2 * k], texts[2 * k + 1], final);
      let finish: 'stop' | 'length' | null = t.finish;
      const stops = req.params.stop.filter((x) => x);
      if (stops.length && c.text.length > before) {
        const maxLen = Math.max(...stops.map((x) => x.length));
        const from = Math.max(0, before - maxLen + 1);
        let cut = -1;
        for (const x of stops) {
          const i = c.text.indexOf(x, from);
          if (i >= 0 && (cut < 0 || i < cut)) cut = i;
        }
        if (cut >= 0) {
          c.text = c.text.slice(0, cut);
          finish = 'stop';
          if (!final) st.cancel(c.rowId);
        }
      }
      if (finish) {
        c.finish = finish;
        this.rows.delete(c.rowId);
        this.rowsLive--;
      }
      if (req.stream) this.emit(req, c);
      if (req.choices.every((x) => x.finish)) {
        req.done = true;
        req.resolve();
      }
    });
  }

  /** Streams what is decided of choice `c`: reasoning / content deltas and new logprob entries. */
  private emit(req: StepReq, c: StepChoice): void {
    const hold = c.finish ? 0 : heldBack(c.text, [...req.params.stop, ...THINK_TAGS]);
    const split = splitThink(c.text.slice(0, c.text.length - hold), { trim: false });
    const delta: Record<string, string> = {};
    const r = split.reasoning ?? '';
    if (r.length > c.emR.length && r.startsWith(c.emR)) {
      delta.reasoning_content = r.slice(c.emR.length);
      c.emR = r;
    }
    if (split.content.length > c.emC.length && split.content.startsWith(c.emC)) {
      delta.content = split.content.slice(c.emC.length);
      c.emC = split.content;
    }
    const lp = req.params.topLogprobs >= 0 && c.lp.length > c.lpSent ? { content: c.lp.slice(c.lpSent) } : null;
    if (lp) c.lpSent = c.lp.length;
    if (Object.keys(delta).length || lp) req.write([{ index: c.index, delta, logprobs: lp, finish_reason: null }]);
    if (c.finish) req.write([{ index: c.index, delta: {}, logprobs: null, finish_reason: c.finish }]);
  }

  private enqueue(messages: ChatMessage[], params: Params): Entry & { promise: Promise<ServeResult> } {
    const key = JSON.stringify([
      params.n,
      params.temperature,
      params.topP,
      params.topK,
      params.maxNewTokens,
      params.seed ?? null,
      params.enableThinking ?? null,
      params.adapter ?? null,
    ]);
    let resolve!: Entry['resolve'];
    let reject!: Entry['reject'];
    const promise = new Promise<ServeResult>((a, b) => {
      resolve = a;
      reject = b;
    });
    const e = { messages, params, key, cancelled: false, resolve, reject, promise };
    this.queue.push(e);
    this.schedule();
    return e;
  }

  private schedule(): void {
    if (this.running || this.timer || !this.queue.length) return;
    this.timer = setTimeout(() => {
      this.timer = undefined;
      void this.flush();
    }, this.o.batchWindowMs ?? 5);
  }

  private async flush(): Promise<void> {
    if (this.running) return;
    this.queue = this.queue.filter((e) => !e.cancelled);
    if (!this.queue.length) return;
    this.running = true;
    const key = this.queue[0].key;
    const maxBatch = this.o.maxBatch ?? 32;
    const batch: Entry[] = [];
    const rest: Entry[] = [];
    for (const e of this.queue) (e.key === key && batch.length < maxBatch ? batch : rest).push(e);
    this.queue = rest;
    const p = batch[0].params;
    const ac = new AbortController();
    const watch = setInterval(() => {
      if (batch.every((e) => e.cancelled)) ac.abort(new Error('all clients disconnected'));
    }, 200);
    try {
      const seed = p.seed ?? Math.floor(Math.random() * 2 ** 31);
      const out = await this.o.backend.generate(
        batch.map((e) => e.messages),
        {
          n: p.n,
          temperature: p.temperature,
          topP: p.topP,
          topK: p.topK,
          maxNewTokens: p.maxNewTokens,
          seed,
          enableThinking: p.enableThinking,
          ...(p.adapter !== undefined && { adapter: p.adapter }),
          signal: ac.signal,
        },
      );
      if (out.length !== batch.length) throw new Error(`backend returned ${out.length} results for ${batch.length} prompts`);
      this.s.batches++;
      this.s.prompts += batch.length;
      this.s.maxBatchSeen = Math.max(this.s.maxBatchSeen, batch.length);
      batch.forEach((e, i) => {
        const r = out[i];
        if (!('error' in r)) {
          this.s.promptTokens += r.promptTokens;
          this.s.completionTokens += r.completions.reduce((a, c) => a + c.completionTokens, 0);
        }
        e.resolve(r);
      });
      this.o.log?.(`batch of ${batch.length} (n=${p.n}, T=${p.temperature}, max_tokens=${p.maxNewTokens})`);
    } catch (err) {
      for (const e of batch) e.reject(err);
    } finally {
      clearInterval(watch);
      this.running = false;
      if (this.queue.length) void this.flush();
    }
  }
}
