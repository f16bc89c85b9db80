/**
 * Bounded work before any compute (issue 38 item 2, issue 50 item 1): the model's config.json sizes
 * are checked before the addon allocates anything (every command: lib/model/decoder.ts loadModel), the dataset's bytes are checked for invalid UTF-8,
 * and every row's prompts are checked, in tokens, against the model's context before the first
 * step, so a row that cannot fit fails the run at its start (naming the row) instead of mid-run.
 */
import { closeSync, openSync, readFileSync, readSync, readdirSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { inputError } from '../errors.js';
import { MAX_TOKENS_PER_STEP } from '../config/schema.js';
import { studentMessages, teacherMessages } from '../task/prompts.js';
import type { TaskItem } from '../task/types.js';

/**
 * Largest values of the size fields of a model's config.json that `train` loads. Far above any
 * released decoder (Qwen3-235B: 94 layers, hidden 4096; Llama-3.1-405B: 126 layers, hidden 16384,
 * vocab 128256; context 1M tokens at most): a larger value is a corrupt or hostile file, refused
 * before the addon reads it (1e8 layers would allocate gigabytes before any other check).
 */
export const MODEL_CONFIG_LIMITS: Record<string, number> = {
  num_hidden_layers: 1024,
  hidden_size: 65536,
  intermediate_size: 1 << 20,
  num_attention_heads: 1024,
  num_key_value_heads: 1024,
  head_dim: 4096,
  vocab_size: 1 << 22,
  max_position_embeddings: 1 << 24,
};

/** Bytes per element of the safetensors dtypes (the format's spec, huggingface/safetensors README). */
export const ELEMENT_BYTES: Record<string, number> = {
  F64: 8,
  I64: 8,
  U64: 8,
  F32: 4,
  I32: 4,
  U32: 4,
  F16: 2,
  BF16: 2,
  I16: 2,
  U16: 2,
  I8: 1,
  U8: 1,
  BOOL: 1,
  F8_E4M3: 1,
  F8_E5M2: 1,
};

/**
 * The smallest bytes per element among the tensors of a safetensors file, read from its header
 * alone (8-byte little-endian length, JSON header); 1 when the header cannot be read (a floor).
 */
function smallestElementBytes(file: string): number {
  let fd: number | undefined;
  try {
    fd = openSync(file, 'r');
    const head = Buffer.alloc(8);
    readSync(fd, head, 0, 8, 0);
    const len = Number(head.readBigUInt64LE(0));
    if (!(len > 0 && len < 100e6)) return 1;
    const hb = Buffer.alloc(len);
    readSync(fd, hb, 0, len, 8);
    const h = JSON.parse(hb.toString('utf8')) as Record<string, { dtype?: string }>;
    const sizes = Object.entries(h)
      .filter(([k]) => k !== '__metadata__')
      .map(([, t]) => ELEMENT_BYTES[String(t?.dtype)] ?? 1);
    return sizes.length ? Math.min(...sizes) : 1;
  } catch {
    return 1;
  } finally {
    if (fd !== undefined) closeSync(fd);
  }
}

/**
 * Checks the size fields of `<dir>/config.json` ({@link MODEL_CONFIG_LIMITS}: positive integers
 * within the limits) and that the weights can hold what the config describes. A lower bound of the
 * parameters, `vocab × hidden` (the embedding) + `layers × (3 × hidden × intermediate` (MLP) `+ 2 ×
 * hidden × heads × head_dim + 2 × hidden × kv_heads × head_dim)` (attention projections), times the
 * smallest bytes per element among the tensors of the first weights file (its header), must not
 * exceed the bytes of the `*.safetensors` files. `weights: false` checks the sizes only (and
 * leaves an unreadable config.json to the loader, which names it).
 * @throws Error (`ERR_PG_INPUT`) naming the file and the field.
 */
export function checkModelConfigSizes(dir: string, opts: { weights?: boolean } = {}): void {
  const path = join(dir, 'config.json');
  let c: Record<string, unknown>;
  try {
    c = JSON.parse(readFileSync(path, 'utf8')) as Record<string, unknown>;
  } catch (e) {
    // Sizes only (the loader's pre-check): a missing or unparsable config.json is the loader's to name.
    if (opts.weights === false) return;
    throw inputError(`${path}: ${(e as Error).message}`);
  }
  if (!c || typeof c !== 'object') {
    if (opts.weights === false) return;
    throw inputError(`${path}: not a JSON object`);
  }
  for (const [k, max] of Object.entries(MODEL_CONFIG_LIMITS)) {
    const v = c[k];
    if (v === undefined || v === null) continue;
    if (typeof v !== 'number' || !Number.isInteger(v) || v < 1 || v > max) {
      throw inputError(`${path}: ${k} is ${JSON.stringify(v)}, not an integer in [1, ${max}] (a corrupt or hand-edited config; refused before loading)`);
    }
  }
  // `weights: false` (every loader, lib/model/decoder.ts): the sizes alone; a truncated weights file is named by the loader.
  if (opts.weights === false) return;
  const n = (k: string, d = 0) => (typeof c[k] === 'number' ? (c[k] as number) : d);
  const layers = n('num_hidden_layers');
  const hidden = n('hidden_size');
  const heads = n('num_attention_heads', 1);
  const headDim = n('head_dim', hidden / heads);
  const params =
    n('vocab_size') * hidden +
    layers * (3 * hidden * n('intermediate_size') + 2 * hidden * heads * headDim + 2 * hidden * n('num_key_value_heads', heads) * headDim);
  const files = readdirSync(dir)
    .filter((f) => f.endsWith('.safetensors'))
    .sort();
  let bytes = 0;
  for (const f of files) bytes += statSync(join(dir, f)).size;
  const need = files.length ? params * smallestElementBytes(join(dir, files[0]!)) : 0;
  if (bytes > 0 && need > bytes * 1.01) {
    throw inputError(
      `model ${dir}: its weights (*.safetensors) hold only ${bytes} bytes, but ${path} (num_hidden_layers ${layers}, hidden_size ${hidden}, …) describes at least ${params.toExponential(2)} parameters, ${need.toExponential(2)} bytes: config.json does not match the weights, or a weights file is truncated`,
    );
  }
}

/**
 * Line numbers (1-based) of `file` that are not valid UTF-8 (read as text, their bad bytes become
 * U+FFFD). At most `max` lines are returned.
 */
export function invalidUtf8Lines(file: string, max = 5): number[] {
  const buf = readFileSync(file);
  const dec = new TextDecoder('utf-8', { fatal: true });
  try {
    dec.decode(buf);
    return [];
  } catch {
    /* find the lines */
  }
  const out: number[] = [];
  let start = 0;
  let line = 1;
  while (start <= buf.length && out.length < max) {
    let end = buf.indexOf(0x0a, start);
    if (end < 0) end = buf.length;
    try {
      dec.decode(buf.subarray(start, end));
    } catch {
      out.push(line);
    }
    start = end + 1;
    line++;
  }
  return out;
}

/** A row whose prompts cannot fit the model's context. */
export interface LongRow {
  /** 0-based index in the dataset's valid items. */
  index: number;
  id: string;
  /** The longer of its student and teacher prompt, tokens (or a lower bound when `bytes` refused it untokenized). */
  promptTokens: number;
  why: string;
}

/** Bytes per token above which a row is refused without tokenizing it (a 50 MB question). */
const MAX_BYTES_PER_TOKEN = 256;

/**
 * Rows of `items` whose student prompt or teacher prompt (question + rubric, lib/task/prompts.ts)
 * plus `maxNewTokens` exceed `context` tokens: the student samples a completion after its prompt
 * and OPSD's teacher scores that completion after its own, longer, prompt. A row of more than
 * 256 bytes per token of context is reported without tokenizing it. `encode` renders and tokenizes
 * a batch of chat prompts (Policy.encodePrompts); prompts are encoded 256 rows at a time. With
 * `encodeAnswers` (a run with an SFT stage: it tokenizes reference answers, Tokenizer.encodeBatch),
 * each row's student prompt + reference answer + the end-of-turn token must fit the context too
 * (SFT trains on the answer after the prompt), with the same bytes-per-token cap first.
 * Resolves with the rows that do not fit and the longest student / teacher prompt (tokens).
 */
export async function checkRowLengths(
  items: readonly TaskItem[],
  context: number,
  maxNewTokens: number,
  encode: (prompts: ReturnType<typeof studentMessages>[]) => Promise<number[][]>,
  opts: { encodeAnswers?: (texts: string[]) => Promise<number[][]> } = {},
): Promise<{ long: LongRow[]; longest: { student: number; teacher: number; answer: number } }> {
  const long: LongRow[] = [];
  const longest = { student: 1, teacher: 1, answer: 0 };
  const budget = context - maxNewTokens;
  const byteCap = Number.isFinite(context) ? context * MAX_BYTES_PER_TOKEN : Infinity;
  const answers = opts.encodeAnswers;
  const ok: number[] = [];
  items.forEach((it, i) => {
    const prompt = Buffer.byteLength(it.question) + it.rubric.reduce((n, r) => n + Buffer.byteLength(r.text), 0);
    // SFT trains on the reference answer after the student prompt: question + answer must fit too.
    const sft = answers ? Buffer.byteLength(it.question) + Buffer.byteLength(it.reference_answer ?? '') : 0;
    const bytes = Math.max(prompt, sft);
    if (bytes > byteCap)
      long.push({
        index: i,
        id: it.id,
        promptTokens: Math.ceil(bytes / MAX_BYTES_PER_TOKEN),
        why: `${bytes} bytes of ${sft > prompt ? 'question and reference answer' : 'question and rubric'}, more than ${MAX_BYTES_PER_TOKEN} bytes per token of the model's ${context}-token context`,
      });
    else ok.push(i);
  });
  for (let s = 0; s < ok.length; s += 256) {
    const part = ok.slice(s, s + 256);
    const ids = await encode(part.flatMap((i) => [studentMessages(items[i]!.question), teacherMessages(items[i]!.question, items[i]!.rubric)]));
    const ans = answers ? await answers(part.map((i) => items[i]!.reference_answer ?? '')) : undefined;
    part.forEach((i, k) => {
      const st = ids[2 * k]!.length;
      const te = ids[2 * k + 1]!.length;
      longest.student = Math.max(longest.student, st);
      longest.teacher = Math.max(longest.teacher, te);
      if (Math.max(st, te) > budget) {
        long.push({
          index: i,
          id: items[i]!.id,
          promptTokens: Math.max(st, te),
          why: `its ${te > st ? 'teacher' : 'student'} prompt is ${Math.max(st, te)} tokens; with --max-new-tokens ${maxNewTokens} that passes the model's context of ${context} tokens`,
        });
        return;
      }
      // + 1: the end-of-turn token SFT appends to the answer (NativeBackend.answerIds).
      const a = ans ? ans[k]!.length + 1 : 0;
      longest.answer = Math.max(longest.answer, a);
      if (ans && st + a > context) {
        long.push({
          index: i,
          id: items[i]!.id,
          promptTokens: st,
          why: `its reference answer is ${a} tokens; after its ${st}-token student prompt that passes the model's context of ${context} tokens (SFT)`,
        });
      }
    });
  }
  long.sort((a, b) => a.index - b.index);
  return { long, longest };
}

/**
 * Rows × length of one step, with the dataset's longest prompts (issue 50 item 1): the tokens a
 * step holds at once (prompt + completion of every row) must stay within {@link MAX_TOKENS_PER_STEP}.
 * GRPO: questions × group × (student prompt + max-new-tokens); OPSD: batch × (teacher prompt +
 * max-new-tokens, the teacher scores the completion after its longer prompt); SFT: batch ×
 * (student prompt + reference answer). Stages with 0 steps are not checked.
 * @returns the problems, each naming the flags, the dataset's longest prompt and the limit.
 */
export function stepTokenProblems(
  cfg: {
    stages: readonly string[];
    sampling: { maxNewTokens: number };
    grpo: { steps: number; questionsPerStep: number; groupSize: number };
    opsd: { steps: number; batchSize: number };
    sft: { steps: number; batchSize: number };
  },
  longest: { student: number; teacher: number; answer: number },
): string[] {
  const out: string[] = [];
  const m = cfg.sampling.maxNewTokens;
  const rule = (stage: string, steps: number, rows: number, rowsText: string, length: number, lengthText: string) => {
    if (!cfg.stages.includes(stage) || steps === 0) return;
    if (rows * length > MAX_TOKENS_PER_STEP)
      out.push(
        `${rowsText} × ${lengthText} = ${rows * length} tokens in one ${stage.toUpperCase()} step, more than ${MAX_TOKENS_PER_STEP}; lower the batch or --max-new-tokens`,
      );
  };
  rule(
    'grpo',
    cfg.grpo.steps,
    cfg.grpo.questionsPerStep * cfg.grpo.groupSize,
    `--questions-per-step ${cfg.grpo.questionsPerStep} × --group-size ${cfg.grpo.groupSize}`,
    longest.student + m,
    `(longest student prompt ${longest.student} + --max-new-tokens ${m})`,
  );
  rule(
    'opsd',
    cfg.opsd.steps,
    cfg.opsd.batchSize,
    `--opsd-batch-size ${cfg.opsd.batchSize}`,
    longest.teacher + m,
    `(longest teacher prompt ${longest.teacher} + --max-new-tokens ${m})`,
  );
  rule(
    'sft',
    cfg.sft.steps,
    cfg.sft.batchSize,
    `--sft-batch-size ${cfg.sft.batchSize}`,
    longest.student + longest.answer,
    `(longest student prompt ${longest.student} + longest reference answer ${longest.answer})`,
  );
  return out;
}

/**
 * Rank against width (issue 50):  a LoRA rank above the hidden size of the layers it adapts adds
 * no capacity (the update B·A of a d×d layer has rank ≤ d), only memory (r × width × layers).
 * Reads `hidden_size` from `<dir>/config.json` (checked by {@link checkModelConfigSizes} first).
 * @throws Error (`ERR_PG_INPUT`) naming `--lora-r`, the file and the limit.
 */
export function checkLoraRank(r: number, dir: string): void {
  const path = join(dir, 'config.json');
  let hidden: unknown;
  try {
    hidden = (JSON.parse(readFileSync(path, 'utf8')) as Record<string, unknown>).hidden_size;
  } catch (e) {
    throw inputError(`${path}: ${(e as Error).message}`);
  }
  if (typeof hidden === 'number' && r > hidden)
    throw inputError(
      `lora.r (--lora-r) ${r} is above the model's hidden_size ${hidden} (${path}): a rank above the width of the layers it adapts adds no capacity, only memory (rank × width × layers); use at most ${hidden}`,
    );
}
