/**
 * Issue 56 item 3: the run-time settings that may change on --resume really can — a tracker
 * (`--report-to`) added on resume logs the resumed steps — and docs/config.md's list is generated
 * from the same rule (lib/config/train.ts resumableKeys) that applyResumeFlags enforces.
 */
import { expect } from 'chai';
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import '../lib/train/stages/index.js';
import '../lib/judge/backends/index.js';
import { runTraining } from '../lib/train/run.js';
import { resumableKeys, type TrainConfig } from '../lib/config/train.js';
import { trainSettings } from '../lib/config/settings.js';
import { renderConfigDocs } from '../lib/config/docs.js';

function flags(out: string, steps: number): Partial<TrainConfig> {
  return {
    out,
    seed: 3,
    stages: ['opsd'],
    sampling: { maxNewTokens: 4 } as TrainConfig['sampling'],
    opsd: { steps, batchSize: 1, microBatch: 1 } as TrainConfig['opsd'],
    validation: { validateEvery: 0 } as TrainConfig['validation'],
    checkpoint: { every: 1 },
  };
}

describe('resume: run-time settings may change (issue 56)', function () {
  this.timeout(300_000);
  let tmp = '';
  before(() => (tmp = mkdtempSync(join(tmpdir(), 'pg-resume-rt-'))));
  after(() => rmSync(tmp, { recursive: true, force: true }));

  it('the list in docs/config.md is the rule --resume enforces, and names --report-to', () => {
    const md = renderConfigDocs();
    const para = md.slice(md.indexOf('With `--resume`, only these may change'), md.indexOf('\n\n', md.indexOf('With `--resume`')));
    const flagOf = (k: string) => trainSettings().find((s) => s.key === k)?.flag ?? k;
    for (const k of resumableKeys()) expect(para, k).to.include(`\`--${flagOf(k)}\``);
    expect(resumableKeys()).to.include.members(['log.reportTo', 'judge.url', 'opsd.steps', 'grpo.steps', 'device']);
    expect(resumableKeys()).to.not.include.members(['lora.r', 'grpo.lr', 'seed']);
  });

  it('a tracker added on --resume logs the resumed steps; a learning setting still cannot change', async () => {
    const out = join(tmp, 'run');
    const logs: string[] = [];
    const log = (l: string) => logs.push(l);
    await runTraining({ flags: flags(out, 1), log, handleSignals: false });
    expect(existsSync(join(out, 'tensorboard'))).to.equal(false);
    // A learning setting is refused, naming the flag; nothing of the run is touched.
    await runTraining({ resume: out, flags: { lora: { r: 4 } } as never, log, handleSignals: false }).then(
      () => expect.fail('lora.r must not change on resume'),
      (e: Error) => expect(e.message).to.match(/--lora-r cannot change when resuming/),
    );
    await runTraining({ resume: out, flags: { opsd: { steps: 2 }, log: { reportTo: ['tensorboard'] } } as never, log, handleSignals: false });
    expect(logs).to.include('--report-to: tensorboard started');
    const ev = readdirSync(join(out, 'tensorboard')).filter((f) => f.startsWith('events.out.tfevents.'));
    expect(ev).to.have.length(1);
    // The event file holds the resumed step's row (its tag names appear in the records).
    expect(readFileSync(join(out, 'tensorboard', ev[0]!)).includes(Buffer.from('opsd/'))).to.equal(true);
    const cfg = JSON.parse(readFileSync(join(out, 'config.json'), 'utf8')) as { config?: TrainConfig } & TrainConfig;
    expect((cfg.config ?? cfg).log.reportTo).to.deep.equal(['tensorboard']);
  });
});
