/**
 * `compare --judge jury` (issue 32 item 2): three loopback judges that disagree in known ways — one
 * always picks position 1, one always the alpha system, one always the last position — give the
 * expected jury choices (weighted plurality, a tie for first place counted as a tie), per-member win
 * rates and the hand-computed agreement (pairs and Fleiss' κ over the categories alpha / beta /
 * gamma); a member that starts failing mid-run stops the run (named) or is left out (named, its
 * choices vote nowhere); the members' requests go out concurrently; bad juries are refused.
 */
import { expect } from 'chai';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { packageRoot } from '../lib/native.js';
import { aggregateChoices } from '../lib/judge/jury.js';
import { choiceAgreement, judgeAgreement } from '../lib/judge/agreement.js';
import { cli } from './helpers/run.js';
import { startFakeLlm, type FakeLlm, type FakeRequestInfo } from './helpers/fake-llm.js';

const ITEMS = join(packageRoot, 'data', 'sample', 'papergym-sample.jsonl');
const ids = readFileSync(ITEMS, 'utf8')
  .trim()
  .split('\n')
  .slice(0, 3)
  .map((l) => (JSON.parse(l) as { id: string }).id);
const isJudge = (r: FakeRequestInfo) => r.body.messages[0]!.content.includes('Candidate plans');
/** Position (1-based) of a system's plan in the judge message. */
const positionOf = (r: FakeRequestInfo, sys: string) => {
  const m = new RegExp(`<plan number="(\\d)">\\s*${sys.toUpperCase()}-PLAN`).exec(r.body.messages[0]!.content);
  return Number(m![1]);
};

describe('compare with a jury (loopback judges)', function () {
  this.timeout(120000);
  let tmp: string;
  let first: FakeLlm;
  let alpha: FakeLlm;
  let last: FakeLlm;
  const plans: string[] = [];
  const member = (name: string, s: FakeLlm, extra = '') => `  - {name: ${name}, kind: http, url: "${s.url}", model: ${name}, maxRetries: 0${extra}}\n`;
  const juryFile = (name: string, body: string) => {
    const f = join(tmp, name);
    writeFileSync(f, `judges:\n${body}`);
    return f;
  };
  /** `compare` with the jury file; the answer cache in tmp (a fresh file per run unless --judge-cache is given). */
  let runs = 0;
  const run = (judges: string, extra: string[] = []) =>
    cli([
      'compare',
      '--data',
      ITEMS,
      '--plans',
      ...plans,
      '--judge',
      'jury',
      '--judges',
      judges,
      '--resamples',
      '200',
      '--progress',
      'none',
      ...(extra.includes('--judge-cache') ? [] : ['--judge-cache', join(tmp, `run${runs++}.sqlite`)]),
      ...extra,
    ]);

  before(async () => {
    tmp = mkdtempSync(join(tmpdir(), 'pg-cmp-jury-'));
    for (const sys of ['alpha', 'beta', 'gamma']) {
      const f = join(tmp, `${sys}.jsonl`);
      writeFileSync(f, ids.map((q) => JSON.stringify({ questionId: q, sample: 0, plan: `${sys.toUpperCase()}-PLAN for ${q}.` })).join('\n') + '\n');
      plans.push(f);
    }
    first = await startFakeLlm({ respond: (r) => (isJudge(r) ? 'Best: 1' : 'Yes') });
    alpha = await startFakeLlm({ respond: (r) => (isJudge(r) ? `Best: ${positionOf(r, 'alpha')}` : 'Yes') });
    last = await startFakeLlm({ respond: (r) => (isJudge(r) ? 'Best: 3' : 'Yes') });
  });
  after(async () => {
    for (const s of [first, alpha, last]) await s?.close();
    rmSync(tmp, { recursive: true, force: true });
  });

  it('aggregateChoices: weighted plurality, a shared first place is a tie; unanimous; nulls do not vote', () => {
    expect(aggregateChoices(['a', 'a', 'b'], [1, 1, 1], 'majority')).to.equal('a');
    expect(aggregateChoices(['a', 'b', 'c'], [1, 1, 1], 'majority')).to.equal('tie');
    expect(aggregateChoices(['a', 'b', 'b'], [3, 1, 1], 'majority')).to.equal('a');
    expect(aggregateChoices(['a', 'b', 'b'], [2, 1, 1], 'majority')).to.equal('tie');
    expect(aggregateChoices(['a', null, 'a'], [1, 1, 1], 'unanimous')).to.equal('a');
    expect(aggregateChoices(['a', 'b', 'a'], [1, 1, 1], 'unanimous')).to.equal('tie');
    expect(aggregateChoices([null, null], [1, 1], 'majority')).to.equal(null);
  });

  it('choiceAgreement: hand-computed Cohen and Fleiss κ over three categories; two categories equal judgeAgreement', () => {
    // Per question the six orders: F picks position 1, A alpha, L position 3 (see the CLI test below).
    const F = ['a', 'a', 'b', 'b', 'c', 'c'];
    const A = ['a', 'a', 'a', 'a', 'a', 'a'];
    const L = ['c', 'b', 'c', 'a', 'b', 'a'];
    const units = F.map((_, i) => ({ planId: `q#${i}`, itemId: String(i), cluster: 'q', choices: { F: F[i]!, A: A[i]!, L: L[i]! } }));
    const r = choiceAgreement(units, ['F', 'A', 'L'], { resamples: 0 });
    const pair = (a: string, b: string) => r.overall.pairs.find((p) => p.a === a && p.b === b)!;
    expect(pair('F', 'A').agreement.value).to.be.closeTo(1 / 3, 1e-12);
    expect(pair('F', 'A').kappa.value).to.be.closeTo(0, 1e-12);
    expect(pair('F', 'L').agreement.value).to.equal(0);
    expect(pair('F', 'L').kappa.value).to.be.closeTo(-0.5, 1e-12);
    expect(pair('A', 'L').kappa.value).to.be.closeTo(0, 1e-12);
    // P̄ = 2/9, P̄_e = (10² + 4² + 4²)/18² = 11/27 → κ = −5/16.
    expect(r.overall.fleiss.value).to.be.closeTo(-5 / 16, 1e-12);
    expect(r.byDimension).to.deep.equal({});
    const yn = [true, true, false, true, false, false];
    const zn = [true, false, false, true, true, false];
    const b = judgeAgreement(
      yn.map((v, i) => ({ planId: `p${i}`, itemId: 'x', verdicts: { y: v, z: zn[i]! } })),
      ['y', 'z'],
      { resamples: 100 },
    );
    const c = choiceAgreement(
      yn.map((v, i) => ({ planId: `p${i}`, itemId: 'x', choices: { y: String(v), z: String(zn[i]) } })),
      ['y', 'z'],
      { resamples: 100 },
    );
    expect(c.overall.pairs[0]!.kappa.value).to.be.closeTo(b.overall.pairs[0]!.kappa.value!, 1e-12);
    expect(c.overall.pairs[0]!.kappa.lo).to.be.closeTo(b.overall.pairs[0]!.kappa.lo!, 1e-12);
    expect(c.overall.fleiss.value).to.be.closeTo(b.overall.fleiss.value!, 1e-12);
  });

  it('CLI: the jury choice per judgement, members’ choices in the rows, per-member win rates and agreement in the report; a rerun asks nothing again', async () => {
    const judges = juryFile('three.yaml', member('F', first) + member('A', alpha) + member('L', last));
    const out = join(tmp, 'rows.jsonl');
    const report = join(tmp, 'report.json');
    const cache = join(tmp, 'three.sqlite');
    const r = await run(judges, ['--out', out, '--report', report, '--judge-cache', cache]);
    expect(r.code, r.err).to.equal(0);
    const rows = readFileSync(out, 'utf8')
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l));
    expect(rows).to.have.length(18);
    for (const row of rows) {
      expect(row.judges).to.deep.equal({ F: row.order[0], A: 'alpha', L: row.order[2] });
      const votes = [row.order[0], 'alpha', row.order[2]];
      const top = votes.filter((v) => v === 'alpha').length >= 2 ? 'alpha' : new Set(votes).size === 3 ? 'tie' : votes.find((v, i) => votes.indexOf(v) !== i);
      expect(row.winner).to.equal(top);
    }
    const rep = JSON.parse(readFileSync(report, 'utf8'));
    // Per question: alpha wins the 4 orders where F or L stands on alpha; the 2 with gamma / beta first and the other last tie.
    expect(rep.systems.map((s: { wins: number }) => s.wins)).to.deep.equal([12, 0, 0]);
    expect(rep.ties).to.equal(6);
    expect(rep.positionBias).to.deep.equal([0.5, 0, 0.5]);
    expect(rep.jury.members.F.winRates.positionBias).to.deep.equal([1, 0, 0]);
    expect(rep.jury.members.A.winRates.systems[0].rate).to.equal(1);
    expect(rep.jury.members.L.health).to.deep.equal({ answers: 18, failed: 0, unreadable: 0 });
    const pair = (a: string, b: string) => rep.jury.agreement.overall.pairs.find((p: { a: string; b: string }) => p.a === a && p.b === b);
    expect(pair('F', 'L').agreement.value).to.equal(0);
    expect(pair('F', 'L').kappa.value).to.be.closeTo(-0.5, 1e-12);
    expect(rep.jury.agreement.overall.fleiss.value).to.be.closeTo(-5 / 16, 1e-12);
    expect(r.out)
      .to.match(/alpha: 66\.7%/)
      .and.match(/member F \(weight 1\): alpha 33\.3%, beta 33\.3%, gamma 33\.3%/)
      .and.match(/F vs L: agree 0\.000 .*Cohen κ -0\.500/)
      .and.match(/Fleiss κ -0\.313/);
    const before = [first, alpha, last].map((s) => s.log.filter(isJudge).length);
    const again = await run(judges, ['--judge-cache', cache]);
    expect(again.code, again.err).to.equal(0);
    expect([first, alpha, last].map((s) => s.log.filter(isJudge).length)).to.deep.equal(before);
  });

  it('CLI: weights move the plurality (alpha with weight 2 wins every judgement; equal weights left 6 ties)', async () => {
    const judges = juryFile('weighted.yaml', member('F', first) + member('A', alpha, ', weight: 2') + member('L', last));
    const report = join(tmp, 'weighted.json');
    const r = await run(judges, ['--report', report, '--judge-cache', join(tmp, 'three.sqlite')]);
    expect(r.code, r.err).to.equal(0);
    const rep = JSON.parse(readFileSync(report, 'utf8'));
    // F (order[0]) and L (order[2]) never agree, so alpha (weight 2) has the most weight in every judgement.
    expect(rep.systems.map((s: { wins: number }) => s.wins)).to.deep.equal([18, 0, 0]);
    expect(rep.ties).to.equal(0);
  });

  it('CLI: a member failing mid-run — stop names it, exit 1, no report; continue leaves it out (named), the others decide', async () => {
    const failing = await startFakeLlm({
      respond: (r) => (isJudge(r) ? 'Best: 3' : 'Yes'),
      fault: (r) => (isJudge(r) && r.index > 6 ? { kind: 'status', status: 500 } : undefined),
    });
    try {
      const judges = juryFile('failing.yaml', member('F', first) + member('A', alpha) + member('L', failing, ', concurrency: 1'));
      const report = join(tmp, 'failing.json');
      const stop = await run(judges, ['--report', report, '--judge-cache', join(tmp, 'failing-stop.sqlite')]);
      expect(stop.code).to.equal(1);
      expect(stop.err).to.match(/compare: jury member L failed: 1\d of its 18 answers null \(1\d failed requests, 0 unreadable\).*juryOnMemberFailure stop/);
      expect(() => readFileSync(report)).to.throw();
      const cont = await run(judges, ['--report', report, '--judge-cache', join(tmp, 'failing-cont.sqlite'), '--jury-on-member-failure', 'continue']);
      expect(cont.code, cont.err).to.equal(0);
      expect(cont.err).to.match(/warning: compare: jury member L left out of the run \(judge.juryOnMemberFailure continue\)/);
      const rep = JSON.parse(readFileSync(report, 'utf8'));
      expect(rep.jury.leftOut).to.deep.equal(['L']);
      expect(rep.jury.members.L.health.leftOut).to.match(/failed requests/);
      // F and A alone: alpha where F picks it (2 of 6 orders), else a 1–1 tie.
      expect(rep.systems.map((s: { wins: number }) => s.wins)).to.deep.equal([6, 0, 0]);
      expect(rep.ties).to.equal(12);
      expect(rep.jury.agreement.judges).to.deep.equal(['F', 'A']);
      expect(cont.out).to.match(/member L .*LEFT OUT/);
    } finally {
      await failing.close();
    }
  });

  it('continue: a member that always fails is asked once per judgement (maxRetries 0) and nothing after it is left out; its stats match the server', async () => {
    const dead = await startFakeLlm({
      respond: (r) => (isJudge(r) ? 'Best: 3' : 'Yes'),
      fault: (r) => (isJudge(r) ? { kind: 'status', status: 500 } : undefined),
    });
    try {
      // 18 judgements, maxNullRate 0.5: left out at its 10th null answer.
      for (const concurrency of [1, 4]) {
        const judges = juryFile(`dead${concurrency}.yaml`, member('F', first) + member('A', alpha) + member('D', dead, `, concurrency: ${concurrency}`));
        const report = join(tmp, `dead${concurrency}.json`);
        const before = dead.log.filter(isJudge).length;
        const r = await run(judges, ['--report', report, '--jury-on-member-failure', 'continue']);
        expect(r.code, r.err).to.equal(0);
        const sent = dead.log.filter(isJudge).length - before;
        const rep = JSON.parse(readFileSync(report, 'utf8'));
        const h = rep.jury.members.D.health;
        // Left out at its 10th answer; answers to requests still in flight then are counted too (afterLeftOut), voting nowhere.
        expect(h.answers - (h.afterLeftOut ?? 0)).to.equal(10);
        expect(h).to.include({ failed: h.answers, unreadable: 0 });
        expect(h.failed, 'every failed request the client counted is in the health').to.equal(rep.judgeStats.D.failures);
        expect(rep.jury.members.D.health.leftOut).to.match(/10 of its 18 answers null \(10 failed requests/);
        // Only the requests already in flight when it was left out may still go out.
        if (concurrency === 1) expect(sent).to.equal(10);
        else expect(sent).to.be.within(10, 10 + concurrency - 1);
        expect(rep.judgeStats.D.requests, 'requests as the server counted them').to.equal(sent);
        expect(rep.judgeStats.D.failures + rep.judgeStats.D.aborted).to.equal(sent);
        expect(r.err).to.match(new RegExp(`judge D \\(D@[^)]+\\): \\{"requests":${sent},`));
      }
    } finally {
      await dead.close();
    }
  });

  it('sends the members’ requests concurrently', async () => {
    const arrivals: Record<string, number[]> = { x: [], y: [] };
    const slow = await Promise.all(
      ['x', 'y'].map((k) =>
        startFakeLlm({
          latencyMs: 400,
          respond: (r) => (isJudge(r) ? 'Best: 1' : 'Yes'),
          fault: (r) => {
            if (isJudge(r)) arrivals[k]!.push(Date.now());
            return undefined;
          },
        }),
      ),
    );
    try {
      const judges = juryFile('slow.yaml', member('x', slow[0]!, ', concurrency: 1') + member('y', slow[1]!, ', concurrency: 1'));
      const r = await cli([
        'compare',
        '--data',
        ITEMS,
        '--plans',
        ...plans.slice(0, 2),
        '--judge',
        'jury',
        '--judges',
        judges,
        '--progress',
        'none',
        '--judge-cache',
        join(tmp, 'slow.sqlite'),
      ]);
      expect(r.code, r.err).to.equal(0);
      expect(arrivals.x).to.have.length(6);
      expect(arrivals.y).to.have.length(6);
      // One request at a time per member; the other member's first request arrives while the first waits its 400 ms.
      expect(Math.abs(Math.min(...arrivals.x) - Math.min(...arrivals.y))).to.be.lessThan(300);
    } finally {
      for (const s of slow) await s.close();
    }
  });

  it('offers only the judge flags compare reads: the local judge and rubric-verdict flags are unknown arguments, --judge takes http or jury', async () => {
    const help = await cli(['compare', '--help']);
    expect(help.code).to.equal(0);
    expect(help.out)
      .to.match(/--judge-url/)
      .and.match(/--judges/)
      .and.match(/compare-cache\.sqlite/);
    for (const flag of ['--judge-batch', '--judge-scoring', '--judge-mode', '--judge-variants', '--judge-score'])
      expect(help.out).to.not.match(new RegExp(`${flag}\\s`));
    const base = ['compare', '--data', ITEMS, '--plans', ...plans, '--judge-url', first.url, '--judge-model', 'F', '--progress', 'none'];
    for (const [flags, named] of [
      [['--judge-batch', '4'], /Unknown arguments?: judge-batch/],
      [['--judge-score', 'prob'], /Unknown arguments?: judge-score/],
      [['--judge', 'local'], /Argument: judge, Given: "local", Choices: "http", "jury"/],
    ] as const) {
      const r = await cli([...base, ...flags]);
      expect(r.code, r.err).to.equal(1);
      expect(r.err).to.match(named);
    }
  });

  it('bad juries: duplicate names and a local member are errors naming them; mean-prob is refused; a jury of one warns', async () => {
    const dup = await run(juryFile('dup.yaml', member('F', first) + member('F', alpha)));
    expect(dup.code).to.equal(1);
    expect(dup.err).to.match(/judge names must be unique/);
    const local = await run(juryFile('local.yaml', member('F', first) + '  - {name: here, kind: local}\n'));
    expect(local.code).to.equal(1);
    expect(local.err).to.match(/jury member here \(kind local\) cannot answer compare's question/);
    for (const [flags, named] of [
      [['--judges', juryFile('nojury.yaml', member('F', first))], /compare: --judges needs --judge jury \(got --judge http\)/],
      [
        ['--judge-aggregation', 'unanimous', '--jury-on-member-failure', 'continue'],
        /compare: --judge-aggregation, --jury-on-member-failure need --judge jury/,
      ],
    ] as const) {
      const r = await cli(['compare', '--data', ITEMS, '--plans', ...plans, '--judge-url', first.url, '--judge-model', 'F', '--progress', 'none', ...flags]);
      expect(r.code).to.equal(1);
      expect(r.err)
        .to.match(named)
        .and.not.match(/judge\.url and judge\.model/);
    }
    const mp = await run(juryFile('two.yaml', member('F', first) + member('A', alpha)), ['--judge-aggregation', 'mean-prob']);
    expect(mp.code).to.equal(1);
    expect(mp.err).to.match(/mean-prob .* use majority or unanimous/);
    const one = await run(juryFile('one.yaml', member('A', alpha)), ['--judge-cache', join(tmp, 'one.sqlite')]);
    expect(one.code, one.err).to.equal(0);
    expect(one.err).to.match(/warning: judge.judges \(--judges\) has one judge: a jury of one/);
    expect(one.out)
      .to.match(/alpha: 100\.0%/)
      .and.match(/jury \(majority; 1 member\):/)
      .and.match(/judge agreement: n\/a \(fewer than two members voting\)/);
  });
});
