/**
 * Resuming from a checkpoint whose optimizer.safetensors is truncated or garbage: the resume fails
 * at once (NativeBackend.loadState, before any step's rollouts and judging) with ERR_PG_INPUT naming
 * the file, and a restore that fails later (a file that reads but does not fit the optimizer) stays
 * failed, so a checkpoint written afterwards never carries a fresh optimizer (step 0, zero moments)
 * in place of the resumed one.
 */
import { expect } from 'chai';
import { copyFileSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Policy } from '../lib/model/policy.js';
import { NativeBackend } from '../lib/train/native-backend.js';
import { checkOptimizerFile } from '../lib/train/checkpoint.js';
import { resolveConfig } from '../lib/config/train.js';
import '../lib/train/stages/index.js'; // the training settings hold the registered stages' rows
import { tinyModel } from './helpers/tiny.js';

describe('resume with a corrupt optimizer.safetensors', function () {
  this.timeout(120000);
  let tmp: string;
  let policy: Policy;
  let ckpt: string;
  const cfg = resolveConfig({ flags: { stages: ['opsd'] } });
  before(async () => {
    tmp = mkdtempSync(join(tmpdir(), 'pg-resume-corrupt-'));
    policy = await Policy.load(tinyModel('tiny-tied'));
    policy.model.addLora({ r: 2, alpha: 4, seed: 3 });
    const b = new NativeBackend(policy, cfg);
    b.resetOptimizer(1e-2, 4);
    ckpt = join(tmp, 'good');
    await b.saveState(ckpt);
  });
  after(() => {
    policy?.dispose();
    rmSync(tmp, { recursive: true, force: true });
  });

  /** A copy of the good checkpoint whose optimizer file is replaced by `bytes`. */
  const copyWithOptimizer = (name: string, bytes: Buffer): string => {
    const d = join(tmp, name);
    rmSync(d, { recursive: true, force: true });
    mkdirSync(d, { recursive: true });
    for (const f of ['adapter_model.safetensors', 'adapter_config.json']) copyFileSync(join(ckpt, f), join(d, f));
    writeFileSync(join(d, 'optimizer.safetensors'), bytes);
    return d;
  };

  it('the good checkpoint passes the check and resumes', async () => {
    expect(() => checkOptimizerFile(join(ckpt, 'optimizer.safetensors'))).not.to.throw();
    const b = new NativeBackend(policy, cfg);
    await b.loadState(ckpt);
    b.resetOptimizer(1e-2, 4);
    await b.saveState(join(tmp, 'again'));
  });

  for (const [label, make] of [
    ['truncated by 7 bytes', (g: Buffer) => g.subarray(0, g.length - 7)],
    ['cut inside the header', (g: Buffer) => g.subarray(0, 20)],
    ['garbage', () => Buffer.from('not a safetensors file at all')],
    ['empty', () => Buffer.alloc(0)],
    [
      'a tensor span that does not match its shape',
      (g: Buffer) => {
        const n = Number(g.readBigUInt64LE(0));
        const h = JSON.parse(g.subarray(8, 8 + n).toString('utf8')) as Record<string, { shape?: number[] }>;
        const k = Object.keys(h).find((x) => x !== '__metadata__')!;
        h[k]!.shape = [...h[k]!.shape!, 2];
        const hb = Buffer.from(JSON.stringify(h).padEnd(n, ' '));
        return Buffer.concat([g.subarray(0, 8), hb.subarray(0, n), g.subarray(8 + n)]);
      },
    ],
  ] as const) {
    it(`${label}: loadState rejects with ERR_PG_INPUT naming the file, before loading anything`, async () => {
      const good = readFileSync(join(ckpt, 'optimizer.safetensors'));
      const d = copyWithOptimizer(label.replace(/\W+/g, '-'), make(good));
      // The live adapter differs from the checkpoint's, so a load that started would show.
      const w = policy.model.loraWeights();
      const key = Object.keys(w)[0]!;
      policy.model.setLoraWeights({ [key]: { data: new Float32Array(w[key]!.data.length).fill(0.25), shape: w[key]!.shape } });
      const b = new NativeBackend(policy, cfg);
      const err = await b.loadState(d).then(
        () => null,
        (e: Error & { code?: string }) => e,
      );
      expect(err, 'loadState must reject').to.be.instanceOf(Error);
      expect(err!.code).to.equal('ERR_PG_INPUT');
      expect(err!.message).to.include(join(d, 'optimizer.safetensors'));
      expect(
        Array.from(policy.model.loraWeights()[key]!.data).every((x) => x === 0.25),
        'adapter loaded before the check',
      ).to.equal(true);
    });
  }

  it('a restore that fails in the addon stays failed: saveState rejects instead of writing a fresh optimizer', async () => {
    // Valid safetensors with a 'step', but tensors of another adapter (rank 4): passes the header
    // check, fails in AdamW.loadStateFile.
    const other = await Policy.load(tinyModel('tiny-tied'));
    try {
      other.model.addLora({ r: 4, alpha: 4 });
      const ob = new NativeBackend(other, cfg);
      ob.resetOptimizer(1e-2, 4);
      await ob.saveState(join(tmp, 'r4'));
    } finally {
      other.dispose();
    }
    const d = copyWithOptimizer('mismatch', readFileSync(join(tmp, 'r4', 'optimizer.safetensors')));
    const b = new NativeBackend(policy, cfg);
    await b.loadState(d);
    b.resetOptimizer(1e-2, 4);
    const first = await b.optimizerStep(1).then(
      () => null,
      (e: Error) => e,
    );
    expect(first?.message).to.include(join(d, 'optimizer.safetensors'));
    const save = await b.saveState(join(tmp, 'after-fail')).then(
      () => null,
      (e: Error) => e,
    );
    expect(save, 'saveState after a failed restore must reject').to.be.instanceOf(Error);
    expect(save!.message).to.include(join(d, 'optimizer.safetensors'));
  });
});
