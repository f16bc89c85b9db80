/**
 * Tiny random checkpoints for tests (the one maker, lib/model/checkpoints.ts: Qwen3, Qwen2.5,
 * Llama-3 architectures of scripts/make_tiny_qwen3.py, cached under `.cache/tiny-models/` in the
 * repository, gitignored), plus the Python reference (scripts/ref_qwen3.py) for parity tests.
 */
import { execFileSync } from 'node:child_process';
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { packageRoot, type JsTensor } from '../../lib/native.js';
import type { Qwen3Model } from '../../lib/model/qwen3.js';
import { python } from '../../lib/model/checkpoints.js';

export { tinyModel, python, type TinyName, type TinyOptions } from '../../lib/model/checkpoints.js';

/** The fingerprint written by the maker (sum over weights, float64). */
export function tinyFingerprint(dir: string): number {
  return (JSON.parse(readFileSync(join(dir, 'fingerprint.json'), 'utf8')) as { embed_abs_sum: number }).embed_abs_sum;
}

/** Output of one reference forward task. */
export interface RefForward {
  shape: number[];
  loss: number | null;
  logits: Float32Array;
  grads: Record<string, { data: Float32Array; shape: number[] }>;
}

/** Runs scripts/ref_qwen3.py on a job file (see the script's docstring). */
export function runReference(job: object, workDir: string): void {
  mkdirSync(workDir, { recursive: true });
  const jf = join(workDir, `job-${Date.now()}-${Math.random().toString(36).slice(2)}.json`);
  writeFileSync(jf, JSON.stringify(job));
  execFileSync(python, [join(packageRoot, 'scripts', 'ref_qwen3.py'), jf], {
    stdio: ['ignore', 'ignore', 'inherit'],
    env: { ...process.env, OMP_NUM_THREADS: '2' },
  });
}

/** Reads PREFIX.json / .logits.bin / .grads.bin written by a forward task. */
export function readRefForward(prefix: string): RefForward {
  const meta = JSON.parse(readFileSync(`${prefix}.json`, 'utf8')) as {
    shape: number[];
    loss: number | null;
    grads: Record<string, { offset: number; shape: number[] }>;
  };
  const lb = readFileSync(`${prefix}.logits.bin`);
  const logits = new Float32Array(lb.buffer.slice(lb.byteOffset, lb.byteOffset + lb.byteLength));
  const grads: RefForward['grads'] = {};
  if (Object.keys(meta.grads).length) {
    const gb = readFileSync(`${prefix}.grads.bin`);
    const all = new Float32Array(gb.buffer.slice(gb.byteOffset, gb.byteOffset + gb.byteLength));
    for (const [k, v] of Object.entries(meta.grads)) {
      const n = v.shape.reduce((a, b) => a * b, 1);
      grads[k] = { data: all.slice(v.offset, v.offset + n), shape: v.shape };
    }
  }
  return { shape: meta.shape, loss: meta.loss, logits, grads };
}

/** Right-padded batch used by the parity tests: [B=3, T=7], pad id 151643, labels -100 on pads. */
export function paddedBatch(): { ids: number[][]; mask: number[][]; labels: number[][] } {
  const rows = [
    [9707, 11, 1879, 0, 151644, 77091, 198],
    [151644, 872, 198, 3838, 374],
    [13, 151669 - 3, 42, 1000],
  ];
  const T = Math.max(...rows.map((r) => r.length));
  const ids = rows.map((r) => [...r, ...Array(T - r.length).fill(151643)]);
  const mask = rows.map((r) => [...Array(r.length).fill(1), ...Array(T - r.length).fill(0)]);
  const labels = ids.map((r, i) => r.map((t, j) => (mask[i][j] ? t : -100)));
  return { ids, mask, labels };
}

/** max |ours − ref| over the positions of `shape` = [B, T, V] logits where mask[b][t] is 1. */
export function maskedMax(ours: Float32Array, ref: Float32Array, shape: number[], mask: number[][]): number {
  const [B, T, V] = shape;
  let m = 0;
  for (let i = 0; i < B; i++)
    for (let j = 0; j < T; j++) {
      if (!mask[i][j]) continue;
      const o = (i * T + j) * V;
      for (let v = 0; v < V; v++) m = Math.max(m, Math.abs(ours[o + v] - ref[o + v]));
    }
  return m;
}

/** Relative error ‖a − b‖ / ‖b‖ (b the reference). */
export function relErr(a: Float32Array, b: Float32Array): number {
  let num = 0;
  let den = 0;
  for (let i = 0; i < a.length; i++) {
    num += (a[i] - b[i]) ** 2;
    den += b[i] ** 2;
  }
  return Math.sqrt(num) / Math.max(Math.sqrt(den), 1e-30);
}

/** Flattens number[][] into a JS tensor. */
export function int32(rows: number[][]): { data: Int32Array; shape: number[] } {
  return { data: Int32Array.from(rows.flat()), shape: [rows.length, rows[0].length] };
}

/**
 * Non-zero LoRA B matrices (uniform in ±std from a seeded LCG) for every B of `model`'s adapter, as
 * a record for `setLoraWeights`: a fresh adapter has B = 0, which would hide LoRA bugs.
 */
export function randomLoraB(model: Qwen3Model, seed: number, std = 0.05): Record<string, JsTensor<Float32Array>> {
  let s = seed >>> 0;
  const rnd = () => {
    s = (s * 1664525 + 1013904223) >>> 0;
    return s / 2 ** 32 - 0.5;
  };
  const out: Record<string, JsTensor<Float32Array>> = {};
  for (const [k, v] of Object.entries(model.loraWeights())) if (k.includes('lora_B')) out[k] = { data: v.data.map(() => rnd() * 2 * std), shape: v.shape };
  return out;
}
