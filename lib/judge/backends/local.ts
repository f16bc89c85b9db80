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
  settingKeys: ['batch', 'scoring'],
  sharesPolicyWeights: () => true,
  answersFreeForm: () => false,
  label: () => 'local',
  async open(c, ctx) {
    // Loaded on first use: an http-only command never loads the addon through here.
    const { localJudgeForModel, openLocalJudge } = await import('../local.js');
    // The caller's per-item prompt (an eval protocol's yes/no prompt), as the http backend takes it.
    const opts = {
      ...localJudgeOptionsFromConfig(c),
      maxTokensPerCall: ctx.maxTokensPerCall || undefined,
      ...(ctx.perItemPrompt && { prompt: ctx.perItemPrompt }),
    };
    if (ctx.policy) return localJudgeForModel(ctx.policy.model, ctx.policy.tokenizer, opts);
    if (!ctx.modelDir) throw new Error('--judge local needs a model: the policy (train, eval) or --model DIR');
    return (await openLocalJudge(ctx.modelDir, { ...opts, device: ctx.device, dtype: ctx.dtype })).judge;
  },
};
