/**
 * Native Qwen3 model: loading variants, padding, KV cache, LoRA semantics (on/off, snapshots,
 * grads only into LoRA), adapter save/load round trip, memory surface, dispose.
 */
import { expect } from 'chai';
import { mkdtempSync, readFileSync, existsSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { loadModel, type Qwen3Model } from '../lib/model/qwen3.js';
import { native, type JsTensor } from '../lib/native.js';
import { tinyModel, int32, paddedBatch, randomLoraB as randomB } from './helpers/tiny.js';

function maxAbsDiff(a: Float32Array, b: Float32Array): number {
  expect(a.length).to.equal(b.length);
  let m = 0;
  for (let i = 0; i < a.length; i++) m = Math.max(m, Math.abs(a[i] - b[i]));
  return m;
}

/** Max |Δ| between logits rows [b, t] of two [B, T, V] tensors restricted to mask = 1. */
function maskedMax(a: JsTensor<Float32Array>, b: JsTensor<Float32Array>, mask: number[][]): number {
  const [B, T, V] = a.shape;
  let m = 0;
  for (let i = 0; i < B; i++)
    for (let j = 0; j < T; j++) {
      if (!mask[i][j]) continue;
      const o = (i * T + j) * V;
      for (let v = 0; v < V; v++) m = Math.max(m, Math.abs(a.data[o + v] - b.data[o + v]));
    }
  return m;
}

describe('model: native Qwen3', function () {
  this.timeout(300000);
  let tied: string;
  let model: Qwen3Model;
  const batch = paddedBatch();
  const ids = int32(batch.ids);
  const mask = int32(batch.mask);

  before(async () => {
    tied = tinyModel('tiny-tied');
    model = await loadModel(tied);
  });
  after(() => model?.dispose());

  it('loads with config, device, dtype and external memory size', () => {
    expect(model.device).to.equal('cpu');
    expect(model.dtype).to.equal('float32');
    expect(model.config.hidden_size).to.equal(64);
    expect(model.config.architectures).to.deep.equal(['Qwen3ForCausalLM']);
    // tied: embed [V, H] + 2 layers + norm, fp32
    const H = 64,
      V = 151936,
      I = 128,
      hd = 16,
      q = 4 * hd,
      kv = 2 * hd;
    const perLayer = 2 * H + q * H + 2 * kv * H + H * q + 2 * hd + 3 * I * H;
    expect(model.parameterBytes()).to.equal(4 * (V * H + H + 2 * perLayer));
  });

  it('returns logits [B,T,V] and hidden [B,T,H] as float32', async () => {
    const r = await model.forward({ inputIds: ids, attentionMask: mask, outputs: ['logits', 'hidden'] });
    expect(r.logits!.shape).to.deep.equal([3, 7, 151936]);
    expect(r.hidden!.shape).to.deep.equal([3, 7, 64]);
    expect(r.logits!.data).to.be.instanceOf(Float32Array);
    expect(r.logits!.data.every(Number.isFinite)).to.equal(true);
    const only = await model.forward({ inputIds: ids, attentionMask: mask, outputs: ['hidden'] });
    expect(only.logits).to.equal(undefined);
  });

  it('pads correctly: right- and left-padded rows equal the unpadded row; padded rows never NaN', async () => {
    const row = batch.ids[1].slice(0, 5);
    const single = await model.forward({ inputIds: int32([row]) });
    const right = await model.forward({ inputIds: ids, attentionMask: mask });
    const V = 151936;
    const rs = right.logits!.data.subarray(1 * 7 * V, 1 * 7 * V + 5 * V);
    expect(maxAbsDiff(rs, single.logits!.data)).to.be.below(1e-4);
    const left = await model.forward({ inputIds: int32([[151643, 151643, ...row]]), attentionMask: int32([[0, 0, 1, 1, 1, 1, 1]]) });
    expect(left.logits!.data.every(Number.isFinite)).to.equal(true);
    expect(maxAbsDiff(left.logits!.data.subarray(2 * V), single.logits!.data)).to.be.below(1e-4);
    // a row that is padding only (every query row fully masked) stays finite and leaves the other row intact
    const mixed = await model.forward({
      inputIds: int32([row, [0, 0, 0, 0, 0]]),
      attentionMask: int32([
        [1, 1, 1, 1, 1],
        [0, 0, 0, 0, 0],
      ]),
      outputs: ['logits', 'hidden'],
    });
    expect(mixed.logits!.data.every(Number.isFinite)).to.equal(true);
    expect(mixed.hidden!.data.every(Number.isFinite)).to.equal(true);
    expect(maxAbsDiff(mixed.logits!.data.subarray(0, 5 * V), single.logits!.data)).to.be.below(1e-4);
  });

  it('KV cache path (chunked prefill + one-token decode) reproduces the full forward', async () => {
    const full = await model.forward({ inputIds: ids, attentionMask: mask });
    for (const chunk of [1, 3]) {
      const inc = await model.forwardChunked({ inputIds: ids, attentionMask: mask, chunk });
      expect(maskedMax(inc.logits, full.logits!, batch.mask)).to.be.below(1e-4);
    }
  });

  it('loads a sharded checkpoint and a tied checkpoint that stores lm_head.weight identically', async () => {
    const base = await model.forward({ inputIds: ids, attentionMask: mask });
    for (const dir of [tinyModel('tiny-tied', { shards: 3 }), tinyModel('tiny-tied', { keepTiedLmHead: true })]) {
      const m = await loadModel(dir);
      const r = await m.forward({ inputIds: ids, attentionMask: mask });
      expect(maxAbsDiff(r.logits!.data, base.logits!.data)).to.equal(0);
      m.dispose();
    }
  });

  it('loads a bfloat16 checkpoint in float32 and runs bfloat16 on CPU', async () => {
    const dir = tinyModel('tiny-tied', { dtype: 'bfloat16' });
    const m32 = await loadModel(dir);
    const m16 = await loadModel(dir, { dtype: 'bfloat16' });
    expect(m16.dtype).to.equal('bfloat16');
    expect(m16.parameterBytes() * 2).to.equal(m32.parameterBytes());
    const a = await m32.forward({ inputIds: ids, attentionMask: mask });
    const b = await m16.forward({ inputIds: ids, attentionMask: mask });
    const d = maskedMax(a.logits!, b.logits!, batch.mask);
    expect(d).to.be.below(0.5); // bf16 activations; logits are O(1)
    m32.dispose();
    m16.dispose();
  });

  it('LoRA: fresh adapter (B = 0) is a no-op; nonzero B changes logits; off / none / snapshots select', async () => {
    const base = await model.forward({ inputIds: ids, attentionMask: mask });
    model.addLora({ r: 4, alpha: 8, seed: 3 });
    expect(model.loraParameterNames()).to.have.length(2 * 7 * 2);
    expect(model.loraConfig()!.scaling).to.equal(2);
    const w = model.loraWeights();
    const a0 = w['base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight'];
    expect(a0.shape).to.deep.equal([4, 64]);
    const bound = 1 / Math.sqrt(64);
    expect(a0.data.every((x) => Math.abs(x) <= bound)).to.equal(true);
    expect(w['base_model.model.model.layers.1.mlp.down_proj.lora_B.weight'].shape).to.deep.equal([64, 4]);
    const r0 = await model.forward({ inputIds: ids, attentionMask: mask });
    expect(maxAbsDiff(r0.logits!.data, base.logits!.data)).to.equal(0);
    model.snapshotAdapter('zero');
    model.setLoraWeights(randomB(model, 7));
    const r1 = await model.forward({ inputIds: ids, attentionMask: mask });
    expect(maskedMax(r1.logits!, base.logits!, batch.mask)).to.be.above(1e-3);
    const none = await model.forward({ inputIds: ids, attentionMask: mask, adapter: 'none' });
    expect(maxAbsDiff(none.logits!.data, base.logits!.data)).to.equal(0);
    const snap = await model.forward({ inputIds: ids, attentionMask: mask, adapter: 'zero' });
    expect(maxAbsDiff(snap.logits!.data, base.logits!.data)).to.equal(0);
    model.setAdapterEnabled(false);
    const off = await model.forward({ inputIds: ids, attentionMask: mask });
    expect(maxAbsDiff(off.logits!.data, base.logits!.data)).to.equal(0);
    model.setAdapterEnabled(true);
    model.snapshotAdapter('b7');
    const s7 = await model.forward({ inputIds: ids, attentionMask: mask, adapter: 'b7' });
    expect(maxAbsDiff(s7.logits!.data, r1.logits!.data)).to.equal(0);
    model.dropSnapshot('b7');
    model.dropSnapshot('zero');
  });

  it('rejects a dropped snapshot name', async () => {
    let err: unknown;
    try {
      await model.forward({ inputIds: ids, attentionMask: mask, adapter: 'nope' });
    } catch (e) {
      err = e;
    }
    expect(err).to.be.instanceOf(TypeError);
    expect((err as Error).message).to.match(/snapshot named 'nope'/);
  });

  it('gradients flow only into LoRA A/B; zeroGrad clears; dropout only in training', async () => {
    model.addLora({ r: 2, alpha: 4, targetModules: ['q_proj', 'down_proj'], seed: 1 });
    expect(model.loraParameterNames()).to.have.length(2 * 2 * 2);
    const labels = int32(batch.labels);
    const { loss } = await model.crossEntropyBackward({ inputIds: ids, attentionMask: mask, labels });
    expect(loss).to.be.a('number').and.to.be.above(0);
    let g = model.loraGrads();
    // B = 0: dL/dA = 0, dL/dB != 0
    for (const [k, v] of Object.entries(g)) {
      const nz = v.data.some((x) => x !== 0);
      expect(nz, k).to.equal(k.includes('lora_B'));
    }
    model.zeroGrad();
    g = model.loraGrads();
    expect(Object.values(g).every((v) => v.data.every((x) => x === 0))).to.equal(true);
    // dropout: inference forwards are deterministic and equal to dropout 0
    model.addLora({ r: 2, alpha: 4, dropout: 0.5, seed: 1 });
    model.setLoraWeights(randomB(model, 5));
    const f1 = await model.forward({ inputIds: ids, attentionMask: mask });
    const f2 = await model.forward({ inputIds: ids, attentionMask: mask });
    expect(maxAbsDiff(f1.logits!.data, f2.logits!.data)).to.equal(0);
    const l1 = await model.crossEntropyBackward({ inputIds: ids, attentionMask: mask, labels });
    const l2 = await model.crossEntropyBackward({ inputIds: ids, attentionMask: mask, labels });
    expect(l1.loss).to.not.equal(l2.loss);
  });

  it('saves a PEFT adapter atomically and loads it back bit-exactly', async () => {
    model.addLora({ r: 4, alpha: 16, useRslora: true, targetModules: ['v_proj', 'gate_proj', 'o_proj'], seed: 9 });
    model.setLoraWeights(randomB(model, 11));
    const before = await model.forward({ inputIds: ids, attentionMask: mask });
    const dir = join(mkdtempSync(join(tmpdir(), 'pg-adapter-')), 'nested', 'out');
    await model.saveAdapter(dir, { baseModelName: 'tiny-tied' });
    expect(existsSync(join(dir, 'adapter_model.safetensors'))).to.equal(true);
    const cfg = JSON.parse(readFileSync(join(dir, 'adapter_config.json'), 'utf8'));
    expect(cfg).to.include({
      peft_type: 'LORA',
      task_type: 'CAUSAL_LM',
      r: 4,
      lora_alpha: 16,
      bias: 'none',
      use_rslora: true,
      base_model_name_or_path: 'tiny-tied',
      use_dora: false,
      fan_in_fan_out: false,
    });
    expect(cfg.target_modules).to.deep.equal(['gate_proj', 'o_proj', 'v_proj']);
    expect(cfg.modules_to_save).to.equal(null);
    const buf = readFileSync(join(dir, 'adapter_model.safetensors'));
    const n = Number(buf.readBigUInt64LE(0));
    const hdr = JSON.parse(buf.subarray(8, 8 + n).toString('utf8'));
    expect(hdr.__metadata__).to.deep.equal({ format: 'pt' });
    expect(hdr['base_model.model.model.layers.0.self_attn.v_proj.lora_A.weight']).to.include({ dtype: 'F32' });
    expect(hdr['base_model.model.model.layers.0.self_attn.v_proj.lora_A.weight'].shape).to.deep.equal([4, 64]);
    expect(hdr['base_model.model.model.layers.0.self_attn.v_proj.lora_B.weight'].shape).to.deep.equal([32, 4]);
    const m2 = await loadModel(tied);
    await m2.loadAdapter(dir);
    expect(m2.loraConfig()).to.deep.include({ r: 4, alpha: 16, useRslora: true, scaling: 8 });
    const after = await m2.forward({ inputIds: ids, attentionMask: mask });
    expect(maxAbsDiff(after.logits!.data, before.logits!.data)).to.equal(0);
    // same structure already present: values are copied into the existing tensors (resume path)
    m2.addLora({ r: 4, alpha: 2, targetModules: ['o_proj', 'v_proj', 'gate_proj'], seed: 1 });
    await m2.loadAdapter(dir);
    expect(m2.loraConfig()).to.deep.include({ r: 4, alpha: 16, useRslora: true, scaling: 8 });
    const again = await m2.forward({ inputIds: ids, attentionMask: mask });
    expect(maxAbsDiff(again.logits!.data, before.logits!.data)).to.equal(0);
    m2.dispose();
  });

  it('dispose frees weights, is idempotent, and later calls fail with "model was disposed"', async () => {
    const m = await loadModel(tied);
    expect(m.parameterBytes()).to.be.above(0);
    m.dispose();
    m.dispose();
    expect(m.disposed).to.equal(true);
    let err: unknown;
    try {
      await m.forward({ inputIds: ids, attentionMask: mask });
    } catch (e) {
      err = e;
    }
    expect((err as Error).message).to.match(/model was disposed/);
    expect(() => m.config).to.throw(/model was disposed/);
    expect(() => m.addLora({ r: 2, alpha: 2 })).to.throw(/model was disposed/);
    expect(() => m.loraParameterNames()).to.throw(/model was disposed/);
  });

  it('exposes the CUDA memory surface (null on CPU-only machines)', () => {
    const a = native();
    const mem = a.cudaMemory();
    if (mem === null) expect(a.runtimeInfo().cudaAvailable && a.runtimeInfo().cudaBuild).to.equal(false);
    else expect(mem).to.have.keys('allocatedBytes', 'reservedBytes', 'peakAllocatedBytes', 'peakReservedBytes');
    a.cudaResetPeak();
    a.cudaEmptyCache();
    expect(() => a.cudaSetMemoryLimit(0)).to.throw(TypeError, /bytes must be a positive number/);
    if (!a.runtimeInfo().cudaAvailable) a.cudaSetMemoryLimit(1e9); // no-op without CUDA
  });
});
