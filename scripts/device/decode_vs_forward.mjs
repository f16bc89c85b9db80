#!/usr/bin/env node
// Diagnostic (GPU): how far each CUDA decode path's logprobs are from the CPU fp32 forward of the
// same sequence (the ground truth), per row of the mixed batch of test/gpu/generate-rows.test.ts,
// next to the CUDA teacher-forced forward's own distance. Prints one line per path and row.
// Usage (on the GPU machine, after the build): node scripts/device/decode_vs_forward.mjs
import { loadModel } from '../../dist/lib/model/qwen3.js';
import { generate } from '../../dist/lib/model/policy.js';
import { tinyModel } from '../../dist/test/helpers/tiny.js';
const dir = tinyModel('tiny-tied');
const g = await loadModel(dir, { device: 'cuda' });
const c = await loadModel(dir, { device: 'cpu' });
const prompts = [
  [151644, 872, 198, 9707, 1879],
  [13, 77091],
  [151644, 872, 198, 40, 1079, 264, 1273, 13],
  [151644, 872, 198, 3838, 374, 264, 3119, 30],
  [9707, 11, 1879, 0],
];
const mixed = [
  { temperature: 1, seed: 11, maxNewTokens: 20 },
  { temperature: 0.7, topK: 5, seed: 12, maxNewTokens: 32 },
  { temperature: 0 },
  { temperature: 1.2, topK: 40, topP: 0.8, seed: 13 },
  { temperature: 1, minP: 0.1, seed: 14, maxNewTokens: 16 },
];
function lpOf(L, T, x) {
  const t = T || 1;
  let mx = -Infinity,
    z = 0;
  for (const v of L) mx = Math.max(mx, v / t);
  for (const v of L) z += Math.exp(v / t - mx);
  return L[x] / t - mx - Math.log(z);
}
async function fwd(m, seq) {
  const f = await m.forward({ inputIds: { data: Int32Array.from(seq), shape: [1, seq.length] } });
  return { d: f.logits.data, V: f.logits.shape[2] };
}
for (const [name, o] of [
  ['dynamic', { cudaGraphs: false }],
  ['static', { cudaGraphs: false, staticCache: true }],
  ['cuda-graphs', { cudaGraphs: true }],
  ['static-alone', { cudaGraphs: false, staticCache: true, alone: true }],
]) {
  const { alone, ...go } = o;
  for (let i = 0; i < 5; i++) {
    const r = alone
      ? await generate(g, { prompts: [prompts[i]], promptOptions: [mixed[i]], maxNewTokens: 24, ...go })
      : await generate(g, { prompts, promptOptions: mixed, maxNewTokens: 24, ...go });
    const comp = r.completions[alone ? 0 : i];
    const ids = Array.from(comp.tokenIds),
      lps = Array.from(comp.logprobs);
    const seq = [...prompts[i], ...ids];
    const fc = await fwd(c, seq),
      fg = await fwd(g, seq);
    let worstRun = 0,
      worstGpuFwd = 0,
      at = -1,
      atF = -1;
    for (let t = 0; t < ids.length; t++) {
      const p = prompts[i].length + t - 1;
      const Lc = fc.d.subarray(p * fc.V, (p + 1) * fc.V),
        Lg = fg.d.subarray(p * fg.V, (p + 1) * fg.V);
      const ref = lpOf(Lc, mixed[i].temperature ?? 1, ids[t]);
      const dr = Math.abs(lps[t] - ref),
        dg = Math.abs(lpOf(Lg, mixed[i].temperature ?? 1, ids[t]) - ref);
      if (dr > worstRun) ((worstRun = dr), (at = t));
      if (dg > worstGpuFwd) ((worstGpuFwd = dg), (atF = t));
    }
    console.log(
      `${name} row ${i}: |run logprob - CPU fwd| max ${worstRun.toExponential(2)} at ${at}; |CUDA fwd - CPU fwd| max ${worstGpuFwd.toExponential(2)} at ${atF}; ${ids.length} ids`,
    );
  }
}
