/**
 * GPU memory plan of a training run, made before the first step: from the model shapes
 * (config.json), dtype, LoRA rank and targets, sequence lengths (longest prompt + max new tokens),
 * group size, questions per step and the memory budget (the device's memory, capped by
 * `--max-memory`), it estimates the peak allocated bytes of every phase of a step and chooses
 *   - the update micro-batch of each stage (OPSD, GRPO) and activation recompute,
 *   - the rows per decode batch of the rollouts (KV cache) and per reference-logprob call, and
 *   - the local judge's `maxTokensPerCall` (rows × tokens of its scoring calls in flight),
 * so that every phase fits under `budget × (1 − margin)`. Settings the user gave (flags, config
 * file) are kept as given; the plan then only reports whether they fit.
 *
 * ## The estimate (bytes; T = tokens of one call, ℓ = layers, b = dtype bytes)
 * Shapes: h hidden, i intermediate, q = heads·head_dim, k = kv_heads·head_dim, V vocabulary.
 *  - weights W = b · (V·h·(tied ? 1 : 2) + ℓ·(h·q + 2·h·k + q·h + 3·h·i))          (norms ignored)
 *  - LoRA P = ℓ · r · Σ_targets (in + out); float32 master + grad + AdamW m, v = 16·P bytes, plus
 *    4·P per adapter snapshot (GRPO's stage-start reference, an EMA teacher) and b·P for the
 *    per-forward cast of A/B to the model dtype.
 *  - resident R = W + LoRA state (above).
 *  - rollout: R + KV + sampler (+ M), KV = rows_bucket · (P_max + N) · ℓ · 2 · k · b (static cache,
 *    rows padded to the power-of-two bucket, full capacity), sampler = rows · V · 4 · 4 (fp32 logits,
 *    softmax, sort for top-k / top-p); M = the merged weights when the rollouts sample from the
 *    adapter merged in (generate's mergeAdapter): b · ℓ · the fused matrices with a target (q/k/v
 *    h·(q + 2k), o q·h, gate/up 2·h·i, down i·h) plus one float32 copy of the largest of them
 *    while merging.
 *  - judge (local, prefix sharing): R + maxTokensPerCall · (ℓ · 2 · k · b + κ_fwd · F · b), F the
 *    per-token forward width below: the prefix K/V copied into every suffix row (the copy path of
 *    prefixLogprobs; the shared-prefix attention of bf16 CUDA models holds one prefix row and
 *    transient per-layer buffers, so there this is an upper bound — measured at 1.7B shapes: the
 *    GRPO rollout phase with the judge inside peaked at 17.2 GB against this bound's 34.7). With the judge overlapping the rollout (grpo.judgeOverlap),
 *    the GRPO rollout phase holds both: rollout + the judge's part above R.
 *  - reference logprobs (no grad, in batches of the rollout rows): R + κ_fwd · T · F · b,
 *    F = q + 2k + 3i + 4h (q/k/v, gate, up, SwiGLU output and the residual/norm buffers of one layer).
 *  - update (loss + backward) of a micro-batch of T tokens:
 *      no recompute: R + κ_act · T · ℓ · E · b + head,
 *      recompute:    R + T · ℓ · h · b (each layer's saved input) + κ_act · T · E · b + head,
 *    E = 4h + 4q + 3k + 3i (what a layer's backward needs with a frozen base: the two norms'
 *    inputs and outputs, q/k before their norms, q/k/v after RoPE, the attention output (flash
 *    SDPA), gate and up, the SwiGLU output), plus h + q + h + i with LoRA dropout (the dropped
 *    copies of the four distinct LoRA inputs); head = the fused loss's fp32 logits chunk(s)
 *    (GRPO: one [C, V] buffer with C·V ≈ 16 M; JSD: two of ≈ 64 M; at most T·V) plus the [T, h] final hidden
 *    states and their fp32 gradient. OPSD adds the teacher's no-grad forward, which runs before the
 *    student's (its transient is below the student's saved activations and is not added).
 *  - optimizer: R (the multi-tensor AdamW works in place).
 *
 * ## Calibration (source: measured peaks on one H200, docs/performance.md)
 * κ_act = {@link KAPPA_ACT} is fitted to the three measured training steps of the `train` command
 * (`--preset`, random weights with the real shapes, embedded dataset: longest student prompt 207
 * tokens, longest teacher prompt 525, 1024 new tokens, LoRA r 64 on 7 modules with dropout 0.05,
 * bf16, no recompute): Qwen3-8B GRPO 108.9 GB (micro-batch 8), Qwen3-8B OPSD 64.3 GB (micro-batch
 * 4), Qwen3-1.7B GRPO 40.6 GB (micro-batch 8), GB = 1e9 bytes. With the value below the formula
 * reproduces them within {@link CALIBRATION_TOLERANCE} (test/memory-plan.test.ts checks it; the
 * fit gives 108.1, 64.7 and 40.3 GB: −0.7%, +0.6%, −0.7%).
 * κ_act > 1 covers what E does not count: backward's transient gradients of one layer, the
 * dropout masks, allocator rounding. κ_fwd = {@link KAPPA_FWD} is fitted to the one measured
 * no-grad forward (reference logprobs, 64 rows × 1231 tokens at 1.7B shapes: 15.75 GiB,
 * docs/performance.md "One GRPO step in a fresh process"; estimate 15.9 GiB) and gives the measured rollout peak (13.15 GiB,
 * same run) as 13.2 GiB. Out-of-sample checks against docs/performance.md "LoRA train step and MFU" (LoRA r 64, dropout 0,
 * cross-entropy, 1.7B, 4 × 2048 tokens): with recompute 6.6 GB estimated vs 6.9 GB measured
 * (−4%); without recompute 26.9 vs 21.8 GB (+24%: with dropout 0 the fused LoRA path saves less
 * than E counts, so the estimate errs on the safe side). The plan prefers smaller micro-batches,
 * which need no extra compute, and turns recompute on only when micro-batch 1 does not fit.
 *
 * Units: bytes everywhere; GB in logs and flags = 1e9 bytes.
 */
import { stageOf, STAGES, type MemoryTerms, type TrainingStage } from './stages/index.js';
import {
  bucket,
  forwardBytesPerToken,
  judgeWorkBytes,
  kvBytesPerToken,
  mergedWeightBytes,
  loraParams,
  weightParams,
  DEFAULT_MARGIN,
  type ModelShape,
  type PlanInputs,
  type PlanStageInputs,
  type PlanPhase,
  type PlanSettings,
  type MemoryPlan,
} from './memory-model.js';
import type { Stage, TrainConfig } from '../config/train.js';

export * from './memory-model.js';
import { judgeSharesPolicyWeights } from '../judge/backends/index.js';

/** The descriptors of the stages a plan covers, in registry order (the order of the phases). */
function stagesOf(x: PlanInputs): TrainingStage[] {
  for (const name of x.stages) stageOf(name); // an unknown stage is named here
  return STAGES.values().filter((st) => x.stages.includes(st.name));
}

/** Resident bytes: weights + LoRA master/grad/AdamW + the stages' adapter snapshots + the per-forward cast. */
export function residentBytes(x: PlanInputs): number {
  const P = loraParams(x.shape, x.lora.r, x.lora.targetModules);
  const snapshots = stagesOf(x).reduce((n, st) => n + (st.memory.adapterSnapshots?.(x) ?? 0), 0);
  return weightParams(x.shape) * x.dtypeBytes + 16 * P + 4 * P * snapshots + (x.dtypeBytes < 4 ? x.dtypeBytes * P : 0);
}

/** The quantities every stage's estimate shares (lib/train/stages/stage.ts MemoryTerms). */
export function memoryTerms(x: PlanInputs, st: Pick<PlanSettings, 'mergeAdapter'>): MemoryTerms {
  const s = x.shape,
    b = x.dtypeBytes,
    N = x.maxNewTokens;
  return {
    R: residentBytes(x),
    kv: kvBytesPerToken(s, b),
    sampler: (rows) => rows * s.vocabSize * 4 * 4,
    fwd: forwardBytesPerToken(s, b),
    Ls: x.promptTokens.student + N,
    Lt: x.promptTokens.teacher + N,
    merged: st.mergeAdapter ? mergedWeightBytes(s, x.lora.targetModules, b) : 0,
  };
}

/** Expected peak allocated bytes per phase for the given settings: each stage's phases (its descriptor's estimate), then the optimizer's. */
export function estimatePhases(x: PlanInputs, st: PlanSettings): Partial<Record<PlanPhase, number>> {
  const t = memoryTerms(x, st);
  const out: Partial<Record<PlanPhase, number>> = {};
  for (const stage of stagesOf(x)) Object.assign(out, stage.memory.phases(x, st, t));
  out.optimizer = t.R;
  return out;
}

function halvings(start: number): number[] {
  const out: number[] = [];
  for (let m = Math.max(1, Math.floor(start)); ; m = Math.max(1, Math.floor(m / 2))) {
    out.push(m);
    if (m === 1) break;
  }
  return out;
}

const JUDGE_TOKENS_MAX = 65536;
const JUDGE_TOKENS_MIN = 2048;

/**
 * Chooses the settings (see the module doc): for each stage the largest micro-batch (halving from
 * the configured one) whose update fits without recompute; if micro-batch 1 does not fit, recompute
 * on and again the largest micro-batch; the most rollout rows (halving from all rows of a step, in
 * whole groups) whose KV cache fits; the judge's maxTokensPerCall (halving from 65536, at least
 * 2048; with grpo.judgeOverlap on, also fitting beside the GRPO rollout). Pinned settings are kept.
 * Pure: no device access.
 */
export function planMemory(x: PlanInputs): MemoryPlan {
  const margin = x.margin ?? DEFAULT_MARGIN;
  const limit = x.budgetBytes * (1 - margin);
  const R = residentBytes(x);
  const notes: string[] = [];
  const pin = x.pinned ?? {};
  const t0 = memoryTerms(x, {});
  const Ls = t0.Ls;
  const running = stagesOf(x);
  // Update micro-batches: each stage with one, the largest (halving from the configured one) whose
  // update fits; stages that do not run keep theirs as configured.
  const withMb = running.filter((st) => st.memory.microBatch);
  const chooseMb = (st: TrainingStage, rc: boolean): number | undefined => {
    const m = st.memory.microBatch!;
    if (pin.microBatch?.[st.name]) return m.configured(x);
    return halvings(m.configured(x)).find((rows) => R + m.updateBytes(x, rows, rc, t0) <= limit);
  };
  let recompute = x.recompute;
  const pick = (rc: boolean) => withMb.map((st) => chooseMb(st, rc));
  let p = pick(recompute);
  if (p.some((m) => m === undefined) && !recompute && !pin.recompute) {
    recompute = true;
    notes.push('activation recompute on: micro-batch 1 does not fit without it');
    p = pick(true);
  }
  const microBatch: PlanSettings['microBatch'] = Object.fromEntries(
    STAGES.values().flatMap((st) => (st.memory.microBatch ? [[st.name, st.memory.microBatch.configured(x)]] : [])),
  );
  withMb.forEach((st, i) => {
    const m = st.memory.microBatch!,
      was = m.configured(x),
      now = p[i] ?? 1;
    microBatch[st.name] = now;
    if (now < was) notes.push(`${st.name.toUpperCase()} micro-batch ${was} -> ${now}`);
  });

  const kv = t0.kv;
  let rolloutRows: number;
  if (pin.rolloutRows && x.rolloutRows) {
    rolloutRows = x.rolloutRows;
  } else {
    const sampling = running.filter((st) => st.memory.rollout);
    const maxRows = Math.max(1, ...sampling.map((st) => st.memory.rollout!.maxRows(x)));
    // The same rows batch the rollouts (KV cache) and any other call a stage batches by them (GRPO: the reference logprobs).
    const fitsRows = (rows: number) =>
      R + bucket(rows) * Ls * kv + bucket(rows) * x.shape.vocabSize * 16 <= limit &&
      sampling.every((st) => st.memory.rollout!.fits?.(x, rows, t0, limit) ?? true);
    const unit = Math.max(1, ...sampling.map((st) => st.memory.rollout!.unit(x)));
    rolloutRows = unit;
    for (let r = maxRows; r >= unit; r = Math.floor(r / 2)) {
      const rr = Math.max(unit, r - (r % unit));
      if (fitsRows(rr)) {
        rolloutRows = rr;
        break;
      }
    }
  }
  // Merged-adapter rollouts: as given, or ('auto') when the rollouts with these rows fit with the copy.
  let mergeAdapter = x.mergeAdapter === true;
  if (x.mergeAdapter === 'auto') {
    const M = mergedWeightBytes(x.shape, x.lora.targetModules, x.dtypeBytes);
    mergeAdapter = R + bucket(rolloutRows) * Ls * kv + bucket(rolloutRows) * x.shape.vocabSize * 16 + M <= limit;
    if (!mergeAdapter) notes.push(`rollouts sample with the LoRA branch: the merged weights (${gb(M)} GB) do not fit beside ${rolloutRows} rollout rows`);
  }
  // With the overlap on (grpo.judgeOverlap on) the judge's calls must also fit beside the GRPO
  // rollout, so its maxTokensPerCall is chosen for both ('auto' decides below, with the standalone choice).
  const judgedPhase = running.find((st) => st.memory.judgedRollout)?.memory.judgedRollout;
  const overlapOn = x.judgeOverlap === true && x.localJudge !== false && judgedPhase !== undefined;
  // The settings chosen so far; the judge's call size is chosen next.
  const chosen = { microBatch, recompute, rolloutRows, mergeAdapter };
  const rolloutGrpo = (t: number, judgeOverlap: boolean) =>
    judgedPhase ? (estimatePhases(x, { ...chosen, judgeTokensPerCall: t, judgeOverlap })[judgedPhase] ?? 0) : 0;
  const besideRollout = (t: number) => rolloutGrpo(t, true) <= limit;
  let judge: number;
  if (pin.judgeTokensPerCall && x.judgeTokensPerCall) {
    judge = x.judgeTokensPerCall;
  } else {
    let alone = JUDGE_TOKENS_MIN;
    for (let t = JUDGE_TOKENS_MAX; t >= JUDGE_TOKENS_MIN; t /= 2) {
      if (R + judgeWorkBytes(x, t) <= limit) {
        alone = t;
        break;
      }
    }
    judge = alone;
    if (overlapOn) {
      for (let t = alone; t >= JUDGE_TOKENS_MIN && !besideRollout(t); t /= 2) judge = Math.max(JUDGE_TOKENS_MIN, t / 2);
      if (judge < alone) notes.push(`judge maxTokensPerCall ${alone} -> ${judge} to fit beside the rollout (grpo.judgeOverlap on)`);
    }
  }
  const settings: PlanSettings = { ...chosen, judgeTokensPerCall: judge };
  // The local judge beside the GRPO rollout: as given, or ('auto') when both fit at once.
  if (x.localJudge !== false && judgedPhase !== undefined) {
    settings.judgeOverlap = x.judgeOverlap === true;
    if (x.judgeOverlap === 'auto') {
      const both = rolloutGrpo(judge, true);
      settings.judgeOverlap = both <= limit;
      if (!settings.judgeOverlap)
        notes.push(`the local judge scores after the rollout: its ${gb(both - rolloutGrpo(judge, false))} GB do not fit beside the rollout`);
    }
  }
  const phases = estimatePhases(x, settings);
  const peak = Math.max(...Object.values(phases).map((v) => v ?? 0));
  const over = Object.entries(phases)
    .filter(([, v]) => (v ?? 0) > limit)
    .map(([k, v]) => `${k} ${gb(v!)} GB`);
  if (over.length)
    notes.push(
      `does not fit in ${gb(limit)} GB (budget ${gb(x.budgetBytes)} GB − ${Math.round(margin * 100)}% margin): ${over.join(', ')} — the run starts anyway: an out of memory halves the micro-batch, and one that still fails names the settings that fit`,
    );
  return { ...settings, budgetBytes: x.budgetBytes, limitBytes: limit, residentBytes: R, phases, peakBytes: peak, fits: over.length === 0, notes };
}

/** Bytes → GB (1e9) with one decimal; two significant digits below 0.1 GB (a budget of 0.001 GB read "0.0"). */
export function gb(bytes: number): string {
  const v = bytes / 1e9;
  return v >= 0.05 || v === 0 ? v.toFixed(1) : v.toPrecision(2);
}

/** One-paragraph description of a plan for the run log. */
export function formatPlan(p: MemoryPlan): string {
  const ph = Object.entries(p.phases)
    .map(([k, v]) => `${k} ${gb(v!)}`)
    .join(', ');
  const mb = Object.entries(p.microBatch)
    .map(([stage, n]) => `${stage.toUpperCase()} micro-batch ${n}, `)
    .join('');
  return `memory plan: budget ${gb(p.budgetBytes)} GB (limit ${gb(p.limitBytes)} GB); ${mb}recompute ${p.recompute ? 'on' : 'off'}, rollout rows ${p.rolloutRows}${p.mergeAdapter ? ' (merged adapter)' : ''}, judge maxTokensPerCall ${p.judgeTokensPerCall}${p.judgeOverlap ? ' (beside the rollout)' : ''}; expected peak GB per phase: ${ph}${p.notes.length ? `; ${p.notes.join('; ')}` : ''}`;
}

/**
 * Flags that would make the step fit in `budgetBytes` (for the error when micro-batch 1 with
 * recompute still runs out of memory): halves max new tokens, then questions per step / the OPSD
 * batch, until the plan fits; '' when nothing found. A merged adapter given as on
 * (`--merge-adapter on`) is given up (`--merge-adapter off`) before any of those cuts: the LoRA
 * branch samples the same policy, the cuts change the run. Likewise the local judge beside the
 * rollout (`--judge-overlap on` → `--judge-overlap off`): the same rewards, judged after the rollout.
 */
export function flagsThatFit(x: PlanInputs): string {
  const advised = STAGES.values().flatMap((st) => (st.memory.advice ? [st.memory.advice] : []));
  let y: PlanInputs = Object.assign({ ...x, recompute: true, pinned: {} }, ...advised.map((a) => a.smallest(x)));
  for (let i = 0; i < 12; i++) {
    for (const merge of x.mergeAdapter === true ? [true, false] : [x.mergeAdapter]) {
      for (const overlap of x.judgeOverlap === true ? [true, false] : [x.judgeOverlap]) {
        if (!planMemory({ ...y, mergeAdapter: merge, judgeOverlap: overlap }).fits) continue;
        return [
          `--max-new-tokens ${y.maxNewTokens}`,
          `--recompute`,
          ...advised.flatMap((a) => a.flags(y)),
          ...(merge !== x.mergeAdapter ? ['--merge-adapter off'] : []),
          ...(overlap !== x.judgeOverlap ? ['--judge-overlap off'] : []),
        ].join(' ');
      }
    }
    if (y.maxNewTokens > 64) y = { ...y, maxNewTokens: Math.floor(y.maxNewTokens / 2) };
    else {
      // Each stage's step size halved (those above 1); none left to halve: nothing fits.
      const cuts = advised.map((a) => a.shrink(y)).filter((c) => c !== undefined);
      if (!cuts.length) break;
      y = Object.assign({ ...y }, ...cuts);
    }
  }
  return '';
}

/** The config fields the run-level plan reads and sets (each stage reads its own section: its descriptor's memory.inputs). */
export type PlannableConfig = Pick<TrainConfig, 'device' | 'dtype' | 'stages' | 'lora' | 'sampling' | Stage | 'judge' | 'memory'>;

/** Which memory settings the user gave (flags or config file); the plan keeps those. */
export type PinnedSettings = NonNullable<PlanInputs['pinned']>;

/** Reads the pinned settings from partial configs (CLI flags, the config file); presets do not pin. */
export function pinnedSettings(...given: (Record<string, unknown> | undefined)[]): PinnedSettings {
  const has = (sect: string, key: string) => given.some((g) => (g?.[sect] as Record<string, unknown> | undefined)?.[key] !== undefined);
  return {
    // A stage's update micro-batch given as `<stage>.microBatch`.
    microBatch: Object.fromEntries(STAGES.values().flatMap((st) => (st.memory.microBatch ? [[st.name, has(st.name, 'microBatch')]] : []))),
    recompute: has('memory', 'recompute'),
    rolloutRows: has('memory', 'rolloutRows'),
    judgeTokensPerCall: has('memory', 'judgeTokensPerCall'),
  };
}

/**
 * The plan for a run (lib/train/run.ts): active when `memory.plan` is not 'off' and the device is
 * CUDA or `memory.maxMemory` is set; budget = min(device memory, cap). `promptTokens` are the
 * dataset's longest student / teacher prompts. Returns the plan inputs and plan, or undefined when
 * inactive (CPU without a cap). Applies the plan's settings to `cfg` in place (except pinned ones).
 */
export function planForRun(
  cfg: PlannableConfig,
  o: { shape: ModelShape; promptTokens: { student: number; teacher: number }; deviceMemoryBytes?: number; pinned: PinnedSettings },
): { inputs: PlanInputs; plan: MemoryPlan } | undefined {
  const m = cfg.memory;
  const cap = m.maxMemory ? m.maxMemory * 1e9 : undefined;
  if (m.plan === 'off' || (!cfg.device.startsWith('cuda') && cap === undefined)) return undefined;
  const budget = Math.min(cap ?? Infinity, o.deviceMemoryBytes ?? Infinity);
  if (!Number.isFinite(budget)) return undefined;
  const dtype = cfg.dtype ?? (cfg.device.startsWith('cuda') ? 'bfloat16' : 'float32');
  // The local judge beside the rollouts of the stage that judges (its descriptor's memory.judgeOverlap).
  const overlapOf = STAGES.values().find((st) => st.memory.judgeOverlap)?.memory.judgeOverlap;
  const overlap = overlapOf?.get(cfg as TrainConfig) ?? 'off';
  const inputs: PlanInputs = {
    shape: o.shape,
    dtypeBytes: dtype === 'float32' ? 4 : 2,
    lora: { r: cfg.lora.r, targetModules: cfg.lora.targetModules, dropout: cfg.lora.dropout },
    stages: cfg.stages,
    promptTokens: o.promptTokens,
    maxNewTokens: cfg.sampling.maxNewTokens,
    // Every registered stage's section (a stage that does not run is read but not planned).
    ...(Object.assign({}, ...STAGES.values().map((st) => st.memory.inputs(cfg as TrainConfig))) as PlanStageInputs),
    recompute: m.recompute,
    budgetBytes: budget,
    pinned: o.pinned,
    rolloutRows: m.rolloutRows ?? 0,
    judgeTokensPerCall: m.judgeTokensPerCall ?? 0,
    localJudge: judgeSharesPolicyWeights(cfg.judge),
    mergeAdapter: cfg.sampling.mergeAdapter === 'on' ? true : cfg.sampling.mergeAdapter === 'auto' && cfg.device.startsWith('cuda') ? 'auto' : false,
    judgeOverlap: overlap === 'on' ? true : overlap === 'auto' && cfg.device.startsWith('cuda') ? 'auto' : false,
  };
  const plan = planMemory(inputs);
  for (const st of STAGES.values()) {
    const n = plan.microBatch[st.name];
    if (st.microBatch && n !== undefined) st.microBatch.set(cfg as TrainConfig, n);
  }
  m.recompute = plan.recompute;
  m.rolloutRows = plan.rolloutRows;
  m.judgeTokensPerCall = plan.judgeTokensPerCall;
  if (cfg.sampling.mergeAdapter === 'auto' && cfg.device.startsWith('cuda')) cfg.sampling.mergeAdapter = plan.mergeAdapter ? 'on' : 'off';
  if (overlapOf && overlap === 'auto' && cfg.device.startsWith('cuda') && plan.judgeOverlap !== undefined)
    overlapOf.set(cfg as TrainConfig, plan.judgeOverlap ? 'on' : 'off');
  return { inputs, plan };
}
