/**
 * The eval loop: generate plans for every benchmark question, judge each plan
 * against its instance rubric + the general items, and build the coverage report with per-item
 * rows. Generation and judging overlap: the judge works on chunk k while chunk k+1 samples.
 */
import type { GeneralRubricItem, PaperGymItem } from '../data/schema.js';
import { stripThink } from '../llm/think.js';
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

/** Runs generation + judging + report. Rows are ordered by question, sample, then item (spec, general). */
export async function runEval(o: EvalOptions): Promise<{ report: EvalReport; rows: EvalRow[]; plans: EvalPlan[] }> {
  const samples = o.samples ?? 1;
  const chunk = Math.max(1, o.chunkSize ?? 8);
  const general = o.general ?? [];
  const rowsByQ: EvalRow[][] = new Array(o.items.length);
  const plans: EvalPlan[] = [];
  const judging: Promise<void>[] = [];
  let done = 0;
  for (let start = 0, k = 0; start < o.items.length; start += chunk, k++) {
    o.signal?.throwIfAborted();
    const part = o.items.slice(start, start + chunk);
    const gen = await o.generator.generate(
      part.map((it) => it.question),
      { samples, seed: (o.genSeed ?? 0) + k, signal: o.signal },
    );
    if (gen.length !== part.length || gen.some((g) => g.length !== samples))
      throw new Error(`generator returned ${gen.map((g) => g.length)} plans for ${part.length} questions × ${samples}`);
    const reqs = part.flatMap((it, i) =>
      gen[i].map((g, s) => {
        const plan = stripThink(g.text);
        plans.push({ questionId: it.id, sample: s, plan, finishReason: g.finishReason });
        return {
          question: it.question,
          plan,
          items: [...it.rubric.map((r) => ({ id: r.id, text: r.text })), ...general.map((g) => ({ id: g.id, text: g.text }))],
        };
      }),
    );
    judging.push(
      o.judge.judge(reqs, { signal: o.signal }).then((verdicts) => {
        part.forEach((it, i) => {
          const rows: EvalRow[] = [];
          for (let s = 0; s < samples; s++) {
            const vs = verdicts[i * samples + s];
            vs.forEach((v, j) => {
              const spec = j < it.rubric.length ? it.rubric[j] : undefined;
              const row: EvalRow = { questionId: it.id, sample: s, itemId: v.itemId, kind: spec ? 'spec' : 'general', met: v.met };
              if (spec) Object.assign(row, { dimension: spec.dimension, origin: spec.origin, rank: spec.rank });
              if (v.prob !== undefined) row.prob = v.prob;
              if (v.refused) row.refused = true;
              if (v.error) row.error = true;
              if (v.members) row.judges = Object.fromEntries(v.members.map((m) => [m.judge, m.met]));
              if (o.keepRaw && v.raw !== undefined) row.raw = v.raw;
              rows.push(row);
            });
          }
          rowsByQ[start + i] = rows;
        });
        done += part.length;
        o.onProgress?.(done, o.items.length);
      }),
    );
  }
  await Promise.all(judging);
  const rows = rowsByQ.flat();
  return { report: buildReport(rows, o), rows, plans };
}
