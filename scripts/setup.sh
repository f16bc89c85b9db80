#!/usr/bin/env bash
# Idempotent setup: libtorch provider + Python references (unless LIBTORCH is set), headless
# Chromium (as root, via apt), npm packages, TypeScript build, addon build. Safe to re-run; each step skips when already up to date.
set -euo pipefail
cd "$(dirname "$0")/.."
say() { printf '[setup] %s\n' "$*"; }

# The Python of the references and the model makers: $PYTHON, else the venv an earlier setup made
# (below: where python3 is externally managed), else python3. lib/util/python.ts and
# scripts/find-libtorch.cjs pick the same one, the venv once it holds .papergym-ready (its packages in).
CACHE_DIR="${PAPERGYM_NATIVE_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/papergym-native}"
PY_VENV="$CACHE_DIR/python"
if [ -n "${PYTHON:-}" ]; then
  PY=$PYTHON
elif [ -x "$PY_VENV/bin/python" ]; then
  PY="$PY_VENV/bin/python"
  say "python: $PY (the venv an earlier setup made)"
else
  PY=python3
fi
# PEP 668: a distribution's python3 (Debian 12, Ubuntu 24.04) refuses pip installs outside a venv.
externally_managed() {
  [ -z "${PIP_BREAK_SYSTEM_PACKAGES:-}" ] && "$1" -c 'import os, sys, sysconfig
sys.exit(0 if sys.prefix == sys.base_prefix and os.path.exists(os.path.join(sysconfig.get_path("stdlib"), "EXTERNALLY-MANAGED")) else 1)' 2>/dev/null
}
if [ -z "${LIBTORCH:-}" ]; then
  if "$PY" - <<'PYEOF' 2>/dev/null
import importlib.metadata as m, sys
want = {}
for line in open("scripts/requirements.txt"):
    line = line.split("#")[0].strip()
    if line:
        n, v = line.split("==")
        want[n] = v
ok = all(m.version(n).split("+")[0] == v for n, v in want.items())
sys.exit(0 if ok else 1)
PYEOF
  then
    say "python packages already at the pinned versions"
  else
    if [ -n "${PYTHON:-}" ] && externally_managed "$PY"; then
      say "PYTHON=$PYTHON is externally managed (PEP 668) and refuses pip installs: point PYTHON at a venv's python, or unset it and setup makes a venv ($PY_VENV)"
      exit 1
    elif externally_managed "$PY"; then
      say "$PY is externally managed (PEP 668): the Python packages go into their own venv, $PY_VENV"
      if ! "$PY" -m venv --help >/dev/null 2>&1 && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
        say "apt-get install python3-venv"
        DEBIAN_FRONTEND=noninteractive apt-get install -y -q python3-venv >/dev/null 2>&1 ||
          { apt-get update -q >/dev/null 2>&1 && DEBIAN_FRONTEND=noninteractive apt-get install -y -q python3-venv >/dev/null 2>&1; } || true
      fi
      "$PY" -m venv "$PY_VENV" || { say "cannot make a venv with $PY (install python3-venv, or set PYTHON to a Python with pip)"; exit 1; }
      PY="$PY_VENV/bin/python"
    fi
    say "pip install -r scripts/requirements.txt (torch 2.11.0 + reference libraries) into $PY"
    "$PY" -m pip install --disable-pip-version-check -q -r scripts/requirements.txt
  fi
  # The package uses setup's venv only once its packages are in (a pip stopped halfway leaves none).
  if [ "$PY" = "$PY_VENV/bin/python" ]; then touch "$PY_VENV/.papergym-ready"; fi
else
  say "LIBTORCH=$LIBTORCH: not installing torch (live parity tests need python3 with transformers/peft/trl)"
fi

# Headless Chromium for the report's browser test (test/report.test.ts skips without it). Only as
# root with apt-get, only when no Chromium is on PATH; never fails the setup.
if command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1 || command -v google-chrome >/dev/null 2>&1; then
  say "chromium already installed"
elif [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then
  say "apt-get install chromium (headless browser for the report test)"
  if ! { DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends chromium >/dev/null 2>&1 ||
         { apt-get update -qq >/dev/null 2>&1 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends chromium >/dev/null 2>&1; }; }; then
    say "could not install chromium; the report browser test will skip"
  fi
else
  say "no chromium and cannot apt-get it (not root or no apt); the report browser test will skip"
fi

# Data parallelism (native/parallel) compiles against libtorch's c10d Gloo, whose headers include the
# gloo headers the torch wheel does not ship: Debian/Ubuntu libgloo-dev provides them (headers only;
# libgloo is never linked). Installed when root with apt; otherwise the addon builds without dist.
# Before npm ci: its install hook (scripts/install.cjs) builds the addon, and CMake looks for the
# headers when it configures.
if [ -f /usr/include/gloo/algorithm.h ] || [ -n "${GLOO_INCLUDE_DIR:-}" ]; then
  say "gloo headers present"
elif [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  say "apt-get install libgloo-dev (gloo headers for data-parallel training)"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q libgloo-dev >/dev/null || { apt-get update -q >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -q libgloo-dev >/dev/null; } || say "libgloo-dev not installable: building without data parallelism"
else
  say "no gloo headers (install libgloo-dev as root, or set GLOO_INCLUDE_DIR): building without data parallelism"
fi

# MLflow (server + client for test/trackers.test.ts) in its own venv: it pins pyarrow<26.
MLFLOW_VENV="$CACHE_DIR/mlflow-venv"
MLFLOW_WANT=$(sed -n 's/^mlflow==//p' scripts/requirements-mlflow.txt)
if [ "$("$MLFLOW_VENV/bin/python" -c 'import importlib.metadata as m; print(m.version("mlflow"))' 2>/dev/null)" = "$MLFLOW_WANT" ]; then
  say "mlflow $MLFLOW_WANT venv present ($MLFLOW_VENV)"
else
  say "mlflow $MLFLOW_WANT into its own venv $MLFLOW_VENV (about 10 min)"
  { "$PY" -m venv "$MLFLOW_VENV" && "$MLFLOW_VENV/bin/python" -m pip install --disable-pip-version-check -q -r scripts/requirements-mlflow.txt; } \
    || say "mlflow venv not installed: the MLflow part of test/trackers.test.ts will skip"
fi

# Node's own headers, so a source build of the addon (cmake-js) finds them offline.
NODE_PREFIX=$(dirname "$(dirname "$(command -v node)")")
if [ -z "${npm_config_nodedir:-}" ] && [ -f "$NODE_PREFIX/include/node/node.h" ]; then
  export npm_config_nodedir="$NODE_PREFIX"
fi

LOCK_HASH=$(sha256sum package-lock.json | cut -d' ' -f1)
if [ -f node_modules/.pg-lock-hash ] && [ "$(cat node_modules/.pg-lock-hash)" = "$LOCK_HASH" ]; then
  say "node_modules up to date"
else
  say "npm ci"
  npm ci --no-audit --no-fund
  echo "$LOCK_HASH" > node_modules/.pg-lock-hash
fi

# Lint toolchain (npm run lint): ESLint + Prettier from tools/lint/ (own lock file), clang-format from
# Debian (as root with apt; otherwise npm run lint says what is missing). Never fails the setup.
LINT_HASH=$(sha256sum tools/lint/package-lock.json | cut -d' ' -f1)
if [ -f tools/lint/node_modules/.pg-lock-hash ] && [ "$(cat tools/lint/node_modules/.pg-lock-hash)" = "$LINT_HASH" ]; then
  say "lint toolchain up to date"
else
  say "npm ci --prefix tools/lint (ESLint, Prettier)"
  npm ci --prefix tools/lint --no-audit --no-fund >/dev/null && echo "$LINT_HASH" > tools/lint/node_modules/.pg-lock-hash || say "lint toolchain not installed"
fi
if ! command -v clang-format >/dev/null 2>&1 && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  say "apt-get install clang-format (npm run lint)"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q clang-format >/dev/null 2>&1 ||
    { apt-get update -q >/dev/null 2>&1 && DEBIAN_FRONTEND=noninteractive apt-get install -y -q clang-format >/dev/null 2>&1; } || say "clang-format not installable"
fi

say "TypeScript build"
npx tsc -p tsconfig.json
chmod +x dist/bin/papergym-native.js

# A build configured before the gloo headers were there (an earlier run without them) keeps
# "not found" in its CMake cache until it is configured again.
if { [ -f /usr/include/gloo/algorithm.h ] || [ -n "${GLOO_INCLUDE_DIR:-}" ]; } && [ -f build/CMakeCache.txt ] &&
   grep -q '^PG_GLOO_INCLUDE:PATH=.*NOTFOUND' build/CMakeCache.txt; then
  say "gloo headers found since the last configure: configuring the addon again"
  npx cmake-js configure --log-level warn
fi

say "addon build (cmake-js; libtorch from $(node scripts/find-libtorch.cjs source))"
npx cmake-js compile --log-level warn
node dist/bin/papergym-native.js doctor
say "done"
