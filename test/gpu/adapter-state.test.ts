/**
 * GPU suite: native adapter state on CUDA (tiny model, bf16 base, float32 LoRA). The EMA update
 * runs on the device in float64 and rounds once to float32, so it must equal the JS formula bit
 * for bit there too; snapshot files written from device tensors round-trip bit for bit and the
 * loaded snapshot lives on the device (a forward selecting it gives the same logits as the
 * original). Skips with a printed reason when CUDA is unavailable.
 */
import { expect } from 'chai';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { cudaAvailable, native, type JsTensor } from '../../lib/native.js';
import { loadModel } from '../../lib/model/qwen3.js';
import { tinyModel } from '../helpers/tiny.js';
import { mulberry32 } from '../../lib/util/random.js';

type Rec = Record<string, JsTensor<Float32Array>>;

function randomRec(like: Rec, seed: number): Rec {
  const r = mulberry32(seed);
  return Object.fromEntries(
    Object.entries(like).map(([k, t]) => [k, { data: Float32Array.from(t.data, () => (r() - 0.5) * 10 ** Math.floor(r() * 8 - 5)), shape: t.shape }]),
  );
}
function sameBits(a: Rec, b: Rec): boolean {
  return Object.keys(a).every((k) =>
    Buffer.from(a[k]!.data.buffer, a[k]!.data.byteOffset, a[k]!.data.byteLength).equals(
      Buffer.from(b[k]!.data.buffer, b[k]!.data.byteOffset, b[k]!.data.byteLength),
    ),
  );
}

describe('GPU: native adapter state (EMA, snapshot files) on CUDA', function () {
  this.timeout(300000);
  before(function () {
    if (!cudaAvailable()) {
      console.log('  skipping the GPU adapter-state tests: CUDA is not available to the addon (no GPU, no driver, or a CPU libtorch)');
      this.skip();
    }
  });

  it('emaUpdate on the device equals the JS formula bit for bit; saveSnapshot / loadSnapshot round-trip', async () => {
    const tmp = mkdtempSync(join(tmpdir(), 'pg-gpu-ema-'));
    const m = await loadModel(tinyModel('tiny-tied'), { device: 'cuda', dtype: 'bfloat16' });
    try {
      m.addLora({ r: 8, alpha: 16, seed: 1 });
      let s = randomRec(m.loraWeights(), 1);
      m.setLoraWeights(s);
      m.snapshotAdapter('ema');
      for (const [i, d] of [0.99, 0.9, 0.37].entries()) {
        const a = randomRec(s, 10 + i);
        m.setLoraWeights(a);
        m.emaUpdate('ema', d);
        s = Object.fromEntries(
          Object.entries(a).map(([k, t]) => [k, { data: Float32Array.from(t.data, (x, j) => d * s[k]!.data[j]! + (1 - d) * x), shape: t.shape }]),
        );
        await m.saveSnapshot('ema', join(tmp, `ema-${i}.safetensors`));
        expect(sameBits((native().loadSafetensors(join(tmp, `ema-${i}.safetensors`)) as { tensors: Rec }).tensors, s), `decay ${d}`).to.equal(true);
      }
      await m.loadSnapshot('copy', join(tmp, 'ema-2.safetensors'));
      const ids = { data: Int32Array.from([5, 6, 7, 8]), shape: [1, 4] };
      const x = await m.forward({ inputIds: ids, adapter: 'ema' });
      const y = await m.forward({ inputIds: ids, adapter: 'copy' });
      expect(Buffer.from(y.logits!.data.buffer).equals(Buffer.from(x.logits!.data.buffer))).to.equal(true);
    } finally {
      m.dispose();
      rmSync(tmp, { recursive: true, force: true });
    }
  });

  it('captureAdapter / captureSnapshot / AdamW.captureState (pinned host copies) save the same bytes as the direct writers, after the device state moved on', async () => {
    const tmp = mkdtempSync(join(tmpdir(), 'pg-gpu-capture-'));
    const m = await loadModel(tinyModel('tiny-tied'), { device: 'cuda', dtype: 'bfloat16' });
    try {
      m.addLora({ r: 8, alpha: 16, seed: 2 });
      m.setLoraWeights(randomRec(m.loraWeights(), 3));
      m.snapshotAdapter('ref');
      const opt = new (native().AdamW)(m, { lr: 1e-2, betas: [0.9, 0.999], eps: 1e-8, weightDecay: 0 });
      const ids = { data: Int32Array.from([5, 6, 7, 8, 9, 10]), shape: [1, 6] };
      const labels = { data: Int32Array.from([-100, -100, 7, 8, 9, 10]), shape: [1, 6] };
      const stepOnce = async () => {
        await m.crossEntropyBackward({ inputIds: ids, labels });
        opt.step({ maxGradNorm: 1 });
        m.emaUpdate('ref', 0.5);
      };
      await stepOnce();
      await m.saveAdapter(join(tmp, 'direct'));
      await opt.saveState(join(tmp, 'direct', 'optimizer.safetensors'));
      await m.saveSnapshot('ref', join(tmp, 'direct', 'snapshot.safetensors'));
      const [a, o, r] = [await m.captureAdapter(), await opt.captureState(), await m.captureSnapshot('ref')];
      await stepOnce(); // the device tensors change after the capture
      await a.save(join(tmp, 'later'));
      await o.save(join(tmp, 'later', 'optimizer.safetensors'));
      await r.save(join(tmp, 'later', 'snapshot.safetensors'));
      const { readFileSync } = await import('node:fs');
      for (const f of ['adapter_model.safetensors', 'adapter_config.json', 'optimizer.safetensors', 'snapshot.safetensors'])
        expect(readFileSync(join(tmp, 'later', f)).equals(readFileSync(join(tmp, 'direct', f))), f).to.equal(true);
      for (const h of [a, o, r]) h.release();
    } finally {
      m.dispose();
      rmSync(tmp, { recursive: true, force: true });
    }
  });
});
