/**
 * The registry of scoring protocols (`eval --protocol NAME`; default: the items' format). Each
 * module's docstring gives its formula and source.
 */
import { Registry } from '../../util/registry.js';
import { provideNames } from '../../config/extensions.js';
import type { Protocol } from './types.js';
import { researchqaProtocol } from './researchqa.js';
import { researchPlanGenProtocol } from './research-plan-gen.js';
import { healthbenchProtocol } from './healthbench.js';
import { rarProtocol, rubrichubProtocol } from './weighted.js';
import { papergymProtocol } from './papergym.js';

export type { Protocol, ProtocolRow, ProtocolScore, ProtocolStat } from './types.js';
export { bootstrapMeans, questionScores, scoreRows, formatProtocolScore, plansOf, weightedScore, type ScoreOptions } from './score.js';
export { parseLevels, RESEARCHQA_BATCH, RESEARCHQA_LEVELS, RESEARCHQA_RETRIES } from './researchqa.js';

/** Every protocol by name (lib/util/registry.ts). */
export const PROTOCOLS = new Registry<Protocol>('scoring protocol', (p) => p.name).register(
  researchqaProtocol,
  researchPlanGenProtocol,
  healthbenchProtocol,
  rubrichubProtocol,
  rarProtocol,
  papergymProtocol,
);
provideNames('protocols', () => PROTOCOLS.names());

/** The protocol named `name`. @throws Error naming --protocol and the registered protocols */
export function getProtocol(name: string): Protocol {
  return PROTOCOLS.get(name, '--protocol');
}
