import { expect } from 'chai';
import { spawn, type ChildProcess } from 'node:child_process';
import { closeSync, existsSync, mkdtempSync, openSync, readFileSync, readdirSync, rmSync, statSync, writeSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { runBuildData } from '../bin/commands/build-data.js';
import { PipelineState, PipelineStateError } from '../lib/data/state.js';
import { LockHeldError, acquireLock } from '../lib/util/lock.js';
import { startFakeLlm, type FakeLlm } from './helpers/fake-llm.js';
import { writeTinyPaper } from './helpers/tiny-papers.js';

const here = dirname(fileURLToPath(import.meta.url));
const stateModule = join(here, '..', 'lib', 'data', 'state.js');

/** A second real process that opens `path` as a locked pipeline state and holds it until killed. */
function holder(path: string): Promise<ChildProcess> {
  const code = `const { PipelineState } = await import(${JSON.stringify(stateModule)}); new PipelineState(${JSON.stringify(path)}, { lock: true }); console.log('held'); setInterval(() => {}, 1000);`;
  const child = spawn(process.execPath, ['--input-type=module', '-e', code], { stdio: ['ignore', 'pipe', 'inherit'] });
  return new Promise((resolve, reject) => {
    child.stdout!.on('data', (b: Buffer) => (String(b).includes('held') ? resolve(child) : undefined));
    child.on('exit', (c) => reject(new Error(`holder exited with ${c}`)));
  });
}
const exited = (c: ChildProcess) => new Promise<void>((r) => (c.exitCode !== null || c.signalCode !== null ? r() : c.once('exit', () => r())));

/** Overwrite pages 2.. of a SQLite file with garbage (the header stays valid). */
function garbagePages(path: string): void {
  const size = statSync(path).size;
  expect(size).to.be.greaterThan(4 * 4096);
  const fd = openSync(path, 'r+');
  const junk = Buffer.alloc(4096 * 2, 0xa5);
  writeSync(fd, junk, 0, junk.length, 4096);
  closeSync(fd);
}

describe('data: build-data state lock and integrity (issue 38 items 1 and 6)', function () {
  this.timeout(120000);
  let work: string;
  let srv: FakeLlm;
  const args = (name: string, extra: Record<string, unknown> = {}) => ({
    papers: [join(work, 'papers')],
    out: join(work, `${name}.jsonl`),
    llm: srv.url,
    model: 'fake-model',
    state: join(work, `${name}.sqlite`),
    progress: 'none' as const,
    retries: 0,
    parseTimeout: 600,
    ...extra,
  });
  const logs: string[] = [];
  const io = { log: (m: string) => logs.push(m) };
  before(async () => {
    work = mkdtempSync(join(tmpdir(), 'pg-state-'));
    writeTinyPaper(join(work, 'papers'), 'physics-tails', 'quark tails');
    writeTinyPaper(join(work, 'papers'), 'cs-sketches', 'REFUSE-sketch streams');
    srv = await startFakeLlm();
  });
  after(async () => {
    await srv.close();
    rmSync(work, { recursive: true, force: true });
  });

  it('a second process on a locked state fails at once naming the holder pid; a killed holder releases it', async () => {
    const path = join(work, 'locked.sqlite');
    const child = await holder(path);
    try {
      const t0 = Date.now();
      let err: unknown;
      try {
        new PipelineState(path, { lock: true });
      } catch (e) {
        err = e;
      }
      expect(err).to.be.instanceOf(LockHeldError);
      expect((err as LockHeldError).holder?.pid).to.equal(child.pid);
      expect((err as Error).message)
        .to.include(`pid ${child.pid}`)
        .and.include(path);
      expect(Date.now() - t0).to.be.lessThan(2000);
      // the command refuses too, before any LLM call
      const n0 = srv.log.length;
      const e2 = await runBuildData(args('locked'), io).catch((e) => e);
      expect(e2).to.be.instanceOf(LockHeldError);
      expect(e2.message).to.include(`pid ${child.pid}`);
      expect(srv.log.length).to.equal(n0);
    } finally {
      child.kill('SIGKILL');
      await exited(child);
    }
    // SIGKILL runs no cleanup: the OS released the lock
    const st = new PipelineState(path, { lock: true });
    expect(() => acquireLock(`${path}.lock`)).to.throw(LockHeldError, new RegExp(`pid ${process.pid}`));
    st.close();
    acquireLock(`${path}.lock`).release();
  });

  it('a corrupt state is an error naming the file, the output is kept; --force sets it aside and rebuilds', async () => {
    const a = args('corrupt');
    const s = await runBuildData(a, io);
    expect(s.items).to.equal(2);
    const good = readFileSync(a.out, 'utf8');
    garbagePages(a.state);
    const n0 = srv.log.length;
    const err = await runBuildData(a, io).catch((e) => e);
    expect(err).to.be.instanceOf(PipelineStateError);
    expect(err.message)
      .to.include(a.state)
      .and.match(/corrupt/);
    expect(srv.log.length).to.equal(n0);
    expect(readFileSync(a.out, 'utf8')).to.equal(good);
    // not a database at all
    const notDb = join(work, 'not-a-db.sqlite');
    rmSync(notDb, { force: true });
    const fd = openSync(notDb, 'w');
    writeSync(fd, Buffer.alloc(8192, 0x41));
    closeSync(fd);
    expect(() => new PipelineState(notDb)).to.throw(PipelineStateError, new RegExp(`${notDb.replace(/[.]/g, '\\.')}.*(corrupt|not a SQLite)`));
    // --force: the corrupt file is kept aside, a fresh state rebuilds the same items
    const s2 = await runBuildData({ ...a, force: true }, io);
    expect(s2.items).to.equal(2);
    expect(readFileSync(a.out, 'utf8')).to.equal(good);
    expect(readdirSync(work).some((f) => f.startsWith('corrupt.sqlite.corrupt-'))).to.equal(true);
    expect(logs.some((l) => /was corrupt; kept as/.test(l))).to.equal(true);
  });

  it('a run with failed papers never replaces a larger output: its items go to .incomplete.jsonl', async () => {
    const a = args('shrink');
    await runBuildData(a, io);
    const good = readFileSync(a.out, 'utf8');
    expect(good.trim().split('\n')).to.have.length(2);
    // a new prompt version would be needed to re-ask; instead refuse every call of one paper on a fresh state
    const b = { ...a, state: join(work, 'shrink2.sqlite') };
    srv.setFault((r) => (r.body.messages.some((m) => /REFUSE sketch/.test(m.content)) ? { kind: 'status', status: 400 } : undefined));
    try {
      const err = await runBuildData(b, io).catch((e) => e);
      expect(err).to.be.instanceOf(Error);
      expect(err.message)
        .to.match(/1 paper\(s\) failed/)
        .and.include(`${a.out} (2 rows) left unchanged`);
    } finally {
      srv.setFault(undefined);
    }
    expect(readFileSync(a.out, 'utf8')).to.equal(good);
    const inc = join(work, 'shrink.incomplete.jsonl');
    expect(existsSync(inc)).to.equal(true);
    expect(readFileSync(inc, 'utf8').trim().split('\n')).to.have.length(1);
  });
});
