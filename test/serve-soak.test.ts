/**
 * Soak test of `serve` on loopback, bounded in count (96 + 96 requests, 24 at
 * a time) and time: mixed plain and streaming requests with mixed settings and seeds, malformed
 * bodies (not JSON, wrong types, unknown model, bad roles) and clients that disconnect
 * mid-stream. Every well-formed request that stays connected gets a complete 200 answer, every
 * malformed one a 4xx with OpenAI's error shape; afterwards no row is live or queued, and the
 * memory is back near its level after a warm-up round of the same mix (after a full GC: JS heap
 * within 8 MiB, RSS within 128 MiB — no per-request leak).
 */
import { expect } from 'chai';
import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';
import { ChatServer } from '../lib/serve/server.js';
import { policyServeBackend } from '../lib/serve/policy.js';
import { Policy } from '../lib/model/policy.js';
import { tinyModel } from './helpers/tiny.js';

describe('serve soak: mixed traffic, malformed bodies and disconnects (tiny Qwen3, loopback)', function () {
  this.timeout(180000);
  let policy: Policy;
  let srv: ChatServer;
  let url: string;
  before(async () => {
    policy = await Policy.load(tinyModel('tiny-tied'));
    srv = new ChatServer({ backend: policyServeBackend(policy, { maxRows: 16, capacity: 512 }), modelId: 'tiny', maxBatch: 16, maxQueue: 1000 });
    url = (await srv.start()).url;
  });
  after(async () => {
    await srv?.close();
    policy?.dispose();
  });

  type Kind = 'plain' | 'stream' | 'malformed' | 'disconnect';
  const kindOf = (i: number): Kind => (['plain', 'stream', 'plain', 'stream', 'malformed', 'stream', 'plain', 'disconnect'] as Kind[])[i % 8]!;
  const malformed = [
    '{"messages": [',
    JSON.stringify({ messages: 'hi' }),
    JSON.stringify({ messages: [{ role: 'wizard', content: 'x' }] }),
    JSON.stringify({ model: 'other', messages: [{ role: 'user', content: 'x' }] }),
    JSON.stringify({ messages: [{ role: 'user', content: 'x' }], temperature: 'hot' }),
    JSON.stringify({ messages: [{ role: 'user', content: 'x' }], max_tokens: 100000 }),
    JSON.stringify([1, 2, 3]),
    '',
  ];

  async function request(i: number): Promise<{ kind: Kind; ok: boolean; detail: string }> {
    const kind = kindOf(i);
    const b = {
      model: 'tiny',
      messages: [{ role: 'user', content: `soak request ${i}: ${'word '.repeat(i % 13)}` }],
      max_tokens: 3 + (i % 9),
      temperature: (i % 4) * 0.4,
      top_p: i % 3 ? 1 : 0.9,
      seed: i % 5 ? i : undefined,
      logprobs: i % 6 === 0,
      top_logprobs: i % 6 === 0 ? 2 : undefined,
      stop: i % 7 === 0 ? ['e'] : undefined,
      chat_template_kwargs: { enable_thinking: i % 2 === 0 },
      stream: kind === 'stream' || kind === 'disconnect',
    };
    if (kind === 'malformed') {
      const r = await fetch(`${url}/chat/completions`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: malformed[Math.floor(i / 8) % malformed.length],
      });
      const j = (await r.json()) as { error?: { message?: string } };
      return { kind, ok: r.status >= 400 && r.status < 500 && typeof j.error?.message === 'string', detail: `${r.status}` };
    }
    if (kind === 'disconnect') {
      const ac = new AbortController();
      const r = await fetch(`${url}/chat/completions`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ ...b, max_tokens: 200, ignore_eos: true }),
        signal: ac.signal,
      });
      const reader = r.body!.getReader();
      await reader.read();
      ac.abort();
      await reader.read().catch(() => undefined);
      return { kind, ok: r.status === 200, detail: 'aborted' };
    }
    const r = await fetch(`${url}/chat/completions`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(b) });
    if (r.status !== 200) return { kind, ok: false, detail: `${r.status} ${await r.text()}` };
    if (kind === 'plain') {
      const j = (await r.json()) as { choices: { finish_reason: string; message: { content: string } }[]; usage: { completion_tokens: number } };
      const ok =
        ['stop', 'length'].includes(j.choices[0]!.finish_reason) &&
        typeof j.choices[0]!.message.content === 'string' &&
        j.usage.completion_tokens <= b.max_tokens;
      return { kind, ok, detail: JSON.stringify(j).slice(0, 200) };
    }
    const text = await r.text();
    const ok = text.trimEnd().endsWith('data: [DONE]') && /"finish_reason":"(stop|length)"/.test(text);
    return { kind, ok, detail: text.slice(-200) };
  }

  it('answers every well-formed request; rows, queue and memory return to rest', async () => {
    const conc = 24;
    const load = async (from: number, total: number) => {
      let next = from;
      const out: { kind: Kind; ok: boolean; detail: string }[] = [];
      await Promise.all(
        Array.from({ length: conc }, async () => {
          while (next < from + total) out.push(await request(next++));
        }),
      );
      return out;
    };
    // warm-up with the same mix: the KV cache, the allocator's pools for every batch shape
    await load(1000, 96);
    // a real full GC before each measurement (no --expose-gc flag needed)
    setFlagsFromString('--expose_gc');
    const gc = runInNewContext('gc') as () => void;
    gc();
    const m0 = process.memoryUsage();
    const results = await load(0, 96);
    const bad = results.filter((r) => !r.ok);
    expect(bad, JSON.stringify(bad.slice(0, 3))).to.have.length(0);
    expect(results.filter((r) => r.kind === 'malformed').length).to.equal(12);
    expect(results.filter((r) => r.kind !== 'malformed').length).to.equal(84);
    for (let i = 0; i < 100 && (srv.stats().liveRows > 0 || srv.stats().queued > 0); i++) await new Promise((r) => setTimeout(r, 20));
    const s = srv.stats();
    expect(s.liveRows).to.equal(0);
    expect(s.queued).to.equal(0);
    expect(s.cancelled).to.be.at.least(24);
    expect(s.errors).to.equal(0);
    gc();
    const m1 = process.memoryUsage();
    // A second round of the same load: a leak grows RSS after both rounds (by twice as much after
    // the second), arena noise rarely lifts both.
    await load(2000, 96);
    gc();
    const m2 = process.memoryUsage();
    const mib = (x: number) => `${x >= 0 ? '+' : ''}${(x / 2 ** 20).toFixed(1)} MiB`;
    console.log(
      `      soak: ${results.length} requests, ${s.steps} steps, max batch ${s.maxBatchSeen}; after the load: JS heap ${mib(m1.heapUsed - m0.heapUsed)}, rss ${mib(m1.rss - m0.rss)}; after a second round: rss ${mib(m2.rss - m0.rss)}`,
    );
    // JS objects of finished requests are all released; native memory (KV cache, tensors) is
    // reused, but glibc keeps freed pages in per-thread arenas (libuv workers run the steps), so
    // RSS moves by ~±100 MiB between identical rounds without growing (fresh clones measured
    // -98 … +150 MiB after one round; the same spread before and after a native change, plateauing
    // over six rounds): a looser bound, after a warm-up round of the same size that brings the
    // arenas to their level, on the smaller growth of two measured rounds.
    expect((m1.heapUsed - m0.heapUsed) / 2 ** 20).to.be.below(8);
    expect(Math.min(m1.rss, m2.rss) - m0.rss, 'rss growth (MiB·2^20) after the smaller of two rounds').to.be.below(128 * 2 ** 20);
  });
});
