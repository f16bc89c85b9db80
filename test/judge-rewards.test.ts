import { expect } from 'chai';
import { computeReward, scorePlans, summariseRewards, DEFAULT_ALPHA } from '../lib/judge/rewards.js';
import { emptyStats, type Judge, type JudgeRequest, type Verdict } from '../lib/judge/types.js';

const v = (id: string, met: boolean | null, extra: Partial<Verdict> = {}): Verdict => ({ itemId: id, met, ...extra });

describe('judge rewards', () => {
  it('r = 0.7·r_spec + 0.3·r_gen by default', () => {
    const spec = [v('a', true), v('b', true), v('c', false), v('d', false)]; // 0.5
    const gen = [v('g1', true), v('g2', false), v('g3', false), v('g4', false)]; // 0.25
    const b = computeReward(spec, gen);
    expect(DEFAULT_ALPHA).to.equal(0.7);
    expect(b.rSpec).to.equal(0.5);
    expect(b.rGen).to.equal(0.25);
    expect(b.r).to.be.closeTo(0.7 * 0.5 + 0.3 * 0.25, 1e-12);
    expect([b.specMet, b.specTotal, b.genMet, b.genTotal]).to.deep.equal([2, 4, 1, 4]);
    expect(b.spec).to.equal(spec);
  });
  it('alpha extremes and validation', () => {
    const spec = [v('a', true), v('b', false)];
    const gen = [v('g', false)];
    expect(computeReward(spec, gen, { alpha: 1 }).r).to.equal(0.5);
    expect(computeReward(spec, gen, { alpha: 0 }).r).to.equal(0);
    expect(() => computeReward(spec, gen, { alpha: 1.5 })).to.throw(RangeError);
    expect(() => computeReward(spec, gen, { alpha: NaN })).to.throw(RangeError);
  });
  it('null verdicts are excluded from the reward (never "not met") and reported; a plan with none readable is masked', () => {
    // 1 of the 2 readable spec items met; the general set has no readable verdict, so its weight moves to spec.
    const b = computeReward([v('a', true), v('b', null, { refused: true }), v('c', null, { error: true }), v('d', false)], [v('g', null)]);
    expect(b.rSpec).to.equal(0.5);
    expect(b.rGen).to.equal(0);
    expect(b.r).to.equal(0.5);
    expect(b.masked).to.equal(false);
    expect(b.nulls).to.equal(3);
    expect(b.refusals).to.equal(1);
    expect(b.errors).to.equal(1);
    // A failed item drops out of its set's mean: the same reward as without that item.
    const full = computeReward([v('a', true), v('b', false)], [v('g1', true), v('g2', false)]);
    const failed = computeReward([v('a', true), v('x', null, { error: true }), v('b', false)], [v('g1', true), v('g2', false), v('y', null, { error: true })]);
    expect(failed.r).to.equal(full.r);
    expect(computeReward([v('a', true), v('b', null)], [], { score: 'prob' }).r).to.equal(1);
    const none = computeReward([v('a', null, { error: true })], [v('g', null)]);
    expect([none.masked, none.nulls]).to.deep.equal([true, 2]);
    expect(computeReward([], []).masked).to.equal(false);
    const s = summariseRewards([full, none]);
    expect([s.n, s.masked, s.meanR]).to.deep.equal([2, 1, full.r]);
  });
  it('an empty set moves its weight to the other set', () => {
    expect(computeReward([v('a', true), v('b', false)], []).r).to.equal(0.5);
    expect(computeReward([], [v('g', true)]).r).to.equal(1);
    expect(computeReward([], []).r).to.equal(0);
  });
  it('scorePlans splits spec/general by position, and summarises', async () => {
    const seen: JudgeRequest[] = [];
    const judge: Judge = {
      name: 'fake',
      stats: emptyStats,
      async judge(reqs) {
        seen.push(...reqs);
        return reqs.map((r) => r.items.map((it) => v(it.id, r.plan.includes(it.text))));
      },
    };
    const spec = [
      { id: 'x', text: 'alpha' },
      { id: 'y', text: 'beta' },
    ];
    const gen = [{ id: 'x', text: 'gamma' }];
    const rs = await scorePlans(judge, [
      { question: 'q', plan: 'alpha gamma', specItems: spec, genItems: gen },
      { question: 'q', plan: 'beta', specItems: spec, genItems: gen },
    ]);
    expect(seen[0].items.map((i) => i.text)).to.deep.equal(['alpha', 'beta', 'gamma']);
    expect(rs[0].r).to.be.closeTo(0.7 * 0.5 + 0.3 * 1, 1e-12);
    expect(rs[1].r).to.be.closeTo(0.7 * 0.5, 1e-12);
    const s = summariseRewards(rs);
    expect(s.n).to.equal(2);
    expect(s.meanRSpec).to.equal(0.5);
    expect(s.meanRGen).to.equal(0.5);
    expect(s.nullRate).to.equal(0);
  });
});

describe('judge rewards: makeRewardFn (the training loop RewardFn)', () => {
  it('judges instance + general items, strips thinking, reports per-dimension counts', async () => {
    const { makeRewardFn } = await import('../lib/judge/rewards.js');
    const plans: string[] = [];
    const judge: Judge = {
      name: 'fake',
      stats: emptyStats,
      async judge(reqs) {
        plans.push(...reqs.map((r) => r.plan));
        return reqs.map((r) => r.items.map((it) => v(it.id, r.plan.includes(it.text))));
      },
    };
    const fn = makeRewardFn(judge, [{ id: 'G1', text: 'concrete' }]);
    const item = {
      id: 'q',
      question: 'Q',
      rubric: [
        { id: 'a', text: 'ablation', dimension: 'method_innovation' },
        { id: 'b', text: 'baseline', dimension: 'experimental_design' },
      ],
    };
    const [r] = await fn([{ item, plan: '<think>ablation baseline concrete</think>\nA concrete ablation.' }]);
    expect(plans[0]).to.equal('A concrete ablation.');
    expect(r.rSpec).to.equal(0.5);
    expect(r.rGen).to.equal(1);
    expect(r.reward).to.be.closeTo(0.7 * 0.5 + 0.3, 1e-12);
    expect(r.perDimension).to.deep.equal({ method_innovation: [1, 1], experimental_design: [0, 1], general: [1, 1] });
  });
  it('a plan whose judge requests all failed is masked; a failed item is out of the pass rates', async () => {
    const { makeRewardFn } = await import('../lib/judge/rewards.js');
    const judge: Judge = {
      name: 'flaky',
      stats: emptyStats,
      async judge(reqs) {
        return reqs.map((r) => r.items.map((it) => (r.plan === 'down' || it.id === 'b' ? v(it.id, null, { error: true }) : v(it.id, true))));
      },
    };
    const fn = makeRewardFn(judge, [{ id: 'G1', text: 'concrete' }]);
    const item = {
      id: 'q',
      question: 'Q',
      rubric: [
        { id: 'a', text: 'ablation', dimension: 'method_innovation' },
        { id: 'b', text: 'baseline', dimension: 'experimental_design' },
      ],
    };
    const [up, down] = await fn([
      { item, plan: 'up' },
      { item, plan: 'down' },
    ]);
    expect([up.reward, up.masked]).to.deep.equal([1, undefined]);
    expect(up.perDimension).to.deep.equal({ method_innovation: [1, 1], general: [1, 1] });
    expect(down.masked).to.equal(true);
    expect(down.judge!.errors).to.equal(3);
  });
});
