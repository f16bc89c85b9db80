/**
 * lib/judge/agreement.ts against hand-computed values (issue 32, items 3 and 5): agreement,
 * Cohen's κ, Fleiss' κ, label precision / recall / F1, κ's degenerate cases, nulls, per dimension,
 * and the bootstrap intervals.
 */
import { expect } from 'chai';
import { judgeAgreement, formatAgreement, type AgreementUnit } from '../lib/judge/agreement.js';

const A = [1, 1, 1, 1, 0, 0, 1, 0, 1, 0];
const B = [1, 1, 0, 1, 0, 0, 1, 1, 1, 0];
const L = [1, 1, 0, 1, 0, 1, 1, 0, 0, 0];

/** 10 units, 5 plans × 2 items (odd units method_innovation, even experimental_design); C always "yes". */
function units(extra: (i: number) => Record<string, boolean | null> = () => ({}), labels = true): AgreementUnit[] {
  return A.map((_, i) => ({
    planId: `p${Math.floor(i / 2)}`,
    itemId: `i${i % 2}`,
    dimension: i % 2 === 0 ? 'method_innovation' : 'experimental_design',
    verdicts: { A: A[i] === 1, B: B[i] === 1, C: true, ...extra(i) },
    ...(labels && { label: L[i] === 1 }),
  }));
}

describe('judge agreement statistics (hand-computed)', () => {
  it('pairwise agreement and Cohen’s κ', () => {
    const r = judgeAgreement(units(), ['A', 'B', 'C'], { resamples: 0 });
    const ab = r.overall.pairs.find((p) => p.a === 'A' && p.b === 'B')!;
    // n11 = 5, n10 = 1, n01 = 1, n00 = 3: p_o = 0.8; q_a = q_b = 0.6, p_e = 0.52; κ = 0.28 / 0.48.
    expect(ab.agreement.value).to.be.closeTo(0.8, 1e-12);
    expect(ab.kappa.value).to.be.closeTo(0.28 / 0.48, 1e-12);
    expect(ab.kappa.n).to.equal(10);
    expect(ab.kappa.lo).to.equal(ab.kappa.value);
    expect(r.overall.pairs.map((p) => `${p.a}${p.b}`)).to.deep.equal(['AB', 'AC', 'BC']);
  });

  it('one judge always "yes": κ = 0 exactly (p_e = q_A), agreement = share of the other’s "yes"', () => {
    const r = judgeAgreement(units(), ['A', 'B', 'C'], { resamples: 0 });
    const ac = r.overall.pairs.find((p) => p.a === 'A' && p.b === 'C')!;
    expect(ac.agreement.value).to.be.closeTo(0.6, 1e-12);
    expect(ac.kappa.value).to.be.closeTo(0, 1e-12);
  });

  it('all verdicts equal: κ undefined (p_e = 1) → null with a reason, Fleiss too; agreement 1', () => {
    const u = units(() => ({ A: true, B: true }));
    const r = judgeAgreement(u, ['A', 'B', 'C'], { resamples: 50 });
    const ab = r.overall.pairs[0];
    expect(ab.agreement.value).to.equal(1);
    expect(ab.kappa.value).to.equal(null);
    expect(ab.kappa.reason).to.match(/p_e = 1/);
    expect(ab.kappa.lo).to.equal(null);
    expect(r.overall.fleiss.value).to.equal(null);
    expect(r.overall.fleiss.reason).to.match(/same/);
    expect(formatAgreement(r)).to.contain('n/a (chance agreement p_e = 1');
  });

  it('the heading counts judges in words that agree with the number (1 judge, 3 judges)', () => {
    const u = units(() => ({ A: true, B: false }));
    expect(formatAgreement(judgeAgreement(u, ['A'], { resamples: 10 }))).to.match(/^judge agreement \(1 judge;/);
    expect(formatAgreement(judgeAgreement(u, ['A', 'B', 'C'], { resamples: 10 }))).to.match(/^judge agreement \(3 judges;/);
  });

  it('Fleiss’ κ over three judges = 13/88', () => {
    // Yes counts per unit 3,3,2,3,1,1,3,2,3,1: P̄ = (5·1 + 5·1/3)/10 = 2/3; p_yes = 22/30, P̄_e = 137/225.
    const r = judgeAgreement(units(), ['A', 'B', 'C'], { resamples: 0 });
    expect(r.overall.fleiss.value).to.be.closeTo(13 / 88, 1e-12);
    expect(r.overall.fleiss.n).to.equal(10);
  });

  it('per dimension: method_innovation A vs B κ = 6/11', () => {
    const r = judgeAgreement(units(), ['A', 'B', 'C'], { resamples: 0 });
    expect(Object.keys(r.byDimension)).to.deep.equal(['experimental_design', 'method_innovation']);
    const ab = r.byDimension.method_innovation.pairs[0];
    expect(ab.agreement.value).to.be.closeTo(0.8, 1e-12);
    expect(ab.kappa.value).to.be.closeTo(6 / 11, 1e-12);
    expect(r.byDimension.method_innovation.units).to.equal(5);
  });

  it('against labels: agreement, precision, recall, F1; an always-"yes" judge; an always-"no" judge (precision undefined)', () => {
    const r = judgeAgreement(
      units(() => ({ N: false })),
      ['A', 'C', 'N'],
      { resamples: 0 },
    );
    const [a, c, n] = r.overall.labels!;
    // A: TP 4, FP 2, FN 1, TN 3.
    expect(a.agreement.value).to.be.closeTo(0.7, 1e-12);
    expect(a.precision.value).to.be.closeTo(4 / 6, 1e-12);
    expect(a.recall.value).to.be.closeTo(4 / 5, 1e-12);
    expect(a.f1.value).to.be.closeTo(8 / 11, 1e-12);
    // C: TP 5, FP 5.
    expect(c.precision.value).to.be.closeTo(0.5, 1e-12);
    expect(c.recall.value).to.equal(1);
    expect(c.f1.value).to.be.closeTo(2 / 3, 1e-12);
    expect(n.precision.value).to.equal(null);
    expect(n.precision.reason).to.match(/TP \+ FP = 0/);
    expect(n.recall.value).to.equal(0);
    expect(n.f1.value).to.equal(0);
  });

  it('null verdicts are left out per pair and for Fleiss, and counted', () => {
    const r = judgeAgreement(
      units((i): Record<string, boolean | null> => (i === 0 ? { A: null } : {})),
      ['A', 'B', 'C'],
      { resamples: 0 },
    );
    const ab = r.overall.pairs[0];
    expect(ab.nulls).to.equal(1);
    expect(ab.agreement.n).to.equal(9);
    expect(ab.agreement.value).to.be.closeTo(7 / 9, 1e-12);
    expect(r.overall.pairs[2].nulls).to.equal(0);
    expect(r.overall.fleiss.n).to.equal(9);
    expect(r.overall.labels![0].nulls).to.equal(1);
  });

  it('bootstrap: seeded and reproducible, interval around the value; one cluster → lo = hi = value', () => {
    const u = units();
    const r1 = judgeAgreement(u, ['A', 'B', 'C'], { resamples: 400, seed: 3 });
    const r2 = judgeAgreement(u, ['A', 'B', 'C'], { resamples: 400, seed: 3 });
    expect(r1).to.deep.equal(r2);
    const k = r1.overall.pairs[0].kappa;
    expect(k.lo!).to.be.at.most(k.value!);
    expect(k.hi!).to.be.at.least(k.value!);
    expect(k.hi! - k.lo!).to.be.greaterThan(0.1);
    const one = judgeAgreement(
      u.map((x) => ({ ...x, cluster: 'all' })),
      ['A', 'B'],
      { resamples: 100 },
    );
    expect(one.overall.pairs[0].kappa.lo).to.be.closeTo(0.28 / 0.48, 1e-12);
    expect(one.overall.pairs[0].kappa.hi).to.be.closeTo(0.28 / 0.48, 1e-12);
  });

  it('bad input: no judges, duplicate names, bad level', () => {
    expect(() => judgeAgreement(units(), [])).to.throw(TypeError, /non-empty/);
    expect(() => judgeAgreement(units(), ['A', 'A'])).to.throw(TypeError, /duplicate judge names/);
    expect(() => judgeAgreement(units(), ['A', 'B'], { level: 1 })).to.throw(TypeError, /level/);
  });
});
