#!/usr/bin/env node
/**
 * The judge behind sampling: how much of a GRPO step's judging is still visible after the
 * rollout when each group is judged as soon as its completions finished (generate's
 * `onGroupDone`, what lib/train/stages/grpo.ts does with `--judge http`, and with the local judge
 * when grpo.judgeOverlap is on), against judging every group after the rollout. One process, the
 * same rollouts (seeded) and judge for both sides.
 *
 * Rollouts: Q questions of the embedded dataset × G completions through `generate`, each question
 * with its own `maxNewTokens` spread evenly over [--min-tokens, --max-tokens] (standing in for a
 * real policy's unequal completion lengths; random weights never stop on their own). Judge: the
 * project's HttpJudge (per-item, real HTTP through the LLM client, concurrency --concurrency)
 * against a loopback OpenAI-compatible server that answers "Yes" after --latency-ms, through
 * makeRewardFn (instance + general rubric items), its cache off. With --judge local: the trainer's
 * local judge on the policy model itself (localJudgeForModel: base model, adapter off, P(yes) by
 * prefix-shared scoring), whose calls run beside the decode on their own worker thread and CUDA
 * stream (the model's read-only calls share its lock).
 * Reports: rollout seconds, the judge's standalone time (all groups after the rollout), and the
 * time still visible after the rollout resolved with per-group judging; their ratio is the issue's
 * "visible share of the judge's standalone time".
 *
 * Usage: node scripts/bench/judge_overlap.mjs                       # CPU, the embedded tiny model
 *        node scripts/bench/judge_overlap.mjs --device cuda --shape qwen3-1.7b --min-tokens 256 --max-tokens 1024
 * Options: --model DIR | --shape qwen3-1.7b|… (random weights, real shapes)  --questions 8  --group 8  --judge http|local
 *          --min-tokens 32  --max-tokens 256
 *          --latency-ms 40  --concurrency 64  --json FILE
 *          --profile (CUDA: after the timed passes, each side once more under the kernel profiler,
 *          native().profileStart/Stop: GPU busy µs (union of the kernels' intervals) and kernel µs
 *          (their sum) of the rollout alone, the judge alone and the per-group pass — how much of
 *          the rollout's wall time the GPU idles, and how much judge work ran concurrently with the
 *          decode's kernels rather than after them; in --json as profile)
 */
import { createServer } from 'node:http';
import { resolve } from 'node:path';
import { randomModel } from './checkpoints.mjs';
import { benchArgs, deviceOf, dtypeOf, lib, printTable, writeJson } from './harness.mjs';

const a = benchArgs({
  model: { type: 'string' },
  shape: { type: 'string' },
  questions: { type: 'string', default: '8' },
  group: { type: 'string', default: '8' },
  'min-tokens': { type: 'string', default: '32' },
  'max-tokens': { type: 'string', default: '256' },
  'latency-ms': { type: 'string', default: '40' },
  concurrency: { type: 'string', default: '64' },
  judge: { type: 'string', default: 'http' },
  profile: { type: 'boolean', default: false },
});
if (a.judge !== 'http' && a.judge !== 'local') throw new Error(`--judge must be http or local, got ${a.judge}`);
const Q = Number(a.questions),
  G = Number(a.group),
  lo = Number(a['min-tokens']),
  hi = Number(a['max-tokens']),
  latency = Number(a['latency-ms']);
for (const [k, v] of [
  ['questions', Q],
  ['group', G],
  ['min-tokens', lo],
  ['max-tokens', hi],
  ['concurrency', Number(a.concurrency)],
])
  if (!(Number.isInteger(v) && v >= 1)) throw new Error(`--${k} must be an integer >= 1, got ${a[k]}`);
if (!(latency >= 0) || hi < lo) throw new Error('--latency-ms must be >= 0 and --max-tokens >= --min-tokens');

const { Policy, generate } = await lib('model/policy.js');
const { ensureDefaultModel } = await lib('train/run.js');
const { createHttpJudge } = await lib('judge/http.js');
const { localJudgeForModel } = await lib('judge/local.js');
const { makeRewardFn } = await lib('judge/rewards.js');
const { readDataset, sampleDatasetPath, loadGeneralRubric } = await lib('data/schema.js');
const { studentMessages } = await lib('task/prompts.js');
const { native } = await lib('native.js');

// The loopback judge endpoint: "Yes" after the latency (OpenAI chat-completions reply shape).
const server = createServer((req, res) => {
  req.resume();
  req.on('end', () =>
    setTimeout(() => {
      res.setHeader('content-type', 'application/json');
      res.end(
        JSON.stringify({
          id: 'x',
          object: 'chat.completion',
          model: 'judge',
          choices: [{ index: 0, finish_reason: 'stop', message: { role: 'assistant', content: 'Yes' } }],
          usage: { prompt_tokens: 1, completion_tokens: 1, total_tokens: 2 },
        }),
      );
    }, latency),
  );
});
await new Promise((r) => server.listen(0, '127.0.0.1', r));
const url = `http://127.0.0.1:${server.address().port}/v1`;

const { cuda } = deviceOf(a.device);
const dtype = dtypeOf(a.dtype, cuda, ['float32', 'bfloat16']);
const modelDir = a.model ? resolve(a.model) : a.shape ? randomModel({ shape: a.shape, dtype, cuda }) : ensureDefaultModel();
const policy = await Policy.load(modelDir, { device: a.device, ...(a.shape || a.model ? { dtype } : {}) });
const items = readDataset(sampleDatasetPath()).items.slice(0, Q);
if (items.length < Q) throw new Error(`--questions ${Q}: the embedded dataset has ${items.length}`);
const general = loadGeneralRubric().items.map((g) => ({ id: g.id, text: g.text }));
const prompts = await policy.encodePrompts(
  items.map((it) => studentMessages(it.question)),
  { enableThinking: false },
);
const maxNew = items.map((_, i) => Math.round(lo + ((hi - lo) * i) / Math.max(1, Q - 1)));
const tok = policy.tokenizer;
const sampling = {
  prompts,
  n: G,
  temperature: 1,
  topK: 20,
  seed: 5,
  stopIds: [],
  padId: tok.padTokenId,
  promptOptions: maxNew.map((m) => ({ maxNewTokens: m })),
  maxNewTokens: hi,
};
const local = a.judge === 'local' ? await localJudgeForModel(policy.model, tok) : undefined;
const rewardFn = () =>
  makeRewardFn(local ?? createHttpJudge({ url, model: 'judge', concurrency: Number(a.concurrency), noCache: true }), general, { alpha: 0.7 });
const requestsOf = async (cs) => {
  const texts = await policy.completionTexts(cs);
  return cs.map((c, i) => ({ item: items[c.promptIndex], plan: texts[i] }));
};

const warm = await generate(policy.model, { ...sampling, maxNewTokens: 4, promptOptions: undefined }); // warm-up
if (local) await rewardFn()(await requestsOf(warm.completions)); // the local judge's first shapes
// After: every group judged once the rollout resolved (the path without onGroupDone). With the
// local judge this runs twice and the second is measured (the first meets the plans' shapes first).
let reward, t0, t1, r1, after, rolloutAfter, standalone;
for (let pass = 0; pass < (local ? 2 : 1); pass++) {
  reward = rewardFn();
  t0 = performance.now();
  r1 = await generate(policy.model, sampling);
  t1 = performance.now();
  after = await reward(await requestsOf(r1.completions));
  const t2 = performance.now();
  rolloutAfter = (t1 - t0) / 1000;
  standalone = (t2 - t1) / 1000;
}
// Per group: each group's requests sent when onGroupDone hands it over. Recorded beside it: each
// early group's handover and judging seconds (from the rollout's start), and the JS thread's
// event-loop utilisation while the rollout ran (near 1: the judge's host side is bound by it).
reward = rewardFn();
const jobs = new Map();
const groupTimes = [];
t0 = performance.now();
const elu0 = performance.eventLoopUtilization();
const r2 = await generate(policy.model, {
  ...sampling,
  onGroupDone: (g) => {
    const at = (performance.now() - t0) / 1000;
    jobs.set(
      g.promptIndex,
      requestsOf(g.completions)
        .then(reward)
        .then((x) => (groupTimes.push({ group: g.promptIndex, handedOver: at, judged: (performance.now() - t0) / 1000 }), x)),
    );
  },
});
const elu = performance.eventLoopUtilization(elu0).utilization;
t1 = performance.now();
const early = jobs.size;
for (let p = 0; p < Q; p++) if (!jobs.has(p)) jobs.set(p, requestsOf(r2.completions.slice(p * G, (p + 1) * G)).then(reward));
const perGroup = (await Promise.all([...Array(Q).keys()].map((p) => jobs.get(p)))).flat();
const t3 = performance.now();
const rolloutStreamed = (t1 - t0) / 1000,
  visible = (t3 - t1) / 1000;

// --profile: each side once more under the kernel profiler (after the timed passes, so their
// times carry no profiler overhead). busy = union of the GPU activities' intervals, kernels = the
// sum of their durations (more than busy where they overlapped), both ms; wall ms of the same call.
async function profiled(f) {
  native().profileStart();
  const s = performance.now();
  const out = await f();
  const wallMs = performance.now() - s;
  const p = native().profileStop({ top: 1 });
  return { out, wallMs, busyMs: p.gpuBusyUs / 1000, kernelMs: p.gpuUs / 1000, spanMs: p.gpuSpanUs / 1000 };
}
let profile;
if (a.profile && cuda) {
  const ro = await profiled(() => generate(policy.model, sampling));
  const reqs = await requestsOf(ro.out.completions);
  const rewardAlone = rewardFn();
  const ju = await profiled(() => rewardAlone(reqs));
  const rewardPer = rewardFn();
  const pg = await profiled(async () => {
    const js = new Map();
    const r = await generate(policy.model, { ...sampling, onGroupDone: (g) => js.set(g.promptIndex, requestsOf(g.completions).then(rewardPer)) });
    for (let p = 0; p < Q; p++) if (!js.has(p)) js.set(p, requestsOf(r.completions.slice(p * G, (p + 1) * G)).then(rewardPer));
    return Promise.all([...js.values()]);
  });
  const strip = ({ out, ...rest }) => rest;
  profile = {
    rollout: strip(ro),
    judge: strip(ju),
    perGroup: strip(pg),
    // GPU idle inside the rollout alone: what a judge could fill without sharing an SM.
    rolloutIdleMs: ro.wallMs - ro.busyMs,
    // Busy time the per-group pass saved against running the two one after the other (their
    // kernels ran at the same time), and the kernel time it added (kernels slowed by sharing).
    concurrentMs: ro.busyMs + ju.busyMs - pg.busyMs,
    kernelSlowdownMs: pg.kernelMs - ro.kernelMs - ju.kernelMs,
  };
  const f = (x) => (x / 1000).toFixed(3);
  printTable(
    ['profiled pass', 'wall s', 'GPU busy s', 'kernel s (sum)'],
    [
      ['rollout alone', f(ro.wallMs), f(ro.busyMs), f(ro.kernelMs)],
      ['judge alone', f(ju.wallMs), f(ju.busyMs), f(ju.kernelMs)],
      ['rollout + per-group judge', f(pg.wallMs), f(pg.busyMs), f(pg.kernelMs)],
    ],
  );
  console.log(
    `profile: the GPU idles ${f(profile.rolloutIdleMs)} s of the rollout alone; the per-group pass ran ${f(profile.concurrentMs)} s of busy time concurrently (rollout + judge busy minus its own) and its kernels took ${f(profile.kernelSlowdownMs)} s longer in sum`,
  );
} else if (a.profile) {
  console.error(`--profile: no kernel profile on ${a.device} (it records GPU kernels)`);
}
server.close();
policy.dispose();
const same = JSON.stringify(after.map((x) => x.reward)) === JSON.stringify(perGroup.map((x) => x.reward));

console.log(
  `judge behind sampling: ${Q} questions × ${G} completions, maxNewTokens ${lo}…${hi} per question, ${local ? 'local judge (the policy model, adapter off)' : `HTTP judge (loopback, ${latency} ms per request, concurrency ${a.concurrency})`}, ${after.length} plans × ${items[0].rubric.length + general.length} items; ${a.shape ?? a.model ?? 'tiny model'} on ${a.device}; ${early} of ${Q} groups handed over before the rollout resolved; rewards identical: ${same}`,
);
printTable(
  ['', 'seconds'],
  [
    ['rollout (judging after)', rolloutAfter.toFixed(3)],
    ['rollout (judging per group)', rolloutStreamed.toFixed(3)],
    ['judge after the rollout (standalone)', standalone.toFixed(3)],
    ['judge still visible with per-group judging', visible.toFixed(3)],
    ['visible share of standalone', `${((100 * visible) / standalone).toFixed(1)}%`],
    ['event-loop utilisation during the per-group rollout', elu.toFixed(2)],
  ],
);
groupTimes.sort((x, y) => x.group - y.group);
console.log(
  `early groups (seconds from the rollout's start; standalone judging ${(standalone / Q).toFixed(2)} s per group): ${groupTimes.map((g) => `${g.group}: ${g.handedOver.toFixed(2)} → ${g.judged.toFixed(2)}`).join(', ')}`,
);
writeJson(a.json, {
  config: a,
  maxNewTokens: maxNew,
  rolloutAfter,
  rolloutStreamed,
  standalone,
  visible,
  visibleShare: visible / standalone,
  earlyGroups: early,
  rewardsIdentical: same,
  eventLoopUtilization: elu,
  groupTimes,
  profile,
});
