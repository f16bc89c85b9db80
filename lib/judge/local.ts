/**
 * Local judge (docs/design.md §8 "a local judge that reads P(yes) from one prefill instead of generating
 * text"): the policy's own base model with its adapter switched off (`adapter: 'none'` — the
 * frozen base, no second copy) decides each (plan, item) from the next-token distribution after
 * the per-item judge prompt. No generation.
 *
 * Per (plan, item): the user message of prompts/judge-per-item.v1.md is chat-rendered with the
 * model's template, generation prompt added and thinking disabled (Qwen3: the prompt ends with
 * `<|im_start|>assistant\n<think>\n\n</think>\n\n`) and tokenized. An {@link AnswerScorer} returns
 * log p(token | prompt) at the next position for the answer tokens; then
 * P(yes) = Σ p(yes tokens) / (Σ p(yes tokens) + Σ p(no tokens)), `met = P(yes) > threshold`
 * (default 0.5; exactly 0.5 → not met), `prob = P(yes)`. `raw` records P(yes) and the yes+no mass
 * (a small mass means the judge would not have answered yes/no at all).
 *
 * Answer tokens (`variants`):
 * - `'pair'`: "Yes" and "No" — the words the prompt asks for, which is how Qwen3 starts its
 *   answer after the empty think block. Default with the sequence-logprobs scorer.
 * - `'all'`: the strings `Yes, yes, YES, " Yes", " yes"` / `No, no, NO, " No", " no"` that encode
 *   to ONE token each (Qwen3: all ten), probabilities summed per side over casing/space variants.
 *   Default when full last-position logits are used (then it costs nothing extra).
 *
 * Scorers on the native model (both exact: equal to a teacher-forced forward at the last position):
 * - {@link sequenceLogprobsScorer} (default for a loaded model): one right-padded row per
 *   (prompt, answer token) — the prompt with the answer token appended — through the addon's
 *   `sequenceLogprobs`, which applies the lm_head only at the scored position. Cost: one prefill per
 *   answer token ('pair': 2), no [T, V] logits.
 * - {@link scorerFromLastLogits} over {@link modelLastLogits}: one prefill per prompt through
 *   `model.forward`, which returns logits for EVERY position ([B, T, V] fp32, host memory bounded by
 *   `maxLogitBytes`); any number of answer tokens for free. Preferable once the addon can return
 *   last-position logits only.
 * - {@link prefixLogprobsScorer} (on by default with sequence-logprobs, `prefixSharing`): the
 *   rubric items of one plan share the token prefix up to the item (template, question, plan), so
 *   that prefix is prefilled once into a KV cache and only the items' suffixes (≈ 10% of each
 *   prompt) are run against it (on bf16 / fp16 CUDA models and the CPU the suffixes read the one
 *   prefix's K/V in place, the shared-prefix attention of native/model/qwen3.cc; float32 CUDA
 *   models copy it into every suffix row); every answer token is read from the same row (the
 *   full log-softmax at the last position). Plans with one item, or a shared prefix under
 *   `minSharedPrefix` tokens, go through the scorer above. `planConcurrency` plans are scored at
 *   once (localJudgeForModel: 2 on CUDA), so one plan's host work hides behind another's kernels.
 *
 * Host work per call: the (plan, item) prompts are chat-rendered (identical texts judged once) —
 * with `renderOnce` (default) each plan's prompt is rendered once with a marker for the item and
 * the items substituted, when ChatTemplate.userContentVerbatim says that gives the same text —
 * and tokenized: with `tokenSplit` (default) each plan's prompt head (everything up to the line
 * end before the item) once and only the item tails per item, where Tokenizer.concatSafe proves
 * that equals tokenizing the whole prompt (else the prompt is tokenized whole). Seconds by part:
 * {@link LocalJudge.timings}; scripts/bench/judge_host.mjs (64 plans × ~1024 tokens × 17 items on
 * 2 CPU cores: host 1.2 s → 0.19 s per call).
 */
import pLimit from 'p-limit';
import { native } from '../native.js';
import type { JsTensor, PrefixLogprobsArgs, SequenceLogprobsArgs } from '../addon.js';
import { disposedError } from '../errors.js';
import '../util/dispose.js';
import { loadModel, Qwen3Model, type Device, type Dtype } from '../model/qwen3.js';
import { Tokenizer } from '../model/tokenizer.js';
import { ChatTemplate } from '../model/chat.js';
import { argError, checkOptions, describeValue } from '../util/args.js';
import { ensureInputDir } from '../util/fs.js';
import { checkJudgeRequests, countVerdicts, emptyStats, type Judge, type JudgeCallOptions, type JudgeRequest, type JudgeStats, type Verdict } from './types.js';
import { loadPrompt, perItemMessage, PER_ITEM_PROMPT, type PromptTemplate } from './verdict.js';
import { JudgeCache, requestHash } from './cache.js';
import { localVerdictKey } from './local-cache.js';

/**
 * Runs one prefill batch and returns, per row, the logits (fp32, full vocabulary) at that row's
 * last non-pad position. `inputIds` rows have different lengths; the function pads.
 */
export type LastLogitsFn = (inputIds: number[][], signal?: AbortSignal) => Promise<Float32Array[]>;

/** The slice of the native `Model` the local judge needs. */
export interface ForwardModel {
  forward(args: {
    inputIds: JsTensor<Int32Array>;
    attentionMask: JsTensor<Int32Array>;
    outputs?: ('logits' | 'hidden')[];
    adapter?: string;
  }): Promise<{ logits?: JsTensor<Float32Array> }>;
}

/**
 * Right-pads `rows` with `padId` into [B, T] int32 ids and a 0/1 mask; returns the last non-pad
 * index of each row (length − 1). Throws on an empty row.
 */
export function padRight(rows: number[][], padId: number): { ids: JsTensor<Int32Array>; mask: JsTensor<Int32Array>; last: number[] } {
  const B = rows.length;
  const T = Math.max(...rows.map((r) => r.length));
  const ids = new Int32Array(B * T).fill(padId);
  const mask = new Int32Array(B * T);
  const last: number[] = [];
  rows.forEach((r, b) => {
    if (!r.length) throw new Error('empty prompt row');
    ids.set(r, b * T);
    mask.fill(1, b * T, b * T + r.length);
    last.push(r.length - 1);
  });
  return { ids: { data: ids, shape: [B, T] }, mask: { data: mask, shape: [B, T] }, last };
}

/**
 * Indices of `lengths` longest first, cut into batches whose size is `rowsFor(longest length in the
 * batch)` (at least 1): the padding of each batch stays small and a per-call budget holds.
 */
export function* longestFirstBatches(lengths: number[], rowsFor: (len: number) => number): Generator<number[]> {
  const order = lengths.map((_, i) => i).sort((a, b) => lengths[b] - lengths[a]);
  for (let k = 0; k < order.length;) {
    const take = order.slice(k, k + Math.max(1, Math.floor(rowsFor(lengths[order[k]]))));
    k += take.length;
    yield take;
  }
}

/**
 * LastLogitsFn over a native model's `forward` with `adapter` (default 'none': the frozen base).
 * `forward` returns logits for every position ([B, T, V] fp32 on the CPU side), so rows are grouped
 * so that B·T·V·4 bytes stays under `maxLogitBytes` (default 1 GiB); only the last position of each
 * row is kept.
 */
export function modelLastLogits(
  model: ForwardModel,
  opts: { padId: number; adapter?: string; vocabSize: number; maxLogitBytes?: number; maxBatch?: number },
): LastLogitsFn {
  const budget = opts.maxLogitBytes ?? 2 ** 30;
  return async (rows, signal) => {
    const out: Float32Array[] = new Array(rows.length);
    for (const take of longestFirstBatches(
      rows.map((r) => r.length),
      (T) => Math.min(budget / (T * opts.vocabSize * 4), opts.maxBatch ?? 16),
    )) {
      signal?.throwIfAborted();
      const { ids, mask, last } = padRight(
        take.map((i) => rows[i]),
        opts.padId,
      );
      const { logits } = await model.forward({ inputIds: ids, attentionMask: mask, outputs: ['logits'], adapter: opts.adapter ?? 'none' });
      if (!logits) throw new Error('forward returned no logits');
      const [B, Tl, V] = logits.shape;
      if (B !== take.length || Tl !== ids.shape[1]) throw new Error(`forward returned logits of shape [${logits.shape}] for a [${ids.shape}] batch`);
      take.forEach((i, b) => {
        const off = (b * Tl + last[b]) * V;
        out[i] = logits.data.slice(off, off + V);
      });
    }
    return out;
  };
}

/**
 * Scores answer tokens: for each prompt (token ids), the natural-log probabilities
 * log p(candidate | prompt) at the next position, one per candidate, in `candidates` order.
 */
export type AnswerScorer = (prompts: number[][], candidates: number[], signal?: AbortSignal) => Promise<Float64Array[]>;

/** An AnswerScorer from full last-position logits: log-softmax over the whole row (fp64 sums), then the candidates. */
export function scorerFromLastLogits(fn: LastLogitsFn): AnswerScorer {
  return async (prompts, candidates, signal) => {
    const rows = await fn(prompts, signal);
    return rows.map((l) => {
      let mx = -Infinity;
      for (let i = 0; i < l.length; i++) if (l[i] > mx) mx = l[i];
      let z = 0;
      for (let i = 0; i < l.length; i++) z += Math.exp(l[i] - mx);
      const lz = mx + Math.log(z);
      return Float64Array.from(candidates, (c) => l[c] - lz);
    });
  };
}

/** The addon's `sequenceLogprobs(model, {inputIds, attentionMask, completionMask, temperature, adapter})` → [B, L] logprobs. */
type SequenceLogprobsFn<M> = (model: M, args: SequenceLogprobsArgs) => Promise<JsTensor<Float32Array>>;

/** `m` as a live model of the addon: a TypeError (ERR_PG_ARG) for anything else, `ERR_PG_DISPOSED` after dispose. */
function liveModel(m: unknown, what: string): Qwen3Model {
  if (!(m instanceof Qwen3Model)) throw argError(`${what}: model must be a Model from loadModel`);
  if (m.disposed) throw disposedError('model');
  return m;
}

/**
 * AnswerScorer over the addon's `sequenceLogprobs`: each (prompt, candidate) becomes one row
 * `prompt + [candidate]` (right-padded); only the appended position is scored, so the lm_head runs
 * on one position per row. Rows are grouped so that rows × padded length ≤ `maxTokensPerCall`
 * (default 16384). `adapter` defaults to 'none' (the frozen base).
 */
export function sequenceLogprobsScorer<M = Qwen3Model>(
  model: M,
  opts: { padId: number; adapter?: string; maxTokensPerCall?: number; fn?: SequenceLogprobsFn<M> } = { padId: 0 },
): AnswerScorer {
  const call: SequenceLogprobsFn<M> = opts.fn ?? ((m, a) => native().sequenceLogprobs(liveModel(m, 'sequenceLogprobsScorer'), a));
  const target = model;
  const budget = opts.maxTokensPerCall ?? 16384;
  return async (prompts, candidates, signal) => {
    const rows: { p: number; c: number; ids: number[] }[] = [];
    prompts.forEach((ids, p) => candidates.forEach((cand, c) => rows.push({ p, c, ids: [...ids, cand] })));
    const out = prompts.map(() => new Float64Array(candidates.length));
    for (const batch of longestFirstBatches(
      rows.map((r) => r.ids.length),
      (T) => budget / T,
    )) {
      signal?.throwIfAborted();
      const take = batch.map((i) => rows[i]);
      const T = take[0].ids.length;
      const { ids, mask, last } = padRight(
        take.map((r) => r.ids),
        opts.padId,
      );
      const cm = new Int32Array(ids.data.length);
      take.forEach((_, b) => (cm[b * T + last[b]] = 1));
      const lp = await call(target, {
        inputIds: ids,
        attentionMask: mask,
        completionMask: { data: cm, shape: [take.length, T] },
        temperature: 1,
        adapter: opts.adapter ?? 'none',
      });
      if (lp.shape[0] !== take.length || lp.shape[1] !== T) throw new Error(`sequenceLogprobs returned [${lp.shape}] for a [${take.length}, ${T}] batch`);
      take.forEach((r, b) => (out[r.p][r.c] = lp.data[b * T + last[b]]));
    }
    return out;
  };
}

/**
 * Scores answer tokens after one shared prefix: for each suffix, log p(candidate | prefix + suffix)
 * at the next position, one per candidate. The prefix is prefilled once.
 */
export type PrefixScorer = (prefix: number[], suffixes: number[][], candidates: number[], signal?: AbortSignal) => Promise<Float64Array[]>;

/** The addon's `prefixLogprobs(model, {prefixIds, suffixIds, suffixLengths, candidates, adapter})` → [n, K] logprobs. */
type PrefixLogprobsFn<M> = (model: M, args: PrefixLogprobsArgs) => Promise<JsTensor<Float32Array>>;

/** Default rows × (bucketed prefix + suffix) tokens of one {@link prefixLogprobsScorer} call. */
export const PREFIX_TOKENS_PER_CALL = 65536;

/**
 * PrefixScorer over the addon's `prefixLogprobs` (the prefix's KV cache is computed once and every
 * suffix row attends to it; suffixes right-padded with `padId`). Suffixes are split so that
 * rows × (prefix + padded suffix) ≤ `maxTokensPerCall` (default 65536), at least one row per call,
 * with both lengths as `prefixLogprobs` buckets them (the prefix to a multiple of 64, the suffixes
 * to a multiple of 16; native/steps/steps.h): its KV cache holds that many tokens per row.
 */
export function prefixLogprobsScorer<M = Qwen3Model>(
  model: M,
  opts: { padId: number; adapter?: string; maxTokensPerCall?: number; fn?: PrefixLogprobsFn<M> } = { padId: 0 },
): PrefixScorer {
  const call: PrefixLogprobsFn<M> = opts.fn ?? ((m, a) => native().prefixLogprobs(liveModel(m, 'prefixLogprobsScorer'), a));
  const target = model;
  const budget = opts.maxTokensPerCall ?? PREFIX_TOKENS_PER_CALL;
  return async (prefix, suffixes, candidates, signal) => {
    const out: Float64Array[] = new Array(suffixes.length);
    const bucketed = (S: number) => Math.ceil(prefix.length / 64) * 64 + Math.ceil(S / 16) * 16;
    for (const take of longestFirstBatches(
      suffixes.map((s) => s.length),
      (S) => budget / bucketed(S),
    )) {
      signal?.throwIfAborted();
      const { ids } = padRight(
        take.map((i) => suffixes[i]),
        opts.padId,
      );
      const lp = await call(target, {
        prefixIds: { data: Int32Array.from(prefix), shape: [1, prefix.length] },
        suffixIds: ids,
        suffixLengths: { data: Int32Array.from(take, (i) => suffixes[i].length), shape: [take.length] },
        candidates: { data: Int32Array.from(candidates), shape: [candidates.length] },
        adapter: opts.adapter ?? 'none',
      });
      if (lp.shape[0] !== take.length || lp.shape[1] !== candidates.length)
        throw new Error(`prefixLogprobs returned [${lp.shape}] for ${take.length} rows × ${candidates.length} candidates`);
      take.forEach((i, b) => (out[i] = Float64Array.from(lp.data.subarray(b * candidates.length, (b + 1) * candidates.length))));
    }
    return out;
  };
}

/** Length of the longest common prefix of token-id sequences. */
export function commonPrefixLength(seqs: number[][]): number {
  if (!seqs.length) return 0;
  let n = Math.min(...seqs.map((s) => s.length));
  for (let i = 0; i < n; i++) {
    const t = seqs[0][i];
    if (seqs.some((s) => s[i] !== t)) {
      n = i;
      break;
    }
  }
  return n;
}

/** Stands in for the rubric item when a plan's prompt is rendered once to find its head (private-use code points). */
const ITEM_MARKER = '\uE000papergym-rubric-item\uE001';

/** Default answer-token strings (summed per side). */
export const YES_STRINGS = ['Yes', 'yes', 'YES', ' Yes', ' yes'];
export const NO_STRINGS = ['No', 'no', 'NO', ' No', ' no'];

/** Ids of the strings that encode to exactly one token (deduplicated). */
export async function singleTokenIds(tok: Tokenizer, strings: string[]): Promise<number[]> {
  const ids = new Set<number>();
  for (const s of strings) {
    const e = await tok.encode(s);
    if (e.length === 1) ids.add(e[0]);
  }
  return [...ids];
}

/**
 * P(yes) from one row of logits: softmax over the full row (max-shifted, fp64 sums), then
 * Σp(yes ids) / (Σp(yes ids) + Σp(no ids)). Also returns that yes+no mass. A row with zero mass
 * on both sides (e.g. −inf logits) gives P(yes) = 0.5, mass 0.
 */
export function yesProbability(logits: Float32Array, yesIds: number[], noIds: number[]): { pYes: number; mass: number } {
  let mx = -Infinity;
  for (let i = 0; i < logits.length; i++) if (logits[i] > mx) mx = logits[i];
  let z = 0;
  for (let i = 0; i < logits.length; i++) z += Math.exp(logits[i] - mx);
  const p = (ids: number[]) => ids.reduce((a, id) => a + Math.exp(logits[id] - mx), 0) / z;
  const y = p(yesIds);
  const n = p(noIds);
  const mass = y + n;
  return { pYes: mass > 0 && Number.isFinite(mass) ? y / mass : 0.5, mass: Number.isFinite(mass) ? mass : 0 };
}

/**
 * P(yes) from answer-token logprobs: Σexp(lp yes) / (Σexp(lp yes) + Σexp(lp no)), and the yes+no
 * mass. Zero mass on both sides gives P(yes) = 0.5, mass 0.
 */
export function yesProbabilityFromLogprobs(lpYes: ArrayLike<number>, lpNo: ArrayLike<number>): { pYes: number; mass: number } {
  let y = 0;
  let n = 0;
  for (let i = 0; i < lpYes.length; i++) y += Math.exp(lpYes[i]);
  for (let i = 0; i < lpNo.length; i++) n += Math.exp(lpNo[i]);
  const mass = y + n;
  return { pYes: mass > 0 && Number.isFinite(mass) ? y / mass : 0.5, mass: Number.isFinite(mass) ? mass : 0 };
}

/** Options of {@link LocalJudge}. */
export interface LocalJudgeOptions {
  tokenizer: Tokenizer;
  template: ChatTemplate;
  /** How answer-token logprobs are computed (see the module docstring). One of scorer / lastLogits is required. */
  scorer?: AnswerScorer;
  /** Full last-position logits per prompt (wrapped with {@link scorerFromLastLogits}); used when `scorer` is absent. */
  lastLogits?: LastLogitsFn;
  /** Prompts per scorer call (default 16; the scorer may split further). */
  batchSize?: number;
  /** Answer tokens: 'pair' (Yes/No) or 'all' (casing/space variants summed). Default: 'all' with `lastLogits`, 'pair' with `scorer`. */
  variants?: 'pair' | 'all';
  /** met = P(yes) > threshold (default 0.5). */
  threshold?: number;
  prompt?: PromptTemplate;
  yesStrings?: string[];
  noStrings?: string[];
  /** Name shown in reports (default 'local'). */
  name?: string;
  /** Context length in tokens; a judge prompt longer than context − 1 gets `met: null, error: true` instead of failing the batch. */
  maxContext?: number;
  /**
   * Keep each request's verdicts in the SQLite file `path` (lib/judge/cache.ts), under a key of the
   * judge model's `identity` (lib/judge/local-cache.ts judgeModelIdentity), this judge's settings
   * and the request: a request judged before is answered from it (counted as cache hits), not
   * scored again. Verdicts with an error are not kept. Unset: no cache.
   */
  answerCache?: { path: string; identity: string };
  /**
   * Scores the prompts of one judged plan (its rubric items) after their shared token prefix (the
   * question and plan) prefilled once. Used for every plan with ≥ 2 distinct prompts whose common
   * prefix is ≥ `minSharedPrefix` tokens (default 32); other prompts go through `scorer`.
   */
  prefixScorer?: PrefixScorer;
  minSharedPrefix?: number;
  /**
   * Plans whose `prefixScorer` calls run at once (default 1): with 2 or more, a plan's call starts
   * while the previous one still runs on the device, so its host work (argument building, the
   * native call's kernel launches) overlaps that device work instead of leaving the GPU idle
   * between plans. Same verdicts in the same order either way (each plan's scores are its own).
   * A failing call stops the plans not yet started; the judge rejects with the first error once
   * the calls already running have settled.
   */
  planConcurrency?: number;
  /**
   * Tokenize each plan's prompt head (template, question, plan) once and only the item-specific
   * tail per rubric item, where {@link Tokenizer.concatSafe} proves the ids equal tokenizing the
   * whole prompt (default true; false = every prompt tokenized whole). Same ids either way.
   */
  tokenSplit?: boolean;
  /**
   * Render each plan's prompt once (with a marker in place of the item) and substitute the items,
   * when the chat template is one known to write a lone user message verbatim
   * ({@link ChatTemplate.userContentVerbatim}): the same texts as rendering every prompt (default
   * true; false = render every (plan, item) prompt).
   */
  renderOnce?: boolean;
  /** Disposed by `close()`: a model the judge owns (openLocalJudge's). */
  owned?: { dispose(): void };
}

/**
 * Cumulative host wall seconds of {@link LocalJudge.judge} by part, over all calls since the judge
 * was created (performance.now() differences; `score` includes the scorers' device work, which on
 * CUDA ends with the device-to-host copy of each call's logprobs).
 */
export interface LocalJudgeTimings {
  /** judge() calls. */
  calls: number;
  /** Chat-template rendering of the judge prompts (@huggingface/jinja) and deduplication. */
  render: number;
  /** Tokenizing the rendered prompts (the `tokenizers` Rust pool). */
  tokenize: number;
  /** Grouping prompts by plan and finding each group's shared token prefix. */
  group: number;
  /** Inside the scorers (prefix scorer and per-prompt scorer): array building plus the native calls. */
  score: number;
  /** P(yes) from the logprobs and the verdict objects. */
  map: number;
  /** Distinct prompts tokenized as plan head + item tail (token split), and tokenized whole (judge and promptsFor). */
  promptsSplit: number;
  promptsWhole: number;
  /** Prompts scored through the prefix scorer (their plan's shared head computed once), and by the per-prompt scorer. */
  promptsPrefixShared: number;
  promptsPerPrompt: number;
}

/**
 * Checks the plain-value options of {@link LocalJudge.create}, {@link localJudgeForModel} and
 * {@link openLocalJudge} (those present; undefined = the default).
 * @throws TypeError (ERR_PG_ARG) `<fn>: options.<key> must be …, got …`
 */
function checkJudgeOptions(fn: string, opts: unknown): void {
  checkOptions(fn, opts);
  const o = (opts ?? {}) as Record<string, unknown>;
  const has = (k: string) => o[k] !== undefined;
  const bad = (k: string, want: string) => argError(`${fn}: options.${k} must be ${want}, got ${describeValue(o[k])}`);
  const int = (k: string, min: number) => Number.isInteger(o[k]) && (o[k] as number) >= min;
  for (const k of ['tokenSplit', 'renderOnce', 'prefixSharing', 'ownModel']) if (has(k) && typeof o[k] !== 'boolean') throw bad(k, 'a boolean');
  for (const k of ['batchSize', 'maxTokensPerCall', 'maxLogitBytes', 'planConcurrency']) if (has(k) && !int(k, 1)) throw bad(k, 'an integer >= 1');
  if (has('minSharedPrefix') && !int('minSharedPrefix', 0)) throw bad('minSharedPrefix', 'an integer >= 0');
  if (has('threshold') && !(typeof o.threshold === 'number' && o.threshold >= 0 && o.threshold <= 1)) throw bad('threshold', 'a number in [0, 1]');
  if (has('variants') && o.variants !== 'pair' && o.variants !== 'all') throw bad('variants', "'pair' or 'all'");
  if (has('scoring') && o.scoring !== 'sequence-logprobs' && o.scoring !== 'forward-logits') throw bad('scoring', "'sequence-logprobs' or 'forward-logits'");
  if (has('answerCache')) {
    const c = o.answerCache as { path?: unknown; identity?: unknown } | null;
    if (!c || typeof c !== 'object' || typeof c.path !== 'string' || !c.path || typeof c.identity !== 'string' || !c.identity)
      throw bad('answerCache', '{path: a non-empty string, identity: a non-empty string}');
  }
}

/**
 * Local P(yes) judge (see the module docstring). Create with {@link LocalJudge.create}. Disposable:
 * `close()` (or `using`) ends it, and disposes `options.owned` (the judge's own model from
 * {@link openLocalJudge}); later `judge` calls reject with `ERR_PG_DISPOSED`.
 */
export class LocalJudge implements Judge, Disposable {
  readonly name: string;
  private readonly s: JudgeStats = emptyStats();
  private readonly t: LocalJudgeTimings = {
    calls: 0,
    render: 0,
    tokenize: 0,
    group: 0,
    score: 0,
    map: 0,
    promptsSplit: 0,
    promptsWhole: 0,
    promptsPrefixShared: 0,
    promptsPerPrompt: 0,
  };
  private readonly answers?: JudgeCache;
  private constructor(
    private readonly o: LocalJudgeOptions,
    readonly yesIds: number[],
    readonly noIds: number[],
    private readonly prompt: PromptTemplate,
  ) {
    this.name = o.name ?? 'local';
    if (o.answerCache) this.answers = new JudgeCache(o.answerCache.path);
  }

  /** Resolves the yes/no token ids; throws when either side has no single-token variant, a TypeError (ERR_PG_ARG) naming a bad option. */
  static async create(o: LocalJudgeOptions): Promise<LocalJudge> {
    if (o === null || typeof o !== 'object')
      throw argError(`LocalJudge.create: options must be an object with tokenizer, template and scorer (or lastLogits), got ${describeValue(o)}`);
    for (const k of ['tokenizer', 'template'] as const)
      if (!o[k] || typeof o[k] !== 'object') throw argError(`LocalJudge.create: options.${k} is required, got ${describeValue(o[k])}`);
    checkJudgeOptions('LocalJudge.create', o);
    // Default: all variants when full logits are at hand (free), the Yes/No pair otherwise (each answer token costs a row).
    const all = (o.variants ?? (o.lastLogits && !o.scorer ? 'all' : 'pair')) === 'all';
    const yes = await singleTokenIds(o.tokenizer, o.yesStrings ?? (all ? YES_STRINGS : ['Yes']));
    const no = await singleTokenIds(o.tokenizer, o.noStrings ?? (all ? NO_STRINGS : ['No']));
    if (!yes.length || !no.length) throw new Error(`local judge: no single-token ${!yes.length ? 'yes' : 'no'} variant in the tokenizer`);
    if (yes.some((y) => no.includes(y))) throw new Error('local judge: yes and no variants share a token id');
    const scorer = o.scorer ?? (o.lastLogits ? scorerFromLastLogits(o.lastLogits) : undefined);
    if (!scorer) throw new TypeError('local judge: pass scorer or lastLogits');
    return new LocalJudge({ ...o, scorer }, yes, no, o.prompt ?? loadPrompt(PER_ITEM_PROMPT));
  }

  stats(): JudgeStats {
    return { ...this.s };
  }

  /** Host seconds by part of every {@link judge} call so far (see {@link LocalJudgeTimings}). */
  timings(): LocalJudgeTimings {
    return { ...this.t };
  }

  /** The closing line's detail (lib/train/run.ts judgeTotals): calls, host seconds by part and how prompts were scored. */
  totalsDetail(): string {
    const t = this.t;
    return `${t.calls} calls; seconds: scoring ${t.score.toFixed(2)}, render ${t.render.toFixed(2)}, tokenize ${t.tokenize.toFixed(2)}, group ${t.group.toFixed(2)}, map ${t.map.toFixed(2)}; prompts with a shared plan prefix ${t.promptsPrefixShared}, scored one by one ${t.promptsPerPrompt}`;
  }

  private closed = false;

  /** Ends the judge (and disposes `options.owned`). Idempotent. */
  close(): void {
    if (this.closed) return;
    this.closed = true;
    this.answers?.close();
    this.o.owned?.dispose();
  }

  /** {@link close}, for `using`. */
  [Symbol.dispose](): void {
    this.close();
  }

  /** Token ids of the judge prompt for one (question, plan, item): chat-rendered, generation prompt, no thinking. */
  async promptIds(question: string, plan: string, itemText: string): Promise<number[]> {
    const text = this.o.template.render([{ role: 'user', content: perItemMessage(question, plan, { id: '', text: itemText }, this.prompt) }], {
      addGenerationPrompt: true,
      enableThinking: false,
    });
    return this.o.tokenizer.encode(text);
  }

  /**
   * Text and token ids of every (request, item) judge prompt, `[request][item]`, through the same
   * path as {@link judge} (render once + substitute, token split, when they apply); each equals the
   * chat-rendered prompt and {@link promptIds} of that (question, plan, item).
   */
  async promptsFor(requests: JudgeRequest[]): Promise<{ text: string; ids: number[] }[][]> {
    const { texts, slots, ids } = await this.encodePrompts(requests, () => {});
    const out: { text: string; ids: number[] }[][] = requests.map((r) => new Array(r.items.length));
    for (const { r, k, u } of slots) out[r][k] = { text: texts[u], ids: ids[u] };
    return out;
  }

  /**
   * Renders every (request, item) prompt (identical texts once: `slots[i].u` indexes `texts` and
   * `ids`) and tokenizes them in one batch. Render once (`renderOnce`, default on): when the chat
   * template writes a lone user message verbatim, each plan's prompt is rendered once with a marker
   * in place of the item and the items are substituted (skipped for a plan whose marked prompt
   * holds the marker more than once, or whose question or plan quotes it). Token split (`tokenSplit`, default on): the part of a
   * plan's prompts before its rubric item — template head, question, plan, up to the last line end
   * before the item, found by rendering the plan once with a marker in place of the item — is
   * tokenized once per plan, and only the rest of each prompt (item, instructions, generation
   * prompt) per item; a prompt is split only when its rendered text starts with that head and
   * {@link Tokenizer.concatSafe} holds for the two parts (then the ids equal tokenizing the whole
   * text), else it is tokenized whole. Identical heads and tails are tokenized once.
   */
  private async encodePrompts(
    requests: JudgeRequest[],
    lap: (k: 'render' | 'tokenize') => void,
  ): Promise<{ texts: string[]; slots: { r: number; k: number; u: number }[]; ids: number[][] }> {
    const tok = this.o.tokenizer;
    const split = this.o.tokenSplit !== false && tok.lineSplit === true;
    const texts: string[] = [];
    const slots: { r: number; k: number; u: number }[] = [];
    const uniq = new Map<string, number>();
    // Per unique text: [head index, tail index] into `parts`, or the text's own index there (whole).
    const plan: (number | [number, number])[] = [];
    const parts: string[] = [];
    const partIndex = new Map<string, number>();
    const part = (x: string) => {
      let i = partIndex.get(x);
      if (i === undefined) {
        i = parts.length;
        partIndex.set(x, i);
        parts.push(x);
      }
      return i;
    };
    const render = (req: JudgeRequest, text: string) =>
      this.o.template.render([{ role: 'user', content: perItemMessage(req.question, req.plan, { id: '', text }, this.prompt) }], {
        addGenerationPrompt: true,
        enableThinking: false,
      });
    // Substitution instead of one render per item: exact when the chat template writes a lone user
    // message verbatim (ChatTemplate.userContentVerbatim) and the marker occurs once in the marked
    // prompt (renderTemplate substitutes {{item}} in one pass, so the user message is then
    // fixed text + item + fixed text).
    const substitute = this.o.renderOnce !== false && this.o.template.userContentVerbatim === true;
    requests.forEach((req, r) => {
      let head: string | undefined;
      let around: [string, string] | undefined;
      if ((split || substitute) && req.items.length > 1) {
        let marked: string | undefined;
        try {
          marked = render(req, ITEM_MARKER);
        } catch {
          marked = undefined; // only a split point is lost: every prompt below is rendered with its own item
        }
        const at = marked?.indexOf(ITEM_MARKER) ?? -1;
        const nl = at > 0 ? marked!.lastIndexOf('\n', at - 1) : -1;
        if (split && nl >= 0) head = marked!.slice(0, nl + 1);
        // The one marker must be the item's: a question or plan quoting it, under a prompt without {{item}}, would otherwise be replaced.
        const quoted = req.question.includes(ITEM_MARKER) || req.plan.includes(ITEM_MARKER);
        if (substitute && !quoted && at >= 0 && marked!.lastIndexOf(ITEM_MARKER) === at)
          around = [marked!.slice(0, at), marked!.slice(at + ITEM_MARKER.length)];
      }
      req.items.forEach((it, k) => {
        const t = around ? around[0] + it.text + around[1] : render(req, it.text);
        let u = uniq.get(t);
        if (u === undefined) {
          u = texts.length;
          uniq.set(t, u);
          texts.push(t);
          // (slice + === compares flat strings with memcmp; startsWith goes character by character)
          const tail = head !== undefined && t.length > head.length && t.slice(0, head.length) === head ? t.slice(head.length) : undefined;
          plan.push(tail !== undefined && tok.concatSafe(head!, tail) ? [part(head!), part(tail)] : part(t));
        }
        slots.push({ r, k, u });
      });
    });
    lap('render');
    const partIds = await tok.encodeBatch(parts);
    const ids = plan.map((p) => (typeof p === 'number' ? partIds[p] : partIds[p[0]].concat(partIds[p[1]])));
    lap('tokenize');
    const nSplit = plan.filter((p) => typeof p !== 'number').length;
    this.t.promptsSplit += nSplit;
    this.t.promptsWhole += plan.length - nSplit;
    return { texts, slots, ids };
  }

  /**
   * Judges every (request, item) with batched prefills; identical prompts are evaluated once. With
   * an answer cache ({@link LocalJudgeOptions.answerCache}) a request judged before is answered
   * from it and only the others are scored.
   */
  async judge(requests: JudgeRequest[], opts: JudgeCallOptions = {}): Promise<Verdict[][]> {
    if (this.closed) throw disposedError(`judge ${this.name}`);
    checkJudgeRequests(`judge ${this.name}`, requests);
    const cache = this.answers;
    if (!cache) return this.score(requests, opts);
    // Everything a verdict depends on besides the model and the request.
    const settings = {
      yes: this.yesIds,
      no: this.noIds,
      threshold: this.o.threshold ?? 0.5,
      prompt: this.prompt.hash,
      maxContext: this.o.maxContext ?? null,
      name: this.name,
    };
    const keys = requests.map((r) => localVerdictKey(this.o.answerCache!.identity, settings, r));
    // A stored answer that does not read back as this request's verdicts (a damaged file) is scored again.
    const out: (Verdict[] | undefined)[] = keys.map((k, i) => {
      const hit = cache.get(k);
      if (!hit) return undefined;
      try {
        const vs = JSON.parse(hit.content) as Verdict[];
        const items = requests[i]!.items;
        return Array.isArray(vs) && vs.length === items.length && vs.every((v, j) => v?.itemId === items[j]!.id) ? vs : undefined;
      } catch {
        return undefined;
      }
    });
    const missing = out.flatMap((v, i) => (v ? [] : [i]));
    for (const vs of out)
      if (vs) {
        this.s.cacheHits += vs.length;
        countVerdicts(this.s, vs);
      }
    if (missing.length) {
      const fresh = await this.score(
        missing.map((i) => requests[i]!),
        opts,
      );
      missing.forEach((i, j) => {
        const vs = fresh[j]!;
        out[i] = vs;
        if (!vs.some((v) => v.error)) cache.set(keys[i]!, { content: JSON.stringify(vs), promptTokens: 0, completionTokens: 0 });
      });
    }
    return out as Verdict[][];
  }

  /** {@link judge} without the answer cache: scores every (request, item). */
  private async score(requests: JudgeRequest[], opts: JudgeCallOptions): Promise<Verdict[][]> {
    const tm = this.t;
    tm.calls++;
    let t0 = performance.now();
    const lap = (k: 'render' | 'tokenize' | 'group' | 'score' | 'map') => {
      const now = performance.now();
      tm[k] += (now - t0) / 1000;
      t0 = now;
    };
    const { texts, slots, ids } = await this.encodePrompts(requests, lap);
    const probs: ({ pYes: number; mass: number } | undefined)[] = new Array(texts.length);
    const limit = (this.o.maxContext ?? Infinity) - 1;
    let runnable = ids.map((_, u) => u).filter((u) => ids[u].length <= limit);
    // Real failures only: prompts longer than the context (everything else is scored below).
    const tooLong = ids.length - runnable.length;
    const candidates = [...this.yesIds, ...this.noIds];
    const ny = this.yesIds.length;
    if (this.o.prefixScorer) {
      // One prefill of each plan's shared prefix (question + plan), then its items' suffixes.
      const byRequest = new Map<number, number[]>();
      const ok = new Set(runnable);
      for (const { r, u } of slots) {
        if (!ok.has(u)) continue;
        ok.delete(u); // a prompt shared by several requests is scored once, with the first
        const g = byRequest.get(r) ?? [];
        g.push(u);
        byRequest.set(r, g);
      }
      const done = new Set<number>();
      const plans: { us: number[]; P: number }[] = [];
      for (const us of byRequest.values()) {
        if (us.length < 2) continue;
        const P = commonPrefixLength(us.map((u) => ids[u]));
        if (P < (this.o.minSharedPrefix ?? 32) || us.some((u) => ids[u].length <= P)) continue;
        plans.push({ us, P });
      }
      lap('group');
      // Up to planConcurrency plans' prefix scoring at once, so one plan's host work overlaps
      // another's device work. After the first error no further plan starts (an out of memory is
      // not retried plan by plan); the calls already running settle before it is rethrown.
      const scorer = this.o.prefixScorer;
      const limit = pLimit(Math.max(1, this.o.planConcurrency ?? 1));
      let failure: { reason: unknown } | undefined;
      const settled = await Promise.allSettled(
        plans.map(({ us, P }) =>
          limit(async () => {
            if (failure) throw failure.reason;
            try {
              opts.signal?.throwIfAborted();
              return await scorer(
                ids[us[0]].slice(0, P),
                us.map((u) => ids[u].slice(P)),
                candidates,
                opts.signal,
              );
            } catch (e) {
              failure ??= { reason: e };
              throw e;
            }
          }),
        ),
      );
      lap('score');
      if (failure) throw failure.reason;
      plans.forEach(({ us, P }, i) => {
        const lp = (settled[i] as PromiseFulfilledResult<Float64Array[]>).value;
        this.s.requests += us.length;
        this.t.promptsPrefixShared += us.length;
        this.s.promptTokens += P + us.reduce((a, u) => a + ids[u].length - P, 0);
        lp.forEach((row, j) => (probs[us[j]] = yesProbabilityFromLogprobs(row.subarray(0, ny), row.subarray(ny))));
        for (const u of us) done.add(u);
      });
      lap('map');
      runnable = runnable.filter((u) => !done.has(u));
    }
    lap('group');
    const bs = Math.max(1, this.o.batchSize ?? 16);
    for (let i = 0; i < runnable.length; i += bs) {
      opts.signal?.throwIfAborted();
      const us = runnable.slice(i, i + bs);
      const chunk = us.map((u) => ids[u]);
      lap('group');
      const lp = await this.o.scorer!(chunk, candidates, opts.signal);
      lap('score');
      this.s.requests += chunk.length;
      this.t.promptsPerPrompt += chunk.length;
      this.s.promptTokens += chunk.reduce((a, c) => a + c.length, 0);
      lp.forEach((row, j) => (probs[us[j]] = yesProbabilityFromLogprobs(row.subarray(0, ny), row.subarray(ny))));
      lap('map');
    }
    this.s.failures += tooLong;
    this.s.cacheHits += slots.length - texts.length;
    const thr = this.o.threshold ?? 0.5;
    const out: Verdict[][] = requests.map((r) => new Array(r.items.length));
    for (const { r, k, u } of slots) {
      const p = probs[u];
      const itemId = requests[r].items[k].id;
      if (!p) {
        out[r][k] = { itemId, met: null, error: true, raw: `error: judge prompt of ${ids[u].length} tokens exceeds the context of ${this.o.maxContext}` };
        continue;
      }
      out[r][k] = { itemId, met: p.pYes > thr, prob: p.pYes, raw: `P(yes)=${p.pYes.toFixed(4)} mass=${p.mass.toExponential(2)}` };
    }
    for (const vs of out) countVerdicts(this.s, vs);
    lap('map');
    return out;
  }
}

/** Options of {@link localJudgeForModel} / {@link openLocalJudge}. */
export interface LocalModelJudgeOptions {
  /** Prompts per scorer call (default 16). */
  batchSize?: number;
  threshold?: number;
  template?: ChatTemplate;
  /** 'pair' or 'all' (see the module docstring). Default: 'pair' with sequence-logprobs, 'all' with forward-logits. */
  variants?: 'pair' | 'all';
  /** 'sequence-logprobs' (default: lm_head at the scored position only) or 'forward-logits' (full logits per prompt). */
  scoring?: 'sequence-logprobs' | 'forward-logits';
  /** forward-logits: host bytes of logits per forward (default 1 GiB). */
  maxLogitBytes?: number;
  /**
   * sequence-logprobs: rows × padded length per native call (default 16384; the prefix scorer's
   * 65536), shared by the prefix scorer's calls in flight: each gets maxTokensPerCall /
   * planConcurrency, so the calls at once hold at most max(maxTokensPerCall, planConcurrency ×
   * one row) tokens (a call takes at least one row, prefix + suffix, whatever its budget).
   */
  maxTokensPerCall?: number;
  /**
   * Plans scored at once by the prefix scorer (LocalJudgeOptions.planConcurrency). Default: 2 on
   * CUDA (one plan's kernel launches overlap the previous plan's kernels: measured on an H200 at
   * 1.7B shapes with plans of 256…1024 tokens, the GPU idled 1.1 s of a 3.1 s judge call with one
   * at a time), 1 on the CPU (concurrent forwards would only share the same cores).
   */
  planConcurrency?: number;
  /**
   * sequence-logprobs: prefill each plan's shared prefix (question + plan) once and score its rubric
   * items' suffixes on its KV cache (default true; the same values as separate prefills, to
   * floating-point rounding). false = one full prefill per (plan, item).
   */
  prefixSharing?: boolean;
  /** Tokenize each plan's prompt head once and only the item tails per item where that gives the same ids (default true; see LocalJudgeOptions.tokenSplit). */
  tokenSplit?: boolean;
  /** Render each plan's prompt once and substitute the items where the chat template allows it exactly (default true; see LocalJudgeOptions.renderOnce). */
  renderOnce?: boolean;
  /** `close()` also disposes the model (openLocalJudge: the judge's own copy). Default false: the model is the caller's (e.g. the policy's). */
  ownModel?: boolean;
  /** The per-item prompt (an eval protocol's yes/no wording; default prompts/judge-per-item). */
  prompt?: PromptTemplate;
  /** The verdicts' SQLite cache and the model's identity (LocalJudgeOptions.answerCache; the scoring mode is added to the key here). */
  answerCache?: { path: string; identity: string };
}

/**
 * A local judge on an already loaded model (e.g. the policy's own model: the judge then runs the
 * frozen base through `adapter: 'none'`, no second copy). `tokenizer` must be the model's.
 */
export async function localJudgeForModel(model: Qwen3Model, tokenizer: Tokenizer, opts: LocalModelJudgeOptions = {}): Promise<LocalJudge> {
  checkJudgeOptions('localJudgeForModel', opts);
  const vocabSize = Number(model.config.vocab_size);
  if (!Number.isInteger(vocabSize) || vocabSize <= 0) throw new Error('local judge: model config has no vocab_size');
  const scorer =
    opts.scoring === 'forward-logits'
      ? scorerFromLastLogits(
          modelLastLogits(model, { padId: tokenizer.padTokenId, adapter: 'none', vocabSize, maxLogitBytes: opts.maxLogitBytes, maxBatch: opts.batchSize }),
        )
      : sequenceLogprobsScorer(model, { padId: tokenizer.padTokenId, adapter: 'none', maxTokensPerCall: opts.maxTokensPerCall });
  const ctx = Number(model.config.max_position_embeddings);
  const variants = opts.variants ?? (opts.scoring === 'forward-logits' ? 'all' : 'pair');
  const planConcurrency = opts.planConcurrency ?? (String(model.device).startsWith('cuda') ? 2 : 1);
  const prefixTokens = Math.max(1, Math.floor((opts.maxTokensPerCall ?? PREFIX_TOKENS_PER_CALL) / planConcurrency));
  const prefixScorer =
    opts.scoring !== 'forward-logits' && opts.prefixSharing !== false
      ? prefixLogprobsScorer(model, { padId: tokenizer.padTokenId, adapter: 'none', maxTokensPerCall: prefixTokens })
      : undefined;
  return LocalJudge.create({
    prefixScorer,
    tokenizer,
    template: opts.template ?? ChatTemplate.fromTokenizer(tokenizer),
    batchSize: opts.batchSize,
    threshold: opts.threshold,
    tokenSplit: opts.tokenSplit,
    renderOnce: opts.renderOnce,
    planConcurrency,
    variants,
    scorer,
    name: `local:${variants}`,
    maxContext: Number.isInteger(ctx) && ctx > 0 ? ctx : undefined,
    owned: opts.ownModel ? model : undefined,
    ...(opts.prompt && { prompt: opts.prompt }),
    ...(opts.answerCache && {
      answerCache: { path: opts.answerCache.path, identity: requestHash([opts.answerCache.identity, opts.scoring ?? 'sequence-logprobs']) },
    }),
  });
}

/**
 * Loads `dir` (config, weights, tokenizer, chat template) and returns a local judge on it with the
 * adapter off. The judge owns the model: `judge.close()` (or `dispose`, or `using`) frees it.
 * Rejects when the addon or the checkpoint cannot load.
 */
export async function openLocalJudge(
  dir: string,
  opts: LocalModelJudgeOptions & { device?: Device; dtype?: Dtype } = {},
): Promise<{ judge: LocalJudge; model: Qwen3Model; dispose: () => Promise<void> }> {
  if (typeof dir !== 'string' || dir === '')
    throw argError(`openLocalJudge: dir must be a non-empty string (the checkpoint directory), got ${describeValue(dir)}`);
  checkJudgeOptions('openLocalJudge', opts);
  ensureInputDir(dir, 'model directory');
  const tokenizer = Tokenizer.fromDir(dir);
  const model = await loadModel(dir, { device: opts.device, dtype: opts.dtype });
  try {
    const judge = await localJudgeForModel(model, tokenizer, { ...opts, ownModel: true });
    return { judge, model, dispose: async () => judge.close() };
  } catch (e) {
    model.dispose();
    throw e;
  }
}
