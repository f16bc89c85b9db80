/**
 * A local OpenAI-compatible test server (`POST /v1/chat/completions` on 127.0.0.1, random port)
 * with deterministic answers derived from each request and scriptable fault injection.
 * Shared by the data-pipeline tests and the judge tests.
 *
 * ```ts
 * const srv = await startFakeLlm({ respond: (r) => 'Yes', fault: (r) => r.attempt === 1 && r.index % 5 === 0 ? { kind: 'status', status: 429, retryAfter: 0.05 } : undefined });
 * const client = new LlmClient({ baseUrl: srv.url, model: 'fake' });
 * ...
 * await srv.close();
 * ```
 *
 * Answers: `respond(req)` returns the message content (a string, or an object that is
 * JSON-stringified), or a {@link FakeReply} for full control. The default responder
 * ({@link defaultResponder}) answers the data-pipeline tasks (system prompt tagged
 * `[papergym task: NAME]`), else generates a schema-valid value when the request has
 * `response_format: json_schema`, else answers `Yes`.
 */
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { Socket } from 'node:net';
import { createHash } from 'node:crypto';

/** The parsed request body. */
export interface FakeChatBody {
  model: string;
  messages: { role: string; content: string }[];
  temperature?: number;
  max_tokens?: number;
  response_format?: { type: string; json_schema?: { name?: string; schema?: object } };
  [k: string]: unknown;
}

/** What a responder / fault function sees. */
export interface FakeRequestInfo {
  body: FakeChatBody;
  /** sha256 of the raw body: identical requests share a key. */
  key: string;
  /** 1 for the first time this key is seen, 2 for its first repeat, … */
  attempt: number;
  /** 0-based arrival index over the server's life. */
  index: number;
  /** Task tag `[papergym task: NAME]` of the system prompt, or ''. */
  task: string;
  authorization?: string;
}

/** Faults the server can inject instead of a normal answer. */
export type FakeFault =
  | { kind: 'status'; status: number; retryAfter?: number | string; body?: string }
  /** Never answer (or answer after `ms`); the client must time out. */
  | { kind: 'hang'; ms?: number }
  /** Close the socket without answering. */
  | { kind: 'reset' }
  /** Answer with the first half of the normal content (finish_reason "stop"). */
  | { kind: 'truncate' }
  /** Wrap a `<think>…</think>` block around/before the normal content (not an error). */
  | { kind: 'think' }
  /** Answer with schema-invalid JSON. */
  | { kind: 'wrong-schema' }
  /** finish_reason "length" with a partial answer. */
  | { kind: 'length' }
  /** Answer with exactly this body (any status, any content type): HTML pages, empty bodies, `choices: []`, error objects. */
  | { kind: 'raw'; status?: number; body: string; contentType?: string };

/** Full reply control. */
export interface FakeReply {
  content: string;
  finishReason?: string;
  reasoningContent?: string;
  /** The whole `choices[0].message` object as sent (e.g. content as an array of parts); `content` is then only used for usage. */
  message?: Record<string, unknown>;
  /** `choices[0].logprobs` as sent (OpenAI format: `{content: [{token, logprob, bytes, top_logprobs}]}`). */
  logprobs?: unknown;
}

export type FakeResponder = (req: FakeRequestInfo) => string | object | FakeReply;

/** One logged request and what the server did with it. */
export interface FakeLogEntry extends FakeRequestInfo {
  /** 'ok' (a normal answer, incl. 'think'), or the fault kind. */
  outcome: 'ok' | FakeFault['kind'];
  status: number;
}

export interface FakeLlmOptions {
  respond?: FakeResponder;
  fault?: (req: FakeRequestInfo) => FakeFault | undefined;
  /** Require `Authorization: Bearer <apiKey>` (401 otherwise). */
  apiKey?: string;
  /** Delay before every answer in ms (default 0). */
  latencyMs?: number;
  port?: number;
}

/** A running fake server. */
export interface FakeLlm {
  /** `http://127.0.0.1:PORT/v1` */
  url: string;
  port: number;
  /** Every request in arrival order. */
  log: FakeLogEntry[];
  /** Keys that received a normal answer. */
  answeredKeys(): Set<string>;
  setFault(fn: FakeLlmOptions['fault']): void;
  setResponder(fn: FakeResponder): void;
  close(): Promise<void>;
}

const hash = (s: string) => createHash('sha256').update(s).digest('hex');

/** Start the fake server on 127.0.0.1 (random port unless `port`). */
export async function startFakeLlm(opts: FakeLlmOptions = {}): Promise<FakeLlm> {
  let respond: FakeResponder = opts.respond ?? defaultResponder;
  let fault = opts.fault;
  const seen = new Map<string, number>();
  const log: FakeLogEntry[] = [];
  const sockets = new Set<Socket>();
  const timers = new Set<NodeJS.Timeout>();
  let index = 0;

  const handler = (req: IncomingMessage, res: ServerResponse, raw: string) => {
    const send = (status: number, obj: unknown, headers: Record<string, string> = {}) => {
      if (res.destroyed) return;
      res.writeHead(status, { 'content-type': 'application/json', ...headers });
      res.end(typeof obj === 'string' ? obj : JSON.stringify(obj));
    };
    if (req.method !== 'POST' || !/\/v1\/chat\/completions$/.test(req.url ?? '')) return send(404, { error: { message: 'not found' } });
    if (opts.apiKey && req.headers.authorization !== `Bearer ${opts.apiKey}`) return send(401, { error: { message: 'bad key' } });
    let body: FakeChatBody;
    try {
      body = JSON.parse(raw);
    } catch {
      return send(400, { error: { message: 'bad json' } });
    }
    const key = hash(raw);
    const attempt = (seen.get(key) ?? 0) + 1;
    seen.set(key, attempt);
    const sys = body.messages?.find((m) => m.role === 'system')?.content ?? body.messages?.[0]?.content ?? '';
    const task = /\[papergym task: ([\w-]+)/.exec(sys)?.[1] ?? '';
    const info: FakeRequestInfo = { body, key, attempt, index: index++, task, authorization: req.headers.authorization };
    const f = fault?.(info);
    const entry: FakeLogEntry = { ...info, outcome: f && f.kind !== 'think' ? f.kind : 'ok', status: 200 };
    log.push(entry);

    const answer = (): FakeReply => {
      const r = respond(info);
      if (typeof r === 'string') return { content: r };
      if (
        r &&
        typeof r === 'object' &&
        'content' in r &&
        typeof (r as FakeReply).content === 'string' &&
        Object.keys(r).every((k) => ['content', 'finishReason', 'reasoningContent', 'message', 'logprobs'].includes(k))
      )
        return r as FakeReply;
      return { content: JSON.stringify(r) };
    };
    const completion = (reply: FakeReply) => ({
      id: `fake-${info.index}`,
      object: 'chat.completion',
      created: 0,
      model: body.model,
      choices: [
        {
          index: 0,
          message: reply.message ?? { role: 'assistant', content: reply.content, ...(reply.reasoningContent && { reasoning_content: reply.reasoningContent }) },
          ...(reply.logprobs !== undefined && { logprobs: reply.logprobs }),
          finish_reason: reply.finishReason ?? 'stop',
        },
      ],
      usage: {
        prompt_tokens: Math.ceil(raw.length / 4),
        completion_tokens: Math.ceil(reply.content.length / 4),
        total_tokens: Math.ceil(raw.length / 4) + Math.ceil(reply.content.length / 4),
      },
    });
    const reply = () => {
      if (!f || f.kind === 'think') {
        const a = answer();
        if (f?.kind === 'think') a.content = `<think>Let me think about [papergym task] {"not": "the answer"} carefully.</think>\n${a.content}`;
        return send(200, completion(a));
      }
      switch (f.kind) {
        case 'status':
          entry.status = f.status;
          return send(
            f.status,
            f.body ?? { error: { message: `injected ${f.status}` } },
            f.retryAfter !== undefined ? { 'retry-after': String(f.retryAfter) } : {},
          );
        case 'hang': {
          if (f.ms === undefined) return; // never answer; socket closed by client or close()
          const t = setTimeout(() => {
            timers.delete(t);
            send(200, completion(answer()));
          }, f.ms);
          timers.add(t);
          return;
        }
        case 'reset':
          return req.socket.destroy();
        case 'truncate': {
          const a = answer();
          return send(200, completion({ content: a.content.slice(0, Math.max(1, Math.floor(a.content.length / 2))) }));
        }
        case 'wrong-schema':
          return send(200, completion({ content: JSON.stringify({ unexpected: 'shape', items: 'not a list' }) }));
        case 'length': {
          const a = answer();
          return send(200, completion({ content: a.content.slice(0, 10), finishReason: 'length' }));
        }
        case 'raw': {
          entry.status = f.status ?? 200;
          if (res.destroyed) return;
          res.writeHead(entry.status, { 'content-type': f.contentType ?? 'application/json' });
          return res.end(f.body);
        }
      }
    };
    if (opts.latencyMs) {
      const t = setTimeout(() => {
        timers.delete(t);
        reply();
      }, opts.latencyMs);
      timers.add(t);
    } else reply();
  };

  const server: Server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      try {
        handler(req, res, Buffer.concat(chunks).toString('utf8'));
      } catch (e) {
        if (!res.headersSent) {
          res.writeHead(500, { 'content-type': 'application/json' });
          res.end(JSON.stringify({ error: { message: `fake responder failed: ${(e as Error).message}` } }));
        }
      }
    });
  });
  server.on('connection', (s) => {
    sockets.add(s);
    s.on('close', () => sockets.delete(s));
  });
  await new Promise<void>((resolve) => server.listen(opts.port ?? 0, '127.0.0.1', resolve));
  const port = (server.address() as { port: number }).port;
  return {
    url: `http://127.0.0.1:${port}/v1`,
    port,
    log,
    answeredKeys: () => new Set(log.filter((e) => e.outcome === 'ok').map((e) => e.key)),
    setFault: (fn) => {
      fault = fn;
    },
    setResponder: (fn) => {
      respond = fn;
    },
    close: () =>
      new Promise<void>((resolve) => {
        for (const t of timers) clearTimeout(t);
        for (const s of sockets) s.destroy();
        server.close(() => resolve());
      }),
  };
}

// ---------------------------------------------------------------------------------------------
// Deterministic answers

/** Text between `<tag>` and `</tag>` in the last user message ('' when absent). */
export function between(text: string, tag: string): string {
  const m = new RegExp(`<${tag}>\\n?([\\s\\S]*?)\\n?</${tag}>`).exec(text);
  return m ? m[1].trim() : '';
}

/** Small deterministic PRNG seeded from a string. */
export function seededRandom(seed: string): () => number {
  let h = parseInt(hash(seed).slice(0, 8), 16) >>> 0;
  return () => {
    h = (h + 0x6d2b79f5) >>> 0;
    let t = h;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/** A schema-valid value for a (simple) JSON Schema, deterministic in `seed`. */
export function sampleFromSchema(schema: Record<string, unknown>, seed = 'x'): unknown {
  const rnd = seededRandom(seed);
  const gen = (s: Record<string, unknown>, path: string): unknown => {
    if (Array.isArray(s.enum)) return s.enum[Math.floor(rnd() * s.enum.length)];
    if ('const' in s) return s.const;
    const type = Array.isArray(s.type) ? s.type[0] : s.type;
    switch (type) {
      case 'object': {
        const props = (s.properties ?? {}) as Record<string, Record<string, unknown>>;
        const out: Record<string, unknown> = {};
        for (const k of (s.required as string[] | undefined) ?? Object.keys(props)) out[k] = gen(props[k] ?? {}, `${path}.${k}`);
        return out;
      }
      case 'array': {
        const n = Math.max((s.minItems as number | undefined) ?? 1, 1);
        return Array.from({ length: Math.min(n, (s.maxItems as number | undefined) ?? n) }, (_, i) =>
          gen((s.items ?? {}) as Record<string, unknown>, `${path}[${i}]`),
        );
      }
      case 'integer':
        return (s.minimum as number | undefined) ?? 0;
      case 'number':
        return (s.minimum as number | undefined) ?? 0.5;
      case 'boolean':
        return rnd() < 0.5;
      default:
        return `text ${path} ${Math.floor(rnd() * 1e6)}`;
    }
  };
  return gen(schema, '$');
}

const STOP = new Set(
  'the a an and or of to in for on with by is are be as that this from at it its we our their which into using use used can will than not'.split(' '),
);
/** Content words of a text (lower-case, no stop words), in order. */
export function contentWords(text: string): string[] {
  return (text.toLowerCase().match(/[a-z][a-z-]{2,}/g) ?? []).filter((w) => !STOP.has(w));
}

function sentences(text: string): string[] {
  return text
    .split(/(?<=[.!?])\s+|\n{2,}/)
    .map((s) => s.replace(/\s+/g, ' ').trim())
    .filter((s) => s.length > 20);
}

const STAGES = ['goals', 'background', 'methods', 'experimental_design'] as const;

/**
 * Deterministic answers for the data-pipeline tasks (see prompts/data-*.md), derived from the
 * request's content so that every run gives the same, schema-valid output:
 * map, reduce, question, answer, rubric-q, rubric-a, rubric-dedupe, rubric-rank, leakage.
 * Other requests: a schema sample when `response_format.json_schema` is given, else 'Yes'.
 */
export function defaultResponder(req: FakeRequestInfo): string | object {
  const user = [...req.body.messages].reverse().find((m) => m.role === 'user')?.content ?? '';
  // Repair round-trips re-send the original prompt; answer the original task.
  const first = req.body.messages.filter((m) => m.role === 'user')[0]?.content ?? user;
  switch (req.task) {
    case 'map': {
      const sec = between(first, 'section');
      const title = between(first, 'section_title').toLowerCase();
      const out: Record<string, string[]> = { goals: [], background: [], methods: [], experimental_design: [] };
      sentences(sec)
        .slice(0, 12)
        .forEach((s, i) => {
          let st: (typeof STAGES)[number];
          if (/intro|abstract/.test(title)) st = i % 2 === 0 ? 'goals' : 'background';
          else if (/result|evaluat|experiment|benchmark|test|data/.test(title)) st = 'experimental_design';
          else if (/conclu|discussion|summary/.test(title)) st = 'goals';
          else st = STAGES[(i + title.length) % 4];
          out[st].push(s);
        });
      return out;
    }
    case 'reduce':
    case 'reduce-design': {
      const stage = between(first, 'stage');
      const uniq = [
        ...new Set(
          between(first, 'statements')
            .split('\n')
            .map((l) => l.replace(/^[-*]\s*/, '').trim())
            .filter(Boolean),
        ),
      ];
      let text = uniq.slice(0, 8).join(' ') || `No ${stage} information was found.`;
      if (stage === 'experimental_design') text = text.replace(/\d+(?:[.,]\d+)?/g, 'N');
      return { text };
    }
    case 'question': {
      const g = contentWords(between(first, 'goals')).slice(0, 12).join(' ');
      const b = contentWords(between(first, 'background')).slice(0, 12).join(' ');
      return { question: `Given the context (${b || 'none'}), how would you design research to achieve: ${g || 'the stated goal'}?` };
    }
    case 'answer': {
      const m = between(first, 'methods');
      const d = between(first, 'experimental_design');
      return { answer: `Method: ${m.slice(0, 400) || 'n/a'}\nDesign: ${d.slice(0, 400) || 'n/a'}` };
    }
    case 'rubric-q':
    case 'rubric-a': {
      const q = between(first, 'question');
      const a = req.task === 'rubric-a' ? between(first, 'answer') : '';
      const words = [...new Set(contentWords(`${q} ${a}`))];
      const pick = (i: number) => (words.length ? words[(i * 7 + (req.task === 'rubric-a' ? 3 : 0)) % words.length] : `aspect${i}`);
      // as many items as asked ("Write N rubric items"), all of one dimension when the request says so
      const n = Number(/Write (\d+) rubric items/.exec(first)?.[1] ?? 10);
      const only = /for the dimension (method_innovation|experimental_design) only/.exec(first)?.[1];
      const items = Array.from({ length: n }, (_, i) => {
        // items 0-2 are shared verbatim between R_Q and R_A (normalised dedupe), 3-4 are near-duplicates (LLM dedupe)
        const w = i < 5 ? (words[i % Math.max(1, words.length)] ?? `aspect${i}`) : pick(i);
        // items past the default 10 (a larger n) carry a word of their own, so they stay distinct after the LLM dedupe
        const facet = i >= 10 ? ` as facet${String.fromCharCode(97 + (i % 26))}${String.fromCharCode(97 + (Math.floor(i / 26) % 26))}` : '';
        const text =
          i < 3
            ? `Does the plan address ${w}?`
            : i < 5
              ? req.task === 'rubric-a'
                ? `Does the plan clearly address ${w} in detail?`
                : `Does the plan address ${w} explicitly?`
              : `Does the plan specify how ${w} is handled${facet} (${req.task} ${i})?`;
        return { text, dimension: only ?? (i % 2 === 0 ? 'method_innovation' : 'experimental_design') };
      });
      return { items };
    }
    case 'rubric-dedupe': {
      const lines = between(first, 'candidates')
        .split('\n')
        .map((l) => /^\[(\w+)\]\s*(.*)$/.exec(l.trim()))
        .filter((m): m is RegExpExecArray => !!m);
      const norm = (t: string) => contentWords(t.replace(/\b(clearly|explicitly|in detail)\b/g, '')).join(' ');
      const by = new Map<string, string[]>();
      for (const [, id, text] of lines) {
        const k = norm(text);
        by.set(k, [...(by.get(k) ?? []), id]);
      }
      return { groups: [...by.values()].filter((g) => g.length > 1) };
    }
    case 'rubric-rank': {
      const ids = between(first, 'candidates')
        .split('\n')
        .map((l) => /^\[(\w+)\]/.exec(l.trim())?.[1])
        .filter((x): x is string => !!x);
      return { ranking: [...ids].sort((x, y) => hash(x + first.length).localeCompare(hash(y + first.length))) };
    }
    case 'leakage': {
      const q = new Set(contentWords(between(first, 'question')));
      const it = contentWords(between(first, 'item'));
      const overlap = it.length ? it.filter((w) => q.has(w)).length / it.length : 0;
      return { inferable: overlap >= 0.5, reason: `overlap ${overlap.toFixed(2)}` };
    }
  }
  const schema = req.body.response_format?.json_schema?.schema;
  if (schema) return sampleFromSchema(schema as Record<string, unknown>, req.key) as object;
  return 'Yes';
}
