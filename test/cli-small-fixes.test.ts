/**
 * Small CLI behaviours of issue 37: `build-data --dry-run` needs no `--out`; `leakage` keeps its
 * cache in the per-user cache dir, not beside the dataset.
 */
import { expect } from 'chai';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { leakageStatePath } from '../bin/commands/leakage.js';
import { userCacheDir } from '../lib/util/cache.js';
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
