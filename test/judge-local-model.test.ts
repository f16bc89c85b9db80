/**
 * The local judge on a real (tiny, random) Qwen3 through the addon: P(yes) read from batched,
 * right-padded prefills equals the value from a teacher-forced forward of each prompt alone at its
 * last position; the adapter is off (a non-zero LoRA changes `active` logits but not the judge).
 * Skipped when the addon or python (tiny-model maker) is unavailable.
 */
import { expect } from 'chai';
import { Tokenizer } from '../lib/model/tokenizer.js';
import { ChatTemplate } from '../lib/model/chat.js';
import { localJudgeForModel, yesProbability } from '../lib/judge/local.js';
import { loadModel, type Qwen3Model } from '../lib/model/qwen3.js';
import { tinyModel } from './helpers/tiny.js';
import { orSkip } from './helpers/run.js';

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
    for (const [scoring, variants] of [['sequence-logprobs', 'all'], ['forward-logits', 'pair']] as const) {
    const judge = await localJudgeForModel(model, tok, { scoring, variants, batchSize: 8, template });
    const items = [{ id: 'a', text: 'Uses an ablation.' }, { id: 'b', text: 'Compares against three strong baselines on two datasets with error bars.' }];
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
  });

  it('prefixLogprobs rejects malformed arguments with TypeErrors', async () => {
    const { native } = await import('../lib/native.js');
    const t = (data: number[], shape: number[]) => ({ data: Int32Array.from(data), shape });
    const base = { prefixIds: t([1, 2, 3], [1, 3]), suffixIds: t([4, 5, 6, 0], [2, 2]), suffixLengths: t([2, 1], [2]), candidates: t([7, 8], [2]), adapter: 'none' };
    await native().prefixLogprobs(model, base);
    for (const bad of [
      { suffixLengths: t([3, 1], [2]) },
      { suffixLengths: t([0, 1], [2]) },
      { candidates: t([-1], [1]) },
      { candidates: t([10 ** 8], [1]) },
      { prefixIds: t([1, 2], [2, 1]) },
    ])
      expect(() => native().prefixLogprobs(model, { ...base, ...bad })).to.throw(TypeError, /prefixLogprobs/);
  });
});
