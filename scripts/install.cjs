#!/usr/bin/env node
// npm install hook. Without it npm would run `node-gyp rebuild` (binding.gyp exists).
// 1. Runs the loader's selection (lib/native.ts selectAddon: local build, then the prebuilt
//    packages @papergym-native/<platform>-<arch>-torch<minor>-<variant>, each test-loaded in a
//    child process). When one passes, nothing is compiled.
// 2. Only when none passes: one message saying what was looked for, then the cmake-js source build
//    (scripts/find-libtorch.cjs locates libtorch). In an installed package (under node_modules) the
//    build's intermediates — the precompiled header alone is ~500 MB — are removed afterwards;
//    only build/Release/*.node stay.
// A failed build does not fail `npm install` (the TypeScript parts work without the addon); it
// prints why, and `papergym-native doctor` says it again. Installing with --ignore-scripts skips
// this hook: the same selection then happens at load time.
'use strict';
const { existsSync, readdirSync, rmSync } = require('fs');
const { join, sep } = require('path');
const { spawnSync } = require('child_process');
const { pathToFileURL } = require('url');

const root = join(__dirname, '..');
const installed = root.split(sep).includes('node_modules');

/** Removes everything under `build/` except Release/*.node (the PCH, objects, CMake files). */
function pruneBuild(build = join(root, 'build')) {
  if (!existsSync(build)) return;
  for (const e of readdirSync(build)) if (e !== 'Release') rmSync(join(build, e), { recursive: true, force: true });
  const rel = join(build, 'Release');
  if (existsSync(rel)) for (const e of readdirSync(rel)) if (!e.endsWith('.node')) rmSync(join(rel, e), { recursive: true, force: true });
}

async function main() {
  if (process.env.PAPERGYM_NATIVE_SKIP_BUILD) {
    console.log('papergym-native: PAPERGYM_NATIVE_SKIP_BUILD set, not building the addon');
    return;
  }
  const entry = join(root, 'dist', 'lib', 'native.js');
  if (existsSync(entry)) {
    // A clone before its TypeScript build has no dist/: it always builds from source.
    let loader;
    let sel;
    try {
      loader = await import(pathToFileURL(entry).href);
      sel = loader.selectAddon();
    } catch (e) {
      console.warn(`papergym-native: addon selection failed (${e.message}); building from source`);
    }
    if (sel && sel.chosen) {
      console.log(
        `papergym-native: using ${sel.chosen.name === 'local build' ? 'the local build' : 'prebuilt ' + sel.chosen.name} ` +
          `(${sel.chosen.path}; ${sel.chosen.reason}); nothing to compile`,
      );
      return;
    }
    if (sel) console.log(`${loader.selectionFailure(sel).split('\nInstall the matching')[0]}\npapergym-native: building from source (cmake-js)`);
  }
  const cmakeJs = join(root, 'node_modules', 'cmake-js', 'bin', 'cmake-js');
  const r = spawnSync(process.execPath, [existsSync(cmakeJs) ? cmakeJs : require.resolve('cmake-js/bin/cmake-js'), 'compile', '--log-level', 'warn'], {
    cwd: root,
    stdio: 'inherit',
  });
  if (installed) pruneBuild();
  if (r.status !== 0) {
    if (installed) rmSync(join(root, 'build'), { recursive: true, force: true });
    console.warn(
      '\npapergym-native: the native addon was NOT built (see the error above). Install PyTorch ' +
        '(pip install torch==2.11.0) or set LIBTORCH=/path/to/libtorch, then run `npm rebuild papergym-native`.\n',
    );
  }
}

module.exports = { pruneBuild };

if (require.main === module) {
  main().then(
    () => process.exit(0),
    (e) => {
      console.warn(`papergym-native: install hook: ${e && e.message}`);
      process.exit(0);
    },
  );
}
