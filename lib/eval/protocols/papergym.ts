/**
 * PaperGym (the seed paper, docs/design.md §6): a binary verdict per rubric item; the plan's score
 * is the training reward r = α·r_spec + (1 − α)·r_gen computed by the function training uses
 * (lib/judge/rewards.ts computeReward; α = 0.7), so eval and training never disagree on a plan.
 * Null rule (the same in training): a null verdict leaves its set's fraction; a set (instance or
 * general items) with no readable verdict is left out and its weight moves to the other set
 * (the α mix renormalised over the sets present); a plan with no readable verdict is skipped
 * (counted, never 0). Per dimension (method innovation, experimental design), per item origin and
 * for the general items: the mean over plans of that group's fraction met (its readable items), as
 * the paper's Innov / Design columns; a plan whose group has no readable verdict is left out of
 * that group only. Applies to PaperGym items (the dimensions and the general rubric are PaperGym's).
 */
import { computeReward } from '../../judge/rewards.js';
import type { Verdict } from '../../judge/types.js';
import { RUBRIC_ORIGINS } from '../../data/schema.js';
import type { Protocol, ProtocolRow } from './types.js';

const verdictOf = (r: ProtocolRow): Verdict => ({
  itemId: r.itemId,
  met: r.met,
  ...(r.refused && { refused: true }),
  ...(r.error && { error: true }),
  ...(r.prob !== undefined && { prob: r.prob }),
});

export const papergymProtocol: Protocol = {
  name: 'papergym',
  formula:
    'plan = α·r_spec + (1−α)·r_gen (lib/judge/rewards.ts, α = 0.7; r_* = fraction of readable items met; a set with no readable verdict leaves the mix); per dimension: fraction of its readable items met',
  verdict: 'binary',
  generalRubric: true,
  coverageView: true,
  inapplicable: (it) => (it.format === 'papergym' ? null : `its items are ${it.format}, not PaperGym (no dimensions, no general rubric)`),
  planScore(rows, { alpha }) {
    if (!rows.length) return null;
    const spec = rows.filter((r) => r.kind === 'spec').map(verdictOf);
    const gen = rows.filter((r) => r.kind === 'general').map(verdictOf);
    // One group's rows: the coverage of that group (the reward of a spec-only or general-only set).
    const b = computeReward(spec, gen, { alpha });
    return b.masked ? null : b.r;
  },
  groupsOf: (r) =>
    r.kind === 'general'
      ? ['general']
      : [
          r.dimension ? `dimension:${r.dimension}` : 'spec',
          ...(r.origin && (RUBRIC_ORIGINS as readonly string[]).includes(r.origin) ? [`origin:${r.origin}`] : []),
        ],
  finish: (m) => m,
};
