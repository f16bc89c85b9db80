/**
 * OPSD, on-policy self-distillation: the student samples a plan for the question, the teacher
 * (same model; question + instance rubric in its prompt; adapter off = `fixed`, the detached
 * current adapter = `current`, or an EMA snapshot = `ema`) scores the same tokens; loss =
 * token-mean generalised JSD (β) over completion tokens (native/loss/jsd.*).
 */
import type { Sequence } from '../backend.js';
import { shard } from '../dist.js';
import { studentMessages, teacherMessages } from '../../task/prompts.js';
import { bucket, updateBytes, type PlanInputs } from '../memory-model.js';
import { quantile } from '../../eval/report.js';
import { ErrorCode, isPapergymError } from '../../errors.js';
import { addTokens, emptyDivergence, summarizeDivergence } from '../token-divergence.js';
import { chunks, finiteOrNull, longestFirst, sumFinite, type MemoryTerms, type StageContext, type StepResult, type TrainingStage } from './stage.js';

/** Update bytes above resident: the student's loss + backward (JSD head) plus the teacher's completion hidden states. */
const opsdUpdateBytes = (x: PlanInputs, rows: number, rc: boolean, t: MemoryTerms) =>
  updateBytes(x, rows, t.Ls, rc, 'jsd') + rows * x.maxNewTokens * x.shape.hiddenSize * x.dtypeBytes;

// Its section of the memory plan's inputs (lib/train/memory-model.ts PlanStageInputs).
declare module '../memory-model.js' {
  interface PlanStageInputs {
    opsd: { batchSize: number; microBatch: number; teacher: 'fixed' | 'current' | 'ema' };
  }
}

export const opsdStage: TrainingStage = {
  name: 'opsd',
  batch: { global: 'opsd.batchSize', perRank: 'opsd.batchSizePerRank', unit: 'questions' },
  phases: ['rollout', 'update'],
  steps: (cfg) => cfg.opsd.steps,
  lr: (cfg) => cfg.opsd.lr,
  earlyStopPatience: (cfg) => cfg.opsd.earlyStopPatience,
  microBatch: { get: (cfg) => cfg.opsd.microBatch, set: (cfg, n) => void (cfg.opsd.microBatch = n) },
  resumableKeys: ['opsd.steps', 'opsd.microBatch', 'opsd.diagnosticRows'],
  // Each row: the student's completion, scored by the teacher after its longer prompt.
  stepTokens: (cfg, longest) => ({
    rows: cfg.opsd.batchSize,
    rowsText: `--opsd-batch-size ${cfg.opsd.batchSize}`,
    length: longest.teacher + cfg.sampling.maxNewTokens,
    lengthText: `(longest teacher prompt ${longest.teacher} + --max-new-tokens ${cfg.sampling.maxNewTokens})`,
  }),
  settingsProblems(c) {
    // A per-rank batch that is a multiple makes every global one (per rank × world size) one.
    if (c.opsd.batchSizePerRank != null)
      return c.opsd.batchSizePerRank % c.opsd.microBatch !== 0
        ? ['opsd.batchSizePerRank (--opsd-batch-size-per-rank) must be a multiple of opsd.microBatch (--opsd-micro-batch)']
        : [];
    return c.opsd.batchSize % c.opsd.microBatch !== 0 ? ['opsd.batchSize (--opsd-batch-size) must be a multiple of opsd.microBatch (--opsd-micro-batch)'] : [];
  },
  memory: {
    inputs: (cfg) => ({ opsd: { batchSize: cfg.opsd.batchSize, microBatch: cfg.opsd.microBatch, teacher: cfg.opsd.teacher } }),
    adapterSnapshots: (x) => (x.opsd.teacher === 'ema' ? 1 : 0),
    microBatch: { configured: (x) => x.opsd.microBatch, updateBytes: opsdUpdateBytes },
    rollout: { maxRows: (x) => x.opsd.batchSize, unit: () => 1 },
    advice: {
      smallest: (x) => ({ opsd: { ...x.opsd, microBatch: 1 } }),
      shrink: (x) => (x.opsd.batchSize > 1 ? { opsd: { ...x.opsd, batchSize: Math.floor(x.opsd.batchSize / 2) } } : undefined),
      flags: (x) => ['--opsd-micro-batch 1', `--opsd-batch-size ${x.opsd.batchSize}`],
    },
    phases(x, st, t) {
      const rows = Math.min(st.rolloutRows, x.opsd.batchSize);
      return {
        'rollout-opsd': t.R + bucket(rows) * t.Ls * t.kv + t.sampler(bucket(rows)) + t.merged,
        'update-opsd': t.R + opsdUpdateBytes(x, st.microBatch.opsd!, st.recompute, t),
      };
    },
  },
  begin(ctx) {
    if (ctx.cfg.opsd.teacher === 'ema') ctx.backend.snapshotAdapter('ema-teacher');
  },
  afterStep(ctx, skipped) {
    if (ctx.cfg.opsd.teacher === 'ema' && !skipped) ctx.backend.emaUpdate('ema-teacher', ctx.cfg.opsd.emaDecay);
  },
  async step(ctx: StageContext): Promise<StepResult> {
    const { backend } = ctx;
    const c = ctx.cfg.opsd;
    const items = ctx.take(c.batchSize);
    // Sampling chunks of rollout-rows questions (memory.rolloutRows from the memory plan; 0 = the
    // micro-batch), each with its own seed, so a chunk's completions do not depend on which rank
    // samples it: the chunk size comes from the config, never from the rank count. This rank
    // takes a contiguous share of the chunks.
    // With a per-rank batch (--opsd-batch-size-per-rank) no chunk is larger than one rank's share,
    // so every rank samples (a chunk larger than the share would leave a rank idle).
    const rows = Math.max(1, Math.min(ctx.cfg.memory?.rolloutRows || c.microBatch, c.batchSizePerRank ?? Infinity));
    const chunkIdx = chunks(
      items.map((_, i) => i),
      rows,
    );
    const [a, b] = shard(chunkIdx.length, ctx.dist.rank, ctx.dist.worldSize);
    const batch: { student: Sequence; teacher: Sequence }[] = [];
    let stops = 0;
    let rolloutCount = 0;
    // Every rollout's length (empty ones included) and how many hit max-new-tokens: the length-inflation diagnostics.
    const lengths: number[] = [];
    let truncated = 0;
    // The ranks' token / sequence counts (the loss normaliser) travel with the failure flags.
    const { all } = await ctx.allRanksGather(
      'OPSD rollouts',
      async () => {
        for (let k = a; k < b; k++) {
          const its = chunkIdx[k]!.map((i) => items[i]!);
          const studentPrompts = await Promise.all(its.map((it) => backend.promptIds(studentMessages(it.question))));
          const teacherPrompts = await Promise.all(its.map((it) => backend.promptIds(teacherMessages(it.question, it.rubric))));
          const rollouts = await ctx.timed('rollout', () => backend.generate(studentPrompts, ctx.sampling(1, 2, k)));
          for (const r of rollouts) {
            rolloutCount += 1;
            lengths.push(r.tokenIds.length);
            if (r.finishReason === 'length') truncated += 1;
            if (r.finishReason === 'stop') stops += 1;
            if (!r.tokenIds.length) continue;
            batch.push({
              student: { promptIds: studentPrompts[r.promptIndex]!, completionIds: r.tokenIds },
              teacher: { promptIds: teacherPrompts[r.promptIndex]!, completionIds: r.tokenIds },
            });
          }
        }
      },
      () => ({
        tokens: batch.reduce((n, x) => n + x.student.completionIds.length, 0),
        sequences: batch.length,
        stops,
        rollouts: rolloutCount,
        lengths,
        truncated,
      }),
    );
    const normalizer = all.reduce((n, x) => n + x.tokens, 0);
    const sequences = all.reduce((n, x) => n + x.sequences, 0);
    const teacher = c.teacher === 'fixed' ? 'none' : c.teacher === 'current' ? 'active' : 'ema-teacher';
    let loss = 0;
    // normalizer is global: every rank takes the same branch. The global loss travels with the failure flags.
    if (normalizer > 0) {
      const upd = await ctx.allRanksGather(
        'OPSD update',
        () =>
          ctx.updateWithOomRecovery('opsd', async (microBatch) => {
            let l = 0;
            // Length-bucketed micro-batches: longest first, so each pads to about its own rows' length.
            for (const mb of chunks(
              longestFirst(batch, (x) => Math.max(x.student.promptIds.length, x.teacher.promptIds.length) + x.student.completionIds.length),
              microBatch,
            )) {
              l += (await backend.opsdBackward(mb, { jsdBeta: c.jsdBeta, temperature: ctx.cfg.sampling.temperature || 1, normalizer, teacher })).loss;
            }
            return l;
          }),
        finiteOrNull,
      );
      loss = ctx.dist.worldSize === 1 ? upd.value : sumFinite(upd.all);
    }
    // Token diagnostics of the first rows (rank 0's, after the update: the same weights as the loss saw).
    const diagRows = ctx.cfg.opsd.diagnosticRows ?? 1;
    let tokenDivergence: ReturnType<typeof summarizeDivergence> | undefined;
    let tokenDiagnosticsSeconds = 0;
    if (diagRows > 0 && ctx.dist.rank === 0 && backend.opsdTokenDiagnostics && batch.length) {
      const t0 = performance.now();
      try {
        const rows = await backend.opsdTokenDiagnostics(batch.slice(0, diagRows), {
          jsdBeta: c.jsdBeta,
          temperature: ctx.cfg.sampling.temperature || 1,
          teacher,
        });
        tokenDivergence = summarizeDivergence(addTokens(emptyDivergence(), rows.flat()));
      } catch (e) {
        // The full-logit forwards are outside the memory plan: out of memory there costs the
        // diagnostics (off for the rest of the run, carried by the checkpoints' config), never the step.
        if (!isPapergymError(e, ErrorCode.OOM)) throw e;
        backend.releaseMemory?.();
        ctx.cfg.opsd.diagnosticRows = 0;
        ctx.log?.(`[opsd] token diagnostics: out of memory (${(e as Error).message}); off from now on (opsd.diagnosticRows 0)`);
      }
      tokenDiagnosticsSeconds = (performance.now() - t0) / 1000;
    }
    const allLengths = all.flatMap((x) => x.lengths).sort((x, y) => x - y);
    const rollouts = all.reduce((n, x) => n + x.rollouts, 0);
    return {
      loss,
      jsd: loss,
      // Completion length over every rollout of the step (tokens): mean and p90 (type-7 quantile), and the share cut at max-new-tokens.
      completionLengthMean: allLengths.length ? allLengths.reduce((n, x) => n + x, 0) / allLengths.length : 0,
      completionLengthP90: allLengths.length ? quantile(allLengths, 0.9) : 0,
      truncationRate: all.reduce((n, x) => n + x.truncated, 0) / Math.max(1, rollouts),
      ...(tokenDivergence && { tokenDivergence, tokenDiagnosticsSeconds }),
      completionTokens: normalizer,
      completionLength: normalizer / Math.max(1, sequences),
      stopRate:
        all.reduce((n, x) => n + x.stops, 0) /
        Math.max(
          1,
          all.reduce((n, x) => n + x.rollouts, 0),
        ),
    };
  },
};
