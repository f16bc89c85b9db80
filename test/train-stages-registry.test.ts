/**
 * Training stages (lib/train/stages/): one descriptor per stage, one registry. A new stage is one
 * descriptor and one `register` line: a fake stage registered here runs in the Trainer (its step,
 * its section's steps, its micro-batch halved by the out-of-memory recovery through its accessors)
 * and in the memory plan (its phases, its micro-batch chosen, its adapter snapshot counted), and
 * nothing else in the trainer, the config or the plan names it.
 */
import { expect } from 'chai';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { resolveConfig, type TrainConfig } from '../lib/config/train.js';
import { TRAIN_SETTINGS } from '../lib/config/settings.js';
import { Trainer, type TrainItem } from '../lib/train/trainer.js';
import { STAGES, stageOf, type TrainingStage } from '../lib/train/stages/index.js';
import { estimatePhases, planMemory, residentBytes, QWEN3_SHAPES, type PlanInputs } from '../lib/train/memory-plan.js';
import { updateBytes } from '../lib/train/memory-model.js';
import { RESUMABLE_KEYS } from '../lib/train/run.js';
import { oomError } from '../lib/errors.js';
import { fakeBackend } from './helpers/fake-backend.js';

type FakeSection = { steps: number; lr: number; microBatch: number };
const sectionOf = (cfg: TrainConfig) => (cfg as unknown as { fake: FakeSection }).fake;

describe('training stages: the registry', () => {
  it("registers one stage per name of the stages setting; their resumable keys are the resume rules'", () => {
    const choices = TRAIN_SETTINGS.find((s) => s.key === 'stages')!.choices!;
    expect([...STAGES.names()].sort()).to.deep.equal([...choices].sort());
    for (const st of STAGES.values()) {
      expect(
        TRAIN_SETTINGS.some((s) => s.key === `${st.name}.steps`),
        `${st.name}.steps`,
      ).to.equal(true);
      for (const k of st.resumableKeys) expect(RESUMABLE_KEYS, k).to.include(k);
    }
    expect(() => stageOf('nope' as never)).to.throw(/stages \(--stages\): unknown training stage "nope" \(registered: opsd, grpo, sft\)/);
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
    name: 'fake' as never,
    phases: ['update'],
    steps: (cfg) => sectionOf(cfg).steps,
    lr: (cfg) => sectionOf(cfg).lr,
    microBatch: { get: (cfg) => sectionOf(cfg).microBatch, set: (cfg, n) => void (sectionOf(cfg).microBatch = n) },
    resumableKeys: ['fake.steps'],
    memory: {
      inputs: () => ({}),
      adapterSnapshots: () => 1,
      microBatch: { setting: 'grpoMicroBatch', configured: () => 16, updateBytes: (x, rows, rc, t) => updateBytes(x, rows, t.Ls, rc, 'ce') },
      phases: (x, st, t) => ({ ['update-fake' as 'update-sft']: t.R + updateBytes(x, st.grpoMicroBatch, t.Ls, st.recompute, 'ce') }),
    },
    async step(ctx) {
      const items = ctx.take(2);
      const loss = await ctx.updateWithOomRecovery('fake' as never, async (microBatch) => {
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

  it('the Trainer runs it: its steps from its section, the out-of-memory recovery halves its micro-batch through its accessors', async () => {
    const tmp = mkdtempSync(join(tmpdir(), 'pg-stage-'));
    try {
      const cfg = resolveConfig({ flags: { stages: ['sft'], checkpoint: { every: 0 }, validation: { every: 0, maxItems: 0 } } as never });
      cfg.stages = ['fake' as never];
      (cfg as unknown as { fake: FakeSection }).fake = { steps: 2, lr: 1e-3, microBatch: 4 };
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
      expect(sectionOf(cfg).microBatch).to.equal(2);
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
      stages: ['fake' as never],
      promptTokens: { student: 200, teacher: 500 },
      maxNewTokens: 1024,
      recompute: false,
      budgetBytes: 30e9,
      opsd: { batchSize: 1, microBatch: 1, teacher: 'fixed' },
      grpo: { questionsPerStep: 1, groupSize: 1, microBatch: 16, betaKl: 0, reference: 'base' },
      sft: { batchSize: 1 },
    };
    const alone = { ...x, stages: [] };
    expect(residentBytes(x) - residentBytes(alone), 'one adapter snapshot: 4 bytes per LoRA parameter').to.be.above(0);
    const p = planMemory(x);
    expect(Object.keys(p.phases)).to.deep.equal(['update-fake', 'optimizer']);
    expect(p.grpoMicroBatch).to.be.below(16);
    expect(p.notes.join('; ')).to.match(/FAKE micro-batch 16 -> \d+/);
    expect(p.phases['update-fake' as 'update-sft']).to.equal(estimatePhases(x, p)['update-fake' as 'update-sft']);
    expect(p.fits).to.equal(true);
  });
});
