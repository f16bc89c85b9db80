/**
 * Scores rows under a protocol: plan scores, the benchmark mean (the protocol's `finish` applied,
 * e.g. HealthBench's clip), per-group scores, and a seeded percentile bootstrap over questions
 * (all samples of a question move together; each resample's mean is finished the same way, as
 * HealthBench clips each bootstrap mean). Source: Efron & Tibshirani 1993 (percentile bootstrap).
 */
import { mulberry32, quantile } from '../report.js';
import { DEFAULT_ALPHA } from '../../config/reward.js';
import type { Protocol, ProtocolRow, ProtocolScore, ProtocolStat } from './types.js';

/** A null verdict: binary met null; levels: no readable label (or the query skipped). */
export function isNull(p: Protocol, r: ProtocolRow): boolean {
  return p.verdict === 'levels' ? r.level === null || r.level === undefined : r.met === null;
}

/** Rows grouped by plan (questionId, sample), in first-seen order. */
export function plansOf(rows: ProtocolRow[]): { questionId: string; sample: number; rows: ProtocolRow[] }[] {
  const m = new Map<string, { questionId: string; sample: number; rows: ProtocolRow[] }>();
  for (const r of rows) {
    const k = `${r.questionId}\u0000${r.sample}`;
    let p = m.get(k);
    if (!p) m.set(k, (p = { questionId: r.questionId, sample: r.sample, rows: [] }));
    p.rows.push(r);
  }
  return [...m.values()];
}

/**
 * Bootstrap means: `resamples` resamples of the questions (with replacement, seeded), each the
 * finished mean of the resampled questions' plan scores. Empty when no question has a score.
 */
export function bootstrapMeans(byQ: Map<string, number[]>, finish: (m: number) => number, resamples: number, seed: number): number[] {
  const qs = [...byQ.keys()].filter((q) => byQ.get(q)!.length);
  if (!qs.length) return [];
  const rnd = mulberry32(seed);
  const draws: number[] = [];
  for (let s = 0; s < resamples; s++)
    draws.push(
      finishedMean(
        byQ,
        qs.map(() => qs[Math.floor(rnd() * qs.length)]!),
        finish,
      ),
    );
  return draws;
}

function finishedMean(byQ: Map<string, number[]>, idx: string[], finish: (m: number) => number): number {
  let s = 0;
  let n = 0;
  for (const q of idx) {
    for (const v of byQ.get(q)!) {
      s += v;
      n++;
    }
  }
  return finish(s / n);
}

function stat(byQ: Map<string, number[]>, finish: (m: number) => number, resamples: number, seed: number, level: number): ProtocolStat | null {
  const qs = [...byQ.keys()].filter((q) => byQ.get(q)!.length);
  if (!qs.length) return null;
  const score = finishedMean(byQ, qs, finish);
  const n = qs.reduce((a, q) => a + byQ.get(q)!.length, 0);
  if (!resamples) return { score, lo: score, hi: score, n };
  const draws = bootstrapMeans(byQ, finish, resamples, seed).sort((a, b) => a - b);
  return { score, lo: quantile(draws, (1 - level) / 2), hi: quantile(draws, (1 + level) / 2), n };
}

/** Plan scores per question (skipped plans left out): the input of {@link bootstrapMeans}. */
export function questionScores(p: Protocol, rows: ProtocolRow[], alpha = DEFAULT_ALPHA): Map<string, number[]> {
  const m = new Map<string, number[]>();
  for (const pl of plansOf(rows)) {
    const s = p.planScore(pl.rows, { alpha });
    m.set(pl.questionId, [...(m.get(pl.questionId) ?? []), ...(s === null ? [] : [s])]);
  }
  return m;
}

/** Options of {@link scoreRows}. */
export interface ScoreOptions {
  resamples?: number;
  seed?: number;
  level?: number;
  /** PaperGym's α (default 0.7). */
  alpha?: number;
}

/**
 * The protocol's score of `rows` (every verdict of every plan).
 * @throws RangeError on a level outside (0, 1)
 */
export function scoreRows(p: Protocol, rows: ProtocolRow[], o: ScoreOptions = {}): ProtocolScore {
  const resamples = o.resamples ?? 1000;
  const seed = o.seed ?? 0;
  const level = o.level ?? 0.95;
  const alpha = o.alpha ?? DEFAULT_ALPHA;
  if (!(level > 0 && level < 1)) throw new RangeError(`level must be in (0, 1), got ${level}`);
  const prompt = promptOfRows(rows);
  const plans = plansOf(rows);
  const all = new Map<string, number[]>();
  const groups = new Map<string, Map<string, number[]>>();
  const gCounts = new Map<string, { nulls: number; skipped: number }>();
  let skipped = 0;
  for (const pl of plans) {
    if (!all.has(pl.questionId)) all.set(pl.questionId, []);
    const s = p.planScore(pl.rows, { alpha });
    if (s === null) skipped++;
    else all.get(pl.questionId)!.push(s);
    const keys = new Set(pl.rows.flatMap((r) => p.groupsOf(r)));
    for (const g of keys) {
      const grows = pl.rows.filter((r) => p.groupsOf(r).includes(g));
      const c = gCounts.get(g) ?? { nulls: 0, skipped: 0 };
      gCounts.set(g, c);
      c.nulls += grows.filter((r) => isNull(p, r)).length;
      // A group with no readable verdict in this plan (or a skipped plan) leaves the group's mean, counted.
      const gs = s === null ? null : p.planScore(grows, { alpha });
      if (gs === null) {
        c.skipped++;
        continue;
      }
      const m = groups.get(g) ?? new Map<string, number[]>();
      groups.set(g, m);
      m.set(pl.questionId, [...(m.get(pl.questionId) ?? []), gs]);
    }
  }
  const gstats: Record<string, ProtocolStat> = {};
  const unscored: Record<string, { nulls: number; skipped: number }> = {};
  for (const g of [...gCounts.keys()].sort()) {
    const st = groups.has(g) ? stat(groups.get(g)!, p.finish, resamples, seed, level) : null;
    // A group no plan could score is listed apart, with its nulls and skips (never 0).
    if (st) gstats[g] = { ...st, ...gCounts.get(g)! };
    else unscored[g] = gCounts.get(g)!;
  }
  const nulls = rows.filter((r) => isNull(p, r)).length;
  return {
    protocol: p.name,
    score: (() => {
      const st = stat(all, p.finish, resamples, seed, level);
      return st && { ...st, nulls, skipped };
    })(),
    groups: gstats,
    ...(Object.keys(unscored).length && { unscoredGroups: unscored }),
    questions: all.size,
    plans: plans.length,
    skipped,
    verdicts: rows.length,
    nulls,
    formula: p.formula,
    ...(prompt && { prompt }),
    bootstrap: { resamples, seed, level },
  };
}

/**
 * The one judge prompt of `rows` (name and SHA-256 prefix; undefined for rows written before
 * prompts were recorded). Numbers from different prompts are never averaged together.
 * @throws Error naming the prompts when the rows mix them
 */
export function promptOfRows(rows: readonly ProtocolRow[]): { name: string; sha256: string } | undefined {
  const seen = new Map<string, { name: string; sha256: string }>();
  for (const r of rows) {
    const k = r.prompt === undefined ? '' : `${r.prompt}@${r.promptHash ?? ''}`;
    if (!seen.has(k)) seen.set(k, { name: r.prompt ?? '(not recorded)', sha256: r.promptHash ?? '' });
  }
  if (seen.size > 1)
    throw new Error(
      `rows mix judge prompts (${[...seen.values()].map((x) => `${x.name}${x.sha256 ? ` sha256 ${x.sha256}` : ''}`).join(', ')}): numbers from different prompts are not comparable; score them apart`,
    );
  const only = [...seen.values()][0];
  return only && only.name !== '(not recorded)' ? only : undefined;
}

/**
 * Σ w·c / Σ positive w over the rows with a verdict (RubricHub, RaR, HealthBench): c = 1 when the
 * judge says the item is met — for a negative weight, that the undesirable behaviour occurred, so
 * it subtracts |w|. Null verdicts drop out of both sums (never 0, never a pass). Null when no
 * row has a verdict or no remaining row has a positive weight.
 */
export function weightedScore(rows: ProtocolRow[]): number | null {
  let num = 0;
  let den = 0;
  let seen = 0;
  for (const r of rows) {
    if (r.met === null) continue;
    seen++;
    const w = r.weight ?? 1;
    if (r.met) num += w;
    if (w > 0) den += w;
  }
  return seen && den > 0 ? num / den : null;
}

/** Human-readable result lines: every line says its nulls and skipped plans. */
export function formatProtocolScore(s: ProtocolScore): string {
  const counts = (x: ProtocolStat) => `; ${x.nulls ?? 0} null, ${x.skipped ?? 0} skipped`;
  const f = (x: ProtocolStat) => `${x.score.toFixed(3)} [${x.lo.toFixed(3)}, ${x.hi.toFixed(3)}] (n=${x.n}${counts(x)})`;
  return [
    `${s.protocol}: ${s.score ? f(s.score) : `no plan could be scored (n=0; ${s.nulls} null, ${s.skipped} skipped)`}`,
    `  formula: ${s.formula}`,
    ...(s.prompt ? [`  judge prompt: ${s.prompt.name} (sha256 ${s.prompt.sha256})`] : []),
    ...Object.entries(s.groups).map(([g, x]) => `  ${g}: ${f(x)}`),
    ...Object.entries(s.unscoredGroups ?? {}).map(([g, x]) => `  ${g}: no plan could be scored (n=0; ${x.nulls} null, ${x.skipped} skipped)`),
    `  ${s.questions} question(s), ${s.plans} plan(s), ${s.skipped} skipped (no readable verdict); ${s.nulls} of ${s.verdicts} verdict(s) null (left out, never scored 0)`,
  ].join('\n');
}
