/**
 * A hanging judge is bounded and visible (issue 38 item 5): a GRPO step waiting on the judge logs
 * progress lines, stops the run at grpo.judgeStepTimeoutMs with a checkpoint of the state before
 * it, and a stop request (Ctrl-C) during judging ends the run within the second, interrupted,
 * with that checkpoint. With a fake training backend, and with a real HTTP judge on a loopback
 * server that never answers (per-request timeout far longer than the deadline).
 */
import { expect } from 'chai';
import { mkdtempSync, rmSync } from 'node:fs';
import { spawn } from 'node:child_process';
import { CLI } from './helpers/run.js';
import { packageRoot } from '../lib/native.js';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { resolveConfig } from '../lib/config/train.js';
import { Trainer, TrainingStoppedError, type RewardFn, type TrainItem } from '../lib/train/trainer.js';
import { resolveCheckpoint } from '../lib/train/checkpoint.js';
import { createHttpJudge } from '../lib/judge/http.js';
import { makeRewardFn } from '../lib/judge/rewards.js';
import { judgeHealth } from '../lib/judge/types.js';
import { startFakeLlm } from './helpers/fake-llm.js';
import { fakeBackend } from './helpers/fake-backend.js';

const items: TrainItem[] = Array.from({ length: 4 }, (_, i) => ({
  id: `q${i}`,
  question: `question ${i}`,
  reference_answer: 'a',
  rubric: [{ id: 'r1', text: 'x', dimension: 'method_innovation' }],
  split: 'train',
}));
const flat = { advantages: (r: number[]) => ({ advantages: r.map(() => 0), keep: r.map(() => true) }) };

/** Answers the first `ok` calls, then waits until its signal aborts (and rejects with its reason). */
function hangingAfter(ok: number): RewardFn {
  let calls = 0;
  return (reqs, signal) => {
    if (++calls <= ok) return Promise.resolve(reqs.map(() => ({ reward: 0.5, rSpec: 0.5, rGen: 0.5, judge: judgeHealth([{ itemId: 'r1', met: true }]) })));
    return new Promise((_, reject) => {
      if (!signal) return; // a call without a signal would hang forever: the test times out
      signal.addEventListener('abort', () => reject(signal.reason), { once: true });
    });
  };
}

describe('train: the judge bounded by a step deadline, Ctrl-C during judging (fake backend)', function () {
  this.timeout(60000);
  let tmp: string;
  before(() => (tmp = mkdtempSync(join(tmpdir(), 'pg-judge-deadline-'))));
  after(() => rmSync(tmp, { recursive: true, force: true }));
  const cfg = (timeoutMs: number) =>
    resolveConfig({
      flags: {
        stages: ['grpo'],
        grpo: { steps: 3, questionsPerStep: 2, groupSize: 2, microBatch: 4, judgeStepTimeoutMs: timeoutMs } as never,
        checkpoint: { every: 0 },
        validation: { validateEvery: 0, items: 0 },
      } as never,
    });

  it('the default judge deadline of a step is 30 min', () => {
    expect(resolveConfig({}).grpo.judgeStepTimeoutMs).to.equal(1800000);
  });

  it('a step past its judge deadline stops the run with a checkpoint of the state before it; progress lines while waiting', async () => {
    const runDir = join(tmp, 'deadline');
    const lines: string[] = [];
    const t = new Trainer(cfg(600), {
      backend: fakeBackend(),
      items,
      reward: hangingAfter(1),
      ...flat,
      runDir,
      log: (l) => lines.push(l),
      judgeProgressMs: 100,
      judgeStats: () => ({ requests: 7, failures: 2 }),
    });
    const t0 = Date.now();
    const err = await t.run().then(
      () => null,
      (e: Error) => e,
    );
    expect(Date.now() - t0).to.be.below(10000);
    expect(err).to.be.instanceOf(TrainingStoppedError);
    expect(err!.message).to.match(
      /\[grpo\] step 2 failed: the judge did not finish the step within grpo\.judgeStepTimeoutMs \(--judge-step-timeout-ms\) 600 ms/,
    );
    expect(
      lines.some((l) =>
        /\[grpo\] step 2: waiting on the judge for \d+ s \(1 call\(s\), 4 plans in this step, 0 judge requests, 0 failed; deadline in \d+ s; Ctrl-C stops with a checkpoint\)/.test(
          l,
        ),
      ),
      lines.join('\n'),
    ).to.equal(true);
    expect(resolveCheckpoint(runDir).state.stageStep).to.equal(1);
  });

  it('a stop request while the step waits on the judge ends the run at once, interrupted, with the checkpoint before the step', async () => {
    const runDir = join(tmp, 'sigint');
    const t = new Trainer(cfg(0), { backend: fakeBackend(), items, reward: hangingAfter(1), ...flat, runDir, log: () => {}, judgeProgressMs: 100 });
    const run = t.run();
    await new Promise((r) => setTimeout(r, 300)); // step 2 is waiting on the judge (no deadline)
    const t0 = Date.now();
    t.requestStop();
    const summary = await run;
    expect(Date.now() - t0).to.be.below(2000);
    expect(summary.interrupted).to.equal(true);
    const ck = resolveCheckpoint(runDir).state;
    expect([ck.stageStep, ck.cursor.position]).to.deep.equal([1, 2]); // step 2's take rolled back: --resume redoes it
  });

  it('a real HTTP judge that never answers (timeout 120 s per attempt) is bounded by the step deadline', async () => {
    const srv = await startFakeLlm({ fault: () => ({ kind: 'hang' }) });
    const judge = createHttpJudge({ url: srv.url, model: 'fake', timeoutMs: 120000, maxRetries: 5 });
    try {
      const runDir = join(tmp, 'http');
      const reward = makeRewardFn(judge, [{ id: 'g1', text: 'concrete' }]);
      const lines: string[] = [];
      const t = new Trainer(cfg(800), {
        backend: fakeBackend(),
        items,
        reward,
        ...flat,
        runDir,
        log: (l) => lines.push(l),
        judgeProgressMs: 200,
        judgeStats: () => judge.stats(),
      });
      const t0 = Date.now();
      const err = await t.run().then(
        () => null,
        (e: Error) => e,
      );
      expect(Date.now() - t0).to.be.below(10000);
      expect(err!.message).to.match(/\[grpo\] step 1 failed: the judge did not finish the step within .* 800 ms/);
      expect(srv.log.length).to.be.greaterThan(0);
      expect(lines.some((l) => /waiting on the judge/.test(l))).to.equal(true);
    } finally {
      judge.close?.();
      await srv.close();
    }
  });

  it('train CLI: Ctrl-C while GRPO waits on a hanging HTTP judge exits within seconds (130) with a checkpoint before the step', async () => {
    // The start-up check is answered; every judge request after it hangs.
    const srv = await startFakeLlm({
      respond: () => 'Yes',
      fault: (r) => (r.body.messages.some((m) => m.content.startsWith('Reply with the single word')) ? undefined : { kind: 'hang' }),
    });
    const out = join(tmp, 'cli-sigint');
    try {
      const args = [
        CLI,
        'train',
        '--out',
        out,
        '--opsd-steps',
        '0',
        '--grpo-steps',
        '2',
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
        '--checkpoint-every',
        '0',
        '--judge',
        'http',
        '--judge-url',
        srv.url,
        '--judge-model',
        'j',
        '--judge-timeout-ms',
        '120000',
      ];
      const p = spawn(process.execPath, args, { cwd: packageRoot, env: { ...process.env, CI: 'true' }, stdio: ['ignore', 'pipe', 'pipe'] });
      let err = '';
      p.stderr.on('data', (b: Buffer) => (err += b.toString()));
      const exited = new Promise<number | null>((r) => p.on('exit', (code) => r(code)));
      // Wait until the judge holds a request of the first GRPO step.
      const t0 = Date.now();
      while (srv.log.filter((e) => !e.body.messages.some((m) => m.content.startsWith('Reply with the single word'))).length === 0) {
        if (Date.now() - t0 > 200000) throw new Error(`judging never started: ${err}`);
        if (p.exitCode !== null) throw new Error(`train exited early: ${err}`);
        await new Promise((r) => setTimeout(r, 100));
      }
      await new Promise((r) => setTimeout(r, 300));
      const t1 = Date.now();
      p.kill('SIGINT');
      const code = await exited;
      expect(Date.now() - t1, err).to.be.below(10000);
      expect(code, err).to.equal(130);
      expect(err).to.contain('stopped while judging');
      const ck = resolveCheckpoint(out).state;
      expect(ck.stageStep).to.equal(0); // the state before GRPO step 1: --resume redoes it
    } finally {
      await srv.close();
    }
  });
});
