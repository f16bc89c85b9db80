import type { CommandModule } from 'yargs';
import { PRESETS, type Stage, type TrainConfig } from '../../lib/config/train.js';
import { runTraining } from '../../lib/train/run.js';
import { launchWorkers, WORKER_ENV } from '../../lib/train/launch.js';
import { DEFAULT_DIST_TIMEOUT_MS } from '../../lib/train/dist.js';

// ---- data parallelism (lib/train/launch.ts, lib/train/dist.ts): torchrun-style flags ----
interface DistArgs {
  'nproc-per-node'?: number;
  nnodes?: number;
  'node-rank'?: number;
  'master-addr'?: string;
  'master-port'?: number;
  'dist-timeout'?: number;
}
function distOptions<T>(y: import('yargs').Argv<T>): import('yargs').Argv<T> {
  return y
    .option('nproc-per-node', { type: 'number', group: 'Data parallel:', describe: 'start N worker processes on this machine (one GPU each on CUDA), splitting the global batch' })
    .option('nnodes', { type: 'number', default: 1, group: 'Data parallel:', describe: 'machines in the run' })
    .option('node-rank', { type: 'number', default: 0, group: 'Data parallel:', describe: 'index of this machine (0 hosts the rendezvous)' })
    .option('master-addr', { type: 'string', default: '127.0.0.1', group: 'Data parallel:', describe: 'address of node 0 (MASTER_ADDR)' })
    .option('master-port', { type: 'number', default: 29500, group: 'Data parallel:', describe: 'rendezvous TCP port on node 0 (MASTER_PORT)' })
    .option('dist-timeout', { type: 'number', default: DEFAULT_DIST_TIMEOUT_MS / 1000, group: 'Data parallel:', describe: 'seconds a collective may wait for the other ranks before failing' }) as never;
}
/** Launcher (`--nproc-per-node`, not inside a worker): spawns the workers; null otherwise. */
async function maybeLaunch(a: DistArgs): Promise<number | null> {
  if (a['nproc-per-node'] === undefined || process.env[WORKER_ENV] === '1') return null;
  return launchWorkers({ nprocPerNode: a['nproc-per-node'], nnodes: a.nnodes ?? 1, nodeRank: a['node-rank'] ?? 0, masterAddr: a['master-addr'] ?? '127.0.0.1', masterPort: a['master-port'] ?? 29500 });
}

interface TrainArgs extends DistArgs {
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
    distOptions(y)
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
      .option('empty-cache', { type: 'boolean', describe: 'release cached GPU memory between rollout and update phases' }) as never,
  handler: async (argv) => {
    const launched = await maybeLaunch(argv);
    if (launched !== null) {
      process.exitCode = launched;
      return;
    }
    const timeout = argv['dist-timeout'];
    if (timeout !== undefined && !(timeout > 0)) throw new Error(`--dist-timeout must be > 0 seconds (got ${timeout})`);
    const summary = await runTraining({ preset: argv.preset, file: argv.config, flags: flagsToConfig(argv) as never, resume: argv.resume, dist: { timeoutMs: (timeout ?? DEFAULT_DIST_TIMEOUT_MS / 1000) * 1000 } });
    if (summary.interrupted) process.exitCode = 130;
  },
};
