/**
 * `papergym-native import --format F --input FILE_OR_DIR|hf://datasets/ORG/NAME --out items.jsonl [--config C] [--split S]`:
 * reads a published benchmark as it ships (JSON, JSONL, Parquet; lib/eval/formats/) and writes
 * benchmark items (lib/data/schema.ts benchmarkItemJsonSchema). Every row that cannot be mapped
 * is printed with file and row and counted; the counts per file are printed at the end. Exit 1
 * when no item could be imported.
 */
import type { CommandModule } from 'yargs';
import { IMPORT_OPTIONS } from '../../lib/config/settings.js';
import { addSettings } from '../../lib/config/schema.js';
import { writeEvalItems } from '../../lib/data/schema.js';
import { importDataset } from '../../lib/eval/formats/index.js';
import { isWantedDataFile } from '../../lib/eval/formats/read.js';
import { resolveDatasetRef } from '../../lib/hub/resolve.js';
import { ensureWritableFile } from '../../lib/util/fs.js';

interface ImportArgs {
  format: string;
  input: string;
  out: string;
  config?: string;
  split?: string;
  revision?: string;
  limit?: number;
}

export const importCommand: CommandModule<object, ImportArgs> = {
  command: 'import',
  describe: 'Import a published benchmark (ResearchQA, ResearchPlanGen, HealthBench, RubricHub, RaR, PaperGym) as eval items',
  builder: (y) => addSettings(y, IMPORT_OPTIONS, { withDefaults: true }).demandOption(['format', 'input', 'out']) as never,
  handler: async (argv) => {
    ensureWritableFile(argv.out, '--out');
    // hf://datasets/org/name: the files of --config / --split fetched into the huggingface_hub cache (lib/hub).
    const input = argv.input.startsWith('hf://')
      ? (await resolveDatasetRef(argv.input, { revision: argv.revision, select: (rel) => isWantedDataFile(rel, { config: argv.config, split: argv.split }) }))
          .root
      : argv.input;
    const r = await importDataset(argv.format, input, {
      config: argv.config,
      split: argv.split,
      onProblem: (p) => process.stderr.write(`import: ${p.file}: row ${p.row} skipped: ${p.reason}\n`),
    });
    const items = argv.limit !== undefined ? r.items.slice(0, argv.limit) : r.items;
    for (const f of r.files) process.stdout.write(`${f.file}: ${f.rows} row(s), ${f.items} imported, ${f.skipped} skipped\n`);
    if (r.renamed) process.stdout.write(`import: ${r.renamed} repeated id(s) given a #row suffix\n`);
    if (!items.length) throw new Error(`${argv.input}: no row could be imported as ${argv.format} (${r.problems.length} skipped)`);
    writeEvalItems(argv.out, items);
    const rubric = items.reduce((n, it) => n + it.rubric.length, 0);
    process.stdout.write(
      `import: ${items.length} item(s), ${rubric} rubric item(s) → ${argv.out}; ${r.problems.length} row(s) skipped${argv.limit !== undefined && items.length < r.items.length ? `; --limit kept ${items.length} of ${r.items.length}` : ''}\n`,
    );
  },
};
