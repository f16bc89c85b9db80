/**
 * GRPO rewards from rubric verdicts (docs/design.md §6, PaperGym): r_spec = fraction of the instance
 * (question-specific) items met, r_gen = fraction of the general items met,
 * r = α·r_spec + (1 − α)·r_gen with α = 0.7.
 *
 * Null verdicts (refusal, unreadable output, failed request: `met === null`) are excluded, never
 * scored as "not met" (issue 38; as verifiers / NeMo Gym mask failed samples): the rubric item drops
 * out of its set's fraction, so r_spec = (met spec items) / (readable spec items), and likewise
 * r_gen. A set with no readable verdict is treated as empty. When a plan has no general items (none
 * readable), r = r_spec (and r = r_gen when it has no readable instance items): the weight of an
 * empty set moves to the other set rather than scoring it 0 or 1. A plan with no readable verdict at
 * all is `masked`: r = 0 is a placeholder that must not be used — GRPO drops the completion from its
 * group's advantages and from the loss (lib/train/stages/grpo.ts), and summaries leave it out of
 * the means. The nulls stay counted (`nulls`, `health`) so a run can watch the rate
 * (judge.maxNullRate stops it). This is the one null rule of the project: `eval` (the `papergym`
 * protocol, lib/eval/protocols/papergym.ts, and the coverage view, lib/eval/report.ts) calls this
 * function per plan, so training and evaluation read the same verdicts the same way (issue 48).
 *
 * Scoring (`score`): 'binary' (default, the paper's) counts an item as 1 when met, else 0;
 * 'prob' uses the judge's P(yes) of the item (`Verdict.prob`: the local judge, or an HTTP judge
 * with logprobs), falling back to 1/0 for verdicts that carry no P(yes) (null verdicts are excluded).
 */
import { memberSummaryOf } from './jury.js';
import { judgeHealth, type Judge, type JudgeCallOptions, type JudgeHealth, type JudgeItem, type Verdict } from './types.js';
import { stripThink } from '../llm/think.js';
import { DEFAULT_ALPHA } from '../config/reward.js';
import type { GradedItem, RewardFn } from '../task/types.js';

/** Reward options. */
export interface RewardOptions {
  /** Weight of r_spec in [0, 1]; default 0.7 (paper). */
  alpha?: number;
  /** What an item contributes: 'binary' (met → 1, default) or 'prob' (P(yes) when present). */
  score?: 'binary' | 'prob';
}

/** Reward of one plan with the verdicts it came from. */
export interface RewardBreakdown {
  /** α·r_spec + (1−α)·r_gen, in [0, 1]; 0 and meaningless when `masked`. */
  r: number;
  /** Fraction of the readable instance items met (0 when there are none). */
  rSpec: number;
  /** Fraction of the readable general items met (0 when there are none). */
  rGen: number;
  /** True when no verdict of the plan is readable: the plan has no reward (excluded from training and means). */
  masked: boolean;
  specMet: number;
  specTotal: number;
  genMet: number;
  genTotal: number;
  /** Verdicts with met === null (excluded from the fractions). */
  nulls: number;
  /** Of those, refusals. */
  refusals: number;
  /** Of those, failed requests. */
  errors: number;
  /** The verdicts, kept for per-item metrics. */
  spec: Verdict[];
  gen: Verdict[];
  /** Judge health of this plan's verdicts. */
  health: JudgeHealth;
}

export { DEFAULT_ALPHA };

/**
 * The reward mix (paper §6): r = α·r_spec + (1 − α)·r_gen over a plan's instance and general
 * items; the instance or general part alone when the other has no items; 0 with no items. The one
 * formula: training (computeReward), eval reports and the reward-hacking probe call it.
 */
export function mixReward(rSpec: number, specItems: number, rGen: number, genItems: number, alpha: number): number {
  if (specItems && genItems) return alpha * rSpec + (1 - alpha) * rGen;
  return specItems ? rSpec : genItems ? rGen : 0;
}

/** An item's score in the reward: P(yes) with `score` 'prob' when the verdict has one, else 1 when met, 0 otherwise. */
export function itemScore(v: Pick<Verdict, 'met' | 'prob'>, score: 'binary' | 'prob'): number {
  return score === 'prob' && typeof v.prob === 'number' && Number.isFinite(v.prob) ? v.prob : v.met === true ? 1 : 0;
}

function countMet(vs: Verdict[]): number {
  let k = 0;
  for (const v of vs) if (v.met === true) k++;
  return k;
}

function sumScore(vs: Verdict[], score: 'binary' | 'prob'): number {
  let k = 0;
  for (const v of vs) k += itemScore(v, score);
  return k;
}

/**
 * Reward of one plan from its instance verdicts `spec` and general verdicts `gen`.
 * Throws RangeError for α outside [0, 1].
 */
export function computeReward(spec: Verdict[], gen: Verdict[], opts: RewardOptions = {}): RewardBreakdown {
  const alpha = opts.alpha ?? DEFAULT_ALPHA;
  if (!(alpha >= 0 && alpha <= 1)) throw new RangeError(`alpha must be in [0, 1], got ${alpha}`);
  const score = opts.score ?? 'binary';
  if (score !== 'binary' && score !== 'prob') throw new RangeError(`score must be 'binary' or 'prob', got ${String(score)}`);
  const specMet = countMet(spec);
  const genMet = countMet(gen);
  const specRead = spec.filter((v) => v.met !== null);
  const genRead = gen.filter((v) => v.met !== null);
  const rSpec = specRead.length ? sumScore(specRead, score) / specRead.length : 0;
  const rGen = genRead.length ? sumScore(genRead, score) / genRead.length : 0;
  const r = mixReward(rSpec, specRead.length, rGen, genRead.length, alpha);
  const all = [...spec, ...gen];
  return {
    r,
    rSpec,
    rGen,
    masked: all.length > 0 && !specRead.length && !genRead.length,
    specMet,
    specTotal: spec.length,
    genMet,
    genTotal: gen.length,
    nulls: all.filter((v) => v.met === null).length,
    refusals: all.filter((v) => v.met === null && v.refused).length,
    errors: all.filter((v) => v.met === null && v.error).length,
    spec,
    gen,
    health: judgeHealth(all),
  };
}

/** One plan to reward: its question, the plan text, the instance items and the general items. */
export interface RewardInput {
  question: string;
  plan: string;
  specItems: JudgeItem[];
  genItems: JudgeItem[];
}

/**
 * Judges every plan against its instance + general items in one `judge.judge` call (one request
 * per plan, items = spec then gen, split back by position) and returns one breakdown per input,
 * in order. Used by GRPO (G completions per question → G inputs) and by eval.
 */
export async function scorePlans(judge: Judge, inputs: RewardInput[], opts: RewardOptions & JudgeCallOptions = {}): Promise<RewardBreakdown[]> {
  const verdicts = await judge.judge(
    inputs.map((x) => ({ question: x.question, plan: x.plan, items: [...x.specItems, ...x.genItems] })),
    { signal: opts.signal },
  );
  return inputs.map((x, i) => {
    const v = verdicts[i];
    if (!v || v.length !== x.specItems.length + x.genItems.length)
      throw new Error(`judge ${judge.name} returned ${v?.length} verdicts for ${x.specItems.length + x.genItems.length} items`);
    return computeReward(v.slice(0, x.specItems.length), v.slice(x.specItems.length), opts);
  });
}

/**
 * Batch summary for metrics: means of r, r_spec, r_gen over the plans that have a reward (masked
 * plans, with no readable verdict, are left out and counted in `masked`), and the null rate over
 * all verdicts.
 */
export function summariseRewards(rs: RewardBreakdown[]): {
  n: number;
  masked: number;
  meanR: number;
  meanRSpec: number;
  meanRGen: number;
  nullRate: number;
  refusals: number;
  errors: number;
} {
  const scored = rs.filter((b) => !b.masked);
  const mean = (f: (b: RewardBreakdown) => number) => (scored.length ? scored.reduce((a, b) => a + f(b), 0) / scored.length : 0);
  const n = rs.length;
  const verdicts = rs.reduce((a, b) => a + b.specTotal + b.genTotal, 0);
  return {
    n,
    masked: n - scored.length,
    meanR: mean((b) => b.r),
    meanRSpec: mean((b) => b.rSpec),
    meanRGen: mean((b) => b.rGen),
    nullRate: verdicts ? rs.reduce((a, b) => a + b.nulls, 0) / verdicts : 0,
    refusals: rs.reduce((a, b) => a + b.refusals, 0),
    errors: rs.reduce((a, b) => a + b.errors, 0),
  };
}

/**
 * The GRPO reward function over a judge (the task's {@link RewardFn}, lib/task/types.ts):
 * `(requests: {item, plan}[]) → RewardResult[]`, in order, each with `perDimension` and `judge` set,
 * and `masked: true` for a plan with no readable verdict (its `reward` is then not a score).
 * Plans have their thinking removed (lib/llm/think.ts) before judging (the judge grades the plan, not the
 * reasoning). `general` is the shared general rubric (data/general-rubric.json items); α default 0.7.
 * Judge counters (requests, tokens, nulls) stay available through `judge.stats()`.
 */
export function makeRewardFn(judge: Judge, general: JudgeItem[], opts: RewardOptions = {}): RewardFn<GradedItem> {
  return async (requests, signal) => {
    const bs = await scorePlans(
      judge,
      requests.map(({ item, plan }) => ({
        question: item.question,
        plan: stripThink(plan),
        specItems: item.rubric.map((r) => ({ id: r.id, text: r.text })),
        genItems: general,
      })),
      { ...opts, signal },
    );
    return bs.map((b, i) => {
      const perDimension: Record<string, [number, number]> = {};
      requests[i].item.rubric.forEach((r, k) => {
        const cur = perDimension[r.dimension] ?? [0, 0];
        // Pass rates over readable verdicts, as the reward.
        if (b.spec[k].met !== null) perDimension[r.dimension] = [cur[0] + (b.spec[k].met === true ? 1 : 0), cur[1] + 1];
      });
      const genRead = b.gen.filter((v) => v.met !== null).length;
      if (genRead) perDimension.general = [b.genMet, genRead];
      const judges = memberSummaryOf([...b.spec, ...b.gen]);
      return { reward: b.r, rSpec: b.rSpec, rGen: b.rGen, perDimension, judge: b.health, ...(judges && { judges }), ...(b.masked && { masked: true }) };
    });
  };
}
