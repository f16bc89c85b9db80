/**
 * Phase seconds of a training step (lib/train/stages/stage.ts StepPhase): every metrics.jsonl step
 * line carries every phase of its stage (0 when it did not run) plus the checkpoint written after
 * the step and `host`, adding up to `stepSeconds`; the progress line shows the same phases. The
 * `train` command on the embedded tiny model, then the Trainer over a model-free backend for the
 * paths a real run rarely takes (a failed checkpoint, the non-finite stop) and writeCheckpoint's
 * commit hook (a step's line lands before its checkpoint is committed).
 */
import { expect } from 'chai';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { ensureDefaultModel } from '../lib/train/run.js';
import { resolveCheckpoint, writeCheckpoint, type TrainerState } from '../lib/train/checkpoint.js';
import { resolveConfig } from '../lib/config/train.js';
import { Trainer, formatPhases, stepPhases, type TrainItem } from '../lib/train/trainer.js';
import { STAGES } from '../lib/train/stages/index.js';
import { cli } from './helpers/run.js';
import { fakeBackend } from './helpers/fake-backend.js';

const GRPO_PHASES = ['rollout', 'judge', 'reference', 'update', 'optimizer', 'checkpoint', 'host'];
const OPSD_PHASES = ['rollout', 'update', 'optimizer', 'checkpoint', 'host'];
const SFT_PHASES = ['update', 'optimizer', 'checkpoint', 'host'];

type Line = Record<string, unknown> & { phaseSeconds?: Record<string, number>; stepSeconds?: number; globalStep: number; stage: string };
const readLines = (run: string): Line[] =>
  readFileSync(join(run, 'metrics.jsonl'), 'utf8')
    .trim()
    .split('\n')
    .map((l) => JSON.parse(l) as Line);
const sum = (o: Record<string, number>) => Object.values(o).reduce((a, b) => a + b, 0);

/** Every step line: the stage's phase keys in order, each a finite number ≥ 0, adding up to stepSeconds. */
function checkStepLine(l: Line, keys: string[]): void {
  const where = `${l.stage} step line ${l.globalStep}`;
  expect(Object.keys(l.phaseSeconds ?? {}), where).to.deep.equal(keys);
  for (const [k, v] of Object.entries(l.phaseSeconds!)) expect(Number.isFinite(v) && v >= 0, `${where}: ${k} = ${v}`).to.equal(true);
  expect(Math.abs(sum(l.phaseSeconds!) - l.stepSeconds!), `${where}: phases add up to stepSeconds`).to.be.below(1e-9);
  expect((l.completionTokens as number) / l.stepSeconds!, `${where}: tokensPerSecond over stepSeconds`).to.be.closeTo(
    l.tokensPerSecond as number,
    1e-6 * (l.tokensPerSecond as number),
  );
}

describe('train: phase seconds in every step line and the progress line', function () {
  this.timeout(300000);
  let tmp: string;
  before(() => {
    ensureDefaultModel();
    tmp = mkdtempSync(join(tmpdir(), 'pg-phases-'));
  });
  after(() => rmSync(tmp, { recursive: true, force: true }));

  it('train (tiny model): every phase key on every step line, checkpoint > 0 exactly on the steps that checkpointed, phases add up to stepSeconds', async () => {
    const out = join(tmp, 'run');
    // Checkpoints after OPSD step 2 (global 2), GRPO step 2 (global 5) and the final one after the
    // last step (global 6); validation after step 3 of each stage (global 3 and 6).
    const r = await cli([
      'train',
      '--out',
      out,
      '--opsd-steps',
      '3',
      '--grpo-steps',
      '3',
      '--opsd-batch-size',
      '2',
      '--questions-per-step',
      '1',
      '--group-size',
      '2',
      '--max-new-tokens',
      '6',
      '--checkpoint-every',
      '2',
      '--validate-every',
      '3',
      '--seed',
      '7',
    ]);
    const log = r.out + r.err;
    expect(r.code, log).to.equal(0);
    const all = readLines(out);
    // Each checkpoint written beside the next step adds one row once committed (global 2 and 5; the
    // final one is written in the step); the rest is one line per step and one per validation.
    const ckRows = all.filter((l) => 'checkpointWriteSeconds' in l);
    expect(ckRows.map((l) => l.globalStep)).to.deep.equal([2, 5]);
    // Each stage that validated ends with the row of the state it hands on (validation.loadBestAtEnd).
    expect(all.filter((l) => l.event === 'best_loaded').map((l) => l.globalStep)).to.deep.equal([3, 6]);
    const lines = all.filter((l) => !('checkpointWriteSeconds' in l) && l.event !== 'best_loaded');
    const steps = lines.filter((l) => typeof l.loss === 'number');
    expect(steps.map((l) => `${l.stage}:${l.globalStep}`)).to.deep.equal(['opsd:1', 'opsd:2', 'opsd:3', 'grpo:4', 'grpo:5', 'grpo:6']);
    const val = lines.filter((l) => 'validation' in l);
    expect(val.map((l) => l.globalStep)).to.deep.equal([3, 6]);
    expect(lines).to.have.length(steps.length + val.length);
    for (const v of val) expect(v.validationSeconds as number).to.be.greaterThan(0);
    // A step's validation line follows its step line.
    expect(lines.map((l) => ('validation' in l ? `v${l.globalStep}` : `s${l.globalStep}`))).to.deep.equal(['s1', 's2', 's3', 'v3', 's4', 's5', 's6', 'v6']);
    for (const l of steps) checkStepLine(l, l.stage === 'grpo' ? GRPO_PHASES : OPSD_PHASES);
    // The checkpoints the run wrote (its log names each), and the steps whose line has checkpoint > 0.
    const written = [...log.matchAll(/checkpoint \S*step-(\d+)/g)].map((m) => Number(m[1]));
    expect(written).to.deep.equal([2, 5, 6]);
    expect(steps.filter((l) => l.phaseSeconds!.checkpoint! > 0).map((l) => l.globalStep)).to.deep.equal(written);
    expect(resolveCheckpoint(out).state.globalStep).to.equal(6);
    // The timed phases ran: rollout and update on every step, judge and reference on GRPO steps.
    for (const l of steps)
      for (const k of l.stage === 'grpo' ? ['rollout', 'judge', 'reference', 'update', 'optimizer'] : ['rollout', 'update', 'optimizer'])
        expect(l.phaseSeconds![k], `${l.stage} ${l.globalStep} ${k}`).to.be.greaterThan(0);
    // The progress line shows every phase of the line, in its order.
    expect(log).to.match(/\[opsd\] step 1\/3 loss \S+ rollout \d+\.\ds update \d+\.\ds optimizer \d+\.\ds checkpoint \d+\.\ds host \d+\.\ds \|/);
    expect(log).to.match(
      /\[grpo\] step 3\/3 loss \S+ reward \S+ .*rollout \d+\.\ds judge \d+\.\ds reference \d+\.\ds update \d+\.\ds optimizer \d+\.\ds checkpoint \d+\.\ds host \d+\.\ds \|/,
    );
  });

  describe('model-free backend', () => {
    const items: TrainItem[] = Array.from({ length: 4 }, (_, i) => ({
      id: `q${i}`,
      question: `question ${i}`,
      reference_answer: 'a',
      rubric: [{ id: 'r1', text: 'x', dimension: 'method_innovation' }],
      split: 'train',
    }));
    const reward = async (reqs: unknown[]) => reqs.map(() => ({ reward: 0.5, rSpec: 0.5, rGen: 0.5 }));
    const advantages = (r: number[]) => ({ advantages: r.map(() => 0), keep: r.map(() => true) });
    const sftCfg = (steps: number, every: number) =>
      resolveConfig({
        flags: { stages: ['sft'], sft: { steps, batchSize: 2 } as never, checkpoint: { every }, validation: { validateEvery: 0, items: 0 } } as never,
      });
    const slowSave = () => new Promise<void>((r) => setTimeout(r, 5));

    it('the stages declare the phases they time; formatPhases shows every phase in order, zeros included', () => {
      expect(stepPhases(STAGES.get('grpo'))).to.deep.equal(GRPO_PHASES);
      expect(stepPhases(STAGES.get('opsd'))).to.deep.equal(OPSD_PHASES);
      expect(stepPhases(STAGES.get('sft'))).to.deep.equal(SFT_PHASES);
      expect(stepPhases(STAGES.get('grpo'), 2)).to.deep.equal(['rollout', 'judge', 'reference', 'update', 'allreduce', 'optimizer', 'checkpoint', 'host']);
      expect(formatPhases({ rollout: 15.23, judge: 0, update: 10.7, checkpoint: 0.04, host: 0.3 })).to.equal(
        'rollout 15.2s judge 0.0s update 10.7s checkpoint 0.0s host 0.3s',
      );
    });

    it('--profile-step N: the phases of step N of the stage profiled, one file per step, kernels merged per phase', async () => {
      const runDir = join(tmp, 'profile');
      const cfg = sftCfg(3, 0);
      cfg.log.profileStep = 2;
      cfg.device = 'cuda'; // profiles are taken on CUDA runs only (the fake backend runs anywhere)
      let starts = 0;
      let running = false;
      const backend = {
        ...fakeBackend(),
        profileStart: () => {
          expect(running, 'one profile at a time').to.equal(false);
          running = true;
          starts += 1;
        },
        profileStop: () => {
          running = false;
          return {
            kernels: [
              { name: 'nvjet_sm90_tst_128x64_TNT', count: 2, totalUs: 100, meanUs: 50, maxUs: 60 },
              { name: 'void pg::cuda_kernels::AddRmsNormVecKernel<__nv_bfloat16>', count: 1, totalUs: 50, meanUs: 50, maxUs: 50 },
            ],
            gpuUs: 150,
            gpuBusyUs: 120,
            gpuSpanUs: 200,
            events: 3,
          };
        },
      };
      const logged: string[] = [];
      await new Trainer(cfg, { backend, items, reward, advantages, runDir, log: (l) => void logged.push(l) }).run();
      expect(starts, 'the update and optimizer phases of step 2 only').to.equal(2);
      expect(readdirSync(join(runDir, 'profile'))).to.deep.equal(['sft-step2.json']);
      const p = JSON.parse(readFileSync(join(runDir, 'profile', 'sft-step2.json'), 'utf8')) as {
        stage: string;
        step: number;
        phases: Record<
          string,
          { wallSeconds: number; gpuBusySeconds: number; gpuSecondsByKind: Record<string, number>; kernels: { name: string; count: number; totalUs: number }[] }
        >;
      };
      expect([p.stage, p.step]).to.deep.equal(['sft', 2]);
      expect(Object.keys(p.phases)).to.deep.equal(['update', 'optimizer']);
      const step2 = readLines(runDir).find((l) => l.globalStep === 2)!;
      expect(p.phases.update!.wallSeconds).to.equal(step2.phaseSeconds!.update);
      expect(p.phases.update!.gpuBusySeconds).to.be.closeTo(120e-6, 1e-12);
      expect(p.phases.update!.gpuSecondsByKind).to.deep.equal({ gemm: 100e-6, 'norm/rope/swiglu': 50e-6 });
      expect(p.phases.update!.kernels.map((k) => [k.count, k.totalUs])).to.deep.equal([
        [2, 100],
        [1, 50],
      ]);
      expect(
        logged.some((l) => /\[sft\] kernel profile of step 2: update \d+\.\d+ s, GPU busy 0\.00 s \(gemm 0\.00, norm\/rope\/swiglu 0\.00\)/.test(l)),
        logged.join('\n'),
      ).to.equal(true);

      // On the CPU: no profile, one line saying why, no profile/ directory.
      const cpuDir = join(tmp, 'profile-cpu');
      const cpuCfg = sftCfg(2, 0);
      cpuCfg.log.profileStep = 1;
      const said: string[] = [];
      starts = 0;
      await new Trainer(cpuCfg, { backend, items, reward, advantages, runDir: cpuDir, log: (l) => void said.push(l) }).run();
      expect(starts).to.equal(0);
      expect(existsSync(join(cpuDir, 'profile'))).to.equal(false);
      expect(said.filter((l) => /--profile-step 1: no kernel profile — it records GPU kernels and this run is on cpu/.test(l))).to.have.length(1);

      // A step beyond the stage's steps: one line saying so, nothing profiled.
      const farCfg = sftCfg(2, 0);
      farCfg.log.profileStep = 5;
      farCfg.device = 'cuda';
      const far: string[] = [];
      starts = 0;
      await new Trainer(farCfg, { backend, items, reward, advantages, runDir: join(tmp, 'profile-far'), log: (l) => void far.push(l) }).run();
      expect(starts).to.equal(0);
      expect(far.filter((l) => /\[sft\] --profile-step 5: beyond this stage's 2 steps, nothing profiled in it/.test(l))).to.have.length(1);
    });

    it("each checkpoint's step line is in metrics.jsonl before the checkpoint completes (the report hook sees it)", async () => {
      const runDir = join(tmp, 'hook');
      const seen: { dir: string; last: Line }[] = [];
      await new Trainer(sftCfg(4, 2), {
        backend: fakeBackend({ onSave: slowSave }),
        items,
        reward,
        advantages,
        runDir,
        log: () => {},
        onCheckpoint: (dir) => void seen.push({ dir, last: readLines(runDir).at(-1)! }),
      }).run();
      // Checkpoints after steps 2 and 4 (the last one is the final checkpoint).
      expect(seen.map((s) => [s.dir.slice(-11), s.last.globalStep])).to.deep.equal([
        ['step-000002', 2],
        ['step-000004', 4],
      ]);
      for (const s of seen) expect(s.last.phaseSeconds!.checkpoint).to.be.greaterThan(0);
      const steps = readLines(runDir);
      for (const l of steps) checkStepLine(l, SFT_PHASES);
      expect(steps.map((l) => l.phaseSeconds!.checkpoint! > 0)).to.deep.equal([false, true, false, true]);
    });

    it('a checkpoint that fails still writes its step line, with the seconds it took', async () => {
      const runDir = join(tmp, 'failing');
      let err: unknown;
      try {
        await new Trainer(sftCfg(4, 2), {
          backend: fakeBackend({
            onSave: async (call) => {
              await slowSave();
              if (call === 2) throw new Error('disk full');
            },
          }),
          items,
          reward,
          advantages,
          runDir,
          log: () => {},
        }).run();
      } catch (e) {
        err = e;
      }
      // What failed, the checkpoint that stands and the resume command.
      expect((err as Error)?.message).to.equal(
        `the final checkpoint failed: disk full\nthe last complete checkpoint stands: ${join(runDir, 'checkpoints', 'step-000002')}\nresume with: papergym-native train --resume ${runDir}`,
      );
      const steps = readLines(runDir);
      expect(steps.map((l) => l.globalStep)).to.deep.equal([1, 2, 3, 4]);
      for (const l of steps) checkStepLine(l, SFT_PHASES);
      expect(steps[3]!.phaseSeconds!.checkpoint).to.be.greaterThan(0);
      expect(resolveCheckpoint(runDir).state.globalStep).to.equal(2);
    });

    it('a checkpoint written beside the next step holds the trainer state of its own step, though later steps ran while it was written', async () => {
      const runDir = join(tmp, 'beside-state');
      // Each write takes 60 ms; a step takes a few ms: several steps run during each write.
      await new Trainer(sftCfg(9, 3), {
        backend: fakeBackend({ capture: true, onSave: () => new Promise<void>((r) => setTimeout(r, 60)) }),
        items,
        reward,
        advantages,
        runDir,
        log: () => {},
      }).run();
      for (const step of [3, 6]) {
        const st = JSON.parse(readFileSync(join(runDir, 'checkpoints', `step-00000${step}`, 'trainer_state.json'), 'utf8')) as TrainerState;
        expect([st.stageStep, st.globalStep]).to.deep.equal([step, step]);
        expect((st.summary as { steps: number }[])[0]!.steps, `summary of step ${step}`).to.equal(step);
      }
    });

    it('a checkpoint written beside the next step that fails stops the run at the next step, naming the checkpoint that stands and the resume command', async () => {
      for (const [failAt, stands] of [
        [1, undefined],
        [2, 'step-000002'],
      ] as const) {
        const runDir = join(tmp, `failing-beside-${failAt}`);
        const seen: string[] = [];
        let err: unknown;
        try {
          await new Trainer(sftCfg(8, 2), {
            backend: fakeBackend({
              capture: true,
              onSave: async (call) => {
                await slowSave();
                if (call === failAt) throw new Error('disk full');
              },
            }),
            items,
            reward,
            advantages,
            runDir,
            log: (l) => void seen.push(l),
          }).run();
        } catch (e) {
          err = e;
        }
        const msg = (err as Error)?.message ?? '';
        expect(msg, msg).to.match(/^the checkpoint written beside the next step failed: disk full\n/);
        if (stands)
          expect(msg).to.contain(
            `the last complete checkpoint stands: ${join(runDir, 'checkpoints', stands)}\nresume with: papergym-native train --resume ${runDir}`,
          );
        else expect(msg).to.contain('no checkpoint of this run is complete: run it again');
        // The step lines up to the one in flight when the failure was seen are written; the
        // background checkpoints that completed were committed (a row each) and logged.
        const rows = readFileSync(join(runDir, 'metrics.jsonl'), 'utf8')
          .trim()
          .split('\n')
          .map((l) => JSON.parse(l) as Line & { checkpointWriteSeconds?: number });
        expect(rows.filter((r) => typeof r.checkpointWriteSeconds === 'number').map((r) => r.globalStep)).to.deep.equal(failAt === 1 ? [] : [2]);
        expect(seen.filter((l) => /written beside the next step/.test(l))).to.have.length(failAt - 1);
      }
    });

    it("a checkpoint whose step line cannot be written is not committed (no committed checkpoint lacks its step's line)", async () => {
      const runDir = join(tmp, 'unwritable-metrics');
      let err: unknown;
      try {
        await new Trainer(sftCfg(4, 2), {
          backend: fakeBackend({
            onSave: (call) => {
              // The final checkpoint (after step 4): metrics.jsonl turns into a directory.
              if (call !== 2) return;
              rmSync(join(runDir, 'metrics.jsonl'));
              mkdirSync(join(runDir, 'metrics.jsonl'));
            },
          }),
          items,
          reward,
          advantages,
          runDir,
          log: () => {},
        }).run();
      } catch (e) {
        err = e;
      }
      expect((err as Error)?.message).to.contain('metrics.jsonl');
      expect(resolveCheckpoint(runDir).state.globalStep).to.equal(2);
      expect(existsSync(join(runDir, 'checkpoints', 'step-000004'))).to.equal(false);
    });

    it('the non-finite stop writes the line of the step that stopped it, with its checkpoint', async () => {
      const runDir = join(tmp, 'nan');
      let err: unknown;
      try {
        await new Trainer(sftCfg(6, 0), { backend: fakeBackend({ sftLoss: NaN, onSave: slowSave }), items, reward, advantages, runDir, log: () => {} }).run();
      } catch (e) {
        err = e;
      }
      expect((err as Error)?.message).to.match(/3 consecutive non-finite steps/);
      const steps = readLines(runDir);
      expect(steps.map((l) => [l.globalStep, l.skipped])).to.deep.equal([
        [1, true],
        [2, true],
        [3, true],
      ]);
      for (const l of steps) checkStepLine(l, SFT_PHASES);
      expect(steps.map((l) => l.phaseSeconds!.checkpoint! > 0)).to.deep.equal([false, false, true]);
    });

    it('writeCheckpoint runs beforeCommit with the checkpoint complete but not yet in place; when it throws nothing is committed', async () => {
      const run = mkdtempSync(join(tmp, 'commit-'));
      const state = (step: number): TrainerState => ({
        version: 1,
        stageIndex: 0,
        stageStep: step,
        globalStep: step,
        cursor: { epoch: 0, position: 0 },
        validation: [],
        stageDone: false,
        seed: 1,
        config: {},
        wallSeconds: 0,
      });
      const root = join(run, 'checkpoints');
      let atHook: string[] = [];
      await writeCheckpoint(run, state(1), async () => {}, { beforeCommit: () => void (atHook = readdirSync(root)) });
      expect(atHook.filter((n) => n.startsWith('.tmp-step-000001'))).to.have.length(1);
      expect(atHook).to.not.include('step-000001');
      expect(resolveCheckpoint(run).state.globalStep).to.equal(1);
      let threw = false;
      try {
        await writeCheckpoint(run, state(2), async () => {}, {
          beforeCommit: () => {
            throw new Error('metrics.jsonl: disk full');
          },
        });
      } catch {
        threw = true;
      }
      expect(threw).to.equal(true);
      expect(existsSync(join(root, 'step-000002'))).to.equal(false);
      expect(resolveCheckpoint(run).state.globalStep).to.equal(1);
    });
  });
});
