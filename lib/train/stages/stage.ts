/**
 * The one interface every training stage implements (SFT, OPSD, GRPO; docs/design.md §6), and the view
 * of the running Trainer a stage step works through. The Trainer (lib/train/trainer.ts) owns what
 * every stage shares — the step loop, optimizer step, non-finite skip, checkpoints, resume, metrics,
 * validation, out-of-memory recovery, data-parallel agreement and judge health; a stage says what
 * one step computes and what it needs at its start and after each update.
 */
import type { Stage, TrainConfig } from '../../config/train.js';
import type { StageSettings } from '../../config/extensions.js';
import type { JudgeHealth } from '../../judge/types.js';
import type { RewardFn, RewardResult, TaskItem } from '../../task/types.js';
import type { AdvantageFn } from '../advantages.js';
import type { SamplingOptions, TrainBackend } from '../backend.js';
import type { DistContext } from '../dist.js';
import type { PlanInputs, PlanPhase, PlanSettings } from '../memory-model.js';

/**
 * A step's result: `loss` (global over ranks; NaN = the step is skipped), `completionTokens`
 * (global), this rank's gradient pre-scale for the all-reduce (`gradScale`, default 1) and any
 * stage metrics (written to metrics.jsonl as they are; `rewardMean` and `judge` are also shown on
 * the progress line).
 */
export type StepResult = { loss: number; completionTokens: number; gradScale?: number; [k: string]: unknown };

/**
 * The phases of a training step, each a key of `phaseSeconds` in every metrics.jsonl step line
 * (wall seconds; docs/performance.md "Phases of a step"):
 * - `rollout`: sampling the completions (backend.generate);
 * - `judge`: waiting for the rewards after the last rollout chunk (judging that overlapped sampling is not counted);
 * - `reference`: the reference policy's completion logprobs (GRPO KL term);
 * - `update`: the loss forward + backward micro-batch loop (incl. out-of-memory retries; OPSD's teacher pass is in it);
 * - `allreduce`: summing the ranks' LoRA gradients (data parallel only);
 * - `optimizer`: gradient clip + AdamW;
 * - `checkpoint`: writing the checkpoint that follows the step (0 when none does);
 * - `host`: the rest of the step (prompt building, advantages, bookkeeping).
 * A stage declares the ones its step times ({@link TrainingStage.phases}); the trainer adds the others.
 */
export type StepPhase = 'rollout' | 'judge' | 'reference' | 'update' | 'allreduce' | 'optimizer' | 'checkpoint' | 'host';

/** The dataset's longest prompts, tokens (lib/train/input-checks.ts checkRowLengths): student, teacher, and reference answer + end-of-turn (0 when answers were not tokenized). */
export interface LongestPrompts {
  student: number;
  teacher: number;
  answer: number;
}

/**
 * The tokens one step holds at once (issue 50 item 1): `rows` sequences of `length` tokens (prompt +
 * completion), with the flags and longest prompts that give them as the error names them
 * (`rowsText` × `lengthText`).
 */
export interface StepTokens {
  rows: number;
  rowsText: string;
  length: number;
  lengthText: string;
}

/** What a stage step may use of the running Trainer (one per run; state is the trainer's). */
export interface StageContext {
  readonly cfg: TrainConfig;
  readonly backend: TrainBackend;
  readonly dist: DistContext;
  readonly reward: RewardFn;
  readonly advantages: AdvantageFn;
  /** Step of the stage in flight, 0-based. */
  readonly stageStep: number;
  /** The next `k` training items from the data cursor (crossing epochs; the cursor advances). */
  take(k: number): TaskItem[];
  /** Sampling options of the step in flight with the seed of (run seed, stage, step, purpose, unit). */
  sampling(n: number, purpose: number, unit?: number): SamplingOptions;
  /**
   * Runs `f`, adding its wall seconds to `phase` of the step's phaseSeconds metric.
   * @throws Error when `phase` is not one of the stage's declared {@link TrainingStage.phases}.
   */
  timed<T>(phase: StepPhase, f: () => Promise<T>): Promise<T>;
  /** Runs this rank's part of a phase; every rank throws together when any rank failed. */
  allRanks<T>(what: string, f: () => Promise<T>): Promise<T>;
  /**
   * {@link allRanks} that also gathers `share(value)` of every rank (rank order) in the same
   * collective as the failure flags: one all-gather instead of two where a phase's results are
   * exchanged right after it (losses, token counts, rewards). One process: `[share(value)]`.
   */
  allRanksGather<T, G>(what: string, f: () => Promise<T>, share: (value: T) => G): Promise<{ value: T; all: G[] }>;
  /** Every rank's value in rank order (one-element list on one process). */
  gather<T>(x: T): Promise<T[]>;
  /** Sum over ranks; a non-finite value on any rank stays non-finite. */
  sumRanks(x: number): Promise<number>;
  /** The update (loss + backward micro-batch loop) with out-of-memory recovery (halve the micro-batch, then recompute). */
  updateWithOomRecovery<T>(stage: Stage, body: (microBatch: number) => Promise<T>): Promise<T>;
  /** Judge health of `rewards`; throws JudgeHealthError past `judge.maxNullRate`. */
  checkJudgeHealth(rewards: RewardResult[], what: string): JudgeHealth | undefined;
  /** A line of the run log (optional: absent in stage tests). */
  log?(line: string): void;
}

/** Quantities every stage's memory estimate shares (lib/train/memory-plan.ts estimatePhases; bytes, tokens). */
export interface MemoryTerms {
  /** Resident bytes: weights, LoRA state, adapter snapshots, the per-forward cast. */
  R: number;
  /** KV cache bytes per token. */
  kv: number;
  /** Sampler bytes of `rows` decode rows (fp32 logits, softmax, sort). */
  sampler(rows: number): number;
  /** No-grad forward bytes per token. */
  fwd: number;
  /** Longest student sequence (prompt + max new tokens), tokens. */
  Ls: number;
  /** Longest teacher sequence, tokens. */
  Lt: number;
  /** The merged adapter weights a rollout holds (0 without mergeAdapter). */
  merged: number;
}

/**
 * A stage's part of the GPU memory plan (lib/train/memory-plan.ts; the formulas are
 * lib/train/memory-model.ts). Every byte count is a peak allocated size.
 */
export interface StageMemory {
  /** Its section of the plan's inputs, read from the config (`{ grpo: { groupSize, … } }`). */
  inputs(cfg: TrainConfig): Partial<PlanInputs>;
  /** Adapter snapshots the stage holds, 4·P bytes each (GRPO's stage-start reference, OPSD's EMA teacher). */
  adapterSnapshots?(x: PlanInputs): number;
  /** Expected peak bytes of the stage's phases under the settings `st`. */
  phases(x: PlanInputs, st: PlanSettings, t: MemoryTerms): Partial<Record<PlanPhase, number>>;
  /**
   * The update micro-batch the plan chooses (halving from the configured one until the update fits;
   * the plan holds it as `microBatch[<stage name>]`): the configured value, and the update's bytes
   * above resident for `rows` sequences. Stages without it update in one call.
   */
  microBatch?: {
    configured(x: PlanInputs): number;
    updateBytes(x: PlanInputs, rows: number, recompute: boolean, t: MemoryTerms): number;
  };
  /** Rollouts: the most rows one step samples, the unit rows come in (GRPO: whole groups), and any other call batched by the same rows that must fit. */
  rollout?: { maxRows(x: PlanInputs): number; unit(x: PlanInputs): number; fits?(x: PlanInputs, rows: number, t: MemoryTerms, limit: number): boolean };
  /** The phase the stage's rollouts are judged beside (grpo.judgeOverlap): the local judge's memory is planned with it. */
  judgedRollout?: PlanPhase;
  /** The setting that puts the local judge beside that rollout (`auto` is decided by the plan on CUDA): read and, once decided, set. */
  judgeOverlap?: { get(cfg: TrainConfig): 'auto' | 'on' | 'off'; set(cfg: TrainConfig, v: 'on' | 'off'): void };
  /**
   * For the out-of-memory advice (memory-plan.ts flagsThatFit): the stage's smallest update
   * setting, one halving of its step's size (undefined at 1) and the flags that give `x`'s values.
   */
  advice?: { smallest(x: PlanInputs): Partial<PlanInputs>; shrink(x: PlanInputs): Partial<PlanInputs> | undefined; flags(x: PlanInputs): string[] };
}

/**
 * One training stage: its step, its section of the training config — `cfg[name]` (YAML `<name>:`,
 * flags `--<name>-…`) — and its part of the memory plan. The section's rows: a stage's own
 * `settings` (keys relative to the section, lib/config/extensions.ts StageSettings; the built-in
 * stages' rows are the core rows `sft.*`, `opsd.*`, `grpo.*` of lib/config/settings.ts), and the
 * rules that tie them together, `settingsProblems`.
 */
export interface TrainingStage extends StageSettings {
  readonly name: Stage;
  /** The update micro-batch (out-of-memory recovery halves it; the memory plan chooses it), absent when the update is one call. */
  readonly microBatch?: { get(cfg: TrainConfig): number; set(cfg: TrainConfig, n: number): void };
  /** Config keys of the stage a resumed run may change (lib/config/train.ts resumableKeys). */
  readonly resumableKeys: readonly string[];
  /** Its part of the memory plan. */
  readonly memory: StageMemory;
  /**
   * The stage judges its rollouts through `ctx.reward` (GRPO): from its own section, the weight α
   * of r_spec in its reward r = α·r_spec + (1 − α)·r_gen (paper §3, lib/judge/rewards.ts
   * mixReward) and how long one step may wait on the judge (ms from the step's first reward call;
   * 0 = no deadline), with that deadline's setting as messages name it. Absent: the stage calls no judge.
   */
  readonly judging?: { alpha(cfg: TrainConfig): number; stepTimeoutMs(cfg: TrainConfig): number; readonly stepTimeoutSetting: string };
  /**
   * Its step's rows × length with the dataset's longest prompts `longest` (lib/train/input-checks.ts
   * stepTokenProblems bounds the product by MAX_TOKENS_PER_STEP before the first step). Absent: the
   * step is not bounded there.
   */
  stepTokens?(cfg: TrainConfig, longest: LongestPrompts): StepTokens;
  /**
   * The stage trains on the rows' reference answers (SFT): a run with it (and steps > 0) tokenizes
   * them and checks student prompt + answer against the model's context before the first step
   * (lib/train/run.ts, checkRowLengths `encodeAnswers`). Absent: false.
   */
  readonly trainsOnReferenceAnswers?: boolean;
  /**
   * Fills keys a checkpoint written before they existed lacks, in place (old checkpoints load):
   * `saved` is the checkpoint's config.
   */
  upgradeSaved?(saved: TrainConfig): void;
  /**
   * The phases its step times through `ctx.timed` (GRPO: rollout, judge, reference, update; OPSD:
   * rollout, update; SFT: update). Every step line of the stage carries these, then `allreduce`
   * (data parallel), `optimizer`, `checkpoint` and `host`, in that order, 0 when a phase did not run.
   */
  readonly phases: readonly StepPhase[];
  /** Steps of the stage (its config section's `steps`). */
  steps(cfg: TrainConfig): number;
  /** Peak learning rate of the stage's fresh AdamW. */
  lr(cfg: TrainConfig): number;
  /** Validation patience: the stage ends after validation fell this many times in a row (0 = never). */
  earlyStopPatience?(cfg: TrainConfig): number;
  /** At the stage's first step (not on a resume inside it), after the optimizer is reset. */
  begin?(ctx: StageContext): void;
  /** One step: rollouts / rewards as the stage needs, the update's gradients accumulated. */
  step(ctx: StageContext): Promise<StepResult>;
  /** After the optimizer step; `skipped` when the update was not applied (non-finite loss or gradient). */
  afterStep?(ctx: StageContext, skipped: boolean): void;
}

/** A number for a JSON all-gather: non-finite → null (JSON has no NaN / Infinity); see {@link sumFinite}. */
export function finiteOrNull(x: number): number | null {
  return Number.isFinite(x) ? x : null;
}
/** Sum of gathered {@link finiteOrNull} values: NaN when any rank's was non-finite (the step is then skipped). */
export function sumFinite(xs: (number | null)[]): number {
  return xs.reduce<number>((a, v) => a + (v === null ? NaN : v), 0);
}

export function mean(xs: number[]): number {
  return xs.length ? xs.reduce((a, b) => a + b, 0) / xs.length : NaN;
}
export function std(xs: number[]): number {
  if (xs.length < 2) return 0;
  const m = mean(xs);
  return Math.sqrt(xs.reduce((a, b) => a + (b - m) ** 2, 0) / (xs.length - 1));
}
export function chunks<T>(xs: T[], size: number): T[][] {
  const out: T[][] = [];
  for (let i = 0; i < xs.length; i += size) out.push(xs.slice(i, i + size));
  return out;
}

/**
 * `xs` reordered longest first by `len` (stable: equal lengths keep their order). Micro-batches cut
 * from it hold sequences of similar length, so the right padding each micro-batch is computed on
 * (rows × its longest row) stays small — length-bucketed micro-batches; and the first micro-batch
 * is the largest, so an out-of-memory shows at the first one. The losses are sums over sequences
 * with step-global normalisers (native/loss/*), so the order of micro-batches changes no loss term.
 */
export function longestFirst<T>(xs: T[], len: (x: T) => number): T[] {
  return xs
    .map((x, i) => ({ x, i, n: len(x) }))
    .sort((a, b) => b.n - a.n || a.i - b.i)
    .map((e) => e.x);
}
