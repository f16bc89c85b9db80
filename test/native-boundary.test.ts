/**
 * One reader per concept at the addon boundary (native/napi/args.h) and one way to run work on a
 * model (native/napi/model.h ModelLock / StartOnModel), checked through every entry point that
 * takes the concept:
 *  - the adapter argument: absent / null = the call's default; 'active' | 'none' | a snapshot name;
 *    anything else (an empty string, a number, an object) is the same TypeError everywhere;
 *  - masks: forward() and sequenceLogprobs() accept the same masks (0/1 as Int32Array, Uint8Array or
 *    Float32Array, all giving the same result) and reject the same ones (wrong shape, a value
 *    other than 0 and 1);
 *  - a disposed model: every call rejects with code ERR_PG_DISPOSED and the message
 *    "model was disposed" (sync methods, forward, the steps, generate, the optimizer over it).
 */
import { expect } from 'chai';
import { loadModel, type Qwen3Model } from '../lib/model/qwen3.js';
import { native } from '../lib/native.js';
import { int32, tinyModel } from './helpers/tiny.js';

type AnyFn = (...a: unknown[]) => unknown;
type Raw = Record<string, AnyFn>;

/** The error of a sync throw or a rejected promise (undefined when neither happens). */
async function errorOf(f: () => unknown): Promise<(Error & { code?: string }) | undefined> {
  try {
    await f();
  } catch (e) {
    return e as Error & { code?: string };
  }
  return undefined;
}

const ids = int32([
  [3, 5, 7, 2],
  [4, 6, 1, 9],
]);
const mask01 = [
  [1, 1, 1, 1],
  [1, 1, 1, 0],
];
const maskAs = {
  int32: { data: Int32Array.from(mask01.flat()), shape: [2, 4] },
  uint8: { data: Uint8Array.from(mask01.flat()), shape: [2, 4] },
  float32: { data: Float32Array.from(mask01.flat()), shape: [2, 4] },
};

describe('native boundary: one reader per concept', function () {
  this.timeout(120_000);
  let m: Qwen3Model;
  let raw: Raw;
  const addon = native() as unknown as Raw & { AdamW: new (...a: unknown[]) => Raw };

  before(async () => {
    m = await loadModel(tinyModel('tiny-tied'));
    m.addLora({ r: 2, alpha: 4 });
    m.snapshotAdapter('snap');
    raw = m as unknown as Raw;
  });
  after(() => m?.dispose());

  it('the adapter argument: one rule for forward, crossEntropyBackward, the steps, generate and the decode engine', async () => {
    const labels = int32([
      [3, 5, 7, 2],
      [4, 6, 1, 9],
    ]);
    const calls: Record<string, (adapter: unknown) => unknown> = {
      forward: (adapter) => raw.forward.call(m, { inputIds: ids, adapter }),
      crossEntropyBackward: (adapter) => raw.crossEntropyBackward.call(m, { inputIds: ids, labels, adapter }),
      sequenceLogprobs: (adapter) => addon.sequenceLogprobs(m, { inputIds: ids, attentionMask: maskAs.int32, adapter }),
      prefixLogprobs: (adapter) =>
        addon.prefixLogprobs(m, {
          prefixIds: int32([[3, 5]]),
          suffixIds: int32([[7]]),
          suffixLengths: { data: Int32Array.from([1]), shape: [1] },
          candidates: { data: Int32Array.from([1, 2]), shape: [2] },
          adapter,
        }),
      generate: (adapter) => addon.generate(m, { prompts: [[3, 5]], maxNewTokens: 1, seed: 1, adapter }),
      createDecodeEngine: (adapter) => (addon.createDecodeEngine(m, { maxRows: 1, capacity: 8, adapter }) as Raw).release(),
    };
    for (const [name, call] of Object.entries(calls)) {
      for (const bad of ['', 5, { snapshot: 'snap' }, true]) {
        const e = await errorOf(() => call(bad));
        expect(e, `${name} adapter ${JSON.stringify(bad)}`).to.be.instanceOf(TypeError);
        expect(e!.code).to.equal('ERR_PG_ARG');
        expect(e!.message, name).to.match(/\.adapter must be 'active', 'none' or a snapshot name \(a non-empty string\)$/);
      }
      // Accepted values pass the reader (crossEntropyBackward then refuses a frozen choice itself).
      for (const good of [undefined, null, 'active', 'none', 'snap']) {
        const e = await errorOf(() => call(good));
        expect(e?.code, `${name} adapter ${String(good)}: ${e?.message}`).to.not.equal('ERR_PG_ARG');
        if (name !== 'crossEntropyBackward' || good === 'active' || good == null) expect(e, `${name} adapter ${String(good)}`).to.equal(undefined);
      }
      if (name !== 'createDecodeEngine') expect((await errorOf(() => call('no-such-snapshot')))?.message, name).to.match(/snapshot named 'no-such-snapshot'/);
    }
    // opsdBackward's `teacher` follows the same rule (default 'none').
    const opsd = (teacher: unknown) =>
      addon.opsdBackward(m, {
        studentIds: ids,
        studentMask: maskAs.float32,
        teacherIds: ids,
        teacherMask: maskAs.float32,
        studentStart: { data: Int32Array.from([1, 1]), shape: [2] },
        teacherStart: { data: Int32Array.from([1, 1]), shape: [2] },
        completionLength: { data: Int32Array.from([2, 2]), shape: [2] },
        teacher,
      });
    expect((await errorOf(() => opsd('')))?.message).to.match(/^opsdBackward\.teacher must be 'active', 'none' or a snapshot name/);
    expect(await errorOf(() => opsd(undefined))).to.equal(undefined);
    expect(await errorOf(() => opsd('snap'))).to.equal(undefined);
  });

  it('masks: forward and sequenceLogprobs accept the same 0/1 masks of any dtype and reject the same bad ones', async () => {
    const logits: Float32Array[] = [];
    const logprobs: Float32Array[] = [];
    for (const mk of Object.values(maskAs)) {
      const f = (await raw.forward.call(m, { inputIds: ids, attentionMask: mk })) as { logits: { data: Float32Array } };
      logits.push(f.logits.data);
      const lp = (await addon.sequenceLogprobs(m, { inputIds: ids, attentionMask: mk })) as { data: Float32Array };
      logprobs.push(lp.data);
    }
    for (const l of logits.slice(1)) expect(Array.from(l)).to.deep.equal(Array.from(logits[0]));
    for (const l of logprobs.slice(1)) expect(Array.from(l)).to.deep.equal(Array.from(logprobs[0]));
    const bad = {
      shape: [{ data: Int32Array.from([1, 1]), shape: [1, 2] }, /attentionMask must have the shape of inputIds$/],
      value: [{ data: Float32Array.from([1, 1, 2, 1, 1, 1, 1, 0]), shape: [2, 4] }, /attentionMask must hold only 0 and 1$/],
      half: [{ data: Float32Array.from([1, 1, 0.5, 1, 1, 1, 1, 0]), shape: [2, 4] }, /attentionMask must hold only 0 and 1$/],
    } as const;
    for (const [what, [mk, re]] of Object.entries(bad)) {
      const ef = await errorOf(() => raw.forward.call(m, { inputIds: ids, attentionMask: mk }));
      const es = await errorOf(() => addon.sequenceLogprobs(m, { inputIds: ids, attentionMask: mk }));
      for (const e of [ef, es]) {
        expect(e, what).to.be.instanceOf(TypeError);
        expect(e!.message, what).to.match(re);
      }
    }
  });

  it('sampling options: generate, promptOptions and the decode engine give the same error for the same bad value', async () => {
    const viaGenerate = await errorOf(() => addon.generate(m, { prompts: [[3, 5]], maxNewTokens: 1, topP: 0 }));
    const viaPrompt = await errorOf(() => addon.generate(m, { prompts: [[3, 5]], maxNewTokens: 1, promptOptions: [{ topP: 0 }] }));
    const eng = addon.createDecodeEngine(m, { maxRows: 1, capacity: 8 }) as Raw;
    const viaEngine = await errorOf(() => eng.add({ id: 1, prompt: [3, 5], topP: 0 }));
    eng.release();
    expect(viaGenerate?.message).to.match(/^options\.topP must be in \(0, 1\]/);
    expect(viaPrompt?.message).to.match(/^options\.promptOptions\[0\]\.topP must be in \(0, 1\]/);
    expect(viaEngine?.message).to.match(/^row\.topP must be in \(0, 1\]/);
    for (const e of [viaGenerate, viaPrompt, viaEngine]) expect(e?.code).to.equal('ERR_PG_ARG');
  });
});

describe('native boundary: a disposed model', function () {
  this.timeout(120_000);

  it('every call rejects with code ERR_PG_DISPOSED and "model was disposed"', async () => {
    const m = await loadModel(tinyModel('tiny-tied'));
    m.addLora({ r: 2, alpha: 4 });
    const raw = m as unknown as Raw;
    const addon = native() as unknown as Raw & { AdamW: new (...a: unknown[]) => Raw };
    const opt = new addon.AdamW(m, { lr: 1e-3 });
    const engine = addon.createDecodeEngine(m, { maxRows: 1, capacity: 8 }) as Raw;
    engine.add({ id: 1, prompt: [3, 5], maxNewTokens: 2, seed: 1 });
    m.dispose();
    const calls: Record<string, () => unknown> = {
      config: () => m.config,
      loraParameterNames: () => m.loraParameterNames(),
      addLora: () => m.addLora({ r: 2, alpha: 2 }),
      forward: () => raw.forward.call(m, { inputIds: ids }),
      saveAdapter: () => raw.saveAdapter.call(m, '/nonexistent/never'),
      sequenceLogprobs: () => addon.sequenceLogprobs(m, { inputIds: ids, attentionMask: maskAs.int32 }),
      generate: () => addon.generate(m, { prompts: [[3, 5]], maxNewTokens: 1 }),
      engineStep: () => engine.step(),
      optimizerStep: () => opt.step({}),
      newOptimizer: () => new addon.AdamW(m, { lr: 1e-3 }),
    };
    for (const [name, call] of Object.entries(calls)) {
      const e = await errorOf(call);
      expect(e, name).to.be.instanceOf(Error);
      expect(e, name).to.not.be.instanceOf(TypeError);
      expect(e!.code, `${name}: ${e!.message}`).to.equal('ERR_PG_DISPOSED');
      expect(e!.message, name).to.equal('model was disposed');
    }
    // The engine's busy flag is cleared although its step never ran: release works.
    expect(() => engine.release()).to.not.throw();
  });
});
