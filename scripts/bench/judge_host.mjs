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
 * call (strip thinking, rewards). On CPU the default model is the tests' tiny Qwen3 (2 layers,
 * hidden 64, the real Qwen3 tokenizer) so that the native part is small and the host part shows.
 *
 * Usage: node scripts/bench/judge_host.mjs                                   # CPU, tiny model
 *        node scripts/bench/judge_host.mjs --device cuda --shape qwen3-1.7b --json out.json
 * Options: --device  --shape tiny|qwen3-0.6b|qwen3-1.7b|… (default tiny on CPU, qwen3-1.7b on CUDA)
 *          --layers N  --model DIR  --dtype  --plans 64  --questions 8  --plan-tokens 1024
 *          --repeat 3  --max-tokens-per-call 65536  --no-prefix-sharing  --no-token-split  --no-render-once
 *          (the last two: the judge's host shortcuts off, i.e. the path before them)
 *          --json FILE
 */
import { readFileSync, readdirSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { randomModel, tinyModel } from './checkpoints.mjs';
import { benchArgs, deviceOf, dtypeOf, lib, printTable, root, writeJson } from './harness.mjs';

const a = benchArgs({
  shape: { type: 'string' }, layers: { type: 'string' }, model: { type: 'string' },
  plans: { type: 'string', default: '64' }, questions: { type: 'string', default: '8' }, 'plan-tokens': { type: 'string', default: '1024' },
  repeat: { type: 'string', default: '3' }, 'max-tokens-per-call': { type: 'string' },
  'no-prefix-sharing': { type: 'boolean', default: false }, 'no-token-split': { type: 'boolean', default: false }, 'no-render-once': { type: 'boolean', default: false },
});
const { cuda } = deviceOf(a.device);
const shape = a.shape ?? (cuda ? 'qwen3-1.7b' : 'tiny');
const dtype = shape === 'tiny' && !a.dtype ? 'float32' : dtypeOf(a.dtype, cuda, ['float32', 'bfloat16']);
const nPlans = Number(a.plans), nQ = Number(a.questions), planTokens = Number(a['plan-tokens']), repeat = Math.max(1, Number(a.repeat));
const modelDir = a.model ? resolve(a.model) : shape === 'tiny' ? tinyModel() : randomModel({ shape, dtype, layers: a.layers, cuda });

const { native } = await lib('native.js');
const { loadModel } = await lib('model/qwen3.js');
const { Tokenizer } = await lib('model/tokenizer.js');
const { ChatTemplate } = await lib('model/chat.js');
const { LocalJudge, prefixLogprobsScorer, sequenceLogprobsScorer } = await lib('judge/local.js');
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
const judge = await LocalJudge.create({
  tokenizer,
  template: ChatTemplate.fromTokenizer(tokenizer),
  variants: 'pair',
  scorer: sequenceLogprobsScorer(model, { padId, adapter: 'none', maxTokensPerCall, fn: timed((m, x) => native().sequenceLogprobs(m, x)) }),
  prefixScorer: a['no-prefix-sharing'] ? undefined : prefixLogprobsScorer(model, { padId, adapter: 'none', maxTokensPerCall, fn: timed((m, x) => native().prefixLogprobs(m, x)) }),
  tokenSplit: !a['no-token-split'],
  renderOnce: !a['no-render-once'],
  maxContext: Number(model.config.max_position_embeddings),
  name: 'local:pair',
});

// Questions, rubric items and general items of the embedded dataset; plans from real text.
const items = readDataset(sampleDatasetPath()).items;
const general = loadGeneralRubric().items.map((g) => ({ id: g.id, text: g.text }));
const docs = readdirSync(join(root, 'docs')).filter((f) => f.endsWith('.md')).sort().map((f) => readFileSync(join(root, 'docs', f), 'utf8'));
const corpus = [readFileSync(join(root, 'README.md'), 'utf8'), ...docs, ...items.map((it) => it.reference_answer)].join('\n\n');
const corpusIds = await tokenizer.encode(corpus);
const stride = Math.max(1, Math.floor((corpusIds.length - planTokens) / nPlans));
const plans = await Promise.all(
  Array.from({ length: nPlans }, async (_, i) => {
    const body = await tokenizer.decode(corpusIds.slice(i * stride, i * stride + planTokens));
    return `<think>\nPlan ${i}: draft the design, then check it against the question.\n</think>\n\n${body}`;
  }),
);
const perQ = Math.ceil(nPlans / nQ);
const requests = plans.map((plan, i) => ({ item: items[Math.floor(i / perQ) % items.length], plan }));
const reward = makeRewardFn(judge, general, { alpha: 0.7 });

const before = () => ({ t: judge.timings(), n: { ...nativeTime }, s: judge.stats() });
process.stderr.write(`bench: warm-up judge call (${requests.length} plans)\n`);
await reward(requests);
const b0 = before();
const walls = [];
let rewards;
for (let k = 0; k < repeat; k++) {
  const t = performance.now();
  rewards = await reward(requests);
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
const split = (b1.t.promptsSplit - b0.t.promptsSplit) / repeat, whole = (b1.t.promptsWhole - b0.t.promptsWhole) / repeat;

console.log(`local judge host time: ${a.model ?? shape}${a.layers ? ` (${a.layers} layers)` : ''} ${dtype} on ${a.device}; ${nPlans} plans × ~${planTokens} tokens, ${nItems} (plan, item) pairs, ${prompts} prompts scored (${promptTokens} prompt tokens through the model); ${(b1.n.calls - b0.n.calls) / repeat} native calls per judge call; prefix sharing ${a['no-prefix-sharing'] ? 'off' : 'on'}, token split ${a['no-token-split'] ? 'off' : `on (${split} prompts split, ${whole} whole)`}, render once ${a['no-render-once'] ? 'off' : 'on'}; mean of ${repeat} calls`);
printTable(['part', 'seconds per judge call', 'share'], [
  ...Object.entries(parts).map(([k, v]) => [k, v.toFixed(3), `${((100 * v) / wall).toFixed(1)}%`]),
  ['total (reward call)', wall.toFixed(3), '100%'],
  ['host (total − native)', (wall - nativeS).toFixed(3), `${((100 * (wall - nativeS)) / wall).toFixed(1)}%`],
]);
console.log(`mean reward ${(rewards.reduce((s, r) => s + r.reward, 0) / rewards.length).toFixed(4)}`);
writeJson(a.json, { config: { ...a, shape, dtype, modelDir }, plans: nPlans, pairs: nItems, prompts, prompt_tokens: promptTokens, prompts_split: split, prompts_whole: whole, repeat, walls, seconds: { ...parts, total: wall, host: wall - nativeS }, mean_reward: rewards.reduce((s, r) => s + r.reward, 0) / rewards.length });
model.dispose();
