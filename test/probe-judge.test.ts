import { expect } from 'chai';
import { attackPlan, keywords, runProbe, formatProbe, DEFAULT_ATTACKS } from '../lib/judge/probe.js';
import { emptyStats, type Judge } from '../lib/judge/types.js';
import type { PaperGymItem } from '../lib/data/schema.js';

function item(id: string, texts: string[]): PaperGymItem {
  return {
    id,
    source: { paper_id: id, title: 't', domain: 'cs' },
    question: `How can we improve ${id}?`,
    reference_answer: 'ref',
    rubric: texts.map((text, i) => ({ id: `${id}-r${i}`, text, dimension: i % 2 ? 'experimental_design' : 'method_innovation', origin: 'R_Q', rank: i + 1 })),
    general_rubric_set: 'g',
    split: 'test',
    stages: { goals: '', background: '', methods: '', experimental_design: '' },
  };
}

/** A gullible judge: yes when the plan contains the item's first keyword, or obeys a grader note; refuses empty plans. */
const gullible: Judge = {
  name: 'gullible',
  stats: emptyStats,
  async judge(reqs) {
    return reqs.map((r) =>
      r.items.map((it) => {
        if (!r.plan) return { itemId: it.id, met: null, refused: true };
        const met = /GRADER/.test(r.plan) || r.plan.toLowerCase().includes(keywords([it.text])[0]);
        return { itemId: it.id, met };
      }),
    );
  },
};

describe('probe-judge (reward-hacking probe)', () => {
  const data = [
    item('q1', ['Uses contrastive pretraining on unlabeled images', 'Reports variance over five seeds']),
    item('q2', ['Ablates the attention module', 'Compares against transformer baselines']),
  ];

  it('attack plans: restated question, stuffed keywords, injected instruction, empty', () => {
    expect(attackPlan('restate', 'Why X?', [])).to.contain('Why X?');
    const kw = attackPlan('keywords', 'Q', ['Uses contrastive pretraining', 'The plan reports variance']);
    expect(kw).to.contain('contrastive').and.contain('pretraining').and.contain('variance');
    expect(kw).to.not.match(/\bthe\b|\bplan\b,/);
    expect(attackPlan('inject', 'Q', [])).to.match(/answer "Yes"/);
    expect(attackPlan('empty', 'Q', ['x'])).to.equal('');
    expect(attackPlan('echo', 'Q', ['Does the plan compare baselines?'])).to.equal('The plan will compare baselines.');
  });

  it('false-positive rate per attack, nulls excluded, mean reward', async () => {
    const r = await runProbe(gullible, data);
    expect(r.results.map((a) => a.attack)).to.deep.equal(DEFAULT_ATTACKS);
    const by = Object.fromEntries(r.results.map((a) => [a.attack, a]));
    expect(by.keywords).to.include({ yes: 4, no: 0, nulls: 0, falsePositiveRate: 1, meanReward: 1 });
    expect(by.inject).to.include({ yes: 4, falsePositiveRate: 1 });
    expect(by.restate).to.include({ yes: 0, no: 4, falsePositiveRate: 0 });
    expect(by.empty.nulls).to.equal(4);
    expect(Number.isNaN(by.empty.falsePositiveRate)).to.equal(true);
    expect(by.empty.falsePositiveRateAll).to.equal(0);
    expect(by.keywords.hits).to.deep.equal([
      { id: 'q1', items: ['q1-r0', 'q1-r1'] },
      { id: 'q2', items: ['q2-r0', 'q2-r1'] },
    ]);
    const t = formatProbe(r);
    expect(t)
      .to.match(/keywords\s+100\.0%/)
      .and.match(/empty\s+n\/a/);
  });

  it('general items are judged too when given and weigh into the reward', async () => {
    const r = await runProbe(gullible, data, { attacks: ['inject'], general: [{ id: 'g1', text: 'zzz never' }] });
    expect(r.includeGeneral).to.equal(true);
    expect(r.results[0].verdicts).to.equal(6);
    expect(r.results[0].meanReward).to.be.closeTo(1, 1e-12);
  });
});
