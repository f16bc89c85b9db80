/**
 * The task's contracts, shared by training (lib/train/), eval (lib/eval/), `generate` and
 * `serve`: the item a stage or an eval reads, and the reward a plan gets.
 *
 * The full dataset row (source, stage texts, rubric origin and rank) is `PaperGymItem` in
 * lib/data/schema.ts; every `PaperGymItem` is a {@link TaskItem}.
 */
import type { ChatMessage } from '../llm/messages.js';

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
  /** A jury's members (lib/judge/jury.ts): per member name, the health of its verdicts on this plan and how many it judged met. */
  judges?: Record<string, JudgeHealth & { met: number }>;
  /**
   * True when the judge gave no readable verdict for this plan (every request failed or was
   * unreadable): `reward` is not a score, and GRPO masks the completion from its group's
   * advantages and the loss (lib/judge/rewards.ts states the rule).
   */
  masked?: boolean;
}

/**
 * Scores plans: one result per request, in order. Rejects when the judge fails (the trainer then
 * stops with a checkpoint); `signal` aborts outstanding judge requests.
 */
export type RewardFn<I extends GradedItem = TaskItem> = (requests: RewardRequest<I>[], signal?: AbortSignal) => Promise<RewardResult[]>;

/**
 * A rubric item of an imported benchmark (lib/eval/formats/, `papergym-native import`). `weight` is
 * signed: a negative weight marks an undesirable behaviour (HealthBench's negative points, RaR's
 * pitfalls); the benchmark's protocol (lib/eval/protocols/) says how it scores. Unweighted
 * datasets (ResearchQA, ResearchPlanGen, PaperGym) get weight 1.
 */
export interface BenchmarkRubricItem {
  id: string;
  /** The criterion text the judge decides. */
  text: string;
  /** Signed weight (points); 1 where the dataset has none. */
  weight: number;
  /** ResearchQA's item type (citation, explanation, …). */
  type?: string;
  /** HealthBench's axis (from its `axis:…` tag). */
  axis?: string;
  /** Tags as published (HealthBench `level:…`, `axis:…`). */
  tags?: string[];
  /** RaR's short title of the item. */
  title?: string;
  /** PaperGym's rubric dimension. */
  dimension?: string;
  /** PaperGym's rubric origin (R_Q, R_A, both). */
  origin?: string;
}

/**
 * One evaluation item of any imported format (one JSONL row written by `papergym-native import`;
 * schema: `benchmarkItemJsonSchema` in lib/data/schema.ts). `question` is the prompt as text (chat
 * prompts folded, lib/eval/formats/read.ts `foldMessages`); `messages` keeps a chat prompt as published.
 */
export interface BenchmarkItem {
  id: string;
  /** The format it was imported from (`researchqa`, `research-plan-gen`, `healthbench`, `rubrichub`, `rar`, `papergym`). */
  format: string;
  question: string;
  /** The prompt as chat messages, when the dataset publishes one (HealthBench, RubricHub). */
  messages?: ChatMessage[];
  /** Reference answer where the dataset has one. */
  reference_answer?: string;
  rubric: BenchmarkRubricItem[];
  split?: string;
  /** Example-level tags (HealthBench `example_tags`). */
  tags?: string[];
  /** Where the row came from: dataset, file (as given), 1-based row, config, the dataset's own id. */
  source: { dataset: string; file: string; row: number; config?: string; id?: string };
}

/**
 * Judge health of a batch of verdicts (per training step, per eval): how many verdicts, how many
 * null (not met) and why. `nulls = refusals + unparsed + errors`. Declared with the reward contract
 * that carries it (lib/judge/types.ts re-exports it).
 */
export interface JudgeHealth {
  verdicts: number;
  nulls: number;
  refusals: number;
  /** Replies that could not be read as a verdict (parse failures). */
  unparsed: number;
  /** Requests that failed after retries. */
  errors: number;
  /** Verdicts that carry P(yes). */
  withProb: number;
}
