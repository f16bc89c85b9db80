/**
 * The step-wise side of `serve` (lib/serve/server.ts) over a real model: a {@link ServeStepper} made
 * from a Policy's model + tokenizer + chat template and the continuous-batching
 * {@link DecodeEngine} (lib/model/engine.ts), plus the token facts OpenAI-format logprobs need.
 *
 * - Prompts render through the checkpoint's chat template with `tools` passed as a template
 *   variable (the Qwen3 template renders tool turns and assistant `tool_calls`).
 * - Token text and bytes for `logprobs.content[]` ({@link TokenTable}): byte-level BPE pieces are
 *   mapped back to their bytes (the GPT-2 byte↔unicode table the ByteLevel decoder inverts); added
 *   tokens are their UTF-8 content. `token` is the bytes as UTF-8 when they are valid UTF-8, else
 *   `bytes:\xNN…` (vLLM's convention for a token that is part of a multi-byte character).
 * - {@link IncrementalDetokenizer}: text deltas as tokens arrive, never splitting a multi-byte
 *   character (prefix/read offsets as in vLLM / text-generation-inference): the concatenated deltas
 *   equal the decode of all ids.
 */
import type { Tokenizer } from '../model/tokenizer.js';
import type { ChatTemplate } from '../model/chat.js';
import type { ChatMessage } from '../llm/messages.js';
import { DecodeEngine, type EngineRow, type EngineStep } from '../model/engine.js';
import type { AdapterChoice } from '../addon.js';
import type { Qwen3Model } from '../model/qwen3.js';

/** What serve's continuous-batching path needs from a model. */
export interface ServeStepper {
  /** Rows decoded together at most, and the KV slots per row (prompt + max_tokens must fit). */
  readonly maxRows: number;
  readonly capacity: number;
  /** Ids that end a row (Qwen3: `<|im_end|>`, `<|endoftext|>`); not part of the text. */
  readonly stopIds: readonly number[];
  /** Chat-rendered prompt ids. Throws a TypeError for messages the template cannot render. */
  encode(messages: ChatMessage[], opts: { enableThinking?: boolean; tools?: unknown }): Promise<number[]>;
  /** Queues a row; `adapter` names one of the served LoRA adapters (`--lora-modules`), unset = the served model. */
  add(row: EngineRow & { adapter?: string }): void;
  cancel(id: number): void;
  step(): Promise<EngineStep>;
  /** Decodes several id sequences (special tokens kept). */
  decodeBatch(ids: number[][]): Promise<string[]>;
  /** Text and UTF-8 bytes of one token. */
  tokenInfo(id: number): { token: string; bytes: number[] };
  release(): Promise<void>;
}

/** GPT-2 byte-level table: the printable character each byte is written as, inverted. */
function byteDecoder(): Map<string, number> {
  const bs: number[] = [];
  for (let b = 33; b <= 126; b++) bs.push(b);
  for (let b = 161; b <= 172; b++) bs.push(b);
  for (let b = 174; b <= 255; b++) bs.push(b);
  const cs = [...bs];
  let n = 0;
  for (let b = 0; b < 256; b++)
    if (!bs.includes(b)) {
      bs.push(b);
      cs.push(256 + n++);
    }
  const m = new Map<string, number>();
  bs.forEach((b, i) => m.set(String.fromCodePoint(cs[i]), b));
  return m;
}

const utf8 = new TextDecoder('utf-8', { fatal: true });

/** Token text / bytes by id, cached (see the module doc). */
export class TokenTable {
  private readonly cache = new Map<number, { token: string; bytes: number[] }>();
  private readonly dec = byteDecoder();

  constructor(private readonly tok: Tokenizer) {}

  get(id: number): { token: string; bytes: number[] } {
    let e = this.cache.get(id);
    if (e) return e;
    const added = this.tok.addedTokens.get(id);
    let bytes: number[];
    if (added) bytes = [...Buffer.from(added.content, 'utf8')];
    else {
      const piece = this.tok.idToToken(id) ?? '';
      const chars = [...piece];
      bytes = chars.every((c) => this.dec.has(c)) ? chars.map((c) => this.dec.get(c)!) : [...Buffer.from(piece, 'utf8')];
    }
    let token: string;
    try {
      token = utf8.decode(Uint8Array.from(bytes));
    } catch {
      token = 'bytes:' + bytes.map((b) => '\\x' + b.toString(16).padStart(2, '0')).join('');
    }
    e = { token, bytes };
    this.cache.set(id, e);
    return e;
  }
}

/**
 * Incremental detokenization of one completion. `push(id)` records a token; `pending()` gives
 * the two windows to decode (batched by the caller); `accept(prefixText, fullText, final)` turns
 * them into the new text delta: empty while the window ends in an incomplete UTF-8 sequence
 * (U+FFFD), unless `final`.
 */
export class IncrementalDetokenizer {
  readonly ids: number[] = [];
  private prefixOffset = 0;
  private readOffset = 0;

  push(id: number): void {
    this.ids.push(id);
  }

  /** [ids of the already-emitted context window, ids of that window plus the new tokens]. */
  windows(): [number[], number[]] {
    return [this.ids.slice(this.prefixOffset, this.readOffset), this.ids.slice(this.prefixOffset)];
  }

  accept(prefixText: string, fullText: string, final: boolean): string {
    if (fullText.length > prefixText.length && (final || !fullText.endsWith('\uFFFD'))) {
      const delta = fullText.slice(prefixText.length);
      this.prefixOffset = this.readOffset;
      this.readOffset = this.ids.length;
      return delta;
    }
    return '';
  }
}

/** A rendered prompt that cannot fit the context, found before tokenizing it (a lower bound on its tokens). */
export class PromptTooLongError extends Error {
  constructor(
    readonly atLeastTokens: number,
    readonly bytes: number,
    readonly capacity: number,
  ) {
    super(`prompt of at least ${atLeastTokens} tokens (${bytes} bytes rendered) leaves no room in the context of ${capacity} tokens`);
    this.name = 'PromptTooLongError';
  }
}

/**
 * A {@link ServeStepper} over a model, tokenizer and chat template (a Policy's parts).
 * `maxRows` (default 32), `capacity` (KV slots per row; default min(context, 4096)).
 *
 * Several adapters (`adapters`: served name → the model's snapshot holding it, `serve
 * --lora-modules`): the native engine decodes with one adapter choice per engine (native/generate/
 * engine.h takes one AdapterSel), so rows of different adapters cannot share one forward. Each
 * adapter gets its own engine, made on its first row (its KV, maxRows × capacity slots, allocated
 * on its first step); a step steps every engine with rows, one after the other — each adapter's
 * rows decode together, every adapter advances one token per step, and an idle adapter costs
 * nothing.
 */
export function modelStepper(
  parts: { model: Qwen3Model; tokenizer: Tokenizer; chat?: ChatTemplate },
  opts: { maxRows?: number; capacity?: number; maxPrefillTokens?: number; adapters?: Readonly<Record<string, AdapterChoice>> } = {},
): ServeStepper {
  const { model, tokenizer, chat } = parts;
  const make = (adapter?: AdapterChoice) =>
    new DecodeEngine(model, {
      maxRows: opts.maxRows ?? 32,
      capacity: opts.capacity,
      padId: tokenizer.padTokenId,
      maxPrefillTokens: opts.maxPrefillTokens,
      ...(adapter !== undefined && { adapter }),
    });
  const engine = make();
  /** Engines by served adapter name ('' = the served model), and each engine's rows not yet finished. */
  const engines = new Map<string, { engine: DecodeEngine; rows: Set<number> }>([['', { engine, rows: new Set() }]]);
  const rowEngine = new Map<number, { engine: DecodeEngine; rows: Set<number> }>();
  const engineFor = (name: string | undefined) => {
    const key = name ?? '';
    let e = engines.get(key);
    if (!e) {
      const choice = opts.adapters?.[key];
      if (choice === undefined) throw new TypeError(`adapter '${key}' is not served (${Object.keys(opts.adapters ?? {}).join(', ') || 'none'})`);
      e = { engine: make(choice), rows: new Set() };
      engines.set(key, e);
    }
    return e;
  };
  const table = new TokenTable(tokenizer);
  let longest = 0;
  /** Bytes of the vocabulary's longest token: a text of B bytes has at least ceil(B / this) tokens. */
  const maxTokenBytes = () => {
    if (longest) return longest;
    const dec = byteDecoder();
    for (let id = 0; id < tokenizer.vocabSize; id++) {
      const added = tokenizer.addedTokens.get(id);
      const piece = added ? added.content : (tokenizer.idToToken(id) ?? '');
      const chars = [...piece];
      const n = !added && chars.every((c) => dec.has(c)) ? chars.length : Buffer.byteLength(piece, 'utf8');
      if (n > longest) longest = n;
    }
    longest = Math.max(1, longest);
    return longest;
  };
  return {
    maxRows: engine.maxRows,
    capacity: engine.capacity,
    stopIds: tokenizer.stopIds,
    async encode(messages, o) {
      if (!chat) throw new TypeError('the checkpoint has no chat_template');
      const text = chat.render(messages, {
        addGenerationPrompt: true,
        enableThinking: o.enableThinking,
        extra: o.tools !== undefined ? { tools: o.tools } : undefined,
      });
      // The context check before tokenizing (issue 38 item 7: an 8 MB prompt took 16-50 s and ~2 GB
      // to tokenize whole): no token is longer than the vocabulary's longest, so bytes / that bound
      // the token count from below; a prompt that cannot fit is refused without being tokenized.
      const bytes = Buffer.byteLength(text, 'utf8');
      const atLeast = Math.ceil(bytes / maxTokenBytes());
      if (atLeast >= engine.capacity) throw new PromptTooLongError(atLeast, bytes, engine.capacity);
      return tokenizer.encode(text, { addSpecialTokens: false });
    },
    add: ({ adapter, ...row }) => {
      const e = engineFor(adapter);
      e.engine.add(row);
      e.rows.add(row.id);
      rowEngine.set(row.id, e);
    },
    cancel: (id) => {
      const e = rowEngine.get(id);
      if (!e) return;
      e.engine.cancel(id);
      e.rows.delete(id);
      rowEngine.delete(id);
    },
    async step() {
      const busy = [...engines.values()].filter((e) => e.rows.size || e.engine.waiting());
      if (busy.length <= 1) return track(await (busy[0] ?? engines.get('')!).engine.step());
      const steps: EngineStep[] = [];
      for (const e of busy) steps.push(track(await e.engine.step()));
      return mergeSteps(steps);
    },
    decodeBatch: (ids) => tokenizer.decodeBatch(ids.map((a) => a.filter((t) => t < tokenizer.vocabSize))),
    tokenInfo: (id) => table.get(id),
    release: async () => {
      for (const e of engines.values()) await e.engine.release();
    },
  };
  /** Forgets the rows that finished in a step. */
  function track(step: EngineStep): EngineStep {
    for (const t of step.tokens)
      if (t.finish !== null) {
        rowEngine.get(t.id)?.rows.delete(t.id);
        rowEngine.delete(t.id);
      }
    return step;
  }
}

/** One step of several engines as one: tokens in engine order, counts and times summed. */
function mergeSteps(steps: EngineStep[]): EngineStep {
  const sum = (k: keyof EngineStep) => steps.reduce((a, s) => a + (s[k] as number), 0);
  return {
    tokens: steps.flatMap((s) => s.tokens),
    active: sum('active'),
    waiting: sum('waiting'),
    joined: sum('joined'),
    prefillTokens: sum('prefillTokens'),
    batchRows: sum('batchRows'),
    shifts: sum('shifts'),
    graphCaptures: sum('graphCaptures'),
    prefillMs: sum('prefillMs'),
    decodeMs: sum('decodeMs'),
    sampleMs: sum('sampleMs'),
  };
}
