/**
 * Step metrics: one JSON object per line in `<run>/metrics.jsonl`, a progress display (a
 * cli-progress bar with ETA in a TTY; plain lines under CI=true or without a TTY), and the final
 * summary table.
 */
import { appendFileSync, mkdirSync, existsSync, readFileSync, writeFileSync, renameSync } from 'node:fs';
import { dirname } from 'node:path';
import cliProgress from 'cli-progress';

/** One training step's record. Units: seconds, tokens/s, bytes; losses in nats. */
export interface StepMetrics {
  stage: string;
  step: number;
  globalStep: number;
  loss: number;
  lr: number;
  gradNorm: number;
  /** completionTokens / stepSeconds. */
  tokensPerSecond: number;
  completionTokens: number;
  /** Wall seconds of the step, the checkpoint written after it included (validation not). */
  stepSeconds: number;
  /**
   * Wall seconds per phase (lib/train/stages/stage.ts StepPhase): every phase of the stage, 0 when
   * it did not run, then optimizer, checkpoint, host; they add up to stepSeconds.
   */
  phaseSeconds: Record<string, number>;
  /** Extra stage-specific fields (jsd, reward mean/std, pass rates, kl, clipFraction, memory…). */
  [k: string]: unknown;
}

export class MetricsLog {
  /** `onRow`: sees every row after it is on disk (the experiment trackers, lib/train/trackers); must not throw. */
  constructor(
    readonly path: string,
    private readonly onRow?: (row: Record<string, unknown>) => void,
  ) {
    mkdirSync(dirname(path), { recursive: true });
  }
  /** Appends one record (synchronously: a crash never loses a logged step). */
  write(rec: Record<string, unknown>): void {
    const row = { time: new Date().toISOString(), ...rec };
    appendFileSync(this.path, JSON.stringify(row) + '\n');
    this.onRow?.(row);
  }
}

/**
 * Seconds left in a stage: the rate counts only the steps done by this process (`first` = the
 * stage step it started at — a resumed run starts mid-stage, and its earlier steps took no time
 * here). Units: seconds in, seconds out.
 */
export function etaSeconds(elapsedSeconds: number, step: number, first: number, total: number): number {
  const done = step - first;
  if (done <= 0) return NaN;
  return Math.max(0, (total - step) * (elapsedSeconds / done));
}

/**
 * Drops the rows of `metrics.jsonl` written after the checkpoint a run resumes from (global step
 * > `globalStep`) and a cut last line, so replayed steps are not logged twice. Rewrites the file
 * atomically; returns the number of rows dropped.
 */
export function truncateMetrics(path: string, globalStep: number): number {
  if (!existsSync(path)) return 0;
  const lines = readFileSync(path, 'utf8').split('\n');
  const keep: string[] = [];
  let dropped = 0;
  for (const line of lines) {
    if (!line.trim()) continue;
    try {
      const o = JSON.parse(line) as { globalStep?: unknown };
      if (typeof o.globalStep === 'number' && o.globalStep > globalStep) {
        dropped += 1;
        continue;
      }
      keep.push(line);
    } catch {
      dropped += 1;
    }
  }
  if (!dropped) return 0;
  const tmp = `${path}.tmp-${process.pid}`;
  writeFileSync(tmp, keep.map((l) => l + '\n').join(''));
  renameSync(tmp, path);
  return dropped;
}

/** True when a live progress bar should be drawn (TTY and not CI). */
export function interactive(stream: NodeJS.WriteStream = process.stderr): boolean {
  return Boolean(stream.isTTY) && !process.env.CI;
}

/** Progress per stage: a bar with ETA in a TTY, otherwise one plain line per update. */
export class Progress {
  private bar: cliProgress.SingleBar | undefined;
  private started = Date.now();
  private done = 0;
  private first = 0;
  constructor(
    private readonly stage: string,
    private readonly total: number,
    start = 0,
    private readonly out: NodeJS.WriteStream = process.stderr,
  ) {
    this.done = start;
    this.first = start;
    if (interactive(out) && total > 0) {
      this.bar = new cliProgress.SingleBar(
        {
          stream: out,
          format: `${stage.padEnd(5)} [{bar}] {value}/{total} | eta {eta_formatted} | {info}`,
          hideCursor: true,
        },
        cliProgress.Presets.shades_classic,
      );
      this.bar.start(total, start, { info: '' });
    }
  }
  /** Marks `step` done with a short info string (e.g. "loss 0.41 reward 0.62"). */
  update(step: number, info: string): void {
    const steps = step - this.done;
    this.done = step;
    if (this.bar) {
      this.bar.update(step, { info });
      return;
    }
    const el = (Date.now() - this.started) / 1000;
    const eta = etaSeconds(el, step, this.first, this.total);
    void steps;
    this.out.write(`[${this.stage}] step ${step}/${this.total} ${info} | elapsed ${el.toFixed(1)}s eta ${Number.isFinite(eta) ? `${eta.toFixed(1)}s` : '-'}\n`);
  }
  stop(): void {
    this.bar?.stop();
  }
}

/** Renders rows as an aligned text table (first row = header). */
export function table(rows: string[][]): string {
  const w = rows[0]!.map((_, i) => Math.max(...rows.map((r) => (r[i] ?? '').length)));
  const line = (r: string[]) => r.map((c, i) => c.padEnd(w[i]!)).join('  ');
  return [line(rows[0]!), w.map((n) => '-'.repeat(n)).join('  '), ...rows.slice(1).map(line)].join('\n');
}
