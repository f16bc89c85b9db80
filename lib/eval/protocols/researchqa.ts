/**
 * ResearchQA coverage (arXiv 2509.00496; the authors' compute_coverage.py, /work/shared/BENCHMARKS.md):
 * the judge labels each rubric item of an answer on five levels — not at all, barely (unmentioned
 * but inferable), moderately, mostly, completely — read as x = 1…5 and scored (x − 1)/4; items go
 * 8 per judge call, one label per line (prompts/eval-researchqa-coverage.v1.md). Query coverage =
 * mean over its items; benchmark = mean over queries. A query whose reply does not give one
 * readable label per item after 3 retries is skipped: counted, left out of the mean, never 0.
 */
import { stripThink } from '../../llm/think.js';
import { unsignedOnly } from './types.js';
import type { Protocol, ProtocolRow } from './types.js';

/** The five levels, in order (x = index + 1). */
export const RESEARCHQA_LEVELS = ['not at all', 'barely', 'moderately', 'mostly', 'completely'] as const;
/** Items per judge call (the authors' batch). */
export const RESEARCHQA_BATCH = 8;
/** Retries of a call whose labels cannot be read (the authors': 3). */
export const RESEARCHQA_RETRIES = 3;

/**
 * Reads one reply: one label per line (a level word, or its number 1…5; list markers, item
 * numbers and punctuation around it are ignored). Null unless exactly `n` lines carry a label.
 */
export function parseLevels(reply: string, n: number): number[] | null {
  const out: number[] = [];
  for (const raw of stripThink(reply).split(/\r?\n/)) {
    const line = raw
      .toLowerCase()
      .replace(/^[\s\-*•]*(item\s*)?\d+\s*[.):\]-]\s*/, '')
      .replace(/[*_`"'.]/g, ' ')
      .trim();
    if (!line) continue;
    let x = RESEARCHQA_LEVELS.findIndex((w) => line === w || line.startsWith(`${w} `) || line.startsWith(`${w}:`) || line.endsWith(` ${w}`));
    if (x < 0 && /^[1-5]$/.test(line)) x = Number(line) - 1;
    if (x < 0) continue;
    out.push(x + 1);
  }
  return out.length === n ? out : null;
}

export const researchqaProtocol: Protocol = {
  name: 'researchqa',
  formula: 'per item (x−1)/4 of its five-level label x; query = mean over its items; benchmark = mean over queries; unreadable queries skipped',
  verdict: 'levels',
  inapplicable: (it) => unsignedOnly(it),
  planScore(rows: ProtocolRow[]) {
    if (!rows.length || rows.some((r) => r.skipped || r.level === null || r.level === undefined)) return null;
    return rows.reduce((a, r) => a + (r.level! - 1) / 4, 0) / rows.length;
  },
  groupsOf: (r) => (r.type ? [`type:${r.type}`] : []),
  finish: (m) => m,
};
