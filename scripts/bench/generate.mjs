#!/usr/bin/env node
/**
 * Generation benchmark: new tokens/s of the native batched generator at several batch sizes
 * (prompt 512 tokens, 256 sampled tokens per row, T = 1, no top-k/top-p, no stop ids so every row
 * runs the full length), and of transformers `generate` on the same prompts in the same process
 * tree / device (scripts/bench/generate_ref.py, run after ours has freed its memory). Prints a
 * table with the ratio ours / transformers.
 *
 * Usage (after `npm run build:ts` and the native build):
 *   node scripts/bench/generate.mjs                                   # CPU, tiny model
 *   node scripts/bench/generate.mjs --device cuda --shape qwen3-1.7b --dtype bf16
 * Options: --device cpu|cuda[:N]  --shape tiny|qwen3-0.6b|qwen3-1.7b|qwen3-4b|qwen3-8b
 *          --dtype fp32|bf16|fp16  --model DIR (use an existing checkpoint)  --batches 1,8,64
 *          --prompt-len 512  --new-tokens 256  --no-ref (skip transformers)  --threads N (CPU)
 *          --attention live-kv,masked (decode attention A/B in one process; default live-kv)
 *          --lora R (decode through a rank-R adapter on all projections, as the trainer's rollouts)
 *          --lora-bf16 (that adapter's branch in the model dtype: the trainer's default)
 *          --adapter-mode branch,merged (with --lora: the LoRA branch in every step and/or the adapter
 *          merged into the weights once per call — generate's mergeAdapter, the trainer's
 *          sampling.mergeAdapter; A/B in one process; default branch)
 *          --top-k K (default 0: full-vocabulary sampling)
 *          --json FILE (write all numbers)  --layers N (random shapes with fewer layers, smoke tests)
 *          --no-graphs (CUDA: the dynamic decode path instead of the default static-cache CUDA-graph
 *          decode; the path taken is printed per batch on stderr and stored in --json as decode_path)
 *          --profile (CUDA: after each timed call, the same call again under the Kineto kernel profiler,
 *          native().profileStart/Stop: GPU µs per decode step by kernel and by kind (lib/util/kernels.ts)
 *          against the step's wall time; in --json as profile)
 *          --profile-trace DIR (with --profile: also a Chrome trace per batch, DIR/trace_bB.json)
 *          --group N (completions per prompt, as GRPO's groups: each batch is batch / N prompts × n = N;
 *          needs --no-ref)
 * Random-shape checkpoints are made once by scripts/make_random_qwen3.py under
 * .cache/random-models/ (the tiny one by scripts/make_tiny_qwen3.py under .cache/tiny-models/).
 */
import { mkdirSync, mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { randomModel, tinyModel } from './checkpoints.mjs';
import { benchArgs, deviceOf, intFlag, usageError, dtypeOf, fmt, fmtRatio, gib, lib, ratio, runPython, tokenIds, writeJson } from './harness.mjs';

const a = benchArgs({
  shape: { type: 'string', default: 'tiny' },
  model: { type: 'string' },
  batches: { type: 'string', default: '1,8,64' },
  'prompt-len': { type: 'string', default: '512' },
  'new-tokens': { type: 'string', default: '256' },
  'no-ref': { type: 'boolean', default: false },
  threads: { type: 'string' },
  layers: { type: 'string' },
  'no-graphs': { type: 'boolean', default: false },
  // A/B of the decode attention in one process: live-KV kernel (default) and/or the masked one.
  attention: { type: 'string', default: 'live-kv' },
  // rollouts as the trainer runs them: a LoRA adapter of this rank on all projections (0 = none)
  lora: { type: 'string', default: '0' },
  // the LoRA branch in the model dtype, as the trainer runs it (lora.fp32Branch false)
  'lora-bf16': { type: 'boolean', default: false },
  'top-k': { type: 'string', default: '0' },
  'adapter-mode': { type: 'string', default: 'branch' },
  profile: { type: 'boolean', default: false },
  'profile-trace': { type: 'string' },
  group: { type: 'string', default: '1' },
});
const { cuda, index: devIdx } = deviceOf(a.device);
const dtypeName = dtypeOf(a.dtype, cuda);
const batches = a.batches.split(',').map((b) => intFlag({ batches: b }, 'batches'));
const attentions = a.attention.split(',');
for (const att of attentions)
  if (att !== 'live-kv' && att !== 'masked') usageError(`--attention must be live-kv, masked or both (comma-separated), got ${att}`);
const modes = a['adapter-mode'].split(',');
for (const m of modes) if (m !== 'branch' && m !== 'merged') usageError(`--adapter-mode must be branch, merged or both (comma-separated), got ${m}`);
for (const f of ['lora', 'top-k']) intFlag(a, f, 0);
const group = intFlag(a, 'group');
if (group > 1 && !a['no-ref']) usageError('--group needs --no-ref (the transformers side takes one completion per prompt)');
for (const b of batches) if (b % group !== 0) usageError(`--group ${group} must divide every batch size, got ${b}`);
const promptLen = intFlag(a, 'prompt-len');
const newTokens = intFlag(a, 'new-tokens');
intFlag(a, 'threads');
intFlag(a, 'layers');
if (a.profile && !cuda) console.error(`--profile: no kernel profile on ${a.device} (it records GPU kernels); timing only`);
if (a['profile-trace'] && !a.profile) usageError('--profile-trace needs --profile');

function ensureModel() {
  if (a.model) return resolve(a.model);
  if (a.shape === 'tiny') return tinyModel();
  return randomModel({ shape: a.shape, dtype: dtypeName, layers: a.layers, cuda });
}

const modelDir = ensureModel();
const { loadModel } = await lib('model/qwen3.js');
const { generate } = await lib('model/policy.js');
const { native } = await lib('native.js');
const { kernelUsByKind } = await lib('util/kernels.js');
if (a.threads) native().setNumThreads(Number(a.threads));
const info = native().runtimeInfo();
// Deterministic prompts, the same for both sides.
const prompts = Object.fromEntries(batches.map((b) => [String(b), tokenIds(b, promptLen, b)]));

const model = await loadModel(modelDir, { device: a.device, dtype: dtypeName });
const loraRank = Number(a.lora);
if (loraRank > 0)
  model.addLora({
    r: loraRank,
    alpha: 2 * loraRank,
    dropout: 0,
    targetModules: ['q_proj', 'k_proj', 'v_proj', 'o_proj', 'gate_proj', 'up_proj', 'down_proj'],
    seed: 0,
  });
if (a['lora-bf16']) model.setLoraFloat32Branch(false);
// The same generate call once more under the kernel profiler: GPU µs per decode step by kernel
// and by kind, against the call's wall ms per step (the difference is time the GPU idled).
async function profileCall(b, opts) {
  native().profileStart();
  const t0 = performance.now();
  const r = await generate(model, opts);
  const wallMs = performance.now() - t0;
  if (a['profile-trace']) mkdirSync(resolve(a['profile-trace']), { recursive: true });
  const tracePath = a['profile-trace'] ? join(resolve(a['profile-trace']), `trace_b${b}.json`) : undefined;
  const p = native().profileStop({ top: 400, ...(tracePath ? { tracePath } : {}) });
  const steps = r.steps || 1;
  const kinds = Object.fromEntries(Object.entries(kernelUsByKind(p.kernels)).map(([k, us]) => [k, us / steps]));
  const top = p.kernels
    .slice(0, 12)
    .map((k) => ({ name: k.name.slice(0, 90), us_per_step: k.totalUs / steps, calls_per_step: k.count / steps, mean_us: k.meanUs }));
  const out = {
    steps,
    wall_ms_per_step: wallMs / steps,
    decode_ms_per_step: r.decodeMs / steps,
    gpu_busy_us_per_step: p.gpuBusyUs / steps,
    gpu_us_per_step: p.gpuUs / steps,
    kinds_us_per_step: kinds,
    top,
    events: p.events,
    trace: tracePath ?? null,
  };
  process.stderr.write(
    `profile batch ${b}: ${out.decode_ms_per_step.toFixed(2)} ms/step decode wall, GPU busy ${(out.gpu_busy_us_per_step / 1000).toFixed(2)} ms/step; ` +
      Object.entries(kinds)
        .sort((x, y) => y[1] - x[1])
        .map(([k, v]) => `${k} ${v.toFixed(0)} µs`)
        .join(', ') +
      '\n',
  );
  for (const k of top.slice(0, 8))
    process.stderr.write(`  ${k.us_per_step.toFixed(1).padStart(8)} µs/step  ${k.calls_per_step.toFixed(1).padStart(6)} calls  ${k.name}\n`);
  return out;
}

const ours = [];
const runs = batches.flatMap((b) => attentions.flatMap((att) => (loraRank > 0 ? modes : ['branch']).map((mode) => [b, att, mode])));
for (const [b, att, mode] of runs) {
  const opts = {
    prompts: prompts[String(b)].slice(0, b / group),
    n: group,
    temperature: 1,
    topK: Number(a['top-k']),
    topP: 1,
    stopIds: [],
    seed: 1,
    cudaGraphs: !a['no-graphs'],
    liveKv: att !== 'masked',
    mergeAdapter: mode === 'merged',
    ...(loraRank > 0 ? { adapter: 'active' } : {}),
  };
  await generate(model, { ...opts, maxNewTokens: 4 }); // warm-up at this batch size
  if (cuda) native().cudaResetPeak(devIdx);
  const t0 = performance.now();
  const r = await generate(model, { ...opts, maxNewTokens: newTokens });
  const secs = (performance.now() - t0) / 1000;
  const peak = cuda ? (native().cudaMemory(devIdx)?.peakAllocatedBytes ?? null) : null;
  const adapter = loraRank ? (r.adapterMerged ? 'merged' : 'branch') : '-';
  ours.push({
    batch: b,
    attention: r.decodeAttention ?? 'masked',
    group,
    lora: loraRank,
    adapter,
    seconds: secs,
    new_tokens: r.newTokens,
    tokens_per_s: r.newTokens / secs,
    prefill_ms: r.prefillMs,
    decode_tokens_per_s: (r.newTokens - b) / (r.decodeMs / 1000),
    peak_bytes: peak,
    decode_path: r.decodePath ?? 'dynamic',
    batch_rows: r.batchRows ?? b,
    ms_per_step: r.steps ? r.decodeMs / r.steps : null,
  });
  if (a.profile && cuda) ours.at(-1).profile = await profileCall(b, { ...opts, maxNewTokens: newTokens });
  process.stderr.write(
    `ours  batch ${b}: ${(r.newTokens / secs).toFixed(1)} new tokens/s (prefill ${r.prefillMs.toFixed(0)} ms, decode ${r.decodeMs.toFixed(0)} ms, ${r.steps ? (r.decodeMs / r.steps).toFixed(2) : '-'} ms/step, path ${r.decodePath ?? 'dynamic'}, attention ${r.decodeAttention ?? 'masked'}${group > 1 ? `, groups of ${group}` : ''}, ${r.batchRows ?? b} rows${loraRank ? `, LoRA r ${loraRank} ${adapter}` : ''})\n`,
  );
}
model.dispose();
if (cuda) native().cudaEmptyCache();

let ref = null;
if (!a['no-ref']) {
  const dir = mkdtempSync(join(tmpdir(), 'pg-bench-'));
  const pf = join(dir, 'prompts.json');
  writeFileSync(pf, JSON.stringify({ batches: prompts }));
  const args = ['--model', modelDir, '--prompts', pf, '--device', a.device, '--dtype', dtypeName, '--new-tokens', String(newTokens)];
  if (a.threads) args.push('--threads', a.threads);
  process.stderr.write('bench: running transformers generate …\n');
  ref = runPython('generate_ref.py', args);
  if (ref.error) {
    process.stderr.write(`bench: transformers side failed (${ref.error})\n`);
    ref = null;
  }
}

const head = `generate benchmark: ${a.shape === 'tiny' && !a.model ? 'tiny-tied' : (a.model ?? a.shape)} (${dtypeName}) on ${a.device}${cuda ? ` (${info.cudaDevices?.[0]?.name ?? 'GPU'})` : ` (${info.numThreads} threads)`}, prompt ${promptLen}, ${newTokens} new tokens, T=1`;
console.log(head);
console.log(
  [
    'batch',
    'attention',
    'group',
    'adapter',
    'ours tok/s',
    'ours decode tok/s',
    'ours prefill ms',
    'ours peak GiB',
    'transformers tok/s',
    'hf peak GiB',
    'ratio',
  ].join(' | '),
);
for (const o of ours) {
  const h = ref?.results.find((r) => r.batch === o.batch);
  console.log(
    [
      o.batch,
      o.attention,
      o.group,
      o.adapter,
      fmt(o.tokens_per_s),
      fmt(o.decode_tokens_per_s),
      fmt(o.prefill_ms, 0),
      gib(o.peak_bytes || null, 1),
      fmt(h?.tokens_per_s),
      gib(h?.peak_bytes || null, 1),
      fmtRatio(ratio(o.tokens_per_s, h?.tokens_per_s)),
    ].join(' | '),
  );
}
writeJson(a.json, { config: { ...a, modelDir, dtype: dtypeName }, libtorch: info.libtorchVersion, ours, transformers: ref });
