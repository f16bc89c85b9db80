/**
 * Comparing eval results (per-item rows of `papergym-native eval --out`): the hardest rubric
 * items, and two adapters compared on the same questions with a paired bootstrap.
 *
 * Paired bootstrap (Efron & Tibshirani 1993, ch. 16; as in Koehn 2004 for MT system comparison):
 * questions present in both results are resampled with replacement, the same resampled questions
 * for both adapters; each resample recomputes coverage B − coverage A (micro average over the
 * resampled questions' items, null verdicts count as not met — as lib/eval/report.ts). The
 * interval is the [(1−level)/2, (1+level)/2] percentiles of the differences; `pBNotBetter` is the
 * share of resamples where B − A ≤ 0 (one-sided).
 */
import { readFileSync } from 'node:fs';
import type { EvalRow } from './report.js';
import { mulberry32, quantile } from './report.js';

/** Statistics compared: overall instance-item coverage, per dimension, general items. */
export const COVERAGE_KEYS = ['overall', 'method_innovation', 'experimental_design', 'general'] as const;
export type CoverageKey = (typeof COVERAGE_KEYS)[number];

function keyMatches(k: CoverageKey, r: EvalRow): boolean {
  if (k === 'general') return r.kind === 'general';
  if (r.kind !== 'spec') return false;
  return k === 'overall' || r.dimension === k;
}

/** Per question: [met, n] per coverage key. */
function perQuestion(rows: EvalRow[]): Map<string, number[]> {
  const m = new Map<string, number[]>();
  for (const r of rows) {
    const c = m.get(r.questionId) ?? new Array<number>(2 * COVERAGE_KEYS.length).fill(0);
    COVERAGE_KEYS.forEach((k, i) => {
      if (!keyMatches(k, r)) return;
      c[2 * i] += r.met === true ? 1 : 0;
      c[2 * i + 1] += 1;
    });
    m.set(r.questionId, c);
  }
  return m;
}

/** One compared statistic: coverage of A and B on the shared questions and B − A with its interval. */
export interface PairedDiff {
  a: number;
  b: number;
  diff: number;
  lo: number;
  hi: number;
  /** Share of resamples with B − A ≤ 0. */
  pBNotBetter: number;
  /** Items of A on the shared questions. */
  n: number;
}

export interface PairedComparison {
  /** Questions in both results (the others are left out and counted). */
  questions: number;
  onlyA: number;
  onlyB: number;
  stats: Record<CoverageKey, PairedDiff>;
  bootstrap: { resamples: number; seed: number; level: number };
}

/**
 * Paired bootstrap of coverage B − A over the questions both row sets share.
 * @throws RangeError on a level outside (0, 1); Error when no question is shared.
 */
export function pairedBootstrap(a: EvalRow[], b: EvalRow[], opts: { resamples?: number; seed?: number; level?: number } = {}): PairedComparison {
  const resamples = opts.resamples ?? 1000;
  const seed = opts.seed ?? 0;
  const level = opts.level ?? 0.95;
  if (!(level > 0 && level < 1)) throw new RangeError(`level must be in (0, 1), got ${level}`);
  const qa = perQuestion(a);
  const qb = perQuestion(b);
  const shared = [...qa.keys()].filter((q) => qb.has(q)).sort();
  if (!shared.length) throw new Error('the two eval results share no question');
  const K = COVERAGE_KEYS.length;
  const ca = shared.map((q) => qa.get(q)!);
  const cb = shared.map((q) => qb.get(q)!);
  const ratio = (c: number[], i: number) => (c[2 * i + 1] ? c[2 * i] / c[2 * i + 1] : NaN);
  const sum = (cs: number[][], idx: number[]) => {
    const t = new Array<number>(2 * K).fill(0);
    for (const j of idx) for (let i = 0; i < 2 * K; i++) t[i] += cs[j]![i]!;
    return t;
  };
  const all = shared.map((_, j) => j);
  const ta = sum(ca, all);
  const tb = sum(cb, all);
  const diffs: number[][] = COVERAGE_KEYS.map(() => []);
  const rnd = mulberry32(seed);
  for (let s = 0; s < resamples; s++) {
    const idx = shared.map(() => Math.floor(rnd() * shared.length));
    const ra = sum(ca, idx);
    const rb = sum(cb, idx);
    for (let i = 0; i < K; i++) {
      const d = ratio(rb, i) - ratio(ra, i);
      if (Number.isFinite(d)) diffs[i]!.push(d);
    }
  }
  const stats = Object.fromEntries(COVERAGE_KEYS.map((k, i) => {
    const d = diffs[i]!.sort((x, y) => x - y);
    const point = ratio(tb, i) - ratio(ta, i);
    return [k, {
      a: ratio(ta, i), b: ratio(tb, i), diff: point,
      lo: d.length ? quantile(d, (1 - level) / 2) : point,
      hi: d.length ? quantile(d, (1 + level) / 2) : point,
      pBNotBetter: d.length ? d.filter((x) => x <= 0).length / d.length : NaN,
      n: ta[2 * i + 1]!,
    }];
  })) as Record<CoverageKey, PairedDiff>;
  return { questions: shared.length, onlyA: qa.size - shared.length, onlyB: qb.size - shared.length, stats, bootstrap: { resamples, seed, level } };
}

/** A rubric item's pass rate over the plans judged on it. */
export interface ItemRate {
  questionId: string;
  itemId: string;
  kind: 'spec' | 'general';
  dimension?: string;
  met: number;
  n: number;
  rate: number;
}

/**
 * The `limit` instance rubric items met least often (ties: more plans first, then ids), over all
 * samples of their question. General items are left out (they are shared across questions).
 */
export function hardestItems(rows: EvalRow[], limit = 10): ItemRate[] {
  const m = new Map<string, ItemRate>();
  for (const r of rows) {
    if (r.kind !== 'spec') continue;
    const key = `${r.questionId}\u0000${r.itemId}`;
    const it = m.get(key) ?? { questionId: r.questionId, itemId: r.itemId, kind: r.kind, dimension: r.dimension, met: 0, n: 0, rate: 0 };
    it.met += r.met === true ? 1 : 0;
    it.n += 1;
    m.set(key, it);
  }
  const items = [...m.values()].map((x) => ({ ...x, rate: x.met / x.n }));
  items.sort((x, y) => x.rate - y.rate || y.n - x.n || x.questionId.localeCompare(y.questionId) || x.itemId.localeCompare(y.itemId));
  return items.slice(0, limit);
}

/**
 * Reads eval rows JSONL (`eval --out`). Blank lines are skipped; a cut last line (a run killed
 * mid-write) is skipped with a note; any other bad line is skipped and counted in the notes.
 * @throws Error naming the file when it cannot be read at all.
 */
export function readEvalRows(path: string): { rows: EvalRow[]; notes: string[] } {
  const text = readFileSync(path, 'utf8');
  const lines = text.split('\n');
  const rows: EvalRow[] = [];
  const notes: string[] = [];
  let bad = 0;
  lines.forEach((line, i) => {
    if (!line.trim()) return;
    try {
      const o = JSON.parse(line) as EvalRow;
      if (typeof o.questionId !== 'string' || typeof o.itemId !== 'string' || (o.kind !== 'spec' && o.kind !== 'general')) throw new Error('not an eval row');
      rows.push(o);
    } catch {
      if (i === lines.length - 1 && !text.endsWith('\n')) notes.push(`last line ${i + 1} is incomplete; skipped`);
      else bad += 1;
    }
  });
  if (bad) notes.push(`${bad} line(s) that are not eval rows skipped`);
  return { rows, notes };
}
