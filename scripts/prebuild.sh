#!/usr/bin/env bash
# Builds one prebuilt addon variant as its own npm package (node-llama-cpp's pattern: one small
# package per variant, listed in the main package's optionalDependencies).
#
# Usage: scripts/prebuild.sh VARIANT [--pack-dir DIR] [--reuse-build]
#   VARIANT       cpu | cu126 | cu128 | cu130. The provider (LIBTORCH or python3's torch, see
#                 scripts/find-libtorch.cjs) must be that variant (cpu: any torch; only the CPU
#                 libraries are linked). The CUDA variants need the matching CUDA toolkit (nvcc) for
#                 the fused kernels: $CUDA_HOME or /usr/local/cuda.
#   --pack-dir    also write every npm tarball a user needs for this variant into DIR: the main
#                 package (its package.json gains optionalDependencies on the prebuilt packages) and
#                 @papergym-native/<platform>-<arch>-torch<minor>-VARIANT.
#   --reuse-build relink the objects of an existing local build (./build, made by `npx cmake-js
#                 compile`) without its RUNPATH instead of compiling again (seconds instead of
#                 minutes; cpu only, and only when ./build was compiled without CUDA headers).
# Output: build-prebuild/VARIANT/pkg/ (package.json, papergym_native.node, papergym_preload.node,
# LICENSE, README.md). The binary carries no RUNPATH; lib/native.ts opens the user's libtorch first.
set -euo pipefail
cd "$(dirname "$0")/.."
say() { printf '[prebuild] %s\n' "$*"; }
die() { printf '[prebuild] error: %s\n' "$*" >&2; exit 1; }

VARIANT=${1:-}
shift || true
PACK_DIR=''
REUSE=0
while [ $# -gt 0 ]; do
  case $1 in
    --pack-dir) PACK_DIR=${2:?--pack-dir needs a directory}; shift 2 ;;
    --reuse-build) REUSE=1; shift ;;
    *) die "unknown argument $1" ;;
  esac
done
case $VARIANT in
  cpu|cu126|cu128|cu130) ;;
  *) die "VARIANT must be cpu, cu126, cu128 or cu130 (got '${VARIANT}')" ;;
esac

field() { node scripts/find-libtorch.cjs "$1"; }
PROVIDER_VARIANT=$(field variant) || die "no libtorch provider (see the message above)"
TORCH_VERSION=$(field version)
TORCH_MINOR=$(field torchMinor)
CXX11_ABI=$(field cxx11Abi)
PLATFORM=$(node -p 'process.platform + "-" + process.arch')
VERSION=$(node -p 'require("./package.json").version')
NAME="@papergym-native/${PLATFORM}-torch${TORCH_MINOR}-${VARIANT}"
say "variant ${VARIANT}: ${NAME}@${VERSION} against torch ${TORCH_VERSION} (${PROVIDER_VARIANT}, CXX11 ABI ${CXX11_ABI})"
if [ "$VARIANT" != cpu ] && [ "$PROVIDER_VARIANT" != "$VARIANT" ]; then
  die "variant ${VARIANT} needs a ${VARIANT} torch; the provider is torch ${TORCH_VERSION} (${PROVIDER_VARIANT}). Install it: pip install torch==2.11.0 --index-url https://download.pytorch.org/whl/${VARIANT}"
fi

OUTDIR=build-prebuild/$VARIANT
PKG=$OUTDIR/pkg
rm -rf "$PKG" && mkdir -p "$PKG"

if [ ! -f dist/lib/index.js ]; then
  say "TypeScript build"
  npx tsc -p tsconfig.json
fi

relinked=0
if [ "$REUSE" = 1 ]; then
  if [ "$VARIANT" != cpu ]; then
    say "--reuse-build is for cpu only (CUDA variants compile their kernels): compiling"
  elif [ ! -f build/build.ninja ] || [ ! -f build/Release/papergym_preload.node ]; then
    say "--reuse-build: no ninja build with the preloader under ./build: compiling"
  elif grep -q -- '-DPG_WITH_CUDA' build/build.ninja; then
    say "--reuse-build: ./build was compiled with CUDA headers (not a CPU build): compiling"
  else
    # The link step of the local build, minus RUNPATH and the CUDA libraries, writing into $PKG.
    cmd=$(cd build && ninja -t commands Release/papergym_native.node | tail -1)
    out=$(cd "$PKG" && pwd)/papergym_native.node
    cmd=$(printf '%s' "$cmd" | sed -E -e "s# -o Release/papergym_native\.node # -o ${out} #" \
      -e 's# -Wl,-rpath,[^ ]+##g' -e 's# -ltorch_cuda##g' -e 's# -lc10_cuda##g')
    case $cmd in *"$out"*) ;; *) die "could not rewrite the link command: $cmd" ;; esac
    (cd build && eval "$cmd") || die "relink failed"
    cp build/Release/papergym_preload.node "$PKG/"
    relinked=1
    say "relinked the objects of ./build (no compile)"
  fi
fi

if [ "$relinked" = 0 ]; then
  defs=(--CDPG_PORTABLE=ON)
  if [ "$VARIANT" = cpu ]; then
    defs+=(--CDPG_CPU_ONLY=ON)
  else
    CUDA_ROOT=${CUDA_HOME:-/usr/local/cuda}
    [ -x "$CUDA_ROOT/bin/nvcc" ] || die "variant ${VARIANT} needs the CUDA toolkit (nvcc) at \$CUDA_HOME or /usr/local/cuda for the fused kernels"
    nv=$("$CUDA_ROOT/bin/nvcc" --version | sed -nE 's/.*release ([0-9]+)\.([0-9]+).*/cu\1\2/p')
    [ "$nv" = "$VARIANT" ] || die "nvcc at $CUDA_ROOT is ${nv}, the variant is ${VARIANT}"
    export CUDA_HOME=$CUDA_ROOT CUDACXX=$CUDA_ROOT/bin/nvcc
  fi
  say "compiling into $OUTDIR/build (cmake-js ${defs[*]})"
  npx cmake-js compile --log-level warn --out "$OUTDIR/build" "${defs[@]}"
  cp "$OUTDIR/build/Release/papergym_native.node" "$OUTDIR/build/Release/papergym_preload.node" "$PKG/"
fi

# Relocatable: no RUNPATH pointing at this machine's torch or toolkit.
if command -v readelf >/dev/null; then
  if readelf -d "$PKG/papergym_native.node" | grep -qE 'RUNPATH|RPATH'; then die "the binary still has a RUNPATH: $(readelf -d "$PKG/papergym_native.node" | grep -E 'RUNPATH|RPATH')"; fi
  if [ "$VARIANT" = cpu ] && readelf -d "$PKG/papergym_native.node" | grep -q 'libtorch_cuda'; then die "the cpu binary needs libtorch_cuda.so"; fi
fi
CUDA_VERSION=''
[ "$VARIANT" != cpu ] && CUDA_VERSION=$(field cudaVersion)
cp LICENSE "$PKG/"
node - "$PKG" "$NAME" "$VERSION" "$VARIANT" "$TORCH_MINOR" "$TORCH_VERSION" "$CUDA_VERSION" "$CXX11_ABI" <<'EOF'
const fs = require('fs');
const path = require('path');
const [pkg, name, version, variant, minor, torchVersion, cudaVersion, abi] = process.argv.slice(2);
const [platform, arch] = [process.platform, process.arch];
const what = variant === 'cpu' ? 'CPU' : `CUDA ${cudaVersion} (fused CUDA kernels)`;
fs.writeFileSync(path.join(pkg, 'package.json'), JSON.stringify({
  name, version,
  description: `papergym-native addon binary for ${platform}-${arch}, torch ${minor}, ${what}. Installed by papergym-native as an optional dependency; libtorch itself comes from the user's torch.`,
  license: 'Apache-2.0',
  os: [platform], cpu: [arch], libc: ['glibc'],
  files: ['papergym_native.node', 'papergym_preload.node', 'LICENSE', 'README.md'],
  papergym: { platform, arch, torch: minor, torchVersion, variant, cudaVersion: cudaVersion || null, cxx11Abi: Number(abi), binary: 'papergym_native.node', preload: 'papergym_preload.node' },
}, null, 2) + '\n');
fs.writeFileSync(path.join(pkg, 'README.md'), `# ${name}\n\nPrebuilt [papergym-native](https://www.npmjs.com/package/papergym-native) addon for ${platform}-${arch} with torch ${minor} (${what}), built against torch ${torchVersion}. ` +
  `It is selected at load time by papergym-native when the user's torch matches; do not depend on it directly.\n`);
EOF
bytes=$(stat -c %s "$PKG/papergym_native.node")
say "binary: $PKG/papergym_native.node ($(( bytes / 1024 )) KiB)"
node -e '
  const plan = { preload: process.argv[1] + "/papergym_preload.node", addon: process.argv[1] + "/papergym_native.node" };
  const p = require("./scripts/find-libtorch.cjs").findLibtorch();
  const libs = ["libc10.so", "libtorch_cpu.so", ...(process.argv[2] !== "cpu" ? ["libc10_cuda.so", "libtorch_cuda.so"] : []), "libtorch.so"].map((l) => p.libDir + "/" + l);
  require(plan.preload).preload(libs);
  const i = require(plan.addon).runtimeInfo();
  console.log(`[prebuild] test load: torch ${i.libtorchVersion}, CUDA build ${i.cudaBuild}, fused kernels ${i.fusedKernels}, CUDA available ${i.cudaAvailable}`);
' "$(cd "$PKG" && pwd)" "$VARIANT"

if [ -n "$PACK_DIR" ]; then
  mkdir -p "$PACK_DIR"
  PACK_DIR=$(cd "$PACK_DIR" && pwd)
  (cd "$PKG" && npm pack --silent --pack-destination "$PACK_DIR" >/dev/null)
  # The main package: the files `npm pack` would take, with optionalDependencies on every prebuilt
  # variant in package.json papergymPrebuilt (the repository's package.json cannot list unpublished
  # packages: npm ci would refuse its lock file).
  STAGE=$OUTDIR/main
  rm -rf "$STAGE" && mkdir -p "$STAGE"
  npm pack --dry-run --json 2>/dev/null | node -e '
    const fs = require("fs"), path = require("path");
    const [{ files }] = JSON.parse(fs.readFileSync(0, "utf8"));
    for (const f of files) { fs.mkdirSync(path.join(process.argv[1], path.dirname(f.path)), { recursive: true }); fs.copyFileSync(f.path, path.join(process.argv[1], f.path)); }
    const pj = JSON.parse(fs.readFileSync("package.json", "utf8"));
    const pp = pj.papergymPrebuilt;
    pj.optionalDependencies = Object.fromEntries(pp.platforms.flatMap((pl) => pp.torch.flatMap((t) => pp.variants.map((v) => [`@papergym-native/${pl}-torch${t}-${v}`, pj.version]))));
    fs.writeFileSync(path.join(process.argv[1], "package.json"), JSON.stringify(pj, null, 2) + "\n");
  ' "$STAGE"
  (cd "$STAGE" && npm pack --silent --pack-destination "$PACK_DIR" >/dev/null)
  say "tarballs in $PACK_DIR:"
  for f in "$PACK_DIR"/*.tgz; do say "  $(basename "$f") ($(( $(stat -c %s "$f") / 1024 )) KiB)"; done
fi
say "done"
