#!/usr/bin/env node
/**
 * LoRA train-step benchmark: one optimizer step = forward + backward of a
 * next-token cross-entropy over every token + grad-norm clip (1.0) + AdamW, LoRA r 64 / alpha 128
 * on all seven projections, random-weight Qwen3 shapes. Ours (native: Model.crossEntropyBackward,
 * chunked over tokens so no [T, V] logits for all tokens at once, + AdamW) against transformers +
 * peft (SDPA attention, torch.optim.AdamW; scripts/bench/train_step_ref.py) on the same
 * checkpoint, the same token ids and the same device, each side in its own child process (clean
 * allocator, clean peak). Prints tokens/s, peak memory, ratios ours/ref and MFU.
 *
 * MFU = 4·N·(tokens/s) / peak, N = base parameters (embedding counted once when tied, lm_head
 * when untied; LoRA excluded), peak = 805 TFLOP/s (bf16 8192³ matmul measured on the H200,
 * docs/references.md "The H200 machine"). 4·N (not 6·N): the frozen base needs forward (2N) and the input
 * gradient (2N) but no weight gradient.
 * Peak memory = the allocator's peak allocated bytes over the timed steps (after warm-up, so it
 * includes weights, LoRA, AdamW state and activations): native().cudaMemory().peakAllocatedBytes
 * on our side, torch.cuda.max_memory_allocated on the reference side. On CPU: the process max RSS.
 * Ops per step: leaf ATen ops of one extra untimed step (native().opCountStart/Stop; about one
 * kernel launch each on CUDA, views included).
 * Timing: device synchronised before and after `--iters` steps (bounded; no unbounded loops),
 * after `--warmup` steps.
 *
 * Usage (after `npm run build:ts` and the native build; PAPERGYM_NATIVE_ADDON selects the addon):
 *   node scripts/bench/train_step.mjs --device cuda --shape qwen3-1.7b,qwen3-8b --json out.json
 *   node scripts/bench/train_step.mjs --shape qwen3-0.6b --layers 1 --seq 64 --batch 1   # CPU smoke
 * Options: --device cpu|cuda[:N]  --shape S[,S...] (qwen3-0.6b|qwen3-1.7b|qwen3-4b|qwen3-8b;
 *   default qwen3-1.7b,qwen3-8b)  --dtype bf16|fp32 (default bf16 on CUDA, fp32 on CPU)
 *   --seq T (default 2048)  --batch B (default 4 for ≤ 4B shapes, 2 for 8B)  --layers N (fewer
 *   layers; smoke tests)  --iters K (default 5 CUDA / 1 CPU)  --warmup W (default 2 / 1)
 *   --recompute (also measure ours with activation recomputation and the reference with
 *   gradient checkpointing)  --lora-bf16 (also measure ours with the LoRA branch in the model
 *   dtype, Model.setLoraFloat32Branch(false); default is peft's float32 branch, as the reference)
 *   --recompute-only (only the recompute / gradient-checkpointing rows)
 *   With --lora-bf16 the reference also runs under torch.autocast(bf16) (train_step_ref.py
 *   --autocast: how transformers' Trainer / TRL run with bf16=True, LoRA matmuls in bf16), and the
 *   bf16-branch row is compared with that reference ("ref" column), the float32 rows with plain peft.
 *   --no-ref  --model DIR (existing checkpoint, single shape)
 *   --json FILE (rewritten after every row)  --timeout S (per child process, default 420)
 * Random checkpoints: scripts/make_random_qwen3.py into .cache/random-models/ (made once).
 */
import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { randomModel } from './checkpoints.mjs';
import { benchArgs, deviceOf, dtypeOf, fmt, fmtRatio, gb, lib, printTable, ratio, run, runChild, runPython, tokenIds, writeJson } from './harness.mjs';

const PEAK_FLOPS = 805e12;

/** Base parameter count N from config.json (tied embedding counted once). */
export function baseParams(c) {
  const H = c.hidden_size,
    I = c.intermediate_size,
    hd = c.head_dim,
    qd = c.num_attention_heads * hd,
    kvd = c.num_key_value_heads * hd;
  const layer = H * (qd + 2 * kvd) + qd * H + 3 * H * I + 2 * H + 2 * hd;
  return c.vocab_size * H * (c.tie_word_embeddings ? 1 : 2) + c.num_hidden_layers * layer + H;
}

async function child(spec) {
  const { loadModel } = await lib('model/qwen3.js');
  const { AdamW } = await lib('train/optim.js');
  const { native } = await lib('native.js');
  const ids2d = JSON.parse(readFileSync(spec.idsFile, 'utf8'));
  const B = ids2d.length,
    T = ids2d[0].length;
  const inputIds = { data: Int32Array.from(ids2d.flat()), shape: [B, T] };
  const { cuda, index: dev } = deviceOf(spec.device);
  const model = await loadModel(spec.modelDir, { device: spec.device, dtype: spec.dtype });
  model.addLora({ r: 64, alpha: 128, dropout: 0, seed: 0 });
  model.setGradientCheckpointing(spec.recompute);
  model.setLoraFloat32Branch(!spec.loraModelDtype);
  const opt = new AdamW(model, { lr: 1e-5, weightDecay: 0 });
  const step = async () => {
    const { loss } = await model.crossEntropyBackward({ inputIds, labels: inputIds });
    const r = opt.step({ maxGradNorm: 1.0 });
    model.zeroGrad();
    return { loss, gradNorm: r.gradNorm };
  };
  let last;
  for (let i = 0; i < spec.warmup; i++) last = await step();
  model.synchronize();
  if (cuda) native().cudaResetPeak(dev);
  const t0 = performance.now();
  for (let i = 0; i < spec.iters; i++) last = await step();
  model.synchronize();
  const secs = (performance.now() - t0) / 1000 / spec.iters;
  const mem = cuda ? native().cudaMemory(dev) : null;
  // One more (untimed) step with a leaf-op counter: ATen ops per step, about one kernel launch each
  // on CUDA — the launch overhead the timed steps pay.
  native().opCountStart();
  await step();
  model.synchronize();
  const counted = native().opCountStop();
  const topOps = Object.entries(counted.ops)
    .sort((x, y) => y[1] - x[1])
    .slice(0, 80);
  const out = {
    ops_per_step: counted.total,
    top_ops: Object.fromEntries(topOps),
    seconds_per_step: secs,
    tokens_per_s: (B * T) / secs,
    loss: last.loss,
    grad_norm: last.gradNorm,
    peak_bytes: mem ? mem.peakAllocatedBytes : process.resourceUsage().maxRSS * 1024,
    peak_reserved_bytes: mem ? mem.peakReservedBytes : null,
    peak_kind: mem ? 'cuda-allocated' : 'max-rss',
  };
  model.dispose();
  process.stdout.write(JSON.stringify(out) + '\n');
}

async function main() {
  const a = benchArgs({
    shape: { type: 'string', default: 'qwen3-1.7b,qwen3-8b' },
    seq: { type: 'string', default: '2048' },
    batch: { type: 'string' },
    layers: { type: 'string' },
    iters: { type: 'string' },
    warmup: { type: 'string' },
    recompute: { type: 'boolean', default: false },
    'recompute-only': { type: 'boolean', default: false },
    'no-ref': { type: 'boolean', default: false },
    'lora-bf16': { type: 'boolean', default: false },
    model: { type: 'string' },
    timeout: { type: 'string', default: '420' },
  });
  if (a.child) return child(JSON.parse(a.child));
  const { cuda } = deviceOf(a.device);
  const dtype = dtypeOf(a.dtype, cuda, ['float32', 'bfloat16']);
  const iters = Number(a.iters ?? (cuda ? 5 : 1));
  const warmup = Number(a.warmup ?? (cuda ? 2 : 1));
  const timeoutMs = Number(a.timeout) * 1000;
  const shapes = a.shape.split(',');
  const work = mkdtempSync(join(tmpdir(), 'pg-train-bench-'));
  const rows = [];
  for (const shape of shapes) {
    const modelDir = a.model ? resolve(a.model) : randomModel({ shape, dtype, layers: a.layers, cuda });
    const cfg = JSON.parse(readFileSync(join(modelDir, 'config.json'), 'utf8'));
    const B = Number(a.batch ?? (cfg.hidden_size >= 4096 ? 2 : 4));
    const T = Number(a.seq);
    const idsFile = join(work, `ids-${B}x${T}.json`);
    writeFileSync(idsFile, JSON.stringify(tokenIds(B, T, 1)));
    const N = baseParams(cfg);
    const variants = a['recompute-only'] ? [true] : [false, ...(a.recompute ? [true] : [])];
    for (const recompute of variants) {
      const base = `${shape}${a.layers ? ` (${cfg.num_hidden_layers} layers)` : ''}${recompute ? ' +recompute' : ''}`;
      const runRef = (autocast) => {
        if (a['no-ref']) return null;
        process.stderr.write(`bench: transformers+peft ${base}${autocast ? ' (autocast bf16)' : ''} …\n`);
        const args = [
          '--model',
          modelDir,
          '--ids',
          idsFile,
          '--device',
          a.device,
          '--dtype',
          dtype,
          '--iters',
          String(iters),
          '--warmup',
          String(warmup),
          ...(recompute ? ['--grad-ckpt'] : []),
          ...(autocast ? ['--autocast'] : []),
        ];
        return runPython('train_step_ref.py', args, { timeoutMs });
      };
      const refPlain = runRef(false);
      for (const loraModelDtype of [false, ...(a['lora-bf16'] && dtype !== 'float32' ? [true] : [])]) {
        const ref = loraModelDtype ? runRef(true) : refPlain;
        const label = `${base}${loraModelDtype ? ' +bf16 LoRA branch' : ''}`;
        process.stderr.write(`bench: ours ${label}, ${B} x ${T} …\n`);
        const spec = { modelDir, device: a.device, dtype, idsFile, iters, warmup, recompute, loraModelDtype };
        const ours = runChild(import.meta.url, spec, { timeoutMs, inheritStderr: true });
        const mfu = (x) => (x && x.tokens_per_s ? (4 * N * x.tokens_per_s) / PEAK_FLOPS : null);
        rows.push({
          shape,
          label,
          layers: cfg.num_hidden_layers,
          batch: B,
          seq: T,
          recompute,
          lora_branch: loraModelDtype ? dtype : 'float32',
          base_params: N,
          ours,
          ref,
          ref_kind: loraModelDtype ? 'peft + torch.autocast(bf16)' : 'peft (float32 LoRA branch)',
          mfu_ours: mfu(ours),
          mfu_ref: mfu(ref),
          speed_ratio: ratio(ours?.tokens_per_s, ref?.tokens_per_s),
          mem_ratio: ratio(ours?.peak_bytes, ref?.peak_bytes),
        });
        // Partial results survive a killed device call: the JSON is rewritten after every row.
        const r = rows[rows.length - 1];
        process.stderr.write(
          `bench: ${label}: ours ${r.ours?.tokens_per_s?.toFixed(0) ?? r.ours?.error} tok/s, ${r.ours?.peak_bytes ? (r.ours.peak_bytes / 1e9).toFixed(1) : '-'} GB; ref ${r.ref?.tokens_per_s?.toFixed(0) ?? r.ref?.error ?? '-'} tok/s, ${r.ref?.peak_bytes ? (r.ref.peak_bytes / 1e9).toFixed(1) : '-'} GB\n`,
        );
        writeJson(a.json, { config: { ...a, dtype, iters, warmup, peak_flops: PEAK_FLOPS }, partial: true, rows });
      }
    }
  }
  const f = fmt;
  const pct = (x) => (x === null ? '-' : `${(100 * x).toFixed(1)}%`);
  console.log(
    `train-step benchmark: LoRA r 64 / alpha 128, all 7 projections, ${dtype} on ${a.device}; CE over all tokens + clip 1.0 + AdamW; ${warmup} warm-up + ${iters} timed steps; MFU at 4·N FLOP/token vs ${PEAK_FLOPS / 1e12} TFLOP/s`,
  );
  printTable(
    ['shape', 'B x T', 'ours tok/s', 'ref tok/s', 'speed ours/ref', 'ours peak GB', 'ref peak GB', 'mem ours/ref', 'MFU ours', 'MFU ref', 'ours ATen ops/step'],
    rows.map((r) => [
      `${r.label} (ref: ${r.ref_kind})`,
      `${r.batch} x ${r.seq}`,
      f(r.ours?.tokens_per_s, 0),
      f(r.ref?.tokens_per_s, 0),
      fmtRatio(r.speed_ratio),
      gb(r.ours?.peak_bytes || null),
      gb(r.ref?.peak_bytes || null),
      fmtRatio(r.mem_ratio),
      pct(r.mfu_ours),
      pct(r.mfu_ref),
      r.ours?.ops_per_step ?? '-',
    ]),
  );
  for (const r of rows)
    for (const [side, x] of [
      ['ours', r.ours],
      ['ref', r.ref],
    ])
      if (x?.error) console.log(`  ${r.label}: ${side} failed: ${x.error}`);
  if (!cuda) console.log('(CPU: peak = process max RSS; MFU is against the H200 bf16 peak and meaningless here)');
  writeJson(a.json, { config: { ...a, dtype, iters, warmup, peak_flops: PEAK_FLOPS }, rows });
}

run(main);
