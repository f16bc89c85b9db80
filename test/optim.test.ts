/**
 * AdamW, clipping and schedules against torch.optim.AdamW + clip_grad_norm_ + transformers'
 * schedulers (live through scripts/ref_trl_losses.py, skipped when python3 lacks torch).
 */
import { expect } from 'chai';
import { execFileSync, spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { native, packageRoot } from '../lib/native.js';
import { AdamW, lrAt } from '../lib/train/optim.js';
import { mulberry32 } from '../lib/util/random.js';

const python = process.env.PYTHON ?? 'python3';

function rng(seed: number): () => number {
  const r = mulberry32(seed);
  return () => r() - 0.5;
}

describe('optim: AdamW, clipping, schedules', function () {
  this.timeout(120000);
  const r = rng(7);
  const shapes = [[3, 4], [5]];
  const params = shapes.map((s) => Array.from({ length: s[0] * (s[1] ?? 1) }, () => r()));
  const steps = 6;
  const grads = Array.from({ length: steps }, (_, k) => shapes.map((s) => Array.from({ length: s[0] * (s[1] ?? 1) }, () => r() * (k === 2 ? 10 : 1))));
  const cfgs = [
    { lr: 0.01, betas: [0.9, 0.999], eps: 1e-8, weightDecay: 0, maxGradNorm: 0, schedule: { type: 'constant' as const, warmupSteps: 0 } },
    { lr: 0.02, betas: [0.8, 0.99], eps: 1e-6, weightDecay: 0.1, maxGradNorm: 1.0, schedule: { type: 'linear' as const, warmupSteps: 2, totalSteps: 5 } },
    { lr: 0.005, betas: [0.9, 0.95], eps: 1e-8, weightDecay: 0.01, maxGradNorm: 0.5, schedule: { type: 'cosine' as const, warmupSteps: 1, totalSteps: 6 } },
  ];

  function runNative(c: (typeof cfgs)[number], dtype: 'f64' | 'f32') {
    const C = dtype === 'f64' ? Float64Array : Float32Array;
    const opt = new AdamW(
      params.map((p, i) => ({ data: C.from(p), shape: shapes[i] })),
      { lr: c.lr, betas: c.betas as [number, number], eps: c.eps, weightDecay: c.weightDecay, schedule: c.schedule },
    );
    const norms: number[] = [],
      lrs: number[] = [];
    for (const g of grads) {
      opt.setGrads(g.map((x, i) => ({ data: C.from(x), shape: shapes[i] })));
      const s = opt.step({ maxGradNorm: c.maxGradNorm });
      norms.push(s.gradNorm);
      lrs.push(s.lr);
    }
    return { opt, norms, lrs };
  }

  it('matches torch.optim.AdamW + clip_grad_norm_ + transformers schedules (float64 ≤ 1e-12, live)', function () {
    if (spawnSync(python, ['-c', 'import torch, transformers'], { stdio: 'ignore' }).status !== 0) this.skip();
    const dir = mkdtempSync(join(tmpdir(), 'pg-adamw-'));
    writeFileSync(join(dir, 'in.json'), JSON.stringify({ cases: cfgs.map((c) => ({ kind: 'adamw', params, shapes, grads, ...c })) }));
    execFileSync(python, [join(packageRoot, 'scripts', 'ref_trl_losses.py'), join(dir, 'in.json'), join(dir, 'out.json')], {
      stdio: ['ignore', 'ignore', 'inherit'],
      env: { ...process.env, OMP_NUM_THREADS: '1', TRL_EXPERIMENTAL_SILENCE: '1' },
    });
    const ref = (
      JSON.parse(readFileSync(join(dir, 'out.json'), 'utf8')) as {
        results: { params: number[][]; gradNorms: number[]; lrs: number[]; expAvg: number[][]; expAvgSq: number[][] }[];
      }
    ).results;
    cfgs.forEach((c, k) => {
      const { opt, norms, lrs } = runNative(c, 'f64');
      lrs.forEach((x, i) => expect(x).to.be.closeTo(ref[k].lrs[i], 1e-15));
      norms.forEach((x, i) => expect(x).to.be.closeTo(ref[k].gradNorms[i], 1e-9 * ref[k].gradNorms[i]));
      const ps = opt.params();
      ps.forEach((p, i) => p.data.forEach((x, j) => expect(x).to.be.closeTo(ref[k].params[i][j], 1e-12)));
      const st = opt.state();
      expect(st.step).to.equal(steps);
      st.tensors['exp_avg.0'].data.forEach((x, j) => expect(x).to.be.closeTo(ref[k].expAvg[0][j], 1e-12));
      st.tensors['exp_avg_sq.1'].data.forEach((x, j) => expect(x).to.be.closeTo(ref[k].expAvgSq[1][j], 1e-14));
    });
  });

  it('lrAt follows the HF warmup formulas', () => {
    expect(lrAt({ lr: 1, type: 'constant' }, 10)).to.equal(1);
    expect(lrAt({ lr: 1, type: 'constant', warmupSteps: 4 }, 1)).to.equal(0.25);
    expect(lrAt({ lr: 2, type: 'linear', warmupSteps: 2, totalSteps: 10 }, 0)).to.equal(0);
    expect(lrAt({ lr: 2, type: 'linear', warmupSteps: 2, totalSteps: 10 }, 6)).to.equal(1);
    expect(lrAt({ lr: 2, type: 'linear', warmupSteps: 2, totalSteps: 10 }, 12)).to.equal(0);
    expect(lrAt({ lr: 1, type: 'cosine', warmupSteps: 0, totalSteps: 10 }, 5)).to.be.closeTo(0.5, 1e-15);
    expect(lrAt({ lr: 1, type: 'cosine', warmupSteps: 0, totalSteps: 10 }, 10)).to.be.closeTo(0, 1e-15);
    expect(() => lrAt({ lr: 1, type: 'linear' }, 1)).to.throw(TypeError, /totalSteps/);
    expect(() => lrAt({ lr: 1, type: 'poly' as 'linear', totalSteps: 3 }, 1)).to.throw(TypeError);
  });

  it('clipping returns the pre-clip norm and scales to maxGradNorm; weight decay defaults to 0', () => {
    const opt = new AdamW([{ data: new Float32Array([1, 1]), shape: [2] }], { lr: 0 });
    opt.setGrads([{ data: new Float32Array([3, 4]), shape: [2] }]);
    const s = opt.step({ maxGradNorm: 1 });
    expect(s.gradNorm).to.be.closeTo(5, 1e-6);
    expect(Array.from(opt.params()[0].data)).to.deep.equal([1, 1]); // lr 0, wd 0: unchanged
    const inf = new AdamW([{ data: new Float32Array([1]), shape: [1] }], { lr: 0.1 });
    inf.setGrads([{ data: new Float32Array([Infinity]), shape: [1] }]);
    const sk = inf.step({ maxGradNorm: 1, skipNonFinite: true });
    expect(sk.skipped).to.equal(true);
    expect(inf.stepCount).to.equal(0);
  });

  it('saveState / loadStateFile mid-run continues bit-identically', async () => {
    const c = cfgs[2];
    const full = runNative(c, 'f32');
    // run 3 steps, save, load into a fresh optimizer over the params at that point, finish
    const first = new AdamW(
      params.map((p, i) => ({ data: Float32Array.from(p), shape: shapes[i] })),
      { lr: c.lr, betas: c.betas as [number, number], eps: c.eps, weightDecay: c.weightDecay, schedule: c.schedule },
    );
    for (const g of grads.slice(0, 3)) {
      first.setGrads(g.map((x, i) => ({ data: Float32Array.from(x), shape: shapes[i] })));
      first.step({ maxGradNorm: c.maxGradNorm });
    }
    const dir = mkdtempSync(join(tmpdir(), 'pg-opt-'));
    await first.saveState(join(dir, 'mid.safetensors'));
    const second = new AdamW(first.params() as { data: Float32Array; shape: number[] }[], {
      lr: c.lr,
      betas: c.betas as [number, number],
      eps: c.eps,
      weightDecay: c.weightDecay,
      schedule: c.schedule,
    });
    await second.loadStateFile(join(dir, 'mid.safetensors'));
    expect(second.stepCount).to.equal(3);
    for (const g of grads.slice(3)) {
      second.setGrads(g.map((x, i) => ({ data: Float32Array.from(x), shape: shapes[i] })));
      second.step({ maxGradNorm: c.maxGradNorm });
    }
    second.params().forEach((p, i) => expect(Array.from(p.data)).to.deep.equal(Array.from(full.opt.params()[i].data)));
    // A state whose tensor names do not match: rejected naming the file and the tensor, state unchanged.
    native().saveSafetensors(join(dir, 'zz.safetensors'), { 'exp_avg.zz': { data: new Float32Array(1), shape: [1] } }, { step: '1' });
    let err: Error | undefined;
    try {
      await second.loadStateFile(join(dir, 'zz.safetensors'));
    } catch (e) {
      err = e as Error;
    }
    expect(err?.message).to.match(/zz\.safetensors.*zz/);
    expect((err as { code?: string }).code).to.equal('ERR_PG_INPUT');
    expect(second.stepCount).to.equal(6);
  });

  it('loadStateFile reads the optimizer.safetensors of checkpoints written by the previous version (moments exported to JS, metadata {step, format})', async () => {
    const c = cfgs[1];
    const mk = () =>
      new AdamW(
        params.map((p, i) => ({ data: Float32Array.from(p), shape: shapes[i] })),
        { lr: c.lr, schedule: c.schedule, names: ['a.weight', 'b.bias'] },
      );
    const a = mk();
    for (const g of grads.slice(0, 3)) {
      a.setGrads(g.map((x, i) => ({ data: Float32Array.from(x), shape: shapes[i] })));
      a.step();
    }
    // Exactly what lib/train/native-backend.ts wrote before the state stayed native.
    const st = a.state();
    const path = join(mkdtempSync(join(tmpdir(), 'pg-opt-')), 'optimizer.safetensors');
    native().saveSafetensors(path, st.tensors, { step: String(st.step), format: 'pt' });
    const b = mk();
    await b.loadStateFile(path);
    expect(b.state()).to.deep.equal(st);
  });

  it('saveState / loadStateFile round-trip through safetensors', async () => {
    const c = cfgs[1];
    const mk = () =>
      new AdamW(
        params.map((p, i) => ({ data: Float32Array.from(p), shape: shapes[i] })),
        { lr: c.lr, schedule: c.schedule, names: ['a.weight', 'b.bias'] },
      );
    const a = mk();
    for (const g of grads.slice(0, 2)) {
      a.setGrads(g.map((x, i) => ({ data: Float32Array.from(x), shape: shapes[i] })));
      a.step();
    }
    const path = join(mkdtempSync(join(tmpdir(), 'pg-opt-')), 'optimizer.safetensors');
    await a.saveState(path);
    const b = mk();
    await b.loadStateFile(path);
    expect(b.stepCount).to.equal(2);
    expect(b.state()).to.deep.equal(a.state());
    let err: unknown;
    try {
      await new AdamW([{ data: new Float32Array(2), shape: [2] }]).loadStateFile(path);
    } catch (e) {
      err = e;
    }
    expect((err as { code?: string }).code).to.equal('ERR_PG_INPUT');
  });
});
