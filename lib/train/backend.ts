/**
 * The training loop's view of the model: every native call the schedule makes goes through
 * this interface (implemented over the addon in lib/train/native-backend.ts). Token ids are plain
 * numbers; logprobs are natural-log probabilities (nats) of each completion token under
 * softmax(logits / T) over the full vocabulary, T the sampling temperature (docs/design.md §4–5).
 */
import type { ChatMessage } from '../llm/messages.js';
import type { ProfileResult, SamplingSettings } from '../addon.js';
import type { DiagnosedToken } from './token-divergence.js';

export interface Rollout {
  /** Index of the prompt in the generate() call. */
  promptIndex: number;
  /** Completion token ids, stop token included when finishReason is 'stop'. */
  tokenIds: number[];
  /** Per completion token, log p(token) under softmax(logits / T), nats. */
  logprobs: number[];
  text: string;
  finishReason: 'stop' | 'length';
}

/** One sequence of a training batch: prompt ids followed by completion ids. */
export interface Sequence {
  promptIds: number[];
  completionIds: number[];
}

/** A rollout's sampling: every field given (lib/addon.ts SamplingParams). */
export type SamplingOptions = SamplingSettings<'n' | 'temperature' | 'topP' | 'topK' | 'maxNewTokens' | 'seed'>;

export interface GrpoLossOptions {
  epsLow: number;
  epsHigh: number;
  /** Weight of the k3 KL penalty (grpo.klCoef, --kl-coef). */
  klCoef: number;
  temperature: number;
  aggregation: 'grpo' | 'dapo' | 'dr_grpo';
  /** Normalisers spanning the whole optimizer window (docs/design.md §5). */
  totalSequences: number;
  totalCompletionTokens: number;
  maxCompletionLength: number;
}

/** Training state held in host memory by {@link TrainBackend.captureState}. */
export interface CapturedState {
  /** Host bytes held. */
  readonly bytes: number;
  /** Writes the files saveState writes into `dir` (created if missing); may run while the next step trains. */
  save(dir: string): Promise<void>;
  /** Frees the host copy (after the save, or when it is abandoned). */
  release(): void;
}

export interface TrainBackend {
  /** Chat-rendered prompt (generation prompt appended) as token ids. */
  promptIds(messages: ChatMessage[]): Promise<number[]>;
  /** An assistant answer as completion ids: its tokens followed by the end-of-turn id (SFT targets). */
  answerIds(text: string): Promise<number[]>;
  /**
   * Samples `n` completions per prompt with the active adapter. `onGroup` (optional; a backend may
   * never call it): a prompt's n rollouts (final, the same as in the result) as soon as they all
   * finished while other rows still sample, at most once per prompt, never after the returned
   * promise settled; groups it does not report come only with the result.
   */
  generate(prompts: number[][], opts: SamplingOptions, onGroup?: (promptIndex: number, group: Rollout[]) => void): Promise<Rollout[]>;
  /** Per-token logprobs of each completion at temperature T under `adapter`. */
  completionLogprobs(seqs: Sequence[], temperature: number, adapter: 'active' | 'none' | string): Promise<number[][]>;
  /**
   * OPSD micro-batch: student forward (grad) on student prompt + completion, teacher forward
   * (no grad; `teacher` adapter) on teacher prompt + the same completion; fused JSD summed over
   * completion tokens / normalizer; grads accumulate. Returns the micro-batch's share of the loss.
   */
  opsdBackward(
    batch: { student: Sequence; teacher: Sequence }[],
    opts: { jsdBeta: number; temperature: number; normalizer: number; teacher: 'none' | 'active' | string },
  ): Promise<{ loss: number }>;
  /**
   * OPSD's per-token diagnostics for `batch` (no grad; lib/train/token-divergence.ts): per completion
   * token its id, decoded text, JSD_β between the student's (active adapter, student prompt) and the
   * teacher's (`teacher` adapter, teacher prompt) next-token distributions at `temperature`, and
   * whether their top tokens agree. Costs a student and a teacher forward with full logits per row.
   * Optional: without it no token diagnostics are logged.
   */
  opsdTokenDiagnostics?(
    batch: { student: Sequence; teacher: Sequence }[],
    opts: { jsdBeta: number; temperature: number; teacher: 'none' | 'active' | string },
  ): Promise<DiagnosedToken[][]>;
  /**
   * GRPO micro-batch (fused loss, docs/design.md §5); grads accumulate. `tokenWeights` (optional,
   * one per completion token, ≥ 0): the rollout correction's importance weights, applied as the
   * per-token advantage w_t·A (lib/train/rollout-correction.ts). Returns the trainer's logprobs of
   * each completion's tokens at this update (`logprobs`, when the backend has them).
   */
  grpoBackward(
    batch: { seq: Sequence; oldLogprobs: number[]; refLogprobs: number[]; advantage: number; tokenWeights?: number[] }[],
    opts: GrpoLossOptions,
  ): Promise<{ loss: number; meanKl: number; clipFraction: number; logprobs?: number[][] }>;
  /** SFT window: mean next-token cross-entropy over all completion tokens of `batch`; grads accumulate. */
  sftBackward(batch: Sequence[]): Promise<{ loss: number }>;
  /**
   * AdamW step with global grad-norm clipping; returns the pre-clip norm and the scheduled lr;
   * skips the update (skipped = true) when the norm is not finite; zeroes grads.
   */
  optimizerStep(maxGradNorm: number): Promise<{ gradNorm: number; lr: number; skipped: boolean }>;
  /** Drops accumulated grads (a skipped step). */
  zeroGrad(): void;
  /**
   * A fresh AdamW for a stage (peak lr, schedule over totalSteps) over the current adapter; when
   * loadState stashed optimizer state (resume), it is restored into the new optimizer.
   */
  resetOptimizer(lr: number, totalSteps: number): void;
  snapshotAdapter(name: string): void;
  /** EMA update of a snapshot toward the active adapter: s ← d·s + (1 − d)·a. */
  emaUpdate(name: string, decay: number): void;
  /** Writes adapter (PEFT), optimizer state and snapshots into `dir`. */
  saveState(dir: string): Promise<void>;
  /**
   * Copies what saveState writes into host memory and resolves once the copy is complete (the
   * device state may change from then on); the result's `save(dir)` writes the same files as
   * saveState later, beside the next step (checkpoints off the critical path, issue 36). Optional:
   * without it the trainer writes checkpoints in the step (saveState).
   */
  captureState?(): Promise<CapturedState>;
  /** Restores adapter and snapshots from `dir`; optimizer state is applied at resetOptimizer. */
  loadState(dir: string): Promise<void>;
  /**
   * Writes the active adapter alone (PEFT files) into `dir`: a stage's best state, `best/<stage>/`.
   * Optional: without it the trainer writes saveState's files there.
   */
  saveAdapter?(dir: string): Promise<void>;
  /**
   * Makes the adapter of `dir` (written by saveAdapter) the active one, nothing else (no optimizer
   * state, no snapshots): the stage's best state taken up at its end. Optional, with saveAdapter.
   */
  loadAdapter?(dir: string): Promise<void>;
  /** Seeds dropout RNG for the step. */
  seedStep(seed: number): void;
  memory(): Record<string, number>;
  /** After an out-of-memory error: release cached device blocks; returns the peak allocated bytes reached (NaN if unknown). Optional. */
  releaseMemory?(): number;
  /** Turns activation recompute (per-layer gradient checkpointing) on or off. Optional. */
  setRecompute?(on: boolean): void;
  /** Starts a kernel profile of the device work until profileStop (the trainer's --profile-step). Optional. */
  profileStart?(): void;
  /** Stops it: GPU µs by kernel (ProfileResult). Optional, with profileStart. */
  profileStop?(): ProfileResult;
}
