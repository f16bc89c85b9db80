/**
 * PaperGym (the seed paper, docs/design.md §6): a binary verdict per rubric item; the plan's score
 * is the training reward r = α·r_spec + (1 − α)·r_gen computed by the function training uses
 * (lib/judge/rewards.ts computeReward; α = 0.7), so eval and training never disagree on a plan;
 * per dimension (method innovation, experimental design) and for the general items, the coverage
 * (fraction met) of that group's items, as the paper's Innov / Design columns.
 */
import { computeReward } from '../../judge/rewards.js';
import type { Verdict } from '../../judge/types.js';
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
  formula: 'plan = α·r_spec + (1−α)·r_gen (lib/judge/rewards.ts, α = 0.7); per dimension: fraction of its items met',
  verdict: 'binary',
  generalRubric: true,
  planScore(rows, { alpha }) {
    if (!rows.length) return null;
    const spec = rows.filter((r) => r.kind === 'spec').map(verdictOf);
    const gen = rows.filter((r) => r.kind === 'general').map(verdictOf);
    // One group's rows: the coverage of that group (the reward of a spec-only or general-only set).
    return computeReward(spec, gen, { alpha }).r;
  },
  groupsOf: (r) => [r.kind === 'general' ? 'general' : r.dimension ? `dimension:${r.dimension}` : 'spec'],
  finish: (m) => m,
};
