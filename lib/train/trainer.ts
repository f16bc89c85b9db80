/**
 * The two-stage schedule (docs/design.md §6): stages run in `config.stages` order, each a module behind
 * one interface (lib/train/stages/: `sft` cross-entropy on the reference answers, `opsd` on-policy
 * self-distillation, `grpo` rubric-reward GRPO). This file holds what they share: the step loop,
 * optimizer step and non-finite skip, metrics, validation, out-of-memory recovery, data-parallel
 * agreement, judge health and checkpoints. Beside it: the step's judge deadline and progress lines
 * (lib/train/judge-watch.ts), the checkpoint written beside the next step
 * (lib/train/checkpoint-writer.ts), the stage's best state on disk (lib/train/best-state.ts) and
 * the --profile-step kernel profile (lib/train/step-profile.ts).
 * Every `checkpoint.every` steps, at the end of the run and on SIGINT the adapter, optimizer, data cursor
 * and step counters are written atomically; `resume` continues exactly (all randomness is derived
 * from (seed, stage, step), so a resumed run replays the same samples and dropout masks).
 * Every step appends one line to metrics.jsonl with `phaseSeconds` (lib/train/stages/stage.ts
 * StepPhase): the stage's phases, the optimizer, the checkpoint written after the step and `host`,
 * adding up to `stepSeconds`. A step's lines are appended before its checkpoint (if any) is
 * committed, so a committed checkpoint always has its step's line: once the checkpoint's tensors
 * are copied to host memory when it is written beside the next step (`checkpoint.background`, the
 * default for periodic checkpoints: the step's checkpoint phase is that copy, and a
 * `checkpointWriteSeconds` row follows the commit), else once its files are written and synced.
 */
import { mkdirSync, writeFileSync, accessSync, constants, rmSync } from 'node:fs';
import { join } from 'node:path';
import type { TrainConfig, Stage } from '../config/train.js';
import type { TrainBackend, SamplingOptions } from './backend.js';
import { RUN_FILES, resolveCheckpoint, writeCheckpoint, writeFinalDir, type TrainerState } from './checkpoint.js';
import { MetricsLog, Progress, table } from './metrics.js';
import { studentMessages } from '../task/prompts.js';
import type { TaskItem, RewardFn, RewardResult } from '../task/types.js';
import type { AdvantageFn } from './advantages.js';
import { stageOf, type TrainingStage, type StageContext, type StepPhase, type StepResult } from './stages/index.js';
import { mulberry32 } from '../util/random.js';
import { addHealth, assertJudgeHealth, formatHealth, type JudgeHealth } from '../judge/types.js';
import { judgeLabel } from '../judge/backends/index.js';
import { DistContext, shard } from './dist.js';
import { ErrorCode, isPapergymError, oomError } from '../errors.js';
import { JudgeWatch } from './judge-watch.js';
import { CheckpointWriter } from './checkpoint-writer.js';
import { StepProfiler } from './step-profile.js';
import { bestValidation, bootstrapMean, type ValidationPoint } from './validation.js';
import { loadBestState, writeBestState, type BestStateRun } from './best-state.js';

/** The task's contracts (lib/task/types.ts) under the names the trainer's callers use. */
export type { TaskItem as TrainItem, RewardFn, RewardResult } from '../task/types.js';

export interface TrainerDeps {
  backend: TrainBackend;
  items: TaskItem[];
  reward: RewardFn;
  /** The reward of a stage that judges, mixed with its own α (its descriptor's `judging`); absent: {@link reward} for every stage. */
  rewardOf?: (stage: Stage) => RewardFn;
  /** Group advantages (native, docs/design.md §5; lib/train/advantages.ts groupAdvantages). */
  advantages: AdvantageFn;
  runDir: string;
  log?: (line: string) => void;
  /** Called after each checkpoint is complete (train rewrites report.html here); errors are logged, never fatal. */
  onCheckpoint?: (dir: string) => void | Promise<void>;
  /**
   * Out-of-memory advice: the flags that would fit, for the error when the smallest
   * setting (micro-batch 1, recompute on) still runs out of memory. Default: none.
   */
  memoryAdvice?: () => string;
  /** Data parallelism (lib/train/dist.ts): this rank's group; absent = one process. */
  dist?: DistContext;
  /** The judge's counters, for the progress lines while a step waits on it (Judge.stats()). */
  judgeStats?: () => { requests: number; failures: number };
  /** Milliseconds between the progress lines while a step waits on the judge (default 15000). */
  judgeProgressMs?: number;
  /** Sees every metrics.jsonl row after it is written (the --report-to trackers); must not throw. */
  onMetrics?: (row: Record<string, unknown>) => void;
}

/** Seed of (run seed, stage, step, purpose, unit): per question / sampling chunk, the same on every rank. */
export function unitSeed(seed: number, stageIndex: number, step: number, purpose: number, unit: number): number {
  return unit === 0 ? stepSeed(seed, stageIndex, step, purpose) : stepSeed(stepSeed(seed, stageIndex, step, purpose), unit, 0x5eed, 0);
}

export interface TrainSummary {
  runDir: string;
  stages: {
    stage: Stage;
    index: number;
    steps: number;
    firstLoss: number;
    lastLoss: number;
    lastReward?: number;
    /** The best validation score (lib/train/validation.ts: above the best so far by more than validation.earlyStopThreshold). */
    bestValidation?: number;
    /**
     * The stage's best validation: stage step, global step, score and interval, the dir of its
     * adapter (`best/<stage>`), and whether the stage ended on it (validation.loadBestAtEnd: the
     * next stage, or final/, started from this adapter).
     */
    best?: { step: number; globalStep: number; score: number; ci?: [number, number]; dir: string; loaded: boolean };
    stoppedEarly: boolean;
    /**
     * Steps whose update was skipped (non-finite loss or gradient: the gradients zeroed, the
     * adapter unchanged; as accelerate's optimizer_step_was_skipped), and the last one's loss and
     * gradient norm as logged. Absent in summaries written before it was counted.
     */
    skippedSteps?: number;
    lastSkip?: string;
  }[];
  globalStep: number;
  /** Skipped steps of all stages (each stage's `skippedSteps`). */
  skippedSteps?: number;
  /** True when the run took steps and every one of them was skipped: no update reached the adapter. */
  noUpdate?: boolean;
  interrupted: boolean;
  wallSeconds: number;
}

/** Seed of (run seed, stage index, step, purpose), a 31-bit integer. */
export function stepSeed(seed: number, stageIndex: number, step: number, purpose: number): number {
  let h = 2166136261 >>> 0;
  for (const v of [seed, stageIndex, step, purpose]) {
    h = Math.imul(h ^ (v & 0xffff), 16777619) >>> 0;
    h = Math.imul(h ^ (v >>> 16), 16777619) >>> 0;
  }
  return h & 0x7fffffff;
}

/** Deterministic epoch order of `n` items. */
export function epochOrder(n: number, seed: number, epoch: number): number[] {
  const r = mulberry32(stepSeed(seed, 0xdead, epoch, 7));
  const idx = Array.from({ length: n }, (_, i) => i);
  for (let i = n - 1; i > 0; i--) {
    const j = Math.floor(r() * (i + 1));
    [idx[i], idx[j]] = [idx[j]!, idx[i]!];
  }
  return idx;
}

/** Takes `k` items from the cursor, crossing epochs; returns items and the advanced cursor. */
export function takeItems<T>(
  items: T[],
  k: number,
  seed: number,
  cursor: { epoch: number; position: number },
): { batch: T[]; cursor: { epoch: number; position: number } } {
  if (!items.length) throw new Error('no training items');
  const out: T[] = [];
  let { epoch, position } = cursor;
  let order = epochOrder(items.length, seed, epoch);
  while (out.length < k) {
    if (position >= items.length) {
      epoch += 1;
      position = 0;
      order = epochOrder(items.length, seed, epoch);
    }
    out.push(items[order[position]!]!);
    position += 1;
  }
  return { batch: out, cursor: { epoch, position } };
}

/**
 * The progress line's phase times, every phase of the line in its order (zeros included, so
 * successive lines align): "rollout 15.2s judge 11.2s reference 1.5s update 10.7s optimizer 0.1s
 * checkpoint 0.0s host 0.3s". Seconds in, text out.
 */
export function formatPhases(phases: Record<string, number>): string {
  return Object.entries(phases)
    .map(([k, v]) => `${k} ${v.toFixed(1)}s`)
    .join(' ');
}

/**
 * The phaseSeconds keys of a step line of `stage`, in order: the stage's own phases, `allreduce`
 * with more than one process, then `optimizer`, `checkpoint`, `host` (lib/train/stages/stage.ts StepPhase).
 */
export function stepPhases(stage: { phases: readonly StepPhase[] }, worldSize = 1): StepPhase[] {
  return [...stage.phases, ...(worldSize > 1 ? (['allreduce'] as const) : []), 'optimizer', 'checkpoint', 'host'];
}

/** A finished step's metrics lines and progress line, held until its checkpoint (if any) is timed. */
interface PendingStep {
  /** The step line; `phaseSeconds.checkpoint`, `stepSeconds` and `tokensPerSecond` are completed at the flush. */
  record: Record<string, unknown> & { phaseSeconds: Record<string, number>; stepSeconds: number; completionTokens: number; tokensPerSecond: number };
  /** Lines of the same step written after it (validation, early stop). */
  extra: Record<string, unknown>[];
  /** Shows the progress line (given the completed phases and what validation adds to it). */
  show: (phases: Record<string, number>, note: string) => void;
  /** Added to the progress line (the validation of the step: its score, interval and the best step). */
  note: string;
  /** After the flush (the run's last step: the stage's progress display is stopped). */
  after?: () => void;
}

/** A stage in flight (Trainer.run → startStage, then runStep per step). */
interface StageRun {
  stage: Stage;
  impl: TrainingStage;
  /** Steps of the stage. */
  total: number;
  /** Its row of the run summary. */
  rec: TrainSummary['stages'][number];
  progress: { update(step: number, text: string): void; stop(): void };
  /** Non-finite steps in a row. */
  nonFinite: number;
}

/** Checks the run dir is writable before any compute; throws naming it. */
export function ensureWritableDir(dir: string): void {
  try {
    mkdirSync(dir, { recursive: true });
    accessSync(dir, constants.W_OK);
    const probe = join(dir, `.write-probe-${process.pid}`);
    writeFileSync(probe, '');
    rmSync(probe);
  } catch (e) {
    throw new Error(`output dir ${dir} is not writable: ${(e as Error).message}`);
  }
}

const MAX_CONSECUTIVE_NONFINITE = 3;

/**
 * A run that stopped on a failed step (judge unhealthy or failing, a backend error): the state
 * before that step was checkpointed (when possible) and `resumeCommand` continues the run.
 */
export class TrainingStoppedError extends Error {
  constructor(
    message: string,
    readonly checkpoint: string | undefined,
    readonly resumeCommand: string,
    options?: { cause?: unknown },
  ) {
    super(message, options);
    this.name = 'TrainingStoppedError';
  }
}

/** Sum of the judge health records of `rewards` (undefined when none carries one). */
export function stepJudgeHealth(rewards: RewardResult[]): JudgeHealth | undefined {
  let h: JudgeHealth | undefined;
  for (const r of rewards) if (r.judge) h = h ? addHealth(h, r.judge) : { ...r.judge };
  return h;
}

/**
 * Runs `config.stages` over a TrainBackend (see the module doc). Construct with a resume state
 * from `resolveCheckpoint` to continue a run; `run()` resolves with the summary or rejects on a
 * fatal error (repeated non-finite steps, a failing judge) after the last checkpoint.
 */
export class Trainer {
  private state: TrainerState;
  private stopRequested = false;
  /** Data parallel: the ranks' stop agreement of the step in flight (recordStep), acted on by checkpointAfterStep. */
  private stopAgreed = false;
  private warnedNoProb = false;
  private readonly metrics: MetricsLog;
  private readonly started = Date.now();
  private readonly summary: TrainSummary['stages'];

  /** The view of this trainer a stage step works through (lib/train/stages/stage.ts). */
  private readonly ctx: StageContext = (() => {
    const t = this;
    return {
      get cfg() {
        return t.cfg;
      },
      get backend() {
        return t.deps.backend;
      },
      get dist() {
        return t.dist;
      },
      get reward(): RewardFn {
        return (reqs, signal) => t.judgeCall(reqs, signal);
      },
      get advantages() {
        return t.deps.advantages;
      },
      get stageStep() {
        return t.state.stageStep;
      },
      take: (k) => t.take(k),
      sampling: (n, purpose, unit) => t.sampling(n, purpose, unit),
      timed: (phase, f) => t.timed(phase, f),
      allRanks: (what, f) => t.allRanks(what, f),
      allRanksGather: (what, f, share) => t.allRanksGather(what, f, share),
      gather: (x) => t.gather(x),
      sumRanks: (x) => t.sumRanks(x),
      updateWithOomRecovery: (stage, body) => t.updateWithOomRecovery(stage, body),
      checkJudgeHealth: (rewards, what) => t.checkJudgeHealth(rewards, what),
      log: (line) => t.log(line),
    };
  })();

  constructor(
    private readonly cfg: TrainConfig,
    private readonly deps: TrainerDeps,
    resumeState?: TrainerState,
  ) {
    // A resumed state carries the config this trainer runs (its out-of-memory recovery and the
    // pinned rollout rows then reach the next checkpoints).
    this.state = resumeState
      ? { ...resumeState, config: cfg }
      : {
          version: 1,
          stageIndex: 0,
          stageStep: 0,
          globalStep: 0,
          cursor: { epoch: 0, position: 0 },
          validation: [],
          stageDone: false,
          seed: cfg.seed,
          config: cfg,
          wallSeconds: 0,
        };
    this.metrics = new MetricsLog(join(deps.runDir, 'metrics.jsonl'), deps.onMetrics);
    this.baseWall = this.state.wallSeconds;
    // JSON turns NaN into null: restore it.
    this.summary =
      (this.state.summary as TrainSummary['stages'] | undefined)?.map((r) => ({ ...r, firstLoss: r.firstLoss ?? NaN, lastLoss: r.lastLoss ?? NaN })) ?? [];
  }

  /** Wall seconds per phase of the step in flight: every key of stepPhases() of its stage, from 0. */
  private phases: Record<string, number> = {};
  /** The kernel profile of the --profile-step (lib/train/step-profile.ts). */
  private readonly profiler = new StepProfiler({
    backend: () => this.deps.backend,
    cfg: () => this.cfg,
    runDir: () => this.deps.runDir,
    dist: () => this.dist,
    stage: () => this.cfg.stages[this.state.stageIndex],
    log: (line) => this.log(line),
  });

  /** StageContext.timed: `f`'s wall seconds added to `phase` of the step in flight, under the kernel profiler on the --profile-step. */
  private async timed<T>(phase: StepPhase, f: () => Promise<T>): Promise<T> {
    if (!(phase in this.phases) || phase === 'checkpoint' || phase === 'host') {
      throw new Error(
        `phase '${phase}' is not a timed phase of the ${this.cfg.stages[this.state.stageIndex]} step (it times: ${Object.keys(this.phases)
          .filter((k) => k !== 'checkpoint' && k !== 'host')
          .join(', ')}); add it to the stage's phases`,
      );
    }
    const profile = this.profiler.startPhase();
    const t0 = performance.now();
    try {
      return await f();
    } finally {
      this.phases[phase] = this.phases[phase]! + (performance.now() - t0) / 1000;
      if (profile) this.profiler.stopPhase(phase);
    }
  }

  /** The last step's lines until they are written (flushStep). */
  private pending: PendingStep | undefined;

  /**
   * Writes the pending step's lines (rank 0) and shows its progress line, with `checkpointSeconds`
   * (the checkpoint written after the step) added to its checkpoint phase and its stepSeconds.
   * No-op when nothing is pending.
   */
  private flushStep(checkpointSeconds = 0): void {
    const p = this.pending;
    if (!p) return;
    this.pending = undefined;
    const r = p.record;
    r.phaseSeconds.checkpoint = (r.phaseSeconds.checkpoint ?? 0) + checkpointSeconds;
    r.stepSeconds += checkpointSeconds;
    r.tokensPerSecond = r.completionTokens / r.stepSeconds;
    if (this.dist.isMain) for (const line of [r, ...p.extra]) this.metrics.write(line);
    p.show(r.phaseSeconds, p.note);
    p.after?.();
  }

  /**
   * Asks the loop to stop after the step in flight; a checkpoint is written first. A step waiting
   * on the judge stops at once: its judge calls are aborted and the checkpoint is the state before
   * it (--resume redoes it).
   */
  requestStop(): void {
    this.stopRequested = true;
    this.judgeWatch.stop();
  }

  /** The deadline and progress lines of the step's reward calls (lib/train/judge-watch.ts). */
  private readonly judgeWatch = new JudgeWatch({
    judgeStats: () => this.deps.judgeStats?.(),
    progressMs: () => this.deps.judgeProgressMs ?? 15000,
    isMain: () => this.dist.isMain,
    log: (line) => this.log(line),
  });

  /** A reward call of the step in flight, under the step's judge deadline and progress lines ({@link JudgeWatch.call}). */
  private async judgeCall(reqs: Parameters<RewardFn>[0], signal?: AbortSignal): Promise<RewardResult[]> {
    const stage = this.cfg.stages[this.state.stageIndex]!;
    const judging = stageOf(stage).judging;
    return this.judgeWatch.call(
      {
        what: `[${stage}] step ${this.state.stageStep + 1}`,
        limitMs: judging?.stepTimeoutMs(this.cfg) ?? 0,
        setting: judging?.stepTimeoutSetting,
        stopRequested: this.stopRequested,
        plans: reqs.length,
      },
      (s) => (this.deps.rewardOf?.(stage) ?? this.deps.reward)(reqs, s),
      signal,
    );
  }

  private get dist(): DistContext {
    return this.deps.dist ?? (this.singleDist ??= DistContext.single());
  }
  private singleDist: DistContext | undefined;

  private get trainItems(): TaskItem[] {
    const t = this.deps.items.filter((i) => i.split === 'train');
    return t.length ? t : this.deps.items;
  }
  private get valItems(): TaskItem[] {
    return this.deps.items.filter((i) => i.split === 'val').slice(0, this.cfg.validation.items);
  }

  private log(line: string): void {
    (this.deps.log ?? ((l: string) => process.stderr.write(l + '\n')))(line);
  }

  /** Wall seconds of the run, across resumes. */
  private wall(): number {
    return this.baseWall + (Date.now() - this.started) / 1000;
  }
  private readonly baseWall: number = 0;

  /** The checkpoint written beside the next step (`checkpoint.background`; lib/train/checkpoint-writer.ts). */
  private readonly writer = new CheckpointWriter({
    runDir: () => this.deps.runDir,
    writeMetrics: (row) => this.metrics.write(row),
    afterCommit: (dir, note) => this.afterCommit(dir, note),
    stageOf: (state) => this.cfg.stages[state.stageIndex],
    stopped: (e, what) => this.checkpointStopped(e, what),
  });

  /**
   * The error that ends a run whose checkpoint could not be written: what failed (the file and
   * errno are in `e`), the last complete checkpoint, which stands, and the resume command.
   */
  private checkpointStopped(e: unknown, what: string): TrainingStoppedError {
    if (e instanceof TrainingStoppedError) return e;
    const resumeCommand = `papergym-native train --resume ${this.deps.runDir}`;
    let last: string | undefined;
    try {
      last = resolveCheckpoint(this.deps.runDir).dir;
    } catch {
      last = undefined;
    }
    const next = last ? `the last complete checkpoint stands: ${last}\nresume with: ${resumeCommand}` : 'no checkpoint of this run is complete: run it again';
    return new TrainingStoppedError(`${what} failed: ${(e as Error)?.message ?? String(e)}\n${next}`, last, resumeCommand, { cause: e });
  }

  /**
   * Writes a checkpoint of the current state. A pending step's lines are written with this
   * checkpoint's seconds (up to its commit) just before the commit, or — when the checkpoint
   * fails — before the error propagates.
   *
   * With `checkpoint.background` (the default) and a backend that can capture its state, a
   * checkpoint that is not the run's last (`wait` false) costs the step only the copy of its
   * tensors into host memory (TrainBackend.captureState): the step's lines are written with that
   * copy's seconds, and the files are written, synced and committed (writeCheckpoint: the same
   * atomic sequence) while the next step runs. One write at a time: the next checkpoint, a stop or
   * the end of the run waits for it first; its failure stops the run at the next step. A kill
   * during it leaves `latest` naming the previous checkpoint, as a kill during any write does.
   * Returns the dir, or '' for a background write (its dir is logged when it is committed).
   */
  private async checkpoint(opts: { wait?: boolean } = {}): Promise<string> {
    const t0 = performance.now();
    const flush = () => this.flushStep((performance.now() - t0) / 1000);
    let dir: string;
    try {
      this.state.wallSeconds = this.wall();
      this.state.summary = this.summary;
      // Data parallel: every rank holds the same adapter, optimizer and cursor; rank 0 writes.
      if (!this.dist.isMain) return '';
      await this.writer.settle();
      const saveTotalLimit = this.cfg.checkpoint.saveTotalLimit ?? null;
      const { backend } = this.deps;
      if (opts.wait === false && this.cfg.checkpoint.background !== false && backend.captureState) {
        const captured = await backend.captureState();
        const captureSeconds = (performance.now() - t0) / 1000;
        flush();
        // A deep copy: the next step updates the summary rows and the validation list in place
        // while trainer_state.json is still to be written.
        this.writer.start(structuredClone(this.state), captured, captureSeconds, saveTotalLimit);
        return '';
      }
      dir = await writeCheckpoint(this.deps.runDir, { ...this.state }, (tmp) => backend.saveState(tmp), { saveTotalLimit, beforeCommit: flush });
    } finally {
      flush();
    }
    await this.afterCommit(dir);
    return dir;
  }

  /** The log line and the onCheckpoint hook of a committed checkpoint. */
  private async afterCommit(dir: string, note = ''): Promise<void> {
    this.log(`checkpoint ${dir}${note}`);
    if (this.deps.onCheckpoint) {
      try {
        await this.deps.onCheckpoint(dir);
      } catch (e) {
        this.log(`after checkpoint: ${(e as Error).message}`);
      }
    }
  }

  /** Runs the remaining stages; resolves with the summary (interrupted = stopped by a signal). */
  async run(): Promise<TrainSummary> {
    try {
      return await this.runStages();
    } catch (e) {
      // A checkpoint still being written beside the failed step completes before the error
      // propagates (its own failure is logged: the run's error is the one reported).
      await this.writer.settle().catch((we) => this.log((we as Error).message));
      throw e;
    }
  }

  private async runStages(): Promise<TrainSummary> {
    for (; this.state.stageIndex < this.cfg.stages.length; this.state.stageIndex++) {
      const s = this.startStage();
      while (!this.state.stageDone && this.state.stageStep < s.total) {
        const interrupted = await this.runStep(s);
        if (interrupted) return interrupted;
      }
      await this.endStage(s);
      if (this.state.stageIndex === this.cfg.stages.length - 1) break;
    }
    this.state.stageIndex = this.cfg.stages.length;
    try {
      await this.checkpoint();
    } catch (e) {
      throw this.checkpointStopped(e, 'the final checkpoint');
    }
    // final/ is written whole or not at all (a temp dir renamed in); --resume rewrites a missing one from the checkpoint.
    if (this.dist.isMain)
      try {
        await writeFinalDir(this.deps.runDir, (dir) => this.deps.backend.saveState(dir));
      } catch (e) {
        throw this.checkpointStopped(e, `writing ${join(this.deps.runDir, 'final')} (the run's checkpoint is complete: --resume rewrites final/ from it)`);
      }
    return this.finish(false);
  }

  /** The stage at stageIndex starts (or resumes): a fresh AdamW, its `begin` on a fresh start, its summary row, its progress display. */
  private startStage(): StageRun {
    const stage = this.cfg.stages[this.state.stageIndex]!;
    const impl = stageOf(stage);
    const total = impl.steps(this.cfg);
    const fresh = this.state.stageStep === 0 && !this.state.stageDone;
    this.deps.backend.resetOptimizer(impl.lr(this.cfg), total);
    if (fresh) impl.begin?.(this.ctx);
    let rec = this.summary.find((r) => r.index === this.state.stageIndex);
    if (!rec) {
      rec = { stage, index: this.state.stageIndex, steps: 0, firstLoss: NaN, lastLoss: NaN, stoppedEarly: false, skippedSteps: 0 };
      this.summary.push(rec);
    }
    if (total === 0 && fresh && this.dist.isMain) this.log(`[${stage}] 0 steps: stage skipped`);
    const ps = this.cfg.log.profileStep ?? 0;
    if (ps > total && total > 0 && this.state.stageStep < total && this.dist.isMain)
      this.log(`[${stage}] --profile-step ${ps}: beyond this stage's ${total} steps, nothing profiled in it`);
    const progress = this.dist.isMain ? new Progress(stage, total, this.state.stageStep) : { update: () => {}, stop: () => {} };
    return { stage, impl, total, rec, progress, nonFinite: 0 };
  }

  /** Stage end: its progress display stops (the run's last step still pending: after the final checkpoint), its best state is taken up (loadBestAtEnd); the next stage starts fresh. */
  private async endStage(s: StageRun): Promise<void> {
    if (!this.pending) s.progress.stop();
    try {
      await this.loadBestAtEnd(s);
    } catch (e) {
      throw await this.stopWithCheckpoint(e, `[${s.stage}] taking up the best state at the end of the stage`);
    }
    this.state.stageStep = 0;
    this.state.stageDone = false;
    this.state.validation = [];
  }

  /**
   * One step of the stage in flight: the stage's step, the update, the step's lines, validation and
   * the checkpoint after it. Resolves with the summary when a stop request ended the run, else undefined.
   */
  private async runStep(s: StageRun): Promise<TrainSummary | undefined> {
    // Step seconds from here to the end of the optimizer step, plus the checkpoint after it
    // (flushStep); validation is not in them (its line carries its own seconds).
    await this.writer.beforeStep();
    const t0 = performance.now();
    const step = this.state.stageStep;
    // The step's collective counters start here (not the rendezvous' nor the last validation's).
    this.dist.takeReduceStats();
    // Dropout masks: (seed, stage, step, rank); rank 0 keeps the one-process stream.
    this.deps.backend.seedStep(this.dropoutSeed());
    this.phases = Object.fromEntries(stepPhases(s.impl, this.dist.worldSize).map((k) => [k, 0]));
    this.profiler.beginStep(s.stage, step);
    const m = await this.stepOfStage(s, step);
    if (!m) return this.finish(true);
    const u = await this.applyUpdate(s, step, m);
    await this.recordStep(s, step, m, u, (performance.now() - t0) / 1000);
    if (u.fatal) {
      // The checkpoint is the state before this step (its cursor consumed), as before; the
      // step's line is written with it.
      await this.checkpoint();
      s.progress.stop();
      throw new Error(`${s.stage}: ${s.nonFinite} consecutive non-finite steps; stopped (checkpoint written)`);
    }
    s.impl.afterStep?.(this.ctx, u.skipped);
    this.state.stageStep += 1;
    this.state.globalStep += 1;
    if (Number.isNaN(s.rec.firstLoss)) s.rec.firstLoss = m.loss;
    s.rec.lastLoss = m.loss;
    if (typeof m.rewardMean === 'number') s.rec.lastReward = m.rewardMean as number;
    s.rec.steps = this.state.stageStep;
    if (u.skipped) {
      s.rec.skippedSteps = (s.rec.skippedSteps ?? 0) + 1;
      s.rec.lastSkip = `${s.stage} step ${step + 1}: loss ${m.loss}, grad norm ${u.gradNorm}`;
    }
    await this.validateAfterStep(s);
    return this.checkpointAfterStep(s);
  }

  /**
   * The stage's step. On a failure nothing of the step is kept (the cursor goes back; the checkpoint
   * is the state before it, so --resume redoes it) and the run stops with a checkpoint; a stop request
   * that aborted the judge writes that checkpoint and resolves undefined (an interrupted run).
   */
  private async stepOfStage(s: StageRun, step: number): Promise<StepResult | undefined> {
    const cursorBefore = { ...this.state.cursor };
    try {
      // Data parallel: a step's rank-local phases end in allRanks(), so a failure on one rank
      // (judge, OOM, a backend error) makes every rank throw here at the same step.
      const m = await s.impl.step(this.ctx);
      this.judgeWatch.end();
      return m;
    } catch (e) {
      this.judgeWatch.end();
      this.state.cursor = cursorBefore;
      this.deps.backend.zeroGrad();
      s.progress.stop();
      if (this.stopRequested && isPapergymError(e, ErrorCode.ABORT)) {
        // Ctrl-C while the step waited on the judge: an interrupted run, not a failure.
        this.log(`[${s.stage}] step ${step + 1}: stopped while judging; writing a checkpoint of the state before it (--resume redoes the step)`);
        await this.checkpoint();
        return undefined;
      }
      throw await this.stopWithCheckpoint(e, `[${s.stage}] step ${step + 1}`);
    }
  }

  /**
   * The update of a step: the ranks' gradients summed (data parallel), clipping and AdamW; a
   * non-finite loss or gradient skips it (zeroed), and MAX_CONSECUTIVE_NONFINITE skips in a row are fatal.
   */
  private async applyUpdate(s: StageRun, step: number, m: StepResult): Promise<{ skipped: boolean; fatal: boolean; gradNorm: number; lr: number }> {
    const { backend } = this.deps;
    let gradNorm = NaN;
    let lr = NaN;
    let skipped = false;
    if (!Number.isFinite(m.loss)) {
      skipped = true;
    } else {
      // Data parallel: sum the ranks' LoRA grads (each already a share of the global mean).
      if (this.dist.worldSize > 1) await this.timed('allreduce', () => this.dist.reduceGradients(m.gradScale ?? 1));
      const r = await this.timed('optimizer', () => backend.optimizerStep(this.cfg.optim.maxGradNorm));
      gradNorm = r.gradNorm;
      lr = r.lr;
      if (r.skipped || !Number.isFinite(gradNorm)) skipped = true;
    }
    let fatal = false;
    if (skipped) {
      backend.zeroGrad();
      s.nonFinite += 1;
      this.log(`[${s.stage}] step ${step + 1}: non-finite loss or gradient (loss ${m.loss}, grad norm ${gradNorm}); step skipped`);
      fatal = s.nonFinite >= MAX_CONSECUTIVE_NONFINITE;
    } else {
      s.nonFinite = 0;
    }
    return { skipped, fatal, gradNorm, lr };
  }

  /** The step's metrics line and progress line, held as pending until its checkpoint (if any) is timed; the kernel profile when it is the profiled step. */
  private async recordStep(
    s: StageRun,
    step: number,
    m: StepResult,
    u: { skipped: boolean; fatal: boolean; gradNorm: number; lr: number },
    secs: number,
  ): Promise<void> {
    const { gradScale: _gs, ...mOut } = m;
    // Data parallel: one all-gather at the end of the step carries the ranks' step seconds
    // (metrics) and their stop requests (a signal may reach the ranks at different times): the
    // stop agreed here is the one checkpointAfterStep acts on, so a signal arriving later on one
    // rank (during the checkpoint or validation) waits for the next step's agreement.
    let distStats = {};
    this.stopAgreed = false;
    if (this.dist.worldSize > 1) {
      const ends = await this.dist.allGather({ secs, stop: this.stopRequested });
      this.stopAgreed = ends.some((e) => e.stop);
      distStats = { worldSize: this.dist.worldSize, ...this.dist.takeReduceStats(), stepSecondsPerRank: ends.map((e) => e.secs) };
    }
    const phaseSeconds = { ...this.phases };
    // `host`: the rest of the step (prompt building, advantages, bookkeeping), so the phases add up to stepSeconds.
    phaseSeconds.host = Math.max(0, secs - Object.values(phaseSeconds).reduce((a, b) => a + b, 0));
    const record = {
      ...mOut,
      ...distStats,
      stage: s.stage,
      step: step + 1,
      globalStep: this.state.globalStep + 1,
      lr: u.lr,
      gradNorm: u.gradNorm,
      skipped: u.skipped,
      // Wall seconds of the step including the checkpoint written after it (added at the flush).
      stepSeconds: secs,
      tokensPerSecond: m.completionTokens / secs,
      phaseSeconds,
      memory: this.deps.backend.memory(),
    };
    this.profiler.endStep(s.stage, step + 1, phaseSeconds);
    const health = m.judge as JudgeHealth | undefined;
    const show = (phases: Record<string, number>, note: string) => {
      if ((step + 1) % Math.max(1, this.cfg.log.every) === 0 || step + 1 === s.total || u.fatal || note)
        s.progress.update(
          step + 1,
          `loss ${m.loss.toFixed(4)}${typeof m.rewardMean === 'number' ? ` reward ${(m.rewardMean as number).toFixed(3)}` : ''}${health ? ` ${formatHealth(health)}` : ''} ${formatPhases(phases)}${note}`,
        );
    };
    this.pending = { record, extra: [], show, note: '' };
  }

  /**
   * Validation every `validation.validateEvery` steps (its line joins the step's, with the bootstrap
   * interval of its mean), the stage's best state and its early stop (lib/train/validation.ts): a
   * new best — above the best by more than `validation.earlyStopThreshold` — writes the adapter to
   * `best/<stage>/` (with best.json) before the step's checkpoint; the stage ends once
   * `earlyStopPatience` validations in a row brought no new best.
   */
  private async validateAfterStep(s: StageRun): Promise<void> {
    if (!(this.cfg.validation.validateEvery > 0 && this.state.stageStep % this.cfg.validation.validateEvery === 0 && this.valItems.length)) return;
    let v: { score: number; ci: [number, number]; items: number };
    const tv = performance.now();
    try {
      v = await this.validate();
    } catch (e) {
      // The checkpoint of stopWithCheckpoint writes this step's line (and progress line) first.
      const stopped = await this.stopWithCheckpoint(e, `[${s.stage}] validation after step ${this.state.stageStep}`);
      s.progress.stop();
      throw stopped;
    }
    const point: ValidationPoint = { step: this.state.stageStep, score: v.score, ci: v.ci };
    this.state.validation.push(point);
    const best = bestValidation(this.state.validation, this.cfg.validation.earlyStopThreshold ?? 0)!;
    const isBest = best.point === point;
    if (isBest) {
      const dir = join(this.deps.runDir, RUN_FILES.best, s.stage);
      try {
        if (this.dist.isMain) await writeBestState(this.bestStateRun(), s.stage, point, this.state.globalStep);
      } catch (e) {
        const stopped = await this.stopWithCheckpoint(e, `[${s.stage}] writing the best state ${dir} after step ${this.state.stageStep}`);
        s.progress.stop();
        throw stopped;
      }
      s.rec.bestValidation = v.score;
      s.rec.best = { step: point.step, globalStep: this.state.globalStep, score: v.score, ci: v.ci, dir, loaded: false };
    }
    this.pending!.extra.push({
      stage: s.stage,
      step: this.state.stageStep,
      globalStep: this.state.globalStep,
      validation: v.score,
      validationCI: v.ci,
      validationItems: v.items,
      bestStep: best.point.step,
      ...(isBest && { newBest: true }),
      sinceBest: best.sinceBest,
      validationSeconds: (performance.now() - tv) / 1000,
    });
    this.pending!.note += ` | val ${v.score.toFixed(3)} [${v.ci[0].toFixed(3)}, ${v.ci[1].toFixed(3)}] best: step ${best.point.step}${isBest ? ' (new)' : ''}`;
    const K = s.impl.earlyStopPatience?.(this.cfg) ?? 0;
    if (K > 0 && best.sinceBest >= K) {
      this.log(
        `[${s.stage}] ${K} validation(s) in a row without a new best (above ${best.point.score.toFixed(4)} at step ${best.point.step} by more than ${this.cfg.validation.earlyStopThreshold ?? 0}); ending ${s.stage.toUpperCase()} at step ${this.state.stageStep}`,
      );
      this.state.stageDone = true;
      s.rec.stoppedEarly = true;
      this.pending!.extra.push({
        stage: s.stage,
        step: this.state.stageStep,
        globalStep: this.state.globalStep,
        event: 'early_stop',
        bestStep: best.point.step,
      });
    }
  }

  /** What the stage's best state (lib/train/best-state.ts) reads of the run. */
  private bestStateRun(): BestStateRun {
    return {
      runDir: this.deps.runDir,
      backend: this.deps.backend,
      dist: this.dist,
      earlyStopThreshold: this.cfg.validation.earlyStopThreshold ?? 0,
      log: (line) => this.log(line),
      writeMetrics: (row) => this.metrics.write(row),
    };
  }

  /** The stage's best validation's adapter taken up at its end, with validation.loadBestAtEnd (lib/train/best-state.ts loadBestState). */
  private async loadBestAtEnd(s: StageRun): Promise<void> {
    if (this.cfg.validation.loadBestAtEnd === false || !this.state.validation.length) return;
    await loadBestState(this.bestStateRun(), {
      stage: s.stage,
      validation: this.state.validation,
      lastStep: this.state.stageStep,
      globalStep: this.state.globalStep,
      next: this.cfg.stages[this.state.stageIndex + 1],
      rec: s.rec,
    });
  }

  /**
   * The checkpoint every `checkpoint.every` steps (the run's last step waits for the final one), the
   * ranks' agreement on a stop request (then a checkpoint and the interrupted summary), and the
   * step's lines written. Resolves with the summary when the run stops here.
   */
  private async checkpointAfterStep(s: StageRun): Promise<TrainSummary | undefined> {
    let saved = false;
    // The run's last step: its checkpoint is the final one written after the stage loop (one
    // checkpoint of this step, not two), and the step's lines wait for it.
    const runEnds = (this.state.stageDone || this.state.stageStep >= s.total) && this.state.stageIndex === this.cfg.stages.length - 1;
    if (!runEnds && this.cfg.checkpoint.every > 0 && this.state.stageStep % this.cfg.checkpoint.every === 0) {
      // Beside the next step, unless the run stops here (then the checkpoint below waits).
      const stopping = this.dist.worldSize > 1 ? this.stopAgreed : this.stopRequested;
      try {
        await this.checkpoint({ wait: stopping });
      } catch (e) {
        throw this.checkpointStopped(e, `the checkpoint after ${s.stage} step ${this.state.stageStep}`);
      }
      saved = true;
    }
    // Every rank stops at the same step (agreed at the end of the step: recordStep).
    if (this.dist.worldSize > 1 ? this.stopAgreed : this.stopRequested) {
      if (!saved) await this.checkpoint();
      else await this.writer.settle(); // a stop that came during the checkpoint: its write completes first
      s.progress.stop();
      return this.finish(true);
    }
    if (runEnds && this.pending) this.pending.after = () => s.progress.stop();
    else this.flushStep();
    return undefined;
  }

  /**
   * Writes a checkpoint of the current state (if it can) and returns the error that ends the run:
   * what failed, where the checkpoint is and the resume command.
   */
  private async stopWithCheckpoint(e: unknown, where: string): Promise<TrainingStoppedError> {
    const resumeCommand = `papergym-native train --resume ${this.deps.runDir}`;
    let dir: string | undefined;
    let saved: string;
    try {
      // Data parallel: every rank stops here at the same step (allRanks); rank 0 writes the checkpoint.
      dir = (await this.checkpoint()) || undefined;
      saved = dir ? `checkpoint written: ${dir}` : `rank ${this.dist.rank}: rank 0 writes the checkpoint`;
    } catch (ce) {
      saved = `no checkpoint could be written (${(ce as Error).message}); the last one in ${join(this.deps.runDir, 'checkpoints')} stands`;
    }
    const msg = `${where} failed: ${(e as Error)?.message ?? String(e)}\n${saved}\nresume with: ${resumeCommand}`;
    if (this.dist.isMain)
      this.metrics.write({
        stage: this.cfg.stages[this.state.stageIndex],
        step: this.state.stageStep,
        globalStep: this.state.globalStep,
        stopped: (e as Error)?.name ?? 'Error',
        error: (e as Error)?.message ?? String(e),
      });
    const stopped = new TrainingStoppedError(msg, dir, resumeCommand, { cause: e });
    // Keep the cause's error code (ERR_PG_OOM, …) for callers that branch on it.
    const code = (e as { code?: unknown } | undefined)?.code;
    return typeof code === 'string' ? Object.assign(stopped, { code }) : stopped;
  }

  /** Throws JudgeHealthError when the step's null rate passes `judge.maxNullRate`. */
  private checkJudgeHealth(rewards: RewardResult[], what: string): JudgeHealth | undefined {
    const h = stepJudgeHealth(rewards);
    if (h && this.cfg.judge?.score === 'prob' && h.verdicts > h.withProb && !this.warnedNoProb) {
      this.warnedNoProb = true;
      this.log(
        `judge: --judge-score prob, but ${h.verdicts - h.withProb} of ${h.verdicts} verdicts carry no P(yes) (the endpoint returned no usable logprobs); those items count 1/0 by their verdict`,
      );
    }
    if (h) assertJudgeHealth(h, this.cfg.judge?.maxNullRate ?? 0.5, this.cfg.judge ? judgeLabel(this.cfg.judge) : 'judge', what);
    return h;
  }

  private finish(interrupted: boolean): TrainSummary {
    const steps = this.summary.reduce((a, r) => a + r.steps, 0);
    const skippedSteps = this.summary.reduce((a, r) => a + (r.skippedSteps ?? 0), 0);
    const s: TrainSummary = {
      runDir: this.deps.runDir,
      stages: this.summary,
      globalStep: this.state.globalStep,
      skippedSteps,
      noUpdate: steps > 0 && skippedSteps === steps,
      interrupted,
      wallSeconds: this.wall(),
    };
    if (this.dist.isMain) writeFileSync(join(this.deps.runDir, 'summary.json'), JSON.stringify(s, null, 2));
    return s;
  }

  /** Formats the summary as a table (printed at the end of `train`). */
  static formatSummary(s: TrainSummary): string {
    const rows = [['stage', 'steps', 'skipped', 'first loss', 'last loss', 'last reward', 'best val', 'early stop']];
    for (const r of s.stages) {
      const f = (v: number | undefined, d: number) => (v !== undefined && v !== null && Number.isFinite(v) ? v.toFixed(d) : '-');
      rows.push([
        r.stage,
        String(r.steps),
        String(r.skippedSteps ?? '-'),
        f(r.firstLoss, 4),
        f(r.lastLoss, 4),
        f(r.lastReward, 3),
        r.best ? `${f(r.best.score, 3)} @ step ${r.best.step}${r.best.loaded ? ' (kept)' : ''}` : f(r.bestValidation, 3),
        r.stoppedEarly ? 'yes' : r.steps === 0 ? 'skipped (0 steps)' : 'no',
      ]);
    }
    const skipped = s.skippedSteps ? `  skipped: ${s.skippedSteps}` : '';
    const closing = `${table(rows)}\nrun dir: ${s.runDir}  steps: ${s.globalStep}${skipped}  wall: ${s.wallSeconds.toFixed(1)}s${s.interrupted ? '  (interrupted; resume with --resume ' + s.runDir + ')' : ''}`;
    const warn = Trainer.noUpdateMessage(s);
    return warn ? `${closing}\nWARNING: ${warn}` : closing;
  }

  /**
   * Undefined unless every step of the run was skipped (`noUpdate`); else what happened, the last
   * skip's loss and gradient norm, and what to try. `train` ends with exit code 1 and this message.
   */
  static noUpdateMessage(s: TrainSummary): string | undefined {
    if (!s.noUpdate) return undefined;
    const last = [...s.stages].reverse().find((r) => r.lastSkip)?.lastSkip;
    return (
      `no update was applied: all ${s.skippedSteps} steps of the run were skipped for a non-finite loss or gradient${last ? ` (last: ${last})` : ''}, ` +
      `so ${join(s.runDir, 'final')} holds the starting adapter. Check the settings that scale the update (--lora-alpha, the learning rates, --max-grad-norm) and the "step skipped" lines above`
    );
  }

  private take(k: number): TaskItem[] {
    const { batch, cursor } = takeItems(this.trainItems, k, this.state.seed, this.state.cursor);
    this.state.cursor = cursor;
    return batch;
  }

  private sampling(n: number, purpose: number, unit = 0): SamplingOptions {
    const s = this.cfg.sampling;
    return {
      n,
      temperature: s.temperature,
      topP: s.topP,
      topK: s.topK,
      maxNewTokens: s.maxNewTokens,
      seed: unitSeed(this.state.seed, this.state.stageIndex, this.state.stageStep, purpose, unit),
    };
  }

  /** Sum over ranks (identity on one process); a non-finite value on any rank stays non-finite. */
  private async sumRanks(x: number): Promise<number> {
    if (this.dist.worldSize === 1) return x;
    return (await this.dist.allGather(Number.isFinite(x) ? x : null)).reduce<number>((a, v) => a + (v === null ? NaN : v), 0);
  }
  /** Every rank's value in rank order (one-element list on one process). */
  private async gather<T>(x: T): Promise<T[]> {
    return this.dist.worldSize === 1 ? [x] : this.dist.allGather(x);
  }

  /**
   * Data parallel: runs this rank's part of a step phase, then every rank learns whether any rank
   * failed (one all-gather of a flag), so all ranks throw at the same point instead of one rank
   * stopping while the others wait in the next collective until the timeout. On the failing rank
   * the original error is rethrown (its `code`, e.g. ERR_PG_OOM, kept); the others throw an error
   * naming the rank and keeping its code. One process: just `f()`.
   */
  private async allRanks<T>(what: string, f: () => Promise<T>): Promise<T> {
    if (this.dist.worldSize === 1) return f();
    return (await this.allRanksGather(what, f, () => null)).value;
  }

  /**
   * {@link allRanks} whose one all-gather also carries `share(value)` of every rank: the phase's
   * failure flags and its results travel together (StageContext.allRanksGather).
   */
  private async allRanksGather<T, G>(what: string, f: () => Promise<T>, share: (value: T) => G): Promise<{ value: T; all: G[] }> {
    if (this.dist.worldSize === 1) {
      const value = await f();
      return { value, all: [share(value)] };
    }
    let value: T | undefined;
    let err: unknown;
    let failed = false;
    try {
      value = await f();
    } catch (e) {
      failed = true;
      err = e;
    }
    type Entry = { failure: { message: string; code: unknown } | null; share: G | null };
    const mine: Entry = failed
      ? { failure: { message: (err as Error)?.message ?? String(err), code: (err as { code?: unknown })?.code ?? null }, share: null }
      : { failure: null, share: share(value as T) };
    const entries = await this.dist.allGather(mine);
    if (failed) throw err;
    const i = entries.findIndex((x) => x.failure !== null);
    if (i >= 0) {
      const f0 = entries[i]!.failure!;
      throw Object.assign(new Error(`${what} failed on rank ${i}: ${f0.message}`), typeof f0.code === 'string' ? { code: f0.code } : {});
    }
    return { value: value as T, all: entries.map((x) => x.share as G) };
  }

  /** Dropout seed of the step in flight: (seed, stage, step, rank); rank 0 keeps the one-process stream. */
  private dropoutSeed(): number {
    return stepSeed(this.state.seed, this.state.stageIndex, this.state.stageStep, this.dist.rank === 0 ? 1 : 1 + (this.dist.rank << 8));
  }

  /**
   * The update of a step: runs `body(microBatch)` — the loss + backward micro-batch loop
   * of `stage` — with the dropout generator seeded from (seed, stage, step, rank). When it throws the
   * addon's out-of-memory error (`code` ERR_PG_OOM, native/napi/util.cc), the gradients accumulated
   * so far are dropped and the cached blocks released, the micro-batch is halved (at 1: activation
   * recompute turned on), one line is logged and the update runs again with the same seed, rollouts
   * and rewards — so the step equals an uninjected one run at the smaller setting, which is kept for
   * the rest of the run (and saved with the checkpoints' config). At micro-batch 1 with recompute on,
   * a checkpoint is written and the run stops with an Error giving the peak reached and the flags
   * that would fit.
   *
   * Data parallel (worldSize > 1): no silent shrink. An OOM is per rank, and a micro-batch (or
   * recompute) change on one rank only would have to be agreed by all ranks to keep their updates
   * (and the rollout chunking pinned below) identical. So the error is rethrown: allRanks() makes
   * every rank stop at this step, rank 0 writes the checkpoint of the state before it, and the
   * message says to resume with a smaller --grpo-micro-batch / --opsd-micro-batch (or --recompute).
   */
  private async updateWithOomRecovery<T>(stage: Stage, body: (microBatch: number) => Promise<T>): Promise<T> {
    const { backend } = this.deps;
    const mb = stageOf(stage).microBatch;
    if (!mb) throw new Error(`updateWithOomRecovery: the ${stage} stage has no update micro-batch (TrainingStage.microBatch)`);
    // The stage's micro-batch, read and halved through its descriptor (its config section, saved with the checkpoints).
    const sect = {
      get microBatch() {
        return mb.get(cfg);
      },
      set microBatch(n: number) {
        mb.set(cfg, n);
      },
    };
    const cfg = this.cfg;
    for (;;) {
      backend.seedStep(this.dropoutSeed());
      try {
        return await this.timed('update', () => body(sect.microBatch));
      } catch (e) {
        if (!isPapergymError(e, ErrorCode.OOM)) throw e;
        backend.zeroGrad();
        const peak = backend.releaseMemory?.() ?? NaN;
        const peakText = Number.isFinite(peak) ? `${(peak / 1e9).toFixed(1)} GB` : 'unknown';
        const was = `micro-batch ${sect.microBatch}, recompute ${this.cfg.memory?.recompute ? 'on' : 'off'}`;
        // The rollouts keep their chunking (and so their random draws) when the update's shrinks
        // (now, or on a resume with a smaller micro-batch after a data-parallel stop): rollout rows
        // 0 means "the micro-batch", so pin it at the micro-batch they were sampled with.
        if (this.cfg.memory && !this.cfg.memory.rolloutRows) this.cfg.memory.rolloutRows = sect.microBatch;
        if (this.dist.worldSize > 1) {
          throw oomError(
            `[${stage}] step ${this.state.stageStep}: out of memory in the update on rank ${this.dist.rank} (${was}; peak ${peakText}); with ${this.dist.worldSize} processes the micro-batch is not shrunk on one rank alone: resume with a smaller --${stage}-micro-batch (or --recompute) (${(e as Error).message})`,
          );
        }
        if (sect.microBatch > 1) {
          sect.microBatch = Math.max(1, Math.floor(sect.microBatch / 2));
        } else if (!this.cfg.memory?.recompute && backend.setRecompute) {
          backend.setRecompute(true);
          if (this.cfg.memory) this.cfg.memory.recompute = true;
        } else {
          // The step loop writes the checkpoint (the state before this step) and the resume command.
          const advice = this.deps.memoryAdvice?.() ?? '';
          throw oomError(
            `[${stage}] step ${this.state.stageStep}: out of memory at the smallest setting (${was}); peak allocated ${peakText}; checkpoint of the state before this step below.${advice ? ` Flags that would fit: ${advice}` : ' Reduce --max-new-tokens, --questions-per-step or --opsd-batch-size.'} (${(e as Error).message})`,
          );
        }
        this.log(
          `[${stage}] step ${this.state.stageStep}: out of memory in the update (${was}; peak ${peakText}); retrying the step with micro-batch ${sect.microBatch}, recompute ${this.cfg.memory?.recompute ? 'on' : 'off'} (kept for the rest of the run)`,
        );
      }
    }
  }

  /**
   * Validation: one greedy plan per held-out item, scored by the reward function (items split over
   * ranks): the mean r_spec and its 95% percentile bootstrap interval over the items (1000
   * resamples seeded by (seed, stage, step): a resumed run draws the same; lib/train/validation.ts).
   */
  async validate(): Promise<{ score: number; ci: [number, number]; items: number }> {
    const { backend } = this.deps;
    const all = this.valItems;
    const [a, b] = shard(all.length, this.dist.rank, this.dist.worldSize);
    const items = all.slice(a, b);
    const scores = await this.allRanks('validation', async () => {
      if (!items.length) return [] as RewardResult[];
      const prompts = await Promise.all(items.map((it) => backend.promptIds(studentMessages(it.question))));
      const rs = await backend.generate(prompts, { ...this.sampling(1, 9), temperature: 0 });
      return this.deps.reward(rs.map((r) => ({ item: items[r.promptIndex]!, plan: r.text })));
    });
    // Judge health over all ranks' verdicts (the same decision on every rank).
    const global = this.dist.worldSize === 1 ? scores : (await this.gather(scores)).flat();
    this.checkJudgeHealth(global, 'validation');
    const perItem = global.map((x) => x.rSpec);
    const { mean: score, ci } = bootstrapMean(perItem, stepSeed(this.state.seed, this.state.stageIndex, this.state.stageStep, 0xb0075));
    return { score, ci, items: perItem.length };
  }
}
