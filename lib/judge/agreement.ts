/**
 * Judge agreement (issue 32, item 3): how often judges give the same binary verdict, and how
 * each agrees with people's labels — overall and per rubric dimension, each figure with a seeded
 * percentile bootstrap interval. Pure: verdict tables in, figures out.
 *
 * Units: one unit is one (plan, rubric item) with every judge's verdict (`true`, `false`, or
 * `null` for no readable verdict). Statistics (n = units counted):
 * - Per pair of judges (a, b), over the units where neither is null:
 *   - agreement p_o = share of equal verdicts;
 *   - Cohen's κ = (p_o − p_e) / (1 − p_e), p_e = q_a·q_b + (1 − q_a)(1 − q_b), q = share of "yes"
 *     (Cohen 1960, Educational and Psychological Measurement 20(1), eq. for two raters, two categories).
 * - Fleiss' κ over all m ≥ 2 judges, over the units where none is null (Fleiss 1971, Psychological
 *   Bulletin 76(5)): P_i = (Σ_c n_ic² − m) / (m(m − 1)), P̄ = mean P_i, p_c = share of all ratings in
 *   category c, P̄_e = Σ_c p_c², κ = (P̄ − P̄_e) / (1 − P̄_e).
 * - Against labels (a person's yes/no per unit), per judge over the labelled units where its verdict
 *   is not null, "yes" the positive class (as HealthBench's meta-eval scores a grader against
 *   physicians): agreement, precision TP/(TP+FP), recall TP/(TP+FN), F1 = 2PR/(P+R).
 *
 * Degenerate cases (the convention here): a κ whose chance agreement is 1 (p_e = 1, or P̄_e = 1 — every
 * verdict counted is the same single value, so there is nothing to agree beyond chance) is
 * undefined: `value: null` with a `reason`; never reported as 1 or 0. One judge always "yes" and the
 * other varying gives p_e = q_b < 1 and κ = 0 exactly (agreement no better than chance). Precision,
 * recall or F1 with a zero denominator are null with a reason, likewise; no units → null.
 *
 * Bootstrap: clusters (by default the plan: the items of one plan are judged from one text and are
 * not independent; eval passes the question, as lib/eval/report.ts does) are resampled with
 * replacement (`mulberry32(seed)`), each statistic recomputed per resample; the interval is the
 * [(1 − level)/2, (1 + level)/2] quantiles (type 7) of the resamples where it is defined
 * (`undefinedResamples` counts the others). 0 resamples → lo = hi = value.
 */
import { argError } from '../util/args.js';
import { mulberry32 } from '../util/random.js';

/** One (plan, rubric item) with every judge's verdict. */
export interface AgreementUnit {
  /** Plan id (question id + sample, or a plans.jsonl id). */
  planId: string;
  itemId: string;
  /** Rubric dimension of the item; units without one are grouped as `general`. */
  dimension?: string;
  /** Bootstrap cluster (default `planId`). */
  cluster?: string;
  /** Verdict per judge name; a judge missing from the record counts as null. */
  verdicts: Record<string, boolean | null>;
  /** A person's label for this unit, when there is one. */
  label?: boolean;
}

/** A figure with its bootstrap interval; `value` null (with `reason`) when undefined. Units: fraction ([0, 1]; κ in [−1, 1]). */
export interface Estimate {
  value: number | null;
  lo: number | null;
  hi: number | null;
  /** Units it is computed over. */
  n: number;
  reason?: string;
  /** Resamples in which it was undefined (left out of the interval). */
  undefinedResamples?: number;
}

/** Agreement of two judges. */
export interface PairAgreement {
  a: string;
  b: string;
  /** Units left out because a or b had a null verdict. */
  nulls: number;
  agreement: Estimate;
  kappa: Estimate;
}

/** One judge against the labels. */
export interface LabelAgreement {
  judge: string;
  /** Labelled units left out because the judge's verdict was null. */
  nulls: number;
  agreement: Estimate;
  precision: Estimate;
  recall: Estimate;
  f1: Estimate;
}

/** The figures of one group of units (all, or one dimension). */
export interface GroupAgreement {
  units: number;
  pairs: PairAgreement[];
  /** Over all judges (m ≥ 2); units with any null left out. */
  fleiss: Estimate;
  /** Present when some unit has a label. */
  labels?: LabelAgreement[];
}

export interface AgreementReport {
  judges: string[];
  overall: GroupAgreement;
  /** Per rubric dimension (`general` for units without one). */
  byDimension: Record<string, GroupAgreement>;
  bootstrap: { resamples: number; seed: number; level: number };
}

export interface AgreementOptions {
  /** Bootstrap resamples (default 1000). */
  resamples?: number;
  /** Seed (default 0). */
  seed?: number;
  /** Interval level (default 0.95). */
  level?: number;
}

type Value = { value: number; reason?: undefined } | { value: null; reason: string };

/** Cohen's κ and agreement of one pair from counts [n11, n10, n01, n00] (a yes & b yes, a yes & b no, …). */
function pairStats(c: number[]): { agreement: Value; kappa: Value } {
  const [n11, n10, n01, n00] = c;
  const n = n11 + n10 + n01 + n00;
  if (!n) return { agreement: { value: null, reason: 'no units' }, kappa: { value: null, reason: 'no units' } };
  const po = (n11 + n00) / n;
  const qa = (n11 + n10) / n;
  const qb = (n11 + n01) / n;
  const pe = qa * qb + (1 - qa) * (1 - qb);
  const kappa: Value =
    pe >= 1 ? { value: null, reason: 'chance agreement p_e = 1: both judges gave one and the same verdict on every unit' } : { value: (po - pe) / (1 - pe) };
  return { agreement: { value: po }, kappa };
}

/** Fleiss' κ from sums [units, Σ_i Σ_c n_ic², yes ratings] with m raters per unit. */
function fleissStat(c: number[], m: number): Value {
  const [N, sq, yes] = c;
  if (!N) return { value: null, reason: 'no units without a null verdict' };
  const pbar = (sq - N * m) / (N * m * (m - 1));
  const py = yes / (N * m);
  const pe = py * py + (1 - py) * (1 - py);
  if (pe >= 1) return { value: null, reason: 'chance agreement P̄_e = 1: every verdict is the same' };
  return { value: (pbar - pe) / (1 - pe) };
}

/** Label figures from [tp, fp, fn, tn]. */
function labelStats(c: number[]): { agreement: Value; precision: Value; recall: Value; f1: Value } {
  const [tp, fp, fn, tn] = c;
  const n = tp + fp + fn + tn;
  const none = (r: string): Value => ({ value: null, reason: r });
  if (!n)
    return { agreement: none('no labelled units'), precision: none('no labelled units'), recall: none('no labelled units'), f1: none('no labelled units') };
  const precision: Value = tp + fp ? { value: tp / (tp + fp) } : none('the judge said "yes" on no labelled unit (TP + FP = 0)');
  const recall: Value = tp + fn ? { value: tp / (tp + fn) } : none('no unit is labelled "yes" (TP + FN = 0)');
  const f1: Value = 2 * tp + fp + fn ? { value: (2 * tp) / (2 * tp + fp + fn) } : none('no "yes" among verdicts or labels (2TP + FP + FN = 0)');
  return { agreement: { value: (tp + tn) / n }, precision, recall, f1 };
}

/** Linear-interpolated quantile (type 7) of a sorted array. */
function quantile(sorted: number[], q: number): number {
  const h = (sorted.length - 1) * q;
  const lo = Math.floor(h);
  const hi = Math.ceil(h);
  return sorted[lo] + (h - lo) * (sorted[hi] - sorted[lo]);
}

/**
 * Figures of statistic families over clusters: each family maps summed per-cluster counts to named
 * values; returns each value with its bootstrap interval.
 */
function withIntervals(
  clusters: number[][],
  stat: (sum: number[]) => Record<string, Value>,
  n: (sum: number[]) => number,
  o: Required<AgreementOptions>,
): Record<string, Estimate> {
  const width = clusters[0]?.length ?? 0;
  const total = new Array<number>(width).fill(0);
  for (const c of clusters) for (let j = 0; j < width; j++) total[j] += c[j];
  const point = stat(total);
  const samples: Record<string, number[]> = {};
  const undef: Record<string, number> = {};
  for (const k of Object.keys(point)) {
    samples[k] = [];
    undef[k] = 0;
  }
  if (clusters.length && o.resamples > 0) {
    const rnd = mulberry32(o.seed);
    const sum = new Array<number>(width);
    for (let r = 0; r < o.resamples; r++) {
      sum.fill(0);
      for (let i = 0; i < clusters.length; i++) {
        const c = clusters[Math.floor(rnd() * clusters.length)];
        for (let j = 0; j < width; j++) sum[j] += c[j];
      }
      const s = stat(sum);
      for (const k of Object.keys(point)) {
        const v = s[k].value;
        if (v === null) undef[k]++;
        else samples[k].push(v);
      }
    }
  }
  const out: Record<string, Estimate> = {};
  const nn = n(total);
  for (const [k, p] of Object.entries(point)) {
    const xs = samples[k].sort((a, b) => a - b);
    const e: Estimate = { value: p.value, lo: null, hi: null, n: nn };
    if (p.value !== null) {
      if (o.resamples <= 0) e.lo = e.hi = p.value;
      else if (xs.length) {
        e.lo = quantile(xs, (1 - o.level) / 2);
        e.hi = quantile(xs, (1 + o.level) / 2);
      }
    } else e.reason = p.reason;
    if (o.resamples > 0 && undef[k]) e.undefinedResamples = undef[k];
    out[k] = e;
  }
  return out;
}

function group(units: AgreementUnit[], judges: string[], o: Required<AgreementOptions>): GroupAgreement {
  const byCluster = new Map<string, AgreementUnit[]>();
  for (const u of units) {
    const k = u.cluster ?? u.planId;
    const l = byCluster.get(k);
    if (l) l.push(u);
    else byCluster.set(k, [u]);
  }
  const clusters = [...byCluster.values()];
  const v = (u: AgreementUnit, j: string) => u.verdicts[j] ?? null;
  const pairs: PairAgreement[] = [];
  for (let x = 0; x < judges.length; x++) {
    for (let y = x + 1; y < judges.length; y++) {
      const [a, b] = [judges[x], judges[y]];
      let nulls = 0;
      const cs = clusters.map((us) => {
        const c = [0, 0, 0, 0];
        for (const u of us) {
          const va = v(u, a);
          const vb = v(u, b);
          if (va === null || vb === null) nulls++;
          else c[va ? (vb ? 0 : 1) : vb ? 2 : 3]++;
        }
        return c;
      });
      const r = withIntervals(
        cs,
        (s) => pairStats(s),
        (s) => s[0] + s[1] + s[2] + s[3],
        o,
      );
      pairs.push({ a, b, nulls, agreement: r.agreement, kappa: r.kappa });
    }
  }
  const m = judges.length;
  const fcs = clusters.map((us) => {
    const c = [0, 0, 0];
    for (const u of us) {
      const vs = judges.map((j) => v(u, j));
      if (vs.some((x) => x === null)) continue;
      const yes = vs.filter((x) => x === true).length;
      c[0]++;
      c[1] += yes * yes + (m - yes) * (m - yes);
      c[2] += yes;
    }
    return c;
  });
  const fleiss =
    m >= 2
      ? withIntervals(
          fcs,
          (s) => ({ k: fleissStat(s, m) }),
          (s) => s[0],
          o,
        ).k
      : { value: null, lo: null, hi: null, n: 0, reason: 'fewer than two judges' };
  const g: GroupAgreement = { units: units.length, pairs, fleiss };
  if (units.some((u) => typeof u.label === 'boolean')) {
    g.labels = judges.map((judge) => {
      let nulls = 0;
      const cs = clusters.map((us) => {
        const c = [0, 0, 0, 0];
        for (const u of us) {
          if (typeof u.label !== 'boolean') continue;
          const vj = v(u, judge);
          if (vj === null) nulls++;
          else c[vj ? (u.label ? 0 : 1) : u.label ? 2 : 3]++;
        }
        return c;
      });
      const r = withIntervals(
        cs,
        (s) => labelStats(s),
        (s) => s[0] + s[1] + s[2] + s[3],
        o,
      );
      return { judge, nulls, agreement: r.agreement, precision: r.precision, recall: r.recall, f1: r.f1 };
    });
  }
  return g;
}

/**
 * Agreement figures of `judges` over `units` (see the module docstring), overall and per dimension.
 * Throws TypeError (ERR_PG_ARG) on fewer than one judge, duplicate judge names, a bad level or
 * resample count.
 */
export function judgeAgreement(units: AgreementUnit[], judges: string[], opts: AgreementOptions = {}): AgreementReport {
  if (!Array.isArray(judges) || !judges.length) throw argError('judgeAgreement: judges must be a non-empty array of names');
  if (new Set(judges).size !== judges.length) throw argError(`judgeAgreement: duplicate judge names in ${JSON.stringify(judges)}`);
  const o: Required<AgreementOptions> = { resamples: opts.resamples ?? 1000, seed: opts.seed ?? 0, level: opts.level ?? 0.95 };
  if (!(o.level > 0 && o.level < 1)) throw argError(`judgeAgreement: level must be in (0, 1), got ${o.level}`);
  if (!Number.isInteger(o.resamples) || o.resamples < 0) throw argError(`judgeAgreement: resamples must be a non-negative integer, got ${o.resamples}`);
  const dims = new Map<string, AgreementUnit[]>();
  for (const u of units) {
    const d = u.dimension ?? 'general';
    const l = dims.get(d);
    if (l) l.push(u);
    else dims.set(d, [u]);
  }
  const byDimension: Record<string, GroupAgreement> = {};
  for (const [d, us] of [...dims].sort(([a], [b]) => a.localeCompare(b))) byDimension[d] = group(us, judges, o);
  return { judges: [...judges], overall: group(units, judges, o), byDimension, bootstrap: o };
}

/** A short text table of a report (CLI, eval summary). */
export function formatAgreement(r: AgreementReport): string {
  const f = (e: Estimate) => (e.value === null ? `n/a (${e.reason})` : `${e.value.toFixed(3)} [${e.lo?.toFixed(3) ?? '?'}, ${e.hi?.toFixed(3) ?? '?'}]`);
  const lines: string[] = [`judge agreement (${r.judges.length} judges; ${Math.round(r.bootstrap.level * 100)}% CI, ${r.bootstrap.resamples} resamples)`];
  const groups: [string, GroupAgreement][] = [['overall', r.overall], ...Object.entries(r.byDimension)];
  for (const [name, g] of groups) {
    lines.push(`  ${name} (${g.units} units): Fleiss κ ${f(g.fleiss)}`);
    for (const p of g.pairs)
      lines.push(`    ${p.a} vs ${p.b}: agree ${f(p.agreement)}, Cohen κ ${f(p.kappa)}${p.nulls ? ` (${p.nulls} with a null left out)` : ''}`);
    for (const l of g.labels ?? [])
      lines.push(`    ${l.judge} vs labels: agree ${f(l.agreement)}, precision ${f(l.precision)}, recall ${f(l.recall)}, F1 ${f(l.f1)}`);
  }
  return lines.join('\n');
}
