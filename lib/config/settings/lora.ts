/**
 * Training config keys of the LoRA adapter (`lora.*`), in docs order (lib/config/settings.ts assembles them).
 */
import type { Setting } from '../schema.js';
import { LORA_TARGETS } from '../../addon.js';

export const LORA_SETTINGS: readonly Setting[] = [
  // ---- LoRA ----
  {
    key: 'lora.r',
    trl: [{ name: 'lora_r', alias: true }, { name: 'r' }],
    flag: 'lora-r',
    type: 'integer',
    min: 1,
    max: 65536,
    default: 8,
    meaning: 'LoRA rank r (paper presets: 64)',
    source: 'peft LoraConfig.r; paper (docs/design.md §6): r = 64',
  },
  {
    key: 'lora.alpha',
    trl: [{ name: 'lora_alpha', alias: true }],
    flag: 'lora-alpha',
    type: 'number',
    min: 0,
    exclusiveMin: true,
    default: 16,
    meaning: 'LoRA scaling alpha: the update is (alpha / r)·B·A (paper presets: 128)',
    source: 'peft LoraConfig.lora_alpha; paper (docs/design.md §6): alpha = 128',
  },
  {
    key: 'lora.dropout',
    trl: [{ name: 'lora_dropout', alias: true }],
    flag: 'lora-dropout',
    type: 'number',
    min: 0,
    max: 1,
    exclusiveMax: true,
    default: 0,
    meaning: 'Dropout on the LoRA branch input (training only)',
    source: 'peft LoraConfig.lora_dropout',
  },
  {
    key: 'lora.rslora',
    formerly: { keys: ['lora.useRslora'] },
    trl: [{ name: 'use_rslora', alias: true }],
    flag: 'lora-rslora',
    type: 'boolean',
    default: false,
    meaning: 'Rank-stabilised scaling alpha / sqrt(r) instead of alpha / r',
    source: 'peft LoraConfig.use_rslora (Kalajdzievski 2023)',
  },
  {
    key: 'lora.targetModules',
    trl: [
      { name: 'lora_target_modules', alias: true },
      { name: 'target_modules', alias: true },
    ],
    flag: 'lora-target-modules',
    type: 'list',
    items: 'string',
    choices: LORA_TARGETS,
    default: [...LORA_TARGETS],
    all: 'all-linear',
    meaning:
      'Linear layers that get a LoRA adapter; all-linear = every linear layer of the decoder layers but the output head (lm_head), as PEFT resolves it: the seven projections',
    source: 'peft LoraConfig.target_modules ("all-linear")',
  },
  {
    key: 'lora.fp32Branch',
    formerly: { keys: ['lora.float32Branch'] },
    flag: 'lora-fp32-branch',
    type: 'boolean',
    default: false,
    meaning:
      'With a bf16/fp16 model, run the LoRA matmuls in float32 as peft without autocast; false = model dtype with float32 master weights, as TRL with bf16=True',
    source: 'transformers Trainer bf16=True (torch.autocast) vs peft without autocast',
  },
];
