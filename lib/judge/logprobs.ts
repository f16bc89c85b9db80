/**
 * P(yes) of an HTTP judge reply from OpenAI-format chat logprobs: the same
 * quantity the local judge reads from one prefill (lib/judge/local.ts),
 * P(yes) = Σ p(yes tokens) / (Σ p(yes tokens) + Σ p(no tokens)), computed at the verdict position
 * from that position's `top_logprobs`.
 *
 * Input: `choices[0].logprobs.content` — one entry per generated token,
 * `{token, logprob, bytes, top_logprobs: [{token, logprob, bytes}]}` (logprobs natural-log).
 *
 * Token text ({@link tokenText}): servers differ in how they write `token`. OpenAI, llama.cpp's
 * server and SGLang write the decoded text (" Yes"); vLLM and Ollama may write the tokenizer's
 * pieces — byte-level BPE (`ĠYes`, GPT-2's byte-to-unicode map: `Ġ` = space, `Ċ` = newline) or
 * SentencePiece (`▁Yes`, `<0x0A>`) — while their `bytes` field holds the right UTF-8 bytes. The text
 * of an entry is its `bytes` decoded as UTF-8 when present and valid, else its `token` with the
 * markers mapped (byte-level only when the token has a mapped character, U+0100..U+0143, and the
 * bytes it stands for are valid UTF-8; `▁` → space; a whole `<0xHH>` piece → that byte), else the
 * token as written.
 *
 * Verdict position: the generated tokens are concatenated; the answer starts after the last
 * closing think tag (lib/llm/think.ts; a reply still inside an unclosed think block has none).
 * Among answer tokens whose text (trimmed, markdown and punctuation removed, any case) is "yes" or
 * "no", the position is the last one that agrees with the verdict read from the text (`met`, so a
 * labelled "Verdict: No" after a "Yes, …" opening reads at "No"), or the first one when no verdict
 * is given. With no yes/no answer token at all (a model that would say something else), the first
 * non-blank answer token is used. For a reply with thinking off (Qwen3: the prompt ends with the
 * empty think block) that is the first generated token — exactly the position the local judge
 * scores, so P(yes) from `top_logprobs` there equals the local judge's as long as the yes/no
 * tokens are among the returned alternatives.
 *
 * Answer tokens (`variants`, as the local judge):
 * - `'pair'`: "Yes" and "No" (the words the prompt asks for; the local judge's default). When the
 *   verdict token carries a leading space (" Yes" after "Answer:"), the pair is " Yes" / " No".
 * - `'all'`: Yes, yes, YES, " Yes", " yes" / No, no, NO, " No", " no" summed per side.
 * Alternatives outside the returned top-k count as probability 0 (a bound; ask for 20).
 */
import type { TokenLogprob } from '../llm/client.js';
import { answerStart } from '../llm/think.js';
import { NO_STRINGS, YES_STRINGS, yesProbabilityFromLogprobs } from './local.js';

/** P(yes) at the verdict position; `position` indexes `content`; `mass` is the yes+no probability there. */
export interface ChatYesProbability {
  pYes: number;
  mass: number;
  position: number;
}

/** GPT-2 byte-level BPE: the character that stands for each byte (bytes_to_unicode), inverted: code point → byte. */
const BYTE_OF_CHAR: ReadonlyMap<number, number> = (() => {
  const m = new Map<number, number>();
  let n = 0;
  for (let b = 0; b < 256; b++) {
    const printable = (b >= 0x21 && b <= 0x7e) || (b >= 0xa1 && b <= 0xac) || (b >= 0xae && b <= 0xff);
    m.set(printable ? b : 256 + n++, b);
  }
  return m;
})();

const UTF8 = new TextDecoder('utf-8', { fatal: true });

function utf8(bytes: number[]): string | undefined {
  try {
    return UTF8.decode(Uint8Array.from(bytes));
  } catch {
    return undefined;
  }
}

/**
 * The text of one logprob entry (see the module docstring): `bytes` decoded as UTF-8 when it is an
 * array of byte values that decodes, else `token` with byte-level BPE (`Ġ`, `Ċ`, …) or SentencePiece
 * (`▁`, `<0xHH>`) markers mapped, else `token` unchanged; '' when there is no string token.
 */
export function tokenText(e: { token?: unknown; bytes?: unknown } | null | undefined): string {
  if (!e) return '';
  const b = e.bytes;
  if (Array.isArray(b) && b.length && b.every((x) => Number.isInteger(x) && x >= 0 && x <= 255)) {
    const t = utf8(b as number[]);
    if (t !== undefined) return t;
  }
  const token = typeof e.token === 'string' ? e.token : '';
  const hex = /^<0x([0-9A-Fa-f]{2})>$/.exec(token);
  if (hex) return utf8([parseInt(hex[1], 16)]) ?? token;
  if (token.includes('\u2581')) return token.replace(/\u2581/g, ' ');
  const cps = [...token].map((c) => c.codePointAt(0)!);
  if (cps.some((c) => c >= 0x100 && c <= 0x143) && cps.every((c) => BYTE_OF_CHAR.has(c))) {
    const t = utf8(cps.map((c) => BYTE_OF_CHAR.get(c)!));
    if (t !== undefined) return t;
  }
  return token;
}

function word(token: string): string {
  return token
    .trim()
    .replace(/^[*_`"'“”‘’#:\s]+|[*_`"'“”‘’.,;:!?\s]+$/g, '')
    .toLowerCase();
}

/**
 * P(yes) from a chat reply's token logprobs (see the module docstring). Returns undefined when the
 * reply has no yes/no answer token after its thinking, or when neither side appears among the
 * alternatives at that position (mass 0).
 */
export function yesProbabilityFromChatLogprobs(
  content: TokenLogprob[] | null | undefined,
  opts: { variants?: 'pair' | 'all'; met?: boolean | null } = {},
): ChatYesProbability | undefined {
  if (!Array.isArray(content) || !content.length) return undefined;
  const offsets: number[] = [];
  let text = '';
  const texts = content.map((t) => tokenText(t));
  for (const t of texts) {
    offsets.push(text.length);
    text += t;
  }
  const start = answerStart(text);
  if (start < 0) return undefined;
  const cands: { i: number; yes: boolean }[] = [];
  texts.forEach((t, i) => {
    if (offsets[i] < start || !t) return;
    const w = word(t);
    if (w === 'yes' || w === 'no') cands.push({ i, yes: w === 'yes' });
  });
  let position: number;
  if (cands.length) position = (typeof opts.met === 'boolean' ? [...cands].reverse().find((c) => c.yes === opts.met) : undefined)?.i ?? cands[0].i;
  else {
    position = texts.findIndex((t, i) => offsets[i] >= start && t.trim() !== '');
    if (position < 0) return undefined;
  }
  const r = yesProbabilityAt(content[position], opts.variants);
  return r && { ...r, position };
}

/**
 * P(yes) at one position of OpenAI chat logprobs (the sampled token plus its `top_logprobs`):
 * Σexp(lp yes tokens) / (Σexp(lp yes) + Σexp(lp no)) over the answer-token strings of `variants`
 * (see the module docstring), the local judge's formula. Undefined when neither side is listed.
 */
export function yesProbabilityAt(at: TokenLogprob, variants: 'pair' | 'all' = 'pair'): { pYes: number; mass: number } | undefined {
  if (!at || typeof at.token !== 'string') return undefined;
  const atText = tokenText(at);
  const entries = (Array.isArray(at.top_logprobs) ? at.top_logprobs : []).map((e) => ({ text: tokenText(e), logprob: e?.logprob }));
  if (!entries.some((e) => e.text === atText && e.logprob === at.logprob)) entries.push({ text: atText, logprob: at.logprob });
  const seen = new Set<string>();
  const uniq = entries.filter((e) => {
    const k = `${e.text}\u0000${e.logprob}`;
    if (seen.has(k) || !e.text || typeof e.logprob !== 'number') return false;
    seen.add(k);
    return true;
  });
  const space = /^\s/.test(atText) ? ' ' : '';
  const yesSet = new Set(variants === 'all' ? YES_STRINGS : [`${space}Yes`]);
  const noSet = new Set(variants === 'all' ? NO_STRINGS : [`${space}No`]);
  const lpYes = uniq.filter((e) => yesSet.has(e.text)).map((e) => e.logprob as number);
  const lpNo = uniq.filter((e) => noSet.has(e.text)).map((e) => e.logprob as number);
  const { pYes, mass } = yesProbabilityFromLogprobs(lpYes, lpNo);
  if (!(mass > 0)) return undefined;
  return { pYes, mass };
}
