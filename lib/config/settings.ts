/**
 * Every setting of every command, one entry each (lib/config/schema.ts says what an entry holds).
 * `TRAIN_SETTINGS` are the keys of the training config (layered defaults < preset < file < flags;
 * DEFAULTS in lib/config/train.ts is built from them); the other lists are the options of one
 * command each. docs/config.md is generated from this file (`node scripts/gen-config-docs.mjs`).
 */
import type { Setting } from './schema.js';
import { JUDGE_SETTINGS } from './judge.js';
import { DEFAULT_ALPHA } from './reward.js';
import { LORA_TARGETS } from '../addon.js';

export { JUDGE_SETTINGS };

const DEVICE = /^(cpu|cuda(:\d+)?)$/;
const DEVICE_AUTO = /^(auto|cpu|cuda(:\d+)?)$/;

/** Keys of the training config (lib/config/train.ts TrainConfig), in docs order. */
export const TRAIN_SETTINGS: readonly Setting[] = [
  // ---- run ----
  { key: 'model', flag: 'model', type: 'path', default: null, values: 'a Hugging Face Qwen3 checkpoint dir (config.json, safetensors, tokenizer.json)', meaning: 'Base model to train; unset = the embedded tiny random Qwen3 (real tokenizer) that trains in minutes on CPU', source: 'TRL ModelConfig.model_name_or_path; paper: Qwen3-1.7B/4B/8B' },
  { key: 'data', flag: 'data', type: 'path', default: null, values: 'a PaperGym dataset JSONL (docs/data.md)', meaning: 'Training and validation items (split train / val); unset = the embedded hand-made sample dataset', source: 'TRL train_dataset; paper: PaperGym items (docs/design.md §7)' },
  { key: 'out', flag: 'out', type: 'path', default: null, values: 'a writable dir', meaning: 'Run dir for config.json, metrics.jsonl, checkpoints, final adapter and report.html; unset = runs/<timestamp>; a dir that already holds a run is refused (continue it with --resume)', source: 'transformers TrainingArguments.output_dir' },
  { key: 'device', flag: 'device', type: 'string', default: 'cpu', pattern: DEVICE, values: 'cpu | cuda | cuda:N', meaning: 'Device of the model and the training step (the presets set cuda)', source: 'transformers TrainingArguments (use_cpu / device placement)' },
  { key: 'dtype', flag: 'dtype', type: 'enum', choices: ['float32', 'bfloat16', 'float16'], default: null, meaning: 'Model weight dtype; unset = bfloat16 on CUDA, float32 on CPU (LoRA weights and optimizer state are float32 either way)', source: 'transformers TrainingArguments.bf16 / fp16; ModelConfig.torch_dtype' },
  { key: 'stages', flag: 'stages', type: 'list', items: 'string', choices: ['sft', 'opsd', 'grpo'], default: ['opsd', 'grpo'], meaning: 'Training stages in order; the paper ablations are one flag away: opsd (OPSD only), grpo (GRPO only), grpo,opsd (reversed), sft (SFT baseline)', source: 'paper: OPSD → GRPO schedule and its ablations (docs/design.md §6)' },
  { key: 'seed', flag: 'seed', type: 'integer', min: 0, default: 1234, meaning: 'Seed of the data order, sampling, dropout and LoRA init; every random draw derives from (seed, stage, step), so a resumed run replays exactly', source: 'transformers TrainingArguments.seed' },
  { key: 'strict', flag: 'strict', type: 'boolean', default: false, meaning: 'Stop at the first invalid dataset row instead of skipping it with a warning', source: 'papergym-native (dataset validation, docs/data.md)' },
  // ---- LoRA ----
  { key: 'lora.r', flag: 'lora-r', type: 'integer', min: 1, default: 8, meaning: 'LoRA rank r (paper presets: 64)', source: 'peft LoraConfig.r; paper (docs/design.md §6): r = 64' },
  { key: 'lora.alpha', flag: 'lora-alpha', type: 'number', min: 0, exclusiveMin: true, default: 16, meaning: 'LoRA scaling alpha: the update is (alpha / r)·B·A (paper presets: 128)', source: 'peft LoraConfig.lora_alpha; paper (docs/design.md §6): alpha = 128' },
  { key: 'lora.dropout', flag: 'lora-dropout', type: 'number', min: 0, max: 1, exclusiveMax: true, default: 0, meaning: 'Dropout on the LoRA branch input (training only)', source: 'peft LoraConfig.lora_dropout' },
  { key: 'lora.useRslora', flag: 'lora-rslora', type: 'boolean', default: false, meaning: 'Rank-stabilised scaling alpha / sqrt(r) instead of alpha / r', source: 'peft LoraConfig.use_rslora (Kalajdzievski 2023)' },
  { key: 'lora.targetModules', flag: 'lora-target-modules', type: 'list', items: 'string', choices: LORA_TARGETS, default: [...LORA_TARGETS], meaning: 'Linear layers that get a LoRA adapter', source: 'peft LoraConfig.target_modules ("all-linear")' },
  { key: 'lora.float32Branch', flag: 'lora-fp32-branch', type: 'boolean', default: false, meaning: 'With a bf16/fp16 model, run the LoRA matmuls in float32 as peft without autocast; false = model dtype with float32 master weights, as TRL with bf16=True', source: 'transformers Trainer bf16=True (torch.autocast) vs peft without autocast' },
  // ---- sampling ----
  { key: 'sampling.temperature', flag: 'temperature', type: 'number', min: 0, default: 1.0, meaning: 'Rollout sampling temperature (0 = greedy); also the temperature of the logprobs in the losses', source: 'TRL GRPOConfig.temperature; vLLM SamplingParams.temperature' },
  { key: 'sampling.topP', flag: 'top-p', type: 'number', min: 0, exclusiveMin: true, max: 1, default: 0.95, meaning: 'Nucleus sampling: keep the smallest set of tokens with probability mass >= top-p (1 = off)', source: 'TRL GRPOConfig.top_p' },
  { key: 'sampling.topK', flag: 'top-k', type: 'integer', min: 0, default: 20, meaning: 'Keep the k most likely tokens when sampling (0 = off)', source: 'TRL GRPOConfig.top_k; Qwen3 generation_config' },
  { key: 'sampling.maxNewTokens', flag: 'max-new-tokens', type: 'integer', min: 1, max: 1048576, default: 24, meaning: 'Maximum completion length in tokens (paper presets: 1024)', source: 'TRL GRPOConfig.max_completion_length' },
  { key: 'sampling.mergeAdapter', flag: 'merge-adapter', type: 'enum', choices: ['auto', 'on', 'off'], default: 'auto', meaning: 'Rollouts sample from the LoRA adapter merged into the base weights (W + scaling·B·A in the model dtype, made once per sampling call): no LoRA branch in the decode step, one extra copy of the targeted weights while sampling; the rollout logprobs are the merged weights\' (bf16 rounding from the LoRA-branch forward). auto = on for CUDA when the memory plan fits the copy, off on CPU; off = the LoRA branch. A rollout that runs out of memory with the copy is sampled again through the branch, which the rest of the run keeps', source: 'PEFT merge_and_unload; TRL GRPO with vLLM (merged adapter weights)' },
  { key: 'sampling.enableThinking', flag: 'thinking', type: 'boolean', default: false, meaning: 'Qwen3 chat template enable_thinking for the policy prompts', source: 'Qwen3 chat template (enable_thinking)' },
  // ---- optimizer ----
  { key: 'optim.weightDecay', flag: 'weight-decay', type: 'number', min: 0, default: 0, meaning: 'AdamW decoupled weight decay on the LoRA weights', source: 'transformers TrainingArguments.weight_decay' },
  { key: 'optim.maxGradNorm', flag: 'max-grad-norm', type: 'number', min: 0, exclusiveMin: true, default: 1.0, meaning: 'Clip the global L2 gradient norm to this value before each step', source: 'transformers TrainingArguments.max_grad_norm' },
  { key: 'optim.betas', flag: 'adam-betas', type: 'list', items: 'number', length: 2, min: 0, max: 1, exclusiveMax: true, default: [0.9, 0.999], values: 'beta1,beta2', meaning: 'AdamW moment decay rates beta1, beta2', source: 'transformers TrainingArguments.adam_beta1 / adam_beta2' },
  { key: 'optim.eps', flag: 'adam-eps', type: 'number', min: 0, exclusiveMin: true, default: 1e-8, meaning: 'AdamW epsilon added to the second-moment root', source: 'transformers TrainingArguments.adam_epsilon' },
  { key: 'optim.schedule', flag: 'lr-schedule', type: 'enum', choices: ['constant', 'linear', 'cosine'], default: 'constant', meaning: 'Learning-rate schedule within each stage (after warmup)', source: 'transformers TrainingArguments.lr_scheduler_type' },
  { key: 'optim.warmupSteps', flag: 'warmup-steps', type: 'integer', min: 0, max: 1e9, default: 0, meaning: 'Linear warmup steps at the start of each stage', source: 'transformers TrainingArguments.warmup_steps' },
  // ---- SFT baseline ----
  { key: 'sft.steps', flag: 'sft-steps', type: 'integer', min: 0, max: 1e9, default: 8, meaning: 'Optimizer steps of the SFT stage (0 = skip the stage)', source: 'TRL SFTConfig.max_steps; paper: SFT baseline' },
  { key: 'sft.lr', flag: 'sft-lr', type: 'number', min: 0, exclusiveMin: true, default: 1e-3, meaning: 'Peak learning rate of the SFT stage', source: 'TRL SFTConfig.learning_rate' },
  { key: 'sft.batchSize', flag: 'sft-batch-size', type: 'integer', min: 1, max: 65536, default: 2, meaning: 'Reference answers per SFT step (cross-entropy, token mean over the batch)', source: 'TRL SFTConfig.per_device_train_batch_size' },
  { key: 'sft.batchSizePerRank', flag: 'sft-batch-size-per-rank', type: 'integer', min: 1, max: 65536, default: null, meaning: 'Reference answers per SFT step per process: the global batch (sft.batchSize, recorded so in config.json) becomes this × the world size, so more processes train on more answers per step; unset = sft.batchSize is the global batch, split over the processes. Give one of the two', source: 'TRL SFTConfig.per_device_train_batch_size (global = per device × processes)' },
  // ---- OPSD ----
  { key: 'opsd.steps', flag: 'opsd-steps', type: 'integer', min: 0, max: 1e9, default: 8, meaning: 'Optimizer steps of the OPSD stage (0 = skip; paper: 200 for 1.7B/4B, 400 for 8B)', source: 'paper: OPSD steps (docs/design.md §6); TRL GKDConfig.max_steps' },
  { key: 'opsd.lr', flag: 'opsd-lr', type: 'number', min: 0, exclusiveMin: true, default: 1e-3, meaning: 'Peak learning rate of OPSD (paper: 5e-6)', source: 'paper (docs/design.md §6); TRL GKDConfig.learning_rate' },
  { key: 'opsd.batchSize', flag: 'opsd-batch-size', type: 'integer', min: 1, max: 65536, default: 2, meaning: 'Questions per OPSD step, one student rollout each', source: 'siyan-zhao/OPSD (batch of prompts per step); TRL GKDConfig.per_device_train_batch_size' },
  { key: 'opsd.batchSizePerRank', flag: 'opsd-batch-size-per-rank', type: 'integer', min: 1, max: 65536, default: null, meaning: 'Questions per OPSD step per process: the global batch (opsd.batchSize, recorded so in config.json) becomes this × the world size; unset = opsd.batchSize is the global batch, split over the processes. Give one of the two', source: 'TRL GKDConfig.per_device_train_batch_size (global = per device × processes)' },
  { key: 'opsd.microBatch', flag: 'opsd-micro-batch', type: 'integer', min: 1, max: 65536, default: 2, meaning: 'Rollouts per backward pass (gradient accumulation inside a step: the same completions give the same gradient); with --rollout-rows 0 also the rows per sampling chunk (one seed each), so another value samples other completions — on --resume too', source: 'transformers TrainingArguments.gradient_accumulation_steps (inverse)' },
  { key: 'opsd.beta', flag: 'jsd-beta', type: 'number', min: 0, max: 1, default: 0.5, meaning: 'Generalised JSD interpolation beta: 0 = forward KL(teacher‖student) limit, 1 = reverse KL limit, 0.5 = symmetric JSD', source: 'TRL GKDConfig.beta (Agarwal et al. 2024, generalised JSD)' },
  { key: 'opsd.teacher', flag: 'teacher', type: 'enum', choices: ['fixed', 'current', 'ema'], default: 'fixed', meaning: 'OPSD teacher weights: the base model (adapter off), the current adapter (detached) or an EMA of it; the teacher prompt adds the rubric', source: 'OPSD (Zhao et al. 2025, self-distillation with privileged context)' },
  { key: 'opsd.emaDecay', flag: 'ema-decay', type: 'number', min: 0, max: 1, exclusiveMax: true, default: 0.99, meaning: 'EMA decay of the ema teacher per step', source: 'TRL sync_ref_model / ref_model_mixup_alpha (EMA reference)' },
  { key: 'opsd.earlyStopPatience', flag: 'early-stop-patience', type: 'integer', min: 0, default: 0, meaning: 'End OPSD after the validation score falls this many times in a row (0 = never)', source: 'transformers EarlyStoppingCallback.early_stopping_patience' },
  // ---- GRPO ----
  { key: 'grpo.steps', flag: 'grpo-steps', type: 'integer', min: 0, max: 1e9, default: 6, meaning: 'Optimizer steps of the GRPO stage (0 = skip; paper: 200 for 1.7B/4B, 100 for 8B)', source: 'paper: GRPO steps (docs/design.md §6); TRL GRPOConfig.max_steps' },
  { key: 'grpo.lr', flag: 'grpo-lr', type: 'number', min: 0, exclusiveMin: true, default: 1e-3, meaning: 'Peak learning rate of GRPO (paper: 1e-5)', source: 'paper (docs/design.md §6); TRL GRPOConfig.learning_rate' },
  { key: 'grpo.questionsPerStep', flag: 'questions-per-step', type: 'integer', min: 1, max: 65536, default: 2, meaning: 'Questions per GRPO step over all processes, the global batch (each gets group-size completions); with --nproc-per-node the processes split it, so N processes take the same steps as one', source: 'TRL GRPOConfig: per_device_train_batch_size / num_generations' },
  { key: 'grpo.questionsPerRank', flag: 'questions-per-rank', type: 'integer', min: 1, max: 65536, default: null, meaning: 'Questions per GRPO step per process (each gets group-size completions): the global batch (grpo.questionsPerStep, recorded so in config.json) becomes this × the world size, so throughput grows with the processes; unset = --questions-per-step is the global batch, split over the processes (the same steps as one process). Give one of the two', source: 'TRL GRPOConfig.per_device_train_batch_size / num_generations (global = per device × processes); verl data.train_batch_size' },
  { key: 'grpo.groupSize', flag: 'group-size', type: 'integer', min: 2, max: 4096, default: 4, meaning: 'Completions per question G; advantages are normalised within a group (paper: 8)', source: 'TRL GRPOConfig.num_generations; paper (docs/design.md §6): G = 8' },
  { key: 'grpo.microBatch', flag: 'grpo-micro-batch', type: 'integer', min: 1, max: 65536, default: 4, meaning: 'Completions per backward pass (the same completions give the same gradient); with --rollout-rows 0 also the rows per sampling chunk (one seed each), so another value samples other completions — on --resume too', source: 'transformers TrainingArguments.gradient_accumulation_steps (inverse)' },
  { key: 'grpo.epsLow', flag: 'eps-low', type: 'number', min: 0, max: 1, default: 0.2, meaning: 'Lower clip range: the ratio is clipped at 1 - eps-low', source: 'TRL GRPOConfig.epsilon (PPO clip)' },
  { key: 'grpo.epsHigh', flag: 'eps-high', type: 'number', min: 0, default: 0.28, meaning: 'Upper clip range: the ratio is clipped at 1 + eps-high (DAPO clip-higher)', source: 'TRL GRPOConfig.epsilon_high (DAPO, Yu et al. 2025)' },
  { key: 'grpo.betaKl', flag: 'kl-coef', type: 'number', min: 0, default: 0.01, meaning: 'Weight of the k3 KL penalty to the reference policy (0 = no reference pass)', source: 'TRL GRPOConfig.beta; paper (docs/design.md §6): 0.01' },
  { key: 'grpo.aggregation', flag: 'aggregation', type: 'enum', choices: ['grpo', 'dapo', 'dr_grpo'], default: 'grpo', meaning: 'Loss aggregation: mean of per-sequence token means (grpo), token mean over the batch (dapo), or sum / (batch × max length) (dr_grpo)', source: 'TRL GRPOConfig.loss_type' },
  { key: 'grpo.scale', flag: 'advantage-scale', type: 'enum', choices: ['group', 'batch', 'none'], default: 'group', meaning: 'Divide advantages by the std of the group, of the batch, or not at all (Dr. GRPO)', source: 'TRL GRPOConfig.scale_rewards' },
  { key: 'grpo.dropZeroVariance', flag: 'drop-zero-variance', type: 'boolean', default: false, meaning: 'Leave groups whose rewards are all equal out of the loss', source: 'DAPO dynamic sampling (Yu et al. 2025)' },
  { key: 'grpo.reference', flag: 'reference', type: 'enum', choices: ['stage-start', 'base'], default: 'stage-start', meaning: 'KL reference policy: a snapshot of the adapter at the start of GRPO, or the base model (adapter off)', source: 'TRL GRPOTrainer ref_model (peft: adapter disabled)' },
  { key: 'grpo.judgeOverlap', flag: 'judge-overlap', type: 'enum', choices: ['auto', 'on', 'off'], default: 'auto', meaning: 'Local judge: score each group as soon as its completions finished, on its own worker thread and CUDA stream while the other rows still decode (the model\'s read-only calls share it), instead of after the rollout; adds the judge\'s working memory to the rollout phase. auto = on for CUDA when the memory plan fits both at once, off otherwise (CPU, no plan). The HTTP judge always judges per group', source: 'issue 15: the judge hidden behind sampling; TRL / NeMo-RL overlap of reward and generation' },
  { key: 'grpo.alpha', flag: 'reward-alpha', type: 'number', min: 0, max: 1, default: DEFAULT_ALPHA, meaning: 'Reward mix r = alpha·r_spec + (1 − alpha)·r_gen', source: 'paper: reward mix, alpha = 0.7 (docs/design.md §6)' },
  { key: 'grpo.judgeStepTimeoutMs', flag: 'judge-step-timeout-ms', type: 'integer', min: 0, max: 86400000, default: 1800000, meaning: 'Longest a GRPO step waits on the judge, from its first judge call (ms); past it the step stops the run with a checkpoint of the state before it and the resume command. Progress lines every 15 s while waiting; Ctrl-C stops at once. 0 = no deadline', source: 'papergym-native (issue 38: a hanging judge is bounded and visible)' },
  // ---- judge (one list shared with eval / probe-judge: JUDGE_SETTINGS below) ----
  ...JUDGE_SETTINGS.map((j) => ({ ...j, key: `judge.${j.key}`, ...(j.key === 'kind' ? { default: 'local' } : j.key === 'concurrency' ? { default: 8 } : {}) })),
  // ---- validation, checkpoints, logging ----
  { key: 'validation.every', flag: 'validate-every', type: 'integer', min: 0, max: 1e9, default: 4, meaning: 'Validate every N stage steps (greedy plans on val items, mean r_spec; 0 = never)', source: 'transformers TrainingArguments.eval_steps' },
  { key: 'validation.maxItems', flag: 'validation-items', type: 'integer', min: 0, default: 2, meaning: 'Validation items used (the first N of split val; 0 = no validation)', source: 'transformers eval_dataset (subset)' },
  { key: 'checkpoint.every', flag: 'checkpoint-every', type: 'integer', min: 0, max: 1e9, default: 4, meaning: 'Checkpoint every N stage steps (also at the end of the run and on SIGINT; 0 = only then); report.html is rewritten at each checkpoint', source: 'transformers TrainingArguments.save_steps' },
  { key: 'checkpoint.saveTotalLimit', flag: 'save-total-limit', type: 'integer', min: 1, default: null, meaning: 'Keep only the last N checkpoints (older step-* dirs are deleted after a new one is complete); unset = keep all', source: 'transformers TrainingArguments.save_total_limit' },
  { key: 'log.every', flag: 'log-every', type: 'integer', min: 1, max: 1e9, default: 1, meaning: 'Print a progress line every N steps (metrics.jsonl gets every step)', source: 'transformers TrainingArguments.logging_steps' },
  { key: 'log.profileStep', flag: 'profile-step', type: 'integer', min: 0, default: 0, meaning: 'Profile the GPU kernels of this step of every stage (1-based; 0 = off; CUDA runs only): per phase, GPU busy time and time by kernel in <out>/profile/<stage>-step<N>.json (Kineto, the engine of torch.profiler; a phase that runs inside another phase counts in the outer one)', source: 'torch.profiler.profile (schedule: one active step)' },
  { key: 'log.reportTo', flag: 'report-to', type: 'list', items: 'string', choices: ['tensorboard', 'mlflow', 'wandb', 'all', 'none'], default: null, meaning: 'Experiment trackers that get every metrics row, the resolved config as parameters and the final adapter and report as artifacts (docs/trackers.md); a failing tracker warns and training continues; unset / none = metrics.jsonl and report.html only', source: 'transformers TrainingArguments.report_to (TRL)' },
  { key: 'memory.recompute', flag: 'recompute', type: 'boolean', default: false, meaning: 'Recompute each decoder layer in backward (less activation memory, ~30% more compute)', source: 'transformers gradient_checkpointing' },
  { key: 'memory.emptyCacheBetweenPhases', flag: 'empty-cache', type: 'boolean', default: false, meaning: 'Release cached GPU blocks between the rollout and update phases', source: 'torch.cuda.empty_cache' },
  { key: 'memory.plan', flag: 'memory-plan', type: 'enum', choices: ['auto', 'off'], default: 'auto', meaning: 'Memory plan before the first step (lib/train/memory-plan.ts): on CUDA, or on any device with --max-memory, choose update micro-batches, recompute, rollout rows and judge tokens per call so every phase fits; off = use the settings as they are', source: 'papergym-native; accelerate find_executable_batch_size' },
  { key: 'memory.maxMemoryGB', flag: 'max-memory', type: 'number', min: 0, exclusiveMin: true, default: null, meaning: 'Cap in GB (1e9 bytes) of device memory, for shared or smaller GPUs: the memory plan fits every phase under it, and on CUDA the caching allocator is held under it too (allocated + cached, torch.cuda.set_per_process_memory_fraction), so a capped run behaves as on a card of that size; unset = the device total', source: 'accelerate / transformers max_memory; PyTorch set_per_process_memory_fraction' },
  { key: 'memory.rolloutRows', flag: 'rollout-rows', type: 'integer', min: 0, max: 65536, default: 0, meaning: 'Rollout rows per sampling chunk (one decode call, one seed; also per reference-logprob call); with --nproc-per-node the chunks are split over the ranks, so 1 and N processes sample the same chunks; 0 = the stage\'s micro-batch, or the plan\'s choice', source: 'vLLM max_num_seqs' },
  { key: 'memory.judgeMaxTokensPerCall', flag: 'judge-tokens-per-call', type: 'integer', min: 0, default: 0, meaning: 'Local judge: rows × tokens of its native scoring calls in flight (shared by the plans scored at once); 0 = the judge\'s default, or the plan\'s choice', source: 'vLLM max_num_batched_tokens'},
];

/** `train` options that are not config keys. */
export const TRAIN_COMMAND_OPTIONS: readonly Setting[] = [
  { key: 'config', flag: 'config', type: 'path', default: null, values: 'a YAML or JSON file with config keys (docs/config.md)', meaning: 'Config file, layered over the preset and under the flags', source: 'TRL YAML config (--config)' },
  { key: 'preset', flag: 'preset', type: 'enum', choices: ['qwen3-1.7b', 'qwen3-4b', 'qwen3-8b'], default: null, meaning: "The paper's settings for a model size (LoRA 64/128, lrs, steps, G = 8, KL 0.01, device cuda)", source: 'paper: training settings (docs/design.md §6)' },
  { key: 'resume', flag: 'resume', type: 'path', default: null, values: 'a run dir or a checkpoint dir', meaning: 'Continue a run from its latest checkpoint; only step counts (to extend a run) and run-time settings may change: device, judge URL and concurrency, logging and profiling, checkpointing, validation interval, micro-batches, recomputation, merged adapter, judge overlap', source: 'transformers Trainer.train(resume_from_checkpoint)' },
  // Data parallelism (lib/train/launch.ts, lib/train/dist.ts): launcher options, not config keys.
  { key: 'nprocPerNode', flag: 'nproc-per-node', type: 'integer', min: 1, default: null, meaning: 'Start this many worker processes on this machine (one GPU each on CUDA; Gloo on CPU), each training a contiguous share of every step\'s global batch; unset = one process', source: 'torchrun --nproc-per-node; DDP' },
  { key: 'nnodes', flag: 'nnodes', type: 'integer', min: 1, default: 1, meaning: 'Machines in the run (world size = nnodes × nproc-per-node)', source: 'torchrun --nnodes' },
  { key: 'nodeRank', flag: 'node-rank', type: 'integer', min: 0, default: 0, meaning: 'Index of this machine; node 0 hosts the rendezvous (must be < --nnodes)', source: 'torchrun --node-rank' },
  { key: 'masterAddr', flag: 'master-addr', type: 'string', default: '127.0.0.1', values: 'a host name or IP address of node 0', meaning: 'Address of node 0 (MASTER_ADDR)', source: 'torchrun --master-addr' },
  { key: 'masterPort', flag: 'master-port', type: 'integer', min: 1, max: 65535, default: 29500, meaning: 'Rendezvous TCP port on node 0 (MASTER_PORT; checked free before the workers start)', source: 'torchrun --master-port' },
  { key: 'distTimeout', flag: 'dist-timeout', type: 'number', min: 0, exclusiveMin: true, default: 600, meaning: 'Seconds a collective may wait for the other ranks before failing naming them', source: 'torch.distributed.init_process_group(timeout) (default 10 min)' },
];

/** generate / eval / serve: model and device. */
const MODEL_OPTIONS: readonly Setting[] = [
  { key: 'model', flag: 'model', type: 'path', default: null, values: 'a Qwen3 checkpoint dir (required)', meaning: 'Base model dir (config.json, safetensors, tokenizer.json)', source: 'transformers from_pretrained; vLLM --model' },
  { key: 'adapter', flag: 'adapter', type: 'path', default: null, values: 'a PEFT LoRA adapter dir', meaning: 'LoRA adapter to apply (a run\'s final/ or a checkpoint)', source: 'peft PeftModel.from_pretrained; vLLM --lora-modules' },
  { key: 'device', flag: 'device', type: 'string', default: 'auto', pattern: DEVICE_AUTO, values: 'auto | cpu | cuda | cuda:N', meaning: 'Device; auto = cuda when the addon sees a GPU, else cpu', source: 'transformers device_map / vLLM --device' },
  { key: 'dtype', flag: 'dtype', type: 'enum', choices: ['float32', 'bfloat16', 'float16'], default: null, meaning: 'Weight dtype; unset = bfloat16 on CUDA, float32 on CPU', source: 'transformers torch_dtype; vLLM --dtype' },
  {
    key: 'allowNonFiniteWeights', flag: 'allow-non-finite-weights', type: 'boolean', default: false,
    meaning: 'Load model / adapter weights holding NaN or Inf with a warning naming the tensors, instead of refusing them (an error naming the file and tensors)',
    source: 'papergym-native (native/io/finite.h: one isfinite reduction per tensor at load)',
  },
];

const SAMPLING_OPTIONS: readonly Setting[] = [
  { key: 'temperature', flag: 'temperature', type: 'number', min: 0, default: 0.7, meaning: 'Sampling temperature (0 = greedy)', source: 'vLLM SamplingParams.temperature; Qwen3 non-thinking recommendation 0.7' },
  { key: 'topP', flag: 'top-p', type: 'number', min: 0, exclusiveMin: true, max: 1, default: 0.8, meaning: 'Nucleus sampling mass (1 = off)', source: 'vLLM SamplingParams.top_p; Qwen3 recommendation 0.8' },
  { key: 'topK', flag: 'top-k', type: 'integer', min: 0, default: 20, meaning: 'Top-k sampling (0 = off)', source: 'vLLM SamplingParams.top_k; Qwen3 recommendation 20' },
  { key: 'maxNewTokens', flag: 'max-new-tokens', type: 'integer', min: 1, default: 1024, meaning: 'Maximum new tokens per completion', source: 'transformers generate max_new_tokens; vLLM max_tokens' },
  { key: 'thinking', flag: 'thinking', type: 'boolean', default: false, meaning: 'Qwen3 enable_thinking (thinking is stripped before judging)', source: 'Qwen3 chat template (enable_thinking)' },
];

export const GENERATE_OPTIONS: readonly Setting[] = [
  ...MODEL_OPTIONS,
  { key: 'prompt', flag: 'prompt', type: 'list', items: 'string', repeatable: true, default: null, values: 'prompt text', meaning: 'Prompt sent as a user message; give this or --input', source: 'vLLM generate prompts' },
  { key: 'input', flag: 'input', type: 'path', default: null, values: 'JSONL of {question|prompt|messages, id?}', meaning: 'Input file; questions get the training student prompt unless --plain', source: 'vLLM offline batch inference input' },
  { key: 'out', flag: 'out', type: 'path', default: null, values: 'a writable file', meaning: 'Output JSONL (one line per completion); unset = stdout', source: 'vLLM run_batch -o' },
  { key: 'plain', flag: 'plain', type: 'boolean', default: false, meaning: 'Send --input questions as bare user messages (no student prompt)', source: 'papergym-native (student prompt, lib/task/prompts.ts)' },
  { key: 'system', flag: 'system', type: 'string', default: null, values: 'any text', meaning: 'System message for --prompt texts', source: 'OpenAI chat system role' },
  { key: 'n', flag: 'n', type: 'integer', min: 1, default: 1, meaning: 'Completions per prompt', source: 'vLLM SamplingParams.n' },
  ...SAMPLING_OPTIONS,
  { key: 'seed', flag: 'seed', type: 'integer', min: 0, default: null, meaning: 'Sampling seed (batch b uses seed + b; one random stream per batch, so the same inputs, --n and --batch-size give the same completions and another batch composition samples others — serve seeds each request on its own); unset = random, printed to stderr', source: 'vLLM SamplingParams.seed' },
  { key: 'batchSize', flag: 'batch-size', type: 'integer', min: 1, default: 16, meaning: 'Prompts per generation call', source: 'vLLM max_num_seqs' },
  { key: 'tokens', flag: 'tokens', type: 'boolean', default: false, meaning: 'Also write token_ids and logprobs per completion', source: 'vLLM SamplingParams.logprobs' },
];

export const EVAL_OPTIONS: readonly Setting[] = [
  ...MODEL_OPTIONS,
  { key: 'data', flag: 'data', type: 'path', default: null, values: 'a PaperGym JSONL or items written by `import` (required)', meaning: 'Benchmark items to evaluate', source: 'paper: evaluation benchmark (rubric coverage)' },
  { key: 'out', flag: 'out', type: 'path', default: null, values: 'a writable file', meaning: 'Per-item results JSONL (input of `report --eval`)', source: 'lm-evaluation-harness --log_samples' },
  { key: 'report', flag: 'report', type: 'path', default: null, values: 'a writable file', meaning: 'Report JSON (coverage with CIs, judge stats)', source: 'lm-evaluation-harness --output_path' },
  { key: 'plans', flag: 'plans', type: 'path', default: null, values: 'a writable file', meaning: 'Generated plans JSONL', source: 'lm-evaluation-harness --log_samples' },
  { key: 'split', flag: 'split', type: 'enum', choices: ['train', 'val', 'test'], default: null, meaning: 'Only items of this split; unset = all', source: 'datasets split' },
  { key: 'limit', flag: 'limit', type: 'integer', min: 1, default: null, meaning: 'First N items only; unset = all', source: 'lm-evaluation-harness --limit' },
  { key: 'samples', flag: 'samples', type: 'integer', min: 1, default: 1, meaning: 'Plans per question', source: 'vLLM SamplingParams.n' },
  ...SAMPLING_OPTIONS,
  { key: 'general', flag: 'general', type: 'boolean', default: true, meaning: 'Also judge the general rubric items (--no-general to skip)', source: 'paper: general rubric items (docs/design.md §6)' },
  { key: 'generalRubric', flag: 'general-rubric', type: 'path', default: null, values: 'a general rubric JSON', meaning: 'General rubric file; unset = data/general-rubric.json', source: 'paper: general rubric items (docs/design.md §6)' },
  { key: 'alpha', flag: 'alpha', type: 'number', min: 0, max: 1, default: DEFAULT_ALPHA, meaning: 'Reward weight of the instance items', source: 'paper: reward mix, alpha = 0.7 (docs/design.md §6)' },
  { key: 'resamples', flag: 'resamples', type: 'integer', min: 0, default: 1000, meaning: 'Bootstrap resamples for the CIs (0 = no interval)', source: 'Efron & Tibshirani 1993 (percentile bootstrap)' },
  { key: 'seed', flag: 'seed', type: 'integer', min: 0, default: 0, meaning: 'Generation and bootstrap seed', source: 'vLLM SamplingParams.seed' },
  { key: 'chunk', flag: 'chunk', type: 'integer', min: 1, default: 8, meaning: 'Questions per generation call (judging overlaps the next chunk)', source: 'vLLM max_num_seqs' },
  { key: 'keepRaw', flag: 'keep-raw', type: 'boolean', default: false, meaning: "Keep the judge's raw answers in the rows", source: 'lm-evaluation-harness --log_samples' },
  { key: 'protocol', flag: 'protocol', type: 'enum', choices: ['researchqa', 'research-plan-gen', 'healthbench', 'rubrichub', 'rar', 'papergym'], default: null, meaning: "Scoring protocol (docs/eval.md); unset = the items' format's own (a PaperGym file: today's coverage report)", source: "each benchmark's published scoring (lib/eval/protocols/)" },
  { key: 'suite', flag: 'suite', type: 'path', default: null, values: 'a suite YAML (benchmarks × models; docs/eval.md)', meaning: "Run several benchmarks for several models / adapters: one row per model, one column per benchmark, the average, bootstrap CIs, in --out DIR (suite.json, table.md, report.html); replaces --model / --data", source: 'paper: Table 1 layout' },
  { key: 'rescore', flag: 'rescore', type: 'path', default: null, values: 'per-item rows JSONL (eval --out)', meaning: 'Recompute the score from recorded verdicts under --protocol, asking no judge (no --model / --data needed)', source: 'papergym-native (lib/eval/protocols/)' },
  { key: 'progress', flag: 'progress', type: 'enum', choices: ['auto', 'plain', 'none'], default: 'auto', meaning: 'Progress on stderr: a bar on a TTY, plain lines without one or under CI=true, or none', source: 'tqdm disable / HF_HUB_DISABLE_PROGRESS_BARS' },
];

export const SERVE_OPTIONS: readonly Setting[] = [
  ...MODEL_OPTIONS,
  { key: 'port', flag: 'port', type: 'integer', min: 0, max: 65535, default: 8000, meaning: 'TCP port (0 = any free port)', source: 'vLLM serve --port' },
  { key: 'host', flag: 'host', type: 'string', default: '127.0.0.1', values: 'a host name or address', meaning: 'Address to listen on', source: 'vLLM serve --host' },
  { key: 'servedModelName', flag: 'served-model-name', type: 'string', default: null, values: 'any name', meaning: 'Model id clients send; unset = the model dir name', source: 'vLLM serve --served-model-name' },
  { key: 'maxBatch', flag: 'max-batch', type: 'integer', min: 1, default: 32, meaning: 'Max rows (completions) decoding together; requests join a running batch at the next decode step (continuous batching)', source: 'vLLM --max-num-seqs' },
  { key: 'maxQueue', flag: 'max-queue', type: 'integer', min: 0, default: 256, meaning: 'Max requests waiting for a row; more get HTTP 429 (code queue_full, Retry-After)', source: 'vLLM --max-num-seqs with a bounded waiting queue; llama.cpp server --parallel' },
  { key: 'maxModelLen', flag: 'max-model-len', type: 'integer', min: 1, default: null, meaning: 'KV slots per row: the prompt + max_tokens limit; unset = min(context, 4096). On CUDA each decode step attends over all of them, so a smaller value is faster', source: 'vLLM --max-model-len' },
  { key: 'batchWindowMs', flag: 'batch-window-ms', type: 'number', min: 0, default: 5, meaning: 'Milliseconds to wait for more requests before an idle batch starts', source: 'Triton dynamic batching max_queue_delay' },
  { key: 'maxTokens', flag: 'max-tokens', type: 'integer', min: 1, default: 1024, meaning: 'Default max_tokens of a request that sets none; cut to the context left after the prompt (the model backend), as vLLM does', source: 'OpenAI API max_tokens' },
  { key: 'thinking', flag: 'thinking', type: 'boolean', default: null, meaning: 'Server-wide enable_thinking default (requests may override); unset = the chat template default', source: 'vLLM chat_template_kwargs' },
  { key: 'exitWithParent', flag: 'exit-with-parent', type: 'boolean', default: null, meaning: 'Shut down when the parent process exits (and on SIGHUP); unset = on when started through npx / npm exec / an npm script, off otherwise (nohup, systemd, a script\'s background job keep it up; SIGINT / SIGTERM stop it)', source: 'papergym-native (issue 37)' },
  { key: 'apiKey', flag: 'api-key', type: 'string', default: null, values: 'a secret', meaning: 'Require `Authorization: Bearer KEY` on /v1/* (compared in constant time); unset = PAPERGYM_API_KEY, else no key. /health stays open', source: 'vLLM serve --api-key / VLLM_API_KEY' },
  { key: 'allowedHosts', flag: 'allowed-hosts', type: 'list', items: 'string', default: null, values: 'host names or addresses', meaning: 'Host names accepted in the Host and Origin headers besides localhost, 127.0.0.1, [::1] and the bind address (others get 403: a web page cannot drive the server, nor reach it by DNS rebinding); * = any', source: 'DNS rebinding defence (e.g. webpack-dev-server allowedHosts, Jupyter allow_origin)' },
  { key: 'headersTimeout', flag: 'headers-timeout', type: 'number', min: 0, exclusiveMin: true, default: 10, meaning: 'Seconds a client has to send the request headers', source: 'Node http.Server headersTimeout' },
  { key: 'requestTimeout', flag: 'request-timeout', type: 'number', min: 0, exclusiveMin: true, default: 30, meaning: 'Seconds a client has to send the whole request (headers and body); a body that trickles in longer gets 408', source: 'Node http.Server requestTimeout' },
];

export const REPORT_OPTIONS: readonly Setting[] = [
  { key: 'out', flag: 'out', type: 'path', default: 'report.html', values: 'a writable .html file', meaning: 'Report file; plots go to NAME-plots/ beside it (NAME = the file name without .html) as SVG and PNG', source: 'TensorBoard / W&B report export' },
  { key: 'eval', flag: 'eval', type: 'list', items: 'string', repeatable: true, default: null, values: '[label=]rows.jsonl', meaning: 'Eval per-item rows (eval --out) to show: coverage with CIs; the first is compared with each other one by a paired bootstrap', source: 'Koehn 2004 (paired bootstrap resampling)' },
  { key: 'data', flag: 'data', type: 'path', default: null, values: 'a PaperGym JSONL', meaning: 'Dataset whose rubric texts label the hardest items', source: 'paper: rubric items (docs/design.md §7)' },
  { key: 'png', flag: 'png', type: 'boolean', default: true, meaning: 'Also write each plot as PNG (--no-png for SVG only)', source: 'matplotlib savefig formats' },
  { key: 'resamples', flag: 'resamples', type: 'integer', min: 0, default: 1000, meaning: 'Bootstrap resamples for eval CIs', source: 'Efron & Tibshirani 1993' },
  { key: 'title', flag: 'title', type: 'string', default: null, values: 'any text', meaning: 'Report title; unset = the run names', source: 'papergym-native' },
];

/**
 * The `--judge*` options of eval and probe-judge (bin/judge-options.ts JudgeArgs reads them): the
 * judge settings of {@link JUDGE_SETTINGS} under their camelCase option names, with the http judge
 * as the default kind. A new judge option is one more entry in JUDGE_SETTINGS.
 */
export const JUDGE_OPTIONS: readonly Setting[] = JUDGE_SETTINGS.map((j) => ({
  ...j,
  key: j.key === 'kind' ? 'judge' : `judge${j.key[0]!.toUpperCase()}${j.key.slice(1)}`,
  ...(j.key === 'kind' ? { default: 'http' } : {}),
}));

export const PROBE_JUDGE_OPTIONS: readonly Setting[] = [
  { key: 'data', flag: 'data', type: 'path', default: null, values: 'a PaperGym JSONL (required)', meaning: 'Items whose rubrics the adversarial plans are judged against', source: 'paper: rubric items (docs/design.md §7)' },
  { key: 'model', flag: 'model', type: 'path', default: null, values: 'a Qwen3 checkpoint dir', meaning: '--judge local: the judge model (the base; adapter off)', source: 'transformers from_pretrained' },
  { key: 'attacks', flag: 'attacks', type: 'list', items: 'string', choices: ['restate', 'keywords', 'inject', 'empty', 'echo'], default: ['restate', 'keywords', 'inject', 'empty'], meaning: 'Adversarial plans to judge: restated question, keyword stuffing, grader injection, empty plan, echoed rubric', source: 'reward-hacking probes (docs/design.md §8)' },
  { key: 'limit', flag: 'limit', type: 'integer', min: 1, default: null, meaning: 'First N items only; unset = all', source: 'lm-evaluation-harness --limit' },
  { key: 'general', flag: 'general', type: 'boolean', default: false, meaning: 'Also judge the general rubric items', source: 'paper: general rubric items (docs/design.md §6)' },
  { key: 'generalRubric', flag: 'general-rubric', type: 'path', default: null, values: 'a general rubric JSON', meaning: 'General rubric file; unset = data/general-rubric.json', source: 'paper: general rubric items (docs/design.md §6)' },
  { key: 'out', flag: 'out', type: 'path', default: null, values: 'a writable file', meaning: 'Write the JSON report here', source: 'lm-evaluation-harness --output_path' },
  { key: 'json', flag: 'json', type: 'boolean', default: false, meaning: 'Print JSON instead of a table', source: 'papergym-native' },
  { key: 'device', flag: 'device', type: 'string', default: 'auto', pattern: DEVICE_AUTO, values: 'auto | cpu | cuda | cuda:N', meaning: '--judge local: device; auto = cuda when the addon sees a GPU, else cpu', source: 'transformers device_map' },
  { key: 'dtype', flag: 'dtype', type: 'enum', choices: ['float32', 'bfloat16', 'float16'], default: null, meaning: '--judge local: weight dtype; unset = bfloat16 on CUDA, float32 on CPU', source: 'transformers torch_dtype' },
];

/** `judge-agreement` (bin/commands/judge-agreement.ts); the judges come from --judges (a YAML list, lib/config/judge.ts). */
export const JUDGE_AGREEMENT_OPTIONS: readonly Setting[] = [
  { key: 'data', flag: 'data', type: 'path', default: null, values: 'a PaperGym JSONL (required)', meaning: 'Items whose rubric items every judge decides', source: 'paper: rubric items (docs/design.md §7)' },
  { key: 'plans', flag: 'plans', type: 'path', default: null, values: 'plans JSONL (required): {questionId, sample?, plan} per line, as eval --plans writes', meaning: 'The plans every judge grades', source: 'papergym-native eval --plans' },
  { key: 'labels', flag: 'labels', type: 'path', default: null, values: 'labels JSONL: {questionId, sample?, itemId, label: true | false} per line', meaning: "People's verdicts: each judge's agreement, precision, recall and F1 against them", source: "HealthBench meta-eval (grader vs physicians' labels)" },
  { key: 'model', flag: 'model', type: 'path', default: null, values: 'a Qwen3 checkpoint dir', meaning: 'Local judges in --judges: the judge model (the base; adapter off)', source: 'transformers from_pretrained' },
  { key: 'out', flag: 'out', type: 'path', default: null, values: 'a writable file', meaning: 'Write the JSON report (agreement, per-member health, stats) here', source: 'lm-evaluation-harness --output_path' },
  { key: 'resamples', flag: 'resamples', type: 'integer', min: 0, default: 1000, meaning: 'Bootstrap resamples (clusters: questions); 0 = no interval', source: 'scipy.stats.bootstrap n_resamples' },
  { key: 'seed', flag: 'seed', type: 'integer', min: 0, default: 0, meaning: 'Bootstrap seed', source: 'numpy random seed' },
  { key: 'json', flag: 'json', type: 'boolean', default: false, meaning: 'Print JSON instead of a table', source: 'papergym-native' },
  { key: 'device', flag: 'device', type: 'string', default: 'auto', pattern: DEVICE_AUTO, values: 'auto | cpu | cuda | cuda:N', meaning: 'Local judges: device; auto = cuda when the addon sees a GPU, else cpu', source: 'transformers device_map' },
  { key: 'dtype', flag: 'dtype', type: 'enum', choices: ['float32', 'bfloat16', 'float16'], default: null, meaning: 'Local judges: weight dtype; unset = bfloat16 on CUDA, float32 on CPU', source: 'transformers torch_dtype' },
];

const roleOptions = (role: string, what: string): Setting[] => {
  const k = (x: string) => `llm${role[0].toUpperCase()}${role.slice(1)}${x}`;
  return [
    { key: k('Url'), flag: `llm-${role}-url`, type: 'string', default: null, values: 'http(s)://host:port/v1', meaning: `Endpoint of the ${role} role: ${what}; unset = --llm`, source: 'paper: one LLM extracts, another writes rubrics' },
    { key: k('Model'), flag: `llm-${role}-model`, type: 'string', default: null, values: 'a served model name', meaning: `Model of the ${role} role; unset = --model`, source: 'OpenAI API model' },
    { key: k('Temperature'), flag: `llm-${role}-temperature`, type: 'number', min: 0, default: null, meaning: `Sampling temperature of the ${role} role; unset = --temperature`, source: 'OpenAI API temperature' },
    { key: k('TopP'), flag: `llm-${role}-top-p`, type: 'number', min: 0, max: 1, exclusiveMin: true, default: null, meaning: `Nucleus sampling of the ${role} role; unset = not sent`, source: 'OpenAI API top_p' },
    { key: k('MaxTokens'), flag: `llm-${role}-max-tokens`, type: 'integer', min: 1, default: null, meaning: `Max completion tokens per call of the ${role} role; unset = --max-tokens`, source: 'OpenAI API max_tokens' },
    { key: k('ApiKeyEnv'), flag: `llm-${role}-api-key-env`, type: 'string', default: null, values: 'an environment variable name', meaning: `Environment variable holding the ${role} endpoint's API key; unset = PAPERGYM_LLM_API_KEY / OPENAI_API_KEY`, source: 'OpenAI client api_key' },
  ];
};
const BUILD_DATA_ROLE_OPTIONS: Setting[] = [
  ...roleOptions('extract', 'map and reduce'),
  ...roleOptions('qa', 'question and answer'),
  ...roleOptions('rubric', 'rubric candidates R_Q / R_A'),
  ...roleOptions('rank', 'rubric duplicates and ranking'),
];

export const BUILD_DATA_OPTIONS: readonly Setting[] = [
  { key: 'papers', flag: 'papers', type: 'list', items: 'string', repeatable: true, default: null, values: '.tar.gz/.tar/.gz archives, paper dirs, or dirs of them (required)', meaning: 'Paper LaTeX sources to turn into items', source: 'paper: arXiv LaTeX sources (docs/design.md §7)' },
  { key: 'out', flag: 'out', type: 'path', default: null, values: 'a writable JSONL file (required)', meaning: 'Output dataset JSONL', source: 'datasets to_json' },
  { key: 'llm', flag: 'llm', type: 'string', default: null, values: 'http(s)://host:port/v1', meaning: 'OpenAI-compatible base URL; API key from PAPERGYM_LLM_API_KEY or OPENAI_API_KEY', source: 'OpenAI API base_url' },
  { key: 'model', flag: 'model', type: 'string', default: null, values: 'a served model name (required with --llm)', meaning: 'Served model name', source: 'OpenAI API model' },
  { key: 'state', flag: 'state', type: 'path', default: null, values: 'a SQLite file', meaning: 'State file; a rerun resumes from it and never pays twice for a call; unset = <out>.state.sqlite', source: 'papergym-native (docs/design.md §7)' },
  { key: 'force', flag: 'force', type: 'boolean', default: false, meaning: 'Ignore stored answers and redo every call', source: 'papergym-native' },
  { key: 'format', flag: 'format', type: 'enum', choices: ['papergym', 'research-plan-gen'], default: 'papergym', meaning: 'Output format', source: 'docs/data.md' },
  { key: 'concurrency', flag: 'concurrency', type: 'integer', min: 1, default: 8, meaning: 'Max LLM requests in flight', source: 'vLLM benchmark --max-concurrency' },
  { key: 'paperConcurrency', flag: 'paper-concurrency', type: 'integer', min: 1, default: 2, meaning: 'Papers processed at once', source: 'papergym-native' },
  { key: 'timeout', flag: 'timeout', type: 'number', min: 0, exclusiveMin: true, default: 300, meaning: 'Per-request timeout in seconds', source: 'OpenAI client timeout' },
  { key: 'retries', flag: 'retries', type: 'integer', min: 0, default: 5, meaning: 'Retries per request (backoff, honouring retry-after)', source: 'OpenAI client max_retries' },
  { key: 'maxTokens', flag: 'max-tokens', type: 'integer', min: 1, default: 4096, meaning: 'Max completion tokens per LLM call', source: 'OpenAI API max_tokens' },
  { key: 'temperature', flag: 'temperature', type: 'number', min: 0, default: 0, meaning: 'LLM sampling temperature', source: 'OpenAI API temperature' },
  { key: 'valFraction', flag: 'val-fraction', type: 'number', min: 0, max: 1, default: 0.1, meaning: 'Share of papers assigned to split val', source: 'datasets train_test_split' },
  { key: 'testFraction', flag: 'test-fraction', type: 'number', min: 0, max: 1, default: 0.1, meaning: 'Share of papers assigned to split test', source: 'datasets train_test_split' },
  { key: 'splitSeed', flag: 'split-seed', type: 'string', default: 'papergym', values: 'any string', meaning: 'Seed of the per-paper split hash', source: 'datasets train_test_split seed' },
  { key: 'responseFormat', flag: 'response-format', type: 'boolean', default: false, meaning: 'Send JSON schemas as response_format (guided decoding on vLLM / SGLang / OpenAI)', source: 'OpenAI API response_format json_schema' },
  { key: 'progress', flag: 'progress', type: 'enum', choices: ['auto', 'plain', 'none'], default: 'auto', meaning: 'Progress display: a bar in a TTY, plain lines, or none', source: 'papergym-native' },
  { key: 'progressInterval', flag: 'progress-interval', type: 'number', min: 0, exclusiveMin: true, default: 5, meaning: 'Seconds between plain progress lines (no TTY, or CI=true)', source: 'tqdm mininterval' },
  { key: 'parseTimeout', flag: 'parse-timeout', type: 'number', min: 0, exclusiveMin: true, default: 5, meaning: 'Per-section LaTeX parse time limit in seconds (wall clock); past it the fallback converter is used and a parse-fallback warning stored', source: 'papergym-native (lib/data/latex/text.ts)' },
  { key: 'dryRun', flag: 'dry-run', type: 'boolean', default: false, meaning: 'Only ingest the papers and print what was found (no LLM calls, nothing written)', source: 'papergym-native' },
  { key: 'strict', flag: 'strict', type: 'boolean', default: false, meaning: 'A paper whose ingestion coverage is below the thresholds (a coverage warning: prose or headings lost) fails instead of being used', source: 'papergym-native (lib/data/latex/coverage.ts)' },
  { key: 'config', flag: 'config', type: 'path', default: null, values: 'a YAML or JSON file', meaning: 'Settings file: any build-data setting by flag or key, plus a roles: section (docs/data.md); layered over the defaults, under the flags', source: 'TRL YAML config (--config)' },
  ...BUILD_DATA_ROLE_OPTIONS,
  { key: 'rubricSources', flag: 'rubric-sources', type: 'list', items: 'string', choices: ['q', 'a', 'R_Q', 'R_A'], default: ['q', 'a'], meaning: 'Rubric candidate sources: q = R_Q (question alone), a = R_A (question + answer); one source asks it for 2k candidates', source: 'paper: Table 4 (R_Q only / R_A only)' },
  { key: 'rubricDimensions', flag: 'rubric-dimensions', type: 'list', items: 'string', choices: ['innovation', 'design', 'method_innovation', 'experimental_design'], default: ['innovation', 'design'], meaning: 'Rubric dimensions written and kept (one = the single-dimension ablation)', source: 'paper: Table 4 (one dimension)' },
  { key: 'rubricTopK', flag: 'rubric-top-k', type: 'integer', min: 1, max: 50, default: 10, meaning: 'Rubric items kept per item after ranking', source: 'paper: top 10 after ranking' },
  { key: 'generalItems', flag: 'general-items', type: 'boolean', default: true, meaning: 'Pair items with the general rubric items (--no-general-items: general_rubric_set "none")', source: 'paper: general rubric items (docs/design.md §6)' },
  { key: 'domainMix', flag: 'domain-mix', type: 'string', default: null, values: 'DOMAIN=SHARE,... e.g. cs=0.5,physics=0.25,economics=0.25', meaning: 'Draw papers to this domain mix before any LLM call (seeded; the achieved mix is reported and recorded in provenance)', source: 'paper: corpus about 50% CS, 25% physics, 25% economics' },
  { key: 'mixSeed', flag: 'mix-seed', type: 'string', default: 'papergym', values: 'any string', meaning: 'Seed of the paper draw (--domain-mix, --max-papers)', source: 'papergym-native (lib/data/mix.ts)' },
  { key: 'domains', flag: 'domains', type: 'path', default: null, values: 'a TSV with file / paper_id and domain / field / category columns', meaning: 'Paper domains (e.g. arXiv primary categories); unset = the paper id prefix (cs-, physics-, econ-)', source: 'arXiv category taxonomy; corpus MANIFEST.tsv' },
  { key: 'maxPapers', flag: 'max-papers', type: 'integer', min: 1, default: null, meaning: 'Build at most this many papers: the first N of the seeded (mix) order, so a larger N contains a smaller one', source: 'paper: Figure 3 data scaling' },
];


export const LEAKAGE_OPTIONS: readonly Setting[] = [
  { key: 'data', flag: 'data', type: 'list', items: 'string', repeatable: true, default: null, values: 'PaperGym or imported items JSONL, one or more (required)', meaning: 'Datasets to audit, any imported format (chat prompts read as text); several give one table row each', source: 'paper: leakage audit across datasets (Table 3; docs/design.md §7)' },
  { key: 'llm', flag: 'llm', type: 'string', default: null, values: 'http(s)://host:port/v1', meaning: 'OpenAI-compatible base URL of the judge; unset = the lexical proxy only', source: 'OpenAI API base_url' },
  { key: 'model', flag: 'model', type: 'string', default: null, values: 'a served model name', meaning: 'Judge model name', source: 'OpenAI API model' },
  { key: 'state', flag: 'state', type: 'path', default: null, values: 'a SQLite file', meaning: 'Cache of judge calls; unset = <per-user cache dir>/leakage/<hash of the dataset path>.sqlite', source: 'papergym-native (docs/design.md §7)' },
  { key: 'threshold', flag: 'threshold', type: 'number', min: 0, max: 1, default: 0.6, meaning: 'Lexical-overlap threshold of the proxy', source: 'papergym-native (lib/data/leakage.ts)' },
  { key: 'out', flag: 'out', type: 'path', default: null, values: 'a writable file', meaning: 'Write the full per-item report as JSON', source: 'papergym-native' },
  { key: 'json', flag: 'json', type: 'boolean', default: false, meaning: 'Print the report as JSON', source: 'papergym-native' },
  { key: 'concurrency', flag: 'concurrency', type: 'integer', min: 1, default: 8, meaning: 'Max judge requests in flight', source: 'vLLM benchmark --max-concurrency' },
  { key: 'judgeConcurrency', flag: 'judge-concurrency', type: 'integer', min: 1, default: null, meaning: 'Max judge requests in flight, under the name eval and compare use; unset = --concurrency', source: 'vLLM benchmark --max-concurrency' },
  { key: 'timeout', flag: 'timeout', type: 'number', min: 0, exclusiveMin: true, default: 120, meaning: 'Per-request timeout in seconds', source: 'OpenAI client timeout' },
  { key: 'strict', flag: 'strict', type: 'boolean', default: false, meaning: 'Fail on invalid dataset rows instead of skipping them', source: 'papergym-native (docs/data.md)' },
  { key: 'progress', flag: 'progress', type: 'enum', choices: ['auto', 'plain', 'none'], default: 'auto', meaning: 'Progress on stderr: a bar on a TTY, plain lines without one or under CI=true, or none', source: 'tqdm disable / HF_HUB_DISABLE_PROGRESS_BARS' },
  { key: 'progressInterval', flag: 'progress-interval', type: 'number', min: 0, exclusiveMin: true, default: 5, meaning: 'Seconds between plain progress lines (no TTY, or CI=true)', source: 'tqdm mininterval' },
];

export const IMPORT_OPTIONS: readonly Setting[] = [
  { key: 'format', flag: 'format', type: 'enum', choices: ['researchqa', 'research-plan-gen', 'healthbench', 'rubrichub', 'rar', 'papergym'], default: null, meaning: 'Published format of the input (required; docs/data.md "Importing published benchmarks")', source: 'the datasets\' published schemas (lib/eval/formats/)' },
  { key: 'input', flag: 'input', type: 'path', default: null, values: 'a .json / .jsonl / .parquet file or a directory of them (required)', meaning: 'Published files; a directory is searched (Hub layout {config}/{split}/*.parquet, data/{split}-*.parquet)', source: 'Hugging Face Hub dataset layout' },
  { key: 'out', flag: 'out', type: 'path', default: null, values: 'a writable JSONL file (required)', meaning: 'Imported items (one benchmark item per line; input of eval, compare, leakage)', source: 'papergym-native (lib/data/schema.ts benchmarkItemJsonSchema)' },
  { key: 'config', flag: 'config', type: 'string', default: null, values: 'a dataset config name (ml, arxiv, pubmed, …)', meaning: 'Only files under this config directory', source: 'datasets load_dataset name' },
  { key: 'split', flag: 'split', type: 'string', default: null, values: 'train | test | valid | …', meaning: 'Only files of this split (directory or file-name prefix); also the split recorded on the items', source: 'datasets load_dataset split' },
  { key: 'limit', flag: 'limit', type: 'integer', min: 1, default: null, meaning: 'Write only the first N items', source: 'lm-evaluation-harness --limit' },
];

export const COMPARE_OPTIONS: readonly Setting[] = [
  { key: 'data', flag: 'data', type: 'path', default: null, values: 'items JSONL (PaperGym or written by import; required)', meaning: 'The questions the plans answer', source: 'paper: Table 2 win rates' },
  { key: 'plans', flag: 'plans', type: 'list', items: 'string', repeatable: true, default: null, values: '[name=]plans.jsonl, two or more (eval --plans)', meaning: 'One plans file per system; questions with a plan in every file are compared', source: 'paper: Table 2 (three-way win rate)' },
  { key: 'out', flag: 'out', type: 'path', default: null, values: 'a writable file', meaning: 'Every judgement (question, candidate order, winner, position) as JSONL', source: 'lm-evaluation-harness --log_samples' },
  { key: 'report', flag: 'report', type: 'path', default: null, values: 'a writable file', meaning: 'Win rates with CIs, ties, unreadable replies and the position bias as JSON', source: 'lm-evaluation-harness --output_path' },
  { key: 'resamples', flag: 'resamples', type: 'integer', min: 0, default: 1000, meaning: 'Bootstrap resamples (questions) for the win-rate CIs', source: 'Efron & Tibshirani 1993 (percentile bootstrap)' },
  { key: 'seed', flag: 'seed', type: 'integer', min: 0, default: 0, meaning: 'Bootstrap seed', source: 'numpy default_rng seed' },
  { key: 'keepRaw', flag: 'keep-raw', type: 'boolean', default: false, meaning: "Keep the judge's raw replies in --out", source: 'lm-evaluation-harness --log_samples' },
  { key: 'progress', flag: 'progress', type: 'enum', choices: ['auto', 'plain', 'none'], default: 'auto', meaning: 'Progress on stderr: a bar on a TTY, plain lines without one or under CI=true, or none', source: 'tqdm disable / HF_HUB_DISABLE_PROGRESS_BARS' },
];

export const SUBSET_OPTIONS: readonly Setting[] = [
  { key: 'data', flag: 'data', type: 'path', default: null, values: 'a PaperGym JSONL (required)', meaning: 'Items to draw subsets from', source: 'paper: Figure 3 data scaling' },
  { key: 'sizes', flag: 'sizes', type: 'list', items: 'number', default: null, values: 'sizes, e.g. 500,1000,2000,5000,10000,15000 (required)', meaning: 'Subset sizes; each subset contains the smaller ones', source: 'paper: Figure 3 (0.5k → 15k items)' },
  { key: 'seed', flag: 'seed', type: 'string', default: 'papergym', values: 'any string', meaning: 'Seed of the item order', source: 'datasets shuffle seed' },
  { key: 'outDir', flag: 'out-dir', type: 'path', default: null, values: 'a directory (required)', meaning: 'Where <name>-<size>.jsonl and subsets.json are written', source: 'papergym-native' },
  { key: 'domainMix', flag: 'domain-mix', type: 'string', default: null, values: 'DOMAIN=SHARE,...', meaning: 'Keep every subset at this domain mix (items\' source.domain)', source: 'paper: corpus about 50% CS, 25% physics, 25% economics' },
  { key: 'split', flag: 'split', type: 'enum', choices: ['train', 'val', 'test'], default: null, meaning: 'Draw only items of this split (unset: all)', source: 'datasets split' },
];

export const DOCTOR_OPTIONS: readonly Setting[] = [
  { key: 'json', flag: 'json', type: 'boolean', default: false, meaning: 'Print the environment report as JSON', source: 'vLLM collect_env / torch.utils.collect_env' },
];

/** Every command's settings, for docs/config.md and the completeness test. */
export const COMMAND_SETTINGS: Record<string, readonly Setting[]> = {
  train: [...TRAIN_COMMAND_OPTIONS, ...TRAIN_SETTINGS],
  generate: GENERATE_OPTIONS,
  eval: [...EVAL_OPTIONS, ...JUDGE_OPTIONS],
  serve: SERVE_OPTIONS,
  report: REPORT_OPTIONS,
  'build-data': BUILD_DATA_OPTIONS,
  subset: SUBSET_OPTIONS,
  leakage: LEAKAGE_OPTIONS,
  import: IMPORT_OPTIONS,
  compare: [...COMPARE_OPTIONS, ...JUDGE_OPTIONS],
  'probe-judge': [...PROBE_JUDGE_OPTIONS, ...JUDGE_OPTIONS],
  'judge-agreement': [...JUDGE_AGREEMENT_OPTIONS, ...JUDGE_OPTIONS],
  doctor: DOCTOR_OPTIONS,
};
