/**
 * The judge watch of a training step (lib/train/trainer.ts): one abort signal for all the step's
 * reward calls, fired by the step's judge deadline (the judging stage's `judging.stepTimeoutMs`,
 * from the step's first reward call) or by a stop request (Ctrl-C), and the progress lines logged
 * while calls are in flight.
 */
import { abortError } from '../errors.js';

/** The judging of one step: its abort controller, start, calls and plans in flight, and its timers. */
interface StepJudging {
  ctrl: AbortController;
  started: number;
  inFlight: number;
  plans: number;
  stats0?: { requests: number; failures: number };
  deadline?: NodeJS.Timeout;
  ticker?: NodeJS.Timeout;
}

/** What a judge watch reads of its trainer. */
export interface JudgeWatchDeps {
  /** The judge's counters, for the progress lines (Judge.stats()). */
  judgeStats: () => { requests: number; failures: number } | undefined;
  /** Milliseconds between the progress lines while a step waits on the judge. */
  progressMs: () => number;
  /** Whether this process logs the progress lines (rank 0). */
  isMain: () => boolean;
  log: (line: string) => void;
}

/** One reward call of the step in flight, as {@link JudgeWatch.call} sees it. */
export interface JudgeCallOf {
  /** The step's name in the lines and errors, e.g. `[grpo] step 3`. */
  what: string;
  /** The step's judge deadline in milliseconds (0 = none), from its first reward call. */
  limitMs: number;
  /** The setting that sets the deadline, named in its error. */
  setting?: string;
  /** A stop was requested before this call: it is aborted at once. */
  stopRequested: boolean;
  /** Plans the call judges. */
  plans: number;
}

const STOP_REASON = 'stop requested (SIGINT) while the step waited on the judge';

/** The deadline and progress of the reward calls of one step at a time ({@link JudgeWatch.end} ends a step's). */
export class JudgeWatch {
  private judging?: StepJudging;

  constructor(private readonly deps: JudgeWatchDeps) {}

  /**
   * Runs `reward(signal)`, a reward call of the step in flight, under the step's judging signal
   * (`signal` too, when given): the step's first call starts the judge deadline; while calls are in
   * flight a progress line is logged every `progressMs` (elapsed seconds, calls and plans in flight,
   * the judge's requests and failures so far, the time left).
   * @throws the abort's reason (the deadline's Error naming its setting, or the stop request's
   *   ABORT error) when the step's signal fired, whatever the judge threw; else the judge's error.
   */
  async call<T>(c: JudgeCallOf, reward: (signal: AbortSignal) => Promise<T>, signal?: AbortSignal): Promise<T> {
    const { limitMs } = c;
    if (!this.judging) {
      const j: StepJudging = { ctrl: new AbortController(), started: Date.now(), inFlight: 0, plans: 0, stats0: this.deps.judgeStats() };
      if (limitMs > 0) {
        j.deadline = setTimeout(() => j.ctrl.abort(new Error(`the judge did not finish the step within ${c.setting} ${limitMs} ms`)), limitMs);
        j.deadline.unref();
      }
      this.judging = j;
    }
    const j = this.judging;
    if (c.stopRequested) j.ctrl.abort(abortError(STOP_REASON));
    j.inFlight++;
    j.plans += c.plans;
    if (!j.ticker && this.deps.isMain()) {
      j.ticker = setInterval(() => {
        const st = this.deps.judgeStats();
        const counts = st && j.stats0 ? `, ${st.requests - j.stats0.requests} judge requests, ${st.failures - j.stats0.failures} failed` : '';
        const left = limitMs > 0 ? `; deadline in ${Math.max(0, (limitMs - (Date.now() - j.started)) / 1000).toFixed(0)} s` : '';
        this.deps.log(
          `${c.what}: waiting on the judge for ${((Date.now() - j.started) / 1000).toFixed(0)} s (${j.inFlight} call(s), ${j.plans} plans in this step${counts}${left}; Ctrl-C stops with a checkpoint)`,
        );
      }, this.deps.progressMs());
      j.ticker.unref();
    }
    try {
      return await reward(signal ? AbortSignal.any([signal, j.ctrl.signal]) : j.ctrl.signal);
    } catch (e) {
      // The abort's reason (the deadline, the stop request) says why, whatever the judge threw.
      if (j.ctrl.signal.aborted && j.ctrl.signal.reason instanceof Error && e !== j.ctrl.signal.reason) throw j.ctrl.signal.reason;
      throw e;
    } finally {
      j.inFlight--;
      if (!j.inFlight && j.ticker) {
        clearInterval(j.ticker);
        j.ticker = undefined;
      }
    }
  }

  /** A stop request: the reward calls of the step in flight (if any) are aborted. */
  stop(): void {
    this.judging?.ctrl.abort(abortError(STOP_REASON));
  }

  /** Ends the step's judging (its deadline and progress timers). */
  end(): void {
    const j = this.judging;
    if (!j) return;
    clearTimeout(j.deadline);
    clearInterval(j.ticker);
    this.judging = undefined;
  }
}
