#!/usr/bin/env node
/**
 * Where the local judge's time goes (issue 15: the GRPO step's judge phase): one GRPO step's reward
 * call — P plans (default 64 = 8 questions × 8 completions) of about N tokens each (default 1024)
 * × every rubric item of their question (the embedded dataset: 10 instance items + the 7 general
 * items = 17) — through the production path: lib/judge/rewards.ts makeRewardFn over
 * lib/judge/local.ts LocalJudge with the prefix-sharing scorer (`prefixLogprobsScorer`, the
 * default of localJudgeForModel) and the frozen base (adapter 'none').
 *
 * Plans are real text: windows of N tokens over the repository's docs (docs/*.md, README.md) and
 * the embedded dataset's reference answers, each at its own offset, with a `<think>…</think>`
 * block in front (the reward function strips it, as it does for sampled plans). Questions and
 * rubric items come from data/sample/papergym-sample.jsonl and data/general-rubric.json.
 *
 * Reported per judge call (seconds, the mean over `--repeat` timed calls after one warm-up call):
 * the judge's own host timings (LocalJudge.timings(): render, tokenize, group, score, map), the
 * native calls inside `score` (the addon's prefixLogprobs / sequenceLogprobs, timed around each
 * call; on CUDA they return host tensors, so device work is included) and the rest of the reward
 * call (strip thinking, rewards). Then one plan's native work alone: the judge's prefixLogprobs
 * call for that plan, the same prefix with one suffix, and a plain prefill of the prefix. On CPU the default model is the tests' tiny Qwen3 (2 layers,
 * hidden 64, the real Qwen3 tokenizer) so that the native part is small and the host part shows.
 *
 * Usage: node scripts/bench/judge_host.mjs                                   # CPU, tiny model
 *        node scripts/bench/judge_host.mjs --device cuda --shape qwen3-1.7b --json out.json
 * Options: --device  --shape tiny|qwen3-0.6b|qwen3-1.7b|… (default tiny on CPU, qwen3-1.7b on CUDA)
 *          --layers N  --model DIR  --dtype  --plans 64  --questions 8  --plan-tokens 1024
 *          --repeat 3  --max-tokens-per-call 65536  --no-prefix-sharing  --no-token-split  --no-render-once
 *          --plan-concurrency N (plans whose prefix scoring runs at once; default as localJudgeForModel:
 *          2 on CUDA, 1 on the CPU; the per-call token budget is divided by it, as there; with more
 *          than one the native seconds add up calls that overlap)
 *          --random-plans (plans decoded from uniformly random ids, as random-weight rollouts are)
 *          --fresh-plans (new plans for the warm-up and for every measured call, as each trainer step
 *          judges new completions; default: the warm-up's plans again)
 *          (the last two: the judge's host shortcuts off, i.e. the path before them)
 *          --json FILE
 */
import { readFileSync, readdirSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { randomModel, tinyModel } from './checkpoints.mjs';
import { benchArgs, deviceOf, dtypeOf, lib, median, printTable, root, writeJson } from './harness.mjs';

const a = benchArgs({
  shape: { type: 'string' },
  layers: { type: 'string' },
  model: { type: 'string' },
  plans: { type: 'string', default: '64' },
  questions: { type: 'string', default: '8' },
  'plan-tokens': { type: 'string', default: '1024' },
  repeat: { type: 'string', default: '3' },
  'random-plans': { type: 'boolean', default: false },
  'fresh-plans': { type: 'boolean', default: false },
  'max-tokens-per-call': { type: 'string' },
  'no-prefix-sharing': { type: 'boolean', default: false },
  'no-token-split': { type: 'boolean', default: false },
  'no-render-once': { type: 'boolean', default: false },
  'plan-concurrency': { type: 'string' },
});
const { cuda } = deviceOf(a.device);
const shape = a.shape ?? (cuda ? 'qwen3-1.7b' : 'tiny');
const dtype = shape === 'tiny' && !a.dtype ? 'float32' : dtypeOf(a.dtype, cuda, ['float32', 'bfloat16']);
const nPlans = Number(a.plans),
  nQ = Number(a.questions),
  planTokens = Number(a['plan-tokens']),
  repeat = Math.max(1, Number(a.repeat));
const modelDir = a.model ? resolve(a.model) : shape === 'tiny' ? tinyModel() : randomModel({ shape, dtype, layers: a.layers, cuda });

const { native } = await lib('native.js');
const { loadModel } = await lib('model/qwen3.js');
const { Tokenizer } = await lib('model/tokenizer.js');
const { ChatTemplate } = await lib('model/chat.js');
const { LocalJudge, PREFIX_TOKENS_PER_CALL, commonPrefixLength, prefixLogprobsScorer, sequenceLogprobsScorer } = await lib('judge/local.js');
const { makeRewardFn } = await lib('judge/rewards.js');
const { readDataset, sampleDatasetPath, loadGeneralRubric } = await lib('data/schema.js');

const tokenizer = Tokenizer.fromDir(modelDir);
const model = await loadModel(modelDir, { device: a.device, dtype });

// The native calls, timed one by one (the judge's scorers take the addon function as `fn`).
const nativeTime = { seconds: 0, calls: 0 };
const timed = (f) => async (m, args) => {
  const t = performance.now();
  try {
    return await f(m, args);
  } finally {
    nativeTime.seconds += (performance.now() - t) / 1000;
    nativeTime.calls++;
  }
};
// The wiring of localJudgeForModel (sequence-logprobs scoring, 'pair' answer tokens), with timed native calls.
const padId = tokenizer.padTokenId;
const maxTokensPerCall = a['max-tokens-per-call'] ? Number(a['max-tokens-per-call']) : undefined;
const planConcurrency = a['plan-concurrency'] ? Number(a['plan-concurrency']) : cuda ? 2 : 1;
if (!(Number.isInteger(planConcurrency) && planConcurrency >= 1)) throw new Error(`--plan-concurrency must be an integer >= 1, got ${a['plan-concurrency']}`);
const prefixTokens = Math.max(1, Math.floor((maxTokensPerCall ?? PREFIX_TOKENS_PER_CALL) / planConcurrency));
const judge = await LocalJudge.create({
  tokenizer,
  template: ChatTemplate.fromTokenizer(tokenizer),
  variants: 'pair',
  scorer: sequenceLogprobsScorer(model, { padId, adapter: 'none', maxTokensPerCall, fn: timed((m, x) => native().sequenceLogprobs(m, x)) }),
  prefixScorer: a['no-prefix-sharing']
    ? undefined
    : prefixLogprobsScorer(model, { padId, adapter: 'none', maxTokensPerCall: prefixTokens, fn: timed((m, x) => native().prefixLogprobs(m, x)) }),
  planConcurrency,
  tokenSplit: !a['no-token-split'],
  renderOnce: !a['no-render-once'],
  maxContext: Number(model.config.max_position_embeddings),
  name: 'local:pair',
});

// Questions, rubric items and general items of the embedded dataset; plans from real text.
const items = readDataset(sampleDatasetPath()).items;
const general = loadGeneralRubric().items.map((g) => ({ id: g.id, text: g.text }));
const docs = readdirSync(join(root, 'docs'))
  .filter((f) => f.endsWith('.md'))
  .sort()
  .map((f) => readFileSync(join(root, 'docs', f), 'utf8'));
const corpus = [readFileSync(join(root, 'README.md'), 'utf8'), ...docs, ...items.map((it) => it.reference_answer)].join('\n\n');
const corpusIds = await tokenizer.encode(corpus);
const stride = Math.max(1, Math.floor((corpusIds.length - planTokens) / nPlans));
// --random-plans: plans decoded from uniformly random ids, as a random-weight checkpoint samples
// them in the trainer's GRPO step (to compare the judge's cost on such plans with real text).
let seed = 12345;
const rnd = () => (seed = (seed * 1103515245 + 12345) % 2147483648) / 2147483648;
const perQ = Math.ceil(nPlans / nQ);
// Set k of plans (--fresh-plans: a new set per call, the corpus windows shifted by 37·k tokens and
// 5·k tokens shorter, so that lengths and content differ from every earlier call).
const planSet = async (k) =>
  Promise.all(
    Array.from({ length: nPlans }, async (_, i) => {
      const n = planTokens - 5 * k;
      const ids = a['random-plans']
        ? Array.from({ length: n }, () => Math.floor(rnd() * 151643))
        : corpusIds.slice(i * stride + 37 * k, i * stride + 37 * k + n);
      const body = await tokenizer.decode(ids);
      return `<think>\nPlan ${i}: draft the design, then check it against the question.\n</think>\n\n${body}`;
    }),
  ).then((plans) => plans.map((plan, i) => ({ item: items[Math.floor(i / perQ) % items.length], plan })));
const requestSets = a['fresh-plans'] ? await Promise.all(Array.from({ length: repeat + 1 }, (_, k) => planSet(k))) : [await planSet(0)];
const requests = requestSets[0];
const reward = makeRewardFn(judge, general, { alpha: 0.7 });

const before = () => ({ t: judge.timings(), n: { ...nativeTime }, s: judge.stats() });
process.stderr.write(`bench: warm-up judge call (${requests.length} plans)\n`);
await reward(requests);
const b0 = before();
const walls = [];
let rewards;
for (let k = 0; k < repeat; k++) {
  const t = performance.now();
  rewards = await reward(requestSets[a['fresh-plans'] ? k + 1 : 0]);
  walls.push((performance.now() - t) / 1000);
  process.stderr.write(`bench: judge call ${k + 1}/${repeat} ${walls[k].toFixed(2)} s\n`);
}
const b1 = before();
const per = (k) => (b1.t[k] - b0.t[k]) / repeat;
const wall = walls.reduce((x, y) => x + y, 0) / repeat;
const nativeS = (b1.n.seconds - b0.n.seconds) / repeat;
const parts = { render: per('render'), tokenize: per('tokenize'), group: per('group'), score_js: per('score') - nativeS, native: nativeS, map: per('map') };
const inJudge = ['render', 'tokenize', 'group', 'score', 'map'].reduce((s, k) => s + per(k), 0);
parts.reward_fn_rest = wall - inJudge;
const prompts = (b1.s.requests - b0.s.requests) / repeat;
const promptTokens = (b1.s.promptTokens - b0.s.promptTokens) / repeat;
const nItems = requests.reduce((s, r) => s + r.item.rubric.length + general.length, 0);
const split = (b1.t.promptsSplit - b0.t.promptsSplit) / repeat,
  whole = (b1.t.promptsWhole - b0.t.promptsWhole) / repeat;

console.log(
  `local judge host time: ${a.model ?? shape}${a.layers ? ` (${a.layers} layers)` : ''} ${dtype} on ${a.device}; ${nPlans} plans × ~${planTokens} tokens, ${nItems} (plan, item) pairs, ${prompts} prompts scored (${promptTokens} prompt tokens through the model); ${(b1.n.calls - b0.n.calls) / repeat} native calls per judge call; prefix sharing ${a['no-prefix-sharing'] ? 'off' : 'on'}, token split ${a['no-token-split'] ? 'off' : `on (${split} prompts split, ${whole} whole)`}, render once ${a['no-render-once'] ? 'off' : 'on'}, ${planConcurrency} plan(s) at once${a['fresh-plans'] ? ', new plans every call' : ''}; mean of ${repeat} calls`,
);
printTable(
  ['part', 'seconds per judge call', 'share'],
  [
    ...Object.entries(parts).map(([k, v]) => [k, v.toFixed(3), `${((100 * v) / wall).toFixed(1)}%`]),
    ['total (reward call)', wall.toFixed(3), '100%'],
    ['host (total − native)', (wall - nativeS).toFixed(3), `${((100 * (wall - nativeS)) / wall).toFixed(1)}%`],
  ],
);
console.log(`mean reward ${(rewards.reduce((s, r) => s + r.reward, 0) / rewards.length).toFixed(4)}`);

// One plan's native work alone (median of 5): the judge's call (shared prefix + every item suffix),
// the same prefix with one suffix, and a plain prefill of the prefix (sequenceLogprobs, 1 row).
const { stripThink } = await lib('llm/think.js');
const req0 = {
  question: requests[0].item.question,
  plan: stripThink(requests[0].plan),
  items: [...requests[0].item.rubric.map((r) => ({ id: r.id, text: r.text })), ...general],
};
const ids0 = (await judge.promptsFor([req0]))[0].map((x) => x.ids);
const P = commonPrefixLength(ids0);
const prefix = Int32Array.from(ids0[0].slice(0, P));
const cand = { data: Int32Array.from([...judge.yesIds, ...judge.noIds]), shape: [judge.yesIds.length + judge.noIds.length] };
const prefixCall = (sufs) => {
  const S = Math.max(...sufs.map((x) => x.length));
  const data = new Int32Array(sufs.length * S).fill(padId);
  sufs.forEach((x, i) => data.set(x, i * S));
  return () =>
    native().prefixLogprobs(model, {
      prefixIds: { data: prefix, shape: [1, P] },
      suffixIds: { data, shape: [sufs.length, S] },
      suffixLengths: { data: Int32Array.from(sufs, (x) => x.length), shape: [sufs.length] },
      candidates: cand,
      adapter: 'none',
    });
};
const sufs = ids0.map((x) => x.slice(P));
const cm = new Int32Array(P);
cm[P - 1] = 1;
const detail = {
  [`prefixLogprobs: prefix ${P} + ${sufs.length} suffixes (≤ ${Math.max(...sufs.map((x) => x.length))} tokens)`]: prefixCall(sufs),
  [`prefixLogprobs: prefix ${P} + 1 suffix`]: prefixCall(sufs.slice(0, 1)),
  [`sequenceLogprobs: one row of ${P} tokens (plain prefill)`]: () =>
    native().sequenceLogprobs(model, {
      inputIds: { data: prefix, shape: [1, P] },
      attentionMask: { data: new Int32Array(P).fill(1), shape: [1, P] },
      completionMask: { data: cm, shape: [1, P] },
      temperature: 1,
      adapter: 'none',
    }),
};
const detailRows = [];
for (const [name, f] of Object.entries(detail)) {
  await f();
  const ts = [];
  for (let k = 0; k < 5; k++) {
    const t = performance.now();
    await f();
    ts.push(performance.now() - t);
  }
  detailRows.push({ call: name, ms: median(ts) });
}
console.log("\none plan's native work alone (median of 5):");
printTable(
  ['native call', 'ms'],
  detailRows.map((r) => [r.call, r.ms.toFixed(1)]),
);
writeJson(a.json, {
  config: { ...a, shape, dtype, modelDir },
  plans: nPlans,
  pairs: nItems,
  prompts,
  prompt_tokens: promptTokens,
  prompts_split: split,
  prompts_whole: whole,
  repeat,
  walls,
  seconds: { ...parts, total: wall, host: wall - nativeS },
  mean_reward: rewards.reduce((s, r) => s + r.reward, 0) / rewards.length,
  native_detail: detailRows,
});
model.dispose();
