/**
 * Issue 56 item 2: `serve` as vLLM serves — generation_config.json sampling defaults unless the
 * request sets them (`--generation-config auto | vllm | DIR`), and several LoRA adapters in one
 * server (`--lora-modules name=dir`): listed in /v1/models, picked by the request's `model`, each
 * completion equal to the same adapter's completion from its own policy.
 */
import { expect } from 'chai';
import { mkdtempSync, rmSync, writeFileSync, mkdirSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { ChatServer, type ServeGenerateOptions } from '../lib/serve/server.js';
import { generationDefaults, readGenerationDefaults } from '../lib/serve/generation-config.js';
import { loadServedAdapters, policyServeBackend } from '../lib/serve/policy.js';
import { Policy } from '../lib/model/policy.js';
import { randomLoraB, tinyModel } from './helpers/tiny.js';
import { rejection } from './helpers/run.js';

type Json = Record<string, unknown>;
const post = (url: string, b: Json) =>
  fetch(`${url}/chat/completions`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(b) });

describe('serve as vLLM serves: generation-config defaults, several adapters (issue 56)', function () {
  this.timeout(120_000);
  let tmp = '';
  before(() => (tmp = mkdtempSync(join(tmpdir(), 'pg-serve-multi-'))));
  after(() => rmSync(tmp, { recursive: true, force: true }));

  it("reads a generation_config.json's sampling keys as vLLM does; 'vllm' reads none", () => {
    // Qwen3's generation_config.json (Qwen/Qwen3-1.7B on the Hub).
    const qwen3 = { bos_token_id: 151643, do_sample: true, eos_token_id: [151645, 151643], temperature: 0.6, top_k: 20, top_p: 0.95 };
    expect(generationDefaults(qwen3, 'g')).to.deep.equal({ defaults: { temperature: 0.6, topP: 0.95, topK: 20 }, notes: [] });
    expect(generationDefaults({ repetition_penalty: 1.05, min_p: 0.1 }, 'g.json')).to.deep.equal({
      defaults: { minP: 0.1 },
      notes: ['g.json: repetition_penalty 1.05 is not applied (this engine has no repetition penalty)'],
    });
    expect(() => generationDefaults({ top_p: 0 }, 'g.json')).to.throw('g.json: top_p must be a number in (0, 1] (got 0)');
    const dir = join(tmp, 'gc');
    mkdirSync(dir);
    writeFileSync(join(dir, 'generation_config.json'), JSON.stringify(qwen3));
    expect(readGenerationDefaults('auto', dir).defaults).to.deep.equal({ temperature: 0.6, topP: 0.95, topK: 20 });
    expect(readGenerationDefaults(dir, join(tmp, 'elsewhere')).defaults.temperature).to.equal(0.6);
    expect(readGenerationDefaults('vllm', dir)).to.deep.equal({ defaults: {}, notes: [], source: null });
    expect(readGenerationDefaults('auto', join(tmp, 'no-such'))).to.deep.equal({ defaults: {}, notes: [], source: null });
    expect(() => readGenerationDefaults(join(tmp, 'no-such'), dir)).to.throw(/--generation-config .*no-such: .*generation_config\.json does not exist/);
  });

  it('a request without sampling settings gets the defaults; one that sets them keeps its own; the model picks the adapter', async () => {
    const seen: ServeGenerateOptions[] = [];
    const srv = new ChatServer({
      backend: {
        async generate(prompts, opts) {
          seen.push(opts);
          return prompts.map(() => ({ promptTokens: 1, completions: [{ text: 'ok', finishReason: 'stop' as const, completionTokens: 1 }] }));
        },
      },
      modelId: 'base',
      adapters: ['opsd', 'grpo'],
      samplingDefaults: { temperature: 0.6, topP: 0.95, topK: 20 },
      port: 0,
    });
    const { url } = await srv.start();
    try {
      const models = (await (await fetch(`${url}/models`)).json()) as { data: { id: string; parent?: string }[] };
      expect(models.data.map((m) => [m.id, m.parent ?? null])).to.deep.equal([
        ['base', null],
        ['opsd', 'base'],
        ['grpo', 'base'],
      ]);
      const msg = [{ role: 'user', content: 'hi' }];
      const r1 = (await (await post(url, { model: 'opsd', messages: msg })).json()) as Json;
      expect(r1.model).to.equal('opsd');
      expect(seen[0]).to.deep.include({ temperature: 0.6, topP: 0.95, topK: 20, adapter: 'opsd' });
      await post(url, { messages: msg, temperature: 1, top_p: 1, top_k: 0 });
      expect(seen[1]).to.deep.include({ temperature: 1, topP: 1, topK: 0 });
      expect(seen[1]!.adapter).to.equal(undefined);
      const bad = await post(url, { model: 'sft', messages: msg });
      expect(bad.status).to.equal(404);
      expect(((await bad.json()) as { error: { message: string } }).error.message).to.include('serving base, opsd, grpo');
    } finally {
      await srv.close();
    }
  });

  it('several adapters decode in one server, each completion as its own policy gives it (greedy)', async () => {
    const model = tinyModel('tiny-tied');
    // Two adapters of different ranks with non-zero B, written in PEFT format.
    const dirs: string[] = [];
    for (const [i, r] of [4, 8].entries()) {
      const p = await Policy.load(model);
      p.model.addLora({ r, alpha: 2 * r, seed: i + 1 });
      p.model.setLoraWeights(randomLoraB(p.model, 11 + i, 0.5));
      const d = join(tmp, `adapter-${i}`);
      await p.model.saveAdapter(d);
      p.dispose();
      dirs.push(d);
    }
    const prompts = ['Name a prime.', 'Say hello.'];
    const greedy = { temperature: 0, maxNewTokens: 8, enableThinking: false };
    // Expected: each adapter on its own policy (and the base with none), the same prompts.
    const expected: Record<string, string[]> = {};
    for (const [name, adapter] of [
      ['base', undefined],
      ['a0', dirs[0]],
      ['a1', dirs[1]],
    ] as const) {
      const p = await Policy.load(model, adapter ? { adapter } : {});
      expected[name] = (await p.generate(prompts, greedy)).map((c) => c.text);
      p.dispose();
    }
    expect(expected.a0).to.not.deep.equal(expected.base);
    expect(expected.a1).to.not.deep.equal(expected.a0);

    const policy = await Policy.load(model);
    const adapters = await loadServedAdapters(policy, [`a0=${dirs[0]}`, `a1=${dirs[1]}`], { reserved: ['base'] });
    expect(adapters).to.deep.equal({ a0: 'lora:a0', a1: 'lora:a1' });
    const srv = new ChatServer({
      backend: policyServeBackend(policy, { maxRows: 8, adapters }),
      modelId: 'base',
      adapters: Object.keys(adapters),
      maxBatch: 8,
      port: 0,
    });
    const { url } = await srv.start();
    try {
      // Every (model, prompt) pair at once: the rows of all three decode in the same steps.
      const asks = (['base', 'a0', 'a1'] as const).flatMap((m) => prompts.map((q, i) => ({ m, i, q })));
      const got = await Promise.all(
        asks.map(async ({ m, q }) => {
          const r = (await (
            await post(url, {
              model: m,
              messages: [{ role: 'user', content: q }],
              temperature: 0,
              max_tokens: 8,
              chat_template_kwargs: { enable_thinking: false },
            })
          ).json()) as { model: string; choices: { message: { content: string } }[] };
          expect(r.model).to.equal(m);
          return r.choices[0]!.message.content;
        }),
      );
      asks.forEach(({ m, i }, k) => expect(got[k], `${m} prompt ${i}`).to.equal(expected[m]![i]));
    } finally {
      await srv.close();
      policy.dispose();
    }
    const p = await Policy.load(model);
    try {
      expect((await rejection(loadServedAdapters(p, ['nodir']))).message).to.equal("--lora-modules nodir: expected name=dir (vLLM's form)");
      expect((await rejection(loadServedAdapters(p, [`base=${dirs[0]}`], { reserved: ['base'] }))).message).to.include('the name base is already served');
    } finally {
      p.dispose();
    }
  });
});
