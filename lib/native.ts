/**
 * Loader and typed surface of the libtorch addon.
 *
 * libtorch has no stable ABI, so an addon binary only works with the torch minor version, CUDA
 * variant and C++ ABI it was built against. The user's torch (the "provider": `$LIBTORCH` or the
 * `torch` package of `python3`, see scripts/find-libtorch.cjs) is read without importing it, and
 * the candidates are tried in this order:
 *
 * 1. `$PAPERGYM_NATIVE_ADDON` (an explicit `.node` path): the only candidate when set.
 * 2. The local build (cmake-js / node-gyp output under the package, found with `bindings`).
 * 3. The prebuilt packages `@papergym-native/<platform>-<arch>-torch<minor>-<variant>` listed in
 *    package.json `optionalDependencies` (variant `cpu`, `cu126`, `cu128`, `cu130`): the provider's
 *    own variant first, then `cpu`, then the rest (each refused with the reason).
 *
 * Each candidate is first checked against its package metadata (platform, torch minor, CUDA
 * variant, CXX11 ABI, libtorch_cuda.so present), then test-loaded in a child process (a bad binary
 * must never take down the caller): the provider's libtorch libraries are opened by full path
 * (papergym_preload.node; prebuilt binaries carry no RUNPATH), the addon is required and
 * `runtimeInfo()` is compared with the provider (torch version; CUDA available for CUDA variants).
 * The first that passes is loaded in this process. Verdicts are cached in the per-user cache dir,
 * keyed by the binary, the provider's libraries, Node's ABI and the NVIDIA driver version.
 * When none passes, one Error says what was looked for and why each candidate was refused.
 *
 * The loaded binary is returned as the {@link Addon} declared in lib/addon.ts (its one typed
 * surface; test/addon-surface.test.ts holds the binary to it), with `Symbol.dispose` added to the
 * `Model` and `ProcessGroup` classes (see {@link adaptAddon}).
 */
import { createRequire } from 'node:module';
import { spawnSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { existsSync, readFileSync, statSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { userCacheDir, writeFileAtomic } from './util/cache.js';
import './util/dispose.js';
import type { Addon, AddonModel, RuntimeInfo } from './addon.js';
export type { Addon, AddonModel, JsTensor, RuntimeInfo, CudaMemoryStats } from './addon.js';
const require = createRequire(import.meta.url);

/** Root of the installed package (the directory holding package.json). */
export const packageRoot: string = (() => {
  let d = dirname(fileURLToPath(import.meta.url));
  for (let i = 0; i < 6; i++) {
    if (existsSync(join(d, 'package.json')) && existsSync(join(d, 'native'))) return d;
    d = dirname(d);
  }
  return resolve(dirname(fileURLToPath(import.meta.url)), '..', '..');
})();

/** The libtorch the addon runs on (scripts/find-libtorch.cjs). */
export interface ProviderInfo {
  root: string;
  /** `LIBTORCH` or `python3 torch package`. */
  source: string;
  libDir: string;
  /** The provider has libtorch_cuda.so. */
  cudaLib: boolean;
  /** 1 or 0 (`_GLIBCXX_USE_CXX11_ABI`). */
  cxx11Abi: number;
  /** e.g. `2.11.0+cu130`. */
  version: string;
  /** e.g. `2.11`. */
  torchMinor: string;
  /** e.g. `13.0`; null for CPU torch. */
  cudaVersion: string | null;
  /** `cpu`, `cu126`, `cu128`, `cu130`, … */
  variant: string;
}

/** `papergym` field of a prebuilt package's package.json (written by scripts/prebuild.sh). */
export interface PrebuiltMeta {
  platform: string;
  arch: string;
  /** torch minor version the binary was built against, e.g. `2.11`. */
  torch: string;
  /** Full torch version of the build, e.g. `2.11.0+cu130`. */
  torchVersion?: string;
  variant: string;
  cudaVersion: string | null;
  cxx11Abi: number;
  binary: string;
  preload: string;
}

/** One addon binary considered by the loader, with the verdict shown by `doctor`. */
export interface AddonCandidate {
  source: 'PAPERGYM_NATIVE_ADDON' | 'local build' | 'prebuilt';
  /** Package name (prebuilt) or a short description. */
  name: string;
  /** The `.node` file, when one exists. */
  path?: string;
  /** papergym_preload.node next to it, when present. */
  preload?: string;
  meta?: PrebuiltMeta;
  /** `loaded` (in use), `passed` (would load; an earlier one was taken), `skipped`, `untried`. */
  status: 'loaded' | 'passed' | 'skipped' | 'untried';
  reason: string;
}

/** What the loader looked at: the provider (or why none was found) and every candidate. */
export interface AddonSelection {
  platform: string;
  provider?: ProviderInfo;
  providerError?: string;
  candidates: AddonCandidate[];
  chosen?: AddonCandidate;
}

/** Name of the prebuilt package for a platform, torch minor and variant (node-llama-cpp's per-variant pattern). */
export function prebuiltPackageName(torchMinor: string, variant: string, platform: string = process.platform, arch: string = process.arch): string {
  return `@papergym-native/${platform}-${arch}-torch${torchMinor}-${variant}`;
}

/** Reads the provider (throws an Error naming what was looked at when there is none). */
export function findProvider(): ProviderInfo {
  const m = require(join(packageRoot, 'scripts', 'find-libtorch.cjs')) as { findLibtorch(): ProviderInfo };
  return m.findLibtorch();
}

/**
 * Names of the prebuilt packages this version knows: package.json `optionalDependencies` (as
 * published) and `papergymPrebuilt` (platforms × torch minors × variants; the repository lists
 * them there because npm ci refuses a lock file naming unpublished packages).
 */
function knownPrebuiltPackages(): string[] {
  try {
    const pj = JSON.parse(readFileSync(join(packageRoot, 'package.json'), 'utf8')) as {
      optionalDependencies?: Record<string, string>;
      papergymPrebuilt?: { platforms: string[]; torch: string[]; variants: string[] };
    };
    const names = new Set(Object.keys(pj.optionalDependencies ?? {}).filter((n) => n.startsWith('@papergym-native/')));
    const pp = pj.papergymPrebuilt;
    if (pp) for (const pl of pp.platforms) for (const t of pp.torch) for (const v of pp.variants) names.add(`@papergym-native/${pl}-torch${t}-${v}`);
    return [...names];
  } catch {
    return [];
  }
}

/** The NVIDIA kernel driver version, or '' without one (no /proc/driver/nvidia/version). */
function nvidiaDriver(): string {
  try {
    return readFileSync('/proc/driver/nvidia/version', 'utf8').split('\n')[0].trim();
  } catch {
    return '';
  }
}

/** Libraries to open before a candidate: libtorch, plus the CUDA ones when the candidate needs them. */
function preloadLibs(p: ProviderInfo, withCuda: boolean): string[] {
  const libs = ['libc10.so', 'libtorch_cpu.so'];
  if (withCuda) libs.push('libc10_cuda.so', 'libtorch_cuda.so');
  libs.push('libtorch.so');
  return libs.map((l) => join(p.libDir, l));
}

/** Options of selectAddon(). */
export interface SelectOptions {
  /** Stop test-loading after the first candidate that passes (default true). */
  stopAtFirst?: boolean;
  /** Directory prebuilt packages are resolved from, as Node would (default: the package root). */
  from?: string;
  /** Include the local build (default true). */
  localBuild?: boolean;
  /** Use this provider instead of reading it (tests). */
  provider?: ProviderInfo;
  /** Extra prebuilt package names to consider (tests; the package.json list is always used). */
  packages?: string[];
}

/** The local build (cmake-js / node-gyp output), found with `bindings` like any addon. */
function localCandidate(): AddonCandidate {
  const bindings = require('bindings') as (o: object) => string;
  const find = (file: string): string | undefined => {
    try {
      return bindings({ bindings: file, module_root: packageRoot, path: true });
    } catch {
      return undefined;
    }
  };
  const local = find('papergym_native.node');
  return local
    ? { source: 'local build', name: 'local build', path: local, preload: find('papergym_preload.node'), status: 'untried', reason: '' }
    : { source: 'local build', name: 'local build', status: 'skipped', reason: `not built (bindings found no papergym_native.node under ${packageRoot})` };
}

/** The candidates in order, with metadata checks done (no binary loaded yet). */
function listCandidates(provider: ProviderInfo | undefined, opts: SelectOptions): AddonCandidate[] {
  const out: AddonCandidate[] = [];
  const env = process.env.PAPERGYM_NATIVE_ADDON;
  if (env) {
    const p = resolve(env);
    out.push({
      source: 'PAPERGYM_NATIVE_ADDON',
      name: p,
      path: p,
      preload: siblingPreload(p),
      status: existsSync(p) ? 'untried' : 'skipped',
      reason: existsSync(p) ? '' : 'file does not exist',
    });
    return out;
  }
  if (opts.localBuild !== false) out.push(localCandidate());
  const names = [...new Set([...knownPrebuiltPackages(), ...(opts.packages ?? [])])];
  const from = opts.from ?? packageRoot;
  const platformTag = `${process.platform}-${process.arch}-`;
  const rank = (n: string): number => {
    if (!provider) return 2;
    if (n === prebuiltPackageName(provider.torchMinor, provider.variant)) return 0;
    if (n === prebuiltPackageName(provider.torchMinor, 'cpu')) return 1;
    return 2;
  };
  const ordered = [...names].sort((a, b) => rank(a) - rank(b));
  if (provider && !ordered.includes(prebuiltPackageName(provider.torchMinor, provider.variant))) {
    // Say plainly that no package exists for this provider (e.g. torch 2.10, or ROCm).
    ordered.unshift(prebuiltPackageName(provider.torchMinor, provider.variant));
  }
  for (const name of ordered) {
    const c: AddonCandidate = { source: 'prebuilt', name, status: 'skipped', reason: '' };
    out.push(c);
    if (!name.slice('@papergym-native/'.length).startsWith(platformTag)) {
      c.reason = `for another platform (this is ${process.platform}-${process.arch})`;
      continue;
    }
    let pkgJson: string;
    try {
      pkgJson = require.resolve(`${name}/package.json`, { paths: [from] });
    } catch {
      c.reason = names.includes(name) ? 'not installed' : 'no such prebuilt package is published (no binary for this torch/CUDA combination)';
      continue;
    }
    let meta: PrebuiltMeta;
    try {
      meta = (JSON.parse(readFileSync(pkgJson, 'utf8')) as { papergym: PrebuiltMeta }).papergym;
      if (!meta || !meta.binary) throw new Error('no papergym field');
    } catch (e) {
      c.reason = `${pkgJson}: not a papergym-native prebuilt package (${(e as Error).message})`;
      continue;
    }
    c.meta = meta;
    c.path = join(dirname(pkgJson), meta.binary);
    c.preload = join(dirname(pkgJson), meta.preload);
    const refuse = metaMismatch(meta, provider);
    if (refuse) {
      c.reason = refuse;
      continue;
    }
    if (!existsSync(c.path)) {
      c.reason = `${c.path} is missing from the package`;
      continue;
    }
    c.status = 'untried';
  }
  return out;
}

/** Why a prebuilt's metadata rules it out for this provider, or '' when it may fit. */
export function metaMismatch(meta: PrebuiltMeta, provider: ProviderInfo | undefined): string {
  if (meta.platform !== process.platform || meta.arch !== process.arch)
    return `built for ${meta.platform}-${meta.arch}, this is ${process.platform}-${process.arch}`;
  if (!provider) return 'no libtorch found to run it on';
  const tag = `${meta.variant}${meta.variant === 'cpu' ? '' : ` (CUDA ${meta.cudaVersion})`}`;
  if (meta.torch !== provider.torchMinor) {
    return `built for torch ${meta.torch} (${tag}); the provider is torch ${provider.version || 'of unknown version'} (${provider.source} at ${provider.root}): libtorch has no stable ABI across minor versions`;
  }
  if (Number(meta.cxx11Abi) !== Number(provider.cxx11Abi)) {
    return `built with _GLIBCXX_USE_CXX11_ABI=${meta.cxx11Abi}; the provider's libtorch uses ${provider.cxx11Abi}`;
  }
  if (meta.variant !== 'cpu') {
    if (!provider.cudaLib)
      return `a CUDA binary (${tag}) needs libtorch_cuda.so, which ${provider.libDir} lacks (CPU-only torch ${provider.version}); install a CUDA torch or use the cpu variant`;
    if (meta.variant !== provider.variant)
      return `built for ${tag}; the provider is torch ${provider.version} (${provider.variant}${provider.cudaVersion ? `, CUDA ${provider.cudaVersion}` : ''})`;
  }
  return '';
}

function siblingPreload(addon: string): string | undefined {
  const p = join(dirname(addon), 'papergym_preload.node');
  return existsSync(p) ? p : undefined;
}

interface LoadPlan {
  addon: string;
  preload?: string;
  libs: string[];
}

function planFor(c: AddonCandidate, provider: ProviderInfo | undefined): LoadPlan {
  const wantsCuda = !!provider?.cudaLib && !(c.meta && c.meta.variant === 'cpu');
  return { addon: c.path!, preload: c.preload, libs: provider ? preloadLibs(provider, wantsCuda) : [] };
}

/** Child-process test load: preload, require, runtimeInfo(); prints one JSON line. */
const CHILD_SRC = `
const plan = JSON.parse(process.argv[1]);
try {
  if (plan.preload && plan.libs.length) require(plan.preload).preload(plan.libs);
  const a = require(plan.addon);
  process.stdout.write('\\n' + JSON.stringify({ ok: true, info: a.runtimeInfo(), napi: a.napiVersion }) + '\\n');
} catch (e) {
  process.stdout.write('\\n' + JSON.stringify({ ok: false, error: String(e && e.message || e).split('\\n')[0] }) + '\\n');
}
`;

interface TestVerdict {
  ok: boolean;
  reason: string;
  info?: RuntimeInfo;
}

function statKey(f: string | undefined): string {
  if (!f) return '';
  try {
    const s = statSync(f);
    return `${f}:${s.size}:${s.mtimeMs}`;
  } catch {
    return `${f}:missing`;
  }
}

function testLoad(c: AddonCandidate, provider: ProviderInfo | undefined, plan: LoadPlan): TestVerdict {
  const key = createHash('sha256')
    .update(
      JSON.stringify({
        v: 1,
        addon: statKey(plan.addon),
        preload: statKey(plan.preload),
        libs: plan.libs.map(statKey),
        node: process.versions.modules,
        exec: process.execPath,
        driver: nvidiaDriver(),
        variant: c.meta?.variant,
        provider: provider?.version,
      }),
    )
    .digest('hex')
    .slice(0, 32);
  let cacheFile: string | undefined;
  try {
    cacheFile = join(userCacheDir(), 'loader', `${key}.json`);
    if (!process.env.PAPERGYM_NATIVE_RETEST && existsSync(cacheFile)) return JSON.parse(readFileSync(cacheFile, 'utf8')) as TestVerdict;
  } catch {
    cacheFile = undefined;
  }
  // ELECTRON_RUN_AS_NODE: under Electron, process.execPath is Electron; this makes it a plain Node.
  const r = spawnSync(process.execPath, ['-e', CHILD_SRC, JSON.stringify(plan)], {
    encoding: 'utf8',
    timeout: 180_000,
    maxBuffer: 16 << 20,
    stdio: ['ignore', 'pipe', 'pipe'],
    env: { ...process.env, ELECTRON_RUN_AS_NODE: '1' },
  });
  let verdict: TestVerdict;
  const last = (r.stdout ?? '').trim().split('\n').pop() ?? '';
  let parsed: { ok: boolean; error?: string; info?: RuntimeInfo } | undefined;
  try {
    parsed = JSON.parse(last);
  } catch {
    parsed = undefined;
  }
  if (r.error) verdict = { ok: false, reason: `test load failed to run: ${r.error.message}` };
  else if (r.signal) verdict = { ok: false, reason: `test load crashed with ${r.signal}${r.stderr ? `: ${r.stderr.trim().split('\n').pop()}` : ''}` };
  else if (!parsed) verdict = { ok: false, reason: `test load exited ${r.status} without a result${r.stderr ? `: ${r.stderr.trim().split('\n').pop()}` : ''}` };
  else if (!parsed.ok) verdict = { ok: false, reason: `does not load: ${parsed.error}` };
  else verdict = judgeInfo(c, provider, parsed.info!);
  if (cacheFile) {
    try {
      writeFileAtomic(cacheFile, JSON.stringify(verdict));
    } catch {
      /* a read-only cache only costs a test load next time */
    }
  }
  return verdict;
}

/** Compares a test-loaded binary's runtimeInfo() with the provider and the candidate's variant. */
function judgeInfo(c: AddonCandidate, provider: ProviderInfo | undefined, info: RuntimeInfo): TestVerdict {
  const minor = /^(\d+\.\d+)/.exec(info.libtorchVersion)?.[1] ?? info.libtorchVersion;
  if (provider && minor !== provider.torchMinor) {
    return {
      ok: false,
      info,
      reason: `built against torch ${info.libtorchVersion}; the provider is torch ${provider.version} (${provider.source} at ${provider.root}): rebuild it (npm run build:native)`,
    };
  }
  if (c.meta && c.meta.variant !== 'cpu' && !info.cudaAvailable) {
    const drv = nvidiaDriver();
    return {
      ok: false,
      info,
      reason: `a CUDA binary (${c.meta.variant}), but CUDA is not available here (${drv ? `driver: ${drv}` : 'no NVIDIA driver: /proc/driver/nvidia/version is missing'}); the cpu variant is tried next`,
    };
  }
  const what = `torch ${info.libtorchVersion}${info.cudaBuild ? ', CUDA build' : ''}${info.fusedKernels ? ', fused CUDA kernels' : ''}${info.cudaAvailable ? `, ${info.cudaDevices.length} GPU(s)` : ''}`;
  return { ok: true, info, reason: `test load passed (${what})` };
}

/**
 * What the loader adds to the binary's classes on load (once per process):
 * `Model.prototype[Symbol.dispose]` = `dispose()` and `ProcessGroup.prototype[Symbol.dispose]` =
 * `destroy()`, so `using model = await loadModel(dir)` frees the weights at the end of the block.
 */
function adaptAddon(addon: Addon): Addon {
  const model: Partial<Disposable> & { dispose(): void } = addon.Model.prototype;
  if (!model[Symbol.dispose])
    Object.defineProperty(model, Symbol.dispose, {
      value(this: AddonModel) {
        this.dispose();
      },
      writable: true,
      configurable: true,
    });
  const group: Partial<Disposable> & { destroy(): void } = addon.ProcessGroup.prototype;
  if (!group[Symbol.dispose])
    Object.defineProperty(group, Symbol.dispose, {
      value(this: { destroy(): void }) {
        this.destroy();
      },
      writable: true,
      configurable: true,
    });
  return addon;
}

let selection: AddonSelection | undefined;
let cached: { addon: Addon; path: string } | undefined;

/**
 * Runs the candidate selection (see the module docstring): metadata checks and child-process
 * test loads; nothing is loaded into this process. Used by loadNative(), `doctor` and
 * scripts/install.cjs (which builds from source only when no candidate passes).
 */
export function selectAddon(opts: SelectOptions = {}): AddonSelection {
  const stopAtFirst = opts.stopAtFirst ?? true;
  let provider: ProviderInfo | undefined = opts.provider;
  let providerError: string | undefined;
  if (!provider) {
    try {
      provider = findProvider();
    } catch (e) {
      providerError = (e as Error).message;
    }
  }
  const sel: AddonSelection = { platform: `${process.platform}-${process.arch}`, provider, providerError, candidates: listCandidates(provider, opts) };
  for (const c of sel.candidates) {
    if (c.status !== 'untried') continue;
    if (sel.chosen && stopAtFirst) {
      c.reason = `not tried (${sel.chosen.name} was taken)`;
      continue;
    }
    if (c.source === 'PAPERGYM_NATIVE_ADDON') {
      // An explicit override is loaded as given (no child test), so its own errors surface.
      c.status = 'passed';
      c.reason = 'set by PAPERGYM_NATIVE_ADDON';
    } else {
      const v = testLoad(c, provider, planFor(c, provider));
      c.status = v.ok ? 'passed' : 'skipped';
      c.reason = v.reason;
    }
    if (c.status === 'passed' && !sel.chosen) sel.chosen = c;
  }
  return sel;
}

/** One message: what was looked for and why each candidate was refused. */
export function selectionFailure(sel: AddonSelection): string {
  const p = sel.provider;
  const wanted = p
    ? `${sel.platform}, torch ${p.version} (${p.variant}${p.cudaVersion ? `, CUDA ${p.cudaVersion}` : ''}, CXX11 ABI ${p.cxx11Abi}) from the ${p.source} at ${p.root}`
    : `${sel.platform}; no libtorch found: ${sel.providerError}`;
  const lines = sel.candidates.map((c) => `  - ${c.name}${c.path && c.path !== c.name && c.source !== 'prebuilt' ? ` (${c.path})` : ''}: ${c.reason}`);
  return (
    `papergym-native: no usable addon binary. Looked for ${wanted}.\n${lines.join('\n')}\n` +
    (p
      ? `Install the matching prebuilt (npm install ${prebuiltPackageName(p.torchMinor, p.variant)}, or the -cpu one) or build from source ` +
        `(needs cmake and a C++17 compiler): npm rebuild papergym-native, or npm run build:native in a clone.`
      : 'Install PyTorch (pip install torch==2.11.0) or set LIBTORCH=/path/to/libtorch.')
  );
}

/** The selection made by loadNative() in this process (undefined before the first load). */
export function addonSelection(): AddonSelection | undefined {
  return selection;
}

/** Paths of the candidate binaries that exist, in resolution order. */
export function addonCandidates(): string[] {
  return (selection ?? selectAddon({ stopAtFirst: true })).candidates.filter((c) => c.path && existsSync(c.path)).map((c) => c.path!);
}

/**
 * Loads the addon once (see the module docstring). Throws one Error saying what was looked for
 * and why each candidate was refused when none loads.
 */
export function loadNative(): { addon: Addon; path: string } {
  if (cached) return cached;
  const sel = selectAddon();
  selection = sel;
  const c = sel.chosen;
  if (!c) throw new Error(selectionFailure(sel));
  const plan = planFor(c, sel.provider);
  try {
    if (plan.preload && plan.libs.length) (require(plan.preload) as { preload(l: string[]): void }).preload(plan.libs);
    cached = { addon: adaptAddon(require(plan.addon) as Addon), path: plan.addon };
  } catch (e) {
    c.status = 'skipped';
    c.reason = `failed to load in this process: ${(e as Error).message.split('\n')[0]}`;
    throw new Error(selectionFailure(sel));
  }
  c.status = 'loaded';
  return cached;
}

/** The loaded addon (throws like loadNative). */
export function native(): Addon {
  return loadNative().addon;
}

/** True when the addon loads and CUDA is available to it. */
export function cudaAvailable(): boolean {
  try {
    return native().runtimeInfo().cudaAvailable;
  } catch {
    return false;
  }
}

/** Report printed by `papergym-native doctor`. */
export interface DoctorReport {
  node: string;
  napiVersion: string;
  addonNapiVersion: number;
  addonPath: string;
  libtorchVersion: string;
  libtorchPath: string;
  cxx11Abi: boolean;
  cudaBuild: boolean;
  fusedKernels: boolean;
  /** Data-parallel process groups in this build (native/parallel): Gloo (CPU), NCCL (CUDA). */
  dist: { gloo: boolean; nccl: boolean };
  cudaAvailable: boolean;
  gpus: { index: number; name: string; totalMemoryGiB: number; computeCapability: string; allocatedBytes?: number; reservedBytes?: number }[];
  numThreads: number;
  /** The libtorch the loader matched binaries against (undefined when none was found). */
  provider?: ProviderInfo;
  /** Every candidate binary with why it was taken or skipped. */
  candidates: AddonCandidate[];
}

/**
 * Environment report: Node, N-API, libtorch version/path/ABI, CUDA and GPUs, the loaded binary and
 * every candidate tried. Throws loadNative()'s Error (which lists the candidates) when none loads.
 */
export function doctor(): DoctorReport {
  const { addon, path } = loadNative();
  const info = addon.runtimeInfo();
  return {
    node: process.version,
    napiVersion: process.versions.napi ?? 'unknown',
    addonNapiVersion: addon.napiVersion,
    addonPath: path,
    libtorchVersion: info.libtorchVersion,
    libtorchPath: info.libtorchPath,
    cxx11Abi: info.cxx11Abi,
    cudaBuild: info.cudaBuild,
    fusedKernels: !!info.fusedKernels,
    dist: addon.distAvailable(),
    cudaAvailable: info.cudaAvailable,
    gpus: info.cudaDevices.map((d) => {
      const m = addon.cudaMemory(d.index);
      return {
        index: d.index,
        name: d.name ?? 'unknown (built without CUDA headers)',
        totalMemoryGiB: d.totalMemoryBytes ? d.totalMemoryBytes / 2 ** 30 : NaN,
        computeCapability: d.computeCapability ?? 'unknown',
        ...(m ? { allocatedBytes: m.allocatedBytes, reservedBytes: m.reservedBytes } : {}),
      };
    }),
    numThreads: info.numThreads,
    provider: selection?.provider,
    candidates: selection?.candidates ?? [],
  };
}
