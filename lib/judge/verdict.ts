/**
 * Judge prompts (versioned files under `prompts/`) and robust reading of judge outputs.
 *
 * Parsing policy (issue 6): a verdict is read, never guessed. Thinking blocks are removed; case,
 * markdown emphasis, quotes and trailing punctuation/extra words are tolerated ("Yes.", "**No**",
 * "Answer: yes", "No, because …"); refusals ("I can't help with that") give `met: null,
 * refused: true`; anything else that is not clearly one answer gives `met: null` (unparsed).
 */
import { createHash } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { packageRoot } from '../native.js';
import type { JudgeItem, Verdict } from './types.js';

/** A loaded prompt template: `name` (file stem incl. version, e.g. `judge-per-item.v1`), body, hash. */
export interface PromptTemplate {
  name: string;
  template: string;
  /** sha256 (hex, 16 chars) of the template text; part of cache keys. */
  hash: string;
}

const promptCache = new Map<string, PromptTemplate>();

/**
 * Loads `prompts/<name>.md` from the package root (or `dir` when given), dropping the leading
 * `<!-- … -->` header comment and surrounding whitespace. Throws if the file is missing.
 */
export function loadPrompt(name: string, dir = join(packageRoot, 'prompts')): PromptTemplate {
  const path = join(dir, `${name}.md`);
  const hit = promptCache.get(path);
  if (hit) return hit;
  const text = readFileSync(path, 'utf8').replace(/^\s*<!--[\s\S]*?-->/, '').trim();
  const p: PromptTemplate = { name, template: text, hash: createHash('sha256').update(text).digest('hex').slice(0, 16) };
  promptCache.set(path, p);
  return p;
}

/**
 * Substitutes `{{key}}` placeholders in one pass (values are never re-scanned, so a plan that
 * contains `{{item}}` stays literal). Throws on a placeholder with no value.
 */
export function renderTemplate(template: string, values: Record<string, string>): string {
  return template.replace(/\{\{(\w+)\}\}/g, (_m, k: string) => {
    if (!(k in values)) throw new Error(`prompt placeholder {{${k}}} has no value`);
    return values[k];
  });
}

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

/**
 * Removes `<think>…</think>` blocks. An unclosed `<think>` (reasoning cut off) removes everything
 * after it; a stray `</think>` (template opened it) removes everything before it.
 */
export function stripThink(s: string): string {
  let t = s.replace(/<think>[\s\S]*?<\/think>/gi, '');
  const close = t.search(/<\/think>/i);
  if (close >= 0) t = t.slice(close + '</think>'.length);
  const open = t.search(/<think>/i);
  if (open >= 0) t = t.slice(0, open);
  return t.trim();
}

const REFUSAL = [
  /\bI\s*(?:can(?:'|’)?t|cannot|can not|won(?:'|’)?t|am unable to|'m unable to|’m unable to|am not able to|'m not able to)\s+(?:help|assist|comply|answer|provide|evaluate|grade|do that|fulfil|fulfill|determine|make)/i,
  /\bI(?:'|’)?m sorry\b/i,
  /\bI apologi[sz]e\b/i,
  /\bas an AI\b/i,
  /\bunable to (?:determine|assess|evaluate|answer)\b/i,
  /\bI (?:must|have to) (?:decline|refuse)\b/i,
];

/** Words read as an answer, lower-cased, after markdown/punctuation removal. */
const YES = new Set(['yes', 'y', 'true', 'met', 'satisfied', 'pass', 'passes', 'correct']);
const NO = new Set(['no', 'n', 'false', 'unmet', 'unsatisfied', 'fail', 'fails', 'incorrect']);
const NEGATED_YES = /^(?:not|isn't|is not|does not|doesn't)\s+(?:met|satisfied|satisfy|satisfies)\b/;

function wordVerdict(w: string): boolean | null {
  if (YES.has(w)) return true;
  if (NO.has(w)) return false;
  return null;
}

/** Lower-cases and removes markdown emphasis, code ticks, quotes, brackets and leading list/heading marks. */
function normalise(s: string): string {
  return s
    .toLowerCase()
    .replace(/[*_`"“”‘’#>\[\](){}]/g, ' ')
    .replace(/'(?=\s|$)|(?<=\s|^)'/g, ' ')
    .replace(/^\s*[-•]\s*/gm, '')
    .replace(/[ \t]+/g, ' ')
    .trim();
}

/** Result of reading one binary answer. */
export interface BinaryReading {
  met: boolean | null;
  refused: boolean;
}

/**
 * Reads a binary yes/no answer from judge text (see the module docstring for the policy).
 * Order: strip thinking → empty ⇒ null → leading answer word ("Yes.", "**No**", "no, because") →
 * a labelled answer ("Answer: yes", "Verdict - No", "the answer is yes"; the last one wins) →
 * "not met"/"not satisfied" → a refusal phrase ⇒ refused → otherwise null.
 */
export function parseBinaryVerdict(raw: string): BinaryReading {
  const body = stripThink(raw ?? '');
  if (!body) return { met: null, refused: false };
  const n = normalise(body);
  if (NEGATED_YES.test(n)) return { met: false, refused: false };
  const first = /^([a-z']+)(?=$|[\s.,;:!?\-])/.exec(n);
  if (first) {
    const w = wordVerdict(first[1]);
    if (w !== null) return { met: w, refused: false };
  }
  const labelled = [...n.matchAll(/\b(?:final answer|answer|verdict|decision|judg(?:e)?ment|result|label)\s*(?:is|:|=|-|–)\s*([a-z]+)\b/g)];
  for (let i = labelled.length - 1; i >= 0; i--) {
    const w = wordVerdict(labelled[i][1]);
    if (w !== null) return { met: w, refused: false };
  }
  // "The item is not met." / "The plan does not satisfy the item."
  if (/\b(?:is|are) not (?:met|satisfied)\b|\bdoes not satisfy\b|\bdoesn't satisfy\b/.test(n)) return { met: false, refused: false };
  // A last line that is only an answer word ("…reasoning…\nYes").
  const lastLine = n.split('\n').map((l) => l.trim()).filter(Boolean).pop() ?? '';
  const lw = /^([a-z]+)[.!]?$/.exec(lastLine);
  if (lw) {
    const w = wordVerdict(lw[1]);
    if (w !== null) return { met: w, refused: false };
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

/** Extracts the first balanced JSON object from text (code fences and prose around it tolerated). */
export function extractJsonObject(text: string): unknown {
  const body = stripThink(text);
  const fenced = /```(?:json)?\s*([\s\S]*?)```/i.exec(body);
  const candidates = fenced ? [fenced[1], body] : [body];
  for (const c of candidates) {
    try {
      return JSON.parse(c.trim());
    } catch {
      /* scan for a balanced object below */
    }
    const start = c.indexOf('{');
    if (start < 0) continue;
    let depth = 0;
    let inStr = false;
    let esc = false;
    for (let i = start; i < c.length; i++) {
      const ch = c[i];
      if (inStr) {
        if (esc) esc = false;
        else if (ch === '\\') esc = true;
        else if (ch === '"') inStr = false;
        continue;
      }
      if (ch === '"') inStr = true;
      else if (ch === '{') depth++;
      else if (ch === '}' && --depth === 0) {
        try {
          return JSON.parse(c.slice(start, i + 1));
        } catch {
          break;
        }
      }
    }
  }
  return undefined;
}

function valueVerdict(v: unknown): boolean | null {
  if (typeof v === 'boolean') return v;
  if (typeof v === 'number') return v === 1 ? true : v === 0 ? false : null;
  if (typeof v === 'string') return parseBinaryVerdict(v).met;
  if (v && typeof v === 'object') {
    const o = v as Record<string, unknown>;
    for (const k of ['met', 'satisfied', 'verdict', 'answer', 'value']) if (k in o) return valueVerdict(o[k]);
  }
  return null;
}

/**
 * Reads per-plan output into verdicts aligned with `items`. Accepted shapes:
 * `{"verdicts":[{"id","met"}]}` (the prompt's), a bare array of such entries, or a map
 * `{"<id>": true|"yes"|{"met":…}}`. Values may be booleans, 0/1 or yes/no strings. Items with no
 * readable entry get `met: null` (a whole-output refusal marks them all `refused`). When ids do not
 * match but the array has exactly one entry per item, entries are taken in order.
 */
export function parsePlanVerdicts(raw: string, items: JudgeItem[]): Verdict[] {
  const obj = extractJsonObject(raw) ?? (() => {
    const b = stripThink(raw);
    const s = b.indexOf('[');
    if (s < 0) return undefined;
    try {
      return JSON.parse(b.slice(s, b.lastIndexOf(']') + 1));
    } catch {
      return undefined;
    }
  })();
  const byId = new Map<string, boolean | null>();
  let ordered: (boolean | null)[] | undefined;
  const list = Array.isArray(obj) ? obj : obj && typeof obj === 'object' && Array.isArray((obj as { verdicts?: unknown }).verdicts) ? (obj as { verdicts: unknown[] }).verdicts : undefined;
  if (list) {
    ordered = [];
    for (const e of list) {
      const val = valueVerdict(e);
      ordered.push(val);
      if (e && typeof e === 'object' && 'id' in e) byId.set(String((e as { id: unknown }).id).replace(/^\[|\]$/g, ''), val);
    }
  } else if (obj && typeof obj === 'object') {
    for (const [k, v] of Object.entries(obj as Record<string, unknown>)) byId.set(k.replace(/^\[|\]$/g, ''), valueVerdict(v));
  }
  const idsMatch = items.some((it) => byId.has(it.id));
  const refused = obj === undefined && parseBinaryVerdict(raw).refused;
  return items.map((it, i) => {
    let met: boolean | null = null;
    if (idsMatch) met = byId.get(it.id) ?? null;
    else if (ordered && ordered.length === items.length) met = ordered[i];
    const v: Verdict = { itemId: it.id, met, raw };
    if (refused) v.refused = true;
    return v;
  });
}
