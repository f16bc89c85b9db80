/**
 * Evaluation report: rubric coverage (% of items met) overall and per dimension (method
 * innovation, experimental design — the paper's two scores), the general items separately, and
 * the mean reward, each with a seeded percentile bootstrap confidence interval; plus per-item rows
 * (JSONL).
 *
 * Coverage is the micro average over the items with a readable verdict: a null verdict (refused,
 * unreadable, failed) is left out and counted, never "not met"; the reward is the training
 * reward's function (lib/judge/rewards.ts computeReward) per plan, and a plan with no readable
 * verdict is skipped and counted — the same rule as training and the `papergym` protocol. The bootstrap resamples *questions* with replacement (all items and samples of a
 * question move together — items of one plan are not independent), recomputing each statistic
 * per resample; the interval is the [(1−level)/2, (1+level)/2] percentiles.
 */
import { writeFileSync, renameSync } from 'node:fs';
import type { RubricDimension } from '../data/schema.js';
import { computeReward, itemScore } from '../judge/rewards.js';
import { DEFAULT_ALPHA } from '../config/reward.js';
import { mulberry32 } from '../util/random.js';
import { formatAgreement, judgeAgreement, type AgreementReport, type AgreementUnit } from '../judge/agreement.js';

export { mulberry32 };

/** One judged item of one plan. */
export interface EvalRow {
  questionId: string;
  /** Index of the plan among the samples of its question (0 when one plan per question). */
  sample: number;
  itemId: string;
  /** `spec` = instance rubric item, `general` = shared item. */
  kind: 'spec' | 'general';
  /** Dimension of a spec item; absent for general items. */
  dimension?: RubricDimension;
  origin?: string;
  rank?: number;
  met: boolean | null;
  prob?: number;
  refused?: boolean;
  error?: boolean;
  raw?: string;
  /** A jury's verdict: each member's verdict on this item (member name → met; lib/judge/jury.ts). */
  judges?: Record<string, boolean | null>;
}

/** A proportion (or mean) with its bootstrap interval. Units: fraction in [0, 1]. */
export interface Stat {
  mean: number;
  lo: number;
  hi: number;
  /** Items (or plans, for the reward) it averages over. */
  n: number;
  /** Items met (absent for the reward). */
  met?: number;
  /** Null verdicts among the items (left out of the fraction, counted here). */
  nulls?: number;
}

export interface EvalReport {
  questions: number;
  plans: number;
  /** Instance items, both dimensions. */
  overall: Stat;
  byDimension: Record<RubricDimension, Stat>;
  general: Stat;
  /** Instance-item coverage by where the item came from (R_Q: question alone, R_A: question + answer, both); origins with no items are absent. */
  byOrigin: Partial<Record<'R_Q' | 'R_A' | 'both', Stat>>;
  /** Mean reward α·r_spec + (1−α)·r_gen per plan (docs/design.md §6); `n` = plans scored. */
  reward: Stat;
  /** Plans skipped: no readable verdict (left out of every mean). */
  skipped: number;
  /**
   * The same statistics with each item scored by the judge's P(yes) instead of its binary verdict
   * (items without P(yes) count 1/0 as above); present when any row carries `prob` (local judge, or
   * an HTTP judge with `--judge-score prob`). `met` is then the expected number of items met.
   */
  prob?: { overall: Stat; byDimension: Record<RubricDimension, Stat>; general: Stat; reward: Stat; rowsWithProb: number };
  alpha: number;
  bootstrap: { resamples: number; seed: number; level: number };
  /** A jury's agreement figures (rows with `judges`): per pair, Fleiss' κ, per dimension (lib/judge/agreement.ts). */
  agreement?: AgreementReport;
}

/** Options of {@link buildReport}. */
export interface ReportOptions {
  /** Bootstrap resamples (default 1000). 0 ⇒ lo = hi = mean. */
  resamples?: number;
  /** PRNG seed (default 0): same rows + seed ⇒ same intervals. */
  seed?: number;
  /** Confidence level (default 0.95). */
  level?: number;
  /** α of the reward (default DEFAULT_ALPHA, 0.7). */
  alpha?: number;
}

/** Linear-interpolated quantile of a sorted array (type 7, as numpy's default). */
export function quantile(sorted: number[], q: number): number {
  if (!sorted.length) return NaN;
  const h = (sorted.length - 1) * q;
  const lo = Math.floor(h);
  const hi = Math.ceil(h);
  return sorted[lo] + (h - lo) * (sorted[hi] - sorted[lo]);
}

/** Sufficient statistics of one question (cluster): per group, met and total counts; per plan, rewards. */
interface Cluster {
  counts: number[]; // [metOverall, nOverall, metInno, nInno, metDesign, nDesign, metGen, nGen, sumReward, nPlans, met/n R_Q, met/n R_A, met/n both]
}

const NSTAT = 16;
const ORIGINS = ['R_Q', 'R_A', 'both'] as const;

function clusterOf(rows: EvalRow[], alpha: number, prob = false): Cluster {
  const c = new Array<number>(NSTAT).fill(0);
  const plans = new Map<number, { spec: EvalRow[]; gen: EvalRow[] }>();
  for (const r of rows) {
    const p = plans.get(r.sample) ?? { spec: [], gen: [] };
    plans.set(r.sample, p);
    (r.kind === 'general' ? p.gen : p.spec).push(r);
    // A null verdict leaves every fraction (the shared rule of lib/judge/rewards.ts); it is counted apart.
    if (r.met === null) continue;
    const m = itemScore(r, prob ? 'prob' : 'binary');
    if (r.kind === 'general') {
      c[6] += m;
      c[7]++;
      continue;
    }
    c[0] += m;
    c[1]++;
    const oi = ORIGINS.indexOf(r.origin as (typeof ORIGINS)[number]);
    if (oi >= 0) {
      c[10 + 2 * oi] += m;
      c[11 + 2 * oi]++;
    }
    if (r.dimension === 'method_innovation') {
      c[2] += m;
      c[3]++;
    } else if (r.dimension === 'experimental_design') {
      c[4] += m;
      c[5]++;
    }
  }
  for (const p of plans.values()) {
    // The training reward's function: a plan with no readable verdict is skipped (masked), not 0.
    const b = computeReward(p.spec, p.gen, { alpha, score: prob ? 'prob' : 'binary' });
    if (b.masked) continue;
    c[8] += b.r;
    c[9]++;
  }
  return { counts: c };
}

function ratios(tot: number[]): number[] {
  return [0, 2, 4, 6, 8, 10, 12, 14].map((i) => (tot[i + 1] ? tot[i] / tot[i + 1] : 0));
}

/**
 * Builds the report from per-item rows (any order). Throws RangeError on a bad level.
 * Rows with the same `questionId` form one bootstrap cluster.
 */
export function buildReport(rows: EvalRow[], opts: ReportOptions = {}): EvalReport {
  const report = buildStats(rows, opts, false);
  const agreement = rowsAgreement(rows, opts);
  if (agreement) report.agreement = agreement;
  const withProb = rows.filter((r) => typeof r.prob === 'number').length;
  if (!withProb) return report;
  const p = buildStats(rows, opts, true);
  return { ...report, prob: { overall: p.overall, byDimension: p.byDimension, general: p.general, reward: p.reward, rowsWithProb: withProb } };
}

/**
 * The agreement group of a row: its rubric dimension, `general` for a general rubric item (PaperGym's
 * shared items), none otherwise (the unit counts in `overall` only; a benchmark's spec rows carry no
 * dimension and must not be labelled `general`).
 */
export function agreementDimension(r: { dimension?: string; kind?: string }): { dimension?: string } {
  return r.dimension ? { dimension: r.dimension } : r.kind === 'general' ? { dimension: 'general' } : {};
}

/**
 * Agreement of a jury's members (lib/judge/agreement.ts) from rows that carry `judges`: one unit
 * per (question, sample, item), clustered by question as the rest of the report, per dimension
 * (`general` for general items). Undefined when no row has `judges`.
 */
export function rowsAgreement(rows: EvalRow[], opts: ReportOptions = {}): AgreementReport | undefined {
  const judged = rows.filter((r) => r.judges && Object.keys(r.judges).length);
  if (!judged.length) return undefined;
  const names = [...new Set(judged.flatMap((r) => Object.keys(r.judges!)))];
  const units: AgreementUnit[] = judged.map((r) => ({
    planId: `${r.questionId}#${r.sample}`,
    itemId: r.itemId,
    cluster: r.questionId,
    ...agreementDimension(r),
    verdicts: r.judges!,
  }));
  return judgeAgreement(units, names, { resamples: opts.resamples ?? 1000, seed: opts.seed ?? 0, level: opts.level ?? 0.95 });
}

function buildStats(rows: EvalRow[], opts: ReportOptions, prob: boolean): EvalReport {
  const resamples = opts.resamples ?? 1000;
  const seed = opts.seed ?? 0;
  const level = opts.level ?? 0.95;
  const alpha = opts.alpha ?? DEFAULT_ALPHA;
  if (!(level > 0 && level < 1)) throw new RangeError(`level must be in (0, 1), got ${level}`);
  const byQ = new Map<string, EvalRow[]>();
  for (const r of rows) {
    const l = byQ.get(r.questionId) ?? [];
    l.push(r);
    byQ.set(r.questionId, l);
  }
  const clusters = [...byQ.values()].map((rs) => clusterOf(rs, alpha, prob));
  const total = new Array<number>(NSTAT).fill(0);
  for (const c of clusters) for (let i = 0; i < NSTAT; i++) total[i] += c.counts[i];
  const point = ratios(total);
  const samples: number[][] = point.map(() => []);
  const rnd = mulberry32(seed);
  const K = clusters.length;
  for (let b = 0; b < resamples && K > 0; b++) {
    const t = new Array<number>(NSTAT).fill(0);
    for (let k = 0; k < K; k++) {
      const c = clusters[Math.floor(rnd() * K)].counts;
      for (let i = 0; i < NSTAT; i++) t[i] += c[i];
    }
    ratios(t).forEach((v, i) => samples[i].push(v));
  }
  const ci = (i: number): [number, number] => {
    if (!samples[i].length) return [point[i], point[i]];
    const s = samples[i].sort((a, b) => a - b);
    return [quantile(s, (1 - level) / 2), quantile(s, (1 + level) / 2)];
  };
  const nulls = (pred: (r: EvalRow) => boolean) => rows.filter((r) => pred(r) && r.met === null).length;
  const stat = (i: number, pred: (r: EvalRow) => boolean): Stat => {
    const [lo, hi] = ci(i);
    return { mean: point[i], lo, hi, n: total[2 * i + 1], met: total[2 * i], nulls: nulls(pred) };
  };
  const [rlo, rhi] = ci(4);
  return {
    questions: K,
    plans: new Set(rows.map((r) => `${r.questionId}\u0000${r.sample}`)).size,
    skipped: new Set(rows.map((r) => `${r.questionId}\u0000${r.sample}`)).size - total[9],
    overall: stat(0, (r) => r.kind === 'spec'),
    byDimension: {
      method_innovation: stat(1, (r) => r.kind === 'spec' && r.dimension === 'method_innovation'),
      experimental_design: stat(2, (r) => r.kind === 'spec' && r.dimension === 'experimental_design'),
    },
    general: stat(3, (r) => r.kind === 'general'),
    byOrigin: Object.fromEntries(ORIGINS.map((o, k) => [o, stat(5 + k, (r) => r.kind === 'spec' && r.origin === o)] as const).filter(([, st]) => st.n > 0)),
    reward: { mean: point[4], lo: rlo, hi: rhi, n: total[9] },
    alpha,
    bootstrap: { resamples, seed, level },
  };
}

/** Writes rows as JSONL atomically (temp + rename). */
export function writeRowsJsonl(path: string, rows: EvalRow[]): void {
  const tmp = `${path}.tmp-${process.pid}`;
  writeFileSync(tmp, rows.map((r) => JSON.stringify(r)).join('\n') + (rows.length ? '\n' : ''));
  renameSync(tmp, path);
}

/** Human-readable summary lines (percentages with the interval). */
export function formatReport(r: EvalReport): string {
  const pct = (s: Stat) =>
    `${(100 * s.mean).toFixed(1)}% [${(100 * s.lo).toFixed(1)}, ${(100 * s.hi).toFixed(1)}]` +
    (s.met !== undefined ? ` (${s.met}/${s.n} readable, ${s.nulls ?? 0} null)` : '');
  const pctP = (s: Stat) => `${(100 * s.mean).toFixed(1)}% [${(100 * s.lo).toFixed(1)}, ${(100 * s.hi).toFixed(1)}]`;
  const lvl = `${Math.round(r.bootstrap.level * 100)}% CI, ${r.bootstrap.resamples} resamples`;
  return [
    `questions ${r.questions}, plans ${r.plans}, ${r.skipped} skipped (no readable verdict) (${lvl})`,
    `rubric coverage        ${pct(r.overall)}`,
    `  method innovation    ${pct(r.byDimension.method_innovation)}`,
    `  experimental design  ${pct(r.byDimension.experimental_design)}`,
    ...Object.entries(r.byOrigin).map(([o, st]) => `  items from ${o.padEnd(11)}${pct(st!)}`),
    `general items          ${pct(r.general)}`,
    `reward (alpha ${r.alpha})     ${r.reward.mean.toFixed(3)} [${r.reward.lo.toFixed(3)}, ${r.reward.hi.toFixed(3)}] (${r.reward.n} plans, ${r.skipped} skipped)`,
    ...(r.prob
      ? [
          `with P(yes) per item (${r.prob.rowsWithProb} of ${r.overall.n + r.general.n} verdicts carry it):`,
          `  rubric coverage      ${pctP(r.prob.overall)}`,
          `  method innovation    ${pctP(r.prob.byDimension.method_innovation)}`,
          `  experimental design  ${pctP(r.prob.byDimension.experimental_design)}`,
          `  general items        ${pctP(r.prob.general)}`,
          `  reward               ${r.prob.reward.mean.toFixed(3)} [${r.prob.reward.lo.toFixed(3)}, ${r.prob.reward.hi.toFixed(3)}]`,
        ]
      : []),
    ...(r.agreement ? [formatAgreement(r.agreement)] : []),
  ].join('\n');
}
