/**
 * `papergym-native leakage --data dataset.jsonl [--llm URL --model NAME]` (docs/design.md §7/§8):
 * per rubric item, whether a judge can infer it from the question alone; rates overall, per
 * dimension and per origin; plus the LLM-free lexical-overlap proxy (always computed).
 */
import { createHash } from 'node:crypto';
import { writeFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import type { CommandModule } from 'yargs';
import { LEAKAGE_OPTIONS } from '../../lib/config/settings.js';
import { addSettings } from '../../lib/config/schema.js';
import { LlmClient } from '../../lib/llm/client.js';
import { auditLeakage, formatLeakage, type LeakageReport } from '../../lib/data/leakage.js';
import { CachedLlm } from '../../lib/data/pipeline.js';
import { readEvalItems } from '../../lib/data/schema.js';
import { JUDGE_DEFAULTS } from '../../lib/config/judge.js';
import { parseList } from '../../lib/config/schema.js';
import { PipelineState } from '../../lib/data/state.js';
import { Progress } from '../../lib/data/progress.js';
import { handleInterrupt, InterruptedRun } from './build-data.js';
import { userCacheDir } from '../../lib/util/cache.js';

export interface LeakageArgs {
  /** One items file (runLeakage); the command accepts several (one table row each). */
  data: string;
  llm?: string;
  model?: string;
  state?: string;
  threshold?: number;
  out?: string;
  json?: boolean;
  concurrency?: number;
  /** Same as `concurrency` (the name eval and compare use); wins when both are given. */
  judgeConcurrency?: number;
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
  // PaperGym items and imported benchmark items alike (a chat prompt is read as its folded text).
  const { items } = readEvalItems(a.data, { strict: a.strict });
  if (a.llm && !a.model) throw new Error('--llm needs --model');
  let state: PipelineState | undefined;
  let llm: CachedLlm | undefined;
  let progress: Progress | undefined;
  if (a.llm && a.model) {
    state = new PipelineState(leakageStatePath(a));
    const client = new LlmClient({
      baseUrl: a.llm,
      model: a.model,
      concurrency: a.judgeConcurrency ?? a.concurrency ?? 8,
      timeoutMs: (a.timeout ?? 120) * 1000,
    });
    const total = items.reduce((n, it) => n + it.rubric.length, 0);
    progress = new Progress({
      label: 'leakage',
      unit: 'rubric items',
      total,
      stream: io.stream,
      load: () => client.load(),
      intervalMs: (a.progressInterval ?? 5) * 1000,
      silent: a.progress === 'none',
      plain: a.progress === 'plain' ? true : undefined,
    });
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
/**
 * The judge-call cache of `leakage`: `--state`, else `<cache dir>/leakage/<sha256 of the dataset's
 * absolute path, 16 hex>.sqlite` (per-user cache dir, lib/util/cache.ts), not beside the dataset
 * (a clone would get an untracked file).
 */
export const leakageStatePath = (a: Pick<LeakageArgs, 'state' | 'data'>) =>
  a.state ?? join(userCacheDir(), 'leakage', `${createHash('sha256').update(resolve(a.data)).digest('hex').slice(0, 16)}.sqlite`);

/**
 * Fails (exit 1 with the reason) when more than the judge null-rate limit of the judge calls of a
 * dataset failed: a leakage rate computed from a few survivors is never printed (issue 38 item 5).
 */
export function assertLeakageJudge(rep: LeakageReport, data: string, maxFailRate = JUDGE_DEFAULTS.maxNullRate): void {
  if (!rep.judge || !rep.rows.length) return;
  const rate = rep.judge.failed / rep.rows.length;
  if (rate > maxFailRate) {
    throw new Error(
      `leakage: ${data}: ${rep.judge.failed} of ${rep.rows.length} judge calls failed (${(100 * rate).toFixed(0)}% > ${(100 * maxFailRate).toFixed(0)}%); no leakage rate reported — check --llm / --model and the server`,
    );
  }
}

/** One table row per dataset: rubric items, judge leakage, lexical leakage, mean overlap. */
export function formatLeakageTable(reps: { data: string; rep: LeakageReport }[]): string {
  const pct = (r: { rate: number | null; leaked: number; n: number } | undefined) =>
    !r || r.rate === null ? '—' : `${(100 * r.rate).toFixed(1)}% (${r.leaked}/${r.n})`;
  const head = ['dataset', 'items', 'rubric items', 'judge leakage', `lexical (≥ ${reps[0]!.rep.lexical.threshold})`, 'mean overlap'];
  const body = reps.map(({ data, rep }) => [
    data,
    String(new Set(rep.rows.map((r) => r.itemId)).size),
    String(rep.rows.length),
    pct(rep.judge?.overall),
    pct(rep.lexical.overall),
    rep.lexical.meanOverlap.toFixed(3),
  ]);
  const w = head.map((h, i) => Math.max(h.length, ...body.map((b) => b[i]!.length)));
  const line = (cells: string[]) => `| ${cells.map((c, i) => c.padEnd(w[i]!)).join(' | ')} |`;
  return [line(head), `|${w.map((n) => '-'.repeat(n + 2)).join('|')}|`, ...body.map(line)].join('\n');
}

export const leakageCommand: CommandModule<object, LeakageArgs> = {
  command: 'leakage',
  describe: 'Leakage audit: share of rubric items inferable from the question alone (judge and lexical proxy), one row per dataset',
  builder: (y) => addSettings(y, LEAKAGE_OPTIONS, { withDefaults: true }).demandOption('data') as never,
  handler: async (argv) => {
    const datas = parseList(
      LEAKAGE_OPTIONS.find((s) => s.key === 'data')!,
      argv.data,
    ) as string[];
    if (datas.length > 1 && (argv.state || argv.out))
      throw new Error('--state and --out name one file: give them with a single --data (each dataset keeps its own cache under <cache dir>/leakage/)');
    const reps: { data: string; rep: LeakageReport }[] = [];
    for (const data of datas) {
      const a = { ...argv, data };
      const rep = await handleInterrupt(
        'leakage',
        (signal) => runLeakage(a, { signal }),
        () => `every finished judge call is saved in ${leakageStatePath(a)}`,
      );
      if (rep === InterruptedRun) return;
      assertLeakageJudge(rep, data);
      reps.push({ data, rep });
    }
    if (argv.json) process.stdout.write(JSON.stringify(reps.length === 1 ? reps[0]!.rep : reps, null, 2) + '\n');
    else if (reps.length === 1) process.stdout.write(formatLeakage(reps[0]!.rep) + '\n');
    else process.stdout.write(formatLeakageTable(reps) + '\n');
  },
};
