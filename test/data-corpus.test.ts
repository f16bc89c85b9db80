/**
 * The real-paper corpus: `../shared/papers/corpus/` beside the repository root
 * holds 15 papers' sources (licences in MANIFEST.tsv) and EXPECTED.jsonl, the top-level section
 * titles of each in order, read from the sources by hand. Every paper is ingested and its
 * normalised titles compared in order (main text and appendix separately), with its main file.
 *
 * The folder is not part of the repository; without it (or `PAPERGYM_CORPUS_DIR`) the test skips
 * with a printed reason. A paper may only fail when it is listed in {@link EXCEPTIONS} with the
 * reason (documented in docs/data.md); the list is empty.
 */
import { expect } from 'chai';
import { existsSync, readFileSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { loadPaper } from '../lib/data/latex/index.js';

const here = dirname(fileURLToPath(import.meta.url));
/** Package root (dist/test → ../..). */
const ROOT = resolve(here, '..', '..');
const CORPUS = process.env.PAPERGYM_CORPUS_DIR ?? join(ROOT, '..', 'shared', 'papers', 'corpus');

/** Papers allowed to differ from EXPECTED.jsonl, with the reason. Keep it short (ideally empty). */
export const EXCEPTIONS: Record<string, string> = {};

interface Expected {
  file: string;
  main: string;
  sections: string[];
  appendix_sections: string[];
}

/**
 * Normalised title: NFC, math spans as one `$` token (macros in math are expanded by ingestion,
 * written raw in EXPECTED), TeX dashes and quotes unified, whitespace collapsed, case folded,
 * trailing period dropped.
 */
export function normaliseTitle(t: string): string {
  return t
    .normalize('NFC')
    .replace(/\$[^$]*\$/g, '$')
    .replace(/---|--|[–—−]/g, '-')
    .replace(/``|''|[“”„"]/g, '"')
    .replace(/[‘’`]/g, "'")
    .replace(/\s+/g, ' ')
    .trim()
    .replace(/\.$/, '')
    .toLowerCase();
}

describe('data: the real-paper corpus (../shared/papers/corpus)', function () {
  this.timeout(300000);
  const expected: Expected[] = existsSync(join(CORPUS, 'EXPECTED.jsonl'))
    ? readFileSync(join(CORPUS, 'EXPECTED.jsonl'), 'utf8')
        .split('\n')
        .filter((l) => l.trim())
        .map((l) => JSON.parse(l) as Expected)
    : [];
  before(function () {
    if (!expected.length) {
      console.log(`    (skipped: no corpus at ${CORPUS}; it is ../shared/papers/corpus beside the repository root, or set PAPERGYM_CORPUS_DIR)`);
      this.skip();
    }
  });

  it('lists 15 papers, each with a source archive and a licence in MANIFEST.tsv', () => {
    expect(expected).to.have.length(15);
    const manifest = readFileSync(join(CORPUS, 'MANIFEST.tsv'), 'utf8');
    for (const e of expected) {
      expect(existsSync(join(CORPUS, e.file)), e.file).to.equal(true);
      expect(manifest, e.file).to.include(`${e.file}\t`);
    }
  });

  it('normalises titles only in form', () => {
    expect(normaliseTitle('Higman--Neumann laws')).to.equal(normaliseTitle('Higman–Neumann laws'));
    expect(normaliseTitle('Mapping the ``surfaces\'\' of exoplanets')).to.equal(normaliseTitle('Mapping the “surfaces” of exoplanets'));
    expect(normaliseTitle('Estimating $\\ensuremath{x}$: a')).to.equal(normaliseTitle('Estimating $\\var{\\oMSDi}$: a'));
    expect(normaliseTitle('Build Systems à la Carte')).not.to.equal(normaliseTitle('Build Systems a la Carte'));
    expect(normaliseTitle('Methods')).not.to.equal(normaliseTitle('Method'));
  });

  // one test per paper, created from EXPECTED.jsonl when it exists
  const list: Expected[] = existsSync(join(CORPUS, 'EXPECTED.jsonl')) ? expected : [];
  for (const e of list) {
    it(`${e.file}: main file and top-level section titles in order`, async function () {
      const p = await loadPaper(join(CORPUS, e.file));
      const got = p.sections.filter((s) => s.level !== 'front');
      const main = got.filter((s) => !s.appendix).map((s) => normaliseTitle(s.title));
      const app = got.filter((s) => s.appendix).map((s) => normaliseTitle(s.title));
      const ok = p.mainFile === e.main && JSON.stringify(main) === JSON.stringify(e.sections.map(normaliseTitle)) && JSON.stringify(app) === JSON.stringify(e.appendix_sections.map(normaliseTitle));
      if (!ok && EXCEPTIONS[e.file]) {
        console.log(`    (known exception: ${EXCEPTIONS[e.file]})`);
        return;
      }
      expect(p.mainFile, 'main file').to.equal(e.main);
      expect(main, 'sections').to.deep.equal(e.sections.map(normaliseTitle));
      expect(app, 'appendix sections').to.deep.equal(e.appendix_sections.map(normaliseTitle));
      for (const s of got) expect(s.text.length, `${s.title}: empty text`).to.be.greaterThan(0);
      expect(ok && EXCEPTIONS[e.file], `${e.file} passes: remove it from EXCEPTIONS`).to.not.be.ok;
    });
  }
});
