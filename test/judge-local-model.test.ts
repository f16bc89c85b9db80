/**
 * The local judge on a real (tiny, random) Qwen3 through the addon: P(yes) read from batched,
 * right-padded prefills equals the value from a teacher-forced forward of each prompt alone at its
 * last position; the adapter is off (a non-zero LoRA changes `active` logits but not the judge).
 * Skipped when the addon or python (tiny-model maker) is unavailable.
 */
import { expect } from 'chai';
import { cpSync, mkdtempSync, readFileSync, rmSync, utimesSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Tokenizer } from '../lib/model/tokenizer.js';
import { ChatTemplate } from '../lib/model/chat.js';
import { localJudgeForModel, prefixLogprobsScorer, sequenceLogprobsScorer, yesProbability, type LocalJudge } from '../lib/judge/local.js';
import { localBackend } from '../lib/judge/backends/local.js';
import { judgeModelIdentity } from '../lib/judge/local-cache.js';
import { loadPrompt } from '../lib/judge/verdict.js';
import { JUDGE_DEFAULTS, type JudgeConfig } from '../lib/config/judge.js';
import { openDatabase } from '../lib/util/sqlite.js';
import { loadModel, type Qwen3Model } from '../lib/model/qwen3.js';
import { tinyModel } from './helpers/tiny.js';
import { orSkip, withFusedKernels } from './helpers/run.js';

describe('judge local on a tiny Qwen3 (addon)', function () {
  this.timeout(240000);
  let model: Qwen3Model;
  let tok: Tokenizer;
  let template: ChatTemplate;
  let dir: string;
  before(async function () {
    await orSkip(this, async () => {
      dir = tinyModel('tiny-tied');
      model = await loadModel(dir);
    });
    tok = Tokenizer.fromDir(dir);
    template = ChatTemplate.fromTokenizer(tok);
  });
  after(() => model?.dispose());

  it('batched P(yes) equals a teacher-forced forward of each prompt, with the adapter off', async () => {
    const V = Number(model.config.vocab_size);
    // A non-zero adapter: the judge must not see it.
    model.addLora({ r: 4, alpha: 8, seed: 1 });
    const w = model.loraWeights();
    const bumped: typeof w = {};
    for (const [k, t] of Object.entries(w)) if (k.includes('lora_B')) bumped[k] = { data: t.data.map((_, i) => 0.05 * Math.sin(i + 1)), shape: t.shape };
    model.setLoraWeights(bumped);
    for (const [scoring, variants] of [
      ['sequence-logprobs', 'all'],
      ['forward-logits', 'pair'],
    ] as const) {
      const judge = await localJudgeForModel(model, tok, { scoring, variants, batchSize: 8, template });
      const items = [
        { id: 'a', text: 'Uses an ablation.' },
        { id: 'b', text: 'Compares against three strong baselines on two datasets with error bars.' },
      ];
      const reqs = [
        { question: 'How do we make X faster?', plan: 'We profile and then ablate each component of X.', items },
        { question: 'Why?', plan: '', items },
      ];
      const v = await judge.judge(reqs);
      let checked = 0;
      for (let r = 0; r < reqs.length; r++) {
        for (let k = 0; k < items.length; k++) {
          const ids = await judge.promptIds(reqs[r].question, reqs[r].plan, items[k].text);
          const T = ids.length;
          const one = async (adapter: string) => {
            const { logits } = await model.forward({ inputIds: { data: Int32Array.from(ids), shape: [1, T] }, outputs: ['logits'], adapter });
            return logits!.data.slice((T - 1) * V, T * V);
          };
          const base = yesProbability(await one('none'), judge.yesIds, judge.noIds).pYes;
          const active = yesProbability(await one('active'), judge.yesIds, judge.noIds).pYes;
          expect(v[r][k].prob!).to.be.closeTo(base, 1e-5);
          expect(v[r][k].met).to.equal(base > 0.5);
          expect(Math.abs(active - base)).to.be.greaterThan(1e-6);
          checked++;
        }
      }
      expect(checked).to.equal(4);
      expect(judge.stats().requests).to.equal(4);
    }
  });

  it('prefix sharing (one prefill of question + plan per plan) gives the same P(yes) as separate prefills, with fewer prompt tokens', async () => {
    const items = [
      { id: 'a', text: 'Uses an ablation.' },
      { id: 'b', text: 'Compares against three strong baselines on two datasets with error bars.' },
      { id: 'c', text: 'States the compute budget.' },
    ];
    const reqs = [
      { question: 'How do we make X faster?', plan: 'We profile and then ablate each component of X, then report wall-clock time.', items },
      { question: 'Why does Y fail on long inputs?', plan: 'Measure Y on inputs of growing length.', items: items.slice(0, 2) },
      { question: 'Single item', plan: 'One item only.', items: items.slice(2) },
    ];
    const shared = await localJudgeForModel(model, tok, { template });
    const separate = await localJudgeForModel(model, tok, { template, prefixSharing: false });
    const a = await shared.judge(reqs);
    const b = await separate.judge(reqs);
    for (let r = 0; r < reqs.length; r++)
      for (let k = 0; k < reqs[r].items.length; k++) {
        expect(a[r][k].prob!).to.be.closeTo(b[r][k].prob!, 1e-5);
        expect(a[r][k].met).to.equal(b[r][k].met);
      }
    expect(shared.stats().requests).to.equal(separate.stats().requests);
    expect(shared.stats().promptTokens).to.be.lessThan(separate.stats().promptTokens);
    // Several plans' prefixLogprobs calls at once (the model's read-only calls share its lock):
    // the same P(yes) as one plan at a time.
    const concurrent = await localJudgeForModel(model, tok, { template, planConcurrency: 3 });
    const c = await concurrent.judge(reqs);
    for (let r = 0; r < reqs.length; r++) for (let k = 0; k < reqs[r].items.length; k++) expect(c[r][k].prob!).to.be.closeTo(a[r][k].prob!, 1e-6);
  });

  it('prefixLogprobs near the context limit: bucketed (prefix to 64·k, suffixes to 16·k) and unpadded where the buckets pass the context, both equal the per-prompt scorer within 1e-5', async () => {
    // The same checkpoint with a 100-token context: prefix + padded suffix buckets of up to 64 + 32
    // fit; longer ones (65 → 128, or 36 + 33 → 64 + 48) fall back to the unpadded shapes.
    const small = mkdtempSync(join(tmpdir(), 'pg-ctx100-'));
    cpSync(dir, small, { recursive: true });
    const cfg = JSON.parse(readFileSync(join(small, 'config.json'), 'utf8'));
    writeFileSync(join(small, 'config.json'), JSON.stringify({ ...cfg, max_position_embeddings: 100 }));
    const m = await loadModel(small);
    try {
      const shared = prefixLogprobsScorer(m, { padId: tok.padTokenId, adapter: 'none' });
      const whole = sequenceLogprobsScorer(m, { padId: tok.padTokenId, adapter: 'none' });
      const candidates = [9454, 2753, 0];
      const ids = (n: number, salt: number) => Array.from({ length: n }, (_, i) => 100 + ((i * 7919 + salt * 31) % 5000));
      const cases: [number, number[]][] = [
        [1, [1]],
        [63, [15]],
        [64, [16]],
        [64, [17]],
        [65, [16]],
        [32, [33, 1, 16, 32]],
        [36, [33]],
        [36, [63]],
        [40, Array.from({ length: 20 }, (_, i) => 1 + (i % 17))],
        [98, [1]],
        [1, [98]],
        [82, [17]],
      ];
      for (const [P, lens] of cases) {
        const prefix = ids(P, 1),
          suffixes = lens.map((n, j) => ids(n, j + 2));
        const a = await shared(prefix, suffixes, candidates);
        const b = await whole(
          suffixes.map((s) => [...prefix, ...s]),
          candidates,
        );
        a.forEach((row, i) => row.forEach((x, k) => expect(x, `prefix ${P}, suffix lengths ${lens}: row ${i} candidate ${k}`).to.be.closeTo(b[i]![k]!, 1e-5)));
      }
      // One past the context (99 + 1 + the scored position): the model's clear error, not a crash.
      let err: Error | undefined;
      await shared(ids(99, 1), [ids(2, 2)], candidates).catch((e: Error) => (err = e));
      expect(err?.message).to.match(/exceeds the model's context \(max_position_embeddings 100\)/);
    } finally {
      m.dispose();
      rmSync(small, { recursive: true, force: true });
    }
  });

  it('prefixLogprobs: the shared-prefix attention (the prefix K/V read in place, CPU flash op) == the prefix K/V copied per row (fused paths off) within 1e-5, over left-padded prefixes and right-padded suffixes', async () => {
    const ids = (n: number, salt: number) => Array.from({ length: n }, (_, i) => 100 + ((i * 7919 + salt * 31) % 5000));
    const candidates = [9454, 2753, 0];
    const scorer = prefixLogprobsScorer(model, { padId: tok.padTokenId, adapter: 'none' });
    let worst = 0;
    for (const [P, lens] of [
      [1, [1]],
      [65, [17, 1, 40]],
      [130, Array.from({ length: 17 }, (_, i) => 3 + i)],
    ] as [number, number[]][]) {
      const prefix = ids(P, 1),
        suffixes = lens.map((n, j) => ids(n, j + 2));
      const shared = await withFusedKernels(true, () => scorer(prefix, suffixes, candidates));
      const copied = await withFusedKernels(false, () => scorer(prefix, suffixes, candidates));
      shared.forEach((row, i) =>
        row.forEach((x, k) => {
          worst = Math.max(worst, Math.abs(x - copied[i]![k]!));
          expect(Math.abs(x - copied[i]![k]!), `prefix ${P}, suffixes ${lens}: row ${i} candidate ${k}`).to.be.at.most(1e-5);
        }),
      );
    }
    expect(worst, 'the two paths are different computations (an identical result would mean one path ran twice)').to.be.greaterThan(0);
  });

  it('prefixLogprobs rejects malformed arguments with TypeErrors', async () => {
    const { native } = await import('../lib/native.js');
    const t = (data: number[], shape: number[]) => ({ data: Int32Array.from(data), shape });
    const base = {
      prefixIds: t([1, 2, 3], [1, 3]),
      suffixIds: t([4, 5, 6, 0], [2, 2]),
      suffixLengths: t([2, 1], [2]),
      candidates: t([7, 8], [2]),
      adapter: 'none',
    };
    await native().prefixLogprobs(model, base);
    for (const bad of [
      { suffixLengths: t([3, 1], [2]) },
      { suffixLengths: t([0, 1], [2]) },
      { candidates: t([-1], [1]) },
      { candidates: t([10 ** 8], [1]) },
      { prefixIds: t([1, 2], [2, 1]) },
      { suffixLengths: { data: Float32Array.from([1.5, 1]), shape: [2] } }, // was truncated to 1
      { candidates: { data: Float32Array.from([7, 8]), shape: [2] } },
      // token ids outside the vocabulary, in the suffixes (padding too) or the prefix: were an
      // internal libtorch error on the shared-prefix path
      { suffixIds: t([4, 5, 6, 999999], [2, 2]) },
      { suffixIds: t([4, -5, 6, 0], [2, 2]) },
      { prefixIds: t([1, 2, 10 ** 7], [1, 3]) },
    ])
      expect(() => native().prefixLogprobs(model, { ...base, ...bad } as never)).to.throw(TypeError, /prefixLogprobs/);
    const ModelClass = native().Model as unknown as new () => unknown;
    expect(() => new ModelClass())
      .to.throw(TypeError, /cannot be constructed directly/)
      .with.property('code', 'ERR_PG_ARG');
  });
  it("through the backend: the caller's per-item prompt reaches the judge (an eval protocol's wording)", async () => {
    const criterion = loadPrompt('eval-criterion.v1');
    const c = { ...JUDGE_DEFAULTS, kind: 'local' } as JudgeConfig;
    const ctx = { policy: { model, tokenizer: tok }, openJudge: () => Promise.reject(new Error('unused')) };
    const own = (await localBackend.open(c as never, { ...ctx, perItemPrompt: criterion })) as LocalJudge;
    const def = (await localBackend.open(c as never, ctx)) as LocalJudge;
    const req = [{ question: 'Q?', plan: 'A plan.', items: [{ id: 'a', text: 'Uses an ablation.' }] }];
    const [[withCriterion]] = await own.promptsFor(req);
    const [[withDefault]] = await def.promptsFor(req);
    // The user message is the protocol's template filled in, not the default one.
    expect(withCriterion!.text).to.include(
      criterion.template.replace('{{question}}', 'Q?').replace('{{plan}}', 'A plan.').replace('{{item}}', 'Uses an ablation.'),
    );
    expect(withDefault!.text).to.not.equal(withCriterion!.text);
    own.close();
    def.close();
  });

  it('answer cache: a rerun answers judged plans from it (no scoring), keyed by the model files and placement and the request', async () => {
    const tmp = mkdtempSync(join(tmpdir(), 'pg-local-cache-'));
    try {
      const path = join(tmp, 'judge-cache.sqlite');
      const c = { ...JUDGE_DEFAULTS, kind: 'local', cache: path } as JudgeConfig;
      const open = async (source: { dir: string; device?: string; dtype?: string }) =>
        (await localBackend.open(c as never, {
          policy: { model, tokenizer: tok, source },
          openJudge: () => Promise.reject(new Error('unused')),
        })) as LocalJudge;
      const items = [
        { id: 'a', text: 'Uses an ablation.' },
        { id: 'b', text: 'Reports error bars.' },
      ];
      const reqs = [
        { question: 'How do we make X faster?', plan: 'We profile, then ablate each component of X.', items },
        { question: 'Why?', plan: 'Because.', items },
      ];
      const first = await open({ dir, device: 'cpu' });
      const v1 = await first.judge(reqs);
      expect(first.stats()).to.include({ cacheHits: 0 });
      expect(first.timings().calls).to.equal(1);
      first.close();
      // A new judge on the same files, placement and cache: the same verdicts, nothing scored.
      const again = await open({ dir, device: 'cpu' });
      expect(await again.judge(reqs)).to.deep.equal(v1);
      expect(again.stats()).to.include({ cacheHits: 4, requests: 0, verdicts: 4 });
      expect(again.timings().calls).to.equal(0);
      // One request changed: only it is scored.
      const changed = [reqs[0]!, { ...reqs[1]!, plan: 'Because it is faster.' }];
      const v2 = await again.judge(changed);
      expect(v2[0]).to.deep.equal(v1[0]);
      expect(again.stats().cacheHits).to.equal(6);
      expect(again.timings().calls).to.equal(1);
      again.close();
      // A damaged entry is scored again, not read.
      const db = openDatabase(path);
      db.exec("UPDATE judge_cache SET content = '{not json'");
      db.close();
      const damaged = await open({ dir, device: 'cpu' });
      expect(await damaged.judge(reqs)).to.deep.equal(v1);
      expect(damaged.stats().cacheHits).to.equal(0);
      damaged.close();
      // Another dtype, or weights rewritten in place (same size, new mtime): not the same judge, nothing read.
      const bf16 = await open({ dir, device: 'cpu', dtype: 'bfloat16' });
      await bf16.judge(reqs);
      expect(bf16.stats().cacheHits).to.equal(0);
      bf16.close();
      const copy = join(tmp, 'model');
      cpSync(dir, copy, { recursive: true });
      const fromCopy = await open({ dir: copy, device: 'cpu' });
      await fromCopy.judge(reqs);
      expect(fromCopy.stats().cacheHits, 'another dir is another identity').to.equal(0);
      fromCopy.close();
      const weights = join(copy, 'model.safetensors');
      const before = judgeModelIdentity(copy, { device: 'cpu' });
      utimesSync(weights, new Date(), new Date(Date.now() + 5000));
      expect(judgeModelIdentity(copy, { device: 'cpu' })).to.not.equal(before);
      expect(judgeModelIdentity(copy, { device: 'cuda:1' })).to.equal(judgeModelIdentity(copy, { device: 'cuda:0' }));
    } finally {
      rmSync(tmp, { recursive: true, force: true });
    }
  });
});
