/**
 * Per-row sampling settings in one batch (each row samples with its own settings and seed) and the step-wise decode engine
 * (continuous batching) on a tiny Qwen3, CPU:
 * - generate() with promptOptions: rows with different temperature / top-k / top-p / min-p /
 *   seed / max tokens share one batch; a seeded row gives the same ids alone as inside the mixed
 *   batch, on the dynamic and the static-cache path (the CUDA-graph step; test/gpu/ runs graphs);
 *   without promptOptions a uniform batch is unchanged.
 * - the sampler: sampleFromLogits with minP keeps only tokens with p >= minP * p_max.
 * - DecodeEngine: rows joining mid-decode, cancel, per-row max tokens, and raw top logprobs equal
 *   log_softmax of a plain forward.
 */
import { expect } from 'chai';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { packageRoot } from '../lib/native.js';
import { loadModel, type Qwen3Model } from '../lib/model/qwen3.js';
import { drawOrder, type Sampling } from './helpers/sampling.js';
import { generate, sampleFromLogits, type GenerateOptions, type GenerateResult } from '../lib/model/policy.js';
import { DecodeEngine, type EngineRow, type EngineToken } from '../lib/model/engine.js';
import { tinyModel } from './helpers/tiny.js';

const prompts: number[][] = (
  JSON.parse(readFileSync(join(packageRoot, 'test', 'fixtures', 'generate', 'greedy-tiny-tied.json'), 'utf8')) as { prompts: number[][] }
).prompts;
const ids = (c: { tokenIds: Int32Array }) => Array.from(c.tokenIds);
type Row = NonNullable<GenerateOptions['promptOptions']>[number];

/** Mixed settings, one per prompt (cycled). */
const mixed: Row[] = [
  { temperature: 1, seed: 11, maxNewTokens: 9 },
  { temperature: 0.7, topK: 5, seed: 12, maxNewTokens: 12 },
  { temperature: 0 },
  { temperature: 1.3, topP: 0.8, seed: 13, maxNewTokens: 7 },
  { temperature: 1, minP: 0.2, seed: 14 },
  { temperature: 0.9, topK: 20, topP: 0.9, minP: 0.05, seed: 15, maxNewTokens: 10 },
];

let shifts = 0;
async function runEngine(
  m: Qwen3Model,
  plan: { at: number; row: EngineRow }[],
  maxRows = 8,
  staticDecode?: boolean,
  capacity = 128,
): Promise<Map<number, EngineToken[]>> {
  const e = new DecodeEngine(m, { maxRows, capacity, staticDecode });
  if (staticDecode) expect(e.decodePath).to.equal('static');
  const out = new Map<number, EngineToken[]>();
  let live = 0;
  try {
    for (let step = 0; step < 200; step++) {
      for (const p of plan)
        if (p.at === step) {
          e.add(p.row);
          live++;
        }
      if (live === 0 && plan.every((p) => p.at < step)) break;
      const r = await e.step();
      shifts += r.shifts;
      for (const t of r.tokens) {
        if (!out.has(t.id)) out.set(t.id, []);
        out.get(t.id)!.push(t);
        if (t.finish) live--;
      }
    }
  } finally {
    await e.release();
  }
  return out;
}

describe('per-row sampling in one batch, and the step-wise decode engine (tiny Qwen3, CPU)', function () {
  this.timeout(240000);
  let m: Qwen3Model;
  before(async () => {
    m = await loadModel(tinyModel('tiny-tied'));
  });
  after(() => m?.dispose());

  /** One prompt per mixed row (the fixture's prompts, cycled, the repeats shortened so rows differ). */
  const P = () => mixed.map((_, i) => (i < prompts.length ? prompts[i]! : prompts[i % prompts.length]!.slice(1)));

  for (const path of ['dynamic', 'static'] as const) {
    it(`${path} path: seeded rows give the same ids alone as inside a mixed batch; per-row max tokens`, async () => {
      const staticCache = path === 'static';
      const all = (await generate(m, { prompts: P(), promptOptions: mixed, maxNewTokens: 8, seed: 1, staticCache } as GenerateOptions)) as GenerateResult & {
        decodePath: string;
      };
      expect(all.decodePath).to.equal(path);
      for (let i = 0; i < mixed.length; i++) {
        const c = all.completions[i]!;
        const max = mixed[i]!.maxNewTokens ?? 8;
        expect(c.tokenIds.length).to.be.at.most(max);
        if (c.finishReason === 'length') expect(c.tokenIds.length).to.equal(max);
        if (mixed[i]!.seed === undefined && mixed[i]!.temperature !== 0) continue;
        const alone = await generate(m, { prompts: [P()[i]!], promptOptions: [mixed[i]!], maxNewTokens: 8, seed: 99, staticCache } as GenerateOptions);
        expect(ids(alone.completions[0]!), `row ${i}`).to.deep.equal(ids(c));
      }
      // the dynamic and static paths agree on the mixed batch
      if (staticCache) {
        const dyn = await generate(m, { prompts: P(), promptOptions: mixed, maxNewTokens: 8, seed: 1 });
        expect(all.completions.map(ids)).to.deep.equal(dyn.completions.map(ids));
      }
    });
  }

  it('n > 1 with a seeded prompt: sample j has its own generator (same alone and batched)', async () => {
    const po: Row[] = [
      { temperature: 1, seed: 5 },
      { temperature: 0.8, topK: 4, seed: 6 },
    ];
    const both = await generate(m, { prompts: P().slice(0, 2), promptOptions: po, n: 3, maxNewTokens: 6 });
    const one = await generate(m, { prompts: [P()[1]!], promptOptions: [po[1]!], n: 3, maxNewTokens: 6 });
    expect(both.completions.slice(3).map(ids)).to.deep.equal(one.completions.map(ids));
    expect(new Set(both.completions.slice(0, 3).map((c) => ids(c).join())).size).to.be.greaterThan(1);
  });

  it('promptOptions without seeds and with equal settings = the plain uniform call (same generator, same ids)', async () => {
    const plain = await generate(m, { prompts: P(), temperature: 0.9, topK: 7, maxNewTokens: 6, seed: 42 });
    const rows = await generate(m, { prompts: P(), promptOptions: P().map(() => ({})), temperature: 0.9, topK: 7, maxNewTokens: 6, seed: 42 });
    expect(rows.completions.map(ids)).to.deep.equal(plain.completions.map(ids));
  });

  it('bad promptOptions: TypeError naming the entry', async () => {
    let err: Error | undefined;
    try {
      await generate(m, { prompts: P().slice(0, 2), promptOptions: [{}, { topP: 2 }] });
    } catch (e) {
      err = e as Error;
    }
    expect(err).to.be.instanceOf(TypeError);
    expect(err!.message).to.match(/promptOptions\[1\]\.topP/);
    let err2: Error | undefined;
    try {
      await generate(m, { prompts: P().slice(0, 2), promptOptions: [{}] });
    } catch (e) {
      err2 = e as Error;
    }
    expect(err2!.message).to.match(/one entry per prompt/);
  });

  it('sampler: min-p keeps only tokens with p >= minP * p_max', () => {
    const V = 6;
    const row = [2, 1.5, 0, -1, -3, 1.9]; // p ∝ e^x
    const data = new Float32Array(Array.from({ length: 400 }, () => row).flat());
    const r = sampleFromLogits({ data, shape: [400, V] }, { temperature: 1, minP: 0.5, seed: 1 });
    const kept = new Set(Array.from(r.tokenIds));
    // e^1.5 / e^2 = 0.61 >= 0.5, e^1.9/e^2 = 0.90; e^0 / e^2 = 0.14 < 0.5
    expect([...kept].sort()).to.deep.equal([0, 1, 5]);
    // logprob is under the full distribution (before truncation)
    const lse = Math.log(row.reduce((a, x) => a + Math.exp(x), 0));
    expect(r.logprobs[0]).to.be.closeTo(row[r.tokenIds[0]!]! - lse, 1e-5);
    expect(() => sampleFromLogits({ data, shape: [400, V] }, { minP: 1.5 })).to.throw(TypeError, /minP/);
  });

  it('sampler: a setting per row draws every row from its own distribution with its uniform (float64 reference)', () => {
    // Per-row sampler on given logits: each id must be the inverse-CDF draw of that row's setting
    // (greedy, full, top-k, top-k + top-p, top-p alone over more than 1024 ids, min-p) at the
    // returned uniform, recomputed in float64; a draw more than 1e-4 from its interval fails.
    const V = 3000,
      R = 40;
    const settings: Sampling[] = [
      { temperature: 0 },
      { temperature: 1 },
      { temperature: 0.7, topK: 5 },
      { temperature: 1.2, topK: 40, topP: 0.8 },
      { temperature: 1, topP: 0.9 },
      { temperature: 1, minP: 0.1 },
      { temperature: 1.3, topK: 2000 },
      { temperature: 0.6, topK: 50, minP: 0.05 },
    ];
    const rows = Array.from({ length: R }, (_, r) => settings[r % settings.length]!);
    let st = 99;
    const rand = () => (st = (Math.imul(st, 1664525) + 1013904223) >>> 0) / 2 ** 32;
    const data = Float32Array.from({ length: R * V }, () => 1.5 * Math.sqrt(-2 * Math.log(1 - rand())) * Math.cos(2 * Math.PI * rand()));
    for (const seed of [1, 2]) {
      const r = sampleFromLogits({ data, shape: [R, V] }, { rows, seed });
      for (let i = 0; i < R; i++) {
        const L = data.subarray(i * V, (i + 1) * V),
          o = rows[i]!,
          id = r.tokenIds[i]!;
        if (o.temperature === 0) {
          expect(L[id]).to.equal(Math.max(...L));
          continue;
        }
        const { order, w, total } = drawOrder(L, o);
        const j = order.indexOf(id);
        expect(j >= 0 && w[j]! > 0, `row ${i} ${JSON.stringify(o)}: id ${id} outside the candidates`).to.equal(true);
        let lo = 0;
        for (let k = 0; k < j; k++) lo += w[k]!;
        const u = r.uniforms[i]!,
          a = lo / total,
          b = (lo + w[j]!) / total;
        expect(Math.max(a - u, u - b, 0), `row ${i} ${JSON.stringify(o)}: u ${u} vs [${a}, ${b})`).to.be.at.most(1e-4);
        // the logprob is under the row's full tempered distribution
        const T = o.temperature ?? 1;
        let mx = -Infinity;
        for (const v of L) mx = Math.max(mx, v / T);
        let z = 0;
        for (const v of L) z += Math.exp(v / T - mx);
        expect(r.logprobs[i]).to.be.closeTo(L[id]! / T - mx - Math.log(z), 1e-4);
      }
    }
    expect(() => sampleFromLogits({ data, shape: [R, V] }, { rows: rows.slice(1) })).to.throw(TypeError, /one entry per logits row/);
    expect(() => sampleFromLogits({ data, shape: [R, V] }, { rows: rows.map((o, i) => (i === 3 ? { topP: 2 } : o)) })).to.throw(TypeError, /rows\[3\]\.topP/);
  });

  it('engine: a seeded row gives the same ids alone, joining a running batch, and as generate() with that seed', async () => {
    const rows: EngineRow[] = mixed.map((o, i) => ({
      id: i + 1,
      prompt: P()[i]!,
      temperature: o.temperature,
      topK: o.topK,
      topP: o.topP,
      minP: o.minP,
      seed: o.seed ?? 0,
      maxNewTokens: o.maxNewTokens ?? 8,
    }));
    // rows join at different steps while others decode
    const together = await runEngine(
      m,
      rows.map((row, i) => ({ at: i * 2, row })),
    );
    for (let i = 0; i < rows.length; i++) {
      const alone = await runEngine(m, [{ at: 0, row: rows[i]! }]);
      const a = alone.get(i + 1)!.map((t) => t.token);
      expect(
        together.get(i + 1)!.map((t) => t.token),
        `row ${i}`,
      ).to.deep.equal(a);
      expect(a.length).to.be.at.most(rows[i]!.maxNewTokens!);
      const g = await generate(m, { prompts: [P()[i]!], promptOptions: [{ ...mixed[i]!, seed: rows[i]!.seed }], maxNewTokens: 8, stopIds: [] });
      expect(ids(g.completions[0]!), `row ${i} vs generate`).to.deep.equal(a);
      const lps = alone.get(i + 1)!.map((t) => t.logprob);
      Array.from(g.completions[0]!.logprobs).forEach((x, j) => expect(lps[j]).to.be.closeTo(x, 1e-4));
    }
  });

  it('engine: the static-cache decode (the CUDA-graph step, here eager) equals the dynamic decode, rows joining and leaving', async () => {
    const rows: EngineRow[] = mixed.map((o, i) => ({
      id: i + 1,
      prompt: P()[i]!,
      temperature: o.temperature,
      topK: o.topK,
      topP: o.topP,
      minP: o.minP,
      seed: o.seed ?? 0,
      maxNewTokens: o.maxNewTokens ?? 8,
      topLogprobs: 2,
    }));
    const plan = rows.map((row, i) => ({ at: 2 * i, row }));
    const dyn = await runEngine(m, plan, 4);
    const stat = await runEngine(m, plan, 4, true);
    for (const r of rows) {
      expect(
        stat.get(r.id)!.map((t) => t.token),
        `row ${r.id}`,
      ).to.deep.equal(dyn.get(r.id)!.map((t) => t.token));
      stat.get(r.id)!.forEach((t, j) => expect(t.rawLogprob).to.be.closeTo(dyn.get(r.id)![j]!.rawLogprob, 1e-4));
    }
  });

  it('engine: a row that only fits after the live history moves left (KV rebase) decodes as alone; static == dynamic', async () => {
    const ids = (n: number, o: number) => Array.from({ length: n }, (_, i) => 1000 + 37 * i + o);
    // C (12-token prompt) pads A (4 tokens) to slot 8; C leaves after 2 tokens; B arrives when
    // A's history [8, 17) plus B's 12 tokens no longer fit 26 slots unless moved to slot 0.
    const A: EngineRow = { id: 1, prompt: ids(4, 0), temperature: 1, seed: 1, maxNewTokens: 20 };
    const B: EngineRow = { id: 2, prompt: ids(8, 5), temperature: 0.8, topK: 30, seed: 2, maxNewTokens: 12 };
    const C: EngineRow = { id: 3, prompt: ids(12, 9), temperature: 0, maxNewTokens: 2 };
    const plan = [
      { at: 0, row: A },
      { at: 0, row: C },
      { at: 5, row: B },
    ];
    for (const staticDecode of [false, true]) {
      shifts = 0;
      const got = await runEngine(m, plan, 4, staticDecode, 26);
      expect(shifts, 'KV rebases').to.be.greaterThan(0);
      for (const r of [A, B, C]) {
        const alone = await runEngine(m, [{ at: 0, row: r }], 4, staticDecode, 26);
        expect(
          got.get(r.id)!.map((t) => t.token),
          `row ${r.id} static ${staticDecode}`,
        ).to.deep.equal(alone.get(r.id)!.map((t) => t.token));
      }
    }
  });

  it('engine: cancel removes a row (queued or live); finished rows free their slots for waiting rows', async () => {
    const e = new DecodeEngine(m, { maxRows: 2, capacity: 64 });
    try {
      e.add({ id: 1, prompt: P()[0]!, temperature: 0, maxNewTokens: 30 });
      e.add({ id: 2, prompt: P()[1]!, temperature: 0, maxNewTokens: 3 });
      e.add({ id: 3, prompt: P()[2]!, temperature: 0, maxNewTokens: 4 });
      e.add({ id: 4, prompt: P()[3]!, temperature: 0, maxNewTokens: 4 });
      let s = await e.step();
      expect(s.tokens.map((t) => t.id)).to.deep.equal([1, 2]);
      expect(s.waiting).to.equal(2);
      expect(s.tokens[0]!.promptTokens).to.equal(P()[0]!.length);
      e.cancel(4); // queued
      s = await e.step();
      s = await e.step(); // row 2 finishes (3 tokens)
      expect(s.tokens.find((t) => t.id === 2)!.finish).to.equal('length');
      s = await e.step(); // row 3 joins in the freed slot
      expect(s.joined).to.equal(1);
      expect(s.tokens.map((t) => t.id).sort()).to.deep.equal([1, 3]);
      e.cancel(1); // live
      s = await e.step();
      expect(s.tokens.map((t) => t.id)).to.deep.equal([3]);
      while (s.active > 0) s = await e.step();
      expect(s.waiting).to.equal(0);
      expect(() => e.add({ id: 9, prompt: [], maxNewTokens: 2 })).to.throw(TypeError, /row\.prompt/);
      expect(() => e.add({ id: 9, prompt: P()[0]!, maxNewTokens: 100 })).to.throw(TypeError, /capacity/);
    } finally {
      await e.release();
    }
  });

  it('engine: row ids are unique among queued and live rows; cancel then add of the same id queues the new row; a finished id is free again', async () => {
    const e = new DecodeEngine(m, { maxRows: 2, capacity: 64 });
    try {
      e.add({ id: 1, prompt: P()[0]!, temperature: 0, maxNewTokens: 2 });
      expect(() => e.add({ id: 1, prompt: P()[1]!, temperature: 0, maxNewTokens: 2 })).to.throw(TypeError, /row\.id 1 is already queued or decoding/);
      e.cancel(1); // queued: dropped now, so the id is free for a new row before the next step
      e.add({ id: 1, prompt: P()[1]!, temperature: 0, maxNewTokens: 2 });
      let s = await e.step();
      expect(s.tokens.map((t) => [t.id, t.promptTokens])).to.deep.equal([[1, P()[1]!.length]]);
      expect(() => e.add({ id: 1, prompt: P()[0]!, temperature: 0, maxNewTokens: 2 })).to.throw(TypeError, /already queued or decoding/); // live
      s = await e.step();
      expect(s.tokens[0]!.finish).to.equal('length');
      e.cancel(1); // finished: a no-op, and the id is free again
      e.add({ id: 1, prompt: P()[0]!, temperature: 0, maxNewTokens: 1 });
      s = await e.step();
      expect(s.tokens.map((t) => [t.id, t.promptTokens, t.finish])).to.deep.equal([[1, P()[0]!.length, 'length']]);
      e.cancel(42); // unknown: a no-op
      expect((await e.step()).tokens).to.deep.equal([]);
    } finally {
      await e.release();
    }
  });

  it('engine: raw top logprobs = log_softmax of the forward logits (before temperature / top-k)', async () => {
    const p = P()[1]!;
    const e = new DecodeEngine(m, { maxRows: 4, capacity: 64 });
    const s = await e.step().then(() => {
      e.add({ id: 7, prompt: p, temperature: 0.5, topK: 3, seed: 3, maxNewTokens: 1, topLogprobs: 5 });
      e.add({ id: 8, prompt: P()[2]!, temperature: 1, seed: 4, maxNewTokens: 1 });
      return e.step();
    });
    await e.release();
    const t = s.tokens.find((x) => x.id === 7)!;
    const f = await m.forward({ inputIds: { data: Int32Array.from(p), shape: [1, p.length] } });
    const V = f.logits!.shape[2]!;
    const last = f.logits!.data.subarray((p.length - 1) * V, p.length * V);
    let mx = -Infinity;
    for (const x of last) mx = Math.max(mx, x);
    let z = 0;
    for (const x of last) z += Math.exp(x - mx);
    const lsm = (i: number) => last[i]! - mx - Math.log(z);
    expect(t.rawLogprob).to.be.closeTo(lsm(t.token), 1e-4);
    expect(t.topIds!.length).to.equal(5);
    const order = Array.from(last.keys()).sort((a, b) => last[b]! - last[a]!);
    expect(Array.from(t.topIds!)).to.deep.equal(order.slice(0, 5));
    Array.from(t.topLogprobs!).forEach((x, k) => expect(x).to.be.closeTo(lsm(order[k]!), 1e-4));
    expect(order.slice(0, 3)).to.include(t.token); // top-k 3
  });
});
