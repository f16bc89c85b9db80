/**
 * Progress display for long data runs: counts, cache hits and an ETA. A cli-progress bar on a
 * TTY; plain lines (at most one every `intervalMs`) when stderr is not a TTY or `CI=true`.
 */
import cliProgress from 'cli-progress';

export interface ProgressOptions {
  label: string;
  /** Force plain lines (default: not a TTY or CI set). */
  plain?: boolean;
  /** Silence entirely (tests). */
  silent?: boolean;
  intervalMs?: number;
  stream?: NodeJS.WriteStream;
}

/** A progress reporter over a growing total (totals may be raised as work is discovered). */
export class Progress {
  private done = 0;
  private cached = 0;
  private total = 0;
  private readonly t0 = Date.now();
  private lastLine = 0;
  private bar?: cliProgress.SingleBar;
  private readonly plain: boolean;
  private extra = '';

  constructor(private readonly o: ProgressOptions) {
    const stream = o.stream ?? process.stderr;
    this.plain = o.plain ?? (!stream.isTTY || /^(1|true)$/i.test(process.env.CI ?? ''));
    if (!o.silent && !this.plain) {
      this.bar = new cliProgress.SingleBar(
        { format: `${o.label} [{bar}] {value}/{total} calls | cached {cached} | {extra} | ETA {eta_formatted}`, stream, hideCursor: true, etaBuffer: 50, clearOnComplete: false },
        cliProgress.Presets.shades_classic,
      );
      this.bar.start(0, 0, { cached: 0, extra: '' });
    }
  }

  /** Raise the expected total by n. */
  add(n: number): void {
    this.total += n;
    this.bar?.setTotal(this.total);
    this.render();
  }

  /** One unit finished (`fromCache` ones do not count toward the rate). */
  tick(fromCache = false): void {
    this.done++;
    if (fromCache) this.cached++;
    this.render();
  }

  /** Free-text status (e.g. papers done). */
  status(s: string): void {
    this.extra = s;
    this.render();
  }

  /** ETA in seconds from the rate of uncached units, or undefined. */
  eta(): number | undefined {
    const live = this.done - this.cached;
    const el = (Date.now() - this.t0) / 1000;
    if (live <= 0 || el <= 0) return undefined;
    return Math.max(0, (this.total - this.done) / (live / el));
  }

  private render(force = false): void {
    if (this.o.silent) return;
    if (this.bar) {
      this.bar.update(this.done, { cached: this.cached, extra: this.extra });
      return;
    }
    const now = Date.now();
    if (!force && now - this.lastLine < (this.o.intervalMs ?? 5000) && this.done < this.total) return;
    this.lastLine = now;
    const eta = this.eta();
    (this.o.stream ?? process.stderr).write(`${this.o.label}: ${this.done}/${this.total} calls (${this.cached} cached)${this.extra ? `, ${this.extra}` : ''}${eta !== undefined ? `, ETA ${Math.round(eta)}s` : ''}\n`);
  }

  private stopped = false;
  /** Final line / bar stop (idempotent). */
  stop(): void {
    if (this.stopped) return;
    this.stopped = true;
    if (this.bar) this.bar.stop();
    else this.render(true);
  }
}
