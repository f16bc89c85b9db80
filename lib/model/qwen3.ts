/**
 * Typed wrapper over the native Qwen3 decoder with LoRA adapters (native/model/binding.cc).
 *
 * Architectures: Hugging Face `Qwen3ForCausalLM` (dense), `Qwen2ForCausalLM` (Qwen2.5) and
 * `LlamaForCausalLM` (Llama-3.x) in one native decoder with per-architecture switches (q/k norm,
 * attention / MLP biases, default / YaRN / llama3 RoPE) read from the checkpoint's config.json;
 * absent fields take the transformers config class defaults (see docs/design.md §3).
 * LoRA follows PEFT: `y = x Wᵀ + s·B(A(dropout(x)))`, `s = alpha/r` (rsLoRA `alpha/√r`), A
 * `[r, in]` ~ U(±1/√in) (kaiming-uniform a=√5), B `[out, r]` = 0, LoRA tensors float32. Adapters
 * save/load in PEFT format (`adapter_model.safetensors` + `adapter_config.json`).
 *
 * Errors: wrong argument types/values reject or throw a `TypeError` (`code: 'ERR_PG_ARG'`) naming
 * the argument; bad files (corrupt safetensors, missing/extra tensors, shape mismatches, unknown
 * dtypes, unsupported architectures) an `Error` (`code: 'ERR_PG_INPUT'`) naming file and tensor;
 * any call after `dispose()` an `Error` "model was disposed". Calls on one model are serialised
 * natively (a forward waits for a running generation, etc.).
 */
import { native, type JsTensor } from '../native.js';
import { argError, checkOptions, describeValue } from '../util/args.js';
import { ensureInputDir } from '../util/fs.js';

/** Token ids or masks: `Int32Array` (or `BigInt64Array` / `Uint8Array` for masks) with `shape`. */
export type IntTensor = JsTensor<Int32Array | BigInt64Array | Uint8Array>;

export type Device = 'cpu' | 'cuda' | `cuda:${number}`;
export type Dtype = 'float32' | 'bfloat16' | 'float16';
/** The seven decoder projections LoRA may target (all three architectures). */
export type LoraTarget = 'q_proj' | 'k_proj' | 'v_proj' | 'o_proj' | 'gate_proj' | 'up_proj' | 'down_proj';
export const ALL_LORA_TARGETS: LoraTarget[] = ['q_proj', 'k_proj', 'v_proj', 'o_proj', 'gate_proj', 'up_proj', 'down_proj'];

export interface LoadOptions {
  /** Default 'cpu'. */
  device?: Device;
  /** Default 'bfloat16' on CUDA, 'float32' on CPU. */
  dtype?: Dtype;
}

export interface LoraOptions {
  /** Rank r ≥ 1. */
  r: number;
  /** LoRA alpha > 0; scaling = alpha / r (or alpha / √r with useRslora). */
  alpha: number;
  /** Dropout on the LoRA branch input, in [0, 1); only active in training calls. Default 0. */
  dropout?: number;
  useRslora?: boolean;
  /** Default all seven projections. */
  targetModules?: LoraTarget[];
  /** Seed of A's initialisation (CPU generator). Default 0. */
  seed?: number;
}

/** 'active' (the trainable adapter, unless disabled), 'none' (frozen base), or a snapshot name. */
export type AdapterChoice = 'active' | 'none' | (string & {});

export interface ForwardArgs {
  /** Token ids `[B, T]` (Int32Array). */
  inputIds: IntTensor;
  /** `[B, T]`, 1 = token, 0 = padding (right or left). Default all ones. */
  attentionMask?: IntTensor;
  /** Default ['logits']. */
  outputs?: ('logits' | 'hidden')[];
  adapter?: AdapterChoice;
}

export interface ForwardResult {
  /** `[B, T, V]` float32 (lm_head matmul in the model dtype, fp32 accumulate). */
  logits?: JsTensor<Float32Array>;
  /** Final-norm hidden states `[B, T, H]`, converted to float32. */
  hidden?: JsTensor<Float32Array>;
}

export interface CrossEntropyArgs {
  inputIds: IntTensor;
  attentionMask?: IntTensor;
  /** `[B, T]` labels, -100 = ignored; logits at t predict labels[t + 1] (transformers' convention). */
  labels: IntTensor;
  adapter?: AdapterChoice;
}

/** Options of the raw native Model (see {@link Qwen3Model}). */
export interface NativeModel {
  readonly config: Record<string, unknown>;
  readonly device: string;
  readonly dtype: Dtype;
  readonly disposed: boolean;
  forward(args: ForwardArgs): Promise<ForwardResult>;
  forwardChunked(args: ForwardArgs & { chunk: number }): Promise<{ logits: JsTensor<Float32Array> }>;
  addLora(opts: LoraOptions): void;
  hasLora(): boolean;
  setAdapterEnabled(on: boolean): void;
  adapterEnabled(): boolean;
  loraConfig(): (Required<Omit<LoraOptions, 'seed'>> & { scaling: number }) | null;
  snapshotAdapter(name: string): void;
  dropSnapshot(name: string): void;
  /** EMA of snapshot `name` toward the active adapter, in place on the device: s ← d·s + (1 − d)·a (native/lora/snapshots.h). */
  emaUpdate(name: string, decay: number): void;
  /** Writes snapshot `name` as safetensors (PEFT keys, F32) on a worker thread. */
  saveSnapshot(name: string, path: string): Promise<void>;
  /** Reads a file written by saveSnapshot into snapshot `name` (shapes of the active adapter) on a worker thread. */
  loadSnapshot(name: string, path: string): Promise<void>;
  saveAdapter(dir: string, opts?: { baseModelName?: string }): Promise<void>;
  loadAdapter(dir: string): Promise<void>;
  loraParameterNames(): string[];
  loraWeights(): Record<string, JsTensor<Float32Array>>;
  setLoraWeights(rec: Record<string, JsTensor<Float32Array>>): void;
  loraGrads(): Record<string, JsTensor<Float32Array>>;
  zeroGrad(): void;
  crossEntropyBackward(args: CrossEntropyArgs): Promise<{ loss: number }>;
  parameterBytes(): number;
  setGradientCheckpointing(on: boolean): void;
  gradientCheckpointing(): boolean;
  synchronize(): void;
  setLoraFloat32Branch(on: boolean): void;
  loraFloat32Branch(): boolean;
  dispose(): void;
}

/**
 * A loaded Qwen3 model. Thin typed layer over the native `Model`; `raw` is the native object that
 * other native bindings (generation, losses, optimizer) accept as their model argument.
 */
export class Qwen3Model {
  constructor(readonly raw: NativeModel) {}

  /** Parsed config.json. */
  get config(): Record<string, unknown> {
    return this.raw.config;
  }
  /** 'cpu' | 'cuda:N'. */
  get device(): string {
    return this.raw.device;
  }
  get dtype(): Dtype {
    return this.raw.dtype;
  }
  get disposed(): boolean {
    return this.raw.disposed;
  }

  /** Decoder forward over a (right- or left-) padded batch; runs off the JS thread, no grad. */
  forward(args: ForwardArgs): Promise<ForwardResult> {
    return this.raw.forward(args);
  }
  /**
   * Same logits as {@link forward} (`[B, T, V]` float32), computed `chunk` tokens at a time through
   * a preallocated KV cache (prefill/decode path used by generation). For tests and debugging.
   */
  forwardChunked(args: ForwardArgs & { chunk: number }): Promise<{ logits: JsTensor<Float32Array> }> {
    return this.raw.forwardChunked(args);
  }
  /** Creates (replaces) the trainable adapter; TypeError on bad options. */
  addLora(opts: LoraOptions): void {
    this.raw.addLora(opts);
  }
  hasLora(): boolean {
    return this.raw.hasLora();
  }
  /** false: 'active' forwards run the frozen base (reference policy / judge) without a copy. */
  setAdapterEnabled(on: boolean): void {
    this.raw.setAdapterEnabled(on);
  }
  adapterEnabled(): boolean {
    return this.raw.adapterEnabled();
  }
  loraConfig(): ReturnType<NativeModel['loraConfig']> {
    return this.raw.loraConfig();
  }
  /** Frozen deep copy of the active adapter, selectable as `adapter: name`. */
  snapshotAdapter(name: string): void {
    this.raw.snapshotAdapter(name);
  }
  dropSnapshot(name: string): void {
    this.raw.dropSnapshot(name);
  }
  /** Writes PEFT files into `dir` atomically (created if missing). */
  saveAdapter(dir: string, opts: { baseModelName?: string } = {}): Promise<void> {
    return this.raw.saveAdapter(dir, opts);
  }
  /** Loads a PEFT LoRA adapter as the active (trainable) adapter; Error naming file/key on mismatch. */
  loadAdapter(dir: string): Promise<void> {
    return this.raw.loadAdapter(dir);
  }
  /** PEFT keys, sorted by module name, A then B. */
  loraParameterNames(): string[] {
    return this.raw.loraParameterNames();
  }
  /** float32 copies of A `[r, in]` / B `[out, r]` keyed by PEFT name. */
  loraWeights(): Record<string, JsTensor<Float32Array>> {
    return this.raw.loraWeights();
  }
  /** Overwrites some or all LoRA tensors (shapes must match; TypeError otherwise). */
  setLoraWeights(rec: Record<string, JsTensor<Float32Array>>): void {
    this.raw.setLoraWeights(rec);
  }
  /** Accumulated gradients (zeros where none). */
  loraGrads(): Record<string, JsTensor<Float32Array>> {
    return this.raw.loraGrads();
  }
  zeroGrad(): void {
    this.raw.zeroGrad();
  }
  /**
   * Mean next-token cross-entropy over label positions ≠ -100 (as transformers' causal-LM loss);
   * accumulates its gradient into the LoRA parameters (dropout active). Resolves `{loss}`.
   */
  crossEntropyBackward(args: CrossEntropyArgs): Promise<{ loss: number }> {
    return this.raw.crossEntropyBackward(args);
  }
  /** Bytes of base weights + adapters + snapshots (also reported to V8 as external memory). */
  parameterBytes(): number {
    return this.raw.parameterBytes();
  }
  /**
   * Activation recomputation per decoder layer for training calls (grad on, trainable adapter):
   * each layer keeps only its input `[B, T, H]` and is recomputed in backward. Same gradients
   * (LoRA dropout masks reproduced), less activation memory, one extra layer forward per layer.
   * TypeError when `on` is not a boolean.
   */
  setGradientCheckpointing(on: boolean): void {
    this.raw.setGradientCheckpointing(on);
  }
  gradientCheckpointing(): boolean {
    return this.raw.gradientCheckpointing();
  }
  /**
   * LoRA branch precision in bfloat16/float16 models. true (default): float32 branch as peft
   * (x cast to float32, float32 sum). false: the branch runs in the model dtype (A/B cast per
   * forward, gradients still accumulate into the float32 A/B) — faster (tensor cores) and no
   * float32 activation copies, like autocast mixed precision. No effect on float32 models.
   * TypeError when `on` is not a boolean.
   */
  setLoraFloat32Branch(on: boolean): void {
    this.raw.setLoraFloat32Branch(on);
  }
  loraFloat32Branch(): boolean {
    return this.raw.loraFloat32Branch();
  }
  /**
   * Blocks until all queued CUDA work on the model's device has finished (no-op on CPU); waits
   * for a running call on this model first. For timing (benchmarks).
   */
  synchronize(): void {
    this.raw.synchronize();
  }
  /** Frees the weights now (waits for a running call); later calls throw "model was disposed". */
  dispose(): void {
    this.raw.dispose();
  }
}

/**
 * Loads a Qwen3 checkpoint directory (config.json + model.safetensors or a sharded index).
 * dtype defaults to bfloat16 on CUDA and float32 on CPU. Rejects with Error (file/tensor named;
 * `model directory X does not exist` when `dir` is missing) or TypeError (bad dir or options).
 */
export async function loadModel(dir: string, opts: LoadOptions = {}): Promise<Qwen3Model> {
  if (typeof dir !== 'string' || dir === '') throw argError(`loadModel: dir must be a non-empty string (the checkpoint directory), got ${describeValue(dir)}`);
  checkOptions('loadModel', opts);
  for (const k of ['device', 'dtype'] as const) if (opts[k] !== undefined && typeof opts[k] !== 'string') throw argError(`loadModel: options.${k} must be a string, got ${describeValue(opts[k])}`);
  ensureInputDir(dir, 'model directory');
  const device = opts.device ?? 'cpu';
  const dtype = opts.dtype ?? (device.startsWith('cuda') ? 'bfloat16' : 'float32');
  const raw = (await native().Model.load(dir, { device, dtype })) as NativeModel;
  return new Qwen3Model(raw);
}
