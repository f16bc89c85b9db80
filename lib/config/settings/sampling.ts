/**
 * Sampling settings: training's rollout sampling keys (`sampling.*`) and the sampling options of
 * generate, eval and serve.
 */
import type { Setting } from '../schema.js';

/** Training config keys of training's rollout sampling (`sampling.*`), in docs order. */
export const SAMPLING_SETTINGS: readonly Setting[] = [
  // ---- sampling ----
  {
    key: 'sampling.temperature',
    trl: [{ name: 'temperature', alias: true }],
    flag: 'temperature',
    type: 'number',
    min: 0,
    default: 1.0,
    meaning: 'Rollout sampling temperature (0 = greedy); also the temperature of the logprobs in the losses',
    source: 'TRL GRPOConfig.temperature; vLLM SamplingParams.temperature',
  },
  {
    key: 'sampling.topP',
    trl: [{ name: 'top_p', alias: true }],
    flag: 'top-p',
    type: 'number',
    min: 0,
    exclusiveMin: true,
    max: 1,
    default: 0.95,
    meaning: 'Nucleus sampling: keep the smallest set of tokens with probability mass >= top-p (1 = off)',
    source: 'TRL GRPOConfig.top_p',
  },
  {
    key: 'sampling.topK',
    trl: [{ name: 'top_k', alias: true }],
    flag: 'top-k',
    type: 'integer',
    min: 0,
    default: 20,
    meaning: 'Keep the k most likely tokens when sampling (0 = off)',
    source: 'TRL GRPOConfig.top_k; Qwen3 generation_config',
  },
  {
    key: 'sampling.maxNewTokens',
    trl: [{ name: 'max_completion_length', alias: true }],
    flag: 'max-new-tokens',
    type: 'integer',
    min: 1,
    max: 1048576,
    default: 24,
    meaning: 'Maximum completion length in tokens (paper presets: 1024)',
    source: 'TRL GRPOConfig.max_completion_length',
  },
  {
    key: 'sampling.mergeAdapter',
    resumable: true,
    flag: 'merge-adapter',
    type: 'enum',
    choices: ['auto', 'on', 'off'],
    default: 'auto',
    meaning:
      "Rollouts sample from the LoRA adapter merged into the base weights (W + scaling·B·A in the model dtype, made once per sampling call): no LoRA branch in the decode step, one extra copy of the targeted weights while sampling; the rollout logprobs are the merged weights' (bf16 rounding from the LoRA-branch forward). auto = on for CUDA when the memory plan fits the copy, off on CPU; off = the LoRA branch. A rollout that runs out of memory with the copy is sampled again through the branch, which the rest of the run keeps",
    source: 'PEFT merge_and_unload; TRL GRPO with vLLM (merged adapter weights)',
  },
  {
    key: 'sampling.thinking',
    formerly: { keys: ['sampling.enableThinking'] },
    flag: 'thinking',
    type: 'boolean',
    default: false,
    meaning: 'Qwen3 chat template enable_thinking for the policy prompts',
    source: 'Qwen3 chat template (enable_thinking)',
  },
];

export const SAMPLING_OPTIONS: readonly Setting[] = [
  {
    key: 'temperature',
    flag: 'temperature',
    type: 'number',
    min: 0,
    default: 0.7,
    meaning: 'Sampling temperature (0 = greedy)',
    source: 'vLLM SamplingParams.temperature; Qwen3 non-thinking recommendation 0.7',
  },
  {
    key: 'topP',
    flag: 'top-p',
    type: 'number',
    min: 0,
    exclusiveMin: true,
    max: 1,
    default: 0.8,
    meaning: 'Nucleus sampling mass (1 = off)',
    source: 'vLLM SamplingParams.top_p; Qwen3 recommendation 0.8',
  },
  {
    key: 'topK',
    flag: 'top-k',
    type: 'integer',
    min: 0,
    default: 20,
    meaning: 'Top-k sampling (0 = off)',
    source: 'vLLM SamplingParams.top_k; Qwen3 recommendation 20',
  },
  {
    key: 'maxNewTokens',
    flag: 'max-new-tokens',
    type: 'integer',
    min: 1,
    default: 1024,
    meaning: 'Maximum new tokens per completion',
    source: 'transformers generate max_new_tokens; vLLM max_tokens',
  },
  {
    key: 'thinking',
    flag: 'thinking',
    type: 'boolean',
    default: false,
    meaning: 'Qwen3 enable_thinking (thinking is stripped before judging)',
    source: 'Qwen3 chat template (enable_thinking)',
  },
];
