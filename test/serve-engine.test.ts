/**
 * `serve` on a tiny Qwen3 with continuous batching (the step-wise engine), on loopback, through
 * real HTTP: OpenAI-format logprobs (plain and streaming, raw model log_softmax), stop strings
 * that end decoding (completion_tokens up to the stop), token-by-token streaming, tool turns,
 * mixed-seed requests batched together with the same answers as alone, the queue limit (429),
 * and client disconnects cancelling their rows.
 */
import { expect } from 'chai';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { packageRoot } from '../lib/native.js';
import { parseJsonKeepingFloats } from '../lib/model/chat.js';
import { ChatServer } from '../lib/serve/server.js';
import { policyServeBackend } from '../lib/serve/policy.js';
import { Policy } from '../lib/model/policy.js';
import { tinyModel } from './helpers/tiny.js';

type Json = Record<string, any>; // eslint-disable-line @typescript-eslint/no-explicit-any

function sse(text: string): Json[] {
  return text
    .split('\n\n')
    .filter((l) => l.startsWith('data: ') && l !== 'data: [DONE]')
    .map((l) => JSON.parse(l.slice(6)) as Json);
}

describe('serve: continuous batching on a tiny Qwen3 (logprobs, stop strings, streaming, tools, queue, disconnects)', function () {
  this.timeout(240000);
  let policy: Policy;
  let srv: ChatServer;
  let url: string;
  before(async () => {
    policy = await Policy.load(tinyModel('tiny-tied'));
    srv = new ChatServer({ backend: policyServeBackend(policy, { maxRows: 16 }), modelId: 'tiny', maxBatch: 16 });
    url = (await srv.start()).url;
  });
  after(async () => {
    await srv?.close();
    policy?.dispose();
  });

  const body = (content: string, extra: Json = {}) => ({
    model: 'tiny',
    messages: [{ role: 'user', content }],
    temperature: 0,
    max_tokens: 10,
    chat_template_kwargs: { enable_thinking: false },
    ...extra,
  });
  const post = (b: Json, u = url, signal?: AbortSignal) =>
    fetch(`${u}/chat/completions`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(b), signal });

  it('a prompt longer than the context: without max_tokens the 400 is about the prompt (it named a max_tokens the client never sent)', async () => {
    const small = new ChatServer({ backend: policyServeBackend(policy, { maxRows: 2, capacity: 32 }), modelId: 'tiny' });
    const u = (await small.start()).url;
    try {
      const long = 'word '.repeat(60);
      const { max_tokens: _, ...noMax } = body(long);
      const a = await post(noMax, u);
      expect(a.status).to.equal(400);
      expect((await a.json()).error.message).to.match(/^prompt of \d+ tokens leaves no room in the context of 32 tokens$/);
      const b = await post(body(long), u);
      expect((await b.json()).error.message).to.match(/^prompt of \d+ tokens \+ max_tokens 10 exceeds the context of 32$/);
    } finally {
      await small.close();
    }
  });

  it('logprobs + top_logprobs: OpenAI format, raw model logprobs, bytes spell the text; streaming gives the same', async () => {
    const r = await post(body('Is the plan good?', { logprobs: true, top_logprobs: 5 }));
    expect(r.status).to.equal(200);
    const j = await r.json();
    const lp = j.choices[0].logprobs.content as Json[];
    expect(lp.length).to.be.greaterThan(0);
    expect(lp.length).to.be.at.most(j.usage.completion_tokens);
    for (const e of lp) {
      expect(Object.keys(e).sort()).to.deep.equal(['bytes', 'logprob', 'token', 'top_logprobs']);
      expect(e.logprob).to.be.at.most(0);
      expect(e.top_logprobs).to.have.length(5);
      // greedy: the chosen token is the most likely one under the raw distribution
      expect(e.top_logprobs[0].logprob).to.be.closeTo(e.logprob, 1e-6);
      for (let k = 1; k < 5; k++) expect(e.top_logprobs[k].logprob).to.be.at.most(e.top_logprobs[k - 1].logprob);
    }
    const bytes = Buffer.from(lp.flatMap((e) => e.bytes as number[])).toString('utf8');
    expect(bytes).to.equal(j.choices[0].message.content); // not trimmed, as vLLM
    // the raw logprob of the first token equals log_softmax of a plain forward of the prompt
    const ids = (await policy.encodePrompts([[{ role: 'user', content: 'Is the plan good?' }]], { enableThinking: false }))[0]!;
    const f = await policy.model.forward({ inputIds: { data: Int32Array.from(ids), shape: [1, ids.length] } });
    const V = f.logits!.shape[2]!;
    const last = f.logits!.data.subarray((ids.length - 1) * V, ids.length * V);
    let mx = -Infinity;
    for (const x of last) mx = Math.max(mx, x);
    let z = 0;
    for (const x of last) z += Math.exp(x - mx);
    const first = lp[0]!;
    const tid = policy.tokenizer.tokenToId(first.token) ?? -1;
    if (tid >= 0) expect(first.logprob).to.be.closeTo(last[tid]! - mx - Math.log(z), 1e-4);
    // streaming: the same entries, spread over the chunks
    const st = sse(await (await post(body('Is the plan good?', { logprobs: true, top_logprobs: 5, stream: true }))).text());
    const slp = st.flatMap((c) => c.choices).flatMap((c: Json) => (c.logprobs ? c.logprobs.content : []));
    expect(slp.map((e: Json) => e.token)).to.deep.equal(lp.map((e) => e.token));
    slp.forEach((e: Json, k: number) => expect(e.logprob).to.be.closeTo(lp[k]!.logprob, 1e-5));
    // no logprobs requested: null; top_logprobs without logprobs: 400
    expect((await (await post(body('x'))).json()).choices[0].logprobs).to.equal(null);
    expect((await post(body('x', { top_logprobs: 3 }))).status).to.equal(400);
    expect((await post(body('x', { logprobs: true, top_logprobs: 21 }))).status).to.equal(400);
  });

  it('stop strings end decoding: content cut before the stop, completion_tokens counts up to it', async () => {
    const full = await (await post(body('Tell me about baselines.', { max_tokens: 24, ignore_eos: true }))).json();
    const text: string = full.choices[0].message.content;
    expect(full.usage.completion_tokens).to.be.greaterThan(4);
    // a stop string that first appears in the middle of the text
    let stop = '';
    for (let i = Math.floor(text.length / 3); i < text.length - 2 && !stop; i++) {
      const s = text.slice(i, i + 2);
      if (s.trim().length === 2 && text.indexOf(s) === i) stop = s;
    }
    if (!stop) return; // a degenerate random completion
    const cut = await (await post(body('Tell me about baselines.', { max_tokens: 24, stop: [stop, 'NEVER-APPEARS'], logprobs: true }))).json();
    expect(cut.choices[0].finish_reason).to.equal('stop');
    expect(cut.choices[0].message.content).to.equal(text.slice(0, text.indexOf(stop)));
    expect(cut.usage.completion_tokens).to.be.lessThan(full.usage.completion_tokens);
    // the tokens counted are exactly those whose text reaches the stop string
    const toks = cut.choices[0].logprobs.content as Json[];
    expect(toks.length).to.equal(cut.usage.completion_tokens);
    const upTo = Buffer.from(toks.flatMap((e) => e.bytes as number[])).toString('utf8');
    expect(upTo.includes(stop)).to.equal(true);
    const before = Buffer.from(toks.slice(0, -1).flatMap((e) => e.bytes as number[])).toString('utf8');
    expect(before.includes(stop)).to.equal(false);
    // streaming with the same stop: the same content, nothing of the stop string sent
    const st = sse(await (await post(body('Tell me about baselines.', { max_tokens: 24, stop, stream: true }))).text());
    const content = st
      .flatMap((c) => c.choices)
      .map((c: Json) => c.delta.content ?? '')
      .join('');
    expect(content.trim()).to.equal(cut.choices[0].message.content);
    expect(st.flatMap((c) => c.choices).some((c: Json) => c.finish_reason === 'stop')).to.equal(true);
  });

  it('stream: true sends tokens as they are decoded (one chunk per token), equal to the plain text', async () => {
    const plain = await (await post(body('Stream this please.', { max_tokens: 12 }))).json();
    const text = await (await post(body('Stream this please.', { max_tokens: 12, stream: true, stream_options: { include_usage: true } }))).text();
    const chunks = sse(text);
    const contentChunks = chunks.flatMap((c) => c.choices).filter((c: Json) => c.delta.content);
    expect(contentChunks.length).to.be.greaterThan(2);
    expect(
      contentChunks
        .map((c: Json) => c.delta.content)
        .join('')
        .trim(),
    ).to.equal(plain.choices[0].message.content);
    expect(chunks[chunks.length - 1]!.usage).to.deep.equal(plain.usage);
  });

  it('tool turns and assistant tool_calls render through the chat template', async () => {
    const messages = [
      { role: 'user', content: 'What is the weather in Paris?' },
      { role: 'assistant', content: '', tool_calls: [{ id: 'call_1', type: 'function', function: { name: 'get_weather', arguments: '{"city": "Paris"}' } }] },
      { role: 'tool', tool_call_id: 'call_1', content: '{"temp": 21}' },
    ];
    const tools = [
      { type: 'function', function: { name: 'get_weather', description: 'weather', parameters: { type: 'object', properties: { city: { type: 'string' } } } } },
    ];
    const r = await post({ model: 'tiny', messages, tools, temperature: 0, max_tokens: 3 });
    expect(r.status).to.equal(200);
    const j = await r.json();
    const plain = await (await post({ model: 'tiny', messages: messages.slice(0, 1), temperature: 0, max_tokens: 3 })).json();
    expect(j.usage.prompt_tokens).to.be.greaterThan(plain.usage.prompt_tokens + 20);
    expect((await post({ model: 'tiny', messages: [{ role: 'assistant', content: '', tool_calls: [{ function: {} }] }] })).status).to.equal(400);
  });

  it('tools keep their numbers’ form: the prompt has transformers’ ids (test/fixtures/chat/qwen3-tools.json), 1.0 not read as 1', async () => {
    const fix = join(packageRoot, 'test', 'fixtures', 'chat');
    const cases = parseJsonKeepingFloats(readFileSync(join(fix, 'tools.json'), 'utf8')) as { name: string; messages: Json[]; tools: unknown[] }[];
    const ref = JSON.parse(readFileSync(join(fix, 'qwen3-tools.json'), 'utf8')) as { cases: { name: string; ids: number[] }[] };
    const c = cases[0];
    // The raw request text as a client sends it (Python's json.dumps writes 1.0); JSON.stringify would write 1.
    const raw = `{"model": "tiny", "temperature": 0, "max_tokens": 1, "messages": ${JSON.stringify(c.messages)}, "tools": ${readFileSync(join(fix, 'tools.json'), 'utf8').match(/"tools": (\[[\s\S]*?\n {4}\])/)![1]}}`;
    expect(raw).to.contain('"default": 1.0,');
    const r = await fetch(`${url}/chat/completions`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: raw });
    expect(r.status).to.equal(200);
    expect((await r.json()).usage.prompt_tokens).to.equal(ref.cases.find((x) => x.name === c.name)!.ids.length);
  });

  it('mixed seeds and settings are batched together and answer as they do alone', async () => {
    const reqs = Array.from({ length: 8 }, (_, i) =>
      body(`Question ${i}?`, { temperature: 0.5 + i / 10, top_p: i % 2 ? 0.9 : 1, top_k: i % 3 ? 0 : 10, seed: 100 + i, max_tokens: 4 + (i % 3) }),
    );
    const alone: string[] = [];
    for (const b of reqs) alone.push((await (await post(b)).json()).choices[0].message.content);
    const before = srv.stats();
    const together = await Promise.all(reqs.map(async (b) => (await (await post(b)).json()).choices[0].message.content as string));
    // Batched rows run their matmuls at another row count than alone, so a row's logits can differ
    // in the last bits; a seeded draw that lands on a CDF boundary then parts (seen once in CI: the
    // 5th token of one row of 8). At most one row may part; a batching fault changes them all.
    const parted = together.map((t, i) => i).filter((i) => together[i] !== alone[i]);
    expect(
      parted.length,
      `rows that differ from their answer alone: ${parted.map((i) => `${i}: ${JSON.stringify(together[i])} vs ${JSON.stringify(alone[i])}`).join('; ')}`,
    ).to.be.at.most(1);
    const after = srv.stats();
    expect(after.maxBatchSeen).to.be.at.least(4);
    expect(after.steps - before.steps).to.be.lessThan(reqs.reduce((a, b) => a + (b.max_tokens as number), 0));
  });

  it('a full queue answers 429 (queue_full) and a disconnect cancels its row', async () => {
    const small = new ChatServer({ backend: policyServeBackend(policy, { maxRows: 1 }), modelId: 'tiny', maxBatch: 1, maxQueue: 1 });
    const u = (await small.start()).url;
    try {
      const long = body('long', { max_tokens: 60, ignore_eos: true });
      const rs = await Promise.all([0, 1, 2, 3].map(() => post(long, u)));
      const codes = rs.map((r) => r.status).sort();
      expect(codes).to.include(429);
      expect(codes.filter((c) => c === 200).length).to.be.at.least(2);
      const r429 = rs.find((r) => r.status === 429)!;
      expect(r429.headers.get('retry-after')).to.equal('1');
      expect((await r429.json()).error.code).to.equal('queue_full');
      await Promise.all(rs.filter((r) => r !== r429).map((r) => r.text()));
      // disconnect mid-stream: the row is cancelled, the server keeps serving
      const ac = new AbortController();
      const res = await post({ ...long, max_tokens: 500, stream: true }, u, ac.signal);
      const reader = res.body!.getReader();
      await reader.read();
      await reader.read();
      const stepsAt = small.stats().steps;
      ac.abort();
      await reader.read().catch(() => undefined);
      for (let i = 0; i < 50 && small.stats().cancelled === 0; i++) await new Promise((r) => setTimeout(r, 20));
      expect(small.stats().cancelled).to.equal(1);
      const ok = await (await post(body('after'), u)).json();
      expect(ok.choices[0].message).to.have.property('content');
      expect(small.stats().steps - stepsAt).to.be.lessThan(200);
    } finally {
      await small.close();
    }
  });
});
