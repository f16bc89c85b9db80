/**
 * The eval loop's PlanGenerator over the rollout `Policy` (lib/model/policy.ts). The server's
 * backend over a Policy is lib/serve/policy.ts.
 */
import type { Policy, PolicyPrompt } from '../model/policy.js';
import type { SamplingParams } from '../addon.js';
import { studentMessages } from '../task/prompts.js';
import type { PlanGenerator } from './run.js';

/** Sampling used for eval plans. Defaults: Qwen3's non-thinking recommendation (T 0.7, top-p 0.8, top-k 20), 1024 new tokens, thinking off. */
export interface PlanSampling extends Pick<SamplingParams, 'temperature' | 'topP' | 'topK' | 'maxNewTokens'> {
  enableThinking?: boolean;
}

/** What the policy is given for a plan prompt: a question string gets the task's student prompt, chat messages go as they are. */
export function policyPromptOf(q: string | Exclude<PolicyPrompt, string>): PolicyPrompt {
  return typeof q === 'string' ? studentMessages(q) : q;
}

/**
 * PlanGenerator over a Policy: a question string gets the task's student prompt (lib/task/prompts.ts),
 * chat messages (an imported benchmark's prompt) are sent as they are; `samples` completions each.
 */
export function policyPlanGenerator(policy: Policy, s: PlanSampling = {}): PlanGenerator {
  return {
    async generate(questions, { samples, seed, signal }) {
      const cs = await policy.generate(questions.map(policyPromptOf), {
        n: samples,
        seed,
        temperature: s.temperature ?? 0.7,
        topP: s.topP ?? 0.8,
        topK: s.topK ?? 20,
        maxNewTokens: s.maxNewTokens ?? 1024,
        enableThinking: s.enableThinking ?? false,
        signal,
      });
      const out: { text: string; finishReason?: string }[][] = questions.map(() => []);
      for (const c of cs) out[c.promptIndex][c.sampleIndex] = { text: c.text, finishReason: c.finishReason };
      return out;
    },
  };
}
