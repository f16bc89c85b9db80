import { expect } from 'chai';
import { runEval, type PlanGenerator } from '../lib/eval/run.js';
import { emptyStats, type Judge } from '../lib/judge/types.js';
import type { PaperGymItem } from '../lib/data/schema.js';

function item(id: string): PaperGymItem {
  return {
    id,
    source: { paper_id: id, title: 't', domain: 'cs' },
    question: `Question ${id}`,
    reference_answer: 'r',
    rubric: [
      { id: 'r1', text: 'alpha', dimension: 'method_innovation', origin: 'R_Q', rank: 1 },
      { id: 'r2', text: 'beta', dimension: 'experimental_design', origin: 'R_A', rank: 2 },
    ],
    general_rubric_set: 'g',
    split: 'test',
    stages: { goals: '', background: '', methods: '', experimental_design: '' },
  };
}

describe('eval run (fake generator and judge)', () => {
  it('generates, strips thinking, judges spec + general, and reports', async () => {
    const seen: string[] = [];
    const generator: PlanGenerator = {
      async generate(qs, { samples, seed }) {
        return qs.map((q, i) =>
          Array.from({ length: samples }, (_, s) => ({
            text: `<think>alpha beta gamma</think>${(i + s + seed) % 2 ? 'alpha gamma' : 'beta'} for ${q}`,
            finishReason: 'stop',
          })),
        );
      },
    };
    const judge: Judge = {
      name: 'kw',
      stats: emptyStats,
      async judge(reqs) {
        seen.push(...reqs.map((r) => r.plan));
        return reqs.map((r) => r.items.map((it) => ({ itemId: it.id, met: r.plan.includes(it.text), prob: 0.5 })));
      },
    };
    const items = ['a', 'b', 'c'].map(item);
    const progress: number[] = [];
    const { report, rows, plans } = await runEval({
      items,
      general: [{ id: 'G', text: 'gamma' }],
      judge,
      generator,
      samples: 2,
      chunkSize: 2,
      resamples: 50,
      onProgress: (d) => progress.push(d),
    });
    expect(seen.every((p) => !p.includes('<think>'))).to.equal(true);
    expect(plans).to.have.length(6);
    expect(rows).to.have.length(3 * 2 * 3);
    expect(rows[0]).to.deep.include({
      questionId: 'a',
      sample: 0,
      itemId: 'r1',
      kind: 'spec',
      dimension: 'method_innovation',
      origin: 'R_Q',
      rank: 1,
      prob: 0.5,
    });
    expect(rows[2]).to.deep.include({ itemId: 'G', kind: 'general' });
    expect(rows.map((r) => r.questionId)).to.deep.equal(['a', 'a', 'a', 'a', 'a', 'a', 'b', 'b', 'b', 'b', 'b', 'b', 'c', 'c', 'c', 'c', 'c', 'c']);
    // Each plan meets exactly one of alpha / beta, and gamma iff alpha.
    expect(report.overall.mean).to.equal(0.5);
    expect(report.questions).to.equal(3);
    expect(report.plans).to.equal(6);
    expect(progress[progress.length - 1]).to.equal(3);
  });
});
