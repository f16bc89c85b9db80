/**
 * Reading published benchmark files as they ship: a JSON list, JSONL, or Parquet (hyparquet with
 * hyparquet-compressors: snappy, gzip, zstd, brotli, lz4). A directory is searched for data files;
 * a Hub-style tree `{config}/{split}/*.parquet` (or `data/{split}-*.parquet`) is narrowed with
 * `config` / `split`. Rows carry their file and 1-based row number for error messages.
 */
import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs';
import { basename, join, relative, sep } from 'node:path';
import { asyncBufferFromFile, parquetMetadataAsync, parquetReadObjects, parquetSchema } from 'hyparquet';
import { compressors } from 'hyparquet-compressors';
import type { ChatMessage } from '../../llm/messages.js';

/** One raw row of a published file. `row` is 1-based within `file`. */
export interface RawRow {
  file: string;
  row: number;
  /** The parsed row, or undefined when `error` says why it could not be parsed (a cut JSONL line). */
  value?: unknown;
  error?: string;
}

/** A file that cannot be read as its kind at all: names the file and why. */
export class DatasetFileError extends Error {
  constructor(
    readonly file: string,
    message: string,
  ) {
    super(`${file}: ${message}`);
    this.name = 'DatasetFileError';
  }
}

const DATA_EXT = /\.(json|jsonl|parquet)$/i;

/**
 * True when `rel` (a `/`-separated path below a dataset's root) is a data file (.json, .jsonl,
 * .parquet) of `config` and `split` in the Hub layouts: a folder of that name
 * (`{config}/{split}/…`), or a file name starting `{name}-` / `{name}.` (`data/test-00000-of-00001.parquet`).
 */
export function isWantedDataFile(rel: string, opts: { config?: string; split?: string } = {}): boolean {
  const ps = rel.split('/');
  const name = ps[ps.length - 1]!;
  if (name.startsWith('.') || ps.some((p) => p.startsWith('.')) || !DATA_EXT.test(name)) return false;
  const has = (n: string) => ps.slice(0, -1).includes(n) || name.startsWith(`${n}-`) || name.startsWith(`${n}.`);
  return (!opts.config || has(opts.config)) && (!opts.split || has(opts.split));
}

/**
 * The data files of `input`: the file itself, or a directory's `.json`/`.jsonl`/`.parquet` files
 * (recursively, sorted), kept to those whose path has `config` and `split` as a directory or a
 * file-name prefix (`ml/test/0.parquet`, `data/test-00000-of-00001.parquet`).
 * @throws DatasetFileError when `input` is missing or no file matches (the files seen are listed)
 */
export function listDataFiles(input: string, opts: { config?: string; split?: string } = {}): string[] {
  if (!existsSync(input)) throw new DatasetFileError(input, 'no such file or directory');
  if (!statSync(input).isDirectory()) return [input];
  const all: string[] = [];
  const walk = (d: string) => {
    for (const e of readdirSync(d, { withFileTypes: true }).sort((a, b) => a.name.localeCompare(b.name))) {
      if (e.name.startsWith('.')) continue;
      const p = join(d, e.name);
      if (e.isDirectory()) walk(p);
      else if (DATA_EXT.test(e.name)) all.push(p);
    }
  };
  walk(input);
  const files = all.filter((p) => isWantedDataFile(relative(input, p).split(sep).join('/'), opts));
  if (!files.length) {
    const seen =
      all
        .slice(0, 8)
        .map((p) => relative(input, p))
        .join(', ') || 'none';
    const want = [opts.config && `config ${opts.config}`, opts.split && `split ${opts.split}`].filter(Boolean).join(', ');
    throw new DatasetFileError(input, `no data file${want ? ` for ${want}` : ''} (data files seen: ${seen}${all.length > 8 ? ', …' : ''})`);
  }
  return files;
}

/** The split a file's path implies (`…/test/…`, `test-0000….parquet`, `test.json`), if any. */
export function splitOfPath(file: string): string | undefined {
  const ps = file.split(/[\\/]/);
  const name = ps[ps.length - 1]!.replace(DATA_EXT, '');
  for (const s of ['train', 'test', 'valid', 'validation', 'val', 'dev', 'full']) {
    if (name === s || name.startsWith(`${s}-`) || ps.slice(0, -1).includes(s)) return s;
  }
  return undefined;
}

/** Top-level column names of a Parquet file. */
export async function parquetColumns(file: string): Promise<string[]> {
  const meta = await parquetMetadataAsync(await asyncBufferFromFile(file));
  return parquetSchema(meta).children.map((c) => c.element.name);
}

/**
 * The rows of one data file. JSON: a list (or `{data: [...]}` / `{rows: [...]}`); JSONL: one
 * value per line, a line that does not parse is a row with `error` (counted by the importer);
 * Parquet: every row as an object (nested lists / structs as arrays / objects). `required` are
 * columns a Parquet file must have (checked from its schema before any row is read).
 * @throws DatasetFileError on a truncated or malformed JSON file, a Parquet file that cannot be
 * read or lacks `required` columns (the columns found are listed)
 */
export async function readRows(file: string, required: string[] = []): Promise<RawRow[]> {
  if (/\.parquet$/i.test(file)) {
    let cols: string[];
    try {
      cols = await parquetColumns(file);
    } catch (e) {
      throw new DatasetFileError(file, `not a readable Parquet file: ${(e as Error).message}`);
    }
    const missing = required.filter((c) => !cols.includes(c));
    if (missing.length)
      throw new DatasetFileError(file, `Parquet file without the expected column(s) ${missing.map((c) => `'${c}'`).join(', ')} (columns: ${cols.join(', ')})`);
    let rows: Record<string, unknown>[];
    try {
      rows = await parquetReadObjects({ file: await asyncBufferFromFile(file), compressors, rowFormat: 'object' });
    } catch (e) {
      throw new DatasetFileError(file, `Parquet file could not be read: ${(e as Error).message}`);
    }
    return rows.map((value, i) => ({ file, row: i + 1, value: plain(value) }));
  }
  const text = readFileSync(file, 'utf8').replace(/^\uFEFF/, '');
  const trimmed = text.trimStart();
  if (/\.json$/i.test(file) || trimmed.startsWith('[')) {
    if (trimmed.startsWith('[') || trimmed.startsWith('{"data"') || trimmed.startsWith('{"rows"') || !/\.jsonl$/i.test(file)) {
      let v: unknown;
      try {
        v = JSON.parse(text);
      } catch (e) {
        throw new DatasetFileError(file, `not valid JSON (truncated or malformed): ${(e as Error).message}`);
      }
      const list = Array.isArray(v) ? v : v && typeof v === 'object' ? ((v as Record<string, unknown>).data ?? (v as Record<string, unknown>).rows) : undefined;
      if (!Array.isArray(list)) throw new DatasetFileError(file, `expected a JSON list of rows, got ${v === null ? 'null' : typeof v}`);
      return list.map((value, i) => ({ file, row: i + 1, value }));
    }
  }
  const out: RawRow[] = [];
  text.split(/\r?\n/).forEach((line, i) => {
    if (!line.trim()) return;
    try {
      out.push({ file, row: i + 1, value: JSON.parse(line) });
    } catch (e) {
      out.push({ file, row: i + 1, error: `invalid JSON on line ${i + 1}: ${(e as Error).message}` });
    }
  });
  return out;
}

/** Parquet values to plain JSON: bigint → number, typed arrays → arrays, Date → ISO string. */
function plain(v: unknown): unknown {
  if (typeof v === 'bigint') return Number(v);
  if (v instanceof Date) return v.toISOString();
  if (ArrayBuffer.isView(v) && !(v instanceof DataView)) return Array.from(v as unknown as ArrayLike<number>);
  if (Array.isArray(v)) return v.map(plain);
  if (v && typeof v === 'object') return Object.fromEntries(Object.entries(v).map(([k, x]) => [k, plain(x)]));
  return v;
}

/** A row's field is missing or of the wrong kind: the importer reports it with file and row. */
export class RowError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'RowError';
  }
}

/** `o[key]` as a non-empty string. @throws RowError naming the field */
export function text(o: Record<string, unknown>, key: string, what = key): string {
  const v = o[key];
  if (typeof v !== 'string' || !v.trim())
    throw new RowError(`${what} ${v === undefined || v === null ? 'is missing' : typeof v === 'string' ? 'is empty' : `is not text (${typeof v})`}`);
  return v;
}

/** `o[key]` as a string when it is one and not blank, else undefined. */
export function optText(o: Record<string, unknown>, key: string): string | undefined {
  const v = o[key];
  return typeof v === 'string' && v.trim() ? v : undefined;
}

/** `o[key]` as an array (a JSON-encoded list in a string is parsed). @throws RowError naming the field */
export function list(o: Record<string, unknown>, key: string, what = key): unknown[] {
  let v = o[key];
  if (typeof v === 'string' && v.trim().startsWith('[')) {
    try {
      v = JSON.parse(v);
    } catch {
      throw new RowError(`${what} is a string that is not a JSON list`);
    }
  }
  if (!Array.isArray(v)) throw new RowError(`${what} ${v === undefined || v === null ? 'is missing' : `is not a list (${typeof v})`}`);
  if (!v.length) throw new RowError(`${what} is empty`);
  return v;
}

/** An object, or a RowError naming it. */
export function obj(v: unknown, what: string): Record<string, unknown> {
  if (!v || typeof v !== 'object' || Array.isArray(v)) throw new RowError(`${what} is not an object`);
  return v as Record<string, unknown>;
}

/** A weight: a finite number (a numeric string is read). @throws RowError naming the field */
export function weight(v: unknown, what: string): number {
  const n = typeof v === 'number' ? v : typeof v === 'string' && v.trim() !== '' ? Number(v) : NaN;
  if (!Number.isFinite(n)) throw new RowError(`${what} is not a number (${JSON.stringify(v)})`);
  return n;
}

/** Chat messages of a published prompt (list of {role, content}). @throws RowError naming the field */
export function messages(o: Record<string, unknown>, key: string): ChatMessage[] {
  return list(o, key).map((m, i) => {
    const mo = obj(m, `${key}[${i}]`);
    const role = mo.role === 'developer' ? 'system' : mo.role;
    if (role !== 'system' && role !== 'user' && role !== 'assistant' && role !== 'tool')
      throw new RowError(`${key}[${i}].role is not a chat role (${JSON.stringify(mo.role)})`);
    if (typeof mo.content !== 'string') throw new RowError(`${key}[${i}].content is not text`);
    return { role, content: mo.content };
  });
}

/**
 * A chat prompt as one text (for leakage, lexical overlap and judges that read a question): a
 * single user turn is its content; otherwise each turn as `role: content`, blank-line separated.
 */
export function foldMessages(ms: ChatMessage[]): string {
  if (ms.length === 1 && ms[0]!.role === 'user') return ms[0]!.content;
  return ms.map((m) => `${m.role}: ${m.content}`).join('\n\n');
}

/** The file's name for item ids. */
export const stem = (file: string) => basename(file).replace(DATA_EXT, '');
