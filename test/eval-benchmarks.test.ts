/**
 * `eval` on imported benchmarks end to end on a tiny Qwen3 (addon) with a loopback HTTP judge:
 * HealthBench's protocol with the criterion prompt, `--rescore` under another protocol with no
 * judge call, ResearchQA's five levels through the chat judge with a skipped query, and a judge
 * answering garbage: exit 1 with the reason and no report (never a score from failures).
 */
import { expect } from 'chai';
import { spawn } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { packageRoot } from '../lib/native.js';
import { loadModel } from '../lib/model/qwen3.js';
import { tinyModel } from './helpers/tiny.js';
import { CLI, cli, orSkip } from './helpers/run.js';
import { startFakeLlm, type FakeLlm } from './helpers/fake-llm.js';

const FX = join(packageRoot, 'data', 'benchmarks');

describe('eval on imported benchmarks (tiny Qwen3, loopback judge)', function () {
  this.timeout(300000);
  let dir: string;
  let tmp: string;
  let srv: FakeLlm | undefined;
  before(async function () {
    dir = await orSkip(this, async () => {
      const d = tinyModel('tiny-tied');
      (await loadModel(d)).dispose();
      return d;
    });
    tmp = mkdtempSync(join(tmpdir(), 'pg-evb-'));
  });
  afterEach(async () => {
    await srv?.close();
    srv = undefined;
  });
  after(() => tmp && rmSync(tmp, { recursive: true, force: true }));
  const judgeArgs = () => [
    '--judge',
    'http',
    '--judge-url',
    srv!.url,
    '--judge-model',
    'fake',
    '--max-new-tokens',
    '4',
    '--resamples',
    '50',
    '--progress',
    'none',
  ];

  it('HealthBench: the criterion prompt, points with negatives, rows that --rescore reads without a judge', async () => {
    const items = join(tmp, 'hb.jsonl');
    expect((await cli(['import', '--format', 'healthbench', '--input', join(FX, 'healthbench'), '--out', items])).code).to.equal(0);
    srv = await startFakeLlm({ respond: () => 'Yes' });
    const rows = join(tmp, 'hb-rows.jsonl');
    const report = join(tmp, 'hb-report.json');
    const r = await cli(['eval', '--model', dir, '--data', items, ...judgeArgs(), '--out', rows, '--report', report]);
    expect(r.code, r.err).to.equal(0);
    // every item met: hb-1 (5 + 7 − 6) / 12 = 0.5; hb-2 (4 − 2) / 4 = 0.5
    const rep = JSON.parse(readFileSync(report, 'utf8'));
    expect(rep.protocol).to.equal('healthbench');
    expect(rep.score.score).to.be.closeTo(0.5, 1e-12);
    expect(rep.groups['axis:accuracy'].score).to.be.closeTo(1 / 7, 1e-12);
    const judged = srv.log.filter((e) => e.body.messages[0]!.content.includes('single criterion'));
    expect(judged).to.have.length(5);
    expect(judged[0]!.body.messages[0]!.content).to.include('I have had a mild headache');
    expect(r.out).to.match(/healthbench: 0\.500/);
    const n = srv.log.length;
    const re = await cli(['eval', '--rescore', rows, '--protocol', 'rar', '--resamples', '0']);
    expect(re.code, re.err).to.equal(0);
    expect(re.out).to.match(/^rar: 0\.500 \[0\.500, 0\.500\] \(n=2\)/);
    expect(srv.log.length).to.equal(n);
  });

  it('ResearchQA: five levels 8 per call through the chat judge; an unreadable query is skipped and counted, not 0', async () => {
    const items = join(tmp, 'rqa.jsonl');
    expect((await cli(['import', '--format', 'researchqa', '--input', join(FX, 'researchqa', 'test.json'), '--out', items])).code).to.equal(0);
    srv = await startFakeLlm({
      respond: (q) => {
        const m = q.body.messages[0]!.content;
        if (m.includes('sparse attention')) return 'I would rather not say.';
        const count = Number(/exactly (\d+) lines/.exec(m)?.[1] ?? 0);
        return Array.from({ length: count }, (_, k) => `${k + 1}. ${k === 0 ? 'completely' : 'moderately'}`).join('\n') || 'Yes';
      },
    });
    const report = join(tmp, 'rqa.json');
    const r = await cli(['eval', '--model', dir, '--data', items, ...judgeArgs(), '--report', report, '--judge-max-null-rate', '0.9']);
    expect(r.code, r.err).to.equal(0);
    const rep = JSON.parse(readFileSync(report, 'utf8'));
    // rqa-1: levels 5, 3, 3 → (1 + 0.5 + 0.5) / 3; rqa-2 unreadable after 1 + 3 tries → skipped
    expect(rep.score.score).to.be.closeTo(2 / 3, 1e-12);
    expect(rep.skipped).to.equal(1);
    expect(srv.log.filter((e) => e.body.messages[0]!.content.includes('sparse attention'))).to.have.length(4);
  });

  it('a judge answering garbage: exit 1 with the reason, rows kept, no report and no score', async () => {
    const items = join(tmp, 'rar.jsonl');
    expect((await cli(['import', '--format', 'rar', '--input', join(FX, 'rar'), '--out', items])).code).to.equal(0);
    srv = await startFakeLlm({ respond: (q) => (q.body.messages[0]!.content.startsWith('Reply with the single word') ? 'Yes' : 'banana') });
    const report = join(tmp, 'rar.json');
    const rows = join(tmp, 'rar-rows.jsonl');
    const r = await cli(['eval', '--model', dir, '--data', items, ...judgeArgs(), '--report', report, '--out', rows]);
    expect(r.code).to.equal(1);
    expect(r.err).to.match(/eval \(rar\): 6 of 6 verdicts are null or unreadable \(100% > 50%.*no score written/);
    expect(existsSync(report)).to.equal(false);
    expect(r.out).to.not.match(/rar: /);
    expect(
      readFileSync(rows, 'utf8')
        .trim()
        .split('\n')
        .map((l) => JSON.parse(l).met),
    ).to.deep.equal([null, null, null, null, null, null]);
  });
  it("a PaperGym file (today's report) with a judge answering garbage: exit 1, no report, no coverage printed", async () => {
    srv = await startFakeLlm({ respond: (q) => (q.body.messages[0]!.content.startsWith('Reply with the single word') ? 'Yes' : 'banana') });
    const report = join(tmp, 'pg.json');
    const r = await cli([
      'eval',
      '--model',
      dir,
      '--data',
      join(packageRoot, 'data', 'sample', 'papergym-sample.jsonl'),
      '--limit',
      '1',
      ...judgeArgs(),
      '--report',
      report,
    ]);
    expect(r.code).to.equal(1);
    expect(r.err).to.match(/eval \(no report written\): \d+ of \d+ verdicts are null/);
    expect(existsSync(report)).to.equal(false);
    expect(r.out).to.not.match(/coverage/i);
  });

  it('killed with SIGKILL mid-judging, the rerun asks no answered judge question again (SQLite cache, seeded plans)', async () => {
    const items = join(tmp, 'kill-hb.jsonl');
    expect((await cli(['import', '--format', 'healthbench', '--input', join(FX, 'healthbench'), '--out', items])).code).to.equal(0);
    let child: ReturnType<typeof spawn> | undefined;
    let judged = 0;
    const isItem = (m: string) => m.includes('single criterion');
    srv = await startFakeLlm({
      latencyMs: 20,
      respond: (q) => {
        if (!isItem(q.body.messages[0]!.content)) return 'Yes';
        judged++;
        if (judged === 4 && child) child.kill('SIGKILL'); // dies with this 4th question unanswered
        return 'Yes';
      },
    });
    const args = ['eval', '--model', dir, '--data', items, ...judgeArgs(), '--judge-concurrency', '1', '--judge-cache', join(tmp, 'kill.sqlite')];
    const code = await new Promise<number | null>((res) => {
      child = spawn(process.execPath, [CLI, ...args], { cwd: packageRoot, env: { ...process.env, CI: 'true' } });
      child.on('close', (c, sig) => res(sig === 'SIGKILL' ? -9 : c));
    });
    expect(code).to.equal(-9);
    const first = srv.log
      .filter((e) => isItem(e.body.messages[0]!.content))
      .slice(0, 3)
      .map((e) => e.key);
    const before = srv.log.length;
    const report = join(tmp, 'kill.json');
    const r = await cli([...args, '--report', report]);
    expect(r.code, r.err).to.equal(0);
    const again = srv.log
      .slice(before)
      .filter((e) => isItem(e.body.messages[0]!.content))
      .map((e) => e.key);
    expect(again.filter((k) => first.includes(k))).to.deep.equal([]);
    expect(again).to.have.length(5 - 3);
    expect(JSON.parse(readFileSync(report, 'utf8')).verdicts).to.equal(5);
  });

  it('--suite: benchmarks × models → one row per model, one column per benchmark, the average with CIs, the table in report.html', async () => {
    const hb = join(tmp, 'suite-hb.jsonl');
    const rar = join(tmp, 'suite-rar.jsonl');
    expect((await cli(['import', '--format', 'healthbench', '--input', join(FX, 'healthbench'), '--out', hb])).code).to.equal(0);
    expect((await cli(['import', '--format', 'rar', '--input', join(FX, 'rar'), '--out', rar])).code).to.equal(0);
    // met when the criterion is not a pitfall / undesirable one
    srv = await startFakeLlm({ respond: (q) => (/Pitfall|prescription-only|jargon/.test(q.body.messages[0]!.content) ? 'No' : 'Yes') });
    const suite = join(tmp, 'suite.yaml');
    writeFileSync(
      suite,
      `benchmarks:\n  - { name: HealthBench, data: suite-hb.jsonl }\n  - { name: RaR, data: suite-rar.jsonl }\nmodels:\n  - { name: base, model: ${dir} }\n  - { name: again, model: ${dir} }\n`,
    );
    const out = join(tmp, 'suite-out');
    const r = await cli(['eval', '--suite', suite, '--out', out, ...judgeArgs()]);
    expect(r.code, r.err).to.equal(0);
    const t = JSON.parse(readFileSync(join(out, 'suite.json'), 'utf8'));
    expect(t.benchmarks).to.deep.equal([
      { name: 'HealthBench', protocol: 'healthbench' },
      { name: 'RaR', protocol: 'rar' },
    ]);
    expect(t.models.map((m: { name: string }) => m.name)).to.deep.equal(['base', 'again']);
    // HealthBench: hb-1 (5 + 7) / 12 = 1, hb-2 4 / 4 = 1; RaR: (5 + 3 + 1) / 9 = 1 and 5 / 5 = 1
    for (const row of t.cells) expect(row.map((c: { score: number }) => c.score)).to.deep.equal([1, 1]);
    expect(t.average.map((a: { score: number }) => a.score)).to.deep.equal([1, 1]);
    expect(r.out).to.match(/\| model +\| HealthBench +\| RaR +\| Average +\|/);
    expect(r.out).to.match(/\| base +\| 100\.0 \[100\.0, 100\.0\]/);
    const html = readFileSync(join(out, 'report.html'), 'utf8');
    expect(html).to.include('<h2 id="suite">Benchmarks</h2>');
    expect(existsSync(join(out, 'base.HealthBench.rows.jsonl'))).to.equal(true);
  });
});
