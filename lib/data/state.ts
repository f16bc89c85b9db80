/**
 * SQLite state of the data pipeline (lib/util/sqlite.ts; docs/design.md §7: "every call and stage output
 * is stored so a run resumes and never pays twice for the same request").
 *
 * - `llm_calls`: every successful LLM request/response, keyed by
 *   sha256(model, prompt version, request input) — see {@link callKey}
 * - `stage_outputs`: every stage output per paper (map:i, reduce:goals, question, …, item)
 * - `papers`: per-paper status (`done` | `failed` | `running`) and the last error
 * - `paper_warnings`: the structured ingestion warnings of each paper's latest load (code, file
 *   relative to the source root, line, message)
 *
 * Integrity (issue 38 item 6): the file is checked with SQLite's `PRAGMA integrity_check` at open
 * (an 83 MB state: 0.13 s with better-sqlite3 on an idle core, 1.0-1.6 s through libsql on the
 * shared 2-core dev machine under load); a corrupt or non-SQLite file is a
 * {@link PipelineStateError} naming it, and so is any corruption SQLite reports later. With
 * `{ lock: true }` the state is held exclusively (lib/util/lock.ts: `<state>.lock`, an OS lock
 * released when the process dies); a second process fails at once naming the holder's pid.
 */
import { createHash } from 'node:crypto';
import { existsSync, mkdirSync, renameSync } from 'node:fs';
import { dirname } from 'node:path';
import { acquireLock, type Lock } from '../util/lock.js';
import { openDatabase, type SqliteDatabase } from '../util/sqlite.js';

/**
 * The state file is unusable (corrupt, not a SQLite database, unreadable). `corrupt` is true when
 * SQLite says the file itself is damaged (integrity check, SQLITE_CORRUPT / SQLITE_NOTADB).
 */
export class PipelineStateError extends Error {
  constructor(
    readonly path: string,
    readonly detail: string,
    readonly corrupt: boolean,
  ) {
    super(`pipeline state ${path}: ${detail}`);
    this.name = 'PipelineStateError';
  }
}

const CORRUPT_CODES = new Set(['SQLITE_CORRUPT', 'SQLITE_NOTADB', 'SQLITE_CORRUPT_INDEX', 'SQLITE_CORRUPT_SEQUENCE', 'SQLITE_CORRUPT_VTAB']);
const isCorrupt = (e: unknown) => CORRUPT_CODES.has(String((e as { code?: string })?.code ?? ''));

/** Options of {@link PipelineState}. */
export interface PipelineStateOptions {
  /** Hold the state exclusively (`<path>.lock`); a second holder gets a LockHeldError naming this pid. */
  lock?: boolean;
  /**
   * What to do with a corrupt file: `throw` (default) a PipelineStateError, or `set-aside`: rename it
   * (and its -wal / -shm) to `<path>.corrupt-<UTC time>` and start an empty state (`setAside` says where).
   */
  onCorrupt?: 'throw' | 'set-aside';
}

/** Cache key of one LLM call: sha256 over JSON [model, promptVersion, input]. */
export function callKey(model: string, promptVersion: string, input: unknown): string {
  return createHash('sha256').update(JSON.stringify([model, promptVersion, input])).digest('hex');
}

/** A stored call. */
export interface StoredCall {
  key: string;
  model: string;
  /** Pipeline role that made the call (extract, qa, rubric, rank); absent in states written before roles. */
  role?: string;
  prompt: string;
  value: unknown;
  content: string;
  promptTokens: number;
  completionTokens: number;
}

/** A stored ingestion warning (see PaperWarning in lib/data/latex). */
export interface PaperWarningRow {
  code: string;
  message: string;
  file?: string;
  line?: number;
}

/** Per-paper status row. */
export interface PaperStatus {
  paperId: string;
  status: 'running' | 'done' | 'failed';
  error?: string;
  updatedAt: string;
}

/**
 * The pipeline state database. `path` may be ':memory:'. Uses WAL and a busy timeout so a
 * second reader (e.g. `leakage`) can look at it while a build runs.
 */
export class PipelineState {
  readonly db: SqliteDatabase;
  /** Where a corrupt file was moved (`onCorrupt: 'set-aside'`), else undefined. */
  readonly setAside?: string;
  private readonly lock?: Lock;

  /**
   * Open (or create) the state at `path`.
   * @throws PipelineStateError naming `path` when it is corrupt (integrity check) or not a SQLite
   *   database; LockHeldError (lib/util/lock.ts) with `lock` when another process holds it
   */
  constructor(
    readonly path: string,
    opts: PipelineStateOptions = {},
  ) {
    if (path !== ':memory:') mkdirSync(dirname(path), { recursive: true });
    if (opts.lock && path !== ':memory:') this.lock = acquireLock(`${path}.lock`, `build-data state ${path}`);
    try {
      try {
        this.db = PipelineState.open(path);
      } catch (e) {
        if (!(e instanceof PipelineStateError) || !e.corrupt || opts.onCorrupt !== 'set-aside') throw e;
        const aside = `${path}.corrupt-${new Date().toISOString().replace(/[:.]/g, '-')}`;
        for (const ext of ['', '-wal', '-shm']) if (existsSync(path + ext)) renameSync(path + ext, aside + ext);
        this.setAside = aside;
        this.db = PipelineState.open(path);
      }
    } catch (e) {
      this.lock?.release();
      throw e;
    }
  }

  /** Open, check and migrate the database file. */
  private static open(path: string): SqliteDatabase {
    let db: SqliteDatabase | undefined;
    try {
      db = openDatabase(path);
      db.pragma('busy_timeout = 5000');
      db.pragma('journal_mode = WAL');
      if (path !== ':memory:') {
        const rows = db.pragma('integrity_check(20)') as { integrity_check: string }[];
        const bad = rows.map((r) => r.integrity_check).filter((r) => r !== 'ok');
        if (bad.length) throw new PipelineStateError(path, `corrupt (SQLite integrity check: ${bad.slice(0, 5).join('; ')})`, true);
      }
      PipelineState.migrate(db);
      return db;
    } catch (e) {
      db?.close();
      if (e instanceof PipelineStateError) throw e;
      const msg = (e as Error)?.message ?? String(e);
      throw new PipelineStateError(path, isCorrupt(e) ? `corrupt or not a SQLite database (${msg})` : `cannot be opened: ${msg}`, isCorrupt(e));
    }
  }

  /** Create the tables (and add columns newer versions use). */
  private static migrate(db: SqliteDatabase): void {
    db.exec(`
      CREATE TABLE IF NOT EXISTS llm_calls (
        key TEXT PRIMARY KEY, model TEXT NOT NULL, prompt TEXT NOT NULL, request TEXT NOT NULL,
        value TEXT NOT NULL, content TEXT NOT NULL, prompt_tokens INTEGER, completion_tokens INTEGER,
        created_at TEXT NOT NULL DEFAULT (datetime('now')));
      CREATE TABLE IF NOT EXISTS stage_outputs (
        paper_id TEXT NOT NULL, stage TEXT NOT NULL, input_key TEXT NOT NULL, output TEXT NOT NULL,
        created_at TEXT NOT NULL DEFAULT (datetime('now')), PRIMARY KEY (paper_id, stage));
      CREATE TABLE IF NOT EXISTS papers (
        paper_id TEXT PRIMARY KEY, status TEXT NOT NULL, error TEXT, updated_at TEXT NOT NULL DEFAULT (datetime('now')));
      CREATE TABLE IF NOT EXISTS paper_warnings (
        paper_id TEXT NOT NULL, seq INTEGER NOT NULL, code TEXT NOT NULL, file TEXT, line INTEGER, message TEXT NOT NULL,
        PRIMARY KEY (paper_id, seq));
    `);
    const cols = (db.prepare('PRAGMA table_info(llm_calls)').all() as { name: string }[]).map((c) => c.name);
    if (!cols.includes('role')) db.exec('ALTER TABLE llm_calls ADD COLUMN role TEXT');
  }

  /** Run a statement; SQLite's corruption errors become a PipelineStateError naming the file. */
  private guard<T>(fn: () => T): T {
    try {
      return fn();
    } catch (e) {
      if (isCorrupt(e)) throw new PipelineStateError(this.path, `corrupt (${(e as Error).message})`, true);
      throw e;
    }
  }

  /** A stored call, or undefined. */
  getCall(key: string): (StoredCall & { unreadable?: string }) | undefined {
    const r = this.guard(() => this.db.prepare('SELECT * FROM llm_calls WHERE key = ?').get(key) as Record<string, unknown> | undefined);
    if (!r) return undefined;
    // An edited or damaged value is returned as unreadable (the caller re-asks), never thrown.
    let value: unknown;
    let unreadable: string | undefined;
    try {
      value = JSON.parse(String(r.value));
    } catch (e) {
      unreadable = `its value is not JSON (${(e as Error).message})`;
    }
    return { key, model: r.model as string, ...(r.role ? { role: r.role as string } : {}), prompt: r.prompt as string, value, content: r.content as string, promptTokens: (r.prompt_tokens as number) ?? 0, completionTokens: (r.completion_tokens as number) ?? 0, ...(unreadable && { unreadable }) };
  }

  /** Store (or replace) a call. */
  putCall(c: StoredCall & { request: unknown }): void {
    const sql = 'INSERT OR REPLACE INTO llm_calls (key, model, role, prompt, request, value, content, prompt_tokens, completion_tokens) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)';
    this.guard(() => this.db.prepare(sql).run(c.key, c.model, c.role ?? null, c.prompt, JSON.stringify(c.request), JSON.stringify(c.value), c.content, c.promptTokens, c.completionTokens));
  }

  /** A stage output whose input key matches, or undefined. */
  getStage<T = unknown>(paperId: string, stage: string, inputKey?: string): T | undefined {
    const r = this.guard(() => this.db.prepare('SELECT input_key, output FROM stage_outputs WHERE paper_id = ? AND stage = ?').get(paperId, stage) as { input_key: string; output: string } | undefined);
    if (!r || (inputKey !== undefined && r.input_key !== inputKey)) return undefined;
    return JSON.parse(r.output) as T;
  }

  /** Store a stage output. */
  putStage(paperId: string, stage: string, inputKey: string, output: unknown): void {
    this.guard(() => this.db.prepare('INSERT OR REPLACE INTO stage_outputs (paper_id, stage, input_key, output) VALUES (?, ?, ?, ?)').run(paperId, stage, inputKey, JSON.stringify(output)));
  }

  /** All stage outputs of a paper (stage → output). */
  stages(paperId: string): Record<string, unknown> {
    const rows = this.db.prepare('SELECT stage, output FROM stage_outputs WHERE paper_id = ? ORDER BY stage').all(paperId) as { stage: string; output: string }[];
    return Object.fromEntries(rows.map((r) => [r.stage, JSON.parse(r.output)]));
  }

  setPaperStatus(paperId: string, status: PaperStatus['status'], error?: string): void {
    const sql = "INSERT OR REPLACE INTO papers (paper_id, status, error, updated_at) VALUES (?, ?, ?, datetime('now'))";
    this.guard(() => this.db.prepare(sql).run(paperId, status, error ?? null));
  }

  paperStatus(paperId: string): PaperStatus | undefined {
    const r = this.db.prepare('SELECT * FROM papers WHERE paper_id = ?').get(paperId) as Record<string, string> | undefined;
    return r && { paperId, status: r.status as PaperStatus['status'], ...(r.error && { error: r.error }), updatedAt: r.updated_at };
  }

  /** Replace the stored ingestion warnings of a paper. */
  putWarnings(paperId: string, warnings: PaperWarningRow[]): void {
    const del = this.db.prepare('DELETE FROM paper_warnings WHERE paper_id = ?');
    const ins = this.db.prepare('INSERT INTO paper_warnings (paper_id, seq, code, file, line, message) VALUES (?, ?, ?, ?, ?, ?)');
    this.guard(() =>
      this.db.transaction(() => {
        del.run(paperId);
        warnings.forEach((w, k) => ins.run(paperId, k, w.code, w.file ?? null, w.line ?? null, w.message));
      })(),
    );
  }

  /** The stored ingestion warnings of a paper, in the order they were raised. */
  warnings(paperId: string): PaperWarningRow[] {
    const rows = this.db.prepare('SELECT code, file, line, message FROM paper_warnings WHERE paper_id = ? ORDER BY seq').all(paperId) as { code: string; file: string | null; line: number | null; message: string }[];
    return rows.map((r) => ({ code: r.code, message: r.message, ...(r.file !== null && { file: r.file }), ...(r.line !== null && { line: r.line }) }));
  }

  /** Stored calls per role and model (roles unknown to old states count as `''`). */
  callsByRole(): { role: string; model: string; calls: number }[] {
    return this.db.prepare("SELECT COALESCE(role, '') role, model, COUNT(*) calls FROM llm_calls GROUP BY 1, 2 ORDER BY 1, 2").all() as { role: string; model: string; calls: number }[];
  }

  /** Counts for reports. */
  counts(): { calls: number; stages: number; papers: number } {
    const one = (sql: string) => (this.db.prepare(sql).get() as { n: number }).n;
    return { calls: one('SELECT COUNT(*) n FROM llm_calls'), stages: one('SELECT COUNT(*) n FROM stage_outputs'), papers: one('SELECT COUNT(*) n FROM papers') };
  }

  /** Close the database and release the lock (idempotent). */
  close(): void {
    if (this.db.open) this.db.close();
    this.lock?.release();
  }
}
