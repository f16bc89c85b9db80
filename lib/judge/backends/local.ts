/**
 * The `local` judge: the policy's own base model (adapter off) reading P(yes) from one prefill per
 * rubric item (lib/judge/local.ts). In train and eval it runs on the loaded policy (no second copy);
 * probe-judge loads the model given by --model.
 */
import type { JudgeConfig } from '../../config/judge.js';
import type { LocalModelJudgeOptions } from '../local.js';
import type { JudgeBackendOf } from './backend.js';

// Its kind's name in the judge config's type (lib/config/judge.ts JudgeKindNames).
declare module '../../config/judge.js' {
  interface JudgeKindNames {
    local: true;
  }
}

/** Local-judge options from settings (for localJudgeForModel / openLocalJudge). */
export function localJudgeOptionsFromConfig(
  c: Pick<JudgeConfig, 'batch' | 'variants' | 'scoring'>,
): Required<Pick<LocalModelJudgeOptions, 'batchSize' | 'scoring'>> & Pick<LocalModelJudgeOptions, 'variants'> {
  return { batchSize: c.batch, variants: c.variants ?? undefined, scoring: c.scoring };
}

export const localBackend: JudgeBackendOf<'local'> = {
  kind: 'local',
  describe: "the policy's frozen base model in-process (adapter off, P(yes) from one prefill)",
  settingKeys: ['batch', 'scoring', 'cache'],
  sharesPolicyWeights: () => true,
  answersFreeForm: () => false,
  label: () => 'local',
  // eval's default cache beside --out (lib/eval/run.ts evalJudgeCachePath): a rerun re-scores no plan.
  withAnswerCache: (c, path) => (c.cache ? c : { ...c, cache: path }),
  async open(c, ctx) {
    // Loaded on first use: an http-only command never loads the addon through here.
    const { localJudgeForModel, openLocalJudge } = await import('../local.js');
    const { judgeModelIdentity } = await import('../local-cache.js');
    // The model's files and placement key the answer cache (judge.cache); a model given without
    // them (a library caller's own) is judged without one.
    const source = ctx.policy ? ctx.policy.source : ctx.modelDir ? { dir: ctx.modelDir, device: ctx.device, dtype: ctx.dtype } : undefined;
    const opts: LocalModelJudgeOptions = {
      ...localJudgeOptionsFromConfig(c),
      maxTokensPerCall: ctx.maxTokensPerCall || undefined,
      // The caller's per-item prompt (an eval protocol's yes/no prompt), as the http backend takes it.
      ...(ctx.perItemPrompt && { prompt: ctx.perItemPrompt }),
      ...(c.cache && source && { answerCache: { path: c.cache, identity: judgeModelIdentity(source.dir, source) } }),
    };
    if (ctx.policy) return localJudgeForModel(ctx.policy.model, ctx.policy.tokenizer, opts);
    if (!ctx.modelDir) throw new Error('--judge local needs a model: the policy (train, eval) or --model DIR');
    return (await openLocalJudge(ctx.modelDir, { ...opts, device: ctx.device, dtype: ctx.dtype })).judge;
  },
};
