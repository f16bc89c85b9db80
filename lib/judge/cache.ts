/**
 * Answer cache of the HTTP judge, keyed by a request hash (sha256 over model, prompt version and
 * hash, messages and decoding parameters). In memory always; optionally persisted in SQLite
 * (lib/util/sqlite.ts) so a resumed run never pays twice for the same judgement (docs/design.md §7).
 */
import { createHash } from 'node:crypto';
import { openDatabase, type SqliteDatabase, type SqliteStatement } from '../util/sqlite.js';

/** A cached answer: the raw content and the token usage it cost when first asked. */
export interface CachedAnswer {
  content: string;
  promptTokens: number;
  completionTokens: number;
  /** P(yes) at the verdict position, when the answer came with logprobs. */
  prob?: number;
}

/** sha256 hex of a canonical JSON encoding of `parts` (key order as given by the caller). */
export function requestHash(parts: unknown): string {
  return createHash('sha256').update(JSON.stringify(parts)).digest('hex');
}

/** Two-level cache: a Map in front of an optional SQLite table `judge_cache(key, content, usage, created)`. */
export class JudgeCache {
  private mem = new Map<string, CachedAnswer>();
  private db?: SqliteDatabase;
  private getStmt?: SqliteStatement;
  private putStmt?: SqliteStatement;

  /** `sqlitePath`: file to persist into (created with its directory); omitted ⇒ memory only. */
  constructor(sqlitePath?: string) {
    if (sqlitePath) {
      this.db = openDatabase(sqlitePath);
      this.db.pragma('journal_mode = WAL');
      this.db.exec(
        'CREATE TABLE IF NOT EXISTS judge_cache (key TEXT PRIMARY KEY, content TEXT NOT NULL, prompt_tokens INTEGER, completion_tokens INTEGER, created TEXT, prob REAL)',
      );
      // Caches written before P(yes) was recorded have no prob column.
      const cols = (this.db.prepare('PRAGMA table_info(judge_cache)').all() as { name: string }[]).map((c) => c.name);
      if (!cols.includes('prob')) this.db.exec('ALTER TABLE judge_cache ADD COLUMN prob REAL');
      this.getStmt = this.db.prepare('SELECT content, prompt_tokens, completion_tokens, prob FROM judge_cache WHERE key = ?');
      this.putStmt = this.db.prepare(
        'INSERT OR REPLACE INTO judge_cache (key, content, prompt_tokens, completion_tokens, created, prob) VALUES (?, ?, ?, ?, ?, ?)',
      );
    }
  }

  get(key: string): CachedAnswer | undefined {
    const m = this.mem.get(key);
    if (m) return m;
    const row = this.getStmt?.get(key) as { content: string; prompt_tokens: number | null; completion_tokens: number | null; prob: number | null } | undefined;
    if (!row) return undefined;
    const a: CachedAnswer = { content: row.content, promptTokens: row.prompt_tokens ?? 0, completionTokens: row.completion_tokens ?? 0 };
    if (row.prob !== null && row.prob !== undefined) a.prob = row.prob;
    this.mem.set(key, a);
    return a;
  }

  set(key: string, a: CachedAnswer): void {
    this.mem.set(key, a);
    this.putStmt?.run(key, a.content, a.promptTokens, a.completionTokens, new Date().toISOString(), a.prob ?? null);
  }

  /** Entries in memory (SQLite rows not yet read are not counted). */
  get size(): number {
    return this.mem.size;
  }

  close(): void {
    this.db?.close();
    this.db = undefined;
    this.getStmt = this.putStmt = undefined;
  }
}
