/**
 * Group-relative advantages (docs/design.md §5; GRPO — Shao et al. 2024; TRL GRPOTrainer; Dr. GRPO —
 * Liu et al. 2025, no std scaling). Computed natively in float64 (native/loss/advantages.h).
 *
 * Rewards are contiguous groups of `groupSize` completions of one prompt.
 *   Â = (r − mean_group) / (max(std, stdFloor) + eps)   scale 'group' (std of the group) or
 *                                                       'batch' (std of all rewards)
 *   Â = r − mean_group                                  scale 'none'
 * std is the two-pass unbiased (n − 1) standard deviation, as TRL's `nanstd`. A group whose
 * rewards are all identical gets Â = 0 exactly (also for non-dyadic values such as 0.35) and
 * never NaN. With stdFloor = 0 and eps = 1e-4 the formula is TRL's exactly; the default
 * stdFloor = 1e-3 keeps near-ties (e.g. shaped rewards 1e-4 apart) from becoming ±1 advantages.
 */
import { native } from '../native.js';
import type { AdvantageOptions } from '../addon.js';

export type { AdvantageOptions } from '../addon.js';
/** 'group' (std of the group), 'batch' (std of all rewards) or 'none' (no scaling). */
export type AdvantageScale = NonNullable<AdvantageOptions['scale']>;

export interface AdvantageResult {
  /** [B] advantages; float32 unless rewards were Float64Array. */
  advantages: Float32Array | Float64Array;
  /** [B] 1 = keep, 0 = member of a dropped zero-variance group. */
  keep: Uint8Array;
  /** [B / G] unbiased group std (0 for equal groups). */
  groupStd: Float64Array;
}

/**
 * @throws TypeError when rewards.length is not a multiple of groupSize or an option is invalid;
 *         Error (code ERR_PG_INPUT) on a non-finite reward.
 */
export function computeAdvantages(rewards: ArrayLike<number> | Float32Array | Float64Array, opts: AdvantageOptions): AdvantageResult {
  const data = rewards instanceof Float32Array || rewards instanceof Float64Array ? rewards : Float64Array.from(rewards as ArrayLike<number>);
  const r = native().computeAdvantages({ rewards: { data, shape: [data.length] }, ...opts });
  return { advantages: r.advantages.data, keep: r.keep.data, groupStd: r.groupStd.data };
}

/**
 * The advantage contract of the training loop (the GRPO stage, lib/train/stages/grpo.ts): rewards
 * of contiguous groups of `groupSize` completions in, one advantage and one keep flag per
 * completion out (keep false = member of a dropped zero-variance group).
 */
export type AdvantageFn = (
  rewards: number[],
  groupSize: number,
  opts: { scale: AdvantageScale; dropZeroVariance: boolean },
) => { advantages: number[]; keep: boolean[] };

/** {@link computeAdvantages} (native, float64) as the training loop's {@link AdvantageFn}. */
export const groupAdvantages: AdvantageFn = (rewards, groupSize, opts) => {
  const a = computeAdvantages(rewards, { groupSize, scale: opts.scale, dropZeroVariance: opts.dropZeroVariance });
  return { advantages: Array.from(a.advantages), keep: Array.from(a.keep, (k) => k === 1) };
};

/**
 * Group advantages with masked completions (a completion whose judge gave no readable verdict:
 * RewardResult.masked, lib/judge/rewards.ts). A masked completion gets advantage 0 and keep false
 * (it is out of the loss and of its normalisers), and its group's advantages are computed over
 * the group's other completions only: groups are partitioned by how many completions they keep
 * (k), and `fn` runs once per k over those groups (group size k), so with scale 'batch' the std is
 * that of the groups with the same k. A group with no unmasked completion is dropped whole.
 * Without masks this is exactly `fn(rewards, groupSize, opts)`.
 * `rewards`, `masked`: [B], B a multiple of `groupSize`; returns [B] advantages and keep flags.
 */
export function maskedAdvantages(
  fn: AdvantageFn,
  rewards: number[],
  masked: boolean[],
  groupSize: number,
  opts: Parameters<AdvantageFn>[2],
): { advantages: number[]; keep: boolean[] } {
  if (!masked.some(Boolean)) return fn(rewards, groupSize, opts);
  const groups = rewards.length / groupSize;
  const advantages = new Array<number>(rewards.length).fill(0);
  const keep = new Array<boolean>(rewards.length).fill(false);
  const byKept = new Map<number, number[][]>();
  for (let g = 0; g < groups; g++) {
    const members: number[] = [];
    for (let j = g * groupSize; j < (g + 1) * groupSize; j++) if (!masked[j]) members.push(j);
    if (!members.length) continue;
    byKept.set(members.length, [...(byKept.get(members.length) ?? []), members]);
  }
  for (const [k, gs] of byKept) {
    const flat = gs.flat();
    const r = fn(
      flat.map((j) => rewards[j]!),
      k,
      opts,
    );
    flat.forEach((j, i) => {
      advantages[j] = r.advantages[i]!;
      keep[j] = r.keep[i]!;
    });
  }
  return { advantages, keep };
}
