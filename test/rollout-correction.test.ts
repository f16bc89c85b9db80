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
import { fakeBackend } from './helpers/fake-backend.js';
import { resolveConfig } from '../lib/config/train.js';
import { Trainer, type TrainItem } from '../lib/train/trainer.js';
import type { TrainBackend } from '../lib/train/backend.js';
import { NativeBackend } from '../lib/train/native-backend.js';
import { Policy } from '../lib/model/policy.js';

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

describe('GRPO step: the correction reaches the update (fake backend)', function () {
  this.timeout(30000);
  let tmp: string;
  before(() => (tmp = mkdtempSync(join(tmpdir(), 'pg-corr-wire-'))));
  after(() => rmSync(tmp, { recursive: true, force: true }));
  const items: TrainItem[] = [
    { id: 'q0', question: 'q', reference_answer: 'a', rubric: [{ id: 'r1', text: 'x', dimension: 'method_innovation' }], split: 'train' },
  ];

  /** One GRPO step: the sampler gives log μ = −1 for both tokens, the trainer log π = [−0.5, −1.5] (its forward and its update). */
  async function step(mode: string) {
    const seen: { oldLogprobs: number[]; tokenWeights?: number[]; advantage: number }[] = [];
    const adapters: string[] = [];
    const base = fakeBackend();
    const backend: TrainBackend = {
      ...base,
      completionLogprobs: async (seqs, _t, adapter) => (adapters.push(adapter), seqs.map(() => [-0.5, -1.5])),
      grpoBackward: async (batch) => {
        seen.push(...batch.map((b) => ({ oldLogprobs: b.oldLogprobs, tokenWeights: b.tokenWeights, advantage: b.advantage })));
        return { loss: 0.1, meanKl: 0, clipFraction: 0, logprobs: batch.map(() => [-0.5, -1.5]) };
      },
    };
    const lines: string[] = [];
    const cfg = resolveConfig({
      flags: {
        stages: ['grpo'],
        grpo: { steps: 1, questionsPerStep: 1, groupSize: 2, microBatch: 2, klCoef: 0, rolloutCorrection: mode, importanceSamplingCap: 1.5 } as never,
        checkpoint: { every: 0 },
        validation: { validateEvery: 0, items: 0 },
      } as never,
    });
    const runDir = join(tmp, mode);
    await new Trainer(cfg, {
      backend,
      items,
      reward: async (reqs) => reqs.map((_, i) => ({ reward: i, rSpec: i, rGen: 0 })),
      advantages: (r) => ({ advantages: r.map((x) => x - 0.5), keep: r.map(() => true) }),
      runDir,
      log: (l) => lines.push(l),
    }).run();
    const row = readFileSync(join(runDir, 'metrics.jsonl'), 'utf8')
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l) as Record<string, unknown>)
      .find((l) => typeof l.loss === 'number')!;
    return { seen, adapters, lines, row };
  }

  it('none: π_old = μ, no weights, no extra forward; the agreement (|Δ| 0.5, k3 0.127626) warns and the ratios fall in [1.25, 2) and [0.5, 0.8)', async () => {
    const r = await step('none');
    expect(r.adapters).to.deep.equal([]);
    expect(r.seen.map((x) => x.oldLogprobs)).to.deep.equal([
      [-1, -1],
      [-1, -1],
    ]);
    expect(r.seen.every((x) => x.tokenWeights === undefined)).to.equal(true);
    const a = r.row.agreement as Record<string, number | boolean>;
    expect(a.meanAbsLogprobDiff).to.equal(0.5);
    expect(a.klK3 as number).to.be.closeTo((E05 - 1.5 + EM05 - 0.5) / 2, 1e-12);
    expect(a.warning).to.equal(true);
    expect(r.lines.some((l) => /sampler–trainer KL 1\.28e-1 nats\/token > grpo\.agreementWarnKl 0\.001/.test(l))).to.equal(true);
    const h = r.row.ratioHistogram as { edges: number[]; counts: number[] };
    expect(h.counts[h.edges.indexOf(1.25) + 1]).to.equal(2);
    expect(h.counts[h.edges.indexOf(0.5) + 1]).to.equal(2);
  });

  it('token-tis: one forward of the active adapter; weights [min(e^0.5, 1.5), e^−0.5] = [1.5, 0.6065], π_old = μ', async () => {
    const r = await step('token-tis');
    expect(r.adapters).to.deep.equal(['active']);
    for (const x of r.seen) {
      expect(x.oldLogprobs).to.deep.equal([-1, -1]);
      expect(x.tokenWeights![0]).to.equal(1.5);
      expect(x.tokenWeights![1]).to.be.closeTo(EM05, 1e-15);
    }
  });

  it('sequence-mask: exp(0.5 − 0.5) = 1 ≤ 1.5: weights [1, 1]', async () => {
    const r = await step('sequence-mask');
    for (const x of r.seen) expect(x.tokenWeights).to.deep.equal([1, 1]);
  });

  it('recompute: π_old = the trainer’s [−0.5, −1.5], weights [1.5, 0.6065]; every ratio at the update is 1', async () => {
    const r = await step('recompute');
    for (const x of r.seen) {
      expect(x.oldLogprobs).to.deep.equal([-0.5, -1.5]);
      expect(x.tokenWeights![0]).to.equal(1.5);
    }
    const h = r.row.ratioHistogram as { edges: number[]; counts: number[] };
    expect(h.counts[h.edges.indexOf(0.999) + 1]).to.equal(4);
  });
});

describe('NativeBackend.grpoBackward: token weights act as per-token advantages (embedded tiny model)', function () {
  this.timeout(120000);
  it('with π_old = the trainer’s own logprobs (ρ = 1) and no KL, the dapo loss is −Σ_t A·w_t / tokens: A 0.7, w [1.5, 0.5, 2] → −0.7·4/3', async function () {
    const dir = await orSkip(this, () => ensureDefaultModel());
    const p = await Policy.load(dir);
    try {
      p.model.addLora({ r: 4, alpha: 8, seed: 3 });
      const cfg = resolveConfig({ flags: { stages: ['grpo'] } });
      const b = new NativeBackend(p, cfg);
      const seq = { promptIds: [11, 12, 13, 14], completionIds: [21, 22, 23] };
      const opts = {
        epsLow: 0.2,
        epsHigh: 0.2,
        klCoef: 0,
        temperature: 1,
        aggregation: 'dapo' as const,
        totalSequences: 1,
        totalCompletionTokens: 3,
        maxCompletionLength: 3,
      };
      const first = await b.grpoBackward([{ seq, oldLogprobs: [0, 0, 0], refLogprobs: [0, 0, 0], advantage: 0.7 }], opts);
      b.zeroGrad();
      const own = first.logprobs[0]!;
      expect(own).to.have.length(3);
      const r = await b.grpoBackward([{ seq, oldLogprobs: own, refLogprobs: [0, 0, 0], advantage: 0.7, tokenWeights: [1.5, 0.5, 2] }], opts);
      b.zeroGrad();
      expect(r.loss).to.be.closeTo((-0.7 * (1.5 + 0.5 + 2)) / 3, 1e-6);
      // Without weights: −A.
      const plain = await b.grpoBackward([{ seq, oldLogprobs: own, refLogprobs: [0, 0, 0], advantage: 0.7 }], opts);
      b.zeroGrad();
      expect(plain.loss).to.be.closeTo(-0.7, 1e-6);
    } finally {
      p.dispose();
    }
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
