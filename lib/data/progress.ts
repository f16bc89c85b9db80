/**
 * Progress display for long data runs (`build-data`, `leakage`): units (papers, rubric items)
 * done out of a total known up front, failed units counted as done-with-error, LLM calls (done,
 * cached, in flight on the wire, queued for a client slot), tokens and an ETA.
 *
 * - On a TTY: a cli-progress bar, started once the total is known (never `0/0`), redrawn every
 *   second so the elapsed time, ETA and in-flight calls stay current.
 * - Without a TTY, or with `CI=true`: plain lines on stderr, one when the total is known, then one
 *   every `intervalMs` (default 5 s) while the run lasts (also when nothing finishes), and a
 *   final one.
 *
 * The ETA is the remaining units over the rate of units that needed live work (units answered
 * from the state do not make it optimistic); before the first such unit it is shown as `ETA ?`
 * (never NaN/Inf). Every counter only counts up; the total is raised with {@link Progress.add}.
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
  /** Plain mode: at most one line per event burst and at least one line every this many ms (default 5000; 0 = a line per event, no timer). */
  intervalMs?: number;
  stream?: NodeJS.WriteStream;
  /** Requests on the wire (`active`) per the LLM client (LlmClient.load); then calls started but not on the wire show as queued. */
  load?: () => { active: number; queued: number };
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
  /** LLM calls answered (live and from the state). */
  calls: number;
  /** Of `calls`, those answered from the state. */
  cachedCalls: number;
  /** Live calls started and not yet answered (on the wire, waiting for a client slot, or between retries). */
  inFlight: number;
  /** Live calls that failed. */
  failedCalls: number;
  promptTokens: number;
  completionTokens: number;
}

const checkCount = (n: number, what: string): number => {
  if (!Number.isInteger(n) || n < 0) throw new RangeError(`Progress: ${what} must be an integer >= 0, got ${String(n)}`);
  return n;
};

/** `42s`, `3m 05s`, `1h 02m`. */
export function formatDuration(s: number): string {
  const t = Math.max(0, Math.round(s));
  if (t < 60) return `${t}s`;
  if (t < 3600) return `${Math.floor(t / 60)}m ${String(t % 60).padStart(2, '0')}s`;
  return `${Math.floor(t / 3600)}h ${String(Math.floor((t % 3600) / 60)).padStart(2, '0')}m`;
}

const kilo = (n: number) => (n >= 10_000 ? `${(n / 1000).toFixed(n >= 100_000 ? 0 : 1)}k` : String(n));

/** A progress reporter over units whose total is known up front (and may only be raised). */
export class Progress {
  private done = 0;
  private failed = 0;
  private cached = 0;
  private total: number;
  private calls = 0;
  private cachedCalls = 0;
  private inFlight = 0;
  private failedCalls = 0;
  private promptTokens = 0;
  private completionTokens = 0;
  private readonly unit: string;
  private readonly t0 = Date.now();
  private lastLine = 0;
  private bar?: cliProgress.SingleBar;
  private timer?: NodeJS.Timeout;
  private readonly plain: boolean;
  private readonly stream: NodeJS.WriteStream;
  private readonly intervalMs: number;
  private extra = '';
  private stopped = false;

  constructor(private readonly o: ProgressOptions) {
    this.stream = o.stream ?? process.stderr;
    this.unit = o.unit ?? 'papers';
    this.total = checkCount(o.total ?? 0, 'total');
    this.intervalMs = o.intervalMs ?? 5000;
    this.plain = o.plain ?? (!this.stream.isTTY || /^(1|true)$/i.test(process.env.CI ?? ''));
    if (o.silent) return;
    const period = this.plain ? this.intervalMs : 1000;
    if (period > 0) {
      this.timer = setInterval(() => this.heartbeat(), period);
      this.timer.unref();
    }
    if (this.total > 0) {
      this.startBar();
      this.render(true);
    }
  }

  private startBar(): void {
    if (this.plain || this.bar || this.o.silent) return;
    this.bar = new cliProgress.SingleBar(
      { format: `${this.o.label} [{bar}] {value}/{total} ${this.unit}{info}`, stream: this.stream, hideCursor: true, clearOnComplete: false, fps: 5 },
      cliProgress.Presets.shades_classic,
    );
    this.bar.start(this.total, this.done, { info: this.info() });
  }

  /**
   * Raise the expected total by n (an integer ≥ 0).
   * @throws RangeError for a negative or non-integer n (the total never shrinks)
   */
  add(n: number): void {
    this.total += checkCount(n, 'add(n)');
    if (this.bar) this.bar.setTotal(this.total);
    else if (this.total > 0) this.startBar();
    this.render(true);
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

  /** A live LLM call was started (it is in flight until {@link callEnd}). */
  callStart(): void {
    this.inFlight++;
    this.render();
  }

  /** A live LLM call ended: answered (with its token usage), failed, or aborted (neither). */
  callEnd(r: { promptTokens?: number; completionTokens?: number; failed?: boolean; aborted?: boolean } = {}): void {
    this.inFlight = Math.max(0, this.inFlight - 1);
    if (r.failed) this.failedCalls++;
    else if (!r.aborted) this.calls++;
    this.promptTokens += r.promptTokens ?? 0;
    this.completionTokens += r.completionTokens ?? 0;
    this.render();
  }

  /** One LLM call answered without a live request (`fromCache`), or a finished live call without usage. */
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
    return {
      total: this.total,
      done: this.done,
      failed: this.failed,
      cached: this.cached,
      calls: this.calls,
      cachedCalls: this.cachedCalls,
      inFlight: this.inFlight,
      failedCalls: this.failedCalls,
      promptTokens: this.promptTokens,
      completionTokens: this.completionTokens,
    };
  }

  /** ETA in seconds from the rate of units that did live work, or undefined while unknown. */
  eta(): number | undefined {
    const live = this.done - this.cached;
    const el = (Date.now() - this.t0) / 1000;
    if (live <= 0 || el <= 0) return undefined;
    return Math.max(0, (this.total - this.done) / (live / el));
  }

  /** The status line (as printed in plain mode). */
  line(): string {
    return `${this.o.label}: ${this.done}/${this.total} ${this.unit}${this.info()}`;
  }

  private info(): string {
    const parts: string[] = [];
    if (this.failed) parts.push(`${this.failed} failed`);
    const active = this.o.load ? Math.min(this.inFlight, this.o.load().active) : this.inFlight;
    const queued = this.inFlight - active;
    parts.push(`calls ${this.calls} done${this.cachedCalls ? ` (${this.cachedCalls} cached)` : ''}, ${active} in flight${queued ? `, ${queued} queued` : ''}${this.failedCalls ? `, ${this.failedCalls} failed` : ''}`);
    if (this.promptTokens || this.completionTokens) parts.push(`tokens ${kilo(this.promptTokens)} in / ${kilo(this.completionTokens)} out`);
    if (this.extra) parts.push(this.extra);
    parts.push(`${formatDuration((Date.now() - this.t0) / 1000)} elapsed`);
    if (this.done < this.total) {
      const eta = this.eta();
      parts.push(eta === undefined ? 'ETA ?' : `ETA ${formatDuration(eta)}`);
    }
    return ` | ${parts.join(' | ')}`;
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

  private heartbeat(): void {
    if (this.stopped) return;
    if (this.bar) this.bar.update(this.done, { info: this.info() });
    else if (this.plain && Date.now() - this.lastLine >= this.intervalMs * 0.9) this.print();
  }

  private print(): void {
    this.lastLine = Date.now();
    this.stream.write(`${this.line()}\n`);
  }

  private render(force = false): void {
    if (this.o.silent || this.stopped) return;
    if (this.bar) {
      this.bar.update(this.done, { info: this.info() });
      return;
    }
    if (!this.plain || this.total === 0) return;
    if (force || Date.now() - this.lastLine >= this.intervalMs) this.print();
  }

  /** Final line / bar stop (idempotent); stops the timer. */
  stop(): void {
    if (this.stopped) return;
    if (this.timer) clearInterval(this.timer);
    if (this.bar) {
      this.bar.update(this.done, { info: this.info() });
      this.bar.stop();
    } else if (!this.o.silent && this.plain) this.print();
    this.stopped = true;
  }
}
