/**
 * Judge agreement (issue 32, item 3): how often judges give the same binary verdict, and how
 * each agrees with people's labels — overall and per rubric dimension, each figure with a seeded
 * percentile bootstrap interval. Pure: verdict tables in, figures out.
 *
 * Units: one unit is one (plan, rubric item) with every judge's verdict (`true`, `false`, or
 * `null` for no readable verdict); {@link choiceAgreement} takes categorical choices instead (C
 * categories: `compare`'s pick of a system or a tie), with the same figures generalised (below, the
 * sums over c run over the C categories; binary: yes/no). Statistics (n = units counted):
 * - Per pair of judges (a, b), over the units where neither is null:
 *   - agreement p_o = share of equal verdicts;
 *   - Cohen's κ = (p_o − p_e) / (1 − p_e), p_e = Σ_c q_a(c)·q_b(c) (binary: q_a·q_b + (1 − q_a)(1 − q_b),
 *     q = share of "yes")
 *     (Cohen 1960, Educational and Psychological Measurement 20(1), eq. for two raters, two categories).
 * - Fleiss' κ over all m ≥ 2 judges, over the units where none is null (Fleiss 1971, Psychological
 *   Bulletin 76(5)): P_i = (Σ_c n_ic² − m) / (m(m − 1)), P̄ = mean P_i, p_c = share of all ratings in
 *   category c, P̄_e = Σ_c p_c², κ = (P̄ − P̄_e) / (1 − P̄_e).
 * - Against labels (a person's yes/no per unit), per judge over the labelled units where its verdict
 *   is not null, "yes" the positive class (as HealthBench's meta-eval scores a grader against
 *   physicians): agreement, precision TP/(TP+FP), recall TP/(TP+FN), F1 = 2PR/(P+R); the same F1
 *   with "no" the positive class, F1_neg = 2TN/(2TN + FN + FP); and the balanced F1 = (F1 + F1_neg)/2,
 *   HealthBench's headline meta-eval figure (openai/simple-evals healthbench_meta_eval.py
 *   `pairwise_model_f1_balanced`: the macro F1 over the two classes), undefined when either is.
 * - Krippendorff's α over all judges (Krippendorff 2011, "Computing Krippendorff's Alpha-Reliability",
 *   §C: coincidence matrix), with missing values: every unit with m_u ≥ 2 non-null values adds
 *   1/(m_u − 1) to o_ck for each ordered pair of values (c, k) from different judges; n_c = Σ_k o_ck,
 *   n = Σ_c n_c; α = 1 − (n − 1)·Σ o_ck δ²_ck / Σ n_c n_k δ²_ck. Nominal δ² = [c ≠ k]; ordinal
 *   (ranks 1…C, ResearchQA's five levels) δ²_ck = (Σ_{g=c..k} n_g − (n_c + n_k)/2)². Undefined when
 *   the expected disagreement is 0 (one value only) or n < 2. Unlike Fleiss' κ it keeps units where
 *   some judges are null.
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
  /** Rubric dimension of the item; units without one count in `overall` only (no per-dimension group). */
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
  /** F1 with "no" the positive class. */
  f1Negative: Estimate;
  /** (F1 + F1_neg) / 2: HealthBench's balanced (macro) F1 of a grader against physicians. */
  balancedF1: Estimate;
}

/** The figures of one group of units (all, or one dimension). */
export interface GroupAgreement {
  units: number;
  pairs: PairAgreement[];
  /** Over all judges (m ≥ 2); units with any null left out. */
  fleiss: Estimate;
  /** Krippendorff's α (nominal) over all judges; units with ≥ 2 non-null verdicts. */
  alpha: Estimate;
  /** Present when some unit has a label. */
  labels?: LabelAgreement[];
}

export interface AgreementReport {
  judges: string[];
  overall: GroupAgreement;
  /** Per rubric dimension, over the units that have one (empty when none has). */
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

/**
 * Cohen's κ and agreement of one pair from the C×C count matrix `c` (row-major: c[x·C + y] = units
 * where a gave category x and b category y; binary: [yes&yes, yes&no, no&yes, no&no]).
 * p_e = Σ_c q_a(c) q_b(c) (Cohen 1960; two categories: q_a q_b + (1 − q_a)(1 − q_b)).
 */
function pairStats(c: number[], C: number): { agreement: Value; kappa: Value } {
  let n = 0;
  let diag = 0;
  const qa = new Array<number>(C).fill(0);
  const qb = new Array<number>(C).fill(0);
  for (let x = 0; x < C; x++)
    for (let y = 0; y < C; y++) {
      const k = c[x * C + y];
      n += k;
      qa[x] += k;
      qb[y] += k;
      if (x === y) diag += k;
    }
  if (!n) return { agreement: { value: null, reason: 'no units' }, kappa: { value: null, reason: 'no units' } };
  const po = diag / n;
  let pe = 0;
  for (let x = 0; x < C; x++) pe += (qa[x] / n) * (qb[x] / n);
  const kappa: Value =
    pe >= 1 ? { value: null, reason: 'chance agreement p_e = 1: both judges gave one and the same verdict on every unit' } : { value: (po - pe) / (1 - pe) };
  return { agreement: { value: po }, kappa };
}

/** Fleiss' κ from sums [units, Σ_i Σ_c n_ic², ratings of category 0, …, ratings of category C−1] with m raters per unit. */
function fleissStat(c: number[], m: number): Value {
  const [N, sq] = c;
  if (!N) return { value: null, reason: 'no units without a null verdict' };
  const pbar = (sq - N * m) / (N * m * (m - 1));
  let pe = 0;
  for (let k = 2; k < c.length; k++) pe += (c[k] / (N * m)) ** 2;
  if (pe >= 1) return { value: null, reason: 'chance agreement P̄_e = 1: every verdict is the same' };
  return { value: (pbar - pe) / (1 - pe) };
}

/** Label figures from [tp, fp, fn, tn]. */
function labelStats(c: number[]): Record<'agreement' | 'precision' | 'recall' | 'f1' | 'f1Negative' | 'balancedF1', Value> {
  const [tp, fp, fn, tn] = c;
  const n = tp + fp + fn + tn;
  const none = (r: string): Value => ({ value: null, reason: r });
  if (!n) {
    const x = none('no labelled units');
    return { agreement: x, precision: x, recall: x, f1: x, f1Negative: x, balancedF1: x };
  }
  const precision: Value = tp + fp ? { value: tp / (tp + fp) } : none('the judge said "yes" on no labelled unit (TP + FP = 0)');
  const recall: Value = tp + fn ? { value: tp / (tp + fn) } : none('no unit is labelled "yes" (TP + FN = 0)');
  const f1: Value = 2 * tp + fp + fn ? { value: (2 * tp) / (2 * tp + fp + fn) } : none('no "yes" among verdicts or labels (2TP + FP + FN = 0)');
  const f1Negative: Value = 2 * tn + fp + fn ? { value: (2 * tn) / (2 * tn + fp + fn) } : none('no "no" among verdicts or labels (2TN + FP + FN = 0)');
  const balancedF1: Value =
    f1.value !== null && f1Negative.value !== null ? { value: (f1.value + f1Negative.value) / 2 } : none(f1.value === null ? f1.reason! : f1Negative.reason!);
  return { agreement: { value: (tp + tn) / n }, precision, recall, f1, f1Negative, balancedF1 };
}

/** The δ² of Krippendorff's α: nominal, or ordinal over categories 0…C−1 in rank order. */
export type AlphaMetric = 'nominal' | 'ordinal';

/**
 * Krippendorff's α from a C×C coincidence matrix `o` (row-major, o[c·C + k]; the module docstring
 * gives the formula and source). Value null with a reason when undefined.
 */
function alphaStat(o: number[], C: number, metric: AlphaMetric): Value {
  const nc = new Array<number>(C).fill(0);
  for (let c = 0; c < C; c++) for (let k = 0; k < C; k++) nc[c] += o[c * C + k];
  const n = nc.reduce((a, b) => a + b, 0);
  if (n < 2) return { value: null, reason: 'fewer than two pairable values (units need two judges with a verdict)' };
  const d2 = (c: number, k: number): number => {
    if (c === k) return 0;
    if (metric === 'nominal') return 1;
    const [lo, hi] = c < k ? [c, k] : [k, c];
    let sum = 0;
    for (let g = lo; g <= hi; g++) sum += nc[g];
    return (sum - (nc[lo] + nc[hi]) / 2) ** 2;
  };
  let dObs = 0;
  let dExp = 0;
  for (let c = 0; c < C; c++)
    for (let k = 0; k < C; k++) {
      const d = d2(c, k);
      dObs += o[c * C + k] * d;
      dExp += nc[c] * nc[k] * d;
    }
  if (dExp <= 0) return { value: null, reason: 'expected disagreement 0: every pairable value is the same' };
  return { value: 1 - ((n - 1) * dObs) / dExp };
}

/** Adds one unit's values (category indices, null = missing) to the coincidence matrix `o` (C×C). */
function addCoincidences(o: number[], C: number, values: (number | null)[]): void {
  const vs = values.filter((x): x is number => x !== null);
  const m = vs.length;
  if (m < 2) return;
  for (let i = 0; i < m; i++) for (let j = 0; j < m; j++) if (i !== j) o[vs[i]! * C + vs[j]!] += 1 / (m - 1);
}

/** Krippendorff's α over clusters of units (`values(u)`: each judge's category or null), with its cluster-bootstrap interval. */
function alphaEstimate<U>(clusters: U[][], C: number, values: (u: U) => (number | null)[], metric: AlphaMetric, o: Required<AgreementOptions>): Estimate {
  const cs = clusters.map((us) => {
    const m = new Array<number>(C * C).fill(0);
    for (const u of us) addCoincidences(m, C, values(u));
    return m;
  });
  return withIntervals(
    cs,
    (s) => ({ a: alphaStat(s, C, metric) }),
    (s) => Math.round(s.reduce((t, k) => t + k, 0)),
    o,
  ).a;
}

/** One unit rated on ordered levels (ResearchQA's five: 1 = not at all … 5 = completely) by several judges. */
export interface LevelUnit {
  planId: string;
  itemId: string;
  dimension?: string;
  cluster?: string;
  /** Level per judge (an integer 1…levels), null when unreadable. */
  levels: Record<string, number | null>;
}

/**
 * Krippendorff's α of level ratings: ordinal (the ranks matter: ResearchQA's five levels) and
 * nominal, over all judges, with cluster-bootstrap intervals (module docstring).
 * @throws TypeError (ERR_PG_ARG) on a level outside 1…`levels` or the option errors of judgeAgreement
 */
export function levelAgreement(
  units: LevelUnit[],
  judges: string[],
  levels: number,
  opts: AgreementOptions = {},
): { judges: string[]; units: number; ordinal: Estimate; nominal: Estimate; bootstrap: Required<AgreementOptions> } {
  const o = checkedOptions('levelAgreement', judges, opts);
  for (const u of units)
    for (const j of judges) {
      const x = u.levels[j];
      if (x !== null && x !== undefined && !(Number.isInteger(x) && x >= 1 && x <= levels))
        throw argError(`levelAgreement: unit ${u.planId}/${u.itemId}: judge ${j}: level ${x} is not an integer in 1…${levels}`);
    }
  const byCluster = new Map<string, LevelUnit[]>();
  for (const u of units) byCluster.set(u.cluster ?? u.planId, [...(byCluster.get(u.cluster ?? u.planId) ?? []), u]);
  const clusters = [...byCluster.values()];
  const values = (u: LevelUnit) => judges.map((j) => (u.levels[j] === null || u.levels[j] === undefined ? null : u.levels[j]! - 1));
  return {
    judges: [...judges],
    units: units.length,
    ordinal: alphaEstimate(clusters, levels, values, 'ordinal', o),
    nominal: alphaEstimate(clusters, levels, values, 'nominal', o),
    bootstrap: o,
  };
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

/**
 * Pair and Fleiss figures of one group; `cat(u, j)` is judge j's category index on unit u (0…C−1)
 * or null. Clusters as {@link AgreementUnit.cluster} (default the plan).
 */
function categoricalGroup<U extends { planId: string; cluster?: string }>(
  units: U[],
  judges: string[],
  C: number,
  cat: (u: U, j: string) => number | null,
  o: Required<AgreementOptions>,
): { clusters: U[][]; pairs: PairAgreement[]; fleiss: Estimate; alpha: Estimate } {
  const byCluster = new Map<string, U[]>();
  for (const u of units) {
    const k = u.cluster ?? u.planId;
    const l = byCluster.get(k);
    if (l) l.push(u);
    else byCluster.set(k, [u]);
  }
  const clusters = [...byCluster.values()];
  const pairs: PairAgreement[] = [];
  for (let x = 0; x < judges.length; x++) {
    for (let y = x + 1; y < judges.length; y++) {
      const [a, b] = [judges[x], judges[y]];
      let nulls = 0;
      const cs = clusters.map((us) => {
        const c = new Array<number>(C * C).fill(0);
        for (const u of us) {
          const va = cat(u, a);
          const vb = cat(u, b);
          if (va === null || vb === null) nulls++;
          else c[va * C + vb]++;
        }
        return c;
      });
      const r = withIntervals(
        cs,
        (s) => pairStats(s, C),
        (s) => s.reduce((t, k) => t + k, 0),
        o,
      );
      pairs.push({ a, b, nulls, agreement: r.agreement, kappa: r.kappa });
    }
  }
  const m = judges.length;
  const fcs = clusters.map((us) => {
    const c = new Array<number>(2 + C).fill(0);
    for (const u of us) {
      const vs = judges.map((j) => cat(u, j));
      if (vs.some((x) => x === null)) continue;
      const per = new Array<number>(C).fill(0);
      for (const x of vs) per[x!]++;
      c[0]++;
      for (let k = 0; k < C; k++) {
        c[1] += per[k] * per[k];
        c[2 + k] += per[k];
      }
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
  const alpha: Estimate =
    m >= 2
      ? alphaEstimate(clusters, C, (u) => judges.map((j) => cat(u, j)), 'nominal', o)
      : { value: null, lo: null, hi: null, n: 0, reason: 'fewer than two judges' };
  return { clusters, pairs, fleiss, alpha };
}

function group(units: AgreementUnit[], judges: string[], o: Required<AgreementOptions>): GroupAgreement {
  const v = (u: AgreementUnit, j: string) => u.verdicts[j] ?? null;
  // Two categories: yes = 0, no = 1.
  const { clusters, pairs, fleiss, alpha } = categoricalGroup(units, judges, 2, (u, j) => (v(u, j) === null ? null : v(u, j) ? 0 : 1), o);
  const g: GroupAgreement = { units: units.length, pairs, fleiss, alpha };
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
      return {
        judge,
        nulls,
        agreement: r.agreement,
        precision: r.precision,
        recall: r.recall,
        f1: r.f1,
        f1Negative: r.f1Negative,
        balancedF1: r.balancedF1,
      };
    });
  }
  return g;
}

/** Options with defaults; throws TypeError (ERR_PG_ARG) on no or duplicate judge names, a bad level or resample count. */
function checkedOptions(fn: string, judges: string[], opts: AgreementOptions): Required<AgreementOptions> {
  if (!Array.isArray(judges) || !judges.length) throw argError(`${fn}: judges must be a non-empty array of names`);
  if (new Set(judges).size !== judges.length) throw argError(`${fn}: duplicate judge names in ${JSON.stringify(judges)}`);
  const o: Required<AgreementOptions> = { resamples: opts.resamples ?? 1000, seed: opts.seed ?? 0, level: opts.level ?? 0.95 };
  if (!(o.level > 0 && o.level < 1)) throw argError(`${fn}: level must be in (0, 1), got ${o.level}`);
  if (!Number.isInteger(o.resamples) || o.resamples < 0) throw argError(`${fn}: resamples must be a non-negative integer, got ${o.resamples}`);
  return o;
}

/**
 * Agreement figures of `judges` over `units` (see the module docstring), overall and per dimension.
 * Throws TypeError (ERR_PG_ARG) on fewer than one judge, duplicate judge names, a bad level or
 * resample count.
 */
export function judgeAgreement(units: AgreementUnit[], judges: string[], opts: AgreementOptions = {}): AgreementReport {
  const o = checkedOptions('judgeAgreement', judges, opts);
  const dims = new Map<string, AgreementUnit[]>();
  for (const u of units) {
    const d = u.dimension;
    if (!d) continue;
    const l = dims.get(d);
    if (l) l.push(u);
    else dims.set(d, [u]);
  }
  const byDimension: Record<string, GroupAgreement> = {};
  for (const [d, us] of [...dims].sort(([a], [b]) => a.localeCompare(b))) byDimension[d] = group(us, judges, o);
  return { judges: [...judges], overall: group(units, judges, o), byDimension, bootstrap: o };
}

/**
 * One unit of a choice among several categories (`compare`'s N-way pick: a system's name or `tie`):
 * each judge's choice, or null (unreadable, failed, or not asked).
 */
export interface ChoiceUnit {
  planId: string;
  itemId: string;
  dimension?: string;
  cluster?: string;
  choices: Record<string, string | null>;
}

/**
 * Agreement of categorical choices (`compare`): per pair the share of equal choices and Cohen's κ
 * with p_e = Σ_c q_a(c) q_b(c) over the categories seen (Cohen 1960), Fleiss' κ over all judges with
 * P̄_e = Σ_c p_c² (Fleiss 1971); nulls, degenerate cases and the cluster bootstrap as in the module
 * docstring. With two categories the figures equal {@link judgeAgreement}'s. `byDimension` is empty
 * when no unit has a dimension; no `labels`.
 * @throws TypeError (ERR_PG_ARG) as judgeAgreement
 */
export function choiceAgreement(units: ChoiceUnit[], judges: string[], opts: AgreementOptions = {}): AgreementReport {
  const o = checkedOptions('choiceAgreement', judges, opts);
  const cats = [...new Set(units.flatMap((u) => judges.map((j) => u.choices[j] ?? null)).filter((x): x is string => x !== null))].sort();
  const index = new Map(cats.map((c, i) => [c, i]));
  const C = Math.max(cats.length, 1);
  const g = (us: ChoiceUnit[]): GroupAgreement => {
    const { pairs, fleiss, alpha } = categoricalGroup(us, judges, C, (u, j) => index.get(u.choices[j] ?? '') ?? null, o);
    return { units: us.length, pairs, fleiss, alpha };
  };
  const byDimension: Record<string, GroupAgreement> = {};
  if (units.some((u) => u.dimension)) {
    const dims = [...new Set(units.map((u) => u.dimension).filter((d): d is string => !!d))].sort();
    for (const d of dims) byDimension[d] = g(units.filter((u) => u.dimension === d));
  }
  return { judges: [...judges], overall: g(units), byDimension, bootstrap: o };
}

/** A short text table of a report (CLI, eval summary). */
export function formatAgreement(r: AgreementReport): string {
  const f = (e: Estimate) => (e.value === null ? `n/a (${e.reason})` : `${e.value.toFixed(3)} [${e.lo?.toFixed(3) ?? '?'}, ${e.hi?.toFixed(3) ?? '?'}]`);
  const lines: string[] = [
    `judge agreement (${r.judges.length} judge${r.judges.length === 1 ? '' : 's'}; ${Math.round(r.bootstrap.level * 100)}% CI, ${r.bootstrap.resamples} resamples)`,
  ];
  const groups: [string, GroupAgreement][] = [['overall', r.overall], ...Object.entries(r.byDimension)];
  for (const [name, g] of groups) {
    lines.push(`  ${name} (${g.units} units): Fleiss κ ${f(g.fleiss)}, Krippendorff α (nominal) ${f(g.alpha)}`);
    for (const p of g.pairs)
      lines.push(`    ${p.a} vs ${p.b}: agree ${f(p.agreement)}, Cohen κ ${f(p.kappa)}${p.nulls ? ` (${p.nulls} with a null left out)` : ''}`);
    for (const l of g.labels ?? [])
      lines.push(
        `    ${l.judge} vs labels: agree ${f(l.agreement)}, precision ${f(l.precision)}, recall ${f(l.recall)}, F1 ${f(l.f1)}, F1(no) ${f(l.f1Negative)}, balanced F1 ${f(l.balancedF1)}`,
      );
  }
  return lines.join('\n');
}
