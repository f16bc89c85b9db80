/**
 * Static-KV-cache decode (Qwen3Model::DecodeStatic, StaticPath in native/generate/generate.cc) on CPU against
 * the dynamic path (Forward with a growing cache): the static path is what the CUDA-graph decode
 * replays, so here it must give the same tokens (greedy and seeded sampling) and logprobs within
 * 1e-5, for left-padded batches, batches padded to a power-of-two bucket, n > 1, stop ids and a
 * non-zero LoRA adapter; and for every syncEvery (the host reads the sampled tokens back every K
 * steps, sampling inside the step where it is sync-free) the same results as with syncEvery 1.
 * The graph path itself is tested in test/gpu/decode-graphs.test.ts.
 */
import { expect } from 'chai';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { native, packageRoot } from '../lib/native.js';
import { loadModel, type Qwen3Model } from '../lib/model/qwen3.js';
import { generate, type GenerateOptions, type GenerateResult, type RawCompletion } from '../lib/model/policy.js';
import { tinyModel } from './helpers/tiny.js';
import { teacherForcedLogprobs } from './helpers/sampling.js';

/** Decode-path options of the native generate. */
interface PathOptions {
  cudaGraphs?: boolean;
  staticCache?: boolean;
  padToBucket?: boolean;
  syncEvery?: number;
}
type PathResult = GenerateResult & { decodePath: string; graphCaptures: number; batchRows: number; samplingInStep: boolean };

const run = (m: Qwen3Model, o: GenerateOptions & PathOptions) => generate(m, o as GenerateOptions) as Promise<PathResult>;
const ids = (c: { tokenIds: Int32Array }) => Array.from(c.tokenIds);
const prompts: number[][] = (
  JSON.parse(readFileSync(join(packageRoot, 'test', 'fixtures', 'generate', 'greedy-tiny-tied.json'), 'utf8')) as { prompts: number[][] }
).prompts;

/**
 * expectSame for full-vocabulary sampling, where the two paths' float32 attention rounds
 * differently: a row may part where its uniform falls within rounding of a CDF boundary (seen on
 * an AMD EPYC host: ids 88842 / 88843 at T = 0.9). The walk is in id order, so such a parting draws
 * neighbouring ids; before it the ids and logprobs must agree, after it the row is not compared.
 * At most one row may part.
 */
function expectSameUpToBoundary(a: PathResult, b: PathResult, tol = 1e-5): void {
  expect(b.completions.length).to.equal(a.completions.length);
  let worst = 0,
    parted = 0;
  for (let i = 0; i < a.completions.length; i++) {
    const ia = ids(a.completions[i]!),
      ib = ids(b.completions[i]!);
    let t = 0;
    for (; t < Math.min(ia.length, ib.length) && ia[t] === ib[t]; t++)
      worst = Math.max(worst, Math.abs(a.completions[i]!.logprobs[t]! - b.completions[i]!.logprobs[t]!));
    if (t === ia.length && t === ib.length) {
      expect(b.completions[i]!.finishReason).to.equal(a.completions[i]!.finishReason);
      continue;
    }
    parted++;
    expect(Math.abs(ia[t]! - ib[t]!), `completion ${i} parts at ${t} (${ia[t]} vs ${ib[t]}): not neighbouring ids of the id-order walk`).to.equal(1);
  }
  expect(parted, 'rows that part at a CDF boundary').to.be.at.most(1);
  expect(worst, 'max |Δ logprob| before any parting').to.be.at.most(tol);
}

function expectSame(a: PathResult, b: PathResult, tol = 1e-5): void {
  expect(b.completions.length).to.equal(a.completions.length);
  let worst = 0;
  for (let i = 0; i < a.completions.length; i++) {
    const ca = a.completions[i]!,
      cb = b.completions[i]!;
    expect(ids(cb), `completion ${i}`).to.deep.equal(ids(ca));
    expect(cb.finishReason).to.equal(ca.finishReason);
    for (let j = 0; j < ca.logprobs.length; j++) worst = Math.max(worst, Math.abs(ca.logprobs[j]! - cb.logprobs[j]!));
  }
  expect(worst, 'max |Δ logprob|').to.be.at.most(tol);
  expect(b.newTokens).to.equal(a.newTokens);
}

describe('generate: static KV-cache decode (the CUDA-graph step) equals the dynamic path on CPU', function () {
  this.timeout(300000);
  const models: Record<string, Qwen3Model> = {};
  before(async () => {
    for (const name of ['tiny-tied', 'tiny-untied'] as const) models[name] = await loadModel(tinyModel(name));
  });
  after(() => {
    for (const m of Object.values(models)) m.dispose();
  });

  it('defaults on CPU: the dynamic path (no graphs, no static cache)', async () => {
    const r = await run(models['tiny-tied']!, { prompts: prompts.slice(0, 2), temperature: 0, maxNewTokens: 4 });
    expect(r.decodePath).to.equal('dynamic');
    expect(r.graphCaptures).to.equal(0);
    expect(r.batchRows).to.equal(2);
    const g = await run(models['tiny-tied']!, { prompts: prompts.slice(0, 2), temperature: 0, maxNewTokens: 4, cudaGraphs: true });
    expect(g.decodePath).to.equal('dynamic');
  });

  for (const name of ['tiny-tied', 'tiny-untied'] as const) {
    it(`${name}: greedy, left-padded batch of ${prompts.length}, 64 tokens: identical ids, logprobs ≤ 1e-5 (exact rows and bucket-padded rows)`, async () => {
      const m = models[name]!;
      const base = { prompts, temperature: 0, maxNewTokens: 64, stopIds: [] as number[] };
      const dyn = await run(m, { ...base, staticCache: false });
      const st = await run(m, { ...base, staticCache: true });
      expect(st.decodePath).to.equal('static');
      expect(st.batchRows).to.equal(prompts.length);
      expectSame(dyn, st);
      // 3 prompts -> a bucket of 4 rows: one padded row, masked and ignored.
      const three = { ...base, prompts: prompts.slice(0, 3) };
      const dyn3 = await run(m, { ...three, staticCache: false });
      const pad3 = await run(m, { ...three, staticCache: true, padToBucket: true });
      expect(pad3.batchRows).to.equal(4);
      expectSame(dyn3, pad3);
      expect(pad3.steps).to.equal(63);
    });
  }

  it('seeded sampling, n = 3, top-k (+ top-p), padded bucket: same ids, logprobs ≤ 1e-5', async () => {
    // Exact ids are asserted where the candidates are limited by top-k. The tiny random model's
    // next-token distribution is nearly flat over 151,936 ids, so with the full vocabulary (or a
    // top-p nucleus of ~10^5 near-equal logits) a 1-ulp logit difference (the static path reduces
    // attention over the whole capacity, the dynamic one over the filled prefix) occasionally
    // moves an inverse-CDF draw to a neighbouring id; that case is checked up to the first such
    // flip below. Bit-identical kernels (graph vs eager static, test/gpu) give identical ids always.
    const m = models['tiny-tied']!;
    for (const [T, topK, topP] of [
      [0.8, 20, 1.0],
      [1.0, 50, 0.9],
      [1.3, 8, 1.0],
    ] as const) {
      const o = { prompts: prompts.slice(0, 3), n: 3, temperature: T, topK, topP, maxNewTokens: 24, seed: 4242, stopIds: [] as number[] };
      const dyn = await run(m, { ...o, staticCache: false });
      const st = await run(m, { ...o, staticCache: true, padToBucket: true });
      expect(st.batchRows).to.equal(16); // 9 rows -> bucket 16
      expectSame(dyn, st);
    }
    const o = { prompts: prompts.slice(0, 3), n: 3, temperature: 1.0, maxNewTokens: 24, seed: 4242, stopIds: [] as number[] };
    const dyn = await run(m, { ...o, staticCache: false });
    const st = await run(m, { ...o, staticCache: true, padToBucket: true });
    let same = 0,
      total = 0;
    for (let i = 0; i < dyn.completions.length; i++) {
      const a = dyn.completions[i]!,
        b = st.completions[i]!;
      total += a.tokenIds.length;
      for (let j = 0; j < a.tokenIds.length; j++) {
        if (a.tokenIds[j] !== b.tokenIds[j]) break; // a rounding flip: the rows diverge from here
        expect(Math.abs(a.logprobs[j]! - b.logprobs[j]!)).to.be.at.most(1e-5);
        same++;
      }
    }
    expect(same / total, 'share of identical full-vocabulary samples').to.be.at.least(0.9);
  });

  it('stop ids: finished rows stay masked in the static batch; results equal the compacting dynamic path', async () => {
    const m = models['tiny-tied']!;
    const greedy = await run(m, { prompts, temperature: 0, maxNewTokens: 40, stopIds: [] });
    const stopTok = ids(greedy.completions[1]!)[5]!;
    const o = { prompts, temperature: 0, maxNewTokens: 40, stopIds: [stopTok], compactFraction: 0.01 };
    const dyn = await run(m, { ...o, staticCache: false });
    const st = await run(m, { ...o, staticCache: true, padToBucket: true });
    expect(dyn.completions[1]!.finishReason).to.equal('stop');
    expect(st.compactions).to.equal(0);
    expectSame(dyn, st);
    // every row stopping ends the loop early on both paths (syncEvery 1: no step after the stop;
    // the default 8: the loop ends at the next read-back, at most 7 wasted steps)
    const one = { prompts: [prompts[1]!], temperature: 0, maxNewTokens: 40, stopIds: [stopTok], staticCache: true, padToBucket: true };
    const all = await run(m, { ...one, syncEvery: 1 });
    expect(all.completions[0]!.finishReason).to.equal('stop');
    expect(all.steps).to.equal(all.completions[0]!.tokenIds.length - 1);
    const all8 = await run(m, one);
    expect(ids(all8.completions[0]!)).to.deep.equal(ids(all.completions[0]!));
    expect(all8.steps).to.equal(Math.min(40, Math.ceil(all.completions[0]!.tokenIds.length / 8) * 8) - 1);
  });

  it('syncEvery 1, 3, 8 (sampling inside the step, read back every K): identical to syncEvery 1 and to the dynamic path', async () => {
    // Stop ids chosen from a greedy run so that they fire at different steps in different rows,
    // one of them at the very first token; maxNewTokens = 21 is a multiple of neither 3 nor 8.
    const m = models['tiny-tied']!;
    const T = 21;
    const greedy = await run(m, { prompts, temperature: 0, maxNewTokens: T, stopIds: [] });
    const g0 = ids(greedy.completions[0]!),
      g1 = ids(greedy.completions[1]!),
      g2 = ids(greedy.completions[2]!);
    const stopsFor = (first: number[], mid: number[], late: number[]) => [first[0]!, mid[6]!, late[13]!];
    const cases: { name: string; o: GenerateOptions; exactVsDynamic: boolean; inStep: boolean }[] = [
      { name: 'greedy, stop ids', o: { prompts, temperature: 0, maxNewTokens: T, stopIds: stopsFor(g0, g1, g2) }, exactVsDynamic: true, inStep: true },
      { name: 'greedy, no stop ids', o: { prompts, temperature: 0, maxNewTokens: T, stopIds: [] }, exactVsDynamic: true, inStep: true },
      { name: 'top-k n = 2', o: { prompts, n: 2, temperature: 0.9, topK: 12, maxNewTokens: T, seed: 77, stopIds: [] }, exactVsDynamic: true, inStep: true },
      {
        name: 'top-k + top-p n = 2',
        o: { prompts, n: 2, temperature: 1.1, topK: 30, topP: 0.8, maxNewTokens: T, seed: 78, stopIds: [] },
        exactVsDynamic: true,
        inStep: true,
      },
      { name: 'full vocabulary n = 2', o: { prompts, n: 2, temperature: 1.0, maxNewTokens: T, seed: 79, stopIds: [] }, exactVsDynamic: false, inStep: true },
      {
        name: 'top-p alone (sampler outside the step)',
        o: { prompts, temperature: 1.0, topP: 0.9, maxNewTokens: T, seed: 80, stopIds: [] },
        exactVsDynamic: false,
        inStep: false,
      },
    ];
    // Sampled runs: stop ids taken from their own static run so that they fire in several rows.
    for (const c of cases) {
      if (c.o.temperature !== 0) {
        const free = await run(m, { ...c.o, staticCache: true, padToBucket: true, syncEvery: 1 });
        const r0 = ids(free.completions[0]!),
          r1 = ids(free.completions[1]!),
          r2 = ids(free.completions[free.completions.length - 1]!);
        c.o = { ...c.o, stopIds: stopsFor(r0, r1, r2) };
      }
      const dyn = await run(m, { ...c.o, staticCache: false });
      const ref = await run(m, { ...c.o, staticCache: true, padToBucket: true, syncEvery: 1 });
      expect(ref.samplingInStep, c.name).to.equal(c.inStep);
      if (c.exactVsDynamic) expect(ref.steps, `${c.name}: syncEvery 1 runs the dynamic path's forwards`).to.equal(dyn.steps);
      const stops = ref.completions.map((x) => x.finishReason);
      expect(stops.filter((f) => f === 'stop').length, `${c.name}: rows that stop`).to.be.at.least(c.o.stopIds!.length ? 2 : 0);
      if (c.o.stopIds!.length) expect(ref.completions[0]!.tokenIds.length, `${c.name}: row 0 stops at its first token`).to.equal(1);
      if (c.exactVsDynamic) expectSame(dyn, ref);
      else {
        // Full vocabulary / top-p over ~10^5 near-equal ids: a 1-ulp logit difference between the
        // static and dynamic attention can move a draw to a neighbouring id (see above), after
        // which a row diverges (and may hit a stop id on one path only). Up to that point the rows
        // must agree (same uniforms, same logprobs), and the first token (prefill logits) always.
        dyn.completions.forEach((a, i) => {
          const b = ref.completions[i]!;
          expect(b.tokenIds[0], `${c.name}: first token of row ${i}`).to.equal(a.tokenIds[0]);
          for (let j = 0; j < Math.min(a.tokenIds.length, b.tokenIds.length) && a.tokenIds[j] === b.tokenIds[j]; j++)
            expect(Math.abs(a.logprobs[j]! - b.logprobs[j]!)).to.be.at.most(1e-5);
        });
      }
      const longest = Math.max(...ref.completions.map((x) => x.tokenIds.length));
      for (const K of [1, 3, 8]) {
        const st = await run(m, { ...c.o, staticCache: true, padToBucket: true, syncEvery: K });
        expect(st.completions.map(ids), `${c.name} syncEvery ${K}`).to.deep.equal(ref.completions.map(ids));
        expect(st.completions.map((x) => x.finishReason)).to.deep.equal(stops);
        expect(st.completions.map((x) => Array.from(x.logprobs))).to.deep.equal(ref.completions.map((x) => Array.from(x.logprobs)));
        expect(st.newTokens).to.equal(ref.newTokens);
        expect(st.steps, `${c.name} syncEvery ${K}: forwards`).to.equal(Math.min(T, Math.ceil(longest / K) * K) - 1);
      }
    }
    // every row stopping at its very first token: the loop ends at the first read-back
    const first = ids(greedy.completions[3]!)[0]!;
    const oneRow = { prompts: [prompts[3]!], temperature: 0, maxNewTokens: T, stopIds: [first], staticCache: true, padToBucket: true };
    for (const K of [1, 3, 8, 32]) {
      const r = await run(m, { ...oneRow, syncEvery: K });
      expect(ids(r.completions[0]!)).to.deep.equal([first]);
      expect(r.completions[0]!.finishReason).to.equal('stop');
      expect(r.newTokens).to.equal(1);
      expect(r.steps, `syncEvery ${K}`).to.equal(Math.min(T, K) - 1);
    }
    // syncEvery is checked like the other options
    let err: (Error & { code?: string }) | undefined;
    try {
      await run(m, { prompts, maxNewTokens: 4, staticCache: true, syncEvery: 0 });
    } catch (e) {
      err = e as Error & { code?: string };
    }
    expect(err).to.be.instanceOf(TypeError);
    expect(err?.code).to.equal('ERR_PG_ARG');
    expect(err?.message).to.match(/syncEvery/);
  });

  it('non-zero LoRA adapter (active) and adapter "none": static equals dynamic', async () => {
    const m = await loadModel(tinyModel('tiny-untied'));
    try {
      m.addLora({ r: 4, alpha: 8, seed: 3 });
      const w = m.loraWeights();
      let s = 12345;
      for (const [k, t] of Object.entries(w)) {
        if (!k.includes('lora_B')) continue;
        for (let i = 0; i < t.data.length; i++) {
          s = (s * 1103515245 + 12345) % 2147483648;
          t.data[i] = (s / 2147483648 - 0.5) * 0.2;
        }
      }
      m.setLoraWeights(w);
      for (const adapter of ['active', 'none'] as const) {
        const o = { prompts, temperature: 0.9, maxNewTokens: 32, seed: 9, stopIds: [] as number[], adapter };
        const dyn = await run(m, { ...o, staticCache: false });
        const st = await run(m, { ...o, staticCache: true, padToBucket: true });
        expectSameUpToBoundary(dyn, st);
      }
    } finally {
      m.dispose();
    }
  });
  it("grouped LoRA from the per-call cache (q/k/v, gate/up) gives the teacher-forced forward's logprobs, and an adapter update between calls is seen", async () => {
    // bf16 weights with the float32 LoRA branch (the default): the decode runs LoraAddGroup, which
    // generate serves from its per-call cache (fp32 models take the fused base + LoRA node instead).
    const m = await loadModel(tinyModel('tiny-untied'), { dtype: 'bfloat16' });
    try {
      m.addLora({ r: 4, alpha: 8, seed: 5 });
      const setB = (salt: number) => {
        const w = m.loraWeights();
        for (const [k, t] of Object.entries(w))
          if (k.includes('lora_B')) for (let i = 0; i < t.data.length; i++) t.data[i] = Math.sin(i * 0.37 + k.length + salt) * 0.1;
        m.setLoraWeights(w);
      };
      // Teacher-forced logprobs (sequenceLogprobs: no generate call, so no cache) of each completion.
      const forced = (r: PathResult, T: number) => teacherForcedLogprobs(m, prompts, r.completions, T);
      const worst = (r: PathResult, f: number[][]) =>
        Math.max(...r.completions.flatMap((c, b) => Array.from(c.logprobs).map((x, t) => Math.abs(x - f[b]![t]!))));
      const o = { prompts, temperature: 0.9, maxNewTokens: 24, seed: 4, stopIds: [] as number[] };
      setB(0);
      const first: PathResult[] = [];
      for (const path of [{ staticCache: false }, { staticCache: true, padToBucket: true }]) {
        const r = await run(m, { ...o, ...path });
        // bf16: decode (few rows) and forward (many) round differently — 0.028 at most here, the same
        // with the cache off; a wrong block-diagonal B gives > 1.
        expect(worst(r, await forced(r, 0.9)), JSON.stringify(path)).to.be.below(0.06);
        first.push(r);
      }
      setB(1); // new B values between calls: the next call must not reuse the previous call's cache
      for (const path of [{ staticCache: false }, { staticCache: true, padToBucket: true }]) {
        const r = await run(m, { ...o, ...path });
        expect(worst(r, await forced(r, 0.9)), `after update ${JSON.stringify(path)}`).to.be.below(0.06);
        expect(
          worst(r, await forced(first[0]!, 0.9)) > 1e-3 || JSON.stringify(r.completions.map(ids)) !== JSON.stringify(first[0]!.completions.map(ids)),
          'the update changed the decode',
        ).to.equal(true);
      }
    } finally {
      m.dispose();
    }
  });

  it("bf16 LoRA branch: the per-call cast of the adapter gives exactly the per-forward cast's results, before and after an update", async () => {
    const m = await loadModel(tinyModel('tiny-untied'), { dtype: 'bfloat16' });
    try {
      m.setLoraFloat32Branch(false);
      m.addLora({ r: 4, alpha: 8, seed: 6 });
      const setB = (salt: number) => {
        const w = m.loraWeights();
        for (const [k, t] of Object.entries(w))
          if (k.includes('lora_B')) for (let i = 0; i < t.data.length; i++) t.data[i] = Math.cos(i * 0.29 + k.length + salt) * 0.1;
        m.setLoraWeights(w);
      };
      const o = { prompts, temperature: 0.9, maxNewTokens: 24, seed: 8, stopIds: [] as number[] };
      const both = async (path: Record<string, unknown>) => {
        const cached = await run(m, { ...o, ...path });
        process.env.PAPERGYM_LORA_CACHE = '0'; // the per-forward cast (and per-member LoRA groups)
        try {
          return { cached, plain: await run(m, { ...o, ...path }) };
        } finally {
          delete process.env.PAPERGYM_LORA_CACHE;
        }
      };
      for (const salt of [0, 1]) {
        setB(salt);
        for (const path of [{ staticCache: false }, { staticCache: true, padToBucket: true }]) {
          const { cached, plain } = await both(path);
          const what = `update ${salt} ${JSON.stringify(path)}`;
          expect(cached.completions.map(ids), what).to.deep.equal(plain.completions.map(ids));
          expect(
            cached.completions.map((c) => Array.from(c.logprobs)),
            what,
          ).to.deep.equal(plain.completions.map((c) => Array.from(c.logprobs)));
        }
      }
    } finally {
      m.dispose();
    }
  });

  it("mergeAdapter: sampling from W + scaling·B·A gives the LoRA branch's ids and logprobs (float32), for all and for some targets, and sees an adapter update", async () => {
    const m = await loadModel(tinyModel('tiny-untied'));
    try {
      const setB = (salt: number) => {
        const w = m.loraWeights();
        for (const [k, t] of Object.entries(w))
          if (k.includes('lora_B')) for (let i = 0; i < t.data.length; i++) t.data[i] = Math.sin(i * 0.41 + k.length + salt) * 0.15;
        m.setLoraWeights(w);
      };
      // All seven projections (fused q/k/v and gate/up fully merged), and a subset whose merged rows
      // sit at offsets inside the fused matrices (v within q/k/v, up within gate/up).
      for (const targetModules of [undefined, ['v_proj', 'o_proj', 'up_proj'] as const]) {
        m.addLora({ r: 4, alpha: 8, seed: 11, ...(targetModules && { targetModules: [...targetModules] }) });
        for (const salt of [0, 1]) {
          setB(salt); // salt 1: an update between calls must reach the next call's merged weights
          for (const path of [{ staticCache: false }, { staticCache: true, padToBucket: true }]) {
            // Seeded with top-k 20: over the tiny random model's near-flat 151k-id distribution the
            // full-vocabulary inverse CDF flips on float32 rounding of the logits.
            for (const sampling of [{ temperature: 0 }, { temperature: 0.9, topK: 20, seed: 21 }]) {
              const o = { prompts, maxNewTokens: 24, stopIds: [] as number[], ...sampling, ...path };
              const what = `targets ${targetModules ?? 'all'}, update ${salt}, ${JSON.stringify(path)}, ${JSON.stringify(sampling)}`;
              const branch = await run(m, o);
              const merged = (await run(m, { ...o, mergeAdapter: true })) as PathResult & { adapterMerged: boolean };
              expect(merged.adapterMerged, what).to.equal(true);
              expect((branch as PathResult & { adapterMerged: boolean }).adapterMerged, what).to.equal(false);
              try {
                expectSame(branch, merged, 2e-5);
              } catch (e) {
                throw new Error(`${what}: ${(e as Error).message}`);
              }
              // The adapter matters here: without it the ids differ (a merge that dropped the adapter fails).
              const base = await run(m, { ...o, adapter: 'none' });
              expect(JSON.stringify(base.completions.map(ids)), what).to.not.equal(JSON.stringify(branch.completions.map(ids)));
            }
          }
        }
      }
      // No adapter selected: nothing to merge, the base model's results.
      const o = { prompts, maxNewTokens: 12, temperature: 0, stopIds: [] as number[], adapter: 'none' };
      const none = (await run(m, { ...o, mergeAdapter: true })) as PathResult & { adapterMerged: boolean };
      expect(none.adapterMerged).to.equal(false);
      expectSame(await run(m, o), none, 0);
      let err: (Error & { code?: string }) | undefined;
      try {
        await run(m, { ...o, mergeAdapter: 'yes' } as unknown as typeof o);
      } catch (e) {
        err = e as Error & { code?: string };
      }
      expect(err?.code).to.equal('ERR_PG_ARG');
      expect(err?.message).to.match(/mergeAdapter/);
    } finally {
      m.dispose();
    }
  });

  it("mergeAdapter with a loaded PEFT adapter of per-module r and alpha (rank_pattern, alpha_pattern, use_rslora): the LoRA branch's ids and logprobs (float32), also from a snapshot", async () => {
    // A PEFT directory as peft writes it for such a config: the patterns in adapter_config.json,
    // A [r_m, in] / B [out, r_m] per module in adapter_model.safetensors. Each module's merge must use
    // its own scaling alpha_m / sqrt(r_m), not the config's alpha / sqrt(r).
    const dir = mkdtempSync(join(tmpdir(), 'pg-merge-patterns-'));
    const m = await loadModel(tinyModel('tiny-untied'));
    try {
      m.addLora({ r: 4, alpha: 8, seed: 5 });
      const w = m.loraWeights();
      for (const [k, t] of Object.entries(w)) if (k.includes('lora_B')) for (let i = 0; i < t.data.length; i++) t.data[i] = Math.sin(i * 0.37 + k.length) * 0.2;
      m.setLoraWeights(w);
      await m.saveAdapter(dir);
      const file = join(dir, 'adapter_model.safetensors');
      const { tensors } = native().loadSafetensors(file) as { tensors: Record<string, { data: Float32Array; shape: number[] }> };
      const rankOf = (k: string) => (/q_proj/.test(k) ? 2 : /layers\.0\.mlp\.(gate|up)_proj/.test(k) ? 3 : 4);
      const out: Record<string, { data: Float32Array; shape: number[] }> = {};
      for (const [k, t] of Object.entries(tensors)) {
        const r = rankOf(k);
        if (k.includes('lora_A')) out[k] = { data: t.data.slice(0, r * t.shape[1]!), shape: [r, t.shape[1]!] };
        else
          out[k] = {
            data: Float32Array.from({ length: t.shape[0]! * r }, (_, i) => t.data[Math.floor(i / r) * t.shape[1]! + (i % r)]!),
            shape: [t.shape[0]!, r],
          };
      }
      native().saveSafetensors(file, out, { format: 'pt' });
      const cfgPath = join(dir, 'adapter_config.json');
      const cfg = JSON.parse(readFileSync(cfgPath, 'utf8'));
      const patterned = {
        ...cfg,
        use_rslora: true,
        rank_pattern: { q_proj: 2, 'model\\.layers\\.0\\.mlp\\.(gate|up)_proj': 3 },
        alpha_pattern: { v_proj: 3, 'layers\\.\\d\\.self_attn\\.o_proj': 20 },
      };
      writeFileSync(cfgPath, JSON.stringify(patterned));
      await m.loadAdapter(dir);
      m.snapshotAdapter('patterned');
      for (const adapter of [undefined, 'patterned']) {
        for (const path of [{ staticCache: false }, { staticCache: true, padToBucket: true }]) {
          for (const sampling of [{ temperature: 0 }, { temperature: 0.9, topK: 20, seed: 21 }]) {
            const o = { prompts, maxNewTokens: 16, stopIds: [] as number[], ...sampling, ...path, ...(adapter && { adapter }) };
            const what = `adapter ${adapter ?? 'active'}, ${JSON.stringify(path)}, ${JSON.stringify(sampling)}`;
            const branch = await run(m, o);
            const merged = (await run(m, { ...o, mergeAdapter: true })) as PathResult & { adapterMerged: boolean };
            expect(merged.adapterMerged, what).to.equal(true);
            try {
              expectSame(branch, merged, 2e-5);
            } catch (e) {
              throw new Error(`${what}: ${(e as Error).message}`);
            }
          }
        }
      }
      // The patterns matter here: the same weights under the config's one scaling give other ids.
      writeFileSync(cfgPath, JSON.stringify({ ...patterned, alpha_pattern: {} }));
      await m.loadAdapter(dir);
      const o = { prompts, maxNewTokens: 16, stopIds: [] as number[], temperature: 0 };
      const uniform = await run(m, { ...o, mergeAdapter: true });
      const withPatterns = await run(m, { ...o, adapter: 'patterned' });
      expect(JSON.stringify(uniform.completions.map(ids))).to.not.equal(JSON.stringify(withPatterns.completions.map(ids)));
    } finally {
      m.dispose();
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('mergeAdapter in bf16: the logprobs stay within bf16 rounding of the teacher-forced forward with the LoRA branch', async () => {
    const m = await loadModel(tinyModel('tiny-untied'), { dtype: 'bfloat16' });
    try {
      m.setLoraFloat32Branch(false);
      m.addLora({ r: 4, alpha: 8, seed: 6 });
      const w = m.loraWeights();
      for (const [k, t] of Object.entries(w)) if (k.includes('lora_B')) for (let i = 0; i < t.data.length; i++) t.data[i] = Math.cos(i * 0.29 + k.length) * 0.1;
      m.setLoraWeights(w);
      const o = { prompts, temperature: 0.9, maxNewTokens: 24, seed: 8, stopIds: [] as number[], staticCache: true, padToBucket: true };
      const merged = await run(m, { ...o, mergeAdapter: true });
      const f = await teacherForcedLogprobs(m, prompts, merged.completions, 0.9);
      const worst = Math.max(...merged.completions.flatMap((c, b) => Array.from(c.logprobs).map((x, t) => Math.abs(x - f[b]![t]!))));
      const fb = await teacherForcedLogprobs(m, prompts, merged.completions, 0.9);
      expect(fb).to.deep.equal(f);
      // The merged weights round W + scaling·B·A once to bf16; the branch keeps W and the LoRA
      // output apart (measured 0.03 here; the unmerged decode's own gap is 0.028).
      expect(worst).to.be.below(0.1);
    } finally {
      m.dispose();
    }
  });

  it('onGroupDone: a group that finished early is handed over (final completions, once) while the others decode, on both paths; a throwing callback rejects the call afterwards', async () => {
    const m = models['tiny-tied']!;
    const ps = [
      [1, 2, 3],
      [4, 5],
      [6, 7, 8, 9],
    ];
    const greedy = await run(m, { prompts: ps, n: 2, temperature: 0, maxNewTokens: 40, stopIds: [] });
    const stopIds = [greedy.completions[2]!.tokenIds[5]!]; // prompt 1's rows (identical, greedy) stop at their 6th token
    expect(
      greedy.completions.filter((c, i) => i !== 2 && i !== 3).every((c) => !Array.from(c.tokenIds.slice(0, 200)).includes(stopIds[0]!)),
      'the stop id ends only prompt 1 early',
    ).to.equal(true);
    for (const path of [{ staticCache: false }, { staticCache: true, padToBucket: true, syncEvery: 4 }]) {
      const seen: { promptIndex: number; completions: RawCompletion[]; beforeResolve: boolean }[] = [];
      let resolved = false;
      const r = await run(m, {
        prompts: ps,
        n: 2,
        temperature: 0,
        maxNewTokens: 200,
        stopIds,
        ...path,
        onGroupDone: (g) => seen.push({ ...g, beforeResolve: !resolved }),
      });
      resolved = true;
      await new Promise((res) => setTimeout(res, 20)); // late deliveries of groups that ended at the last read-back
      const what = JSON.stringify(path);
      const early = seen.find((g) => g.promptIndex === 1);
      expect(early, what).to.not.equal(undefined);
      expect(early!.beforeResolve, what).to.equal(true);
      expect(
        early!.completions.map((c) => [c.promptIndex, c.sampleIndex, c.finishReason, Array.from(c.tokenIds), Array.from(c.logprobs)]),
        what,
      ).to.deep.equal(r.completions.slice(2, 4).map((c) => [c.promptIndex, c.sampleIndex, c.finishReason, Array.from(c.tokenIds), Array.from(c.logprobs)]));
      expect(
        early!.completions.map((c) => c.tokenIds.length),
        what,
      ).to.deep.equal([6, 6]);
      expect(new Set(seen.map((g) => g.promptIndex)).size, `${what}: each prompt at most once`).to.equal(seen.length);
      expect(
        r.completions.map((c) => c.tokenIds.length),
        what,
      ).to.deep.equal([200, 200, 6, 6, 200, 200]);
    }
    let err: Error | undefined;
    try {
      await run(m, {
        prompts: ps,
        n: 2,
        temperature: 0,
        maxNewTokens: 60,
        stopIds,
        onGroupDone: () => {
          throw new Error('callback failed');
        },
      });
    } catch (e) {
      err = e as Error;
    }
    expect(err?.message).to.equal('callback failed');
    let bad: (Error & { code?: string }) | undefined;
    try {
      await run(m, { prompts: ps, maxNewTokens: 4, onGroupDone: 'x' as never });
    } catch (e) {
      bad = e as Error & { code?: string };
    }
    expect(bad?.code).to.equal('ERR_PG_ARG');
    expect(bad?.message).to.match(/onGroupDone must be a function/);
    expect((await run(m, { prompts: ps, temperature: 0, maxNewTokens: 4 })).completions).to.have.length(3); // still usable
  });

  it('static path: simulated out of memory → ERR_PG_OOM, abort → AbortError; the model stays usable', async () => {
    const m = models['tiny-tied']!;
    const o = { prompts, temperature: 0, maxNewTokens: 20, stopIds: [] as number[], staticCache: true, padToBucket: true };
    let err: (Error & { code?: string }) | undefined;
    try {
      await run(m, { ...o, simulateOomAtStep: 3 });
    } catch (e) {
      err = e as Error & { code?: string };
    }
    expect(err?.code).to.equal('ERR_PG_OOM');
    const ac = new AbortController();
    ac.abort();
    let aborted: Error | undefined;
    try {
      await run(m, { ...o, signal: ac.signal });
    } catch (e) {
      aborted = e as Error;
    }
    expect(aborted?.name).to.equal('AbortError');
    const ok = await run(m, o);
    const ref = await run(m, { ...o, staticCache: false });
    expect(ok.completions.map(ids)).to.deep.equal(ref.completions.map(ids));
  });
});
