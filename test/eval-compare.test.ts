/**
 * N-way win rates (`compare`, lib/eval/compare.ts): candidate orders that cancel position bias, a
 * loopback judge that always prefers position 1 (every system then wins 1/N and the bias figure
 * shows it), a judge that prefers one system wherever it stands, garbage replies counted as
 * unreadable (exit 1, no win rate), and a run killed with SIGKILL that resumes from the SQLite
 * cache without asking any answered judge question again.
 */
import { expect } from 'chai';
import { spawn } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { packageRoot } from '../lib/native.js';
import { candidateOrders, parsePreference, winRates, type Judgement } from '../lib/eval/compare.js';
import { CLI, cli } from './helpers/run.js';
import { startFakeLlm, type FakeLlm } from './helpers/fake-llm.js';

const ITEMS = join(packageRoot, 'data', 'sample', 'papergym-sample.jsonl');
const ids = readFileSync(ITEMS, 'utf8')
  .trim()
  .split('\n')
  .slice(0, 3)
  .map((l) => (JSON.parse(l) as { id: string }).id);
const isJudge = (m: string) => m.includes('Candidate plans');

describe('compare: N-way win rates', function () {
  this.timeout(120000);
  let tmp: string;
  let srv: FakeLlm | undefined;
  const plans: string[] = [];
  before(() => {
    tmp = mkdtempSync(join(tmpdir(), 'pg-cmp-'));
    for (const sys of ['alpha', 'beta', 'gamma']) {
      const f = join(tmp, `${sys}.jsonl`);
      writeFileSync(
        f,
        ids.map((q) => JSON.stringify({ questionId: q, sample: 0, plan: `${sys.toUpperCase()}-PLAN for ${q}: a method and experiments.` })).join('\n') + '\n',
      );
      plans.push(f);
    }
  });
  afterEach(async () => {
    await srv?.close();
    srv = undefined;
  });
  after(() => rmSync(tmp, { recursive: true, force: true }));

  it('candidate orders: every permutation up to 4 systems, a Latin square above; each system in each position equally often', () => {
    for (const n of [2, 3, 4, 5, 6]) {
      const os = candidateOrders(n);
      expect(os).to.have.length(n <= 4 ? [0, 0, 2, 6, 24][n]! : n);
      for (let p = 0; p < n; p++) for (let s = 0; s < n; s++) expect(os.filter((o) => o[p] === s).length).to.equal(os.length / n);
    }
    expect(() => candidateOrders(1)).to.throw(RangeError);
  });

  it('reads "Best: N" / "Best: tie" (the last one), else unreadable', () => {
    expect(parsePreference('Plan 2 is vaguer.\nBest: 3', 3)).to.equal(3);
    expect(parsePreference('**Best:** tie', 3)).to.equal('tie');
    expect(parsePreference('Best: 1 ... on reflection Best: 2', 3)).to.equal(2);
    expect(parsePreference('2', 3)).to.equal(2);
    expect(parsePreference('Best: 7', 3)).to.equal(null);
    expect(parsePreference('I like them all.', 3)).to.equal(null);
  });

  it('a hedged choice naming two answers is unreadable, never a vote for its first number; plain forms stay readable', () => {
    for (const hedge of [
      'Best: 1 or 2',
      'Best: 1, 2',
      'Best: 1/2',
      'Best: 1 / 2',
      'Best: 1 and 2',
      'Best: 1 & 2',
      '**Best:** 1 or plan 2',
      'Best: 2 or tie',
      'Best: tie or 1',
    ])
      expect(parsePreference(`Both are good.\n${hedge}`, 3), hedge).to.equal(null);
    expect(parsePreference('1 and 2', 3)).to.equal(null);
    expect(parsePreference('Best: 1 or 2 ... on reflection Best: 2', 3), 'a later clean line wins').to.equal(2);
    expect(parsePreference('Best: 2.', 3)).to.equal(2);
    expect(parsePreference('**Best:** 2', 3)).to.equal(2);
    expect(parsePreference('Best: System 2', 3)).to.equal(2);
    expect(parsePreference('Best: Plan 3', 3)).to.equal(3);
    expect(parsePreference('Best: 2, because plan 1 lacks baselines and 3 or 4 ablations', 3)).to.equal(2);
    expect(parsePreference('Best: 2 (plan 1 is close)', 3)).to.equal(2);
  });

  it('win rates: wins / readable, ties and unreadable counted apart, position bias per position', () => {
    const js: Judgement[] = [
      { questionId: 'q', order: [0, 1], winner: 0, position: 1 },
      { questionId: 'q', order: [1, 0], winner: 1, position: 1 },
      { questionId: 'r', order: [0, 1], winner: 'tie', position: null },
      { questionId: 'r', order: [1, 0], winner: null, position: null },
    ];
    const r = winRates(['a', 'b'], js, { resamples: 0 });
    expect(r.systems.map((s) => [s.wins, s.rate])).to.deep.equal([
      [1, 1 / 3],
      [1, 1 / 3],
    ]);
    expect([r.readable, r.ties, r.unreadable]).to.deep.equal([3, 1, 1]);
    expect(r.positionBias).to.deep.equal([1, 0]);
  });

  it('CLI: a judge that always picks position 1 gives every system 1/3 (the permutation cancels it) and a position bias of 100%', async () => {
    srv = await startFakeLlm({ respond: (r) => (isJudge(r.body.messages[0]!.content) ? 'They are similar.\nBest: 1' : 'Yes') });
    const report = join(tmp, 'pos1.json');
    const r = await cli([
      'compare',
      '--data',
      ITEMS,
      '--plans',
      ...plans,
      '--judge',
      'http',
      '--judge-url',
      srv.url,
      '--judge-model',
      'fake',
      '--judge-cache',
      join(tmp, 'pos1.sqlite'),
      '--report',
      report,
      '--resamples',
      '200',
    ]);
    expect(r.code, r.err).to.equal(0);
    const rep = JSON.parse(readFileSync(report, 'utf8'));
    expect(rep.judgements).to.equal(3 * 6);
    for (const s of rep.systems) expect(s.rate).to.be.closeTo(1 / 3, 1e-12);
    expect(rep.positionBias).to.deep.equal([1, 0, 0]);
    expect(r.out).to.match(/alpha: 33\.3%/);
    expect(r.out).to.match(/position bias .*: 100\.0% \/ 0\.0% \/ 0\.0%/);
  });

  it('CLI: a judge that prefers one system wherever it stands gives it 100% and no position bias', async () => {
    srv = await startFakeLlm({
      respond: (r) => {
        const m = r.body.messages[0]!.content;
        if (!isJudge(m)) return 'Yes';
        const pos = [...m.matchAll(/<plan number="(\d)">\n(\w+)-PLAN/g)].find((x) => x[2] === 'BETA')![1];
        return `Best: ${pos}`;
      },
    });
    const report = join(tmp, 'beta.json');
    const r = await cli([
      'compare',
      '--data',
      ITEMS,
      '--plans',
      ...plans.map((p, i) => `${['a', 'b', 'c'][i]}=${p}`),
      '--judge',
      'http',
      '--judge-url',
      srv.url,
      '--judge-model',
      'fake',
      '--judge-cache',
      join(tmp, 'beta.sqlite'),
      '--report',
      report,
    ]);
    expect(r.code, r.err).to.equal(0);
    const rep = JSON.parse(readFileSync(report, 'utf8'));
    expect(rep.systems.map((s: { name: string; rate: number }) => [s.name, s.rate])).to.deep.equal([
      ['a', 0],
      ['b', 1],
      ['c', 0],
    ]);
    for (const b of rep.positionBias) expect(b).to.be.closeTo(1 / 3, 1e-12);
  });

  it('CLI: a judge answering garbage is counted unreadable, exit 1 with the reason, no win rate written', async () => {
    srv = await startFakeLlm({ respond: (r) => (isJudge(r.body.messages[0]!.content) ? 'banana' : 'Yes') });
    const report = join(tmp, 'garbage.json');
    const r = await cli([
      'compare',
      '--data',
      ITEMS,
      '--plans',
      plans[0]!,
      plans[1]!,
      '--judge',
      'http',
      '--judge-url',
      srv.url,
      '--judge-model',
      'fake',
      '--judge-cache',
      join(tmp, 'g.sqlite'),
      '--report',
      report,
    ]);
    expect(r.code).to.equal(1);
    expect(r.err).to.match(/compare: 6 of 6 judgements unreadable or failed \(100% > 50%.*no win rate written/);
    expect(existsSync(report)).to.equal(false);
  });

  it('CLI: a reply cut at max_tokens is still read (its verdict line counts), not a failed request', async () => {
    srv = await startFakeLlm({
      respond: (r) => (isJudge(r.body.messages[0]!.content) ? { content: 'Best: 2 since it names baselines and', finishReason: 'length' } : 'Yes'),
    });
    const report = join(tmp, 'cut.json');
    const r = await cli([
      'compare',
      '--data',
      ITEMS,
      '--plans',
      plans[0]!,
      plans[1]!,
      '--judge',
      'http',
      '--judge-url',
      srv.url,
      '--judge-model',
      'fake',
      '--judge-cache',
      join(tmp, 'cut.sqlite'),
      '--report',
      report,
    ]);
    expect(r.code, r.err).to.equal(0);
    const rep = JSON.parse(readFileSync(report, 'utf8'));
    expect([rep.readable, rep.failed, rep.unreadable]).to.deep.equal([6, 0, 0]);
    expect(rep.positionBias).to.deep.equal([0, 1]);
  });

  it('CLI: killed with SIGKILL mid-run, the rerun asks no answered judge question again', async () => {
    let child: ReturnType<typeof spawn> | undefined;
    let judged = 0;
    srv = await startFakeLlm({
      latencyMs: 20,
      respond: (r) => {
        if (!isJudge(r.body.messages[0]!.content)) return 'Yes';
        judged++;
        if (judged === 5 && child) child.kill('SIGKILL'); // dies with this 5th question unanswered
        return 'Best: 2';
      },
    });
    const args = [
      'compare',
      '--data',
      ITEMS,
      '--plans',
      ...plans,
      '--judge',
      'http',
      '--judge-url',
      srv.url,
      '--judge-model',
      'fake',
      '--judge-concurrency',
      '1',
      '--judge-cache',
      join(tmp, 'kill.sqlite'),
      '--progress',
      'plain',
    ];
    const code = await new Promise<number | null>((res) => {
      child = spawn(process.execPath, [CLI, ...args], { cwd: packageRoot, env: { ...process.env, CI: 'true' } });
      child.on('close', (c, sig) => res(sig === 'SIGKILL' ? -9 : c));
    });
    expect(code).to.equal(-9);
    const first = srv.log
      .filter((e) => isJudge(e.body.messages[0]!.content))
      .slice(0, 4)
      .map((e) => e.key);
    expect(first).to.have.length(4);
    const before = srv.log.length;
    const report = join(tmp, 'kill.json');
    const r = await cli([...args, '--report', report]);
    expect(r.code, r.err).to.equal(0);
    const again = srv.log
      .slice(before)
      .filter((e) => isJudge(e.body.messages[0]!.content))
      .map((e) => e.key);
    expect(again.filter((k) => first.includes(k))).to.deep.equal([]);
    expect(again).to.have.length(18 - 4);
    // the plain progress lines count the cached answers and the live calls
    expect(r.err).to.match(/compare: 18\/18 judgements \| calls 18 done \(4 cached\), 0 in flight/);
    expect(JSON.parse(readFileSync(report, 'utf8')).judgements).to.equal(18);
  });
});
