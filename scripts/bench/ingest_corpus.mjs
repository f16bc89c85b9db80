#!/usr/bin/env node
/**
 * Ingestion speed over the real-paper corpus: every paper of
 * `../shared/papers/corpus/` (beside the repository root; or `--corpus DIR`, or
 * PAPERGYM_CORPUS_DIR) is loaded with `loadPaper` — unpack, main-file choice, includes, macros,
 * structure, LaTeX → text in the worker with its time limit — one at a time, `--iters` times
 * (default 1; the median per paper is kept), and seconds per paper are printed with the median
 * and the worst over the corpus, so a slow-parse regression shows. No LLM, no addon.
 *
 *   node scripts/bench/ingest_corpus.mjs [--corpus DIR] [--iters 3] [--json out.json]
 *
 * Needs the TypeScript build (dist/). Run it on an otherwise idle machine: the numbers are wall
 * seconds (the parse runs in one worker thread, so 2 cores are enough).
 */
import { existsSync, readFileSync, readdirSync } from 'node:fs';
import { cpus } from 'node:os';
import { join, resolve } from 'node:path';
import { benchArgs, median, root, writeJson } from './harness.mjs';

const args = benchArgs({ corpus: { type: 'string' }, iters: { type: 'string' } });
const corpus = resolve(args.corpus ?? process.env.PAPERGYM_CORPUS_DIR ?? join(root, '..', 'shared', 'papers', 'corpus'));
const iters = Math.max(1, Number(args.iters ?? 1));
if (!existsSync(corpus)) {
  console.error(`ingest_corpus: no corpus at ${corpus} (pass --corpus DIR or set PAPERGYM_CORPUS_DIR)`);
  process.exit(2);
}
const dist = join(root, 'dist', 'lib', 'data', 'latex', 'index.js');
if (!existsSync(dist)) {
  console.error('ingest_corpus: build the TypeScript first (npx tsc -p tsconfig.json)');
  process.exit(2);
}
const { loadPaper } = await import(dist);

const expectedPath = join(corpus, 'EXPECTED.jsonl');
const files = existsSync(expectedPath)
  ? readFileSync(expectedPath, 'utf8')
      .split('\n')
      .filter((l) => l.trim())
      .map((l) => JSON.parse(l).file)
  : readdirSync(corpus)
      .filter((f) => /\.(tar\.gz|tgz|tar|gz)$/.test(f))
      .sort();

console.log(`ingest_corpus: ${files.length} papers from ${corpus}, ${iters} iteration(s) each, ${cpus().length} CPU(s), node ${process.version}`);
const rows = [];
for (const f of files) {
  const times = [];
  let info = '';
  for (let k = 0; k < iters; k++) {
    const t0 = process.hrtime.bigint();
    const p = await loadPaper(join(corpus, f));
    times.push(Number(process.hrtime.bigint() - t0) / 1e9);
    const chars = p.sections.reduce((a, s) => a + s.text.length, 0);
    const fallback = p.sections.filter((s) => s.parser === 'fallback').length;
    info = `${p.sections.length} sections, ${chars} chars of text, ${fallback} via the fallback converter`;
  }
  const s = median(times);
  rows.push({ paper: f, seconds: s, info });
  console.log(`${s.toFixed(2).padStart(7)} s  ${f}  (${info})`);
}
const secs = rows.map((r) => r.seconds);
const worst = rows.reduce((a, r) => (r.seconds > a.seconds ? r : a), rows[0]);
console.log(
  `seconds per paper: median ${median(secs).toFixed(2)}, worst ${worst.seconds.toFixed(2)} (${worst.paper}), total ${secs.reduce((a, b) => a + b, 0).toFixed(1)}`,
);
writeJson(args.json, { corpus, iters, cpus: cpus().length, node: process.version, rows, median: median(secs), worst: worst.seconds });
