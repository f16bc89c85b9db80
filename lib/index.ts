/**
 * Public entry of papergym-native: the addon loader and doctor, the model (the decoder of Qwen3 /
 * Qwen2 / Llama checkpoints + LoRA + PEFT adapters), tokenizer and chat template, the Policy (batched native sampling), the training
 * math (fused losses, advantages, AdamW), judging and rewards, the data schema, and the training
 * driver. Concern-specific names are also importable from their modules under dist/lib/.
 */
export * from './native.js';
export { ErrorCode, isPapergymError, type PapergymError, type PapergymErrorCode } from './errors.js';
export type * from './addon.js';
export {
  loadModel,
  DecoderModel,
  ALL_LORA_TARGETS,
  type LoadOptions,
  type LoraOptions,
  type ForwardArgs,
  type ForwardResult,
  type Device,
  type Dtype,
} from './model/decoder.js';
/** The old name of {@link DecoderModel}. */
export { Qwen3Model } from './model/qwen3.js';
export { Tokenizer } from './model/tokenizer.js';
export { ChatTemplate, encodeChat } from './model/chat.js';
export { Policy, generate, type PolicyGenerateOptions, type PolicyCompletion, type SamplingOptions } from './model/policy.js';
export { jsdLoss, grpoLoss, selectedLogprobs, sequenceLogprobs, opsdBackward, grpoBackward, k3 } from './train/losses.js';
export { computeAdvantages, type AdvantageOptions, type AdvantageResult } from './train/advantages.js';
export { AdamW, lrAt, type AdamWOptions, type OptimizerState } from './train/optim.js';
export { completionMask, QWEN3_STOP_IDS } from './train/masks.js';
export { runTraining, type RunOptions } from './train/run.js';
export { studentMessages, teacherMessages, type TaskItem, type TaskRubricItem, type RewardFn, type RewardRequest, type RewardResult } from './task/index.js';
export type { ChatMessage, ChatRole } from './llm/messages.js';
export { resolveConfig, PRESETS, DEFAULTS, type TrainConfig, type Stage } from './config/train.js';
export { readDataset, writeDataset, validateItem, loadGeneralRubric, sampleDatasetPath, type PaperGymItem, type RubricItem } from './data/schema.js';
export { createHttpJudge } from './judge/http.js';
export { localJudgeForModel } from './judge/local.js';
export { computeReward, makeRewardFn } from './judge/rewards.js';
export { JudgeHealthError, type Judge, type Verdict, type JudgeRequest, type JudgeHealth } from './judge/types.js';
export { yesProbabilityFromChatLogprobs } from './judge/logprobs.js';
export { TrainingStoppedError } from './train/trainer.js';
export { resolveModelRef, resolveDatasetRef, hubCacheDir, publishAdapter, publishPaperGymDataset } from './hub/index.js';
