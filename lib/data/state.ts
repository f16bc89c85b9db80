/**
 * SQLite state of the data pipeline (better-sqlite3; docs/design.md §7: "every call and stage output
 * is stored so a run resumes and never pays twice for the same request").
 *
 * - `llm_calls`: every successful LLM request/response, keyed by
 *   sha256(model, prompt version, request input) — see {@link callKey}
 * - `stage_outputs`: every stage output per paper (map:i, reduce:goals, question, …, item)
 * - `papers`: per-paper status (`done` | `failed` | `running`) and the last error
 * - `paper_warnings`: the structured ingestion warnings of each paper's latest load (code, file
 *   relative to the source root, line, message)
 */
import Database from 'better-sqlite3';
import { createHash } from 'node:crypto';
import { mkdirSync } from 'node:fs';
import { dirname } from 'node:path';

/** Cache key of one LLM call: sha256 over JSON [model, promptVersion, input]. */
export function callKey(model: string, promptVersion: string, input: unknown): string {
  return createHash('sha256').update(JSON.stringify([model, promptVersion, input])).digest('hex');
}

/** A stored call. */
export interface StoredCall {
  key: string;
  model: string;
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
  readonly db: Database.Database;

  constructor(readonly path: string) {
    if (path !== ':memory:') mkdirSync(dirname(path), { recursive: true });
    this.db = new Database(path);
    this.db.pragma('journal_mode = WAL');
    this.db.pragma('busy_timeout = 5000');
    this.db.exec(`
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
  }

  /** A stored call, or undefined. */
  getCall(key: string): StoredCall | undefined {
    const r = this.db.prepare('SELECT * FROM llm_calls WHERE key = ?').get(key) as Record<string, unknown> | undefined;
    if (!r) return undefined;
    return { key, model: r.model as string, prompt: r.prompt as string, value: JSON.parse(r.value as string), content: r.content as string, promptTokens: (r.prompt_tokens as number) ?? 0, completionTokens: (r.completion_tokens as number) ?? 0 };
  }

  /** Store (or replace) a call. */
  putCall(c: StoredCall & { request: unknown }): void {
    this.db
      .prepare('INSERT OR REPLACE INTO llm_calls (key, model, prompt, request, value, content, prompt_tokens, completion_tokens) VALUES (?, ?, ?, ?, ?, ?, ?, ?)')
      .run(c.key, c.model, c.prompt, JSON.stringify(c.request), JSON.stringify(c.value), c.content, c.promptTokens, c.completionTokens);
  }

  /** A stage output whose input key matches, or undefined. */
  getStage<T = unknown>(paperId: string, stage: string, inputKey?: string): T | undefined {
    const r = this.db.prepare('SELECT input_key, output FROM stage_outputs WHERE paper_id = ? AND stage = ?').get(paperId, stage) as { input_key: string; output: string } | undefined;
    if (!r || (inputKey !== undefined && r.input_key !== inputKey)) return undefined;
    return JSON.parse(r.output) as T;
  }

  /** Store a stage output. */
  putStage(paperId: string, stage: string, inputKey: string, output: unknown): void {
    this.db.prepare('INSERT OR REPLACE INTO stage_outputs (paper_id, stage, input_key, output) VALUES (?, ?, ?, ?)').run(paperId, stage, inputKey, JSON.stringify(output));
  }

  /** All stage outputs of a paper (stage → output). */
  stages(paperId: string): Record<string, unknown> {
    const rows = this.db.prepare('SELECT stage, output FROM stage_outputs WHERE paper_id = ? ORDER BY stage').all(paperId) as { stage: string; output: string }[];
    return Object.fromEntries(rows.map((r) => [r.stage, JSON.parse(r.output)]));
  }

  setPaperStatus(paperId: string, status: PaperStatus['status'], error?: string): void {
    this.db.prepare("INSERT OR REPLACE INTO papers (paper_id, status, error, updated_at) VALUES (?, ?, ?, datetime('now'))").run(paperId, status, error ?? null);
  }

  paperStatus(paperId: string): PaperStatus | undefined {
    const r = this.db.prepare('SELECT * FROM papers WHERE paper_id = ?').get(paperId) as Record<string, string> | undefined;
    return r && { paperId, status: r.status as PaperStatus['status'], ...(r.error && { error: r.error }), updatedAt: r.updated_at };
  }

  /** Replace the stored ingestion warnings of a paper. */
  putWarnings(paperId: string, warnings: PaperWarningRow[]): void {
    const del = this.db.prepare('DELETE FROM paper_warnings WHERE paper_id = ?');
    const ins = this.db.prepare('INSERT INTO paper_warnings (paper_id, seq, code, file, line, message) VALUES (?, ?, ?, ?, ?, ?)');
    this.db.transaction(() => {
      del.run(paperId);
      warnings.forEach((w, k) => ins.run(paperId, k, w.code, w.file ?? null, w.line ?? null, w.message));
    })();
  }

  /** The stored ingestion warnings of a paper, in the order they were raised. */
  warnings(paperId: string): PaperWarningRow[] {
    const rows = this.db.prepare('SELECT code, file, line, message FROM paper_warnings WHERE paper_id = ? ORDER BY seq').all(paperId) as { code: string; file: string | null; line: number | null; message: string }[];
    return rows.map((r) => ({ code: r.code, message: r.message, ...(r.file !== null && { file: r.file }), ...(r.line !== null && { line: r.line }) }));
  }

  /** Counts for reports. */
  counts(): { calls: number; stages: number; papers: number } {
    const one = (sql: string) => (this.db.prepare(sql).get() as { n: number }).n;
    return { calls: one('SELECT COUNT(*) n FROM llm_calls'), stages: one('SELECT COUNT(*) n FROM stage_outputs'), papers: one('SELECT COUNT(*) n FROM papers') };
  }

  close(): void {
    if (this.db.open) this.db.close();
  }
}
