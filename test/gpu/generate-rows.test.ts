/**
 * GPU suite: per-row sampling settings in one batch (each row its own settings and seed) on CUDA. Skips with a
 * printed reason without CUDA. On the tiny model (fp32), for the dynamic path, the static-cache
 * path and (CUDA builds) the CUDA-graph path: a mixed batch (greedy, top-k, top-p, min-p,
 * different temperatures, seeds and max tokens) gives, for every seeded row, the same ids as the
 * row alone; the graph path equals the static path without graphs; and the step-wise decode
 * engine (serve's continuous batching) gives a seeded row the same ids alone and when it joins
 * a running batch, with CUDA graphs (one per bucket) equal to its eager static and dynamic decode.
 *
 * What "the same ids alone and in the batch" can promise on CUDA: a batch of other size runs other
 * cuBLAS / reduction kernels, so the logits of a row differ at the bit level between the two runs
 * (vLLM documents the same: batch composition changes logits), and the sampler's float32 cumulative
 * masses with them (over ~152k ids in id order for full-vocabulary rows, where one id holds ~1e-5 of
 * the mass). The per-row generator draws are identical in both runs, so the ids must be identical up
 * to the first position d where they differ, and that position must be a rounding tie: the two ids
 * are neighbours in the sampler's draw order (id order for full-vocabulary rows, descending logits
 * for top-k / top-p) and the row's uniform u_d lies within TIE_TOL of the cumulative mass between
 * them, recomputed in float64 from this model's fp32 logits of the common prefix (a greedy row:
 * the two logits within 1e-4). A divergence with the uniform farther than that from a boundary is a
 * sampler or model bug and fails. Nothing after d is compared (the inputs differ from there on).
 * Independently of the batch, every id of every seeded row (alone and in the batch) must be the
 * sampler's draw from the model's own fp32 logits of its prefix with the row's uniform, up to the
 * same tie tolerance (drawsMatchLogits): this checks the CUDA sampler itself.
 */
import { expect } from 'chai';
import { cudaAvailable, native } from '../../lib/native.js';
import { loadModel, type Qwen3Model } from '../../lib/model/qwen3.js';
import { generate, sampleFromLogits, type GenerateOptions, type GenerateResult } from '../../lib/model/policy.js';
import { DecodeEngine, type EngineRow } from '../../lib/model/engine.js';
import { tinyModel } from '../helpers/tiny.js';

type Row = NonNullable<GenerateOptions['promptOptions']>[number];
type PathResult = GenerateResult & { decodePath: string };
const prompts = [
  [151644, 872, 198, 9707, 1879],
  [13, 77091],
  [151644, 872, 198, 40, 1079, 264, 1273, 13],
  [151644, 872, 198, 3838, 374, 264, 3119, 30],
  [9707, 11, 1879, 0],
];
const mixed: Row[] = [
  { temperature: 1, seed: 11, maxNewTokens: 20 },
  { temperature: 0.7, topK: 5, seed: 12, maxNewTokens: 32 },
  { temperature: 0 },
  { temperature: 1.2, topK: 40, topP: 0.8, seed: 13 },
  { temperature: 1, minP: 0.1, seed: 14, maxNewTokens: 16 },
];
const ids = (r: GenerateResult) => r.completions.map((c) => Array.from(c.tokenIds));

/** Largest |u − cumulative mass| accepted as a rounding tie (probability units, see the module doc). */
const TIE_TOL = 2e-4;

/** The first t uniforms of a seeded per-row generator (the stream of promptOptions[i].seed and of
 * an engine row's seed), each to within 2^-19: sampleFromLogits draws one uniform per row from a
 * generator seeded with `seed`, and on R rows of 2^18 equal logits it returns floor(u · 2^18). */
function uniforms(seed: number, t: number): number[] {
  const V = 1 << 18;
  const r = sampleFromLogits({ data: new Float32Array(t * V), shape: [t, V] }, { temperature: 1, seed });
  return Array.from(r.tokenIds, (k) => (k + 0.5) / V);
}

type Sampling = { temperature?: number; topK?: number; topP?: number; minP?: number; seed?: number };

/** The sampler's distribution (native/generate/sampler.cc) of one row's logits L [V] in float64:
 * ids in draw order (id order for full-vocabulary rows, descending for top-k / top-p), their
 * unnormalised masses after top-k / top-p / min-p, and the total. */
function drawOrder(L: Float32Array, o: Sampling): { order: number[]; w: number[]; total: number } {
  const V = L.length, T = o.temperature ?? 1;
  const s = Array.from(L, (v) => v / T);
  let mx = -Infinity;
  for (const v of s) mx = Math.max(mx, v);
  const useK = (o.topK ?? 0) > 0 && o.topK! < V, useP = (o.topP ?? 1) < 1;
  let order: number[] = Array.from(s.keys());
  if (useK || useP) order.sort((i, j) => s[j]! - s[i]!);
  if (useK) order = order.slice(0, o.topK!);
  let w = order.map((i) => Math.exp(s[i]! - mx));
  if (useP) {
    const norm = useK ? w.reduce((p, q) => p + q, 0) : s.reduce((p, v) => p + Math.exp(v - mx), 0);
    let before = 0;
    w = w.map((v, j) => { const keep = j === 0 || before < o.topP!; before += v / norm; return keep ? v : 0; });
  }
  if ((o.minP ?? 0) > 0) w = w.map((v) => (v >= o.minP! ? v : 0));  // mass relative to the max (= 1)
  return { order, w, total: w.reduce((p, q) => p + q, 0) };
}

/**
 * Asserts that every id of a seeded sampled row is the sampler's draw from this model's fp32
 * logits of its own prefix (one teacher-forced forward) with the row's uniform, up to rounding
 * ties (|u − boundary| <= TIE_TOL). This checks the CUDA sampler against a float64 recomputation,
 * independent of batch composition. Returns the smallest margin of a correct draw (for the log).
 */
async function drawsMatchLogits(model: Qwen3Model, prompt: number[], o: Sampling, ids: number[], what: string): Promise<number> {
  if ((o.temperature ?? 1) === 0 || ids.length === 0) return Infinity;
  const seq = [...prompt, ...ids];
  const f = await model.forward({ inputIds: { data: Int32Array.from(seq), shape: [1, seq.length] } });
  const V = f.logits!.shape[2]!;
  const us = uniforms(o.seed!, ids.length);
  let least = Infinity;
  for (let t = 0; t < ids.length; t++) {
    const { order, w, total } = drawOrder(f.logits!.data.subarray((prompt.length + t - 1) * V, (prompt.length + t) * V), o);
    const j = order.indexOf(ids[t]!);
    expect(j >= 0 && w[j]! > 0, `${what}: id ${ids[t]} at ${t} is outside the row's candidates`).to.equal(true);
    let lo = 0;
    for (let i = 0; i < j; i++) lo += w[i]!;
    const a = lo / total, b = (lo + w[j]!) / total, u = us[t]!;
    const off = u < a ? a - u : u >= b ? u - b : 0;
    expect(off, `${what}: id ${ids[t]} at ${t} has the interval [${a.toFixed(6)}, ${b.toFixed(6)}) but the uniform is ${u.toFixed(6)}`).to.be.at.most(TIE_TOL);
    if (off === 0) least = Math.min(least, u - a, b - u);
  }
  return least;
}

/**
 * Asserts that `a` and `b` (one row's ids from two runs) are equal up to their first difference and
 * that this difference is a rounding tie (module doc). Returns the position of the difference
 * (a.length when equal) and the distance of the uniform from the boundary.
 */
async function sameUpToTie(model: Qwen3Model, prompt: number[], o: Sampling, a: number[], b: number[], what: string): Promise<{ d: number; margin: number }> {
  let d = 0;
  while (d < a.length && d < b.length && a[d] === b[d]) d++;
  if (d === a.length && d === b.length) return { d, margin: Infinity };
  expect(d < a.length && d < b.length, `${what}: one run is a strict prefix of the other (${a.length} vs ${b.length} ids)`).to.equal(true);
  const seq = [...prompt, ...a.slice(0, d)];
  const f = await model.forward({ inputIds: { data: Int32Array.from(seq), shape: [1, seq.length] } });
  const V = f.logits!.shape[2]!;
  const L = f.logits!.data.subarray((seq.length - 1) * V, seq.length * V);
  const x = a[d]!, y = b[d]!;
  const T = o.temperature ?? 1;
  if (T === 0) {
    const gap = Math.abs(L[x]! - L[y]!);
    console.log(`      ${what}: greedy ids differ at ${d} (${x} vs ${y}), logit gap ${gap.toExponential(2)}`);
    expect(gap, `${what}: greedy rows differ at ${d} with a logit gap over 1e-4`).to.be.at.most(1e-4);
    return { d, margin: gap };
  }
  const { order, w, total } = drawOrder(L, o);
  const ix = order.indexOf(x), iy = order.indexOf(y);
  expect(ix >= 0 && iy >= 0 && w[ix]! > 0 && w[iy]! > 0, `${what}: at ${d} an id outside the row's candidates (${x}, ${y})`).to.equal(true);
  const lo = Math.min(ix, iy), hi = Math.max(ix, iy);
  expect(w.slice(lo + 1, hi).every((v) => v === 0), `${what}: at ${d} ids ${x} and ${y} are not neighbours in the draw order (positions ${ix}, ${iy})`).to.equal(true);
  let edge = 0;
  for (let j = 0; j <= lo; j++) edge += w[j]!;
  edge /= total;
  const u = uniforms(o.seed!, d + 1)[d]!;
  const margin = Math.abs(u - edge);
  console.log(`      ${what}: ids differ at ${d} (${x} vs ${y}); |u − boundary| = ${margin.toExponential(2)} (tie tolerance ${TIE_TOL})`);
  expect(margin, `${what}: ids differ at ${d} (${x} vs ${y}) with the uniform ${u.toFixed(6)} ${margin.toExponential(2)} away from the boundary ${edge.toFixed(6)}: not a rounding tie`).to.be.at.most(TIE_TOL);
  return { d, margin };
}

describe('GPU suite: per-row sampling in one batch and the step-wise engine', function () {
  this.timeout(600000);
  let m: Qwen3Model;
  before(async function () {
    if (!cudaAvailable()) {
      console.log('  skipping per-row sampling GPU tests: CUDA is not available to the addon (no GPU, no driver, or a CPU libtorch)');
      this.skip();
    }
    m = await loadModel(tinyModel('tiny-tied'), { device: 'cuda' });
  });
  after(() => m?.dispose());

  const paths: { name: string; o: Record<string, unknown> }[] = [
    { name: 'dynamic', o: { cudaGraphs: false } },
    { name: 'static', o: { cudaGraphs: false, staticCache: true } },
    { name: 'cuda-graphs', o: { cudaGraphs: true } },
  ];
  for (const p of paths)
    it(`${p.name}: seeded rows give the same ids alone as inside the mixed batch`, async function () {
      const graphs = (native() as unknown as { cudaGraphsCompiled?: () => boolean }).cudaGraphsCompiled?.() ?? false;
      if (p.name === 'cuda-graphs' && !graphs) {
        console.log('      (skipped: the addon was built without CUDA graphs)');
        this.skip();
      }
      const all = (await generate(m, { prompts, promptOptions: mixed, maxNewTokens: 24, ...p.o } as GenerateOptions)) as PathResult;
      expect(all.decodePath).to.equal(p.name);
      for (let i = 0; i < mixed.length; i++) {
        const alone = await generate(m, { prompts: [prompts[i]!], promptOptions: [mixed[i]!], maxNewTokens: 24, ...p.o } as GenerateOptions);
        await drawsMatchLogits(m, prompts[i]!, mixed[i]!, ids(all)[i]!, `row ${i} in the batch`);
        await drawsMatchLogits(m, prompts[i]!, mixed[i]!, ids(alone)[0]!, `row ${i} alone`);
        await sameUpToTie(m, prompts[i]!, mixed[i]!, ids(alone)[0]!, ids(all)[i]!, `row ${i}`);
      }
      if (p.name === 'cuda-graphs') {
        const eager = await generate(m, { prompts, promptOptions: mixed, maxNewTokens: 24, cudaGraphs: false, staticCache: true, padToBucket: true } as GenerateOptions);
        expect(ids(all)).to.deep.equal(ids(eager));
      }
    });

  it('engine: a seeded row joining a running batch gives the same ids as alone', async () => {
    const rows: EngineRow[] = mixed.map((o, i) => ({ id: i + 1, prompt: prompts[i]!, temperature: o.temperature, topK: o.topK, topP: o.topP, minP: o.minP, seed: o.seed ?? 0, maxNewTokens: o.maxNewTokens ?? 24 }));
    const graphs = (native() as unknown as { cudaGraphsCompiled?: () => boolean }).cudaGraphsCompiled?.() ?? false;
    const run = async (plan: { at: number; row: EngineRow }[], o: { cudaGraphs?: boolean; staticDecode?: boolean } = {}) => {
      const e = new DecodeEngine(m, { maxRows: 8, capacity: 128, ...o });
      if (o.cudaGraphs !== false && graphs) expect(e.decodePath).to.equal('cuda-graphs');
      const out = new Map<number, number[]>();
      let live = 0;
      for (let s = 0; s < 200; s++) {
        for (const p of plan) if (p.at === s) (e.add(p.row), live++);
        if (live === 0 && plan.every((p) => p.at < s)) break;
        for (const t of (await e.step()).tokens) {
          out.set(t.id, [...(out.get(t.id) ?? []), t.token]);
          if (t.finish) live--;
        }
      }
      await e.release();
      return out;
    };
    const plan = rows.map((row, i) => ({ at: i * 3, row }));
    const together = await run(plan);
    for (const [i, row] of rows.entries()) await drawsMatchLogits(m, Array.from(row.prompt), { ...mixed[i]!, seed: row.seed }, together.get(row.id)!, `engine row ${row.id} in the running batch`);
    for (const [i, row] of rows.entries()) await sameUpToTie(m, Array.from(row.prompt), { ...mixed[i]!, seed: row.seed }, together.get(row.id)!, (await run([{ at: 0, row }])).get(row.id)!, `row ${row.id}`);
    // graphs == the same static step eager == the dynamic (Forward) decode
    const eager = await run(plan, { cudaGraphs: false, staticDecode: true });
    const dyn = await run(plan, { cudaGraphs: false, staticDecode: false });
    for (const row of rows) {
      expect(together.get(row.id), `row ${row.id} graphs vs eager static`).to.deep.equal(eager.get(row.id));
      expect(dyn.get(row.id), `row ${row.id} dynamic vs static`).to.deep.equal(eager.get(row.id));
    }
  });
});
