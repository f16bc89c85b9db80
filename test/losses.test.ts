/**
 * Fused vs unfused (values and grads, fp32 ≤ 1e-5), finite-difference gradient checks (float64),
 * named numerical properties (JSD ≥ 0 and 0 for equal distributions, β limits, finite with −inf logits, k3 ≥ 0) and gradient accumulation over micro-batches.
 */
import { expect } from 'chai';
import { grpoLoss, jsdLoss, k3, selectedLogprobs, type FloatTensor } from '../lib/train/losses.js';
import { mulberry32 } from '../lib/util/random.js';

function rng(seed: number): () => number {
  const r = mulberry32(seed);
  return () => r();
}
function randn(r: () => number): number {
  return Math.sqrt(-2 * Math.log(r() + 1e-12)) * Math.cos(2 * Math.PI * r());
}
function f32(shape: number[], r: () => number, scale = 1, shift = 0): FloatTensor {
  const n = shape.reduce((a, b) => a * b, 1);
  const d = new Float32Array(n);
  for (let i = 0; i < n; i++) d[i] = randn(r) * scale + shift;
  return { data: d, shape };
}
function f64(t: FloatTensor): FloatTensor {
  return { data: Float64Array.from(t.data), shape: t.shape };
}
function ints(shape: number[], V: number, r: () => number) {
  const n = shape.reduce((a, b) => a * b, 1);
  return { data: Int32Array.from({ length: n }, () => Math.floor(r() * V)), shape };
}
function maxRel(a: ArrayLike<number>, b: ArrayLike<number>): number {
  let num = 0,
    den = 0;
  for (let i = 0; i < a.length; i++) {
    num = Math.max(num, Math.abs(a[i] - b[i]));
    den = Math.max(den, Math.abs(b[i]));
  }
  return num / Math.max(den, 1e-30);
}
function slice(t: FloatTensor, rows: [number, number]): FloatTensor {
  const inner = t.shape.slice(1).reduce((a, b) => a * b, 1);
  const C = t.data.constructor as Float32ArrayConstructor;
  return { data: new C(t.data.subarray(rows[0] * inner, rows[1] * inner)), shape: [rows[1] - rows[0], ...t.shape.slice(1)] };
}
function sliceI(t: { data: Int32Array; shape: number[] }, rows: [number, number]) {
  const inner = t.shape.slice(1).reduce((a, b) => a * b, 1);
  return { data: t.data.slice(rows[0] * inner, rows[1] * inner), shape: [rows[1] - rows[0], ...t.shape.slice(1)] };
}

const N = 37,
  H = 24,
  V = 301;

describe('losses: fused JSD', () => {
  const r = rng(1);
  const sh = f32([N, H], r),
    th = f32([N, H], r),
    w = f32([V, H], r, 0.5);
  const mask: FloatTensor = { data: Float32Array.from({ length: N }, (_, i) => (i % 5 === 3 ? 0 : 1)), shape: [N] };

  for (const beta of [0, 0.3, 0.5, 1]) {
    it(`fused equals unfused within 1e-5 in value and gradient (fp32, beta ${beta}, T 1.3, chunk 8)`, async () => {
      const a = await jsdLoss({ studentHidden: sh, teacherHidden: th, weight: w, mask, beta, temperature: 1.3, chunkSize: 8 });
      const b = await jsdLoss({ studentHidden: sh, teacherHidden: th, weight: w, mask, beta, temperature: 1.3, fused: false });
      expect(Math.abs(a.loss - b.loss) / Math.abs(b.loss)).to.be.below(1e-5);
      expect(maxRel(a.gradStudentHidden!.data, b.gradStudentHidden!.data)).to.be.below(1e-5);
    });
  }

  it('finite-difference gradient check (float64, beta 0.5)', async () => {
    const r2 = rng(2);
    const n = 5,
      h = 6,
      v = 11;
    const s = f64(f32([n, h], r2)),
      t = f64(f32([n, h], r2)),
      ww = f64(f32([v, h], r2));
    const base = await jsdLoss({ studentHidden: s, teacherHidden: t, weight: ww, beta: 0.5, temperature: 0.8, chunkSize: 2 });
    const g = base.gradStudentHidden!.data;
    const eps = 1e-6;
    for (const i of [0, 7, 13, 29]) {
      const p = { ...s, data: Float64Array.from(s.data) },
        m = { ...s, data: Float64Array.from(s.data) };
      p.data[i] += eps;
      m.data[i] -= eps;
      const lp = (await jsdLoss({ studentHidden: p, teacherHidden: t, weight: ww, beta: 0.5, temperature: 0.8, grad: false })).loss;
      const lm = (await jsdLoss({ studentHidden: m, teacherHidden: t, weight: ww, beta: 0.5, temperature: 0.8, grad: false })).loss;
      expect(Math.abs((lp - lm) / (2 * eps) - g[i])).to.be.below(1e-7 + 1e-6 * Math.abs(g[i]));
    }
  });

  it('JSD finite with −inf logits (teacher and student), student == teacher → exactly 0, ≥ −1e-7', async () => {
    const n = 4,
      v = 6;
    const ninf = -Infinity;
    const s = new Float32Array([0.1, ninf, 2, 0.3, ninf, 1, /**/ 1, 1, 1, 1, 1, 1, /**/ ninf, 0, 0, ninf, 5, -3, /**/ 2, 2, ninf, ninf, ninf, 0]);
    const t = new Float32Array([0.5, ninf, 1, ninf, 0.2, 1, /**/ 1, 1, 1, 1, 1, 1, /**/ 0, 0, 0, ninf, 4, -3, /**/ 2, ninf, 1, ninf, ninf, 0]);
    const dummyW = { data: new Float32Array(v), shape: [v, 1] };
    for (const beta of [0.5, 0.1, 0.9]) {
      const out = await jsdLoss({ studentLogits: { data: s, shape: [n, v] }, teacherLogits: { data: t, shape: [n, v] }, beta, temperature: 1.2 });
      expect(Number.isFinite(out.loss)).to.equal(true);
      for (const x of out.perToken!.data) expect(x).to.be.at.least(-1e-7);
      expect(Array.from(out.gradStudentLogits!.data).every(Number.isFinite)).to.equal(true);
      const same = await jsdLoss({ studentLogits: { data: s, shape: [n, v] }, teacherLogits: { data: s, shape: [n, v] }, beta });
      expect(same.loss).to.equal(0);
      expect(Array.from(same.gradStudentLogits!.data).every((x) => x === 0)).to.equal(true);
    }
    void dummyW;
    const same = await jsdLoss({ studentHidden: sh, teacherHidden: sh, weight: w, mask, beta: 0.5, temperature: 1.1 });
    expect(same.loss).to.equal(0);
    expect(Array.from(same.gradStudentHidden!.data).every((x) => x === 0)).to.equal(true);
  });

  it('JSD ≥ −1e-7 on random inputs and has no hidden cross-entropy term (identical distributions with different tokens give 0)', async () => {
    const r3 = rng(3);
    for (let k = 0; k < 5; k++) {
      const t2 = f32([N, H], r3, 0.01);
      const s2 = { data: Float32Array.from(t2.data, (x, i) => x + (i % 3 === 0 ? 1e-4 : 0)), shape: t2.shape };
      for (const beta of [0, 0.5, 1]) {
        const o = await jsdLoss({ studentHidden: s2, teacherHidden: t2, weight: w, beta, grad: false });
        expect(o.loss).to.be.at.least(-1e-7);
      }
    }
    // A CE term (as Liger's default 0.5·CE) would make the loss positive for identical distributions.
    const o = await jsdLoss({ studentHidden: th, teacherHidden: th, weight: w, beta: 0.5 });
    expect(o.loss).to.equal(0);
  });

  it('bfloat16 hidden states and weight (model dtype) run through the same fp32 math', async () => {
    const a = await jsdLoss({ studentHidden: sh, teacherHidden: th, weight: w, mask, dtype: 'bfloat16', chunkSize: 8 });
    const b = await jsdLoss({ studentHidden: sh, teacherHidden: th, weight: w, mask, chunkSize: 8 });
    expect(Math.abs(a.loss - b.loss) / b.loss).to.be.below(0.05);
    expect(maxRel(a.gradStudentHidden!.data, b.gradStudentHidden!.data)).to.be.below(0.1);
    const g = await grpoLoss({
      hidden: { data: sh.data, shape: [1, N, H] },
      weight: w,
      tokens: { data: new Int32Array(N).fill(3), shape: [1, N] },
      oldLogprobs: { data: new Float32Array(N).fill(-6), shape: [1, N] },
      advantages: { data: new Float32Array([1]), shape: [1] },
      mask: { data: mask.data, shape: [1, N] },
      dtype: 'bfloat16',
    });
    expect(Number.isFinite(g.loss)).to.equal(true);
  });

  it('gradient accumulation: 1×16, 4×4, 16×1 micro-batches give the same gradient (rtol 1e-5)', async () => {
    const r4 = rng(4);
    const n = 16,
      T = 5;
    const s = f32([n * T, H], r4),
      t = f32([n * T, H], r4);
    const m: FloatTensor = { data: Float32Array.from({ length: n * T }, (_, i) => (i % T < 2 + (Math.floor(i / T) % 4) ? 1 : 0)), shape: [n * T] };
    const total = Array.from(m.data).reduce((a, b) => a + b, 0);
    const grads: Float32Array[] = [];
    for (const mb of [16, 4, 1]) {
      const g = new Float32Array(n * T * H);
      let _loss = 0;
      for (let i = 0; i < n; i += mb) {
        const rows: [number, number] = [i * T, (i + mb) * T];
        const o = await jsdLoss({
          studentHidden: slice(s, rows),
          teacherHidden: slice(t, rows),
          weight: w,
          mask: slice(m, rows),
          normalizer: total,
          chunkSize: 7,
        });
        g.set(o.gradStudentHidden!.data as Float32Array, rows[0] * H);
        _loss += o.loss;
      }
      grads.push(g);
    }
    expect(maxRel(grads[1], grads[0])).to.be.below(1e-5);
    expect(maxRel(grads[2], grads[0])).to.be.below(1e-5);
  });
});

describe('losses: fused GRPO', () => {
  const B = 6,
    T = 7;
  const r = rng(11);
  const hidden = f32([B, T, H], r),
    w = f32([V, H], r, 0.5);
  const tokens = ints([B, T], V, r);
  const old = f32([B, T], r, 0.3, -5.5),
    ref = f32([B, T], r, 0.3, -5.5);
  const adv = f32([B], r);
  const mask: FloatTensor = { data: Float32Array.from({ length: B * T }, (_, i) => (i % T < 3 + (Math.floor(i / T) % 4) ? 1 : 0)), shape: [B, T] };

  for (const aggregation of ['grpo', 'dapo', 'dr_grpo'] as const) {
    it(`fused equals unfused within 1e-5 (fp32, ${aggregation}, klCoef 0.04, T 0.7, clipping active)`, async () => {
      const args = {
        hidden,
        weight: w,
        tokens,
        oldLogprobs: old,
        refLogprobs: ref,
        advantages: adv,
        mask,
        klCoef: 0.04,
        temperature: 0.7,
        aggregation,
        epsLow: 0.2,
        epsHigh: 0.28,
        chunkSize: 5,
      };
      const a = await grpoLoss(args);
      const b = await grpoLoss({ ...args, fused: false });
      expect(Math.abs(a.loss - b.loss) / Math.abs(b.loss)).to.be.below(1e-5);
      expect(maxRel(a.gradHidden!.data, b.gradHidden!.data)).to.be.below(1e-5);
      expect(a.meanKl).to.be.closeTo(b.meanKl, 1e-5 * b.meanKl);
      expect(a.clipFraction).to.deep.equal(b.clipFraction);
      expect(a.clipFraction.region).to.be.above(0);
    });
  }

  it('finite-difference gradient check (float64, dapo, with KL)', async () => {
    const r2 = rng(12);
    const b = 2,
      t = 3,
      h = 5,
      v = 9;
    const hd = f64(f32([b, t, h], r2)),
      ww = f64(f32([v, h], r2));
    const args = {
      weight: ww,
      tokens: ints([b, t], v, r2),
      oldLogprobs: f64(f32([b, t], r2, 0.2, -2.2)),
      refLogprobs: f64(f32([b, t], r2, 0.2, -2.2)),
      advantages: f64(f32([b], r2)),
      mask: f64({ data: new Float32Array([1, 1, 0, 1, 1, 1]), shape: [b, t] }),
      klCoef: 0.3,
      temperature: 0.9,
      epsLow: 0.5,
      epsHigh: 0.5,
    };
    const base = await grpoLoss({ ...args, hidden: hd });
    const g = base.gradHidden!.data;
    const eps = 1e-6;
    for (const i of [0, 3, 8, 17, 26]) {
      const p = Float64Array.from(hd.data),
        m = Float64Array.from(hd.data);
      p[i] += eps;
      m[i] -= eps;
      const lp = (await grpoLoss({ ...args, hidden: { data: p, shape: hd.shape }, grad: false })).loss;
      const lm = (await grpoLoss({ ...args, hidden: { data: m, shape: hd.shape }, grad: false })).loss;
      expect(Math.abs((lp - lm) / (2 * eps) - g[i])).to.be.below(1e-7 + 1e-5 * Math.abs(g[i]));
    }
  });

  it('k3 finite at log-ratio ±100, k3(x, x) = 0, k3 ≥ 0', () => {
    const lp = { data: new Float64Array([0, -100, 100, -3, -1e-3, -7]), shape: [6] };
    const rf = { data: new Float64Array([100, 0, 0, -3, -2e-3, -7 + 1e-9]), shape: [6] };
    const k = k3(lp, rf).data;
    expect(Array.from(k).every(Number.isFinite)).to.equal(true);
    expect(k[3]).to.equal(0);
    for (const x of k) expect(x).to.be.at.least(0);
    const same = k3({ data: new Float32Array([-1, -2.5, -0.1]), shape: [3] }, { data: new Float32Array([-1, -2.5, -0.1]), shape: [3] }).data;
    expect(Array.from(same)).to.deep.equal([0, 0, 0]);
  });

  it('the KL term’s gradient moves logp toward the reference (finite-difference sign)', async () => {
    // One token, V = 2, hidden = scalar logit difference: loss = klCoef·k3(ref, logp) only (adv 0).
    const weight = { data: new Float64Array([1, 0]), shape: [2, 1] };
    for (const [x, refLp] of [
      [2, -3],
      [-2, -0.05],
    ]) {
      const args = {
        weight,
        tokens: { data: new Int32Array([0]), shape: [1, 1] },
        oldLogprobs: { data: new Float64Array([-1]), shape: [1, 1] },
        refLogprobs: { data: new Float64Array([refLp]), shape: [1, 1] },
        advantages: { data: new Float64Array([0]), shape: [1] },
        mask: { data: new Float64Array([1]), shape: [1, 1] },
        klCoef: 1,
      };
      const at = (v: number) => grpoLoss({ ...args, hidden: { data: new Float64Array([v]), shape: [1, 1, 1] } });
      const o = await at(x);
      const logp = o.logprobs.data[0];
      const step = -1e-3 * Math.sign(o.gradHidden!.data[0]); // one gradient-descent step
      const o2 = await at(x + step);
      expect(Math.abs(o2.logprobs.data[0] - refLp)).to.be.below(Math.abs(logp - refLp));
      // finite-difference sign agrees with the analytic gradient
      const fd = ((await at(x + 1e-6)).loss - (await at(x - 1e-6)).loss) / 2e-6;
      expect(Math.sign(fd)).to.equal(Math.sign(o.gradHidden!.data[0]));
    }
  });

  it('klCoef: loss = klCoef·k3 by hand; the former name betaKl is still read, and both with different values are refused', async () => {
    // One token, V = 2, logits [v, 0]: logp = v − log(e^v + 1); advantage 0, so the loss is the KL
    // term alone, klCoef · (e^x − x − 1) with x = ref − logp (k3, Schulman 2020), dapo: Σ / 1 token.
    const v = 0.8,
      refLp = -1.7,
      coef = 0.25;
    const logp = v - Math.log(Math.exp(v) + 1);
    const x = refLp - logp;
    const expected = coef * (Math.exp(x) - x - 1);
    const args = {
      hidden: { data: new Float64Array([v]), shape: [1, 1, 1] },
      weight: { data: new Float64Array([1, 0]), shape: [2, 1] },
      tokens: { data: new Int32Array([0]), shape: [1, 1] },
      oldLogprobs: { data: new Float64Array([logp]), shape: [1, 1] },
      refLogprobs: { data: new Float64Array([refLp]), shape: [1, 1] },
      advantages: { data: new Float64Array([0]), shape: [1] },
      mask: { data: new Float64Array([1]), shape: [1, 1] },
    };
    const now = await grpoLoss({ ...args, klCoef: coef });
    expect(now.loss).to.be.closeTo(expected, 1e-12);
    const former = await grpoLoss({ ...args, betaKl: coef });
    expect(former.loss).to.equal(now.loss);
    expect((await grpoLoss({ ...args, klCoef: coef, betaKl: coef })).loss).to.equal(now.loss);
    // An argument error is thrown before any work (a TypeError, as for every bad argument).
    const err = await Promise.resolve()
      .then(() => grpoLoss({ ...args, klCoef: coef, betaKl: 0.5 }))
      .then(
        () => undefined,
        (e: Error) => e,
      );
    expect(err).to.be.instanceOf(TypeError);
    // A negative coefficient is named as given.
    expect(() => grpoLoss({ ...args, betaKl: -1 })).to.throw(TypeError, /^grpoLoss\.betaKl must be >= 0/);
    expect(() => grpoLoss({ ...args, klCoef: -1 })).to.throw(TypeError, /^grpoLoss\.klCoef must be >= 0/);
    expect(err?.message).to.match(/grpoLoss: klCoef and its former name betaKl are given with different values/);
  });

  it('logprobs at the sampling temperature: old logprobs from selectedLogprobs give ρ = 1 exactly at step 0', async () => {
    const temperature = 0.7;
    const ones: FloatTensor = { data: new Float32Array(B * T).fill(1), shape: [B, T] };
    const lp = await selectedLogprobs({
      hidden: { data: hidden.data, shape: [B * T, H] },
      weight: w,
      tokens: { data: tokens.data, shape: [B * T] },
      temperature,
    });
    const o = await grpoLoss({
      hidden,
      weight: w,
      tokens,
      oldLogprobs: { data: lp.data, shape: [B, T] },
      advantages: adv,
      mask: ones,
      temperature,
      aggregation: 'dapo',
    });
    expect(Array.from(o.logprobs.data)).to.deep.equal(Array.from(lp.data));
    expect(o.clipFraction.region).to.equal(0);
    // and not at temperature 1 (the temperature really enters)
    const o1 = await grpoLoss({
      hidden,
      weight: w,
      tokens,
      oldLogprobs: { data: lp.data, shape: [B, T] },
      advantages: adv,
      mask: ones,
      temperature: 1,
      aggregation: 'dapo',
    });
    expect(Array.from(o1.logprobs.data)).to.not.deep.equal(Array.from(lp.data));
  });

  it("'grpo' aggregation with β = 0 and ρ ≡ 1 → loss = −mean(Â) = 0 with a non-zero gradient", async () => {
    const ones: FloatTensor = { data: new Float32Array(B * T).fill(1), shape: [B, T] };
    const lp = await selectedLogprobs({ hidden: { data: hidden.data, shape: [B * T, H] }, weight: w, tokens: { data: tokens.data, shape: [B * T] } });
    const a = new Float32Array([1, -1, 0.5, -0.5, 2, -2]); // zero-mean advantages of one group
    const o = await grpoLoss({
      hidden,
      weight: w,
      tokens,
      oldLogprobs: { data: lp.data, shape: [B, T] },
      advantages: { data: a, shape: [B] },
      mask: ones,
      aggregation: 'grpo',
      klCoef: 0,
    });
    expect(Math.abs(o.loss)).to.be.below(1e-7);
    const gnorm = Math.sqrt(Array.from(o.gradHidden!.data).reduce((s, x) => s + x * x, 0));
    expect(gnorm).to.be.above(1e-3);
  });

  for (const aggregation of ['grpo', 'dapo', 'dr_grpo'] as const) {
    it(`gradient accumulation (${aggregation}): 1×16, 4×4, 16×1 give the same gradient (rtol 1e-5, fp32)`, async () => {
      const r5 = rng(21);
      const n = 16,
        t = 6;
      const hd = f32([n, t, H], r5),
        tk = ints([n, t], V, r5),
        od = f32([n, t], r5, 0.3, -5.5),
        rf = f32([n, t], r5, 0.3, -5.5),
        ad = f32([n], r5);
      const mk: FloatTensor = { data: Float32Array.from({ length: n * t }, (_, i) => (i % t < 1 + (Math.floor(i / t) % 6) ? 1 : 0)), shape: [n, t] };
      const numTokens = Array.from(mk.data).reduce((a, b) => a + b, 0);
      const grads: Float32Array[] = [];
      const losses: number[] = [];
      for (const mb of [16, 4, 1]) {
        const g = new Float32Array(n * t * H);
        let loss = 0;
        for (let i = 0; i < n; i += mb) {
          const rows: [number, number] = [i, i + mb];
          const o = await grpoLoss({
            hidden: slice(hd, rows),
            weight: w,
            tokens: sliceI(tk, rows),
            oldLogprobs: slice(od, rows),
            refLogprobs: slice(rf, rows),
            advantages: slice(ad, rows),
            mask: slice(mk, rows),
            klCoef: 0.04,
            aggregation,
            numSequences: n,
            numTokens,
            maxCompletionLength: t,
            chunkSize: 4,
          });
          g.set(o.gradHidden!.data as Float32Array, i * t * H);
          loss += o.loss;
        }
        grads.push(g);
        losses.push(loss);
      }
      expect(maxRel(grads[1], grads[0])).to.be.below(1e-5);
      expect(maxRel(grads[2], grads[0])).to.be.below(1e-5);
      expect(Math.abs(losses[2] - losses[0])).to.be.below(1e-5 * Math.abs(losses[0]) + 1e-7);
    });
  }

  it('rejects bad arguments with TypeErrors', async () => {
    let err: unknown;
    try {
      await grpoLoss({ hidden, weight: w, tokens, oldLogprobs: old, advantages: adv, mask, aggregation: 'mean' as 'grpo' });
    } catch (e) {
      err = e;
    }
    expect(err).to.be.instanceOf(TypeError);
    let err2: unknown;
    try {
      await jsdLoss({ studentHidden: f32([4, H], rng(0)), teacherHidden: f32([3, 2], rng(0)), weight: w });
    } catch (e) {
      err2 = e;
    }
    expect(err2).to.be.instanceOf(TypeError);
    expect(() => jsdLoss({ studentHidden: 5 as never, teacherHidden: hidden, weight: w })).to.throw(TypeError);
  });
});
