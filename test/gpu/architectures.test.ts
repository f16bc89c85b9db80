/**
 * GPU suite: the CUDA path of every architecture switch (one decoder: Qwen3 without head_dim in
 * config.json, Qwen3 with YaRN RoPE, Qwen2.5 with q/k/v bias and no q/k norm, Llama-3 with llama3 RoPE
 * scaling, Llama with attention and MLP biases), against the same model on CPU (whose parity with
 * transformers + peft is checked by test/model-parity.test.ts and test/generate.test.ts):
 *   - fp32 logits of a right-padded batch with a nonzero LoRA adapter: max |Δ| ≤ 1e-3;
 *   - LoRA gradients of the CE loss: relative error ≤ 1e-3 per tensor;
 *   - greedy decode of a left-padded batch, 24 tokens: the CUDA-graph path (static KV cache,
 *     DecodeStatic) and the dynamic path give the CPU's ids;
 *   - bf16 on CUDA: logits finite and within 0.3 of fp32.
 * Skips with a printed reason without CUDA.
 */
import { expect } from 'chai';
import { cudaAvailable } from '../../lib/native.js';
import { loadModel } from '../../lib/model/qwen3.js';
import { generate, type GenerateOptions } from '../../lib/model/policy.js';
import { int32, maskedMax, paddedBatch, randomLoraB, relErr, tinyModel } from '../helpers/tiny.js';

const NAMES = ['tiny-nohd', 'tiny-yarn', 'tiny-qwen25', 'tiny-llama3', 'tiny-llama-bias'] as const;
const prompts = [Int32Array.from([151644, 872, 198, 9707, 1879]), Int32Array.from([13, 77091]), Int32Array.from([151644, 872, 198, 40, 1079, 264, 1273, 13])];

describe('GPU suite: architectures (Qwen3 defaults / YaRN, Qwen2.5, Llama-3) on CUDA equal CPU', function () {
  this.timeout(600000);
  before(function () {
    if (!cudaAvailable()) {
      console.log('  skipping architectures on CUDA: CUDA is not available to the addon (no GPU, no driver, or a CPU libtorch)');
      this.skip();
    }
  });

  for (const name of NAMES) {
    it(`${name}: logits, LoRA grads, greedy ids (graphs and dynamic), bf16`, async () => {
      const dir = tinyModel(name);
      const b = paddedBatch();
      const args = { inputIds: int32(b.ids), attentionMask: int32(b.mask) };
      const cpu = await loadModel(dir);
      const gpu = await loadModel(dir, { device: 'cuda', dtype: 'float32' });
      cpu.addLora({ r: 4, alpha: 8, seed: 7 });
      cpu.setLoraWeights(randomLoraB(cpu, 11));
      gpu.addLora({ r: 4, alpha: 8, seed: 7 });
      gpu.setLoraWeights(cpu.loraWeights());
      const lc = (await cpu.forward(args)).logits!;
      const lg = (await gpu.forward(args)).logits!;
      const d = maskedMax(lg.data, lc.data, lc.shape, b.mask);
      console.log(`    ${name}: fp32 CUDA vs CPU logits max |Δ| = ${d.toExponential(2)}`);
      expect(d).to.be.at.most(1e-3);
      const labels = int32(b.labels);
      await cpu.crossEntropyBackward({ ...args, labels });
      await gpu.crossEntropyBackward({ ...args, labels });
      const gc = cpu.loraGrads();
      const gg = gpu.loraGrads();
      for (const k of Object.keys(gc)) expect(relErr(gg[k].data, gc[k].data), k).to.be.at.most(1e-3);
      const o = { prompts, temperature: 0, maxNewTokens: 24, stopIds: [] as number[], padId: 151643 };
      const ref = (await generate(cpu, o)).completions.map((c) => Array.from(c.tokenIds));
      for (const cudaGraphs of [true, false]) {
        const r = await generate(gpu, { ...o, cudaGraphs } as GenerateOptions);
        expect(
          r.completions.map((c) => Array.from(c.tokenIds)),
          `cudaGraphs ${cudaGraphs}`,
        ).to.deep.equal(ref);
      }
      gpu.dispose();
      const bf = await loadModel(dir, { device: 'cuda', dtype: 'bfloat16' });
      const lb = (await bf.forward(args)).logits!;
      expect(lb.data.every(Number.isFinite)).to.equal(true);
      const base = await loadModel(dir);
      const l0 = (await base.forward(args)).logits!;
      expect(maskedMax(lb.data, l0.data, l0.shape, b.mask)).to.be.at.most(0.3);
      bf.dispose();
      base.dispose();
      cpu.dispose();
    });
  }
});
