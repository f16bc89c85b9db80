#!/usr/bin/env node
/**
 * The memory plan against the device: runs the `train` command as a user would —
 * `train --preset qwen3-X --model <random weights, real shapes> --device cuda --opsd-steps 1
 * --grpo-steps 1 [--max-memory GB]` on the embedded dataset — and reports, per step, the measured
 * peak allocated bytes of each phase (metrics.jsonl: peakRolloutBytes, peakReferenceBytes,
 * peakBackwardBytes, peakOptimizerBytes; the local judge runs inside the rollout phase), the
 * reserved bytes after the step and the step seconds, next to the plan's expected peaks
 * (config.json memoryPlan). One model per call; the random checkpoint is made once under
 * .cache/random-models (scripts/make_random_qwen3.py, seed 0, bf16).
 *
 * Usage: node scripts/bench/memplan.mjs --shape qwen3-8b --max-memory 80 --json out.json
 *        node scripts/bench/memplan.mjs --shape qwen3-8b --json uncapped.json   # plan from the device's memory
 * Options: --shape  --max-memory GB  --device (cuda)  --opsd-steps 1  --grpo-steps 1  --out DIR  --json FILE
 *          --extra="<more train flags>" (with =: the value starts with a dash)
 */
import { spawnSync } from 'node:child_process';
import { closeSync, existsSync, mkdirSync, openSync, readFileSync, rmSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { randomModel } from './checkpoints.mjs';
import { benchArgs, deviceOf, dtypeOf, root, writeJson } from './harness.mjs';

const a = benchArgs(
  {
    shape: { type: 'string', default: 'qwen3-1.7b' },
    'max-memory': { type: 'string' },
    'opsd-steps': { type: 'string', default: '1' },
    'grpo-steps': { type: 'string', default: '1' },
    out: { type: 'string' },
    extra: { type: 'string', default: '' },
    layers: { type: 'string' },
  },
  { device: 'cuda' },
);
const { cuda } = deviceOf(a.device);
const dtype = dtypeOf(a.dtype, cuda, ['float32', 'bfloat16']);
const modelDir = randomModel({ shape: a.shape, dtype, layers: a.layers, cuda });
const preset = a.shape.replace(/^qwen3-0\.6b$/, 'qwen3-1.7b');
const out = resolve(a.out ?? join(root, '.cache', 'memplan-runs', `${a.shape}-${a['max-memory'] ?? 'uncapped'}-${process.pid}`));
rmSync(out, { recursive: true, force: true });
const args = [
  join(root, 'dist', 'bin', 'papergym-native.js'),
  'train',
  '--preset',
  preset,
  '--model',
  modelDir,
  '--device',
  a.device,
  '--opsd-steps',
  a['opsd-steps'],
  '--grpo-steps',
  a['grpo-steps'],
  '--out',
  out,
  ...(a['max-memory'] ? ['--max-memory', a['max-memory']] : []),
  ...(cuda ? [] : ['--dtype', 'float32']),
  ...a.extra.split(/\s+/).filter(Boolean),
];
process.stderr.write(`memplan: node ${args.slice(1).join(' ')}\n`);
const t0 = Date.now();
// The trainer's stderr goes straight to <out>/train.log (whole, as it is written: a run killed by a
// timeout keeps its log); only some of its lines are echoed below.
mkdirSync(out, { recursive: true });
const logFile = join(out, 'train.log');
const logFd = openSync(logFile, 'w');
const r = spawnSync(process.execPath, args, { stdio: ['ignore', 'inherit', logFd], env: { ...process.env, CI: 'true' } });
closeSync(logFd);
const wall = (Date.now() - t0) / 1000;
const log = readFileSync(logFile, 'utf8');
process.stderr.write(
  log
    .split('\n')
    .filter((l) => /memory plan|out of memory|error|Error|checkpoint|judge totals/.test(l))
    .join('\n') + '\n',
);
const gb = (b) => (typeof b === 'number' ? +(b / 1e9).toFixed(2) : null);
const metrics = existsSync(join(out, 'metrics.jsonl'))
  ? readFileSync(join(out, 'metrics.jsonl'), 'utf8')
      .trim()
      .split('\n')
      .filter(Boolean)
      .map((l) => JSON.parse(l))
      .filter((l) => typeof l.loss === 'number')
  : [];
const config = existsSync(join(out, 'config.json')) ? JSON.parse(readFileSync(join(out, 'config.json'), 'utf8')) : {};
const plan = config.memoryPlan ?? null;
const steps = metrics.map((m) => ({
  stage: m.stage,
  step: m.step,
  stepSeconds: m.stepSeconds,
  completionTokens: m.completionTokens,
  phaseSeconds: m.phaseSeconds,
  peakGB: {
    rollout: gb(m.memory?.peakRolloutBytes),
    reference: gb(m.memory?.peakReferenceBytes),
    backward: gb(m.memory?.peakBackwardBytes),
    optimizer: gb(m.memory?.peakOptimizerBytes),
    process: gb(m.memory?.peakAllocatedBytes),
  },
  reservedGB: gb(m.memory?.reservedBytes),
}));
const result = {
  shape: a.shape,
  maxMemory: a['max-memory'] ? Number(a['max-memory']) : null,
  exitCode: r.status,
  wallSeconds: wall,
  plan: plan && {
    budgetGB: gb(plan.budgetBytes),
    microBatch: plan.microBatch,
    recompute: plan.recompute,
    rolloutRows: plan.rolloutRows,
    judgeTokensPerCall: plan.judgeTokensPerCall,
    expectedGB: Object.fromEntries(Object.entries(plan.phases).map(([k, v]) => [k, gb(v)])),
    fits: plan.fits,
    notes: plan.notes,
  },
  steps,
  oomRetries: log.split('\n').filter((l) => /out of memory in the update/.test(l)),
  errorTail: r.status === 0 ? undefined : log.split('\n').slice(-15).join('\n'),
};
console.log(JSON.stringify(result, null, 2));
console.log('| preset | cap GB | stage | micro-batch | recompute | rollout GB | reference GB | update GB | step s | expected update GB |');
for (const s of steps) {
  const mb = plan?.microBatch?.[s.stage];
  console.log(
    `| ${a.shape} | ${a['max-memory'] ?? '-'} | ${s.stage} | ${mb ?? '-'} | ${plan?.recompute ? 'on' : 'off'} | ${s.peakGB.rollout ?? '-'} | ${s.peakGB.reference ?? '-'} | ${s.peakGB.backward ?? '-'} | ${s.stepSeconds?.toFixed(1)} | ${gb(plan?.phases?.[`update-${s.stage}`]) ?? '-'} |`,
  );
}
for (const s of steps)
  console.log(
    `${s.stage} step ${s.step}: ${s.stepSeconds?.toFixed(2)} s, ${s.completionTokens} completion tokens; phases ${JSON.stringify(Object.fromEntries(Object.entries(s.phaseSeconds ?? {}).map(([k, v]) => [k, +v.toFixed(2)])))}`,
  );
writeJson(a.json, result);
process.exitCode = r.status ?? 1;
