/**
 * Small CLI behaviours of issue 37: `build-data --dry-run` needs no `--out`; `leakage` keeps its
 * cache in the per-user cache dir, not beside the dataset; `npx mocha FILE` runs only FILE.
 */
import { expect } from 'chai';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { leakageStatePath } from '../bin/commands/leakage.js';
import { userCacheDir } from '../lib/util/cache.js';
import { packageRoot } from '../lib/native.js';
import { cli } from './helpers/run.js';
import { writeTinyPaper } from './helpers/tiny-papers.js';

describe('CLI fixes: build-data --dry-run without --out, leakage cache location', function () {
  this.timeout(60000);
  let tmp = '';
  before(() => (tmp = mkdtempSync(join(tmpdir(), 'pg-cli-fixes-'))));
  after(() => rmSync(tmp, { recursive: true, force: true }));

  it('build-data --dry-run runs without --out; without --dry-run --out is still required', async () => {
    writeTinyPaper(join(tmp, 'papers'), 'physics-tails', 'quark tails');
    const dry = await cli(['build-data', '--papers', join(tmp, 'papers'), '--dry-run']);
    expect(dry.code, dry.err).to.equal(0);
    expect(dry.out).to.match(/1 ingested, 0 failed/);
    const real = await cli(['build-data', '--papers', join(tmp, 'papers'), '--llm', 'http://127.0.0.1:9/v1', '--model', 'm']);
    expect(real.code).to.not.equal(0);
    expect(real.err).to.match(/Missing required argument: out/);
  });

  it('npx mocha FILE runs only FILE (the default spec lives in npm test, not .mocharc.json)', () => {
    const mocha = join(packageRoot, 'node_modules', 'mocha', 'bin', 'mocha.js');
    const r = spawnSync(process.execPath, [mocha, '--dry-run', '--reporter', 'json', 'dist/test/sqlite.test.js'], {
      cwd: packageRoot,
      encoding: 'utf8',
      maxBuffer: 64 << 20,
    });
    expect(r.status, r.stderr).to.equal(0);
    const j = JSON.parse(r.stdout) as { tests: { file: string }[] };
    expect(j.tests.length).to.be.greaterThan(3);
    expect([...new Set(j.tests.map((t) => t.file.split('/').pop()))]).to.deep.equal(['sqlite.test.js']);
  });

  it('leakage: the default cache is in the per-user cache dir, keyed by the dataset path; --state wins', () => {
    const data = join(tmp, 'bench.jsonl');
    const p = leakageStatePath({ data, state: undefined } as never);
    expect(p.startsWith(join(userCacheDir(), 'leakage') + '/')).to.equal(true);
    expect(p.startsWith(tmp)).to.equal(false);
    expect(leakageStatePath({ data: resolve(data), state: undefined } as never)).to.equal(p);
    expect(leakageStatePath({ data: join(tmp, 'other.jsonl'), state: undefined } as never)).to.not.equal(p);
    expect(leakageStatePath({ data, state: join(tmp, 's.sqlite') } as never)).to.equal(join(tmp, 's.sqlite'));
  });
});
