/** Settings of `generate` (lib/config/settings.ts re-exports them; schema: lib/config/schema.ts). */
import type { Setting } from '../schema.js';
import { MODEL_OPTIONS } from './model.js';
import { SAMPLING_OPTIONS } from './sampling.js';

export const GENERATE_OPTIONS: readonly Setting[] = [
  ...MODEL_OPTIONS,
  {
    key: 'prompt',
    flag: 'prompt',
    type: 'list',
    items: 'string',
    repeatable: true,
    default: null,
    values: 'prompt text',
    meaning: 'Prompt sent as a user message; give this or --input',
    source: 'vLLM generate prompts',
  },
  {
    key: 'input',
    flag: 'input',
    type: 'path',
    default: null,
    values: 'JSONL of {question|prompt|messages, id?}',
    meaning: 'Input file; questions get the training student prompt unless --plain',
    source: 'vLLM offline batch inference input',
  },
  {
    key: 'out',
    flag: 'out',
    type: 'path',
    default: null,
    values: 'a writable file',
    meaning: 'Output JSONL (one line per completion); unset = stdout',
    source: 'vLLM run_batch -o',
  },
  {
    key: 'plain',
    flag: 'plain',
    type: 'boolean',
    default: false,
    meaning: 'Send --input questions as bare user messages (no student prompt)',
    source: 'papergym-native (student prompt, lib/task/prompts.ts)',
  },
  {
    key: 'system',
    flag: 'system',
    type: 'string',
    default: null,
    values: 'any text',
    meaning: 'System message for --prompt texts',
    source: 'OpenAI chat system role',
  },
  { key: 'n', flag: 'n', type: 'integer', min: 1, default: 1, meaning: 'Completions per prompt', source: 'vLLM SamplingParams.n' },
  ...SAMPLING_OPTIONS,
  {
    key: 'seed',
    flag: 'seed',
    type: 'integer',
    min: 0,
    default: null,
    meaning:
      'Sampling seed (batch b uses seed + b; one random stream per batch, so the same inputs, --n and --batch-size give the same completions and another batch composition samples others — serve seeds each request on its own); unset = random, printed to stderr',
    source: 'vLLM SamplingParams.seed',
  },
  { key: 'batchSize', flag: 'batch-size', type: 'integer', min: 1, default: 16, meaning: 'Prompts per generation call', source: 'vLLM max_num_seqs' },
  {
    key: 'tokens',
    flag: 'tokens',
    type: 'boolean',
    default: false,
    meaning: 'Also write token_ids and logprobs per completion',
    source: 'vLLM SamplingParams.logprobs',
  },
];
