/**
 * A new experiment tracker is one descriptor file (lib/train/trackers/NAME.ts) and one registry line
 * (`TRACKERS.register(…)` in lib/train/trackers/index.ts), with no other edit (docs/design.md §9):
 * this test writes such a tracker — `csv`, every metrics row as one line of `<run>/metrics.csv`,
 * written with the RFC 4180 quoting rule — registers it with one line, and finds it in the
 * `--report-to` choices, the value check, `parseReportTo` and a real tiny training run, whose
 * metrics.jsonl it matches row by row.
 */
import { expect } from 'chai';
import { appendFileSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { checkValue } from '../lib/config/schema.js';
import { trainSettings } from '../lib/config/settings.js';
import type { TrainConfig } from '../lib/config/train.js';
import { runTraining } from '../lib/train/run.js';
import { parseReportTo, TRACKERS, type TrackerKind } from '../lib/train/trackers/index.js';

// ---- the new file: lib/train/trackers/csv.ts ----
/** RFC 4180 §2: a field with a comma, quote or line break is quoted, its quotes doubled. */
const csvField = (s: string) => (/[",\r\n]/.test(s) ? `"${s.replace(/"/g, '""')}"` : s);
const csvTracker: TrackerKind = {
  name: 'csv',
  describe: '<run>/metrics.csv: one line per metrics row (step, wall time ms, key, value)',
  open: async (s) => {
    const path = join(s.runDir, 'metrics.csv');
    writeFileSync(path, 'step,wall_time_ms,key,value\n');
    return {
      name: 'csv',
      logMetrics(step, scalars, wall) {
        appendFileSync(
          path,
          Object.entries(scalars)
            .map(([k, v]) => `${step},${wall},${csvField(k)},${v}\n`)
            .join(''),
        );
      },
      logArtifacts: () => undefined,
      finish: () => undefined,
    };
  },
};
// ---- end of the new file ----

describe('a new tracker: one file and one registry line', function () {
  this.timeout(300_000);
  let tmp = '';
  before(() => {
    tmp = mkdtempSync(join(tmpdir(), 'pg-tracker-reg-'));
    // ---- the registry line ----
    TRACKERS.register(csvTracker);
  });
  after(() => {
    TRACKERS.unregister('csv');
    rmSync(tmp, { recursive: true, force: true });
  });

  it('joins the --report-to choices, the value check and parseReportTo (all includes it; unknown names still refused)', () => {
    const row = trainSettings().find((s) => s.key === 'log.reportTo')!;
    expect(row.choices).to.deep.equal(['tensorboard', 'mlflow', 'wandb', 'csv', 'all', 'none']);
    expect(checkValue(row, ['csv', 'tensorboard'])).to.equal(undefined);
    expect(checkValue(row, ['comet'])).to.match(/unknown item "comet"/);
    expect(parseReportTo('csv')).to.deep.equal(['csv']);
    expect(parseReportTo(['all'])).to.deep.equal(['tensorboard', 'mlflow', 'wandb', 'csv']);
    expect(() => parseReportTo(['comet'])).to.throw(/unknown tracker 'comet' \(known: tensorboard, mlflow, wandb, csv, all, none\)/);
  });

  it('a tiny training run with --report-to csv writes every metrics row to it', async () => {
    const out = join(tmp, 'run');
    const lines: string[] = [];
    await runTraining({
      flags: {
        out,
        seed: 3,
        stages: ['opsd'],
        sampling: { maxNewTokens: 4 } as TrainConfig['sampling'],
        opsd: { steps: 2, batchSize: 1, microBatch: 1 } as TrainConfig['opsd'],
        validation: { validateEvery: 0 } as TrainConfig['validation'],
        checkpoint: { every: 0 },
        log: { reportTo: ['csv'] } as TrainConfig['log'],
      },
      log: (l) => lines.push(l),
    });
    expect(lines).to.include('--report-to: csv started');
    const rows = readFileSync(join(out, 'metrics.jsonl'), 'utf8')
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l) as { stage?: string; globalStep?: number; loss?: number });
    const steps = rows.filter((r) => r.stage === 'opsd' && typeof r.globalStep === 'number' && typeof r.loss === 'number');
    expect(steps.length).to.equal(2);
    const csv = readFileSync(join(out, 'metrics.csv'), 'utf8').trim().split('\n');
    expect(csv[0]).to.equal('step,wall_time_ms,key,value');
    for (const r of steps) {
      const line = csv.find((l) => l.startsWith(`${r.globalStep},`) && l.split(',')[2] === 'opsd/loss');
      expect(line, `opsd/loss of step ${r.globalStep}`).to.be.a('string');
      expect(Number(line!.split(',')[3])).to.equal(r.loss);
    }
  });
});
