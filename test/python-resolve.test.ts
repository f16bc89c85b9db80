/**
 * The Python the package runs (model makers, reference scripts, the libtorch finder): `$PYTHON`,
 * else the venv scripts/setup.sh makes where python3 is externally managed (PEP 668), else python3
 * — one rule in lib/util/python.ts and scripts/find-libtorch.cjs.
 */
import { expect } from 'chai';
import { spawnSync } from 'node:child_process';
import { chmodSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { packageRoot } from '../lib/native.js';
import { resolvePython } from '../lib/util/python.js';

describe("the package's Python: $PYTHON, else setup's venv, else python3", () => {
  let tmp = '';
  before(() => (tmp = mkdtempSync(join(tmpdir(), 'pg-python-'))));
  after(() => rmSync(tmp, { recursive: true, force: true }));

  it('resolvePython: $PYTHON wins; the venv when the cache dir holds one whose packages are in; python3 otherwise', () => {
    const cache = join(tmp, 'cache');
    expect(resolvePython({ PAPERGYM_NATIVE_CACHE_DIR: cache })).to.equal('python3');
    mkdirSync(join(cache, 'python', 'bin'), { recursive: true });
    writeFileSync(join(cache, 'python', 'bin', 'python'), '');
    // A venv whose pip install stopped halfway (no .papergym-ready) is not used.
    expect(resolvePython({ PAPERGYM_NATIVE_CACHE_DIR: cache })).to.equal('python3');
    writeFileSync(join(cache, 'python', '.papergym-ready'), '');
    expect(resolvePython({ PAPERGYM_NATIVE_CACHE_DIR: cache })).to.equal(join(cache, 'python', 'bin', 'python'));
    expect(resolvePython({ PAPERGYM_NATIVE_CACHE_DIR: cache, PYTHON: '/opt/py/bin/python3' })).to.equal('/opt/py/bin/python3');
    // XDG_CACHE_HOME is the cache root's parent when PAPERGYM_NATIVE_CACHE_DIR is unset.
    const xdg = join(tmp, 'xdg');
    mkdirSync(join(xdg, 'papergym-native', 'python', 'bin'), { recursive: true });
    writeFileSync(join(xdg, 'papergym-native', 'python', 'bin', 'python'), '');
    writeFileSync(join(xdg, 'papergym-native', 'python', '.papergym-ready'), '');
    expect(resolvePython({ XDG_CACHE_HOME: xdg })).to.equal(join(xdg, 'papergym-native', 'python', 'bin', 'python'));
  });

  it("scripts/find-libtorch.cjs asks the same Python: setup's venv when $PYTHON is unset", () => {
    const cache = join(tmp, 'cache2');
    const py = join(cache, 'python', 'bin', 'python');
    mkdirSync(join(cache, 'python', 'bin'), { recursive: true });
    // A venv python without torch: the finder names it in its error.
    writeFileSync(py, '#!/bin/sh\necho \'{"root": null}\'\n');
    chmodSync(py, 0o755);
    writeFileSync(join(cache, 'python', '.papergym-ready'), '');
    const env: NodeJS.ProcessEnv = { ...process.env, PAPERGYM_NATIVE_CACHE_DIR: cache };
    delete env.PYTHON;
    delete env.LIBTORCH;
    const r = spawnSync(
      process.execPath,
      [
        '-e',
        `try { require(${JSON.stringify(join(packageRoot, 'scripts', 'find-libtorch.cjs'))}).findLibtorch(); console.log('found') } catch (e) { console.log(e.message) }`,
      ],
      {
        env,
        encoding: 'utf8',
      },
    );
    expect(r.stdout).to.include(`\`${py}\` has no torch package`);
  });
});
