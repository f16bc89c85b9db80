/**
 * `papergym-native leakage --data dataset.jsonl [--llm URL --model NAME]` (docs/design.md §7/§8):
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
import { Progress } from '../../lib/data/progress.js';
import { handleInterrupt, InterruptedRun } from './build-data.js';

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
  progress?: 'auto' | 'plain' | 'none';
  /** Seconds between plain progress lines (default 5). */
  progressInterval?: number;
}

/** The command's work (tests call it directly). @throws when `--llm` is given without `--model` */
/**
 * The command's work (tests call it directly). With a judge, a progress display counts rubric
 * items, judge calls (done, cached, in flight), tokens and an ETA (`--progress`, plain lines
 * without a TTY or under CI); every judge answer is stored as it arrives, so an aborted run
 * (`io.signal`) loses nothing and a rerun asks only the rest.
 * @throws when `--llm` is given without `--model`; the abort error when aborted
 */
export async function runLeakage(a: LeakageArgs, io: { signal?: AbortSignal; stream?: NodeJS.WriteStream } = {}): Promise<LeakageReport> {
  const { items } = readDataset(a.data, { strict: a.strict });
  if (a.llm && !a.model) throw new Error('--llm needs --model');
  let state: PipelineState | undefined;
  let llm: CachedLlm | undefined;
  let progress: Progress | undefined;
  if (a.llm && a.model) {
    state = new PipelineState(leakageStatePath(a));
    const client = new LlmClient({ baseUrl: a.llm, model: a.model, concurrency: a.concurrency ?? 8, timeoutMs: (a.timeout ?? 120) * 1000 });
    const total = items.reduce((n, it) => n + it.rubric.length, 0);
    progress = new Progress({ label: 'leakage', unit: 'rubric items', total, stream: io.stream, load: () => client.load(), intervalMs: (a.progressInterval ?? 5) * 1000, silent: a.progress === 'none', plain: a.progress === 'plain' ? true : undefined });
    llm = new CachedLlm(client, state, { temperature: 0, maxTokens: 512, signal: io.signal, progress });
  }
  try {
    const rep = await auditLeakage(items, { llm, threshold: a.threshold, onRow: (_r, cached) => progress?.tick(cached) });
    progress?.stop();
    if (a.out) writeFileSync(a.out, JSON.stringify(rep, null, 2) + '\n');
    return rep;
  } finally {
    progress?.stop();
    state?.close();
  }
}

/** The judge-call cache of a leakage run. */
export const leakageStatePath = (a: LeakageArgs) => a.state ?? `${a.data}.leakage.sqlite`;

export const leakageCommand: CommandModule<object, LeakageArgs> = {
  command: 'leakage',
  describe: 'Leakage audit: share of rubric items inferable from the question alone (judge and lexical proxy)',
  builder: (y) =>
    addSettings(y, LEAKAGE_OPTIONS, { withDefaults: true }).demandOption('data') as never,
  handler: async (argv) => {
    const rep = await handleInterrupt('leakage', (signal) => runLeakage(argv, { signal }), () => `every finished judge call is saved in ${leakageStatePath(argv)}`);
    if (rep === InterruptedRun) return;
    if (argv.json) process.stdout.write(JSON.stringify(rep, null, 2) + '\n');
    else process.stdout.write(formatLeakage(rep) + '\n');
  },
};
