/**
 * GRPO: G completions per question, rubric rewards r = α·r_spec + (1 − α)·r_gen (the task's
 * RewardFn), group advantages (lib/train/advantages.ts), clipped ratio loss + β_KL·k3 to the
 * reference (the stage-start snapshot or the base model; native/loss/grpo.*).
 */
import { bucket, judgeWorkBytes, updateBytes } from '../memory-model.js';
import type { StageContext, StepResult, TrainingStage } from './stage.js';
import { DEFAULTS } from '../../config/train.js';
import { sampleAndJudge } from './grpo-rollouts.js';
import { earlyReferenceLogprobs, grpoUpdate, rankRollouts, rankUpdate, referenceLogprobsOf, stepAdvantages, stepMetrics, updateBatch } from './grpo-step.js';

// Its section of the memory plan's inputs (lib/train/memory-model.ts PlanStageInputs).
declare module '../memory-model.js' {
  interface PlanStageInputs {
    grpo: { questionsPerStep: number; groupSize: number; microBatch: number; klCoef: number; reference: 'stage-start' | 'base' };
  }
}

export const grpoStage: TrainingStage = {
  name: 'grpo',
  batch: { global: 'grpo.questionsPerStep', perRank: 'grpo.questionsPerRank', unit: 'questions' },
  phases: ['rollout', 'judge', 'reference', 'update'],
  steps: (cfg) => cfg.grpo.steps,
  lr: (cfg) => cfg.grpo.lr,
  microBatch: { get: (cfg) => cfg.grpo.microBatch, set: (cfg, n) => void (cfg.grpo.microBatch = n) },
  judging: {
    alpha: (cfg) => cfg.grpo.rewardAlpha,
    stepTimeoutMs: (cfg) => cfg.grpo.judgeStepTimeoutMs ?? 0,
    stepTimeoutSetting: 'grpo.judgeStepTimeoutMs (--judge-step-timeout-ms)',
  },
  // grpo.judgeStepTimeoutMs: how long a step may wait on the judge, a run-time bound.
  resumableKeys: ['grpo.steps', 'grpo.microBatch', 'grpo.judgeOverlap', 'grpo.judgeStepTimeoutMs', 'grpo.agreementWarnKl'],
  // Each row: a student prompt and its sampled completion, a group of them per question.
  stepTokens: (cfg, longest) => ({
    rows: cfg.grpo.questionsPerStep * cfg.grpo.groupSize,
    rowsText: `--questions-per-step ${cfg.grpo.questionsPerStep} × --group-size ${cfg.grpo.groupSize}`,
    length: longest.student + cfg.sampling.maxNewTokens,
    lengthText: `(longest student prompt ${longest.student} + --max-new-tokens ${cfg.sampling.maxNewTokens})`,
  }),
  // A checkpoint from before grpo.judgeOverlap judged after the rollout: 'off'; one from before
  // grpo.judgeStepTimeoutMs gets the default deadline.
  upgradeSaved: (saved) =>
    void (saved.grpo = {
      ...saved.grpo,
      judgeOverlap: saved.grpo.judgeOverlap ?? 'off',
      judgeStepTimeoutMs: saved.grpo.judgeStepTimeoutMs ?? DEFAULTS.grpo.judgeStepTimeoutMs,
      rolloutCorrection: saved.grpo.rolloutCorrection ?? 'none',
      importanceSamplingCap: saved.grpo.importanceSamplingCap ?? 3,
      agreementWarnKl: saved.grpo.agreementWarnKl ?? 0.001,
    }),
  memory: {
    inputs: (cfg) => ({
      grpo: {
        questionsPerStep: cfg.grpo.questionsPerStep,
        groupSize: cfg.grpo.groupSize,
        microBatch: cfg.grpo.microBatch,
        klCoef: cfg.grpo.klCoef,
        reference: cfg.grpo.reference,
      },
    }),
    adapterSnapshots: (x) => (x.grpo.reference === 'stage-start' ? 1 : 0),
    microBatch: { configured: (x) => x.grpo.microBatch, updateBytes: (x, rows, rc, t) => updateBytes(x, rows, t.Ls, rc, 'grpo') },
    rollout: {
      maxRows: (x) => x.grpo.questionsPerStep * x.grpo.groupSize,
      unit: (x) => x.grpo.groupSize,
      // The same rows batch the reference logprobs (a no-grad forward).
      fits: (x, rows, t, limit) => x.grpo.klCoef <= 0 || t.R + rows * t.Ls * t.fwd <= limit,
    },
    judgedRollout: 'rollout-grpo',
    judgeOverlap: { get: (cfg) => cfg.grpo.judgeOverlap, set: (cfg, v) => void (cfg.grpo.judgeOverlap = v) },
    advice: {
      smallest: (x) => ({ grpo: { ...x.grpo, microBatch: 1 } }),
      shrink: (x) => (x.grpo.questionsPerStep > 1 ? { grpo: { ...x.grpo, questionsPerStep: Math.floor(x.grpo.questionsPerStep / 2) } } : undefined),
      flags: (x) => ['--grpo-micro-batch 1', `--questions-per-step ${x.grpo.questionsPerStep}`],
    },
    phases(x, st, t) {
      const out: ReturnType<TrainingStage['memory']['phases']> = {};
      const G = x.grpo.groupSize,
        Q = x.grpo.questionsPerStep;
      const rows = Math.min(Q * G, Math.max(G, st.rolloutRows - (st.rolloutRows % G)));
      out['rollout-grpo'] = t.R + bucket(rows) * t.Ls * t.kv + t.sampler(bucket(rows)) + t.merged;
      if (x.localJudge !== false) {
        const judgeWork = judgeWorkBytes(x, st.judgeTokensPerCall);
        out.judge = t.R + judgeWork;
        if (st.judgeOverlap) out['rollout-grpo'] += judgeWork;
      }
      if (x.grpo.klCoef > 0) out.reference = t.R + rows * t.Ls * t.fwd;
      out['update-grpo'] = t.R + updateBytes(x, st.microBatch.grpo!, t.Ls, st.recompute, 'grpo');
      return out;
    },
  },
  begin(ctx) {
    if (ctx.cfg.grpo.reference === 'stage-start') ctx.backend.snapshotAdapter('stage-start');
  },
  async step(ctx: StageContext): Promise<StepResult> {
    // sample → reward → advantages → reference → update (lib/train/stages/grpo-rollouts.ts, grpo-step.ts).
    const items = ctx.take(ctx.cfg.grpo.questionsPerStep);
    const reference = referenceLogprobsOf(ctx);
    // A failing judge or generate on one rank stops every rank here (allRanks), not in a later collective.
    // The ranks' rewards and lengths travel with the failure flags (one all-gather).
    const {
      value: { sampled, earlyRef },
      all,
    } = await ctx.allRanksGather(
      'GRPO rollouts and rewards',
      async () => {
        const sampled = await sampleAndJudge(ctx, items);
        return { sampled, earlyRef: await earlyReferenceLogprobs(ctx, sampled, reference) };
      },
      ({ sampled }) => rankRollouts(sampled),
    );
    const adv = stepAdvantages(ctx, all, sampled);
    // The reference logprobs and the update are rank-local with no collective between them: one
    // failure check covers both, and the ranks' loss, KL and clip sums travel with it.
    const { all: parts } = await ctx.allRanksGather(
      'GRPO reference logprobs and update',
      async () => grpoUpdate(ctx, await updateBatch(ctx, adv, earlyRef, reference), adv),
      rankUpdate,
    );
    return stepMetrics(ctx, all, adv, parts);
  },
};
