/**
 * OpenAI-compatible chat server on node:http (issue 6 item 4): `GET /v1/models`,
 * `POST /v1/chat/completions` (plain JSON and `stream: true` server-sent events). Requests are
 * batched into generation: requests that arrive within `batchWindowMs`, or while a generation is
 * running, and that share the sampling parameters (temperature, top_p, top_k, max_tokens, n,
 * seed, thinking switch) go into one backend call of up to `maxBatch` prompts. One generation runs
 * at a time (the model is serialised anyway). Typical use: serve a frozen base as the judge of
 * another run (`--judge http --judge-url http://host:port/v1`).
 *
 * Request fields honoured: model (must be the served id, or omitted), messages (string content or
 * text parts), temperature (default 1; 0 = greedy), top_p, top_k (vLLM extension), max_tokens /
 * max_completion_tokens, n, seed, stop (strings; cut post hoc, finish_reason "stop"), stream,
 * stream_options.include_usage, chat_template_kwargs.enable_thinking (vLLM/SGLang style).
 * Ignored: response_format (no constrained decoding), logprobs, tools, penalties.
 * Thinking: text before `</think>` is returned as `message.reasoning_content`, the rest as content
 * (as vLLM does with a reasoning parser). Streaming sends the role chunk at once and the content
 * when the batch finishes (the backend returns whole completions), then `data: [DONE]`.
 * Errors use OpenAI's shape `{error: {message, type, param, code}}` with 400 / 404 / 405 / 413 / 500.
 */
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { randomUUID } from 'node:crypto';
import { splitThink as splitReasoning } from '../llm/think.js';

/** A chat message as the backend receives it. */
export interface ServeMessage {
  role: 'system' | 'user' | 'assistant';
  content: string;
}

/** Sampling options of one backend call (shared by every prompt of the batch). */
export interface ServeGenerateOptions {
  n: number;
  /** 0 = greedy. */
  temperature: number;
  topP: number;
  /** 0 = off. */
  topK: number;
  maxNewTokens: number;
  seed: number;
  /** undefined = the chat template's default. */
  enableThinking?: boolean;
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
   * result[p] = the n completions of prompt p plus its prompt length in tokens, or `{error}` for a
   * prompt that cannot run (e.g. longer than the context; the server answers 400 for that request
   * only). Rejecting fails every request of the batch (500).
   */
  generate(prompts: ServeMessage[][], opts: ServeGenerateOptions): Promise<ServeResult[]>;
}

/** Per-prompt result of {@link ServeBackend.generate}. */
export type ServeResult = { promptTokens: number; completions: ServeCompletion[] } | { error: string };

/** Options of {@link ChatServer}. */
export interface ChatServerOptions {
  backend: ServeBackend;
  /** Served model id (`/v1/models`, the `model` field of requests and responses). */
  modelId: string;
  host?: string;
  /** 0 = any free port. */
  port?: number;
  /** Max prompts per backend call (default 32). */
  maxBatch?: number;
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
  maxNewTokens: number;
  seed?: number;
  enableThinking?: boolean;
  stop: string[];
}

interface Entry {
  messages: ServeMessage[];
  params: Params;
  key: string;
  cancelled: boolean;
  resolve: (r: ServeResult) => void;
  reject: (e: unknown) => void;
}

function num(v: unknown, name: string, def: number, lo: number, hi: number, int = false): number {
  if (v === undefined || v === null) return def;
  if (typeof v !== 'number' || !Number.isFinite(v) || v < lo || v > hi || (int && !Number.isInteger(v))) throw new HttpError(400, `${name} must be ${int ? 'an integer' : 'a number'} in [${lo}, ${hi}]`, 'invalid_request_error', name);
  return v;
}

function messagesOf(v: unknown): ServeMessage[] {
  if (!Array.isArray(v) || !v.length) throw new HttpError(400, 'messages must be a non-empty array', 'invalid_request_error', 'messages');
  return v.map((m, i) => {
    if (!m || typeof m !== 'object') throw new HttpError(400, `messages[${i}] must be an object`, 'invalid_request_error', 'messages');
    const role = (m as { role?: unknown }).role;
    if (role !== 'system' && role !== 'user' && role !== 'assistant' && role !== 'developer') throw new HttpError(400, `messages[${i}].role must be system, user or assistant`, 'invalid_request_error', 'messages');
    const c = (m as { content?: unknown }).content;
    let content: string;
    if (typeof c === 'string') content = c;
    else if (Array.isArray(c)) {
      content = c
        .map((p) => {
          if (p && typeof p === 'object' && (p as { type?: unknown }).type === 'text' && typeof (p as { text?: unknown }).text === 'string') return (p as { text: string }).text;
          throw new HttpError(400, `messages[${i}].content: only text parts are supported`, 'invalid_request_error', 'messages');
        })
        .join('');
    } else if (c === null || c === undefined) content = '';
    else throw new HttpError(400, `messages[${i}].content must be a string or text parts`, 'invalid_request_error', 'messages');
    return { role: role === 'developer' ? 'system' : role, content };
  });
}

/** Splits generated text into reasoning and content (the shared think reader, lib/llm/think.ts). */
export { splitReasoning };

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
export class ChatServer {
  private server?: Server;
  private queue: Entry[] = [];
  private running = false;
  private timer?: NodeJS.Timeout;
  private readonly s: ChatServerStats = { requests: 0, batches: 0, prompts: 0, maxBatchSeen: 0, promptTokens: 0, completionTokens: 0, errors: 0 };
  private readonly created = Math.floor(Date.now() / 1000);
  /** `http://host:port/v1` once started. */
  url = '';

  constructor(private readonly o: ChatServerOptions) {}

  stats(): ChatServerStats {
    return { ...this.s };
  }

  /** Starts listening; resolves with the base URL (`http://host:port/v1`) and port. */
  async start(): Promise<{ url: string; port: number }> {
    const server = createServer((req, res) => {
      this.handle(req, res).catch((e) => this.fail(res, e));
    });
    server.keepAliveTimeout = 60_000;
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
    if (this.timer) clearTimeout(this.timer);
    for (const e of this.queue.splice(0)) e.reject(new HttpError(503, 'server shutting down', 'server_error'));
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
    try {
      return JSON.parse(Buffer.concat(chunks).toString('utf8'));
    } catch {
      throw new HttpError(400, 'request body is not valid JSON');
    }
  }

  private async handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const path = (req.url ?? '/').split('?')[0].replace(/\/+$/, '');
    if (path === '/v1/models' || path === '/models') {
      if (req.method !== 'GET') throw new HttpError(405, 'use GET');
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end(JSON.stringify({ object: 'list', data: [{ id: this.o.modelId, object: 'model', created: this.created, owned_by: 'papergym-native' }] }));
      return;
    }
    if (path === '/health' || path === '/v1/health') {
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end('{"status":"ok"}');
      return;
    }
    if (path !== '/v1/chat/completions' && path !== '/chat/completions') throw new HttpError(404, `no route ${req.method} ${path}`, 'invalid_request_error', null, 'not_found');
    if (req.method !== 'POST') throw new HttpError(405, 'use POST');
    this.s.requests++;
    const b = (await this.body(req)) as Record<string, unknown>;
    if (!b || typeof b !== 'object' || Array.isArray(b)) throw new HttpError(400, 'request body must be a JSON object');
    if (b.model !== undefined && b.model !== this.o.modelId) throw new HttpError(404, `The model \`${String(b.model)}\` does not exist (serving ${this.o.modelId})`, 'invalid_request_error', 'model', 'model_not_found');
    const messages = messagesOf(b.messages);
    const kw = (b.chat_template_kwargs ?? {}) as Record<string, unknown>;
    const et = kw.enable_thinking ?? b.enable_thinking;
    if (et !== undefined && typeof et !== 'boolean') throw new HttpError(400, 'chat_template_kwargs.enable_thinking must be a boolean', 'invalid_request_error', 'chat_template_kwargs');
    const stopRaw = b.stop;
    const stop = stopRaw === undefined || stopRaw === null ? [] : typeof stopRaw === 'string' ? [stopRaw] : Array.isArray(stopRaw) && stopRaw.every((s) => typeof s === 'string') ? (stopRaw as string[]) : (() => { throw new HttpError(400, 'stop must be a string or an array of strings', 'invalid_request_error', 'stop'); })();
    const cap = this.o.maxTokensCap ?? 8192;
    const params: Params = {
      n: num(b.n, 'n', 1, 1, this.o.maxN ?? 16, true),
      temperature: num(b.temperature, 'temperature', 1, 0, 2),
      topP: num(b.top_p, 'top_p', 1, Number.MIN_VALUE, 1),
      topK: num(b.top_k, 'top_k', 0, -1, 1e6, true),
      maxNewTokens: num(b.max_completion_tokens ?? b.max_tokens, 'max_tokens', Math.min(this.o.defaultMaxTokens ?? 1024, cap), 1, cap, true),
      seed: b.seed === undefined || b.seed === null ? undefined : num(b.seed, 'seed', 0, 0, 2 ** 31 - 1, true),
      enableThinking: (et as boolean | undefined) ?? this.o.enableThinking,
      stop,
    };
    if (params.topK < 0) params.topK = 0;
    const stream = b.stream === true;
    const includeUsage = stream && !!(b.stream_options as { include_usage?: boolean } | undefined)?.include_usage;
    const id = `chatcmpl-${randomUUID().replace(/-/g, '')}`;
    const created = Math.floor(Date.now() / 1000);
    let keepalive: NodeJS.Timeout | undefined;
    if (stream) {
      res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache', connection: 'keep-alive' });
      const chunk = (choices: unknown[], extra: Record<string, unknown> = {}) => res.write(`data: ${JSON.stringify({ id, object: 'chat.completion.chunk', created, model: this.o.modelId, choices, ...extra })}\n\n`);
      chunk(Array.from({ length: params.n }, (_, index) => ({ index, delta: { role: 'assistant', content: '' }, logprobs: null, finish_reason: null })));
      keepalive = setInterval(() => res.write(': keep-alive\n\n'), 15_000);
    }
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
      const { content, reasoning } = splitReasoning(cut.text);
      return { index, content, reasoning, finish_reason: cut.stopped ? 'stop' : c.finishReason, tokens: c.completionTokens };
    });
    const completionTokens = choices.reduce((a, c) => a + c.tokens, 0);
    const usage = { prompt_tokens: out.promptTokens, completion_tokens: completionTokens, total_tokens: out.promptTokens + completionTokens };
    if (stream) {
      const chunk = (cs: unknown[], extra: Record<string, unknown> = {}) => res.write(`data: ${JSON.stringify({ id, object: 'chat.completion.chunk', created, model: this.o.modelId, choices: cs, ...extra })}\n\n`);
      for (const c of choices) {
        if (c.reasoning) chunk([{ index: c.index, delta: { reasoning_content: c.reasoning }, logprobs: null, finish_reason: null }]);
        if (c.content) chunk([{ index: c.index, delta: { content: c.content }, logprobs: null, finish_reason: null }]);
        chunk([{ index: c.index, delta: {}, logprobs: null, finish_reason: c.finish_reason }]);
      }
      if (includeUsage) chunk([], { usage });
      res.end('data: [DONE]\n\n');
      return;
    }
    res.writeHead(200, { 'content-type': 'application/json' });
    res.end(
      JSON.stringify({
        id,
        object: 'chat.completion',
        created,
        model: this.o.modelId,
        choices: choices.map((c) => ({ index: c.index, message: { role: 'assistant', content: c.content, ...(c.reasoning !== undefined ? { reasoning_content: c.reasoning } : {}) }, logprobs: null, finish_reason: c.finish_reason })),
        usage,
      }),
    );
  }

  private enqueue(messages: ServeMessage[], params: Params): Entry & { promise: Promise<ServeResult> } {
    const key = JSON.stringify([params.n, params.temperature, params.topP, params.topK, params.maxNewTokens, params.seed ?? null, params.enableThinking ?? null]);
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
        { n: p.n, temperature: p.temperature, topP: p.topP, topK: p.topK, maxNewTokens: p.maxNewTokens, seed, enableThinking: p.enableThinking, signal: ac.signal },
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
