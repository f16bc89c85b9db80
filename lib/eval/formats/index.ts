/**
 * The registry of published dataset formats (`import --format`, `eval`'s default protocol and
 * prompt style) and the importer: rows of every data file mapped to {@link BenchmarkItem}s, each
 * row that cannot be mapped reported with file and row and counted, never dropped silently.
 */
import { statSync } from 'node:fs';
import { basename, relative } from 'node:path';
import type { BenchmarkItem } from '../../task/types.js';
import { DatasetFileError, listDataFiles, readRows, RowError, splitOfPath } from './read.js';
import { Registry } from '../../util/registry.js';
import { provideNames } from '../../config/extensions.js';
import type { DatasetFormat } from './types.js';
import { researchqa } from './researchqa.js';
import { researchPlanGen } from './research-plan-gen.js';
import { healthbench } from './healthbench.js';
import { rubrichub } from './rubrichub.js';
import { rar } from './rar.js';
import { papergym } from './papergym.js';

export type { DatasetFormat, PromptStyle, RowContext } from './types.js';
export { DatasetFileError, foldMessages, listDataFiles, readRows, RowError } from './read.js';

/** Every format by `--format` name (lib/util/registry.ts; a new format is one descriptor file and one entry here). */
export const FORMATS = new Registry<DatasetFormat>('dataset format', (f) => f.name).register(
  researchqa,
  researchPlanGen,
  healthbench,
  rubrichub,
  rar,
  papergym,
);
provideNames('formats', () => FORMATS.names());

/** The format named `name`. @throws Error naming --format and the registered formats */
export function getFormat(name: string): DatasetFormat {
  return FORMATS.get(name, '--format');
}

/** One row that could not be mapped. */
export interface ImportProblem {
  file: string;
  row: number;
  reason: string;
}

/** What {@link importDataset} read. */
export interface ImportResult {
  items: BenchmarkItem[];
  problems: ImportProblem[];
  /** Per file: rows read, items mapped, rows skipped. */
  files: { file: string; rows: number; items: number; skipped: number }[];
  /** Items whose id repeated an earlier one and were given `#row` suffixes. */
  renamed: number;
}

/**
 * Imports `input` (a file, or a directory narrowed by `config` / `split`) as format `format`.
 * A row that cannot be mapped (a missing field, an item with no criterion text, a weight that is
 * not a number, a cut JSONL line) is a counted problem naming file and row; a file whose rows all
 * fail because their columns are not this format's is an error (the wrong `--format`).
 * @throws Error for an unknown format; DatasetFileError for a missing input, a truncated JSON
 * file, a Parquet file without the format's columns, or a file none of whose rows has them
 */
export async function importDataset(
  format: string,
  input: string,
  opts: { config?: string; split?: string; onProblem?: (p: ImportProblem) => void } = {},
): Promise<ImportResult> {
  const f = getFormat(format);
  const files = listDataFiles(input, opts);
  const out: ImportResult = { items: [], problems: [], files: [], renamed: 0 };
  const seen = new Set<string>();
  for (const file of files) {
    const rows = await readRows(file, /\.parquet$/i.test(file) ? [...f.columns] : []);
    // The split a path implies is read below the input (a checkout under test/ is not split test).
    const split = opts.split ?? splitOfPath(statSync(input).isDirectory() ? relative(input, file) : basename(file));
    let mapped = 0;
    let foreign = 0;
    const problems: ImportProblem[] = [];
    for (const r of rows) {
      try {
        if (r.error !== undefined) throw new RowError(r.error);
        if (!r.value || typeof r.value !== 'object' || Array.isArray(r.value))
          throw new RowError(`row is not an object (${Array.isArray(r.value) ? 'a list' : typeof r.value})`);
        const o = r.value as Record<string, unknown>;
        if (f.columns.every((c) => !(c in o))) foreign++;
        const item = f.map(o, { file, row: r.row, config: opts.config, split });
        if (seen.has(item.id)) {
          item.id = `${item.id}#${r.row}`;
          out.renamed++;
        }
        seen.add(item.id);
        out.items.push(item);
        mapped++;
      } catch (e) {
        if (!(e instanceof RowError)) throw e;
        problems.push({ file, row: r.row, reason: e.message });
      }
    }
    if (rows.length && foreign === rows.length) {
      const keys = Object.keys((rows.find((r) => r.value && typeof r.value === 'object')?.value ?? {}) as object).slice(0, 12);
      throw new DatasetFileError(
        file,
        `no row has the columns of --format ${f.name} (${f.columns.join(', ')}); the rows have ${keys.join(', ') || 'no columns'}: is this another format? (registered: ${FORMATS.names().join(', ')})`,
      );
    }
    for (const p of problems) opts.onProblem?.(p);
    out.problems.push(...problems);
    out.files.push({ file, rows: rows.length, items: mapped, skipped: rows.length - mapped });
  }
  return out;
}
