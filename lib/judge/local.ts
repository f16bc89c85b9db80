/**
 * Local judge (DESIGN §8 "a local judge that reads P(yes) from one prefill instead of generating
 * text"): the policy's own base model with its adapter switched off (`adapter: 'none'` — the
 * frozen base, no second copy) decides each (plan, item) from the next-token distribution after
 * the per-item judge prompt.
 *
 * Per (plan, item): the user message of prompts/judge-per-item.v1.md is chat-rendered with the
 * model's template, generation prompt added and thinking disabled (Qwen3: the prompt ends with
 * `<|im_start|>assistant\n<think>\n\n</think>\n\n`), tokenized, and all such prompts are run as
 * right-padded prefill batches; the logits at each row's last non-pad position give
 * p = softmax(logits). P(yes) = Σ p(yes variants) / (Σ p(yes variants) + Σ p(no variants)).
 * `met = P(yes) > threshold` (default 0.5; exactly 0.5 → not met), `prob = P(yes)`.
 *
 * Yes/no tokens: the strings `Yes, yes, YES, " Yes", " yes"` and `No, no, NO, " No", " no"` that
 * the tokenizer encodes as ONE token each (Qwen3: all ten are single tokens); probabilities are
 * summed over these casing/space variants. A variant that is not a single token is skipped; none
 * for either side is an error at construction. `raw` records P(yes) and the yes+no mass (a small
 * mass means the judge would not have answered yes/no at all).
 */
import type { JsTensor } from '../native.js';
import { loadModel, type Device, type Dtype, type Qwen3Model } from '../model/qwen3.js';
import { Tokenizer } from '../model/tokenizer.js';
import { ChatTemplate } from '../model/chat.js';
import { countVerdicts, emptyStats, type Judge, type JudgeCallOptions, type JudgeRequest, type JudgeStats, type Verdict } from './types.js';
import { loadPrompt, perItemMessage, PER_ITEM_PROMPT, type PromptTemplate } from './verdict.js';

/**
 * Runs one prefill batch and returns, per row, the logits (fp32, full vocabulary) at that row's
 * last non-pad position. `inputIds` rows have different lengths; the function pads.
 */
export type LastLogitsFn = (inputIds: number[][], signal?: AbortSignal) => Promise<Float32Array[]>;

/** The slice of the native `Model` the local judge needs. */
export interface ForwardModel {
  forward(args: { inputIds: JsTensor<Int32Array>; attentionMask: JsTensor<Int32Array>; outputs?: ('logits' | 'hidden')[]; adapter?: string }): Promise<{ logits?: JsTensor<Float32Array> }>;
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
 * LastLogitsFn over a native model's `forward` with `adapter` (default 'none': the frozen base).
 * `forward` returns logits for every position ([B, T, V] fp32 on the CPU side), so rows are grouped
 * so that B·T·V·4 bytes stays under `maxLogitBytes` (default 1 GiB); only the last position of each
 * row is kept.
 */
export function modelLastLogits(model: ForwardModel, opts: { padId: number; adapter?: string; vocabSize: number; maxLogitBytes?: number; maxBatch?: number }): LastLogitsFn {
  const budget = opts.maxLogitBytes ?? 2 ** 30;
  return async (rows, signal) => {
    const out: Float32Array[] = new Array(rows.length);
    const order = rows.map((_, i) => i).sort((a, b) => rows[b].length - rows[a].length);
    let k = 0;
    while (k < order.length) {
      signal?.throwIfAborted();
      const T = rows[order[k]].length;
      const fit = Math.max(1, Math.floor(budget / (T * opts.vocabSize * 4)));
      const take = order.slice(k, k + Math.min(fit, opts.maxBatch ?? 16));
      k += take.length;
      const { ids, mask, last } = padRight(take.map((i) => rows[i]), opts.padId);
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

/** Options of {@link LocalJudge}. */
export interface LocalJudgeOptions {
  tokenizer: Tokenizer;
  template: ChatTemplate;
  lastLogits: LastLogitsFn;
  /** Prompts per `lastLogits` call (default 16; the model function may split further). */
  batchSize?: number;
  /** met = P(yes) > threshold (default 0.5). */
  threshold?: number;
  prompt?: PromptTemplate;
  yesStrings?: string[];
  noStrings?: string[];
  /** Name shown in reports (default 'local'). */
  name?: string;
}

/** Local P(yes) judge (see the module docstring). Create with {@link LocalJudge.create}. */
export class LocalJudge implements Judge {
  readonly name: string;
  private readonly s: JudgeStats = emptyStats();
  private constructor(
    private readonly o: LocalJudgeOptions,
    readonly yesIds: number[],
    readonly noIds: number[],
    private readonly prompt: PromptTemplate,
  ) {
    this.name = o.name ?? 'local';
  }

  /** Resolves the yes/no token ids; throws when either side has no single-token variant. */
  static async create(o: LocalJudgeOptions): Promise<LocalJudge> {
    const yes = await singleTokenIds(o.tokenizer, o.yesStrings ?? YES_STRINGS);
    const no = await singleTokenIds(o.tokenizer, o.noStrings ?? NO_STRINGS);
    if (!yes.length || !no.length) throw new Error(`local judge: no single-token ${!yes.length ? 'yes' : 'no'} variant in the tokenizer`);
    if (yes.some((y) => no.includes(y))) throw new Error('local judge: yes and no variants share a token id');
    return new LocalJudge(o, yes, no, o.prompt ?? loadPrompt(PER_ITEM_PROMPT));
  }

  stats(): JudgeStats {
    return { ...this.s };
  }

  /** Token ids of the judge prompt for one (question, plan, item): chat-rendered, generation prompt, no thinking. */
  async promptIds(question: string, plan: string, itemText: string): Promise<number[]> {
    const text = this.o.template.render([{ role: 'user', content: perItemMessage(question, plan, { id: '', text: itemText }, this.prompt) }], { addGenerationPrompt: true, enableThinking: false });
    return this.o.tokenizer.encode(text);
  }

  /** Judges every (request, item) with batched prefills; identical prompts are evaluated once. */
  async judge(requests: JudgeRequest[], opts: JudgeCallOptions = {}): Promise<Verdict[][]> {
    const texts: string[] = [];
    const slots: { r: number; k: number; u: number }[] = [];
    const uniq = new Map<string, number>();
    requests.forEach((req, r) =>
      req.items.forEach((it, k) => {
        const t = this.o.template.render([{ role: 'user', content: perItemMessage(req.question, req.plan, it, this.prompt) }], { addGenerationPrompt: true, enableThinking: false });
        let u = uniq.get(t);
        if (u === undefined) {
          u = texts.length;
          uniq.set(t, u);
          texts.push(t);
        }
        slots.push({ r, k, u });
      }),
    );
    const ids = await this.o.tokenizer.encodeBatch(texts);
    const probs: { pYes: number; mass: number }[] = new Array(texts.length);
    const bs = Math.max(1, this.o.batchSize ?? 16);
    for (let i = 0; i < ids.length; i += bs) {
      opts.signal?.throwIfAborted();
      const chunk = ids.slice(i, i + bs);
      const logits = await this.o.lastLogits(chunk, opts.signal);
      this.s.requests += chunk.length;
      this.s.promptTokens += chunk.reduce((a, c) => a + c.length, 0);
      logits.forEach((row, j) => (probs[i + j] = yesProbability(row, this.yesIds, this.noIds)));
    }
    this.s.cacheHits += slots.length - texts.length;
    const thr = this.o.threshold ?? 0.5;
    const out: Verdict[][] = requests.map((r) => new Array(r.items.length));
    for (const { r, k, u } of slots) {
      const { pYes, mass } = probs[u];
      out[r][k] = { itemId: requests[r].items[k].id, met: pYes > thr, prob: pYes, raw: `P(yes)=${pYes.toFixed(4)} mass=${mass.toExponential(2)}` };
    }
    for (const vs of out) countVerdicts(this.s, vs);
    return out;
  }
}

/**
 * A local judge on an already loaded model (e.g. the policy's own model: the judge then runs the
 * frozen base through `adapter: 'none'`, no second copy). `tokenizer` must be the model's.
 */
export async function localJudgeForModel(
  model: ForwardModel & { config: Record<string, unknown> },
  tokenizer: Tokenizer,
  opts: { batchSize?: number; maxLogitBytes?: number; threshold?: number; template?: ChatTemplate } = {},
): Promise<LocalJudge> {
  const vocabSize = Number(model.config.vocab_size);
  if (!Number.isInteger(vocabSize) || vocabSize <= 0) throw new Error('local judge: model config has no vocab_size');
  return LocalJudge.create({
    tokenizer,
    template: opts.template ?? ChatTemplate.fromTokenizer(tokenizer),
    batchSize: opts.batchSize,
    threshold: opts.threshold,
    lastLogits: modelLastLogits(model, { padId: tokenizer.padTokenId, adapter: 'none', vocabSize, maxLogitBytes: opts.maxLogitBytes, maxBatch: opts.batchSize }),
  });
}

/**
 * Loads `dir` (config, weights, tokenizer, chat template) and returns a local judge on it with the
 * adapter off. `dispose` frees the model. Rejects when the addon or the checkpoint cannot load.
 */
export async function openLocalJudge(dir: string, opts: { device?: Device; dtype?: Dtype; batchSize?: number; maxLogitBytes?: number } = {}): Promise<{ judge: LocalJudge; model: Qwen3Model; dispose: () => Promise<void> }> {
  const tokenizer = Tokenizer.fromDir(dir);
  const model = await loadModel(dir, { device: opts.device, dtype: opts.dtype });
  try {
    const judge = await localJudgeForModel(model, tokenizer, opts);
    return { judge, model, dispose: async () => model.dispose() };
  } catch (e) {
    model.dispose();
    throw e;
  }
}
