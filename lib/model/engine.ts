/**
 * Step-wise decode engine for continuous batching (native/generate/engine.h): rows (one
 * completion each) with their own sampling settings join a running batch at the next step and
 * leave as soon as they finish or are cancelled; every step decodes one token for every live row
 * in ONE forward (plus one prefill forward for the rows that join). `serve` drives it
 * (lib/serve/server.ts); it is the dynamic decode path of {@link generate} (same model forward,
 * same sampler {@link sampleFromLogits}) run one step at a time.
 *
 * Per row: temperature (0 = greedy), topK, topP, minP, seed (the row's own CPU generator, so a
 * seeded row samples the same ids whatever else is in the batch), maxNewTokens, stopIds, and
 * topLogprobs (−1 off; 0..20: the raw model logprob of the sampled token, log_softmax(logits) at
 * T = 1 before any truncation, plus that many most likely alternatives — what vLLM returns by
 * default, `logprobs-mode raw_logprobs`).
 *
 * KV memory: `maxRows × capacity` slots allocated on the first step (see the native class doc for
 * how rows share the slot axis). Errors: `add` throws a TypeError (ERR_PG_ARG) naming the row
 * field; a failed step (e.g. out of memory) rejects and drops every row (the engine stays usable).
 */
import { native } from '../native.js';
import type { AddonDecodeEngine, DecodeEngineOptions, EngineRow as NativeEngineRow, EngineStep } from '../addon.js';
import { disposedError } from '../errors.js';
import '../util/dispose.js';
import type { Qwen3Model } from './qwen3.js';

export type { DecodeEngineOptions, EngineStep, EngineToken } from '../addon.js';

/** One row to decode (the native row; `prompt` any array of token ids). */
export type EngineRow = Omit<NativeEngineRow, 'prompt'> & { prompt: ArrayLike<number> | Int32Array };

/** The continuous-batching engine over one model (see the module doc). */
export class DecodeEngine implements AsyncDisposable {
  private readonly e: AddonDecodeEngine;
  private running?: Promise<EngineStep>;

  /** Throws `ERR_PG_DISPOSED` on a disposed model, a TypeError naming the option on bad options. */
  constructor(model: Qwen3Model, opts: DecodeEngineOptions = {}) {
    if (model.disposed) throw disposedError('model');
    this.e = native().createDecodeEngine(model, opts);
  }

  get maxRows(): number {
    return this.e.maxRows;
  }

  get capacity(): number {
    return this.e.capacity;
  }

  /** 'dynamic' (Forward over the live rows), 'static' (DecodeStatic, eager) or 'cuda-graphs'. */
  get decodePath(): 'dynamic' | 'static' | 'cuda-graphs' {
    return this.e.decodePath;
  }

  /** Queues a row (joins at the next step with room). TypeError naming the field on bad input, or
   * when a queued or live row has the same id (an id is free again once its row finished or was cancelled). */
  add(row: EngineRow): void {
    const prompt = row.prompt instanceof Int32Array ? row.prompt : Int32Array.from(row.prompt);
    this.e.add({ ...row, prompt });
  }

  /** Cancels a row: a queued row is dropped at once (its id is free for a new row), a live row
   * produces no further token and leaves at the next step. No-op for unknown or finished ids. */
  cancel(id: number): void {
    this.e.cancel(id);
  }

  /** Rows queued, not yet admitted. */
  waiting(): number {
    return this.e.waiting();
  }

  /** Runs one step on a worker thread; steps never overlap (a second call waits for the first). */
  async step(): Promise<EngineStep> {
    while (this.running) await this.running.catch(() => undefined);
    const p = this.e.step();
    this.running = p;
    try {
      return await p;
    } finally {
      this.running = undefined;
    }
  }

  /** Waits for a running step, then frees the KV cache and drops every row. */
  async release(): Promise<void> {
    while (this.running) await this.running.catch(() => undefined);
    this.e.release();
  }

  /** {@link release}, for `await using`. */
  [Symbol.asyncDispose](): Promise<void> {
    return this.release();
  }
}
