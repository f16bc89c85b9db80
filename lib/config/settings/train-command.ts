/** Settings of `train` options that are not config keys (lib/config/settings.ts re-exports them; schema: lib/config/schema.ts). */
import type { Setting } from '../schema.js';

/** `train` options that are not config keys. */
export const TRAIN_COMMAND_OPTIONS: readonly Setting[] = [
  {
    key: 'config',
    flag: 'config',
    type: 'path',
    default: null,
    values: 'a YAML or JSON file with config keys (docs/config.md)',
    meaning: 'Config file, layered over the preset and under the flags',
    source: 'TRL YAML config (--config)',
  },
  {
    key: 'preset',
    flag: 'preset',
    type: 'enum',
    choices: ['qwen3-1.7b', 'qwen3-4b', 'qwen3-8b'],
    default: null,
    meaning: "The paper's settings for a model size (LoRA 64/128, lrs, steps, G = 8, KL 0.01, device cuda)",
    source: 'paper: training settings (docs/design.md §6)',
  },
  {
    key: 'resume',
    trl: [{ name: 'resume_from_checkpoint' }],
    flag: 'resume',
    type: 'path',
    default: null,
    values: 'a run dir or a checkpoint dir; no value (with --out DIR) = DIR',
    meaning:
      'Continue a run from its latest checkpoint (given without a dir, as TRL resume_from_checkpoint=True, it continues the run in --out); only step counts (to extend a run) and the run-time settings that docs/config.md § train lists may change (where it runs, the judge endpoint, logging and trackers, checkpointing, validation interval, micro-batches)',
    source: 'transformers Trainer.train(resume_from_checkpoint)',
  },
  {
    key: 'overwriteOutputDir',
    flag: 'overwrite-output-dir',
    type: 'boolean',
    default: null,
    meaning:
      "Clear the previous run in --out (everything a run writes: config.json, metrics.jsonl, checkpoints, final, summary.json, report.html, report-plots, best, profile, tensorboard, wandb; never a live run's) and start this one; unset = a dir that holds a run is refused. A run killed before its first checkpoint can also be started again with --resume",
    source: 'transformers TrainingArguments.overwrite_output_dir',
  },
  // Hugging Face Hub upload of the final adapter (lib/hub/publish.ts): command options, not config keys.
  {
    key: 'pushToHub',
    flag: 'push-to-hub',
    type: 'string',
    default: null,
    values: 'a Hub model repo id org/name',
    meaning:
      'After training, upload the final PEFT adapter (adapter_config.json, adapter_model.safetensors) with a model card (base_model, library_name peft, tags, the resolved settings, validation rewards as model-index) to this repo, created when missing; needs a write token (HF_TOKEN or huggingface-cli login)',
    source: 'TRL TrainingArguments.push_to_hub + hub_model_id',
  },
  {
    key: 'hubPrivateRepo',
    flag: 'hub-private-repo',
    type: 'boolean',
    default: false,
    meaning: 'Create the --push-to-hub repo private (an existing repo keeps its visibility)',
    source: 'TRL TrainingArguments.hub_private_repo',
  },
  {
    key: 'hubStrategy',
    flag: 'hub-strategy',
    type: 'enum',
    choices: ['end', 'every_save'],
    default: 'end',
    meaning:
      "When --push-to-hub uploads: end = once, the final adapter and its card after the last stage; every_save = also each checkpoint's adapter when it is committed (beside training: an upload that fails is logged and training goes on)",
    source: 'TRL TrainingArguments.hub_strategy',
  },
  // Data parallelism (lib/train/launch.ts, lib/train/dist.ts): launcher options, not config keys.
  {
    key: 'nprocPerNode',
    flag: 'nproc-per-node',
    type: 'integer',
    min: 1,
    default: null,
    meaning:
      "Start this many worker processes on this machine (one GPU each on CUDA; Gloo on CPU), each training a contiguous share of every step's global batch; unset = one process",
    source: 'torchrun --nproc-per-node; DDP',
  },
  {
    key: 'nnodes',
    flag: 'nnodes',
    type: 'integer',
    min: 1,
    default: 1,
    meaning: 'Machines in the run (world size = nnodes × nproc-per-node)',
    source: 'torchrun --nnodes',
  },
  {
    key: 'nodeRank',
    flag: 'node-rank',
    type: 'integer',
    min: 0,
    default: 0,
    meaning: 'Index of this machine; node 0 hosts the rendezvous (must be < --nnodes)',
    source: 'torchrun --node-rank',
  },
  {
    key: 'masterAddr',
    flag: 'master-addr',
    type: 'string',
    default: '127.0.0.1',
    values: 'a host name or IP address of node 0',
    meaning: 'Address of node 0 (MASTER_ADDR)',
    source: 'torchrun --master-addr',
  },
  {
    key: 'masterPort',
    flag: 'master-port',
    type: 'integer',
    min: 1,
    max: 65535,
    default: 29500,
    meaning: 'Rendezvous TCP port on node 0 (MASTER_PORT; checked free before the workers start)',
    source: 'torchrun --master-port',
  },
  {
    key: 'distTimeout',
    flag: 'dist-timeout',
    type: 'number',
    min: 0,
    exclusiveMin: true,
    default: 600,
    meaning: 'Seconds a collective may wait for the other ranks before failing naming them',
    source: 'torch.distributed.init_process_group(timeout) (default 10 min)',
  },
];
