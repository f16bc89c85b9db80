/**
 * The judge backends, one descriptor per kind (./backend.ts), one registry. A new kind is one file
 * in this folder and one line in the `register` call below (docs/design.md "Extending"); its own
 * settings rows and key rules are in its descriptor (`settings`, `settingsProblems`), handed to the
 * one settings schema (lib/config/extensions.ts) when this module loads, and its kind joins the
 * `--judge` choices. Code outside lib/judge/ asks these functions, never tests a kind by name.
 */
import type { JudgeConfig } from '../../config/judge.js';
import { provideJudgeBackends } from '../../config/extensions.js';
import { Registry } from '../../util/registry.js';
import type { Judge } from '../types.js';
import type { JudgeBackend, JudgeCheckOptions, JudgeOpenContext } from './backend.js';
import { httpBackend } from './http.js';
import { localBackend } from './local.js';
import { juryBackend } from './jury.js';

export const JUDGE_BACKENDS = new Registry<JudgeBackend>('judge backend', (b) => b.kind);
JUDGE_BACKENDS.register(localBackend, httpBackend, juryBackend);
provideJudgeBackends(() => JUDGE_BACKENDS.values());

/** The backend of `c.kind`. @throws Error naming the kind and the registered ones. */
export function judgeBackend(c: Pick<JudgeConfig, 'kind'>): JudgeBackend {
  return JUDGE_BACKENDS.get(c.kind, 'judge.kind (--judge)');
}

/** Whether the judge runs on the policy's weights (see {@link JudgeBackend.sharesPolicyWeights}). */
export function judgeSharesPolicyWeights(c: JudgeConfig): boolean {
  return judgeBackend(c).sharesPolicyWeights(c);
}

/** Whether the judge's kind is made of member judges (see JudgeKindSettings.hasMembers in lib/config/extensions.ts). */
export function judgeHasMembers(c: Pick<JudgeConfig, 'kind'>): boolean {
  return judgeBackend(c).hasMembers ?? false;
}

/**
 * The registered kind made of member judges (the first, in registration order, when several): the
 * kind of a judge that a command builds from a `--judges` list. @throws Error when none is registered.
 */
export function membersKind(): JudgeConfig['kind'] {
  const b = JUDGE_BACKENDS.values().find((x) => x.hasMembers);
  if (!b) throw new Error(`--judges: no registered judge kind has members (registered: ${JUDGE_BACKENDS.names().join(', ')})`);
  return b.kind;
}

/** Whether the judge can answer a free-form question (see {@link JudgeBackend.answersFreeForm}). */
export function judgeAnswersFreeForm(c: JudgeConfig): boolean {
  return judgeBackend(c).answersFreeForm?.(c) ?? false;
}

/** `c` with an SQLite answer cache at `path` when its kind caches answers and none is set. */
export function judgeWithAnswerCache(c: JudgeConfig, path: string): JudgeConfig {
  const b = judgeBackend(c);
  return b.withAnswerCache ? b.withAnswerCache(c, path) : c;
}

/** The judge's name in messages. */
export function judgeLabel(c: JudgeConfig): string {
  return judgeBackend(c).label(c);
}

/** The backend's start-up check (a no-op for a kind without one). */
export async function checkJudge(c: JudgeConfig, opts: JudgeCheckOptions = {}): Promise<void> {
  await judgeBackend(c).check?.(c, opts);
}

/** Opens the judge of `c.kind` (`ctx.openJudge` is filled in: sub-judges open through the same registry). */
export async function openJudge(c: JudgeConfig, ctx: Omit<JudgeOpenContext, 'openJudge'> = {}): Promise<Judge> {
  const full: JudgeOpenContext = { ...ctx, openJudge: (sub) => openJudge(sub, ctx) };
  return judgeBackend(c).open(c, full);
}

export { httpJudgeFromConfig } from './http.js';
export { localJudgeOptionsFromConfig } from './local.js';
export type { JudgeBackend, JudgeBackendOf, JudgeCheckOptions, JudgeOpenContext } from './backend.js';
