import { expect } from 'chai';
import { doctor, native, addonCandidates } from '../lib/native.js';
import { loadModel } from '../lib/model/qwen3.js';
import { tinyModel } from './helpers/tiny.js';

describe('runtime / doctor', () => {
  it('loads the addon and reports libtorch facts', () => {
    const r = doctor();
    expect(r.libtorchVersion).to.match(/^\d+\.\d+/);
    expect(r.node).to.equal(process.version);
    expect(r.addonPath).to.match(/papergym_native\.node$/);
    expect(addonCandidates()).to.include(r.addonPath);
    expect(r.cxx11Abi).to.equal(true);
  });
  it('rejects bad arguments with TypeErrors, never crashes', () => {
    expect(() => native().setNumThreads('x' as unknown as number)).to.throw(TypeError, /setNumThreads/);
    expect(() => native().cudaMemory(-1)).to.throw(TypeError, /device index/);
    expect(() => native().setFusedKernels('yes' as unknown as boolean)).to.throw(TypeError, /setFusedKernels/);
  });
  it('setFusedKernels returns the previous switch; doctor says whether the kernels are compiled', () => {
    const first = native().setFusedKernels(false);
    expect(first).to.be.a('boolean');
    expect(native().setFusedKernels(true)).to.equal(false);
    expect(native().setFusedKernels(first)).to.equal(true);
    expect(doctor().fusedKernels).to.be.a('boolean');
  });
  it('opCountStart/opCountStop count the ATen ops of a forward, and nothing once stopped', async function () {
    this.timeout(120000);
    const model = await loadModel(tinyModel('tiny-tied'));
    try {
      const ids = { data: Int32Array.from([1, 2, 3, 4]), shape: [1, 4] };
      native().opCountStart();
      await model.forward({ inputIds: ids });
      const c = native().opCountStop();
      expect(c.total).to.be.greaterThan(20);
      expect(Object.values(c.ops).reduce((a, b) => a + b, 0)).to.equal(c.total);
      expect(c.ops['aten::view'] ?? 0).to.equal(0); // metadata ops are not counted
      await model.forward({ inputIds: ids });
      native().opCountStart();
      expect(native().opCountStop().total).to.equal(0);
    } finally {
      model.dispose();
    }
  });
  it('profileStart/profileStop: one profile at a time, argument errors, and on CPU no GPU activity', async function () {
    this.timeout(120000);
    const model = await loadModel(tinyModel('tiny-tied'));
    try {
      native().profileStart();
      try {
        expect(() => native().profileStart()).to.throw(/already running/);
        for (const top of [0, NaN, Infinity, 2.5, '3' as unknown as number])
          expect(() => native().profileStop({ top }), String(top)).to.throw(/opts\.top must be an integer >= 1/);
        expect(() => native().profileStop({ tracePath: 3 as unknown as string })).to.throw(/tracePath must be a string/);
        await model.forward({ inputIds: { data: Int32Array.from([1, 2, 3, 4]), shape: [1, 4] } });
      } finally {
        const r = native().profileStop({ top: 3 });
        // A CPU model launches no GPU work: the profile's GPU side is empty (the GPU suite's
        // decode-graphs test checks the kernels of a CUDA decode).
        expect(r.events).to.equal(0);
        expect(r.kernels).to.deep.equal([]);
        expect(r.gpuBusyUs).to.equal(0);
      }
      expect(() => native().profileStop()).to.throw(/no profile is running/);
    } finally {
      model.dispose();
    }
  });
});
