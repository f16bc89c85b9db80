import { expect } from 'chai';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { buildReport, formatReport, mulberry32, quantile, writeRowsJsonl, type EvalRow } from '../lib/eval/report.js';

function rowsFor(q: string, inno: (boolean | null)[], design: (boolean | null)[], gen: (boolean | null)[], sample = 0): EvalRow[] {
  return [
    ...inno.map((met, i) => ({ questionId: q, sample, itemId: `i${i}`, kind: 'spec' as const, dimension: 'method_innovation' as const, met })),
    ...design.map((met, i) => ({ questionId: q, sample, itemId: `d${i}`, kind: 'spec' as const, dimension: 'experimental_design' as const, met })),
    ...gen.map((met, i) => ({ questionId: q, sample, itemId: `g${i}`, kind: 'general' as const, met })),
  ];
}

describe('eval report', () => {
  const rows = [
    ...rowsFor('q1', [true, true, false], [true, false], [true, true]), // spec 3/5, inno 2/3, design 1/2, gen 2/2
    ...rowsFor('q2', [false, null, false], [true, true], [false, true]), // the null leaves: spec 2/4, inno 0/2, design 2/2, gen 1/2
  ];
  it('point estimates: micro coverage overall, per dimension, general, reward', () => {
    const r = buildReport(rows, { resamples: 0 });
    expect(r.questions).to.equal(2);
    expect(r.plans).to.equal(2);
    // Null verdicts leave the fraction (issue 48): spec (3 + 2) / (5 + 4) readable items.
    expect(r.overall).to.include({ n: 9, met: 5, nulls: 1 });
    expect(r.overall.mean).to.be.closeTo(5 / 9, 1e-12);
    expect(r.byDimension.method_innovation).to.include({ n: 5, met: 2, nulls: 1 });
    expect(r.byDimension.method_innovation.mean).to.be.closeTo(2 / 5, 1e-12);
    expect(r.byDimension.experimental_design).to.include({ mean: 0.75, n: 4, met: 3 });
    expect(r.general).to.include({ mean: 0.75, n: 4, met: 3 });
    const r1 = 0.7 * 0.6 + 0.3 * 1;
    const r2 = 0.7 * (2 / 4) + 0.3 * 0.5;
    expect(r.reward.mean).to.be.closeTo((r1 + r2) / 2, 1e-12);
    expect(r.overall.lo).to.be.closeTo(5 / 9, 1e-12);
    expect(r.overall.hi).to.be.closeTo(5 / 9, 1e-12);
    expect(r.skipped).to.equal(0);
  });
  it('null verdicts: left out of every fraction; a plan with none readable skipped and counted (the training rule)', () => {
    // The case: 2 items met, 2 null → spec 2/2 = 1, reward 1 (not 0.65), innovation 1/1 with 1 null.
    const half = rowsFor('h', [true, null], [true, null], []);
    const r = buildReport(half, { resamples: 0 });
    expect(r.reward.mean).to.equal(1);
    expect(r.byDimension.method_innovation).to.include({ mean: 1, met: 1, n: 1, nulls: 1 });
    // An all-null plan is skipped: the other plan's reward alone (0.7·1/2 + 0.3·1 = 0.65), counted.
    const all = buildReport([...rowsFor('a', [null], [null], [null]), ...rowsFor('b', [true], [false], [true])], { resamples: 0 });
    expect(all.plans).to.equal(2);
    expect(all.skipped).to.equal(1);
    expect(all.reward.n).to.equal(1);
    expect(all.reward.mean).to.be.closeTo(0.7 * 0.5 + 0.3 * 1, 1e-12);
    expect(all.overall).to.include({ n: 2, met: 1, nulls: 2 });
    expect(formatReport(all)).to.contain('1 skipped').and.contain('(1/2 readable, 2 null)');
  });
  it('bootstrap: seeded, deterministic, interval brackets the mean, clusters by question', () => {
    const many: EvalRow[] = [];
    const rnd = mulberry32(7);
    for (let q = 0; q < 40; q++) many.push(...rowsFor(`q${q}`, [rnd() < 0.6, rnd() < 0.6], [rnd() < 0.3, rnd() < 0.3], [rnd() < 0.5]));
    const a = buildReport(many, { seed: 1, resamples: 500 });
    const b = buildReport(many, { seed: 1, resamples: 500 });
    const c = buildReport(many, { seed: 2, resamples: 500 });
    expect(a).to.deep.equal(b);
    expect(c).to.not.deep.equal(a);
    for (const s of [a.overall, a.byDimension.method_innovation, a.byDimension.experimental_design, a.general, a.reward]) {
      expect(s.lo).to.be.at.most(s.mean);
      expect(s.hi).to.be.at.least(s.mean);
      expect(s.hi - s.lo)
        .to.be.greaterThan(0)
        .and.lessThan(0.5);
    }
    // Two questions at 0% and 100%: resampled coverage is k/2 for k ~ Binomial(2, 1/2).
    const two = [...rowsFor('x', [true, true], [true, true], []), ...rowsFor('y', [false, false], [false, false], [])];
    const t = buildReport(two, { resamples: 2000, seed: 3 });
    expect(t.overall.mean).to.equal(0.5);
    expect(t.overall.lo).to.equal(0);
    expect(t.overall.hi).to.equal(1);
    // Identical questions: zero-width interval.
    const same = [...rowsFor('x', [true, false], [true], [true]), ...rowsFor('y', [true, false], [true], [true])];
    const s = buildReport(same, { resamples: 200 });
    expect(s.overall.lo).to.equal(s.overall.hi);
  });
  it('coverage by item origin (R_Q / R_A / both)', () => {
    const rs: EvalRow[] = [
      { questionId: 'q', sample: 0, itemId: 'a', kind: 'spec', dimension: 'method_innovation', origin: 'R_Q', met: true },
      { questionId: 'q', sample: 0, itemId: 'b', kind: 'spec', dimension: 'method_innovation', origin: 'R_Q', met: false },
      { questionId: 'q', sample: 0, itemId: 'c', kind: 'spec', dimension: 'experimental_design', origin: 'R_A', met: true },
    ];
    const r = buildReport(rs, { resamples: 10 });
    expect(r.byOrigin.R_Q).to.include({ mean: 0.5, n: 2, met: 1 });
    expect(r.byOrigin.R_A).to.include({ mean: 1, n: 1 });
    expect(r.byOrigin).to.not.have.property('both');
    expect(formatReport(r)).to.match(/items from R_Q\s+50\.0%/);
  });

  it('several samples per question are one cluster; reward averages plans', () => {
    const r = buildReport([...rowsFor('q', [true], [false], [], 0), ...rowsFor('q', [true], [true], [], 1)], { resamples: 100 });
    expect(r.questions).to.equal(1);
    expect(r.plans).to.equal(2);
    expect(r.reward.mean).to.equal(0.75);
    expect(r.overall.lo).to.equal(r.overall.hi);
  });
  it('quantile matches numpy type 7; bad level throws; JSONL rows round-trip; format', () => {
    expect(quantile([1, 2, 3, 4], 0.5)).to.equal(2.5);
    expect(quantile([0, 10], 0.025)).to.be.closeTo(0.25, 1e-12);
    expect(() => buildReport(rows, { level: 1 })).to.throw(RangeError);
    const dir = mkdtempSync(join(tmpdir(), 'eval-'));
    try {
      const p = join(dir, 'rows.jsonl');
      writeRowsJsonl(p, rows);
      const back = readFileSync(p, 'utf8')
        .trim()
        .split('\n')
        .map((l) => JSON.parse(l));
      expect(back).to.deep.equal(rows);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
    expect(formatReport(buildReport(rows)))
      .to.match(/rubric coverage\s+55\.6%/)
      .and.match(/method innovation/);
  });
});
