/**
 * Step-wise decode engine for continuous batching (native/generate/engine.h): rows (one
 * completion each) with their own sampling settings join a running batch at the next step and
 * leave as soon as they finish or are cancelled; every step decodes one token for every live row
 * in ONE forward (plus one prefill forward for the rows that join). `serve` drives it
 * (lib/judge/serve.ts); it is the dynamic decode path of {@link generate} (same model forward,
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
import type { AdapterChoice, NativeModel } from './qwen3.js';
import { Qwen3Model } from './qwen3.js';

/** One row to decode. */
export interface EngineRow {
  /** Caller's id (an integer), unique among live rows. */
  id: number;
  /** Prompt token ids (non-empty). */
  prompt: ArrayLike<number> | Int32Array;
  temperature?: number;
  topK?: number;
  topP?: number;
  minP?: number;
  /** Integer ≥ 0; default random. */
  seed?: number;
  maxNewTokens?: number;
  stopIds?: number[];
  /** −1 (default) = no raw logprobs; 0..20 alternatives. */
  topLogprobs?: number;
}

/** One token of one row. */
export interface EngineToken {
  id: number;
  token: number;
  /** log_softmax(logits / T)[token] (greedy: T = 1), as generate() reports. */
  logprob: number;
  /** log_softmax(logits)[token] (rows with topLogprobs ≥ 0). */
  rawLogprob: number;
  /** Most likely ids under log_softmax(logits), descending, and their raw logprobs (topLogprobs > 0). */
  topIds?: Int32Array;
  topLogprobs?: Float32Array;
  /** null while running; 'stop' = a stop id was sampled (it is this token), 'length' = maxNewTokens. */
  finish: 'stop' | 'length' | null;
  /** Prompt length, on the row's first token. */
  promptTokens?: number;
}

/** Result of one {@link DecodeEngine.step}. */
export interface EngineStep {
  tokens: EngineToken[];
  /** Live rows after the step, rows still queued, rows that joined (prefilled) in this step. */
  active: number;
  waiting: number;
  joined: number;
  prefillTokens: number;
  /** Rows of the decode forward (0 when only a prefill ran). */
  batchRows: number;
  shifts: number;
  /** CUDA graphs captured in this step. */
  graphCaptures: number;
  prefillMs: number;
  decodeMs: number;
  sampleMs: number;
}

/** Options of {@link DecodeEngine}. */
export interface DecodeEngineOptions {
  /** Rows decoded together at most (default 32). */
  maxRows?: number;
  /** KV slots per row: prompt + maxNewTokens of every row must fit (default min(context, 4096)). */
  capacity?: number;
  /** Id of left padding in the joint prefill (masked). Default 0. */
  padId?: number;
  adapter?: AdapterChoice;
  /** Padded prompt tokens prefilled per step at most (at least one row always joins). Default 8192. */
  maxPrefillTokens?: number;
  /**
   * CUDA: decode each step from a captured CUDA graph (one per power-of-two bucket of rows, over a
   * static KV cache; PAPERGYM_NO_CUDA_GRAPHS=1 disables). Default true; ignored on CPU.
   */
  cudaGraphs?: boolean;
  /** Decode with the static-cache step (Qwen3Model::DecodeStatic) even without graphs (default: exactly when graphs are used). */
  staticDecode?: boolean;
}

interface NativeEngine {
  maxRows: number;
  capacity: number;
  decodePath: 'dynamic' | 'static' | 'cuda-graphs';
  add(row: object): void;
  cancel(id: number): void;
  waiting(): number;
  step(): Promise<EngineStep>;
  release(): void;
}

/** The continuous-batching engine over one model (see the module doc). */
export class DecodeEngine {
  private readonly e: NativeEngine;
  private running?: Promise<EngineStep>;

  constructor(model: Qwen3Model | NativeModel, opts: DecodeEngineOptions = {}) {
    const raw = model instanceof Qwen3Model ? model.raw : model;
    this.e = native().createDecodeEngine(raw, opts) as NativeEngine;
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

  /** Queues a row (joins at the next step with room). TypeError naming the field on bad input. */
  add(row: EngineRow): void {
    const prompt = row.prompt instanceof Int32Array ? row.prompt : Int32Array.from(row.prompt as ArrayLike<number>);
    this.e.add({ ...row, prompt });
  }

  /** Cancels a queued or live row: it produces no further token. */
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
}
