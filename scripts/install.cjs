#!/usr/bin/env node
// npm install hook. Without it npm would run `node-gyp rebuild` (binding.gyp exists); we prefer
// a matching prebuilt binary, else the cmake-js build (scripts/find-libtorch.cjs locates libtorch).
// A failed build does not fail `npm install` (the TypeScript parts work without the addon); it
// prints why, and `papergym-native doctor` / scripts/setup.sh say it again.
'use strict';
const { existsSync } = require('fs');
const { join } = require('path');
const { spawnSync } = require('child_process');

const root = join(__dirname, '..');
if (process.env.PAPERGYM_NATIVE_SKIP_BUILD) {
  console.log('papergym-native: PAPERGYM_NATIVE_SKIP_BUILD set, not building the addon');
  process.exit(0);
}
const variants = (process.env.PAPERGYM_NATIVE_VARIANT || 'cpu').split(',');
for (const v of variants) {
  const p = join(root, 'prebuilds', `${process.platform}-${process.arch}-${v}`, 'papergym_native.node');
  if (existsSync(p)) {
    console.log(`papergym-native: using prebuilt ${p}`);
    process.exit(0);
  }
}
const cmakeJs = join(root, 'node_modules', 'cmake-js', 'bin', 'cmake-js');
const r = spawnSync(process.execPath, [existsSync(cmakeJs) ? cmakeJs : require.resolve('cmake-js/bin/cmake-js'), 'compile', '--log-level', 'warn'], { cwd: root, stdio: 'inherit' });
if (r.status !== 0) {
  console.warn('\npapergym-native: the native addon was NOT built (see the error above). Install PyTorch ' +
    '(pip install torch==2.11.0) or set LIBTORCH=/path/to/libtorch, then run `npm run build:native`.\n');
}
process.exit(0);
