/**
 * lib/judge/agreement.ts against hand-computed values (issue 32, items 3 and 5): agreement,
 * Cohen's κ, Fleiss' κ, label precision / recall / F1, κ's degenerate cases, nulls, per dimension,
 * and the bootstrap intervals.
 */
import { expect } from 'chai';
import { judgeAgreement, formatAgreement, levelAgreement, type AgreementUnit, type LevelUnit } from '../lib/judge/agreement.js';

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

describe("Krippendorff's α and HealthBench's balanced F1 (issue 48 item 7)", () => {
  // Expected α values computed once with Python's `krippendorff` package 0.9.0 (pip), independent of
  // this code: krippendorff.alpha(reliability_data=…, level_of_measurement=…). The first data set is
  // Krippendorff's worked example (2011, "Computing Krippendorff's Alpha-Reliability", §C: 4 coders ×
  // 12 units with missing values), whose published values are α_nominal = 0.743 and α_ordinal = 0.815.
  const K2011: (number | null)[][] = [
    [1, 2, 3, 3, 2, 1, 4, 1, 2, null, null, null],
    [1, 2, 3, 3, 2, 2, 4, 1, 2, 5, null, 3],
    [null, 3, 3, 3, 2, 3, 4, 2, 2, 5, 1, null],
    [1, 2, 3, 3, 2, 4, 4, 1, 2, 5, 1, null],
  ];
  const coders = ['A', 'B', 'C', 'D'];
  const levelUnits = (data: (number | null)[][], judges: string[]): LevelUnit[] =>
    data[0]!.map((_, u) => ({ planId: `u${u}`, itemId: 'i', levels: Object.fromEntries(judges.map((j, k) => [j, data[k]![u]!])) }));

  it("Krippendorff's 2011 worked example: nominal 0.743, ordinal 0.815 (five values as ordered levels)", () => {
    const r = levelAgreement(levelUnits(K2011, coders), coders, 5, { resamples: 0 });
    expect(r.nominal.value).to.be.closeTo(0.743421052631579, 1e-12);
    expect(r.ordinal.value).to.be.closeTo(0.8153875037548814, 1e-12);
  });
  it('ResearchQA five levels, two judges, one unreadable label: ordinal 0.8506, nominal 0.4', () => {
    const r = levelAgreement(
      levelUnits(
        [
          [5, 3, 1, 4, 2, 5, null],
          [4, 3, 1, 5, 1, 5, 2],
        ],
        ['j1', 'j2'],
      ),
      ['j1', 'j2'],
      5,
      { resamples: 200, seed: 3 },
    );
    expect(r.ordinal.value).to.be.closeTo(0.8506172839506173, 1e-12);
    expect(r.nominal.value).to.be.closeTo(0.4, 1e-12);
    expect(r.ordinal.lo!).to.be.at.most(r.ordinal.value!);
    expect(r.ordinal.hi!).to.be.at.least(r.ordinal.value!);
    expect(() => levelAgreement(levelUnits([[6], [1]], ['a', 'b']), ['a', 'b'], 5)).to.throw(/level 6 is not an integer in 1…5/);
  });
  it('binary verdicts of three judges with a null: nominal α 0.542857 beside Fleiss κ (which drops the unit)', () => {
    const b = [
      [1, 1, 0, 1, 0, 1],
      [1, 0, 0, 1, null, 1],
      [1, 1, 0, 0, 0, 1],
    ];
    const units: AgreementUnit[] = b[0]!.map((_, u) => ({
      planId: `p${u}`,
      itemId: 'i',
      verdicts: Object.fromEntries(['x', 'y', 'z'].map((j, k) => [j, b[k]![u] === null ? null : b[k]![u] === 1])),
    }));
    const r = judgeAgreement(units, ['x', 'y', 'z'], { resamples: 0 });
    expect(r.overall.alpha.value).to.be.closeTo(0.5428571428571429, 1e-12);
    expect(formatAgreement(r)).to.contain('Krippendorff α (nominal) 0.543');
  });
  it('balanced F1 = (F1_yes + F1_no) / 2 (simple-evals healthbench_meta_eval.py), by hand, with a bootstrap interval', () => {
    // TP 3, FP 1, FN 2, TN 4 → F1_yes = 2·3 / (2·3 + 1 + 2) = 6/9; F1_no = 2·4 / (2·4 + 1 + 2) = 8/11
    const cells: [boolean, boolean][] = [
      ...Array<[boolean, boolean]>(3).fill([true, true]),
      [true, false],
      [false, true],
      [false, true],
      ...Array<[boolean, boolean]>(4).fill([false, false]),
    ];
    const units: AgreementUnit[] = cells.map(([v, l], i) => ({ planId: `p${i}`, itemId: 'i', verdicts: { g: v }, label: l }));
    const r = judgeAgreement(units, ['g'], { resamples: 300, seed: 1 });
    const l = r.overall.labels![0]!;
    expect(l.f1.value).to.be.closeTo(6 / 9, 1e-12);
    expect(l.f1Negative.value).to.be.closeTo(8 / 11, 1e-12);
    expect(l.balancedF1.value).to.be.closeTo((6 / 9 + 8 / 11) / 2, 1e-12);
    expect(l.balancedF1.lo!).to.be.below(l.balancedF1.value!);
    expect(l.balancedF1.hi!).to.be.above(l.balancedF1.value!);
    expect(formatAgreement(r)).to.match(/balanced F1 0\.697 \[/);
  });
});

describe('judge-agreement --rows: recorded verdicts of several judges (no judge asked)', function () {
  this.timeout(60000);
  it("ResearchQA rows: ordinal and nominal α over the five levels (values from Python's krippendorff 0.9.0), binary κs and α", async () => {
    const { mkdtempSync, rmSync, writeFileSync } = await import('node:fs');
    const { join } = await import('node:path');
    const { tmpdir } = await import('node:os');
    const { cli } = await import('./helpers/run.js');
    const tmp = mkdtempSync(join(tmpdir(), 'pg-ja-rows-'));
    try {
      const j1 = [5, 3, 1, 4, 2, 5, null];
      const j2 = [4, 3, 1, 5, 1, 5, 2];
      const write = (name: string, levels: (number | null)[]) => {
        const f = join(tmp, `${name}.jsonl`);
        const rows = levels.map((level, u) => ({
          protocol: 'researchqa',
          questionId: `q${u % 3}`,
          sample: 0,
          itemId: `i${u}`,
          kind: 'spec',
          met: null,
          level,
        }));
        writeFileSync(f, rows.map((r) => JSON.stringify(r)).join('\n') + '\n');
        return `${name}=${f}`;
      };
      const out = join(tmp, 'agreement.json');
      const r = await cli(['judge-agreement', '--rows', write('j1', j1), write('j2', j2), '--resamples', '0', '--out', out]);
      expect(r.code, r.err).to.equal(0);
      expect(r.out).to.match(/five levels \(7 units\): Krippendorff α ordinal 0\.851 \[0\.851, 0\.851\], nominal 0\.400/);
      const rep = JSON.parse((await import('node:fs')).readFileSync(out, 'utf8'));
      expect(rep.levels.ordinal.value).to.be.closeTo(0.8506172839506173, 1e-12);
      expect(rep.levels.nominal.value).to.be.closeTo(0.4, 1e-12);
      const one = await cli(['judge-agreement', '--rows', write('j1', j1)]);
      expect(one.code).to.equal(1);
      expect(one.err).to.contain('--rows needs two or more files (got 1)');
    } finally {
      rmSync(tmp, { recursive: true, force: true });
    }
  });

  it('rows without a dimension (a benchmark spec) get no per-dimension line; PaperGym rows keep their dimensions and general group', async () => {
    const { mkdtempSync, rmSync, writeFileSync } = await import('node:fs');
    const { join } = await import('node:path');
    const { tmpdir } = await import('node:os');
    const { cli } = await import('./helpers/run.js');
    const tmp = mkdtempSync(join(tmpdir(), 'pg-ja-dims-'));
    try {
      const write = (name: string, rows: object[]) => {
        const f = join(tmp, `${name}.jsonl`);
        writeFileSync(f, rows.map((r) => JSON.stringify(r)).join('\n') + '\n');
        return `${name}=${f}`;
      };
      const spec = (mets: boolean[]) => mets.map((met, u) => ({ protocol: 'rpg', questionId: `q${u % 3}`, sample: 0, itemId: `i${u}`, kind: 'spec', met }));
      const r = await cli([
        'judge-agreement',
        '--rows',
        write('a', spec([true, false, true, true])),
        write('b', spec([true, false, false, true])),
        '--resamples',
        '0',
      ]);
      expect(r.code, r.err).to.equal(0);
      expect(r.out).to.match(/overall \(4 units\)/);
      expect(r.out).to.not.match(/general/);
      const pg = (mets: boolean[]) =>
        mets.map((met, u) => ({
          protocol: 'papergym',
          questionId: 'q0',
          sample: 0,
          itemId: u < 2 ? `r${u}` : `g${u}`,
          kind: u < 2 ? 'spec' : 'general',
          ...(u < 2 && { dimension: 'method_innovation' }),
          met,
        }));
      const p = await cli(['judge-agreement', '--rows', write('a', pg([true, false, true])), write('b', pg([true, true, true])), '--resamples', '0']);
      expect(p.code, p.err).to.equal(0);
      expect(p.out).to.match(/general \(1 units\)/);
      expect(p.out).to.match(/method_innovation \(2 units\)/);
    } finally {
      rmSync(tmp, { recursive: true, force: true });
    }
  });

  it('files that judged different plans (planHash differs) are refused naming the unit; rows without planHash warn', async () => {
    const { mkdtempSync, rmSync, writeFileSync } = await import('node:fs');
    const { createHash } = await import('node:crypto');
    const { join } = await import('node:path');
    const { tmpdir } = await import('node:os');
    const { cli } = await import('./helpers/run.js');
    const tmp = mkdtempSync(join(tmpdir(), 'pg-ja-hash-'));
    try {
      const h = (t: string) => createHash('sha256').update(t).digest('hex').slice(0, 16);
      const write = (name: string, plans: (string | null)[]) => {
        const f = join(tmp, `${name}.jsonl`);
        const rows = plans.map((p, u) => ({
          questionId: `q${u}`,
          sample: 0,
          itemId: 'i0',
          kind: 'spec',
          met: u % 2 === 0,
          ...(p !== null && { planHash: h(p) }),
        }));
        writeFileSync(f, rows.map((r) => JSON.stringify(r)).join('\n') + '\n');
        return `${name}=${f}`;
      };
      const same = await cli(['judge-agreement', '--rows', write('a', ['p0', 'p1', 'p2']), write('b', ['p0', 'p1', 'p2']), '--resamples', '0']);
      expect(same.code, same.err).to.equal(0);
      expect(same.err).to.not.contain('planHash');
      const diff = await cli(['judge-agreement', '--rows', write('base', ['p0', 'p1', 'p2']), write('grpo', ['p0', 'other', 'p2']), '--resamples', '0']);
      expect(diff.code).to.equal(1);
      expect(diff.err).to.contain(`question q1 sample 0 item i0 has plan hash base=${h('p1')}, grpo=${h('other')}`);
      const old = await cli(['judge-agreement', '--rows', write('a', ['p0', 'p1', 'p2']), write('b', [null, null, null]), '--resamples', '0']);
      expect(old.code, old.err).to.equal(0);
      expect(old.err).to.match(/b carry no planHash .*cannot be checked/);
    } finally {
      rmSync(tmp, { recursive: true, force: true });
    }
  });
});
