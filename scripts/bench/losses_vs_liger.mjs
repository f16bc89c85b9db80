#!/usr/bin/env node
/**
 * Fused JSD and GRPO: ours vs Liger-Kernel, in one device call.
 *
 * Ours: the native fused chunked losses behind lib/train/losses.ts jsdLoss / grpoLoss (the
 * addon's `_benchLoss`, which draws the inputs on the device so no host transfer is timed):
 * student/policy hidden [T, H] (grad), teacher hidden [T, H], frozen lm_head weight [V, H] =
 * randn/√H, in --dtype; JSD β 0.5, T 1; GRPO one sequence of T tokens, old = ref logprobs −5,
 * advantage 1, β_KL 0.04, ε 0.2, dapo aggregation. Time = median fwd+bwd (device synchronised
 * around each iteration) over --iters after one warm-up; each measurement in a fresh child
 * process. Peak memory over the inputs = peakAllocated(run) − bytes of the inputs (computed from
 * the shapes); also the setup peak (input creation alone) for reference.
 * Liger: scripts/bench/liger.py (LigerFusedLinearJSDLoss with weight_hard_loss 0, weight_soft_loss
 * 1; LigerFusedLinearGRPOLoss, loss_type dapo), same shapes, dtype, generator recipe and
 * definitions. If liger_kernel is not importable the script says so and prints ours alone.
 *
 * Usage: node scripts/bench/losses_vs_liger.mjs --device cuda --json out.json
 *        node scripts/bench/losses_vs_liger.mjs --device cpu --T 256 --V 4096 --H 64   # smoke
 * Options: --T 8192 --V 151936 --H 2048 --dtype bf16|fp32 (default bf16 on CUDA) --kinds jsd,grpo
 *          --iters 5 --chunk 0 (auto) --no-liger --timeout S (per child, default 300)
 * Goal: our memory ≤ Liger's, our time ≤ 1.2 × Liger's.
 */
import { benchArgs, deviceOf, dtypeOf, fmt, fmtRatio, gib, lib, median, ratio, peakBytes, resetPeak, run, runChild, runPython, writeJson } from './harness.mjs';

async function child(spec) {
  const { native } = await lib('native.js');
  const { benchLoss } = await lib('bench.js');
  const addon = native();
  resetPeak(addon, spec.device, { emptyCache: true });
  const r = await benchLoss({
    kind: spec.kind,
    T: spec.T,
    V: spec.V,
    H: spec.H,
    device: spec.device,
    dtype: spec.dtype,
    fused: true,
    chunkSize: spec.chunk,
    iters: spec.iters + 1,
    setupOnly: spec.setupOnly,
  });
  const ms = median(r.ms.slice(1));
  process.stdout.write(JSON.stringify({ peak: peakBytes(addon, spec.device), ms: Number.isNaN(ms) ? null : ms, loss: r.loss }) + '\n');
}

async function main() {
  const a = benchArgs(
    {
      T: { type: 'string', default: '8192' },
      V: { type: 'string', default: '151936' },
      H: { type: 'string', default: '2048' },
      kinds: { type: 'string', default: 'jsd,grpo' },
      iters: { type: 'string', default: '5' },
      chunk: { type: 'string', default: '0' },
      'no-liger': { type: 'boolean', default: false },
      timeout: { type: 'string', default: '300' },
    },
    { device: 'cuda' },
  );
  if (a.child) return child(JSON.parse(a.child));
  const { cuda } = deviceOf(a.device);
  const dtype = dtypeOf(a.dtype, cuda, ['float32', 'bfloat16']);
  const T = Number(a.T),
    V = Number(a.V),
    H = Number(a.H),
    iters = Number(a.iters),
    chunk = Number(a.chunk);
  const timeout = Number(a.timeout) * 1000;
  const esize = dtype === 'float32' ? 4 : 2;
  // _benchLoss inputs: w [V,H], h [T,H], teacher h [T,H] in dtype; tokens int64 [T]; old, mask fp32 [T]; adv [1].
  const inputBytes = (V * H + 2 * T * H) * esize + T * 8 + 2 * T * 4 + 4;
  const measure = (spec) => runChild(import.meta.url, spec, { timeoutMs: timeout });
  const ours = [];
  for (const kind of a.kinds.split(',')) {
    const base = { kind, T, V, H, device: a.device, dtype, chunk, iters };
    process.stderr.write(`bench: ours ${kind} …\n`);
    const setup = measure({ ...base, setupOnly: true, iters: 0 });
    const run = measure({ ...base, setupOnly: false });
    ours.push({
      kind,
      ms: run.ms ?? null,
      total_peak_bytes: run.peak ?? null,
      extra_peak_bytes: run.peak ? run.peak - inputBytes : null,
      setup_peak_bytes: setup.peak ?? null,
      loss: run.loss ?? null,
      error: run.error ?? setup.error ?? null,
    });
  }
  let liger = null;
  if (!a['no-liger']) {
    process.stderr.write('bench: Liger-Kernel …\n');
    liger = runPython('liger.py', ['--T', a.T, '--V', a.V, '--H', a.H, '--dtype', dtype, '--device', a.device, '--kinds', a.kinds, '--iters', a.iters], {
      timeoutMs: timeout * 2,
    });
    liger = { liger: null, rows: [], ...liger };
  }
  const f = fmt;
  console.log(
    `fused losses vs Liger-Kernel: T ${T}, V ${V}, H ${H}, ${dtype} on ${a.device}; fwd+bwd (grad of hidden only), median of ${iters}; memory = peak allocated over the inputs`,
  );
  if (liger?.error) console.log(`LIGER NOT MEASURED: ${liger.error}`);
  else if (liger) console.log(`liger-kernel ${liger.liger}, torch ${liger.torch}`);
  console.log('| loss | ours ms | Liger ms | time ours/Liger | ours extra GiB | Liger extra GiB | mem ours/Liger | ours loss | Liger loss |');
  console.log('| --- | --- | --- | --- | --- | --- | --- | --- | --- |');
  const rows = [];
  for (const o of ours) {
    const l = liger?.rows?.find((r) => r.kind === o.kind) ?? null;
    const row = { ...o, liger: l, time_ratio: ratio(o.ms, l?.ms), mem_ratio: ratio(o.extra_peak_bytes, l?.extra_peak_bytes) };
    rows.push(row);
    console.log(
      `| ${o.kind} | ${f(o.ms)} | ${f(l?.ms)} | ${fmtRatio(row.time_ratio)} | ${gib(o.extra_peak_bytes)} | ${gib(l?.extra_peak_bytes)} | ${fmtRatio(row.mem_ratio)} | ${f(o.loss, 4)} | ${f(l?.loss, 4)} |`,
    );
    if (o.error) console.log(`  ours ${o.kind} failed: ${o.error}`);
    if (l?.error) console.log(`  Liger ${o.kind} failed: ${l.error}`);
  }
  if (!cuda) console.log('(CPU: memory = process max RSS, not comparable with the CUDA definition)');
  writeJson(a.json, { config: { T, V, H, dtype, device: a.device, iters, chunk, inputBytes }, ours: rows, liger });
}

run(main);
