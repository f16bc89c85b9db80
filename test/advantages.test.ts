import { expect } from 'chai';
import { computeAdvantages, groupAdvantages, maskedAdvantages } from '../lib/train/advantages.js';

describe('advantages', () => {
  it('eight equal rewards including non-dyadic values (0.35) → Â = 0 exactly and no NaN', () => {
    for (const v of [0.35, 0.1, 1 / 3, 0.7, 0, 1, 0.123456789]) {
      for (const arr of [new Float32Array(8).fill(v), new Float64Array(8).fill(v)]) {
        for (const scale of ['group', 'batch', 'none'] as const) {
          for (const stdFloor of [0, 1e-3]) {
            const a = computeAdvantages(arr, { groupSize: 8, scale, stdFloor, eps: stdFloor ? 1e-4 : 0 });
            expect(Array.from(a.advantages)).to.deep.equal([0, 0, 0, 0, 0, 0, 0, 0]);
            expect(Object.is(a.advantages[0], -0)).to.equal(false);
          }
        }
      }
    }
    // mixed batch: the equal group is exactly 0, the other group normal
    const a = computeAdvantages([0.35, 0.35, 0.35, 0.35, 0.35, 0.35, 0.35, 0.35, 0, 1, 0, 1, 0, 1, 0, 1], { groupSize: 8 });
    expect(Array.from(a.advantages.slice(0, 8)).every((x) => x === 0)).to.equal(true);
    expect(Array.from(a.advantages).every(Number.isFinite)).to.equal(true);
    expect(a.advantages[9]).to.be.above(0.9);
  });

  it('one outlier in G = 8 → |Â| ≤ 2.4749 with the unbiased std', () => {
    const r = [0, 0, 0, 0, 0, 0, 0, 1];
    const a = computeAdvantages(r, { groupSize: 8, stdFloor: 0, eps: 0 });
    // unbiased: (7/8) / sqrt(1/8) = 7/sqrt(8) = 2.47487…
    expect(Math.abs(a.advantages[7])).to.be.closeTo(7 / Math.sqrt(8), 1e-6);
    for (const x of a.advantages) expect(Math.abs(x)).to.be.at.most(2.4749);
    const b = computeAdvantages([5, 5, 5, 5, 5, 5, 5, -100], { groupSize: 8 });
    for (const x of b.advantages) expect(Math.abs(x)).to.be.at.most(2.4749);
    expect(a.groupStd[0]).to.be.closeTo(Math.sqrt(1 / 8), 1e-15);
  });

  it('a shaped reward where all completions differ by 1e-4 does not become ±1 advantages (std floor)', () => {
    const r = [0.5, 0.5001, 0.5002, 0.5003, 0.5004, 0.5005, 0.5006, 0.5007];
    const a = computeAdvantages(r, { groupSize: 8 });
    for (const x of a.advantages) expect(Math.abs(x)).to.be.below(0.5);
    // without the floor (TRL: std + 1e-4) the same rewards get |Â| ≈ 1
    const t = computeAdvantages(r, { groupSize: 8, stdFloor: 0, eps: 1e-4 });
    expect(Math.max(...Array.from(t.advantages, Math.abs))).to.be.above(0.9);
  });

  it('scale: group | batch | none, two-pass std, contiguous groups', () => {
    const r = [1, 2, 3, 4, 10, 20, 30, 40];
    const g = computeAdvantages(Float64Array.from(r), { groupSize: 4, scale: 'group', stdFloor: 0, eps: 0 });
    const sd1 = Math.sqrt(((1.5 ** 2 + 0.5 ** 2) * 2) / 3);
    expect(g.advantages[0]).to.be.closeTo(-1.5 / sd1, 1e-12);
    expect(g.advantages[4]).to.be.closeTo(-1.5 / sd1, 1e-12); // scale-invariant per group
    const n = computeAdvantages(Float64Array.from(r), { groupSize: 4, scale: 'none' });
    expect(Array.from(n.advantages)).to.deep.equal([-1.5, -0.5, 0.5, 1.5, -15, -5, 5, 15]);
    const b = computeAdvantages(Float64Array.from(r), { groupSize: 4, scale: 'batch', stdFloor: 0, eps: 0 });
    const m = r.reduce((s, x) => s + x, 0) / 8;
    const sdb = Math.sqrt(r.reduce((s, x) => s + (x - m) ** 2, 0) / 7);
    expect(b.advantages[7]).to.be.closeTo(15 / sdb, 1e-12);
  });

  it('dropZeroVariance marks zero-variance groups in keep', () => {
    const a = computeAdvantages([1, 1, 0, 1, 0.2, 0.2], { groupSize: 2, dropZeroVariance: true });
    expect(Array.from(a.keep)).to.deep.equal([0, 0, 1, 1, 0, 0]);
    const k = computeAdvantages([1, 1, 0, 1], { groupSize: 2 });
    expect(Array.from(k.keep)).to.deep.equal([1, 1, 1, 1]);
  });

  it('rejects bad input', () => {
    expect(() => computeAdvantages([1, 2, 3], { groupSize: 2 })).to.throw(TypeError, /multiple/);
    expect(() => computeAdvantages([1, 2], { groupSize: 2, scale: 'x' as 'group' })).to.throw(TypeError);
    expect(() => computeAdvantages([1, NaN], { groupSize: 2 })).to.throw(Error, /not finite/);
  });
  it('maskedAdvantages: a masked completion gets Â = 0, keep false, and its group is normalised over the others', () => {
    const opts = { scale: 'group' as const, dropZeroVariance: false };
    const r = [1, 0, 0.5, 0.25, /* group 2 */ 1, 0, 0.9, 0.1];
    const masked = [false, false, true, false, false, false, false, false];
    const m = maskedAdvantages(groupAdvantages, r, masked, 4, opts);
    expect(m.advantages[2]).to.equal(0);
    expect(m.keep[2]).to.equal(false);
    // Group 1 as a group of 3 without the masked completion; group 2 as without masks.
    const g1 = groupAdvantages([1, 0, 0.25], 3, opts);
    [0, 1, 3].forEach((j, i) => expect(m.advantages[j]).to.be.closeTo(g1.advantages[i]!, 1e-6));
    const g2 = groupAdvantages(r.slice(4), 4, opts);
    for (let i = 0; i < 4; i++) expect(m.advantages[4 + i]).to.be.closeTo(g2.advantages[i]!, 1e-6);
    expect(m.keep.filter(Boolean)).to.have.length(7);
    // A group masked whole is out of the loss; no masks is exactly the plain function.
    const all = maskedAdvantages(groupAdvantages, r, [true, true, true, true, false, false, false, false], 4, opts);
    expect(all.keep.slice(0, 4)).to.deep.equal([false, false, false, false]);
    expect(all.advantages.slice(0, 4)).to.deep.equal([0, 0, 0, 0]);
    expect(
      maskedAdvantages(
        groupAdvantages,
        r,
        r.map(() => false),
        4,
        opts,
      ),
    ).to.deep.equal(groupAdvantages(r, 4, opts));
  });
});
