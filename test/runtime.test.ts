import { expect } from 'chai';
import { doctor, native, addonCandidates } from '../lib/native.js';

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
  });
});
