import { expect } from 'chai';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { HttpJudge, type ChatLike, type ChatMessage } from '../lib/judge/http.js';

/** In-process transport: answers "Yes" when the plan contains the item text, else "No". */
function fakeClient(opts: { fail?: (n: number) => boolean; perPlanRaw?: (user: string) => string } = {}) {
  const calls: { messages: ChatMessage[]; responseFormat?: unknown; maxTokens?: number }[] = [];
  const client: ChatLike = {
    async chat(req) {
      calls.push(req);
      await new Promise((r) => setTimeout(r, 2));
      if (opts.fail?.(calls.length)) throw new Error('HTTP 503');
      const user = req.messages[req.messages.length - 1].content;
      const plan = /<plan>\n([\s\S]*?)\n<\/plan>/.exec(user)![1];
      if (req.responseFormat) {
        if (opts.perPlanRaw) return { content: opts.perPlanRaw(user), usage: { promptTokens: 100, completionTokens: 20 } };
        const items = [...user.matchAll(/^- \[([^\]]+)\] (.*)$/gm)].map((m) => ({ id: m[1], met: plan.includes(m[2]) }));
        return { content: JSON.stringify({ verdicts: items }), usage: { prompt_tokens: 100, completion_tokens: 20 } };
      }
      const item = /<item>\n([\s\S]*?)\n<\/item>/.exec(user)![1];
      return { content: plan.includes(item) ? '<think>ok</think>Yes.' : '**No**', usage: { promptTokens: 50, completionTokens: 2 } };
    },
  };
  return { client, calls };
}

const items = [
  { id: 'a', text: 'ablation study' },
  { id: 'b', text: 'strong baselines' },
  { id: 'c', text: 'error bars' },
];

describe('judge http (in-process transport)', () => {
  it('per-item: one request per plan × item, verdicts aligned, tokens counted, cache hits', async () => {
    const { client, calls } = fakeClient();
    const j = new HttpJudge({ client, model: 'm', mode: 'per-item', concurrency: 2 });
    const reqs = [
      { question: 'Q', plan: 'We run an ablation study with error bars.', items },
      { question: 'Q', plan: 'We compare to strong baselines.', items },
    ];
    const v = await j.judge(reqs);
    expect(v.map((r) => r.map((x) => x.met))).to.deep.equal([
      [true, false, true],
      [false, true, false],
    ]);
    expect(v[0].map((x) => x.itemId)).to.deep.equal(['a', 'b', 'c']);
    expect(calls.length).to.equal(6);
    let s = j.stats();
    expect(s.requests).to.equal(6);
    expect(s.promptTokens).to.equal(300);
    expect(s.completionTokens).to.equal(12);
    await j.judge(reqs);
    s = j.stats();
    expect(calls.length).to.equal(6);
    expect(s.cacheHits).to.equal(6);
    expect(s.verdicts).to.equal(12);
    expect(calls[0].maxTokens).to.equal(16);
  });
  it('de-duplicates identical in-flight requests (GRPO groups repeat plans)', async () => {
    const { client, calls } = fakeClient();
    const j = new HttpJudge({ client, model: 'm' });
    const r = { question: 'Q', plan: 'same plan', items: [items[0]] };
    await j.judge([r, r, r, r]);
    expect(calls.length).to.equal(1);
    expect(j.stats().cacheHits).to.equal(3);
  });
  it('failures give null verdicts with error, counted; failOnError rejects', async () => {
    const { client } = fakeClient({ fail: (n) => n === 2 });
    const j = new HttpJudge({ client, model: 'm', concurrency: 1 });
    const v = await j.judge([{ question: 'Q', plan: 'ablation study', items }]);
    expect(v[0].map((x) => x.met)).to.deep.equal([true, null, false]);
    expect(v[0][1].error).to.equal(true);
    expect(v[0][1].raw).to.match(/503/);
    expect(j.stats().failures).to.equal(1);
    const j2 = new HttpJudge({ client: fakeClient({ fail: () => true }).client, model: 'm', failOnError: true });
    let err: unknown;
    await j2.judge([{ question: 'Q', plan: 'x', items }]).catch((e) => (err = e));
    expect(String(err)).to.match(/503/);
  });
  it('per-plan: one request per plan with a JSON schema response format', async () => {
    const { client, calls } = fakeClient();
    const j = new HttpJudge({ client, model: 'm', mode: 'per-plan' });
    const v = await j.judge([
      { question: 'Q', plan: 'error bars and strong baselines', items },
      { question: 'Q', plan: 'nothing', items: [] },
    ]);
    expect(v[0].map((x) => x.met)).to.deep.equal([false, true, true]);
    expect(v[1]).to.deep.equal([]);
    expect(calls.length).to.equal(1);
    expect((calls[0].responseFormat as { type: string }).type).to.equal('json_schema');
    expect(j.stats().promptTokens).to.equal(100);
  });
  it('per-plan: unreadable output → nulls counted as unparsed; refusals counted', async () => {
    const j = new HttpJudge({ client: fakeClient({ perPlanRaw: () => 'no json here' }).client, model: 'm', mode: 'per-plan' });
    const v = await j.judge([{ question: 'Q', plan: 'p', items }]);
    expect(v[0].every((x) => x.met === null)).to.equal(true);
    expect(j.stats().unparsed).to.equal(3);
    const j2 = new HttpJudge({ client: fakeClient({ perPlanRaw: () => "I'm sorry, I can't help with that." }).client, model: 'm', mode: 'per-plan' });
    await j2.judge([{ question: 'Q', plan: 'p', items }]);
    expect(j2.stats().refusals).to.equal(3);
  });
  it('SQLite cache persists across judges', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'judge-cache-'));
    try {
      const path = join(dir, 'sub', 'cache.sqlite');
      const a = fakeClient();
      const j1 = new HttpJudge({ client: a.client, model: 'm', cachePath: path });
      await j1.judge([{ question: 'Q', plan: 'ablation study', items }]);
      j1.close();
      const b = fakeClient();
      const j2 = new HttpJudge({ client: b.client, model: 'm', cachePath: path });
      const v = await j2.judge([{ question: 'Q', plan: 'ablation study', items }]);
      j2.close();
      expect(b.calls.length).to.equal(0);
      expect(v[0].map((x) => x.met)).to.deep.equal([true, false, false]);
      // A different model is a different key.
      const c = fakeClient();
      const j3 = new HttpJudge({ client: c.client, model: 'other', cachePath: path });
      await j3.judge([{ question: 'Q', plan: 'ablation study', items }]);
      j3.close();
      expect(c.calls.length).to.equal(3);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
  it('a length-truncated answer is parsed, not failed', async () => {
    const client: ChatLike = {
      async chat() {
        const e = Object.assign(new Error('truncated'), {
          name: 'LlmLengthError',
          content: 'Yes, because the plan clearly',
          usage: { promptTokens: 7, completionTokens: 16 },
        });
        throw e;
      },
    };
    const j = new HttpJudge({ client, model: 'm' });
    const v = await j.judge([{ question: 'Q', plan: 'p', items: [items[0]] }]);
    expect(v[0][0].met).to.equal(true);
    expect(j.stats()).to.include({ truncated: 1, failures: 0, completionTokens: 16 });
  });
  it('abort rejects the call', async () => {
    const j = new HttpJudge({ client: fakeClient().client, model: 'm', concurrency: 1 });
    const ac = new AbortController();
    const p = j.judge([{ question: 'Q', plan: 'p', items }], { signal: ac.signal });
    ac.abort(new Error('stop'));
    let err: unknown;
    await p.catch((e) => (err = e));
    expect(String(err)).to.match(/stop/);
  });
});
