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
import {
  arenaHardWinRate,
  candidateOrders,
  lengthControlledWinRate,
  parsePairwiseVerdict,
  parsePreference,
  winRates,
  type Judgement,
} from '../lib/eval/compare.js';
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

describe('win rates as the field reports them: Arena-Hard and AlpacaEval LC (issue 48 item 6; by hand)', function () {
  this.timeout(120000);
  const g = (questionId: string, order: number[], winner: number | 'tie' | null, strong = false): Judgement => ({
    questionId,
    order,
    winner,
    position: typeof winner === 'number' ? order.indexOf(winner) + 1 : null,
    ...(strong && { strong: true }),
  });
  it('reads the five labels (last one wins, thinking removed), A/B or 1/2', () => {
    expect(parsePairwiseVerdict('Plan 1 is far better.\n[[1>>2]]')).to.deep.equal({ pick: 1, strong: true });
    expect(parsePairwiseVerdict('My final verdict is: [[B>A]]')).to.deep.equal({ pick: 2, strong: false });
    expect(parsePairwiseVerdict('[[1=2]]')).to.deep.equal({ pick: 'tie', strong: false });
    expect(parsePairwiseVerdict('[[2>>1]] no wait </think> [[1>2]]')).to.deep.equal({ pick: 1, strong: false });
    expect(parsePairwiseVerdict('<think>[[1>>2]]')).to.equal(null);
    expect(parsePairwiseVerdict('Plan 1.')).to.equal(null);
  });
  it('Arena-Hard: two games per question with positions swapped, a strong verdict 3 battles, a tie half: (W + T/2) / (W + L + T)', () => {
    const js = [
      g('q1', [0, 1], 1, true), // model (1) much better in position 2: 3 wins
      g('q1', [1, 0], 1), // model better in position 1: 1 win
      g('q2', [0, 1], 'tie'), // 1 tie
      g('q2', [1, 0], 0), // baseline better: 1 loss
      g('q3', [0, 1], null), // unreadable: left out
      g('q3', [1, 0], 0, true), // baseline much better: 3 losses
    ];
    const a = arenaHardWinRate(['base', 'model'], js, 1, 0, { seed: 5 });
    // W = 4, L = 4, T = 1 → (4 + 0.5) / 9 = 0.5
    expect(a).to.include({ wins: 4, losses: 4, ties: 1, games: 5, rounds: 100 });
    expect(a.rate).to.be.closeTo(4.5 / 9, 1e-12);
    expect(a.lo).to.be.below(a.rate);
    expect(a.hi).to.be.above(a.rate);
    const b = arenaHardWinRate(['base', 'model'], js.slice(0, 3), 1, 0);
    expect(b.rate).to.be.closeTo((4 + 0.5) / 5, 1e-12); // W 4, T 1
  });
  it('AlpacaEval LC: a win explained by a longer plan is taken out (θ = 0, LC 0.5) while the raw rate is 0.583', () => {
    // q1: model wins one game, ties the other (0.75) with a plan 100 characters longer; q2 (0.5) and q3 (0.5): same length.
    const js = [g('q1', [0, 1], 1), g('q1', [1, 0], 'tie'), g('q2', [0, 1], 1), g('q2', [1, 0], 0), g('q3', [0, 1], 'tie'), g('q3', [1, 0], 'tie')];
    const len = (q: string, s: number) => (q === 'q1' && s === 1 ? 200 : 100);
    const r = lengthControlledWinRate(['base', 'model'], js, len, 1, 0);
    expect(r.raw).to.be.closeTo((0.75 + 0.5 + 0.5) / 3, 1e-12);
    // MLE: Σ(y − p)x = 0 fits q1 exactly (σ(θ + β t) = 0.75) and Σ(y − p) = 0 then gives σ(θ) = 0.5 (q2, q3 have x = 0).
    expect(r.theta).to.be.closeTo(0, 1e-5);
    expect(r.lengthControlled).to.be.closeTo(0.5, 1e-6);
    const sd = Math.sqrt(((100 - 100 / 3) ** 2 + 2 * (100 / 3) ** 2) / 2); // sample sd of δ = [100, 0, 0]
    expect(r.beta * Math.tanh(100 / sd)).to.be.closeTo(Math.log(3), 1e-5);
    // No length difference at all: LC = raw.
    const same = lengthControlledWinRate(['base', 'model'], js, () => 100, 1, 0);
    expect(same.lengthControlled).to.be.closeTo(same.raw, 1e-6); // θ = logit(raw) up to the 1e-6 ridge
  });
  it('CLI --win-rate arena-hard: both positions asked, strong verdicts and ties scored, LC beside raw, position bias kept', async () => {
    const tmp = mkdtempSync(join(tmpdir(), 'pg-arena-'));
    const srv = await startFakeLlm({
      respond: (r) => {
        const m = r.body.messages[0]!.content;
        if (!m.includes('Candidate plans')) return 'Yes';
        if (m.includes(ids[2]!)) return 'Same.\n[[1=2]]';
        // BETA wins wherever it stands: much better in position 1, slightly better in position 2
        return m.indexOf('BETA-PLAN') < m.indexOf('ALPHA-PLAN') ? '[[1>>2]]' : '[[2>1]]';
      },
    });
    try {
      const files = ['alpha', 'beta'].map((sys) => {
        const f = join(tmp, `${sys}.jsonl`);
        writeFileSync(f, ids.map((q) => JSON.stringify({ questionId: q, sample: 0, plan: `${sys.toUpperCase()}-PLAN for ${q}.` })).join('\n') + '\n');
        return f;
      });
      const report = join(tmp, 'arena.json');
      const r = await cli([
        'compare',
        '--data',
        ITEMS,
        '--plans',
        ...files,
        '--win-rate',
        'arena-hard',
        '--judge',
        'http',
        '--judge-url',
        srv.url,
        '--judge-model',
        'fake',
        '--out',
        join(tmp, 'j.jsonl'),
        '--report',
        report,
        '--resamples',
        '0',
      ]);
      expect(r.code, r.err).to.equal(0);
      const rep = JSON.parse(readFileSync(report, 'utf8'));
      // q1, q2: 3 + 1 wins each; q3: two ties → (8 + 1) / 10
      expect(rep.arenaHard).to.include({ model: 'beta', baseline: 'alpha', wins: 8, losses: 0, ties: 2, games: 6 });
      expect(rep.arenaHard.rate).to.be.closeTo(0.9, 1e-12);
      // raw preference per question 1, 1, 0.5; the plans' length difference is the same everywhere → LC = raw
      expect(rep.lengthControlled.raw).to.be.closeTo(2.5 / 3, 1e-12);
      expect(rep.lengthControlled.lengthControlled).to.be.closeTo(2.5 / 3, 1e-6);
      expect(rep.prompt.name).to.equal('eval-compare-pairwise.v1');
      const rows = readFileSync(join(tmp, 'j.jsonl'), 'utf8')
        .trim()
        .split('\n')
        .map((l) => JSON.parse(l));
      expect(rows.every((x: { prompt: string; promptHash: string }) => x.prompt === 'eval-compare-pairwise.v1' && x.promptHash === rep.prompt.sha256)).to.equal(
        true,
      );
      expect(rep.positionBias).to.deep.equal([0.5, 0.5]);
      expect(r.out)
        .to.match(/arena-hard: beta vs alpha 90\.0%/)
        .and.match(/length-controlled \(AlpacaEval 2\): beta vs alpha 83\.3% \(raw 83\.3%/);
      expect(srv.log.filter((e) => e.body.messages[0]!.content.includes('Candidate plans'))).to.have.length(6);
      const three = await cli([
        'compare',
        '--data',
        ITEMS,
        '--plans',
        ...files,
        `gamma=${files[0]}`,
        '--win-rate',
        'arena-hard',
        '--judge-url',
        srv.url,
        '--judge-model',
        'fake',
      ]);
      expect(three.code).to.equal(1);
      expect(three.err).to.contain('--win-rate arena-hard compares two systems, the baseline first (got 3: alpha, beta, gamma)');
    } finally {
      await srv.close();
      rmSync(tmp, { recursive: true, force: true });
    }
  });
});
