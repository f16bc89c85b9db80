/**
 * AdamW over LoRA parameters (or any list of float tensors, for tests), global grad-norm clipping
 * and learning-rate schedules (native/optim/adamw.h).
 *
 * AdamW follows torch.optim.AdamW (decoupled weight decay, default 0; bias-corrected moments):
 *   p ← p(1 − lr·wd);  m ← lerp(m, g, 1−β1);  v ← β2 v + (1−β2) g²;
 *   p ← p − lr/(1−β1ᵗ) · m / (√v/√(1−β2ᵗ) + eps).
 * Clipping follows torch.nn.utils.clip_grad_norm_ (total L2 norm of all grads; scale
 * min(1, max/(total + 1e-6))); the pre-clip norm is returned.
 * Schedules follow transformers' get_{constant,linear,cosine}_schedule_with_warmup: the k-th
 * optimizer step (k = 0, 1, …) uses lr·f(k), f(k) = k / max(1, W) for k < W, then 1 (constant),
 * max(0, (N − k)/max(1, N − W)) (linear), or max(0, ½(1 + cos(π·2c·(k − W)/max(1, N − W)))) with
 * c = 0.5 (cosine).
 */
import { native, type JsTensor } from '../native.js';
import type { AddonAdamW, AddonModel, AdamWOptions, AdamWStepResult as StepResult, HostState, OptimizerState, Schedule } from '../addon.js';

export type { Schedule, AdamWOptions, AdamWStepResult as StepResult } from '../addon.js';

/**
 * A copy of the optimizer state for inspection: moments as `exp_avg.<name>` / `exp_avg_sq.<name>`
 * + step. The state is saved and restored only through {@link AdamW.saveState} /
 * {@link AdamW.loadStateFile} (native, off the JS thread).
 */
export type { OptimizerState } from '../addon.js';

/**
 * AdamW over a Model's LoRA parameters (`new AdamW(model, opts)`; grads come from the model's
 * backward steps; the model's lock is held during step/zeroGrad) or over copies of JS tensors
 * (`new AdamW([t0, t1], opts)`; set grads with setGrads, read with params()).
 * @throws TypeError on bad options or arguments.
 */
export class AdamW {
  private readonly n: AddonAdamW;
  constructor(paramsOrModel: JsTensor<Float32Array | Float64Array>[] | AddonModel, opts: AdamWOptions = {}) {
    this.n = new (native().AdamW)(paramsOrModel, opts);
  }
  /** One update; clips to maxGradNorm first when > 0. Parameters without a gradient are skipped. */
  step(o: { maxGradNorm?: number; skipNonFinite?: boolean } = {}): StepResult {
    return this.n.step(o);
  }
  /** Drops all gradients. */
  zeroGrad(): void {
    this.n.zeroGrad();
  }
  /** Sets the gradients (tensor-list optimizers only); null leaves a parameter without a gradient. */
  setGrads(g: (JsTensor<Float32Array | Float64Array> | null)[]): void {
    this.n.setGrads(g);
  }
  /** Current parameter values (copies). */
  params(): JsTensor<Float32Array | Float64Array>[] {
    return this.n.params();
  }
  /** A copy of the moments and step count (inspection and tests; checkpoints use saveState). */
  state(): OptimizerState {
    return this.n.state();
  }
  /**
   * Writes the state to a safetensors file (atomic temp + rename) on a worker thread: F32 tensors
   * `exp_avg.<name>`, `exp_avg_sq.<name>`, `__metadata__` {format: 'pt', optimizer: 'adamw',
   * step}. Bit-exact for float32 parameters (LoRA); float64 moments are rounded to F32. Saved next
   * to the adapter in checkpoints (`optimizer.safetensors`). A model optimizer holds the model lock
   * while it copies the moments.
   */
  saveState(path: string): Promise<void> {
    return this.n.saveState(path);
  }
  /**
   * The state saveState writes, copied to host memory (pinned on CUDA) under the model lock;
   * `HostState.save(path)` writes the identical file later, on a worker thread without the lock.
   */
  captureState(): Promise<HostState> {
    return this.n.captureState();
  }
  /**
   * Restores a file written by saveState (also the `optimizer.safetensors` of checkpoints written by
   * earlier versions: same tensors, `__metadata__` {format, step}); rejects (ERR_PG_INPUT, naming
   * the file and the tensor) on a name/shape mismatch, leaving the state unchanged.
   */
  loadStateFile(path: string): Promise<void> {
    return this.n.loadStateFile(path);
  }
  /** Learning rate the next step will use. */
  get lr(): number {
    return this.n.lr;
  }
  get stepCount(): number {
    return this.n.stepCount;
  }
  get names(): string[] {
    return this.n.names;
  }
}

/** lr·f(step) for a schedule (see the module docstring). */
export function lrAt(schedule: Schedule & { lr: number }, step: number): number {
  return native().lrAt(schedule, step);
}
