/**
 * The one place that opens SQLite files (pipeline state, judge cache, leakage cache).
 *
 * Two engines, one better-sqlite3-style synchronous API ({@link SqliteDatabase}):
 *
 * - `libsql` (the default): the `libsql` npm package, whose compiled engine ships inside
 *   per-platform registry packages (`@libsql/linux-x64-gnu`, …, as optionalDependencies). It has no
 *   install script and fetches nothing at install time, so `npm install` needs only the package
 *   registry, no compiler, and works with `--ignore-scripts`. Same file format as SQLite.
 * - `node`: Node's built-in `node:sqlite` (`DatabaseSync`; unflagged from Node 22.13 / 23.4). Used
 *   when the libsql binary for this platform is not installed (e.g. `--omit=optional`), or when
 *   `PAPERGYM_SQLITE=node`. Node prints an ExperimentalWarning the first time it is loaded, which
 *   is why it is not the default.
 *
 * One difference from better-sqlite3: libsql statements have no finalize, and a prepared statement
 * that is still referenced keeps libsql's connection (and its file locks) alive after close() until
 * it is garbage-collected. Code that needs close() to release a lock at once (lib/util/lock.ts) uses
 * `exec` only. close() checkpoints the WAL, so the main file holds every row either way.
 *
 * `PAPERGYM_SQLITE=libsql|node` forces one engine; an engine that cannot be loaded is an error that
 * names both attempts. Errors carry SQLite's result code in `error.code` ('SQLITE_CORRUPT',
 * 'SQLITE_NOTADB', …) on both engines, as better-sqlite3 did.
 */
import { mkdirSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname } from 'node:path';

const require = createRequire(import.meta.url);

/** Result of a write statement (as better-sqlite3). */
export interface SqliteRunResult {
  changes: number | bigint;
  lastInsertRowid: number | bigint;
}

/** A prepared statement; positional `?` parameters. Rows are plain objects keyed by column name. */
export interface SqliteStatement {
  run(...params: unknown[]): SqliteRunResult;
  get(...params: unknown[]): unknown;
  all(...params: unknown[]): unknown[];
}

/** The subset of better-sqlite3's `Database` that this package uses. */
export interface SqliteDatabase {
  /** The file opened (or ':memory:'). */
  readonly name: string;
  /** False after {@link close}. */
  readonly open: boolean;
  /** Which engine holds the file. */
  readonly engine: SqliteEngine;
  prepare(sql: string): SqliteStatement;
  /** Runs one or more statements without results. */
  exec(sql: string): void;
  /**
   * `PRAGMA <source>`: the rows, or with `{ simple: true }` the first column of the first row
   * (e.g. `pragma('journal_mode = WAL', { simple: true })` → 'wal').
   */
  pragma(source: string, options?: { simple?: boolean }): unknown;
  /** Wraps `fn` in BEGIN/COMMIT (ROLLBACK and rethrow on error); nested calls use savepoints. */
  transaction<A extends unknown[], R>(fn: (...args: A) => R): (...args: A) => R;
  close(): void;
}

export type SqliteEngine = 'libsql' | 'node';

type Opener = (path: string) => SqliteDatabase;

interface NodeSqliteModule {
  DatabaseSync: new (path: string) => {
    exec(sql: string): void;
    prepare(sql: string): { run(...p: unknown[]): SqliteRunResult; get(...p: unknown[]): unknown; all(...p: unknown[]): unknown[] };
    close(): void;
  };
}

function loadNodeSqlite(): NodeSqliteModule {
  const getBuiltin = (process as unknown as { getBuiltinModule?: (id: string) => unknown }).getBuiltinModule;
  let mod: unknown;
  try {
    mod = getBuiltin ? getBuiltin('node:sqlite') : require('node:sqlite');
  } catch {
    mod = undefined;
  }
  if (!mod) throw new Error(`node:sqlite is not available in Node ${process.versions.node} (unflagged from Node 22.13 / 23.4)`);
  return mod as NodeSqliteModule;
}

/** The raw engine handle both engines provide. */
interface RawDatabase {
  exec(sql: string): unknown;
  prepare(sql: string): SqliteStatement;
  close(): void;
}

/** One wrapper for both engines, so pragma and transactions behave the same on each. */
function wrap(db: RawDatabase, name: string, engine: SqliteEngine): SqliteDatabase {
  let open = true;
  let depth = 0;
  return {
    name,
    engine,
    get open() {
      return open;
    },
    prepare: (sql) => db.prepare(sql),
    exec: (sql) => void db.exec(sql),
    pragma(source, options) {
      const rows = db.prepare(`PRAGMA ${source}`).all() as Record<string, unknown>[];
      if (!options?.simple) return rows;
      const first = rows[0];
      return first === undefined ? undefined : Object.values(first)[0];
    },
    transaction(fn) {
      return (...args) => {
        const sp = `pg_sp_${depth}`;
        db.exec(depth === 0 ? 'BEGIN' : `SAVEPOINT ${sp}`);
        depth++;
        try {
          const r = fn(...args);
          depth--;
          db.exec(depth === 0 ? 'COMMIT' : `RELEASE ${sp}`);
          return r;
        } catch (e) {
          depth--;
          db.exec(depth === 0 ? 'ROLLBACK' : `ROLLBACK TO ${sp}; RELEASE ${sp}`);
          throw e;
        }
      };
    },
    close() {
      if (!open) return;
      open = false;
      // better-sqlite3 left a closed WAL database whole in its main file (SQLite checkpoints when the
      // last connection closes); libsql keeps the connection until its statements are collected, so
      // checkpoint here: the .sqlite file alone holds every row after close(). Busy readers only make
      // the checkpoint partial; the rows stay in the -wal file then, as SQLite intends.
      try {
        db.exec('PRAGMA wal_checkpoint(TRUNCATE)');
      } catch {
        // a read-only or in-memory database has nothing to checkpoint
      }
      db.close();
    },
  };
}

/** SQLite's primary result codes (sqlite3.h), as libsql and better-sqlite3 name them in `error.code`. */
const PRIMARY_CODES = [
  'OK',
  'ERROR',
  'INTERNAL',
  'PERM',
  'ABORT',
  'BUSY',
  'LOCKED',
  'NOMEM',
  'READONLY',
  'INTERRUPT',
  'IOERR',
  'CORRUPT',
  'NOTFOUND',
  'FULL',
  'CANTOPEN',
  'PROTOCOL',
  'EMPTY',
  'SCHEMA',
  'TOOBIG',
  'CONSTRAINT',
  'MISMATCH',
  'MISUSE',
  'NOLFS',
  'AUTH',
  'FORMAT',
  'RANGE',
  'NOTADB',
];

/** node:sqlite reports `code: 'ERR_SQLITE_ERROR'` and a numeric `errcode`; give it libsql's `code` (e.g. SQLITE_CORRUPT). */
function sqliteCoded<T>(fn: () => T): T {
  try {
    return fn();
  } catch (e) {
    const err = e as { code?: string; errcode?: number };
    if (err && err.code === 'ERR_SQLITE_ERROR' && typeof err.errcode === 'number') {
      const name = PRIMARY_CODES[err.errcode & 0xff];
      if (name) err.code = `SQLITE_${name}`;
    }
    throw e;
  }
}

function nodeOpener(): Opener {
  const { DatabaseSync } = loadNodeSqlite();
  return (path) => {
    const db = sqliteCoded(() => new DatabaseSync(path));
    const raw: RawDatabase = {
      exec: (sql) => sqliteCoded(() => db.exec(sql)),
      close: () => db.close(),
      prepare(sql) {
        const st = sqliteCoded(() => db.prepare(sql));
        return {
          run: (...p) => sqliteCoded(() => st.run(...p)),
          get: (...p) => sqliteCoded(() => st.get(...p)),
          all: (...p) => sqliteCoded(() => st.all(...p)),
        };
      },
    };
    return wrap(raw, path, 'node');
  };
}

/** libsql adds a `_metadata` (timing) key to every row; better-sqlite3's rows hold the columns only. */
function columnsOnly(row: unknown): unknown {
  if (row && typeof row === 'object' && '_metadata' in row) delete (row as { _metadata?: unknown })._metadata;
  return row;
}

function libsqlOpener(): Opener {
  const Database = require('libsql') as new (path: string) => RawDatabase;
  return (path) => {
    const db = new Database(path);
    const raw: RawDatabase = {
      exec: (sql) => db.exec(sql),
      close: () => db.close(),
      prepare(sql) {
        const st = db.prepare(sql);
        return {
          run: (...p) => st.run(...p),
          get: (...p) => columnsOnly(st.get(...p)),
          all: (...p) => st.all(...p).map(columnsOnly),
        };
      },
    };
    return wrap(raw, path, 'libsql');
  };
}

let chosen: { engine: SqliteEngine; open: Opener } | undefined;

/** The engine {@link openDatabase} uses in this process (loads it on first call). */
export function sqliteEngine(): SqliteEngine {
  return pick().engine;
}

function pick(): { engine: SqliteEngine; open: Opener } {
  if (chosen) return chosen;
  const forced = process.env.PAPERGYM_SQLITE;
  if (forced && forced !== 'libsql' && forced !== 'node') throw new Error(`PAPERGYM_SQLITE must be 'libsql' or 'node' (got '${forced}')`);
  const order: SqliteEngine[] = forced ? [forced as SqliteEngine] : ['libsql', 'node'];
  const errors: string[] = [];
  for (const engine of order) {
    try {
      chosen = { engine, open: engine === 'libsql' ? libsqlOpener() : nodeOpener() };
      return chosen;
    } catch (e) {
      errors.push(`${engine}: ${(e as Error).message.split('\n')[0]}`);
    }
  }
  throw new Error(`no SQLite engine could be loaded (${errors.join('; ')}); reinstall papergym-native without --omit=optional, or use Node >= 22.13`);
}

/**
 * Opens (creating if absent) the SQLite file at `path`, with its directory; ':memory:' for an
 * in-memory database. `engine` overrides the process's choice (tests, tools). Errors from the
 * engine are rethrown with the file named.
 */
export function openDatabase(path: string, engine?: SqliteEngine): SqliteDatabase {
  const open = engine ? (engine === 'libsql' ? libsqlOpener() : nodeOpener()) : pick().open;
  if (path !== ':memory:') mkdirSync(dirname(path), { recursive: true });
  try {
    return open(path);
  } catch (e) {
    const err = new Error(`cannot open SQLite file ${path}: ${(e as Error).message}`, { cause: e });
    throw Object.assign(err, { code: (e as { code?: string }).code });
  }
}
