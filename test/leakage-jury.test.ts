/**
 * `leakage --judge jury` (issue 32 item 2): three loopback judges that disagree in known ways on 8
 * rubric items — Y always "inferable", P on criteria 1–4, Q on criteria 1, 2, 3, 5 — give the
 * expected aggregate verdicts (majority 5/8, unanimous 3/8), per-member rates and the hand-computed
 * agreement (P vs Q agree 0.75, Cohen κ 0.5; Fleiss' κ 1/16); each member keeps its own SQLite
 * call cache (a rerun asks nothing again); a member that starts failing mid-run stops the run
 * (named) or is left out (named, votes on no item); the members' requests go out concurrently; bad
 * juries are refused and `--llm/--model` is unchanged.
 */
import { expect } from 'chai';
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { formatLeakageJury, leakageMemberStatePath, leakageSavedIn, runLeakage } from '../bin/commands/leakage.js';
import { JudgeHealthError } from '../lib/judge/types.js';
import { cli } from './helpers/run.js';
import { between, startFakeLlm, type FakeLlm, type FakeRequestInfo } from './helpers/fake-llm.js';

/** Criterion number k of a leakage request, or null for another request (the start-up check). */
const criterion = (r: FakeRequestInfo): number | null => {
  if (r.task !== 'leakage') return null;
  const m = /criterion (\d+)/.exec(between(r.body.messages.at(-1)!.content, 'item'));
  return m ? Number(m[1]) : null;
};
const judgeBy = (rule: (k: number) => boolean) => (r: FakeRequestInfo) => {
  const k = criterion(r);
  return k === null ? 'Yes' : { inferable: rule(k), reason: `criterion ${k}` };
};

describe('leakage with a jury (loopback judges)', function () {
  this.timeout(120000);
  let tmp: string;
  let data: string;
  let Y: FakeLlm;
  let P: FakeLlm;
  let Q: FakeLlm;
  const member = (name: string, s: FakeLlm, extra = '') => `  - {name: ${name}, kind: http, url: "${s.url}", model: ${name}, maxRetries: 0${extra}}\n`;
  const juryFile = (name: string, body: string) => {
    const f = join(tmp, name);
    writeFileSync(f, `judges:\n${body}`);
    return f;
  };
  const leakageCalls = (s: FakeLlm) => s.log.filter((e) => criterion(e) !== null).length;

  before(async () => {
    tmp = mkdtempSync(join(tmpdir(), 'pg-leak-jury-'));
    data = join(tmp, 'items.jsonl');
    const item = (n: number, ks: number[], dimension: string) => ({
      id: `item-${n}`,
      format: 'rar',
      question: `Question ${n}: how would you study topic ${n}?`,
      rubric: ks.map((k) => ({ id: `r${k}`, text: `criterion ${k}: does the plan do step ${k}?`, weight: 1, dimension })),
      source: { dataset: 'test', file: 'items.jsonl', row: n },
    });
    writeFileSync(data, [item(1, [1, 2, 3, 4], 'method'), item(2, [5, 6, 7, 8], 'experiments')].map((x) => JSON.stringify(x)).join('\n') + '\n');
    Y = await startFakeLlm({ respond: judgeBy(() => true) });
    P = await startFakeLlm({ respond: judgeBy((k) => k <= 4) });
    Q = await startFakeLlm({ respond: judgeBy((k) => [1, 2, 3, 5].includes(k)) });
  });
  after(async () => {
    for (const s of [Y, P, Q]) await s?.close();
    rmSync(tmp, { recursive: true, force: true });
  });

  it('aggregate verdicts by majority and unanimous, per-member rates, hand-computed agreement; each member its own cache, a rerun asks nothing again', async () => {
    const judges = juryFile('three.yaml', member('Y', Y) + member('P', P) + member('Q', Q));
    const state = join(tmp, 'three.sqlite');
    const rep = await runLeakage({ data, judge: 'jury', judges, state, progress: 'none' });
    expect(rep.rows).to.have.length(8);
    const byK = Object.fromEntries(rep.rows.map((r) => [r.rubricId, r]));
    expect(byK.r4!.judges).to.deep.equal({ Y: true, P: true, Q: false });
    expect(byK.r6!.judges).to.deep.equal({ Y: true, P: false, Q: false });
    expect(rep.rows.filter((r) => r.inferable).map((r) => r.rubricId)).to.deep.equal(['r1', 'r2', 'r3', 'r4', 'r5']);
    expect(rep.judge!.overall).to.deep.equal({ n: 8, leaked: 5, rate: 5 / 8 });
    expect(rep.judge!.byDimension.method!.rate).to.equal(1);
    expect(rep.members!.Y!.overall.rate).to.equal(1);
    expect(rep.members!.P!.overall.rate).to.equal(0.5);
    expect(rep.members!.Q!.overall).to.deep.equal({ n: 8, leaked: 4, rate: 0.5 });
    const pair = (a: string, b: string) => rep.jury!.agreement.overall.pairs.find((p) => p.a === a && p.b === b)!;
    expect(pair('P', 'Q').agreement.value).to.equal(0.75);
    expect(pair('P', 'Q').kappa.value).to.be.closeTo(0.5, 1e-12);
    expect(pair('Y', 'P').agreement.value).to.equal(0.5);
    expect(pair('Y', 'P').kappa.value).to.be.closeTo(0, 1e-12);
    // P̄ = 7/12, P̄_e = (2/3)² + (1/3)² = 5/9 → κ = 1/16.
    expect(rep.jury!.agreement.overall.fleiss.value).to.be.closeTo(1 / 16, 1e-12);
    expect(rep.jury!.members.Q!.health).to.deep.equal({ answers: 8, failed: 0, unreadable: 0 });
    for (const n of ['Y', 'P', 'Q']) expect(existsSync(leakageMemberStatePath({ data, state }, n)), n).to.equal(true);
    const calls = [Y, P, Q].map(leakageCalls);
    expect(calls).to.deep.equal([8, 8, 8]);
    const unanimous = await runLeakage({ data, judge: 'jury', judges, state, progress: 'none', judgeAggregation: 'unanimous' });
    expect(unanimous.judge!.overall).to.deep.equal({ n: 8, leaked: 3, rate: 3 / 8 });
    expect([Y, P, Q].map(leakageCalls), 'no question asked twice').to.deep.equal(calls);
  });

  it('CLI: the jury rate, each member’s rate and the agreement are printed; --llm/--model still judges alone', async () => {
    const judges = juryFile('cli.yaml', member('Y', Y) + member('P', P) + member('Q', Q));
    const r = await cli(['leakage', '--data', data, '--judge', 'jury', '--judges', judges, '--state', join(tmp, 'cli.sqlite'), '--progress', 'none']);
    expect(r.code, r.err).to.equal(0);
    expect(r.out)
      .to.match(/judge leakage \(jury\) overall: 62\.5% \(5\/8\)/)
      .and.match(/member P: 50\.0% \(4\/8\)/)
      .and.match(/jury \(majority; 3 members\)/)
      .and.match(/P vs Q: agree 0\.750 .*Cohen κ 0\.500/);
    const one = await cli(['leakage', '--data', data, '--llm', P.url, '--model', 'P', '--state', join(tmp, 'llm.sqlite'), '--progress', 'none']);
    expect(one.code, one.err).to.equal(0);
    expect(one.out).to.match(/^judge leakage overall: 50\.0% \(4\/8\)/m);
  });

  it('CLI, several datasets: the table has the jury rate and one column per member with its own rate', async () => {
    const judges = juryFile('multi.yaml', member('Y', Y) + member('P', P) + member('Q', Q));
    const first = join(tmp, 'first-item.jsonl');
    writeFileSync(first, readFileSync(data, 'utf8').split('\n')[0] + '\n'); // item 1: criteria 1–4
    const r = await cli(['leakage', '--data', data, first, '--judge', 'jury', '--judges', judges, '--progress', 'none']);
    expect(r.code, r.err).to.equal(0);
    const lines = r.out.trim().split('\n');
    const cells = (l: string) =>
      l
        .split('|')
        .slice(1, -1)
        .map((c) => c.trim());
    expect(cells(lines[0]!)).to.deep.equal([
      'dataset',
      'items',
      'rubric items',
      'judge leakage (jury)',
      'member Y',
      'member P',
      'member Q',
      'lexical (≥ 0.6)',
      'mean overlap',
    ]);
    expect(cells(lines[2]!).slice(0, 7)).to.deep.equal([data, '2', '8', '62.5% (5/8)', '100.0% (8/8)', '50.0% (4/8)', '50.0% (4/8)']);
    expect(cells(lines[3]!).slice(0, 7)).to.deep.equal([first, '1', '4', '100.0% (4/4)', '100.0% (4/4)', '100.0% (4/4)', '75.0% (3/4)']);
  });

  it('a member failing mid-run: stop names it and rejects; continue leaves it out, the others decide', async () => {
    let seen = 0;
    const failing = await startFakeLlm({
      respond: judgeBy((k) => [1, 2, 3, 5].includes(k)),
      fault: (r) => (criterion(r) !== null && ++seen > 2 ? { kind: 'status', status: 500 } : undefined),
    });
    try {
      const judges = juryFile('failing.yaml', member('Y', Y) + member('P', P) + member('F', failing, ', concurrency: 1'));
      const err = await runLeakage({ data, judge: 'jury', judges, state: join(tmp, 'stop.sqlite'), progress: 'none' }).catch((e: Error) => e);
      expect(err).to.be.instanceOf(JudgeHealthError);
      expect((err as Error).message).to.match(
        /leakage: jury member F failed: 5 of its 8 answers null \(5 failed requests, 0 unreadable\).*juryOnMemberFailure stop/,
      );
      seen = 0;
      const warnings: string[] = [];
      const rep = await runLeakage(
        { data, judge: 'jury', judges, state: join(tmp, 'cont.sqlite'), progress: 'none', juryOnMemberFailure: 'continue' },
        { onWarning: (m) => warnings.push(m) },
      );
      expect(warnings.join('\n')).to.match(/leakage: jury member F left out of the run \(judge.juryOnMemberFailure continue\)/);
      expect(rep.jury!.leftOut).to.deep.equal(['F']);
      expect(rep.jury!.members.F!.health.leftOut).to.match(/5 failed requests/);
      // Y and P alone: inferable on 1–4 (both yes), a 1–1 tie on 5–8 (not inferable under majority).
      expect(rep.judge!.overall).to.deep.equal({ n: 8, leaked: 4, rate: 0.5 });
      expect(rep.jury!.agreement.judges).to.deep.equal(['Y', 'P']);
    } finally {
      await failing.close();
    }
  });

  it('continue: a member that always fails is asked nothing after it is left out (only requests in flight may still go out)', async () => {
    const dead = await startFakeLlm({
      respond: judgeBy(() => true),
      fault: (r) => (criterion(r) !== null ? { kind: 'status', status: 500 } : undefined),
    });
    try {
      // 8 rubric items, maxNullRate 0.5: left out at its 5th failed call.
      for (const concurrency of [1, 3]) {
        const judges = juryFile(`dead${concurrency}.yaml`, member('Y', Y) + member('P', P) + member('D', dead, `, concurrency: ${concurrency}`));
        const before = leakageCalls(dead);
        const rep = await runLeakage(
          { data, judge: 'jury', judges, state: join(tmp, `dead${concurrency}.sqlite`), progress: 'none', juryOnMemberFailure: 'continue' },
          { onWarning: () => undefined },
        );
        const sent = leakageCalls(dead) - before;
        const h = rep.jury!.members.D!.health;
        // Left out at its 5th answer; answers to requests still in flight then are counted too (afterLeftOut), voting nowhere.
        expect(h.answers - (h.afterLeftOut ?? 0)).to.equal(5);
        expect(h.failed).to.equal(h.answers);
        expect(h.failed, 'the health and the per-member rates count the same failed answers').to.equal(rep.members!.D!.failed);
        expect(h.answers).to.be.at.most(sent);
        if (concurrency === 1) expect(sent).to.equal(5);
        else expect(sent).to.be.within(5, 5 + concurrency - 1);
        expect(rep.judge!.overall.n).to.equal(8);
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
          latencyMs: 300,
          respond: judgeBy(() => false),
          fault: (r) => {
            if (criterion(r) !== null) arrivals[k]!.push(Date.now());
            return undefined;
          },
        }),
      ),
    );
    try {
      const judges = juryFile('slow.yaml', member('x', slow[0]!, ', concurrency: 1') + member('y', slow[1]!, ', concurrency: 1'));
      const rep = await runLeakage({ data, judge: 'jury', judges, state: join(tmp, 'slow.sqlite'), progress: 'none' });
      expect(rep.judge!.overall.rate).to.equal(0);
      expect(arrivals.x).to.have.length(8);
      expect(arrivals.y).to.have.length(8);
      // One request at a time per member (8 × 300 ms each); the other member's first request arrives while the first waits.
      expect(Math.abs(Math.min(...arrivals.x) - Math.min(...arrivals.y))).to.be.lessThan(250);
    } finally {
      for (const s of slow) await s.close();
    }
  });

  it('bad input: duplicate names, a local member, mean-prob, --llm beside a jury, no --judges are errors; a jury of one warns', async () => {
    const state = join(tmp, 'bad.sqlite');
    const fail = (a: Record<string, unknown>) => runLeakage({ data, state, progress: 'none', ...a }).catch((e: Error) => e.message);
    expect(await fail({ judge: 'jury', judges: juryFile('dup.yaml', member('Y', Y) + member('Y', P)) })).to.match(/judge names must be unique/);
    expect(await fail({ judge: 'jury', judges: juryFile('local.yaml', member('Y', Y) + '  - {name: here, kind: local}\n') })).to.match(
      /leakage: jury member here \(kind local\) cannot answer leakage's question/,
    );
    const two = juryFile('two.yaml', member('Y', Y) + member('P', P));
    expect(await fail({ judge: 'jury', judges: two, judgeAggregation: 'mean-prob' })).to.match(/mean-prob .* use majority or unanimous/);
    expect(await fail({ judge: 'jury', judges: two, llm: Y.url, model: 'Y' })).to.match(/not both/);
    expect(await fail({ judge: 'jury' })).to.match(/--judge jury needs --judges/);
    const refused = juryFile('refused.yaml', member('Y', Y) + '  - {name: D, kind: http, url: "http://127.0.0.1:1", model: d, maxRetries: 0}\n');
    const why = await fail({ judge: 'jury', judges: refused });
    expect(why).to.match(/jury member D: .*failed the start-up check.*; fix the url \/ model of its entry judge\.judges\[1\] \(name D\) in the --judges file$/);
    expect(why).to.not.match(/--judge local|--judge-url/);
    const inf = juryFile('inf.yaml', member('Y', Y) + member('P', P, ', weight: .inf'));
    expect(await fail({ judge: 'jury', judges: inf })).to.match(/judge\.judges \(--judges\)\[1\]\.weight must be a finite number > 0 \(got Infinity\)/);
    writeFileSync(join(tmp, 'empty.yaml'), 'judges: []\n');
    const empty = await cli(['leakage', '--data', data, '--judge', 'jury', '--judges', join(tmp, 'empty.yaml'), '--state', state, '--progress', 'none']);
    expect(empty.code).to.equal(1);
    expect(empty.err)
      .to.match(/judge\.judges \(--judges\) must be a non-empty list/)
      .and.not.match(/judgeJudges/);
    expect(leakageSavedIn({ data, state, judge: 'jury', judges: two })).to.equal(
      `every finished judge call is saved in each member's cache: ${leakageMemberStatePath({ data, state }, 'Y')}, ${leakageMemberStatePath({ data, state }, 'P')}`,
    );
    expect(leakageSavedIn({ data, state })).to.equal(`every finished judge call is saved in ${state}`);
    expect(await fail({ judges: two })).to.match(/leakage: --judges needs --judge jury/);
    expect(await fail({ juryOnMemberFailure: 'continue' })).to.match(/leakage: --jury-on-member-failure needs --judge jury/);
    const cliFlags = await cli(['leakage', '--data', data, '--judges', two, '--judge-aggregation', 'majority', '--state', state, '--progress', 'none']);
    expect(cliFlags.code).to.equal(1);
    expect(cliFlags.err).to.match(/leakage: --judges, --judge-aggregation need --judge jury/);
    const warnings: string[] = [];
    const one = await runLeakage(
      { data, judge: 'jury', judges: juryFile('one.yaml', member('P', P)), state, progress: 'none' },
      { onWarning: (m) => warnings.push(m) },
    );
    expect(warnings.join('\n')).to.match(/has one judge: a jury of one/);
    expect(one.judge!.overall.rate).to.equal(0.5);
    expect(formatLeakageJury(one.jury!)).to.match(/^jury \(majority; 1 member\):/);
  });
});
