#!/usr/bin/env node
// Locates libtorch (the "provider") for the builds (CMakeLists.txt, binding.gyp) and for the
// addon loader (lib/native.ts), so all three agree on which torch is meant.
// Order: $LIBTORCH (a libtorch archive or a torch package dir) -> the `torch` package of
// `python3` (or $PYTHON), found without importing torch (fast) -> an error naming both.
// Usage: node scripts/find-libtorch.cjs [field]
//   no field: JSON {root, source, includeDirs, libDir, cudaLib, cudaIncludeDir, cxx11Abi, version,
//             torchMinor, cudaVersion, variant}
//   field:    one value; arrays are joined with ';' (CMake list) or ' ' when PG_SEP=space.
// As a module: require('./find-libtorch.cjs').findLibtorch() returns that object or throws an Error.
'use strict';
const fs = require('fs');
const path = require('path');
const { execFileSync } = require('child_process');

class LibtorchNotFound extends Error {}

/**
 * CUDA variant tag of a torch build, as in PyTorch's wheel index names: '13.0' -> 'cu130',
 * '12.6' -> 'cu126'; no CUDA -> 'cpu'.
 */
function variantOf(cudaVersion) {
  if (!cudaVersion) return 'cpu';
  const m = /^(\d+)\.(\d+)/.exec(cudaVersion);
  return m ? `cu${m[1]}${m[2]}` : 'cuda-unknown';
}

/** The CUDA version of a torch dir: torch/version.py (`cuda = '13.0'`), else the `+cuNNN` suffix. */
function cudaVersionOf(root, version) {
  const vpy = path.join(root, 'version.py');
  if (fs.existsSync(vpy)) {
    const m = /^cuda(?:\s*:[^=]*)?=\s*(?:'([^']*)'|"([^"]*)"|None)/m.exec(fs.readFileSync(vpy, 'utf8'));
    if (m) return m[1] || m[2] || null;
  }
  const s = /\+cu(\d+)(\d)$/.exec(version || '');
  return s ? `${s[1]}.${s[2]}` : null;
}

/**
 * CXX11 ABI of a libtorch: its libc10 exports std::__cxx11 names only when built with
 * _GLIBCXX_USE_CXX11_ABI=1 (the same fact as torch._C._GLIBCXX_USE_CXX11_ABI, read without Python).
 */
function cxx11AbiOf(libDir) {
  const f = path.join(libDir, 'libc10.so');
  if (!fs.existsSync(f)) return 1;
  return fs.readFileSync(f).includes('__cxx11') ? 1 : 0;
}

function describe(root, source, extra = {}) {
  const inc = path.join(root, 'include');
  const libDir = path.join(root, 'lib');
  if (!fs.existsSync(path.join(inc, 'torch')) || !fs.existsSync(libDir)) {
    throw new LibtorchNotFound(`${source} points at ${root}, which has no include/torch and lib/ (not a libtorch or torch package dir)`);
  }
  const hasLib = (n) => fs.existsSync(path.join(libDir, `lib${n}.so`)) || fs.existsSync(path.join(libDir, `lib${n}.dylib`));
  for (const n of ['torch', 'torch_cpu', 'c10']) if (!hasLib(n)) throw new LibtorchNotFound(`${source}: ${libDir} lacks lib${n}`);
  const cudaLib = hasLib('torch_cuda');
  // CUDA headers for the CUDA-only code (graphs, allocator stats): a full toolkit ($CUDA_HOME,
  // /usr/local/cuda) or complete nvidia-* wheels next to torch. The runtime wheel alone lacks crt/ and
  // nv/, so a pip-only install builds without them and still runs CUDA through libtorch_cuda.
  let cudaIncludeDir = '';
  if (cudaLib) {
    const cands = [process.env.CUDA_HOME, process.env.CUDA_PATH, '/usr/local/cuda'].filter(Boolean).map((d) => path.join(d, 'include'));
    const nv = path.join(root, '..', 'nvidia');
    if (fs.existsSync(nv)) for (const d of fs.readdirSync(nv)) cands.push(path.join(nv, d, 'include'));
    cudaIncludeDir = cands.find((d) => ['cuda_runtime_api.h', 'crt/host_defines.h', 'nv/target'].every((f) => fs.existsSync(path.join(d, f)))) || '';
  }
  let version = extra.version || '';
  const vfile = path.join(root, 'build-version');
  if (!version && fs.existsSync(vfile)) version = fs.readFileSync(vfile, 'utf8').trim();
  if (!version) {
    const vpy = path.join(root, 'version.py');
    const m = fs.existsSync(vpy) && /^__version__\s*=\s*['"]([^'"]+)['"]/m.exec(fs.readFileSync(vpy, 'utf8'));
    if (m) version = m[1];
  }
  if (!version) {
    const vh = path.join(inc, 'torch', 'csrc', 'api', 'include', 'torch', 'version.h');
    if (fs.existsSync(vh)) {
      const m = /TORCH_VERSION\s+"([^"]+)"/.exec(fs.readFileSync(vh, 'utf8'));
      if (m) version = m[1];
    }
  }
  const cudaVersion = cudaLib ? cudaVersionOf(root, version) : null;
  const mm = /^(\d+)\.(\d+)/.exec(version);
  return {
    root: path.resolve(root),
    source,
    includeDirs: [inc, path.join(inc, 'torch', 'csrc', 'api', 'include')],
    libDir,
    cudaLib,
    cudaIncludeDir,
    cxx11Abi: cxx11AbiOf(libDir),
    version,
    torchMinor: mm ? `${mm[1]}.${mm[2]}` : '',
    cudaVersion,
    variant: cudaLib ? variantOf(cudaVersion || '') : 'cpu',
  };
}

/**
 * `$PYTHON`, else the venv scripts/setup.sh makes where python3 is externally managed (PEP 668),
 * `<user cache dir>/python`, once its packages are in (`.papergym-ready`), else python3 (lib/util/python.ts, the same rule).
 */
function pythonOfSetup() {
  if (process.env.PYTHON) return process.env.PYTHON;
  const cache =
    process.env.PAPERGYM_NATIVE_CACHE_DIR || path.join(process.env.XDG_CACHE_HOME || path.join(require('node:os').homedir(), '.cache'), 'papergym-native');
  const venv = path.join(cache, 'python', 'bin', 'python');
  return fs.existsSync(path.join(cache, 'python', '.papergym-ready')) && fs.existsSync(venv) ? venv : 'python3';
}

/** The provider description (see the header), or throws an Error saying what was looked at. */
function findLibtorch() {
  if (process.env.LIBTORCH) {
    const r = process.env.LIBTORCH;
    if (!fs.existsSync(r)) throw new LibtorchNotFound(`LIBTORCH=${r} does not exist`);
    return describe(r, 'LIBTORCH');
  }
  const py = pythonOfSetup();
  let out;
  try {
    // find_spec locates the package without importing it (importing torch takes seconds).
    out = execFileSync(
      py,
      ['-c', 'import importlib.util as u,json,os;s=u.find_spec("torch");print(json.dumps({"root":os.path.dirname(s.origin) if s and s.origin else None}))'],
      { encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] },
    );
  } catch (e) {
    throw new LibtorchNotFound(
      `libtorch not found: LIBTORCH is not set and \`${py}\` could not be run ` +
        `(${String(e.stderr || e.message)
          .trim()
          .split('\n')
          .pop()}). ` +
        `Set LIBTORCH=/path/to/libtorch (or a torch package dir), or install PyTorch: pip install torch==2.11.0`,
    );
  }
  const j = JSON.parse(out.trim().split('\n').pop());
  if (!j.root) {
    throw new LibtorchNotFound(
      `libtorch not found: LIBTORCH is not set and \`${py}\` has no torch package. ` +
        `Set LIBTORCH=/path/to/libtorch (or a torch package dir), or install PyTorch: pip install torch==2.11.0`,
    );
  }
  return describe(j.root, `${py} torch package`);
}

module.exports = { findLibtorch, variantOf, LibtorchNotFound };

if (require.main === module) {
  let info;
  try {
    info = findLibtorch();
  } catch (e) {
    process.stderr.write(`papergym-native: ${e.message}\n`);
    process.exit(1);
  }
  const field = process.argv[2];
  if (!field) {
    process.stdout.write(JSON.stringify(info, null, 2) + '\n');
  } else {
    const v = info[field];
    if (v === undefined) {
      process.stderr.write(`papergym-native: unknown field ${field}\n`);
      process.exit(1);
    }
    const sep = process.env.PG_SEP === 'space' ? ' ' : ';';
    process.stdout.write(Array.isArray(v) ? v.join(sep) : typeof v === 'boolean' ? (v ? '1' : '0') : v === null ? '' : String(v));
  }
}
