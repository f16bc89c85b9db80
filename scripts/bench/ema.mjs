#!/usr/bin/env node
/**
 * The EMA teacher update and the snapshot checkpoint files: the native path (Model.emaUpdate in
 * place on the device; saveSnapshot on a worker thread) against the previous JS path
 * (Model.loraWeights() → s ← d·s + (1 − d)·a on JS numbers → setLoraWeights + snapshotAdapter +
 * setLoraWeights back; the snapshot written with saveSafetensors from a JS copy), on a
 * random-weight checkpoint of a real shape with a LoRA of rank r on all seven projections.
 *
 * Reports per EMA update: bytes that cross the JS boundary (from the LoRA shapes: the old path
 * copies the active adapter out once and two adapters in) and wall ms (median of --repeat after
 * one warm-up, device synchronised); per snapshot write: wall ms and the longest gap between
 * event-loop ticks (a 1 ms interval timer) while it runs.
 *
 * Usage: node scripts/bench/ema.mjs --device cuda --shape qwen3-8b --r 64 --json out.json
 *        node scripts/bench/ema.mjs --shape qwen3-0.6b --layers 2 --r 16        # CPU smoke
 * Options: --device  --shape (default qwen3-8b)  --layers N  --model DIR  --dtype bf16|fp32
 *          --r 64  --repeat 5  --no-js (skip the old JS path, e.g. when host memory is short)
 *          --json FILE
 */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { parseArgs } from 'node:util';
import { randomModel, root } from './checkpoints.mjs';

const { values: a } = parseArgs({
  options: {
    device: { type: 'string', default: 'cpu' },
    shape: { type: 'string', default: 'qwen3-8b' },
    layers: { type: 'string' },
    model: { type: 'string' },
    dtype: { type: 'string' },
    r: { type: 'string', default: '64' },
    repeat: { type: 'string', default: '5' },
    'no-js': { type: 'boolean', default: false },
    json: { type: 'string' },
  },
});
const cuda = a.device.startsWith('cuda');
const dtype = { fp32: 'float32', float32: 'float32', bf16: 'bfloat16', bfloat16: 'bfloat16' }[a.dtype ?? (cuda ? 'bf16' : 'fp32')];
const modelDir = a.model ? resolve(a.model) : randomModel({ shape: a.shape, dtype, layers: a.layers, cuda });
const R = Number(a.r),
  REPEAT = Number(a.repeat),
  DECAY = 0.99;

const imp = (p) => import(join(root, 'dist', 'lib', p));
const { native } = await imp('native.js');
const { loadModel } = await imp('model/qwen3.js');

const model = await loadModel(modelDir, { device: a.device, dtype });
model.addLora({ r: R, alpha: 2 * R, seed: 0 });
model.snapshotAdapter('ema');
const names = model.loraParameterNames();
const cfg = model.config;
const loraElems = (() => {
  // A [r, in] + B [out, r] per module, from the config (no copy to JS needed to count them).
  const H = cfg.hidden_size,
    I = cfg.intermediate_size,
    hd = cfg.head_dim ?? H / cfg.num_attention_heads;
  const q = cfg.num_attention_heads * hd,
    kv = cfg.num_key_value_heads * hd;
  const dims = [
    [H, q],
    [H, kv],
    [H, kv],
    [q, H],
    [H, I],
    [H, I],
    [I, H],
  ];
  return cfg.num_hidden_layers * dims.reduce((s, [i, o]) => s + R * i + o * R, 0);
})();
const loraBytes = loraElems * 4;
process.stderr.write(`bench: ${names.length} LoRA tensors, ${loraElems} elements (${(loraBytes / 2 ** 30).toFixed(3)} GiB fp32)\n`);

const median = (xs) => [...xs].sort((x, y) => x - y)[Math.floor(xs.length / 2)];
async function timeIt(fn) {
  const out = [];
  for (let i = 0; i <= REPEAT; i++) {
    model.synchronize();
    const t0 = performance.now();
    await fn();
    model.synchronize();
    if (i > 0) out.push(performance.now() - t0);
  }
  return median(out);
}
/** Runs fn once while a 1 ms interval timer ticks; returns [ms, longest gap between ticks in ms]. */
async function stall(fn) {
  let last = performance.now(),
    gap = 0;
  const t = setInterval(() => {
    const now = performance.now();
    gap = Math.max(gap, now - last);
    last = now;
  }, 1);
  const t0 = performance.now();
  await fn();
  const ms = performance.now() - t0;
  clearInterval(t);
  return [ms, Math.max(gap, performance.now() - last)];
}

const tmp = mkdtempSync(join(tmpdir(), 'pg-bench-ema-'));
const result = { device: a.device, dtype, shape: a.model ? modelDir : a.shape, layers: cfg.num_hidden_layers, r: R, lora_elements: loraElems };
try {
  // Native: in place on the device, nothing crosses to JS.
  result.native_ema_ms = await timeIt(() => model.raw.emaUpdate('ema', DECAY));
  result.native_ema_js_bytes = 0;
  [result.native_snapshot_write_ms, result.native_snapshot_write_max_loop_gap_ms] = await stall(() =>
    model.raw.saveSnapshot('ema', join(tmp, 'native.safetensors')),
  );
  if (!a['no-js']) {
    // The previous implementation (lib/train/native-backend.ts before the state stayed native).
    let prev = model.loraWeights();
    const counted = Object.values(prev).reduce((n, t) => n + t.data.length, 0);
    if (counted !== loraElems) throw new Error(`LoRA element count from the config (${loraElems}) differs from the adapter's (${counted})`);
    result.js_ema_ms = await timeIt(() => {
      const active = model.loraWeights();
      const next = {};
      for (const [k, t] of Object.entries(active)) {
        const s = prev[k];
        const o = new Float32Array(t.data.length);
        for (let i = 0; i < o.length; i++) o[i] = DECAY * s.data[i] + (1 - DECAY) * t.data[i];
        next[k] = { data: o, shape: t.shape };
      }
      model.setLoraWeights(next);
      model.snapshotAdapter('ema');
      model.setLoraWeights(active);
      prev = next;
    });
    result.js_ema_js_bytes = 3 * loraBytes; // loraWeights() out; setLoraWeights(next) and (active) in
    [result.js_snapshot_write_ms, result.js_snapshot_write_max_loop_gap_ms] = await stall(async () =>
      native().saveSafetensors(join(tmp, 'js.safetensors'), prev, { snapshot: 'ema', format: 'pt' }),
    );
  }
} finally {
  rmSync(tmp, { recursive: true, force: true });
  model.dispose();
}
process.stdout.write(JSON.stringify(result, null, 2) + '\n');
if (a.json) writeFileSync(a.json, JSON.stringify(result, null, 2) + '\n');
