import { expect } from 'chai';
import {
  LlmClient,
  LlmHttpError,
  LlmJsonError,
  LlmLengthError,
  LlmTimeoutError,
  LlmAbortError,
  extractJson,
  parseRetryAfter,
  chatCompletionsUrl,
} from '../lib/llm/client.js';
import { splitThink as stripThink } from '../lib/llm/think.js';
import { startFakeLlm, type FakeLlm } from './helpers/fake-llm.js';

const msgs = (s: string) => [
  { role: 'system' as const, content: 'sys' },
  { role: 'user' as const, content: s },
];
const schema = { type: 'object', required: ['ok', 'n'], properties: { ok: { type: 'boolean' }, n: { type: 'integer' } }, additionalProperties: false };

describe('llm client: helpers', () => {
  it('strips think blocks, unterminated and lone closing tags', () => {
    expect(stripThink('<think>a</think>\nanswer').content).to.equal('answer');
    expect(stripThink('<think>a</think>x<think>b</think>y')).to.deep.equal({ content: 'xy', reasoning: 'a\n\nb' });
    expect(stripThink('reasoning here</think> final').content).to.equal('final');
    expect(stripThink('ok <think>cut off').content).to.equal('ok');
  });
  it('extracts JSON from fences and prose', () => {
    expect(extractJson('```json\n{"a":1}\n```')).to.deep.equal({ a: 1 });
    expect(extractJson('Sure! {"a": "}{", "b": [1,2]} hope it helps')).to.deep.equal({ a: '}{', b: [1, 2] });
    expect(() => extractJson('{"a": ')).to.throw(SyntaxError);
  });
  it('parses retry-after and endpoint URLs', () => {
    expect(parseRetryAfter('2')).to.equal(2000);
    expect(parseRetryAfter('0.5')).to.equal(500);
    expect(parseRetryAfter(new Date(Date.now() + 3000).toUTCString())).to.be.within(1000, 3100);
    expect(parseRetryAfter('soon')).to.equal(undefined);
    expect(chatCompletionsUrl('http://h:1')).to.equal('http://h:1/v1/chat/completions');
    expect(chatCompletionsUrl('http://h:1/v1/')).to.equal('http://h:1/v1/chat/completions');
    expect(chatCompletionsUrl('http://h:1/v1/chat/completions')).to.equal('http://h:1/v1/chat/completions');
  });
});

describe('llm client against the fake server', function () {
  this.timeout(20000);
  let srv: FakeLlm;
  afterEach(async () => srv?.close());
  const client = (o: Partial<ConstructorParameters<typeof LlmClient>[0]> = {}) =>
    new LlmClient({ baseUrl: srv.url, model: 'fake', apiKey: 'sk-secret-123', minBackoffMs: 10, maxBackoffMs: 50, timeoutMs: 2000, ...o });

  it('sends the key, returns content/finishReason/usage and counts tokens', async () => {
    srv = await startFakeLlm({ apiKey: 'sk-secret-123', respond: () => 'hello' });
    const c = client();
    const r = await c.chat({ messages: msgs('hi'), temperature: 0, maxTokens: 5 });
    expect(r.content).to.equal('hello');
    expect(r.finishReason).to.equal('stop');
    expect(r.usage.promptTokens).to.be.greaterThan(0);
    expect(c.stats()).to.include({ requests: 1, succeeded: 1 });
    expect(srv.log[0].body.max_tokens).to.equal(5);
  });

  it('never puts the key in errors or inspection', async () => {
    srv = await startFakeLlm({ apiKey: 'other', respond: () => 'x' });
    const c = client();
    const err = await c.chat({ messages: msgs('hi') }).catch((e) => e);
    expect(err).to.be.instanceOf(LlmHttpError);
    expect(err.status).to.equal(401);
    expect(String(err.message) + JSON.stringify(c) + require_inspect(c)).not.to.include('sk-secret-123');
  });

  it('retries 429 honouring retry-after, and 500', async () => {
    srv = await startFakeLlm({
      respond: () => 'ok',
      fault: (r) => (r.attempt === 1 ? { kind: 'status', status: 429, retryAfter: 0.3 } : r.attempt === 2 ? { kind: 'status', status: 500 } : undefined),
    });
    const c = client();
    const t0 = Date.now();
    const r = await c.chat({ messages: msgs('hi') });
    expect(r.content).to.equal('ok');
    expect(r.attempts).to.equal(3);
    expect(Date.now() - t0).to.be.greaterThanOrEqual(290);
    expect(c.stats().retries).to.equal(2);
  });

  it('does not retry 400, gives up after maxRetries', async () => {
    srv = await startFakeLlm({ fault: () => ({ kind: 'status', status: 400 }) });
    await client()
      .chat({ messages: msgs('a') })
      .catch((e) => expect(e.status).to.equal(400));
    expect(srv.log.length).to.equal(1);
    srv.setFault(() => ({ kind: 'status', status: 503 }));
    const e = await client({ maxRetries: 2 })
      .chat({ messages: msgs('b') })
      .catch((x) => x);
    expect(e).to.be.instanceOf(LlmHttpError);
    expect(srv.log.length).to.equal(4);
  });

  it('times out a hanging request and retries it', async () => {
    srv = await startFakeLlm({ respond: () => 'late ok', fault: (r) => (r.attempt === 1 ? { kind: 'hang' } : undefined) });
    const r = await client({ timeoutMs: 1000 }).chat({ messages: msgs('h') });
    expect(r.content).to.equal('late ok');
    srv.setFault(() => ({ kind: 'hang' }));
    const e = await client({ timeoutMs: 200, maxRetries: 1 })
      .chat({ messages: msgs('h2') })
      .catch((x) => x);
    expect(e).to.be.instanceOf(LlmTimeoutError);
  });

  it('reports finish_reason length as LlmLengthError without retrying', async () => {
    srv = await startFakeLlm({ respond: () => 'a long answer here', fault: () => ({ kind: 'length' }) });
    const e = await client()
      .chat({ messages: msgs('l') })
      .catch((x) => x);
    expect(e).to.be.instanceOf(LlmLengthError);
    expect(srv.log.length).to.equal(1);
  });

  it('strips <think> and validates JSON with one repair', async () => {
    srv = await startFakeLlm({ respond: () => ({ ok: true, n: 3 }), fault: (r) => (r.body.messages.length === 2 ? { kind: 'truncate' } : { kind: 'think' }) });
    const c = client();
    const r = await c.chatJson<{ ok: boolean; n: number }>(schema, { messages: msgs('j') });
    expect(r.value).to.deep.equal({ ok: true, n: 3 });
    expect(r.repaired).to.equal(true);
    expect(c.stats().repairs).to.equal(1);
    srv.setFault(() => ({ kind: 'wrong-schema' }));
    const e = await c.chatJson(schema, { messages: msgs('k') }).catch((x) => x);
    expect(e).to.be.instanceOf(LlmJsonError);
    expect(srv.log.length).to.equal(4);
  });

  it('bounds concurrency', async () => {
    let inflight = 0;
    let peak = 0;
    srv = await startFakeLlm({ latencyMs: 30, respond: () => 'x' });
    const c = client({ concurrency: 3 });
    const orig = globalThis.fetch;
    const f: typeof fetch = async (...a) => {
      inflight++;
      peak = Math.max(peak, inflight);
      try {
        return await orig(...a);
      } finally {
        inflight--;
      }
    };
    const c2 = new LlmClient({ baseUrl: srv.url, model: 'm', concurrency: 3, fetch: f });
    await Promise.all(Array.from({ length: 12 }, (_, i) => c2.chat({ messages: msgs(`c${i}`) })));
    expect(peak).to.equal(3);
    expect(c.concurrency).to.equal(3);
  });

  it('aborts on the caller signal, also during backoff', async () => {
    srv = await startFakeLlm({ fault: () => ({ kind: 'status', status: 429, retryAfter: 10 }) });
    const ac = new AbortController();
    setTimeout(() => ac.abort(), 100);
    const e = await client()
      .chat({ messages: msgs('z'), signal: ac.signal })
      .catch((x) => x);
    expect(e).to.be.instanceOf(LlmAbortError);
  });

  it('a call aborted while it waits for a slot is never sent and not counted as a request', async () => {
    srv = await startFakeLlm({ latencyMs: 150, respond: () => 'x' });
    const c = client({ concurrency: 1 });
    const ac = new AbortController();
    const first = c.chat({ messages: msgs('first') });
    const second = c.chat({ messages: msgs('second'), signal: ac.signal }).catch((x) => x);
    // Aborted while the first request holds the only slot.
    setTimeout(() => ac.abort(), 50);
    expect((await first).content).to.equal('x');
    expect(await second).to.be.instanceOf(LlmAbortError);
    expect(srv.log.length).to.equal(1);
    expect(c.stats().requests).to.equal(1);
  });
});

import { inspect } from 'node:util';
function require_inspect(x: unknown): string {
  return inspect(x);
}
