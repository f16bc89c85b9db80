/**
 * The addon loader's choice (lib/native.ts selectAddon): mismatches are messages naming what was
 * found and what is needed, and the next candidate is tried; a bad binary never takes down the
 * caller (child-process test load). Prebuilt packages are made in a temporary node_modules with
 * the same layout scripts/prebuild.sh writes, holding this checkout's binary (or garbage).
 */
import { expect } from 'chai';
import { copyFileSync, existsSync, mkdirSync, mkdtempSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import {
  findProvider,
  metaMismatch,
  prebuiltPackageName,
  selectAddon,
  selectionFailure,
  loadNative,
  type PrebuiltMeta,
  type ProviderInfo,
} from '../lib/native.js';

const NO_DRIVER = !existsSync('/proc/driver/nvidia/version');

describe('addon loader: candidate selection', function () {
  this.timeout(180_000);
  let tmp = '';
  let provider: ProviderInfo;
  let binary = '';
  let preload = '';
  const savedCache = process.env.PAPERGYM_NATIVE_CACHE_DIR;
  const savedAddon = process.env.PAPERGYM_NATIVE_ADDON;

  before(function () {
    const { path } = loadNative();
    // The selection below is made without the override (which would be the only candidate).
    delete process.env.PAPERGYM_NATIVE_ADDON;
    binary = path;
    preload = join(path, '..', 'papergym_preload.node');
    if (!existsSync(preload)) {
      console.log(`    (skipped: ${preload} missing: the loaded binary is not a current build with the preloader)`);
      this.skip();
    }
    provider = findProvider();
    tmp = mkdtempSync(join(tmpdir(), 'pg-loader-'));
    process.env.PAPERGYM_NATIVE_CACHE_DIR = join(tmp, 'cache');
  });
  after(() => {
    if (savedAddon !== undefined) process.env.PAPERGYM_NATIVE_ADDON = savedAddon;
    if (savedCache === undefined) delete process.env.PAPERGYM_NATIVE_CACHE_DIR;
    else process.env.PAPERGYM_NATIVE_CACHE_DIR = savedCache;
    if (tmp) rmSync(tmp, { recursive: true, force: true });
  });

  /** Writes node_modules/<name> as scripts/prebuild.sh does; `bin` is copied in as the addon. */
  function fakePrebuilt(root: string, variant: string, torch: string, bin: string | Buffer): string {
    const name = prebuiltPackageName(torch, variant);
    const dir = join(root, 'node_modules', name);
    mkdirSync(dir, { recursive: true });
    const meta: PrebuiltMeta = {
      platform: process.platform,
      arch: process.arch,
      torch,
      torchVersion: `${torch}.0+${variant}`,
      variant,
      cudaVersion: variant === 'cpu' ? null : `${variant.slice(2, -1)}.${variant.slice(-1)}`,
      cxx11Abi: provider.cxx11Abi,
      binary: 'papergym_native.node',
      preload: 'papergym_preload.node',
    };
    writeFileSync(join(dir, 'package.json'), JSON.stringify({ name, version: '0.1.0', papergym: meta }));
    if (typeof bin === 'string') copyFileSync(bin, join(dir, 'papergym_native.node'));
    else writeFileSync(join(dir, 'papergym_native.node'), bin);
    copyFileSync(preload, join(dir, 'papergym_preload.node'));
    return name;
  }

  it('refuses a binary for another torch minor with a message naming both versions', () => {
    const meta: PrebuiltMeta = {
      platform: process.platform,
      arch: process.arch,
      torch: '2.11',
      variant: 'cpu',
      cudaVersion: null,
      cxx11Abi: 1,
      binary: 'x',
      preload: 'y',
    };
    const torch210: ProviderInfo = { ...provider, version: '2.10.0+cpu', torchMinor: '2.10', variant: 'cpu', cudaLib: false, cudaVersion: null };
    expect(metaMismatch(meta, torch210)).to.match(/built for torch 2\.11 \(cpu\); the provider is torch 2\.10\.0\+cpu .*no stable ABI/);
    expect(metaMismatch({ ...meta, torch: provider.torchMinor }, { ...torch210, torchMinor: provider.torchMinor })).to.equal('');
    expect(metaMismatch({ ...meta, cxx11Abi: 0 }, { ...torch210, torchMinor: '2.11' })).to.match(/_GLIBCXX_USE_CXX11_ABI=0; the provider's libtorch uses 1/);
  });

  it('refuses a CUDA binary when the provider has no libtorch_cuda.so, and one for another CUDA version', () => {
    const meta: PrebuiltMeta = {
      platform: process.platform,
      arch: process.arch,
      torch: '2.11',
      variant: 'cu128',
      cudaVersion: '12.8',
      cxx11Abi: 1,
      binary: 'x',
      preload: 'y',
    };
    const cpuTorch: ProviderInfo = { ...provider, version: '2.11.0+cpu', torchMinor: '2.11', variant: 'cpu', cudaLib: false, cudaVersion: null };
    expect(metaMismatch(meta, cpuTorch)).to.match(/needs libtorch_cuda\.so, which .* lacks \(CPU-only torch 2\.11\.0\+cpu\)/);
    const cu130: ProviderInfo = { ...cpuTorch, version: '2.11.0+cu130', variant: 'cu130', cudaLib: true, cudaVersion: '13.0' };
    expect(metaMismatch(meta, cu130)).to.match(/built for cu128 \(CUDA 12\.8\); the provider is torch 2\.11\.0\+cu130 \(cu130, CUDA 13\.0\)/);
    expect(metaMismatch({ ...meta, platform: 'darwin' }, cu130)).to.match(/built for darwin-/);
  });

  it('a CUDA variant without a driver is refused after its test load, a garbage binary is refused, and the cpu one is taken', function () {
    const root = join(tmp, 'p1');
    // The provider's own variant first: a CUDA variant when this torch is a CUDA build.
    const ownVariant = provider.variant;
    const names = [fakePrebuilt(root, 'cpu', provider.torchMinor, binary)];
    if (ownVariant !== 'cpu') names.push(fakePrebuilt(root, ownVariant, provider.torchMinor, binary));
    names.push(fakePrebuilt(root, 'cu126', provider.torchMinor, Buffer.from('not an ELF file')));
    const sel = selectAddon({ from: root, localBuild: false, packages: names, stopAtFirst: false });
    const by = Object.fromEntries(sel.candidates.map((c) => [c.name, c]));
    const cpu = by[prebuiltPackageName(provider.torchMinor, 'cpu')];
    if (ownVariant !== 'cpu') {
      const own = by[prebuiltPackageName(provider.torchMinor, ownVariant)];
      expect(sel.candidates.indexOf(own)).to.be.lessThan(sel.candidates.indexOf(cpu));
      if (NO_DRIVER) {
        expect(own.status).to.equal('skipped');
        expect(own.reason).to.match(/CUDA binary \(cu\d+\), but CUDA is not available here \(no NVIDIA driver/);
        expect(sel.chosen?.name).to.equal(cpu.name);
      }
    }
    expect(cpu.status).to.equal('passed');
    expect(cpu.reason).to.match(/test load passed \(torch 2\./);
    const junk = by[prebuiltPackageName(provider.torchMinor, 'cu126')];
    expect(junk.status).to.equal('skipped');
    // A cu126 binary on a cu130 torch is refused by its metadata; on a cu126 torch the garbage is refused by the test load.
    expect(junk.reason).to.match(provider.variant === 'cu126' ? /does not load: .*(invalid ELF|too short|file too short)/ : /built for cu126/);
  });

  it('a provider without libtorch_cuda.so: the CUDA variant is refused by metadata; test loads fail as messages (never a crash)', function () {
    if (!provider.cudaLib) {
      console.log('    (skipped: this torch has no libtorch_cuda.so to take away)');
      this.skip();
    }
    // A libtorch dir like a CPU-only install: this torch's headers and CPU libraries, no libtorch_cuda.so.
    const fake = join(tmp, 'cpu-libtorch');
    mkdirSync(join(fake, 'lib'), { recursive: true });
    symlinkSync(join(provider.root, 'include'), join(fake, 'include'));
    for (const l of ['libc10.so', 'libtorch_cpu.so', 'libtorch.so']) symlinkSync(join(provider.libDir, l), join(fake, 'lib', l));
    writeFileSync(join(fake, 'build-version'), `${provider.torchMinor}.0+cpu\n`);
    const saved = process.env.LIBTORCH;
    process.env.LIBTORCH = fake;
    try {
      const p = findProvider();
      expect(p.cudaLib).to.equal(false);
      expect(p.variant).to.equal('cpu');
      const root = join(tmp, 'p2');
      const name = fakePrebuilt(root, provider.variant, provider.torchMinor, binary);
      const sel = selectAddon({ from: root, packages: [name], provider: p, stopAtFirst: false, localBuild: false });
      const cuda = sel.candidates.find((c) => c.name === name)!;
      expect(cuda.status).to.equal('skipped');
      expect(cuda.reason).to.match(/needs libtorch_cuda\.so, which .*cpu-libtorch\/lib lacks/);
      // A binary linked to libtorch_cuda.so (this checkout's, when built against a CUDA torch) on
      // these libraries: the test load fails with dlopen's message naming the missing library
      // (libtorch_cuda.so, or a CUDA library of the wheel found through its RUNPATH).
      const cpuName = fakePrebuilt(root, 'cpu', provider.torchMinor, binary);
      const sel2 = selectAddon({ from: root, packages: [cpuName], provider: p, stopAtFirst: false, localBuild: false });
      const cpu = sel2.candidates.find((c) => c.name === cpuName)!;
      if (cpu.status === 'skipped')
        expect(cpu.reason).to.match(
          /does not load: cannot load .*cpu-libtorch\/lib\/lib\w+\.so: .*cannot open shared object file|does not load: .*libtorch_cuda\.so/,
        );
      else expect(cpu.status).to.equal('passed'); // a CPU-only binary on CPU libraries that load on their own
      expect(sel.chosen).to.equal(undefined);
      const msg = selectionFailure(sel);
      expect(msg).to.match(/no usable addon binary\. Looked for .*torch [\d.]+\+cpu \(cpu, CXX11 ABI \d\) from the LIBTORCH at .*cpu-libtorch/);
      expect(msg).to.match(/npm rebuild papergym-native/);
    } finally {
      if (saved === undefined) delete process.env.LIBTORCH;
      else process.env.LIBTORCH = saved;
    }
  });

  it('lists the package for a torch with no published prebuilt (e.g. torch 2.10) as missing', () => {
    const torch210: ProviderInfo = { ...provider, version: '2.10.0+cpu', torchMinor: '2.10', variant: 'cpu', cudaLib: false, cudaVersion: null };
    const sel = selectAddon({ provider: torch210, localBuild: false, from: tmp });
    const first = sel.candidates[0];
    expect(first.name).to.equal(prebuiltPackageName('2.10', 'cpu'));
    expect(first.reason).to.match(/no such prebuilt package is published/);
    const c211 = sel.candidates.find((c) => c.name === prebuiltPackageName('2.11', 'cpu'))!;
    expect(c211.reason).to.equal('not installed');
  });
});

describe('install hook: source build intermediates', () => {
  it('pruneBuild keeps build/Release/*.node and removes the precompiled header, objects and CMake files', async () => {
    const { createRequire } = await import('node:module');
    const req = createRequire(import.meta.url);
    const { packageRoot } = await import('../lib/native.js');
    const { pruneBuild } = req(join(packageRoot, 'scripts', 'install.cjs')) as { pruneBuild(dir: string): void };
    const tmp = mkdtempSync(join(tmpdir(), 'pg-prune-'));
    try {
      const b = join(tmp, 'build');
      mkdirSync(join(b, 'CMakeFiles', 'papergym_native.dir'), { recursive: true });
      mkdirSync(join(b, 'Release'), { recursive: true });
      for (const f of [
        'CMakeFiles/papergym_native.dir/cmake_pch.hxx.gch',
        'CMakeFiles/papergym_native.dir/addon.cc.o',
        'build.ninja',
        'CMakeCache.txt',
        'Release/papergym_native.node',
        'Release/papergym_preload.node',
        'Release/papergym_native.exp',
      ]) {
        writeFileSync(join(b, f), 'x');
      }
      pruneBuild(b);
      const { readdirSync } = await import('node:fs');
      expect(readdirSync(b)).to.deep.equal(['Release']);
      expect(readdirSync(join(b, 'Release')).sort()).to.deep.equal(['papergym_native.node', 'papergym_preload.node']);
    } finally {
      rmSync(tmp, { recursive: true, force: true });
    }
  });
});
