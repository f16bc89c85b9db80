/**
 * Loader and typed surface of the libtorch addon.
 *
 * Resolution order for the binary (so prebuilt binaries can be added later without changing
 * callers): `$PAPERGYM_NATIVE_ADDON` (an explicit `.node` path) → `prebuilds/<platform>-<arch>-<variant>/
 * papergym_native.node` (variant = `cuda<major><minor>` or `cpu`, for future per-CUDA packages) →
 * `build/Release/papergym_native.node` (the local cmake-js/node-gyp build). The first that exists
 * is loaded once per process; a failure names every path tried.
 */
import { createRequire } from 'node:module';
import { existsSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

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

/** A dense tensor crossing the JS/native boundary: row-major `data` with `shape`. */
export interface JsTensor<T extends ArrayBufferView = Float32Array> {
  data: T;
  shape: number[];
}

/** Facts of the loaded libtorch build (see `doctor`). */
export interface RuntimeInfo {
  libtorchVersion: string;
  libtorchPath: string;
  cxx11Abi: boolean;
  /** Compiled with CUDA headers (CUDA graphs, allocator statistics). */
  cudaBuild: boolean;
  /** The build holds the own CUDA kernels (fused loss rows; needs a CUDA compiler at build time). */
  fusedKernels: boolean;
  cudaAvailable: boolean;
  cudaDevices: { index: number; name?: string; totalMemoryBytes?: number; computeCapability?: string }[];
  numThreads: number;
  parallelInfo: string;
}

/** CUDA caching-allocator statistics, bytes. */
export interface CudaMemoryStats {
  allocatedBytes: number;
  reservedBytes: number;
  peakAllocatedBytes: number;
  peakReservedBytes: number;
}

/** Raw addon exports. Concern-specific typed wrappers live beside their TS modules. */
export interface NativeAddon {
  napiVersion: number;
  runtimeInfo(): RuntimeInfo;
  /** Allocator statistics of CUDA device `device` (default 0); null without CUDA. */
  cudaMemory(device?: number): CudaMemoryStats | null;
  cudaResetPeak(device?: number): void;
  cudaEmptyCache(): void;
  setNumThreads(n: number): void;
  // prefixLogprobs(model, {prefixIds, suffixIds, suffixLengths, candidates, adapter}) -> [n, K]: see lib/judge/local.ts
  /** Own CUDA kernels on (true) or off (ATen paths) for later calls; returns the previous value. */
  setFusedKernels(on: boolean): boolean;
  /** Starts counting leaf ATen ops (ops that call no other op: on CUDA about one kernel launch each). */
  opCountStart(): void;
  /** Stops counting; per-op-name counts and their total since opCountStart. */
  opCountStop(): { total: number; ops: Record<string, number> };
  /** Seeds libtorch's default CPU/CUDA generators (LoRA dropout); non-negative integer. */
  manualSeed(seed: number): void;
  /** Process groups in this build (native/dist: Gloo needs the gloo headers at build time, NCCL a CUDA build + nccl.h). */
  distAvailable(): { gloo: boolean; nccl: boolean };
  // distInit(opts) -> Promise<ProcessGroup>: see native/dist/register.cc and lib/train/dist.ts
  // eslint-disable-next-line @typescript-eslint/no-explicit-any
  [name: string]: any;
}

/** Candidate addon paths in resolution order (see the module docstring). */
export function addonCandidates(): string[] {
  const out: string[] = [];
  if (process.env.PAPERGYM_NATIVE_ADDON) out.push(resolve(process.env.PAPERGYM_NATIVE_ADDON));
  const variants = (process.env.PAPERGYM_NATIVE_VARIANT ?? 'cpu').split(',');
  for (const v of variants) out.push(join(packageRoot, 'prebuilds', `${process.platform}-${process.arch}-${v}`, 'papergym_native.node'));
  out.push(join(packageRoot, 'build', 'Release', 'papergym_native.node'));
  return out;
}

let cached: { addon: NativeAddon; path: string } | undefined;

/**
 * Loads the addon once. Throws an Error listing every candidate path and the loader error when
 * none loads (e.g. "run scripts/setup.sh or npm run build:native").
 */
export function loadNative(): { addon: NativeAddon; path: string } {
  if (cached) return cached;
  const tried: string[] = [];
  for (const p of addonCandidates()) {
    if (!existsSync(p)) {
      tried.push(`${p} (missing)`);
      continue;
    }
    try {
      cached = { addon: require(p) as NativeAddon, path: p };
      return cached;
    } catch (e) {
      tried.push(`${p} (${(e as Error).message.split('\n')[0]})`);
    }
  }
  throw new Error(`papergym-native: no loadable addon binary. Build it with scripts/setup.sh or npm run build:native. Tried:\n  ${tried.join('\n  ')}`);
}

/** The loaded addon (throws like loadNative). */
export function native(): NativeAddon {
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
  /** Data-parallel process groups in this build (native/dist): Gloo (CPU), NCCL (CUDA). */
  dist: { gloo: boolean; nccl: boolean };
  cudaAvailable: boolean;
  gpus: { index: number; name: string; totalMemoryGiB: number; computeCapability: string; allocatedBytes?: number; reservedBytes?: number }[];
  numThreads: number;
}

/** Environment report: Node, N-API, libtorch version/path/ABI, CUDA and GPUs, loaded binary. */
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
    dist: typeof addon.distAvailable === 'function' ? addon.distAvailable() : { gloo: false, nccl: false },
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
  };
}
