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
import { stripThink } from '../llm/think.js';
import type { EvalRow } from './report.js';
import { promptOfRows } from './protocols/score.js';
import type { ProtocolRow } from './protocols/types.js';
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
      // A null verdict is left out of the coverage (the shared rule, lib/judge/rewards.ts).
      if (!keyMatches(k, r) || r.met === null) return;
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
  // Numbers from different judge prompts are never put side by side (each side must use one prompt, the same).
  const pa = promptOfRows(a as ProtocolRow[]);
  const pb = promptOfRows(b as ProtocolRow[]);
  if (pa?.name !== pb?.name || pa?.sha256 !== pb?.sha256)
    throw new Error(
      `the two eval results were judged with different prompts (${pa ? `${pa.name} sha256 ${pa.sha256}` : 'not recorded'} vs ${pb ? `${pb.name} sha256 ${pb.sha256}` : 'not recorded'}): not compared`,
    );
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
  const stats = Object.fromEntries(
    COVERAGE_KEYS.map((k, i) => {
      const d = diffs[i]!.sort((x, y) => x - y);
      const point = ratio(tb, i) - ratio(ta, i);
      return [
        k,
        {
          a: ratio(ta, i),
          b: ratio(tb, i),
          diff: point,
          lo: d.length ? quantile(d, (1 - level) / 2) : point,
          hi: d.length ? quantile(d, (1 + level) / 2) : point,
          pBNotBetter: d.length ? d.filter((x) => x <= 0).length / d.length : NaN,
          n: ta[2 * i + 1]!,
        },
      ];
    }),
  ) as Record<CoverageKey, PairedDiff>;
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
    if (r.kind !== 'spec' || r.met === null) continue;
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

// ---------------------------------------------------------------------------------------------
// N-way win rates (the paper's Table 2): a judge picks the best of N systems' plans per question.

/**
 * The candidate orders asked per question: every permutation of N systems for N ≤ 4 (each system
 * holds each position equally often, so any position bias cancels exactly), else the N cyclic
 * rotations (a Latin square: each system once in each position). Returns arrays of system indices.
 */
export function candidateOrders(n: number): number[][] {
  if (!Number.isInteger(n) || n < 2) throw new RangeError(`compare needs at least 2 systems, got ${n}`);
  if (n > 4) return Array.from({ length: n }, (_, r) => Array.from({ length: n }, (_, i) => (i + r) % n));
  const out: number[][] = [];
  const perm = (pre: number[], rest: number[]) => {
    if (!rest.length) out.push(pre);
    rest.forEach((x, i) => perm([...pre, x], [...rest.slice(0, i), ...rest.slice(i + 1)]));
  };
  perm(
    [],
    Array.from({ length: n }, (_, i) => i),
  );
  return out;
}

/**
 * Reads a preference reply: the 1-based position picked, 'tie', or null when unreadable. The last
 * `Best: N` / `Best: tie` line counts (`**Best:** 2`, `Best: plan 2`, `Best: System 2.` alike); a
 * hedged choice that names more than one answer (`Best: 1 or 2`, `Best: 1, 2`, `Best: 1/2`,
 * `Best: 1 and 2`, `Best: 2 or tie`) is unreadable — as the verdict grammar reads a contradiction
 * as null — never a vote for its first number. A reply that is only a number is that number.
 */
export function parsePreference(reply: string, n: number): number | 'tie' | null {
  // Thinking is never read (lib/llm/think.ts): a closed block, a reply holding only `</think>`, a reply cut inside thinking.
  const text = stripThink(reply);
  const name = '(?:(?:plan|system|candidate)\\s*(?:number\\s*)?#?\\s*)?';
  const all = [...text.matchAll(new RegExp(`best\\s*(?:plan)?\\s*[:=-]?\\s*\\**\\s*${name}(\\d+|tie)\\b((?:(?!best)[^\\n])*)`, 'gi'))];
  const last = all.at(-1);
  const hedge = new RegExp(`^\\**\\s*(?:,|/|&|\\+|\\bor\\b|\\band\\b)\\s*${name}(?:\\d+|tie)\\b`, 'i');
  if (last && hedge.test(last[2]!)) return null;
  const m = last ? last[1]! : /^\s*(\d+)\s*\.?\s*$/.exec(text)?.[1];
  if (!m) return null;
  if (m.toLowerCase() === 'tie') return 'tie';
  const k = Number(m);
  return k >= 1 && k <= n ? k : null;
}

/**
 * Reads a pairwise verdict on Arena-Hard's five-label scale (prompts/eval-compare-pairwise.v1.md):
 * the last `[[1>>2]]`, `[[1>2]]`, `[[1=2]]`, `[[2>1]]`, `[[2>>1]]` (A / B for 1 / 2, `<` and `<<` the
 * other way round) of the reply with its thinking removed (lib/llm/think.ts). Null when none.
 */
export function parsePairwiseVerdict(reply: string): { pick: 1 | 2 | 'tie'; strong: boolean } | null {
  const all = [...stripThink(reply).matchAll(/\[\[\s*([12AB])\s*(>>|>|=|<<|<)\s*([12AB])\s*\]\]/gi)];
  const m = all.at(-1);
  if (!m) return null;
  const side = (x: string) => (x === '1' || x.toUpperCase() === 'A' ? 1 : 2);
  const [l, op, r] = [side(m[1]!), m[2]!, side(m[3]!)];
  if (l === r) return null;
  if (op === '=') return { pick: 'tie', strong: false };
  const better = op.startsWith('>') ? l : r;
  return { pick: better as 1 | 2, strong: op.length === 2 };
}

/** Arena-Hard's weight of a strong verdict (arena-hard-auto show_result.py WEIGHT: the battle is counted 3 times). */
export const ARENA_HARD_STRONG_WEIGHT = 3;
/** Arena-Hard's bootstrap rounds (its default `--num-rounds`). */
export const ARENA_HARD_ROUNDS = 100;

/** Result of {@link arenaHardWinRate}: `model`'s win rate against `baseline`, with its bootstrap interval. */
export interface ArenaHardScore {
  model: string;
  baseline: string;
  /** (W + T/2) / (W + L + T) over the weighted battles: the two-player Bradley-Terry win rate. */
  rate: number;
  lo: number;
  hi: number;
  /** Weighted battles: wins, losses, ties of the model (a strong verdict counts 3). */
  wins: number;
  losses: number;
  ties: number;
  /** Games (judgements) read; unreadable ones are left out. */
  games: number;
  rounds: number;
  seed: number;
}

/**
 * Arena-Hard's score of `model` against `baseline` (lmarena arena-hard-auto, show_result.py, v0.1):
 * every question is judged twice with the positions swapped (two games); each readable game is one
 * battle for its winner, or ARENA_HARD_STRONG_WEIGHT (3) battles when the verdict is strong
 * (A>>B), and a tie ([[A=B]]) one tied battle. With two players the Bradley-Terry MLE it fits (wins
 * counted twice, ties once for each side) gives the win rate p = (W + T/2) / (W + L + T). The
 * interval: `rounds` (100) resamples of the battle rows with replacement (its
 * get_bootstrap_result), the [(1 − level)/2, (1 + level)/2] quantiles. Only judgements between the
 * two systems count.
 * @throws Error when no game between them could be read
 */
export function arenaHardWinRate(
  names: string[],
  js: Judgement[],
  model: number,
  baseline: number,
  opts: { rounds?: number; seed?: number; level?: number } = {},
): ArenaHardScore {
  const rounds = opts.rounds ?? ARENA_HARD_ROUNDS;
  const seed = opts.seed ?? 0;
  const level = opts.level ?? 0.95;
  const battles: number[] = []; // 1 model wins, 0 baseline wins, 0.5 tie
  let games = 0;
  for (const j of js) {
    if (j.winner === null || !j.order.includes(model) || !j.order.includes(baseline)) continue;
    games++;
    if (j.winner === 'tie') battles.push(0.5);
    else if (j.winner === model || j.winner === baseline) {
      const w = j.strong ? ARENA_HARD_STRONG_WEIGHT : 1;
      for (let k = 0; k < w; k++) battles.push(j.winner === model ? 1 : 0);
    }
  }
  if (!battles.length) throw new Error(`arena-hard: no readable game of ${names[model]} against ${names[baseline]}`);
  const rate = (b: number[]) => b.reduce((a, x) => a + x, 0) / b.length;
  const rnd = mulberry32(seed);
  const draws: number[] = [];
  for (let r = 0; r < rounds; r++) draws.push(rate(battles.map(() => battles[Math.floor(rnd() * battles.length)]!)));
  draws.sort((a, b) => a - b);
  const p = rate(battles);
  return {
    model: names[model]!,
    baseline: names[baseline]!,
    rate: p,
    lo: rounds ? quantile(draws, (1 - level) / 2) : p,
    hi: rounds ? quantile(draws, (1 + level) / 2) : p,
    wins: battles.filter((x) => x === 1).length,
    losses: battles.filter((x) => x === 0).length,
    ties: battles.filter((x) => x === 0.5).length,
    games,
    rounds,
    seed,
  };
}

/** Result of {@link lengthControlledWinRate}. */
export interface LengthControlledWinRate {
  model: string;
  baseline: string;
  /** Mean preference of the model over the questions (win 1, tie 0.5, loss 0; each question the mean of its readable games). */
  raw: number;
  /** σ(θ): the win rate with the length term set to 0 (no length difference). */
  lengthControlled: number;
  theta: number;
  /** Weight of tanh(δ / sd(δ)), δ = model's plan length − baseline's (characters). */
  beta: number;
  questions: number;
}

/**
 * AlpacaEval 2's length-controlled win rate (Dubois et al. 2024, arXiv 2404.04475, §3): a logistic
 * regression of the preference on the length difference, logit P(model preferred on question i) =
 * θ + β·tanh(δ_i / sd(δ)) with δ_i the difference in characters of the two plans; the LC win rate is
 * the prediction with the length term zeroed, σ(θ). AlpacaEval also fits an instruction-difficulty
 * term across many models; with one pair it is not identifiable and is left out. Fitted by Newton's
 * method on the (fractional) log-likelihood, a 1e-6 ridge keeping it defined when the length term
 * separates the data. Unreadable games are left out; a question with none is left out.
 * @throws Error when no question has a readable game
 */
export function lengthControlledWinRate(
  names: string[],
  js: Judgement[],
  lengths: (questionId: string, system: number) => number,
  model: number,
  baseline: number,
): LengthControlledWinRate {
  const byQ = new Map<string, number[]>();
  for (const j of js) {
    if (j.winner === null || !j.order.includes(model) || !j.order.includes(baseline)) continue;
    const y = j.winner === 'tie' ? 0.5 : j.winner === model ? 1 : j.winner === baseline ? 0 : null;
    if (y === null) continue;
    byQ.set(j.questionId, [...(byQ.get(j.questionId) ?? []), y]);
  }
  const qs = [...byQ.keys()];
  if (!qs.length) throw new Error(`length-controlled win rate: no readable game of ${names[model]} against ${names[baseline]}`);
  const ys = qs.map((q) => byQ.get(q)!.reduce((a, b) => a + b, 0) / byQ.get(q)!.length);
  const ds = qs.map((q) => lengths(q, model) - lengths(q, baseline));
  const mean = ds.reduce((a, b) => a + b, 0) / ds.length;
  const sd = Math.sqrt(ds.reduce((a, d) => a + (d - mean) ** 2, 0) / Math.max(1, ds.length - 1));
  const xs = ds.map((d) => (sd > 0 ? Math.tanh(d / sd) : 0));
  const sig = (z: number) => 1 / (1 + Math.exp(-z));
  let theta = 0;
  let beta = 0;
  const ridge = 1e-6;
  for (let it = 0; it < 100; it++) {
    let g0 = -ridge * theta;
    let g1 = -ridge * beta;
    let h00 = ridge;
    let h01 = 0;
    let h11 = ridge;
    ys.forEach((y, i) => {
      const p = sig(theta + beta * xs[i]!);
      const w = p * (1 - p);
      g0 += y - p;
      g1 += (y - p) * xs[i]!;
      h00 += w;
      h01 += w * xs[i]!;
      h11 += w * xs[i]! * xs[i]!;
    });
    const det = h00 * h11 - h01 * h01;
    if (!(det > 0)) break;
    const d0 = (h11 * g0 - h01 * g1) / det;
    const d1 = (h00 * g1 - h01 * g0) / det;
    theta += d0;
    beta += d1;
    if (Math.abs(d0) + Math.abs(d1) < 1e-12) break;
  }
  return {
    model: names[model]!,
    baseline: names[baseline]!,
    raw: ys.reduce((a, b) => a + b, 0) / ys.length,
    lengthControlled: sig(theta),
    theta,
    beta,
    questions: qs.length,
  };
}

/** One judgement: question, the order asked (system indices by position), the answer. */
export interface Judgement {
  questionId: string;
  order: number[];
  /** Index of the winning system, 'tie', or null (unreadable or failed). */
  winner: number | 'tie' | null;
  /** 1-based position picked (null for tie / unreadable). */
  position: number | null;
  /** Pairwise verdicts (`--win-rate arena-hard`): the winner is significantly better ([[1>>2]] / [[2>>1]]). */
  strong?: boolean;
  error?: boolean;
  raw?: string;
}

/** Win rate of one system. */
export interface SystemWinRate {
  name: string;
  wins: number;
  /** Win rate = wins / readable judgements (ties count as no win for anyone), with a question-bootstrap CI. */
  rate: number;
  lo: number;
  hi: number;
}

/** Result of {@link winRates}. */
export interface WinRateReport {
  systems: SystemWinRate[];
  questions: number;
  judgements: number;
  readable: number;
  ties: number;
  /** Replies that named no candidate (or a failed request): counted, never a win. */
  unreadable: number;
  failed: number;
  /** Share of the decided (non-tie) judgements that picked each position 1…N; 1/N each when the judge has no position bias. */
  positionBias: number[];
  orders: number;
  bootstrap: { resamples: number; seed: number; level: number };
}

/**
 * Win rates from judgements: per system wins / readable judgements; the interval resamples
 * questions (all orders of a question move together; percentile bootstrap, Efron & Tibshirani 1993).
 */
export function winRates(names: string[], js: Judgement[], opts: { resamples?: number; seed?: number; level?: number } = {}): WinRateReport {
  const resamples = opts.resamples ?? 1000;
  const seed = opts.seed ?? 0;
  const level = opts.level ?? 0.95;
  const n = names.length;
  const byQ = new Map<string, number[]>(); // per question: wins per system, then readable count
  for (const j of js) {
    const c = byQ.get(j.questionId) ?? new Array<number>(n + 1).fill(0);
    byQ.set(j.questionId, c);
    if (j.winner === null) continue;
    c[n]! += 1;
    if (j.winner !== 'tie') c[j.winner]! += 1;
  }
  const qs = [...byQ.keys()];
  const sum = (idx: string[]) => {
    const t = new Array<number>(n + 1).fill(0);
    for (const q of idx) byQ.get(q)!.forEach((v, i) => (t[i]! += v));
    return t;
  };
  const tot = sum(qs);
  const draws: number[][] = names.map(() => []);
  const rnd = mulberry32(seed);
  for (let s = 0; s < resamples && qs.length; s++) {
    const t = sum(qs.map(() => qs[Math.floor(rnd() * qs.length)]!));
    if (t[n]) names.forEach((_, i) => draws[i]!.push(t[i]! / t[n]!));
  }
  const decided = js.filter((j) => j.position !== null);
  return {
    systems: names.map((name, i) => {
      const rate = tot[n] ? tot[i]! / tot[n]! : NaN;
      const d = draws[i]!.sort((a, b) => a - b);
      return { name, wins: tot[i]!, rate, lo: d.length ? quantile(d, (1 - level) / 2) : rate, hi: d.length ? quantile(d, (1 + level) / 2) : rate };
    }),
    questions: qs.length,
    judgements: js.length,
    readable: tot[n]!,
    ties: js.filter((j) => j.winner === 'tie').length,
    unreadable: js.filter((j) => j.winner === null).length,
    failed: js.filter((j) => j.error).length,
    positionBias: Array.from({ length: n }, (_, p) => (decided.length ? decided.filter((j) => j.position === p + 1).length / decided.length : NaN)),
    orders: js.length && qs.length ? js.length / qs.length : 0,
    bootstrap: { resamples, seed, level },
  };
}

/** Arena-Hard's score and AlpacaEval's length-controlled win rate beside the raw one (`compare --win-rate arena-hard`). */
export function formatPairwise(a: ArenaHardScore, lc: LengthControlledWinRate): string {
  const pct = (x: number) => `${(100 * x).toFixed(1)}%`;
  return [
    `arena-hard: ${a.model} vs ${a.baseline} ${pct(a.rate)} [${pct(a.lo)}, ${pct(a.hi)}] (${a.games} games, positions swapped; weighted battles ${a.wins} won / ${a.losses} lost / ${a.ties} tied, a strong verdict counts ${ARENA_HARD_STRONG_WEIGHT}; ${a.rounds}-round bootstrap)`,
    `length-controlled (AlpacaEval 2): ${lc.model} vs ${lc.baseline} ${pct(lc.lengthControlled)} (raw ${pct(lc.raw)}; logit = ${lc.theta.toFixed(3)} + ${lc.beta.toFixed(3)}·tanh(Δlength / sd); ${lc.questions} questions)`,
  ].join('\n');
}

/** Human-readable win-rate table and the position-bias figure. */
export function formatWinRates(r: WinRateReport): string {
  const pct = (x: number) => (Number.isFinite(x) ? `${(100 * x).toFixed(1)}%` : 'n/a');
  return [
    `win rate over ${r.questions} question(s) × ${r.orders} candidate order(s) (${r.readable} readable of ${r.judgements}; ${r.ties} tie(s), ${r.unreadable} unreadable, ${r.failed} failed):`,
    ...r.systems.map((s) => `  ${s.name}: ${pct(s.rate)} [${pct(s.lo)}, ${pct(s.hi)}] (${s.wins} wins)`),
    `position bias (share of decided judgements picking position 1…${r.systems.length}; ${pct(1 / r.systems.length)} each if none): ${r.positionBias.map(pct).join(' / ')}`,
  ].join('\n');
}

/**
 * Reads plans JSONL (`eval --plans`: `{questionId, sample, plan}` per line; the first sample of a
 * question is used). Bad lines are counted in the notes; a cut last line is skipped with a note.
 * @throws Error naming the file when it cannot be read or holds no plan
 */
export function readPlans(path: string): { plans: Map<string, string>; notes: string[] } {
  const text = readFileSync(path, 'utf8');
  const plans = new Map<string, string>();
  const notes: string[] = [];
  let bad = 0;
  const lines = text.split('\n');
  lines.forEach((line, i) => {
    if (!line.trim()) return;
    try {
      const o = JSON.parse(line) as { questionId?: unknown; plan?: unknown; sample?: unknown };
      if (typeof o.questionId !== 'string' || typeof o.plan !== 'string') throw new Error('not a plan row');
      if (!plans.has(o.questionId) || o.sample === 0) plans.set(o.questionId, o.plan);
    } catch {
      if (i === lines.length - 1 && !text.endsWith('\n')) notes.push(`last line ${i + 1} is incomplete; skipped`);
      else bad++;
    }
  });
  if (bad) notes.push(`${bad} line(s) that are not {questionId, plan} rows skipped`);
  if (!plans.size) throw new Error(`${path}: no plans ({questionId, sample, plan} per line, as eval --plans writes)`);
  return { plans, notes };
}

/** The N-way comparison prompt (prompts/). */
export const COMPARE_PROMPT = 'eval-compare.v1';
/** The two-plan prompt on Arena-Hard's five-label scale (`compare --win-rate arena-hard`). */
export const COMPARE_PAIRWISE_PROMPT = 'eval-compare-pairwise.v1';

type ChatJudge = import('./chat-judge.js').ChatJudge;
type Prompt = import('../judge/verdict.js').PromptTemplate;

/** One judge's answer to one (question, order): the position picked, its reply, whether every attempt was cached. */
interface Pick {
  pick: number | 'tie' | null;
  strong?: boolean;
  raw: string;
  error: boolean;
  cached: boolean;
}

/** The judge message of one (question, order). */
function compareContent(prompt: Prompt, question: string, plans: string[], render: (t: string, v: Record<string, string>) => string): string {
  const candidates = plans.map((plan, p) => `<plan number="${p + 1}">\n${plan}\n</plan>`).join('\n\n');
  return render(prompt.template, { question, candidates, count: String(plans.length) });
}

/**
 * Asks one judge; a reply that names no candidate is retried once as a new question (attempt 1).
 * A failed request is not asked again here: the client's `maxRetries` are its retries.
 */
async function askPick(judge: ChatJudge, prompt: Prompt, content: string, n: number, maxTokens: number, signal?: AbortSignal, pairwise = false): Promise<Pick> {
  let pick: number | 'tie' | null = null;
  let strong = false;
  let raw = '';
  let error = false;
  let cached = true;
  for (let attempt = 0; attempt < 2 && pick === null; attempt++) {
    const a = await judge.ask(prompt, [{ role: 'user', content }], { maxTokens, attempt, signal });
    cached &&= a.cached;
    error = a.content === null;
    raw = a.content ?? a.error ?? '';
    if (pairwise) {
      const v = a.content === null ? null : parsePairwiseVerdict(a.content);
      pick = v ? v.pick : null;
      strong = !!v?.strong;
    } else pick = a.content === null ? null : parsePreference(a.content, n);
    if (error) break;
  }
  return { pick, raw, error, cached, ...(strong && { strong }) };
}

/**
 * Asks `judge` (a {@link ChatJudge}: cached, concurrent) for the best plan of every question under
 * every candidate order of {@link candidateOrders}; a reply that names no candidate is retried
 * once as a new question, then counted unreadable (a failed request is not: it failed after the
 * client's `maxRetries`). Resolves with one judgement per (question, order).
 */
export async function compareSystems(o: {
  questions: { id: string; question: string }[];
  systems: { name: string; plans: Map<string, string> }[];
  judge: ChatJudge;
  keepRaw?: boolean;
  /** Answer tokens per judgement (default 512). */
  maxTokens?: number;
  /** Two systems on Arena-Hard's five-label scale (prompts/eval-compare-pairwise.v1.md): strong verdicts kept. */
  pairwise?: boolean;
  signal?: AbortSignal;
  onJudgement?: (j: Judgement, cached: boolean) => void;
}): Promise<Judgement[]> {
  const { loadPrompt, renderTemplate } = await import('../judge/verdict.js');
  if (o.pairwise && o.systems.length !== 2) throw new Error(`a pairwise comparison takes two systems (got ${o.systems.length})`);
  const prompt = loadPrompt(o.pairwise ? COMPARE_PAIRWISE_PROMPT : COMPARE_PROMPT);
  const n = o.systems.length;
  const orders = candidateOrders(n);
  const tasks = o.questions.flatMap((q) =>
    orders.map(async (order): Promise<Judgement> => {
      const content = compareContent(
        prompt,
        q.question,
        order.map((s) => o.systems[s]!.plans.get(q.id)!),
        renderTemplate,
      );
      const a = await askPick(o.judge, prompt, content, n, o.maxTokens ?? 512, o.signal, o.pairwise);
      const j = judgementOf(q.id, order, a, o.keepRaw);
      o.onJudgement?.(j, a.cached);
      return j;
    }),
  );
  return Promise.all(tasks);
}

function judgementOf(questionId: string, order: number[], a: Pick, keepRaw?: boolean): Judgement {
  return {
    questionId,
    order,
    winner: a.pick === null ? null : a.pick === 'tie' ? 'tie' : order[a.pick - 1]!,
    position: typeof a.pick === 'number' ? a.pick : null,
    ...(a.strong && { strong: true }),
    ...(a.error && { error: true }),
    ...(keepRaw && { raw: a.raw }),
  };
}

/** A jury member of `compare`: a free-form chat judge with its weight and null-rate limit. */
export interface CompareJuryMember {
  name: string;
  weight: number;
  maxNullRate: number;
  judge: ChatJudge;
}

/** A jury's judgement: the jury's choice (as {@link Judgement}) and each member's. */
export interface JuryJudgement extends Judgement {
  /** Per member: its judgement of this (question, order); null when it was not asked (left out). */
  members: Record<string, Judgement | null>;
}

/** Result of {@link compareSystemsWithJury}. */
export interface JuryComparison {
  judgements: JuryJudgement[];
  /** Members' answers, failures, unreadable replies; `leftOut` for a member left out under continue. */
  health: Record<string, import('../judge/jury.js').JuryRunMemberHealth>;
}

/**
 * {@link compareSystems} with a jury: every member that takes part is asked every (question,
 * order), the members concurrently (each judge's requests concurrent up to its own concurrency);
 * the jury's choice per judgement is {@link aggregateChoices} of the members' choices (a system, or
 * `tie`) with their weights — `majority`: weighted plurality, a tie for first place counts as a tie;
 * `unanimous`: the choice when every voting member made it, else a tie; no readable member → the
 * judgement is unreadable (`error` when every member's request failed). Member failure follows
 * {@link JuryRunWatch} (`stop` rejects naming the member, `continue` leaves it out of the whole run,
 * named; each member's work runs in its judge's slots ({@link ChatJudge.slot}), so once a member is
 * left out, or the run stops, none of its work still waiting for a slot sends anything; requests
 * already in flight are aborted): the jury's choices are formed once the run is done, so a member left out votes in none.
 * @throws JudgeHealthError (member failure under stop; every member left out); the abort error
 */
export async function compareSystemsWithJury(o: {
  questions: { id: string; question: string }[];
  systems: { name: string; plans: Map<string, string> }[];
  members: CompareJuryMember[];
  aggregation: 'majority' | 'unanimous';
  juryOnMemberFailure: import('../judge/jury.js').JuryFailureRule;
  keepRaw?: boolean;
  maxTokens?: number;
  signal?: AbortSignal;
  onWarning?: (m: string) => void;
  onJudgement?: (j: { questionId: string; order: number[] }, cached: boolean) => void;
}): Promise<JuryComparison> {
  const { loadPrompt, renderTemplate } = await import('../judge/verdict.js');
  const { JuryRunWatch, aggregateChoices } = await import('../judge/jury.js');
  const prompt = loadPrompt(COMPARE_PROMPT);
  const n = o.systems.length;
  const orders = candidateOrders(n);
  const watch = new JuryRunWatch(o.members, o.questions.length * orders.length, o.juryOnMemberFailure, 'compare', o.onWarning);
  // A member's failure under stop aborts every request still in flight; the first error is kept.
  const ac = new AbortController();
  const stop = () => ac.abort(o.signal?.reason);
  o.signal?.addEventListener('abort', stop, { once: true });
  // A member left out under continue: its requests still in flight are aborted.
  const own = new Map(o.members.map((m) => [m.name, new AbortController()]));
  const signals = new Map(o.members.map((m) => [m.name, AbortSignal.any([ac.signal, own.get(m.name)!.signal])]));
  let failure: unknown;
  const tasks = o.questions.flatMap((q) =>
    orders.map(async (order) => {
      const content = compareContent(
        prompt,
        q.question,
        order.map((s) => o.systems[s]!.plans.get(q.id)!),
        renderTemplate,
      );
      let cached = true;
      // Each member's work runs in its judge's slots (ChatJudge.slot): work waiting for a slot starts
      // after the answers before it are recorded, so a member left out (or a stop) sends nothing more.
      const members = await Promise.all(
        o.members.map((m) =>
          m.judge.slot(async (): Promise<Judgement | null> => {
            if (!watch.active(m.name) || ac.signal.aborted) return null;
            let a: Pick;
            try {
              a = await askPick(m.judge, prompt, content, n, o.maxTokens ?? 512, signals.get(m.name));
            } catch (e) {
              if (!watch.active(m.name)) return null;
              throw e;
            }
            cached &&= a.cached;
            try {
              watch.record(m.name, a.error ? 'failed' : a.pick === null ? 'unreadable' : 'ok', a.error ? a.raw : undefined);
            } catch (e) {
              failure ??= e;
              ac.abort(e);
            }
            if (!watch.active(m.name)) own.get(m.name)!.abort();
            return judgementOf(q.id, order, a, o.keepRaw);
          }),
        ),
      );
      o.onJudgement?.({ questionId: q.id, order }, cached);
      return { questionId: q.id, order, members };
    }),
  );
  try {
    const settled = await Promise.allSettled(tasks);
    if (failure) throw failure;
    const bad = settled.find((r) => r.status === 'rejected');
    if (bad) throw (bad as PromiseRejectedResult).reason;
    const weights = o.members.map((m) => m.weight);
    const judgements = settled.map((r) => {
      const { questionId, order, members } = (r as PromiseFulfilledResult<{ questionId: string; order: number[]; members: (Judgement | null)[] }>).value;
      const voting = members.map((j, k) => (watch.active(o.members[k]!.name) ? j : null));
      const pick = aggregateChoices(
        voting.map((j) => (j?.winner === null || j?.winner === undefined ? null : String(j.winner))),
        weights,
        o.aggregation,
      );
      const winner = pick === null ? null : pick === 'tie' ? 'tie' : Number(pick);
      const allFailed = voting.every((j) => !j || j.error);
      const jj: JuryJudgement = {
        questionId,
        order,
        winner,
        position: typeof winner === 'number' ? order.indexOf(winner) + 1 : null,
        ...(winner === null && allFailed && { error: true }),
        members: Object.fromEntries(o.members.map((m, k) => [m.name, members[k]])),
      };
      return jj;
    });
    return { judgements, health: watch.health() };
  } finally {
    o.signal?.removeEventListener('abort', stop);
  }
}

/** A jury member's figures in a compare summary: its own win rates and its health. */
export interface CompareMemberSummary {
  weight: number;
  winRates: WinRateReport;
  health: import('../judge/jury.js').JuryRunMemberHealth;
}

/** The jury part of a compare summary. */
export interface JuryCompareSummary {
  aggregation: 'majority' | 'unanimous';
  members: Record<string, CompareMemberSummary>;
  /** Members left out under `continue` (named; their choices voted in no judgement). */
  leftOut: string[];
  /** Agreement of the members' choices (a system's name or `tie`) over the (question, order) judgements; left-out members excluded. */
  agreement: import('../judge/agreement.js').AgreementReport;
}

/**
 * Per-member win rates and health, and the members' agreement ({@link choiceAgreement}: one unit per
 * (question, order), the question the bootstrap cluster; unreadable / failed / unasked choices null).
 */
export async function juryCompareSummary(
  names: string[],
  c: JuryComparison,
  members: { name: string; weight: number }[],
  aggregation: 'majority' | 'unanimous',
  opts: { resamples?: number; seed?: number; level?: number } = {},
): Promise<JuryCompareSummary> {
  const { choiceAgreement } = await import('../judge/agreement.js');
  const out: Record<string, CompareMemberSummary> = {};
  for (const m of members) {
    const js = c.judgements.map((j) => j.members[m.name]).filter((j): j is Judgement => !!j);
    out[m.name] = { weight: m.weight, winRates: winRates(names, js, opts), health: c.health[m.name]! };
  }
  const leftOut = members.filter((m) => c.health[m.name]?.leftOut).map((m) => m.name);
  const voting = members.map((m) => m.name).filter((n) => !leftOut.includes(n));
  const label = (w: number | 'tie' | null | undefined) => (w === null || w === undefined ? null : w === 'tie' ? 'tie' : names[w]!);
  const units = c.judgements.map((j) => ({
    planId: `${j.questionId}#${j.order.join(',')}`,
    itemId: j.order.join(','),
    cluster: j.questionId,
    choices: Object.fromEntries(voting.map((n) => [n, label(j.members[n]?.winner)])),
  }));
  const agreement = choiceAgreement(units, voting.length ? voting : members.map((m) => m.name), opts);
  return { aggregation, members: out, leftOut, agreement };
}

/** Text lines of a jury's compare summary: each member's win rates and health, then the agreement. */
export async function formatJuryCompare(s: JuryCompareSummary): Promise<string> {
  const { formatAgreement } = await import('../judge/agreement.js');
  const { leftOutNote } = await import('../judge/jury.js');
  const pct = (x: number) => (Number.isFinite(x) ? `${(100 * x).toFixed(1)}%` : 'n/a');
  const k = Object.keys(s.members).length;
  const lines = [`jury (${s.aggregation}; ${k} member${k === 1 ? '' : 's'}):`];
  for (const [name, m] of Object.entries(s.members)) {
    const h = m.health;
    lines.push(
      `  member ${name} (weight ${m.weight}): ${m.winRates.systems.map((x) => `${x.name} ${pct(x.rate)}`).join(', ')}; ` +
        `${h.answers} answers, ${m.winRates.ties} tie(s), ${h.unreadable} unreadable, ${h.failed} failed` +
        leftOutNote(h),
    );
  }
  const agreement = s.agreement.judges.length >= 2 ? formatAgreement(s.agreement) : 'judge agreement: n/a (fewer than two members voting)';
  return [...lines, agreement].join('\n');
}
