/**
 * The PaperGym coverage report over the one eval loop (lib/eval/protocols/run.ts runBenchmark, the
 * `papergym` protocol), the plan generator contract, and the eval paths' default judge cache.
 */
import { createHash } from 'node:crypto';
import { join, resolve } from 'node:path';
import { PAPERGYM_FORMAT, paperGymToBenchmark, type GeneralRubricItem, type PaperGymItem } from '../data/schema.js';
import { getFormat } from './formats/index.js';
import { getProtocol } from './protocols/index.js';
import { runBenchmark } from './protocols/run.js';
import { userCacheDir } from '../util/cache.js';
import type { ChatMessage } from '../llm/messages.js';
import type { Judge } from '../judge/types.js';
import { buildReport, type EvalReport, type EvalRow, type ReportOptions } from './report.js';

/**
 * Produces `samples` plans per question (text; thinking may be included — it is stripped). A
 * question is a string (wrapped in the task's student prompt) or chat messages sent as they are.
 */
export interface PlanGenerator {
  generate(
    questions: (string | ChatMessage[])[],
    opts: { samples: number; seed: number; signal?: AbortSignal },
  ): Promise<{ text: string; finishReason?: string }[][]>;
}

/** Options of {@link runEval}. */
export interface EvalOptions extends ReportOptions {
  items: PaperGymItem[];
  /** General rubric items judged for every plan (default none). */
  general?: GeneralRubricItem[];
  judge: Judge;
  generator: PlanGenerator;
  /** Plans per question (default 1). */
  samples?: number;
  /** Questions per generation call (default 8). */
  chunkSize?: number;
  /** Generation seed base (chunk k uses seed + k; default 0). */
  genSeed?: number;
  /** Keep the judge's raw text in rows (default false: smaller JSONL). */
  keepRaw?: boolean;
  onProgress?: (done: number, total: number) => void;
  signal?: AbortSignal;
}

/** A generated plan with its question and finish reason. */
export interface EvalPlan {
  questionId: string;
  sample: number;
  plan: string;
  finishReason?: string;
}

/**
 * Runs generation + judging + the coverage report of PaperGym items through the one eval loop
 * (lib/eval/protocols/run.ts runBenchmark with the `papergym` protocol), so its verdicts and null
 * rule are those of `eval`. Rows are ordered by question, sample, then item (spec, general).
 */
export async function runEval(o: EvalOptions): Promise<{ report: EvalReport; rows: EvalRow[]; plans: EvalPlan[] }> {
  const samples = o.samples ?? 1;
  const items = o.items.map((it, i) => paperGymToBenchmark(it, 'items', i + 1));
  const { rows: prows, plans } = await runBenchmark({
    items,
    protocol: getProtocol(getFormat(PAPERGYM_FORMAT).protocol),
    judge: o.judge,
    general: o.general ?? [],
    generator: o.generator,
    samples,
    chunkSize: o.chunkSize,
    genSeed: o.genSeed,
    keepRaw: o.keepRaw,
    signal: o.signal,
    onPlan: (d, n) => {
      if (d % samples === 0) o.onProgress?.(d / samples, n / samples);
    },
  });
  const rank = new Map(o.items.flatMap((it) => it.rubric.map((r) => [`${it.id}\u0000${r.id}`, r.rank] as const)));
  const rows = prows.map((r) => {
    const k = rank.get(`${r.questionId}\u0000${r.itemId}`);
    return (r.kind === 'spec' && k !== undefined ? { ...r, rank: k } : r) as EvalRow;
  });
  return { report: buildReport(rows, o), rows, plans };
}

/**
 * The default judge-answer cache of an eval path (issue 48: resumable by default, never inside
 * the package or beside the data): `<out>.<kind>-cache.sqlite` beside the results file when there
 * is one, else `<per-user cache dir>/eval/<sha256 of the resolved data path, 16 hex>.<kind>-cache.sqlite`
 * (lib/util/cache.ts). Answers are keyed by request hash, so runs of different models share it safely.
 */
export function evalJudgeCachePath(out: string | undefined, data: string, kind = 'judge'): string {
  if (out) return `${out}.${kind}-cache.sqlite`;
  return join(userCacheDir(), 'eval', `${createHash('sha256').update(resolve(data)).digest('hex').slice(0, 16)}.${kind}-cache.sqlite`);
}
