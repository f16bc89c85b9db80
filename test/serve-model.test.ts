/**
 * `serve` on a real tiny Qwen3 through the addon, on loopback: the shared LLM client and the http
 * judge talk to it; greedy answers are batch-invariant; streaming equals plain.
 * Skipped when the addon or python (tiny-model maker) is unavailable.
 */
import { expect } from 'chai';
import { ChatServer } from '../lib/serve/server.js';
import { policyServeBackend } from '../lib/serve/policy.js';
import { createHttpJudge } from '../lib/judge/http.js';
import { LlmClient } from '../lib/llm/client.js';
import { Policy } from '../lib/model/policy.js';
import { tinyModel } from './helpers/tiny.js';
import { orSkip } from './helpers/run.js';

describe('serve on a tiny Qwen3 (addon, loopback)', function () {
  this.timeout(240000);
  let policy: Policy;
  let srv: ChatServer;
  let url: string;
  before(async function () {
    policy = await orSkip(this, () => Policy.load(tinyModel('tiny-tied')));
    srv = new ChatServer({ backend: policyServeBackend(policy), modelId: 'tiny', batchWindowMs: 20, maxBatch: 16 });
    url = (await srv.start()).url;
  });
  after(async () => {
    await srv?.close();
    policy?.dispose();
  });

  const ask = (content: string, extra: Record<string, unknown> = {}) =>
    fetch(`${url}/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({
        model: 'tiny',
        messages: [{ role: 'user', content }],
        temperature: 0,
        max_tokens: 6,
        chat_template_kwargs: { enable_thinking: false },
        ...extra,
      }),
    });

  it('greedy answers are the same alone and batched; usage counts tokens', async () => {
    const qs = ['What is a plan?', 'Name three baselines for image classification.', 'Yes or no?'];
    const alone = [];
    for (const q of qs) alone.push(await (await ask(q)).json());
    const before = srv.stats().batches;
    const together = await Promise.all(qs.map(async (q) => (await ask(q)).json()));
    expect(srv.stats().batches - before).to.be.lessThan(3);
    expect(together.map((j) => j.choices[0].message.content)).to.deep.equal(alone.map((j) => j.choices[0].message.content));
    for (const j of alone) {
      expect(j.usage.completion_tokens).to.be.within(1, 6);
      expect(j.usage.prompt_tokens).to.be.greaterThan(5);
      expect(['stop', 'length']).to.include(j.choices[0].finish_reason);
    }
  });

  it('streaming returns the same text as a plain request', async () => {
    const plain = await (await ask('Stream this.')).json();
    const text = await (await ask('Stream this.', { stream: true })).text();
    const chunks = text
      .split('\n\n')
      .filter((l) => l.startsWith('data: ') && l !== 'data: [DONE]')
      .map((l) => JSON.parse(l.slice(6)));
    const content = chunks
      .flatMap((c) => c.choices)
      .map((c: { delta: { content?: string } }) => c.delta.content ?? '')
      .join('');
    expect(content).to.equal(plain.choices[0].message.content);
    expect(text.trimEnd().endsWith('data: [DONE]')).to.equal(true);
  });

  it('the shared client and the http judge run against it (per-item and per-plan)', async () => {
    const client = new LlmClient({ baseUrl: url, model: 'tiny', maxRetries: 0 });
    // A random model usually runs to max_tokens: the client then raises its length error (after a 200).
    try {
      const r = await client.chat({
        messages: [{ role: 'user', content: 'hello' }],
        temperature: 0,
        maxTokens: 4,
        extraBody: { chat_template_kwargs: { enable_thinking: false } },
      });
      expect(r.usage.completionTokens).to.be.within(1, 4);
    } catch (e) {
      expect((e as Error).name).to.match(/LlmLengthError/);
    }
    expect(client.stats().byStatus['200']).to.equal(1);
    const items = [
      { id: 'a', text: 'Uses an ablation.' },
      { id: 'b', text: 'Reports error bars.' },
    ];
    for (const mode of ['per-item', 'per-plan'] as const) {
      const j = createHttpJudge({ url, model: 'tiny', mode, maxTokens: 8, maxRetries: 0, extraBody: { chat_template_kwargs: { enable_thinking: false } } });
      const v = await j.judge([
        { question: 'Q?', plan: 'We ablate.', items },
        { question: 'Q?', plan: '', items },
      ]);
      expect(v.map((x) => x.map((y) => y.itemId))).to.deep.equal([
        ['a', 'b'],
        ['a', 'b'],
      ]);
      const s = j.stats();
      // A random tiny model rarely says yes/no, and may run out of tokens (a length error is a failure, counted).
      expect(s.verdicts).to.equal(4);
      expect(s.requests).to.equal(mode === 'per-item' ? 4 : 2);
      expect(s.failures).to.equal(0);
      for (const x of v.flat()) expect(x.met === null || typeof x.met === 'boolean').to.equal(true);
    }
  });
});
