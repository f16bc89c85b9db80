/**
 * Training config keys of the memory plan (`memory.*`), in docs order (lib/config/settings.ts assembles them).
 */
import type { Setting } from '../schema.js';

export const MEMORY_SETTINGS: readonly Setting[] = [
  {
    key: 'memory.recompute',
    resumable: true,
    trl: [{ name: 'gradient_checkpointing', alias: true }],
    flag: 'recompute',
    type: 'boolean',
    default: false,
    meaning: 'Recompute each decoder layer in backward (less activation memory, ~30% more compute)',
    source: 'transformers gradient_checkpointing',
  },
  {
    key: 'memory.emptyCache',
    formerly: { keys: ['memory.emptyCacheBetweenPhases'] },
    flag: 'empty-cache',
    type: 'boolean',
    default: false,
    meaning: 'Release cached GPU blocks between the rollout and update phases',
    source: 'torch.cuda.empty_cache',
  },
  {
    key: 'memory.plan',
    flag: 'memory-plan',
    type: 'enum',
    choices: ['auto', 'off'],
    default: 'auto',
    meaning:
      'Memory plan before the first step (lib/train/memory-plan.ts): on CUDA, or on any device with --max-memory, choose update micro-batches, recompute, rollout rows and judge tokens per call so every phase fits; off = use the settings as they are',
    source: 'papergym-native; accelerate find_executable_batch_size',
  },
  {
    key: 'memory.maxMemory',
    formerly: { keys: ['memory.maxMemoryGB'] },
    flag: 'max-memory',
    type: 'number',
    min: 0,
    exclusiveMin: true,
    default: null,
    meaning:
      'Cap in GB (1e9 bytes) of device memory, for shared or smaller GPUs: the memory plan fits every phase under it, and on CUDA the caching allocator is held under it too (allocated + cached, torch.cuda.set_per_process_memory_fraction), so a capped run behaves as on a card of that size; unset = the device total',
    source: 'accelerate / transformers max_memory; PyTorch set_per_process_memory_fraction',
  },
  {
    key: 'memory.rolloutRows',
    flag: 'rollout-rows',
    type: 'integer',
    min: 0,
    max: 65536,
    default: 0,
    meaning:
      "Rollout rows per sampling chunk (one decode call, one seed; also per reference-logprob call); with --nproc-per-node the chunks are split over the ranks, so 1 and N processes sample the same chunks; 0 = the stage's micro-batch, or the plan's choice",
    source: 'vLLM max_num_seqs',
  },
  {
    key: 'memory.judgeTokensPerCall',
    formerly: { keys: ['memory.judgeMaxTokensPerCall'] },
    flag: 'judge-tokens-per-call',
    type: 'integer',
    min: 0,
    default: 0,
    meaning:
      "Local judge: rows × tokens of its native scoring calls in flight (shared by the plans scored at once); 0 = the judge's default, or the plan's choice",
    source: 'vLLM max_num_batched_tokens',
  },
];
