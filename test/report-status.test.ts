/**
 * The HTML report tells a stopped run from a running one (issue 37): a run whose train process was
 * killed (its run-dir lock left with a dead pid), a run stopped by an error row, and a run a live
 * process holds; opened in headless Chromium: the stopped ones show the reason and the page has no
 * reload; the running one reloads.
 */
import { expect } from 'chai';
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { writeReport } from '../lib/report/html.js';
import { readRun } from '../lib/report/read.js';
import { RUN_LOCK } from '../lib/train/run.js';
import { findChromium } from './helpers/browser.js';

const lockModule = join(dirname(fileURLToPath(import.meta.url)), '..', 'lib', 'util', 'lock.js');

/** A real process that takes the run dir's lock as `train` does and holds it until killed. */
function holder(dir: string): Promise<ChildProcess> {
  const code = `const { acquireLock } = await import(${JSON.stringify(lockModule)}); acquireLock(${JSON.stringify(join(dir, RUN_LOCK))}, 'run dir'); console.log('held'); setInterval(() => {}, 1000);`;
  const child = spawn(process.execPath, ['--input-type=module', '-e', code], { stdio: ['ignore', 'pipe', 'inherit'] });
  return new Promise((resolve, reject) => {
    child.stdout!.on('data', (b: Buffer) => (String(b).includes('held') ? resolve(child) : undefined));
    child.on('exit', (c) => reject(new Error(`holder exited with ${c}`)));
  });
}
const exited = (c: ChildProcess) => new Promise<void>((r) => (c.exitCode !== null || c.signalCode !== null ? r() : c.once('exit', () => r())));

function writeRun(dir: string, extra: Record<string, unknown>[] = []): void {
  mkdirSync(dir, { recursive: true });
  writeFileSync(join(dir, 'config.json'), JSON.stringify({ stages: ['opsd'], seed: 1 }));
  const rows = [1, 2, 3].map((s) => ({
    time: new Date().toISOString(),
    stage: 'opsd',
    step: s,
    globalStep: s,
    loss: 1 / s,
    lr: 1e-4,
    gradNorm: 1,
    tokensPerSecond: 10,
    completionTokens: 8,
    stepSeconds: 1,
    phaseSeconds: {},
  }));
  writeFileSync(join(dir, 'metrics.jsonl'), [...rows, ...extra].map((r) => JSON.stringify(r)).join('\n') + '\n');
}

describe('report: a stopped run is told from a running one', function () {
  this.timeout(120000);
  let tmp = '';
  let live: ChildProcess | undefined;
  before(() => (tmp = mkdtempSync(join(tmpdir(), 'pg-report-status-'))));
  after(async () => {
    if (live) {
      live.kill('SIGKILL');
      await exited(live);
    }
    rmSync(tmp, { recursive: true, force: true });
  });

  it('readRun: the row of a checkpoint written beside the next step joins its step row, never replaces it', () => {
    const dir = join(tmp, 'beside');
    writeRun(dir, [
      {
        stage: 'opsd',
        step: 2,
        globalStep: 2,
        checkpoint: join(dir, 'checkpoints', 'step-000002'),
        checkpointCaptureSeconds: 0.05,
        checkpointWriteSeconds: 1.9,
        checkpointBytes: 2e9,
      },
    ]);
    const run = readRun(dir);
    expect(run.steps.map((r) => [r.globalStep, r.loss])).to.deep.equal([
      [1, 1],
      [2, 0.5],
      [3, 1 / 3],
    ]);
    expect(run.steps[1]).to.include({ checkpointWriteSeconds: 1.9, checkpointBytes: 2e9 });
  });

  it('readRun: killed (stale lock owner), stopped by an error, running (live holder), older run (no lock)', async () => {
    const killed = join(tmp, 'killed');
    writeRun(killed);
    const k = await holder(killed);
    expect(readRun(killed).status).to.equal('running');
    k.kill('SIGKILL');
    await exited(k);
    const rk = readRun(killed);
    expect(rk.status).to.equal('stopped');
    expect(rk.statusReason).to.equal(`stopped without a summary: pid ${k.pid} is gone (killed or crashed)`);
    expect(rk.inProgress).to.equal(false);

    const failed = join(tmp, 'failed');
    writeRun(failed, [{ stage: 'opsd', step: 3, globalStep: 3, stopped: 'Error', error: 'judge: 60% of verdicts failed\nstack' }]);
    const rf = readRun(failed);
    expect(rf.status).to.equal('stopped');
    expect(rf.statusReason).to.equal('stopped after global step 3: judge: 60% of verdicts failed');

    const old = join(tmp, 'old');
    writeRun(old);
    expect(readRun(old).status).to.equal('unknown');
    expect(readRun(old).inProgress).to.equal(true);
  });

  it('in headless Chromium: the stopped runs show why and the page does not reload; a running run reloads', async function () {
    const exe = findChromium();
    if (!exe) {
      console.log('    skipped: no Chromium on PATH (install the Debian package `chromium`, or set CHROMIUM_PATH)');
      this.skip();
    }
    const running = join(tmp, 'running');
    writeRun(running);
    live = await holder(running);
    const stoppedOut = join(tmp, 'stopped.html');
    writeReport({ runs: [join(tmp, 'killed'), join(tmp, 'failed')], out: stoppedOut, png: false });
    const runningOut = join(tmp, 'running.html');
    writeReport({ runs: [running, join(tmp, 'killed')], out: runningOut, png: false });
    const { default: puppeteer } = await import('puppeteer-core');
    const browser = await puppeteer.launch({ executablePath: exe!, headless: true, args: ['--no-sandbox', '--disable-gpu', '--disable-dev-shm-usage'] });
    try {
      const page = await browser.newPage();
      const look = async (file: string) => {
        await page.goto(pathToFileURL(file).href, { waitUntil: 'load' });
        return page.evaluate(() => ({
          refresh: document.querySelector('meta[http-equiv="refresh"]')?.getAttribute('content') ?? null,
          header: document.querySelector('p.muted')?.textContent ?? '',
          status: Array.from(document.querySelectorAll('#runs + table tr'))
            .slice(1)
            .map((tr) => [tr.children[0]!.textContent, tr.children[2]!.textContent]),
        }));
      };
      const s = await look(stoppedOut);
      expect(s.refresh).to.equal(null);
      expect(s.header).to.not.match(/still writing|reloads/);
      expect(Object.fromEntries(s.status)).to.deep.equal({
        killed: `stopped: without a summary: pid ${readRun(join(tmp, 'killed')).statusReason.match(/pid (\d+)/)![1]} is gone (killed or crashed)`,
        failed: 'stopped: after global step 3: judge: 60% of verdicts failed',
      });
      const r = await look(runningOut);
      expect(r.refresh).to.equal('60');
      expect(r.header).to.match(/a run is still writing: this page reloads every 60 s/);
      expect(Object.fromEntries(r.status).running).to.match(new RegExp(`^running: pid ${live.pid} since `));
    } finally {
      await browser.close();
    }
  });
});
