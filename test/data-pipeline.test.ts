import { expect } from 'chai';
import { copyFileSync, existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { createHash } from 'node:crypto';
import { runBuildData } from '../bin/commands/build-data.js';
import { runLeakage } from '../bin/commands/leakage.js';
import { applyDuplicateGroups, assignSplit, chunkText, mergeCandidates, selectRubric, stripNumbers } from '../lib/data/pipeline.js';
import { lexicalOverlap } from '../lib/data/leakage.js';
import { PipelineState } from '../lib/data/state.js';
import { readDataset, type PaperGymItem } from '../lib/data/schema.js';
import { startFakeLlm, defaultResponder, type FakeFault, type FakeLlm, type FakeRequestInfo } from './helpers/fake-llm.js';

const here = dirname(fileURLToPath(import.meta.url));
const PAPERS = join(here, '..', '..', 'test', 'fixtures', 'papers');

describe('data pipeline: deterministic steps', () => {
  it('strips concrete numbers from the design but keeps names', () => {
    expect(stripNumbers('We run 3×10^6 iterations, p < 0.05, 87% coverage on Qwen3 with L2 and 1,000 samples in 2015.')).to.equal(
      'We run N iterations, p < N, N coverage on Qwen3 with L2 and N samples in N.',
    );
    expect(stripNumbers('between $10^{-5}$ and 2–4 Hz')).to.equal('between N and N Hz');
  });
  it('chunks long text at paragraph boundaries', () => {
    const t = Array.from({ length: 10 }, (_, i) => `para ${i} `.repeat(50)).join('\n\n');
    const c = chunkText(t, 1200);
    expect(c.length).to.be.greaterThan(3);
    expect(c.every((x) => x.length <= 1200)).to.equal(true);
    expect(c.join('\n\n').replace(/\s+/g, ' ')).to.equal(t.replace(/\s+/g, ' '));
  });
  it('merges, de-duplicates and ranks rubric candidates', () => {
    const mk = (p: string, n: number) =>
      Array.from({ length: n }, (_, i) => ({
        text: `Does the plan do ${p}${i}?`,
        dimension: (i % 2 ? 'experimental_design' : 'method_innovation') as 'experimental_design' | 'method_innovation',
      }));
    const rq = [...mk('q', 7), { text: 'Does the plan  compare baselines?', dimension: 'experimental_design' as const }];
    const ra = [...mk('a', 7), { text: 'does the plan compare baselines', dimension: 'experimental_design' as const }];
    const merged = mergeCandidates(rq, ra);
    expect(merged.length).to.equal(15);
    expect([...merged.find((c) => /baselines/.test(c.text))!.origins].sort()).to.deep.equal(['R_A', 'R_Q']);
    const deduped = applyDuplicateGroups(merged, [
      ['c01', 'c09', 'zz'],
      ['[c02]', 'c10'],
    ]);
    expect(deduped.length).to.equal(13);
    expect([...deduped[0].origins].sort()).to.deep.equal(['R_A', 'R_Q']);
    // ranking with unknown and repeated ids; all experimental_design ranked first
    const ed = deduped.filter((c) => c.dimension === 'experimental_design').map((c) => c.id);
    const rubric = selectRubric(deduped, ['nope', ...ed, ed[0]], 'x-q1');
    expect(rubric.length).to.equal(10);
    expect(rubric.map((r) => r.rank)).to.deep.equal([1, 2, 3, 4, 5, 6, 7, 8, 9, 10]);
    expect(rubric.some((r) => r.dimension === 'method_innovation')).to.equal(true);
    expect(rubric[0].id).to.equal('x-q1-r01');
    expect(() => selectRubric(deduped.slice(0, 5), [], 'x')).to.throw(/only 5/);
  });
  it('assigns splits deterministically per paper', () => {
    expect(assignSplit('a')).to.equal(assignSplit('a'));
    const counts: Record<string, number> = {};
    for (let i = 0; i < 1000; i++) counts[assignSplit(`p${i}`)] = (counts[assignSplit(`p${i}`)] ?? 0) + 1;
    expect(counts.train).to.be.within(740, 860);
    expect(counts.val).to.be.within(60, 140);
  });
  it('discovers papers and prints plain progress lines with an ETA', async () => {
    const { discoverPapers } = await import('../lib/data/pipeline.js');
    const { Progress } = await import('../lib/data/progress.js');
    expect(discoverPapers(PAPERS).map((p) => p.split('/').pop())).to.deep.equal([
      'cs-pysr.tar.gz',
      'cs-scipy-1.0.tar.gz',
      'econ-financial-macro-replication.tar.gz',
      'physics-legwork.tar.gz',
    ]);
    const lines: string[] = [];
    const stream = { isTTY: false, write: (s: string) => lines.push(s) } as unknown as NodeJS.WriteStream;
    const p = new Progress({ label: 'x', stream, intervalMs: 0 });
    expect(lines).to.deep.equal([]); // nothing before the total is known (never "0/0")
    p.add(4);
    expect(lines.at(-1)).to.match(/^x: 0\/4 papers \| calls 0 done, 0 in flight \| \d+s elapsed \| ETA \?\n$/);
    p.tick(true);
    p.call(true);
    p.callStart();
    p.callStart();
    expect(lines.at(-1)).to.match(/calls 1 done \(1 cached\), 2 in flight/);
    await new Promise((r) => setTimeout(r, 5));
    p.callEnd({ promptTokens: 12000, completionTokens: 345 });
    p.callEnd({ failed: true });
    p.tick();
    p.status('stage 2');
    p.stop();
    p.stop();
    expect(lines.at(-1)).to.match(
      /^x: 2\/4 papers \| calls 2 done \(1 cached\), 0 in flight, 1 failed \| tokens 12\.0k in \/ 345 out \| stage 2 \| \d+s elapsed \| ETA \d+s\n$/,
    );
    expect(lines.join('')).not.to.match(/NaN|Infinity|NULL|ETA NF/);
    expect(lines.filter((l) => l === lines.at(-1)).length).to.be.lessThanOrEqual(2);
    expect(() => p.add(-1)).to.throw(RangeError, /add\(n\) must be an integer >= 0/);
    expect(p.counts()).to.deep.include({
      total: 4,
      done: 2,
      failed: 0,
      calls: 2,
      cachedCalls: 1,
      inFlight: 0,
      failedCalls: 1,
      promptTokens: 12000,
      completionTokens: 345,
    });
  });
  it('prints a plain line every interval while nothing finishes (no TTY)', async () => {
    const { Progress } = await import('../lib/data/progress.js');
    const lines: string[] = [];
    const stream = { isTTY: true, write: (s: string) => lines.push(s) } as unknown as NodeJS.WriteStream;
    const p = new Progress({ label: 'y', stream, plain: true, intervalMs: 40, total: 3 });
    p.callStart();
    const n0 = lines.length;
    await new Promise((r) => setTimeout(r, 300));
    p.stop();
    // heartbeat lines arrived with no unit finishing, each showing the call in flight
    const beats = lines.slice(n0, -1);
    expect(beats.length).to.be.greaterThanOrEqual(2);
    for (const l of beats) expect(l).to.match(/^y: 0\/3 papers \| calls 0 done, 1 in flight \| \d+s elapsed \| ETA \?\n$/);
  });
  it('TTY bar: not drawn before the total is known, shows calls in flight, tokens and a finite ETA', async () => {
    const { Progress } = await import('../lib/data/progress.js');
    const { Writable } = await import('node:stream');
    let out = '';
    const stream = Object.assign(new Writable({ write: (c, _e, cb) => ((out += String(c)), cb()) }), {
      isTTY: true,
      columns: 200,
    }) as unknown as NodeJS.WriteStream;
    const p = new Progress({ label: 'bd', stream, plain: false });
    expect(out).to.equal('');
    p.add(3);
    p.callStart();
    p.callStart();
    await new Promise((r) => setTimeout(r, 50));
    p.callEnd({ promptTokens: 100, completionTokens: 10 });
    p.tick();
    p.stop();
    const text = out.replace(/\x1b\[[0-9;?]*[A-Za-z]|\x1b[78]/g, '\n');
    expect(text).to.match(/bd \[[░█]+\] 0\/3 papers \| calls 0 done, 0 in flight \| \d+s elapsed \| ETA \?/);
    expect(text).to.match(/bd \[[░█]+\] 1\/3 papers \| calls 1 done, 1 in flight \| tokens 100 in \/ 10 out \| \d+s elapsed \| ETA \d+s/);
    expect(text).not.to.match(/0\/0|NaN|NULL|Inf|ETA NF/);
  });
  it('lexical overlap proxy', () => {
    expect(lexicalOverlap('How should we compare optimizers on benchmarks?', 'Does the plan compare optimizers on benchmarks?')).to.equal(1);
    expect(lexicalOverlap('How should we compare optimizers?', 'Does the plan use Bayesian shrinkage?')).to.equal(0);
  });
});

/** Deterministic fault plan over the fake server's request keys (first attempts in this plan only, except think). */
function faultPlan(): (req: FakeRequestInfo) => FakeFault | undefined {
  const seen = new Map<string, number>();
  return (req) => {
    const attempt = (seen.get(req.key) ?? 0) + 1;
    seen.set(req.key, attempt);
    const h = parseInt(req.key.slice(0, 8), 16) % 10;
    if (h === 4) return { kind: 'think' };
    if (attempt > 1) return undefined;
    // answer-shape faults only on original requests (not on repair round-trips or length retries),
    // so every call fails at most once per kind and the client's single repair suffices
    const original = req.body.messages.length === 2 && req.body.max_tokens === 4096;
    if (!original && (h === 3 || h === 5 || h === 7)) return undefined;
    switch (h) {
      case 0:
        return { kind: 'status', status: 429, retryAfter: 0.05 };
      case 1:
        return { kind: 'status', status: 500 };
      case 2:
        return { kind: 'hang' };
      case 3:
        return { kind: 'truncate' };
      case 5:
        return { kind: 'wrong-schema' };
      case 6:
        return { kind: 'reset' };
      case 7:
        return { kind: 'length' };
      default:
        return undefined;
    }
  };
}

describe('data pipeline: end to end against the fake LLM server', function () {
  this.timeout(180000);
  const SECRET = 'sk-papergym-e2e-secret';
  let work: string;
  let srv: FakeLlm;
  let clean: PaperGymItem[];
  const logs: string[] = [];
  const args = (name: string, extra: Record<string, unknown> = {}) => ({
    papers: [PAPERS],
    out: join(work, `${name}.jsonl`),
    llm: srv.url,
    model: 'fake-model',
    state: join(work, `${name}.sqlite`),
    timeout: 1.5,
    retries: 4,
    concurrency: 4,
    progress: 'none' as const,
    // runs are compared item by item: a section must not go to the fallback converter in one run
    // and not in another because the machine was busy (the 5 s default is wall-clock)
    parseTimeout: 600,
    ...extra,
  });
  const io = (signal?: AbortSignal) => ({ signal, log: (m: string) => logs.push(m) });

  before(async () => {
    work = mkdtempSync(join(tmpdir(), 'pg-e2e-'));
    process.env.PAPERGYM_LLM_API_KEY = SECRET;
    srv = await startFakeLlm({ apiKey: SECRET });
    const s = await runBuildData(args('clean'), io());
    expect(s.failures).to.deep.equal([]);
    clean = readDataset(s.out, { strict: true }).items;
  });
  after(async () => {
    delete process.env.PAPERGYM_LLM_API_KEY;
    await srv.close();
    rmSync(work, { recursive: true, force: true });
  });

  it('builds one schema-valid item per paper with every stage stored', () => {
    expect(clean.map((i) => i.id)).to.deep.equal(['cs-pysr-q1', 'cs-scipy-1.0-q1', 'econ-financial-macro-replication-q1', 'physics-legwork-q1']);
    for (const it of clean) {
      expect(it.rubric).to.have.length(10);
      expect(it.meta!.model).to.equal('fake-model');
      expect(it.meta!.prompt_version).to.match(/^data-v1#[0-9a-f]{8}$/);
      expect(it.stages.experimental_design).not.to.match(/\d/);
      expect(new Set(it.rubric.map((r) => r.origin)).size).to.be.greaterThan(1);
    }
    expect(clean.find((i) => i.source.paper_id === 'cs-scipy-1.0')!.source.licence).to.equal('BSD-3-Clause');
    const st = new PipelineState(join(work, 'clean.sqlite'));
    try {
      const stages = Object.keys(st.stages('physics-legwork'));
      for (const s of [
        'paper',
        'map:000',
        'reduce:goals',
        'reduce:experimental_design',
        'question',
        'answer',
        'rubric-q',
        'rubric-a',
        'rubric-dedupe',
        'rubric',
        'item',
      ])
        expect(stages).to.include(s);
      expect(st.paperStatus('physics-legwork')!.status).to.equal('done');
    } finally {
      st.close();
    }
  });

  it('loses nothing under 429/500/hangs/resets/truncated JSON/think blocks/wrong schema/length', async () => {
    srv.setFault(faultPlan());
    const before = srv.log.length;
    const s = await runBuildData(args('faulty'), io());
    srv.setFault(undefined);
    const log = srv.log.slice(before);
    const kinds = new Set(log.map((e) => e.outcome));
    for (const k of ['status', 'hang', 'truncate', 'wrong-schema', 'reset', 'length']) expect(kinds, k).to.include(k);
    expect(log.some((e) => parseInt(e.key.slice(0, 8), 16) % 10 === 4)).to.equal(true);
    expect(s.failures).to.deep.equal([]);
    expect(readDataset(s.out, { strict: true }).items).to.deep.equal(clean);
    expect(logs.join('\n')).not.to.include(SECRET);
    expect(logs.some((l) => /retry/.test(l))).to.equal(true);
  });

  it('the same items when the server sends content as parts with a thinking part', async () => {
    srv.setResponder((r) => {
      const v = defaultResponder(r);
      const text = typeof v === 'string' ? v : JSON.stringify(v);
      return {
        content: text,
        message: {
          role: 'assistant',
          content: [
            { type: 'thinking', thinking: [{ type: 'text', text: '{"not": "the answer"}' }] },
            { type: 'text', text },
          ],
        },
      };
    });
    try {
      const s = await runBuildData(args('parts'), io());
      expect(s.failures).to.deep.equal([]);
      // (Not deep-equal to `clean`: under CPU load the LaTeX parser may time out into its fallback, which changes the text.)
      const items = readDataset(s.out, { strict: true }).items;
      expect(items.map((i) => i.id)).to.deep.equal(clean.map((i) => i.id));
      for (const it of items) expect(it.rubric).to.have.length(10);
    } finally {
      srv.setResponder(defaultResponder);
    }
  });

  it('resumes after an abort without sending any finished request again; --force redoes', async () => {
    const ac = new AbortController();
    let ok = 0;
    srv.setFault((_r) => {
      if (ac.signal.aborted) return { kind: 'hang' };
      if (++ok > 30) {
        ac.abort();
        return { kind: 'hang' };
      }
      return undefined;
    });
    const start1 = srv.log.length;
    const err = await runBuildData(args('resume', { concurrency: 1 }), io(ac.signal)).catch((e) => e);
    expect(err?.name).to.equal('LlmAbortError');
    srv.setFault(undefined);
    const run1 = srv.log.slice(start1);
    const answered = new Set(run1.filter((e) => e.outcome === 'ok').map((e) => e.key));
    expect(answered.size).to.equal(30);

    const start2 = srv.log.length;
    const s2 = await runBuildData(args('resume'), io());
    const run2 = srv.log.slice(start2);
    expect(run2.length).to.be.greaterThan(0);
    expect(run2.filter((e) => answered.has(e.key)).map((e) => e.key)).to.deep.equal([]);
    expect(s2.cached).to.be.greaterThanOrEqual(30);
    expect(readDataset(s2.out, { strict: true }).items).to.deep.equal(clean);

    const start3 = srv.log.length;
    const s3 = await runBuildData(args('resume'), io());
    expect(srv.log.length - start3).to.equal(0);
    expect(s3.calls).to.equal(0);

    const start4 = srv.log.length;
    const s4 = await runBuildData(args('resume', { force: true }), io());
    expect(srv.log.length - start4).to.be.greaterThan(40);
    expect(readDataset(s4.out, { strict: true }).items).to.deep.equal(clean);
  });

  it('a stored answer edited to the wrong type (or to non-JSON) is re-validated on read and asked again, naming the state file and key (issue 50 item 4)', async () => {
    const path = join(work, 'edited.sqlite');
    copyFileSync(join(work, 'clean.sqlite'), path);
    for (const ext of ['-wal', '-shm']) if (existsSync(join(work, `clean.sqlite${ext}`))) copyFileSync(join(work, `clean.sqlite${ext}`), path + ext);
    const st = new PipelineState(path);
    const keys = (st.db.prepare('SELECT key FROM llm_calls ORDER BY key LIMIT 2').all() as { key: string }[]).map((r) => r.key);
    st.db.prepare('UPDATE llm_calls SET value = ? WHERE key = ?').run('5', keys[0]);
    st.db.prepare('UPDATE llm_calls SET value = ? WHERE key = ?').run('{"cut', keys[1]);
    st.close();
    const start = srv.log.length;
    logs.length = 0;
    const s = await runBuildData(args('edited'), io());
    expect(s.failures).to.deep.equal([]);
    // Exactly the two edited answers were asked again; every other one came from the state.
    expect(
      srv.log
        .slice(start)
        .filter((e) => e.outcome === 'ok')
        .map((e) => e.key)
        .sort(),
    ).to.have.length(2);
    expect(readDataset(s.out, { strict: true }).items.map((i) => i.id)).to.deep.equal(clean.map((i) => i.id));
    const warned = logs.filter((l) => /fails its schema/.test(l));
    expect(warned.join('\n'))
      .to.contain(`pipeline state ${path}: stored`)
      .and.to.contain(`answer ${keys[0]} fails its schema (/ must be object); asking again`);
    expect(warned.join('\n')).to.contain(`answer ${keys[1]} fails its schema (its value is not JSON`);
  });

  it('progress counts papers known up front, only upward, with failed papers done-with-error', async () => {
    const { Progress } = await import('../lib/data/progress.js');
    const { buildDataset } = await import('../lib/data/pipeline.js');
    const { LlmClient } = await import('../lib/llm/client.js');
    // three papers: one unreadable archive (fails before any call), one whose LLM calls are
    // refused (fails after its sections are known), one good
    const corrupt = join(work, 'corrupt-paper.tar.gz');
    writeFileSync(corrupt, createHash('sha512').update('not a gzip').digest());
    const refused = join(work, 'refused-paper');
    mkdirSync(refused, { recursive: true });
    writeFileSync(join(refused, 'main.tex'), '\\documentclass{article}\\begin{document}\\section{Intro} REFUSE-ME-5d1 text.\\end{document}\n');
    srv.setFault((r) =>
      r.body.messages.some((m) => m.content.includes('REFUSE-ME-5d1')) ? { kind: 'status', status: 400, body: '{"error":{"message":"refused"}}' } : undefined,
    );
    const lines: string[] = [];
    const stream = { isTTY: false, write: (s: string) => lines.push(s) } as unknown as NodeJS.WriteStream;
    const progress = new Progress({ label: 'bd', stream, intervalMs: 0 });
    const state = new PipelineState(join(work, 'progress.sqlite'));
    try {
      const r = await buildDataset({
        papers: [corrupt, refused, join(PAPERS, 'physics-legwork.tar.gz')],
        llm: new LlmClient({ baseUrl: srv.url, model: 'fake-model', maxRetries: 0 }),
        state,
        progress,
        paperConcurrency: 1,
      });
      progress.stop();
      expect(r.items.map((i) => i.id)).to.deep.equal(['physics-legwork-q1']);
      expect(r.failures.map((f) => f.paper)).to.deep.equal([corrupt, 'refused-paper']);
    } finally {
      srv.setFault(undefined);
      state.close();
    }
    const counts = lines
      .map((l) => /: (\d+)\/(-?\d+) /.exec(l))
      .filter((m): m is RegExpExecArray => !!m)
      .map((m) => [Number(m[1]), Number(m[2])]);
    expect(counts.length).to.be.greaterThan(2);
    for (let k = 1; k < counts.length; k++) {
      expect(counts[k][1], `total shrank: ${lines[k - 1]} -> ${lines[k]}`).to.be.at.least(counts[k - 1][1]);
      expect(counts[k][0], `done went back: ${lines[k - 1]} -> ${lines[k]}`).to.be.at.least(counts[k - 1][0]);
    }
    expect(
      counts.every(([d, t]) => t === 3 && d >= 0 && d <= t),
      lines.join(''),
    ).to.equal(true);
    expect(lines.at(-1)).to.match(/^bd: 3\/3 papers \| 2 failed \| calls \d+ done/);
  });

  it('exports the research-plan-gen format', async () => {
    const s = await runBuildData(args('clean', { format: 'research-plan-gen', out: join(work, 'rpg.jsonl') }), io());
    const rows = readFileSync(s.out, 'utf8')
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l));
    expect(rows).to.have.length(4);
    expect(Object.keys(rows[0]).sort()).to.deep.equal(['Goal', 'Reference solution', 'Rubric', 'article_id', 'q_id']);
    expect(rows[0].Rubric).to.have.length(10);
    expect(rows[0].q_id).to.equal(clean[0].id);
    expect(rows[0].Rubric[0]).to.equal(clean[0].rubric.find((r) => r.rank === 1)!.text);
  });

  it('audits leakage with the judge (cached) and the lexical proxy', async () => {
    const data = join(work, 'clean.jsonl');
    const start = srv.log.length;
    const rep = await runLeakage({ data, llm: srv.url, model: 'judge', state: join(work, 'leak.sqlite'), out: join(work, 'leak.json'), progress: 'none' });
    expect(srv.log.length - start).to.equal(40);
    expect(rep.rows).to.have.length(40);
    expect(rep.judge!.overall.n).to.equal(40);
    expect(Object.keys(rep.judge!.byDimension).sort()).to.deep.equal(['experimental_design', 'method_innovation']);
    expect(rep.lexical.overall.n).to.equal(40);
    const again = await runLeakage({ data, llm: srv.url, model: 'judge', state: join(work, 'leak.sqlite'), progress: 'none' });
    expect(srv.log.length - start).to.equal(40);
    expect(again.judge).to.deep.equal(rep.judge);
    const lexOnly = await runLeakage({ data });
    expect(lexOnly.judge).to.equal(undefined);
  });
});

describe('data: schema, sample dataset and general rubric', () => {
  const root = join(here, '..', '..');
  it('the embedded sample dataset is valid: ≥ 6 items from the four papers, both splits, 10 items over both dimensions', async () => {
    const { items, problems } = readDataset(join(root, 'data', 'sample', 'papergym-sample.jsonl'), { strict: true });
    expect(problems).to.deep.equal([]);
    expect(items.length).to.be.greaterThanOrEqual(6);
    expect(new Set(items.map((i) => i.source.paper_id))).to.deep.equal(
      new Set(['cs-pysr', 'cs-scipy-1.0', 'econ-financial-macro-replication', 'physics-legwork']),
    );
    expect(items.filter((i) => i.split === 'val').length).to.be.greaterThanOrEqual(2);
    expect(items.filter((i) => i.split === 'train').length).to.be.greaterThan(items.length / 2);
    for (const it of items) {
      expect(it.stages.experimental_design).not.to.match(/\d/);
      expect(new Set(it.rubric.map((r) => r.origin)).size).to.be.greaterThan(1);
    }
    const { sampleDatasetPath } = await import('../lib/data/schema.js');
    expect(readFileSync(sampleDatasetPath(), 'utf8')).to.equal(readFileSync(join(root, 'data', 'sample', 'papergym-sample.jsonl'), 'utf8'));
  });
  it('the general rubric has the seven checks', async () => {
    const { loadGeneralRubric } = await import('../lib/data/schema.js');
    const g = loadGeneralRubric();
    expect(g.id).to.equal('goel2025-general-v1');
    expect(g.items).to.have.length(7);
  });
  it('reports bad rows with line numbers, skips them, or throws in strict mode', async () => {
    const { parseDataset, validateItem, writeDataset, DatasetValidationError } = await import('../lib/data/schema.js');
    const good = readFileSync(join(root, 'data', 'sample', 'papergym-sample.jsonl'), 'utf8').split('\n')[0];
    const bad = JSON.parse(good);
    bad.rubric = bad.rubric.slice(0, 9);
    const dupRank = JSON.parse(good);
    dupRank.id = 'x2';
    dupRank.rubric[1].rank = 1;
    const text = [good, '', '{not json', JSON.stringify(bad), JSON.stringify(dupRank), good].join('\n');
    const seen: number[] = [];
    const r = parseDataset(text, { onProblem: (p) => seen.push(p.line) });
    expect(r.items).to.have.length(1);
    expect(seen).to.deep.equal([3, 4, 5, 6]);
    expect(r.problems[1].errors.join()).to.match(/rubric/);
    expect(r.problems[3].errors.join()).to.match(/duplicate id/);
    expect(() => parseDataset(text, { strict: true })).to.throw(DatasetValidationError, /line 3/);
    expect(validateItem({ ...JSON.parse(good), split: 'dev' }).errors.join()).to.match(/split/);
    const dir = mkdtempSync(join(tmpdir(), 'pg-schema-'));
    try {
      expect(() => writeDataset(join(dir, 'x.jsonl'), [bad])).to.throw(DatasetValidationError);
      writeFileSync(join(dir, 'y.jsonl'), '');
      writeDataset(join(dir, 'y.jsonl'), [JSON.parse(good)]);
      expect(
        createHash('sha256')
          .update(readFileSync(join(dir, 'y.jsonl')))
          .digest('hex'),
      ).to.equal(
        createHash('sha256')
          .update(good + '\n')
          .digest('hex'),
      );
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
