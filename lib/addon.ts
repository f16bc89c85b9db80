/**
 * The typed surface of the native addon (`papergym_native.node`): every function and class it
 * exports, with argument and result shapes, declared once. `native()` (lib/native.ts) returns an
 * {@link Addon}; test/addon-surface.test.ts checks that every name declared here exists on the
 * loaded binary and that the binary exports nothing undeclared.
 *
 * Where each part is registered (C++): runtime functions native/napi/runtime.cc; `Model`
 * native/napi/model.cc; losses and advantages native/napi/loss.cc, the model-integrated
 * steps native/napi/model_steps.cc; `AdamW` and `lrAt` native/napi/optim.cc; generation and
 * the decode engine native/napi/generate.cc; safetensors native/napi/io.cc; process groups
 * native/napi/dist.cc; `napiVersion` native/napi/addon.cc.
 *
 * Tensors cross the boundary as {@link JsTensor} `{data, shape}` (row-major, `data.length` =
 * product of `shape`). The addon reads Float32Array, Float64Array, Int32Array, BigInt64Array and
 * Uint8Array (copied, so the caller may reuse the buffer at once) and returns float16 / bfloat16 /
 * float32 as Float32Array, float64 as Float64Array, int32 / int64 as Int32Array, bool / uint8 as
 * Uint8Array.
 *
 * Errors (see lib/errors.ts): a bad argument throws (or rejects with) a TypeError with code
 * `ERR_PG_ARG` naming it, before any work is queued; bad data `ERR_PG_INPUT`; out of memory
 * `ERR_PG_OOM`; cancellation `ABORT_ERR`; a disposed model `ERR_PG_DISPOSED`. Promise-returning
 * calls run on a libuv worker thread, so the event loop stays free; calls on one model hold the
 * model's lock: exclusively (training steps, adapter and weight changes, forward, dispose), or
 * shared for the read-only inference calls `generate`, `sequenceLogprobs` and `prefixLogprobs`,
 * which therefore run concurrently with each other (e.g. a judge scoring while a rollout decodes;
 * on CUDA each on its own thread's stream).
 */

// ---------------------------------------------------------------------------------------------
// Tensors
// ---------------------------------------------------------------------------------------------

/** The typed arrays the addon reads. */
export type TensorData = Float32Array | Float64Array | Int32Array | BigInt64Array | Uint8Array;

/** A dense row-major tensor crossing the JS/native boundary: `data.length` = product of `shape`. */
export interface JsTensor<T extends TensorData = Float32Array> {
  data: T;
  shape: number[];
}

/** float32 or float64 values (float64 inputs keep float64 math where the docs say so). */
export type FloatTensor = JsTensor<Float32Array | Float64Array>;
/** Token ids: Int32Array or BigInt64Array. */
export type IdTensor = JsTensor<Int32Array | BigInt64Array>;
/** Token ids or 0/1 masks (integer types only; e.g. `attentionMask` of `Model.forward`). */
export type IntTensor = JsTensor<Int32Array | BigInt64Array | Uint8Array>;
/** A 0/1 mask read as float by the loss steps: any numeric type. */
export type MaskTensor = JsTensor<Float32Array | Float64Array | Int32Array | Uint8Array>;
/** Any tensor the addon reads. */
export type AnyTensor = JsTensor<TensorData>;
/** Any tensor the addon returns (int64 comes back as Int32Array). */
export type OutputTensor = JsTensor<Float32Array | Float64Array | Int32Array | Uint8Array>;

// ---------------------------------------------------------------------------------------------
// Runtime (native/napi/runtime.cc)
// ---------------------------------------------------------------------------------------------

/** Facts of the loaded libtorch build (see `doctor`). */
export interface RuntimeInfo {
  libtorchVersion: string;
  libtorchPath: string;
  cxx11Abi: boolean;
  /** Compiled with CUDA headers (CUDA graphs, allocator statistics). */
  cudaBuild: boolean;
  /** The build holds the own CUDA kernels (fused loss rows; needs a CUDA compiler at build time). */
  fusedKernels: boolean;
  cudaAvailable: boolean;
  /** `name`, `totalMemoryBytes` and `computeCapability` only in CUDA builds. */
  cudaDevices: { index: number; name?: string; totalMemoryBytes?: number; computeCapability?: string }[];
  numThreads: number;
  parallelInfo: string;
}

/** A kernel profile (`native().profileStop()`), times in microseconds. */
export interface ProfileResult {
  /** GPU activities grouped by name (kernels, copies, sets), most total time first, at most `top`:
   * calls, and their total / mean / longest duration in µs. */
  kernels: { name: string; count: number; totalUs: number; meanUs: number; maxUs: number }[];
  /** Sum of every recorded activity's duration, µs (overlapping activities count twice). */
  gpuUs: number;
  /** Union of the activities' intervals: time some GPU work ran, µs (≤ gpuSpanUs). */
  gpuBusyUs: number;
  /** First activity's start to the last one's end, µs. */
  gpuSpanUs: number;
  /** GPU activities recorded (0 on a machine without a GPU). */
  events: number;
}

/** CUDA caching-allocator statistics of one device, bytes. */
export interface CudaMemoryStats {
  allocatedBytes: number;
  reservedBytes: number;
  peakAllocatedBytes: number;
  peakReservedBytes: number;
}

// ---------------------------------------------------------------------------------------------
// Model (native/napi/model.cc)
// ---------------------------------------------------------------------------------------------

/** 'cpu', 'cuda' (= cuda:0) or 'cuda:N'. */
export type Device = 'cpu' | 'cuda' | `cuda:${number}`;
/** Weight dtype of a model (the addon also reads the aliases fp32 / bf16 / fp16). */
export type Dtype = 'float32' | 'bfloat16' | 'float16';
/**
 * The seven decoder projections LoRA may target (all supported architectures; peft's module names),
 * listed once on the TypeScript side: the settings' choices, the model's default targets and the
 * memory plan's shapes read this list.
 */
export const LORA_TARGETS = ['q_proj', 'k_proj', 'v_proj', 'o_proj', 'gate_proj', 'up_proj', 'down_proj'] as const;
export type LoraTarget = (typeof LORA_TARGETS)[number];
/**
 * Which adapter a forward uses: 'active' (the trainable adapter, unless disabled), 'none' (the
 * frozen base: reference policy, local judge), or the name of a snapshot (`snapshotAdapter`).
 */
export type AdapterChoice = 'active' | 'none' | (string & {});

/** Options of `Model.load`. */
export interface LoadOptions {
  /** Default 'cpu'. */
  device?: Device;
  /** Default 'bfloat16' on CUDA, 'float32' on CPU. */
  dtype?: Dtype;
  /**
   * Weights holding NaN or ±Inf (checked on the device, in `dtype`, one reduction per tensor):
   * false (default) rejects with `ERR_PG_INPUT` naming the shard and the tensors; true loads them
   * and emits a process warning (code `PG_NON_FINITE_WEIGHTS`) naming them.
   */
  allowNonFinite?: boolean;
}

/** LoRA settings (PEFT's LoraConfig). */
export interface LoraOptions {
  /** Rank r ≥ 1. */
  r: number;
  /** LoRA alpha > 0; scaling = alpha / r (or alpha / √r with useRslora). */
  alpha: number;
  /** Dropout on the LoRA branch input, in [0, 1); only active in training calls. Default 0. */
  dropout?: number;
  /** rsLoRA scaling alpha / √r (Kalajdzievski 2023). Default false. */
  useRslora?: boolean;
  /** Default all seven projections. */
  targetModules?: LoraTarget[];
  /** Seed of A's initialisation (CPU generator), integer ≥ 0. Default 0. */
  seed?: number;
}

/** The active adapter's settings as `loraConfig()` reports them. */
export interface LoraConfig {
  r: number;
  alpha: number;
  dropout: number;
  useRslora: boolean;
  /** alpha / r, or alpha / √r with rsLoRA. */
  scaling: number;
  targetModules: LoraTarget[];
}

/** Arguments of `Model.forward`. */
export interface ForwardArgs {
  /** Token ids `[B, T]` (Int32Array or BigInt64Array), B, T ≥ 1. */
  inputIds: IdTensor;
  /** `[B, T]`, 1 = token, 0 = padding (right or left); integer types. Default all ones. */
  attentionMask?: IntTensor;
  /** Default ['logits']. */
  outputs?: ('logits' | 'hidden')[];
  /** Default 'active'. */
  adapter?: AdapterChoice;
}

/** Result of `Model.forward` (the requested outputs only). */
export interface ForwardResult {
  /** `[B, T, V]` float32 (lm_head matmul in the model dtype, fp32 accumulate). */
  logits?: JsTensor<Float32Array>;
  /** Final-norm hidden states `[B, T, H]`, converted to float32. */
  hidden?: JsTensor<Float32Array>;
}

/** Arguments of `Model.crossEntropyBackward`. */
export interface CrossEntropyArgs {
  inputIds: IdTensor;
  attentionMask?: IntTensor;
  /** `[B, T]` integer labels, -100 = ignored; logits at t predict labels[t + 1] (transformers' convention). */
  labels: IntTensor;
  adapter?: AdapterChoice;
}

/**
 * A loaded model (Hugging Face `Qwen3ForCausalLM`, `Qwen2ForCausalLM`, `LlamaForCausalLM`) with
 * PEFT LoRA adapters: the native `Model` object. Other native calls (generation, loss steps,
 * AdamW, process groups) take it as their model argument. Any call after `dispose()` throws
 * `ERR_PG_DISPOSED`.
 */
export interface AddonModel {
  /** Parsed config.json. */
  readonly config: Record<string, unknown>;
  /** 'cpu' | 'cuda:N'. */
  readonly device: string;
  readonly dtype: Dtype;
  readonly disposed: boolean;
  /** Decoder forward over a (right- or left-) padded batch; no grad. */
  forward(args: ForwardArgs): Promise<ForwardResult>;
  /**
   * Same logits as {@link forward} (`[B, T, V]` float32), computed `chunk` tokens at a time
   * through a preallocated KV cache (the prefill/decode path of generation). For tests.
   */
  forwardChunked(args: ForwardArgs & { chunk: number }): Promise<{ logits: JsTensor<Float32Array> }>;
  /** Creates (replaces) the trainable adapter: A `[r, in]` kaiming-uniform (a = √5), B `[out, r]` = 0, float32. */
  addLora(opts: LoraOptions): void;
  hasLora(): boolean;
  /** false: 'active' forwards run the frozen base (reference policy / judge) without a copy. */
  setAdapterEnabled(enabled: boolean): void;
  adapterEnabled(): boolean;
  /** The active adapter's settings, or null without one. */
  loraConfig(): LoraConfig | null;
  /** Frozen deep copy of the active adapter, selectable as `adapter: name` ('active' and 'none' are reserved). */
  snapshotAdapter(name: string): void;
  dropSnapshot(name: string): void;
  /** EMA of snapshot `name` toward the active adapter, in place on the device: s ← d·s + (1 − d)·a (native/lora/snapshots.h). */
  emaUpdate(name: string, decay: number): void;
  /** Writes snapshot `name` as safetensors (PEFT keys, F32) on a worker thread. */
  saveSnapshot(name: string, path: string): Promise<void>;
  /** Reads a file written by saveSnapshot into snapshot `name` (shapes of the active adapter) on a worker thread. */
  loadSnapshot(name: string, path: string): Promise<void>;
  /** Writes `adapter_model.safetensors` + `adapter_config.json` (PEFT format) into `dir` atomically (created if missing). */
  saveAdapter(dir: string, opts?: { baseModelName?: string }): Promise<void>;
  /**
   * The active adapter copied to host memory (float32; pinned, asynchronous copies and one wait on CUDA) under the
   * model lock; `HostState.save(dir, {baseModelName})` then writes the files saveAdapter writes, without the lock.
   */
  captureAdapter(): Promise<HostState>;
  /** Snapshot `name` copied to host memory; `HostState.save(path)` writes the file saveSnapshot writes. */
  captureSnapshot(name: string): Promise<HostState>;
  /**
   * Loads a PEFT LoRA adapter as the active (trainable) adapter; `ERR_PG_INPUT` naming file and key on a mismatch, and
   * naming the tensors when a lora_A / lora_B holds NaN or ±Inf unless `allowNonFinite` (then a process warning, code
   * `PG_NON_FINITE_WEIGHTS`).
   */
  loadAdapter(dir: string, opts?: { allowNonFinite?: boolean }): Promise<void>;
  /** PEFT keys, sorted by module name, A then B. */
  loraParameterNames(): string[];
  /** float32 copies of A `[r, in]` / B `[out, r]` keyed by PEFT name. */
  loraWeights(): Record<string, JsTensor<Float32Array>>;
  /** Overwrites some or all LoRA tensors (float tensors of the same shapes; TypeError otherwise). */
  setLoraWeights(record: Record<string, FloatTensor>): void;
  /** Accumulated gradients keyed by PEFT name (zeros where none). */
  loraGrads(): Record<string, JsTensor<Float32Array>>;
  /** Drops the accumulated LoRA gradients. */
  zeroGrad(): void;
  /**
   * Mean next-token cross-entropy over label positions ≠ -100 (transformers' causal-LM loss);
   * accumulates its gradient into the LoRA parameters (dropout active).
   */
  crossEntropyBackward(args: CrossEntropyArgs): Promise<{ loss: number }>;
  /** Bytes of base weights + adapters + snapshots (also reported to V8 as external memory). */
  parameterBytes(): number;
  /**
   * Activation recomputation per decoder layer for training calls: each layer keeps only its
   * input `[B, T, H]` and is recomputed in backward. Same gradients (LoRA dropout masks
   * reproduced), less activation memory, one extra layer forward per layer.
   */
  setGradientCheckpointing(on: boolean): void;
  gradientCheckpointing(): boolean;
  /** Blocks until queued CUDA work on the model's device has finished (no-op on CPU); for timing. */
  synchronize(): void;
  /**
   * LoRA branch precision in bfloat16/float16 models. true (default): float32 branch as peft.
   * false: the branch runs in the model dtype (A/B cast per forward; gradients still accumulate
   * into the float32 A/B), like autocast mixed precision. No effect on float32 models.
   */
  setLoraFloat32Branch(on: boolean): void;
  loraFloat32Branch(): boolean;
  /** Frees the weights now (waits for a running call). Idempotent. */
  dispose(): void;
  /** `dispose()`, for `using model = await loadModel(...)` (added by the loader). */
  [Symbol.dispose](): void;
}

/** The `Model` class: instances come from `load` only (the constructor takes a native handle). */
export interface AddonModelClass {
  new (handle: never): AddonModel;
  readonly prototype: AddonModel;
  /** Loads a checkpoint directory (config.json + model.safetensors or a sharded index) off the JS thread. */
  load(dir: string, options?: LoadOptions): Promise<AddonModel>;
}

// ---------------------------------------------------------------------------------------------
// Losses and advantages (native/napi/loss.cc, native/napi/model_steps.cc)
// ---------------------------------------------------------------------------------------------

/** Where a standalone loss runs; `dtype` casts hidden states and weight (e.g. 'bfloat16' on CUDA). */
export interface Placement {
  device?: Device;
  dtype?: Dtype;
}

/** Arguments of `jsdLoss` (shapes: N tokens, H hidden size, V vocabulary). */
export interface JsdArgs extends Placement {
  /** [N, H] student final-norm hidden states (gradient is returned for them). */
  studentHidden?: FloatTensor;
  /**
   * [N, V] student logits instead of hidden + weight (tests of the per-token math, e.g. with −inf
   * logits a matmul cannot produce; needs teacherLogits; returns perToken and gradStudentLogits).
   */
  studentLogits?: FloatTensor;
  /** [N, H] teacher hidden states (no gradient) … */
  teacherHidden?: FloatTensor;
  /** … or [N, V] teacher logits (fused path only). */
  teacherLogits?: FloatTensor;
  /** [V, H] frozen lm_head weight (not with studentLogits). */
  weight?: FloatTensor;
  /** [N] 1 = completion token, 0 = ignored (default all ones). */
  mask?: FloatTensor;
  /**
   * Mixture weight of the teacher, in [0, 1] (default 0.5). JSD_β = β·KL(T‖M) + (1−β)·KL(S‖M),
   * M = β·T + (1−β)·S. β = 0 is forward KL(T‖S), β = 1 is reverse KL(S‖T) (TRL's convention).
   */
  beta?: number;
  /** Softmax temperature τ applied to both logits (default 1). */
  temperature?: number;
  /** Tokens per chunk (0 = automatic ≈ 64 M logits per chunk). */
  chunkSize?: number;
  /** loss = Σ mask·JSD / normalizer; default Σ mask (token mean). Pass the window's token count when accumulating. */
  normalizer?: number;
  /** false = unfused reference. Default true. */
  fused?: boolean;
  /** Compute dLoss/dStudentHidden (default true). */
  grad?: boolean;
}

/** Result of `jsdLoss`. */
export interface JsdResult {
  /** Nats per normalised token. Exactly 0 when student == teacher; ≥ 0 up to rounding. */
  loss: number;
  /** [N, H] (float32, float64 for float64 inputs). */
  gradStudentHidden?: FloatTensor;
  /** With studentLogits: per-token JSD [N] and d loss / d studentLogits [N, V] (loss = mean over N). */
  perToken?: FloatTensor;
  gradStudentLogits?: FloatTensor;
}

/** The three GRPO loss normalisers of TRL. */
export type GrpoAggregation = 'grpo' | 'dapo' | 'dr_grpo';

/** Clipping, KL and aggregation settings shared by `grpoLoss` and `grpoBackward`. */
export interface GrpoOptions {
  /** Lower / upper clip ε (defaults: `epsilon` = 0.2 for both; DAPO uses epsHigh 0.28). */
  epsilon?: number;
  epsLow?: number;
  epsHigh?: number;
  /**
   * k3 KL coefficient (default 0; the training setting grpo.klCoef, `--kl-coef`): the loss adds
   * klCoef · k3 per token, k3 = exp(x) − x − 1, x = clamp(ref − logp, ±20) (Schulman's k3; TRL
   * GRPOConfig.beta). Must be ≥ 0.
   */
  klCoef?: number;
  /**
   * @deprecated the former name of {@link klCoef} (one word per setting, issue 51): still read when
   * klCoef is absent; both given with different values is an error.
   */
  betaKl?: number;
  /** Sampling temperature T: logp = log softmax(logits / T). Default 1. */
  temperature?: number;
  /**
   * 'grpo': Σ_b (Σ_t mask·ℓ / |o_b|) / numSequences; 'dapo' (default): Σ mask·ℓ / numTokens;
   * 'dr_grpo': Σ mask·ℓ / (numSequences · maxCompletionLength) — TRL's three normalisers.
   */
  aggregation?: GrpoAggregation;
  /** Window normalisers (defaults: this call's B, Σ mask, T). Set them when accumulating micro-batches. */
  numSequences?: number;
  numTokens?: number;
  maxCompletionLength?: number;
  /** Tokens per chunk (0 = automatic). */
  chunkSize?: number;
}

/** Arguments of `grpoLoss` (B sequences, T completion positions). */
export interface GrpoArgs extends Placement, GrpoOptions {
  /** [B, T, H] hidden states at the positions that predict `tokens`. */
  hidden: FloatTensor;
  /** [V, H] frozen lm_head weight. */
  weight: FloatTensor;
  /** [B, T] completion token ids. */
  tokens: IdTensor;
  /** [B, T] logprobs of the policy that sampled (at the sampling temperature). */
  oldLogprobs: FloatTensor;
  /** [B, T] reference-policy logprobs (required when klCoef ≠ 0). */
  refLogprobs?: FloatTensor;
  /** [B] per-sequence (or [B, T] per-token) advantages. */
  advantages: FloatTensor;
  /** [B, T] completion mask. */
  mask: FloatTensor;
  fused?: boolean;
  grad?: boolean;
}

/** Metrics of a GRPO loss call. */
export interface GrpoMetrics {
  /** Masked mean of k3 over this call's completion tokens (0 when klCoef = 0). */
  meanKl: number;
  /** Masked token fractions as TRL logs them: low = ρ < 1−ε_low ∧ Â < 0; high = ρ > 1+ε_high ∧ Â > 0; region = either. */
  clipFraction: { low: number; high: number; region: number };
  /** Σ mask of this call (to combine fractions across micro-batches). */
  maskCount: number;
  /** Per-token logprobs under the current policy (detached): [B·T] from grpoLoss, [B, L] from grpoBackward. */
  logprobs: FloatTensor;
}

/** Result of `grpoLoss` / `grpoBackward`. */
export interface GrpoResult extends GrpoMetrics {
  loss: number;
  /** [B, T, H] (grpoLoss with grad). */
  gradHidden?: FloatTensor;
}

/** Arguments of `selectedLogprobs`: hidden [N, H], weight [V, H], tokens [N]. */
export interface SelectedLogprobsArgs extends Placement {
  hidden: FloatTensor;
  weight: FloatTensor;
  tokens: IdTensor;
  temperature?: number;
  chunkSize?: number;
}

/** Arguments of `computeAdvantages` beyond the rewards. */
export interface AdvantageOptions {
  /** Completions per prompt, G (the number of rewards must be a multiple). */
  groupSize: number;
  /** 'group' (std of the group, default), 'batch' (std of all rewards) or 'none' (no scaling, Dr. GRPO). */
  scale?: 'group' | 'batch' | 'none';
  /** Lower bound of the std in the denominator. Default 1e-3 (0 = TRL). */
  stdFloor?: number;
  /** Added to the (floored) std. Default 1e-4 (TRL). */
  eps?: number;
  /** Mark zero-variance groups in `keep` (DAPO dynamic sampling). Default false. */
  dropZeroVariance?: boolean;
}

/** Result of the native `computeAdvantages`. */
export interface AdvantageTensors {
  /** [B]; float32 unless the rewards were Float64Array. */
  advantages: FloatTensor;
  /** [B] 1 = keep, 0 = member of a dropped zero-variance group. */
  keep: JsTensor<Uint8Array>;
  /** [B / G] unbiased group std (0 for equal groups). */
  groupStd: JsTensor<Float64Array>;
}

/** Arguments of `sequenceLogprobs` (B rows of L positions). */
export interface SequenceLogprobsArgs {
  /** [B, L] prompt + completion ids (right padded), L ≥ 2. */
  inputIds: IdTensor;
  /** [B, L] 1 = real token. */
  attentionMask: MaskTensor;
  /** [B, L] 1 at positions whose token's logprob is wanted (completion tokens); default attentionMask. */
  completionMask?: MaskTensor;
  /** > 0; default 1. */
  temperature?: number;
  /** Default 'active'. */
  adapter?: AdapterChoice;
  chunkSize?: number;
}

/** Arguments of `prefixLogprobs`: one shared prefix, n right-padded suffixes, K candidate tokens. */
export interface PrefixLogprobsArgs {
  /** [1, P] ids of the shared prefix, P ≥ 1. */
  prefixIds: IdTensor;
  /** [n, S] suffix ids, right padded. */
  suffixIds: IdTensor;
  /** [n] real length of each suffix, in [1, S]. */
  suffixLengths: IdTensor;
  /** [K] token ids in [0, vocab_size). */
  candidates: IdTensor;
  /** Default 'active'. */
  adapter?: AdapterChoice;
}

/** Arguments of `opsdBackward` (B rows; student rows Ls long, teacher rows Lt long). */
export interface OpsdBackwardArgs {
  /** [B, Ls] student prompt + completion. */
  studentIds: IdTensor;
  studentMask: MaskTensor;
  /** [B, Lt] teacher prompt (question + rubric) + the same completion. */
  teacherIds: IdTensor;
  teacherMask: MaskTensor;
  /** [B] index of the first completion token in each student / teacher row, and [B] completion lengths. */
  studentStart: IdTensor;
  teacherStart: IdTensor;
  completionLength: IdTensor;
  /** JSD mixture weight (see {@link JsdArgs.beta}); default 0.5. */
  beta?: number;
  temperature?: number;
  /** Tokens of the whole optimizer window (Σ completion lengths); default this call's. */
  normalizer?: number;
  /** Teacher adapter: 'none' (fixed teacher, default), 'active' (detached current), or a snapshot (EMA). */
  teacher?: AdapterChoice;
  chunkSize?: number;
}

/** Arguments of `grpoBackward` (B rows of L positions, aligned with inputIds). */
export interface GrpoBackwardArgs extends GrpoOptions {
  /** [B, L] prompt + completion ids, L ≥ 2. */
  inputIds: IdTensor;
  attentionMask: MaskTensor;
  /** [B, L] 1 at completion tokens, 0 at position 0. */
  completionMask: MaskTensor;
  /** [B, L] sampling-time logprobs (values outside completionMask ignored). */
  oldLogprobs: FloatTensor;
  /** [B, L] reference-policy logprobs (required when klCoef ≠ 0). */
  refLogprobs?: FloatTensor;
  /** [B] per-sequence or [B, L] per-token advantages. */
  advantages: FloatTensor;
}

/** Arguments of the benchmark driver `_benchLoss` (random inputs created on the device). */
export interface BenchLossArgs {
  /** 'cpu' | 'cuda' | 'cuda:N' (parsed natively). */
  device?: string;
  /** Cast of hidden states and weight: 'float32' | 'bfloat16' | 'float16' (parsed natively). Default float32. */
  dtype?: string;
  kind: 'jsd' | 'grpo';
  T: number;
  V: number;
  H: number;
  iters?: number;
  chunkSize?: number;
  fused?: boolean;
  /** Only create the inputs (memory baseline). */
  setupOnly?: boolean;
}

// ---------------------------------------------------------------------------------------------
// Optimizer (native/napi/optim.cc)
// ---------------------------------------------------------------------------------------------

/** Learning-rate schedule (transformers' get_{constant,linear,cosine}_schedule_with_warmup). */
export interface Schedule {
  type?: 'constant' | 'linear' | 'cosine';
  /** W: warmup steps (default 0). */
  warmupSteps?: number;
  /** N: total optimizer steps (required for linear / cosine). */
  totalSteps?: number;
  /** Cosine cycles (default 0.5 = one half-cosine to 0). */
  numCycles?: number;
}

/** Options of `new AdamW(...)` (torch.optim.AdamW). */
export interface AdamWOptions {
  /** Peak learning rate (default 1e-5). */
  lr?: number;
  /** Default [0.9, 0.999]. */
  betas?: [number, number];
  /** Default 1e-8. */
  eps?: number;
  /** Decoupled weight decay (default 0). */
  weightDecay?: number;
  schedule?: Schedule;
  /** Names of the tensors (tensor-list optimizers; default '0', '1', …). */
  names?: string[];
}

/** Result of `AdamW.step`. */
export interface AdamWStepResult {
  /** Global L2 norm of the gradients before clipping (NaN/Infinity when non-finite). */
  gradNorm: number;
  /** Learning rate used by this step. */
  lr: number;
  /** Optimizer steps taken so far. */
  step: number;
  /** True when skipNonFinite was set and the norm was not finite (no update made). */
  skipped: boolean;
}

/** A copy of the optimizer state (inspection; saved and restored as a file by saveState / loadStateFile): moments as `exp_avg.<name>` / `exp_avg_sq.<name>` + step. */
export interface OptimizerState {
  step: number;
  tensors: Record<string, FloatTensor>;
}

/**
 * Training state captured in host memory (native/napi/host_state.h), made by `Model.captureAdapter`,
 * `Model.captureSnapshot` or `AdamW.captureState`: a checkpoint's tensors leave the device in one short
 * copy, and are written by a worker thread while the next step runs (issue 36).
 */
export interface HostState {
  /** Writes the captured state (an adapter: PEFT files into dir `target`; else the safetensors file `target`), atomically per file, on a worker thread without the model lock; rejects `ERR_PG_INPUT` naming the path on I/O errors, `ERR_PG_ARG` after release. */
  save(target: string, opts?: { baseModelName?: string }): Promise<void>;
  /** Frees the host memory (a save in flight keeps it until it ends). */
  release(): void;
  /** Host bytes held (0 after release). */
  readonly bytes: number;
  /** 'adapter' | 'snapshot' | 'tensors' | 'released'. */
  readonly kind: string;
}

/** A native AdamW over a model's LoRA parameters (the model's lock held in step/zeroGrad) or over copies of JS tensors. */
export interface AddonAdamW {
  /** One update; clips to maxGradNorm first when > 0. Parameters without a gradient are skipped. */
  step(opts?: { maxGradNorm?: number; skipNonFinite?: boolean }): AdamWStepResult;
  zeroGrad(): void;
  /** Tensor-list optimizers only; null leaves a parameter without a gradient. */
  setGrads(grads: (FloatTensor | null)[]): void;
  /** Current parameter values (copies). */
  params(): FloatTensor[];
  /** A copy of the state for inspection (saveState / loadStateFile is how it is saved and restored). */
  state(): OptimizerState;
  /** safetensors file (atomic): F32 `exp_avg.<name>`, `exp_avg_sq.<name>`, `__metadata__` {format: 'pt', optimizer: 'adamw', step}. */
  saveState(path: string): Promise<void>;
  /** Restores a saveState file; rejects (`ERR_PG_INPUT`) on a mismatch, the state unchanged. */
  loadStateFile(path: string): Promise<void>;
  /** The state saveState writes, copied to host memory; `HostState.save(path)` writes the identical file later. */
  captureState(): Promise<HostState>;
  /** Learning rate the next step will use. */
  readonly lr: number;
  readonly stepCount: number;
  readonly names: string[];
}

/** The `AdamW` class: over a Model's LoRA parameters or over JS float tensors. */
export interface AddonAdamWClass {
  new (params: FloatTensor[] | AddonModel, opts?: AdamWOptions): AddonAdamW;
  readonly prototype: AddonAdamW;
}

// ---------------------------------------------------------------------------------------------
// Generation (native/napi/generate.cc)
// ---------------------------------------------------------------------------------------------

/** Per-row sampling settings: temperature, top-k, top-p, min-p. */
export interface SamplerOptions {
  /** Temperature ≥ 0; 0 = greedy. Default 1. */
  temperature?: number;
  /** Keep the k most likely tokens; 0 = off. Default 0. */
  topK?: number;
  /** Nucleus mass in (0, 1]; 1 = off. Default 1. */
  topP?: number;
  /** Min-p in [0, 1]: keep tokens with p ≥ minP · p_max (after top-k / top-p); 0 = off. Default 0. */
  minP?: number;
}

/**
 * Sampling options of `generate` (and of `Policy.generate`): the one sampling type; the trainer's
 * rollouts, eval's plans and serve's requests are picks of it (`SamplingSettings`).
 */
export interface SamplingParams extends SamplerOptions {
  /** Completions per prompt, ≥ 1 (the prompt is prefilled once and its KV cache rows copied). Default 1. */
  n?: number;
  /** New tokens per completion, ≥ 1; prompt length + maxNewTokens must fit the context. Default 256. */
  maxNewTokens?: number;
  /** Integer seed ≥ 0 (< 2^53). Default: random (returned in the result). */
  seed?: number;
  /** Any of these ends a completion. */
  stopIds?: number[];
  /** Adapter used by every forward. Default 'active'. */
  adapter?: AdapterChoice;
}

/** The sampling fields `K` of {@link SamplingParams}, all given (a caller that fills every default itself). */
export type SamplingSettings<K extends keyof SamplingParams> = Required<Pick<SamplingParams, K>>;

/** A native cancellation flag shared with worker threads (`createAbortHandle`). */
export interface AbortHandle {
  abort(): void;
  aborted(): boolean;
}

/** Arguments of the native `generate`. */
export interface GenerateArgs extends SamplingParams {
  /** Prompts as token ids (no padding), each non-empty; left-padded natively. */
  prompts: (number[] | Int32Array | Uint32Array)[];
  /** Id written into left padding (masked out). Default 0. */
  padId?: number;
  /**
   * Per-prompt settings, one entry per prompt (its n rows share it), each field defaulting to the
   * call's: rows with different settings decode in ONE batch (one forward per step; the sampler
   * applies each row's temperature / topK / topP / minP). When any entry has a `seed`, every row
   * draws from its own generator (sample j of a prompt seeded s: s for j = 0, a mix of (s, j)
   * otherwise; prompts without a seed: a generator derived from the call's seed), so a seeded
   * prompt samples the same ids alone as in any batch. Without seeds all rows draw from the
   * call's generator.
   */
  promptOptions?: (SamplerOptions & { seed?: number; maxNewTokens?: number; stopIds?: number[] })[];
  /** Remove finished rows from the batch once they are at least this fraction of it, (0, 1]. Default 0.125. */
  compactFraction?: number;
  /** Test hook: throw a (simulated) out-of-memory error at this decode step. */
  simulateOomAtStep?: number;
  /**
   * CUDA only: decode with one CUDA-graph replay per step (default true on CUDA builds; env
   * PAPERGYM_NO_CUDA_GRAPHS=1 disables). The graph holds the whole step: the decode forward of the
   * last sampled tokens and, for greedy, full-vocabulary and top-k sampling, the sampler too (its
   * uniforms are drawn up front from the seeded generator, so samples equal the other paths'). With
   * top-p but no top-k the sampler checks a value on the host, so it runs after each replay instead
   * (`samplingInStep: false` in the result).
   */
  cudaGraphs?: boolean;
  /** Decode from a static, full-capacity KV cache (default: on exactly when CUDA graphs are used). */
  staticCache?: boolean;
  /**
   * Static path on CUDA: each row's decode attention reads only its filled KV slots (a split-K
   * "flash decoding" kernel, `decodeAttention: 'live-kv'` in the result), so a step's cost follows
   * the rows' lengths, not the cache capacity; finished rows stop reading KV. Default true; false =
   * the masked attention over every slot (env PAPERGYM_LIVE_KV=0 turns the kernel off everywhere).
   */
  liveKv?: boolean;
  /**
   * Sample from the adapter merged into the base weights: W' = W + scaling·B·A per targeted
   * projection, summed in float32 and rounded once to the model dtype (PEFT `merge_and_unload`;
   * the merged weights that TRL's GRPO serves from vLLM), made once per call and freed when it
   * ends, so the decode step runs no LoRA branch (Qwen3-1.7B shapes, r 64, bf16, batch 64 on an
   * H200: docs/performance.md "Decode"). Holds one extra copy of the targeted weights during the call
   * (≈ 2.8 GB at 1.7B, 14 GB at 8B in bf16). The logprobs are those of the merged weights: in bf16
   * they differ from the teacher-forced forward with the LoRA branch by the rounding of W', so
   * sampled ids can differ from `mergeAdapter: false`. Default false; no effect without an adapter
   * (`adapterMerged` in the result says whether it applied).
   */
  mergeAdapter?: boolean;
  /** Static path: pad the batch up to a power-of-two bucket (padded rows masked). Default: on exactly when CUDA graphs are used (one captured graph per bucket); off on the static path without graphs (CPU). */
  padToBucket?: boolean;
  /**
   * Static path (static cache / CUDA graphs): copy the sampled tokens back to the host and check
   * the stop ids every `syncEvery` decode steps (integer ≥ 1, default 8) instead of after every
   * token, so the device runs ahead without a host round trip per token. Results (tokens,
   * logprobs, finish reasons) do not depend on it; the cost is at most `syncEvery − 1` wasted
   * decode steps after the last row stopped (counted in `steps`). 1 = check after every token.
   * The dynamic path always checks after every token.
   */
  syncEvery?: number;
  /** Cancels before the next decode step (rejects with `ABORT_ERR`). */
  abortHandle?: AbortHandle;
  /**
   * Called on the JS thread with a prompt's group (its n completions, final) as soon as the host
   * sees the last of its rows finish — at the read-back every `syncEvery` tokens on the static
   * path, after every token on the dynamic one — while the other rows still decode: a GRPO trainer
   * judges the group then (the judge hidden behind sampling). At most once per prompt; a group that
   * finishes at the last read-back may be reported after the call resolved or not at all (the
   * result always has every completion), so callers key by `promptIndex`. An error thrown by the
   * callback is dropped here (the decode goes on); `generate` of lib/model/policy.ts wraps the
   * callback and rejects the call with that error once it finished.
   */
  onGroupDone?: (group: { promptIndex: number; completions: RawCompletion[] }) => void;
}

/** One completion of `generate`. */
export interface RawCompletion {
  /** Index into `prompts`. */
  promptIndex: number;
  /** 0 … n−1 within the prompt's group. Completions are ordered by (promptIndex, sampleIndex). */
  sampleIndex: number;
  /** Sampled ids; ends with the stop id when finishReason is 'stop'. */
  tokenIds: Int32Array;
  /** Natural-log probability of each sampled id under softmax(logits / T), full vocabulary, before truncation. */
  logprobs: Float32Array;
  finishReason: 'stop' | 'length';
}

/** Result of `generate`. */
export interface GenerateResult {
  /** prompts.length × n completions, ordered by (promptIndex, sampleIndex): groups are contiguous. */
  completions: RawCompletion[];
  /** The seed used (given or drawn). */
  seed: number;
  /** Sum of prompt lengths (tokens, without padding). */
  promptTokens: number;
  /** Sum of completion lengths (tokens). */
  newTokens: number;
  /** Decode forwards run after the prefill (static path: including up to syncEvery − 1 after the last row stopped). */
  steps: number;
  /** Times finished rows were compacted out of the batch. */
  compactions: number;
  /** Which decode loop ran: 'dynamic' (growing cache, compaction), 'static' or 'cuda-graphs'. */
  decodePath?: 'dynamic' | 'static' | 'cuda-graphs';
  /** Decode attention: 'live-kv' (static path on CUDA: each row reads only its filled KV slots, a split-K kernel) or 'masked'. */
  decodeAttention?: 'live-kv' | 'masked';
  /**
   * Live-KV attention with n > 1: rows per group whose prompt K/V the kernel read once for the
   * whole group (the n completions of one prompt hold copies of one prefill; bf16 / fp16 on sm 80+,
   * keys in whole 64-key splits before the prompt's end, tensor cores), 0 where every row read its
   * own copy (PAPERGYM_DECODE_GROUP_PROMPT=0, float32, n = 1, a prompt under 64 slots).
   */
  decodePromptGroup?: number;
  /** The forwards ran from the merged weights (`mergeAdapter` with an adapter selected). */
  adapterMerged?: boolean;
  /** CUDA graphs captured by this call. */
  graphCaptures?: number;
  /** Rows decoded per step (the bucket size on the static path). */
  batchRows?: number;
  /** Static path: the sampler ran inside the decode step; false with top-p without top-k, and on the dynamic path. */
  samplingInStep?: boolean;
  /** Wall time of the prefill (ms) and of the decode loop (ms). */
  prefillMs: number;
  decodeMs: number;
}

/** Result of `sampleFromLogits`: one token per row, its logprob under log_softmax(logits / T) and
 * the row's uniform draw (inverse-CDF sampling), all [R]. */
export interface SampledTokens {
  tokenIds: Int32Array;
  logprobs: Float32Array;
  uniforms: Float32Array;
  seed: number;
}

/** Options of `sampleFromLogits`: one setting for every row, or `rows` (one per row), the seed of
 * the R uniforms, and the device the sampler runs on ('cpu' default, 'cuda', 'cuda:i'). */
export interface SampleFromLogitsOptions extends SamplerOptions {
  seed?: number;
  rows?: SamplerOptions[];
  device?: string;
}

/** Options of `createDecodeEngine`. */
export interface DecodeEngineOptions {
  /** Rows decoded together at most (default 32). */
  maxRows?: number;
  /** KV slots per row: prompt + maxNewTokens of every row must fit (default min(context, 4096)). */
  capacity?: number;
  /** Id of left padding in the joint prefill (masked). Default 0. */
  padId?: number;
  adapter?: AdapterChoice;
  /** Padded prompt tokens prefilled per step at most (at least one row always joins). Default 8192. */
  maxPrefillTokens?: number;
  /** CUDA: decode each step from a captured CUDA graph (PAPERGYM_NO_CUDA_GRAPHS=1 disables). Default true; ignored on CPU. */
  cudaGraphs?: boolean;
  /** Decode with the static-cache step even without graphs (default: exactly when graphs are used). */
  staticDecode?: boolean;
}

/** One row (one completion) of the decode engine. */
export interface EngineRow extends SamplerOptions {
  /** Caller's id (an integer), unique among live rows. */
  id: number;
  /** Prompt token ids (non-empty). */
  prompt: number[] | Int32Array | Uint32Array;
  /** Integer ≥ 0; default random. */
  seed?: number;
  /** Default 256. */
  maxNewTokens?: number;
  stopIds?: number[];
  /** −1 (default) = no raw logprobs; 0..20 alternatives. */
  topLogprobs?: number;
}

/** One token of one row. */
export interface EngineToken {
  id: number;
  token: number;
  /** log_softmax(logits / T)[token] (greedy: T = 1), as generate() reports. */
  logprob: number;
  /** log_softmax(logits)[token] (rows with topLogprobs ≥ 0). */
  rawLogprob: number;
  /** Most likely ids under log_softmax(logits), descending, and their raw logprobs (topLogprobs > 0). */
  topIds?: Int32Array;
  topLogprobs?: Float32Array;
  /** null while running; 'stop' = a stop id was sampled (it is this token), 'length' = maxNewTokens. */
  finish: 'stop' | 'length' | null;
  /** Prompt length, on the row's first token. */
  promptTokens?: number;
}

/** Result of one engine step. */
export interface EngineStep {
  tokens: EngineToken[];
  /** Live rows after the step, rows still queued, rows that joined (prefilled) in this step. */
  active: number;
  waiting: number;
  joined: number;
  prefillTokens: number;
  /** Rows of the decode forward (0 when only a prefill ran). */
  batchRows: number;
  shifts: number;
  /** CUDA graphs captured in this step. */
  graphCaptures: number;
  prefillMs: number;
  decodeMs: number;
  sampleMs: number;
}

/** The native continuous-batching engine over one model (native/generate/engine.h). */
export interface AddonDecodeEngine {
  readonly maxRows: number;
  readonly capacity: number;
  readonly decodePath: 'dynamic' | 'static' | 'cuda-graphs';
  /** Queues a row; TypeError naming the field on bad input. */
  add(row: EngineRow): void;
  /** Cancels a queued or live row. */
  cancel(id: number): void;
  /** Rows queued, not yet admitted. */
  waiting(): number;
  /** One step on a worker thread; `ERR_PG_INPUT` while another step runs. */
  step(): Promise<EngineStep>;
  /** Frees the KV cache and drops every row; `ERR_PG_INPUT` while a step runs. */
  release(): void;
}

// ---------------------------------------------------------------------------------------------
// Process groups (native/napi/dist.cc)
// ---------------------------------------------------------------------------------------------

/** Options of `distInit`. */
export interface DistInitOptions {
  rank: number;
  worldSize: number;
  /** Default '127.0.0.1'. */
  masterAddr?: string;
  /** Default 29500. */
  masterPort?: number;
  /** Default 'gloo'. */
  backend?: 'gloo' | 'nccl';
  /** 'cpu' (default) or the rank's CUDA device, 'cuda:N'. */
  device?: string;
  /** Collective timeout, ms (default 600000). */
  timeoutMs?: number;
  /** Rendezvous timeout, ms (default 60000). */
  initTimeoutMs?: number;
}

/** Options of the all-reduce collectives. */
export interface ReduceOptions {
  /** Default 'sum'. */
  op?: 'sum' | 'max' | 'min';
  /** Multiplies the reduced values (e.g. 1 / worldSize for a mean). Default 1. */
  scale?: number;
  /** Bucket size, bytes (default 25 MiB, DDP's bucket_cap_mb). */
  bucketBytes?: number;
}

/** A c10d process group (Gloo or NCCL); every collective runs off the JS thread and names the missing peers on failure. */
export interface AddonProcessGroup {
  readonly rank: number;
  readonly worldSize: number;
  readonly backend: 'gloo' | 'nccl';
  /** Reduced copies of `tensors`, each in its input dtype (int64 as Int32Array). */
  allReduce(tensors: AnyTensor[], opts?: ReduceOptions): Promise<OutputTensor[]>;
  /** In place on the LoRA gradients (a missing grad counts as zeros), each multiplied by `preScale` first. */
  allReduceGrads(model: AddonModel, opts?: ReduceOptions & { preScale?: number }): Promise<{ buckets: number; tensors: number; bytes: number }>;
  /** `root`'s values of `tensors` (same shapes on every rank). */
  broadcast(tensors: AnyTensor[], opts?: { root?: number }): Promise<OutputTensor[]>;
  /** LoRA weights from `root` into every rank's model, in place. */
  broadcastParams(model: AddonModel, opts?: { root?: number }): Promise<void>;
  /** Every rank's string, in rank order. */
  allGatherObject(payload: string): Promise<string[]>;
  barrier(): Promise<void>;
  /** Leaves the group; later collectives throw `ERR_PG_INPUT`. Idempotent. */
  destroy(): void;
  /** `destroy()` (added by the loader). */
  [Symbol.dispose](): void;
}

/** The `HostState` class: instances come from `Model.captureAdapter` / `captureSnapshot` and `AdamW.captureState` only (`new` throws). */
export interface AddonHostStateClass {
  new (handle: never): HostState;
  readonly prototype: HostState;
}

/** The `ProcessGroup` class: instances come from `distInit` only. */
export interface AddonProcessGroupClass {
  new (handle: never): AddonProcessGroup;
  readonly prototype: AddonProcessGroup;
}

// ---------------------------------------------------------------------------------------------
// The addon
// ---------------------------------------------------------------------------------------------

/** Everything `papergym_native.node` exports. */
export interface Addon {
  /** N-API version the binary was built for. */
  readonly napiVersion: number;

  // runtime (native/napi/runtime.cc)
  runtimeInfo(): RuntimeInfo;
  /** Allocator statistics of CUDA device `device` (default 0); null without CUDA. TypeError on a negative index. */
  cudaMemory(device?: number): CudaMemoryStats | null;
  cudaResetPeak(device?: number): void;
  cudaEmptyCache(): void;
  /** Caps what the caching allocator of `device` (default 0) may hold at `bytes` (allocated +
   * cached; past it the allocator frees its cache, then raises out-of-memory). No-op without CUDA. */
  cudaSetMemoryLimit(bytes: number, device?: number): void;
  /** libtorch intra-op threads, n ≥ 1. */
  setNumThreads(n: number): void;
  /** Seeds libtorch's default CPU/CUDA generators (LoRA dropout); non-negative integer. */
  manualSeed(seed: number): void;
  /** Own CUDA kernels on (true) or off (ATen paths) for later calls; returns the previous value. */
  setFusedKernels(on: boolean): boolean;
  /** Starts counting leaf ATen ops (ops that call no other op: on CUDA about one kernel launch each). */
  opCountStart(): void;
  /** Stops counting; per-op-name counts and their total since opCountStart. */
  opCountStop(): { total: number; ops: Record<string, number> };
  /** Starts recording GPU activity (CUDA kernels, copies, sets; graph replays included) of every
   * thread through libtorch's Kineto profiler (torch.profiler's engine). Throws when one already
   * runs or this libtorch has no Kineto. A profile still running when the process ends is stopped
   * at its 'exit' event (libtorch would crash at exit otherwise). */
  profileStart(): void;
  /** Stops the profile: GPU activities grouped by name, the `top` (default 40) with the most total
   * time first, times in µs; `gpuBusyUs` is the union of their intervals, `gpuSpanUs` first start
   * to last end. Writes a Chrome trace to `tracePath` when given.
   * @throws TypeError (ERR_PG_ARG; the profile keeps running) when none runs, `top` is not an
   *   integer ≥ 1, or `tracePath` is empty, a directory, or in a directory that does not exist or
   *   is not writable; Error (ERR_PG_INPUT, the profile stopped) when the trace could not be written. */
  profileStop(opts?: { tracePath?: string; top?: number }): ProfileResult;

  // model (native/napi/model.cc)
  Model: AddonModelClass;

  // losses (native/napi/loss.cc)
  /** Generalised JSD (GKD, Agarwal et al. 2024, Eq. 1; TRL generalized_jsd_loss), fused and chunked over the lm_head. */
  jsdLoss(args: JsdArgs): Promise<JsdResult>;
  /** Clipped-surrogate GRPO/DAPO/Dr.GRPO loss with k3 KL (TRL GRPOTrainer._compute_loss). */
  grpoLoss(args: GrpoArgs): Promise<GrpoResult>;
  /** log softmax(hidden @ weightᵀ / temperature)[token] per row, chunked, no grad: [N]. */
  selectedLogprobs(args: SelectedLogprobsArgs): Promise<FloatTensor>;
  /** k3 = exp(x) − x − 1, x = clamp(ref − logp, −20, 20) (synchronous). */
  k3(args: { logprobs: FloatTensor; refLogprobs: FloatTensor }): FloatTensor;
  /** Group-relative advantages in float64 (native/loss/advantages.h; synchronous). */
  computeAdvantages(args: AdvantageOptions & { rewards: FloatTensor }): AdvantageTensors;
  /** Benchmark driver: per-iteration ms of one loss forward + backward on random device inputs. */
  _benchLoss(args: BenchLossArgs): Promise<{ ms: number[]; loss: number }>;

  // model-integrated steps (native/napi/model_steps.cc)
  /** [B, L] float32: logp of inputIds[b, t] given the prefix at softmax(logits / T); 0 at t = 0 and outside completionMask. No grad. */
  sequenceLogprobs(model: AddonModel, args: SequenceLogprobsArgs): Promise<JsTensor<Float32Array>>;
  /** [n, K] float32: log p(candidate | prefix + suffix_i) at each suffix's last real position; the prefix is prefilled once. */
  prefixLogprobs(model: AddonModel, args: PrefixLogprobsArgs): Promise<JsTensor<Float32Array>>;
  /** OPSD micro-batch: teacher forward (no grad), student forward, fused JSD over the completion tokens; grads accumulate into the LoRA parameters. */
  opsdBackward(model: AddonModel, args: OpsdBackwardArgs): Promise<{ loss: number; tokens: number }>;
  /** GRPO micro-batch over the model: fused loss, grads accumulate into the LoRA parameters; logprobs [B, L]. */
  grpoBackward(model: AddonModel, args: GrpoBackwardArgs): Promise<GrpoResult>;

  // optimizer (native/napi/optim.cc)
  AdamW: AddonAdamWClass;
  /** lr · f(step) of a schedule; step a non-negative integer. */
  lrAt(schedule: Schedule & { lr: number }, step: number): number;

  // generation (native/napi/generate.cc)
  /** Batched sampling with a KV cache (left padding, one prefill per prompt); see lib/model/policy.ts. */
  generate(model: AddonModel, args: GenerateArgs): Promise<GenerateResult>;
  /** The step-wise continuous-batching engine over `model`. */
  createDecodeEngine(model: AddonModel, opts: DecodeEngineOptions): AddonDecodeEngine;
  createAbortHandle(): AbortHandle;
  /** The sampler of `generate` on given logits [R, V] (synchronous, CPU). */
  sampleFromLogits(logits: FloatTensor, opts?: SampleFromLogitsOptions): SampledTokens;
  /** The binary holds CUDA-graph decode (a CUDA build). */
  cudaGraphsCompiled(): boolean;

  // safetensors (native/napi/io.cc)
  /** Writes a safetensors file atomically; metadata values must be strings. */
  saveSafetensors(path: string, tensors: Record<string, AnyTensor>, metadata?: Record<string, string>): void;
  /** Reads every tensor of a safetensors file and its `__metadata__`. */
  loadSafetensors(path: string): { tensors: Record<string, OutputTensor>; metadata: Record<string, string> };

  // process groups (native/napi/dist.cc)
  ProcessGroup: AddonProcessGroupClass;
  HostState: AddonHostStateClass;
  /** Process groups in this build: Gloo needs the gloo headers at build time, NCCL a CUDA build + nccl.h. */
  distAvailable(): { gloo: boolean; nccl: boolean };
  /** Joins a process group (TCPStore rendezvous at masterAddr:masterPort). */
  distInit(opts: DistInitOptions): Promise<AddonProcessGroup>;
}
