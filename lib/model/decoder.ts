/**
 * Loading the native decoder with LoRA adapters (native/napi/model.cc, native/model/decoder.h). The model object
 * is the addon's own `Model` ({@link AddonModel}, declared with its methods in lib/addon.ts); this
 * module adds argument checks and defaults to loading.
 *
 * Architectures: Hugging Face `Qwen3ForCausalLM` (dense), `Qwen2ForCausalLM` (Qwen2.5) and
 * `LlamaForCausalLM` (Llama-3.x) in one native decoder with per-architecture switches (q/k norm,
 * attention / MLP biases, default / YaRN / llama3 RoPE) read from the checkpoint's config.json;
 * absent fields take the transformers config class defaults (see docs/design.md §3).
 * LoRA follows PEFT: `y = x Wᵀ + s·B(A(dropout(x)))`, `s = alpha/r` (rsLoRA `alpha/√r`), A
 * `[r, in]` ~ U(±1/√in) (kaiming-uniform a=√5), B `[out, r]` = 0, LoRA tensors float32. Adapters
 * save/load in PEFT format (`adapter_model.safetensors` + `adapter_config.json`).
 *
 * Errors (lib/errors.ts): wrong argument types/values reject or throw a `TypeError` (code
 * `ERR_PG_ARG`) naming the argument; bad files (corrupt safetensors, missing/extra tensors, shape
 * mismatches, unknown dtypes, unsupported architectures) an `Error` (code `ERR_PG_INPUT`) naming
 * file and tensor; any call after `dispose()` an `Error` with code `ERR_PG_DISPOSED`. Calls on one
 * model are serialised natively (a forward waits for a running generation, etc.), except the
 * read-only inference calls (generate, sequenceLogprobs, prefixLogprobs), which run concurrently
 * with each other (lib/addon.ts). A model is
 * disposable: `using model = await loadModel(dir)` frees the weights at the end of the block.
 */
import { native } from '../native.js';
import type { AddonModel, Device, Dtype, LoadOptions, LoraTarget } from '../addon.js';
import { LORA_TARGETS } from '../addon.js';
import { disposedError } from '../errors.js';
import { argError, checkOptions, describeValue } from '../util/args.js';
import { ensureInputDir } from '../util/fs.js';
import { checkModelConfigSizes } from './config-bounds.js';

export type {
  AdapterChoice,
  CrossEntropyArgs,
  Device,
  Dtype,
  ForwardArgs,
  ForwardResult,
  IntTensor,
  LoadOptions,
  LoraConfig,
  LoraOptions,
  LoraTarget,
} from '../addon.js';

/** A loaded model (any registered architecture): the addon's `Model` object (methods: {@link AddonModel}). */
export type DecoderModel = AddonModel;

/**
 * `x instanceof DecoderModel` is true for a model of the loaded addon (false for anything else, and
 * when the addon does not load).
 */
export const DecoderModel: { [Symbol.hasInstance](x: unknown): x is AddonModel } = {
  [Symbol.hasInstance](x: unknown): x is AddonModel {
    if (typeof x !== 'object' || x === null) return false;
    try {
      return x instanceof native().Model;
    } catch {
      return false;
    }
  },
};

/** The seven projections, the default `targetModules`. */
export const ALL_LORA_TARGETS: LoraTarget[] = [...LORA_TARGETS];

let guarded: AddonModel | undefined;

/**
 * The prototype of models from {@link loadModel}: the addon's `Model.prototype` with every method
 * and accessor but `dispose` / `disposed` throwing `ERR_PG_DISPOSED` on a disposed model before it
 * reaches the binary (whose own members cannot be redefined). Binaries that report a disposed model
 * with `ERR_PG_INPUT` then agree with ones that report `ERR_PG_DISPOSED` themselves.
 */
function guardedPrototype(): AddonModel {
  if (guarded) return guarded;
  const base = native().Model.prototype;
  const proto: AddonModel = Object.create(base);
  for (const name of Object.getOwnPropertyNames(base)) {
    if (name === 'constructor' || name === 'dispose' || name === 'disposed') continue;
    const d = Object.getOwnPropertyDescriptor(base, name);
    if (typeof d?.value === 'function') {
      const f: (this: AddonModel, ...a: unknown[]) => unknown = d.value;
      Object.defineProperty(proto, name, {
        value: {
          [name](this: AddonModel, ...a: unknown[]): unknown {
            if (this.disposed) throw disposedError('model');
            return f.apply(this, a);
          },
        }[name],
      });
    } else if (d?.get) {
      const g = d.get;
      Object.defineProperty(proto, name, {
        get(this: AddonModel): unknown {
          if (this.disposed) throw disposedError('model');
          return g.call(this);
        },
      });
    }
  }
  return (guarded = proto);
}

/**
 * Loads a checkpoint directory of a registered architecture (config.json + model.safetensors or a
 * sharded index).
 * dtype defaults to bfloat16 on CUDA and float32 on CPU. Rejects with Error (file/tensor named;
 * `model directory X does not exist`, code `ERR_PG_INPUT`, when `dir` is missing; weights holding
 * NaN or Inf unless `allowNonFinite`, then a process warning `PG_NON_FINITE_WEIGHTS`) or TypeError
 * (bad dir or options).
 */
export async function loadModel(dir: string, opts: LoadOptions = {}): Promise<DecoderModel> {
  if (typeof dir !== 'string' || dir === '') throw argError(`loadModel: dir must be a non-empty string (the checkpoint directory), got ${describeValue(dir)}`);
  checkOptions('loadModel', opts);
  for (const k of ['device', 'dtype'] as const)
    if (opts[k] !== undefined && typeof opts[k] !== 'string') throw argError(`loadModel: options.${k} must be a string, got ${describeValue(opts[k])}`);
  if (opts.allowNonFinite !== undefined && typeof opts.allowNonFinite !== 'boolean') {
    throw argError(`loadModel: options.allowNonFinite must be a boolean, got ${describeValue(opts.allowNonFinite)}`);
  }
  ensureInputDir(dir, 'model directory');
  // Sizes in config.json within bounds and matching the weights before the addon allocates
  // anything (every command that loads a model: a config claiming 1e8 layers is refused here).
  checkModelConfigSizes(dir, { weights: false });
  const device: Device = opts.device ?? 'cpu';
  const dtype: Dtype = opts.dtype ?? (device.startsWith('cuda') ? 'bfloat16' : 'float32');
  const model = await native().Model.load(dir, { device, dtype, allowNonFinite: opts.allowNonFinite ?? false });
  Object.setPrototypeOf(model, guardedPrototype());
  return model;
}
