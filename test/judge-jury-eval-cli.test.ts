/**
 * `eval --judge jury --judges judges.yaml` end to end on a tiny Qwen3 with two loopback HTTP judges
 * that disagree in a known way (one always "Yes", one by a rule): the rows keep each member's
 * verdict, the summary and the report JSON carry the agreement — for a PaperGym file (today's
 * report) and for an imported benchmark (protocol path).
 */
import { expect } from 'chai';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { packageRoot } from '../lib/native.js';
import { loadModel } from '../lib/model/qwen3.js';
import { tinyModel } from './helpers/tiny.js';
import { cli, orSkip } from './helpers/run.js';
import { startFakeLlm, between, type FakeLlm } from './helpers/fake-llm.js';

const rule = (text: string) => text.length % 2 === 0;

describe('eval with a jury (tiny Qwen3, loopback judges)', function () {
  this.timeout(300000);
  let dir: string;
  let tmp: string;
  let yes: FakeLlm;
  let parity: FakeLlm;
  before(async function () {
    dir = await orSkip(this, async () => {
      const d = tinyModel('tiny-tied');
      (await loadModel(d)).dispose();
      return d;
    });
    tmp = mkdtempSync(join(tmpdir(), 'pg-jury-eval-'));
    yes = await startFakeLlm({ respond: () => 'Yes' });
    parity = await startFakeLlm({
      respond: (r) => (r.body.messages.at(-1)!.content.includes('<item>') && !rule(between(r.body.messages.at(-1)!.content, 'item')) ? 'No' : 'Yes'),
    });
    writeFileSync(
      join(tmp, 'judges.yaml'),
      `judges:\n  - {name: yes, kind: http, url: "${yes.url}", model: a, maxRetries: 0}\n  - {name: parity, kind: http, url: "${parity.url}", model: b, maxRetries: 0}\n`,
    );
  });
  after(async () => {
    await yes?.close();
    await parity?.close();
    if (tmp) rmSync(tmp, { recursive: true, force: true });
  });
  const args = () => ['--judge', 'jury', '--judges', join(tmp, 'judges.yaml'), '--max-new-tokens', '4', '--resamples', '50', '--progress', 'none'];

  it('a PaperGym file: rows keep members’ verdicts, the summary and the report show the agreement', async () => {
    const rows = join(tmp, 'rows.jsonl');
    const report = join(tmp, 'report.json');
    const r = await cli([
      'eval',
      '--model',
      dir,
      '--data',
      join(packageRoot, 'data', 'sample', 'papergym-sample.jsonl'),
      '--limit',
      '1',
      ...args(),
      '--out',
      rows,
      '--report',
      report,
    ]);
    expect(r.code, r.err).to.equal(0);
    const rs = readFileSync(rows, 'utf8')
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l));
    expect(rs.every((x) => x.judges && x.judges.yes === true && typeof x.judges.parity === 'boolean')).to.equal(true);
    const rep = JSON.parse(readFileSync(report, 'utf8'));
    expect(rep.agreement.overall.pairs[0]).to.deep.include({ a: 'yes', b: 'parity' });
    expect(rep.agreement.overall.pairs[0].kappa.value).to.be.closeTo(0, 1e-12);
    expect(r.out)
      .to.match(/judge agreement \(2 judges/)
      .and.match(/yes vs parity: agree/);
  });

  it('an imported benchmark (protocol path): the summary and the report carry the agreement', async () => {
    const items = join(tmp, 'hb.jsonl');
    expect((await cli(['import', '--format', 'healthbench', '--input', join(packageRoot, 'data', 'benchmarks', 'healthbench'), '--out', items])).code).to.equal(
      0,
    );
    const report = join(tmp, 'hb-report.json');
    const r = await cli(['eval', '--model', dir, '--data', items, ...args(), '--report', report]);
    expect(r.code, r.err).to.equal(0);
    const rep = JSON.parse(readFileSync(report, 'utf8'));
    expect(rep.agreement.judges).to.deep.equal(['yes', 'parity']);
    expect(r.out).to.match(/judge agreement \(2 judges/);
  });
});
