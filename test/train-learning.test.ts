/**
 * Learning direction, small and honest (issue: assert direction with margins, never exact values):
 * - GRPO on a checkable toy reward (a completion earns 1 when it starts with its question's
 *   target token, the first token the initial policy sampled for it) raises the mean reward;
 * - OPSD lowers the generalised JSD between student and teacher on the training prompts.
 * Sampling runs at a low temperature so the random tiny model has preferences to sharpen.
 */
import { expect } from 'chai';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { runTraining, ensureDefaultModel } from '../lib/train/run.js';
import { Policy } from '../lib/model/policy.js';
import { NativeBackend } from '../lib/train/native-backend.js';
import { resolveConfig } from '../lib/config/train.js';
import { sampleDatasetPath } from '../lib/data/schema.js';
import { studentMessages, teacherMessages } from '../lib/task/prompts.js';
import type { RewardFn } from '../lib/train/trainer.js';

const mean = (xs: number[]) => xs.reduce((a, b) => a + b, 0) / xs.length;

describe('train: learning direction', function () {
  this.timeout(600000);
  let tmp: string;
  before(() => {
    ensureDefaultModel();
    tmp = mkdtempSync(join(tmpdir(), 'pg-learn-'));
  });
  after(() => rmSync(tmp, { recursive: true, force: true }));

  it('GRPO raises the mean toy reward at a fixed seed', async () => {
    const target = new Map<string, number>();
    const perStep: number[] = [];
    const reward: RewardFn = async (reqs) => {
      const out = reqs.map(({ item, tokenIds }) => {
        if (!target.has(item.id)) target.set(item.id, tokenIds![0]!);
        const r = tokenIds![0] === target.get(item.id) ? 1 : 0;
        return { reward: r, rSpec: r, rGen: 0 };
      });
      perStep.push(mean(out.map((o) => o.reward)));
      return out;
    };
    await runTraining({
      flags: {
        stages: ['grpo'],
        out: join(tmp, 'grpo'),
        seed: 11,
        sampling: { temperature: 0.05, topK: 0, topP: 1, maxNewTokens: 3, thinking: false, mergeAdapter: 'auto' as const },
        grpo: { ...resolveConfig({}).grpo, steps: 10, lr: 5e-4, questionsPerStep: 2, groupSize: 8, microBatch: 16, klCoef: 0 },
        validation: { validateEvery: 0, items: 0 },
        checkpoint: { every: 0 },
      },
      reward,
      log: () => {},
      handleSignals: false,
    });
    expect(perStep).to.have.length(10);
    const early = mean(perStep.slice(0, 2));
    const late = mean(perStep.slice(-4));
    expect(late, `per-step reward ${perStep.map((x) => x.toFixed(2)).join(' ')}`).to.be.greaterThan(early + 0.15);
  });

  it('OPSD lowers the JSD to its teacher on the training prompts', async () => {
    const items = readFileSync(sampleDatasetPath(), 'utf8')
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l))
      .filter((i) => i.split === 'train')
      .slice(0, 2);
    const flags = {
      stages: ['opsd'] as ['opsd'],
      out: join(tmp, 'opsd'),
      seed: 5,
      sampling: { temperature: 1, topK: 0, topP: 1, maxNewTokens: 8, thinking: false, mergeAdapter: 'auto' as const },
      opsd: { ...resolveConfig({}).opsd, steps: 12, lr: 3e-3, batchSize: 2, microBatch: 2 },
      validation: { validateEvery: 0, items: 0 },
      checkpoint: { every: 0 },
    };
    // JSD of fixed completions under an adapter (loss only: grads are discarded).
    const measure = async (adapterDir?: string): Promise<number> => {
      const policy = await Policy.load(ensureDefaultModel(), adapterDir ? { adapter: adapterDir } : {});
      try {
        if (!adapterDir) policy.model.addLora({ r: 8, alpha: 16, seed: 5 });
        const b = new NativeBackend(policy, resolveConfig({ flags }));
        const sp = await Promise.all(items.map((it) => b.promptIds(studentMessages(it.question))));
        const tp = await Promise.all(items.map((it) => b.promptIds(teacherMessages(it.question, it.rubric))));
        const ro = await b.generate(sp, { n: 4, temperature: 1, topK: 0, topP: 1, maxNewTokens: 8, seed: 99 });
        const batch = ro.map((r) => ({
          student: { promptIds: sp[r.promptIndex]!, completionIds: r.tokenIds },
          teacher: { promptIds: tp[r.promptIndex]!, completionIds: r.tokenIds },
        }));
        const normalizer = batch.reduce((a, x) => a + x.student.completionIds.length, 0);
        const { loss } = await b.opsdBackward(batch, { jsdBeta: 0.5, temperature: 1, normalizer, teacher: 'none' });
        b.zeroGrad();
        return loss;
      } finally {
        policy.dispose();
      }
    };
    const before = await measure();
    await runTraining({ flags, log: () => {}, handleSignals: false, reward: async () => [] });
    const after = await measure(join(tmp, 'opsd', 'final'));
    expect(before).to.be.greaterThan(0);
    expect(after, `JSD before ${before}, after ${after}`).to.be.lessThan(before * 0.9);
  });
});
