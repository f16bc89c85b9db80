/**
 * The task's contracts, shared by training (lib/train/), eval (lib/eval/), `generate` and
 * `serve`: the item a stage or an eval reads, and the reward a plan gets.
 *
 * The full dataset row (source, stage texts, rubric origin and rank) is `PaperGymItem` in
 * lib/data/schema.ts; every `PaperGymItem` is a {@link TaskItem}.
 */
import type { JudgeHealth } from '../judge/types.js';

/** A rubric item as the task uses it (instance items of a {@link TaskItem}). */
export interface TaskRubricItem {
  id: string;
  /** The binary criterion a plan is graded against. */
  text: string;
  /** Rubric dimension (`method_innovation`, `experimental_design`); pass rates are reported per dimension. */
  dimension: string;
}

/** One research question with its reference answer and instance rubric (PaperGym item). */
export interface TaskItem {
  id: string;
  /** The research goal the policy writes a plan for (the student prompt, lib/task/prompts.ts). */
  question: string;
  /** The paper's own plan (the SFT target). */
  reference_answer: string;
  /** Instance rubric items (the OPSD teacher's privileged context and the GRPO reward's r_spec). */
  rubric: TaskRubricItem[];
  /** `train`, `val` or `test`: training draws `train` (all items when none is), validation `val`. */
  split: string;
}

/** What a reward needs of an item: its id, question and instance rubric. */
export type GradedItem = Pick<TaskItem, 'id' | 'question' | 'rubric'>;

/** One plan to reward. `tokenIds` are the plan's completion ids when it was sampled natively. */
export interface RewardRequest<I extends GradedItem = TaskItem> {
  item: I;
  /** The plan text as generated (thinking, if any, is removed by the reward function). */
  plan: string;
  tokenIds?: number[];
}

/**
 * The reward of one plan (PaperGym, docs/design.md §6): r = α·r_spec + (1 − α)·r_gen, with r_spec / r_gen
 * the fraction of instance / general rubric items met (lib/judge/rewards.ts computes it from
 * verdicts). All in [0, 1].
 */
export interface RewardResult {
  reward: number;
  rSpec: number;
  rGen: number;
  /** Items met per rubric dimension, for pass-rate metrics: dimension → [met, total]; `general` → the general items. */
  perDimension?: Record<string, [number, number]>;
  /** Judge health of this plan's verdicts; the trainer sums it per step into metrics.jsonl. */
  judge?: JudgeHealth;
}

/**
 * Scores plans: one result per request, in order. Rejects when the judge fails (the trainer then
 * stops with a checkpoint); `signal` aborts outstanding judge requests.
 */
export type RewardFn<I extends GradedItem = TaskItem> = (requests: RewardRequest<I>[], signal?: AbortSignal) => Promise<RewardResult[]>;
