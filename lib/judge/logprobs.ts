/**
 * P(yes) of an HTTP judge reply from OpenAI-format chat logprobs: the same
 * quantity the local judge reads from one prefill (lib/judge/local.ts),
 * P(yes) = Σ p(yes tokens) / (Σ p(yes tokens) + Σ p(no tokens)), computed at the verdict position
 * from that position's `top_logprobs`.
 *
 * Input: `choices[0].logprobs.content` — one entry per generated token,
 * `{token, logprob, bytes, top_logprobs: [{token, logprob, bytes}]}` (logprobs natural-log).
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

function word(token: string): string {
  return token.trim().replace(/^[*_`"'“”‘’#:\s]+|[*_`"'“”‘’.,;:!?\s]+$/g, '').toLowerCase();
}

/**
 * P(yes) from a chat reply's token logprobs (see the module docstring). Returns undefined when the
 * reply has no yes/no answer token after its thinking, or when neither side appears among the
 * alternatives at that position (mass 0).
 */
export function yesProbabilityFromChatLogprobs(content: TokenLogprob[] | null | undefined, opts: { variants?: 'pair' | 'all'; met?: boolean | null } = {}): ChatYesProbability | undefined {
  if (!Array.isArray(content) || !content.length) return undefined;
  const offsets: number[] = [];
  let text = '';
  for (const t of content) {
    offsets.push(text.length);
    text += typeof t?.token === 'string' ? t.token : '';
  }
  const start = answerStart(text);
  if (start < 0) return undefined;
  const cands: { i: number; yes: boolean }[] = [];
  content.forEach((t, i) => {
    if (offsets[i] < start || typeof t?.token !== 'string') return;
    const w = word(t.token);
    if (w === 'yes' || w === 'no') cands.push({ i, yes: w === 'yes' });
  });
  let position: number;
  if (cands.length) position = (typeof opts.met === 'boolean' ? [...cands].reverse().find((c) => c.yes === opts.met) : undefined)?.i ?? cands[0].i;
  else {
    position = content.findIndex((t, i) => offsets[i] >= start && typeof t?.token === 'string' && t.token.trim() !== '');
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
  const entries = [...(Array.isArray(at.top_logprobs) ? at.top_logprobs : [])];
  if (!entries.some((e) => e.token === at.token && e.logprob === at.logprob)) entries.push({ token: at.token, logprob: at.logprob, bytes: at.bytes });
  const seen = new Set<string>();
  const uniq = entries.filter((e) => {
    const k = `${e.token}\u0000${e.logprob}`;
    if (seen.has(k) || typeof e.token !== 'string' || typeof e.logprob !== 'number') return false;
    seen.add(k);
    return true;
  });
  const space = /^\s/.test(at.token) ? ' ' : '';
  const yesSet = new Set(variants === 'all' ? YES_STRINGS : [`${space}Yes`]);
  const noSet = new Set(variants === 'all' ? NO_STRINGS : [`${space}No`]);
  const lpYes = uniq.filter((e) => yesSet.has(e.token)).map((e) => e.logprob);
  const lpNo = uniq.filter((e) => noSet.has(e.token)).map((e) => e.logprob);
  const { pYes, mass } = yesProbabilityFromLogprobs(lpYes, lpNo);
  if (!(mass > 0)) return undefined;
  return { pYes, mass };
}
