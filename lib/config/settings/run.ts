/**
 * Training config keys of the run: model, data, output, device, dtype, stages, seed, in docs order (lib/config/settings.ts assembles them).
 */
import type { Setting } from '../schema.js';
import { DEVICE } from './model.js';

export const RUN_SETTINGS: readonly Setting[] = [
  // ---- run ----
  {
    key: 'model',
    trl: [{ name: 'model_name_or_path', alias: true }],
    flag: 'model',
    type: 'path',
    default: null,
    values: 'a Hugging Face Qwen3 checkpoint dir (config.json, safetensors, tokenizer.json), or a Hub id org/name[@revision]',
    meaning:
      'Base model to train (a Hub id is read from the huggingface_hub cache, fetched into it when missing: docs/hub.md); unset = the embedded tiny random Qwen3 (real tokenizer) that trains in minutes on CPU',
    source: 'TRL ModelConfig.model_name_or_path; paper: Qwen3-1.7B/4B/8B',
  },
  {
    key: 'revision',
    flag: 'revision',
    type: 'string',
    default: null,
    values: 'a branch, tag or commit sha',
    meaning: 'Revision of a Hub model id (unset = main); ignored for a local dir',
    source: 'TRL ModelConfig.model_revision',
  },
  {
    key: 'data',
    flag: 'data',
    type: 'path',
    default: null,
    values: 'a PaperGym dataset JSONL (docs/data.md)',
    meaning: 'Training and validation items (split train / val); unset = the embedded hand-made sample dataset',
    source: 'TRL train_dataset; paper: PaperGym items (docs/design.md §7)',
  },
  {
    key: 'out',
    trl: [{ name: 'output_dir', alias: true }],
    flag: 'out',
    type: 'path',
    default: null,
    values: 'a writable dir',
    meaning:
      'Run dir for config.json, metrics.jsonl, checkpoints, final adapter and report.html; unset = runs/<timestamp>; a dir that already holds a run is refused (continue it with --resume)',
    source: 'transformers TrainingArguments.output_dir',
  },
  {
    key: 'device',
    resumable: true,
    flag: 'device',
    type: 'string',
    default: 'cpu',
    pattern: DEVICE,
    values: 'cpu | cuda | cuda:N',
    meaning: 'Device of the model and the training step (the presets set cuda)',
    source: 'transformers TrainingArguments (use_cpu / device placement)',
  },
  {
    key: 'dtype',
    trl: [
      { name: 'bf16', value: 'bfloat16' },
      { name: 'fp16', value: 'float16' },
      { name: 'torch_dtype', alias: true },
    ],
    flag: 'dtype',
    type: 'enum',
    choices: ['float32', 'bfloat16', 'float16'],
    default: null,
    meaning: 'Model weight dtype; unset = bfloat16 on CUDA, float32 on CPU (LoRA weights and optimizer state are float32 either way)',
    source: 'transformers TrainingArguments.bf16 / fp16; ModelConfig.torch_dtype',
  },
  {
    key: 'stages',
    flag: 'stages',
    type: 'list',
    items: 'string',
    default: ['opsd', 'grpo'],
    meaning: 'Training stages in order; the paper ablations are one flag away: opsd (OPSD only), grpo (GRPO only), grpo,opsd (reversed), sft (SFT baseline)',
    source: 'paper: OPSD → GRPO schedule and its ablations (docs/design.md §6)',
  },
  {
    key: 'seed',
    trl: [{ name: 'seed', alias: true }],
    flag: 'seed',
    type: 'integer',
    min: 0,
    default: 1234,
    meaning: 'Seed of the data order, sampling, dropout and LoRA init; every random draw derives from (seed, stage, step), so a resumed run replays exactly',
    source: 'transformers TrainingArguments.seed',
  },
  {
    key: 'strict',
    flag: 'strict',
    type: 'boolean',
    default: false,
    meaning: 'Stop at the first invalid dataset row instead of skipping it with a warning',
    source: 'papergym-native (dataset validation, docs/data.md)',
  },
];
