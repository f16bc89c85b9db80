/**
 * Judge prompts (versioned files under `prompts/`) and the one verdict grammar of the judges.
 * A verdict is read, never guessed.
 *
 * Grammar of one binary (per-item) reply, in this order; the first rule that yields a reading wins:
 *  0. Thinking is never read: `<think>…</think>` (lib/llm/think.ts) is removed here, and the LLM
 *     client has already moved `reasoning_content` / `reasoning` / thinking parts out of the content.
 *  a. JSON — bare, fenced or embedded in prose — with a verdict field ({@link VERDICT_KEYS}:
 *     `verdict`, `answer`, `met`, `satisfied`, `pass`, `passed`, `result`, `decision`, …) holding a
 *     boolean, 1/0, or a verdict string (read with this grammar). A key name is never an answer:
 *     `{"met": false}` is false. Several objects: the last readable one. A bare `true`/`false` reply.
 *  b. Labelled verdict lines — `Final answer:`, `Verdict:`, `Final judgment:`, `Answer:`,
 *     `Decision:`, `Conclusion:`, `The answer is …` — any case, markdown emphasis allowed
 *     (`**Verdict:** No`, `**Final Answer**: **Yes**`); the value must be a verdict word followed by
 *     punctuation or the line end ("Answer: No, because …" reads no; "Answer: no baseline is …"
 *     reads nothing). The last readable label wins.
 *  c. `\boxed{…}`, also `\boxed{\text{Yes}}`; the last readable one wins.
 *  d. Unlabelled: a reply that is only a verdict word/phrase (`Yes.`, `**No**`, `Not met`); else a
 *     lone yes/no at the start ("Yes, the plan …", "No. …" — not "No tuned baseline …") and/or a
 *     last sentence that is only a verdict word, and prose phrases ("the item is not met", "the plan
 *     does not satisfy …").
 *  e. When the signals of (d) disagree → null (`conflict`), counted as not met and reported.
 *  f. A refusal phrase ("I can't help with that") → null, `refused`. Anything else → null (unparsed).
 *
 * Per-plan replies ({@link readPlanVerdicts}) read each item's value with the same grammar;
 * missing ids → null for those items, a duplicated id → its last entry, unknown ids → ignored and
 * counted in the judge stats.
 */
import { join } from 'node:path';
import { loadPromptFile, renderTemplate } from '../util/prompts.js';
import { packageRoot } from '../native.js';
import type { JudgeItem, Verdict } from './types.js';
import { stripThink } from '../llm/think.js';
import { balancedEnd } from '../llm/client.js';

/** A loaded prompt template: `name` (file stem incl. version, e.g. `judge-per-item.v1`), body, hash. */
export interface PromptTemplate {
  name: string;
  template: string;
  /** sha256 (hex, 16 chars) of the template text; part of cache keys. */
  hash: string;
}

/**
 * Loads `prompts/<name>.md` from the package root (or `dir` when given) through the one prompt
 * loader (lib/util/prompts.ts: header comment dropped, text trimmed). Throws if the file is missing.
 */
export function loadPrompt(name: string, dir = join(packageRoot, 'prompts')): PromptTemplate {
  const p = loadPromptFile(name, dir);
  return { name, template: p.template, hash: p.sha256.slice(0, 16) };
}

export { renderTemplate };

/** Default prompt names (file stems) of the two modes. */
export const PER_ITEM_PROMPT = 'judge-per-item.v1';
export const PER_PLAN_PROMPT = 'judge-per-plan.v1';

/** The user message asking whether `plan` satisfies `item` (per-item mode, local judge). */
export function perItemMessage(question: string, plan: string, item: JudgeItem, prompt = loadPrompt(PER_ITEM_PROMPT)): string {
  return renderTemplate(prompt.template, { question, plan: plan.trim() === '' ? '(empty)' : plan, item: item.text });
}

/** The user message asking for all of `items` at once (per-plan mode). */
export function perPlanMessage(question: string, plan: string, items: JudgeItem[], prompt = loadPrompt(PER_PLAN_PROMPT)): string {
  const lines = items.map((it) => `- [${it.id}] ${it.text.replace(/\s*\n\s*/g, ' ')}`).join('\n');
  return renderTemplate(prompt.template, { question, plan: plan.trim() === '' ? '(empty)' : plan, items: lines });
}

/** JSON schema of the per-plan answer (for `response_format: json_schema` and validation). */
export const perPlanSchema = {
  type: 'object',
  properties: {
    verdicts: {
      type: 'array',
      items: {
        type: 'object',
        properties: { id: { type: 'string' }, met: { type: 'boolean' } },
        required: ['id', 'met'],
        additionalProperties: false,
      },
    },
  },
  required: ['verdicts'],
  additionalProperties: false,
} as const;

// ---------------------------------------------------------------------------------------------
// The verdict grammar (see the module docstring for the order).

const REFUSAL = [
  /\bI\s*(?:can(?:'|’)?t|cannot|can not|won(?:'|’)?t|am unable to|'m unable to|’m unable to|am not able to|'m not able to)\s+(?:help|assist|comply|answer|provide|evaluate|grade|do that|fulfil|fulfill|determine|make)/i,
  /\bI(?:'|’)?m sorry\b/i,
  /\bI apologi[sz]e\b/i,
  /\bas an AI\b/i,
  /\bunable to (?:determine|assess|evaluate|answer)\b/i,
  /\bI (?:must|have to) (?:decline|refuse)\b/i,
];

/** Verdict words and phrases, lower-case, single spaces. Read only where a verdict is expected. */
const YES_PHRASES = new Set(['yes', 'y', 'true', 'met', 'satisfied', 'pass', 'passed', 'passes', 'correct', 'fulfilled', 'meets', 'satisfies']);
const NO_PHRASES = new Set([
  'no',
  'n',
  'false',
  'unmet',
  'not met',
  'unsatisfied',
  'not satisfied',
  'fail',
  'failed',
  'fails',
  'incorrect',
  'not fulfilled',
  'unfulfilled',
  'does not meet',
  'does not satisfy',
  "doesn't meet",
  "doesn't satisfy",
  'not',
]);

/** Keys of a JSON object whose value is the verdict (lower-cased, `-`/space → `_`). A key name is never itself an answer. */
export const VERDICT_KEYS = [
  'verdict',
  'final_verdict',
  'answer',
  'final_answer',
  'met',
  'is_met',
  // HealthBench's grader reply {explanation, criteria_met} (openai/simple-evals healthbench_eval.py).
  'criteria_met',
  'satisfied',
  'is_satisfied',
  'satisfies',
  'meets',
  'pass',
  'passed',
  'passes',
  'result',
  'status',
  'decision',
  'final_decision',
  'judgment',
  'judgement',
  'final_judgment',
  'final_judgement',
  'label',
  'conclusion',
  'output',
  'response',
  'value',
];

/** Label words that introduce a verdict line (`Final answer:`, `**Verdict**: No`, `Final judgment - yes`). */
const LABEL = String.raw`(?:final\s+(?:answer|verdict|judg(?:e)?ment|decision|result)|answer|verdict|judg(?:e)?ment|decision|conclusion|result|rating|label)`;

/** One yes/no phrase at the start of `s` (after markdown, quotes, brackets, `\text{…}`), followed by nothing but punctuation/markup or the end. */
function leadingVerdict(s: string, strict: boolean): boolean | null {
  const t = s
    .replace(/\\(?:text|textbf|mathrm|mathbf|texttt)\s*\{([^{}]*)\}/g, '$1')
    .replace(/\\boxed\s*\{([^{}]*)\}/g, '$1')
    .replace(/^[\s*_`"'“”‘’#>[\](){}:=|\\-]+/, '')
    .toLowerCase();
  // Longest phrase first: "not met" before "not", "does not meet" …
  const m =
    /^(does(?:n't| not) (?:meet|satisfy)|not (?:met|satisfied|fulfilled)|un(?:met|satisfied|fulfilled)|yes|no|true|false|met|satisfied|satisfies|meets|fulfilled|pass(?:ed|es)?|fail(?:ed|s)?|correct|incorrect|y|n)(?=$|[\s*_`"'“”‘’.,;:!?)\]}\-–—])/.exec(
      t,
    );
  if (!m) return null;
  const rest = t.slice(m[0].length);
  // A quoted key (`"met": …`, e.g. in JSON cut off at max_tokens) is never an answer.
  if (/^["'“”‘’]\s*:/.test(rest)) return null;
  // Strict: nothing after the phrase but punctuation / markup (a whole value). Loose: the phrase
  // must be followed by punctuation or the end of the line, not by more words ("No tuned baseline…").
  if (strict ? !/^[\s*_`"'“”‘’.,;:!?)\]}\\-]*$/.test(rest) : !/^(?:[*_`"'“”‘’)\]}]*[ \t]*(?:$|\n|[.,;:!?\-–—]))/.test(rest)) return null;
  const w = m[1].replace(/\s+/g, ' ');
  if (YES_PHRASES.has(w)) return true;
  if (NO_PHRASES.has(w)) return false;
  return null;
}

/** A JSON value as a verdict: booleans, 1/0, verdict strings (full grammar), or an object with a verdict key. */
function jsonValueVerdict(v: unknown, depth = 0): boolean | null {
  if (typeof v === 'boolean') return v;
  if (typeof v === 'number') return v === 1 ? true : v === 0 ? false : null;
  if (typeof v === 'string') return depth > 3 ? leadingVerdict(v, true) : parseBinaryVerdict(v, depth + 1).met;
  if (v && typeof v === 'object' && !Array.isArray(v) && depth <= 3) return objectVerdict(v as Record<string, unknown>, depth + 1);
  return null;
}

/** The verdict of a JSON object: the first verdict key (in {@link VERDICT_KEYS} order) with a readable value, else that of a wrapped object. */
function objectVerdict(o: Record<string, unknown>, depth = 0): boolean | null {
  const byKey = new Map<string, unknown>();
  for (const [k, v] of Object.entries(o)) byKey.set(k.toLowerCase().replace(/[\s-]+/g, '_'), v);
  for (const k of VERDICT_KEYS) {
    if (!byKey.has(k)) continue;
    const r = jsonValueVerdict(byKey.get(k), depth);
    if (r !== null) return r;
  }
  // One wrapper object ({"evaluation": {"met": false, …}}): its verdict field.
  if (depth <= 3) {
    for (const v of Object.values(o)) {
      if (!v || typeof v !== 'object' || Array.isArray(v)) continue;
      const r = objectVerdict(v as Record<string, unknown>, depth + 1);
      if (r !== null) return r;
    }
  }
  return null;
}

/** Every top-level balanced `{…}` / `[…]` span of `s` that parses as JSON (string-aware; at most 32). */
export function jsonValues(s: string): { value: unknown; start: number; end: number }[] {
  const out: { value: unknown; start: number; end: number }[] = [];
  for (let i = 0, tries = 0; i < s.length && out.length < 32 && tries < 256; i++) {
    const c = s[i];
    if (c !== '{' && c !== '[') continue;
    tries++;
    const end = balancedEnd(s, i);
    if (end < 0) continue;
    try {
      out.push({ value: JSON.parse(s.slice(i, end + 1)), start: i, end: end + 1 });
      i = end;
    } catch {
      /* not JSON (e.g. "[a] text"): keep scanning inside */
    }
  }
  return out;
}

/** Result of reading one binary answer. */
export interface BinaryReading {
  met: boolean | null;
  refused: boolean;
  /** Which rule decided: json, label, boxed, word (lone yes/no at start/end), phrase ("is not met"); absent for null. */
  source?: 'json' | 'label' | 'boxed' | 'word' | 'phrase';
  /** True when unlabelled signals disagreed (rule e). */
  conflict?: boolean;
}

/** (a) the last JSON object (bare, fenced or embedded) with a readable verdict field; a bare JSON scalar reply counts too. */
function jsonVerdict(body: string, depth: number): boolean | null {
  const t = body.trim().replace(/^```(?:json)?\s*|\s*```$/gi, '');
  if (/^(?:true|false|"[^"]*")$/i.test(t)) {
    try {
      const v = JSON.parse(t.toLowerCase() === t ? t : t.toLowerCase());
      if (typeof v === 'boolean') return v;
      if (typeof v === 'string') return leadingVerdict(v, true);
    } catch {
      /* fall through */
    }
  }
  let found: boolean | null = null;
  for (const { value } of jsonValues(body)) {
    if (value && typeof value === 'object' && !Array.isArray(value)) {
      const r = objectVerdict(value as Record<string, unknown>, depth);
      if (r !== null) found = r;
    }
  }
  return found;
}

/** (b) labelled verdict lines; the last readable one wins. */
function labelVerdict(body: string): boolean | null {
  const re = new RegExp(String.raw`(?:^|[^a-z])${LABEL}\s*[*_]*\s*(?:is\s*:?|:|=|-|–|—)\s*([^\n]*)`, 'gi');
  let found: boolean | null = null;
  for (const m of body.matchAll(re)) {
    const r = leadingVerdict(m[1], false);
    if (r !== null) found = r;
  }
  return found;
}

/** (c) `\boxed{…}` (also `\boxed{\text{Yes}}`); the last readable one wins. */
function boxedVerdict(body: string): boolean | null {
  let found: boolean | null = null;
  for (const m of body.matchAll(/\\boxed\s*\{((?:[^{}]|\{[^{}]*\})*)\}/g)) {
    const r = leadingVerdict(m[1], true);
    if (r !== null) found = r;
  }
  return found;
}

/** Prose phrases that state the decision ("the item is not met", "the plan satisfies the item"). */
function phraseSignals(n: string): boolean[] {
  const out: boolean[] = [];
  if (
    /\b(?:is|are) not (?:met|satisfied|fulfilled)\b|\b(?:does not|doesn't|did not|didn't|fails to|never) (?:meets?|satisf(?:y|ies)|fulfils?|fulfills?)\b/.test(
      n,
    )
  )
    out.push(false);
  if (
    /\b(?:item|criterion|requirement|rubric)s? (?:is|are) (?:fully )?(?:met|satisfied|fulfilled)\b|\b(?:plan|it) (?:(?:therefore|thus|hence|clearly|fully|indeed|also) )*(?:satisfies|meets|fulfils|fulfills) (?:the|this|all|every)\b/.test(
      n,
    )
  )
    out.push(true);
  return out;
}

/**
 * Reads one binary verdict from judge text with the grammar of the module docstring:
 * thinking removed; (a) JSON verdict field → (b) labelled lines, last wins → (c) `\boxed{}` →
 * (d) a lone yes/no (or met / not met …) at the start or the end, and prose phrases ("is not
 * met"), any disagreement among them → null with `conflict` (e) → a refusal phrase → refused →
 * otherwise null. `depth` bounds recursion through JSON string values (internal).
 */
export function parseBinaryVerdict(raw: string, depth = 0): BinaryReading {
  let body = stripThink(typeof raw === 'string' ? raw : '');
  if (!body) return { met: null, refused: false };
  const j = jsonVerdict(body, depth);
  if (j !== null) return { met: j, refused: false, source: 'json' };
  // JSON without a readable verdict field: its keys and values are not read by the rules below.
  const spans = jsonValues(body);
  if (spans.length) {
    let rest = '';
    let at = 0;
    for (const sp of spans) {
      rest += body.slice(at, sp.start) + ' ';
      at = sp.end;
    }
    body = (rest + body.slice(at)).trim();
    if (!body) return { met: null, refused: false };
  }
  const l = labelVerdict(body);
  if (l !== null) return { met: l, refused: false, source: 'label' };
  const b = boxedVerdict(body);
  if (b !== null) return { met: b, refused: false, source: 'boxed' };
  // (d) unlabelled: the whole reply, its start, its last sentence; plus prose phrases.
  const signals: { v: boolean; src: 'word' | 'phrase' }[] = [];
  const whole = leadingVerdict(body, true);
  if (whole !== null) return { met: whole, refused: false, source: 'word' };
  const start = leadingVerdict(body, false);
  if (start !== null) signals.push({ v: start, src: 'word' });
  const sentences = body
    .split(/(?<=[.!?])\s+|\n+/)
    .map((x) => x.trim())
    .filter((x) => /[a-z]/i.test(x));
  const last = sentences.length > 1 ? leadingVerdict(sentences[sentences.length - 1], true) : null;
  if (last !== null) signals.push({ v: last, src: 'word' });
  const n = body
    .toLowerCase()
    .replace(/[*_`"“”]/g, '')
    .replace(/\s+/g, ' ');
  for (const v of phraseSignals(n)) signals.push({ v, src: 'phrase' });
  if (signals.length) {
    const v = signals[0].v;
    if (signals.every((s) => s.v === v)) return { met: v, refused: false, source: signals.some((s) => s.src === 'word') ? 'word' : 'phrase' };
    return { met: null, refused: false, conflict: true };
  }
  if (REFUSAL.some((r) => r.test(body))) return { met: null, refused: true };
  return { met: null, refused: false };
}

/** Verdict for item `itemId` from raw per-item judge text. */
export function verdictFromText(itemId: string, raw: string): Verdict {
  const r = parseBinaryVerdict(raw);
  const v: Verdict = { itemId, met: r.met, raw };
  if (r.refused) v.refused = true;
  return v;
}

/** Extracts the first JSON object or array from text (thinking removed; code fences and prose around it tolerated). */
export function extractJsonObject(text: string): unknown {
  const body = stripThink(text);
  try {
    return JSON.parse(body.replace(/^```(?:json)?\s*|\s*```$/gi, ''));
  } catch {
    return jsonValues(body)[0]?.value;
  }
}

/** Normalised item id as a judge may echo it: `[a]`, ` a `, `"a"` → `a`. */
function normId(id: unknown): string {
  return String(id)
    .trim()
    .replace(/^[["'`]+|[\]"'`]+$/g, '')
    .trim();
}

/** Per-plan reading: verdicts aligned with the items plus what did not fit. */
export interface PlanReading {
  verdicts: Verdict[];
  /** Ids in the reply that name no item (ignored). */
  unknownIds: string[];
  /** Item ids that appeared more than once (the last entry was used). */
  duplicateIds: string[];
  /** Items with no entry in the reply (null verdicts). */
  missingIds: string[];
}

/**
 * Reads a per-plan reply into verdicts aligned with `items`, each value read with the per-item
 * grammar. Accepted shapes: `{"verdicts":[{"id","met"}]}` (the prompt's; also `results`, `items`,
 * `rubric`, `answers`), a bare array of such entries, a map `{"<id>": true|"yes"|{"met":…}}`, or
 * lines `[id] Yes` / `id: No`. Missing ids → `met: null`; a duplicated id → the last entry;
 * unknown ids → ignored and reported. A bare list of values with no ids at all, exactly one per
 * item, is taken in order. A whole-reply refusal marks every item `refused`.
 */
export function readPlanVerdicts(raw: string, items: JudgeItem[]): PlanReading {
  const body = stripThink(typeof raw === 'string' ? raw : '');
  const known = new Set(items.map((it) => it.id));
  const byId = new Map<string, boolean | null>();
  const unknown: string[] = [];
  const dup = new Set<string>();
  let ordered: (boolean | null)[] | undefined;
  const put = (id: string, v: boolean | null) => {
    if (!known.has(id)) {
      unknown.push(id);
      return;
    }
    if (byId.has(id)) dup.add(id);
    byId.set(id, v);
  };
  const readList = (list: unknown[]) => {
    const noIds: (boolean | null)[] = [];
    for (const e of list) {
      const o = e && typeof e === 'object' && !Array.isArray(e) ? (e as Record<string, unknown>) : undefined;
      const idKey = o && Object.keys(o).find((k) => /^(?:id|item|item_id|itemid|key|name)$/i.test(k));
      if (o && idKey) {
        const rest = { ...o };
        delete rest[idKey];
        put(normId(o[idKey]), objectVerdict(rest));
      } else noIds.push(jsonValueVerdict(e));
    }
    if (noIds.length === list.length) ordered = noIds;
  };
  let obj: unknown;
  try {
    obj = JSON.parse(body.replace(/^```(?:json)?\s*|\s*```$/gi, ''));
  } catch {
    obj = jsonValues(body).find((x) => x.value && typeof x.value === 'object')?.value;
  }
  if (Array.isArray(obj)) readList(obj);
  else if (obj && typeof obj === 'object') {
    const o = obj as Record<string, unknown>;
    const listKey = Object.keys(o).find(
      (k) => /^(?:verdicts|results|items|rubric|rubric_items|answers|judgments|judgements|evaluations)$/i.test(k) && Array.isArray(o[k]),
    );
    if (listKey) readList(o[listKey] as unknown[]);
    else if (!Object.keys(o).some((k) => known.has(normId(k))) && Object.keys(o).some((k) => typeof o[k] === 'object' && o[k] !== null)) {
      // {"verdicts": {"a": true}} — one nested map
      const inner = Object.values(o).find((v) => v && typeof v === 'object' && !Array.isArray(v) && Object.keys(v).some((k) => known.has(normId(k)))) as
        Record<string, unknown> | undefined;
      if (inner) for (const [k, v] of Object.entries(inner)) put(normId(k), jsonValueVerdict(v));
    } else for (const [k, v] of Object.entries(o)) put(normId(k), jsonValueVerdict(v));
  } else {
    // Line form: "[a] Yes", "- [b]: No, because …", "a: yes".
    for (const line of body.split('\n')) {
      const m =
        /^\s*(?:[-*•]|\d+[.)])?\s*[*_]*\[([^\]\n]{1,64})\][*_]*\s*[:\-–=]?\s*(.*)$/.exec(line) ??
        /^\s*(?:[-*•])?\s*[*_]*([\w.-]{1,64})[*_]*\s*[:=]\s*(.*)$/.exec(line);
      if (!m) continue;
      const id = normId(m[1]);
      const bracketed = /\[/.test(line.slice(0, line.indexOf(m[1])));
      if (!known.has(id) && !bracketed) continue;
      put(id, parseBinaryVerdict(m[2]).met);
    }
  }
  const refused = byId.size === 0 && !ordered && parseBinaryVerdict(body).refused;
  const useOrder = byId.size === 0 && ordered && ordered.length === items.length;
  const missing: string[] = [];
  const verdicts = items.map((it, i) => {
    let met: boolean | null = null;
    if (useOrder) met = ordered![i];
    else if (byId.has(it.id)) met = byId.get(it.id)!;
    else missing.push(it.id);
    const v: Verdict = { itemId: it.id, met, raw };
    if (refused) v.refused = true;
    return v;
  });
  return { verdicts, unknownIds: unknown, duplicateIds: [...dup], missingIds: useOrder ? [] : missing };
}

/** {@link readPlanVerdicts}, verdicts only. */
export function parsePlanVerdicts(raw: string, items: JudgeItem[]): Verdict[] {
  return readPlanVerdicts(raw, items).verdicts;
}
