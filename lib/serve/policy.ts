/**
 * `serve`'s backend over the rollout `Policy` (lib/model/policy.ts), the active adapter applied.
 */
import type { Policy } from '../model/policy.js';
import { Qwen3Model } from '../model/qwen3.js';
import type { ServeBackend, ServeResult } from './server.js';
import { modelStepper, type ServeStepper } from './stepper.js';

/**
 * ServeBackend over a Policy (active adapter). With a loaded model (a real Policy) `serve` uses its
 * step-wise side: continuous batching on the native decode engine (lib/serve/stepper.ts;
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
        if (p.length + opts.maxNewTokens > ctx)
          results[i] = { error: `prompt of ${p.length} tokens + max_tokens ${opts.maxNewTokens} exceeds the context of ${ctx}` };
        else ok.push(i);
      });
      if (ok.length) {
        const res = await policy.generateWithStats(
          ok.map((i) => prompts[i]),
          {
            n: opts.n,
            temperature: opts.temperature,
            topP: opts.topP,
            topK: opts.topK,
            maxNewTokens: opts.maxNewTokens,
            seed: opts.seed,
            enableThinking: opts.enableThinking,
            signal: opts.signal,
          },
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
