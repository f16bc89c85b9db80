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
    // The authors' grader (simple-evals GRADER_TEMPLATE): the conversation with the completion as its last
    // turn, the item as str(RubricItem) = "[points] criterion", a JSON reply.
    const judged = srv.log.filter((e) => e.body.messages.at(-1)!.content.includes('# Rubric item'));
    expect(judged).to.have.length(5);
    const first = judged.map((e) => e.body.messages.at(-1)!.content).find((m) => m.includes('[5] Suggests rest and fluids'))!;
    expect(first).to.include('# Conversation\nuser: I have had a mild headache for two days. What can I do at home?\n\nassistant: ');
    expect(first).to.include('"explanation" and "criteria_met"');
    const multi = judged.map((e) => e.body.messages.at(-1)!.content).find((m) => m.includes('[-2] Uses jargon without explaining it'))!;
    expect(multi).to.include(
      'user: Can I take ibuprofen?\n\nassistant: It depends on your health. Do you have kidney problems or stomach ulcers?\n\nuser: No, neither.\n\nassistant: ',
    );
    expect(judged[0]!.body.max_tokens).to.equal(1024);
    expect(rep.prompt.name).to.equal('eval-healthbench-grader.v1');
    expect(rep.prompt.sha256).to.match(/^[0-9a-f]{16}$/);
    expect(r.out).to.contain(`judge prompt: eval-healthbench-grader.v1 (sha256 ${rep.prompt.sha256})`);
    const rowPrompts = readFileSync(rows, 'utf8')
      .trim()
      .split('\n')
      .map((l) => `${JSON.parse(l).prompt}@${JSON.parse(l).promptHash}`);
    expect(new Set(rowPrompts)).to.deep.equal(new Set([`eval-healthbench-grader.v1@${rep.prompt.sha256}`]));
    expect(r.out).to.match(/healthbench: 0\.500/);
    const n = srv.log.length;
    const re = await cli(['eval', '--rescore', rows, '--protocol', 'rar', '--resamples', '0']);
    expect(re.code, re.err).to.equal(0);
    expect(re.out).to.match(/^rar: 0\.500 \[0\.500, 0\.500\] \(n=2; 0 null, 0 skipped\)/);
    // a protocol that does not apply to the rows is an error, as for items
    const wrong = await cli(['eval', '--rescore', rows, '--protocol', 'papergym', '--resamples', '0']);
    expect(wrong.code).to.equal(1);
    expect(wrong.err).to.match(/--protocol papergym does not apply: its items are healthbench, not PaperGym/);
    const neg = await cli(['eval', '--rescore', rows, '--protocol', 'research-plan-gen', '--resamples', '0']);
    expect(neg.err).to.match(/--protocol research-plan-gen does not apply: item hb-1 has a negative-weight rubric item/);
    expect(srv.log.length).to.equal(n);
    // Rows judged with another prompt (ours, a named option) are never averaged with these.
    const ours = join(tmp, 'hb-rows-ours.jsonl');
    const o = await cli(['eval', '--model', dir, '--data', items, ...judgeArgs(), '--protocol-prompt', 'eval-criterion.v1', '--out', ours]);
    expect(o.code, o.err).to.equal(0);
    expect(o.out).to.match(/judge prompt: eval-criterion\.v1/);
    const mixed = join(tmp, 'hb-rows-mixed.jsonl');
    writeFileSync(mixed, readFileSync(rows, 'utf8') + readFileSync(ours, 'utf8'));
    const mix = await cli(['eval', '--rescore', mixed, '--resamples', '0']);
    expect(mix.code).to.equal(1);
    expect(mix.err).to.match(/rows mix judge prompts \(eval-healthbench-grader\.v1 sha256 [0-9a-f]{16}, eval-criterion\.v1 sha256 [0-9a-f]{16}\)/);
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
    expect(r.err).to.match(/eval \(papergym\): \d+ of \d+ verdicts are null or unreadable/);
    expect(existsSync(report)).to.equal(false);
    expect(r.out).to.not.match(/papergym: /);
  });

  it('a PaperGym file goes through the papergym protocol: null items leave the mix, an all-null plan is skipped; a --protocol that does not apply fails', async () => {
    const rub = (id: string, text: string, dimension: string, rank: number) => ({ id, text, dimension, origin: 'R_Q', rank });
    const pg = (id: string, rubric: ReturnType<typeof rub>[]) => ({
      id,
      source: { paper_id: id, title: 't', domain: 'cs' },
      question: `Plan ${id}.`,
      reference_answer: 'r',
      rubric,
      general_rubric_set: 'g',
      split: 'test',
      stages: { goals: '', background: '', methods: '', experimental_design: '' },
    });
    const data = join(tmp, 'pg-null.jsonl');
    const five = (d: string, texts: string[], from: number) =>
      texts.map((t, k) => rub(`${d}${k}`, `${t} ${d}${k}`, d === 'i' ? 'method_innovation' : 'experimental_design', from + k));
    writeFileSync(
      data,
      [
        // p1: innovation 2 met + 3 null, design 1 met + 1 not met + 3 null
        pg('p1', [
          ...five('i', ['YESITEM', 'YESITEM', 'NULLITEM', 'NULLITEM', 'NULLITEM'], 1),
          ...five('d', ['YESITEM', 'NOITEM', 'NULLITEM', 'NULLITEM', 'NULLITEM'], 6),
        ]),
        // p2: every verdict null
        pg('p2', [...five('i', Array(5).fill('NULLITEM'), 1), ...five('d', Array(5).fill('NULLITEM'), 6)]),
      ]
        .map((x) => JSON.stringify(x))
        .join('\n') + '\n',
    );
    srv = await startFakeLlm({
      respond: (q) => {
        const m = q.body.messages.map((x) => x.content).join('\n');
        return m.includes('NULLITEM') ? 'banana' : m.includes('NOITEM') ? 'No' : 'Yes';
      },
    });
    const report = join(tmp, 'pg-null.json');
    const out = join(tmp, 'pg-null-rows.jsonl');
    const args = ['eval', '--model', dir, '--data', data, ...judgeArgs(), '--no-general', '--judge-max-null-rate', '0.9'];
    const r = await cli([...args, '--out', out, '--report', report, '--protocol', 'papergym']);
    expect(r.code, r.err).to.equal(0);
    const rep = JSON.parse(readFileSync(report, 'utf8'));
    // p1: r_spec = 3 met / 4 readable = 0.75 (null as "not met" would give 3/10); no general items → r = r_spec.
    // p2: no readable verdict → skipped and counted, never 0. Innovation: p1 2/2; design: p1 1/2.
    expect(rep.protocol).to.equal('papergym');
    expect(rep.score.score).to.equal(0.75);
    expect(rep).to.include({ plans: 2, skipped: 1, nulls: 16, verdicts: 20 });
    expect(rep.groups['dimension:method_innovation']).to.include({ score: 1, n: 1, nulls: 8, skipped: 1 });
    expect(rep.groups['dimension:experimental_design']).to.include({ score: 0.5, n: 1, nulls: 8, skipped: 1 });
    expect(r.out).to.contain('papergym: 0.750').and.contain('16 of 20 verdict(s) null');
    // the rows rescored give the same number (one function)
    const re = await cli(['eval', '--rescore', out, '--resamples', '0']);
    expect(re.out).to.match(/^papergym: 0\.750/);
    // the default judge cache is beside --out, never beside --data
    expect(existsSync(`${out}.judge-cache.sqlite`)).to.equal(true);
    expect(existsSync(`${data}.judge-cache.sqlite`)).to.equal(false);
    const bad = await cli([...args, '--protocol', 'healthbench', '--out', join(tmp, 'x.jsonl')]);
    expect(bad.code).to.equal(0); // a weighted protocol applies to unit weights
    const hb = join(tmp, 'hb-proto.jsonl');
    expect((await cli(['import', '--format', 'healthbench', '--input', join(FX, 'healthbench'), '--out', hb])).code).to.equal(0);
    const wrong = await cli(['eval', '--model', dir, '--data', hb, ...judgeArgs(), '--protocol', 'papergym']);
    expect(wrong.code).to.equal(1);
    expect(wrong.err).to.match(/--protocol papergym does not apply: its items are healthbench, not PaperGym/);
    const neg = await cli(['eval', '--model', dir, '--data', hb, ...judgeArgs(), '--protocol', 'research-plan-gen']);
    expect(neg.code).to.equal(1);
    expect(neg.err).to.match(/--protocol research-plan-gen does not apply: item hb-1 has a negative-weight rubric item/);
  });

  it('an all-yes judge failing 30% of its requests (HTTP 500, no retry): coverage stays 100%, the failures are nulls left out and counted', async () => {
    srv = await startFakeLlm({
      respond: () => 'Yes',
      fault: (q) => (!q.body.messages[0]!.content.startsWith('Reply with the single word') && q.index % 10 < 3 ? { kind: 'status', status: 500 } : undefined),
    });
    const report = join(tmp, 'pg-500.json');
    const data = join(packageRoot, 'data', 'sample', 'papergym-sample.jsonl');
    const r = await cli([
      'eval',
      '--model',
      dir,
      '--data',
      data,
      '--limit',
      '2',
      ...judgeArgs(),
      '--judge-max-retries',
      '0',
      '--judge-concurrency',
      '1',
      '--report',
      report,
    ]);
    expect(r.code, r.err).to.equal(0);
    const rep = JSON.parse(readFileSync(report, 'utf8'));
    expect(rep.nulls).to.be.above(0);
    // every readable verdict is yes: the reward and every coverage are 1, never (met / all) as before
    expect(rep.score.score).to.equal(1);
    expect(rep.coverage.overall.mean).to.equal(1);
    expect(rep.coverage.overall.nulls + rep.coverage.general.nulls).to.equal(rep.nulls);
    expect(r.out).to.match(/rubric coverage +100\.0%/);
  });

  for (const [format, input, extra] of [
    ['papergym', join(packageRoot, 'data', 'sample', 'papergym-sample.jsonl'), ['--limit', '1', '--no-general']],
    ['researchqa', join(FX, 'researchqa', 'test.json'), []],
    ['research-plan-gen', join(FX, 'research-plan-gen'), ['--limit', '1']],
    ['healthbench', join(FX, 'healthbench'), []],
    ['rubrichub', join(FX, 'rubrichub'), ['--limit', '1']],
    ['rar', join(FX, 'rar'), []],
  ] as const)
    it(`${format}: import → eval round trip; SIGKILL mid-judging and the rerun asks no answered question again (default cache beside --out)`, async () => {
      const items = join(tmp, `rt-${format}.jsonl`);
      const imp = await cli(['import', '--format', format, '--input', input, '--out', items]);
      expect(imp.code, imp.err).to.equal(0);
      let child: ReturnType<typeof spawn> | undefined;
      let judged = 0;
      const isCheck = (m: string) => m.startsWith('Reply with the single word');
      srv = await startFakeLlm({
        latencyMs: 20,
        respond: (q) => {
          const m = q.body.messages.map((x) => x.content).join('\n');
          if (isCheck(q.body.messages[0]!.content)) return 'Yes';
          judged++;
          if (judged === 2 && child) child.kill('SIGKILL'); // dies with this 2nd question unanswered
          const count = Number(/exactly (\d+) lines/.exec(m)?.[1] ?? 0);
          return count ? Array.from({ length: count }, (_, k) => `${k + 1}. completely`).join('\n') : 'Yes';
        },
      });
      const out = join(tmp, `rt-${format}-rows.jsonl`);
      const args = ['eval', '--model', dir, '--data', items, ...judgeArgs(), ...extra, '--judge-concurrency', '1', '--out', out];
      const code = await new Promise<number | null>((res) => {
        child = spawn(process.execPath, [CLI, ...args], { cwd: packageRoot, env: { ...process.env, CI: 'true' } });
        child.on('close', (c, sig) => res(sig === 'SIGKILL' ? -9 : c));
      });
      const asked = srv.log.filter((e) => !isCheck(e.body.messages[0]!.content)).map((e) => e.key);
      const before = srv.log.length;
      const r = await cli([...args, '--report', join(tmp, `rt-${format}.json`)]);
      expect(r.code, r.err).to.equal(0);
      const rep = JSON.parse(readFileSync(join(tmp, `rt-${format}.json`), 'utf8'));
      expect(rep.protocol).to.equal(format);
      expect(rep.score.score).to.be.a('number');
      expect(existsSync(`${out}.judge-cache.sqlite`)).to.equal(true);
      expect(existsSync(`${items}.judge-cache.sqlite`)).to.equal(false);
      expect(code, `${format}: killed at its 2nd judge question`).to.equal(-9);
      // the question answered before the kill is read from the cache, never asked again
      const again = srv.log.slice(before).map((e) => e.key);
      expect(asked.length).to.be.at.least(2);
      expect(again).to.not.include(asked[0]);
    });

  it('killed with SIGKILL mid-judging, the rerun asks no answered judge question again (SQLite cache, seeded plans)', async () => {
    const items = join(tmp, 'kill-hb.jsonl');
    expect((await cli(['import', '--format', 'healthbench', '--input', join(FX, 'healthbench'), '--out', items])).code).to.equal(0);
    let child: ReturnType<typeof spawn> | undefined;
    let judged = 0;
    const isItem = (m: string) => m.includes('# Rubric item');
    srv = await startFakeLlm({
      latencyMs: 20,
      respond: (q) => {
        if (!isItem(q.body.messages.at(-1)!.content)) return 'Yes';
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
      .filter((e) => isItem(e.body.messages.at(-1)!.content))
      .slice(0, 3)
      .map((e) => e.key);
    const before = srv.log.length;
    const report = join(tmp, 'kill.json');
    const r = await cli([...args, '--report', report]);
    expect(r.code, r.err).to.equal(0);
    const again = srv.log
      .slice(before)
      .filter((e) => isItem(e.body.messages.at(-1)!.content))
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
    // Each column names its judge prompt (the authors' HealthBench grader; RaR's, not public, ours).
    expect(t.benchmarks.map((b: { name: string; protocol: string; prompt: { name: string } }) => [b.name, b.protocol, b.prompt.name])).to.deep.equal([
      ['HealthBench', 'healthbench', 'eval-healthbench-grader.v1'],
      ['RaR', 'rar', 'eval-weighted-criterion.v1'],
    ]);
    expect(r.out).to.match(/judge prompts: HealthBench = eval-healthbench-grader\.v1 \(sha256 [0-9a-f]{16}\), RaR = eval-weighted-criterion\.v1/);
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
