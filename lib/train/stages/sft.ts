/**
 * SFT (the paper's baseline): next-token cross-entropy of the reference answers after the student
 * prompt, one token mean over the whole global batch (the normaliser spans every rank's answers).
 */
import type { Sequence } from '../backend.js';
import { shard } from '../dist.js';
import { studentMessages } from '../../task/prompts.js';
import { updateBytes } from '../memory-model.js';
import { finiteOrNull, sumFinite, type StageContext, type StepResult, type TrainingStage } from './stage.js';

// Its section of the memory plan's inputs (lib/train/memory-model.ts PlanStageInputs).
declare module '../memory-model.js' {
  interface PlanStageInputs {
    sft: { batchSize: number };
  }
}

export const sftStage: TrainingStage = {
  name: 'sft',
  batch: { global: 'sft.batchSize', perRank: 'sft.batchSizePerRank', unit: 'answers' },
  phases: ['update'],
  steps: (cfg) => cfg.sft.steps,
  lr: (cfg) => cfg.sft.lr,
  resumableKeys: ['sft.steps'],
  trainsOnReferenceAnswers: true,
  // Each row: the student prompt, then the reference answer it is trained on.
  stepTokens: (cfg, longest) => ({
    rows: cfg.sft.batchSize,
    rowsText: `--sft-batch-size ${cfg.sft.batchSize}`,
    length: longest.student + longest.answer,
    lengthText: `(longest student prompt ${longest.student} + longest reference answer ${longest.answer})`,
  }),
  memory: {
    inputs: (cfg) => ({ sft: { batchSize: cfg.sft.batchSize } }),
    // One native call over the step's answers (chunked over tokens): no micro-batch to choose.
    phases: (x, st, t) => ({ 'update-sft': t.R + updateBytes(x, x.sft.batchSize, t.Ls, st.recompute, 'ce') }),
  },
  async step(ctx: StageContext): Promise<StepResult> {
    const { backend } = ctx;
    const items = ctx.take(ctx.cfg.sft.batchSize);
    // This rank's questions; the normaliser (all answer tokens of the global batch) is computed
    // locally from the same global batch on every rank.
    const [a, b] = shard(items.length, ctx.dist.rank, ctx.dist.worldSize);
    const answers = await Promise.all(items.map((it) => backend.answerIds(it.reference_answer)));
    const normalizer = answers.reduce((n, x) => n + x.length, 0);
    const seqs: Sequence[] = await Promise.all(
      items.slice(a, b).map(async (it, j) => ({
        promptIds: await backend.promptIds(studentMessages(it.question)),
        completionIds: answers[a + j]!,
      })),
    );
    const local = seqs.reduce((n, s) => n + s.completionIds.length, 0);
    // One call over the rank's window: the native cross-entropy averages over the tokens it is
    // given; × local / global tokens makes it this rank's share of the global token mean (the
    // gradient is scaled the same way before the all-reduce).
    const share = normalizer > 0 ? local / normalizer : 0;
    // The global loss travels with the ranks' failure flags (one all-gather per step, not two).
    const { value: localLoss, all } = await ctx.allRanksGather(
      'SFT update',
      async () => (seqs.length ? (await ctx.timed('update', () => backend.sftBackward(seqs))).loss : 0),
      (l) => finiteOrNull(l * share),
    );
    const loss = ctx.dist.worldSize === 1 ? localLoss : sumFinite(all);
    return { loss, completionTokens: normalizer, gradScale: share };
  },
};
