/**
 * Activation recomputation per decoder layer (model.setGradientCheckpointing): LoRA gradients
 * and the loss must equal those of the plain path (≤ 1e-6 relative) on the padded (masked SDPA)
 * and unpadded (is_causal SDPA with GQA) attention paths, with and without LoRA dropout (the
 * dropout masks are reproduced by restoring the RNG state before the recomputation).
 */
import { expect } from 'chai';
import { loadModel, type Qwen3Model } from '../lib/model/qwen3.js';
import { native, type JsTensor } from '../lib/native.js';
import { tinyModel, int32, paddedBatch, randomLoraB as randomB } from './helpers/tiny.js';

/** max |a − b| / max(max |b|, 1e-12) over all tensors of two gradient records. */
function relDiff(a: Record<string, JsTensor<Float32Array>>, b: Record<string, JsTensor<Float32Array>>): number {
  let num = 0;
  let den = 0;
  expect(Object.keys(a).sort()).to.deep.equal(Object.keys(b).sort());
  for (const k of Object.keys(b)) {
    const x = a[k].data;
    const y = b[k].data;
    for (let i = 0; i < y.length; i++) {
      num = Math.max(num, Math.abs(x[i] - y[i]));
      den = Math.max(den, Math.abs(y[i]));
    }
  }
  return num / Math.max(den, 1e-12);
}

describe('model: activation recomputation (gradient checkpointing)', function () {
  this.timeout(300000);
  let model: Qwen3Model;
  const batch = paddedBatch();

  before(async () => {
    model = await loadModel(tinyModel('tiny-tied'));
  });
  after(() => model?.dispose());

  async function grads(on: boolean, args: Parameters<Qwen3Model['crossEntropyBackward']>[0], seed: number) {
    model.setGradientCheckpointing(on);
    expect(model.gradientCheckpointing()).to.equal(on);
    model.zeroGrad();
    native().manualSeed(seed);
    const { loss } = await model.crossEntropyBackward(args);
    const g = model.loraGrads();
    model.setGradientCheckpointing(false);
    return { loss, g };
  }

  // Left padding → masked SDPA path; right padding / no padding → is_causal SDPA (GQA in the kernel).
  const left = (() => {
    const T = batch.ids[0].length;
    const ids = batch.ids.map((r, i) => {
      const n = batch.mask[i].reduce((x, y) => x + y, 0);
      return [...Array(T - n).fill(151643), ...r.slice(0, n)];
    });
    const mask = batch.mask.map((m) => {
      const n = m.reduce((x, y) => x + y, 0);
      return [...Array(m.length - n).fill(0), ...Array(n).fill(1)];
    });
    const labels = ids.map((r, i) => r.map((t, j) => (mask[i][j] ? t : -100)));
    return { ids, mask, labels };
  })();
  const cases: [string, () => Parameters<Qwen3Model['crossEntropyBackward']>[0]][] = [
    ['left-padded batch (masked attention)', () => ({ inputIds: int32(left.ids), attentionMask: int32(left.mask), labels: int32(left.labels) })],
    ['right-padded batch (causal attention)', () => ({ inputIds: int32(batch.ids), attentionMask: int32(batch.mask), labels: int32(batch.labels) })],
    ['unpadded batch (causal attention)', () => ({ inputIds: int32(batch.ids), labels: int32(batch.ids) })],
  ];
  for (const dropout of [0, 0.3])
    for (const [name, mk] of cases)
      it(`same loss and LoRA grads with and without recomputation: ${name}, dropout ${dropout}`, async () => {
        model.addLora({ r: 4, alpha: 8, dropout, seed: 3 });
        model.setLoraWeights(randomB(model, 17));
        const args = mk();
        const plain = await grads(false, args, 123);
        const rec = await grads(true, args, 123);
        expect(Math.abs(rec.loss - plain.loss)).to.be.at.most(1e-6 * Math.abs(plain.loss));
        const r = relDiff(rec.g, plain.g);
        expect(r).to.be.at.most(1e-6);
        // A and B grads both non-trivial (B ≠ 0), so the recomputed graph reaches every leaf.
        expect(Object.entries(rec.g).every(([, v]) => v.data.some((x) => x !== 0))).to.equal(true);
      });

  it('leaves inference forwards and the flag default untouched', async () => {
    model.addLora({ r: 2, alpha: 4, seed: 1 });
    model.setLoraWeights(randomB(model, 5));
    expect(model.gradientCheckpointing()).to.equal(false);
    const args = { inputIds: int32(batch.ids), attentionMask: int32(batch.mask) };
    const a = await model.forward(args);
    model.setGradientCheckpointing(true);
    const b = await model.forward(args);
    model.setGradientCheckpointing(false);
    expect(Buffer.compare(Buffer.from(a.logits!.data.buffer), Buffer.from(b.logits!.data.buffer))).to.equal(0);
    expect(() => (model as unknown as { setGradientCheckpointing(x: unknown): void }).setGradientCheckpointing(1)).to.throw(TypeError);
  });
});

describe('model: LoRA dropout inside the fused base + LoRA node', function () {
  this.timeout(300000);
  let model: Qwen3Model;
  const batch = paddedBatch();
  const args = () => ({ inputIds: int32(batch.ids), attentionMask: int32(batch.mask), labels: int32(batch.labels) });
  before(async () => {
    model = await loadModel(tinyModel('tiny-tied'));
  });
  after(() => {
    delete process.env.PAPERGYM_FUSED_LORA_DROPOUT;
    model?.dispose();
  });

  /**
   * One backward with LoRA dropout p from `seed` (default 123), in the fused node
   * (PAPERGYM_FUSED_LORA_DROPOUT unset) or per module ('0'). `fusedNodes`: the fused node's
   * in-place accumulations (aten::addmm_, one per member and layer; the per-module path makes none).
   */
  async function run(p: number, fused: boolean, targetModules?: Parameters<Qwen3Model['addLora']>[0]['targetModules'], seed = 123) {
    if (fused) delete process.env.PAPERGYM_FUSED_LORA_DROPOUT;
    else process.env.PAPERGYM_FUSED_LORA_DROPOUT = '0';
    try {
      model.addLora({ r: 4, alpha: 8, dropout: p, seed: 3, ...(targetModules ? { targetModules } : {}) });
      model.setLoraWeights(randomB(model, 17));
      model.zeroGrad();
      native().manualSeed(seed);
      native().opCountStart();
      const { loss } = await model.crossEntropyBackward(args());
      const fusedNodes = native().opCountStop().ops['aten::addmm_'] ?? 0;
      return { loss, g: model.loraGrads(), fusedNodes };
    } finally {
      delete process.env.PAPERGYM_FUSED_LORA_DROPOUT;
    }
  }

  it('draws the masks the per-module path draws (one per projection): same loss and LoRA grads (float32, ≤ 1e-5), far from dropout 0', async () => {
    const fused = await run(0.3, true);
    const perModule = await run(0.3, false);
    const none = await run(0, false);
    // Each run took the path it names: 7 projections × 2 layers accumulate in the fused node, none per module.
    expect(fused.fusedNodes).to.equal(7 * 2);
    expect(perModule.fusedNodes).to.equal(0);
    expect(Math.abs(fused.loss - perModule.loss)).to.be.at.most(1e-5 * Math.abs(perModule.loss));
    const gap = relDiff(fused.g, perModule.g);
    expect(gap).to.be.at.most(1e-5);
    // The masks matter (the comparison is not of two dropout-free runs) and every leaf gets a gradient.
    expect(relDiff(none.g, perModule.g)).to.be.above(1e-2);
    expect(Object.values(fused.g).every((v) => v.data.some((x) => x !== 0))).to.equal(true);
    // Another seed draws other masks (the generator decides them, not a constant), in both paths alike.
    const otherFused = await run(0.3, true, undefined, 7);
    const otherPerModule = await run(0.3, false, undefined, 7);
    expect(Math.abs(otherFused.loss - fused.loss)).to.be.above(1e-4 * Math.abs(fused.loss));
    expect(relDiff(otherFused.g, otherPerModule.g)).to.be.at.most(1e-5);
  });

  it('projections without an adapter in a group keep the per-module path (q and v targeted): same grads either way', async () => {
    const fused = await run(0.3, true, ['q_proj', 'v_proj', 'gate_proj', 'up_proj', 'down_proj', 'o_proj']);
    const perModule = await run(0.3, false, ['q_proj', 'v_proj', 'gate_proj', 'up_proj', 'down_proj', 'o_proj']);
    // o, gate + up and down in the fused node (4 members a layer); q and v per module.
    expect(fused.fusedNodes).to.equal(4 * 2);
    expect(relDiff(fused.g, perModule.g)).to.be.at.most(1e-5);
  });
});

describe('model: LoRA branch precision (setLoraFloat32Branch)', function () {
  this.timeout(300000);
  const batch = paddedBatch();
  const args = () => ({ inputIds: int32(batch.ids), attentionMask: int32(batch.mask), labels: int32(batch.labels) });

  async function run(model: Qwen3Model, fp32: boolean, recompute = false) {
    model.setLoraFloat32Branch(fp32);
    model.setGradientCheckpointing(recompute);
    model.zeroGrad();
    const { loss } = await model.crossEntropyBackward(args());
    const g = model.loraGrads();
    model.setLoraFloat32Branch(true);
    model.setGradientCheckpointing(false);
    return { loss, g };
  }

  it('is a no-op on a float32 model (bit-identical grads)', async () => {
    const model = await loadModel(tinyModel('tiny-tied'));
    try {
      model.addLora({ r: 4, alpha: 8, seed: 3 });
      model.setLoraWeights(randomB(model, 17));
      expect(model.loraFloat32Branch()).to.equal(true);
      const a = await run(model, true);
      const b = await run(model, false);
      expect(b.loss).to.equal(a.loss);
      expect(relDiff(b.g, a.g)).to.equal(0);
    } finally {
      model.dispose();
    }
  });

  it('bfloat16 model: the model-dtype branch stays close to the float32 branch, and recomputes exactly', async () => {
    const model = await loadModel(tinyModel('tiny-tied'), { dtype: 'bfloat16' });
    try {
      model.addLora({ r: 4, alpha: 8, seed: 3 });
      model.setLoraWeights(randomB(model, 17));
      const f = await run(model, true);
      const h = await run(model, false);
      const hr = await run(model, false, true);
      expect(Math.abs(h.loss - f.loss)).to.be.at.most(2e-2 * Math.abs(f.loss));
      const r = relDiff(h.g, f.g);
      expect(r).to.be.at.most(0.1);
      expect(hr.loss).to.equal(h.loss);
      expect(relDiff(hr.g, h.g)).to.be.at.most(1e-6);
      expect(() => (model as unknown as { setLoraFloat32Branch(x: unknown): void }).setLoraFloat32Branch('no')).to.throw(TypeError);
    } finally {
      model.dispose();
    }
  });
});
