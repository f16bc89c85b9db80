import type { CommandModule } from 'yargs';
import { PRESETS, type Stage, type TrainConfig } from '../../lib/config/train.js';
import { runTraining } from '../../lib/train/run.js';

interface TrainArgs {
  config?: string;
  preset?: keyof typeof PRESETS;
  stages?: string;
  model?: string;
  data?: string;
  out?: string;
  device?: string;
  dtype?: 'float32' | 'bfloat16' | 'float16';
  seed?: number;
  resume?: string;
  strict?: boolean;
  judge?: 'local' | 'http';
  'judge-url'?: string;
  'judge-model'?: string;
  'judge-mode'?: 'per-item' | 'per-plan';
  'sft-steps'?: number;
  'opsd-steps'?: number;
  'grpo-steps'?: number;
  'opsd-lr'?: number;
  'grpo-lr'?: number;
  'sft-lr'?: number;
  'group-size'?: number;
  'questions-per-step'?: number;
  'opsd-batch-size'?: number;
  teacher?: 'fixed' | 'current' | 'ema';
  reference?: 'stage-start' | 'base';
  aggregation?: 'grpo' | 'dapo' | 'dr_grpo';
  'kl-coef'?: number;
  'lora-r'?: number;
  'lora-alpha'?: number;
  'lora-fp32-branch'?: boolean;
  'max-new-tokens'?: number;
  temperature?: number;
  'checkpoint-every'?: number;
  'validate-every'?: number;
  'early-stop-patience'?: number;
  recompute?: boolean;
  'empty-cache'?: boolean;
  // memory plan (issue 21)
  'max-memory'?: number;
  'memory-plan'?: boolean;
  'opsd-micro-batch'?: number;
  'grpo-micro-batch'?: number;
  'rollout-rows'?: number;
  'judge-tokens-per-call'?: number;
}

/** Maps CLI flags onto the config (only flags that were given). */
function flagsToConfig(a: TrainArgs): Partial<Record<keyof TrainConfig, unknown>> {
  const f: Record<string, Record<string, unknown> | unknown> = {};
  const sect = (k: string) => (f[k] ??= {}) as Record<string, unknown>;
  if (a.stages !== undefined) f.stages = a.stages.split(',').map((s) => s.trim()).filter(Boolean) as Stage[];
  if (a.model !== undefined) f.model = a.model;
  if (a.data !== undefined) f.data = a.data;
  if (a.out !== undefined) f.out = a.out;
  if (a.device !== undefined) f.device = a.device;
  if (a.dtype !== undefined) f.dtype = a.dtype;
  if (a.seed !== undefined) f.seed = a.seed;
  if (a.strict !== undefined) f.strict = a.strict;
  if (a.judge !== undefined) sect('judge').kind = a.judge;
  if (a['judge-url'] !== undefined) sect('judge').url = a['judge-url'];
  if (a['judge-model'] !== undefined) sect('judge').model = a['judge-model'];
  if (a['judge-mode'] !== undefined) sect('judge').mode = a['judge-mode'];
  if (a['sft-steps'] !== undefined) sect('sft').steps = a['sft-steps'];
  if (a['opsd-steps'] !== undefined) sect('opsd').steps = a['opsd-steps'];
  if (a['grpo-steps'] !== undefined) sect('grpo').steps = a['grpo-steps'];
  if (a['sft-lr'] !== undefined) sect('sft').lr = a['sft-lr'];
  if (a['opsd-lr'] !== undefined) sect('opsd').lr = a['opsd-lr'];
  if (a['grpo-lr'] !== undefined) sect('grpo').lr = a['grpo-lr'];
  if (a['group-size'] !== undefined) sect('grpo').groupSize = a['group-size'];
  if (a['questions-per-step'] !== undefined) sect('grpo').questionsPerStep = a['questions-per-step'];
  if (a['opsd-batch-size'] !== undefined) sect('opsd').batchSize = a['opsd-batch-size'];
  if (a.teacher !== undefined) sect('opsd').teacher = a.teacher;
  if (a['early-stop-patience'] !== undefined) sect('opsd').earlyStopPatience = a['early-stop-patience'];
  if (a.reference !== undefined) sect('grpo').reference = a.reference;
  if (a.aggregation !== undefined) sect('grpo').aggregation = a.aggregation;
  if (a['kl-coef'] !== undefined) sect('grpo').betaKl = a['kl-coef'];
  if (a['lora-r'] !== undefined) sect('lora').r = a['lora-r'];
  if (a['lora-alpha'] !== undefined) sect('lora').alpha = a['lora-alpha'];
  if (a['lora-fp32-branch'] !== undefined) sect('lora').float32Branch = a['lora-fp32-branch'];
  if (a['max-new-tokens'] !== undefined) sect('sampling').maxNewTokens = a['max-new-tokens'];
  if (a.temperature !== undefined) sect('sampling').temperature = a.temperature;
  if (a['checkpoint-every'] !== undefined) sect('checkpoint').every = a['checkpoint-every'];
  if (a['validate-every'] !== undefined) sect('validation').every = a['validate-every'];
  if (a.recompute !== undefined) sect('memory').recompute = a.recompute;
  if (a['empty-cache'] !== undefined) sect('memory').emptyCacheBetweenPhases = a['empty-cache'];
  // memory plan (issue 21): flags given here are kept by the plan
  if (a['max-memory'] !== undefined) sect('memory').maxMemoryGB = a['max-memory'];
  if (a['memory-plan'] !== undefined) sect('memory').plan = a['memory-plan'] ? 'auto' : 'off';
  if (a['opsd-micro-batch'] !== undefined) sect('opsd').microBatch = a['opsd-micro-batch'];
  if (a['grpo-micro-batch'] !== undefined) sect('grpo').microBatch = a['grpo-micro-batch'];
  if (a['rollout-rows'] !== undefined) sect('memory').rolloutRows = a['rollout-rows'];
  if (a['judge-tokens-per-call'] !== undefined) sect('memory').judgeMaxTokensPerCall = a['judge-tokens-per-call'];
  return f as Partial<Record<keyof TrainConfig, unknown>>;
}

/**
 * `papergym-native train`: OPSD then GRPO (or any `--stages` order, plus `sft`). With no
 * arguments it trains the embedded default: a tiny random Qwen3 on the embedded sample dataset
 * with the local judge, writing under runs/<timestamp>/.
 */
export const trainCommand: CommandModule<object, TrainArgs> = {
  command: 'train',
  describe: 'Train a LoRA adapter: OPSD then GRPO (defaults < --config < flags; no args = embedded tiny demo)',
  builder: (y) =>
    y
      .option('config', { type: 'string', describe: 'YAML config file' })
      .option('preset', { choices: Object.keys(PRESETS) as (keyof typeof PRESETS)[], describe: "the paper's settings for a model size" })
      .option('stages', { type: 'string', describe: 'comma list of sft, opsd, grpo (default opsd,grpo)' })
      .option('model', { type: 'string', describe: 'HF Qwen3 checkpoint dir (default: the embedded tiny model)' })
      .option('data', { type: 'string', describe: 'dataset JSONL (default: the embedded sample dataset)' })
      .option('out', { type: 'string', describe: 'run dir (default runs/<timestamp>)' })
      .option('device', { type: 'string', describe: 'cpu | cuda | cuda:N' })
      .option('dtype', { choices: ['float32', 'bfloat16', 'float16'] as const })
      .option('seed', { type: 'number' })
      .option('resume', { type: 'string', describe: 'continue from a checkpoint or run dir' })
      .option('strict', { type: 'boolean', describe: 'stop on the first invalid dataset row' })
      .option('judge', { choices: ['local', 'http'] as const })
      .option('judge-url', { type: 'string' })
      .option('judge-model', { type: 'string' })
      .option('judge-mode', { choices: ['per-item', 'per-plan'] as const })
      .option('sft-steps', { type: 'number' })
      .option('opsd-steps', { type: 'number' })
      .option('grpo-steps', { type: 'number' })
      .option('sft-lr', { type: 'number' })
      .option('opsd-lr', { type: 'number' })
      .option('grpo-lr', { type: 'number' })
      .option('group-size', { type: 'number' })
      .option('questions-per-step', { type: 'number' })
      .option('opsd-batch-size', { type: 'number' })
      .option('teacher', { choices: ['fixed', 'current', 'ema'] as const })
      .option('early-stop-patience', { type: 'number' })
      .option('reference', { choices: ['stage-start', 'base'] as const })
      .option('aggregation', { choices: ['grpo', 'dapo', 'dr_grpo'] as const })
      .option('kl-coef', { type: 'number' })
      .option('lora-r', { type: 'number' })
      .option('lora-alpha', { type: 'number' })
      .option('lora-fp32-branch', { type: 'boolean', describe: 'bf16/fp16 models: LoRA matmuls in float32 as peft without autocast (default: model dtype with float32 master weights, as TRL with bf16=True)' })
      .option('max-new-tokens', { type: 'number' })
      .option('temperature', { type: 'number' })
      .option('checkpoint-every', { type: 'number' })
      .option('validate-every', { type: 'number' })
      .option('recompute', { type: 'boolean', describe: 'recompute each decoder layer in backward (less activation memory)' })
      .option('empty-cache', { type: 'boolean', describe: 'release cached GPU memory between rollout and update phases' })
      // memory plan (issue 21; lib/train/memory-plan.ts)
      .option('max-memory', { type: 'number', describe: 'cap the memory plan at this many GB (1e9 bytes) of GPU memory (shared GPUs, smaller cards)' })
      .option('memory-plan', { type: 'boolean', describe: 'choose micro-batches, recompute, rollout rows and judge tokens per call from the model shapes and the memory budget (default on CUDA; --no-memory-plan keeps the settings as given)' })
      .option('opsd-micro-batch', { type: 'number', describe: 'OPSD update micro-batch (sequences per backward; kept by the plan)' })
      .option('grpo-micro-batch', { type: 'number', describe: 'GRPO update micro-batch (sequences per backward; kept by the plan)' })
      .option('rollout-rows', { type: 'number', describe: 'rollout rows per decode batch (kept by the plan)' })
      .option('judge-tokens-per-call', { type: 'number', describe: "local judge: rows × tokens per native call (its prefix KV cache; kept by the plan)" }) as never,
  handler: async (argv) => {
    const summary = await runTraining({ preset: argv.preset, file: argv.config, flags: flagsToConfig(argv) as never, resume: argv.resume });
    if (summary.interrupted) process.exitCode = 130;
  },
};
