/**
 * `papergym-native judge-agreement` end to end: two loopback HTTP judges (one always "Yes", one
 * answering by a known rule) over the sample items; the printed / written figures equal the ones
 * derived from the rule (one judge always "yes" → κ = 0 exactly), labels give precision / recall /
 * F1, and a labels file naming an unknown rubric item is a clear error naming the file and line.
 */
import { expect } from 'chai';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { packageRoot } from '../lib/native.js';
import { readDataset } from '../lib/data/schema.js';
import { startFakeLlm, between, type FakeLlm } from './helpers/fake-llm.js';
import { cli } from './helpers/run.js';

const DATA = join(packageRoot, 'data', 'sample', 'papergym-sample.jsonl');
/** The second judge's rule: "Yes" when the item text has an even length. */
const rule = (text: string) => text.length % 2 === 0;

describe('judge-agreement CLI (loopback judges)', function () {
  this.timeout(120000);
  let dir: string;
  let yes: FakeLlm;
  let parity: FakeLlm;
  before(async () => {
    dir = mkdtempSync(join(tmpdir(), 'pg-agree-'));
    yes = await startFakeLlm({ respond: () => 'Yes' });
    parity = await startFakeLlm({ respond: (r) => (rule(between(r.body.messages.at(-1)!.content, 'item')) ? 'Yes' : 'No') });
  });
  after(async () => {
    await yes.close();
    await parity.close();
    rmSync(dir, { recursive: true, force: true });
  });

  it('prints and writes agreement, κ, Fleiss and label figures equal to the known rule', async () => {
    const items = readDataset(DATA).items.slice(0, 2);
    writeFileSync(
      join(dir, 'plans.jsonl'),
      items.map((it) => JSON.stringify({ questionId: it.id, sample: 0, plan: `A plan for ${it.id}.` })).join('\n') + '\n',
    );
    writeFileSync(
      join(dir, 'judges.yaml'),
      `judges:\n  - {name: yes, kind: http, url: "${yes.url}", model: a, maxRetries: 0}\n  - {name: parity, kind: http, url: "${parity.url}", model: b, maxRetries: 0}\n`,
    );
    // Labels: the rule on the first question's items.
    writeFileSync(
      join(dir, 'labels.jsonl'),
      items[0].rubric.map((r) => JSON.stringify({ questionId: items[0].id, itemId: r.id, label: rule(r.text) })).join('\n') + '\n',
    );
    const out = join(dir, 'report.json');
    const r = await cli([
      'judge-agreement',
      '--data',
      DATA,
      '--plans',
      join(dir, 'plans.jsonl'),
      '--judges',
      join(dir, 'judges.yaml'),
      '--labels',
      join(dir, 'labels.jsonl'),
      '--out',
      out,
      '--resamples',
      '200',
    ]);
    expect(r.code, r.err).to.equal(0);
    const all = items.flatMap((it) => it.rubric);
    const share = all.filter((x) => rule(x.text)).length / all.length;
    const rep = JSON.parse(readFileSync(out, 'utf8'));
    const pair = rep.agreement.overall.pairs[0];
    expect([pair.a, pair.b]).to.deep.equal(['yes', 'parity']);
    expect(pair.agreement.value).to.be.closeTo(share, 1e-12);
    expect(pair.kappa.value).to.be.closeTo(0, 1e-12);
    expect(rep.agreement.overall.units).to.equal(all.length);
    expect(Object.keys(rep.agreement.byDimension).sort()).to.deep.equal(['experimental_design', 'method_innovation']);
    const [ly, lp] = rep.agreement.overall.labels;
    expect(lp).to.deep.include({ judge: 'parity' });
    expect(lp.precision.value).to.equal(1);
    expect(lp.recall.value).to.equal(1);
    expect(lp.f1.value).to.equal(1);
    const labelledShare = items[0].rubric.filter((x) => rule(x.text)).length / items[0].rubric.length;
    expect(ly.precision.value).to.be.closeTo(labelledShare, 1e-12);
    expect(rep.memberHealth.yes).to.deep.include({ verdicts: all.length, nulls: 0 });
    expect(r.out)
      .to.match(/yes vs parity: agree 0\.\d{3} \[/)
      .and.match(/Cohen κ 0\.000/)
      .and.match(/parity vs labels: agree 1\.000/);
  });

  it('an empty or blank labels file is named in a warning (no labels), not taken silently', async () => {
    for (const [name, text] of [
      ['empty-labels.jsonl', ''],
      ['blank-labels.jsonl', '\n  \n'],
    ] as const) {
      writeFileSync(join(dir, name), text);
      const r = await cli([
        'judge-agreement',
        '--data',
        DATA,
        '--plans',
        join(dir, 'plans.jsonl'),
        '--judges',
        join(dir, 'judges.yaml'),
        '--labels',
        join(dir, name),
      ]);
      expect(r.code, r.err).to.equal(0);
      expect(r.err).to.include(`warning: labels file ${join(dir, name)} has no labels`);
      expect(r.out).to.not.match(/vs labels/);
    }
  });

  it('a labels file naming an unknown rubric item or plan is a clear error (file and line)', async () => {
    writeFileSync(join(dir, 'bad-labels.jsonl'), JSON.stringify({ questionId: readDataset(DATA).items[0].id, itemId: 'no-such-item', label: true }) + '\n');
    const r = await cli([
      'judge-agreement',
      '--data',
      DATA,
      '--plans',
      join(dir, 'plans.jsonl'),
      '--judges',
      join(dir, 'judges.yaml'),
      '--labels',
      join(dir, 'bad-labels.jsonl'),
    ]);
    expect(r.code).to.not.equal(0);
    expect(r.err).to.match(/bad-labels\.jsonl: line 1: itemId "no-such-item" is not a rubric item of /);
    writeFileSync(join(dir, 'bad-plan.jsonl'), JSON.stringify({ questionId: 'nope', itemId: 'x', label: true }) + '\n');
    const r2 = await cli([
      'judge-agreement',
      '--data',
      DATA,
      '--plans',
      join(dir, 'plans.jsonl'),
      '--judges',
      join(dir, 'judges.yaml'),
      '--labels',
      join(dir, 'bad-plan.jsonl'),
    ]);
    expect(r2.err).to.match(/bad-plan\.jsonl: line 1: plan "nope#0" is not in --plans/);
  });
});
