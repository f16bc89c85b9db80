/**
 * Judge contracts shared by the HTTP and local backends, rewards, eval and the probe.
 *
 * A judge decides, for each (question, plan, rubric item), whether the plan satisfies the item
 * (PaperGym: binary rubric items, docs/design.md §6 "the judge decides each rubric item").
 */
import { argError, describeValue } from '../util/args.js';
import type { JudgeHealth } from '../task/types.js';

/** One rubric item as the judge sees it (instance item or general item). */
export interface JudgeItem {
  /** Stable id, echoed in the verdict. Need not be unique across requests. */
  id: string;
  /** The item text the plan is graded against. */
  text: string;
}

/** One plan to grade against a list of items. */
export interface JudgeRequest {
  /** The research question the plan answers. */
  question: string;
  /** The candidate research plan (model output, thinking already removed). */
  plan: string;
  /** Items to decide; verdicts come back in the same order. */
  items: JudgeItem[];
}

/**
 * Checks `requests` of a judge call: an array of {question: string, plan: string, items: {id:
 * string, text: string}[]}.
 * @throws TypeError (ERR_PG_ARG) `<fn>: requests[i].<field> must be …, got …`
 */
export function checkJudgeRequests(fn: string, requests: unknown): void {
  if (!Array.isArray(requests)) throw argError(`${fn}: requests must be an array of {question, plan, items}, got ${describeValue(requests)}`);
  requests.forEach((r: unknown, i) => {
    const w = `${fn}: requests[${i}]`;
    if (!r || typeof r !== 'object' || Array.isArray(r)) throw argError(`${w} must be an object {question, plan, items}, got ${describeValue(r)}`);
    const o = r as Record<string, unknown>;
    for (const k of ['question', 'plan']) if (typeof o[k] !== 'string') throw argError(`${w}.${k} must be a string, got ${describeValue(o[k])}`);
    if (!Array.isArray(o.items)) throw argError(`${w}.items must be an array of {id, text}, got ${describeValue(o.items)}`);
    o.items.forEach((it: unknown, k) => {
      if (!it || typeof it !== 'object') throw argError(`${w}.items[${k}] must be an object {id, text}, got ${describeValue(it)}`);
      for (const f of ['id', 'text'])
        if (typeof (it as Record<string, unknown>)[f] !== 'string')
          throw argError(`${w}.items[${k}].${f} must be a string, got ${describeValue((it as Record<string, unknown>)[f])}`);
    });
  });
}

/**
 * The decision on one item.
 * - `met`: true / false, or null when no decision could be read (refusal, unparseable output,
 *   request failure). Rewards count null as not met and report how many there were.
 * - `prob`: P(yes) when the backend has it (local judge: P(yes)/(P(yes)+P(no)); HTTP per-item
 *   with logprobs). Units: probability in [0, 1].
 * - `raw`: the judge's raw text (or an error message for a failed request).
 * - `refused`: the judge declined to answer (counted, never guessed).
 * - `error`: true when the request itself failed after retries.
 */
export interface Verdict {
  itemId: string;
  met: boolean | null;
  prob?: number;
  raw?: string;
  refused?: boolean;
  error?: boolean;
  /** A jury's verdict (lib/judge/jury.ts): each member's verdict on this item, in member order. */
  members?: MemberVerdict[];
}

/** One jury member's verdict on an item (`judge` = the member's name; `error`: its request failed or it was left out). */
export interface MemberVerdict {
  judge: string;
  met: boolean | null;
  prob?: number;
  refused?: boolean;
  error?: boolean;
}

/** Running counters of a judge (monotone over its lifetime). Token counts are as the server reports them. */
export interface JudgeStats {
  /** Requests actually sent (cache misses); for the local judge, prefill rows evaluated. */
  requests: number;
  /** Answers served from the cache. */
  cacheHits: number;
  promptTokens: number;
  completionTokens: number;
  /** Requests that failed after retries (their verdicts are null with `error: true`). */
  failures: number;
  /** Verdicts read as refusals. */
  refusals: number;
  /** Verdicts whose text could not be read as yes/no (not refusals, not failures). */
  unparsed: number;
  /** Verdicts produced (all items of all requests). */
  verdicts: number;
  /** HTTP answers cut at max_tokens (still parsed: a truncated "Yes, because…" counts). */
  truncated: number;
  /** Per-plan replies: entries whose id names no item of the request (ignored). */
  unknownIds: number;
  /** Per-plan replies: item ids given more than once (the last entry was used). */
  duplicateIds: number;
  /** Verdicts that came with P(yes) (`prob`). */
  withProb: number;
}

/** Judge health of a batch of verdicts: the reward contract carries it, so it is declared with it (lib/task/types.ts). */
export type { JudgeHealth } from '../task/types.js';

/** Health counts of `vs`. */
export function judgeHealth(vs: Iterable<Verdict>): JudgeHealth {
  const h: JudgeHealth = { verdicts: 0, nulls: 0, refusals: 0, unparsed: 0, errors: 0, withProb: 0 };
  for (const v of vs) {
    h.verdicts++;
    if (v.prob !== undefined) h.withProb++;
    if (v.met !== null) continue;
    h.nulls++;
    if (v.error) h.errors++;
    else if (v.refused) h.refusals++;
    else h.unparsed++;
  }
  return h;
}

/** Sum of health counts. */
export function addHealth(a: JudgeHealth, b: JudgeHealth): JudgeHealth {
  return {
    verdicts: a.verdicts + b.verdicts,
    nulls: a.nulls + b.nulls,
    refusals: a.refusals + b.refusals,
    unparsed: a.unparsed + b.unparsed,
    errors: a.errors + b.errors,
    withProb: a.withProb + b.withProb,
  };
}

/**
 * The judge is not producing usable verdicts (null rate over the threshold, failed requests).
 * Training stops cleanly on it (checkpoint + resume command); eval exits non-zero.
 */
export class JudgeHealthError extends Error {
  constructor(
    message: string,
    readonly health?: JudgeHealth,
  ) {
    super(message);
    this.name = 'JudgeHealthError';
  }
}

/** Options per `judge` call. */
export interface JudgeCallOptions {
  /** Aborts outstanding requests; the call then rejects with the abort reason. */
  signal?: AbortSignal;
}

/**
 * A rubric judge. `judge(requests)` resolves to one `Verdict[]` per request, each aligned with
 * that request's `items` (same length, same order). Implementations never reject for a single
 * failed item (that item gets `met: null, error: true`) unless configured to; they reject on abort.
 */
export interface Judge {
  /** Short description, e.g. `http:per-item:qwen3-8b@http://127.0.0.1:8000/v1` or `local`. */
  readonly name: string;
  judge(requests: JudgeRequest[], opts?: JudgeCallOptions): Promise<Verdict[][]>;
  /** A copy of the counters. */
  stats(): JudgeStats;
  /** The judge's own totals beyond {@link stats} for the run's closing `judge totals` line (host seconds by part, …); absent: none. */
  totalsDetail?(): string;
  /** Releases resources (SQLite cache handle, sockets). Idempotent. */
  close?(): Promise<void> | void;
}

/** Fresh zeroed counters. */
export function emptyStats(): JudgeStats {
  return {
    requests: 0,
    cacheHits: 0,
    promptTokens: 0,
    completionTokens: 0,
    failures: 0,
    refusals: 0,
    unparsed: 0,
    verdicts: 0,
    truncated: 0,
    unknownIds: 0,
    duplicateIds: 0,
    withProb: 0,
  };
}

/** Adds verdict-level counts (refusals, unparsed) of `vs` into `s`. */
export function countVerdicts(s: JudgeStats, vs: Verdict[]): void {
  for (const v of vs) {
    s.verdicts++;
    if (v.prob !== undefined) s.withProb++;
    if (v.met === null) {
      if (v.refused) s.refusals++;
      else if (!v.error) s.unparsed++;
    }
  }
}

/**
 * Throws {@link JudgeHealthError} when more than `maxNullRate` of the verdicts in `h` are null
 * (refused, unreadable, failed requests). `what` names the batch ("GRPO step 3", "eval").
 */
export function assertJudgeHealth(h: JudgeHealth, maxNullRate: number, judgeName: string, what: string): void {
  if (!h.verdicts) return;
  const rate = h.nulls / h.verdicts;
  if (rate > maxNullRate) {
    throw new JudgeHealthError(
      `judge ${judgeName}: ${what}: ${h.nulls} of ${h.verdicts} verdicts are null (${(100 * rate).toFixed(0)}% > ${(100 * maxNullRate).toFixed(0)}%: ${h.errors} failed requests, ${h.unparsed} unreadable replies, ${h.refusals} refusals)`,
      h,
    );
  }
}

/** Progress-line text of a judge health record: `null 12% (3 err, 1 unread)`. */
export function formatHealth(h: JudgeHealth): string {
  if (!h.verdicts) return '';
  const parts = [h.errors && `${h.errors} err`, h.unparsed && `${h.unparsed} unread`, h.refusals && `${h.refusals} refused`].filter(Boolean);
  return `null ${((100 * h.nulls) / h.verdicts).toFixed(0)}%${parts.length ? ` (${parts.join(', ')})` : ''}`;
}
