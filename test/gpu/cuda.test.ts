/**
 * GPU suite (npm run test:gpu): the tiny-model parity checks on CUDA. Skips with a printed reason
 * when CUDA is unavailable (CI has no GPU).
 *   - fp32 on CUDA vs transformers fp32: logits max |Δ| ≤ 1e-4, LoRA grads relative error ≤ 1e-4;
 *   - bf16 on CUDA vs transformers fp32 and vs transformers' own bf16 error (measured, printed,
 *     bounded by 2× transformers' bf16 error + 0.02);
 *   - greedy generation on CUDA fp32 equals CPU fp32 token for token (padded batch, 64 tokens);
 *   - fused JSD / GRPO on CUDA equal their unfused paths (fp32, 1e-5) and bf16 stays close.
 * Measurements go to $PG_GPU_REPORT (JSON) when set.
 */
import { expect } from 'chai';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { cudaAvailable, native } from '../../lib/native.js';
import { loadModel } from '../../lib/model/qwen3.js';
import { generate } from '../../lib/model/policy.js';
import { jsdLoss, grpoLoss, selectedLogprobs } from '../../lib/train/losses.js';
import { int32, paddedBatch, readRefForward, runReference, tinyModel, type TinyName } from '../helpers/tiny.js';
import { withFusedKernels } from '../helpers/run.js';

const report: Record<string, number | string> = {};

function maskedStats(ours: Float32Array, ref: Float32Array, shape: number[], mask: number[][]): { max: number; mean: number } {
  const [B, T, V] = shape as [number, number, number];
  let m = 0,
    s = 0,
    n = 0;
  for (let i = 0; i < B; i++)
    for (let j = 0; j < T; j++) {
      if (!mask[i]![j]) continue;
      const o = (i * T + j) * V;
      for (let v = 0; v < V; v++) {
        const d = Math.abs(ours[o + v]! - ref[o + v]!);
        m = Math.max(m, d);
        s += d;
        n++;
      }
    }
  return { max: m, mean: s / n };
}

function relErr(a: Float32Array, b: Float32Array): number {
  let num = 0,
    den = 0;
  for (let i = 0; i < a.length; i++) {
    num += (a[i]! - b[i]!) ** 2;
    den += b[i]! ** 2;
  }
  return Math.sqrt(num) / Math.max(Math.sqrt(den), 1e-30);
}

function lcg(seed: number): () => number {
  let s = seed >>> 0;
  return () => {
    s = (s * 1664525 + 1013904223) >>> 0;
    return s / 2 ** 32 - 0.5;
  };
}

describe('GPU suite (CUDA)', function () {
  this.timeout(600000);
  before(function () {
    if (!cudaAvailable()) {
      console.log('  skipping the GPU suite: CUDA is not available to the addon (no GPU, no driver, or a CPU libtorch); see `papergym-native doctor`');
      this.skip();
    }
  });
  after(() => {
    if (process.env.PG_GPU_REPORT)
      writeFileSync(process.env.PG_GPU_REPORT, JSON.stringify({ ...report, device: native().runtimeInfo().cudaDevices[0]?.name ?? '?' }, null, 2));
    console.log('  measured:', JSON.stringify(report, null, 1));
  });

  for (const name of ['tiny-tied', 'tiny-untied'] as TinyName[]) {
    it(`${name}: fp32 logits and LoRA grads match transformers+peft; bf16 within the measured bound`, async () => {
      const dir = tinyModel(name);
      const work = mkdtempSync(join(tmpdir(), `pg-gpu-${name}-`));
      const batch = paddedBatch();
      runReference(
        {
          model: dir,
          inputs: { input_ids: batch.ids, attention_mask: batch.mask, labels: batch.labels },
          tasks: [
            {
              kind: 'make_peft_adapter',
              out: join(work, 'peft'),
              seed: 1,
              b_std: 0.05,
              r: 4,
              alpha: 8,
              target_modules: ['q_proj', 'k_proj', 'v_proj', 'o_proj', 'gate_proj', 'up_proj', 'down_proj'],
              use_rslora: false,
            },
            { kind: 'forward', adapter: join(work, 'peft'), out: join(work, 'ref'), grads: true },
            { kind: 'forward', adapter: null, out: join(work, 'base') },
            { kind: 'forward', adapter: null, out: join(work, 'base-bf16'), dtype: 'bfloat16' },
          ],
        },
        work,
      );
      const ref = readRefForward(join(work, 'ref'));
      const base = readRefForward(join(work, 'base'));
      const tfBf16 = readRefForward(join(work, 'base-bf16'));
      const ids = int32(batch.ids),
        mask = int32(batch.mask),
        labels = int32(batch.labels);

      const m = await loadModel(dir, { device: 'cuda', dtype: 'float32' });
      await m.loadAdapter(join(work, 'peft'));
      const out = await m.forward({ inputIds: ids, attentionMask: mask });
      const d = maskedStats(out.logits!.data, ref.logits, ref.shape, batch.mask);
      report[`${name} cuda fp32 logits max|Δ|`] = d.max;
      expect(d.max).to.be.at.most(1e-4);
      m.zeroGrad();
      const ce = await m.crossEntropyBackward({ inputIds: ids, attentionMask: mask, labels });
      expect(Math.abs(ce.loss - (ref.loss ?? NaN))).to.be.at.most(1e-4);
      const grads = m.loraGrads();
      let worst = 0;
      for (const [k, g] of Object.entries(ref.grads)) worst = Math.max(worst, relErr(grads[k]!.data, g.data));
      report[`${name} cuda fp32 LoRA grad rel err (worst tensor)`] = worst;
      expect(worst).to.be.at.most(1e-4);
      m.dispose();

      const mb = await loadModel(dir, { device: 'cuda', dtype: 'bfloat16' });
      const ob = await mb.forward({ inputIds: ids, attentionMask: mask });
      const ours = maskedStats(ob.logits!.data, base.logits, base.shape, batch.mask);
      const theirs = maskedStats(tfBf16.logits, base.logits, base.shape, batch.mask);
      const vsTf = maskedStats(ob.logits!.data, tfBf16.logits, base.shape, batch.mask);
      report[`${name} cuda bf16 vs fp32 ref max|Δ|`] = ours.max;
      report[`${name} cuda bf16 vs fp32 ref mean|Δ|`] = ours.mean;
      report[`${name} transformers bf16 (cpu) vs fp32 ref max|Δ|`] = theirs.max;
      report[`${name} cuda bf16 vs transformers bf16 max|Δ|`] = vsTf.max;
      report[`${name} cuda bf16 vs transformers bf16 mean|Δ|`] = vsTf.mean;
      expect(ours.max).to.be.at.most(2 * theirs.max + 0.02);
      mb.dispose();
    });
  }

  it('greedy generation on CUDA (fp32) equals CPU token for token', async () => {
    const dir = tinyModel('tiny-tied');
    const prompts = [
      Int32Array.from([151644, 872, 198, 9707, 1879]),
      Int32Array.from([13, 77091]),
      Int32Array.from([151644, 872, 198, 40, 1079, 264, 1273, 13]),
    ];
    const opts = { prompts, n: 1, temperature: 0, maxNewTokens: 64, stopIds: [151645, 151643], seed: 0 };
    const cpu = await loadModel(dir);
    const gpu = await loadModel(dir, { device: 'cuda', dtype: 'float32' });
    const a = await generate(cpu, opts);
    const b = await generate(gpu, opts);
    expect(b.completions.map((c) => Array.from(c.tokenIds))).to.deep.equal(a.completions.map((c) => Array.from(c.tokenIds)));
    let lpd = 0;
    a.completions.forEach((c, i) => c.logprobs.forEach((x, j) => (lpd = Math.max(lpd, Math.abs(x - b.completions[i]!.logprobs[j]!)))));
    report['greedy cuda vs cpu logprob max|Δ|'] = lpd;
    cpu.dispose();
    gpu.dispose();
  });

  it('fused JSD and GRPO on CUDA equal their unfused paths (fp32) and bf16 stays close', async () => {
    const r = lcg(3);
    const N = 96,
      H = 64,
      V = 4096;
    const t = (n: number, s = 1) => ({ data: Float32Array.from({ length: n }, () => r() * s), shape: [] as number[] });
    const sh = { ...t(N * H, 2), shape: [N, H] },
      th = { ...t(N * H, 2), shape: [N, H] },
      w = { ...t(V * H, 0.5), shape: [V, H] };
    const mask = { data: Float32Array.from({ length: N }, (_, i) => (i % 7 === 6 ? 0 : 1)), shape: [N] };
    const f = await jsdLoss({ studentHidden: sh, teacherHidden: th, weight: w, mask, beta: 0.5, temperature: 1.1, device: 'cuda', chunkSize: 32 });
    const u = await jsdLoss({ studentHidden: sh, teacherHidden: th, weight: w, mask, beta: 0.5, temperature: 1.1, device: 'cuda', fused: false });
    report['cuda fused vs unfused JSD |Δloss|'] = Math.abs(f.loss - u.loss);
    expect(Math.abs(f.loss - u.loss)).to.be.at.most(1e-5);
    expect(relErr(f.gradStudentHidden!.data as Float32Array, u.gradStudentHidden!.data as Float32Array)).to.be.at.most(1e-5);
    const bf = await jsdLoss({ studentHidden: sh, teacherHidden: th, weight: w, mask, beta: 0.5, temperature: 1.1, device: 'cuda', dtype: 'bfloat16' });
    report['cuda bf16 fused JSD rel err vs fp32'] = Math.abs(bf.loss - f.loss) / f.loss;

    const B = 4,
      T = 24;
    const hid = { ...t(B * T * H, 2), shape: [B, T, H] };
    const tokens = { data: Int32Array.from({ length: B * T }, () => Math.floor((r() + 0.5) * V)), shape: [B, T] };
    const old = { data: Float32Array.from({ length: B * T }, () => -8 + r()), shape: [B, T] };
    const adv = { data: Float32Array.from([1.2, -0.4, 0.3, -1.1]), shape: [B] };
    const gm = { data: Float32Array.from({ length: B * T }, (_, i) => (i % T < T - ((i / T) | 0) * 3 ? 1 : 0)), shape: [B, T] };
    const args = {
      hidden: hid,
      weight: w,
      tokens,
      oldLogprobs: old,
      refLogprobs: old,
      advantages: adv,
      mask: gm,
      klCoef: 0.04,
      epsLow: 0.2,
      epsHigh: 0.28,
      aggregation: 'grpo' as const,
      device: 'cuda' as const,
    };
    const gf = await grpoLoss({ ...args, chunkSize: 16 });
    const gu = await grpoLoss({ ...args, fused: false });
    report['cuda fused vs unfused GRPO |Δloss|'] = Math.abs(gf.loss - gu.loss);
    expect(Math.abs(gf.loss - gu.loss)).to.be.at.most(1e-5);
    expect(relErr(gf.gradHidden!.data as Float32Array, gu.gradHidden!.data as Float32Array)).to.be.at.most(1e-5);
  });

  it('fused loss row kernels equal the ATen path (JSD β 0 / 0.5 / 1, GRPO with and without KL, logprobs; fp32 and bf16)', async function () {
    if (!native().runtimeInfo().fusedKernels) {
      console.log('  skipping: this build has no fused CUDA kernels (no CUDA compiler at build time)');
      this.skip();
    }
    const r = lcg(11);
    const N = 70,
      H = 48,
      V = 3001; // V odd: no vector-width assumptions
    const t = (n: number, s = 1) => Float32Array.from({ length: n }, () => r() * s);
    const sh = { data: t(N * H, 3), shape: [N, H] },
      th = { data: t(N * H, 3), shape: [N, H] },
      w = { data: t(V * H, 0.6), shape: [V, H] };
    const mask = { data: Float32Array.from({ length: N }, (_, i) => (i % 5 === 4 ? 0 : i % 3 === 0 ? 0.5 : 1)), shape: [N] };
    for (const dtype of ['float32', 'bfloat16'] as const) {
      const tol = dtype === 'float32' ? 2e-5 : 1e-2;
      for (const beta of [0, 0.5, 1]) {
        const a = { studentHidden: sh, teacherHidden: th, weight: w, mask, beta, temperature: 0.9, device: 'cuda' as const, dtype, chunkSize: 16 };
        const k = await withFusedKernels(true, () => jsdLoss(a));
        const x = await withFusedKernels(false, () => jsdLoss(a));
        report[`kernel vs ATen JSD ${dtype} β=${beta} |Δloss|`] = Math.abs(k.loss - x.loss);
        report[`kernel vs ATen JSD ${dtype} β=${beta} grad rel`] = relErr(k.gradStudentHidden!.data as Float32Array, x.gradStudentHidden!.data as Float32Array);
        expect(Math.abs(k.loss - x.loss)).to.be.at.most(tol * Math.max(1, Math.abs(x.loss)));
        expect(relErr(k.gradStudentHidden!.data as Float32Array, x.gradStudentHidden!.data as Float32Array)).to.be.at.most(tol);
      }
      const same = await withFusedKernels(true, () => jsdLoss({ studentHidden: sh, teacherHidden: sh, weight: w, mask, beta: 0.5, device: 'cuda', dtype }));
      expect(same.loss).to.equal(0);
      const B = 5,
        T = 14;
      const hid = { data: t(B * T * H, 3), shape: [B, T, H] };
      const tokens = { data: Int32Array.from({ length: B * T }, () => Math.floor((r() + 0.5) * V)), shape: [B, T] };
      const gm = { data: Float32Array.from({ length: B * T }, (_, i) => (i % T < T - ((i / T) | 0) * 2 ? 1 : 0)), shape: [B, T] };
      const base = { hidden: hid, weight: w, tokens, mask: gm, device: 'cuda' as const, dtype, temperature: 1.2 };
      const lp = await withFusedKernels(false, () =>
        selectedLogprobs({
          hidden: { data: hid.data, shape: [B * T, H] },
          weight: w,
          tokens: { data: tokens.data, shape: [B * T] },
          device: 'cuda',
          dtype,
          temperature: 1.2,
        }),
      );
      // old logprobs around the current ones: ratios on both sides of the clip range.
      const old = { data: Float32Array.from(lp.data as Float32Array, (x, i) => x + [0.5, -0.5, 0.1, 0][i % 4]!), shape: [B, T] };
      const ref = { data: Float32Array.from(lp.data as Float32Array, (x, i) => x + (i % 2 ? 30 : -0.3)), shape: [B, T] }; // some beyond the k3 clamp
      for (const klCoef of [0, 0.04]) {
        const args = {
          ...base,
          oldLogprobs: old,
          refLogprobs: ref,
          advantages: { data: Float32Array.from([1.2, -0.4, 0.3, -1.1, 0.7]), shape: [B] },
          klCoef,
          epsLow: 0.2,
          epsHigh: 0.28,
          aggregation: 'dapo' as const,
          chunkSize: 16,
        };
        const k = await withFusedKernels(true, () => grpoLoss(args));
        const x = await withFusedKernels(false, () => grpoLoss(args));
        report[`kernel vs ATen GRPO ${dtype} βKL=${klCoef} |Δloss|`] = Math.abs(k.loss - x.loss);
        expect(Math.abs(k.loss - x.loss)).to.be.at.most(tol * Math.max(1, Math.abs(x.loss)));
        expect(relErr(k.gradHidden!.data as Float32Array, x.gradHidden!.data as Float32Array)).to.be.at.most(tol);
        expect(k.clipFraction.region).to.be.closeTo(x.clipFraction.region, 1e-6);
      }
      const lk = await withFusedKernels(true, () =>
        selectedLogprobs({
          hidden: { data: hid.data, shape: [B * T, H] },
          weight: w,
          tokens: { data: tokens.data, shape: [B * T] },
          device: 'cuda',
          dtype,
          temperature: 1.2,
        }),
      );
      expect(relErr(lk.data as Float32Array, lp.data as Float32Array)).to.be.at.most(1e-5);
    }
  });

  it('own kernels on a model (RoPE, cross-entropy rows, bf16 LoRA branch): loss and LoRA grads equal the ATen path', async function () {
    if (!native().runtimeInfo().fusedKernels) {
      console.log('  skipping: this build has no fused CUDA kernels (no CUDA compiler at build time)');
      this.skip();
    }
    const batch = paddedBatch();
    const args = { inputIds: int32(batch.ids), attentionMask: int32(batch.mask), labels: int32(batch.labels) };
    for (const dtype of ['float32', 'bfloat16'] as const) {
      for (const fp32Branch of dtype === 'float32' ? [true] : [true, false]) {
        const run = async (kernels: boolean) => {
          const prev = native().setFusedKernels(kernels);
          const model = await loadModel(tinyModel('tiny-untied'), { device: 'cuda', dtype });
          try {
            model.addLora({ r: 4, alpha: 8, seed: 3 });
            const w = model.loraWeights();
            const r = lcg(5);
            for (const [k, v] of Object.entries(w)) if (k.includes('lora_B')) w[k] = { data: (v.data as Float32Array).map(() => r() * 0.1), shape: v.shape };
            model.setLoraWeights(w);
            model.setLoraFloat32Branch(fp32Branch);
            const { loss } = await model.crossEntropyBackward(args);
            return { loss, g: model.loraGrads() };
          } finally {
            model.dispose();
            native().setFusedKernels(prev);
          }
        };
        const k = await run(true);
        const x = await run(false);
        let worst = 0;
        for (const name of Object.keys(x.g)) worst = Math.max(worst, relErr(k.g[name]!.data as Float32Array, x.g[name]!.data as Float32Array));
        const tag = `${dtype}${dtype === 'float32' ? '' : fp32Branch ? ' fp32 LoRA branch' : ' bf16 LoRA branch'}`;
        report[`kernels vs ATen model CE ${tag} |Δloss|`] = Math.abs(k.loss - x.loss);
        report[`kernels vs ATen model CE ${tag} worst LoRA grad rel`] = worst;
        const tol = dtype === 'float32' ? 1e-4 : 5e-2;
        expect(Math.abs(k.loss - x.loss)).to.be.at.most(tol * Math.max(1, x.loss));
        expect(worst).to.be.at.most(tol);
      }
    }
  });

  it('LoRA dropout in the fused base + LoRA node (bf16 LoRA branch, one mask per projection) == LoRA per module from the same seed: loss and LoRA grads', async function () {
    const batch = paddedBatch();
    const args = { inputIds: int32(batch.ids), attentionMask: int32(batch.mask), labels: int32(batch.labels) };
    const run = async (fusedNode: boolean, dropout: number) => {
      if (!fusedNode) process.env.PAPERGYM_FUSED_LORA_DROPOUT = '0';
      const model = await loadModel(tinyModel('tiny-untied'), { device: 'cuda', dtype: 'bfloat16' });
      try {
        model.addLora({ r: 4, alpha: 8, seed: 3, dropout });
        const w = model.loraWeights();
        const r = lcg(5);
        for (const [k, v] of Object.entries(w)) if (k.includes('lora_B')) w[k] = { data: (v.data as Float32Array).map(() => r() * 0.1), shape: v.shape };
        model.setLoraWeights(w);
        model.setLoraFloat32Branch(false);
        native().manualSeed(11);
        const { loss } = await model.crossEntropyBackward(args);
        return { loss, g: model.loraGrads() };
      } finally {
        model.dispose();
        delete process.env.PAPERGYM_FUSED_LORA_DROPOUT;
      }
    };
    const fusedRun = await run(true, 0.3);
    const perModule = await run(false, 0.3);
    const noDropout = await run(false, 0);
    let worst = 0;
    let dropoutEffect = 0;
    for (const name of Object.keys(perModule.g)) {
      worst = Math.max(worst, relErr(fusedRun.g[name]!.data as Float32Array, perModule.g[name]!.data as Float32Array));
      dropoutEffect = Math.max(dropoutEffect, relErr(noDropout.g[name]!.data as Float32Array, perModule.g[name]!.data as Float32Array));
    }
    report['LoRA dropout fused vs per module worst LoRA grad rel'] = worst;
    report['LoRA dropout 0.3 vs none worst LoRA grad rel (the masks matter)'] = dropoutEffect;
    expect(Math.abs(fusedRun.loss - perModule.loss)).to.be.at.most(5e-2 * Math.max(1, perModule.loss));
    expect(worst).to.be.at.most(5e-2);
    // The same masks, not merely the same rate: the gap is far below what the masks themselves move.
    expect(worst).to.be.below(dropoutEffect / 4);
  });

  it('reports CUDA allocator statistics and can reset the peak', () => {
    const m = native().cudaMemory(0)!;
    expect(m.reservedBytes).to.be.at.least(m.allocatedBytes);
    native().cudaResetPeak(0);
    native().cudaEmptyCache();
    expect(native().cudaMemory(0)!.peakAllocatedBytes).to.be.at.most(m.peakAllocatedBytes + 1);
  });

  it('a memory limit (--max-memory) binds the allocator: past it an allocation is out-of-memory, lifting it lets the same call run', async () => {
    const m = await loadModel(tinyModel('tiny-tied'), { device: 'cuda' });
    try {
      const ids = { data: new Int32Array(8 * 64).fill(13), shape: [8, 64] }; // logits alone: 8·64·151936·4 B = 311 MB
      native().cudaEmptyCache();
      const base = native().cudaMemory(0)!.allocatedBytes;
      native().cudaSetMemoryLimit(base + 64e6, 0);
      let err: (Error & { code?: string }) | undefined;
      try {
        await m.forward({ inputIds: ids });
      } catch (e) {
        err = e as Error & { code?: string };
      }
      expect(err?.code, `expected out-of-memory under a cap of ${((base + 64e6) / 1e9).toFixed(3)} GB, got ${err?.message}`).to.equal('ERR_PG_OOM');
      native().cudaSetMemoryLimit(1e15, 0); // beyond the device: no cap
      const f = await m.forward({ inputIds: ids });
      expect(f.logits!.shape).to.deep.equal([8, 64, 151936]);
      expect(() => native().cudaSetMemoryLimit(-1, 0)).to.throw(TypeError, /positive/);
    } finally {
      native().cudaSetMemoryLimit(1e15, 0);
      m.dispose();
    }
  });
});
