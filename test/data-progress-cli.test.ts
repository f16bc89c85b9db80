/**
 * Progress and Ctrl-C of `build-data` and `leakage`, run as a user would: the
 * CLI in a child process without a TTY and with CI=true, against the fake OpenAI-compatible
 * server of test/helpers/fake-llm.ts. While requests hang, plain progress lines keep coming and
 * show the calls in flight; SIGINT saves the state, prints the resume command and exits 130
 * (no "LLM call aborted" error); rerunning that command finishes without repeating any answered
 * request.
 */
import { expect } from 'chai';
import { spawn } from 'node:child_process';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { PipelineState } from '../lib/data/state.js';
import { readDataset } from '../lib/data/schema.js';
import { startFakeLlm, type FakeLlm } from './helpers/fake-llm.js';

const here = dirname(fileURLToPath(import.meta.url));
const ROOT = join(here, '..', '..');
const CLI = join(ROOT, 'dist', 'bin', 'papergym-native.js');

interface Run {
  code: number | null;
  signal: NodeJS.Signals | null;
  stdout: string;
  stderr: string;
}

/** Run the CLI; `interruptWhen(stderrSoFar)` true → send SIGINT once. */
function runCli(args: string[], interruptWhen?: (stderr: string) => boolean): Promise<Run> {
  return new Promise((resolveP, reject) => {
    const child = spawn(process.execPath, [CLI, ...args], { env: { ...process.env, CI: 'true', PAPERGYM_LLM_API_KEY: '' }, stdio: ['ignore', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    let sent = false;
    child.stdout.on('data', (c) => (stdout += c));
    child.stderr.on('data', (c) => {
      stderr += c;
      if (!sent && interruptWhen?.(stderr)) {
        sent = true;
        child.kill('SIGINT');
      }
    });
    // a run that never reaches its interrupt point must not hang the suite
    const guard = setTimeout(() => child.kill('SIGKILL'), 120_000);
    child.on('error', reject);
    child.on('close', () => clearTimeout(guard));
    child.on('close', (code, signal) => resolveP({ code, signal, stdout, stderr }));
  });
}

describe('data: progress and Ctrl-C of build-data and leakage (CLI, no TTY, CI=true)', function () {
  this.timeout(240000);
  let work: string;
  let srv: FakeLlm;
  before(async () => {
    work = mkdtempSync(join(tmpdir(), 'pg-progress-'));
    srv = await startFakeLlm();
  });
  after(async () => {
    await srv.close();
    rmSync(work, { recursive: true, force: true });
  });

  it('build-data: lines with calls in flight while requests hang; Ctrl-C saves, exits 130 with the resume command; the rerun repeats nothing', async () => {
    const paper = join(work, 'papers', 'toy-paper');
    mkdirSync(paper, { recursive: true });
    const para = 'We propose a method for estimating diffusion coefficients from simulation and test it against baselines on benchmark systems. ';
    writeFileSync(
      join(paper, 'main.tex'),
      [
        '\\documentclass{article}',
        '\\title{A Toy Paper}',
        '\\begin{document}',
        '\\begin{abstract}',
        para,
        '\\end{abstract}',
        '\\section{Introduction}',
        para.repeat(3),
        '\\input{missing-section}',
        '\\section{Method}',
        para.repeat(3),
        '\\section{Experiments}',
        para.repeat(3),
        '\\end{document}',
        '',
      ].join('\n'),
    );
    const out = join(work, 'data.jsonl');
    const args = [
      'build-data',
      '--papers',
      join(work, 'papers'),
      '--out',
      out,
      '--llm',
      srv.url,
      '--model',
      'fake-model',
      '--concurrency',
      '2',
      '--timeout',
      '60',
      '--progress-interval',
      '0.2',
    ];
    let answered = 0;
    srv.setFault(() => (++answered > 3 ? { kind: 'hang' } : undefined));
    const start1 = srv.log.length;
    // 4 map calls (abstract + 3 sections): 3 answered, 1 hangs; interrupt once two heartbeats show it
    const r1 = await runCli(args, (e) => (e.match(/^build-data: 0\/1 papers \| calls 3 done, 1 in flight/gm) ?? []).length >= 2);
    srv.setFault(undefined);
    expect(r1.code, r1.stderr).to.equal(130);
    expect(r1.stderr, r1.stderr).to.match(
      /^build-data: 0\/1 papers \| calls \d+ done, [1-9] in flight(, \d+ queued)? \|( tokens \d+ in \/ \d+ out \|)? \d+s elapsed \| ETA \?$/m,
    );
    expect(r1.stderr).to.match(/calls 3 done/);
    expect(r1.stderr).to.match(/build-data: every finished LLM call and stage output is saved in .*data\.jsonl\.state\.sqlite/);
    expect(r1.stderr).to.include(`build-data: resume with: papergym-native ${args.join(' ')}`);
    expect(r1.stderr + r1.stdout).not.to.match(/LLM call aborted|NaN|ETA NF|failed/);
    const run1 = srv.log.slice(start1);
    const done1 = new Set(run1.filter((e) => e.outcome === 'ok').map((e) => e.key));
    expect(done1.size).to.equal(3);

    const start2 = srv.log.length;
    const r2 = await runCli(args);
    expect(r2.code, r2.stderr).to.equal(0);
    expect(r2.stdout).to.match(/^toy-paper: ingested, item built$/m);
    // (the toy paper's \input{missing-section} is counted as a structure warning: issue 49)
    expect(r2.stdout.trim().split('\n').at(-1)).to.equal('1 ingested, 0 failed, 1 with structure warnings');
    expect(r2.stderr).to.match(/^build-data: 1\/1 papers \| calls \d+ done \(3 cached\), 0 in flight \| tokens \d+ in \/ \d+ out/m);
    expect(srv.log.slice(start2).filter((e) => done1.has(e.key))).to.deep.equal([]);
    expect(readDataset(out, { strict: true }).items.map((i) => i.id)).to.deep.equal(['toy-paper-q1']);
    const st = new PipelineState(`${out}.state.sqlite`);
    try {
      expect(st.warnings('toy-paper')).to.deep.equal([
        { code: 'include-missing', file: 'main.tex', line: 9, message: 'include "missing-section" not found; skipped' },
      ]);
    } finally {
      st.close();
    }
  });

  it('leakage: progress over rubric items with judge calls in flight; Ctrl-C exits 130 with the resume command; the rerun asks only the rest', async () => {
    const data = join(ROOT, 'data', 'sample', 'papergym-sample.jsonl');
    const state = join(work, 'leak.sqlite');
    const args = [
      'leakage',
      '--data',
      data,
      '--llm',
      srv.url,
      '--model',
      'judge',
      '--state',
      state,
      '--concurrency',
      '4',
      '--timeout',
      '60',
      '--progress-interval',
      '0.2',
    ];
    let answered = 0;
    srv.setFault(() => (++answered > 10 ? { kind: 'hang' } : undefined));
    const start1 = srv.log.length;
    const r1 = await runCli(args, (e) => (e.match(/^leakage: 10\/80 rubric items .*4 in flight, 66 queued/gm) ?? []).length >= 2);
    srv.setFault(undefined);
    expect(r1.code, r1.stderr).to.equal(130);
    expect(r1.stderr.split('\n')[0]).to.match(/^leakage: 0\/80 rubric items \| calls 0 done, 0 in flight \| \d+s elapsed \| ETA \?$/);
    expect(r1.stderr).not.to.match(/failed/);
    expect(r1.stderr).to.match(/^leakage: 10\/80 rubric items \| calls 10 done, 4 in flight, 66 queued \| tokens \d+ in \/ \d+ out \| \d+s elapsed \| ETA \d/m);
    expect(r1.stderr).to.include(`leakage: every finished judge call is saved in ${state}`);
    expect(r1.stderr).to.include(`leakage: resume with: papergym-native ${args.join(' ')}`);
    expect(r1.stderr + r1.stdout).not.to.match(/LLM call aborted|NaN/);
    const done1 = new Set(
      srv.log
        .slice(start1)
        .filter((e) => e.outcome === 'ok')
        .map((e) => e.key),
    );
    expect(done1.size).to.equal(10);
    const start2 = srv.log.length;
    const r2 = await runCli(args);
    expect(r2.code, r2.stderr).to.equal(0);
    expect(r2.stdout).to.match(/judge leakage overall: [\d.]+% \(\d+\/80\)/);
    const run2 = srv.log.slice(start2);
    expect(run2.filter((e) => done1.has(e.key))).to.deep.equal([]);
    expect(new Set(run2.map((e) => e.key)).size).to.equal(70);
  });
});
