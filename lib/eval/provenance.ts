/**
 * Eval results grouped by how the items were built (`item.provenance`, written by `build-data`):
 * the paper's data experiments (Table 4 rubric ablations, weaker writer / extractor, domain mix)
 * compared within one eval when one dataset mixes them. One {@link buildReport} per group, over
 * the rows of that group's questions (the bootstrap clusters stay questions).
 */
import type { PaperGymItem } from '../data/schema.js';
import { buildReport, type EvalReport, type EvalRow, type ReportOptions } from './report.js';

/** A readable label of an item's provenance (`no provenance` for items without one). */
export function provenanceLabel(it: Pick<PaperGymItem, 'provenance'>): string {
  const p = it.provenance;
  if (!p) return 'no provenance';
  const parts = [
    `sources ${(p.rubric_sources ?? ['R_Q', 'R_A']).join('+')}`,
    `dimensions ${(p.rubric_dimensions ?? ['method_innovation', 'experimental_design']).join('+')}`,
    `top-k ${p.rubric_top_k ?? 10}`,
    `general ${p.general_items === false ? 'off' : 'on'}`,
  ];
  if (p.models)
    parts.push(
      `models ${Object.entries(p.models)
        .map(([r, m]) => `${r}=${m}`)
        .join(' ')}`,
    );
  if (p.domain_mix) parts.push(`mix ${p.domain_mix}`);
  return parts.join(', ');
}

/**
 * One report per provenance label, or undefined when every item has the same one.
 * @param rows eval rows (`questionId` = item id)
 */
export function reportsByProvenance(
  items: readonly PaperGymItem[],
  rows: readonly EvalRow[],
  opts: ReportOptions = {},
): Record<string, EvalReport> | undefined {
  const groups = new Map<string, Set<string>>();
  for (const it of items) {
    const label = provenanceLabel(it);
    if (!groups.has(label)) groups.set(label, new Set());
    groups.get(label)!.add(it.id);
  }
  if (groups.size < 2) return undefined;
  return Object.fromEntries(
    [...groups].map(([label, ids]) => [
      label,
      buildReport(
        rows.filter((r) => ids.has(r.questionId)),
        opts,
      ),
    ]),
  );
}

/** `by provenance: <label>: coverage 61.2% [55.0, 67.1] over 40 questions` lines. */
export function formatProvenanceReports(by: Record<string, EvalReport>): string {
  const pct = (x: number) => (100 * x).toFixed(1);
  return Object.entries(by)
    .map(
      ([label, r]) => `by provenance: ${label}: coverage ${pct(r.overall.mean)}% [${pct(r.overall.lo)}, ${pct(r.overall.hi)}] over ${r.questions} question(s)`,
    )
    .join('\n');
}
