#!/usr/bin/env node
// Locates libtorch for both builds (CMakeLists.txt and binding.gyp) so they agree.
// Order: $LIBTORCH (a libtorch archive or a torch package dir) -> the `torch` package of
// `python3` (or $PYTHON) -> an error naming both.
// Usage: node scripts/find-libtorch.cjs [field]
//   no field: JSON {root, source, includeDirs, libDir, cudaLib, cudaIncludeDir, cxx11Abi, version}
//   field:    one value; arrays are joined with ';' (CMake list) or ' ' when PG_SEP=space.
'use strict';
const fs = require('fs');
const path = require('path');
const { execFileSync } = require('child_process');

function fail(msg) {
  process.stderr.write(`papergym-native: ${msg}\n`);
  process.exit(1);
}

function describe(root, source, extra = {}) {
  const inc = path.join(root, 'include');
  const libDir = path.join(root, 'lib');
  if (!fs.existsSync(path.join(inc, 'torch')) || !fs.existsSync(libDir)) {
    fail(`${source} points at ${root}, which has no include/torch and lib/ (not a libtorch or torch package dir)`);
  }
  const hasLib = (n) => fs.existsSync(path.join(libDir, `lib${n}.so`)) || fs.existsSync(path.join(libDir, `lib${n}.dylib`));
  for (const n of ['torch', 'torch_cpu', 'c10']) if (!hasLib(n)) fail(`${source}: ${libDir} lacks lib${n}`);
  const cudaLib = hasLib('torch_cuda');
  // CUDA headers for the CUDA-only code (graphs, allocator stats): a full toolkit ($CUDA_HOME,
  // /usr/local/cuda) or complete nvidia-* wheels next to torch. The runtime wheel alone lacks crt/ and
  // nv/, so a pip-only install builds without them and still runs CUDA through libtorch_cuda.
  let cudaIncludeDir = '';
  if (cudaLib) {
    const cands = [process.env.CUDA_HOME, process.env.CUDA_PATH, '/usr/local/cuda']
      .filter(Boolean).map((d) => path.join(d, 'include'));
    const nv = path.join(root, '..', 'nvidia');
    if (fs.existsSync(nv)) for (const d of fs.readdirSync(nv)) cands.push(path.join(nv, d, 'include'));
    cudaIncludeDir = cands.find((d) => ["cuda_runtime_api.h", "crt/host_defines.h", "nv/target"].every((f) => fs.existsSync(path.join(d, f)))) || "";
  }
  let version = extra.version || '';
  const vfile = path.join(root, 'build-version');
  if (!version && fs.existsSync(vfile)) version = fs.readFileSync(vfile, 'utf8').trim();
  if (!version) {
    const vh = path.join(inc, 'torch', 'csrc', 'api', 'include', 'torch', 'version.h');
    if (fs.existsSync(vh)) {
      const m = /TORCH_VERSION\s+"([^"]+)"/.exec(fs.readFileSync(vh, 'utf8'));
      if (m) version = m[1];
    }
  }
  return {
    root: path.resolve(root),
    source,
    includeDirs: [inc, path.join(inc, 'torch', 'csrc', 'api', 'include')],
    libDir,
    cudaLib,
    cudaIncludeDir,
    cxx11Abi: extra.cxx11Abi ?? 1,
    version,
  };
}

function find() {
  if (process.env.LIBTORCH) {
    const r = process.env.LIBTORCH;
    if (!fs.existsSync(r)) fail(`LIBTORCH=${r} does not exist`);
    return describe(r, 'LIBTORCH');
  }
  const py = process.env.PYTHON || 'python3';
  let out;
  try {
    out = execFileSync(py, ['-c',
      'import json,os,torch;print(json.dumps({"root":os.path.dirname(torch.__file__),"abi":int(torch._C._GLIBCXX_USE_CXX11_ABI),"v":torch.__version__}))'],
      { encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] });
  } catch (e) {
    fail(`libtorch not found: LIBTORCH is not set and \`${py} -c "import torch"\` failed ` +
      `(${String(e.stderr || e.message).trim().split('\n').pop()}). ` +
      `Set LIBTORCH=/path/to/libtorch (or a torch package dir), or install PyTorch: pip install torch==2.11.0`);
  }
  const j = JSON.parse(out.trim().split('\n').pop());
  return describe(j.root, `${py} torch package`, { cxx11Abi: j.abi, version: j.v });
}

const info = find();
const field = process.argv[2];
if (!field) {
  process.stdout.write(JSON.stringify(info, null, 2) + '\n');
} else {
  const v = info[field];
  if (v === undefined) fail(`unknown field ${field}`);
  const sep = process.env.PG_SEP === 'space' ? ' ' : ';';
  process.stdout.write(Array.isArray(v) ? v.join(sep) : typeof v === 'boolean' ? (v ? '1' : '0') : String(v));
}
