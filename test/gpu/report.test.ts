/**
 * On a GPU: a short OPSD→GRPO run of the embedded tiny model on CUDA records the peak allocated
 * memory per phase (rollout, reference, backward, optimizer) in metrics.jsonl, and the report's
 * memory plot draws one line per phase (not the CPU RSS fallback); the report's only missing-data
 * note is validation (the run is started with --validate-every 0). `generate` with no --device
 * runs on CUDA (device auto).
 */
import { expect } from 'chai';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { cudaAvailable, packageRoot } from '../../lib/native.js';
import { ensureDefaultModel } from '../../lib/train/run.js';
import { writeReport } from '../../lib/report/html.js';
import { readRun } from '../../lib/report/read.js';
import { PLOTS, plotSpec } from '../../lib/report/plots.js';

const CLI = join(packageRoot, 'dist', 'bin', 'papergym-native.js');

describe('report on CUDA', function () {
  this.timeout(600000);
  let tmp: string;
  before(function () {
    if (!cudaAvailable()) {
      console.log('  skipping the GPU report test: CUDA is not available to the addon; see `papergym-native doctor`');
      this.skip();
    }
    tmp = mkdtempSync(join(tmpdir(), 'pg-gpu-report-'));
  });
  after(() => tmp && rmSync(tmp, { recursive: true, force: true }));

  it('records peak memory per phase and plots one line per phase', () => {
    const run = join(tmp, 'run');
    const r = spawnSync(
      process.execPath,
      [
        CLI,
        'train',
        '--device',
        'cuda',
        '--out',
        run,
        '--opsd-steps',
        '2',
        '--grpo-steps',
        '2',
        '--max-new-tokens',
        '8',
        '--checkpoint-every',
        '0',
        '--validate-every',
        '0',
      ],
      { encoding: 'utf8', env: { ...process.env, CI: 'true' } },
    );
    expect(r.status, r.stderr).to.equal(0);
    const rows = readFileSync(join(run, 'metrics.jsonl'), 'utf8')
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l))
      .filter((o) => o.memory);
    const grpo = rows.find((o) => o.stage === 'grpo');
    expect(Object.keys(grpo.memory)).to.include.members(['peakRolloutBytes', 'peakBackwardBytes', 'peakOptimizerBytes', 'peakReferenceBytes']);
    const spec = plotSpec(
      PLOTS.find((p) => p.id === 'memory')!,
      [readRun(run)],
    )!;
    expect(spec.series.map((s) => s.name).sort()).to.deep.equal(['backward', 'optimizer', 'reference', 'rollout']);
    const rep = writeReport({ runs: [run], out: join(tmp, 'report.html') });
    // The memory plot has its data; the only plot without data is validation, which this run turns
    // off (--validate-every 0 keeps the run short), so the report notes exactly that one.
    expect(rep.missing).to.not.have.property('memory');
    expect(rep.missing).to.deep.equal({ validation: 'validation rows' });
    console.log(
      '  peak GiB per phase (grpo step 1):',
      Object.fromEntries(Object.entries(grpo.memory as Record<string, number>).map(([k, v]) => [k, +(v / 2 ** 30).toFixed(4)])),
    );
  });

  it('generate defaults to CUDA when it is available', () => {
    const r = spawnSync(process.execPath, [CLI, 'generate', '--model', ensureDefaultModel(), '--prompt', 'hi', '--max-new-tokens', '2', '--seed', '1'], {
      encoding: 'utf8',
      env: process.env,
    });
    expect(r.status, r.stderr).to.equal(0);
    expect(r.stderr).to.match(/generate: \S+ on cuda/);
  });
});
