/**
 * Adapters from the rollout `Policy` (lib/model/policy.ts) to the eval loop's PlanGenerator and
 * the server's ServeBackend.
 */
import type { Policy } from '../model/policy.js';
import { studentMessages } from '../train/prompts.js';
import type { ServeBackend, ServeResult } from '../judge/serve.js';
import { modelStepper, type ServeStepper } from '../judge/serve-engine.js';
import { Qwen3Model } from '../model/qwen3.js';
import type { PlanGenerator } from './run.js';

/** Sampling used for eval plans. Defaults: Qwen3's non-thinking recommendation (T 0.7, top-p 0.8, top-k 20), 1024 new tokens, thinking off. */
export interface PlanSampling {
  temperature?: number;
  topP?: number;
  topK?: number;
  maxNewTokens?: number;
  enableThinking?: boolean;
}

/** PlanGenerator over a Policy: the student prompt of training (lib/train/prompts.ts) per question, `samples` completions each. */
export function policyPlanGenerator(policy: Policy, s: PlanSampling = {}): PlanGenerator {
  return {
    async generate(questions, { samples, seed, signal }) {
      const cs = await policy.generate(
        questions.map((q) => studentMessages(q)),
        { n: samples, seed, temperature: s.temperature ?? 0.7, topP: s.topP ?? 0.8, topK: s.topK ?? 20, maxNewTokens: s.maxNewTokens ?? 1024, enableThinking: s.enableThinking ?? false, signal },
      );
      const out: { text: string; finishReason?: string }[][] = questions.map(() => []);
      for (const c of cs) out[c.promptIndex][c.sampleIndex] = { text: c.text, finishReason: c.finishReason };
      return out;
    },
  };
}

/**
 * ServeBackend over a Policy (active adapter). With a loaded model (a real Policy) `serve` uses its
 * step-wise side: continuous batching on the native decode engine (lib/judge/serve-engine.ts;
 * `engine.maxRows` rows, `engine.capacity` KV slots per row). `generate` is the whole-batch side:
 * prompts whose length + max_tokens exceeds the context get a per-request error; the rest run as
 * one batched generation.
 */
export function policyServeBackend(policy: Policy, engine: { maxRows?: number; capacity?: number; maxPrefillTokens?: number } = {}): ServeBackend {
  let stepper: ServeStepper | undefined;
  return {
    stepper: () => {
      if (!stepper && policy.model instanceof Qwen3Model) stepper = modelStepper(policy, engine);
      return stepper;
    },
    async generate(prompts, opts) {
      const ids = await policy.encodePrompts(prompts, { enableThinking: opts.enableThinking });
      const ctx = policy.contextLength;
      const results: ServeResult[] = new Array(prompts.length);
      const ok: number[] = [];
      ids.forEach((p, i) => {
        if (p.length + opts.maxNewTokens > ctx) results[i] = { error: `prompt of ${p.length} tokens + max_tokens ${opts.maxNewTokens} exceeds the context of ${ctx}` };
        else ok.push(i);
      });
      if (ok.length) {
        const res = await policy.generateWithStats(
          ok.map((i) => prompts[i]),
          { n: opts.n, temperature: opts.temperature, topP: opts.topP, topK: opts.topK, maxNewTokens: opts.maxNewTokens, seed: opts.seed, enableThinking: opts.enableThinking, signal: opts.signal },
        );
        ok.forEach((i, j) => (results[i] = { promptTokens: res.promptIds[j].length, completions: [] }));
        for (const c of res.completions) {
          const r = results[ok[c.promptIndex]] as { completions: { text: string; finishReason: 'stop' | 'length'; completionTokens: number }[] };
          r.completions[c.sampleIndex] = { text: c.text, finishReason: c.finishReason, completionTokens: c.tokenIds.length };
        }
      }
      return results;
    },
  };
}
