/**
 * The one reader of model thinking in generated text, shared by the LLM client, the judges, the
 * data pipeline, rewards/eval (plans) and `serve`.
 *
 * Reasoning models put their thinking in `<think>…</think>` (Qwen3, DeepSeek-R1, QwQ); some
 * templates open the block in the prompt so the completion starts inside it and only the closing
 * tag appears (DeepSeek-R1, Qwen3 thinking templates); an answer cut at `max_tokens` can end inside
 * an unclosed block. Rules, applied in this order, tag names case-insensitive (`<think>`,
 * `<THINK>`, `<thinking>`):
 * 1. every closed `<think>…</think>` block is reasoning;
 * 2. a closing tag with no opening tag before it: everything before the (last such) closing tag is
 *    reasoning (the template opened the block);
 * 3. an opening tag with no closing tag: everything after it is reasoning (cut off while thinking).
 * What remains, trimmed, is the content. Trailing end-of-turn markers that a server may leak into
 * the text ({@link END_OF_TURN_MARKERS}: ChatML's `<|im_end|>` / `<|endoftext|>`, Llama's `</s>`,
 * `<|eot_id|>`, `<|eom_id|>`, `<|end_of_text|>`, Gemma's `<end_of_turn>` / `<eos>`, Phi's `<|end|>`,
 * DeepSeek's `<|EOT|>` / `<｜end▁of▁sentence｜>`, harmony's `<|return|>`), any number of them with
 * whitespace between, are removed first. Only at the end: a marker inside the text is left alone.
 */

/**
 * The canonical tags (Qwen3, DeepSeek-R1): a text stream holds back any suffix that may be the
 * start of one of them until it is decided (`serve`'s streaming).
 */
export const THINK_TAGS = ['<think>', '</think>'] as const;

const OPEN = /<think(?:ing)?>/i;
const CLOSE = /<\/think(?:ing)?>/i;
const BLOCK = /<think(?:ing)?>([\s\S]*?)<\/think(?:ing)?>/gi;
/** End-of-turn / end-of-sequence token strings of the common chat models, as servers leak them at the end of a reply. */
export const END_OF_TURN_MARKERS = [
  '<|im_end|>',
  '<|endoftext|>',
  '</s>',
  '<|eot_id|>',
  '<|eom_id|>',
  '<|end_of_text|>',
  '<end_of_turn>',
  '<eos>',
  '<|end|>',
  '<|EOT|>',
  '<｜end▁of▁sentence｜>',
  '<|end▁of▁sentence|>',
  '<|return|>',
] as const;
const END_MARKERS = new RegExp(`(?:\\s*(?:${END_OF_TURN_MARKERS.map((m) => m.replace(/[|\\^$.*+?()[\]{}]/g, '\\$&')).join('|')}))+\\s*$`);

/** Result of {@link splitThink}: `reasoning` is present only when some thinking text was found. */
export interface ThinkSplit {
  /** The answer with thinking removed, trimmed. */
  content: string;
  /** The thinking text (blocks joined by a blank line), trimmed; absent when there was none. */
  reasoning?: string;
}

/**
 * Splits generated text into thinking and answer (see the module docstring for the rules).
 * `trim: false` (serve, as vLLM) keeps the answer's whitespace, so a completion without thinking
 * has content equal to its decoded tokens; the reasoning is trimmed either way.
 */
export function splitThink(text: string, opts: { trim?: boolean } = {}): ThinkSplit {
  const trim = opts.trim ?? true;
  const reasoning: string[] = [];
  let s = (text ?? '').replace(END_MARKERS, '');
  s = s.replace(BLOCK, (_m, r: string) => {
    reasoning.push(r.trim());
    return '';
  });
  // Rule 2: a stray closing tag (the last one) — all before it was thinking.
  let close = -1;
  for (let m: RegExpExecArray | null, re = new RegExp(CLOSE.source, 'gi'); (m = re.exec(s));) close = m.index + m[0].length;
  if (close >= 0) {
    const before = s.slice(0, close).replace(new RegExp(CLOSE.source, 'gi'), '').replace(new RegExp(OPEN.source, 'gi'), '');
    reasoning.unshift(before.trim());
    s = s.slice(close);
  }
  // Rule 3: an unclosed opening tag — all after it is thinking.
  const open = OPEN.exec(s);
  if (open) {
    reasoning.push(s.slice(open.index + open[0].length).trim());
    s = s.slice(0, open.index);
  }
  const r = reasoning.filter(Boolean).join('\n\n');
  const content = trim ? s.trim() : s;
  return r ? { content, reasoning: r } : { content };
}

/** The answer of generated text without its thinking (see {@link splitThink}). */
export function stripThink(text: string): string {
  return splitThink(text).content;
}

/**
 * Char offset in `text` where the answer starts: after the last closing think tag, or 0 when
 * there is none. -1 when the text ends inside an unclosed think block (no answer yet). Used to map
 * token positions to the answer (HTTP judge logprobs).
 */
export function answerStart(text: string): number {
  let start = 0;
  for (let m: RegExpExecArray | null, re = new RegExp(CLOSE.source, 'gi'); (m = re.exec(text));) start = m.index + m[0].length;
  const open = new RegExp(OPEN.source, 'i').exec(text.slice(start));
  if (open) return open.index === 0 || text.slice(start, start + open.index).trim() === '' ? -1 : start;
  return start;
}
