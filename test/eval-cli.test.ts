/**
 * The `eval` and `probe-judge` commands end to end on a tiny Qwen3 (addon): local judge (same
 * model, adapter off) and http judge (a loopback server). Skipped when the addon or python is
 * unavailable.
 */
import { expect } from 'chai';
import { spawn } from 'node:child_process';
import { createHash } from 'node:crypto';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { packageRoot } from '../lib/native.js';
import { loadModel } from '../lib/model/qwen3.js';
import { sampleDatasetPath } from '../lib/data/schema.js';
import { tinyModel } from './helpers/tiny.js';
import { orSkip } from './helpers/run.js';

const CLI = join(packageRoot, 'dist', 'bin', 'papergym-native.js');

function run(args: string[]): Promise<{ code: number; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    const p = spawn(process.execPath, [CLI, ...args], { env: process.env });
    let stdout = '';
    let stderr = '';
    p.stdout.on('data', (d) => (stdout += d));
    p.stderr.on('data', (d) => (stderr += d));
    p.on('close', (code) => resolve({ code: code ?? -1, stdout, stderr }));
  });
}

describe('eval / probe-judge CLI on a tiny Qwen3', function () {
  this.timeout(300000);
  let dir: string;
  let tmp: string;
  before(async function () {
    dir = await orSkip(this, async () => {
      const d = tinyModel('tiny-tied');
      (await loadModel(d)).dispose();
      return d;
    });
    tmp = mkdtempSync(join(tmpdir(), 'eval-cli-'));
  });
  after(() => tmp && rmSync(tmp, { recursive: true, force: true }));

  it('eval --judge local writes rows, report and plans', async () => {
    const out = join(tmp, 'rows.jsonl');
    const report = join(tmp, 'report.json');
    const plans = join(tmp, 'plans.jsonl');
    const r = await run([
      'eval',
      '--model',
      dir,
      '--data',
      sampleDatasetPath(),
      '--limit',
      '2',
      '--judge',
      'local',
      '--max-new-tokens',
      '6',
      '--resamples',
      '50',
      '--out',
      out,
      '--report',
      report,
      '--plans',
      plans,
    ]);
    expect(r.code, r.stderr).to.equal(0);
    expect(r.stdout)
      .to.match(/rubric coverage/)
      .and.match(/method innovation/)
      .and.match(/experimental design/);
    const rows = readFileSync(out, 'utf8')
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l));
    const rep = JSON.parse(readFileSync(report, 'utf8'));
    expect(rep.questions).to.equal(2);
    expect(rep.meta.judge).to.match(/^local/);
    expect(rows.filter((x) => x.kind === 'spec')).to.have.length(20);
    expect(rows.every((x) => typeof x.prob === 'number' && typeof x.met === 'boolean')).to.equal(true);
    const planRows = readFileSync(plans, 'utf8')
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l));
    expect(planRows).to.have.length(2);
    // Each row names the plan it judged: the first 16 hex of the SHA-256 of the plan text (judge-agreement --rows checks it).
    for (const x of rows) {
      const p = planRows.find((q) => q.questionId === x.questionId && q.sample === x.sample);
      expect(x.planHash).to.equal(createHash('sha256').update(p.plan, 'utf8').digest('hex').slice(0, 16));
    }
    // The local judge gives P(yes): eval reports both the binary and the P(yes) statistics.
    expect(r.stdout).to.include(`with P(yes) per item (${rows.length} of ${rows.length} verdicts carry it)`);
    expect(rep.coverage.prob.overall.n).to.equal(20);
    const meanProb = rows.filter((x) => x.kind === 'spec').reduce((a, x) => a + x.prob, 0) / 20;
    expect(rep.coverage.prob.overall.mean).to.be.closeTo(meanProb, 1e-12);
    expect(r.stderr).to.include(`judge health: ${rows.length} verdicts, null 0%`);
    // Run again (as after a kill): the local judge's verdicts come from its cache beside --out,
    // nothing is scored, and the rows are the same.
    const statsOf = (err: string) => JSON.parse(/^judge local\S*: (\{.*\})$/m.exec(err)![1]!) as { requests: number; cacheHits: number };
    expect(statsOf(r.stderr)).to.include({ cacheHits: 0 });
    const again = await run([
      'eval',
      '--model',
      dir,
      '--data',
      sampleDatasetPath(),
      '--limit',
      '2',
      '--judge',
      'local',
      '--max-new-tokens',
      '6',
      '--resamples',
      '50',
      '--out',
      out,
    ]);
    expect(again.code, again.stderr).to.equal(0);
    expect(again.stderr).to.include(`judge cache ${out}.judge-cache.sqlite`);
    expect(statsOf(again.stderr)).to.include({ cacheHits: rows.length, requests: 0 });
    const rows2 = readFileSync(out, 'utf8')
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l));
    expect(rows2.map((x) => [x.itemId, x.met, x.prob])).to.deep.equal(rows.map((x) => [x.itemId, x.met, x.prob]));
  });

  it('eval fails before any compute on a judge URL answering 404, and exits non-zero when verdicts are mostly null', async () => {
    let items = 0;
    const srv = createServer((req, res) => {
      let d = '';
      req.on('data', (c) => (d += c));
      req.on('end', () => {
        if (!req.url?.startsWith('/good/v1/chat/completions')) {
          res.writeHead(404, { 'content-type': 'text/html' });
          return res.end('<html><body>404 Not Found</body></html>');
        }
        const body = JSON.parse(d);
        const probe = body.messages[0].content.startsWith('Reply with the single word');
        if (!probe) items++;
        res.writeHead(200, { 'content-type': 'application/json' });
        res.end(
          JSON.stringify({
            choices: [{ message: { role: 'assistant', content: probe ? 'Yes' : 'The plan is interesting and covers many aspects.' }, finish_reason: 'stop' }],
            usage: { prompt_tokens: 1, completion_tokens: 1 },
          }),
        );
      });
    });
    await new Promise<void>((r) => srv.listen(0, '127.0.0.1', r));
    try {
      const base = `http://127.0.0.1:${(srv.address() as AddressInfo).port}`;
      const bad = await run([
        'eval',
        '--model',
        dir,
        '--data',
        sampleDatasetPath(),
        '--limit',
        '1',
        '--judge',
        'http',
        '--judge-url',
        `${base}/wrong/v1`,
        '--judge-model',
        'j',
        '--max-new-tokens',
        '4',
        '--no-general',
      ]);
      expect(bad.code).to.not.equal(0);
      expect(bad.stderr)
        .to.match(/failed the start-up check/)
        .and.match(/HTTP 404/);
      expect(bad.stdout).to.equal('');
      const unread = await run([
        'eval',
        '--model',
        dir,
        '--data',
        sampleDatasetPath(),
        '--limit',
        '1',
        '--judge',
        'http',
        '--judge-url',
        `${base}/good/v1`,
        '--judge-model',
        'j',
        '--max-new-tokens',
        '4',
        '--resamples',
        '10',
        '--no-general',
      ]);
      expect(items).to.equal(10);
      expect(unread.code).to.not.equal(0);
      // a score computed from failures is never printed (exit 1 with the reason; issue 38 item 5)
      expect(unread.stdout).to.not.match(/rubric coverage/);
      expect(unread.stderr)
        .to.match(/10 of 10 verdicts are null/)
        .and.match(/10 unreadable replies/);
    } finally {
      srv.closeAllConnections();
      srv.close();
    }
  });

  it('eval, probe-judge --judge local and serve name a missing model directory (no tokenizer.json message, no stack)', async () => {
    const missing = join(tmp, 'no-such-model');
    const runs = [
      ['eval', '--model', missing, '--data', sampleDatasetPath(), '--limit', '1', '--judge', 'local'],
      ['probe-judge', '--data', sampleDatasetPath(), '--limit', '1', '--judge', 'local', '--model', missing],
      ['serve', '--model', missing, '--port', '0'],
    ];
    for (const args of runs) {
      const r = await run(args);
      expect(r.code, `${args[0]}: ${r.stderr}`).to.equal(1);
      // The command's one-line "loading MODEL on DEVICE" notice may come first; the error is the last line, with no stack.
      expect(r.stderr.split('\n').filter(Boolean).at(-1), args[0]).to.equal(`papergym-native: model directory ${missing} does not exist`);
      expect(r.stderr, args[0]).not.to.match(/\n\s+at |tokenizer\.json/);
    }
  });

  it('eval --judge http against a loopback judge; probe-judge --judge local', async () => {
    const srv = createServer((req, res) => {
      let d = '';
      req.on('data', (c) => (d += c));
      req.on('end', () => {
        res.writeHead(200, { 'content-type': 'application/json' });
        res.end(
          JSON.stringify({
            choices: [
              { message: { role: 'assistant', content: JSON.parse(d).messages[0].content.includes('experiment') ? 'Yes' : 'No' }, finish_reason: 'stop' },
            ],
            usage: { prompt_tokens: 1, completion_tokens: 1 },
          }),
        );
      });
    });
    await new Promise<void>((r) => srv.listen(0, '127.0.0.1', r));
    try {
      const url = `http://127.0.0.1:${(srv.address() as AddressInfo).port}/v1`;
      const r = await run([
        'eval',
        '--model',
        dir,
        '--data',
        sampleDatasetPath(),
        '--limit',
        '1',
        '--judge',
        'http',
        '--judge-url',
        url,
        '--judge-model',
        'j',
        '--max-new-tokens',
        '4',
        '--resamples',
        '20',
        '--no-general',
      ]);
      expect(r.code, r.stderr).to.equal(0);
      expect(r.stdout).to.match(/questions 1, plans 1/);
    } finally {
      srv.closeAllConnections();
      srv.close();
    }
    const p = await run([
      'probe-judge',
      '--data',
      sampleDatasetPath(),
      '--limit',
      '1',
      '--judge',
      'local',
      '--model',
      dir,
      '--attacks',
      'empty,inject',
      '--json',
    ]);
    expect(p.code, p.stderr).to.equal(0);
    const rep = JSON.parse(p.stdout);
    expect(rep.results.map((x: { attack: string }) => x.attack)).to.deep.equal(['empty', 'inject']);
    expect(rep.results[0].verdicts).to.equal(10);
  });
});
