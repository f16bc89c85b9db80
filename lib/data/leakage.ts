/**
 * Leakage audit (docs/design.md §7, §8): leakage = the share of rubric items that a judge says can
 * be inferred from the question alone. Reported overall, per dimension and per origin, next to
 * an LLM-free lexical-overlap proxy (share of an item's content words found in the question).
 */
import type { CachedLlm } from './pipeline.js';
import { TASK_SCHEMAS } from './pipeline.js';
/**
 * What the audit reads of an item: PaperGym items and imported benchmark items alike (lib/task/types.ts
 * BenchmarkItem; a chat prompt is already folded into `question`). Dimension and origin are optional.
 */
export interface LeakageItem {
  id: string;
  question: string;
  rubric: { id: string; text: string; dimension?: string; origin?: string }[];
}

const STOP = new Set(
  'a an the and or of to in on for with by from at as is are be been being this that these those it its their there which what how why when does do did plan plans proposal propose proposes whether into using use uses used than then such any each all both either not no can could should would will may might must also more most other its it our we they them his her explicit explicitly clearly specific specifically include includes including consider considers'.split(' '),
);

/** Content words of a text, lightly stemmed (plural/-ing/-ed suffixes). */
export function contentTerms(text: string): string[] {
  return (text.toLowerCase().match(/[\p{L}][\p{L}\p{N}-]{2,}/gu) ?? []).filter((w) => !STOP.has(w)).map((w) => w.replace(/(ies)$/, 'y').replace(/(ing|ed|es|s)$/, '')).filter((w) => w.length > 2);
}

/** Share (0..1) of the item's distinct content terms that occur in the question. */
export function lexicalOverlap(question: string, itemText: string): number {
  const q = new Set(contentTerms(question));
  const it = [...new Set(contentTerms(itemText))];
  if (!it.length) return 0;
  return it.filter((w) => q.has(w)).length / it.length;
}

/** One audited rubric item. */
export interface LeakageRow {
  itemId: string;
  rubricId: string;
  /** Rubric dimension / origin where the item has them (PaperGym). */
  dimension?: string;
  origin?: string;
  /** Judge verdict; null when the judge failed or no judge was used. */
  inferable: boolean | null;
  reason?: string;
  overlap: number;
  /** overlap ≥ threshold */
  lexicalLeak: boolean;
}

/** A rate with its counts. */
export interface Rate {
  n: number;
  leaked: number;
  rate: number | null;
}

/** Rates overall / per dimension / per origin. */
export interface RateTable {
  overall: Rate;
  byDimension: Record<string, Rate>;
  byOrigin: Record<string, Rate>;
}

/** Leakage report. */
export interface LeakageReport {
  rows: LeakageRow[];
  /** Judge-based rates (absent without a judge). Rows with a null verdict are excluded. */
  judge?: RateTable & { failed: number };
  lexical: RateTable & { threshold: number; meanOverlap: number };
}

function rates(rows: LeakageRow[], leaked: (r: LeakageRow) => boolean | null): RateTable {
  const mk = (rs: LeakageRow[]): Rate => {
    const valid = rs.filter((r) => leaked(r) !== null);
    const l = valid.filter((r) => leaked(r)).length;
    return { n: valid.length, leaked: l, rate: valid.length ? l / valid.length : null };
  };
  const group = (key: (r: LeakageRow) => string | undefined) => {
    const out: Record<string, Rate> = {};
    for (const k of [...new Set(rows.map(key))].filter((x): x is string => x !== undefined).sort()) out[k] = mk(rows.filter((r) => key(r) === k));
    return out;
  };
  return { overall: mk(rows), byDimension: group((r) => r.dimension), byOrigin: group((r) => r.origin) };
}

/**
 * Audit items. With `llm`, each rubric item is judged (prompt data-leakage, cached in the state
 * like every pipeline call); judge failures become `inferable: null` and are counted.
 * @param threshold lexical-overlap threshold of the proxy (default 0.6)
 */
export async function auditLeakage(items: LeakageItem[], opts: { llm?: CachedLlm; threshold?: number; onRow?: (r: LeakageRow, fromCache: boolean) => void } = {}): Promise<LeakageReport> {
  const threshold = opts.threshold ?? 0.6;
  let failed = 0;
  const tasks: Promise<LeakageRow>[] = [];
  for (const it of items)
    for (const r of it.rubric) {
      tasks.push(
        (async () => {
          const overlap = lexicalOverlap(it.question, r.text);
          let inferable: boolean | null = null;
          let reason: string | undefined;
          const tally = { live: 0, cached: 0 };
          if (opts.llm) {
            try {
              const v = await opts.llm.call<{ inferable: boolean; reason?: string }>('leakage', { question: it.question, item: r.text }, TASK_SCHEMAS.leakage, tally);
              inferable = v.inferable;
              reason = v.reason;
            } catch (e) {
              if ((e as Error)?.name === 'LlmAbortError') throw e;
              failed++;
            }
          }
          const row: LeakageRow = { itemId: it.id, rubricId: r.id, ...(r.dimension && { dimension: r.dimension }), ...(r.origin && { origin: r.origin }), inferable, ...(reason && { reason }), overlap, lexicalLeak: overlap >= threshold };
          opts.onRow?.(row, tally.live === 0);
          return row;
        })(),
      );
    }
  const rows = await Promise.all(tasks);
  const lex = rates(rows, (r) => r.lexicalLeak);
  return {
    rows,
    ...(opts.llm && { judge: { ...rates(rows, (r) => r.inferable), failed } }),
    lexical: { ...lex, threshold, meanOverlap: rows.length ? rows.reduce((a, r) => a + r.overlap, 0) / rows.length : 0 },
  };
}

/** Human-readable summary lines. */
export function formatLeakage(rep: LeakageReport): string {
  const pct = (r: Rate) => (r.rate === null ? 'n/a' : `${(100 * r.rate).toFixed(1)}% (${r.leaked}/${r.n})`);
  const table = (name: string, t: RateTable) => [
    `${name} overall: ${pct(t.overall)}`,
    ...Object.entries(t.byDimension).map(([k, v]) => `  dimension ${k}: ${pct(v)}`),
    ...Object.entries(t.byOrigin).map(([k, v]) => `  origin ${k}: ${pct(v)}`),
  ];
  return [
    ...(rep.judge ? [...table('judge leakage', rep.judge), ...(rep.judge.failed ? [`  judge failures: ${rep.judge.failed}`] : [])] : []),
    ...table(`lexical proxy (overlap ≥ ${rep.lexical.threshold})`, rep.lexical),
    `  mean overlap: ${rep.lexical.meanOverlap.toFixed(3)}`,
  ].join('\n');
}
