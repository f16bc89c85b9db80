/**
 * Issue 56 item 4: no silent overwrite, no silent default. `eval --suite` refuses an --out that
 * holds a suite's results without --overwrite; `~` and $VARS are expanded in config and suite files;
 * a run with validation asked for and no `val` items warns; the first run says it is making the tiny
 * model; `subset` and `leakage` print their message alone (no stack trace, no Node warning).
 */
import { expect } from 'chai';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createServer, type Server } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import '../lib/train/stages/index.js';
import '../lib/judge/backends/index.js';
import { expandPath } from '../lib/util/fs.js';
import { readSuite } from '../lib/eval/suite.js';
import { readConfigFile } from '../lib/config/train.js';
import { ensureDefaultModel, runTraining } from '../lib/train/run.js';
import { LlmClient } from '../lib/llm/client.js';
import { refuseSuiteOverwrite } from '../bin/commands/eval.js';
import { packageRoot } from '../lib/native.js';
import { cli } from './helpers/run.js';

const SAMPLE = join(packageRoot, 'data', 'sample', 'papergym-sample.jsonl');

describe('no silent overwrite, no silent default (issue 56)', function () {
  this.timeout(60000);
  let tmp = '';
  before(() => (tmp = mkdtempSync(join(tmpdir(), 'pg-silent-'))));
  after(() => rmSync(tmp, { recursive: true, force: true }));

  it('expands ~ and $VAR / ${VAR} as a shell would; an unset variable is an error naming it', () => {
    const env = { HOME: '/home/u', DATA: '/srv/d' };
    expect(expandPath('~/m', 'w', env)).to.equal('/home/u/m');
    expect(expandPath('~', 'w', env)).to.equal('/home/u');
    expect(expandPath('$DATA/a.jsonl', 'w', env)).to.equal('/srv/d/a.jsonl');
    expect(expandPath('${DATA}x/b', 'w', env)).to.equal('/srv/dx/b');
    expect(expandPath('a~b', 'w', env)).to.equal('a~b');
    expect(() => expandPath('$NOPE/a', 'config c.yaml: model', env)).to.throw('config c.yaml: model: $NOPE/a names $NOPE, which is not set');
  });

  it('expands them in a suite YAML and in a train config file', () => {
    process.env.PG_TEST_BENCH = join(tmp, 'bench');
    try {
      const f = join(tmp, 'suite.yaml');
      writeFileSync(
        f,
        'benchmarks:\n  - { name: B, data: $PG_TEST_BENCH/items.jsonl }\nmodels:\n  - { name: base, model: ~/qwen3, adapter: "${PG_TEST_BENCH}/final" }\n',
      );
      const s = readSuite(f);
      expect(s.benchmarks[0]!.data).to.equal(join(tmp, 'bench', 'items.jsonl'));
      expect(s.models[0]!.model).to.equal(join(process.env.HOME!, 'qwen3'));
      expect(s.models[0]!.adapter).to.equal(join(tmp, 'bench', 'final'));
      const c = join(tmp, 'run.yaml');
      writeFileSync(c, 'model: ~/qwen3\ndata: $PG_TEST_BENCH/train.jsonl\n');
      expect(readConfigFile(c)).to.deep.include({ model: join(process.env.HOME!, 'qwen3'), data: join(tmp, 'bench', 'train.jsonl') });
    } finally {
      delete process.env.PG_TEST_BENCH;
    }
  });

  it("eval --suite refuses an --out holding a suite's results unless --overwrite", async () => {
    const out = join(tmp, 'suite-out');
    mkdirSync(out, { recursive: true });
    expect(() => refuseSuiteOverwrite(out, false, false)).to.not.throw();
    writeFileSync(join(out, 'base.B.rows.jsonl'), '');
    expect(() => refuseSuiteOverwrite(out, false, true)).to.throw(
      /suite-out \(the default --out: <suite>-results\) already holds a suite's results \(base\.B\.rows\.jsonl\); pass --overwrite/,
    );
    expect(() => refuseSuiteOverwrite(out, true, false)).to.not.throw();
    // The command refuses before loading a model or calling a judge.
    const suite = join(tmp, 'suite.yaml');
    writeFileSync(suite, `benchmarks:\n  - { name: B, data: ${SAMPLE} }\nmodels:\n  - { name: base, model: /nonexistent-model }\n`);
    const r = await cli(['eval', '--suite', suite, '--out', out]);
    expect(r.code).to.equal(1);
    expect(r.err).to.match(/already holds a suite's results .*pass --overwrite/);
    expect(readFileSync(join(out, 'base.B.rows.jsonl'), 'utf8')).to.equal('');
  });

  it('a run asking for validation with no val items warns before any compute', async () => {
    const data = join(tmp, 'train-only.jsonl');
    writeFileSync(data, readFileSync(SAMPLE, 'utf8').replace(/"split":"val"/g, '"split":"train"'));
    const lines: string[] = [];
    const run = runTraining({
      flags: { data, model: join(tmp, 'no-model'), validation: { validateEvery: 2 } as never },
      log: (l) => lines.push(l),
      handleSignals: false,
    });
    await run.then(
      () => expect.fail('a missing model dir must stop the run'),
      (e: Error) => expect(e.message).to.match(/no-model/),
    );
    expect(lines.join('\n')).to.include('warning: --validate-every 2 asks for validation, but dataset');
    expect(lines.join('\n')).to.include('has no items with split "val" (8 items): no validation will run');
    // --validate-every 0: no warning.
    lines.length = 0;
    await runTraining({
      flags: { data, model: join(tmp, 'no-model'), validation: { validateEvery: 0 } as never },
      log: (l) => lines.push(l),
      handleSignals: false,
    }).catch(() => undefined);
    expect(lines.join('\n')).to.not.include('asks for validation');
  });

  it('the first run says it is making the tiny model; a later one does not', () => {
    const before = process.env.PAPERGYM_NATIVE_CACHE_DIR;
    process.env.PAPERGYM_NATIVE_CACHE_DIR = join(tmp, 'cache');
    try {
      const lines: string[] = [];
      const dir = ensureDefaultModel((l) => lines.push(l));
      expect(lines[0]).to.match(/^first run: making the embedded tiny random Qwen3 once in .*cache\/models\/default-tiny-tied-s0/);
      expect(lines[1]).to.equal(`made the embedded tiny model in ${dir}`);
      lines.length = 0;
      ensureDefaultModel((l) => lines.push(l));
      expect(lines).to.deep.equal([]);
    } finally {
      if (before === undefined) delete process.env.PAPERGYM_NATIVE_CACHE_DIR;
      else process.env.PAPERGYM_NATIVE_CACHE_DIR = before;
    }
  });

  it('subset prints its message alone, exit 1, no stack trace', async () => {
    const r = await cli(['subset', '--data', SAMPLE, '--sizes', '50', '--out-dir', join(tmp, 'subsets')]);
    expect(r.code).to.equal(1);
    expect(r.err.trim()).to.match(/^papergym-native: --sizes 50: only 8 item\(s\) in .*; nothing written$/);
  });

  it('many calls sharing one abort signal against a dead LLM give no MaxListenersExceededWarning', async () => {
    // A port nothing listens on (taken, then freed): every attempt is refused at once and retried (each backoff sleep holds a listener).
    const server: Server = createServer();
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    const port = (server.address() as { port: number }).port;
    await new Promise((r) => server.close(r));
    const warnings: string[] = [];
    const onWarning = (w: Error) => warnings.push(w.name);
    process.on('warning', onWarning);
    try {
      const client = new LlmClient({
        baseUrl: `http://127.0.0.1:${port}/v1`,
        model: 'm',
        concurrency: 2,
        maxRetries: 1,
        minBackoffMs: 200,
        maxBackoffMs: 200,
        timeoutMs: 2000,
      });
      const ac = new AbortController();
      const calls = Array.from({ length: 24 }, () =>
        client.chat({ messages: [{ role: 'user', content: 'x' }], signal: ac.signal }).catch((e: Error) => e.name),
      );
      await Promise.all(calls);
      await new Promise((r) => setImmediate(r));
      expect(warnings).to.not.include('MaxListenersExceededWarning');
    } finally {
      process.off('warning', onWarning);
    }
  });
});
