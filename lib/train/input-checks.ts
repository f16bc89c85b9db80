/**
 * Bounded work before any compute (issue 38 item 2, issue 50 item 1): the model's config.json sizes
 * are checked before the addon allocates anything (lib/model/config-bounds.ts, every command: lib/model/decoder.ts loadModel), the dataset's bytes are checked for invalid UTF-8,
 * and every row's prompts are checked, in tokens, against the model's context before the first
 * step, so a row that cannot fit fails the run at its start (naming the row) instead of mid-run.
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { inputError } from '../errors.js';
import { MAX_TOKENS_PER_STEP } from '../config/schema.js';
import { studentMessages, teacherMessages } from '../task/prompts.js';
import type { PolicyPrompt } from '../model/policy.js';
import type { TrainConfig } from '../config/train.js';
import { stageOf, type LongestPrompts } from './stages/index.js';

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
  /** 0-based index in the rows checked. */
  index: number;
  id: string;
  /** The longer of its student and teacher prompt, tokens (or a lower bound when `bytes` refused it untokenized). */
  promptTokens: number;
  why: string;
}

/** Bytes per token above which a row is refused without tokenizing it (a 50 MB question). */
const MAX_BYTES_PER_TOKEN = 256;

/** The fields of a row that {@link checkRowLengths} reads: a training item (TaskItem), a benchmark item, or a generate input. */
export interface PromptRow {
  id: string;
  question: string;
  rubric?: readonly { text: string }[];
  reference_answer?: string;
}

/** UTF-8 bytes of a prompt: its text, or the content of every message. */
function promptBytes(p: PolicyPrompt): number {
  return typeof p === 'string' ? Buffer.byteLength(p) : p.reduce((n, m) => n + Buffer.byteLength(String(m.content ?? '')), 0);
}

/**
 * Rows of `items` whose student prompt or teacher prompt (question + rubric, lib/task/prompts.ts)
 * plus `maxNewTokens` exceed `context` tokens: the student samples a completion after its prompt
 * and OPSD's teacher scores that completion after its own, longer, prompt. A row of more than
 * 256 bytes per token of context is reported without tokenizing it. `encode` renders and tokenizes
 * a batch of chat prompts (Policy.encodePrompts); prompts are encoded 256 rows at a time. With
 * `encodeAnswers` (a run with an SFT stage: it tokenizes reference answers, Tokenizer.encodeBatch),
 * each row's student prompt + reference answer + the end-of-turn token must fit the context too
 * (SFT trains on the answer after the prompt), with the same bytes-per-token cap first.
 * With `studentPrompt` (eval, generate: no teacher scores the completion) only the prompt it gives
 * for row i (as the generator is given it) + `maxNewTokens` is checked; the teacher prompt is not.
 * Resolves with the rows that do not fit and the longest student / teacher prompt (tokens).
 */
export async function checkRowLengths(
  items: readonly PromptRow[],
  context: number,
  maxNewTokens: number,
  encode: (prompts: PolicyPrompt[]) => Promise<number[][]>,
  opts: { encodeAnswers?: (texts: string[]) => Promise<number[][]>; studentPrompt?: (i: number) => PolicyPrompt } = {},
): Promise<{ long: LongRow[]; longest: LongestPrompts }> {
  const long: LongRow[] = [];
  const longest: LongestPrompts = { student: 1, teacher: 1, answer: 0 };
  const budget = context - maxNewTokens;
  const byteCap = Number.isFinite(context) ? context * MAX_BYTES_PER_TOKEN : Infinity;
  const answers = opts.encodeAnswers;
  const own = opts.studentPrompt;
  // The prompts of row i: the student's only (`studentPrompt`), else the student's and the teacher's.
  const promptsOf = (i: number): PolicyPrompt[] =>
    own ? [own(i)] : [studentMessages(items[i]!.question), teacherMessages(items[i]!.question, [...(items[i]!.rubric ?? [])])];
  const ok: number[] = [];
  items.forEach((it, i) => {
    const prompt = own ? promptBytes(own(i)) : Buffer.byteLength(it.question) + (it.rubric ?? []).reduce((n, r) => n + Buffer.byteLength(r.text), 0);
    // SFT trains on the reference answer after the student prompt: question + answer must fit too.
    const sft = answers ? Buffer.byteLength(it.question) + Buffer.byteLength(it.reference_answer ?? '') : 0;
    const bytes = Math.max(prompt, sft);
    if (bytes > byteCap)
      long.push({
        index: i,
        id: it.id,
        promptTokens: Math.ceil(bytes / MAX_BYTES_PER_TOKEN),
        why: `${bytes} bytes of ${sft > prompt ? 'question and reference answer' : own ? 'prompt' : 'question and rubric'}, more than ${MAX_BYTES_PER_TOKEN} bytes per token of the model's ${context}-token context`,
      });
    else ok.push(i);
  });
  const per = own ? 1 : 2;
  for (let s = 0; s < ok.length; s += 256) {
    const part = ok.slice(s, s + 256);
    const ids = await encode(part.flatMap(promptsOf));
    const ans = answers ? await answers(part.map((i) => items[i]!.reference_answer ?? '')) : undefined;
    part.forEach((i, k) => {
      const st = ids[per * k]!.length;
      const te = own ? 0 : ids[per * k + 1]!.length;
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
 * The first five rows that cannot fit, for an error or warning: `item "id" (#n): why`, or with
 * `where` (the row's file:line or flag) `item "id" (where): why`; "(and N more)" after five.
 */
export function describeLongRows(long: readonly LongRow[], where?: (r: LongRow) => string): string {
  const named = long
    .slice(0, 5)
    .map((r) => `item ${JSON.stringify(r.id)} (${where ? where(r) : `#${r.index + 1}`}): ${r.why}`)
    .join('; ');
  return named + (long.length > 5 ? ` (and ${long.length - 5} more)` : '');
}

/**
 * Every row's prompt (as the generator is given it) + `maxNewTokens` against the policy's context,
 * before anything is generated (eval, generate; issue 50 item 1). Nothing is skipped: a question
 * left out of an eval would change its score without a count.
 * @throws Error (`ERR_PG_INPUT`) naming `what` (the file or flag), each row (id and `where`), the
 *   limit, and the ways on (lower --max-new-tokens, or remove the row).
 */
export async function assertPromptsFit(
  rows: readonly PromptRow[],
  prompts: (i: number) => PolicyPrompt,
  policy: { contextLength: number; encodePrompts(p: PolicyPrompt[], o: { enableThinking?: boolean }): Promise<number[][]> },
  o: { maxNewTokens: number; enableThinking?: boolean; what: string; where: (i: number) => string },
): Promise<void> {
  if (!rows.length) return;
  const { long } = await checkRowLengths(rows, policy.contextLength, o.maxNewTokens, (ps) => policy.encodePrompts(ps, { enableThinking: o.enableThinking }), {
    studentPrompt: prompts,
  });
  if (long.length)
    throw inputError(
      `${o.what}: ${long.length} row(s) cannot fit the model's context: ${describeLongRows(long, (r) => o.where(r.index))}; lower --max-new-tokens or remove the row(s); nothing was generated`,
    );
}

/**
 * Rows × length of one step, with the dataset's longest prompts (issue 50 item 1): the tokens a
 * step holds at once (prompt + completion of every row) must stay within {@link MAX_TOKENS_PER_STEP}.
 * Each stage of `cfg.stages` that bounds its step (its descriptor's `stepTokens`, lib/train/stages/)
 * gives its rows and row length (GRPO: questions × group × (student prompt + max-new-tokens); OPSD:
 * batch × (teacher prompt + max-new-tokens); SFT: batch × (student prompt + reference answer)).
 * Stages with 0 steps are not checked.
 * @returns the problems, each naming the flags, the dataset's longest prompt and the limit.
 */
export function stepTokenProblems(cfg: TrainConfig, longest: LongestPrompts): string[] {
  const out: string[] = [];
  for (const name of cfg.stages) {
    const stage = stageOf(name);
    if (stage.steps(cfg) === 0) continue;
    const t = stage.stepTokens?.(cfg, longest);
    if (t && t.rows * t.length > MAX_TOKENS_PER_STEP)
      out.push(
        `${t.rowsText} × ${t.lengthText} = ${t.rows * t.length} tokens in one ${name.toUpperCase()} step, more than ${MAX_TOKENS_PER_STEP}; lower the batch or --max-new-tokens`,
      );
  }
  return out;
}

/**
 * Rank against width (issue 50):  a LoRA rank above the hidden size of the layers it adapts adds
 * no capacity (the update B·A of a d×d layer has rank ≤ d), only memory (r × width × layers).
 * Reads `hidden_size` from `<dir>/config.json` (checked by checkModelConfigSizes, lib/model/config-bounds.ts, first).
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
