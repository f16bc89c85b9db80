import { expect } from 'chai';
import { ChatServer, applyStop, type ServeBackend, type ServeGenerateOptions } from '../lib/serve/server.js';
import { splitThink } from '../lib/llm/think.js';
import type { ChatMessage } from '../lib/llm/messages.js';
import { createHttpJudge } from '../lib/judge/http.js';
import { LlmClient } from '../lib/llm/client.js';
import { policyServeBackend } from '../lib/serve/policy.js';
import type { Policy } from '../lib/model/policy.js';

/** Fake backend: echoes the last user message's length; records batch sizes and options. */
function fakeBackend(delayMs = 30) {
  const calls: { prompts: ChatMessage[][]; opts: ServeGenerateOptions }[] = [];
  const backend: ServeBackend = {
    async generate(prompts, opts) {
      calls.push({ prompts, opts });
      await new Promise((r) => setTimeout(r, delayMs));
      return prompts.map((m) => {
        const u = m[m.length - 1].content;
        let text: string;
        if (u.includes('<item>')) {
          const plan = /<plan>\n([\s\S]*?)\n<\/plan>/.exec(u)![1];
          const item = /<item>\n([\s\S]*?)\n<\/item>/.exec(u)![1];
          text = plan.includes(item) ? 'Yes' : 'No';
        } else text = opts.enableThinking === false ? `echo: ${u}` : `<think>hmm</think>\n\necho: ${u} STOP more`;
        return {
          promptTokens: u.length,
          completions: Array.from({ length: opts.n }, (_, i) => ({ text: i ? `${text} #${i}` : text, finishReason: 'stop' as const, completionTokens: 3 })),
        };
      });
    },
  };
  return { backend, calls };
}

async function post(url: string, body: unknown): Promise<Response> {
  return fetch(`${url}/chat/completions`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });
}

describe('serve (OpenAI-compatible server; fake backend)', function () {
  this.timeout(20000);
  let srv: ChatServer;
  let calls: ReturnType<typeof fakeBackend>['calls'];
  let url: string;
  beforeEach(async () => {
    const f = fakeBackend();
    calls = f.calls;
    srv = new ChatServer({ backend: f.backend, modelId: 'tiny', batchWindowMs: 10, maxBatch: 8 });
    url = (await srv.start()).url;
  });
  afterEach(() => srv.close());

  it('GET /v1/models lists the served model', async () => {
    const r = await (await fetch(`${url}/models`)).json();
    expect(r.object).to.equal('list');
    expect(r.data[0]).to.include({ id: 'tiny', object: 'model' });
  });

  it('plain completion: reasoning split, stop strings, usage, n', async () => {
    const r = await post(url, { model: 'tiny', messages: [{ role: 'user', content: 'hello' }], stop: ['STOP'], n: 2, temperature: 0, max_tokens: 7 });
    expect(r.status).to.equal(200);
    const j = await r.json();
    expect(j.object).to.equal('chat.completion');
    expect(j.choices).to.have.length(2);
    // content is the text after </think>, untrimmed (as vLLM's reasoning parser): the stop string cut it after 'hello '
    expect(j.choices[0].message).to.deep.equal({ role: 'assistant', content: '\n\necho: hello ', reasoning_content: 'hmm' });
    expect(j.choices[0].finish_reason).to.equal('stop');
    expect(j.usage).to.deep.equal({ prompt_tokens: 5, completion_tokens: 6, total_tokens: 11 });
    expect(calls[0].opts).to.include({ n: 2, temperature: 0, maxNewTokens: 7 });
  });

  it('chat_template_kwargs.enable_thinking reaches the backend', async () => {
    const j = await (
      await post(url, { messages: [{ role: 'user', content: [{ type: 'text', text: 'hi' }] }], chat_template_kwargs: { enable_thinking: false } })
    ).json();
    expect(j.choices[0].message.content).to.equal('echo: hi');
    expect(calls[0].opts.enableThinking).to.equal(false);
  });

  it('streaming: SSE chunks, role first, content, finish, usage, [DONE]', async () => {
    const r = await post(url, {
      messages: [{ role: 'user', content: 'yo' }],
      stream: true,
      stream_options: { include_usage: true },
      chat_template_kwargs: { enable_thinking: false },
    });
    expect(r.headers.get('content-type')).to.match(/text\/event-stream/);
    const text = await r.text();
    const events = text
      .split('\n\n')
      .filter((l) => l.startsWith('data: '))
      .map((l) => l.slice(6));
    expect(events[events.length - 1]).to.equal('[DONE]');
    const chunks = events.slice(0, -1).map((e) => JSON.parse(e));
    expect(chunks[0].choices[0].delta.role).to.equal('assistant');
    expect(chunks.every((c) => c.object === 'chat.completion.chunk')).to.equal(true);
    const content = chunks
      .flatMap((c) => c.choices)
      .map((c: { delta: { content?: string } }) => c.delta.content ?? '')
      .join('');
    expect(content).to.equal('echo: yo');
    expect(chunks.flatMap((c) => c.choices).some((c: { finish_reason: string }) => c.finish_reason === 'stop')).to.equal(true);
    expect(chunks[chunks.length - 1].usage.completion_tokens).to.equal(3);
  });

  it('concurrent requests with equal parameters are batched; different parameters are not mixed', async () => {
    const rs = await Promise.all([
      ...Array.from({ length: 6 }, (_, i) => post(url, { messages: [{ role: 'user', content: `q${i}` }], temperature: 0, enable_thinking: false })),
      post(url, { messages: [{ role: 'user', content: 'other' }], temperature: 0.5 }),
    ]);
    const bodies = await Promise.all(rs.map((r) => r.json()));
    expect(bodies.slice(0, 6).map((b) => b.choices[0].message.content)).to.deep.equal(Array.from({ length: 6 }, (_, i) => `echo: q${i}`));
    for (const c of calls) expect(new Set(c.prompts.map(() => c.opts.temperature)).size).to.equal(1);
    const t0 = calls.filter((c) => c.opts.temperature === 0);
    expect(t0.reduce((a, c) => a + c.prompts.length, 0)).to.equal(6);
    expect(t0.length, JSON.stringify(t0.map((c) => c.prompts.length))).to.be.at.most(3);
    expect(srv.stats().maxBatchSeen).to.be.at.least(2);
  });

  it('errors: OpenAI error shape, 400/404/405', async () => {
    const bad = await post(url, { messages: [] });
    expect(bad.status).to.equal(400);
    expect((await bad.json()).error.param).to.equal('messages');
    const wrongModel = await post(url, { model: 'gpt-x', messages: [{ role: 'user', content: 'a' }] });
    expect(wrongModel.status).to.equal(404);
    expect((await wrongModel.json()).error.code).to.equal('model_not_found');
    expect((await post(url, { messages: [{ role: 'user', content: 'a' }], temperature: 9 })).status).to.equal(400);
    expect((await fetch(`${url}/chat/completions`)).status).to.equal(405);
    expect((await fetch(`${url}/nope`)).status).to.equal(404);
    const notJson = await fetch(`${url}/chat/completions`, { method: 'POST', body: '{' });
    expect(notJson.status).to.equal(400);
    // Wrong types are 400s naming the field, not a silently different request.
    const m = [{ role: 'user', content: 'a' }];
    for (const [extra, param, re] of [
      [{ stream: 'true' }, 'stream', /stream must be a boolean/],
      [{ stream_options: { include_usage: true } }, 'stream_options', /only allowed with stream: true/],
      [{ top_p: 0 }, 'top_p', /top_p must be a number in \(0, 1\]/],
    ] as const) {
      const r = await post(url, { messages: m, ...extra });
      const e = (await r.json()).error;
      expect([r.status, e.param], JSON.stringify(extra)).to.deep.equal([400, param]);
      expect(e.message).to.match(re);
    }
    const root = await fetch(`${url.replace(/\/v1$/, '')}/`);
    expect(root.status).to.equal(404);
    expect((await root.json()).error.message).to.match(/no route GET \/ \(this server serves POST \/v1\/chat\/completions/);
  });

  it('the shared LLM client and the http judge work against it (per-item and per-plan)', async () => {
    const client = new LlmClient({ baseUrl: url, model: 'tiny', maxRetries: 0 });
    const r = await client.chat({ messages: [{ role: 'user', content: 'abc' }], temperature: 0 });
    expect(r.content).to.equal('echo: abc STOP more');
    const j = createHttpJudge({ url, model: 'tiny', extraBody: { chat_template_kwargs: { enable_thinking: false } } });
    const items = [
      { id: 'a', text: 'ablation' },
      { id: 'b', text: 'baseline' },
    ];
    const v = await j.judge([
      { question: 'Q', plan: 'an ablation', items },
      { question: 'Q', plan: 'a baseline', items },
    ]);
    expect(v.map((x) => x.map((y) => y.met))).to.deep.equal([
      [true, false],
      [false, true],
    ]);
    expect(srv.stats().maxBatchSeen).to.be.at.least(2);
  });
});

describe('serve helpers', () => {
  it('splitThink and applyStop', () => {
    expect(splitThink('<think>a</think>\n\nb<|im_end|>')).to.deep.equal({ reasoning: 'a', content: 'b' });
    expect(splitThink('plain')).to.deep.equal({ content: 'plain' });
    expect(splitThink('<think>unfinished')).to.deep.equal({ content: '', reasoning: 'unfinished' });
    expect(applyStop('abcSTOPdefEND', ['END', 'STOP'])).to.deep.equal({ text: 'abc', stopped: true });
    expect(applyStop('abc', [])).to.deep.equal({ text: 'abc', stopped: false });
  });
});

describe('serve: client disconnects', () => {
  it('a batch whose clients all disconnected is aborted through the signal', async () => {
    let aborted = false;
    const srv = new ChatServer({
      modelId: 'm',
      batchWindowMs: 1,
      backend: {
        generate: (_ps, o) =>
          new Promise((_res, rej) => {
            o.signal!.addEventListener('abort', () => {
              aborted = true;
              rej(new Error('aborted'));
            });
          }),
      },
    });
    const { url } = await srv.start();
    try {
      const ac = new AbortController();
      const p = fetch(`${url}/chat/completions`, {
        method: 'POST',
        body: JSON.stringify({ messages: [{ role: 'user', content: 'x' }] }),
        signal: ac.signal,
      }).catch(() => 'client-aborted');
      await new Promise((r) => setTimeout(r, 100));
      ac.abort();
      expect(await p).to.equal('client-aborted');
      for (let i = 0; i < 30 && !aborted; i++) await new Promise((r) => setTimeout(r, 50));
      expect(aborted).to.equal(true);
    } finally {
      await srv.close();
    }
  });
});

describe('serve: policy backend adapter (fake policy)', () => {
  it('over-long prompts get a per-request error; the rest generate, grouped by prompt and sample', async () => {
    const calls: unknown[][] = [];
    const fake = {
      contextLength: 10,
      async encodePrompts(ps: ChatMessage[][]) {
        return ps.map((p) => Array.from({ length: p[0].content.length }, () => 1));
      },
      async generateWithStats(ps: ChatMessage[][], o: { n: number }) {
        calls.push(ps);
        return {
          promptIds: ps.map((p) => Array.from({ length: p[0].content.length }, () => 1)),
          completions: ps.flatMap((p, i) =>
            Array.from({ length: o.n }, (_, s) => ({
              promptIndex: i,
              sampleIndex: s,
              text: `${p[0].content}-${s}`,
              tokenIds: new Int32Array(2),
              finishReason: 'length',
            })),
          ),
        };
      },
    } as unknown as Policy;
    const b = policyServeBackend(fake);
    const out = await b.generate([[{ role: 'user', content: 'abc' }], [{ role: 'user', content: 'way too long' }], [{ role: 'user', content: 'de' }]], {
      n: 2,
      temperature: 0,
      topP: 1,
      topK: 0,
      maxNewTokens: 5,
      seed: 1,
    });
    expect(calls).to.have.length(1);
    expect((calls[0] as ChatMessage[][]).map((p) => p[0].content)).to.deep.equal(['abc', 'de']);
    expect(out[0]).to.deep.equal({
      promptTokens: 3,
      completions: [
        { text: 'abc-0', finishReason: 'length', completionTokens: 2 },
        { text: 'abc-1', finishReason: 'length', completionTokens: 2 },
      ],
    });
    expect((out[1] as { error: string }).error).to.match(/exceeds the context of 10/);
    expect((out[2] as { completions: { text: string }[] }).completions.map((c) => c.text)).to.deep.equal(['de-0', 'de-1']);
  });
  it('a per-request backend error becomes a 400 for that request only', async () => {
    const srv = new ChatServer({
      modelId: 'm',
      backend: {
        async generate(ps) {
          return ps.map((p) =>
            p[0].content === 'bad'
              ? { error: 'too long' }
              : { promptTokens: 1, completions: [{ text: 'ok', finishReason: 'stop' as const, completionTokens: 1 }] },
          );
        },
      },
    });
    const { url } = await srv.start();
    try {
      const [a, b] = await Promise.all([
        post(url, { messages: [{ role: 'user', content: 'bad' }] }),
        post(url, { messages: [{ role: 'user', content: 'good' }] }),
      ]);
      expect(a.status).to.equal(400);
      expect((await a.json()).error.message).to.equal('too long');
      expect(b.status).to.equal(200);
    } finally {
      await srv.close();
    }
  });
});
