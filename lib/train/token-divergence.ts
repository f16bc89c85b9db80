/**
 * OPSD's per-token diagnostics (issue 53; docs/design.md §5 "OPSD diagnostics"): where the
 * teacher–student divergence sits. Follow-up work on on-policy distillation traces OPSD's collapse to
 * a few high-divergence "style" tokens; these figures show whether the JSD is spent on format or on
 * content.
 *
 * Per completion token t of the diagnosed rows: JSD_β(t), the generalised JSD of the loss (GKD,
 * Agarwal et al. 2024, Eq. 1; native/loss/jsd.h, computed by the addon's jsdLoss on the two
 * forwards' logits at temperature τ), and whether argmax T = argmax S (the teacher's top token is
 * the student's). Token classes, from the token's text as the tokenizer decodes it alone:
 * - `format`: only whitespace, punctuation or symbols (Unicode classes White_Space, P*, S*: spaces,
 *   newlines, `#`, `*`, `-`, `|`, `` ` ``, `:` … — markdown and layout), or a special token written
 *   `<|…|>` (end of turn);
 * - `content`: every other token (it holds a letter or a digit).
 */

/** The class of a token from its decoded text (see the module doc). */
export function tokenClass(text: string): 'format' | 'content' {
  if (/^<\|[^|]*\|>$/.test(text)) return 'format';
  return /^[\s\p{P}\p{S}]*$/u.test(text) ? 'format' : 'content';
}

/** One diagnosed token: its id, decoded text, JSD_β (nats) and whether the two top tokens agree. */
export interface DiagnosedToken {
  id: number;
  text: string;
  jsd: number;
  top1Agree: boolean;
}

/** Sums over diagnosed tokens (add across rows and ranks); {@link summarizeDivergence} turns them into the step's metrics. */
export interface DivergenceSums {
  tokens: number;
  jsd: number;
  top1Agree: number;
  format: { tokens: number; jsd: number };
  content: { tokens: number; jsd: number };
  /** Per token id: its text, count and JSD sum. */
  byId: Record<string, { text: string; count: number; jsd: number }>;
}

/** Zeroed sums for one step's diagnosed completions (tokens, JSD in nats, top-1 agreements, per class and per id). */
export function emptyDivergence(): DivergenceSums {
  return { tokens: 0, jsd: 0, top1Agree: 0, format: { tokens: 0, jsd: 0 }, content: { tokens: 0, jsd: 0 }, byId: {} };
}

/** Adds `tokens` into `s` (in place) and returns it. */
export function addTokens(s: DivergenceSums, tokens: DiagnosedToken[]): DivergenceSums {
  for (const t of tokens) {
    s.tokens += 1;
    s.jsd += t.jsd;
    if (t.top1Agree) s.top1Agree += 1;
    const c = s[tokenClass(t.text)];
    c.tokens += 1;
    c.jsd += t.jsd;
    const e = (s.byId[t.id] ??= { text: t.text, count: 0, jsd: 0 });
    e.count += 1;
    e.jsd += t.jsd;
  }
  return s;
}

/** Sum of two {@link DivergenceSums} (a new object). */
export function mergeDivergence(a: DivergenceSums, b: DivergenceSums): DivergenceSums {
  const out = emptyDivergence();
  for (const s of [a, b]) {
    out.tokens += s.tokens;
    out.jsd += s.jsd;
    out.top1Agree += s.top1Agree;
    for (const k of ['format', 'content'] as const) {
      out[k].tokens += s[k].tokens;
      out[k].jsd += s[k].jsd;
    }
    for (const [id, e] of Object.entries(s.byId)) {
      const o = (out.byId[id] ??= { text: e.text, count: 0, jsd: 0 });
      o.count += e.count;
      o.jsd += e.jsd;
    }
  }
  return out;
}

/**
 * The step's token-divergence metrics: mean JSD over the diagnosed tokens, per class (mean JSD,
 * token count, the class's share of the summed JSD), the top-1 agreement rate, and the `topN` token
 * ids with the highest mean JSD (ties: more occurrences first, then the smaller id).
 */
export function summarizeDivergence(s: DivergenceSums, topN = 10) {
  const mean = (jsd: number, n: number) => (n ? jsd / n : 0);
  const top = Object.entries(s.byId)
    .map(([id, e]) => ({ id: Number(id), text: e.text, count: e.count, meanJsd: e.jsd / e.count }))
    .sort((x, y) => y.meanJsd - x.meanJsd || y.count - x.count || x.id - y.id)
    .slice(0, topN);
  return {
    tokens: s.tokens,
    meanJsd: mean(s.jsd, s.tokens),
    top1Agreement: mean(s.top1Agree, s.tokens),
    format: { tokens: s.format.tokens, meanJsd: mean(s.format.jsd, s.format.tokens), jsdShare: mean(s.format.jsd, s.jsd) },
    content: { tokens: s.content.tokens, meanJsd: mean(s.content.jsd, s.content.tokens), jsdShare: mean(s.content.jsd, s.jsd) },
    topTokens: top,
  };
}
