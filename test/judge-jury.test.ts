/**
 * The jury (issue 32, items 2 and 5): HTTP judges on loopback servers that disagree in known ways
 * give the expected aggregate (majority, weighted majority, mean-prob, unanimous) and agreement;
 * members are asked concurrently; a member that starts failing mid-run stops the run (named) or is
 * left out by the stated rule; bad jury settings are clear errors; a train config with a local +
 * HTTP jury resolves.
 */
import { expect } from 'chai';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createHttpJudge } from '../lib/judge/http.js';
import { JuryJudge, JuryRunWatch, addMemberSummaries, agreementUnitsFromVerdicts, aggregateVerdicts, memberHealthOf } from '../lib/judge/jury.js';
import { runEval, type PlanGenerator } from '../lib/eval/run.js';
import { formatReport, writeRowsJsonl } from '../lib/eval/report.js';
import { writeReport } from '../lib/report/html.js';
import { makeRewardFn } from '../lib/judge/rewards.js';
import type { PaperGymItem } from '../lib/data/schema.js';
import { judgeAgreement } from '../lib/judge/agreement.js';
import { JudgeHealthError, emptyStats, type Judge } from '../lib/judge/types.js';
import { openJudge, judgeSharesPolicyWeights, judgeLabel } from '../lib/judge/backends/index.js';
import { JUDGE_DEFAULTS, judgeConfigProblems, type JudgeConfig } from '../lib/config/judge.js';
import { resolveConfig } from '../lib/config/train.js';
import '../lib/train/stages/index.js'; // the training settings hold the registered stages' rows
import { judgeConfigFromArgs } from '../bin/judge-options.js';
import { startFakeLlm, between, type FakeLlm } from './helpers/fake-llm.js';

/** Answers per item of each judge: A, B, C disagree in known ways. */
const ANSWERS: Record<string, boolean[]> = { A: [true, true, false, false], B: [true, false, true, false], C: [true, true, true, false] };
const ITEMS = [0, 1, 2, 3].map((k) => ({ id: `i${k}`, text: `item ${k}` }));
const itemIndex = (content: string) => Number(between(content, 'item').slice(5));

describe('jury of HTTP judges over loopback servers', function () {
  this.timeout(30000);
  const srv: Record<string, FakeLlm> = {};
  let failC = false;
  before(async () => {
    for (const name of Object.keys(ANSWERS)) {
      srv[name] = await startFakeLlm({
        respond: (r) => (ANSWERS[name][itemIndex(r.body.messages.at(-1)!.content)] ? 'Yes' : 'No'),
        fault: () => (name === 'C' && failC ? { kind: 'status', status: 500 } : undefined),
      });
    }
  });
  after(async () => {
    for (const s of Object.values(srv)) await s.close();
  });
  const member = (name: string, weight = 1) => ({
    name,
    weight,
    judge: createHttpJudge({ url: srv[name].url, model: name, noCache: true, maxRetries: 0 }) as Judge,
  });
  const req = (plan = 'P') => [{ question: 'Q', plan, items: ITEMS }];

  it('majority, weighted majority, mean-prob and unanimous give the hand-derived verdicts; members’ verdicts kept', async () => {
    const cases: [ConstructorParameters<typeof JuryJudge>[1], number[], boolean[]][] = [
      [{ aggregation: 'majority' }, [1, 1, 1], [true, true, true, false]],
      [{ aggregation: 'majority' }, [3, 1, 1], [true, true, false, false]],
      [{ aggregation: 'unanimous' }, [1, 1, 1], [true, false, false, false]],
      [{ aggregation: 'mean-prob' }, [1, 1, 1], [true, true, true, false]],
    ];
    for (const [opts, w, want] of cases) {
      const jury = new JuryJudge([member('A', w[0]), member('B', w[1]), member('C', w[2])], opts);
      const [vs] = await jury.judge(req());
      expect(
        vs.map((v) => v.met),
        `${opts!.aggregation} ${w}`,
      ).to.deep.equal(want);
      expect(vs[1].members).to.deep.equal([
        { judge: 'A', met: true },
        { judge: 'B', met: false },
        { judge: 'C', met: true },
      ]);
      if (opts!.aggregation === 'mean-prob') expect(vs.map((v) => v.prob)).to.deep.equal([1, 2 / 3, 2 / 3, 0]);
      await jury.close();
    }
  });

  it('agreement of the jury’s members from its verdicts: A–B κ 0, A–C κ 0.5, B–C agreement 0.75', async () => {
    const jury = new JuryJudge([member('A'), member('B'), member('C')]);
    const vs = await jury.judge([...req('P1'), ...req('P2')]);
    const r = judgeAgreement(agreementUnitsFromVerdicts(['p1', 'p2'], vs), jury.memberNames(), { resamples: 0 });
    const pair = (a: string, b: string) => r.overall.pairs.find((p) => p.a === a && p.b === b)!;
    expect(pair('A', 'B').agreement.value).to.equal(0.5);
    expect(pair('A', 'B').kappa.value).to.be.closeTo(0, 1e-12);
    expect(pair('A', 'C').agreement.value).to.equal(0.75);
    expect(pair('A', 'C').kappa.value).to.be.closeTo(0.5, 1e-12);
    expect(pair('B', 'C').agreement.value).to.equal(0.75);
    expect(r.overall.units).to.equal(8);
    expect(memberHealthOf(vs.flat()).A).to.deep.include({ verdicts: 8, nulls: 0 });
    await jury.close();
  });

  it('asks its HTTP members concurrently', async () => {
    const slow: FakeLlm[] = [];
    const arrivals: number[] = [];
    for (let j = 0; j < 3; j++) {
      slow.push(
        await startFakeLlm({
          respond: () => 'Yes',
          fault: () => {
            arrivals.push(Date.now());
            return { kind: 'hang', ms: 1500 };
          },
        }),
      );
    }
    try {
      const jury = new JuryJudge(slow.map((s, j) => ({ name: `s${j}`, judge: createHttpJudge({ url: s.url, model: 'm', noCache: true, maxRetries: 0 }) })));
      const [vs] = await jury.judge([{ question: 'Q', plan: 'P', items: [ITEMS[0]] }]);
      expect(vs[0].met).to.equal(true);
      expect(arrivals.length).to.equal(3);
      // Every member's request arrived before the first answer (1.5 s after its arrival) was sent.
      expect(Math.max(...arrivals) - Math.min(...arrivals)).to.be.lessThan(1500);
    } finally {
      for (const s of slow) await s.close();
    }
  });

  it('a member that starts failing mid-run: stop (default) names it and rejects; continue leaves it out, named and counted', async () => {
    failC = false;
    const stop = new JuryJudge([member('A'), member('B'), member('C')]);
    await stop.judge(req());
    failC = true;
    let err: Error | undefined;
    await stop.judge(req('P2')).catch((e: Error) => (err = e));
    expect(err).to.be.instanceOf(JudgeHealthError);
    expect(err!.message).to.match(/jury member C failed: 4 of 4 verdicts null .*4 failed requests.*juryOnMemberFailure stop/);
    expect(stop.memberHealth().C).to.deep.include({ verdicts: 8, nulls: 4, errors: 4 });
    const warnings: string[] = [];
    failC = false;
    const go = new JuryJudge([member('A'), member('B'), member('C')], { juryOnMemberFailure: 'continue', onWarning: (m) => warnings.push(m) });
    const [first] = await go.judge(req());
    expect(first.map((v) => v.met)).to.deep.equal([true, true, true, false]);
    failC = true;
    const [vs] = await go.judge(req('P3'));
    // A and B alone: majority of [Y,Y], [Y,N] (tie → not met), [N,Y] (tie), [N,N].
    expect(vs.map((v) => v.met)).to.deep.equal([true, false, false, false]);
    expect(vs[0].members![2]).to.deep.equal({ judge: 'C', met: null, error: true });
    expect(go.memberFailures()).to.deep.equal({ A: 0, B: 0, C: 1 });
    expect(warnings.join('\n')).to.match(/1 of 3 members left out of this call .*C \(4 of 4 verdicts null/);
    failC = false;
    await stop.close();
    await go.close();
  });

  it('bad input: duplicate names, weight ≤ 0 are errors; a jury of one warns', () => {
    const a = member('A');
    expect(() => new JuryJudge([a, { ...member('B'), name: 'A' }])).to.throw(TypeError, /name "A" is already the name of jury members\[0\]/);
    expect(() => new JuryJudge([a, member('B', 0)])).to.throw(TypeError, /jury members\[1\]\.weight must be a finite number > 0 \(got 0\)/);
    expect(() => new JuryJudge([a, member('B', -1)])).to.throw(TypeError, /weight must be a finite number > 0/);
    const w: string[] = [];
    new JuryJudge([a], { onWarning: (m) => w.push(m) });
    expect(w[0]).to.match(/^the jury has one judge: a jury of one/);
    expect(() => new JuryJudge([a, member('B', Infinity)])).to.throw(TypeError, /weight must be a finite number > 0 \(got Infinity\)/);
  });

  it('aggregateVerdicts: nulls do not vote; unanimous with a null and no "no" is null; all null → null', () => {
    const m = (met: boolean | null, prob?: number) => ({ judge: 'x', met, ...(prob !== undefined && { prob }) });
    expect(aggregateVerdicts('i', [m(true), m(null), m(false)], [2, 1, 1], 'majority').met).to.equal(true);
    expect(aggregateVerdicts('i', [m(true), m(null)], [1, 1], 'unanimous').met).to.equal(null);
    expect(aggregateVerdicts('i', [m(null), m(null)], [1, 1], 'majority').met).to.equal(null);
    const mp = aggregateVerdicts('i', [m(true, 0.9), m(false, 0.2)], [1, 3], 'mean-prob');
    expect(mp.prob).to.be.closeTo((0.9 + 0.6) / 4, 1e-12);
    expect(mp.met).to.equal(false);
    expect(aggregateVerdicts('i', [m(true, 0.9), m(true, 0.7)], [1, 1], 'unanimous').prob).to.equal(0.7);
  });
});

describe('jury settings (judge.kind jury, judge.judges)', () => {
  const jury = (judges: unknown, extra: Partial<JudgeConfig> = {}) => ({ ...JUDGE_DEFAULTS, kind: 'jury', judges, ...extra }) as JudgeConfig;

  it('clear errors: duplicate names, weight ≤ 0, a member that is a jury, unknown keys, http member without url, no members', () => {
    const http = { name: 'r', kind: 'http', url: 'http://127.0.0.1:9/v1', model: 'm' };
    expect(judgeConfigProblems(jury([http, { ...http }]))).to.deep.equal([
      'judge.judges[1].name "r" is already the name of judge.judges[0]: judge names must be unique',
    ]);
    expect(judgeConfigProblems(jury([http, { name: 'l', kind: 'local', weight: 0 }]))).to.deep.equal([
      'judge.judges[1].weight must be a finite number > 0 (got 0)',
    ]);
    expect(judgeConfigProblems(jury([http, { name: 'j', kind: 'jury' }]))[0]).to.match(/judge\.judges\[1\]\.kind must be local or http/);
    expect(judgeConfigProblems(jury([http, { name: 'l', kind: 'local', temperature: 1 }]))[0]).to.match(/judge\.judges\[1\]: unknown key temperature/);
    expect(judgeConfigProblems(jury([http, { name: 'h', kind: 'http' }]))).to.deep.equal([
      'judge.judges[1].kind http needs judge.judges[1].url and judge.judges[1].model',
    ]);
    expect(judgeConfigProblems(jury(null))[0]).to.match(/judge\.judges must be a non-empty list/);
    expect(judgeConfigProblems({ ...JUDGE_DEFAULTS, judges: [http] } as unknown as JudgeConfig)[0]).to.match(/judges is only read by judge\.kind jury/);
    expect(judgeConfigProblems(jury([http], { aggregation: 'mode' as never }))[0]).to.match(/aggregation must be majority or mean-prob or unanimous/);
  });

  it('--judges FILE (eval, probe-judge, train flags) reads the member list from a YAML file', () => {
    const dir = mkdtempSync(join(tmpdir(), 'pg-jury-'));
    try {
      const f = join(dir, 'judges.yaml');
      writeFileSync(f, 'judges:\n  - {name: a, kind: http, url: "http://127.0.0.1:9/v1", model: m}\n  - {name: b, kind: local, weight: 2}\n');
      const c = judgeConfigFromArgs({ judge: 'jury', judges: f, judgeAggregation: 'unanimous' });
      expect(c.kind).to.equal('jury');
      expect(c.aggregation).to.equal('unanimous');
      expect(c.judges!.map((m) => m.name)).to.deep.equal(['a', 'b']);
      expect(judgeConfigProblems(c)).to.deep.equal([]);
      expect(() => judgeConfigFromArgs({ judges: join(dir, 'missing.yaml') })).to.throw(/--judges .*missing\.yaml/);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('a train config with a local + HTTP jury resolves; the jury runs on the policy weights; opens through the registry (HTTP members)', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'pg-jury-'));
    const s1 = await startFakeLlm({ respond: () => 'Yes' });
    const s2 = await startFakeLlm({ respond: () => 'No' });
    try {
      const yaml = join(dir, 'train.yaml');
      writeFileSync(
        yaml,
        [
          'judge:',
          '  kind: jury',
          '  aggregation: majority',
          '  juryOnMemberFailure: stop',
          '  judges:',
          '    - name: local',
          '      kind: local',
          '      score: prob',
          '    - name: remote',
          '      kind: http',
          `      url: ${s1.url}`,
          '      model: qwen3-8b',
          '      weight: 1',
          '      noThink: true',
          '',
        ].join('\n'),
      );
      const cfg = resolveConfig({ preset: 'qwen3-1.7b', file: yaml });
      expect(cfg.judge.kind).to.equal('jury');
      expect(judgeSharesPolicyWeights(cfg.judge)).to.equal(true);
      expect(judgeLabel(cfg.judge)).to.equal('jury:majority(local,remote)');
      const c = jury([
        { name: 'yes', kind: 'http', url: s1.url, model: 'a', maxRetries: 0 },
        { name: 'no', kind: 'http', url: s2.url, model: 'b', maxRetries: 0, weight: 2 },
      ]);
      expect(judgeSharesPolicyWeights(c)).to.equal(false);
      const j = await openJudge(c);
      const [vs] = await j.judge([{ question: 'Q', plan: 'P', items: [ITEMS[0]] }]);
      expect(vs[0].met).to.equal(false);
      expect(vs[0].members!.map((m) => m.met)).to.deep.equal([true, false]);
      await j.close?.();
    } finally {
      await s1.close();
      await s2.close();
      rmSync(dir, { recursive: true, force: true });
    }
  });
});

describe('jury in eval rows, the eval summary, the HTML report and the GRPO reward', function () {
  this.timeout(60000);
  /** An in-process judge answering by `rule(item text)`. */
  const ruleJudge = (name: string, rule: (t: string) => boolean): Judge => ({
    name,
    stats: emptyStats,
    async judge(reqs) {
      return reqs.map((r) => r.items.map((it) => ({ itemId: it.id, met: rule(it.text) })));
    },
  });
  const item = (id: string): PaperGymItem => ({
    id,
    source: { paper_id: id, title: 't', domain: 'cs' },
    question: `Question ${id}`,
    reference_answer: 'r',
    rubric: [
      { id: 'r1', text: 'alpha', dimension: 'method_innovation', origin: 'R_Q', rank: 1 },
      { id: 'r2', text: 'beta', dimension: 'experimental_design', origin: 'R_A', rank: 2 },
    ],
    general_rubric_set: 'g',
    split: 'test',
    stages: { goals: '', background: '', methods: '', experimental_design: '' },
  });

  it('eval rows keep each member’s verdict; the report and its text carry the agreement; the HTML report shows it', async () => {
    const jury = new JuryJudge([
      { name: 'yes', judge: ruleJudge('yes', () => true) },
      { name: 'alpha', judge: ruleJudge('alpha', (t) => t === 'alpha') },
    ]);
    const generator: PlanGenerator = {
      async generate(qs, { samples }) {
        return qs.map(() => Array.from({ length: samples }, () => ({ text: 'plan', finishReason: 'stop' })));
      },
    };
    const { report, rows } = await runEval({ items: ['a', 'b', 'c'].map(item), judge: jury, generator, resamples: 50 });
    expect(rows[0].judges).to.deep.equal({ yes: true, alpha: true });
    expect(rows[1].judges).to.deep.equal({ yes: true, alpha: false });
    const pair = report.agreement!.overall.pairs[0];
    expect(pair.agreement.value).to.equal(0.5);
    expect(pair.kappa.value).to.be.closeTo(0, 1e-12);
    expect(report.agreement!.byDimension.method_innovation.pairs[0].agreement.value).to.equal(1);
    expect(formatReport(report)).to.contain('judge agreement (2 judges').and.contain('yes vs alpha: agree 0.500');
    const dir = mkdtempSync(join(tmpdir(), 'pg-jury-html-'));
    try {
      writeRowsJsonl(join(dir, 'rows.jsonl'), rows);
      writeReport({ runs: [], evals: [`jury=${join(dir, 'rows.jsonl')}`], out: join(dir, 'r.html'), png: false, resamples: 50 });
      const html = readFileSync(join(dir, 'r.html'), 'utf8');
      expect(html).to.contain('Judge agreement: jury').and.contain('yes vs alpha');
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('the reward of a jury carries per-member health and verdicts met (GRPO step metrics sum them)', async () => {
    const jury = new JuryJudge([
      { name: 'yes', judge: ruleJudge('yes', () => true) },
      { name: 'alpha', judge: ruleJudge('alpha', (t) => t === 'alpha') },
    ]);
    const [r] = await makeRewardFn(jury, [], { score: 'binary' })([{ item: item('a'), plan: 'P' }]);
    expect(r.judges!.yes).to.deep.include({ verdicts: 2, nulls: 0, met: 2 });
    expect(r.judges!.alpha).to.deep.include({ verdicts: 2, met: 1 });
    expect(addMemberSummaries([r.judges, r.judges])!.alpha).to.deep.include({ verdicts: 4, met: 2 });
    // r1: both yes → met; r2: yes vs no, a tie → not met (majority rule).
    expect(r.reward).to.equal(0.5);
  });
});

describe('JuryRunWatch (compare / leakage member failure over a run)', () => {
  it('continue: counts the answers that arrive after a member is left out (afterLeftOut), which decide nothing', () => {
    const warnings: string[] = [];
    const w = new JuryRunWatch(
      [
        { name: 'a', maxNullRate: 0.25 },
        { name: 'b', maxNullRate: 0.25 },
      ],
      8,
      'continue',
      'leakage',
      (m) => warnings.push(m),
    );
    w.record('a', 'failed');
    w.record('a', 'failed');
    expect(w.active('a')).to.equal(true);
    w.record('a', 'unreadable'); // 3 nulls > 0.25 × 8: left out
    expect(w.active('a')).to.equal(false);
    expect(warnings).to.have.length(1);
    // Requests in flight when it was left out still answer: counted, no second warning, no throw.
    w.record('a', 'failed');
    w.record('a', 'ok');
    w.record('b', 'ok');
    const h = w.health();
    expect(h.a).to.deep.include({ answers: 5, failed: 3, unreadable: 1, afterLeftOut: 2 });
    expect(h.a!.leftOut).to.match(/3 of its 8 answers null \(2 failed requests, 1 unreadable\)/);
    expect(h.b).to.deep.equal({ answers: 1, failed: 0, unreadable: 0 });
    expect(warnings).to.have.length(1);
    expect(w.leftOut()).to.deep.equal(['a']);
  });

  it('stop: the failing answer throws naming the member; every member left out under continue throws', () => {
    const stop = new JuryRunWatch([{ name: 'a', maxNullRate: 0 }], 4, 'stop', 'compare');
    expect(() => stop.record('a', 'failed', 'HTTP 500')).to.throw(JudgeHealthError, /compare: jury member a failed: 1 of its 4 answers null.*last: HTTP 500/);
    const all = new JuryRunWatch([{ name: 'a', maxNullRate: 0 }], 4, 'continue', 'compare', () => undefined);
    expect(() => all.record('a', 'failed')).to.throw(JudgeHealthError, /every jury member failed: a \(/);
  });
});
