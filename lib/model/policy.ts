/**
 * Rollouts: batched sampling with a KV cache on the native model (native/generate/), and the
 * `Policy` wrapper that bundles model + tokenizer + chat template.
 *
 * What a completion holds (both the low-level {@link generate} and {@link Policy.generate}):
 * - `tokenIds` (Int32Array, length = number of sampled tokens): the sampled ids in order. When
 *   `finishReason` is `'stop'`, the LAST id is the stop id that ended it (kept, so training also
 *   scores the decision to stop). Padding never appears.
 * - `logprobs` (Float32Array, same length, natural log): for each sampled token,
 *   `log_softmax(logits / T)[token]` over the FULL vocabulary (all `vocab_size` logits), computed
 *   in float32 from the final-position logits, BEFORE top-k / top-p truncation. This is exactly
 *   what a teacher-forced forward of the same tokens at the same temperature recomputes, so the
 *   GRPO ratio ρ = exp(logp − logp_old) is 1 at step 0. Greedy (`temperature: 0`) returns the
 *   log-softmax at T = 1.
 * - `finishReason`: `'stop'` (a stop id was sampled) or `'length'` (`maxNewTokens` reached).
 *
 * Sampling: scaled = logits / T; top-k keeps the k largest; top-p keeps, in descending order,
 * every token whose preceding (renormalised) mass is < topP; one token is drawn from the kept mass
 * by inverse-CDF with one uniform per row per step from a per-call CPU generator seeded by `seed`.
 * The same seed, prompts and options give the same samples on the same device/dtype (a row's draw
 * does not depend on which other rows are still running).
 *
 * Execution: the native call runs on a libuv worker thread (the event loop stays free: HTTP
 * judging proceeds while the model samples); it holds the model's mutex, and calls on one model
 * are also queued here so worker threads do not pile up. An `AbortSignal` stops the generation
 * before its next decode step (rejects with an Error named `AbortError`, code `ABORT_ERR`).
 *
 * Errors: TypeError (code `ERR_PG_ARG`) naming the option for bad arguments (empty prompt, prompt
 * longer than the context, temperature < 0, topP outside (0, 1], topK < 0, n < 1,
 * maxNewTokens < 1, token ids outside the vocabulary); Error code `ERR_PG_OOM` when the device runs
 * out of memory (the KV cache is freed and the model stays usable); Error `ERR_PG_INPUT` when the
 * model was disposed.
 */
import { native } from '../native.js';
import { ChatTemplate, type ChatMessage } from './chat.js';
import { loadModel, type AdapterChoice, type Device, type Dtype, type NativeModel, Qwen3Model } from './qwen3.js';
import { Tokenizer } from './tokenizer.js';
import { argError, checkOptions, describeValue } from '../util/args.js';
import { ensureInputDir } from '../util/fs.js';

/** Sampling options shared by {@link generate} and {@link Policy.generate}. */
export interface SamplingOptions {
  /** Completions per prompt, ≥ 1 (the prompt is prefilled once and its KV cache rows copied). Default 1. */
  n?: number;
  /** Temperature ≥ 0; 0 = greedy. Default 1. */
  temperature?: number;
  /** Keep the k most likely tokens; 0 = off. Default 0. */
  topK?: number;
  /** Nucleus mass in (0, 1]; 1 = off. Default 1. */
  topP?: number;
  /** Min-p in [0, 1]: keep tokens with p ≥ minP · p_max (after top-k / top-p); 0 = off. Default 0. */
  minP?: number;
  /** New tokens per completion, ≥ 1; prompt length + maxNewTokens must fit the context. Default 256. */
  maxNewTokens?: number;
  /** Integer seed ≥ 0 (< 2^53). Default: random (returned in the result). */
  seed?: number;
  /** Any of these ends a completion. Policy default: the tokenizer's stop ids (Qwen3: 151645, 151643). */
  stopIds?: number[];
  /** Cancels before the next decode step. */
  signal?: AbortSignal;
  /** Adapter used by every forward: 'active' (default), 'none' (frozen base), or a snapshot name. */
  adapter?: AdapterChoice;
}

/** Options of the low-level {@link generate}. */
export interface GenerateOptions extends SamplingOptions {
  /** Prompts as token ids (no padding), each non-empty. They are left-padded natively. */
  prompts: (ArrayLike<number> | Int32Array)[];
  /** Id written into left padding (masked out). Default 0. */
  padId?: number;
  /**
   * Per-prompt settings, one entry per prompt (its n rows share it), each field defaulting to the
   * call's: rows with different settings decode in ONE batch (one forward per step; the sampler
   * applies each row's temperature / topK / topP / minP). When any entry has a `seed`, every row
   * draws from its own generator (sample j of a prompt seeded s: s for j = 0, a mix of (s, j)
   * otherwise; prompts without a seed: a generator derived from the call's seed), so a seeded
   * prompt samples the same ids alone as in any batch. Without seeds all rows draw from the
   * call's generator as before.
   */
  promptOptions?: { temperature?: number; topK?: number; topP?: number; minP?: number; seed?: number; maxNewTokens?: number; stopIds?: number[] }[];
  /** Remove finished rows from the batch once they are at least this fraction of it, (0, 1]. Default 0.125. */
  compactFraction?: number;
  /** Test hook: throw a (simulated) out-of-memory error at this decode step. */
  simulateOomAtStep?: number;
  /**
   * CUDA only: decode with one CUDA-graph replay per step (default true on CUDA builds; env
   * PAPERGYM_NO_CUDA_GRAPHS=1 disables). The graph holds the whole step: the decode forward of the
   * last sampled tokens and, for greedy, full-vocabulary and top-k sampling, the sampler too (its
   * uniforms are drawn up front from the seeded generator, so samples equal the other paths'). With
   * top-p but no top-k the sampler checks a value on the host, so it runs after each replay instead
   * (`samplingInStep: false` in the result).
   */
  cudaGraphs?: boolean;
  /** Decode from a static, full-capacity KV cache (default: on exactly when CUDA graphs are used). */
  staticCache?: boolean;
  /** Static path: pad the batch up to a power-of-two bucket (padded rows masked). Default true. */
  padToBucket?: boolean;
  /**
   * Static path (static cache / CUDA graphs): copy the sampled tokens back to the host and check
   * the stop ids every `syncEvery` decode steps (integer ≥ 1, default 8) instead of after every
   * token, so the device runs ahead without a host round trip per token. Results (tokens,
   * logprobs, finish reasons) do not depend on it; the cost is at most `syncEvery − 1` wasted
   * decode steps after the last row stopped (counted in `steps`). 1 = check after every token.
   * The dynamic path always checks after every token.
   */
  syncEvery?: number;
}

/** One completion of the low-level {@link generate}. */
export interface RawCompletion {
  /** Index into `prompts`. */
  promptIndex: number;
  /** 0 … n−1 within the prompt's group. Completions are ordered by (promptIndex, sampleIndex). */
  sampleIndex: number;
  /** Sampled ids; ends with the stop id when finishReason is 'stop'. */
  tokenIds: Int32Array;
  /** Natural-log probability of each sampled id under softmax(logits / T), full vocabulary (see module doc). */
  logprobs: Float32Array;
  finishReason: 'stop' | 'length';
}

/** Result of the low-level {@link generate}. */
export interface GenerateResult {
  /** prompts.length × n completions, ordered by (promptIndex, sampleIndex): groups are contiguous. */
  completions: RawCompletion[];
  /** The seed used (given or drawn). */
  seed: number;
  /** Sum of prompt lengths (tokens, without padding). */
  promptTokens: number;
  /** Sum of completion lengths (tokens). */
  newTokens: number;
  /** Decode forwards run after the prefill (static path: including up to syncEvery − 1 after the last row stopped). */
  steps: number;
  /** Times finished rows were compacted out of the batch. */
  compactions: number;
  /** Which decode loop ran: 'dynamic' (growing cache, compaction), 'static' or 'cuda-graphs'. */
  decodePath?: 'dynamic' | 'static' | 'cuda-graphs';
  /** CUDA graphs captured by this call. */
  graphCaptures?: number;
  /** Rows decoded per step (the bucket size on the static path). */
  batchRows?: number;
  /** Static path: the sampler ran inside the decode step (inside the CUDA graph with graphs); false with top-p without top-k, and on the dynamic path. */
  samplingInStep?: boolean;
  /** Wall time of the prefill (ms) and of the decode loop (ms). */
  prefillMs: number;
  decodeMs: number;
}

/** A native abort flag (see native/generate/register.cc). */
interface AbortHandle {
  abort(): void;
  aborted(): boolean;
}

function abortError(): Error {
  const e = new Error('generation aborted');
  e.name = 'AbortError';
  (e as Error & { code: string }).code = 'ABORT_ERR';
  return e;
}


const queues = new WeakMap<object, Promise<unknown>>();

/** Runs `fn` after every earlier queued call on `key` settled (FIFO per model). */
function enqueue<T>(key: object, fn: () => Promise<T>): Promise<T> {
  const prev = queues.get(key) ?? Promise.resolve();
  const run = prev.then(fn, fn);
  queues.set(
    key,
    run.then(
      () => undefined,
      () => undefined,
    ),
  );
  return run;
}

function rawOf(model: Qwen3Model | NativeModel): NativeModel {
  return model instanceof Qwen3Model ? model.raw : model;
}

/**
 * Batched generation on the native model (KV cache, left padding, one prefill per prompt).
 * Resolves with `prompts.length × n` completions; see the module doc for what tokenIds / logprobs
 * hold and for the errors. Runs on a worker thread; calls on one model are queued in order.
 *
 * @param model  a loaded {@link Qwen3Model} (or its `raw` native object)
 * @param opts   prompts (token ids) and sampling options
 * @param signal optional AbortSignal (also accepted as `opts.signal`)
 */
export function generate(model: Qwen3Model | NativeModel, opts: GenerateOptions, signal?: AbortSignal): Promise<GenerateResult> {
  const raw = rawOf(model);
  const sig = signal ?? opts.signal;
  if (sig?.aborted) return Promise.reject(abortError());
  const addon = native();
  const { signal: _s, ...rest } = opts;
  return enqueue(raw, async () => {
    if (sig?.aborted) throw abortError();
    const handle = addon.createAbortHandle() as AbortHandle;
    const onAbort = () => handle.abort();
    sig?.addEventListener('abort', onAbort, { once: true });
    try {
      const prompts = rest.prompts?.map((p) => (p instanceof Int32Array ? p : Array.from(p)));
      return (await addon.generate(raw, { ...rest, prompts, abortHandle: handle })) as GenerateResult;
    } finally {
      sig?.removeEventListener('abort', onAbort);
    }
  });
}

/** Sampling settings of one logits row for {@link sampleFromLogits}'s `rows`. */
export interface RowSamplingOptions {
  temperature?: number;
  topK?: number;
  topP?: number;
  minP?: number;
}

/**
 * The sampler of {@link generate} applied to given logits `[R, V]` (float32, row-major):
 * one token per row. Synchronous. For tests and tools.
 *
 * R uniforms are drawn from one CPU generator seeded with `seed` (returned as `uniforms`, so a
 * caller can recompute each draw), then every row is sampled with the one setting of `opts`, or,
 * with `rows` (R entries), each with its own setting (the per-row sampler of a mixed batch).
 * `device` ('cpu' default, 'cuda', 'cuda:i') is where the sampler runs (the logits are copied there).
 * Returns token ids `[R]`, their logprobs under log_softmax(logits / T) (full row; greedy rows
 * under T = 1) and the uniforms `[R]`. Errors: TypeError (code ERR_PG_ARG) for a bad shape,
 * option or device.
 */
export function sampleFromLogits(
  logits: { data: Float32Array; shape: [number, number] | number[] },
  opts: RowSamplingOptions & { seed?: number; rows?: RowSamplingOptions[]; device?: string } = {},
): { tokenIds: Int32Array; logprobs: Float32Array; uniforms: Float32Array; seed: number } {
  return native().sampleFromLogits(logits, opts);
}

/** A prompt for {@link Policy.generate}: a user message (string) or a whole conversation. */
export type PolicyPrompt = string | ChatMessage[];

/** Options of {@link Policy.generate}. */
export interface PolicyGenerateOptions extends SamplingOptions {
  /** Qwen3 thinking switch passed to the chat template (false = empty think block). Default: template default (thinking on). */
  enableThinking?: boolean;
  /** Tokenize string prompts as they are instead of rendering them as a user message. Default false. */
  raw?: boolean;
  /** System message prepended to string prompts (ignored for message arrays and raw prompts). */
  system?: string;
}

/** One completion of {@link Policy.generate}. */
export interface PolicyCompletion extends RawCompletion {
  /** Decoded completion text without the final stop token (special tokens inside are kept). */
  text: string;
}

/** {@link Policy.generateWithStats} result. */
export interface PolicyGenerateResult extends Omit<GenerateResult, 'completions'> {
  completions: PolicyCompletion[];
  /** Token ids of each rendered prompt (index = promptIndex). */
  promptIds: number[][];
}

/** Options of {@link Policy.load}. */
export interface PolicyLoadOptions {
  device?: Device;
  dtype?: Dtype;
  /** PEFT adapter directory loaded as the active adapter. */
  adapter?: string;
  /** Directory of tokenizer.json / tokenizer_config.json when not in the checkpoint dir. */
  tokenizerDir?: string;
}

/**
 * Model + tokenizer + chat template: text in, completions (ids, logprobs, text) out.
 */
export class Policy {
  /** Chat template of the tokenizer, or undefined when the checkpoint has none (then only `raw` prompts work). */
  readonly chat: ChatTemplate | undefined;

  constructor(
    readonly model: Qwen3Model,
    readonly tokenizer: Tokenizer,
    chat?: ChatTemplate,
  ) {
    this.chat = chat ?? (tokenizer.chatTemplate ? ChatTemplate.fromTokenizer(tokenizer) : undefined);
  }

  /**
   * Loads model, tokenizer and chat template from a checkpoint directory (optionally a PEFT adapter).
   * Rejects with a TypeError (ERR_PG_ARG) naming the argument when `dir` or an option has the
   * wrong type, and with `model directory X does not exist` (likewise for `tokenizerDir`,
   * `adapter`) before anything is loaded.
   */
  static async load(dir: string, opts: PolicyLoadOptions = {}): Promise<Policy> {
    if (typeof dir !== 'string' || dir === '') throw argError(`Policy.load: dir must be a non-empty string (the checkpoint directory), got ${describeValue(dir)}`);
    checkOptions('Policy.load', opts);
    for (const k of ['tokenizerDir', 'adapter'] as const) {
      const v = opts[k];
      if (v !== undefined && (typeof v !== 'string' || v === '')) throw argError(`Policy.load: options.${k} must be a non-empty string, got ${describeValue(v)}`);
    }
    ensureInputDir(dir, 'model directory');
    if (opts.tokenizerDir !== undefined) ensureInputDir(opts.tokenizerDir, 'tokenizer directory');
    if (opts.adapter !== undefined) ensureInputDir(opts.adapter, 'adapter directory');
    const tokenizer = Tokenizer.fromDir(opts.tokenizerDir ?? dir);
    const model = await loadModel(dir, { device: opts.device, dtype: opts.dtype });
    if (opts.adapter) await model.loadAdapter(opts.adapter);
    return new Policy(model, tokenizer);
  }

  /** Context length (config `max_position_embeddings`), or Infinity when unknown. */
  get contextLength(): number {
    const c = this.model.config.max_position_embeddings;
    return typeof c === 'number' && c > 0 ? c : Infinity;
  }

  /**
   * Renders (chat template, add_generation_prompt) and tokenizes prompts. TypeError naming
   * `prompts[i]` when a prompt is empty or malformed.
   */
  async encodePrompts(prompts: PolicyPrompt[], opts: Pick<PolicyGenerateOptions, 'enableThinking' | 'raw' | 'system'> = {}): Promise<number[][]> {
    if (!Array.isArray(prompts) || prompts.length === 0) throw argError('prompts must be a non-empty array of strings or message arrays');
    const texts = prompts.map((p, i) => {
      if (typeof p === 'string') {
        if (p.trim() === '') throw argError(`prompts[${i}] is empty`);
        if (opts.raw) return p;
        const msgs: ChatMessage[] = opts.system ? [{ role: 'system', content: opts.system }] : [];
        msgs.push({ role: 'user', content: p });
        return this.render(msgs, opts.enableThinking, i);
      }
      if (!Array.isArray(p) || p.length === 0) throw argError(`prompts[${i}] is empty (expected a string or a non-empty message array)`);
      return this.render(p, opts.enableThinking, i);
    });
    return this.tokenizer.encodeBatch(texts);
  }

  private render(msgs: ChatMessage[], enableThinking: boolean | undefined, i: number): string {
    if (!this.chat) throw argError(`prompts[${i}]: the checkpoint has no chat_template; pass raw: true`);
    try {
      return this.chat.render(msgs, { addGenerationPrompt: true, enableThinking });
    } catch (e) {
      throw e instanceof TypeError ? argError(`prompts[${i}]: ${e.message}`) : e;
    }
  }

  /**
   * Samples `n` completions per prompt. Resolves `prompts.length × n` completions ordered by
   * (promptIndex, sampleIndex), each `{promptIndex, sampleIndex, tokenIds, logprobs, text,
   * finishReason}` (see the module doc). Defaults: n 1, temperature 1, topK 0, topP 1,
   * maxNewTokens 256, stopIds = tokenizer.stopIds, random seed.
   */
  async generate(prompts: PolicyPrompt[], opts: PolicyGenerateOptions = {}): Promise<PolicyCompletion[]> {
    return (await this.generateWithStats(prompts, opts)).completions;
  }

  /** {@link generate} plus the seed, rendered prompt ids and timing counters. */
  async generateWithStats(prompts: PolicyPrompt[], opts: PolicyGenerateOptions = {}): Promise<PolicyGenerateResult> {
    const promptIds = await this.encodePrompts(prompts, opts);
    const { enableThinking: _e, raw: _r, system: _s, ...sampling } = opts;
    const res = await generate(this.model, {
      ...sampling,
      prompts: promptIds.map((p) => Int32Array.from(p)),
      stopIds: opts.stopIds ?? [...this.tokenizer.stopIds],
      padId: this.tokenizer.padTokenId,
    });
    const texts = await this.completionTexts(res.completions, opts.stopIds);
    return { ...res, promptIds, completions: res.completions.map((c, i) => ({ ...c, text: texts[i] })) };
  }

  /**
   * Decoded text of each completion: the final stop id (when finishReason is 'stop') and ids the
   * tokenizer has no token for (random models can sample the padded vocabulary rows) are left out;
   * special tokens inside are kept. `stopIds` defaults to the tokenizer's.
   */
  completionTexts(completions: Pick<RawCompletion, 'tokenIds' | 'finishReason'>[], stopIds?: readonly number[]): Promise<string[]> {
    const stops = new Set(stopIds ?? this.tokenizer.stopIds);
    const bodies = completions.map((c) => {
      const ids = Array.from(c.tokenIds);
      if (c.finishReason === 'stop' && ids.length && stops.has(ids[ids.length - 1])) ids.pop();
      return ids.filter((t) => t < this.tokenizer.vocabSize);
    });
    return this.tokenizer.decodeBatch(bodies);
  }

  /** Frees the model's weights (see Qwen3Model.dispose). */
  dispose(): void {
    this.model.dispose();
  }
}
