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
 *          --json FILE (write all numbers)  --layers N (random shapes with fewer layers, smoke tests)
 *          --no-graphs (CUDA: the dynamic decode path instead of the default static-cache CUDA-graph
 *          decode; the path taken is printed per batch on stderr and stored in --json as decode_path)
 * Random-shape checkpoints are made once by scripts/make_random_qwen3.py under
 * .cache/random-models/ (the tiny one by scripts/make_tiny_qwen3.py under .cache/tiny-models/).
 */
import { execFileSync, spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';

const root = resolve(dirname(fileURLToPath(import.meta.url)), '..', '..');
const { values: a } = parseArgs({
  options: {
    device: { type: 'string', default: 'cpu' },
    shape: { type: 'string', default: 'tiny' },
    dtype: { type: 'string' },
    model: { type: 'string' },
    batches: { type: 'string', default: '1,8,64' },
    'prompt-len': { type: 'string', default: '512' },
    'new-tokens': { type: 'string', default: '256' },
    'no-ref': { type: 'boolean', default: false },
    threads: { type: 'string' },
    json: { type: 'string' },
    layers: { type: 'string' },
    'no-graphs': { type: 'boolean', default: false },
  },
});
const python = process.env.PYTHON ?? 'python3';
const cuda = a.device.startsWith('cuda');
const dtypeName = { fp32: 'float32', float32: 'float32', bf16: 'bfloat16', bfloat16: 'bfloat16', fp16: 'float16', float16: 'float16' }[a.dtype ?? (cuda ? 'bf16' : 'fp32')];
if (!dtypeName) throw new Error(`--dtype must be fp32|bf16|fp16, got ${a.dtype}`);
const batches = a.batches.split(',').map(Number);
const promptLen = Number(a['prompt-len']);
const newTokens = Number(a['new-tokens']);

function ensureModel() {
  if (a.model) return resolve(a.model);
  const made = (dir, script, args) => {
    if (existsSync(join(dir, 'fingerprint.json'))) return dir;
    mkdirSync(dirname(dir), { recursive: true });
    const tmp = `${dir}.tmp-${process.pid}`;
    rmSync(tmp, { recursive: true, force: true });
    process.stderr.write(`bench: making ${dir} …\n`);
    execFileSync(python, [join(root, 'scripts', script), '--out', tmp, ...args], { stdio: ['ignore', 'ignore', 'inherit'] });
    renameSync(tmp, dir);
    return dir;
  };
  if (a.shape === 'tiny') return made(join(root, '.cache', 'tiny-models', 'tiny-tied-s0-float32-x1'), 'make_tiny_qwen3.py', ['--name', 'tiny-tied', '--seed', '0', '--dtype', 'float32', '--shards', '1']);
  const tag = `${a.shape}-${dtypeName}-s0${a.layers ? `-l${a.layers}` : ''}`;
  return made(join(root, '.cache', 'random-models', tag), 'make_random_qwen3.py', ['--shape', a.shape, '--dtype', dtypeName, '--seed', '0', '--device', cuda ? 'cuda' : 'cpu', ...(a.layers ? ['--layers', a.layers] : [])]);
}

/** Deterministic prompts (ids in [1000, 100000)), the same for both sides. */
function makePrompts(b, len, salt) {
  const out = [];
  let x = 12345 + salt * 7919;
  for (let i = 0; i < b; i++) {
    const p = [];
    for (let j = 0; j < len; j++) {
      x = (x * 1103515245 + 12345) % 2147483648;
      p.push(1000 + (x % 99000));
    }
    out.push(p);
  }
  return out;
}

const modelDir = ensureModel();
const { loadModel } = await import(join(root, 'dist', 'lib', 'model', 'qwen3.js'));
const { generate } = await import(join(root, 'dist', 'lib', 'model', 'policy.js'));
const { native } = await import(join(root, 'dist', 'lib', 'native.js'));
if (a.threads) native().setNumThreads(Number(a.threads));
const info = native().runtimeInfo();
const prompts = Object.fromEntries(batches.map((b) => [String(b), makePrompts(b, promptLen, b)]));

const model = await loadModel(modelDir, { device: a.device, dtype: dtypeName });
const ours = [];
for (const b of batches) {
  const opts = { prompts: prompts[String(b)], temperature: 1, topK: 0, topP: 1, stopIds: [], seed: 1, cudaGraphs: !a['no-graphs'] };
  await generate(model, { ...opts, maxNewTokens: 4 }); // warm-up at this batch size
  if (cuda) native().cudaResetPeak(Number(a.device.split(':')[1] ?? 0));
  const t0 = performance.now();
  const r = await generate(model, { ...opts, maxNewTokens: newTokens });
  const secs = (performance.now() - t0) / 1000;
  const peak = cuda ? native().cudaMemory(Number(a.device.split(':')[1] ?? 0))?.peakAllocatedBytes ?? null : null;
  ours.push({ batch: b, seconds: secs, new_tokens: r.newTokens, tokens_per_s: r.newTokens / secs, prefill_ms: r.prefillMs, decode_tokens_per_s: (r.newTokens - b) / (r.decodeMs / 1000), peak_bytes: peak, decode_path: r.decodePath ?? 'dynamic', batch_rows: r.batchRows ?? b, ms_per_step: r.steps ? r.decodeMs / r.steps : null });
  process.stderr.write(`ours  batch ${b}: ${(r.newTokens / secs).toFixed(1)} new tokens/s (prefill ${r.prefillMs.toFixed(0)} ms, decode ${r.decodeMs.toFixed(0)} ms, ${r.steps ? (r.decodeMs / r.steps).toFixed(2) : '-'} ms/step, path ${r.decodePath ?? 'dynamic'}, ${r.batchRows ?? b} rows)\n`);
}
model.dispose();
if (cuda) native().cudaEmptyCache();

let ref = null;
if (!a['no-ref']) {
  const dir = mkdtempSync(join(tmpdir(), 'pg-bench-'));
  const pf = join(dir, 'prompts.json');
  writeFileSync(pf, JSON.stringify({ batches: prompts }));
  const args = [join(root, 'scripts', 'bench', 'generate_ref.py'), '--model', modelDir, '--prompts', pf, '--device', a.device, '--dtype', dtypeName, '--new-tokens', String(newTokens)];
  if (a.threads) args.push('--threads', a.threads);
  process.stderr.write('bench: running transformers generate …\n');
  const py = spawnSync(python, args, { encoding: 'utf8', maxBuffer: 64 << 20, stdio: ['ignore', 'pipe', 'inherit'] });
  if (py.status === 0) ref = JSON.parse(py.stdout.trim().split('\n').pop());
  else process.stderr.write(`bench: transformers side failed (exit ${py.status})\n`);
}

const fmt = (x, d = 1) => (x === null || x === undefined ? '-' : x.toFixed(d));
const gib = (x) => (x ? (x / 2 ** 30).toFixed(1) : '-');
const head = `generate benchmark: ${a.shape === 'tiny' && !a.model ? 'tiny-tied' : a.model ?? a.shape} (${dtypeName}) on ${a.device}${cuda ? ` (${info.cudaDevices?.[0]?.name ?? 'GPU'})` : ` (${info.numThreads} threads)`}, prompt ${promptLen}, ${newTokens} new tokens, T=1`;
console.log(head);
console.log(['batch', 'ours tok/s', 'ours decode tok/s', 'ours prefill ms', 'ours peak GiB', 'transformers tok/s', 'hf peak GiB', 'ratio'].join(' | '));
for (const o of ours) {
  const h = ref?.results.find((r) => r.batch === o.batch);
  console.log([o.batch, fmt(o.tokens_per_s), fmt(o.decode_tokens_per_s), fmt(o.prefill_ms, 0), gib(o.peak_bytes), fmt(h?.tokens_per_s), gib(h?.peak_bytes), h ? `${(o.tokens_per_s / h.tokens_per_s).toFixed(2)}x` : '-'].join(' | '));
}
if (a.json) writeFileSync(a.json, JSON.stringify({ config: { ...a, modelDir, dtype: dtypeName }, libtorch: info.libtorchVersion, ours, transformers: ref }, null, 2) + '\n');
