/**
 * `papergym-native subset --data items.jsonl --sizes 500,1000,2000 --seed S --out-dir DIR`: nested
 * subsets for the data-scaling curve (the paper's Figure 3: 0.5k → 15k training items). One seeded
 * order (lib/data/mix.ts) is cut at each size, so every subset contains the smaller ones, and the
 * same seed gives the same files; `--domain-mix` keeps every subset at a domain mix (within one item
 * per domain). Writes `<name>-<size>.jsonl` per size and `subsets.json` (seed, sizes, achieved mixes).
 */
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { basename, join } from 'node:path';
import type { CommandModule } from 'yargs';
import { SUBSET_OPTIONS } from '../../lib/config/settings.js';
import { addSettings, parseList } from '../../lib/config/schema.js';
import { achievedMix, decodeUtf8, formatMix, mixOrder, parseDomainMix } from '../../lib/data/mix.js';
import { parseDataset, writeDataset } from '../../lib/data/schema.js';

export interface SubsetArgs {
  data: string;
  sizes: string | number[] | (string | number)[];
  seed?: string;
  outDir: string;
  domainMix?: string;
  split?: 'train' | 'val' | 'test';
}

/** One written subset. */
export interface SubsetFile {
  size: number;
  file: string;
  achieved: Record<string, { count: number; share: number }>;
}

/** What {@link runSubset} wrote. */
export interface SubsetSummary {
  seed: string;
  available: number;
  domainMix?: string;
  files: SubsetFile[];
}

/**
 * Draw and write the nested subsets.
 * @throws Error naming the flag for a bad size list or mix, or the size and the count when a size is
 *   larger than the items available (nothing is written then)
 */
export function runSubset(a: SubsetArgs, log: (m: string) => void = (m) => process.stderr.write(`${m}\n`)): SubsetSummary {
  const sizes = parseList({ key: 'sizes', flag: 'sizes', type: 'list', items: 'number', default: null, meaning: '', source: '' }, a.sizes) as number[];
  if (!sizes.length || sizes.some((n) => !Number.isInteger(n) || n < 1))
    throw new Error(`--sizes: positive integers, e.g. 500,1000,2000 (got ${String(a.sizes)})`);
  const sorted = [...new Set(sizes)].sort((x, y) => x - y);
  const text = decodeUtf8(readFileSync(a.data), a.data, log);
  let items = parseDataset(text, { onProblem: (p) => log(`${a.data}: line ${p.line} skipped: ${p.errors.join('; ')}`) }).items;
  if (a.split) items = items.filter((it) => it.split === a.split);
  const targets = a.domainMix ? parseDomainMix(a.domainMix) : undefined;
  const seed = a.seed ?? 'papergym';
  const o = mixOrder(
    items,
    (it) => it.id,
    (it) => it.source.domain,
    targets,
    seed,
  );
  const largest = sorted[sorted.length - 1];
  if (largest > o.order.length) {
    const why = targets ? ` on the mix ${a.domainMix}${o.limitedBy ? ` (limited by ${o.limitedBy}: ${o.available[o.limitedBy]} item(s))` : ''}` : '';
    throw new Error(`--sizes ${largest}: only ${o.order.length} item(s)${a.split ? ` of split ${a.split}` : ''} in ${a.data}${why}; nothing written`);
  }
  mkdirSync(a.outDir, { recursive: true });
  const name = basename(a.data).replace(/\.jsonl$/i, '');
  const files: SubsetFile[] = sorted.map((size) => {
    const drawn = o.order.slice(0, size);
    const file = join(a.outDir, `${name}-${size}.jsonl`);
    writeDataset(file, drawn);
    const achieved = achievedMix(drawn, (it) => it.source.domain, targets);
    log(`subset: ${file}: ${size} item(s): ${formatMix(achieved)}`);
    return { size, file, achieved };
  });
  const summary: SubsetSummary = { seed, available: o.order.length, ...(a.domainMix && { domainMix: a.domainMix }), files };
  writeFileSync(join(a.outDir, 'subsets.json'), JSON.stringify({ data: a.data, split: a.split ?? null, ...summary }, null, 2) + '\n');
  return summary;
}

export const subsetCommand: CommandModule<object, SubsetArgs> = {
  command: 'subset',
  describe: 'Write nested, reproducible subsets of a dataset (each size contains the smaller ones) for the data-scaling curve',
  builder: (y) => addSettings(y, SUBSET_OPTIONS, { withDefaults: true }).demandOption(['data', 'sizes', 'out-dir']) as never,
  handler: async (argv) => {
    const s = runSubset(argv);
    process.stdout.write(`subset: ${s.files.length} subset(s) of ${s.available} item(s) (seed ${s.seed}) → ${join(argv.outDir, 'subsets.json')}\n`);
  },
};
