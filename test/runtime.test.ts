import { expect } from 'chai';
import { spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
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
    const dir = mkdtempSync(join(tmpdir(), 'pg-prof-'));
    try {
      native().profileStart();
      try {
        expect(() => native().profileStart()).to.throw(/already running/);
        for (const top of [0, NaN, Infinity, 2.5, '3' as unknown as number])
          expect(() => native().profileStop({ top }), String(top)).to.throw(/opts\.top must be an integer >= 1/);
        expect(() => native().profileStop({ tracePath: 3 as unknown as string })).to.throw(/tracePath must be a string/);
        // A trace path that cannot take the file: an error naming it, the profile still running.
        expect(() => native().profileStop({ tracePath: '' })).to.throw(TypeError, /opts\.tracePath '' is empty/);
        expect(() => native().profileStop({ tracePath: join(dir, 'no', 'such', 't.json') })).to.throw(TypeError, /tracePath .* directory that does not exist/);
        expect(() => native().profileStop({ tracePath: dir })).to.throw(TypeError, /tracePath .* is a directory/);
        await model.forward({ inputIds: { data: Int32Array.from([1, 2, 3, 4]), shape: [1, 4] } });
      } finally {
        const r = native().profileStop({ top: 3, tracePath: join(dir, 'trace.json') });
        expect(statSync(join(dir, 'trace.json')).size).to.be.greaterThan(0);
        // A CPU model launches no GPU work: the profile's GPU side is empty (the GPU suite's
        // decode-graphs test checks the kernels of a CUDA decode).
        expect(r.events).to.equal(0);
        expect(r.kernels).to.deep.equal([]);
        expect(r.gpuBusyUs).to.equal(0);
      }
      expect(() => native().profileStop()).to.throw(/no profile is running/);
      expect(existsSync(join(dir, 'trace.json.tmp'))).to.equal(false);
    } finally {
      model.dispose();
      rmSync(dir, { recursive: true, force: true });
    }
  });
  it('a process that ends with a profile running exits normally (libtorch crashed at exit: SIGSEGV)', function () {
    this.timeout(120000);
    const addon = new URL('../lib/native.js', import.meta.url).href;
    for (const [end, code] of [
      ['', 0],
      ['process.exit(0);', 0],
      ['process.exit(3);', 3],
      ["throw new Error('boom');", 1],
    ] as const) {
      const r = spawnSync(
        process.execPath,
        ['--input-type=module', '-e', `const { native } = await import(${JSON.stringify(addon)}); native().profileStart(); ${end}`],
        { encoding: 'utf8', cwd: fileURLToPath(new URL('.', import.meta.url)) },
      );
      expect({ status: r.status, signal: r.signal }, `${end || 'normal end'}: ${r.stderr.slice(-400)}`).to.deep.equal({ status: code, signal: null });
    }
  });
});
