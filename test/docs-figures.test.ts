/**
 * Issue 56 item 5: the figures and transcripts of README.md and docs/ between `gen:` markers are
 * what the commands print now (scripts/docs-figures.mjs). This runs the quick generators (package
 * and dependency sizes, the CPU addon, the shipped-data transcripts); CI's CPU job runs every one
 * (`node scripts/docs-figures.mjs --check`: the default train run and the served-judge transcript).
 */
import { expect } from 'chai';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { packageRoot } from '../lib/native.js';

const SCRIPT = join(packageRoot, 'scripts', 'docs-figures.mjs');
const run = (args: string[]) => spawnSync(process.execPath, [SCRIPT, ...args], { cwd: packageRoot, encoding: 'utf8', maxBuffer: 64 << 20 });

describe('docs figures and transcripts (issue 56)', function () {
  this.timeout(240_000);
  let tmp = '';
  before(() => (tmp = mkdtempSync(join(tmpdir(), 'pg-docs-fig-'))));
  after(() => rmSync(tmp, { recursive: true, force: true }));

  it('README and docs/ hold what the commands print (sizes, shipped-data transcripts)', () => {
    const r = run(['--check', '--only', 'package,cpu-addon,deps,subset-sample,eval-import']);
    expect(r.status, r.stdout + r.stderr).to.equal(0);
    expect(r.stdout).to.match(/every region current/);
  });

  it('a drifted figure or transcript fails, naming the doc and the region', () => {
    const doc = join(tmp, 'doc.md');
    writeFileSync(
      doc,
      'The package: <!-- gen:package -->559 files, 0.95 MB packed, 3.56 MB unpacked<!-- /gen:package -->.\n<!-- gen:subset-sample -->\n```console\n$ old transcript\n```\n<!-- /gen:subset-sample -->\n',
    );
    const r = run(['--check', '--docs', doc]);
    expect(r.status).to.equal(1);
    expect(r.stdout).to.include(`${doc}: gen:package`).and.include(`${doc}: gen:subset-sample`);
    // --write makes it current; the check then passes.
    expect(run(['--write', '--docs', doc]).status).to.equal(0);
    expect(readFileSync(doc, 'utf8')).to.match(/subset: 2 subset\(s\) of 8 item\(s\) \(seed 1\)/);
    const again = run(['--check', '--docs', doc]);
    expect(again.status, again.stdout).to.equal(0);
  });
});
