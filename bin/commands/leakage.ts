/**
 * `papergym-native leakage --data dataset.jsonl [--llm URL --model NAME]` (DESIGN.md §7/§8):
 * per rubric item, whether a judge can infer it from the question alone; rates overall, per
 * dimension and per origin; plus the LLM-free lexical-overlap proxy (always computed).
 */
import { writeFileSync } from 'node:fs';
import type { CommandModule } from 'yargs';
import { LEAKAGE_OPTIONS } from '../../lib/config/settings.js';
import { addSettings } from '../../lib/config/schema.js';
import { LlmClient } from '../../lib/llm/client.js';
import { auditLeakage, formatLeakage, type LeakageReport } from '../../lib/data/leakage.js';
import { CachedLlm } from '../../lib/data/pipeline.js';
import { readDataset } from '../../lib/data/schema.js';
import { PipelineState } from '../../lib/data/state.js';

export interface LeakageArgs {
  data: string;
  llm?: string;
  model?: string;
  state?: string;
  threshold?: number;
  out?: string;
  json?: boolean;
  concurrency?: number;
  timeout?: number;
  strict?: boolean;
}

/** The command's work (tests call it directly). @throws when `--llm` is given without `--model` */
export async function runLeakage(a: LeakageArgs, io: { signal?: AbortSignal } = {}): Promise<LeakageReport> {
  const { items } = readDataset(a.data, { strict: a.strict });
  if (a.llm && !a.model) throw new Error('--llm needs --model');
  let state: PipelineState | undefined;
  let llm: CachedLlm | undefined;
  if (a.llm && a.model) {
    state = new PipelineState(a.state ?? `${a.data}.leakage.sqlite`);
    const client = new LlmClient({ baseUrl: a.llm, model: a.model, concurrency: a.concurrency ?? 8, timeoutMs: (a.timeout ?? 120) * 1000 });
    llm = new CachedLlm(client, state, { temperature: 0, maxTokens: 512, signal: io.signal });
  }
  try {
    const rep = await auditLeakage(items, { llm, threshold: a.threshold });
    if (a.out) writeFileSync(a.out, JSON.stringify(rep, null, 2) + '\n');
    return rep;
  } finally {
    state?.close();
  }
}

export const leakageCommand: CommandModule<object, LeakageArgs> = {
  command: 'leakage',
  describe: 'Leakage audit: share of rubric items inferable from the question alone (judge and lexical proxy)',
  builder: (y) =>
    addSettings(y, LEAKAGE_OPTIONS, { withDefaults: true }).demandOption('data') as never,
  handler: async (argv) => {
    const rep = await runLeakage(argv);
    if (argv.json) process.stdout.write(JSON.stringify(rep, null, 2) + '\n');
    else process.stdout.write(formatLeakage(rep) + '\n');
  },
};
