/**
 * The two-stage schedule (DESIGN.md §6): stages run in `config.stages` order; each is
 *  - `sft`:  cross-entropy on the reference answers (the paper's baseline);
 *  - `opsd`: on-policy self-distillation — the student samples a plan for the question, the
 *            teacher (same model, question + rubric in its prompt; adapter off = `fixed`, the
 *            detached current adapter = `current`, or an EMA snapshot) scores the same tokens,
 *            loss = token-mean generalised JSD (β) over completion tokens;
 *  - `grpo`: G completions per question, rubric rewards r = α·r_spec + (1 − α)·r_gen, group
 *            advantages, clipped ratio loss + β_KL·k3 to the reference (stage-start snapshot or
 *            the base model).
 * Every `checkpoint.every` steps, at a stage end and on SIGINT the adapter, optimizer, data cursor
 * and step counters are written atomically; `resume` continues exactly (all randomness is derived
 * from (seed, stage, step), so a resumed run replays the same samples and dropout masks).
 */
import { mkdirSync, writeFileSync, accessSync, constants, rmSync } from 'node:fs';
import { join } from 'node:path';
import type { TrainConfig, Stage } from '../config/train.js';
import type { TrainBackend, Rollout, Sequence } from './backend.js';
import { writeCheckpoint, type TrainerState } from './checkpoint.js';
import { MetricsLog, Progress, table } from './metrics.js';
import { studentMessages, teacherMessages } from './prompts.js';
import { mulberry32 } from '../util/random.js';
import { addHealth, assertJudgeHealth, formatHealth, type JudgeHealth } from '../judge/types.js';

/** Minimal view of a dataset item the schedule needs (lib/data/schema.ts has the full schema). */
export interface TrainItem {
  id: string;
  question: string;
  reference_answer: string;
  rubric: { id: string; text: string; dimension: string }[];
  split: string;
}

/** Per-completion reward with its parts (lib/judge/rewards.ts computes them from verdicts). */
export interface RewardResult {
  reward: number;
  rSpec: number;
  rGen: number;
  /** Items met per rubric dimension, for pass-rate metrics: dimension → [met, total]. */
  perDimension?: Record<string, [number, number]>;
  /** Judge health of this plan's verdicts (lib/judge/rewards.ts); summed per step into metrics.jsonl. */
  judge?: JudgeHealth;
}

/** Scores plans: one result per request, in order. */
export type RewardFn = (requests: { item: TrainItem; plan: string; tokenIds?: number[] }[]) => Promise<RewardResult[]>;

export interface TrainerDeps {
  backend: TrainBackend;
  items: TrainItem[];
  reward: RewardFn;
  /** Group advantages (native, DESIGN.md §5). */
  advantages: (rewards: number[], groupSize: number, opts: { scale: 'group' | 'batch' | 'none'; dropZeroVariance: boolean }) => { advantages: number[]; keep: boolean[] };
  runDir: string;
  log?: (line: string) => void;
  /** Called after each checkpoint is complete (train rewrites report.html here); errors are logged, never fatal. */
  onCheckpoint?: (dir: string) => void | Promise<void>;
  /**
   * Out-of-memory advice (issue 21): the flags that would fit, for the error when the smallest
   * setting (micro-batch 1, recompute on) still runs out of memory. Default: none.
   */
  memoryAdvice?: () => string;
}

export interface TrainSummary {
  runDir: string;
  stages: { stage: Stage; index: number; steps: number; firstLoss: number; lastLoss: number; lastReward?: number; bestValidation?: number; stoppedEarly: boolean }[];
  globalStep: number;
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
export function takeItems<T>(items: T[], k: number, seed: number, cursor: { epoch: number; position: number }): { batch: T[]; cursor: { epoch: number; position: number } } {
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

function mean(xs: number[]): number {
  return xs.length ? xs.reduce((a, b) => a + b, 0) / xs.length : NaN;
}
function std(xs: number[]): number {
  if (xs.length < 2) return 0;
  const m = mean(xs);
  return Math.sqrt(xs.reduce((a, b) => a + (b - m) ** 2, 0) / (xs.length - 1));
}
function chunks<T>(xs: T[], size: number): T[][] {
  const out: T[][] = [];
  for (let i = 0; i < xs.length; i += size) out.push(xs.slice(i, i + size));
  return out;
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
  constructor(message: string, readonly checkpoint: string | undefined, readonly resumeCommand: string, options?: { cause?: unknown }) {
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
  private warnedNoProb = false;
  private readonly metrics: MetricsLog;
  private readonly started = Date.now();
  private readonly summary: TrainSummary['stages'];

  constructor(private readonly cfg: TrainConfig, private readonly deps: TrainerDeps, resumeState?: TrainerState) {
    this.state = resumeState ?? {
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
    this.metrics = new MetricsLog(join(deps.runDir, 'metrics.jsonl'));
    this.baseWall = this.state.wallSeconds;
    // JSON turns NaN into null: restore it.
    this.summary = (this.state.summary as TrainSummary['stages'] | undefined)?.map((r) => ({ ...r, firstLoss: r.firstLoss ?? NaN, lastLoss: r.lastLoss ?? NaN })) ?? [];
  }

  /** Wall seconds per phase of the step in flight (rollout, judge, reference, update, optimizer). */
  private phases: Record<string, number> = {};
  private async timed<T>(phase: string, f: () => Promise<T>): Promise<T> {
    const t0 = performance.now();
    try {
      return await f();
    } finally {
      this.phases[phase] = (this.phases[phase] ?? 0) + (performance.now() - t0) / 1000;
    }
  }

  /** Asks the loop to stop after the step in flight; a checkpoint is written first. */
  requestStop(): void {
    this.stopRequested = true;
  }

  private get trainItems(): TrainItem[] {
    const t = this.deps.items.filter((i) => i.split === 'train');
    return t.length ? t : this.deps.items;
  }
  private get valItems(): TrainItem[] {
    return this.deps.items.filter((i) => i.split === 'val').slice(0, this.cfg.validation.maxItems);
  }

  private log(line: string): void {
    (this.deps.log ?? ((l: string) => process.stderr.write(l + '\n')))(line);
  }

  /** Wall seconds of the run, across resumes. */
  private wall(): number {
    return this.baseWall + (Date.now() - this.started) / 1000;
  }
  private readonly baseWall: number = 0;

  private async checkpoint(): Promise<string> {
    this.state.wallSeconds = this.wall();
    this.state.summary = this.summary;
    const dir = await writeCheckpoint(this.deps.runDir, { ...this.state }, (tmp) => this.deps.backend.saveState(tmp), { saveTotalLimit: this.cfg.checkpoint.saveTotalLimit ?? null });
    this.log(`checkpoint ${dir}`);
    if (this.deps.onCheckpoint) {
      try {
        await this.deps.onCheckpoint(dir);
      } catch (e) {
        this.log(`after checkpoint: ${(e as Error).message}`);
      }
    }
    return dir;
  }

  /** Runs the remaining stages; resolves with the summary (interrupted = stopped by a signal). */
  async run(): Promise<TrainSummary> {
    const { backend } = this.deps;
    for (; this.state.stageIndex < this.cfg.stages.length; this.state.stageIndex++) {
      const stage = this.cfg.stages[this.state.stageIndex]!;
      const total = stage === 'sft' ? this.cfg.sft.steps : stage === 'opsd' ? this.cfg.opsd.steps : this.cfg.grpo.steps;
      const fresh = this.state.stageStep === 0 && !this.state.stageDone;
      backend.resetOptimizer(stage === 'sft' ? this.cfg.sft.lr : stage === 'opsd' ? this.cfg.opsd.lr : this.cfg.grpo.lr, total);
      if (fresh) {
        if (stage === 'grpo' && this.cfg.grpo.reference === 'stage-start') backend.snapshotAdapter('stage-start');
        if (stage === 'opsd' && this.cfg.opsd.teacher === 'ema') backend.snapshotAdapter('ema-teacher');
      }
      let rec = this.summary.find((r) => r.index === this.state.stageIndex);
      if (!rec) {
        rec = { stage, index: this.state.stageIndex, steps: 0, firstLoss: NaN, lastLoss: NaN, stoppedEarly: false };
        this.summary.push(rec);
      }
      if (total === 0 && fresh) this.log(`[${stage}] 0 steps: stage skipped`);
      const progress = new Progress(stage, total, this.state.stageStep);
      let nonFinite = 0;
      while (!this.state.stageDone && this.state.stageStep < total) {
        const t0 = Date.now();
        const step = this.state.stageStep;
        backend.seedStep(stepSeed(this.state.seed, this.state.stageIndex, step, 1));
        let lr = NaN;
        this.phases = {};
        const cursorBefore = { ...this.state.cursor };
        let m: Awaited<ReturnType<Trainer['grpoStep']>>;
        try {
          m = stage === 'sft' ? await this.sftStep() : stage === 'opsd' ? await this.opsdStep() : await this.grpoStep();
        } catch (e) {
          // Nothing of this step is kept: the checkpoint is the state before it, so --resume redoes it.
          this.state.cursor = cursorBefore;
          backend.zeroGrad();
          progress.stop();
          throw await this.stopWithCheckpoint(e, `[${stage}] step ${step + 1}`);
        }
        let gradNorm = NaN;
        let skipped = false;
        if (!Number.isFinite(m.loss)) {
          skipped = true;
        } else {
          const r = await this.timed('optimizer', () => backend.optimizerStep(this.cfg.optim.maxGradNorm));
          gradNorm = r.gradNorm;
          lr = r.lr;
          if (r.skipped || !Number.isFinite(gradNorm)) skipped = true;
        }
        if (skipped) {
          backend.zeroGrad();
          nonFinite += 1;
          this.log(`[${stage}] step ${step}: non-finite loss or gradient (loss ${m.loss}, grad norm ${gradNorm}); step skipped`);
          if (nonFinite >= MAX_CONSECUTIVE_NONFINITE) {
            await this.checkpoint();
            throw new Error(`${stage}: ${nonFinite} consecutive non-finite steps; stopped (checkpoint written)`);
          }
        } else {
          nonFinite = 0;
        }
        if (stage === 'opsd' && this.cfg.opsd.teacher === 'ema' && !skipped) backend.emaUpdate('ema-teacher', this.cfg.opsd.emaDecay);
        this.state.stageStep += 1;
        this.state.globalStep += 1;
        const secs = (Date.now() - t0) / 1000;
        const record = {
          ...m,
          stage,
          step: this.state.stageStep,
          globalStep: this.state.globalStep,
          lr,
          gradNorm,
          skipped,
          stepSeconds: secs,
          tokensPerSecond: m.completionTokens / secs,
          phaseSeconds: { ...this.phases },
          memory: backend.memory(),
        };
        this.metrics.write(record);
        if (Number.isNaN(rec.firstLoss)) rec.firstLoss = m.loss;
        rec.lastLoss = m.loss;
        if (typeof m.rewardMean === 'number') rec.lastReward = m.rewardMean as number;
        rec.steps = this.state.stageStep;
        const health = m.judge as JudgeHealth | undefined;
        if (this.state.stageStep % Math.max(1, this.cfg.log.every) === 0 || this.state.stageStep === total) progress.update(this.state.stageStep, `loss ${m.loss.toFixed(4)}${typeof m.rewardMean === 'number' ? ` reward ${(m.rewardMean as number).toFixed(3)}` : ''}${health ? ` ${formatHealth(health)}` : ''}`);

        let saved = false;
        if (this.cfg.validation.every > 0 && this.state.stageStep % this.cfg.validation.every === 0 && this.valItems.length) {
          let score: number;
          try {
            score = await this.validate();
          } catch (e) {
            progress.stop();
            throw await this.stopWithCheckpoint(e, `[${stage}] validation after step ${this.state.stageStep}`);
          }
          this.state.validation.push({ step: this.state.stageStep, score });
          rec.bestValidation = Math.max(rec.bestValidation ?? -Infinity, score);
          this.metrics.write({ stage, step: this.state.stageStep, globalStep: this.state.globalStep, validation: score });
          const K = this.cfg.opsd.earlyStopPatience;
          if (stage === 'opsd' && K > 0 && this.fellKTimes(K)) {
            this.log(`[opsd] validation fell ${K} times in a row; ending OPSD at step ${this.state.stageStep}`);
            this.state.stageDone = true;
            rec.stoppedEarly = true;
            this.metrics.write({ stage, step: this.state.stageStep, globalStep: this.state.globalStep, event: 'early_stop' });
          }
        }
        if (this.cfg.checkpoint.every > 0 && this.state.stageStep % this.cfg.checkpoint.every === 0) {
          await this.checkpoint();
          saved = true;
        }
        if (this.stopRequested) {
          if (!saved) await this.checkpoint();
          progress.stop();
          return this.finish(true);
        }
      }
      progress.stop();
      // Stage end: the next stage starts fresh.
      this.state.stageStep = 0;
      this.state.stageDone = false;
      this.state.validation = [];
      if (this.state.stageIndex === this.cfg.stages.length - 1) break;
    }
    this.state.stageIndex = this.cfg.stages.length;
    await this.checkpoint();
    await this.deps.backend.saveState(join(this.deps.runDir, 'final'));
    return this.finish(false);
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
      dir = await this.checkpoint();
      saved = `checkpoint written: ${dir}`;
    } catch (ce) {
      saved = `no checkpoint could be written (${(ce as Error).message}); the last one in ${join(this.deps.runDir, 'checkpoints')} stands`;
    }
    const msg = `${where} failed: ${(e as Error)?.message ?? String(e)}\n${saved}\nresume with: ${resumeCommand}`;
    this.metrics.write({ stage: this.cfg.stages[this.state.stageIndex], step: this.state.stageStep, globalStep: this.state.globalStep, stopped: (e as Error)?.name ?? 'Error', error: (e as Error)?.message ?? String(e) });
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
      this.log(`judge: --judge-score prob, but ${h.verdicts - h.withProb} of ${h.verdicts} verdicts carry no P(yes) (the endpoint returned no usable logprobs); those items count 1/0 by their verdict`);
    }
    if (h) assertJudgeHealth(h, this.cfg.judge?.maxNullRate ?? 0.5, this.cfg.judge?.kind === 'http' ? `${this.cfg.judge.model}@${this.cfg.judge.url}` : (this.cfg.judge?.kind ?? 'judge'), what);
    return h;
  }

  private fellKTimes(K: number): boolean {
    const v = this.state.validation;
    if (v.length < K + 1) return false;
    for (let i = v.length - K; i < v.length; i++) if (!(v[i]!.score < v[i - 1]!.score)) return false;
    return true;
  }

  private finish(interrupted: boolean): TrainSummary {
    const s: TrainSummary = {
      runDir: this.deps.runDir,
      stages: this.summary,
      globalStep: this.state.globalStep,
      interrupted,
      wallSeconds: this.wall(),
    };
    writeFileSync(join(this.deps.runDir, 'summary.json'), JSON.stringify(s, null, 2));
    return s;
  }

  /** Formats the summary as a table (printed at the end of `train`). */
  static formatSummary(s: TrainSummary): string {
    const rows = [['stage', 'steps', 'first loss', 'last loss', 'last reward', 'best val', 'early stop']];
    for (const r of s.stages) {
      const f = (v: number | undefined, d: number) => (v !== undefined && v !== null && Number.isFinite(v) ? v.toFixed(d) : '-');
      rows.push([r.stage, String(r.steps), f(r.firstLoss, 4), f(r.lastLoss, 4), f(r.lastReward, 3), f(r.bestValidation, 3), r.stoppedEarly ? 'yes' : r.steps === 0 ? 'skipped (0 steps)' : 'no']);
    }
    return `${table(rows)}\nrun dir: ${s.runDir}  steps: ${s.globalStep}  wall: ${s.wallSeconds.toFixed(1)}s${s.interrupted ? '  (interrupted; resume with --resume ' + s.runDir + ')' : ''}`;
  }

  private take(k: number): TrainItem[] {
    const { batch, cursor } = takeItems(this.trainItems, k, this.state.seed, this.state.cursor);
    this.state.cursor = cursor;
    return batch;
  }

  private sampling(n: number, purpose: number) {
    const s = this.cfg.sampling;
    return { n, temperature: s.temperature, topP: s.topP, topK: s.topK, maxNewTokens: s.maxNewTokens, seed: stepSeed(this.state.seed, this.state.stageIndex, this.state.stageStep, purpose) };
  }

  private async sftStep(): Promise<{ loss: number; completionTokens: number; [k: string]: unknown }> {
    const { backend } = this.deps;
    const items = this.take(this.cfg.sft.batchSize);
    const seqs: Sequence[] = await Promise.all(items.map(async (it) => ({
      promptIds: await backend.promptIds(studentMessages(it.question)),
      completionIds: await backend.answerIds(it.reference_answer),
    })));
    const normalizer = seqs.reduce((a, s) => a + s.completionIds.length, 0);
    // One call over the window: the native cross-entropy averages over the tokens it is given,
    // which is then exactly the window's token mean (the chunking over tokens happens natively).
    const { loss } = await backend.sftBackward(seqs);
    return { loss, completionTokens: normalizer };
  }

  private async opsdStep(): Promise<{ loss: number; completionTokens: number; [k: string]: unknown }> {
    const { backend } = this.deps;
    const c = this.cfg.opsd;
    const items = this.take(c.batchSize);
    const studentPrompts = await Promise.all(items.map((it) => backend.promptIds(studentMessages(it.question))));
    const teacherPrompts = await Promise.all(items.map((it) => backend.promptIds(teacherMessages(it.question, it.rubric))));
    // Rollout rows per decode batch from the memory plan (memory.rolloutRows; 0 = one call).
    const rows = this.cfg.memory?.rolloutRows || studentPrompts.length;
    const rollouts: Rollout[] = [];
    for (let i = 0; i < studentPrompts.length; i += rows) {
      const rs = await this.timed('rollout', () => backend.generate(studentPrompts.slice(i, i + rows), this.sampling(1, i === 0 ? 2 : 1000 + i)));
      rollouts.push(...rs.map((r) => ({ ...r, promptIndex: r.promptIndex + i })));
    }
    const batch = rollouts.map((r) => ({
      student: { promptIds: studentPrompts[r.promptIndex]!, completionIds: r.tokenIds },
      teacher: { promptIds: teacherPrompts[r.promptIndex]!, completionIds: r.tokenIds },
    })).filter((b) => b.student.completionIds.length > 0);
    const normalizer = batch.reduce((a, b) => a + b.student.completionIds.length, 0);
    const teacher = c.teacher === 'fixed' ? 'none' : c.teacher === 'current' ? 'active' : 'ema-teacher';
    let loss = 0;
    if (normalizer > 0) {
      loss = await this.updateWithOomRecovery('opsd', async (microBatch) => {
        let l = 0;
        for (const mb of chunks(batch, microBatch)) {
          l += (await backend.opsdBackward(mb, { beta: c.beta, temperature: this.cfg.sampling.temperature || 1, normalizer, teacher })).loss;
        }
        return l;
      });
    }
    return { loss, jsd: loss, completionTokens: normalizer, completionLength: normalizer / Math.max(1, batch.length), stopRate: mean(rollouts.map((r) => (r.finishReason === 'stop' ? 1 : 0))) };
  }

  private async grpoStep(): Promise<{ loss: number; completionTokens: number; [k: string]: unknown }> {
    const { backend } = this.deps;
    const c = this.cfg.grpo;
    const items = this.take(c.questionsPerStep);
    const prompts = await Promise.all(items.map((it) => backend.promptIds(studentMessages(it.question))));
    // Sample per question chunk and judge each chunk while the next one samples (async overlap).
    // Rollout rows per decode batch: memory.rolloutRows (the memory plan) or, when 0, the micro-batch.
    const rolloutRows = this.cfg.memory?.rolloutRows || c.microBatch;
    const promptChunks = chunks(prompts.map((p, i) => ({ p, i })), Math.max(1, Math.floor(rolloutRows / c.groupSize) || 1));
    const rollouts: Rollout[] = [];
    const rewardJobs: Promise<RewardResult[]>[] = [];
    for (let ci = 0; ci < promptChunks.length; ci++) {
      const ch = promptChunks[ci]!;
      const rs = await this.timed('rollout', () => backend.generate(ch.map((x) => x.p), this.sampling(c.groupSize, 3 + ci)));
      // generate returns n completions per prompt contiguously (a group is a block of G).
      const mapped = rs.map((r) => ({ ...r, promptIndex: ch[r.promptIndex]!.i }));
      rollouts.push(...mapped);
      const job = this.deps.reward(mapped.map((r) => ({ item: items[r.promptIndex]!, plan: r.text, tokenIds: r.tokenIds })));
      job.catch(() => undefined); // handled below (Promise.all); a rejection while the next chunk samples is not "unhandled"
      rewardJobs.push(job);
    }
    // Judge time not hidden behind sampling: the wait after the last chunk was sampled.
    const rewards = (await this.timed('judge', () => Promise.all(rewardJobs))).flat();
    const judge = this.checkJudgeHealth(rewards, `GRPO step ${this.state.stageStep + 1}`);
    const r = rewards.map((x) => x.reward);
    const { advantages, keep } = this.deps.advantages(r, c.groupSize, { scale: c.scale, dropZeroVariance: c.dropZeroVariance });
    const kept = rollouts.map((ro, i) => ({ ro, adv: advantages[i]!, i })).filter((x) => keep[x.i] && x.ro.tokenIds.length > 0);
    const seqs = kept.map((x) => ({ promptIds: prompts[x.ro.promptIndex]!, completionIds: x.ro.tokenIds }));
    const refAdapter = c.reference === 'base' ? 'none' : 'stage-start';
    // Reference logprobs in batches of the plan's rollout rows (memory.rolloutRows; 0 = one call).
    const refLogprobs: number[][] = [];
    if (seqs.length && c.betaKl > 0) {
      for (const part of chunks(seqs, this.cfg.memory?.rolloutRows || seqs.length)) refLogprobs.push(...(await this.timed('reference', () => backend.completionLogprobs(part, this.cfg.sampling.temperature || 1, refAdapter))));
    } else {
      refLogprobs.push(...seqs.map((s) => s.completionIds.map(() => 0)));
    }
    const totalTokens = seqs.reduce((a, s) => a + s.completionIds.length, 0);
    const opts = {
      epsLow: c.epsLow, epsHigh: c.epsHigh, betaKl: c.betaKl, temperature: this.cfg.sampling.temperature || 1, aggregation: c.aggregation,
      totalSequences: seqs.length, totalCompletionTokens: totalTokens, maxCompletionLength: this.cfg.sampling.maxNewTokens,
    };
    const batch = kept.map((x, j) => ({ seq: seqs[j]!, oldLogprobs: x.ro.logprobs, refLogprobs: refLogprobs[j]!, advantage: x.adv }));
    const { loss, kl, clip } = await this.updateWithOomRecovery('grpo', async (microBatch) => {
      const acc = { loss: 0, kl: 0, clip: 0 };
      for (const mb of chunks(batch, microBatch)) {
        const out = await backend.grpoBackward(mb, opts);
        acc.loss += out.loss;
        acc.kl += out.meanKl * mb.length;
        acc.clip += out.clipFraction * mb.length;
      }
      return acc;
    });
    const dims: Record<string, [number, number]> = {};
    for (const x of rewards) for (const [d, [m, t]] of Object.entries(x.perDimension ?? {})) {
      const cur = dims[d] ?? [0, 0];
      dims[d] = [cur[0] + m, cur[1] + t];
    }
    return {
      loss,
      completionTokens: totalTokens,
      rewardMean: mean(r),
      rewardStd: std(r),
      rSpecMean: mean(rewards.map((x) => x.rSpec)),
      rGenMean: mean(rewards.map((x) => x.rGen)),
      passRate: Object.fromEntries(Object.entries(dims).map(([d, [m, t]]) => [d, t ? m / t : NaN])),
      kl: batch.length ? kl / batch.length : 0,
      clipFraction: batch.length ? clip / batch.length : 0,
      keptSequences: batch.length,
      completionLength: totalTokens / Math.max(1, batch.length),
      stopRate: mean(rollouts.map((ro) => (ro.finishReason === 'stop' ? 1 : 0))),
      ...(judge && { judge, judgeNullRate: judge.verdicts ? judge.nulls / judge.verdicts : 0 }),
    };
  }

  /**
   * The update of a step (issue 21): runs `body(microBatch)` — the loss + backward micro-batch loop
   * of `stage` — with the dropout generator seeded from (seed, stage, step). When it throws the
   * addon's out-of-memory error (`code` ERR_PG_OOM, native/napi/util.cc), the gradients accumulated
   * so far are dropped and the cached blocks released, the micro-batch is halved (at 1: activation
   * recompute turned on), one line is logged and the update runs again with the same seed, rollouts
   * and rewards — so the step equals an uninjected one run at the smaller setting, which is kept for
   * the rest of the run (and saved with the checkpoints' config). At micro-batch 1 with recompute on,
   * a checkpoint is written and the run stops with an Error giving the peak reached and the flags
   * that would fit.
   */
  private async updateWithOomRecovery<T>(stage: 'opsd' | 'grpo', body: (microBatch: number) => Promise<T>): Promise<T> {
    const { backend } = this.deps;
    const sect = stage === 'opsd' ? this.cfg.opsd : this.cfg.grpo;
    for (;;) {
      backend.seedStep(stepSeed(this.state.seed, this.state.stageIndex, this.state.stageStep, 1));
      try {
        return await this.timed('update', () => body(sect.microBatch));
      } catch (e) {
        if ((e as { code?: string }).code !== 'ERR_PG_OOM') throw e;
        backend.zeroGrad();
        const peak = backend.releaseMemory?.() ?? NaN;
        const peakText = Number.isFinite(peak) ? `${(peak / 1e9).toFixed(1)} GB` : 'unknown';
        const was = `micro-batch ${sect.microBatch}, recompute ${this.cfg.memory?.recompute ? 'on' : 'off'}`;
        // The rollouts keep their batching (and so their random draws) when the update's shrinks.
        if (this.cfg.memory && !this.cfg.memory.rolloutRows && stage === 'grpo') this.cfg.memory.rolloutRows = sect.microBatch;
        if (sect.microBatch > 1) {
          sect.microBatch = Math.max(1, Math.floor(sect.microBatch / 2));
        } else if (!this.cfg.memory?.recompute && backend.setRecompute) {
          backend.setRecompute(true);
          if (this.cfg.memory) this.cfg.memory.recompute = true;
        } else {
          // The step loop writes the checkpoint (the state before this step) and the resume command.
          const advice = this.deps.memoryAdvice?.() ?? '';
          throw Object.assign(new Error(`[${stage}] step ${this.state.stageStep}: out of memory at the smallest setting (${was}); peak allocated ${peakText}; checkpoint of the state before this step below.${advice ? ` Flags that would fit: ${advice}` : ' Reduce --max-new-tokens, --questions-per-step or --opsd-batch-size.'} (${(e as Error).message})`), { code: 'ERR_PG_OOM' });
        }
        this.log(`[${stage}] step ${this.state.stageStep}: out of memory in the update (${was}; peak ${peakText}); retrying the step with micro-batch ${sect.microBatch}, recompute ${this.cfg.memory?.recompute ? 'on' : 'off'} (kept for the rest of the run)`);
      }
    }
  }

  /** Validation: one greedy plan per held-out item, scored by the reward function; mean r_spec. */
  async validate(): Promise<number> {
    const { backend } = this.deps;
    const items = this.valItems;
    const prompts = await Promise.all(items.map((it) => backend.promptIds(studentMessages(it.question))));
    const rs = await backend.generate(prompts, { ...this.sampling(1, 9), temperature: 0 });
    const scores = await this.deps.reward(rs.map((r) => ({ item: items[r.promptIndex]!, plan: r.text })));
    this.checkJudgeHealth(scores, 'validation');
    return mean(scores.map((s) => s.rSpec));
  }
}
