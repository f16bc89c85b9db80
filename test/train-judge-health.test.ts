/**
 * Train side of judge health: a judge that fails is loud, never a silent zero. With a fake
 * (pure TypeScript) training backend: judge health per step in metrics.jsonl and in the progress
 * line; a step whose null rate passes `judge.maxNullRate` — or whose reward call throws — ends the
 * run with a checkpoint of the state before that step and the resume command, and `--resume`
 * redoes exactly that step. Also: the same judge options for train as for eval (flags and YAML).
 */
import { expect } from 'chai';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import yargs from 'yargs';
import { resolveConfig } from '../lib/config/train.js';
import { Trainer, TrainingStoppedError, type RewardResult, type TrainItem } from '../lib/train/trainer.js';
import { resolveCheckpoint } from '../lib/train/checkpoint.js';
import { addJudgeOptions, judgeFlagsToConfig } from '../bin/judge-options.js';
import { checkJudge } from '../lib/judge/backends/index.js';
import { JUDGE_DEFAULTS } from '../lib/config/judge.js';
import { judgeHealth, type Verdict } from '../lib/judge/types.js';
import { oomError } from '../lib/errors.js';
import { startFakeLlm } from './helpers/fake-llm.js';
import { fakeBackend } from './helpers/fake-backend.js';

const items: TrainItem[] = Array.from({ length: 4 }, (_, i) => ({
  id: `q${i}`,
  question: `question ${i}`,
  reference_answer: 'a',
  rubric: [{ id: 'r1', text: 'x', dimension: 'method_innovation' }],
  split: 'train',
}));

/** A reward whose verdicts for step `k` (1-based call count) are null when `bad(k)`. */
function rewardWith(bad: (call: number) => 'ok' | 'unreadable' | 'throw') {
  let call = 0;
  return async (reqs: { item: TrainItem; plan: string }[]): Promise<RewardResult[]> => {
    call++;
    const mode = bad(call);
    if (mode === 'throw') throw new Error('judge request failed: LLM HTTP 404 (http://judge/v1/chat/completions)');
    return reqs.map((_, i) => {
      const vs: Verdict[] = [
        { itemId: 'r1', met: mode === 'ok' ? i % 2 === 0 : null },
        { itemId: 'g1', met: mode === 'ok' ? true : null },
      ];
      return { reward: mode === 'ok' ? 0.5 : 0, rSpec: 0, rGen: 0, judge: judgeHealth(vs) };
    });
  };
}

describe('train: judge health and clean stops (fake backend)', function () {
  this.timeout(30000);
  let tmp: string;
  before(() => (tmp = mkdtempSync(join(tmpdir(), 'pg-judge-health-'))));
  after(() => rmSync(tmp, { recursive: true, force: true }));
  const cfg = (over: Record<string, unknown> = {}) =>
    resolveConfig({
      flags: {
        stages: ['grpo'],
        grpo: { steps: 4, questionsPerStep: 2, groupSize: 2, microBatch: 4 } as never,
        checkpoint: { every: 0 },
        validation: { validateEvery: 0, items: 0 },
        ...over,
      } as never,
    });

  it('writes judge health per step and stops on a null-rate step with a checkpoint of the state before it; --resume redoes that step', async () => {
    const runDir = join(tmp, 'nulls');
    const lines: string[] = [];
    const c = cfg();
    const t = new Trainer(c, {
      backend: fakeBackend(),
      items,
      reward: rewardWith((k) => (k <= 2 ? 'ok' : 'unreadable')),
      advantages: (r) => ({ advantages: r.map(() => 0), keep: r.map(() => true) }),
      runDir,
      log: (l) => lines.push(l),
    });
    let err: unknown;
    try {
      await t.run();
    } catch (e) {
      err = e;
    }
    expect(err).to.be.instanceOf(TrainingStoppedError);
    const msg = (err as Error).message;
    expect(msg).to.match(
      /\[grpo\] step 3 failed: judge .*GRPO step 3: 8 of 8 verdicts are null \(100% > 50%: 0 failed requests, 8 unreadable replies, 0 refusals\)/,
    );
    expect(msg).to.include(`resume with: papergym-native train --resume ${runDir}`);
    const metrics = readFileSync(join(runDir, 'metrics.jsonl'), 'utf8')
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l));
    const steps = metrics.filter((m) => typeof m.loss === 'number');
    expect(steps).to.have.length(2);
    expect(steps[0].judge).to.deep.equal({ verdicts: 8, nulls: 0, refusals: 0, unparsed: 0, errors: 0, withProb: 0 });
    expect(steps[0].judgeNullRate).to.equal(0);
    expect(metrics[metrics.length - 1]).to.include({ stopped: 'JudgeHealthError', step: 2 });
    // The checkpoint is the state after step 2: the cursor of step 3 was not consumed.
    const ck = resolveCheckpoint(runDir);
    expect(ck.state.stageStep).to.equal(2);
    expect(ck.state.cursor).to.deep.equal({ epoch: 0, position: 4 }); // 2 steps × 2 questions; step 3's take was rolled back
    expect((err as TrainingStoppedError).checkpoint).to.equal(ck.dir);
    // Resume with a healthy judge: steps 3 and 4 run from that state.
    const t2 = new Trainer(
      c,
      {
        backend: fakeBackend(),
        items,
        reward: rewardWith(() => 'ok'),
        advantages: (r) => ({ advantages: r.map(() => 0), keep: r.map(() => true) }),
        runDir,
        log: () => {},
      },
      ck.state,
    );
    const summary = await t2.run();
    expect(summary.globalStep).to.equal(4);
    expect(summary.interrupted).to.equal(false);
  });

  it('HTTP judge: a group is judged as soon as its completions finished, while the others still sample; same rewards as judging after the rollout', async () => {
    // Fake rollouts: 4 questions in one chunk; groups 0 and 2 finish early (onGroup before generate
    // resolves), 1 and 3 only with the result. Events are recorded in order, not timed.
    const run = async (kind: 'http' | 'local', judgeOverlap: 'auto' | 'on' | 'off' = 'auto', oomEarly = false) => {
      const events: string[] = [];
      const base = fakeBackend();
      const backend = {
        ...base,
        generate: async (prompts: number[][], o: Parameters<typeof base.generate>[1], onGroup?: Parameters<typeof base.generate>[2]) => {
          const all = await base.generate(prompts, o);
          for (const p of [0, 2])
            onGroup?.(
              p,
              all.filter((r) => r.promptIndex === p),
            );
          await new Promise((r) => setTimeout(r, 20));
          events.push('rollout done');
          // A report after the call returned (a group that ended at the last read-back) must not be judged twice.
          setTimeout(
            () =>
              onGroup?.(
                1,
                all.filter((r) => r.promptIndex === 1),
              ),
            0,
          );
          return all;
        },
      };
      let call = 0;
      const reward = async (reqs: { item: TrainItem; plan: string }[]): Promise<RewardResult[]> => {
        // oomEarly: a local judge scoring beside the decode runs out of memory.
        if (oomEarly && !events.includes('rollout done')) {
          events.push(`judge oom ${reqs.map((r) => r.plan).join(',')}`);
          throw oomError('CUDA out of memory (test)');
        }
        events.push(`judge ${reqs.map((r) => r.plan).join(',')}`);
        call++;
        return reqs.map((r) => ({
          reward: Number(r.plan.replace('plan ', '')) + r.item.question.length / 100,
          rSpec: 0,
          rGen: 0,
          judge: judgeHealth([{ itemId: 'r1', met: true }]),
        }));
      };
      const runDir = join(tmp, `per-group-${kind}-${judgeOverlap}-${oomEarly}`);
      const c = cfg({
        grpo: { steps: 1, questionsPerStep: 4, groupSize: 2, microBatch: 8, judgeOverlap },
        judge: { ...cfg().judge, kind, ...(kind === 'http' && { url: 'http://127.0.0.1:9/v1', model: 'm' }) },
      });
      let rewards: number[] = [];
      const logs: string[] = [];
      await new Trainer(c, {
        backend,
        items,
        reward,
        advantages: (r) => ((rewards = r), { advantages: r.map((x) => x - 1), keep: r.map(() => true) }),
        runDir,
        log: (l) => logs.push(l),
      }).run();
      await new Promise((r) => setTimeout(r, 10));
      return { events, calls: call, rewards, logs, overlapAfter: c.grpo.judgeOverlap };
    };
    const http = await run('http');
    expect(http.events.slice(0, 3)).to.deep.equal(['judge plan 0.0,plan 0.1', 'judge plan 2.0,plan 2.1', 'rollout done']);
    expect(http.events.slice(3).sort()).to.deep.equal(['judge plan 1.0,plan 1.1', 'judge plan 3.0,plan 3.1']);
    const local = await run('local');
    expect(local.events).to.deep.equal(['rollout done', 'judge plan 0.0,plan 0.1,plan 1.0,plan 1.1,plan 2.0,plan 2.1,plan 3.0,plan 3.1']);
    // The same rewards in the same (rollout) order either way, as the advantages receive them.
    expect(http.rewards).to.have.length(8);
    expect(http.rewards).to.deep.equal(local.rewards);
    expect(http.calls, 'each group judged once').to.equal(4);
    expect(local.calls).to.equal(1);
    // The local judge with grpo.judgeOverlap on (the memory plan's choice on CUDA) judges per group as the HTTP judge does.
    const overlap = await run('local', 'on');
    expect(overlap.events).to.deep.equal(http.events);
    expect(overlap.rewards).to.deep.equal(local.rewards);
    // Out of memory beside the decode: those groups are judged again after the rollout, the overlap is off from then on, same rewards.
    const oom = await run('local', 'on', true);
    expect(oom.events.slice(0, 3)).to.deep.equal(['judge oom plan 0.0,plan 0.1', 'judge oom plan 2.0,plan 2.1', 'rollout done']);
    expect(oom.events.slice(3).sort()).to.deep.equal([
      'judge plan 0.0,plan 0.1',
      'judge plan 1.0,plan 1.1',
      'judge plan 2.0,plan 2.1',
      'judge plan 3.0,plan 3.1',
    ]);
    expect(oom.rewards).to.deep.equal(local.rewards);
    expect(oom.overlapAfter).to.equal('off');
    expect(oom.logs.filter((l) => /judging after the rollout from now on \(grpo.judgeOverlap off\)/.test(l))).to.have.length(1);
  });

  it("local judge with several rollout chunks: off never scores beside a decode (not even the previous chunk's groups); after an out of memory beside the decode no later scoring runs beside one either", async () => {
    // 4 questions, groups of 2, 2 rollout rows: 4 chunks of one group. Each generate and each
    // reward call takes a few event-loop turns; overlaps are recorded, not timed.
    const run = async (judgeOverlap: 'on' | 'off', oomFirst: boolean) => {
      const events: string[] = [];
      let decoding = 0,
        judging = 0,
        oomed = false;
      const base = fakeBackend();
      const backend = {
        ...base,
        generate: async (prompts: number[][], o: Parameters<typeof base.generate>[1], onGroup?: Parameters<typeof base.generate>[2]) => {
          if (judging) events.push('decode beside judge');
          decoding++;
          const all = await base.generate(prompts, o);
          onGroup?.(
            0,
            all.filter((r) => r.promptIndex === 0),
          );
          await new Promise((r) => setTimeout(r, 15));
          decoding--;
          events.push('rollout');
          return all;
        },
      };
      const reward = async (reqs: { item: TrainItem; plan: string }[]): Promise<RewardResult[]> => {
        if (decoding) events.push(oomed ? 'judge beside decode after oom' : 'judge beside decode');
        judging++;
        try {
          await new Promise((r) => setTimeout(r, 10));
          if (oomFirst && !oomed && decoding) {
            oomed = true;
            throw oomError('CUDA out of memory (test)');
          }
          return reqs.map(() => ({ reward: 1, rSpec: 0, rGen: 0, judge: judgeHealth([{ itemId: 'r1', met: true }]) }));
        } finally {
          judging--;
        }
      };
      const runDir = join(tmp, `chunks-local-${judgeOverlap}-${oomFirst}`);
      const c = cfg({ grpo: { steps: 1, questionsPerStep: 4, groupSize: 2, microBatch: 2, judgeOverlap }, judge: { ...cfg().judge, kind: 'local' } });
      await new Trainer(c, {
        backend,
        items,
        reward,
        advantages: (r) => ({ advantages: r.map(() => 0), keep: r.map(() => true) }),
        runDir,
        log: () => {},
      }).run();
      return events;
    };
    const off = await run('off', false);
    expect(off.filter((e) => e === 'rollout')).to.have.length(4);
    expect(
      off.filter((e) => e !== 'rollout'),
      'grpo.judgeOverlap off: no judge call beside a decode',
    ).to.deep.equal([]);
    const on = await run('on', false);
    expect(on, 'on: the judge scores beside the decode').to.include('judge beside decode');
    const oom = await run('on', true);
    expect(oom.filter((e) => e === 'rollout')).to.have.length(4);
    expect(
      oom.filter((e) => e === 'judge beside decode after oom' || e === 'decode beside judge'),
      'after the out of memory: judged after the rollouts only',
    ).to.deep.equal([]);
  });

  it("local judge, overlap on, two chunks: a judge call that runs out of memory beside the NEXT chunk's decode (an early group, or a group judged after its rollout) is judged again once no decode runs; same rewards as off", async () => {
    // 4 questions, groups of 2, 4 rollout rows: 2 chunks of 2 groups; each generate reports group 0
    // early, group 1 only with its result. A reward call that saw a decode at any time runs out of memory.
    const run = async (judgeOverlap: 'on' | 'off') => {
      let decoding = 0,
        decodes = 0,
        besideOk = 0;
      const base = fakeBackend();
      const backend = {
        ...base,
        generate: async (prompts: number[][], o: Parameters<typeof base.generate>[1], onGroup?: Parameters<typeof base.generate>[2]) => {
          decoding++;
          decodes++;
          const all = await base.generate(prompts, o);
          onGroup?.(
            0,
            all.filter((r) => r.promptIndex === 0),
          );
          await new Promise((r) => setTimeout(r, 25));
          decoding--;
          return all;
        },
      };
      const reward = async (reqs: { item: TrainItem; plan: string }[]): Promise<RewardResult[]> => {
        const seen = decodes;
        let beside = decoding > 0;
        await new Promise((r) => setTimeout(r, 30));
        beside ||= decoding > 0 || decodes !== seen;
        if (beside && judgeOverlap === 'on') throw oomError('CUDA out of memory (test)');
        if (beside) besideOk++;
        return reqs.map((r) => ({
          reward: Number(r.plan.replace('plan ', '')) + r.item.question.length / 100,
          rSpec: 0,
          rGen: 0,
          judge: judgeHealth([{ itemId: 'r1', met: true }]),
        }));
      };
      const runDir = join(tmp, `chunks2-local-${judgeOverlap}`);
      const c = cfg({ grpo: { steps: 1, questionsPerStep: 4, groupSize: 2, microBatch: 4, judgeOverlap }, judge: { ...cfg().judge, kind: 'local' } });
      let rewards: number[] = [];
      const logs: string[] = [];
      await new Trainer(c, {
        backend,
        items,
        reward,
        advantages: (r) => ((rewards = r), { advantages: r.map(() => 0), keep: r.map(() => true) }),
        runDir,
        log: (l) => logs.push(l),
      }).run();
      return { rewards, logs, besideOk, overlapAfter: c.grpo.judgeOverlap };
    };
    const off = await run('off');
    expect(off.besideOk, 'off: no judge call beside a decode').to.equal(0);
    expect(off.rewards).to.have.length(8);
    const on = await run('on');
    expect(on.rewards).to.deep.equal(off.rewards);
    expect(on.overlapAfter).to.equal('off');
    expect(on.logs.filter((l) => /judging after the rollout from now on \(grpo.judgeOverlap off\)/.test(l))).to.have.length(1);
  });

  it('local judge, overlap on: the DECODE running out of memory while the judge scores beside it samples the chunk again with the overlap off; same rewards as off; a decode out of memory without the judge beside it still fails the step', async () => {
    // A generate that ends while a judge call is in flight runs out of memory (the judge's memory beside the decode).
    const run = async (judgeOverlap: 'on' | 'off', oomAlways = false) => {
      let judging = 0,
        generates = 0;
      const base = fakeBackend();
      const backend = {
        ...base,
        generate: async (prompts: number[][], o: Parameters<typeof base.generate>[1], onGroup?: Parameters<typeof base.generate>[2]) => {
          generates++;
          const all = await base.generate(prompts, o);
          onGroup?.(
            0,
            all.filter((r) => r.promptIndex === 0),
          );
          await new Promise((r) => setTimeout(r, 15));
          if (judging || oomAlways) throw oomError('CUDA out of memory (test decode)');
          return all;
        },
      };
      const reward = async (reqs: { item: TrainItem; plan: string }[]): Promise<RewardResult[]> => {
        judging++;
        await new Promise((r) => setTimeout(r, 30));
        judging--;
        return reqs.map((r) => ({
          reward: Number(r.plan.replace('plan ', '')) + r.item.question.length / 100,
          rSpec: 0,
          rGen: 0,
          judge: judgeHealth([{ itemId: 'r1', met: true }]),
        }));
      };
      const runDir = join(tmp, `decode-oom-${judgeOverlap}-${oomAlways}`);
      const c = cfg({ grpo: { steps: 1, questionsPerStep: 4, groupSize: 2, microBatch: 4, judgeOverlap }, judge: { ...cfg().judge, kind: 'local' } });
      let rewards: number[] = [];
      const logs: string[] = [];
      await new Trainer(c, {
        backend,
        items,
        reward,
        advantages: (r) => ((rewards = r), { advantages: r.map(() => 0), keep: r.map(() => true) }),
        runDir,
        log: (l) => logs.push(l),
      }).run();
      return { rewards, logs, generates, overlapAfter: c.grpo.judgeOverlap };
    };
    const off = await run('off');
    expect(off.generates).to.equal(2);
    const on = await run('on');
    expect(on.rewards).to.deep.equal(off.rewards);
    expect(on.generates, 'the first chunk sampled again').to.equal(3);
    expect(on.overlapAfter).to.equal('off');
    expect(on.logs.filter((l) => /rollout: out of memory with the judge beside the decode .*grpo.judgeOverlap off/.test(l))).to.have.length(1);
    let err: Error | undefined;
    try {
      await run('on', true);
    } catch (e) {
      err = e as Error;
    }
    expect(err, 'out of memory again without the judge beside: the step fails').to.be.instanceOf(TrainingStoppedError);
    expect(err!.message).to.include('CUDA out of memory (test decode)');
  });

  it('a reward call that throws (judge down) also ends the run cleanly with a checkpoint and the resume command', async () => {
    const runDir = join(tmp, 'throws');
    const t = new Trainer(cfg(), {
      backend: fakeBackend(),
      items,
      reward: rewardWith((k) => (k === 1 ? 'ok' : 'throw')),
      advantages: (r) => ({ advantages: r.map(() => 0), keep: r.map(() => true) }),
      runDir,
      log: () => {},
    });
    let err: Error | undefined;
    try {
      await t.run();
    } catch (e) {
      err = e as Error;
    }
    expect(err?.message)
      .to.match(/\[grpo\] step 2 failed: judge request failed: LLM HTTP 404/)
      .and.match(/checkpoint written: .*checkpoints/)
      .and.match(/resume with: papergym-native train --resume/);
    expect(resolveCheckpoint(runDir).state.stageStep).to.equal(1);
  });

  it('the null-rate threshold is configurable (flag / YAML judge.maxNullRate); null rates at or under it train on', async () => {
    const runDir = join(tmp, 'threshold');
    // Half of the verdicts null on every step: 50% is not over the default 0.5 …
    let call = 0;
    const half = async (reqs: { item: TrainItem; plan: string }[]): Promise<RewardResult[]> => {
      call++;
      return reqs.map(() => ({
        reward: 0,
        rSpec: 0,
        rGen: 0,
        judge: judgeHealth([
          { itemId: 'a', met: true },
          { itemId: 'b', met: null, error: true },
        ]),
      }));
    };
    const ok = await new Trainer(cfg(), {
      backend: fakeBackend(),
      items,
      reward: half,
      advantages: (r) => ({ advantages: r.map(() => 0), keep: r.map(() => true) }),
      runDir,
      log: () => {},
    }).run();
    expect(ok.globalStep).to.equal(4);
    expect(call).to.equal(4);
    // … but over 0.4.
    let err: Error | undefined;
    try {
      await new Trainer(cfg({ judge: { maxNullRate: 0.4 } }), {
        backend: fakeBackend(),
        items,
        reward: half,
        advantages: (r) => ({ advantages: r.map(() => 0), keep: r.map(() => true) }),
        runDir: join(tmp, 'threshold2'),
        log: () => {},
      }).run();
    } catch (e) {
      err = e as Error;
    }
    expect(err?.message).to.match(/4 of 8 verdicts are null \(50% > 40%: 4 failed requests/);
  });
});

describe('train: the same judge options as eval', () => {
  it('flags: --judge-no-think, --judge-score, --judge-max-null-rate … map onto the config judge section (only flags given)', async () => {
    const argv = await addJudgeOptions(yargs([]), { defaults: false }).parseAsync([
      '--judge',
      'http',
      '--judge-url',
      'http://x/v1',
      '--judge-model',
      'm',
      '--judge-no-think',
      '--judge-score',
      'prob',
      '--judge-max-null-rate',
      '0.3',
      '--judge-timeout-ms',
      '5000',
    ]);
    const f = judgeFlagsToConfig(argv as never);
    expect(f).to.deep.equal({ kind: 'http', url: 'http://x/v1', model: 'm', noThink: true, score: 'prob', maxNullRate: 0.3, timeoutMs: 5000 });
    const c = resolveConfig({ flags: { judge: f } as never });
    expect(c.judge).to.include({ kind: 'http', noThink: true, score: 'prob', maxNullRate: 0.3, concurrency: 8, mode: 'per-item' });
    const none = await addJudgeOptions(yargs([]), { defaults: false }).parseAsync([]);
    expect(judgeFlagsToConfig(none as never)).to.deep.equal({});
    const evalDefaults = await addJudgeOptions(yargs([])).parseAsync([]);
    expect(evalDefaults).to.include({
      judge: 'http',
      judgeNoThink: false,
      judgeScore: 'binary',
      judgeMaxNullRate: 0.5,
      judgeConcurrency: JUDGE_DEFAULTS.concurrency,
    });
  });

  it('YAML: judge.noThink, judge.score, judge.maxNullRate, judge.timeoutMs are keys; bad values are named', () => {
    const dir = mkdtempSync(join(tmpdir(), 'pg-cfg-judge-'));
    const file = join(dir, 'c.yaml');
    writeFileSync(
      file,
      'judge:\n  kind: http\n  url: http://127.0.0.1:8000/v1\n  model: Qwen/Qwen3-8B\n  noThink: true\n  score: prob\n  maxNullRate: 0.2\n  timeoutMs: 30000\n',
    );
    expect(resolveConfig({ file }).judge).to.include({ noThink: true, score: 'prob', maxNullRate: 0.2, timeoutMs: 30000 });
    writeFileSync(file, 'judge:\n  maxNullRate: 1.5\n  score: logits\n');
    expect(() => resolveConfig({ file })).to.throw(
      /judge\.score \(--judge-score\) must be one of binary \| prob[\s\S]*judge\.maxNullRate \(--judge-max-null-rate\) must be in \[0, 1\]/,
    );
    writeFileSync(file, 'judge:\n  no_think: true\n');
    expect(() => resolveConfig({ file })).to.throw(/unknown key judge\.no_think/);
    rmSync(dir, { recursive: true, force: true });
  });

  it('the start-up check sends a real chat request: a URL answering 404 fails, a working judge passes, --judge-no-think is sent', async () => {
    const srv = await startFakeLlm({ respond: () => 'Yes' });
    // A web server that answers 404 to everything (a wrong host/port/path given as the judge).
    const web = createServer((_req, res) => {
      res.writeHead(404, { 'content-type': 'text/html' });
      res.end('<html><body><h1>404 Not Found</h1></body></html>');
    });
    await new Promise<void>((r) => web.listen(0, '127.0.0.1', r));
    try {
      let err: Error | undefined;
      try {
        await checkJudge({ ...JUDGE_DEFAULTS, kind: 'http', url: `http://127.0.0.1:${(web.address() as AddressInfo).port}/nope/v1`, model: 'm' });
      } catch (e) {
        err = e as Error;
      }
      expect(err?.message).to.match(/judge m at .*\/nope\/v1 failed the start-up check .*LLM HTTP 404/);
      await checkJudge({ ...JUDGE_DEFAULTS, kind: 'http', url: srv.url, model: 'm', noThink: true });
      expect(srv.log[srv.log.length - 1].body).to.deep.include({ chat_template_kwargs: { enable_thinking: false }, max_tokens: 8 });
      let unreachable: Error | undefined;
      try {
        await checkJudge({ ...JUDGE_DEFAULTS, kind: 'http', url: 'http://127.0.0.1:1/v1', model: 'm' }, { timeoutMs: 3000 });
      } catch (e) {
        unreachable = e as Error;
      }
      expect(unreachable?.message).to.match(/failed the start-up check .*127\.0\.0\.1:1/);
    } finally {
      await srv.close();
      web.close();
    }
  });
});
