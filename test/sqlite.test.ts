/**
 * lib/util/sqlite.ts: both engines (libsql from its registry package; node:sqlite where this Node
 * has it) behind one better-sqlite3-style API, on real files.
 */
import { expect } from 'chai';
import { spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { openDatabase, sqliteEngine, type SqliteEngine } from '../lib/util/sqlite.js';

const hasNodeSqlite = (() => {
  try {
    openDatabase(':memory:', 'node').close();
    return true;
  } catch {
    return false;
  }
})();
const engines: SqliteEngine[] = hasNodeSqlite ? ['libsql', 'node'] : ['libsql'];
const sqliteJs = fileURLToPath(new URL('../lib/util/sqlite.js', import.meta.url));

describe(`util/sqlite (engines here: ${engines.join(', ')}; Node ${process.versions.node})`, () => {
  let dir = '';
  before(() => (dir = mkdtempSync(join(tmpdir(), 'pg-sqlite-'))));
  after(() => rmSync(dir, { recursive: true, force: true }));

  it('the default engine is libsql (its binary comes from an @libsql/* registry package)', () => {
    expect(sqliteEngine()).to.equal('libsql');
    const db = openDatabase(':memory:');
    expect(db.engine).to.equal('libsql');
    db.close();
  });

  for (const engine of engines) {
    describe(engine, () => {
      it('creates the file and its directory; WAL, pragma simple, rows as objects; persists across opens', () => {
        const path = join(dir, engine, 'sub', 'a.sqlite');
        const db = openDatabase(path, engine);
        expect(db.pragma('journal_mode = WAL', { simple: true })).to.equal('wal');
        db.exec('CREATE TABLE t (k TEXT PRIMARY KEY, v INTEGER)');
        const r = db.prepare('INSERT INTO t (k, v) VALUES (?, ?)').run('a', 1);
        expect(Number(r.changes)).to.equal(1);
        expect({ ...(db.prepare('SELECT k, v FROM t WHERE k = ?').get('a') as object) }).to.deep.equal({ k: 'a', v: 1 });
        expect(db.prepare('SELECT * FROM t WHERE k = ?').get('zz')).to.equal(undefined);
        expect((db.pragma('table_info(t)') as { name: string }[]).map((c) => c.name)).to.deep.equal(['k', 'v']);
        expect(db.open).to.equal(true);
        const big = db.prepare('INSERT INTO t (k, v) VALUES (?, ?)');
        for (let i = 0; i < 50; i++) big.run(`row-${i}-${'x'.repeat(1000)}`, i);
        db.close();
        expect(db.open).to.equal(false);
        // close() checkpoints: the main file alone holds the rows (as better-sqlite3 left it)
        expect(statSync(path).size).to.be.greaterThan(50 * 1000);
        expect(existsSync(`${path}-wal`) ? statSync(`${path}-wal`).size : 0).to.equal(0);
        db.close(); // twice is harmless
        const again = openDatabase(path, engine);
        expect(again.prepare('SELECT count(*) AS n FROM t').get()).to.deep.include({ n: 51 });
        again.close();
      });

      it('transaction commits, rolls back on a throw (rethrown), and nests as a savepoint', () => {
        const db = openDatabase(join(dir, `${engine}-tx.sqlite`), engine);
        db.exec('CREATE TABLE t (v INTEGER)');
        const ins = db.prepare('INSERT INTO t (v) VALUES (?)');
        const count = () => (db.prepare('SELECT count(*) AS n FROM t').get() as { n: number }).n;
        db.transaction((a: number, b: number) => (ins.run(a), ins.run(b)))(1, 2);
        expect(count()).to.equal(2);
        expect(() =>
          db.transaction(
            () => (
              ins.run(3),
              (() => {
                throw new Error('boom');
              })()
            ),
          )(),
        ).to.throw('boom');
        expect(count()).to.equal(2);
        const outer = db.transaction(() => {
          ins.run(4);
          expect(() =>
            db.transaction(
              () => (
                ins.run(5),
                (() => {
                  throw new Error('inner');
                })()
              ),
            )(),
          ).to.throw('inner');
          return count();
        });
        expect(outer()).to.equal(3);
        expect(count()).to.equal(3);
        db.close();
      });

      it('a second process reads the WAL file while this one holds it open', () => {
        const path = join(dir, `${engine}-shared.sqlite`);
        const db = openDatabase(path, engine);
        db.pragma('journal_mode = WAL');
        db.exec("CREATE TABLE t (v TEXT); INSERT INTO t VALUES ('from parent')");
        const code = `import { openDatabase } from ${JSON.stringify(sqliteJs)};
          const db = openDatabase(process.argv[1], ${JSON.stringify(engine)});
          process.stdout.write(db.prepare('SELECT v FROM t').get().v); db.close();`;
        const r = spawnSync(process.execPath, ['--no-warnings', '--input-type=module', '-e', code, path], { encoding: 'utf8' });
        expect(r.stderr).to.equal('');
        expect(r.stdout).to.equal('from parent');
        db.close();
      });
    });
  }

  if (hasNodeSqlite) {
    it('a file written by libsql is read by node:sqlite (same format)', () => {
      const path = join(dir, 'cross.sqlite');
      const a = openDatabase(path, 'libsql');
      a.exec("CREATE TABLE t (v TEXT); INSERT INTO t VALUES ('x')");
      a.close();
      const b = openDatabase(path, 'node');
      expect(b.prepare('SELECT v FROM t').get()).to.deep.include({ v: 'x' });
      b.close();
    });
  }

  it('PAPERGYM_SQLITE picks the engine; a bad value and an engine that cannot load are clear errors', () => {
    const code = `import { sqliteEngine } from ${JSON.stringify(sqliteJs)}; try { process.stdout.write(sqliteEngine()); } catch (e) { process.stdout.write('ERR ' + e.message); }`;
    const run = (v: string) =>
      spawnSync(process.execPath, ['--no-warnings', '--input-type=module', '-e', code], { encoding: 'utf8', env: { ...process.env, PAPERGYM_SQLITE: v } })
        .stdout;
    expect(run('libsql')).to.equal('libsql');
    expect(run('sqlite3')).to.match(/^ERR PAPERGYM_SQLITE must be 'libsql' or 'node' \(got 'sqlite3'\)/);
    if (hasNodeSqlite) expect(run('node')).to.equal('node');
    else expect(run('node')).to.match(/^ERR no SQLite engine could be loaded \(node: node:sqlite is not available in Node/);
  });

  it('a file that is not a database is refused', () => {
    const path = join(dir, 'not-a-db.sqlite');
    spawnSync('sh', ['-c', `head -c 4096 /dev/urandom > '${path}'`]);
    for (const engine of engines) {
      let err: { code?: string; message?: string } = {};
      try {
        const db = openDatabase(path, engine);
        db.exec('CREATE TABLE IF NOT EXISTS t (v INTEGER)');
      } catch (e) {
        err = e as typeof err;
      }
      expect(err.message, engine).to.match(/not a database/);
      expect(err.code, engine).to.equal('SQLITE_NOTADB');
    }
  });
});
