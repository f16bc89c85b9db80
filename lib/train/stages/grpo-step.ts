/**
 * GRPO's advantages, reference, update and metrics phases (lib/train/stages/grpo.ts is the step
 * that calls them; the sample and reward phases are lib/train/stages/grpo-rollouts.ts): group
 * advantages (lib/train/advantages.ts), the reference policy's logprobs for the β_KL·k3 term, the
 * rollout correction (lib/train/rollout-correction.ts), and the clipped ratio loss
 * (native/loss/grpo.*) over length-bucketed micro-batches.
 */
import type { Rollout } from '../backend.js';
import { addMemberSummaries } from '../../judge/jury.js';
import type { RewardResult } from '../../task/types.js';
import { chunks, finiteOrNull, longestFirst, mean, std, sumFinite, type StageContext, type StepResult } from './stage.js';
import { maskedAdvantages } from '../advantages.js';
import {
  RATIO_EDGES,
  addAgreement,
  agreementOf,
  agreementSums,
  correctRollout,
  ratioHistogram,
  type AgreementSums,
  type RolloutCorrection,
} from '../rollout-correction.js';
import type { SampledRollouts } from './grpo-rollouts.js';

/** A sequence of the step: its prompt's and its completion's token ids. */
type Sequence = { promptIds: number[]; completionIds: number[] };

/**
 * Logprobs (per completion token, nats, at the sampling temperature) of `seqs` under `adapter`:
 * the reference policy's by default (grpo.reference: the stage-start snapshot, or 'none' = the base
 * model), 'active' for the trainer's own (rollout correction). Batches of the rollout rows
 * (memory.rolloutRows; 0 = the micro-batch): bounded memory, and a batch size from the config on
 * one process and on N ranks; longest first (longestFirst), so each batch pads to lengths close to
 * its own rows'. Timed as the reference phase.
 */
export type ReferenceLogprobs = (seqs: Sequence[], adapter?: string) => Promise<number[][]>;

/** The {@link ReferenceLogprobs} of the step in flight. */
export function referenceLogprobsOf(ctx: StageContext): ReferenceLogprobs {
  const c = ctx.cfg.grpo;
  const refAdapter = c.reference === 'base' ? 'none' : 'stage-start';
  return async (seqs, adapter = refAdapter) => {
    const out: number[][] = [];
    const order = longestFirst(
      seqs.map((_, j) => j),
      (j) => seqs[j]!.promptIds.length + seqs[j]!.completionIds.length,
    );
    for (const part of chunks(order, Math.max(1, ctx.cfg.memory?.rolloutRows || c.microBatch))) {
      const lps = await ctx.timed('reference', () =>
        ctx.backend.completionLogprobs(
          part.map((j) => seqs[j]!),
          ctx.cfg.sampling.temperature || 1,
          adapter,
        ),
      );
      part.forEach((j, k) => (out[j] = lps[k]!));
    }
    return out;
  };
}

/**
 * This rank's reference logprobs by local rollout index, taken before the rewards' exchange (data
 * parallel with β_KL > 0; empty otherwise). A rank's reference logprobs need only its own
 * completions, so they run before the exchange, where a rank whose completions finished early would
 * otherwise wait for the slowest rank's decode: every non-empty completion (a superset of those the
 * update keeps; the same set unless the judge masked some or zero-variance groups are dropped).
 * One process: after the advantages, for the kept ones only ({@link updateBatch}).
 */
export async function earlyReferenceLogprobs(ctx: StageContext, s: SampledRollouts, reference: ReferenceLogprobs): Promise<Map<number, number[]>> {
  const earlyRef = new Map<number, number[]>();
  if (ctx.dist.worldSize > 1 && ctx.cfg.grpo.klCoef > 0) {
    const local = s.rollouts.map((ro, i) => ({ ro, i })).filter((x) => x.ro.tokenIds.length > 0);
    const lps = await reference(local.map((x) => ({ promptIds: s.prompts.get(x.ro.promptIndex)!, completionIds: x.ro.tokenIds })));
    local.forEach((x, k) => earlyRef.set(x.i, lps[k]!));
  }
  return earlyRef;
}

/** What every rank shares of its rollouts: rewards, completion lengths (tokens), completions that stopped. */
export interface RankRollouts {
  rewards: RewardResult[];
  lengths: number[];
  stops: number;
}

/** The share of {@link RankRollouts} of this rank. */
export const rankRollouts = (s: SampledRollouts): RankRollouts => ({
  rewards: s.rewards,
  lengths: s.rollouts.map((ro) => ro.tokenIds.length),
  stops: s.rollouts.filter((ro) => ro.finishReason === 'stop').length,
});

/** The step's advantages over every rank's rollouts, and this rank's rollouts the update keeps. */
export interface StepAdvantages {
  /** Every rank's rewards and lengths in global rollout order. */
  rewards: RewardResult[];
  lengths: number[];
  /** Per global rollout: the judge gave no readable verdict (no reward). */
  masked: boolean[];
  /** The rewards of the completions not masked. */
  scored: number[];
  judge: ReturnType<StageContext['checkJudgeHealth']>;
  juryMembers: ReturnType<typeof addMemberSummaries>;
  /** This rank's kept rollouts: advantage, global index `i`, local index `local`. */
  kept: { ro: Rollout; adv: number; i: number; local: number }[];
  /** Their sequences, in the order of {@link kept}. */
  seqs: Sequence[];
  /** Kept completions and their tokens over every rank (the loss normalisers). */
  totalSequences: number;
  totalTokens: number;
}

/**
 * Group advantages (lib/train/advantages.ts maskedAdvantages: grpo.advantageScale, grpo.dropZeroVariance)
 * of every rank's rewards (`all`, rank order; ranks hold contiguous chunk ranges), so the
 * advantages, the loss normalisers and the judge health span the whole step, as on one process.
 * A completion the judge gave no readable verdict for has no reward: masked from its group's
 * advantages and the loss, out of the reward means. Empty completions are not kept.
 * @throws JudgeHealthError past judge.maxNullRate (the same gathered data on every rank: the same decision).
 */
export function stepAdvantages(ctx: StageContext, all: RankRollouts[], s: SampledRollouts): StepAdvantages {
  const c = ctx.cfg.grpo;
  const rewards = all.flatMap((x) => x.rewards);
  const lengths = all.flatMap((x) => x.lengths);
  const offset = all.slice(0, ctx.dist.rank).reduce((n, x) => n + x.rewards.length, 0);
  // Same gathered data on every rank → the same decision: a null-rate stop ends all ranks together.
  const judge = ctx.checkJudgeHealth(rewards, `GRPO step ${ctx.stageStep + 1}`);
  const juryMembers = addMemberSummaries(rewards.map((x) => x.judges));
  const masked = rewards.map((x) => x.masked === true);
  const r = rewards.map((x) => x.reward);
  const scored = r.filter((_, i) => !masked[i]);
  const { advantages, keep } = maskedAdvantages(ctx.advantages, r, masked, c.groupSize, { scale: c.advantageScale, dropZeroVariance: c.dropZeroVariance });
  const keptGlobal = lengths.map((len, i) => keep[i] && len > 0);
  const totalSequences = keptGlobal.filter(Boolean).length;
  const totalTokens = lengths.reduce((n, len, i) => n + (keptGlobal[i] ? len : 0), 0);
  const kept = s.rollouts.map((ro, i) => ({ ro, adv: advantages[offset + i]!, i: offset + i, local: i })).filter((x) => keptGlobal[x.i]);
  const seqs = kept.map((x) => ({ promptIds: s.prompts.get(x.ro.promptIndex)!, completionIds: x.ro.tokenIds }));
  return { rewards, lengths, masked, scored, judge, juryMembers, kept, seqs, totalSequences, totalTokens };
}

/** A row of the update: the sequence, π_old, the reference logprobs, the advantage, token weights, the sampler's logprobs. */
type UpdateRow = {
  seq: Sequence;
  oldLogprobs: number[];
  refLogprobs: number[];
  advantage: number;
  tokenWeights?: number[];
  samplerLogprobs: number[];
};

/**
 * The update's rows of this rank's kept rollouts: the reference logprobs (taken early, or now when
 * β_KL > 0, else zeros), the rollout correction (lib/train/rollout-correction.ts: the trainer's own
 * logprobs of the sampled tokens, a no-grad forward timed as reference, then π_old and token
 * weights), in length-bucketed order (longest first, so each micro-batch pads to about its own
 * rows' length).
 */
export async function updateBatch(ctx: StageContext, adv: StepAdvantages, earlyRef: Map<number, number[]>, reference: ReferenceLogprobs): Promise<UpdateRow[]> {
  const c = ctx.cfg.grpo;
  const { kept, seqs } = adv;
  const correction: RolloutCorrection = c.rolloutCorrection ?? 'none';
  const cap = c.importanceSamplingCap ?? 3;
  let refLogprobs: number[][];
  if (earlyRef.size) refLogprobs = kept.map((x) => earlyRef.get(x.local)!);
  else if (seqs.length && c.klCoef > 0) refLogprobs = await reference(seqs);
  else refLogprobs = seqs.map((s) => s.completionIds.map(() => 0));
  const trainerLp = correction !== 'none' && seqs.length ? await reference(seqs, 'active') : undefined;
  const corrected = kept.map((x, j) => correctRollout(correction, x.ro.logprobs, trainerLp?.[j], cap));
  return longestFirst(
    kept.map((x, j) => ({
      seq: seqs[j]!,
      oldLogprobs: corrected[j]!.oldLogprobs,
      refLogprobs: refLogprobs[j]!,
      advantage: x.adv,
      ...(corrected[j]!.weights && { tokenWeights: corrected[j]!.weights }),
      samplerLogprobs: x.ro.logprobs,
    })),
    (x) => x.seq.promptIds.length + x.seq.completionIds.length,
  );
}

/** This rank's sums over the update's micro-batches: loss, KL and clip fraction × rows, agreement sums, ratio histogram counts. */
export interface UpdateSums {
  loss: number;
  kl: number;
  clip: number;
  agree: AgreementSums;
  hist: number[];
}

/**
 * The clipped ratio loss + β_KL·k3 and its backward over micro-batches of `batch` (with the
 * trainer's out-of-memory recovery), summing the loss, KL and clip fraction, and the
 * sampler–trainer agreement and ratio histogram where the backend returns the update's logprobs.
 */
export async function grpoUpdate(ctx: StageContext, batch: UpdateRow[], adv: StepAdvantages): Promise<UpdateSums> {
  const c = ctx.cfg.grpo;
  const opts = {
    epsLow: c.epsLow,
    epsHigh: c.epsHigh,
    klCoef: c.klCoef,
    temperature: ctx.cfg.sampling.temperature || 1,
    aggregation: c.aggregation,
    totalSequences: adv.totalSequences,
    totalCompletionTokens: adv.totalTokens,
    maxCompletionLength: ctx.cfg.sampling.maxNewTokens,
  };
  return ctx.updateWithOomRecovery('grpo', async (microBatch) => {
    const acc: UpdateSums = {
      loss: 0,
      kl: 0,
      clip: 0,
      agree: { tokens: 0, sumAbs: 0, maxAbs: 0, sumK3: 0 },
      hist: RATIO_EDGES.map(() => 0).concat(0),
    };
    for (const mb of chunks(batch, microBatch)) {
      const out = await ctx.backend.grpoBackward(
        mb.map(({ samplerLogprobs: _s, ...x }) => x),
        opts,
      );
      acc.loss += out.loss;
      acc.kl += out.meanKl * mb.length;
      acc.clip += out.clipFraction * mb.length;
      // The trainer's logprobs at the update (the step's only one: the sampler's weights) against the sampler's, and the ratio it clips.
      if (out.logprobs) {
        acc.agree = addAgreement(
          acc.agree,
          agreementSums(
            mb.map((x) => x.samplerLogprobs),
            out.logprobs,
          ),
        );
        ratioHistogram(
          out.logprobs,
          mb.map((x) => x.oldLogprobs),
        ).forEach((n, i) => (acc.hist[i]! += n));
      }
    }
    return acc;
  });
}

/** What every rank shares of its update: loss (null when not finite), KL, clip, agreement sums, histogram. */
export const rankUpdate = (acc: UpdateSums) => [finiteOrNull(acc.loss), acc.kl, acc.clip, acc.agree, acc.hist] as const;

/**
 * The step's metrics from every rank's rollouts (`all`) and update sums (`parts`): loss, rewards
 * and their parts, pass rates per rubric dimension, KL, clip fraction, the sampler–trainer
 * agreement (a warning line past grpo.agreementWarnKl) and the ratio histogram, lengths, stop
 * rate, judge health and a jury's members.
 */
export function stepMetrics(ctx: StageContext, all: RankRollouts[], adv: StepAdvantages, parts: ReturnType<typeof rankUpdate>[]): StepResult {
  const c = ctx.cfg.grpo;
  const { rewards, lengths, masked, scored, judge, juryMembers, totalSequences, totalTokens } = adv;
  const correction: RolloutCorrection = c.rolloutCorrection ?? 'none';
  const loss = sumFinite(parts.map((p) => p[0]));
  const kl = parts.reduce((n, p) => n + p[1], 0);
  const clip = parts.reduce((n, p) => n + p[2], 0);
  const agreeSums = parts.reduce<AgreementSums>((a, p) => addAgreement(a, p[3]), { tokens: 0, sumAbs: 0, maxAbs: 0, sumK3: 0 });
  const hist = parts.reduce<number[]>((h, p) => h.map((n, i) => n + p[4][i]!), RATIO_EDGES.map(() => 0).concat(0));
  const agreement = agreeSums.tokens ? { ...agreementOf(agreeSums), correction } : undefined;
  const warnKl = c.agreementWarnKl ?? 0.001;
  if (agreement && agreement.klK3 > warnKl)
    ctx.log?.(
      `[grpo] step ${ctx.stageStep + 1}: sampler–trainer KL ${agreement.klK3.toExponential(2)} nats/token > grpo.agreementWarnKl ${warnKl} (mean |Δ logprob| ${agreement.meanAbsLogprobDiff.toExponential(2)}, max ${agreement.maxAbsLogprobDiff.toFixed(3)}); --rollout-correction ${correction === 'none' ? 'token-tis or recompute corrects it' : `${correction} is on`}`,
    );
  const dims: Record<string, [number, number]> = {};
  for (const x of rewards)
    for (const [d, [m, t]] of Object.entries(x.perDimension ?? {})) {
      const cur = dims[d] ?? [0, 0];
      dims[d] = [cur[0] + m, cur[1] + t];
    }
  return {
    loss,
    completionTokens: totalTokens,
    rewardMean: mean(scored),
    rewardStd: std(scored),
    rSpecMean: mean(rewards.filter((x) => !x.masked).map((x) => x.rSpec)),
    rGenMean: mean(rewards.filter((x) => !x.masked).map((x) => x.rGen)),
    maskedCompletions: masked.filter(Boolean).length,
    passRate: Object.fromEntries(Object.entries(dims).map(([d, [m, t]]) => [d, t ? m / t : NaN])),
    kl: totalSequences ? kl / totalSequences : 0,
    clipFraction: totalSequences ? clip / totalSequences : 0,
    keptSequences: totalSequences,
    // Sampler–trainer agreement on the sampled tokens and the histogram of the update's ratio (lib/train/rollout-correction.ts).
    ...(agreement && {
      agreement: { ...agreement, ...(agreement.klK3 > warnKl && { warning: true }) },
      ratioHistogram: { edges: [...RATIO_EDGES], counts: hist },
    }),
    completionLength: totalTokens / Math.max(1, totalSequences),
    stopRate: all.reduce((n, x) => n + x.stops, 0) / Math.max(1, lengths.length),
    ...(judge && { judge, judgeNullRate: judge.verdicts ? judge.nulls / judge.verdicts : 0 }),
    // A jury: each member's health and verdicts met this step (lib/judge/jury.ts).
    ...(juryMembers && { judges: juryMembers }),
  };
}
