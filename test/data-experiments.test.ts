/**
 * The paper's data experiments as settings (issue 39), on loopback fake LLMs: one endpoint per
 * pipeline role, a changed role re-asking only its calls, the rubric ablations, the domain mix and
 * the nested subsets.
 */
import { expect } from 'chai';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { readBuildDataConfig, runBuildData, type BuildDataArgs } from '../bin/commands/build-data.js';
import { runSubset } from '../bin/commands/subset.js';
import { achievedMix, mixOrder, normaliseDomain, parseDomainMix } from '../lib/data/mix.js';
import { TASK_ROLES, type PipelineRole } from '../lib/data/prompts.js';
import { readDataset, validateItem, type PaperGymItem } from '../lib/data/schema.js';
import { PipelineState } from '../lib/data/state.js';
import { formatProvenanceReports, reportsByProvenance } from '../lib/eval/provenance.js';
import type { EvalRow } from '../lib/eval/report.js';
import { startFakeLlm, type FakeLlm } from './helpers/fake-llm.js';
import { writeTinyPaper } from './helpers/tiny-papers.js';

const here = dirname(fileURLToPath(import.meta.url));
const ROLES: PipelineRole[] = ['extract', 'qa', 'rubric', 'rank'];
const tasksOf = (role: PipelineRole) =>
  Object.entries(TASK_ROLES)
    .filter(([t, r]) => r === role && t !== 'leakage')
    .map(([t]) => t);

describe('data experiments: roles, rubric ablations, domain mix, nested subsets (issue 39)', function () {
  this.timeout(120000);
  let work: string;
  let papers: string;
  const servers = {} as Record<PipelineRole | 'default', FakeLlm>;
  const logs: string[] = [];
  const io = { log: (m: string) => logs.push(m) };
  const base = (name: string, extra: Partial<BuildDataArgs> = {}): BuildDataArgs => ({
    papers: [join(papers, 'cs-sketches'), join(papers, 'physics-tails')],
    out: join(work, `${name}.jsonl`),
    llm: servers.default.url,
    model: 'base-model',
    state: join(work, `${name}.sqlite`),
    progress: 'none',
    retries: 0,
    parseTimeout: 600,
    ...extra,
  });
  const roleFlags = (models: Partial<Record<PipelineRole, string>> = {}) =>
    Object.fromEntries(
      ROLES.flatMap((r) => [
        [`llm${r[0].toUpperCase()}${r.slice(1)}Url`, servers[r].url],
        [`llm${r[0].toUpperCase()}${r.slice(1)}Model`, models[r] ?? `${r}-model`],
      ]),
    );
  const items = (out: string) => readDataset(out, { strict: true }).items;

  before(async () => {
    work = mkdtempSync(join(tmpdir(), 'pg-exp-'));
    papers = join(work, 'papers');
    for (const [id, topic] of [
      ['cs-sketches', 'sketch streams'],
      ['cs-graphs', 'graph kernels'],
      ['cs-compilers', 'loop fusion'],
      ['cs-caches', 'cache eviction'],
      ['physics-tails', 'quark tails'],
      ['physics-lasers', 'laser cooling'],
      ['econ-auctions', 'spectrum auctions'],
      ['econ-labour', 'labour supply'],
      ['econ-trade', 'trade tariffs'],
      ['misc-strings', 'string vacua'],
    ]) {
      writeTinyPaper(papers, id, topic);
    }
    for (const k of [...ROLES, 'default'] as const) servers[k] = await startFakeLlm();
  });
  after(async () => {
    for (const s of Object.values(servers)) await s.close();
    rmSync(work, { recursive: true, force: true });
  });

  it('each role reaches its own endpoint with its own model; the default --llm gets nothing', async () => {
    const s = await runBuildData(base('roles', roleFlags()), io);
    expect(s.items).to.equal(2);
    expect(servers.default.log).to.have.length(0);
    for (const r of ROLES) {
      const log = servers[r].log;
      expect(log.length, r).to.be.greaterThan(0);
      expect([...new Set(log.map((e) => e.task))].sort(), r).to.deep.equal(
        tasksOf(r)
          .filter((t) => log.some((e) => e.task === t))
          .sort(),
      );
      expect(
        log.every((e) => tasksOf(r).includes(e.task)),
        r,
      ).to.equal(true);
      expect(new Set(log.map((e) => e.body.model)), r).to.deep.equal(new Set([`${r}-model`]));
      expect(s.roles[r]).to.include({ url: servers[r].url, model: `${r}-model` });
      expect(s.roles[r].calls).to.equal(log.length);
    }
    for (const it of items(s.out)) {
      expect(it.provenance!.models).to.deep.equal({ extract: 'extract-model', qa: 'qa-model', rubric: 'rubric-model', rank: 'rank-model' });
      expect(it.meta!.model).to.equal('extract-model');
    }
    const st = new PipelineState(join(work, 'roles.sqlite'));
    try {
      expect(st.callsByRole().map((r) => r.role)).to.deep.equal(['extract', 'qa', 'rank', 'rubric']);
    } finally {
      st.close();
    }
  });

  it('switching the rubric writer re-asks only the rubric calls (requests counted per endpoint)', async () => {
    const before = Object.fromEntries(ROLES.map((r) => [r, servers[r].log.length]));
    const s = await runBuildData(base('roles', roleFlags({ rubric: 'weaker-writer' })), io);
    const sent = Object.fromEntries(ROLES.map((r) => [r, servers[r].log.length - before[r]]));
    // 2 papers × (rubric-q + rubric-a); the fake's candidates do not depend on the model, so the
    // merge and ranking inputs are unchanged and come from the state
    expect(sent).to.deep.equal({ extract: 0, qa: 0, rubric: 4, rank: 0 });
    expect(servers.rubric.log.slice(before.rubric).every((e) => e.body.model === 'weaker-writer')).to.equal(true);
    expect(s.roles.rubric.calls).to.equal(4);
    expect(s.roles.extract.calls).to.equal(0);
    expect(items(s.out).every((it) => it.provenance!.models!.rubric === 'weaker-writer')).to.equal(true);
    // and a weaker extractor re-asks the extraction (everything downstream sees new text only if it changed)
    const b2 = servers.extract.log.length;
    await runBuildData(base('roles', roleFlags({ rubric: 'weaker-writer', extract: 'weaker-extractor' })), io);
    expect(servers.extract.log.length - b2).to.be.greaterThan(0);
    expect(servers.extract.log.slice(b2).every((e) => e.body.model === 'weaker-extractor')).to.equal(true);
  });

  it('a YAML roles: section sets the same endpoints as the flags, with sampling per role', async () => {
    const cfg = join(work, 'bd.yaml');
    writeFileSync(
      cfg,
      `llm: ${servers.default.url}\nmodel: base-model\nroles:\n  rubric:\n    url: ${servers.rubric.url}\n    model: yaml-writer\n    temperature: 0.7\n    top_p: 0.9\n    max_tokens: 2048\n`,
    );
    const c = readBuildDataConfig(cfg);
    expect(c).to.deep.include({
      llm: servers.default.url,
      llmRubricUrl: servers.rubric.url,
      llmRubricModel: 'yaml-writer',
      llmRubricTemperature: 0.7,
      llmRubricTopP: 0.9,
      llmRubricMaxTokens: 2048,
    });
    const n0 = servers.rubric.log.length;
    const d0 = servers.default.log.length;
    const s = await runBuildData({ ...base('yaml'), ...c } as BuildDataArgs, io);
    expect(s.items).to.equal(2);
    const sent = servers.rubric.log.slice(n0);
    expect(sent.map((e) => e.task).sort()).to.deep.equal(['rubric-a', 'rubric-a', 'rubric-q', 'rubric-q']);
    expect(sent.every((e) => e.body.model === 'yaml-writer' && e.body.temperature === 0.7 && e.body.top_p === 0.9 && e.body.max_tokens === 2048)).to.equal(
      true,
    );
    expect(servers.default.log.slice(d0).some((e) => e.task.startsWith('rubric-q'))).to.equal(false);
    writeFileSync(cfg, 'roles:\n  writer:\n    model: x\n');
    expect(() => readBuildDataConfig(cfg)).to.throw(new RegExp(`${cfg}: roles.writer: unknown role`));
    writeFileSync(cfg, 'temprature: 1\n');
    expect(() => readBuildDataConfig(cfg)).to.throw(/temprature: not a build-data setting/);
  });

  describe('rubric ablations (one shared state: extraction and Q/A are asked once)', () => {
    const run = async (name: string, extra: Partial<BuildDataArgs>) => {
      const n0 = servers.default.log.length;
      const s = await runBuildData(base(name, { state: join(work, 'ablation.sqlite'), ...extra }), io);
      expect(s.failures, name).to.deep.equal([]);
      expect(s.items, name).to.equal(2);
      return { s, sent: servers.default.log.slice(n0), got: items(s.out) };
    };
    const check = (got: PaperGymItem[]) => got.forEach((it) => expect(validateItem(it).errors).to.deep.equal([]));

    it('default: 10 items from R_Q and R_A over both dimensions, general items on', async () => {
      const { got } = await run('abl-default', {});
      check(got);
      for (const it of got) {
        expect(it.rubric).to.have.length(10);
        expect(it.provenance).to.deep.include({
          rubric_sources: ['R_Q', 'R_A'],
          rubric_dimensions: ['method_innovation', 'experimental_design'],
          rubric_top_k: 10,
          general_items: true,
        });
        expect(it.general_rubric_set).to.equal('goel2025-general-v1');
      }
    });
    it('--rubric-sources q: R_Q only (no R_A call; the writer is asked for 20 candidates)', async () => {
      const { sent, got } = await run('abl-q', { rubricSources: 'q' });
      expect(sent.map((e) => e.task).sort()).to.deep.equal(['rubric-dedupe', 'rubric-dedupe', 'rubric-q', 'rubric-q', 'rubric-rank', 'rubric-rank']);
      expect(sent.filter((e) => e.task === 'rubric-q').every((e) => /Write 20 rubric items/.test(e.body.messages[1].content))).to.equal(true);
      check(got);
      for (const it of got) {
        expect(it.rubric.map((r) => r.origin)).to.deep.equal(Array(10).fill('R_Q'));
        expect(it.provenance!.rubric_sources).to.deep.equal(['R_Q']);
      }
    });
    it('--rubric-sources a: R_A only', async () => {
      const { sent, got } = await run('abl-a', { rubricSources: 'a' });
      expect(sent.some((e) => e.task === 'rubric-q')).to.equal(false);
      check(got);
      for (const it of got) expect(it.rubric.every((r) => r.origin === 'R_A')).to.equal(true);
    });
    it('--rubric-dimensions design: every item experimental design, the writer told so', async () => {
      const { sent, got } = await run('abl-design', { rubricDimensions: 'design' });
      const writes = sent.filter((e) => e.task === 'rubric-q' || e.task === 'rubric-a');
      expect(writes).to.have.length(4);
      expect(writes.every((e) => /for the dimension experimental_design only/.test(e.body.messages[1].content))).to.equal(true);
      check(got);
      for (const it of got) {
        expect(it.rubric).to.have.length(10);
        expect(new Set(it.rubric.map((r) => r.dimension))).to.deep.equal(new Set(['experimental_design']));
        expect(it.provenance!.rubric_dimensions).to.deep.equal(['experimental_design']);
      }
    });
    it('--rubric-top-k 5 and --no-general-items', async () => {
      const { got } = await run('abl-k5', { rubricTopK: 5, generalItems: false });
      check(got);
      for (const it of got) {
        expect(it.rubric.map((r) => r.rank)).to.deep.equal([1, 2, 3, 4, 5]);
        expect(it.general_rubric_set).to.equal('none');
        expect(it.provenance).to.deep.include({ rubric_top_k: 5, general_items: false });
      }
      // the schema holds items to their provenance: 5 items without it is invalid
      const bare = { ...got[0], provenance: undefined };
      delete bare.provenance;
      expect(validateItem(bare).errors.join()).to.match(/must have 10 items/);
    });
    it('eval groups its rows by provenance when one dataset mixes ablations', () => {
      const full = items(join(work, 'abl-default.jsonl'));
      const rq = items(join(work, 'abl-q.jsonl')).map((it) => ({ ...it, id: `${it.id}-rq` }));
      const rows: EvalRow[] = [...full, ...rq].flatMap((it) =>
        it.rubric.map((r) => ({ questionId: it.id, sample: 0, itemId: r.id, kind: 'spec' as const, dimension: r.dimension, met: !it.id.endsWith('-rq') })),
      );
      const by = reportsByProvenance([...full, ...rq], rows, { resamples: 20 })!;
      const labels = Object.keys(by);
      expect(labels).to.have.length(2);
      const rqLabel = labels.find((l) => l.startsWith('sources R_Q,'))!;
      expect(by[rqLabel].overall.mean).to.equal(0);
      expect(by[labels.find((l) => l !== rqLabel)!].overall).to.include({ mean: 1, n: 20 });
      const text = formatProvenanceReports(by);
      expect(text, text).to.match(
        /by provenance: sources R_Q, dimensions method_innovation\+experimental_design, top-k 10, general on, models .*: coverage 0\.0% \[0\.0, 0\.0\] over 2 question\(s\)/,
      );
      expect(reportsByProvenance(full, rows)).to.equal(undefined);
    });
    it('bad ablation settings fail before any call, naming the flag', async () => {
      const n0 = servers.default.log.length;
      await runBuildData(base('bad', { rubricSources: 'q,x' }), io).then(
        () => expect.fail(),
        (e) => expect(e.message).to.match(/--rubric-sources: x/),
      );
      await runBuildData(base('bad', { rubricTopK: 0 }), io).then(
        () => expect.fail(),
        (e) => expect(e.message).to.match(/top-k/),
      );
      expect(servers.default.log.length).to.equal(n0);
    });
  });

  it('the domain mix is exact for a seed, nested in size, and stops at the domain that runs out', () => {
    const members = [...Array(100)]
      .map((_, i) => ({ id: `c${i}`, d: 'computer science' }))
      .concat(
        [...Array(40)].map((_, i) => ({ id: `p${i}`, d: 'physics (optics)' })),
        [...Array(60)].map((_, i) => ({ id: `e${i}`, d: 'econ.EM' })),
      );
    const mix = parseDomainMix('cs=0.5,physics=0.25,economics=0.25');
    const a = mixOrder(
      members,
      (m) => m.id,
      (m) => m.d,
      mix,
      's1',
    );
    // 80/40/40 at 160; the 161st is cs (its share lags most), then physics is needed and has run out
    expect(a.order).to.have.length(161);
    expect(a.limitedBy).to.equal('physics');
    for (const [n, want] of [
      [8, [4, 2, 2]],
      [80, [40, 20, 20]],
      [160, [80, 40, 40]],
    ] as const) {
      const m = achievedMix(a.order.slice(0, n), (x) => x.d, mix);
      expect([m.cs.count, m.physics.count, m.economics.count], `size ${n}`).to.deep.equal(want);
    }
    // every prefix within one member of the target per domain
    for (let n = 1; n <= 161; n++) {
      const m = achievedMix(a.order.slice(0, n), (x) => x.d, mix);
      for (const t of mix) expect(Math.abs((m[t.key]?.count ?? 0) - t.share * n)).to.be.lessThan(1);
    }
    expect(
      mixOrder(
        members,
        (m) => m.id,
        (m) => m.d,
        mix,
        's1',
      ).order,
    ).to.deep.equal(a.order);
    expect(
      mixOrder(
        members,
        (m) => m.id,
        (m) => m.d,
        mix,
        's2',
      ).order,
    ).not.to.deep.equal(a.order);
    expect(normaliseDomain('hep-th')).to.equal('physics');
    expect(normaliseDomain('cs.LG')).to.equal('computer science');
    expect(() => parseDomainMix('cs=0.5,physics')).to.throw(/--domain-mix: "physics"/);
  });

  it('build-data --domain-mix draws the papers before any LLM call and reports the achieved mix', async () => {
    const tsv = join(work, 'domains.tsv');
    writeFileSync(tsv, 'file\tprimary_category\nmisc-strings\thep-th\n');
    const n0 = servers.default.log.length;
    const s = await runBuildData(base('mix', { papers: [papers], domainMix: 'cs=0.5,physics=0.25,economics=0.25', mixSeed: '7', domains: tsv }), io);
    // 4 cs, 3 physics (2 by name, 1 by the TSV's arXiv category), 3 economics: cs runs out at 8
    expect(s.mix).to.deep.include({ drawn: 8, of: 10, seed: '7', limitedBy: 'cs' });
    expect(s.mix!.achieved).to.deep.equal({ cs: { count: 4, share: 0.5 }, physics: { count: 2, share: 0.25 }, economics: { count: 2, share: 0.25 } });
    const got = items(s.out);
    expect(got).to.have.length(8);
    const by = (d: string) => got.filter((it) => it.source.domain === d).length;
    expect([by('computer science'), by('physics'), by('economics')]).to.deep.equal([4, 2, 2]);
    expect(got.every((it) => it.provenance!.domain_mix === 'cs=0.5,physics=0.25,economics=0.25 seed 7')).to.equal(true);
    expect(logs.some((l) => /drew 8 of 10 paper\(s\) to cs=0\.5.*cs 4 \(0\.50\), physics 2 \(0\.25\), economics 2 \(0\.25\)/.test(l))).to.equal(true);
    // papers left out of the draw cost nothing
    const asked = new Set(
      servers.default.log
        .slice(n0)
        .map((e) => e.body.messages[1].content.match(/A study of ([a-z ]+)/)?.[1])
        .filter(Boolean),
    );
    expect(asked.size).to.equal(8);
  });

  it('subset: nested subsets, exact mix, reproducible for a seed; too large a size writes nothing', () => {
    const sample = readFileSync(join(here, '..', '..', 'data', 'sample', 'papergym-sample.jsonl'), 'utf8').split('\n')[0];
    const proto = JSON.parse(sample) as PaperGymItem;
    const domains = [...Array(60).fill('computer science'), ...Array(30).fill('physics'), ...Array(30).fill('economics')];
    const rows = domains.map((d, i) => JSON.stringify({ ...proto, id: `it-${i}`, source: { ...proto.source, paper_id: `p-${i}`, domain: d } }));
    const data = join(work, 'pool.jsonl');
    writeFileSync(data, rows.join('\n') + '\n');
    const out1 = join(work, 'sub1');
    const warn: string[] = [];
    const s = runSubset({ data, sizes: '8,20,40,100', seed: 'fig3', outDir: out1, domainMix: 'cs=0.5,physics=0.25,economics=0.25' }, (m) => warn.push(m));
    const ids = s.files.map((f) => readDataset(f.file, { strict: true }).items.map((it) => it.id));
    for (let k = 1; k < ids.length; k++) expect(ids[k].slice(0, ids[k - 1].length)).to.deep.equal(ids[k - 1]);
    expect(s.files.map((f) => [f.achieved.cs.count, f.achieved.physics.count, f.achieved.economics.count])).to.deep.equal([
      [4, 2, 2],
      [10, 5, 5],
      [20, 10, 10],
      [50, 25, 25],
    ]);
    const again = runSubset(
      { data, sizes: [100, 8, 40, 20], seed: 'fig3', outDir: join(work, 'sub2'), domainMix: 'cs=0.5,physics=0.25,economics=0.25' },
      () => {},
    );
    for (let k = 0; k < 4; k++) expect(readFileSync(again.files[k].file, 'utf8')).to.equal(readFileSync(s.files[k].file, 'utf8'));
    const other = runSubset({ data, sizes: '20', seed: 'other', outDir: join(work, 'sub3') }, () => {});
    expect(readDataset(other.files[0].file).items.map((it) => it.id)).not.to.deep.equal(ids[1]);
    expect(JSON.parse(readFileSync(join(out1, 'subsets.json'), 'utf8'))).to.deep.include({ seed: 'fig3', available: 120 });
    expect(() => runSubset({ data, sizes: '500', seed: 'x', outDir: join(work, 'sub4') }, () => {})).to.throw(
      /--sizes 500: only 120 item\(s\).*nothing written/,
    );
    // bad UTF-8 in the data is warned about, naming the file
    writeFileSync(data, Buffer.concat([Buffer.from(rows.join('\n') + '\n'), Buffer.from([0xff, 0xfe, 0x0a])]));
    runSubset({ data, sizes: '8', outDir: join(work, 'sub5') }, (m) => warn.push(m));
    expect(warn.some((m) => m.startsWith(`${data}: not valid UTF-8 (1 line(s), first line 121)`))).to.equal(true);
  });
});
