/**
 * GRPO: G completions per question, rubric rewards r = α·r_spec + (1 − α)·r_gen (the task's
 * RewardFn), group advantages (lib/train/advantages.ts), clipped ratio loss + β_KL·k3 to the
 * reference (the stage-start snapshot or the base model; native/loss/grpo.*).
 */
import type { Rollout } from '../backend.js';
import { shard } from '../dist.js';
import { ErrorCode, isPapergymError } from '../../errors.js';
import { studentMessages } from '../../task/prompts.js';
import { judgeSharesPolicyWeights } from '../../judge/backends/index.js';
import { addMemberSummaries } from '../../judge/jury.js';
import type { RewardResult } from '../../task/types.js';
import { bucket, judgeWorkBytes, updateBytes } from '../memory-model.js';
import { chunks, finiteOrNull, longestFirst, mean, std, sumFinite, type StageContext, type StepResult, type TrainingStage } from './stage.js';
import { maskedAdvantages } from '../advantages.js';
import { DEFAULTS } from '../../config/train.js';
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

// Its section of the memory plan's inputs (lib/train/memory-model.ts PlanStageInputs).
declare module '../memory-model.js' {
  interface PlanStageInputs {
    grpo: { questionsPerStep: number; groupSize: number; microBatch: number; betaKl: number; reference: 'stage-start' | 'base' };
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
    alpha: (cfg) => cfg.grpo.alpha,
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
        betaKl: cfg.grpo.betaKl,
        reference: cfg.grpo.reference,
      },
    }),
    adapterSnapshots: (x) => (x.grpo.reference === 'stage-start' ? 1 : 0),
    microBatch: { configured: (x) => x.grpo.microBatch, updateBytes: (x, rows, rc, t) => updateBytes(x, rows, t.Ls, rc, 'grpo') },
    rollout: {
      maxRows: (x) => x.grpo.questionsPerStep * x.grpo.groupSize,
      unit: (x) => x.grpo.groupSize,
      // The same rows batch the reference logprobs (a no-grad forward).
      fits: (x, rows, t, limit) => x.grpo.betaKl <= 0 || t.R + rows * t.Ls * t.fwd <= limit,
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
        const judgeWork = judgeWorkBytes(x, st.judgeMaxTokensPerCall);
        out.judge = t.R + judgeWork;
        if (st.judgeOverlap) out['rollout-grpo'] += judgeWork;
      }
      if (x.grpo.betaKl > 0) out.reference = t.R + rows * t.Ls * t.fwd;
      out['update-grpo'] = t.R + updateBytes(x, st.microBatch.grpo!, t.Ls, st.recompute, 'grpo');
      return out;
    },
  },
  begin(ctx) {
    if (ctx.cfg.grpo.reference === 'stage-start') ctx.backend.snapshotAdapter('stage-start');
  },
  async step(ctx: StageContext): Promise<StepResult> {
    const { backend } = ctx;
    const c = ctx.cfg.grpo;
    const items = ctx.take(c.questionsPerStep);
    // Sampling chunks of whole groups (a group never spans ranks), each with its own seed; rows
    // per chunk from the config (memory.rolloutRows, the memory plan's; 0 = the micro-batch), never
    // from the rank count, so 1 and N processes sample the same chunks. This rank samples and
    // judges a contiguous share of the chunks, judging each chunk while the next one samples
    // (async overlap) where the judge may run beside a decode (below).
    // With a per-rank batch (--questions-per-rank) no chunk is larger than one rank's share, so
    // every rank samples (a chunk larger than the share would leave a rank idle in the rollout).
    const rolloutRows = Math.min(ctx.cfg.memory?.rolloutRows || c.microBatch, (c.questionsPerRank ?? Infinity) * c.groupSize);
    // Each group is judged as soon as its G completions finished, while the other rows still
    // decode (the backend's onGroup): with an HTTP judge always (requests in flight beside the
    // decode), with the local judge when grpo.judgeOverlap is on (its scoring calls share the model
    // with the decode, on their own worker thread and CUDA stream; the memory plan counts both).
    // Read per chunk and per group: an out of memory beside the decode turns it off mid-step.
    const localJudge = !ctx.cfg.judge || judgeSharesPolicyWeights(ctx.cfg.judge);
    const judgeBesideDecode = () => !localJudge || ctx.cfg.grpo.judgeOverlap === 'on';
    const promptChunks = chunks(
      items.map((_, i) => i),
      Math.max(1, Math.floor(rolloutRows / c.groupSize) || 1),
    );
    const [a, b] = shard(promptChunks.length, ctx.dist.rank, ctx.dist.worldSize);
    const prompts = new Map<number, number[]>();
    const rollouts: Rollout[] = [];
    const rewardJobs: Promise<RewardResult[]>[] = [];
    // The chunk's generate while it runs (a re-judge after an out of memory waits for it to end).
    let decoding: Promise<unknown> | undefined;
    let judgeCalls = 0; // judge calls in flight (judgeJob)
    const decodeEnded = async () => {
      while (decoding) await decoding.catch(() => undefined);
    };
    const refAdapter = c.reference === 'base' ? 'none' : 'stage-start';
    // Reference logprobs in batches of the rollout rows (memory.rolloutRows; 0 = the micro-batch):
    // bounded memory, and a batch size from the config on one process and on N ranks.
    // Longest first (longestFirst): each batch pads to lengths close to its own rows'.
    const correction: RolloutCorrection = c.rolloutCorrection ?? 'none';
    const cap = c.importanceSamplingCap ?? 3;
    // `adapter` 'active': the trainer's own logprobs (rollout correction) instead of the reference policy's.
    const referenceLogprobs = async (seqs: { promptIds: number[]; completionIds: number[] }[], adapter = refAdapter): Promise<number[][]> => {
      const out: number[][] = [];
      const order = longestFirst(
        seqs.map((_, j) => j),
        (j) => seqs[j]!.promptIds.length + seqs[j]!.completionIds.length,
      );
      for (const part of chunks(order, Math.max(1, ctx.cfg.memory?.rolloutRows || c.microBatch))) {
        const lps = await ctx.timed('reference', () =>
          backend.completionLogprobs(
            part.map((j) => seqs[j]!),
            ctx.cfg.sampling.temperature || 1,
            adapter,
          ),
        );
        part.forEach((j, k) => (out[j] = lps[k]!));
      }
      return out;
    };
    // This rank's reference logprobs by local rollout index, when taken before the rewards' exchange.
    const earlyRef = new Map<number, number[]>();
    // A failing judge or generate on one rank stops every rank here (allRanks), not in a later collective.
    // The ranks' rewards and lengths travel with the failure flags (one all-gather).
    const { all } = await ctx.allRanksGather(
      'GRPO rollouts and rewards',
      async () => {
        for (let ci = a; ci < b; ci++) {
          const ch = promptChunks[ci]!;
          // The local judge without the overlap never scores beside a decode, the previous chunks'
          // groups included (its scoring calls share the model with the decode, and the memory plan
          // counts no judge in the rollout phase): their judging ends before this chunk samples.
          if (!judgeBesideDecode() && rewardJobs.length) await ctx.timed('judge', () => Promise.all(rewardJobs));
          const perGroup = judgeBesideDecode();
          const ps = await Promise.all(ch.map((i) => backend.promptIds(studentMessages(items[i]!.question))));
          ch.forEach((i, j) => prompts.set(i, ps[j]!));
          // Rollouts of this chunk with global prompt indices.
          const global = (rs: Rollout[]) => rs.map((r) => ({ ...r, promptIndex: ch[r.promptIndex]! }));
          // A reward job; a rejection while sampling goes on is handled below (Promise.all), not "unhandled".
          const handled = <T>(job: Promise<T>) => (job.catch(() => undefined), job);
          const judge = (group: Rollout[]) => ctx.reward(group.map((r) => ({ item: items[r.promptIndex]!, plan: r.text, tokenIds: r.tokenIds })));
          // A local judge started while the overlap is on may run beside a decode (this chunk's, or the
          // next chunk's for the groups judged after this rollout). Out of memory there (the plan's
          // estimate short): the group is judged again once no decode runs, and after the rollouts
          // from then on (grpo.judgeOverlap off, carried by the checkpoints' config).
          const judgeJob = (group: Rollout[]) => {
            const beside = localJudge && judgeBesideDecode();
            judgeCalls++;
            return handled(
              judge(group)
                .finally(() => judgeCalls--)
                .catch(async (e: unknown) => {
                  if (!beside || !isPapergymError(e, ErrorCode.OOM)) throw e;
                  if (ctx.cfg.grpo.judgeOverlap === 'on')
                    ctx.log?.(
                      `judge: out of memory beside the rollout (${(e as Error).message}); judging after the rollout from now on (grpo.judgeOverlap off)`,
                    );
                  ctx.cfg.grpo.judgeOverlap = 'off';
                  await decodeEnded();
                  return judge(group);
                }),
            );
          };
          // Chunk-local prompt index → its group's reward job, started early by onGroup or after generate.
          const early = new Map<number, Promise<RewardResult[]>>();
          let sampled = false; // a report after generate returned is ignored: that group is judged from the result
          const onGroup = perGroup
            ? (p: number, group: Rollout[]) => void (sampled || early.has(p) || !judgeBesideDecode() || early.set(p, judgeJob(global(group))))
            : undefined;
          const sample = (og?: typeof onGroup) => (decoding = ctx.timed('rollout', () => backend.generate(ps, ctx.sampling(c.groupSize, 3 + ci), og)));
          let rs: Rollout[];
          try {
            rs = await sample(onGroup);
          } catch (e) {
            // The decode out of memory while the local judge scored beside it: the overlap turns off,
            // the judge calls in flight end, and the chunk is sampled again (same seed: the same
            // rollouts), its groups judged after the rollout; the early jobs' rewards are dropped.
            decoding = undefined;
            if (!(localJudge && perGroup && judgeCalls > 0 && isPapergymError(e, ErrorCode.OOM))) throw e;
            ctx.log?.(
              `rollout: out of memory with the judge beside the decode (${(e as Error).message}); sampling this chunk again and judging after the rollout from now on (grpo.judgeOverlap off)`,
            );
            ctx.cfg.grpo.judgeOverlap = 'off';
            sampled = true;
            await Promise.allSettled([...early.values(), ...rewardJobs]);
            early.clear();
            rs = await sample(undefined);
          } finally {
            decoding = undefined;
          }
          sampled = true;
          // generate returns n completions per prompt contiguously (a group is a block of G).
          const mapped = global(rs);
          rollouts.push(...mapped);
          rewardJobs.push(
            perGroup
              ? handled(Promise.all(ch.map((_, p) => early.get(p) ?? judgeJob(mapped.slice(p * c.groupSize, (p + 1) * c.groupSize)))).then((x) => x.flat()))
              : judgeJob(mapped),
          );
        }
        // Judge time not hidden behind sampling: the wait after the last chunk was sampled.
        const judged = (await ctx.timed('judge', () => Promise.all(rewardJobs))).flat();
        // Data parallel: a rank's reference logprobs need only its own completions, so they run
        // here, before the exchange of the rewards, where a rank whose completions finished early
        // would otherwise wait for the slowest rank's decode. Every non-empty completion (a superset
        // of those the update keeps; the same set unless the judge masked some or zero-variance
        // groups are dropped). One process: after the advantages, for the kept ones only.
        if (ctx.dist.worldSize > 1 && c.betaKl > 0) {
          const local = rollouts.map((ro, i) => ({ ro, i })).filter((x) => x.ro.tokenIds.length > 0);
          const lps = await referenceLogprobs(local.map((x) => ({ promptIds: prompts.get(x.ro.promptIndex)!, completionIds: x.ro.tokenIds })));
          local.forEach((x, k) => earlyRef.set(x.i, lps[k]!));
        }
        return judged;
      },
      (localRewards) => ({
        rewards: localRewards,
        lengths: rollouts.map((ro) => ro.tokenIds.length),
        stops: rollouts.filter((ro) => ro.finishReason === 'stop').length,
      }),
    );
    // Global rewards in global rollout order (ranks hold contiguous chunk ranges): advantages,
    // the loss normalisers and the judge health span the whole step, as on one process.
    const rewards = all.flatMap((x) => x.rewards);
    const lengths = all.flatMap((x) => x.lengths);
    const offset = all.slice(0, ctx.dist.rank).reduce((n, x) => n + x.rewards.length, 0);
    // Same gathered data on every rank → the same decision: a null-rate stop ends all ranks together.
    const judge = ctx.checkJudgeHealth(rewards, `GRPO step ${ctx.stageStep + 1}`);
    const juryMembers = addMemberSummaries(rewards.map((x) => x.judges));
    // A completion the judge gave no readable verdict for has no reward: masked from its group's
    // advantages and the loss (lib/train/advantages.ts maskedAdvantages), out of the reward means.
    const masked = rewards.map((x) => x.masked === true);
    const r = rewards.map((x) => x.reward);
    const scored = r.filter((_, i) => !masked[i]);
    const { advantages, keep } = maskedAdvantages(ctx.advantages, r, masked, c.groupSize, { scale: c.scale, dropZeroVariance: c.dropZeroVariance });
    const keptGlobal = lengths.map((len, i) => keep[i] && len > 0);
    const totalSequences = keptGlobal.filter(Boolean).length;
    const totalTokens = lengths.reduce((n, len, i) => n + (keptGlobal[i] ? len : 0), 0);
    const kept = rollouts.map((ro, i) => ({ ro, adv: advantages[offset + i]!, i: offset + i, local: i })).filter((x) => keptGlobal[x.i]);
    const seqs = kept.map((x) => ({ promptIds: prompts.get(x.ro.promptIndex)!, completionIds: x.ro.tokenIds }));
    const opts = {
      epsLow: c.epsLow,
      epsHigh: c.epsHigh,
      betaKl: c.betaKl,
      temperature: ctx.cfg.sampling.temperature || 1,
      aggregation: c.aggregation,
      totalSequences,
      totalCompletionTokens: totalTokens,
      maxCompletionLength: ctx.cfg.sampling.maxNewTokens,
    };
    // The reference logprobs and the update are rank-local with no collective between them: one
    // failure check covers both, and the ranks' loss, KL and clip sums travel with it.
    const { all: parts } = await ctx.allRanksGather(
      'GRPO reference logprobs and update',
      async () => {
        let refLogprobs: number[][];
        if (earlyRef.size) refLogprobs = kept.map((x) => earlyRef.get(x.local)!);
        else if (seqs.length && c.betaKl > 0) refLogprobs = await referenceLogprobs(seqs);
        else refLogprobs = seqs.map((s) => s.completionIds.map(() => 0));
        // Rollout correction (lib/train/rollout-correction.ts): the trainer's own logprobs of the
        // sampled tokens (a no-grad forward, timed as reference), then π_old and token weights.
        const trainerLp = correction !== 'none' && seqs.length ? await referenceLogprobs(seqs, 'active') : undefined;
        const corrected = kept.map((x, j) => correctRollout(correction, x.ro.logprobs, trainerLp?.[j], cap));
        // Length-bucketed micro-batches: longest first, so each micro-batch pads to about its own rows' length.
        const batch = longestFirst(
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
        return ctx.updateWithOomRecovery('grpo', async (microBatch) => {
          const acc = {
            loss: 0,
            kl: 0,
            clip: 0,
            agree: { tokens: 0, sumAbs: 0, maxAbs: 0, sumK3: 0 } as AgreementSums,
            hist: RATIO_EDGES.map(() => 0).concat(0),
          };
          for (const mb of chunks(batch, microBatch)) {
            const out = await backend.grpoBackward(
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
      },
      (acc) => [finiteOrNull(acc.loss), acc.kl, acc.clip, acc.agree, acc.hist] as const,
    );
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
  },
};
