#!/usr/bin/env node
/**
 * Data-parallel scaling of the trainer: the same `train` run (same flags, same
 * global batch) on 1 process and with `--nproc-per-node P` (one GPU each, NCCL), on a random-weight
 * Qwen3 of --shape; reads each run's metrics.jsonl (rank 0's, aggregated over ranks).
 * Reports per run: median step seconds without the checkpoint (first step dropped: warm-up), completion tokens/s, the
 * gradient all-reduce seconds per step (P > 1), and the speed-up, scaling efficiency
 * (speed-up / P) and the max |Δ| between the two final adapters (bf16 runs: not bit-equal; the
 * tolerance is discussed in docs/performance.md "Data parallel").
 *
 * Usage: node scripts/bench/dp_scaling.mjs --stage grpo --shape qwen3-1.7b --steps 3 --json out.json
 *        node scripts/bench/dp_scaling.mjs --device cpu --model .cache/tiny-models/default-tiny-tied-s0 --stage grpo --steps 2 --questions 2 --group 2 --new-tokens 8 --micro-batch 2 --lora-r 8   # CPU smoke (Gloo)
 * Options: --stage grpo|opsd|sft  --device cuda|cpu  --nproc 2  --shape  --layers N  --model DIR (instead of a random one)  --steps 3
 *          --questions 8 (GRPO questions / OPSD and SFT batch)  --group 8  --new-tokens 512
 *          --micro-batch 8  --lora-r 64  --recompute  --json FILE
 */
import { spawnSync } from 'node:child_process';
import { mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { randomModel } from './checkpoints.mjs';
import { benchArgs, deviceOf, dtypeOf, lib, median, root, writeJson } from './harness.mjs';

const a = benchArgs(
  {
    stage: { type: 'string', default: 'grpo' },
    nproc: { type: 'string', default: '2' },
    shape: { type: 'string', default: 'qwen3-1.7b' },
    layers: { type: 'string' },
    steps: { type: 'string', default: '3' },
    questions: { type: 'string', default: '8' },
    group: { type: 'string', default: '8' },
    'new-tokens': { type: 'string', default: '512' },
    'micro-batch': { type: 'string', default: '8' },
    'lora-r': { type: 'string', default: '64' },
    recompute: { type: 'boolean', default: false },
    model: { type: 'string' },
  },
  { device: 'cuda' },
);
const { cuda } = deviceOf(a.device);
const dtype = dtypeOf(a.dtype, cuda, ['float32', 'bfloat16']);
const P = Number(a.nproc);
if (a.model) a.shape = a.model.split('/').filter(Boolean).pop();
const modelDir = a.model ? resolve(a.model) : randomModel({ shape: a.shape, dtype, layers: a.layers, cuda });
const work = join(root, '.cache', 'dp-bench');
rmSync(work, { recursive: true, force: true });
mkdirSync(work, { recursive: true });
const Q = Number(a.questions),
  G = Number(a.group),
  N = Number(a['new-tokens']),
  MB = Number(a['micro-batch']),
  steps = Number(a.steps),
  r = Number(a['lora-r']);
const cfg = join(work, 'config.yaml');
writeFileSync(
  cfg,
  [
    `stages: [${a.stage}]`,
    `device: ${cuda ? 'cuda' : 'cpu'}`,
    `dtype: ${dtype}`,
    'seed: 11',
    `lora: {r: ${r}, alpha: ${2 * r}, dropout: 0}`,
    `sampling: {maxNewTokens: ${N}, temperature: 1.1, topP: 0.95, topK: 20}`,
    `sft: {steps: ${steps}, lr: 1.0e-5, batchSize: ${Q}}`,
    `opsd: {steps: ${steps}, lr: 5.0e-6, batchSize: ${Q}, microBatch: ${Math.max(1, Math.floor(MB / 2))}}`,
    `grpo: {steps: ${steps}, lr: 1.0e-5, questionsPerStep: ${Q}, groupSize: ${G}, microBatch: ${MB}}`,
    'validation: {validateEvery: 0, items: 0}',
    'checkpoint: {every: 0}',
    `memory: {recompute: ${a.recompute}, emptyCache: false}`,
    '',
  ].join('\n'),
);
const cli = join(root, 'dist', 'bin', 'papergym-native.js');

function run(name, extra) {
  const out = join(work, name);
  const t0 = Date.now();
  const res = spawnSync(process.execPath, [cli, 'train', '--config', cfg, '--model', modelDir, '--out', out, ...extra], {
    encoding: 'utf8',
    env: { ...process.env, NCCL_NVLS_ENABLE: '0' },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  if (res.status !== 0) {
    process.stderr.write(res.stderr.slice(-6000));
    throw new Error(`${name}: train exited ${res.status}`);
  }
  const recs = readFileSync(join(out, 'metrics.jsonl'), 'utf8')
    .trim()
    .split('\n')
    .map((l) => JSON.parse(l))
    .filter((m) => typeof m.stepSeconds === 'number');
  const timed = recs.length > 1 ? recs.slice(1) : recs;
  const med = median;
  // The step without the checkpoint after it (the final one, rank 0 only; stepSeconds includes it).
  const compute = (m) => m.stepSeconds - (m.phaseSeconds?.checkpoint ?? 0);
  return {
    name,
    processes: extra.length ? P : 1,
    wallSeconds: (Date.now() - t0) / 1000,
    steps: recs.length,
    stepSeconds: med(timed.map(compute)),
    completionTokens: med(timed.map((m) => m.completionTokens)),
    tokensPerSecond: med(timed.map((m) => m.completionTokens / compute(m))),
    allReduceSeconds: med(timed.map((m) => m.allReduceSeconds ?? 0)),
    allReduceBytes: timed[0]?.allReduceBytes ?? 0,
    stepSecondsPerRank: timed.map((m) => m.stepSecondsPerRank ?? [m.stepSeconds]),
    out,
  };
}

const one = run('one', []);
const many = run(`dp${P}`, ['--nproc-per-node', String(P), '--master-port', String(29500 + (process.pid % 1000))]);
const { native } = await lib('native.js');
const load = (d) => native().loadSafetensors(join(d, 'final', 'adapter_model.safetensors')).tensors;
const A = load(one.out),
  B = load(many.out);
let maxAbs = 0,
  maxRef = 0;
for (const k of Object.keys(A))
  for (let i = 0; i < A[k].data.length; i++) {
    maxAbs = Math.max(maxAbs, Math.abs(A[k].data[i] - B[k].data[i]));
    maxRef = Math.max(maxRef, Math.abs(A[k].data[i]));
  }
const speedup = one.stepSeconds / many.stepSeconds;
const report = {
  stage: a.stage,
  shape: a.shape,
  device: a.device,
  dtype,
  processes: P,
  questions: Q,
  group: G,
  newTokens: N,
  loraR: r,
  one,
  many,
  speedup,
  efficiency: speedup / P,
  adapterMaxAbsDiff: maxAbs,
  adapterMaxAbs: maxRef,
};
console.log(
  `${a.stage} ${a.shape} ${dtype}: 1 process ${one.stepSeconds.toFixed(2)} s/step (${one.tokensPerSecond.toFixed(0)} tok/s); ${P} processes ${many.stepSeconds.toFixed(2)} s/step (${many.tokensPerSecond.toFixed(0)} tok/s), all-reduce ${(many.allReduceSeconds * 1000).toFixed(1)} ms/step of ${(many.allReduceBytes / 2 ** 20).toFixed(1)} MiB; speed-up ${speedup.toFixed(2)}x, efficiency ${((100 * speedup) / P).toFixed(1)}%; adapter max |diff| ${maxAbs.toExponential(2)} (max |w| ${maxRef.toExponential(2)})`,
);
writeJson(a.json, report);
