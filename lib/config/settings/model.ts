/** Settings of the model and device options of generate, eval and serve (lib/config/settings.ts re-exports them; schema: lib/config/schema.ts). */
import type { Setting } from '../schema.js';

export const DEVICE = /^(cpu|cuda(:\d+)?)$/;

export const DEVICE_AUTO = /^(auto|cpu|cuda(:\d+)?)$/;

/** generate / eval / serve: model and device. */
export const MODEL_OPTIONS: readonly Setting[] = [
  {
    key: 'model',
    flag: 'model',
    type: 'path',
    default: null,
    values: 'a Qwen3 checkpoint dir, or a Hub id org/name[@revision] (required)',
    meaning:
      'Base model: a local dir (config.json, safetensors, tokenizer.json), else a Hugging Face Hub id read from the huggingface_hub cache and fetched into it when missing (docs/hub.md)',
    source: 'transformers from_pretrained(pretrained_model_name_or_path); vLLM --model',
  },
  {
    key: 'revision',
    flag: 'revision',
    type: 'string',
    default: null,
    values: 'a branch, tag or commit sha',
    meaning: 'Revision of a Hub model id (unset = main); ignored for a local dir',
    source: 'transformers from_pretrained(revision); vLLM --revision',
  },
  {
    key: 'adapter',
    flag: 'adapter',
    type: 'path',
    default: null,
    values: 'a PEFT LoRA adapter dir, or a Hub id org/name[@revision]',
    meaning: "LoRA adapter to apply (a run's final/ or a checkpoint; a Hub id fetches adapter_config.json and adapter_model.safetensors)",
    source: 'peft PeftModel.from_pretrained; vLLM --lora-modules',
  },
  {
    key: 'device',
    flag: 'device',
    type: 'string',
    default: 'auto',
    pattern: DEVICE_AUTO,
    values: 'auto | cpu | cuda | cuda:N',
    meaning: 'Device; auto = cuda when the addon sees a GPU, else cpu',
    source: 'transformers device_map / vLLM --device',
  },
  {
    key: 'dtype',
    flag: 'dtype',
    type: 'enum',
    choices: ['float32', 'bfloat16', 'float16'],
    default: null,
    meaning: 'Weight dtype; unset = bfloat16 on CUDA, float32 on CPU',
    source: 'transformers torch_dtype; vLLM --dtype',
  },
  {
    key: 'allowNonFiniteWeights',
    flag: 'allow-non-finite-weights',
    type: 'boolean',
    default: false,
    meaning:
      'Load model / adapter weights holding NaN or Inf with a warning naming the tensors, instead of refusing them (an error naming the file and tensors)',
    source: 'papergym-native (native/io/finite.h: one isfinite reduction per tensor at load)',
  },
];
