/**
 * `leakage` over imported datasets of every format (chat prompts folded to text), several
 * datasets as one table row each, and judges that mostly fail: `leakage` and `probe-judge` exit 1
 * with the reason instead of printing `n/a` / `0.000` (issue 38 item 5).
 */
import { expect } from 'chai';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { packageRoot } from '../lib/native.js';
import { runLeakage } from '../bin/commands/leakage.js';
import { FORMATS } from '../lib/eval/formats/index.js';
import { sampleDatasetPath } from '../lib/data/schema.js';
import { cli } from './helpers/run.js';
import { startFakeLlm, type FakeLlm } from './helpers/fake-llm.js';

const FX = join(packageRoot, 'data', 'benchmarks');
const INPUT: Record<string, string> = {
  researchqa: join(FX, 'researchqa'),
  'research-plan-gen': join(FX, 'research-plan-gen'),
  healthbench: join(FX, 'healthbench'),
  rubrichub: join(FX, 'rubrichub'),
  rar: join(FX, 'rar'),
  papergym: sampleDatasetPath(),
};

describe('leakage of imported datasets', function () {
  this.timeout(120000);
  let tmp: string;
  let srv: FakeLlm | undefined;
  const files: Record<string, string> = {};
  before(async () => {
    tmp = mkdtempSync(join(tmpdir(), 'pg-leak-'));
    for (const f of FORMATS.names()) {
      files[f] = join(tmp, `${f}.jsonl`);
      const r = await cli(['import', '--format', f, '--input', INPUT[f]!, '--out', files[f]!]);
      expect(r.code, r.err).to.equal(0);
    }
  });
  afterEach(async () => {
    await srv?.close();
    srv = undefined;
  });
  after(() => rmSync(tmp, { recursive: true, force: true }));

  it('every format: the judge sees the folded chat prompt; rows for every rubric item', async () => {
    srv = await startFakeLlm({ respond: () => ({ inferable: false, reason: 'not stated' }) });
    for (const f of FORMATS.names()) {
      const rep = await runLeakage({ data: files[f]!, llm: srv.url, model: 'judge', state: join(tmp, `${f}.sqlite`), progress: 'none' });
      expect(rep.rows.length, f).to.be.above(0);
      expect(rep.judge!.failed, f).to.equal(0);
      expect(rep.judge!.overall.rate, f).to.equal(0);
    }
    const multi = srv.log.find((e) => JSON.stringify(e.body.messages).includes('assistant: It depends on your health'));
    expect(multi, 'HealthBench multi-turn prompt folded to text').to.not.equal(undefined);
  });

  it('several datasets give one table row each', async () => {
    const r = await cli(['leakage', '--data', files.healthbench!, files.rar!, files.papergym!]);
    expect(r.code, r.err).to.equal(0);
    const lines = r.out.trim().split('\n');
    expect(lines[0]).to.match(/^\| dataset +\| items \| rubric items \| judge leakage \| lexical/);
    expect(lines.slice(2).map((l) => l.split('|')[1]!.trim())).to.deep.equal([files.healthbench, files.rar, files.papergym]);
    expect(lines[2]).to.match(/\| 2 +\| 5 +\| — /);
  });

  it('a judge whose calls mostly fail: exit 1 with the reason, no rate printed', async () => {
    srv = await startFakeLlm({ fault: () => ({ kind: 'status', status: 400, body: '{"error":"bad model"}' }) });
    const r = await cli([
      'leakage',
      '--data',
      files.rar!,
      '--llm',
      srv.url,
      '--model',
      'judge',
      '--state',
      join(tmp, 'fail.sqlite'),
      '--progress',
      'none',
      '--judge-concurrency',
      '2',
    ]);
    expect(r.code).to.equal(1);
    expect(r.err).to.match(/leakage: .*rar\.jsonl: 6 of 6 judge calls failed \(100% > 50%\); no leakage rate reported/);
    expect(r.out).to.not.match(/judge leakage overall/);
  });

  it('probe-judge with a judge answering garbage: exit 1 with the reason, no false-positive rate', async () => {
    srv = await startFakeLlm({ respond: (q) => (q.body.messages[0]!.content.startsWith('Reply with the single word') ? 'Yes' : 'banana') });
    const r = await cli([
      'probe-judge',
      '--data',
      sampleDatasetPath(),
      '--limit',
      '1',
      '--attacks',
      'empty',
      '--judge',
      'http',
      '--judge-url',
      srv.url,
      '--judge-model',
      'fake',
    ]);
    expect(r.code).to.equal(1);
    expect(r.err).to.match(/probe-judge: 10 of 10 verdicts are null \(100% > 50%.*no false-positive rate reported/);
    expect(r.out).to.not.match(/FPR/);
  });
});
