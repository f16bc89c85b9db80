/**
 * Disposal and the error codes (lib/errors.ts): models, policies, judges and the decode engine
 * are disposable (`using` / `await using`, explicit dispose/close); any use after disposal fails
 * with code ERR_PG_DISPOSED; isPapergymError recognises the addon's and the JS layer's errors.
 * The model parts run on a tiny random Qwen3 (skipped when the addon or python is unavailable).
 */
import { expect } from 'chai';
import { createRequire } from 'node:module';
import { ErrorCode, isPapergymError, argError, abortError, disposedError, inputError, oomError } from '../lib/errors.js';
import { native } from '../lib/native.js';
import { loadModel, type Qwen3Model } from '../lib/model/qwen3.js';
import { generate, Policy } from '../lib/model/policy.js';
import { DecodeEngine } from '../lib/model/engine.js';
import { createHttpJudge } from '../lib/judge/http.js';
import { localJudgeForModel, openLocalJudge, sequenceLogprobsScorer } from '../lib/judge/local.js';
import { Tokenizer } from '../lib/model/tokenizer.js';
import * as entry from '../lib/index.js';
import { int32, tinyModel } from './helpers/tiny.js';
import { orSkip } from './helpers/run.js';

/** The error `f` throws or rejects with (fails the test when it does neither). */
async function caught(f: () => unknown): Promise<unknown> {
  try {
    await f();
  } catch (e) {
    return e;
  }
  throw new Error('expected an error');
}

function expectDisposed(e: unknown, what: RegExp): void {
  expect(isPapergymError(e, ErrorCode.DISPOSED), String(e)).to.equal(true);
  expect((e as Error).message).to.match(what);
}

describe('errors: codes and isPapergymError', () => {
  it('the constructors set the code (and TypeError / AbortError where the code says so)', () => {
    expect(argError('x')).to.be.instanceOf(TypeError).and.include({ code: 'ERR_PG_ARG', message: 'x' });
    expect(inputError('x').code).to.equal('ERR_PG_INPUT');
    expect(oomError('x').code).to.equal('ERR_PG_OOM');
    expect(abortError()).to.include({ code: 'ABORT_ERR', name: 'AbortError' });
    expect(disposedError('model')).to.include({ code: 'ERR_PG_DISPOSED', message: 'model was disposed' });
    expect(Object.values(ErrorCode).sort()).to.deep.equal(['ABORT_ERR', 'ERR_PG_ARG', 'ERR_PG_DISPOSED', 'ERR_PG_INPUT', 'ERR_PG_INTERNAL', 'ERR_PG_OOM']);
  });

  it('isPapergymError: our codes only, optionally one of them; never a plain Error or a non-Error', () => {
    expect(isPapergymError(argError('x'))).to.equal(true);
    expect(isPapergymError(argError('x'), ErrorCode.ARG)).to.equal(true);
    expect(isPapergymError(argError('x'), ErrorCode.INPUT)).to.equal(false);
    expect(isPapergymError(new Error('x'))).to.equal(false);
    expect(isPapergymError(Object.assign(new Error('x'), { code: 'ENOENT' }))).to.equal(false);
    expect(isPapergymError({ code: 'ERR_PG_ARG', message: 'not an Error' })).to.equal(false);
    expect(isPapergymError(undefined)).to.equal(false);
  });

  it('recognises the errors the addon throws', function () {
    let a;
    try {
      a = native();
    } catch {
      return this.skip();
    }
    const e = (() => {
      try {
        a.setNumThreads(0);
      } catch (err) {
        return err;
      }
    })();
    expect(isPapergymError(e, ErrorCode.ARG)).to.equal(true);
    expect(e).to.be.instanceOf(TypeError);
  });

  it('the package entries (ESM and CommonJS) export the codes and the guard', async () => {
    expect(entry.ErrorCode).to.equal(ErrorCode);
    expect(entry.isPapergymError).to.equal(isPapergymError);
    const cjs = createRequire(import.meta.url)('../lib/cjs/index.cjs') as { load(): Promise<typeof entry> };
    const api = await cjs.load();
    expect(api.ErrorCode).to.equal(ErrorCode);
    expect(api.isPapergymError).to.equal(isPapergymError);
  });

  it('Symbol.dispose / Symbol.asyncDispose are Node\'s (Symbol.for("nodejs.…"))', () => {
    expect(Symbol.dispose).to.equal(Symbol.for('nodejs.dispose'));
    expect(Symbol.asyncDispose).to.equal(Symbol.for('nodejs.asyncDispose'));
  });
});

describe('dispose: models, policies, judges, decode engine', function () {
  this.timeout(240000);
  let dir: string;
  before(async function () {
    dir = await orSkip(this, async () => {
      const d = tinyModel('tiny-tied');
      (await loadModel(d)).dispose();
      return d;
    });
  });

  it('`using` frees a model at the end of the block; every later call throws ERR_PG_DISPOSED', async () => {
    let kept: Qwen3Model;
    {
      using model = await loadModel(dir);
      kept = model;
      expect(model.disposed).to.equal(false);
      const { logits } = await model.forward({ inputIds: int32([[1, 2, 3]]) });
      expect(logits!.shape).to.deep.equal([1, 3, Number(model.config.vocab_size)]);
    }
    expect(kept.disposed).to.equal(true);
    expectDisposed(await caught(() => kept.forward({ inputIds: int32([[1, 2, 3]]) })), /^model was disposed$/);
    expectDisposed(await caught(() => kept.config), /model was disposed/);
    expectDisposed(await caught(() => kept.addLora({ r: 2, alpha: 4 })), /model was disposed/);
    expectDisposed(await caught(() => kept.parameterBytes()), /model was disposed/);
    kept.dispose(); // idempotent
    kept[Symbol.dispose]();
  });

  it("generate, the decode engine and the local judge's scorers on a disposed model: ERR_PG_DISPOSED", async () => {
    const model = await loadModel(dir);
    model.dispose();
    expectDisposed(await caught(() => generate(model, { prompts: [[1, 2]], maxNewTokens: 2 })), /model was disposed/);
    expectDisposed(await caught(() => new DecodeEngine(model)), /model was disposed/);
    expectDisposed(await caught(() => sequenceLogprobsScorer(model, { padId: 0 })([[1, 2]], [3])), /model was disposed/);
  });

  it('`using` a Policy disposes its model; later generate rejects with ERR_PG_DISPOSED', async () => {
    let kept: Policy;
    {
      using policy = await Policy.load(dir);
      kept = policy;
      const out = await policy.generate(['hi'], { maxNewTokens: 2, seed: 1 });
      expect(out).to.have.length(1);
    }
    expect(kept.disposed).to.equal(true);
    expect(kept.model.disposed).to.equal(true);
    expectDisposed(await caught(() => kept.generate(['hi'], { maxNewTokens: 2 })), /policy was disposed/);
  });

  it('`await using` a decode engine releases it (rows dropped) at the end of the block', async () => {
    using model = await loadModel(dir);
    let kept: DecodeEngine;
    {
      await using engine = new DecodeEngine(model, { maxRows: 2, capacity: 16 });
      kept = engine;
      engine.add({ id: 1, prompt: [1, 2, 3], maxNewTokens: 2 });
      expect(engine.waiting()).to.equal(1);
    }
    expect(kept.waiting()).to.equal(0);
  });

  it('openLocalJudge: the judge owns its model (close frees it, later judge calls reject with ERR_PG_DISPOSED)', async () => {
    const { judge, model } = await openLocalJudge(dir);
    const req = [{ question: 'q', plan: 'p', items: [{ id: 'a', text: 'item' }] }];
    expect((await judge.judge(req))[0]).to.have.length(1);
    judge.close();
    expect(model.disposed).to.equal(true);
    expectDisposed(await caught(() => judge.judge(req)), /judge local:pair was disposed/);
  });

  it("a local judge on the caller's model leaves the model alive on close; a disposed model gives ERR_PG_DISPOSED", async () => {
    using model = await loadModel(dir);
    const req = [{ question: 'q', plan: 'p', items: [{ id: 'a', text: 'item' }] }];
    {
      using judge = await localJudgeForModel(model, Tokenizer.fromDir(dir), { prefixSharing: false });
      expect((await judge.judge(req))[0]).to.have.length(1);
    }
    expect(model.disposed).to.equal(false);
    const judge = await localJudgeForModel(model, Tokenizer.fromDir(dir), { prefixSharing: false });
    model.dispose();
    expectDisposed(await caught(() => judge.judge(req)), /model was disposed/);
  });
});

describe('dispose: HTTP judge', () => {
  it('`using` closes it; a later judge call rejects with ERR_PG_DISPOSED before any request', async () => {
    let kept: ReturnType<typeof createHttpJudge>;
    {
      using judge = createHttpJudge({ url: 'http://127.0.0.1:9/v1', model: 'm', noCache: true, maxRetries: 0 });
      kept = judge;
    }
    expectDisposed(
      await caught(() => kept.judge([{ question: 'q', plan: 'p', items: [{ id: 'a', text: 't' }] }])),
      /judge http:per-item:m@http:\/\/127\.0\.0\.1:9\/v1 was disposed/,
    );
    kept.close(); // idempotent
  });
});
