/**
 * `papergym-native report`: real run dirs of the embedded tiny model (OPSD→GRPO and a GRPO-only
 * ablation, overlaid), opened in headless Chromium from a file:// URL (no console errors, one
 * drawn chart per plot, a screenshot saved to artifacts/); eval coverage and the paired
 * bootstrap; run dirs that are missing, empty, cut mid-write or from an older version.
 */
import { expect } from 'chai';
import { appendFileSync, existsSync, mkdirSync, mkdtempSync, readFileSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { packageRoot } from '../lib/native.js';
import { ensureDefaultModel } from '../lib/train/run.js';
import { writeReport } from '../lib/report/html.js';
import { readRun } from '../lib/report/read.js';
import { PLOTS, plotSpec } from '../lib/report/plots.js';
import { pairedBootstrap, hardestItems } from '../lib/eval/compare.js';
import type { EvalRow } from '../lib/eval/report.js';
import { findChromium } from './helpers/browser.js';
import { cli } from './helpers/run.js';

/** Eval rows of `questions` questions × 4 spec items (2 per dimension) + 2 general items; `p(q, i)` = met. */
function evalRows(questions: number, met: (q: number, item: number) => boolean | null): EvalRow[] {
  const rows: EvalRow[] = [];
  for (let q = 0; q < questions; q++) {
    for (let i = 0; i < 6; i++) {
      const spec = i < 4;
      rows.push({
        questionId: `q${q}`,
        sample: 0,
        itemId: spec ? `q${q}-r${i}` : `g${i - 4}`,
        kind: spec ? 'spec' : 'general',
        ...(spec ? { dimension: i < 2 ? 'method_innovation' : 'experimental_design', origin: 'both', rank: i + 1 } : {}),
        met: met(q, i),
      } as EvalRow);
    }
  }
  return rows;
}

describe('report', function () {
  this.timeout(300000);
  let tmp: string;
  let runA: string;
  let runB: string;
  before(async () => {
    ensureDefaultModel();
    tmp = mkdtempSync(join(tmpdir(), 'pg-report-'));
    runA = join(tmp, 'opsd-grpo');
    runB = join(tmp, 'grpo-only');
    const small = [
      '--max-new-tokens',
      '8',
      '--opsd-batch-size',
      '2',
      '--questions-per-step',
      '1',
      '--group-size',
      '2',
      '--grpo-micro-batch',
      '2',
      '--validate-every',
      '1',
      '--checkpoint-every',
      '2',
      '--save-total-limit',
      '1',
      '--seed',
      '3',
    ];
    const a = await cli(['train', '--out', runA, '--opsd-steps', '3', '--grpo-steps', '3', ...small]);
    expect(a.code, a.err).to.equal(0);
    const b = await cli(['train', '--out', runB, '--stages', 'grpo', '--grpo-steps', '3', ...small]);
    expect(b.code, b.err).to.equal(0);
    // train printed the live report's path once, at the start.
    expect(a.err.match(/report \S+report\.html/g)).to.have.length(1);
    expect(existsSync(join(runA, 'report.html'))).to.equal(true);
  });
  after(() => rmSync(tmp, { recursive: true, force: true }));

  it('train keeps the last N checkpoints (--save-total-limit) and records where every setting came from', () => {
    expect(readdirSync(join(runA, 'checkpoints')).filter((n) => n.startsWith('step-'))).to.have.length(1);
    const cfg = JSON.parse(readFileSync(join(runA, 'config.json'), 'utf8'));
    expect(cfg.origins['opsd.steps']).to.equal('flag');
    expect(cfg.origins['grpo.lr']).to.equal('default');
    expect(cfg.checkpoint.saveTotalLimit).to.equal(1);
  });

  it('overlays two runs with every training plot drawn, SVG + PNG beside the HTML', () => {
    const out = join(tmp, 'cmp', 'report.html');
    const r = writeReport({ runs: [runA, runB], out, resamples: 200 });
    expect(r.missing).to.deep.equal({});
    expect(r.drawn).to.deep.equal(PLOTS.map((p) => p.id));
    for (const id of r.drawn) {
      const svg = readFileSync(join(r.plotsDir, `${id}.svg`), 'utf8');
      expect(svg.startsWith('<svg')).to.equal(true);
      expect(
        readFileSync(join(r.plotsDir, `${id}.png`))
          .subarray(1, 4)
          .toString(),
      ).to.equal('PNG');
    }
    const html = readFileSync(out, 'utf8');
    expect(html).to.not.match(/<script|https?:\/\/(?!www\.w3\.org)/); // self-contained, offline
    expect(html).to.contain('→ grpo'); // stage boundary of the OPSD→GRPO run
    expect(html).to.contain('opsd-grpo').and.to.contain('grpo-only');
  });

  it('opens in headless Chromium from file:// with no console errors and one rendered chart per plot', async function () {
    const exe = findChromium();
    if (!exe) {
      console.log(
        '    skipped: no Chromium on PATH (install the Debian package `chromium`, or set CHROMIUM_PATH; scripts/setup.sh installs it when run as root)',
      );
      this.skip();
    }
    const out = join(tmp, 'browser', 'report.html');
    const a = join(tmp, 'a.jsonl');
    const b = join(tmp, 'b.jsonl');
    writeFileSync(
      a,
      evalRows(12, (q, i) => (q + i) % 3 === 0)
        .map((x) => JSON.stringify(x))
        .join('\n') + '\n',
    );
    writeFileSync(
      b,
      evalRows(12, (q, i) => (q + i) % 3 !== 1)
        .map((x) => JSON.stringify(x))
        .join('\n') + '\n',
    );
    const r = await cli(['report', runA, runB, '--out', out, '--eval', `base=${a}`, '--eval', `trained=${b}`, '--resamples', '200']);
    expect(r.code, r.err).to.equal(0);
    expect(r.out.trim()).to.equal(out);
    const { default: puppeteer } = await import('puppeteer-core');
    const browser = await puppeteer.launch({ executablePath: exe!, headless: true, args: ['--no-sandbox', '--disable-gpu', '--disable-dev-shm-usage'] });
    try {
      const page = await browser.newPage();
      const errors: string[] = [];
      page.on('console', (m) => {
        if (m.type() === 'error') errors.push(m.text());
      });
      page.on('pageerror', (e) => errors.push(String(e)));
      page.on('requestfailed', (q) => errors.push(`request failed: ${q.url()}`));
      await page.setViewport({ width: 1400, height: 1000 });
      await page.goto(pathToFileURL(out).href, { waitUntil: 'load' });
      const charts = await page.$$eval('figure.chart', (figs) =>
        figs.map((f) => {
          const svgs = f.querySelectorAll('svg');
          const box = svgs[0]?.getBoundingClientRect();
          return {
            id: f.getAttribute('data-plot'),
            missing: f.hasAttribute('data-missing'),
            svgs: svgs.length,
            width: box?.width ?? 0,
            height: box?.height ?? 0,
            paths: svgs[0]?.querySelectorAll('path').length ?? 0,
          };
        }),
      );
      const expected = [...PLOTS.map((p) => p.id), 'eval-coverage', 'eval-paired'];
      expect(charts.map((c) => c.id)).to.deep.equal(expected);
      for (const c of charts) {
        expect(c.missing, c.id!).to.equal(false);
        expect(c.svgs, c.id!).to.equal(1);
        expect(c.width, c.id!).to.be.greaterThan(100);
        expect(c.height, c.id!).to.be.greaterThan(100);
        expect(c.paths, c.id!).to.be.greaterThan(3);
      }
      const text = await page.$eval('body', (b) => b.textContent ?? '');
      expect(text).to.contain('Paired bootstrap').and.to.contain('Hardest rubric items');
      const dir = join(packageRoot, 'artifacts');
      mkdirSync(dir, { recursive: true });
      await page.screenshot({ path: join(dir, 'report-screenshot.png'), fullPage: true });
      expect(errors).to.deep.equal([]);
    } finally {
      await browser.close();
    }
  });

  it('reads a run that is still writing: a cut last line is skipped with a note, the rest plotted', () => {
    const live = join(tmp, 'live');
    mkdirSync(live);
    const lines = readFileSync(join(runA, 'metrics.jsonl'), 'utf8').trim().split('\n');
    writeFileSync(join(live, 'metrics.jsonl'), lines.slice(0, 4).join('\n') + '\n' + lines[4]!.slice(0, 40));
    const run = readRun(live);
    expect(run.steps.length).to.be.greaterThan(0);
    expect(run.notes.join(' '))
      .to.match(/last line \d+ is incomplete/)
      .and.to.match(/no readable config\.json/);
    expect(run.inProgress).to.equal(true);
    const r = writeReport({ runs: [live], out: join(live, 'r.html'), png: false });
    expect(r.drawn).to.include('loss');
    expect(readFileSync(join(live, 'r.html'), 'utf8')).to.contain('http-equiv="refresh"');
  });

  it('missing and empty run dirs and metrics of an older version give a report with notes, never a stack trace', async () => {
    const empty = join(tmp, 'empty');
    mkdirSync(empty);
    const old = join(tmp, 'old');
    mkdirSync(old);
    // Rows as an older version wrote them: no phaseSeconds, stopRate, passRate, memory; one garbage line; duplicate step rows.
    const rows = [1, 2, 2, 3].map((s) => JSON.stringify({ stage: 'grpo', step: s, globalStep: s, loss: 0.1 * s, rewardMean: 0.5, gradNorm: 1 }));
    writeFileSync(join(old, 'metrics.jsonl'), [...rows.slice(0, 2), 'not json', ...rows.slice(2)].join('\n') + '\n');
    writeFileSync(join(old, 'summary.json'), '{"stages": [');
    const out = join(tmp, 'bad', 'report.html');
    const r = await cli(['report', join(tmp, 'does-not-exist'), empty, old, '--out', out, '--no-png']);
    expect(r.code, r.err).to.equal(0);
    expect(r.err).to.not.match(/\n\s+at /); // no stack trace
    const html = readFileSync(out, 'utf8');
    expect(html)
      .to.contain('does not exist')
      .and.to.contain('no metrics.jsonl yet')
      .and.to.contain('1 unreadable line(s) skipped')
      .and.to.contain('summary.json is unreadable');
    expect(html).to.match(/no data: no run has <code>phaseSeconds/);
    expect(readRun(old).steps.map((s) => s.globalStep)).to.deep.equal([1, 2, 3]);
    expect(existsSync(join(tmp, 'bad', 'report-plots', 'loss.svg'))).to.equal(true);
    expect(existsSync(join(tmp, 'bad', 'report-plots', 'loss.png'))).to.equal(false);
  });

  it('marks the early-stop point on the validation plot and as a line on every plot', () => {
    const dir = join(tmp, 'early');
    mkdirSync(dir);
    const rows = [
      ...[1, 2, 3, 4].map((s) => ({ stage: 'opsd', step: s, globalStep: s, loss: 1 / s, jsd: 1 / s })),
      ...[1, 2, 3, 4].map((s) => ({ stage: 'opsd', step: s, globalStep: s, validation: [0.5, 0.6, 0.55, 0.5][s - 1] })),
      { stage: 'opsd', step: 4, globalStep: 4, event: 'early_stop' },
      ...[5, 6].map((g) => ({ stage: 'grpo', step: g - 4, globalStep: g, loss: 0.1, rewardMean: 0.5, rewardStd: 0.1 })),
    ];
    writeFileSync(join(dir, 'metrics.jsonl'), rows.map((r) => JSON.stringify(r)).join('\n') + '\n');
    const run = readRun(dir);
    expect(run.earlyStops).to.deep.equal([{ stage: 'opsd', globalStep: 4 }]);
    expect(run.stageStarts).to.deep.equal([
      { stage: 'opsd', globalStep: 1 },
      { stage: 'grpo', globalStep: 5 },
    ]);
    const spec = plotSpec(
      PLOTS.find((p) => p.id === 'validation')!,
      [run],
    )!;
    expect(spec.series[0]!.marks).to.deep.equal([{ x: 4, y: 0.5, label: 'stop' }]);
    expect(spec.vlines!.map((v) => v.label)).to.deep.equal(['→ grpo', 'early stop']);
    const r = writeReport({ runs: [dir], out: join(dir, 'r.html'), png: false });
    expect(readFileSync(join(r.plotsDir, 'validation.svg'), 'utf8')).to.contain('stop');
  });

  it("a stopped run's last line (stopped, error) is a note, not a row replacing its last step", () => {
    const dir = join(tmp, 'stopped');
    mkdirSync(dir);
    const rows = [
      ...[1, 2].map((s) => ({ stage: 'grpo', step: s, globalStep: s, loss: 0.1 * s, phaseSeconds: { rollout: 1, host: 0.1 } })),
      { stage: 'grpo', step: 2, globalStep: 2, stopped: 'JudgeHealthError', error: 'judge x: GRPO step 3: 8 of 8 verdicts are null' },
    ];
    writeFileSync(join(dir, 'metrics.jsonl'), rows.map((r) => JSON.stringify(r)).join('\n') + '\n');
    const run = readRun(dir);
    expect(run.steps.map((r) => r.loss)).to.deep.equal([0.1, 0.2]);
    expect(run.notes).to.include('stopped after global step 2: judge x: GRPO step 3: 8 of 8 verdicts are null');
  });

  it('a train run appends to its live report: report on a dir being written reads what is there', () => {
    appendFileSync(join(runB, 'metrics.jsonl'), '{"stage":"grpo","step":4,"glo');
    const run = readRun(runB);
    expect(run.steps[run.steps.length - 1]!.globalStep).to.equal(3);
  });
});

describe('eval comparison', () => {
  it('paired bootstrap: identical results give a zero interval; a better adapter a positive one', () => {
    const a = evalRows(30, (q, i) => (q * 7 + i) % 3 === 0);
    const same = pairedBootstrap(a, a, { resamples: 300 });
    for (const s of Object.values(same.stats)) expect([s.diff, s.lo, s.hi]).to.deep.equal([0, 0, 0]);
    const better = evalRows(30, (q, i) => (q * 7 + i) % 3 !== 1);
    const c = pairedBootstrap(a, better, { resamples: 300, seed: 1 });
    expect(c.questions).to.equal(30);
    expect(c.stats.overall.diff).to.be.closeTo(c.stats.overall.b - c.stats.overall.a, 1e-12);
    expect(c.stats.overall.lo).to.be.greaterThan(0);
    expect(c.stats.overall.pBNotBetter).to.equal(0);
    expect(c.stats.overall.lo).to.be.at.most(c.stats.overall.diff);
    expect(c.stats.overall.hi).to.be.at.least(c.stats.overall.diff);
    expect(() =>
      pairedBootstrap(
        a,
        evalRows(2, () => true).map((r) => ({ ...r, questionId: `x${r.questionId}` })),
      ),
    ).to.throw(/share no question/);
  });
  it('hardest items are the least-met instance items, general items left out', () => {
    const rows = evalRows(3, (q, i) => !(q === 1 && i === 2) && i !== 5);
    const h = hardestItems(rows, 2);
    expect(h[0]).to.include({ questionId: 'q1', itemId: 'q1-r2', rate: 0 });
    expect(h.every((x) => x.kind === 'spec')).to.equal(true);
  });
});
