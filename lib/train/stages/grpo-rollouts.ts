/**
 * GRPO's sample and reward phases: G completions per question sampled in chunks of whole groups,
 * each group judged by the task's reward (r = α·r_spec + (1 − α)·r_gen, lib/task/reward.ts) as
 * soon as its completions finished where the judge may run beside the decode (lib/train/stages/grpo.ts
 * is the step that calls it).
 */
import type { Rollout } from '../backend.js';
import { shard } from '../dist.js';
import { ErrorCode, isPapergymError } from '../../errors.js';
import { studentMessages } from '../../task/prompts.js';
import { judgeSharesPolicyWeights } from '../../judge/backends/index.js';
import type { RewardResult, TaskItem } from '../../task/types.js';
import { chunks, type StageContext } from './stage.js';

/** This rank's rollouts of one step and their rewards. */
export interface SampledRollouts {
  /** Question index (into the step's items) → its prompt's token ids. */
  prompts: Map<number, number[]>;
  /** This rank's completions with global question indices (`promptIndex`), G per question, contiguous. */
  rollouts: Rollout[];
  /** The reward of each of {@link rollouts}, in the same order. */
  rewards: RewardResult[];
}

/**
 * Samples and judges this rank's share of the step's questions (`items`, grpo.groupSize completions
 * each). Sampling chunks of whole groups (a group never spans ranks), each with its own seed; rows
 * per chunk from the config (memory.rolloutRows, the memory plan's; 0 = the micro-batch), never
 * from the rank count, so 1 and N processes sample the same chunks. This rank samples and judges a
 * contiguous share of the chunks, judging each chunk while the next one samples (async overlap)
 * where the judge may run beside a decode (below). Phases timed: rollout, judge.
 * @throws the judge's or the backend's error (an out of memory of a local judge beside the decode
 *   is recovered: the group or the chunk is judged or sampled again with grpo.judgeOverlap off).
 */
export async function sampleAndJudge(ctx: StageContext, items: TaskItem[]): Promise<SampledRollouts> {
  const c = ctx.cfg.grpo;
  // With a per-rank batch (--questions-per-rank) no chunk is larger than one rank's share, so
  // every rank samples (a chunk larger than the share would leave a rank idle in the rollout).
  const rolloutRows = Math.min(ctx.cfg.memory?.rolloutRows || c.microBatch, (c.questionsPerRank ?? Infinity) * c.groupSize);
  // Each group is judged as soon as its G completions finished, while the other rows still
  // decode (the backend's onGroup): with an HTTP judge always (requests in flight beside the
  // decode), with the local judge when grpo.judgeOverlap is on (its scoring calls share the model
  // with the decode, on their own worker thread and CUDA stream; the memory plan counts both).
  // Read per chunk and per group: an out of memory beside the decode turns it off mid-step.
  const localJudge = !ctx.cfg.judge || judgeSharesPolicyWeights(ctx.cfg.judge);
  const promptChunks = chunks(
    items.map((_, i) => i),
    Math.max(1, Math.floor(rolloutRows / c.groupSize) || 1),
  );
  const [a, b] = shard(promptChunks.length, ctx.dist.rank, ctx.dist.worldSize);
  const run: ChunkRun = {
    ctx,
    items,
    localJudge,
    judgeBesideDecode: () => !localJudge || ctx.cfg.grpo.judgeOverlap === 'on',
    prompts: new Map(),
    rollouts: [],
    rewardJobs: [],
    decoding: undefined,
    judgeCalls: 0,
  };
  for (let ci = a; ci < b; ci++) {
    // The local judge without the overlap never scores beside a decode, the previous chunks'
    // groups included (its scoring calls share the model with the decode, and the memory plan
    // counts no judge in the rollout phase): their judging ends before this chunk samples.
    if (!run.judgeBesideDecode() && run.rewardJobs.length) await ctx.timed('judge', () => Promise.all(run.rewardJobs));
    await sampleChunk(run, ci, promptChunks[ci]!);
  }
  // Judge time not hidden behind sampling: the wait after the last chunk was sampled.
  const rewards = (await ctx.timed('judge', () => Promise.all(run.rewardJobs))).flat();
  return { prompts: run.prompts, rollouts: run.rollouts, rewards };
}

/** What the chunks of one step's {@link sampleAndJudge} share. */
interface ChunkRun {
  readonly ctx: StageContext;
  readonly items: TaskItem[];
  /** The judge scores on the policy's own weights (a local judge). */
  readonly localJudge: boolean;
  /** A group may be judged while a decode runs (read per chunk and per group). */
  readonly judgeBesideDecode: () => boolean;
  readonly prompts: Map<number, number[]>;
  readonly rollouts: Rollout[];
  /** One reward job per chunk sampled (its completions' rewards in rollout order). */
  readonly rewardJobs: Promise<RewardResult[]>[];
  /** The chunk's generate while it runs (a re-judge after an out of memory waits for it to end). */
  decoding: Promise<unknown> | undefined;
  /** Judge calls in flight ({@link judgeJob}). */
  judgeCalls: number;
}

/** A reward job; a rejection while sampling goes on is handled later (Promise.all), not "unhandled". */
const handled = <T>(job: Promise<T>) => (job.catch(() => undefined), job);

/**
 * The rewards of `group` (rollouts with global prompt indices). A local judge started while the
 * overlap is on may run beside a decode (this chunk's, or the next chunk's for the groups judged
 * after this rollout). Out of memory there (the plan's estimate short): the group is judged again
 * once no decode runs, and after the rollouts from then on (grpo.judgeOverlap off, carried by the
 * checkpoints' config).
 */
function judgeJob(run: ChunkRun, group: Rollout[]): Promise<RewardResult[]> {
  const { ctx } = run;
  const judge = () => ctx.reward(group.map((r) => ({ item: run.items[r.promptIndex]!, plan: r.text, tokenIds: r.tokenIds })));
  const beside = run.localJudge && run.judgeBesideDecode();
  run.judgeCalls++;
  return handled(
    judge()
      .finally(() => run.judgeCalls--)
      .catch(async (e: unknown) => {
        if (!beside || !isPapergymError(e, ErrorCode.OOM)) throw e;
        if (ctx.cfg.grpo.judgeOverlap === 'on')
          ctx.log?.(`judge: out of memory beside the rollout (${(e as Error).message}); judging after the rollout from now on (grpo.judgeOverlap off)`);
        ctx.cfg.grpo.judgeOverlap = 'off';
        while (run.decoding) await run.decoding.catch(() => undefined);
        return judge();
      }),
  );
}

/**
 * Samples chunk `ci` (question indices `ch`, grpo.groupSize completions each, its own seed) and
 * starts its reward job: each group judged as soon as it finished where the judge may run beside
 * the decode, else the whole chunk after its rollout.
 */
async function sampleChunk(run: ChunkRun, ci: number, ch: number[]): Promise<void> {
  const { ctx } = run;
  const c = ctx.cfg.grpo;
  const perGroup = run.judgeBesideDecode();
  const ps = await Promise.all(ch.map((i) => ctx.backend.promptIds(studentMessages(run.items[i]!.question))));
  ch.forEach((i, j) => run.prompts.set(i, ps[j]!));
  // Rollouts of this chunk with global prompt indices.
  const global = (rs: Rollout[]) => rs.map((r) => ({ ...r, promptIndex: ch[r.promptIndex]! }));
  // Chunk-local prompt index → its group's reward job, started early by onGroup or after generate.
  const early = new Map<number, Promise<RewardResult[]>>();
  let sampled = false; // a report after generate returned is ignored: that group is judged from the result
  const onGroup = perGroup
    ? (p: number, group: Rollout[]) => void (sampled || early.has(p) || !run.judgeBesideDecode() || early.set(p, judgeJob(run, global(group))))
    : undefined;
  const sample = (og?: typeof onGroup) => (run.decoding = ctx.timed('rollout', () => ctx.backend.generate(ps, ctx.sampling(c.groupSize, 3 + ci), og)));
  let rs: Rollout[];
  try {
    rs = await sample(onGroup);
  } catch (e) {
    // The decode out of memory while the local judge scored beside it: the overlap turns off,
    // the judge calls in flight end, and the chunk is sampled again (same seed: the same
    // rollouts), its groups judged after the rollout; the early jobs' rewards are dropped.
    run.decoding = undefined;
    if (!(run.localJudge && perGroup && run.judgeCalls > 0 && isPapergymError(e, ErrorCode.OOM))) throw e;
    ctx.log?.(
      `rollout: out of memory with the judge beside the decode (${(e as Error).message}); sampling this chunk again and judging after the rollout from now on (grpo.judgeOverlap off)`,
    );
    ctx.cfg.grpo.judgeOverlap = 'off';
    sampled = true;
    await Promise.allSettled([...early.values(), ...run.rewardJobs]);
    early.clear();
    rs = await sample(undefined);
  } finally {
    run.decoding = undefined;
  }
  sampled = true;
  // generate returns n completions per prompt contiguously (a group is a block of G).
  const mapped = global(rs);
  run.rollouts.push(...mapped);
  run.rewardJobs.push(
    perGroup
      ? handled(Promise.all(ch.map((_, p) => early.get(p) ?? judgeJob(run, mapped.slice(p * c.groupSize, (p + 1) * c.groupSize)))).then((x) => x.flat()))
      : judgeJob(run, mapped),
  );
}
