/**
 * A jury of judges (issue 32, item 2): several judges (each local or HTTP, with its own model,
 * score mode and weight) decide every rubric item; one aggregate verdict per item, with every
 * member's verdict kept on it (`Verdict.members`) for eval rows, step metrics and agreement
 * (lib/judge/agreement.ts).
 *
 * Aggregation (weights w_j > 0; a member's null verdict does not vote; p_j = its P(yes), or 1/0
 * of its verdict when it has none):
 * - `majority`: met ⇔ Σ w (yes) > Σ w (no); a tie is not met (a majority is needed for "met");
 *   null when every member is null. `prob` (when any member has P(yes)) = Σ w_j p_j / Σ w_j.
 * - `mean-prob`: prob = Σ w_j p_j / Σ w_j over the non-null members, met ⇔ prob > 0.5.
 * - `unanimous`: met ⇔ every member says yes; any "no" → not met; yes and nulls without a "no" →
 *   null. `prob` = min p_j.
 *
 * Members are asked concurrently (one `judge` call per member per batch, all in flight at once;
 * an HTTP member's own requests are concurrent up to its `concurrency`). Each member has its own
 * health ({@link JuryJudge.memberHealth}): its verdicts, nulls, failed requests. A member fails in a
 * call when its `judge` call rejects or more than its `maxNullRate` of its verdicts are null. Rule
 * (`judge.juryOnMemberFailure`):
 * - `stop` (default): the call rejects with a JudgeHealthError naming the member — training stops
 *   with a checkpoint, eval exits non-zero; never a silent jury of fewer judges;
 * - `continue`: the member's verdicts in that call are null (`error`, not voting), the failure is
 *   counted per member (`memberFailures`, warned once per call through `onWarning`) and every
 *   verdict of the call names the members that did not vote; when no member is left the call rejects.
 */
import {
  JURY_AGGREGATIONS,
  JURY_FAILURE_RULES,
  judgeConfigProblems,
  juryMemberConfig,
  juryMemberProblems,
  juryOfOneWarning,
  type JudgeConfig,
  type JuryAggregation,
  type JuryFailureRule,
} from '../config/judge.js';
import type { AgreementUnit } from './agreement.js';
import {
  JudgeHealthError,
  addHealth,
  emptyStats,
  judgeHealth,
  type Judge,
  type JudgeCallOptions,
  type JudgeHealth,
  type JudgeRequest,
  type JudgeStats,
  type MemberVerdict,
  type Verdict,
} from './types.js';

export { JURY_AGGREGATIONS, JURY_FAILURE_RULES, juryMemberProblems, juryOfOneWarning, type JuryAggregation, type JuryFailureRule };

/** One member of a jury. */
export interface JuryMember {
  /** Unique within the jury; names the member in verdicts, health and errors. */
  name: string;
  judge: Judge;
  /** Vote weight, > 0 (default 1). */
  weight?: number;
  /** The member fails a call when more than this fraction of its verdicts is null (default 0.5). */
  maxNullRate?: number;
}

export interface JuryOptions {
  aggregation?: JuryAggregation;
  juryOnMemberFailure?: JuryFailureRule;
  /** Warnings (a member left out under `continue`, a jury of one); default console.warn. */
  onWarning?: (message: string) => void;
}

/**
 * Aggregates one item's member verdicts (aligned with `weights`) by `rule` (see the module
 * docstring). `members` are recorded on the result.
 */
export function aggregateVerdicts(itemId: string, members: MemberVerdict[], weights: number[], rule: JuryAggregation): Verdict {
  let wYes = 0;
  let wNo = 0;
  let wp = 0;
  let w = 0;
  let minP = Infinity;
  let anyProb = false;
  let anyNo = false;
  let anyNull = false;
  members.forEach((m, j) => {
    if (m.met === null) {
      anyNull = true;
      return;
    }
    const p = typeof m.prob === 'number' ? m.prob : m.met ? 1 : 0;
    if (typeof m.prob === 'number') anyProb = true;
    if (m.met) wYes += weights[j];
    else {
      wNo += weights[j];
      anyNo = true;
    }
    wp += weights[j] * p;
    w += weights[j];
    minP = Math.min(minP, p);
  });
  const v: Verdict = { itemId, met: null, members };
  if (!w) return v;
  const mean = wp / w;
  if (rule === 'majority') {
    v.met = wYes > wNo;
    if (anyProb) v.prob = mean;
  } else if (rule === 'mean-prob') {
    v.met = mean > 0.5;
    v.prob = mean;
  } else {
    v.met = anyNo ? false : anyNull ? null : true;
    if (anyProb) v.prob = minP;
  }
  return v;
}

/** Per-member health of verdicts that carry `members` (a jury's): member name → health. */
export function memberHealthOf(vs: Iterable<Verdict>): Record<string, JudgeHealth> {
  const out: Record<string, JudgeHealth> = {};
  const acc = new Map<string, Verdict[]>();
  for (const v of vs) for (const m of v.members ?? []) (acc.get(m.judge) ?? acc.set(m.judge, []).get(m.judge)!).push({ itemId: v.itemId, ...m });
  for (const [name, list] of acc) out[name] = judgeHealth(list);
  return out;
}

/** Per member: health of its verdicts among `vs` (a jury's) and how many it judged met; undefined when no verdict carries members. */
export function memberSummaryOf(vs: Verdict[]): Record<string, JudgeHealth & { met: number }> | undefined {
  if (!vs.some((v) => v.members)) return undefined;
  const h = memberHealthOf(vs);
  const out: Record<string, JudgeHealth & { met: number }> = {};
  for (const [name, x] of Object.entries(h)) out[name] = { ...x, met: 0 };
  for (const v of vs) for (const m of v.members ?? []) if (m.met === true) out[m.judge].met++;
  return out;
}

/** Sum of per-member summaries (a GRPO step's plans), undefined when none has one. */
export function addMemberSummaries(
  list: (Record<string, JudgeHealth & { met: number }> | undefined)[],
): Record<string, JudgeHealth & { met: number }> | undefined {
  let out: Record<string, JudgeHealth & { met: number }> | undefined;
  for (const x of list) {
    if (!x) continue;
    out ??= {};
    for (const [k, h] of Object.entries(x)) {
      const c = out[k];
      out[k] = c ? { ...addHealth(c, h), met: c.met + h.met } : { ...h };
    }
  }
  return out;
}

/** A jury of judges (see the module docstring). Closes its members on `close()`. */
export class JuryJudge implements Judge {
  readonly name: string;
  readonly aggregation: JuryAggregation;
  readonly juryOnMemberFailure: JuryFailureRule;
  private readonly members: Required<Omit<JuryMember, 'judge'>>[];
  private readonly judges: Judge[];
  private readonly warn: (m: string) => void;
  private readonly health = new Map<string, JudgeHealth>();
  private readonly failures = new Map<string, number>();

  /** @throws TypeError naming the problem (duplicate names, weight ≤ 0, no members). A jury of one warns. */
  constructor(members: JuryMember[], opts: JuryOptions = {}) {
    const errs = juryMemberProblems(members, 'jury members');
    if (errs.length) throw new TypeError(errs.join('; '));
    this.aggregation = opts.aggregation ?? 'majority';
    if (!JURY_AGGREGATIONS.includes(this.aggregation))
      throw new TypeError(`jury aggregation must be ${JURY_AGGREGATIONS.join(' | ')}, got ${JSON.stringify(this.aggregation)}`);
    this.juryOnMemberFailure = opts.juryOnMemberFailure ?? 'stop';
    if (!JURY_FAILURE_RULES.includes(this.juryOnMemberFailure))
      throw new TypeError(`jury juryOnMemberFailure must be stop | continue, got ${JSON.stringify(this.juryOnMemberFailure)}`);
    this.warn = opts.onWarning ?? ((m) => console.warn(`warning: ${m}`));
    if (members.length === 1) this.warn(juryOfOneWarning('the jury'));
    this.members = members.map((m) => ({ name: m.name, weight: m.weight ?? 1, maxNullRate: m.maxNullRate ?? 0.5 }));
    this.judges = members.map((m) => m.judge);
    for (const m of members) this.health.set(m.name, judgeHealth([]));
    this.name = `jury:${this.aggregation}(${members.map((m) => m.name).join(',')})`;
  }

  /** Member names, in order. */
  memberNames(): string[] {
    return this.members.map((m) => m.name);
  }

  /** Cumulative health per member (verdicts, nulls, failed requests), over the jury's lifetime. */
  memberHealth(): Record<string, JudgeHealth> {
    return Object.fromEntries([...this.health].map(([k, h]) => [k, { ...h }]));
  }

  /** Calls in which each member failed (only under `continue`; under `stop` the first failure rejects). */
  memberFailures(): Record<string, number> {
    return Object.fromEntries(this.members.map((m) => [m.name, this.failures.get(m.name) ?? 0]));
  }

  /** Sum of the members' counters. */
  stats(): JudgeStats {
    const s = emptyStats();
    for (const j of this.judges) {
      const t = j.stats();
      for (const k of Object.keys(s) as (keyof JudgeStats)[]) s[k] += t[k];
    }
    return s;
  }

  async judge(requests: JudgeRequest[], opts: JudgeCallOptions = {}): Promise<Verdict[][]> {
    const settled = await Promise.allSettled(this.judges.map((j) => j.judge(requests, opts)));
    if (opts.signal?.aborted) throw opts.signal.reason;
    const perMember: (Verdict[][] | null)[] = [];
    const failed: string[] = [];
    settled.forEach((r, j) => {
      const m = this.members[j];
      let why: string | undefined;
      let vs: Verdict[][] | null = null;
      if (r.status === 'rejected') why = `its judge call failed: ${(r.reason as Error)?.message ?? String(r.reason)}`;
      else {
        vs = r.value;
        const h = judgeHealth(vs.flat());
        this.health.set(m.name, addHealth(this.health.get(m.name)!, h));
        if (h.verdicts && h.nulls / h.verdicts > m.maxNullRate) {
          why = `${h.nulls} of ${h.verdicts} verdicts null (${((100 * h.nulls) / h.verdicts).toFixed(0)}% > ${(100 * m.maxNullRate).toFixed(0)}%: ${h.errors} failed requests, ${h.unparsed} unreadable, ${h.refusals} refusals)`;
        }
      }
      if (why) {
        if (this.juryOnMemberFailure === 'stop') {
          throw new JudgeHealthError(
            `jury member ${m.name} failed: ${why}; the run stops (judge.juryOnMemberFailure stop; set it to continue to go on without the member, reported per call)`,
          );
        }
        this.failures.set(m.name, (this.failures.get(m.name) ?? 0) + 1);
        failed.push(`${m.name} (${why})`);
        vs = null;
      }
      perMember.push(vs);
    });
    if (failed.length === this.members.length) throw new JudgeHealthError(`jury: every member failed: ${failed.join('; ')}`);
    if (failed.length)
      this.warn(`jury: ${failed.length} of ${this.members.length} members left out of this call (judge.juryOnMemberFailure continue): ${failed.join('; ')}`);
    const weights = this.members.map((m) => m.weight);
    return requests.map((r, i) =>
      r.items.map((it, k) => {
        const ms: MemberVerdict[] = this.members.map((m, j) => {
          const v = perMember[j]?.[i]?.[k];
          if (!v) return { judge: m.name, met: null, error: true };
          const mv: MemberVerdict = { judge: m.name, met: v.met };
          if (v.prob !== undefined) mv.prob = v.prob;
          if (v.refused) mv.refused = true;
          if (v.error) mv.error = true;
          return mv;
        });
        const agg = aggregateVerdicts(it.id, ms, weights, this.aggregation);
        if (agg.met === null) {
          agg.raw = `jury ${this.aggregation}: no member verdict`;
          if (ms.every((m) => m.error)) agg.error = true;
        }
        return agg;
      }),
    );
  }

  async close(): Promise<void> {
    for (const j of this.judges) await j.close?.();
  }
}

/**
 * Agreement units (lib/judge/agreement.ts) from a jury's verdicts: one unit per (plan, item) with
 * each member's verdict. `planIds[i]` names request i's plan; `dimensions` maps an item id to its
 * rubric dimension; `cluster` (default the plan id) groups units for the bootstrap.
 */
export function agreementUnitsFromVerdicts(
  planIds: string[],
  verdicts: Verdict[][],
  opts: { dimension?: (planId: string, itemId: string) => string | undefined; cluster?: (planId: string) => string } = {},
): AgreementUnit[] {
  const out: AgreementUnit[] = [];
  verdicts.forEach((vs, i) => {
    for (const v of vs) {
      if (!v.members) continue;
      const u: AgreementUnit = { planId: planIds[i], itemId: v.itemId, verdicts: Object.fromEntries(v.members.map((m) => [m.judge, m.met])) };
      const d = opts.dimension?.(planIds[i], v.itemId);
      if (d) u.dimension = d;
      if (opts.cluster) u.cluster = opts.cluster(planIds[i]);
      out.push(u);
    }
  });
  return out;
}

/**
 * One choice from jury members' choices among categories (`compare`'s pick of a system, or `tie`),
 * aligned with `weights` (> 0); a null choice (unreadable, failed, left out) does not vote.
 * - `majority`: weighted plurality — the category with the greatest summed weight; when two or more
 *   categories share the greatest weight the result is `tie` (a tie of the jury counts as a tie,
 *   never as a win of either);
 * - `unanimous`: the category when every voting member chose it, else `tie`;
 * - null when no member voted. `mean-prob` has no meaning for a choice without probabilities (callers
 *   refuse it before asking anything).
 */
export function aggregateChoices(choices: (string | null)[], weights: number[], rule: 'majority' | 'unanimous', tie = 'tie'): string | null {
  const w = new Map<string, number>();
  choices.forEach((c, j) => {
    if (c !== null) w.set(c, (w.get(c) ?? 0) + weights[j]);
  });
  if (!w.size) return null;
  if (rule === 'unanimous') return w.size === 1 ? [...w.keys()][0] : tie;
  const top = Math.max(...w.values());
  const best = [...w].filter(([, x]) => x === top);
  return best.length === 1 ? best[0][0] : tie;
}

/** A member's answers in a run of free-form questions (compare, leakage). */
export interface JuryRunMemberHealth {
  /** Answers received (cached ones included). */
  answers: number;
  /** Requests that failed after the client's retries. */
  failed: number;
  /** Replies that could not be read (no choice named, bad JSON). */
  unreadable: number;
  /** Left out of the run under `continue` (its answers do not vote), with the reason. */
  leftOut?: string;
  /**
   * Of `answers` (and of `failed` / `unreadable`), those that arrived after the member was left out:
   * requests already in flight then. Counted so that the health adds up to what the member
   * answered; they vote nowhere and decide nothing. Absent when none.
   */
  afterLeftOut?: number;
}

/**
 * The summary-line suffix of a member's run health (compare and leakage summaries): `; LEFT OUT:
 * <reason>` and how many answers arrived after that; empty for a member that was never left out.
 */
export function leftOutNote(h: JuryRunMemberHealth): string {
  if (!h.leftOut) return '';
  return `; LEFT OUT: ${h.leftOut}` + (h.afterLeftOut ? ` (${h.afterLeftOut} of the answers arrived after that and did not vote)` : '');
}

/**
 * Member failure over a run of `total` free-form questions per member (compare's judgements,
 * leakage's rubric items), the run-level form of {@link JuryJudge}'s rule: a member fails when more
 * than its `maxNullRate` of the run's answers are null (failed request or unreadable reply). It is
 * detected as soon as it is certain — its nulls pass `maxNullRate × total`, whatever the answers
 * still to come — not at the end. Then, by `juryOnMemberFailure`:
 * - `stop`: {@link record} throws a JudgeHealthError naming the member (the run stops; answers so far
 *   are cached, so a rerun asks nothing twice);
 * - `continue`: the member is left out of the whole run (no further questions; its answers do not
 *   vote in any aggregate), named in a warning and in its health; when no member is left,
 *   {@link record} throws.
 */
export class JuryRunWatch {
  private readonly h = new Map<string, JuryRunMemberHealth>();
  private readonly limits = new Map<string, number>();

  /** @param use names the run in messages ("compare", "leakage") */
  constructor(
    members: { name: string; maxNullRate: number }[],
    readonly total: number,
    readonly rule: JuryFailureRule,
    private readonly use: string,
    private readonly warn: (m: string) => void = (m) => console.warn(`warning: ${m}`),
  ) {
    for (const m of members) {
      this.h.set(m.name, { answers: 0, failed: 0, unreadable: 0 });
      this.limits.set(m.name, m.maxNullRate);
    }
  }

  /** Whether `name` still takes part (not left out). */
  active(name: string): boolean {
    return !this.h.get(name)?.leftOut;
  }

  /** Members left out (under `continue`). */
  leftOut(): string[] {
    return [...this.h].filter(([, x]) => x.leftOut).map(([k]) => k);
  }

  /**
   * Records one answer of member `name` (also one that arrives after the member was left out: it is
   * counted, as `afterLeftOut` too, and decides nothing).
   * @throws JudgeHealthError under `stop` when the member has now failed, or when every member is left out
   */
  record(name: string, outcome: 'ok' | 'failed' | 'unreadable', detail?: string): void {
    const x = this.h.get(name)!;
    x.answers++;
    if (outcome === 'failed') x.failed++;
    if (outcome === 'unreadable') x.unreadable++;
    if (x.leftOut) {
      x.afterLeftOut = (x.afterLeftOut ?? 0) + 1;
      return;
    }
    const nulls = x.failed + x.unreadable;
    const limit = this.limits.get(name)!;
    if (nulls <= limit * this.total) return;
    const why =
      `${nulls} of its ${this.total} answers null (${x.failed} failed requests, ${x.unreadable} unreadable) > its maxNullRate ${limit}` +
      (detail ? `; last: ${detail.slice(0, 200)}` : '');
    if (this.rule === 'stop')
      throw new JudgeHealthError(
        `${this.use}: jury member ${name} failed: ${why}; the run stops (judge.juryOnMemberFailure stop; set it to continue to go on without the member, named)`,
      );
    x.leftOut = why;
    this.warn(`${this.use}: jury member ${name} left out of the run (judge.juryOnMemberFailure continue): ${why}`);
    if (this.leftOut().length < this.h.size) return;
    throw new JudgeHealthError(`${this.use}: every jury member failed: ${[...this.h].map(([k, v]) => `${k} (${v.leftOut})`).join('; ')}`);
  }

  /** Health per member. */
  health(): Record<string, JuryRunMemberHealth> {
    return Object.fromEntries([...this.h].map(([k, v]) => [k, { ...v }]));
  }
}

/** A jury member of a run of free-form questions: its full settings (the section's under its own keys). */
export interface JuryRunMember {
  name: string;
  weight: number;
  maxNullRate: number;
  config: JudgeConfig;
}

/**
 * The members of jury settings `c` for a run of free-form questions (`use`: "compare", "leakage"):
 * each member's settings validated, `canAnswer(member)` true for each (else an Error naming the
 * member and what it needs), aggregation not `mean-prob` unless `meanProb` (a choice or a JSON answer
 * has no P(yes)). A jury of one warns (as {@link JuryJudge}).
 * @throws Error naming the member / setting to fix
 */
export function juryRunMembers(
  c: JudgeConfig,
  use: string,
  o: { canAnswer: (m: JudgeConfig) => boolean; needs: string; meanProb?: boolean; onWarning?: (m: string) => void },
): JuryRunMember[] {
  const probs = juryMemberProblems(c.judges, 'judge.judges (--judges)');
  if (probs.length) throw new Error(`${use}: ${probs.join('; ')}`);
  const bad = judgeConfigProblems(c, '');
  if (bad.length) throw new Error(`${use}: jury settings: ${bad.join('; ')}`);
  if (c.aggregation === 'mean-prob' && !o.meanProb)
    throw new Error(
      `${use}: judge.aggregation mean-prob (--judge-aggregation) needs P(yes) per verdict, which ${use}'s answers do not carry: use majority or unanimous`,
    );
  const ms = (c.judges ?? []).map((_m, i) => juryMemberConfig(c, i));
  if (ms.length === 1) (o.onWarning ?? ((m: string) => console.warn(`warning: ${m}`)))(juryOfOneWarning('judge.judges (--judges)'));
  for (const m of ms) if (!o.canAnswer(m)) throw new Error(`${use}: jury member ${m.name} (kind ${m.kind}) cannot answer ${use}'s question: ${o.needs}`);
  return ms.map((m) => ({ name: m.name, weight: m.weight, maxNullRate: m.maxNullRate, config: m }));
}
