/**
 * TrainBackend over the addon: Policy (model + tokenizer + chat template), native generation,
 * fused losses with grads into the LoRA parameters, and AdamW (lib/train/{losses,optim}.ts).
 * Batches are right-padded with the tokenizer's pad id; completion tokens are masked by position
 * (prompt length … prompt length + completion length), never by pad id.
 */
import { access, mkdir, readdir } from 'node:fs/promises';
import { join } from 'node:path';
import { native } from '../native.js';
import type { JsTensor } from '../native.js';
import type { HostState, ProfileResult } from '../addon.js';
import { generate, type Policy, type RawCompletion } from '../model/policy.js';
import type { TrainConfig } from '../config/train.js';
import type { ChatMessage } from '../llm/messages.js';
import type { CapturedState, TrainBackend, Rollout, SamplingOptions, Sequence, GrpoLossOptions } from './backend.js';
import { opsdBackward, grpoBackward, sequenceLogprobs } from './losses.js';
import { AdamW } from './optim.js';
import { checkOptimizerFile } from './checkpoint.js';
import type { DiagnosedToken } from './token-divergence.js';
import { ErrorCode, isPapergymError, oomError } from '../errors.js';

interface Padded {
  ids: JsTensor<Int32Array>;
  mask: JsTensor<Int32Array>;
  /** [B, L] 1 at completion positions. */
  completion: JsTensor<Float32Array>;
  L: number;
}

/** Right-pads prompt+completion rows: ids [B, L] int32, attention mask, completion mask (float32). */
export function padSequences(seqs: Sequence[], padId: number): Padded {
  const L = Math.max(1, ...seqs.map((s) => s.promptIds.length + s.completionIds.length));
  const B = seqs.length;
  const ids = new Int32Array(B * L).fill(padId);
  const mask = new Int32Array(B * L);
  const comp = new Float32Array(B * L);
  seqs.forEach((s, b) => {
    const row = [...s.promptIds, ...s.completionIds];
    for (let t = 0; t < row.length; t++) {
      ids[b * L + t] = row[t]!;
      mask[b * L + t] = 1;
      if (t >= s.promptIds.length) comp[b * L + t] = 1;
    }
  });
  return { ids: { data: ids, shape: [B, L] }, mask: { data: mask, shape: [B, L] }, completion: { data: comp, shape: [B, L] }, L };
}

/** Places per-completion values at their completion positions of a [B, L] float32 tensor. */
function alignToRows(seqs: Sequence[], L: number, values: number[][]): JsTensor<Float32Array> {
  const out = new Float32Array(seqs.length * L);
  seqs.forEach((s, b) => {
    const v = values[b]!;
    for (let j = 0; j < s.completionIds.length; j++) out[b * L + s.promptIds.length + j] = v[j] ?? 0;
  });
  return { data: out, shape: [seqs.length, L] };
}

/** Phases whose CUDA peak memory {@link NativeBackend.memory} reports (`peak<Phase>Bytes`). */
export type MemoryPhase = 'rollout' | 'reference' | 'backward' | 'optimizer';

/** Options of {@link NativeBackend} beyond the TrainConfig. */
export interface NativeBackendOptions {
  /**
   * Release the CUDA caching allocator's unused blocks (native().cudaEmptyCache()) when the step
   * switches between sampling (rollout) and update (reference logprobs, backward, optimizer), so the
   * KV cache blocks of generation and the activation blocks of training do not both stay reserved.
   * Default: `cfg.memory.emptyCache` when the config carries it, else false. Costs a
   * device synchronise and later cudaMalloc calls; no effect on CPU.
   */
  emptyCache?: boolean;
  /** `base_model_name_or_path` of saved adapters (default: cfg.model). */
  baseModelName?: string;
  /**
   * Test hook: an update micro-batch (OPSD / GRPO backward) of more than this many
   * tokens (rows × padded length) throws the addon's out-of-memory error (code ERR_PG_OOM) instead
   * of running, as a CUDA OOM inside it would. Default: `$PAPERGYM_SIMULATE_OOM_TOKENS`, else off.
   * With recompute on the limit doubles (recompute needs less memory), so a run can also be
   * driven to turn recompute on.
   */
  simulateOomAboveTokens?: number;
  /**
   * Test hook: rollouts sampled from the merged adapter fail as out of memory (ERR_PG_OOM) at
   * their first decode step, as a merged copy that does not fit would.
   */
  simulateMergedRolloutOom?: boolean;
  /** Log lines of the backend's own recoveries (the merged adapter given up after an out-of-memory). */
  log?: (line: string) => void;
}

/** The addon's out-of-memory error (as native/napi/util.cc raises it: code ERR_PG_OOM). */
function simulatedOom(tokens: number, limit: number): Error {
  return oomError(`out of memory: simulated (update micro-batch of ${tokens} tokens > PAPERGYM_SIMULATE_OOM_TOKENS ${limit})`);
}

/**
 * The training backend over one Policy: rollouts through the native generator, fused losses with
 * grads into the LoRA parameters, AdamW per stage, adapter snapshots (reference policy, EMA
 * teacher) and CUDA peak memory per phase. Snapshots, their EMA update and the optimizer state stay
 * in the addon: checkpoints write and read them natively on worker threads, never through JS copies.
 */
/** The files of a checkpoint besides the PEFT adapter's (saveState, captureState, loadState). */
const OPTIMIZER_FILE = 'optimizer.safetensors';
const snapshotFile = (name: string) => `snapshot-${name}.safetensors`;
const SNAPSHOT_FILE = /^snapshot-(.+)\.safetensors$/;

export class NativeBackend implements TrainBackend {
  private opt: AdamW | undefined;
  /** Names of the snapshots this backend made (saved with each checkpoint). */
  private readonly snapshots = new Set<string>();
  private readonly endOfTurnId: number;
  private readonly emptyCache: boolean;
  private phase: MemoryPhase | undefined;
  private processPeak = 0;
  private readonly phasePeaks = new Map<MemoryPhase, number>();

  /** `base_model_name_or_path` written into saved adapters (the checkpoint dir by default). */
  private readonly baseModelName: string;

  constructor(
    readonly policy: Policy,
    private readonly cfg: TrainConfig,
    private readonly opts: NativeBackendOptions = {},
  ) {
    const tok = policy.tokenizer;
    this.baseModelName = opts.baseModelName ?? cfg.model ?? 'papergym-native/tiny-qwen3';
    this.endOfTurnId = tok.tokenToId('<|im_end|>') ?? tok.stopIds[0]!;
    this.emptyCache = opts.emptyCache ?? cfg.memory?.emptyCache ?? false;
    const env = Number(process.env.PAPERGYM_SIMULATE_OOM_TOKENS);
    this.oomAboveTokens = opts.simulateOomAboveTokens ?? (env > 0 ? env : undefined);
    this.recompute = cfg.memory?.recompute ?? false;
  }
  private readonly oomAboveTokens: number | undefined;
  private recompute: boolean;

  /** Fault injection (see {@link NativeBackendOptions.simulateOomAboveTokens}). */
  private checkSimulatedOom(tokens: number): void {
    if (this.oomAboveTokens === undefined) return;
    const limit = this.recompute ? 2 * this.oomAboveTokens : this.oomAboveTokens;
    if (tokens > limit) throw simulatedOom(tokens, limit);
  }

  /**
   * The rollouts sample from the adapter merged into the weights (`sampling.mergeAdapter`: 'on',
   * or 'auto' on CUDA — the memory plan turns 'auto' into 'on' / 'off' before the run starts).
   */
  get mergeAdapter(): boolean {
    const m = this.cfg.sampling.mergeAdapter;
    return m === 'on' || (m === 'auto' && this.cudaIndex >= 0);
  }

  /** Activation recompute on / off (the model's per-layer gradient checkpointing). */
  setRecompute(on: boolean): void {
    this.policy.model.setGradientCheckpointing(on);
    this.recompute = on;
  }

  profileStart(): void {
    native().profileStart();
  }

  profileStop(): ProfileResult {
    return native().profileStop({ top: 100000 });
  }

  /**
   * After an out-of-memory error: waits for the device, releases the caching allocator's unused
   * blocks and returns the peak allocated bytes of the process so far (NaN on CPU).
   */
  releaseMemory(): number {
    const dev = this.cudaIndex;
    if (dev < 0) return NaN;
    this.policy.model.synchronize();
    native().cudaEmptyCache();
    const m = native().cudaMemory(dev);
    return m ? Math.max(this.processPeak, m.peakAllocatedBytes) : NaN;
  }

  /** CUDA device index of the policy model, or -1 on CPU. */
  private get cudaIndex(): number {
    const d = this.policy.model.device;
    return d.startsWith('cuda') ? Number(d.split(':')[1] ?? 0) : -1;
  }

  /**
   * Marks the start of a phase: folds the allocator peak so far into the process peak and the
   * previous phase's peak, resets the allocator peak, and (emptyCache) releases cached
   * blocks when switching between rollout and update phases. No-op on CPU.
   */
  private enterPhase(p: MemoryPhase): void {
    const dev = this.cudaIndex;
    if (dev < 0) return;
    this.foldPeak();
    const group = (x: MemoryPhase | undefined) => (x === undefined ? undefined : x === 'rollout' ? 'sample' : 'update');
    if (this.emptyCache && this.phase !== undefined && group(this.phase) !== group(p)) {
      this.policy.model.synchronize();
      native().cudaEmptyCache();
    }
    this.phase = p;
    native().cudaResetPeak(dev);
  }

  /** Adds the allocator peak since the last reset to the current phase's peak and the process peak. */
  private foldPeak(): void {
    const dev = this.cudaIndex;
    const m = dev >= 0 ? native().cudaMemory(dev) : null;
    if (!m) return;
    this.processPeak = Math.max(this.processPeak, m.peakAllocatedBytes);
    if (this.phase) this.phasePeaks.set(this.phase, Math.max(this.phasePeaks.get(this.phase) ?? 0, m.peakAllocatedBytes));
  }

  private get raw(): Policy['model'] {
    return this.policy.model;
  }

  async promptIds(messages: ChatMessage[]): Promise<number[]> {
    return (await this.policy.encodePrompts([messages], { enableThinking: this.cfg.sampling.thinking }))[0]!;
  }

  async answerIds(text: string): Promise<number[]> {
    return [...(await this.policy.tokenizer.encode(text)), this.endOfTurnId];
  }

  async generate(prompts: number[][], o: SamplingOptions, onGroup?: (promptIndex: number, group: Rollout[]) => void): Promise<Rollout[]> {
    this.enterPhase('rollout');
    const tok = this.policy.tokenizer;
    const toRollouts = async (cs: RawCompletion[]): Promise<Rollout[]> => {
      const texts = await this.policy.completionTexts(cs);
      return cs.map((c, i) => ({
        promptIndex: c.promptIndex,
        tokenIds: Array.from(c.tokenIds),
        logprobs: Array.from(c.logprobs),
        text: texts[i]!,
        finishReason: c.finishReason,
      }));
    };
    // Finished groups reach onGroup while the other rows decode (native onGroupDone); the
    // decoding of their texts runs on the JS thread meanwhile. Errors surface with the call.
    // A group the native side reports after the call resolved (it finished at the last read-back)
    // is not passed on: it comes with the result, and onGroup is never called after it.
    // Reports of a failed attempt that arrive during its retry are dropped too (attempt number).
    const early: Promise<void>[] = [];
    let resolved = false;
    let attempt = 0;
    const sample = (merge: boolean, mine = ++attempt) =>
      generate(this.policy.model, {
        prompts: prompts.map((p) => Int32Array.from(p)),
        n: o.n,
        temperature: o.temperature,
        topK: o.topK,
        topP: o.topP,
        maxNewTokens: o.maxNewTokens,
        seed: o.seed,
        stopIds: [...tok.stopIds],
        padId: tok.padTokenId,
        mergeAdapter: merge,
        ...(merge && this.opts.simulateMergedRolloutOom && { simulateOomAtStep: 0 }),
        ...(onGroup && {
          onGroupDone: (g: { promptIndex: number; completions: RawCompletion[] }) =>
            void (resolved || mine !== attempt || early.push(toRollouts(g.completions).then((rs) => onGroup(g.promptIndex, rs)))),
        }),
      });
    const merge = this.mergeAdapter;
    let res;
    try {
      res = await sample(merge);
    } catch (e) {
      // Out of memory with the merged copy (the plan was off, or its estimate short): the same
      // rollouts through the LoRA branch, and the branch for the rest of the run (the config, so
      // checkpoints carry it). Not when a group was already handed on: it came from this attempt.
      if (!merge || early.length || !isPapergymError(e, ErrorCode.OOM)) throw e;
      this.cfg.sampling.mergeAdapter = 'off';
      this.opts.log?.(
        `rollout: out of memory with the merged adapter (${(e as Error).message}); sampling through the LoRA branch from now on (sampling.mergeAdapter off)`,
      );
      res = await sample(false);
    }
    resolved = true;
    await Promise.all(early);
    return toRollouts(res.completions);
  }

  async completionLogprobs(seqs: Sequence[], temperature: number, adapter: string): Promise<number[][]> {
    this.enterPhase('reference');
    const p = padSequences(seqs, this.policy.tokenizer.padTokenId);
    const lp = await sequenceLogprobs(this.raw, { inputIds: p.ids, attentionMask: p.mask, completionMask: p.completion, temperature, adapter });
    return seqs.map((s, b) => Array.from(lp.data.subarray(b * p.L + s.promptIds.length, b * p.L + s.promptIds.length + s.completionIds.length)));
  }

  async opsdBackward(
    batch: { student: Sequence; teacher: Sequence }[],
    o: { jsdBeta: number; temperature: number; normalizer: number; teacher: string },
  ): Promise<{ loss: number }> {
    if (this.phase !== 'backward') this.enterPhase('backward');
    const pad = this.policy.tokenizer.padTokenId;
    const s = padSequences(
      batch.map((b) => b.student),
      pad,
    );
    const t = padSequences(
      batch.map((b) => b.teacher),
      pad,
    );
    this.checkSimulatedOom(batch.length * s.L);
    const r = await opsdBackward(this.raw, {
      studentIds: s.ids,
      studentMask: s.mask,
      teacherIds: t.ids,
      teacherMask: t.mask,
      studentStart: { data: Int32Array.from(batch.map((b) => b.student.promptIds.length)), shape: [batch.length] },
      teacherStart: { data: Int32Array.from(batch.map((b) => b.teacher.promptIds.length)), shape: [batch.length] },
      completionLength: { data: Int32Array.from(batch.map((b) => b.student.completionIds.length)), shape: [batch.length] },
      beta: o.jsdBeta,
      temperature: o.temperature,
      normalizer: o.normalizer,
      teacher: o.teacher,
    });
    return { loss: r.loss };
  }

  /**
   * OPSD token diagnostics (TrainBackend.opsdTokenDiagnostics): one row at a time, a student forward
   * (active adapter) and a teacher forward (`teacher` adapter) with full logits, the logits of the
   * positions that predict the completion tokens ([n, V] each) through the addon's jsdLoss (its
   * per-token JSD_β, the loss's own math), and the top tokens compared here.
   */
  async opsdTokenDiagnostics(
    batch: { student: Sequence; teacher: Sequence }[],
    o: { jsdBeta: number; temperature: number; teacher: string },
  ): Promise<DiagnosedToken[][]> {
    const out: DiagnosedToken[][] = [];
    const tok = this.policy.tokenizer;
    for (const row of batch) {
      const n = row.student.completionIds.length;
      if (!n) {
        out.push([]);
        continue;
      }
      // Logits at the positions that predict completion token j: prompt length − 1 + j.
      const completionLogits = async (seq: Sequence, adapter: string): Promise<Float32Array> => {
        const ids = [...seq.promptIds, ...seq.completionIds];
        const r = await this.raw.forward({ inputIds: { data: Int32Array.from(ids), shape: [1, ids.length] }, outputs: ['logits'], adapter });
        const V = r.logits!.shape[2]!;
        return r.logits!.data.slice((seq.promptIds.length - 1) * V, (seq.promptIds.length - 1 + n) * V);
      };
      const s = await completionLogits(row.student, 'active');
      const t = await completionLogits(row.teacher, o.teacher);
      const V = s.length / n;
      const r = await native().jsdLoss({
        studentLogits: { data: s, shape: [n, V] },
        teacherLogits: { data: t, shape: [n, V] },
        beta: o.jsdBeta,
        temperature: o.temperature,
      });
      const per = r.perToken!.data;
      const argmax = (x: Float32Array, j: number) => {
        let best = 0;
        for (let v = 1; v < V; v++) if (x[j * V + v]! > x[j * V + best]!) best = v;
        return best;
      };
      const texts = await Promise.all(row.student.completionIds.map((id) => tok.decode([id])));
      out.push(row.student.completionIds.map((id, j) => ({ id, text: texts[j]!, jsd: Number(per[j]), top1Agree: argmax(s, j) === argmax(t, j) })));
    }
    return out;
  }

  async grpoBackward(
    batch: { seq: Sequence; oldLogprobs: number[]; refLogprobs: number[]; advantage: number; tokenWeights?: number[] }[],
    o: GrpoLossOptions,
  ): Promise<{ loss: number; meanKl: number; clipFraction: number; logprobs: number[][] }> {
    if (this.phase !== 'backward') this.enterPhase('backward');
    const seqs = batch.map((b) => b.seq);
    const p = padSequences(seqs, this.policy.tokenizer.padTokenId);
    this.checkSimulatedOom(batch.length * p.L);
    const r = await grpoBackward(this.raw, {
      inputIds: p.ids,
      attentionMask: p.mask,
      completionMask: p.completion,
      oldLogprobs: alignToRows(
        seqs,
        p.L,
        batch.map((b) => b.oldLogprobs),
      ),
      refLogprobs:
        o.klCoef > 0
          ? alignToRows(
              seqs,
              p.L,
              batch.map((b) => b.refLogprobs),
            )
          : undefined,
      // Token weights (rollout correction): per-token advantages w_t·A, [B, L] (native grpoBackward takes [B] or [B, L]).
      advantages: batch.some((b) => b.tokenWeights)
        ? alignToRows(
            seqs,
            p.L,
            batch.map((b) => b.seq.completionIds.map((_, t) => b.advantage * (b.tokenWeights?.[t] ?? 1))),
          )
        : { data: Float32Array.from(batch.map((b) => b.advantage)), shape: [batch.length] },
      epsLow: o.epsLow,
      epsHigh: o.epsHigh,
      klCoef: o.klCoef,
      temperature: o.temperature,
      aggregation: o.aggregation,
      numSequences: o.totalSequences,
      numTokens: o.totalCompletionTokens,
      maxCompletionLength: o.maxCompletionLength,
    });
    // The trainer's logprobs of the completion tokens at this update ([B, L] → per completion).
    const lp = r.logprobs.data;
    const logprobs = seqs.map((s, b) => Array.from(lp.subarray(b * p.L + s.promptIds.length, b * p.L + s.promptIds.length + s.completionIds.length)));
    return { loss: r.loss, meanKl: r.meanKl, clipFraction: r.clipFraction.region, logprobs };
  }

  async sftBackward(batch: Sequence[]): Promise<{ loss: number }> {
    if (this.phase !== 'backward') this.enterPhase('backward');
    // crossEntropyBackward averages over this call's label tokens (labels[t] = the token at t,
    // predicted from t − 1); the trainer sends the whole window, so this is the window mean.
    const p = padSequences(batch, this.policy.tokenizer.padTokenId);
    const labels = new Int32Array(p.ids.data.length).fill(-100);
    batch.forEach((s, b) => {
      for (let j = 0; j < s.completionIds.length; j++) labels[b * p.L + s.promptIds.length + j] = s.completionIds[j]!;
    });
    return this.policy.model.crossEntropyBackward({ inputIds: p.ids, attentionMask: p.mask, labels: { data: labels, shape: p.ids.shape } });
  }

  resetOptimizer(lr: number, totalSteps: number): void {
    const o = this.cfg.optim;
    this.opt = new AdamW(this.policy.model, {
      lr,
      betas: o.adamBetas,
      eps: o.adamEps,
      weightDecay: o.weightDecay,
      schedule: { type: o.lrSchedule, warmupSteps: o.warmupSteps, totalSteps: Math.max(1, totalSteps) },
    });
    this.optimizerRestore = undefined;
    if (this.pendingOptimizerFile) {
      // Read natively on a worker thread now; the next step or save waits for it.
      const restore = this.opt.loadStateFile(this.pendingOptimizerFile);
      restore.catch(() => {}); // awaited (and rethrown) by optimizerStep / saveState
      this.optimizerRestore = restore;
      this.pendingOptimizerFile = undefined;
    }
  }
  /** optimizer.safetensors of the checkpoint being resumed, until the next resetOptimizer. */
  private pendingOptimizerFile: string | undefined;
  /** The restore of that file into the current optimizer, while it may still be in flight. */
  private optimizerRestore: Promise<void> | undefined;

  private async optimizer(): Promise<AdamW> {
    if (!this.opt) throw new Error('optimizer used before resetOptimizer');
    // A failed restore stays failed: a later saveState must not write this fresh optimizer (step 0,
    // zero moments) over the resumed run's state as if it were that state.
    if (this.optimizerRestore) await this.optimizerRestore;
    return this.opt;
  }

  async optimizerStep(maxGradNorm: number): Promise<{ gradNorm: number; lr: number; skipped: boolean }> {
    const opt = await this.optimizer();
    this.enterPhase('optimizer');
    const r = opt.step({ maxGradNorm, skipNonFinite: true });
    this.zeroGrad();
    return { gradNorm: r.gradNorm, lr: r.lr, skipped: r.skipped };
  }

  zeroGrad(): void {
    this.policy.model.zeroGrad();
  }

  /** Freezes the current adapter as snapshot `name` (a native copy on the model's device). */
  snapshotAdapter(name: string): void {
    this.policy.model.snapshotAdapter(name);
    this.snapshots.add(name);
  }

  /**
   * EMA teacher: s ← d·s + (1 − d)·a over every LoRA tensor, in place in the addon on the model's
   * device (lora/snapshots.h: float64 arithmetic, one rounding to float32 — bit for bit the formula
   * on JS numbers stored into a Float32Array). No tensor leaves native memory.
   */
  emaUpdate(name: string, decay: number): void {
    if (!this.snapshots.has(name)) throw new Error(`emaUpdate: no snapshot '${name}'`);
    this.policy.model.emaUpdate(name, decay);
  }

  /**
   * Writes the adapter (PEFT: adapter_model.safetensors + adapter_config.json), the optimizer state
   * (optimizer.safetensors) and each snapshot (snapshot-<name>.safetensors) into `dir`. Every file
   * is written by the addon on a worker thread (atomic temp + rename each); the JS thread only
   * queues them, so the event loop (HTTP judging, timers) keeps running.
   */
  async saveState(dir: string): Promise<void> {
    await mkdir(dir, { recursive: true });
    await this.policy.model.saveAdapter(dir, { baseModelName: this.baseModelName });
    if (this.opt) await (await this.optimizer()).saveState(join(dir, OPTIMIZER_FILE));
    for (const name of this.snapshots) await this.policy.model.saveSnapshot(name, join(dir, snapshotFile(name)));
  }

  /**
   * The state saveState writes, copied into host memory (float32, pinned on CUDA) in one pass under
   * the model lock: adapter, optimizer (after a pending resume restore), then each snapshot. The
   * result's save(dir) writes the same files on worker threads without the lock, so the next step
   * can run meanwhile; release() frees the host copies.
   */
  async captureState(): Promise<CapturedState> {
    const parts: { state: HostState; file: string }[] = [];
    const releaseAll = () => {
      for (const p of parts) p.state.release();
    };
    try {
      parts.push({ state: await this.policy.model.captureAdapter(), file: '' });
      if (this.opt) parts.push({ state: await (await this.optimizer()).captureState(), file: OPTIMIZER_FILE });
      for (const name of this.snapshots) parts.push({ state: await this.policy.model.captureSnapshot(name), file: snapshotFile(name) });
    } catch (e) {
      releaseAll();
      throw e;
    }
    const baseModelName = this.baseModelName;
    return {
      bytes: parts.reduce((n, p) => n + p.state.bytes, 0),
      async save(dir: string): Promise<void> {
        await mkdir(dir, { recursive: true });
        for (const p of parts) await (p.file ? p.state.save(join(dir, p.file)) : p.state.save(dir, { baseModelName }));
      },
      release: releaseAll,
    };
  }

  /**
   * Restores the adapter (in place, so the LoRA tensors keep their identity) and the snapshots from
   * `dir`, natively on worker threads; the optimizer state is read into the next optimizer made by
   * resetOptimizer. Reads checkpoints written by earlier versions (same files). Rejects naming the
   * file and tensor when the checkpoint does not fit the model's adapter.
   */
  async loadState(dir: string): Promise<void> {
    // The optimizer file is checked first (header and sizes), before anything is loaded or any
    // step's rollouts and judging run: a truncated or corrupt file fails the resume naming it,
    // instead of failing the first optimizer step after that step's work.
    const optPath = join(dir, OPTIMIZER_FILE);
    const hasOpt = await access(optPath).then(
      () => true,
      () => false,
    );
    if (hasOpt) checkOptimizerFile(optPath);
    await this.policy.model.loadAdapter(dir);
    for (const f of (await readdir(dir)).sort()) {
      const m = SNAPSHOT_FILE.exec(f);
      if (!m) continue;
      await this.policy.model.loadSnapshot(m[1]!, join(dir, f));
      this.snapshots.add(m[1]!);
    }
    this.pendingOptimizerFile = hasOpt ? optPath : undefined;
  }

  /** The active adapter's PEFT files into `dir` (a stage's best state; written atomically by the addon). */
  async saveAdapter(dir: string): Promise<void> {
    await this.policy.model.saveAdapter(dir, { baseModelName: this.baseModelName });
  }

  /** The adapter of `dir` becomes the active one, in place (snapshots and optimizer untouched). */
  async loadAdapter(dir: string): Promise<void> {
    await this.policy.model.loadAdapter(dir);
  }

  seedStep(seed: number): void {
    native().manualSeed(seed);
  }

  /**
   * Memory counters for the step metrics, bytes. CUDA: current allocated / reserved, the process
   * peak allocated (`peakAllocatedBytes`, as before), and the peak allocated within each phase since
   * the previous call (`peakRolloutBytes`, `peakReferenceBytes`, `peakBackwardBytes`,
   * `peakOptimizerBytes`; absent when the phase did not run). The per-phase peaks restart after each
   * call (one call per step). CPU: `{rssBytes}`.
   */
  memory(): Record<string, number> {
    const dev = this.cudaIndex;
    const m = native().cudaMemory(dev >= 0 ? dev : undefined);
    if (!m) return { rssBytes: process.memoryUsage().rss };
    this.foldPeak();
    const out: Record<string, number> = {
      allocatedBytes: m.allocatedBytes,
      peakAllocatedBytes: Math.max(this.processPeak, m.peakAllocatedBytes),
      reservedBytes: m.reservedBytes,
    };
    for (const [p, b] of this.phasePeaks) out[`peak${p[0]!.toUpperCase()}${p.slice(1)}Bytes`] = b;
    this.phasePeaks.clear();
    if (dev >= 0) native().cudaResetPeak(dev);
    return out;
  }
}
