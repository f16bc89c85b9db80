/**
 * Leakage audit (docs/design.md §7, §8): leakage = the share of rubric items that a judge (or a
 * jury's aggregate verdict, {@link LeakageJury}) says can be inferred from the question alone.
 * Reported overall, per dimension and per origin (a jury: per member too), next to an LLM-free
 * lexical-overlap proxy (share of an item's content words found in the question).
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
  /** Judge verdict (a jury's: its aggregate); null when the judge failed or no judge was used. */
  inferable: boolean | null;
  reason?: string;
  /** A jury: each member's verdict (null: failed, or not asked after the member was left out). */
  judges?: Record<string, boolean | null>;
  /** A jury: each member's reason, where it gave one. */
  reasons?: Record<string, string>;
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
  /** Judge-based rates (absent without a judge; a jury's aggregate verdicts). Rows with a null verdict are excluded. */
  judge?: RateTable & { failed: number };
  /** A jury: each member's own leakage rates over its verdicts, and its failed calls. */
  members?: Record<string, RateTable & { failed: number }>;
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
 * A jury for {@link auditLeakage}: members that each judge every rubric item, and the rule that
 * makes one verdict of theirs (lib/judge/jury.ts supplies both in `leakage --judge jury`; this room
 * sits below the judge's).
 */
export interface LeakageJury {
  /** Each member's pipeline LLM (its own endpoint and SQLite call cache). */
  members: { name: string; llm: CachedLlm }[];
  /** Told of every member answer ('failed': the call failed after its retries); may throw to stop the run. */
  onAnswer?: (member: string, outcome: 'ok' | 'failed', detail?: string) => void;
  /** Whether a member still takes part (a member left out is asked nothing more and does not vote). Default: all. */
  active?: (member: string) => boolean;
  /** The verdict of a rubric item from the voting members' verdicts (null: failed / not voting). */
  aggregate: (verdicts: Record<string, boolean | null>) => boolean | null;
}

/**
 * Audit items. With `llm`, each rubric item is judged (prompt data-leakage, cached in the state
 * like every pipeline call); judge failures become `inferable: null` and are counted. With `jury`
 * instead, every member judges every rubric item, the members concurrently; rows keep each member's
 * verdict (`judges`), and `inferable` is the jury's `aggregate` over the members still active once
 * every item is judged (so a member left out mid-run votes on no item); `members` gives each
 * member's own rates. A rejection of `onAnswer` stops the run with that error (calls in flight are
 * let finish, their answers cached).
 * @param threshold lexical-overlap threshold of the proxy (default 0.6)
 * @throws the abort error; the error of `jury.onAnswer`
 */
export async function auditLeakage(
  items: LeakageItem[],
  opts: { llm?: CachedLlm; jury?: LeakageJury; threshold?: number; onRow?: (r: LeakageRow, fromCache: boolean) => void } = {},
): Promise<LeakageReport> {
  const threshold = opts.threshold ?? 0.6;
  const jury = opts.jury;
  const active = (m: string) => jury?.active?.(m) ?? true;
  let failed = 0;
  let stopped: unknown;
  const memberFailed = new Map<string, number>();
  type Answer = { inferable: boolean | null; reason?: string; error?: string };
  const ask = async (llm: CachedLlm, question: string, item: string, tally: { live: number; cached: number }): Promise<Answer> => {
    try {
      const v = await llm.call<{ inferable: boolean; reason?: string }>('leakage', { question, item }, TASK_SCHEMAS.leakage, tally);
      return { inferable: v.inferable, reason: v.reason };
    } catch (e) {
      if ((e as Error)?.name === 'LlmAbortError') throw e;
      return { inferable: null, error: (e as Error)?.message ?? String(e) };
    }
  };
  const tasks: Promise<LeakageRow>[] = [];
  for (const it of items)
    for (const r of it.rubric) {
      tasks.push(
        (async () => {
          const overlap = lexicalOverlap(it.question, r.text);
          let inferable: boolean | null = null;
          let reason: string | undefined;
          let judges: Record<string, boolean | null> | undefined;
          let reasons: Record<string, string> | undefined;
          const tally = { live: 0, cached: 0 };
          if (jury) {
            judges = {};
            reasons = {};
            const got = await Promise.all(
              jury.members.map(async (m): Promise<Answer> => {
                if (!active(m.name) || stopped) return { inferable: null };
                let a: Answer;
                try {
                  a = await ask(m.llm, it.question, r.text, tally);
                } catch (e) {
                  // Aborted because the run stopped or the member was left out: not an answer.
                  if (stopped || !active(m.name)) return { inferable: null };
                  throw e;
                }
                if (a.error) memberFailed.set(m.name, (memberFailed.get(m.name) ?? 0) + 1);
                try {
                  jury.onAnswer?.(m.name, a.error ? 'failed' : 'ok', a.error);
                } catch (e) {
                  stopped ??= e;
                }
                return a;
              }),
            );
            jury.members.forEach((m, j) => {
              judges![m.name] = got[j]!.inferable;
              if (got[j]!.reason) reasons![m.name] = got[j]!.reason!;
            });
          } else if (opts.llm) {
            const a = await ask(opts.llm, it.question, r.text, tally);
            inferable = a.inferable;
            reason = a.reason;
            if (a.inferable === null) failed++;
          }
          const row: LeakageRow = {
            itemId: it.id,
            rubricId: r.id,
            ...(r.dimension && { dimension: r.dimension }),
            ...(r.origin && { origin: r.origin }),
            inferable,
            ...(reason && { reason }),
            ...(judges && { judges }),
            ...(reasons && Object.keys(reasons).length && { reasons }),
            overlap,
            lexicalLeak: overlap >= threshold,
          };
          opts.onRow?.(row, tally.live === 0);
          return row;
        })(),
      );
    }
  const settled = await Promise.allSettled(tasks);
  if (stopped) throw stopped;
  const bad = settled.find((x): x is PromiseRejectedResult => x.status === 'rejected');
  if (bad) throw bad.reason;
  const rows = settled.map((x) => (x as PromiseFulfilledResult<LeakageRow>).value);
  let members: LeakageReport['members'];
  if (jury) {
    members = {};
    for (const m of jury.members) members[m.name] = { ...rates(rows, (r) => r.judges![m.name] ?? null), failed: memberFailed.get(m.name) ?? 0 };
    for (const r of rows) {
      r.inferable = jury.aggregate(Object.fromEntries(jury.members.map((m) => [m.name, active(m.name) ? r.judges![m.name]! : null])));
      if (r.inferable === null) failed++;
    }
  }
  const lex = rates(rows, (r) => r.lexicalLeak);
  return {
    rows,
    ...((opts.llm || jury) && { judge: { ...rates(rows, (r) => r.inferable), failed } }),
    ...(members && { members }),
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
    ...(rep.judge
      ? [
          ...table(rep.members ? 'judge leakage (jury)' : 'judge leakage', rep.judge),
          ...(rep.judge.failed ? [`  ${rep.members ? 'items without a jury verdict' : 'judge failures'}: ${rep.judge.failed}`] : []),
        ]
      : []),
    ...Object.entries(rep.members ?? {}).map(([n, t]) => `  member ${n}: ${pct(t.overall)}${t.failed ? `, ${t.failed} failed calls` : ''}`),
    ...table(`lexical proxy (overlap ≥ ${rep.lexical.threshold})`, rep.lexical),
    `  mean overlap: ${rep.lexical.meanOverlap.toFixed(3)}`,
  ].join('\n');
}
