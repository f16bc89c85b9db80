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
 * judging proceeds while the model samples); it holds the model's lock shared (the scoring calls
 * sequenceLogprobs / prefixLogprobs run beside it; training and adapter changes wait for it), and
 * generate calls on one model are also queued here so worker threads do not pile up. An `AbortSignal` stops the generation
 * before its next decode step (rejects with an Error named `AbortError`, code `ABORT_ERR`).
 *
 * Errors: TypeError (code `ERR_PG_ARG`) naming the option for bad arguments (empty prompt, prompt
 * longer than the context, temperature < 0, topP outside (0, 1], topK < 0, n < 1,
 * maxNewTokens < 1, token ids outside the vocabulary); Error code `ERR_PG_OOM` when the device runs
 * out of memory (the KV cache is freed and the model stays usable); Error code `ERR_PG_DISPOSED`
 * when the model (or the Policy) was disposed. Codes: lib/errors.ts.
 */
import { native } from '../native.js';
import type { Device, Dtype, GenerateArgs, GenerateResult, RawCompletion, SampledTokens, SampleFromLogitsOptions, SamplingParams } from '../addon.js';
import { abortError, disposedError } from '../errors.js';
import '../util/dispose.js';
import { ChatTemplate, type ChatMessage } from './chat.js';
import { loadModel, type Qwen3Model } from './qwen3.js';
import { Tokenizer } from './tokenizer.js';
import { argError, checkOptions, describeValue } from '../util/args.js';
import { ensureInputDir } from '../util/fs.js';

/** Sampling options shared by {@link generate} and {@link Policy.generate} (see {@link SamplingParams}). */
export interface SamplingOptions extends SamplingParams {
  /** Cancels before the next decode step (rejects with `ABORT_ERR`). */
  signal?: AbortSignal;
}

/**
 * Options of the low-level {@link generate}: the native {@link GenerateArgs} (prompts as token ids
 * without padding, left-padded natively; per-prompt settings; decode path switches) with an
 * AbortSignal instead of a native abort handle. Policy default stop ids: the tokenizer's (Qwen3:
 * 151645, 151643).
 */
export interface GenerateOptions extends Omit<GenerateArgs, 'prompts' | 'abortHandle'>, SamplingOptions {
  /** Prompts as token ids (no padding), each non-empty. */
  prompts: (ArrayLike<number> | Int32Array)[];
}

export type { GenerateResult, RawCompletion, SamplingParams } from '../addon.js';

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

/**
 * Batched generation on the native model (KV cache, left padding, one prefill per prompt).
 * Resolves with `prompts.length × n` completions; see the module doc for what tokenIds / logprobs
 * hold and for the errors. Runs on a worker thread; calls on one model are queued in order.
 *
 * @param model  a loaded {@link Qwen3Model}
 * @param opts   prompts (token ids) and sampling options
 * @param signal optional AbortSignal (also accepted as `opts.signal`)
 */
export function generate(model: Qwen3Model, opts: GenerateOptions, signal?: AbortSignal): Promise<GenerateResult> {
  const sig = signal ?? opts.signal;
  if (sig?.aborted) return Promise.reject(abortError('generation aborted'));
  const addon = native();
  const { signal: _s, onGroupDone, ...rest } = opts;
  if (onGroupDone !== undefined && typeof onGroupDone !== 'function')
    return Promise.reject(argError(`generate: options.onGroupDone must be a function, got ${describeValue(onGroupDone)}`));
  return enqueue(model, async () => {
    if (sig?.aborted) throw abortError('generation aborted');
    if (model.disposed) throw disposedError('model');
    const handle = addon.createAbortHandle();
    const onAbort = () => handle.abort();
    sig?.addEventListener('abort', onAbort, { once: true });
    // The callback's first error rejects the call once it finished (the native side cannot throw into JS mid-call).
    let callbackError: unknown;
    const onGroup =
      onGroupDone &&
      ((g: Parameters<NonNullable<GenerateArgs['onGroupDone']>>[0]) => {
        try {
          onGroupDone(g);
        } catch (e) {
          callbackError ??= e;
        }
      });
    try {
      const prompts = rest.prompts?.map((p) => (p instanceof Int32Array ? p : Array.from(p)));
      const res = await addon.generate(model, { ...rest, prompts, abortHandle: handle, ...(onGroup && { onGroupDone: onGroup }) });
      if (callbackError !== undefined) throw callbackError;
      return res;
    } finally {
      sig?.removeEventListener('abort', onAbort);
    }
  });
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
export function sampleFromLogits(logits: { data: Float32Array; shape: [number, number] | number[] }, opts: SampleFromLogitsOptions = {}): SampledTokens {
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
  /** Load model and adapter weights holding NaN / Inf with a warning instead of refusing them (LoadOptions.allowNonFinite). */
  allowNonFinite?: boolean;
}

/**
 * Model + tokenizer + chat template: text in, completions (ids, logprobs, text) out. Disposable:
 * `using policy = await Policy.load(dir)` frees the model's weights at the end of the block; any
 * later call throws `ERR_PG_DISPOSED`.
 */
export class Policy implements Disposable {
  /** Chat template of the tokenizer, or undefined when the checkpoint has none (then only `raw` prompts work). */
  readonly chat: ChatTemplate | undefined;
  /**
   * Where {@link Policy.load} read the model and how it placed it (`device`, `dtype` as given:
   * undefined = the loader's default for the device); undefined for a policy built from a model.
   * The local judge's answer cache keys its verdicts by it (lib/judge/local-cache.ts).
   */
  source?: { dir: string; device?: Device; dtype?: Dtype };

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
    if (typeof dir !== 'string' || dir === '')
      throw argError(`Policy.load: dir must be a non-empty string (the checkpoint directory), got ${describeValue(dir)}`);
    checkOptions('Policy.load', opts);
    for (const k of ['tokenizerDir', 'adapter'] as const) {
      const v = opts[k];
      if (v !== undefined && (typeof v !== 'string' || v === ''))
        throw argError(`Policy.load: options.${k} must be a non-empty string, got ${describeValue(v)}`);
    }
    ensureInputDir(dir, 'model directory');
    if (opts.tokenizerDir !== undefined) ensureInputDir(opts.tokenizerDir, 'tokenizer directory');
    if (opts.adapter !== undefined) ensureInputDir(opts.adapter, 'adapter directory');
    const tokenizer = Tokenizer.fromDir(opts.tokenizerDir ?? dir);
    const model = await loadModel(dir, { device: opts.device, dtype: opts.dtype, allowNonFinite: opts.allowNonFinite });
    if (opts.adapter) await model.loadAdapter(opts.adapter, { allowNonFinite: opts.allowNonFinite ?? false });
    const policy = new Policy(model, tokenizer);
    policy.source = { dir, device: opts.device, dtype: opts.dtype };
    return policy;
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
    this.assertLive();
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

  /** True once {@link dispose} ran (or the model was disposed directly). */
  get disposed(): boolean {
    return this.model.disposed;
  }

  /** Frees the model's weights (waits for a running call); later calls throw `ERR_PG_DISPOSED`. Idempotent. */
  dispose(): void {
    this.model.dispose();
  }

  /** {@link dispose}, for `using`. */
  [Symbol.dispose](): void {
    this.dispose();
  }

  private assertLive(): void {
    if (this.model.disposed) throw disposedError('policy');
  }
}
