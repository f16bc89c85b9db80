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
import { DistContext, shard } from './dist.js';

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
  /** Data parallelism (lib/train/dist.ts): this rank's group; absent = one process. */
  dist?: DistContext;
}

/** A step's result: global metrics plus this rank's gradient pre-scale for the all-reduce. */
type StepResult = { loss: number; completionTokens: number; gradScale?: number; [k: string]: unknown };

/** Seed of (run seed, stage, step, purpose, unit): per question / sampling chunk, the same on every rank. */
export function unitSeed(seed: number, stageIndex: number, step: number, purpose: number, unit: number): number {
  return unit === 0 ? stepSeed(seed, stageIndex, step, purpose) : stepSeed(stepSeed(seed, stageIndex, step, purpose), unit, 0x5eed, 0);
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
 * Runs `config.stages` over a TrainBackend (see the module doc). Construct with a resume state
 * from `resolveCheckpoint` to continue a run; `run()` resolves with the summary or rejects on a
 * fatal error (repeated non-finite steps, a failing judge) after the last checkpoint.
 */
export class Trainer {
  private state: TrainerState;
  private stopRequested = false;
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

  /** Asks the loop to stop after the step in flight; a checkpoint is written first. */
  requestStop(): void {
    this.stopRequested = true;
  }

  private get dist(): DistContext {
    return this.deps.dist ?? (this.singleDist ??= DistContext.single());
  }
  private singleDist: DistContext | undefined;

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
    // Data parallel: every rank holds the same adapter, optimizer and cursor; rank 0 writes.
    if (!this.dist.isMain) return '';
    const dir = await writeCheckpoint(this.deps.runDir, { ...this.state }, (tmp) => this.deps.backend.saveState(tmp));
    this.log(`checkpoint ${dir}`);
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
      const progress = this.dist.isMain ? new Progress(stage, total, this.state.stageStep) : { update: () => {}, stop: () => {} };
      let nonFinite = 0;
      while (!this.state.stageDone && this.state.stageStep < total) {
        const t0 = Date.now();
        const step = this.state.stageStep;
        // Dropout masks: (seed, stage, step, rank); rank 0 keeps the one-process stream.
        backend.seedStep(stepSeed(this.state.seed, this.state.stageIndex, step, this.dist.rank === 0 ? 1 : 1 + (this.dist.rank << 8)));
        let lr = NaN;
        const m: StepResult = stage === 'sft' ? await this.sftStep() : stage === 'opsd' ? await this.opsdStep() : await this.grpoStep();
        let gradNorm = NaN;
        let skipped = false;
        if (!Number.isFinite(m.loss)) {
          skipped = true;
        } else {
          // Data parallel: sum the ranks' LoRA grads (each already a share of the global mean).
          await this.dist.reduceGradients(m.gradScale ?? 1);
          const r = await backend.optimizerStep(this.cfg.optim.maxGradNorm);
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
        const { gradScale: _gs, ...mOut } = m;
        const distStats = this.dist.worldSize > 1 ? { worldSize: this.dist.worldSize, ...this.dist.takeReduceStats(), stepSecondsPerRank: await this.dist.allGather(secs) } : {};
        const record = {
          ...mOut,
          ...distStats,
          stage,
          step: this.state.stageStep,
          globalStep: this.state.globalStep,
          lr,
          gradNorm,
          skipped,
          stepSeconds: secs,
          tokensPerSecond: m.completionTokens / secs,
          memory: backend.memory(),
        };
        if (this.dist.isMain) this.metrics.write(record);
        if (Number.isNaN(rec.firstLoss)) rec.firstLoss = m.loss;
        rec.lastLoss = m.loss;
        if (typeof m.rewardMean === 'number') rec.lastReward = m.rewardMean as number;
        rec.steps = this.state.stageStep;
        progress.update(this.state.stageStep, `loss ${m.loss.toFixed(4)}${typeof m.rewardMean === 'number' ? ` reward ${(m.rewardMean as number).toFixed(3)}` : ''}`);

        let saved = false;
        if (this.cfg.validation.every > 0 && this.state.stageStep % this.cfg.validation.every === 0 && this.valItems.length) {
          const score = await this.validate();
          this.state.validation.push({ step: this.state.stageStep, score });
          rec.bestValidation = Math.max(rec.bestValidation ?? -Infinity, score);
          if (this.dist.isMain) this.metrics.write({ stage, step: this.state.stageStep, globalStep: this.state.globalStep, validation: score });
          const K = this.cfg.opsd.earlyStopPatience;
          if (stage === 'opsd' && K > 0 && this.fellKTimes(K)) {
            this.log(`[opsd] validation fell ${K} times in a row; ending OPSD at step ${this.state.stageStep}`);
            this.state.stageDone = true;
            rec.stoppedEarly = true;
          }
        }
        if (this.cfg.checkpoint.every > 0 && this.state.stageStep % this.cfg.checkpoint.every === 0) {
          await this.checkpoint();
          saved = true;
        }
        // Every rank stops at the same step (a signal may reach the ranks at different times).
        if (this.dist.worldSize > 1 && (await this.dist.allGather(this.stopRequested)).some(Boolean)) this.stopRequested = true;
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
    if (this.dist.isMain) await this.deps.backend.saveState(join(this.deps.runDir, 'final'));
    return this.finish(false);
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
    if (this.dist.isMain) writeFileSync(join(this.deps.runDir, 'summary.json'), JSON.stringify(s, null, 2));
    return s;
  }

  /** Formats the summary as a table (printed at the end of `train`). */
  static formatSummary(s: TrainSummary): string {
    const rows = [['stage', 'steps', 'first loss', 'last loss', 'last reward', 'best val', 'early stop']];
    for (const r of s.stages) {
      rows.push([r.stage, String(r.steps), r.firstLoss.toFixed(4), r.lastLoss.toFixed(4), r.lastReward?.toFixed(3) ?? '-', r.bestValidation?.toFixed(3) ?? '-', r.stoppedEarly ? 'yes' : 'no']);
    }
    return `${table(rows)}\nrun dir: ${s.runDir}  steps: ${s.globalStep}  wall: ${s.wallSeconds.toFixed(1)}s${s.interrupted ? '  (interrupted; resume with --resume ' + s.runDir + ')' : ''}`;
  }

  private take(k: number): TrainItem[] {
    const { batch, cursor } = takeItems(this.trainItems, k, this.state.seed, this.state.cursor);
    this.state.cursor = cursor;
    return batch;
  }

  private sampling(n: number, purpose: number, unit = 0) {
    const s = this.cfg.sampling;
    return { n, temperature: s.temperature, topP: s.topP, topK: s.topK, maxNewTokens: s.maxNewTokens, seed: unitSeed(this.state.seed, this.state.stageIndex, this.state.stageStep, purpose, unit) };
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

  private async sftStep(): Promise<StepResult> {
    const { backend } = this.deps;
    const items = this.take(this.cfg.sft.batchSize);
    // This rank's questions; the normaliser (all answer tokens of the global batch) is computed
    // locally from the same global batch on every rank.
    const [a, b] = shard(items.length, this.dist.rank, this.dist.worldSize);
    const answers = await Promise.all(items.map((it) => backend.answerIds(it.reference_answer)));
    const normalizer = answers.reduce((n, x) => n + x.length, 0);
    const seqs: Sequence[] = await Promise.all(items.slice(a, b).map(async (it, j) => ({
      promptIds: await backend.promptIds(studentMessages(it.question)),
      completionIds: answers[a + j]!,
    })));
    const local = seqs.reduce((n, s) => n + s.completionIds.length, 0);
    // One call over the rank's window: the native cross-entropy averages over the tokens it is
    // given; × local / global tokens makes it this rank's share of the global token mean (the
    // gradient is scaled the same way before the all-reduce).
    const share = normalizer > 0 ? local / normalizer : 0;
    const localLoss = seqs.length ? (await backend.sftBackward(seqs)).loss : 0;
    const loss = this.dist.worldSize === 1 ? localLoss : await this.sumRanks(localLoss * share);
    return { loss, completionTokens: normalizer, gradScale: share };
  }

  private async opsdStep(): Promise<StepResult> {
    const { backend } = this.deps;
    const c = this.cfg.opsd;
    const items = this.take(c.batchSize);
    // Sampling chunks of microBatch questions, each with its own seed (so a chunk's completions do
    // not depend on which rank samples it); this rank takes a contiguous share of the chunks.
    const chunkIdx = chunks(items.map((_, i) => i), Math.max(1, c.microBatch));
    const [a, b] = shard(chunkIdx.length, this.dist.rank, this.dist.worldSize);
    const batch: { student: Sequence; teacher: Sequence }[] = [];
    let stops = 0;
    let rolloutCount = 0;
    for (let k = a; k < b; k++) {
      const its = chunkIdx[k]!.map((i) => items[i]!);
      const studentPrompts = await Promise.all(its.map((it) => backend.promptIds(studentMessages(it.question))));
      const teacherPrompts = await Promise.all(its.map((it) => backend.promptIds(teacherMessages(it.question, it.rubric))));
      const rollouts = await backend.generate(studentPrompts, this.sampling(1, 2, k));
      for (const r of rollouts) {
        rolloutCount += 1;
        if (r.finishReason === 'stop') stops += 1;
        if (!r.tokenIds.length) continue;
        batch.push({ student: { promptIds: studentPrompts[r.promptIndex]!, completionIds: r.tokenIds }, teacher: { promptIds: teacherPrompts[r.promptIndex]!, completionIds: r.tokenIds } });
      }
    }
    const local = { tokens: batch.reduce((n, x) => n + x.student.completionIds.length, 0), sequences: batch.length, stops, rollouts: rolloutCount };
    const all = await this.gather(local);
    const normalizer = all.reduce((n, x) => n + x.tokens, 0);
    const sequences = all.reduce((n, x) => n + x.sequences, 0);
    const teacher = c.teacher === 'fixed' ? 'none' : c.teacher === 'current' ? 'active' : 'ema-teacher';
    let loss = 0;
    if (normalizer > 0) {
      for (const mb of chunks(batch, c.microBatch)) {
        loss += (await backend.opsdBackward(mb, { beta: c.beta, temperature: this.cfg.sampling.temperature || 1, normalizer, teacher })).loss;
      }
    }
    loss = await this.sumRanks(loss);
    return {
      loss, jsd: loss, completionTokens: normalizer, completionLength: normalizer / Math.max(1, sequences),
      stopRate: all.reduce((n, x) => n + x.stops, 0) / Math.max(1, all.reduce((n, x) => n + x.rollouts, 0)),
    };
  }

  private async grpoStep(): Promise<StepResult> {
    const { backend } = this.deps;
    const c = this.cfg.grpo;
    const items = this.take(c.questionsPerStep);
    // Sampling chunks of whole groups (a group never spans ranks), each with its own seed; this
    // rank samples and judges a contiguous share of the chunks, judging each chunk while the next
    // one samples (async overlap).
    const promptChunks = chunks(items.map((_, i) => i), Math.max(1, Math.floor(c.microBatch / c.groupSize) || 1));
    const [a, b] = shard(promptChunks.length, this.dist.rank, this.dist.worldSize);
    const prompts = new Map<number, number[]>();
    const rollouts: Rollout[] = [];
    const rewardJobs: Promise<RewardResult[]>[] = [];
    for (let ci = a; ci < b; ci++) {
      const ch = promptChunks[ci]!;
      const ps = await Promise.all(ch.map((i) => backend.promptIds(studentMessages(items[i]!.question))));
      ch.forEach((i, j) => prompts.set(i, ps[j]!));
      const rs = await backend.generate(ps, this.sampling(c.groupSize, 3 + ci));
      // generate returns n completions per prompt contiguously (a group is a block of G).
      const mapped = rs.map((r) => ({ ...r, promptIndex: ch[r.promptIndex]! }));
      rollouts.push(...mapped);
      rewardJobs.push(this.deps.reward(mapped.map((r) => ({ item: items[r.promptIndex]!, plan: r.text, tokenIds: r.tokenIds }))));
    }
    const localRewards = (await Promise.all(rewardJobs)).flat();
    // Global rewards in global rollout order (ranks hold contiguous chunk ranges): advantages and
    // the loss normalisers span the whole step, as on one process.
    const all = await this.gather({ rewards: localRewards, lengths: rollouts.map((ro) => ro.tokenIds.length) });
    const rewards = all.flatMap((x) => x.rewards);
    const lengths = all.flatMap((x) => x.lengths);
    const offset = all.slice(0, this.dist.rank).reduce((n, x) => n + x.rewards.length, 0);
    const r = rewards.map((x) => x.reward);
    const { advantages, keep } = this.deps.advantages(r, c.groupSize, { scale: c.scale, dropZeroVariance: c.dropZeroVariance });
    const keptGlobal = lengths.map((len, i) => keep[i] && len > 0);
    const totalSequences = keptGlobal.filter(Boolean).length;
    const totalTokens = lengths.reduce((n, len, i) => n + (keptGlobal[i] ? len : 0), 0);
    const kept = rollouts.map((ro, i) => ({ ro, adv: advantages[offset + i]!, i: offset + i })).filter((x) => keptGlobal[x.i]);
    const seqs = kept.map((x) => ({ promptIds: prompts.get(x.ro.promptIndex)!, completionIds: x.ro.tokenIds }));
    const refAdapter = c.reference === 'base' ? 'none' : 'stage-start';
    // Reference logprobs per micro-batch (the backward's batches): bounded memory, and the same
    // batch composition on one process and on N ranks (no padding-dependent rounding).
    const refLogprobs: number[][] = [];
    if (c.betaKl > 0) {
      for (const part of chunks(seqs, c.microBatch)) refLogprobs.push(...(await backend.completionLogprobs(part, this.cfg.sampling.temperature || 1, refAdapter)));
    } else {
      for (const s of seqs) refLogprobs.push(s.completionIds.map(() => 0));
    }
    const opts = {
      epsLow: c.epsLow, epsHigh: c.epsHigh, betaKl: c.betaKl, temperature: this.cfg.sampling.temperature || 1, aggregation: c.aggregation,
      totalSequences, totalCompletionTokens: totalTokens, maxCompletionLength: this.cfg.sampling.maxNewTokens,
    };
    let loss = 0;
    let kl = 0;
    let clip = 0;
    const batch = kept.map((x, j) => ({ seq: seqs[j]!, oldLogprobs: x.ro.logprobs, refLogprobs: refLogprobs[j]!, advantage: x.adv }));
    for (const mb of chunks(batch, c.microBatch)) {
      const out = await backend.grpoBackward(mb, opts);
      loss += out.loss;
      kl += out.meanKl * mb.length;
      clip += out.clipFraction * mb.length;
    }
    if (this.dist.worldSize > 1) {
      const parts = await this.gather([Number.isFinite(loss) ? loss : null, kl, clip]);
      loss = parts.reduce<number>((n, p) => n + (p[0] === null ? NaN : p[0]!), 0);
      kl = parts.reduce((n, p) => n + p[1]!, 0);
      clip = parts.reduce((n, p) => n + p[2]!, 0);
    }
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
      kl: totalSequences ? kl / totalSequences : 0,
      clipFraction: totalSequences ? clip / totalSequences : 0,
      keptSequences: totalSequences,
      completionLength: totalTokens / Math.max(1, totalSequences),
    };
  }

  /** Validation: one greedy plan per held-out item, scored by the reward function; mean r_spec (items split over ranks). */
  async validate(): Promise<number> {
    const { backend } = this.deps;
    const all = this.valItems;
    const [a, b] = shard(all.length, this.dist.rank, this.dist.worldSize);
    const items = all.slice(a, b);
    let sum = 0;
    if (items.length) {
      const prompts = await Promise.all(items.map((it) => backend.promptIds(studentMessages(it.question))));
      const rs = await backend.generate(prompts, { ...this.sampling(1, 9), temperature: 0 });
      const scores = await this.deps.reward(rs.map((r) => ({ item: items[r.promptIndex]!, plan: r.text })));
      if (this.dist.worldSize === 1) return mean(scores.map((s) => s.rSpec));
      sum = scores.reduce((n, s) => n + s.rSpec, 0);
    }
    return (await this.sumRanks(sum)) / Math.max(1, all.length);
  }
}
