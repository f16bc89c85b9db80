/**
 * The real-paper corpus: `../shared/papers/corpus/` beside the repository root
 * holds 15 papers' sources (licences in MANIFEST.tsv) and EXPECTED.jsonl, the top-level section
 * titles of each in order, read from the sources by hand. Every paper is ingested and its
 * normalised titles compared in order (main text and appendix separately), with its main file.
 *
 * The folder is not part of the repository; without it (or `PAPERGYM_CORPUS_DIR`) the test skips
 * with a printed reason. Each paper's coverage figure ({@link COVERAGE}) is asserted too. A paper may only fail when it is listed in {@link EXCEPTIONS} with the
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

/**
 * Coverage of each paper (lib/data/latex/coverage.ts) as measured when recorded: share of the
 * source's prose words that reached the text, and the headings a plain scan finds (all parsed).
 * Asserted within ±0.001 of the share; a drop means ingestion started losing text.
 */
export const COVERAGE: Record<string, { ratio: number; words: number; headings: number }> = {
  'astro-3i-atlas.tar.gz': { ratio: 1, words: 3357, headings: 11 },
  'astro-asassn21qj.tar.gz': { ratio: 1, words: 4552, headings: 11 },
  'astro-thesis-microlensing.tar.gz': { ratio: 0.9999, words: 60324, headings: 174 },
  'bio-cryoem-orientation.tar.gz': { ratio: 1, words: 3869, headings: 21 },
  'chem-clever-materials-hans.tar.gz': { ratio: 0.9982, words: 2724, headings: 34 },
  'chem-linearization.tar.gz': { ratio: 1, words: 1171, headings: 2 },
  'cs-build-systems.tar.gz': { ratio: 0.9994, words: 9568, headings: 45 },
  'econ-earthquakes.tar.gz': { ratio: 0.9992, words: 10581, headings: 28 },
  'eng-cuk-converter.tar.gz': { ratio: 0.9993, words: 1479, headings: 13 },
  'math-equational-theories.tar.gz': { ratio: 0.9986, words: 20903, headings: 60 },
  'ml-author-disambiguation.tar.gz': { ratio: 1, words: 3953, headings: 12 },
  'ml-cheblienet.tar.gz': { ratio: 0.9984, words: 6760, headings: 19 },
  'physics-krotov.tar.gz': { ratio: 1, words: 8466, headings: 27 },
  'physics-msd-errors.tar.gz': { ratio: 0.9986, words: 5851, headings: 16 },
  'stats-statespacemodels.tar.gz': { ratio: 1, words: 2613, headings: 21 },
};

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
    expect(normaliseTitle("Mapping the ``surfaces'' of exoplanets")).to.equal(normaliseTitle('Mapping the “surfaces” of exoplanets'));
    expect(normaliseTitle('Estimating $\\ensuremath{x}$: a')).to.equal(normaliseTitle('Estimating $\\var{\\oMSDi}$: a'));
    expect(normaliseTitle('Build Systems à la Carte')).not.to.equal(normaliseTitle('Build Systems a la Carte'));
    expect(normaliseTitle('Methods')).not.to.equal(normaliseTitle('Method'));
  });

  // one test per paper, created from EXPECTED.jsonl when it exists
  const list: Expected[] = existsSync(join(CORPUS, 'EXPECTED.jsonl')) ? expected : [];
  for (const e of list) {
    it(`${e.file}: main file, top-level section titles in order, coverage`, async function () {
      const p = await loadPaper(join(CORPUS, e.file));
      const cov = COVERAGE[e.file];
      expect(cov, `${e.file}: no recorded coverage`).to.be.ok;
      expect(p.coverage.ratio, `${e.file}: coverage`).to.be.closeTo(cov.ratio, 0.001);
      expect(p.coverage.words, `${e.file}: prose words`).to.be.closeTo(cov.words, Math.ceil(cov.words * 0.01));
      expect([p.coverage.headingsScanned, p.coverage.headingsParsed], `${e.file}: headings scanned / parsed`).to.deep.equal([cov.headings, cov.headings]);
      expect(
        p.warnings.filter((w) => w.code === 'coverage'),
        `${e.file}: coverage warning`,
      ).to.deep.equal([]);
      const got = p.sections.filter((s) => s.level !== 'front');
      const main = got.filter((s) => !s.appendix).map((s) => normaliseTitle(s.title));
      const app = got.filter((s) => s.appendix).map((s) => normaliseTitle(s.title));
      const ok =
        p.mainFile === e.main &&
        JSON.stringify(main) === JSON.stringify(e.sections.map(normaliseTitle)) &&
        JSON.stringify(app) === JSON.stringify(e.appendix_sections.map(normaliseTitle));
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
