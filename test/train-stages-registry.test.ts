/**
 * Training stages (lib/train/stages/): one descriptor per stage, one registry. A new stage is one
 * descriptor and one `register` line: a fake stage registered here runs in the Trainer (its step,
 * its section's steps, its micro-batch halved by the out-of-memory recovery through its accessors)
 * and in the memory plan (its phases, its micro-batch chosen, its adapter snapshot counted), and
 * nothing else in the trainer, the config or the plan names it. Its section's settings are rows of
 * its descriptor: `fake:` in YAML, `--fake-*` flags, a `stages` choice, docs/config.md rows and
 * their validation come with the register line; reading the schema before the registry loaded is
 * a clear error.
 */
import { expect } from 'chai';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { spawnSync } from 'node:child_process';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import yargs, { type Argv } from 'yargs';
import { resolveConfig } from '../lib/config/train.js';
import { formatBatches, resolveBatches } from '../lib/train/dist.js';
import { trainSettings } from '../lib/config/settings.js';
import { renderConfigDocs } from '../lib/config/docs.js';
import { packageRoot } from '../lib/native.js';
import { flagsToConfig, trainCommand } from '../bin/commands/train.js';
import { Trainer, type TrainItem } from '../lib/train/trainer.js';
import { STAGES, stageOf, type TrainingStage } from '../lib/train/stages/index.js';
import { estimatePhases, planMemory, residentBytes, QWEN3_SHAPES, type PlanInputs } from '../lib/train/memory-plan.js';
import { updateBytes } from '../lib/train/memory-model.js';
import { resumableKeys, runTraining } from '../lib/train/run.js';
import { oomError } from '../lib/errors.js';
import type { RewardResult } from '../lib/task/types.js';
import { fakeBackend } from './helpers/fake-backend.js';

// The fake stage's typing: its name and its section, by declaration merging from its file (here, the test).
declare module '../lib/config/train.js' {
  interface StageSections {
    fake: { steps: number; lr: number; microBatch: number };
    judged: { steps: number; lr: number; alpha: number; judgeStepTimeoutMs: number };
  }
}

describe('training stages: the registry', () => {
  it("registers one stage per name of the stages setting; their resumable keys are the resume rules'", () => {
    const choices = trainSettings().find((s) => s.key === 'stages')!.choices!;
    expect(choices, 'registration order').to.deep.equal(STAGES.names());
    for (const st of STAGES.values()) {
      expect(
        trainSettings().some((s) => s.key === `${st.name}.steps`),
        `${st.name}.steps`,
      ).to.equal(true);
      for (const k of st.resumableKeys) expect(resumableKeys(), k).to.include(k);
    }
    expect(() => stageOf('nope' as never)).to.throw(/stages \(--stages\): unknown training stage "nope" \(registered: opsd, grpo, sft\)/);
  });

  it('a schema read before the registries loaded is a clear error naming the module to import', () => {
    const settings = join(packageRoot, 'dist', 'lib', 'config', 'settings.js');
    const r = spawnSync(process.execPath, ['--input-type=module', '-e', `(await import(${JSON.stringify(settings)})).trainSettings()`], { encoding: 'utf8' });
    expect(r.status).to.not.equal(0);
    expect(r.stderr).to.match(/the training settings read before the training stages registered their settings: import lib\/train\/stages\/index\.js first/);
  });

  it("config: each stage is given its own section's step count (a stage with 0 steps among others is skipped, all 0 is refused)", () => {
    expect(() => resolveConfig({ flags: { stages: ['sft', 'opsd'], sft: { steps: 0 }, opsd: { steps: 0 } } as never })).to.throw(
      /every stage has 0 steps \(sft\.steps, opsd\.steps\)/,
    );
    // Another stage's count never stands in for a stage's own.
    expect(() => resolveConfig({ flags: { stages: ['sft'], sft: { steps: 0 }, grpo: { steps: 5 } } as never })).to.throw(/every stage has 0 steps/);
    expect(resolveConfig({ flags: { stages: ['sft', 'grpo'], sft: { steps: 0 }, grpo: { steps: 5 } } as never }).stages).to.deep.equal(['sft', 'grpo']);
  });
});

describe('training stages: a new stage is one descriptor and one register line', () => {
  const calls: number[] = [];
  let oomOnce = true;
  const fake: TrainingStage = {
    name: 'fake',
    phases: ['update'],
    // Its section's rows (keys relative to `fake.`) and the rule that ties them: the one place they are written.
    settings: [
      {
        key: 'steps',
        flag: 'fake-steps',
        type: 'integer',
        min: 0,
        default: 2,
        meaning: 'Fake stage steps (test)',
        source: 'test/train-stages-registry.test.ts',
      },
      { key: 'lr', flag: 'fake-lr', type: 'number', min: 0, exclusiveMin: true, default: 1e-3, meaning: 'Fake stage learning rate', source: 'test' },
      {
        key: 'microBatch',
        flag: 'fake-micro-batch',
        type: 'integer',
        min: 1,
        default: 4,
        meaning: 'Fake stage update micro-batch',
        source: 'test/train-stages-registry.test.ts',
      },
    ],
    settingsProblems: (c) =>
      Number.isInteger(Math.log2(c.fake.microBatch)) ? [] : [`fake.microBatch (--fake-micro-batch) must be a power of two (got ${c.fake.microBatch})`],
    steps: (cfg) => cfg.fake.steps,
    lr: (cfg) => cfg.fake.lr,
    microBatch: { get: (cfg) => cfg.fake.microBatch, set: (cfg, n) => void (cfg.fake.microBatch = n) },
    resumableKeys: ['fake.steps'],
    memory: {
      inputs: () => ({}),
      adapterSnapshots: () => 1,
      microBatch: { configured: () => 16, updateBytes: (x, rows, rc, t) => updateBytes(x, rows, t.Ls, rc, 'ce') },
      phases: (x, st, t) => ({ 'update-fake': t.R + updateBytes(x, st.microBatch.fake!, t.Ls, st.recompute, 'ce') }),
    },
    async step(ctx) {
      const items = ctx.take(2);
      const loss = await ctx.updateWithOomRecovery('fake', async (microBatch) => {
        calls.push(microBatch);
        if (oomOnce) {
          oomOnce = false;
          throw oomError('fake: CUDA out of memory (injected)');
        }
        return items.length * 0.25;
      });
      return { loss, completionTokens: 4 };
    },
  };
  before(() => STAGES.register(fake));
  after(() => STAGES.unregister('fake'));
  /** `train`'s real yargs builder over `args`; a check failure throws its message. */
  const parseTrain = (args: string[]) =>
    (trainCommand.builder as (y: Argv) => Argv)(yargs().exitProcess(false))
      .fail((msg, err) => {
        throw err ?? new Error(msg);
      })
      .parseSync(args) as Record<string, unknown>;

  it('data parallelism: a stage without a batch to scale is left out of the batch resolution and the batches line (no crash on more than one process)', () => {
    const cfg = resolveConfig({ flags: { stages: ['fake', 'grpo'] } as never });
    const rec = resolveBatches(cfg, 2);
    expect(Object.keys(rec.stages)).to.not.include('fake');
    expect(rec.stages.grpo?.global).to.equal(cfg.grpo.questionsPerStep);
    expect(formatBatches(rec, cfg.stages)).to.equal(
      `batches on 2 process(es): grpo ${cfg.grpo.questionsPerStep} questions per step split over the processes (global)`,
    );
  });

  it('its settings: a stages choice, its section from YAML and --fake-* flags, docs/config.md rows, refused when mistyped', () => {
    const tmp = mkdtempSync(join(tmpdir(), 'pg-stage-cfg-'));
    try {
      expect(trainSettings().find((s) => s.key === 'stages')!.choices).to.deep.equal(['opsd', 'grpo', 'sft', 'fake']);
      const file = join(tmp, 'fake.yaml');
      writeFileSync(file, 'stages: [fake]\nfake:\n  steps: 3\n  microBatch: 8\n');
      expect(resolveConfig({ file }).fake).to.deep.equal({ steps: 3, lr: 1e-3, microBatch: 8 });
      expect(resolveConfig({}).fake, 'its defaults').to.deep.equal({ steps: 2, lr: 1e-3, microBatch: 4 });
      const flags = flagsToConfig(parseTrain(['--stages', 'sft,fake', '--fake-steps', '5', '--fake-lr', '2e-4']));
      const c = resolveConfig({ file, flags });
      expect([c.stages, c.fake]).to.deep.equal([['sft', 'fake'], { steps: 5, lr: 2e-4, microBatch: 8 }]);
      const docs = renderConfigDocs();
      expect(docs).to.contain('| `--fake-micro-batch` | `fake.microBatch` | integer | `4` | integer [1, ∞) | Fake stage update micro-batch |');
      expect(docs).to.contain('comma list of opsd \\| grpo \\| sft \\| fake');
      // Mistyped: a value out of range (flag, YAML), a misspelled key, the stage's own rule, an unknown stage.
      expect(() => parseTrain(['--fake-steps', '-1'])).to.throw(/fake\.steps \(--fake-steps\) must be in integer \[0, ∞\) \(got -1\)/);
      writeFileSync(file, 'fake:\n  stpes: 3\n');
      expect(() => resolveConfig({ file })).to.throw(/unknown key fake\.stpes/);
      writeFileSync(file, 'fake:\n  lr: fast\n');
      expect(() => resolveConfig({ file })).to.throw(/fake\.lr \(--fake-lr\) must be a number \(got "fast"\)/);
      expect(() => resolveConfig({ flags: flagsToConfig(parseTrain(['--fake-micro-batch', '3'])) })).to.throw(
        /fake\.microBatch \(--fake-micro-batch\) must be a power of two \(got 3\)/,
      );
      expect(() => parseTrain(['--stages', 'fkae'])).to.throw(/stages \(--stages\): unknown item "fkae" \(opsd \| grpo \| sft \| fake\)/);
    } finally {
      rmSync(tmp, { recursive: true, force: true });
    }
  });

  it('the Trainer runs it: its steps from its section, the out-of-memory recovery halves its micro-batch through its accessors', async () => {
    const tmp = mkdtempSync(join(tmpdir(), 'pg-stage-'));
    try {
      const cfg = resolveConfig({ flags: { stages: ['fake'], checkpoint: { every: 0 }, validation: { validateEvery: 0, items: 0 } } });
      const items: TrainItem[] = Array.from({ length: 4 }, (_, i) => ({
        id: `q${i}`,
        question: `question ${i}`,
        reference_answer: 'a',
        rubric: [{ id: 'r1', text: 'x', dimension: 'method_innovation' }],
        split: 'train',
      }));
      const logged: string[] = [];
      const s = await new Trainer(cfg, {
        backend: fakeBackend(),
        items,
        reward: async (r) => r.map(() => ({ reward: 0, rSpec: 0, rGen: 0 })),
        advantages: (r) => ({ advantages: r, keep: r.map(() => true) }),
        runDir: tmp,
        log: (l) => void logged.push(l),
      }).run();
      expect(s.stages.map((r) => [r.stage, r.steps, r.lastLoss])).to.deep.equal([['fake', 2, 0.5]]);
      expect(calls, 'micro-batch 4, out of memory, 2 for the rest of the run').to.deep.equal([4, 2, 2]);
      expect(cfg.fake.microBatch).to.equal(2);
      expect(
        logged.some((l) => /\[fake\] step 0: out of memory in the update \(micro-batch 4.*retrying the step with micro-batch 2/.test(l)),
        logged.join('\n'),
      ).to.equal(true);
      const lines = readFileSync(join(tmp, 'metrics.jsonl'), 'utf8')
        .trim()
        .split('\n')
        .map((l) => JSON.parse(l) as { stage: string; phaseSeconds: Record<string, number> });
      expect(lines.map((l) => l.stage)).to.deep.equal(['fake', 'fake']);
      expect(Object.keys(lines[0]!.phaseSeconds)).to.deep.equal(['update', 'optimizer', 'checkpoint', 'host']);
    } finally {
      rmSync(tmp, { recursive: true, force: true });
    }
  });

  it('the memory plan covers it: its phase, its adapter snapshot in the resident bytes, its micro-batch halved to fit', () => {
    const x: PlanInputs = {
      shape: QWEN3_SHAPES['qwen3-1.7b'],
      dtypeBytes: 2,
      lora: { r: 64, targetModules: ['q_proj', 'v_proj'], dropout: 0 },
      stages: ['fake'],
      promptTokens: { student: 200, teacher: 500 },
      maxNewTokens: 1024,
      recompute: false,
      budgetBytes: 30e9,
      opsd: { batchSize: 1, microBatch: 1, teacher: 'fixed' },
      grpo: { questionsPerStep: 1, groupSize: 1, microBatch: 16, klCoef: 0, reference: 'base' },
      sft: { batchSize: 1 },
    };
    const alone = { ...x, stages: [] };
    expect(residentBytes(x) - residentBytes(alone), 'one adapter snapshot: 4 bytes per LoRA parameter').to.be.above(0);
    const p = planMemory(x);
    expect(Object.keys(p.phases)).to.deep.equal(['update-fake', 'optimizer']);
    expect(p.microBatch.fake).to.be.below(16);
    expect(p.microBatch.grpo, "GRPO's micro-batch is its own (not the fake stage's)").to.equal(16);
    expect(p.notes.join('; ')).to.match(/FAKE micro-batch 16 -> \d+/);
    expect(p.phases['update-fake']).to.equal(estimatePhases(x, p)['update-fake']);
    expect(p.fits).to.equal(true);
  });
});

describe('training stages: a second stage that judges owns its reward α and its judge deadline', () => {
  const results: RewardResult[] = [];
  const judged: TrainingStage = {
    name: 'judged',
    phases: ['judge', 'update'],
    settings: [
      { key: 'steps', flag: 'judged-steps', type: 'integer', min: 0, default: 0, meaning: 'Judged stage steps', source: 'test' },
      { key: 'lr', flag: 'judged-lr', type: 'number', min: 0, exclusiveMin: true, default: 1e-3, meaning: 'Judged stage learning rate', source: 'test' },
      { key: 'alpha', flag: 'judged-alpha', type: 'number', min: 0, max: 1, default: 0.25, meaning: 'Judged stage α of r_spec', source: 'test' },
      {
        key: 'judgeStepTimeoutMs',
        flag: 'judged-judge-step-timeout-ms',
        type: 'integer',
        min: 0,
        default: 0,
        meaning: 'Judged stage judge deadline per step, ms',
        source: 'test',
      },
    ],
    steps: (cfg) => cfg.judged.steps,
    lr: (cfg) => cfg.judged.lr,
    judging: {
      alpha: (cfg) => cfg.judged.alpha,
      stepTimeoutMs: (cfg) => cfg.judged.judgeStepTimeoutMs,
      stepTimeoutSetting: 'judged.judgeStepTimeoutMs (--judged-judge-step-timeout-ms)',
    },
    resumableKeys: ['judged.steps'],
    memory: { inputs: () => ({}), phases: () => ({}) },
    async step(ctx) {
      const items = ctx.take(2);
      const r = await ctx.timed('judge', () => ctx.reward(items.map((item) => ({ item, plan: `First, ${item.question} Then measure it.` }))));
      results.push(...r);
      return { loss: 0, completionTokens: 0 };
    },
  };
  before(() => STAGES.register(judged));
  after(() => STAGES.unregister('judged'));

  it("the Trainer stops a step past the stage's own deadline, naming its setting (not GRPO's)", async () => {
    const tmp = mkdtempSync(join(tmpdir(), 'pg-judged-'));
    try {
      const cfg = resolveConfig({
        flags: {
          stages: ['judged'],
          judged: { steps: 1, judgeStepTimeoutMs: 50 },
          grpo: { judgeStepTimeoutMs: 0 },
          checkpoint: { every: 0 },
          validation: { validateEvery: 0, items: 0 },
        } as never,
      });
      const items: TrainItem[] = Array.from({ length: 2 }, (_, i) => ({
        id: `q${i}`,
        question: `question ${i}`,
        reference_answer: 'a',
        rubric: [{ id: 'r1', text: 'x', dimension: 'method_innovation' }],
        split: 'train',
      }));
      // A judge that never answers until its call is aborted.
      const hang = (_r: unknown, signal?: AbortSignal) => new Promise<never>((_res, rej) => signal?.addEventListener('abort', () => rej(signal.reason)));
      let err: Error | undefined;
      await new Trainer(cfg, {
        backend: fakeBackend(),
        items,
        reward: hang,
        advantages: (r) => ({ advantages: r, keep: r.map(() => true) }),
        runDir: tmp,
        log: () => undefined,
      })
        .run()
        .catch((e: Error) => (err = e));
      expect(err?.message).to.match(/the judge did not finish the step within judged\.judgeStepTimeoutMs \(--judged-judge-step-timeout-ms\) 50 ms/);
    } finally {
      rmSync(tmp, { recursive: true, force: true });
    }
  });

  it("a run mixes the stage's reward with its own α (judged.alpha 0.25), not grpo.rewardAlpha", async function () {
    this.timeout(120_000);
    const tmp = mkdtempSync(join(tmpdir(), 'pg-judged-run-'));
    results.length = 0;
    try {
      await runTraining({
        flags: {
          out: join(tmp, 'run'),
          seed: 5,
          stages: ['judged'],
          judged: { steps: 2 },
          grpo: { rewardAlpha: 0.7 },
          checkpoint: { every: 0 },
          validation: { validateEvery: 0 },
        } as never,
        log: () => undefined,
        handleSignals: false,
      });
      expect(results.length).to.equal(4);
      // r = α·r_spec + (1 − α)·r_gen (paper §3) with α = 0.25, computed here from the parts the judge gave.
      for (const r of results) if (!r.masked) expect(r.reward).to.be.closeTo(0.25 * r.rSpec! + 0.75 * r.rGen!, 1e-12);
      expect(
        results.some((r) => !r.masked && Math.abs(r.rSpec! - r.rGen!) > 1e-9),
        'some plan whose parts differ (else α would not show)',
      ).to.equal(true);
    } finally {
      rmSync(tmp, { recursive: true, force: true });
    }
  });
});
