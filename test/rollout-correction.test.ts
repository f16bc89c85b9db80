/**
 * Sampler–trainer agreement and the rollout corrections (lib/train/rollout-correction.ts), each
 * against values computed by hand from the formulas in the module doc; then GRPO steps on the
 * embedded tiny model log the agreement and the ratio histogram in metrics.jsonl for every mode.
 */
import { expect } from 'chai';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { agreementOf, agreementSums, correctRollout, ratioHistogram, RATIO_EDGES } from '../lib/train/rollout-correction.js';
import { ensureDefaultModel } from '../lib/train/run.js';
import { cli, orSkip, SMALL_TRAIN_FLAGS } from './helpers/run.js';

// Sampler μ and trainer π logprobs of two sampled tokens: log r = [+0.5, −0.5].
const MU = [-1, -2];
const PI = [-0.5, -2.5];
const E05 = 1.6487212707001282; // e^0.5
const EM05 = 0.6065306597126334; // e^−0.5

describe('rollout correction: hand-computed cases', () => {
  it('none: π_old is the sampler’s logprobs, no weights', () => {
    expect(correctRollout('none', MU, undefined, 3)).to.deep.equal({ oldLogprobs: MU });
  });

  it('token-tis: π_old = μ, w_t = min(π/μ, C): C = 1.5 truncates e^0.5 = 1.6487 to 1.5 and keeps e^−0.5 = 0.6065', () => {
    const c = correctRollout('token-tis', MU, PI, 1.5);
    expect(c.oldLogprobs).to.deep.equal(MU);
    expect(c.weights![0]).to.equal(1.5);
    expect(c.weights![1]).to.be.closeTo(EM05, 1e-15);
    // C = 2 keeps both ratios.
    const d = correctRollout('token-tis', MU, PI, 2);
    expect(d.weights![0]).to.be.closeTo(E05, 1e-15);
  });

  it('sequence-mask: a completion whose ratio exp(Σ log r) exceeds C gets weight 0 on every token', () => {
    // Σ log r = 0.5 − 0.5 = 0 → ratio 1 ≤ 3: kept.
    expect(correctRollout('sequence-mask', MU, PI, 3)).to.deep.equal({ oldLogprobs: MU, weights: [1, 1] });
    // π = [−0.2, −1.5]: Σ log r = 0.8 + 0.5 = 1.3 → e^1.3 = 3.669 > 3: masked; at C = 4 kept.
    expect(correctRollout('sequence-mask', MU, [-0.2, -1.5], 3).weights).to.deep.equal([0, 0]);
    expect(correctRollout('sequence-mask', MU, [-0.2, -1.5], 4).weights).to.deep.equal([1, 1]);
  });

  it('recompute: π_old = the trainer’s logprobs (first ratio 1) and w_t = min(π/μ, C)', () => {
    const c = correctRollout('recompute', MU, PI, 1.5);
    expect(c.oldLogprobs).to.deep.equal(PI);
    expect(c.weights![0]).to.equal(1.5);
    expect(c.weights![1]).to.be.closeTo(EM05, 1e-15);
  });

  it('refuses trainer logprobs of another length and a cap ≤ 0', () => {
    expect(() => correctRollout('token-tis', MU, [-1], 3)).to.throw(RangeError, /1 trainer logprobs for 2 sampled tokens/);
    expect(() => correctRollout('recompute', MU, PI, 0)).to.throw(RangeError, /importanceSamplingCap must be > 0/);
  });

  it('agreement: mean / max |Δ logprob| and the k3 KL r − 1 − log r on the sampled tokens', () => {
    const a = agreementOf(agreementSums([MU], [PI]));
    expect(a.tokens).to.equal(2);
    expect(a.meanAbsLogprobDiff).to.equal(0.5);
    expect(a.maxAbsLogprobDiff).to.equal(0.5);
    // k3: (e^0.5 − 1 − 0.5 + e^−0.5 − 1 + 0.5) / 2 = (0.1487213 + 0.1065307) / 2 = 0.1276260
    expect(a.klK3).to.be.closeTo((E05 - 1.5 + EM05 - 0.5) / 2, 1e-15);
    expect(a.klK3).to.be.closeTo(0.127626, 1e-6);
    // Equal logprobs: all zero.
    expect(agreementOf(agreementSums([MU], [MU]))).to.deep.equal({ meanAbsLogprobDiff: 0, maxAbsLogprobDiff: 0, klK3: 0, tokens: 2 });
  });

  it('ratio histogram: ρ = e^0.5 = 1.65 in [1.25, 2), e^−0.5 = 0.61 in [0.5, 0.8), ρ = 1 in [0.999, 1.001)', () => {
    const h = ratioHistogram([[...PI, -3]], [[...MU, -3]]);
    expect(h).to.have.length(RATIO_EDGES.length + 1);
    const at = (lo: number) => h[RATIO_EDGES.indexOf(lo as (typeof RATIO_EDGES)[number]) + 1];
    expect(at(1.25)).to.equal(1);
    expect(at(0.5)).to.equal(1);
    expect(at(0.999)).to.equal(1);
    expect(h.reduce((a, b) => a + b, 0)).to.equal(3);
  });
});

describe('train: sampler–trainer agreement in every GRPO step line (embedded tiny model)', function () {
  this.timeout(600000);
  let tmp: string;
  before(async function () {
    await orSkip(this, () => ensureDefaultModel());
    tmp = mkdtempSync(join(tmpdir(), 'pg-agree-'));
  });
  after(() => tmp && rmSync(tmp, { recursive: true, force: true }));

  for (const mode of ['none', 'token-tis', 'sequence-mask', 'recompute'] as const) {
    it(`--rollout-correction ${mode}: agreement and the ratio histogram in metrics.jsonl`, async () => {
      const out = join(tmp, mode);
      const r = await cli([
        'train',
        '--out',
        out,
        '--stages',
        'grpo',
        '--grpo-steps',
        '1',
        ...SMALL_TRAIN_FLAGS,
        '--rollout-correction',
        mode,
        '--lora-dropout',
        '0',
      ]);
      expect(r.code, r.out + r.err).to.equal(0);
      const step = readFileSync(join(out, 'metrics.jsonl'), 'utf8')
        .trim()
        .split('\n')
        .map((l) => JSON.parse(l) as Record<string, unknown>)
        .find((l) => typeof l.loss === 'number')!;
      const a = step.agreement as { meanAbsLogprobDiff: number; maxAbsLogprobDiff: number; klK3: number; tokens: number; correction: string };
      expect(a.correction).to.equal(mode);
      expect(a.tokens).to.be.greaterThan(0);
      expect(a.maxAbsLogprobDiff).to.be.at.least(a.meanAbsLogprobDiff);
      expect(a.klK3).to.be.at.least(0);
      // float32 on the CPU: the sampler's and the trainer's logprobs agree closely.
      expect(a.maxAbsLogprobDiff).to.be.lessThan(1e-3);
      const h = step.ratioHistogram as { edges: number[]; counts: number[] };
      expect(h.counts.reduce((x, y) => x + y, 0)).to.equal(a.tokens);
      // At the step's one update every ratio is within 0.1% of 1 (same weights, no dropout).
      expect(h.counts[h.edges.indexOf(0.999) + 1]).to.equal(a.tokens);
      expect(readFileSync(join(out, 'report.html'), 'utf8')).to.include('data-plot="sampler-trainer"');
    });
  }
});
