/**
 * Model-integrated loss steps on a tiny random Qwen3 (V = 151936, H = 64): reference logprobs with
 * the adapter off and from a frozen snapshot, ρ = 1 at step 0 (logprobs at the sampling
 * temperature through the same path), and gradient accumulation of LoRA grads through
 * grpoBackward / opsdBackward for 1×16, 4×4 and 16×1 micro-batches (rtol 1e-5, fp32), AdamW on
 * the model's LoRA parameters.
 */
import { expect } from 'chai';
import { loadModel, type Qwen3Model } from '../lib/model/qwen3.js';
import { grpoBackward, opsdBackward, sequenceLogprobs } from '../lib/train/losses.js';
import { AdamW } from '../lib/train/optim.js';
import { tinyModel } from './helpers/tiny.js';
import { mulberry32 } from '../lib/util/random.js';

function rng(seed: number): () => number {
  const r = mulberry32(seed);
  return () => r();
}
const i32 = (rows: number[][]) => ({ data: Int32Array.from(rows.flat()), shape: [rows.length, rows[0].length] });
const f32 = (rows: number[][]) => ({ data: Float32Array.from(rows.flat()), shape: [rows.length, rows[0].length] });

interface Batch {
  ids: number[][];
  attn: number[][];
  comp: number[][];
  promptLen: number[];
  compLen: number[];
}
/** n rows: prompt (3..5 tokens) + completion (2..6 tokens), right padded to L. */
function makeBatch(n: number, seed: number): Batch {
  const r = rng(seed);
  const rows: { p: number[]; c: number[] }[] = [];
  for (let i = 0; i < n; i++) {
    const p = Array.from({ length: 3 + (i % 3) }, () => 100 + Math.floor(r() * 5000));
    const c = Array.from({ length: 2 + ((i * 7) % 5) }, () => 100 + Math.floor(r() * 5000));
    rows.push({ p, c });
  }
  const L = Math.max(...rows.map((x) => x.p.length + x.c.length));
  const ids = rows.map((x) => [...x.p, ...x.c, ...Array(L - x.p.length - x.c.length).fill(151643)]);
  const attn = rows.map((x) => Array.from({ length: L }, (_, t) => (t < x.p.length + x.c.length ? 1 : 0)));
  const comp = rows.map((x) => Array.from({ length: L }, (_, t) => (t >= x.p.length && t < x.p.length + x.c.length ? 1 : 0)));
  return { ids, attn, comp, promptLen: rows.map((x) => x.p.length), compLen: rows.map((x) => x.c.length) };
}
function sub(b: Batch, s: number, e: number): Batch {
  // Trim to the micro-batch's own width (exercises different padding per micro-batch).
  const L = Math.max(...b.attn.slice(s, e).map((r) => r.reduce((a, x) => a + x, 0)));
  const cut = (m: number[][]) => m.slice(s, e).map((r) => r.slice(0, L));
  return { ids: cut(b.ids), attn: cut(b.attn), comp: cut(b.comp), promptLen: b.promptLen.slice(s, e), compLen: b.compLen.slice(s, e) };
}
function flatGrads(m: Qwen3Model): Float64Array {
  const g = m.loraGrads() as Record<string, { data: Float32Array }>;
  const keys = Object.keys(g).sort();
  const out: number[] = [];
  for (const k of keys) out.push(...g[k].data);
  return Float64Array.from(out);
}
function relErr(a: ArrayLike<number>, b: ArrayLike<number>): number {
  let num = 0,
    den = 0;
  for (let i = 0; i < a.length; i++) {
    num = Math.max(num, Math.abs(a[i] - b[i]));
    den = Math.max(den, Math.abs(b[i]));
  }
  return num / Math.max(den, 1e-30);
}

describe('losses on a tiny Qwen3 (model-integrated steps)', function () {
  this.timeout(300000);
  let model: Qwen3Model;
  const T = 0.8;
  before(async () => {
    model = await loadModel(tinyModel('tiny-tied'), { device: 'cpu', dtype: 'float32' });
    model.addLora({ r: 4, alpha: 8, seed: 3 });
    // Make B non-zero so the adapter changes the policy.
    const w = model.loraWeights();
    const r = rng(5);
    const rec: Record<string, { data: Float32Array; shape: number[] }> = {};
    for (const [k, t] of Object.entries(w)) if (k.includes('lora_B')) rec[k] = { data: Float32Array.from(t.data, () => (r() - 0.5) * 0.2), shape: t.shape };
    model.setLoraWeights(rec);
    model.snapshotAdapter('init');
  });
  after(() => model?.dispose());

  it("reference logprobs with the adapter off ('none') and from a frozen snapshot; sampling temperature (ρ = 1 at step 0)", async () => {
    const b = makeBatch(4, 1);
    const args = { inputIds: i32(b.ids), attentionMask: f32(b.attn), completionMask: f32(b.comp), temperature: T };
    const active = await sequenceLogprobs(model, { ...args, adapter: 'active' });
    const base = await sequenceLogprobs(model, { ...args, adapter: 'none' });
    expect(relErr(active.data, base.data)).to.be.above(1e-4);
    // 'none' equals log_softmax(logits / T) of the base forward
    const fw = (await model.forward({ inputIds: i32(b.ids), attentionMask: i32(b.attn), adapter: 'none' } as never)) as unknown as {
      logits: { data: Float32Array; shape: number[] };
    };
    const V = fw.logits.shape[2],
      L = b.ids[0].length;
    for (const [row, t] of [
      [0, b.promptLen[0]],
      [2, b.promptLen[2] + 1],
    ]) {
      const off = (row * L + t - 1) * V;
      let mx = -Infinity;
      for (let v = 0; v < V; v++) mx = Math.max(mx, fw.logits.data[off + v] / T);
      let s = 0;
      for (let v = 0; v < V; v++) s += Math.exp(fw.logits.data[off + v] / T - mx);
      const want = fw.logits.data[off + b.ids[row][t]] / T - mx - Math.log(s);
      expect(base.data[row * L + t]).to.be.closeTo(want, 2e-5);
    }
    // a frozen snapshot keeps giving the pre-update logprobs after the active adapter trains
    model.snapshotAdapter('stage-start');
    const opt = new AdamW(model, { lr: 1e-2 });
    const adv = { data: new Float32Array([1, -1, 0.5, -0.5]), shape: [4] };
    await grpoBackward(model, { ...args, oldLogprobs: active, advantages: adv, aggregation: 'grpo' });
    const st = opt.step({ maxGradNorm: 1 });
    expect(st.gradNorm).to.be.above(0);
    opt.zeroGrad();
    const snap = await sequenceLogprobs(model, { ...args, adapter: 'stage-start' });
    expect(Array.from(snap.data)).to.deep.equal(Array.from(active.data));
    const after = await sequenceLogprobs(model, { ...args, adapter: 'active' });
    expect(relErr(after.data, active.data)).to.be.above(1e-5);
    // ρ = 1 at step 0: old logprobs from sequenceLogprobs at T equal the training path's logprobs
    const g = await grpoBackward(model, { ...args, oldLogprobs: after, refLogprobs: snap, advantages: adv, klCoef: 0.04, aggregation: 'dapo' });
    expect(Array.from(g.logprobs.data)).to.deep.equal(Array.from(after.data));
    expect(g.clipFraction.region).to.equal(0);
    expect(g.meanKl).to.be.above(0);
    model.zeroGrad();
  });

  it('gradient accumulation through grpoBackward: 1×16, 4×4, 16×1 give the same LoRA grads (rtol 1e-5)', async () => {
    const b = makeBatch(16, 2);
    const full = { inputIds: i32(b.ids), attentionMask: f32(b.attn), completionMask: f32(b.comp), temperature: T };
    const old = await sequenceLogprobs(model, { ...full, adapter: 'none' }); // ρ ≠ 1 (adapter on in training)
    const ref = await sequenceLogprobs(model, { ...full, adapter: 'init' });
    const r = rng(9);
    const adv = Array.from({ length: 16 }, () => r() * 2 - 1);
    const numTokens = b.compLen.reduce((a, x) => a + x, 0);
    const L = b.ids[0].length;
    for (const aggregation of ['grpo', 'dapo', 'dr_grpo'] as const) {
      const grads: Float64Array[] = [];
      for (const mb of [16, 4, 1]) {
        model.zeroGrad();
        for (let s = 0; s < 16; s += mb) {
          const m = sub(b, s, s + mb);
          const Lm = m.ids[0].length;
          const cut = (t: { data: Float32Array }) => ({
            data: Float32Array.from({ length: mb * Lm }, (_, k) => t.data[(s + Math.floor(k / Lm)) * L + (k % Lm)]),
            shape: [mb, Lm],
          });
          await grpoBackward(model, {
            inputIds: i32(m.ids),
            attentionMask: f32(m.attn),
            completionMask: f32(m.comp),
            oldLogprobs: cut(old as { data: Float32Array }),
            refLogprobs: cut(ref as { data: Float32Array }),
            advantages: { data: Float32Array.from(adv.slice(s, s + mb)), shape: [mb] },
            temperature: T,
            klCoef: 0.04,
            epsLow: 0.2,
            epsHigh: 0.28,
            aggregation,
            numSequences: 16,
            numTokens,
            maxCompletionLength: 8,
          });
        }
        grads.push(flatGrads(model));
      }
      expect(relErr(grads[1], grads[0]), `${aggregation} 4x4`).to.be.below(1e-5);
      expect(relErr(grads[2], grads[0]), `${aggregation} 16x1`).to.be.below(1e-5);
      expect(Math.max(...Array.from(grads[0], Math.abs))).to.be.above(0);
    }
    model.zeroGrad();
  });

  it('gradient accumulation through opsdBackward (teacher = adapter off, longer teacher prompt): 1×16, 4×4, 16×1 (rtol 1e-5)', async () => {
    const b = makeBatch(16, 3);
    // Teacher rows: 2 extra "rubric" tokens after the prompt, then the same completion.
    const rubric = [777, 888];
    const tIds = b.ids.map((row, i) => [...row.slice(0, b.promptLen[i]), ...rubric, ...row.slice(b.promptLen[i])]);
    const tAttn = b.attn.map((row, i) => [...row.slice(0, b.promptLen[i]), 1, 1, ...row.slice(b.promptLen[i])]);
    const normalizer = b.compLen.reduce((a, x) => a + x, 0);
    const grads: Float64Array[] = [];
    const losses: number[] = [];
    for (const mb of [16, 4, 1]) {
      model.zeroGrad();
      let loss = 0;
      for (let s = 0; s < 16; s += mb) {
        const sl = <T>(x: T[]) => x.slice(s, s + mb);
        const o = await opsdBackward(model, {
          studentIds: i32(sl(b.ids)),
          studentMask: f32(sl(b.attn)),
          teacherIds: i32(sl(tIds)),
          teacherMask: f32(sl(tAttn)),
          studentStart: { data: Int32Array.from(sl(b.promptLen)), shape: [mb] },
          teacherStart: { data: Int32Array.from(sl(b.promptLen).map((p) => p + 2)), shape: [mb] },
          completionLength: { data: Int32Array.from(sl(b.compLen)), shape: [mb] },
          beta: 0.5,
          temperature: 1.1,
          normalizer,
          teacher: 'none',
        });
        loss += o.loss;
      }
      losses.push(loss);
      grads.push(flatGrads(model));
    }
    expect(losses[0]).to.be.above(0);
    expect(Math.abs(losses[2] - losses[0]) / losses[0]).to.be.below(1e-5);
    expect(relErr(grads[1], grads[0])).to.be.below(1e-5);
    expect(relErr(grads[2], grads[0])).to.be.below(1e-5);
    model.zeroGrad();
  });

  it('rejects mismatched completions and bad adapters', async () => {
    const b = makeBatch(2, 4);
    let err: unknown;
    try {
      await opsdBackward(model, {
        studentIds: i32(b.ids),
        studentMask: f32(b.attn),
        teacherIds: i32(b.ids.map((r) => r.map((x) => x + 1))),
        teacherMask: f32(b.attn),
        studentStart: { data: Int32Array.from(b.promptLen), shape: [2] },
        teacherStart: { data: Int32Array.from(b.promptLen), shape: [2] },
        completionLength: { data: Int32Array.from(b.compLen), shape: [2] },
      });
    } catch (e) {
      err = e;
    }
    expect(err).to.be.instanceOf(TypeError);
    let err2: unknown;
    try {
      await sequenceLogprobs(model, { inputIds: i32(b.ids), attentionMask: f32(b.attn), adapter: 'no-such-snapshot' });
    } catch (e) {
      err2 = e;
    }
    expect(err2).to.be.instanceOf(Error);
    expect(() => sequenceLogprobs({} as never, { inputIds: i32(b.ids), attentionMask: f32(b.attn) })).to.throw(TypeError, /Model/);
  });
});
