/**
 * `serve`'s backend over the rollout `Policy` (lib/model/policy.ts), the active adapter applied.
 */
import type { Policy } from '../model/policy.js';
import type { AdapterChoice } from '../addon.js';
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
export function policyServeBackend(
  policy: Policy,
  engine: { maxRows?: number; capacity?: number; maxPrefillTokens?: number; adapters?: Readonly<Record<string, AdapterChoice>> } = {},
): ServeBackend {
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
            ...(opts.adapter !== undefined && { adapter: adapterChoice(engine.adapters, opts.adapter) }),
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

function adapterChoice(adapters: Readonly<Record<string, AdapterChoice>> | undefined, name: string): AdapterChoice {
  const c = adapters?.[name];
  if (c === undefined) throw new TypeError(`adapter '${name}' is not served`);
  return c;
}

/**
 * Loads several PEFT adapters into one policy's model for `serve --lora-modules name=dir …`: each
 * is loaded as the active adapter, then kept as the frozen snapshot `lora:<name>` (the model's
 * named adapters, selectable per forward and per decode engine). Afterwards the active adapter is
 * `activeDir` again (serve --adapter), or, without one, disabled, so the served model id stays
 * the base model. Returns served name → adapter choice.
 * @throws Error naming the module on a bad `name=dir`, a duplicate name, or a directory that does not load.
 */
export async function loadServedAdapters(
  policy: Policy,
  modules: readonly string[],
  opts: { activeDir?: string; allowNonFinite?: boolean; reserved?: readonly string[] } = {},
): Promise<Record<string, AdapterChoice>> {
  const out: Record<string, AdapterChoice> = {};
  for (const m of modules) {
    const eq = m.indexOf('=');
    const name = eq > 0 ? m.slice(0, eq).trim() : '';
    const dir = eq > 0 ? m.slice(eq + 1).trim() : '';
    if (!name || !dir) throw new Error(`--lora-modules ${m}: expected name=dir (vLLM's form)`);
    if (name in out || opts.reserved?.includes(name)) throw new Error(`--lora-modules ${m}: the name ${name} is already served`);
    try {
      await policy.model.loadAdapter(dir, { allowNonFinite: opts.allowNonFinite ?? false });
    } catch (e) {
      throw new Error(`--lora-modules ${m}: ${(e as Error).message}`);
    }
    const snap = `lora:${name}`;
    policy.model.snapshotAdapter(snap);
    out[name] = snap;
  }
  if (!modules.length) return out;
  if (opts.activeDir) await policy.model.loadAdapter(opts.activeDir, { allowNonFinite: opts.allowNonFinite ?? false });
  else policy.model.setAdapterEnabled(false);
  return out;
}
