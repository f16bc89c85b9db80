/**
 * The `jury` judge: several judges (judge.judges, each of any kind without members, with its own model, score
 * mode and weight) decide every item; one verdict by judge.aggregation, every member's verdict kept
 * on it (lib/judge/jury.ts). Members open through the same registry (`ctx.openJudge`); a local
 * member runs on the policy's weights like the local judge.
 */
import { juryMemberConfig, type JudgeConfig } from '../../config/judge.js';
import type { Judge } from '../types.js';
import type { JudgeBackendOf } from './backend.js';
import { judgeBackend } from './index.js';

// Its kind's name in the judge config's type (lib/config/judge.ts JudgeKindNames).
declare module '../../config/judge.js' {
  interface JudgeKindNames {
    jury: true;
  }
}

/** The members' full settings (each member's keys over the section's). */
export function juryMembers(c: JudgeConfig): (JudgeConfig & { name: string; weight: number })[] {
  return (c.judges ?? []).map((_m, i) => juryMemberConfig(c, i));
}

export const juryBackend: JudgeBackendOf<'jury'> = {
  kind: 'jury',
  describe: 'several judges (judge.judges: each of a kind without members, own model, score and weight), one verdict by judge.aggregation',
  settingKeys: ['judges', 'aggregation', 'juryOnMemberFailure'],
  hasMembers: true,
  // The section's cache, which every member without its own inherits (keys differ by member: url and model, or the local model's identity).
  withAnswerCache: (c, path) => (c.cache ? c : { ...c, cache: path }),
  answersFreeForm: () => false,
  sharesPolicyWeights: (c) => juryMembers(c).some((m) => judgeBackend(m).sharesPolicyWeights(m)),
  label: (c) =>
    `jury:${c.aggregation}(${juryMembers(c)
      .map((m) => m.name)
      .join(',')})`,
  /**
   * Every member's own start-up check, concurrently; a failure names the member and its entry in
   * judge.judges (a single judge's advice to fix --judge-url / --judge-model or pass --judge local
   * does not apply to a member: its url and model are in the judges list).
   */
  async check(c, opts = {}) {
    await Promise.all(
      juryMembers(c).map(async (m, i) => {
        try {
          await judgeBackend(m).check?.(m, opts);
        } catch (e) {
          const why = (e as Error).message.replace(/; fix --judge-url \/ --judge-model or pass --judge local$/, '');
          throw new Error(`jury member ${m.name}: ${why}; fix the url / model of its entry judge.judges[${i}] (name ${m.name}) in the --judges file`);
        }
      }),
    );
  },
  async open(c, ctx) {
    const { JuryJudge } = await import('../jury.js');
    const ms = juryMembers(c);
    const opened: { name: string; weight: number; maxNullRate: number; judge: Judge }[] = [];
    try {
      for (const m of ms) opened.push({ name: m.name, weight: m.weight, maxNullRate: m.maxNullRate, judge: await ctx.openJudge(m) });
    } catch (e) {
      for (const o of opened) await o.judge.close?.();
      throw new Error(`jury member ${ms[opened.length]?.name}: ${(e as Error).message}`);
    }
    return new JuryJudge(opened, { aggregation: c.aggregation, juryOnMemberFailure: c.juryOnMemberFailure });
  },
};
