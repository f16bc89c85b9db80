/**
 * Progress display for long data runs: units (papers) done out of a total known up front, failed
 * units counted as done-with-error, LLM calls and cache hits as secondary counters, and an ETA.
 * A cli-progress bar on a TTY; plain lines (at most one every `intervalMs`) when stderr is not a
 * TTY or `CI=true`.
 *
 * Every counter only ever counts up: the total is raised with {@link Progress.add} (never
 * lowered), so the bar never shrinks, runs backwards or shows a negative total.
 */
import cliProgress from 'cli-progress';

export interface ProgressOptions {
  label: string;
  /** What the bar counts (default 'papers'). */
  unit?: string;
  /** Total known up front (default 0; raise it with add()). */
  total?: number;
  /** Force plain lines (default: not a TTY or CI set). */
  plain?: boolean;
  /** Silence entirely (tests). */
  silent?: boolean;
  intervalMs?: number;
  stream?: NodeJS.WriteStream;
}

/** Snapshot of a {@link Progress}'s counters. */
export interface ProgressCounts {
  total: number;
  /** Units finished, failed ones included. */
  done: number;
  /** Units finished with an error (counted in `done`). */
  failed: number;
  /** Units finished without live work (ETA ignores them). */
  cached: number;
  /** LLM calls answered (secondary counter; does not move the bar). */
  calls: number;
  /** Of `calls`, those answered from the state. */
  cachedCalls: number;
}

const checkCount = (n: number, what: string): number => {
  if (!Number.isInteger(n) || n < 0) throw new RangeError(`Progress: ${what} must be an integer >= 0, got ${String(n)}`);
  return n;
};

/** A progress reporter over units whose total is known up front (and may only be raised). */
export class Progress {
  private done = 0;
  private failed = 0;
  private cached = 0;
  private total: number;
  private calls = 0;
  private cachedCalls = 0;
  private readonly unit: string;
  private readonly t0 = Date.now();
  private lastLine = 0;
  private bar?: cliProgress.SingleBar;
  private readonly plain: boolean;
  private extra = '';

  constructor(private readonly o: ProgressOptions) {
    const stream = o.stream ?? process.stderr;
    this.unit = o.unit ?? 'papers';
    this.total = checkCount(o.total ?? 0, 'total');
    this.plain = o.plain ?? (!stream.isTTY || /^(1|true)$/i.test(process.env.CI ?? ''));
    if (!o.silent && !this.plain) {
      this.bar = new cliProgress.SingleBar(
        {
          format: `${o.label} [{bar}] {value}/{total} ${this.unit} | {failed} failed | {calls} calls ({cachedCalls} cached){extra} | ETA {eta_formatted}`,
          stream,
          hideCursor: true,
          etaBuffer: 50,
          clearOnComplete: false,
        },
        cliProgress.Presets.shades_classic,
      );
      this.bar.start(this.total, 0, this.payload());
    }
  }

  /**
   * Raise the expected total by n (an integer ≥ 0).
   * @throws RangeError for a negative or non-integer n (the total never shrinks)
   */
  add(n: number): void {
    this.total += checkCount(n, 'add(n)');
    this.bar?.setTotal(this.total);
    this.render();
  }

  /** One unit finished (`fromCache`: it needed no live work, so it does not count toward the rate). */
  tick(fromCache = false): void {
    this.finish(fromCache);
    this.render();
  }

  /** One unit finished with an error: counted as done (and as failed). `fromCache` as in {@link tick}. */
  fail(fromCache = false): void {
    this.failed++;
    this.finish(fromCache);
    this.render();
  }

  /** One LLM call answered (`fromCache`: from the state). Does not move the bar. */
  call(fromCache = false): void {
    this.calls++;
    if (fromCache) this.cachedCalls++;
    this.render();
  }

  /** Free-text status. */
  status(s: string): void {
    this.extra = s;
    this.render();
  }

  /** The counters now. */
  counts(): ProgressCounts {
    return { total: this.total, done: this.done, failed: this.failed, cached: this.cached, calls: this.calls, cachedCalls: this.cachedCalls };
  }

  /** ETA in seconds from the rate of units that did live work, or undefined. */
  eta(): number | undefined {
    const live = this.done - this.cached;
    const el = (Date.now() - this.t0) / 1000;
    if (live <= 0 || el <= 0) return undefined;
    return Math.max(0, (this.total - this.done) / (live / el));
  }

  private finish(fromCache: boolean): void {
    this.done++;
    if (fromCache) this.cached++;
    if (this.done > this.total) {
      // more units than announced: raise the total (never lower it)
      this.total = this.done;
      this.bar?.setTotal(this.total);
    }
  }

  private payload() {
    return { failed: this.failed, calls: this.calls, cachedCalls: this.cachedCalls, extra: this.extra ? ` | ${this.extra}` : '' };
  }

  private render(force = false): void {
    if (this.o.silent || this.stopped) return;
    if (this.bar) {
      this.bar.update(this.done, this.payload());
      return;
    }
    const now = Date.now();
    if (!force && now - this.lastLine < (this.o.intervalMs ?? 5000) && this.done < this.total) return;
    this.lastLine = now;
    const eta = this.done < this.total ? this.eta() : undefined;
    const parts = [`${this.o.label}: ${this.done}/${this.total} ${this.unit}${this.failed ? ` (${this.failed} failed)` : ''}`];
    if (this.calls) parts.push(`${this.calls} calls (${this.cachedCalls} cached)`);
    if (this.extra) parts.push(this.extra);
    if (eta !== undefined) parts.push(`ETA ${Math.round(eta)}s`);
    (this.o.stream ?? process.stderr).write(`${parts.join(', ')}\n`);
  }

  private stopped = false;
  /** Final line / bar stop (idempotent). */
  stop(): void {
    if (this.stopped) return;
    if (this.bar) this.bar.stop();
    else this.render(true);
    this.stopped = true;
  }
}
