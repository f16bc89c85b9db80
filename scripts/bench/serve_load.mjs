#!/usr/bin/env node
/**
 * Load benchmark of `serve`: N concurrent clients send chat completions with
 * mixed sampling settings and lengths to a ChatServer on loopback (the same server `serve` runs:
 * continuous batching on the native decode engine), and the same requests are run again
 *   - "uniform-serve": through serve with one shared setting (temperature 1, no seed), and
 *   - "uniform-batch": as ONE native generate() call (one uniform batch, the rollout path; CUDA
 *     graphs on CUDA), the baseline.
 * Mixes (--mix): `seeds` (default): the uniform settings (temperature 1) but
 * every request with its own seed; `temps`: also its own temperature (0.3-1.3); `full`: also top-k 20 / top-p 0.8-1.0 / min-p 0.05 on about half
 * of the requests. The uniform scenarios use temperature 1 (`seeds`) or 0.7 (`temps`, `full`), and
 * for `full` top_p 0.9 on every request (the nucleus needs a
 * sort of the vocabulary whenever the top 1024 tokens do not hold it — always on a random-weight
 * model — so the comparison keeps that cost on both sides).
 * Every request uses ignore_eos (stop ids off) with its own max_tokens, so each scenario decodes
 * exactly the same number of tokens. Reports requests/s, completion tokens/s, time to first token
 * (streamed requests: first content chunk) and latency percentiles (p50 / p90 / p99), and the
 * ratio mixed / uniform-batch throughput (goal: >= 0.85 on the H200).
 *
 * Usage (after `npm run build:ts` and the native build):
 *   node scripts/bench/serve_load.mjs                                     # CPU, tiny model, 64 clients
 *   node scripts/bench/serve_load.mjs --device cuda --shape qwen3-1.7b --dtype bf16 --clients 64
 * Options: --device cpu|cuda[:N]  --shape tiny|qwen3-0.6b|qwen3-1.7b|...  --dtype fp32|bf16|fp16
 *          --model DIR  --clients N (concurrent requests, default 64)  --min-tokens 8 --max-tokens 32
 *          --prompt-words 40 (user message length)  --max-batch 64  --stream-fraction 0.5
 *          --json FILE  --layers N (random shapes with fewer layers)  --threads N (CPU)
 *          --mix seeds|temps|full  --max-model-len 1024 (KV slots per row; the CUDA-graph decode
 *          attends over all of them, so keep it near the longest prompt + max_tokens)
 *          --adapters K (also: K LoRA adapters, r 16, in one server — serve --lora-modules — the
 *          requests spread over them, against the same requests all to one adapter: what one
 *          adapter per server would decode; issue 56)
 * Random-shape checkpoints are made by scripts/make_random_qwen3.py under .cache/random-models/
 * (with the real Qwen3 tokenizer), as scripts/bench/generate.mjs does.
 */
import { resolve } from 'node:path';
import { randomModel, tinyModel } from './checkpoints.mjs';
import { benchArgs, deviceOf, dtypeOf, lib, printTable, writeJson } from './harness.mjs';

const a = benchArgs({
  shape: { type: 'string', default: 'tiny' },
  model: { type: 'string' },
  clients: { type: 'string', default: '64' },
  'min-tokens': { type: 'string', default: '8' },
  'max-tokens': { type: 'string', default: '32' },
  'prompt-words': { type: 'string', default: '40' },
  'max-batch': { type: 'string', default: '64' },
  'stream-fraction': { type: 'string', default: '0.5' },
  layers: { type: 'string' },
  threads: { type: 'string' },
  mix: { type: 'string', default: 'seeds' },
  'max-model-len': { type: 'string', default: '1024' },
  adapters: { type: 'string', default: '0' },
});
if (!['seeds', 'temps', 'full'].includes(a.mix)) throw new Error(`--mix must be seeds|temps|full, got ${a.mix}`);
const { cuda } = deviceOf(a.device);
const dtypeName = dtypeOf(a.dtype, cuda);
const N = Number(a.clients);
const minT = Number(a['min-tokens']);
const maxT = Number(a['max-tokens']);
const maxBatch = Number(a['max-batch']);

function ensureModel() {
  if (a.model) return resolve(a.model);
  if (a.shape === 'tiny') return tinyModel();
  return randomModel({ shape: a.shape, dtype: dtypeName, layers: a.layers, cuda });
}

/** Deterministic pseudo-random numbers. */
function rng(seed) {
  let x = seed >>> 0 || 1;
  return () => {
    x ^= x << 13;
    x ^= x >>> 17;
    x ^= x << 5;
    return (x >>> 0) / 4294967296;
  };
}

/** The one setting of the uniform scenarios: temperature 1 for `seeds` (the mix's own setting), else 0.7 (a non-1 temperature costs one more pass over the logits, as the mix's do) and, for `full`, top-p 0.9. */
const uniform = { temperature: a.mix === 'seeds' ? 1 : 0.7, topP: a.mix === 'full' ? 0.9 : 1 };

const WORDS =
  'plan baseline ablation dataset metric budget tuning seed variance model training evaluation compare report error figure table method result hypothesis control'.split(
    ' ',
  );
function makeRequests() {
  const r = rng(7);
  return Array.from({ length: N }, (_, i) => {
    const words = Math.max(4, Math.round(Number(a['prompt-words']) * (0.5 + r())));
    const text = Array.from({ length: words }, () => WORDS[Math.floor(r() * WORDS.length)]).join(' ');
    return {
      content: `Request ${i}: ${text}?`,
      maxTokens: minT + Math.floor(r() * (maxT - minT + 1)),
      temperature: a.mix === 'seeds' ? 1 : 0.3 + Math.round(r() * 10) / 10,
      topP: a.mix === 'full' && r() < 0.5 ? 0.8 + Math.round(r() * 2) / 10 : 1,
      topK: a.mix === 'full' && r() < 0.5 ? 20 : 0,
      minP: a.mix === 'full' && r() < 0.3 ? 0.05 : 0,
      seed: 1000 + i,
      stream: r() < Number(a['stream-fraction']),
    };
  });
}

function pct(xs, p) {
  const s = [...xs].sort((x, y) => x - y);
  return s.length ? s[Math.min(s.length - 1, Math.floor((p / 100) * s.length))] : null;
}

async function one(url, req, mixed, model = 'bench') {
  const body = {
    model,
    messages: [{ role: 'user', content: req.content }],
    max_tokens: req.maxTokens,
    ignore_eos: true,
    chat_template_kwargs: { enable_thinking: false },
    stream: req.stream,
    ...(req.stream ? { stream_options: { include_usage: true } } : {}),
    ...(mixed
      ? { temperature: req.temperature, top_p: req.topP, top_k: req.topK, min_p: req.minP, seed: req.seed }
      : { temperature: uniform.temperature, top_p: uniform.topP }),
  };
  const t0 = performance.now();
  const res = await fetch(`${url}/chat/completions`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });
  if (res.status !== 200) throw new Error(`HTTP ${res.status}: ${await res.text()}`);
  let ttft = null;
  let tokens = 0;
  if (req.stream) {
    const reader = res.body.getReader();
    const dec = new TextDecoder();
    let buf = '';
    for (;;) {
      const { done, value } = await reader.read();
      if (done) break;
      buf += dec.decode(value, { stream: true });
      let i;
      while ((i = buf.indexOf('\n\n')) >= 0) {
        const ev = buf.slice(0, i);
        buf = buf.slice(i + 2);
        if (!ev.startsWith('data: ') || ev === 'data: [DONE]') continue;
        const j = JSON.parse(ev.slice(6));
        if (ttft === null && j.choices?.some((c) => c.delta?.content || c.delta?.reasoning_content)) ttft = performance.now() - t0;
        if (j.usage) tokens = j.usage.completion_tokens;
      }
    }
  } else {
    const j = await res.json();
    tokens = j.usage.completion_tokens;
  }
  return { latency: performance.now() - t0, ttft, tokens };
}

async function scenario(name, url, reqs, mixed, stats, modelOf = () => 'bench') {
  const s0 = stats();
  const t0 = performance.now();
  const rs = await Promise.all(reqs.map((r, i) => one(url, r, mixed, modelOf(i))));
  const secs = (performance.now() - t0) / 1000;
  const s1 = stats();
  const tokens = rs.reduce((x, r) => x + r.tokens, 0);
  const lat = rs.map((r) => r.latency);
  const ttft = rs.map((r) => r.ttft).filter((x) => x !== null);
  const out = {
    scenario: name,
    requests: rs.length,
    seconds: secs,
    requests_per_s: rs.length / secs,
    tokens,
    tokens_per_s: tokens / secs,
    ttft_ms_p50: pct(ttft, 50),
    ttft_ms_p90: pct(ttft, 90),
    latency_ms_p50: pct(lat, 50),
    latency_ms_p90: pct(lat, 90),
    latency_ms_p99: pct(lat, 99),
    steps: s1.steps - s0.steps,
    max_batch_seen: s1.maxBatchSeen,
  };
  process.stderr.write(
    `${name}: ${out.requests_per_s.toFixed(2)} req/s, ${out.tokens_per_s.toFixed(1)} tok/s, ttft p50 ${out.ttft_ms_p50?.toFixed(0)} ms, latency p50/p90/p99 ${out.latency_ms_p50.toFixed(0)}/${out.latency_ms_p90.toFixed(0)}/${out.latency_ms_p99.toFixed(0)} ms, ${out.steps} steps\n`,
  );
  return out;
}

const modelDir = ensureModel();
const { Policy, generate } = await lib('model/policy.js');
const { ChatServer, policyServeBackend } = await lib('serve/index.js');
const { native } = await lib('native.js');
if (a.threads) native().setNumThreads(Number(a.threads));
const policy = await Policy.load(modelDir, { device: a.device, dtype: dtypeName });
const reqs = makeRequests();
const srv = new ChatServer({
  backend: policyServeBackend(policy, { maxRows: maxBatch, capacity: Number(a['max-model-len']) }),
  modelId: 'bench',
  maxBatch,
  maxQueue: 4 * N,
});
const { url } = await srv.start();
const stats = () => srv.stats();

// Warm-up: the whole mixed load once, untimed, so every batch-size bucket the measured runs reach
// has its CUDA graph captured (two eager steps + a capture per bucket) and the allocator holds its
// blocks; otherwise the first measured scenario pays those one-time costs and the second does not.
await scenario('warm-up', url, reqs, true, stats);
const results = [];
results.push(await scenario('mixed-serve', url, reqs, true, stats));
results.push(await scenario('uniform-serve', url, reqs, false, stats));
await srv.close();

// The same requests as one uniform batch: one native generate() call (prompts rendered the same way).
const promptIds = await policy.encodePrompts(
  reqs.map((r) => [{ role: 'user', content: r.content }]),
  { enableThinking: false },
);
const base = {
  prompts: promptIds.map((p) => Int32Array.from(p)),
  temperature: uniform.temperature,
  topP: uniform.topP,
  stopIds: [],
  seed: 1,
  padId: policy.tokenizer.padTokenId,
  promptOptions: reqs.map((r) => ({ maxNewTokens: r.maxTokens })),
};
await generate(policy.model, { ...base, promptOptions: reqs.map(() => ({ maxNewTokens: 4 })) });
const t0 = performance.now();
const g = await generate(policy.model, base);
const secs = (performance.now() - t0) / 1000;
const ub = {
  scenario: 'uniform-batch',
  requests: N,
  seconds: secs,
  requests_per_s: N / secs,
  tokens: g.newTokens,
  tokens_per_s: g.newTokens / secs,
  ttft_ms_p50: null,
  latency_ms_p50: secs * 1000,
  decode_path: g.decodePath,
};
process.stderr.write(`uniform-batch (one generate call, ${g.decodePath}): ${ub.requests_per_s.toFixed(2)} req/s, ${ub.tokens_per_s.toFixed(1)} tok/s\n`);
results.push(ub);

// Several adapters in one server (serve --lora-modules): each adapter's rows decode in their own
// engine, one forward per adapter per step; against the same requests all to one adapter.
const K = Number(a.adapters);
if (K > 0) {
  const { mkdtempSync, rmSync } = await import('node:fs');
  const { tmpdir } = await import('node:os');
  const { join } = await import('node:path');
  const { loadServedAdapters } = await lib('serve/policy.js');
  const dir = mkdtempSync(join(tmpdir(), 'pg-bench-adapters-'));
  const modules = [];
  for (let k = 0; k < K; k++) {
    policy.model.addLora({ r: 16, alpha: 32, seed: k });
    const r = rng(100 + k);
    const w = {};
    for (const [name, t] of Object.entries(policy.model.loraWeights()))
      if (name.includes('lora_B')) w[name] = { data: t.data.map(() => (r() - 0.5) * 0.02), shape: t.shape };
    policy.model.setLoraWeights(w);
    await policy.model.saveAdapter(join(dir, `a${k}`));
    modules.push(`a${k}=${join(dir, `a${k}`)}`);
  }
  const adapters = await loadServedAdapters(policy, modules);
  const srv2 = new ChatServer({
    backend: policyServeBackend(policy, { maxRows: maxBatch, capacity: Number(a['max-model-len']), adapters }),
    modelId: 'bench',
    adapters: Object.keys(adapters),
    maxBatch,
    maxQueue: 4 * N,
  });
  const u2 = (await srv2.start()).url;
  const st2 = () => srv2.stats();
  await scenario('warm-up adapters', u2, reqs, true, st2, (i) => `a${i % K}`);
  const many = await scenario(`${K}-adapters-one-server`, u2, reqs, true, st2, (i) => `a${i % K}`);
  const single = await scenario('one-adapter', u2, reqs, true, st2, () => 'a0');
  results.push(many, single);
  process.stderr.write(`${K} adapters in one server / one adapter: ${(many.tokens_per_s / single.tokens_per_s).toFixed(3)} of the tokens/s\n`);
  await srv2.close();
  rmSync(dir, { recursive: true, force: true });
}
policy.dispose();

const ratio = results[0].tokens_per_s / ub.tokens_per_s;
const ratioServe = results[0].tokens_per_s / results[1].tokens_per_s;
const rt = native().runtimeInfo();
const summary = {
  mix: a.mix,
  device: a.device,
  shape: a.model ? a.model : a.shape,
  dtype: dtypeName,
  clients: N,
  max_batch: maxBatch,
  tokens: [minT, maxT],
  threads: rt.numThreads,
  results,
  mixed_over_uniform_batch: ratio,
  mixed_over_uniform_serve: ratioServe,
};
console.log('');
printTable(
  ['scenario', 'req/s', 'tok/s', 'TTFT p50 ms', 'latency p50 / p90 / p99 ms', 'steps'],
  results.map((r) => [
    r.scenario,
    r.requests_per_s.toFixed(2),
    r.tokens_per_s.toFixed(1),
    r.ttft_ms_p50?.toFixed(0) ?? '-',
    `${r.latency_ms_p50.toFixed(0)} / ${r.latency_ms_p90?.toFixed(0) ?? '-'} / ${r.latency_ms_p99?.toFixed(0) ?? '-'}`,
    r.steps ?? '-',
  ]),
);
console.log(`\nmixed-serve / uniform-batch throughput: ${ratio.toFixed(3)}; mixed-serve / uniform-serve: ${ratioServe.toFixed(3)}`);
writeJson(a.json, summary);
