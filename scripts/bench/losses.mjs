#!/usr/bin/env node
/**
 * Benchmark of the fused chunked losses against their unfused references (docs/design.md §5):
 * peak memory and time of forward + backward (dHidden) for JSD and GRPO.
 *
 *   node scripts/bench/losses.mjs                       # CPU defaults: T 256,1024  V 151936  H 256  fp32
 *   node scripts/bench/losses.mjs --device cuda         # CUDA defaults: T 1024,4096,8192  V 151936  H 2048  bf16
 *   options: --T 1024,4096 --V 151936 --H 2048 --dtype float32|bf16 --iters 3 --chunk 0 --kinds jsd,grpo
 *            --json out.json
 *
 * Each measurement runs in a fresh child process (clean allocator / RSS high-water mark). Peak
 * memory is the extra over the inputs: peak(run) − peak(inputs only), from the CUDA caching
 * allocator's peak allocated bytes on CUDA (needs a build with CUDA headers) and from the process
 * max RSS on CPU. Time is the median over `iters` runs after one warm-up run.
 * Needs the TypeScript build (dist/) and the addon (PAPERGYM_NATIVE_ADDON or build/Release).
 */
import { benchArgs, deviceOf, dtypeOf, lib, median, peakBytes, resetPeak, run, runChild, writeJson } from './harness.mjs';

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
    fused: spec.fused,
    chunkSize: spec.chunk,
    iters: spec.iters + 1,
    setupOnly: spec.setupOnly,
  });
  process.stdout.write(JSON.stringify({ peak: peakBytes(addon, spec.device), ms: median(r.ms.slice(1)), loss: r.loss }));
}

const measure = (spec) => runChild(import.meta.url, spec);

const fmtB = (b) => (Number.isFinite(b) ? `${(b / 2 ** 30).toFixed(2)} GiB` : 'n/a');
const fmtMs = (m) => (Number.isFinite(m) ? `${m.toFixed(1)} ms` : 'n/a');

async function main() {
  const a = benchArgs({
    T: { type: 'string' },
    V: { type: 'string' },
    H: { type: 'string' },
    iters: { type: 'string' },
    chunk: { type: 'string' },
    kinds: { type: 'string' },
  });
  if (a.child) return child(JSON.parse(a.child));
  const device = a.device;
  const { cuda } = deviceOf(device);
  const Ts = (a.T ?? (cuda ? '1024,4096,8192' : '256,1024')).split(',').map(Number);
  const V = Number(a.V ?? 151936);
  const H = Number(a.H ?? (cuda ? 2048 : 256));
  const dtype = dtypeOf(a.dtype, cuda);
  const iters = Number(a.iters ?? (cuda ? 5 : 2));
  const chunk = Number(a.chunk ?? 0);
  const kinds = (a.kinds ?? 'jsd,grpo').split(',');
  console.log(`losses benchmark: device ${device}, V ${V}, H ${H}, dtype ${dtype}, chunk ${chunk || 'auto'}, iters ${iters} (+1 warm-up)`);
  const rows = [];
  for (const kind of kinds) {
    for (const T of Ts) {
      const base = { kind, T, V, H, device, dtype, chunk, iters };
      const setup = measure({ ...base, fused: true, setupOnly: true, iters: 0 });
      const f = measure({ ...base, fused: true, setupOnly: false });
      const u = measure({ ...base, fused: false, setupOnly: false });
      const extra = (x) => (x.error ? NaN : x.peak - (setup.peak ?? 0));
      const row = {
        kind,
        T,
        V,
        H,
        dtype,
        fusedPeakBytes: extra(f),
        unfusedPeakBytes: extra(u),
        fusedMs: f.ms ?? NaN,
        unfusedMs: u.ms ?? NaN,
        lossFused: f.loss,
        lossUnfused: u.loss,
        errors: [f.error, u.error].filter(Boolean),
      };
      row.memRatio = row.unfusedPeakBytes / row.fusedPeakBytes;
      row.timeRatio = row.fusedMs / row.unfusedMs;
      rows.push(row);
      console.log(
        `${kind.padEnd(5)} T ${String(T).padStart(5)} | fused ${fmtB(row.fusedPeakBytes).padStart(10)} ${fmtMs(row.fusedMs).padStart(10)} | unfused ${fmtB(row.unfusedPeakBytes).padStart(10)} ${fmtMs(row.unfusedMs).padStart(10)} | mem unfused/fused ${row.memRatio.toFixed(1).padStart(5)}x | time fused/unfused ${row.timeRatio.toFixed(2)} | |Δloss| ${Math.abs(row.lossFused - row.lossUnfused).toExponential(1)}${row.errors.length ? ' | ' + row.errors.join('; ') : ''}`,
      );
    }
  }
  writeJson(a.json, { device, V, H, dtype, chunk, iters, rows });
}

run(main);
