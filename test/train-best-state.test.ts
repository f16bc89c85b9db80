/**
 * Best state, not last (issue 53): validation scores with a bootstrap interval, the best under a
 * minimum improvement, the early-stop count (lib/train/validation.ts), and a run on the embedded
 * tiny model whose HTTP judge (a loopback server this test controls) approves the validation plans
 * of OPSD step 2 only: the approval rises then falls, OPSD stops two validations after its peak,
 * and GRPO starts from the adapter of step 2 — compared tensor by tensor with that checkpoint.
 */
import { expect } from 'chai';
import { existsSync, mkdtempSync, readFileSync, readdirSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { bestValidation, bootstrapMean } from '../lib/train/validation.js';
import { ensureDefaultModel } from '../lib/train/run.js';
import { resolveCheckpoint } from '../lib/train/checkpoint.js';
import { native } from '../lib/native.js';
import { startFakeLlm, type FakeLlm } from './helpers/fake-llm.js';
import { adapterMaxAbsDiff, adapterOf, cli, orSkip } from './helpers/run.js';

describe('validation: bootstrap interval, best state, early-stop count', () => {
  it('bootstrapMean: the mean, a point interval for one item or equal items, and the percentiles of the resampled means', () => {
    expect(bootstrapMean([0.25], 1)).to.deep.equal({ mean: 0.25, ci: [0.25, 0.25] });
    expect(bootstrapMean([0.5, 0.5, 0.5], 1)).to.deep.equal({ mean: 0.5, ci: [0.5, 0.5] });
    // Two items 0 and 1: a resample's mean is 0 (p 1/4), 0.5 (p 1/2) or 1 (p 1/4), so over 1000
    // resamples the 2.5% quantile is 0 and the 97.5% quantile is 1 (each end holds ~250 draws).
    expect(bootstrapMean([0, 1], 7)).to.deep.equal({ mean: 0.5, ci: [0, 1] });
    // The same seed draws the same interval (a resumed run), and the interval holds the mean.
    const xs = [0.1, 0.9, 0.4, 0.7, 0.2, 0.6];
    const a = bootstrapMean(xs, 42);
    expect(bootstrapMean(xs, 42)).to.deep.equal(a);
    expect(a.mean).to.be.closeTo(2.9 / 6, 1e-12);
    expect(a.ci[0]).to.be.lessThan(a.mean);
    expect(a.ci[1]).to.be.greaterThan(a.mean);
    expect(a.ci[0]).to.be.at.least(0.1);
    expect(a.ci[1]).to.be.at.most(0.9);
  });

  it('bestValidation: a new best needs more than earlyStopThreshold; ties, small rises and falls all count toward the stop', () => {
    const h = (scores: number[]) => scores.map((score, i) => ({ step: i + 1, score }));
    // Threshold 0: 0.65 at step 4 is the best, one validation after it.
    expect(bestValidation(h([0.5, 0.6, 0.6, 0.65, 0.55]), 0)).to.deep.include({ index: 3, sinceBest: 1 });
    // Threshold 0.1: 0.6 is not above 0.5 + 0.1, 0.65 is; then 0.55 counts.
    expect(bestValidation(h([0.5, 0.6, 0.6, 0.65, 0.55]), 0.1)).to.deep.include({ index: 3, sinceBest: 1 });
    // Threshold 0.2: nothing beats 0.5 + 0.2: four validations since the first.
    expect(bestValidation(h([0.5, 0.6, 0.6, 0.65, 0.55]), 0.2)).to.deep.include({ index: 0, sinceBest: 4 });
    // A tie does not reset the count (before issue 53 it did).
    expect(bestValidation(h([0.5, 0.5, 0.4]), 0)).to.deep.include({ index: 0, sinceBest: 2 });
    expect(bestValidation([], 0)).to.equal(undefined);
  });
});

describe('train: GRPO starts from the best OPSD state (embedded tiny model, loopback HTTP judge)', function () {
  this.timeout(600000);
  let tmp: string;
  let judge: FakeLlm;
  let runDir = '';
  let finalBefore: Record<string, Float32Array> | undefined;
  /** OPSD step lines in the run's metrics.jsonl: a validation after step k runs while k − 1 are written. */
  const opsdStepsDone = () =>
    existsSync(join(runDir, 'metrics.jsonl'))
      ? readFileSync(join(runDir, 'metrics.jsonl'), 'utf8')
          .split('\n')
          .filter((l) => l.includes('"stage":"opsd"') && l.includes('"loss":')).length
      : 0;
  before(async function () {
    await orSkip(this, () => ensureDefaultModel());
    tmp = mkdtempSync(join(tmpdir(), 'pg-best-'));
    // Approval rises then falls: the judge says Yes to every rubric item only at the validation after OPSD step 2.
    judge = await startFakeLlm({
      respond: (r) => {
        const user = r.body.messages[r.body.messages.length - 1]!.content;
        if (user.startsWith('Reply with the single word')) return 'Yes';
        return opsdStepsDone() + 1 === 2 ? 'Yes' : 'No';
      },
    });
  });
  after(async () => {
    await judge?.close();
    if (tmp) rmSync(tmp, { recursive: true, force: true });
  });

  it('keeps best/opsd at the peak, stops OPSD two validations later, and GRPO starts from the peak adapter; config, summary, metrics and the log say which step', async () => {
    runDir = join(tmp, 'run');
    const r = await cli([
      'train',
      '--out',
      runDir,
      '--stages',
      'opsd,grpo',
      '--opsd-steps',
      '6',
      '--grpo-steps',
      '1',
      '--max-new-tokens',
      '4',
      '--opsd-batch-size',
      '1',
      '--opsd-micro-batch',
      '1',
      '--opsd-lr',
      '1e-2',
      '--questions-per-step',
      '1',
      '--group-size',
      '2',
      '--grpo-micro-batch',
      '2',
      '--validate-every',
      '1',
      '--early-stop-patience',
      '2',
      '--checkpoint-every',
      '1',
      '--seed',
      '5',
      '--judge',
      'http',
      '--judge-url',
      judge.url,
      '--judge-model',
      'j',
    ]);
    const log = r.out + r.err;
    expect(r.code, log).to.equal(0);
    const rows = readFileSync(join(runDir, 'metrics.jsonl'), 'utf8')
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l) as Record<string, unknown>);
    // OPSD's validations (GRPO's own, after its one step, hit the judge's cache of step 2's plans: it starts from that adapter).
    const val = rows.filter((x) => 'validation' in x && x.stage === 'opsd');
    expect(val.map((x) => x.validation)).to.deep.equal([0, 1, 0, 0]);
    expect(val.map((x) => x.bestStep)).to.deep.equal([1, 2, 2, 2]);
    expect(val.map((x) => x.sinceBest)).to.deep.equal([0, 0, 1, 2]);
    for (const v of val) expect(v.validationCI).to.have.length(2);
    // Stage-1 diagnostics on every OPSD step line: completion length (mean, p90 ≤ max-new-tokens 4) and the truncation rate.
    const opsdSteps = rows.filter((x) => x.stage === 'opsd' && typeof x.loss === 'number');
    expect(opsdSteps).to.have.length(4);
    for (const x of opsdSteps) {
      expect(x.completionLengthMean as number).to.be.within(0, 4);
      expect(x.completionLengthP90 as number).to.be.within(x.completionLengthMean as number, 4);
      expect(x.truncationRate as number).to.be.within(0, 1);
      expect(x.truncationRate as number).to.equal(1 - (x.stopRate as number)); // a rollout ends on a stop token or at max-new-tokens
    }
    expect(rows.find((x) => x.event === 'early_stop')).to.deep.include({ stage: 'opsd', step: 4, bestStep: 2 });
    expect(rows.find((x) => x.event === 'best_loaded')).to.deep.include({ stage: 'opsd', bestStep: 2, bestGlobalStep: 2, bestValidation: 1 });
    expect(log).to.match(/\[opsd\] best validation 1\.0000 .* at step 2 \(global 2\), not the last step 4: its adapter .* is loaded; GRPO starts from it/);
    expect(log).to.match(/\[opsd\] step 2\/6 .*\| val 1\.000 \[.*\] best: step 2 \(new\)/);
    // best/opsd holds the adapter of step 2, equal to that checkpoint's, and differs from the last OPSD step's.
    const peak = adapterOf(join(runDir, 'checkpoints', 'step-000002'));
    expect(adapterMaxAbsDiff(adapterOf(join(runDir, 'best', 'opsd')), peak)).to.equal(0);
    expect(adapterMaxAbsDiff(adapterOf(join(runDir, 'checkpoints', 'step-000004')), peak)).to.be.greaterThan(0);
    expect(JSON.parse(readFileSync(join(runDir, 'best', 'opsd', 'best.json'), 'utf8'))).to.deep.include({
      stage: 'opsd',
      step: 2,
      globalStep: 2,
      validation: 1,
    });
    // GRPO's stage-start snapshot (its KL reference, taken at its first step) is the peak adapter.
    const ck = resolveCheckpoint(runDir);
    const snap = native().loadSafetensors(join(ck.dir, 'snapshot-stage-start.safetensors')) as { tensors: Record<string, { data: Float32Array }> };
    const start = Object.fromEntries(Object.entries(snap.tensors).map(([k, v]) => [k, v.data]));
    expect(adapterMaxAbsDiff(start, peak)).to.equal(0);
    const summary = JSON.parse(readFileSync(join(runDir, 'summary.json'), 'utf8')) as {
      stages: { stage: string; best?: Record<string, unknown>; stoppedEarly: boolean }[];
    };
    expect(summary.stages[0]).to.deep.include({ stage: 'opsd', stoppedEarly: true });
    expect(summary.stages[0]!.best).to.deep.include({ step: 2, globalStep: 2, score: 1, loaded: true });
    const config = JSON.parse(readFileSync(join(runDir, 'config.json'), 'utf8')) as { bestStates?: Record<string, Record<string, unknown>> };
    expect(config.bestStates?.opsd).to.deep.include({ step: 2, globalStep: 2, validation: 1, next: 'grpo' });
    expect(readFileSync(join(runDir, 'report.html'), 'utf8')).to.match(/best: OPSD step 2/);
    finalBefore = adapterOf(join(runDir, 'final'));
  });

  it('a resume from the last OPSD checkpoint (before the best state was taken up) starts GRPO from the same peak adapter and ends on the same final adapter', async () => {
    expect(finalBefore, 'the first test ran').to.not.equal(undefined);
    const r = await cli(['train', '--resume', join(runDir, 'checkpoints', 'step-000004')]);
    const log = r.out + r.err;
    expect(r.code, log).to.equal(0);
    expect(log).to.match(/\[opsd\] best validation 1\.0000 .* at step 2 \(global 2\), not the last step 4: its adapter .* is loaded; GRPO starts from it/);
    const peak = adapterOf(join(runDir, 'checkpoints', 'step-000002'));
    const snap = native().loadSafetensors(join(resolveCheckpoint(runDir).dir, 'snapshot-stage-start.safetensors')) as {
      tensors: Record<string, { data: Float32Array }>;
    };
    expect(adapterMaxAbsDiff(Object.fromEntries(Object.entries(snap.tensors).map(([k, v]) => [k, v.data])), peak)).to.equal(0);
    expect(adapterMaxAbsDiff(adapterOf(join(runDir, 'final')), finalBefore!)).to.equal(0);
  });

  it("--overwrite-output-dir clears every entry the previous run wrote, best/ and the report's charts included (no other run's best adapter left behind)", async () => {
    expect(existsSync(join(runDir, 'best', 'opsd', 'best.json')), 'the first test ran').to.equal(true);
    const oldPlots = readdirSync(join(runDir, 'report-plots'));
    expect(oldPlots.length).to.be.greaterThan(0);
    // A run without validation writes no best/: one left there is the old run's; a chart older than the new run is too.
    const t0 = Date.now() - 1000;
    const r = await cli([
      'train',
      '--out',
      runDir,
      '--overwrite-output-dir',
      '--opsd-steps',
      '1',
      '--grpo-steps',
      '1',
      '--max-new-tokens',
      '4',
      '--questions-per-step',
      '1',
      '--group-size',
      '2',
      '--grpo-micro-batch',
      '2',
      '--validate-every',
      '0',
      '--judge',
      'http',
      '--judge-url',
      judge.url,
      '--judge-model',
      'j',
    ]);
    const log = r.out + r.err;
    expect(r.code, log).to.equal(0);
    expect(log).to.contain(
      `--overwrite-output-dir: cleared the previous run in ${runDir} (config.json, metrics.jsonl, checkpoints, final, summary.json, report.html, best, report-plots)`,
    );
    expect(existsSync(join(runDir, 'best')), 'best/ of the previous run').to.equal(false);
    const stale = readdirSync(join(runDir, 'report-plots')).filter((p) => statSync(join(runDir, 'report-plots', p)).mtimeMs < t0);
    expect(stale, 'charts of the previous run').to.deep.equal([]);
  });
});
