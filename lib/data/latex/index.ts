/**
 * Paper ingestion (docs/design.md §7, first half): a paper source (directory or arXiv-style archive)
 * → main file → includes resolved → comments / `\iffalse` removed → simple macros expanded →
 * title, abstract and sections as plain text.
 */
import { readdirSync, readFileSync } from 'node:fs';
import { basename, join } from 'node:path';
import { ArchiveError, unpackSource, type ArchiveLimits } from './archive.js';
import { chooseMainFile, expandMacros, ExpansionLimitError, formatWarning, listFiles, stripIffalse, type ExpansionLimits, type PaperWarning, type RootCandidate } from './source.js';
import { documentClass, readGroup, readTextFile } from './source.js';
import { cleanTitle, documentBody, extractStructure, groupSections, type SectionLevel } from './structure.js';
import { coverageProblem, formatCoverage, measureCoverage, type Coverage } from './coverage.js';
import { inlineText, latexToTextBatch, typesetForm } from './text.js';
import { applyClassFamily, classFamilyOf, type ClassFamily } from './classes/index.js';
import { checkStructure, type StructureReport } from './guard.js';

export * from './archive.js';
export {
  stripComments,
  stripIffalse,
  findMainFile,
  readArxivDirectives,
  ExpansionLimitError,
  DEFAULT_EXPANSION_LIMITS,
  type ExpansionLimits,
  type ArxivDirectives,
  type MainChoice,
  chooseMainFile,
  flattenDocument,
  expandSimpleMacros,
  expandMacros,
  isRootDocument,
  documentClass,
  decodeTex,
  declaredInputenc,
  scanSource,
  VerbatimStore,
  formatWarning,
  type PaperWarning,
  type WarningCode,
  type RootCandidate,
  type RootKind,
} from './source.js';
export { extractStructure, topLevelSections, groupSections, documentBody, findTitle, cleanTitle, TITLE_MACROS } from './structure.js';
export { measureCoverage, coverageProblem, formatCoverage, sourceProseWords, scanHeadings, COVERAGE_MIN_WORDS, COVERAGE_MIN_SAMPLE, type Coverage } from './coverage.js';
export { latexToText, latexToTextBatch, fallbackToText, parseToText, inlineText, typesetForm } from './text.js';
export { CLASS_FAMILIES, classFamilyOf, applyClassFamily, type ClassFamily, type ClassHeading, type PartedAbstract } from './classes/index.js';
export { checkStructure, formatStructure, sectioningDefinitions, type StructureReport, type StructureCommand } from './guard.js';
export { parseArgSpec, countWords, type ArgSpec, type ExcludedText } from './source.js';

/** One top-level section as plain text. */
export interface PaperSection {
  index: number;
  level: SectionLevel | 'front';
  title: string;
  starred: boolean;
  appendix: boolean;
  subheadings: string[];
  text: string;
  parser: 'unified-latex' | 'fallback';
  /** Boilerplate (acknowledgements, author contributions, references…): skipped by the pipeline. */
  boilerplate: boolean;
  /** Why it is boilerplate (the rule that matched), when it is. */
  boilerplateReason?: string;
}

/** A loaded paper. */
export interface Paper {
  id: string;
  title: string;
  abstract: string;
  domain: string;
  licence?: string;
  /** Main file, relative to the source root. */
  mainFile: string;
  /** .tex files read, main first. */
  files: string[];
  missingIncludes: string[];
  sections: PaperSection[];
  /** Structured warnings (code, file relative to the source root, line). */
  warnings: PaperWarning[];
  /** Every root document found and why the main file was chosen (chosen first). */
  rootCandidates: RootCandidate[];
  /** Which rule chose the main file (arXiv's 00README directive, the only root, the heuristic), and the files left out. */
  mainRule: string;
  /** How much of the source's prose and headings reached the text ({@link measureCoverage}). */
  coverage: Coverage;
  /** What became of every sectioning-like command, text excluded on purpose, sections skipped ({@link checkStructure}). */
  structure: StructureReport;
  /** The journal class family whose commands were read (classes/), if any. */
  classFamily?: string;
}

/** A paper whose coverage is below the thresholds, under `strictCoverage` (`build-data --strict`). */
export class CoverageError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'CoverageError';
  }
}

/** Warning codes that mean structure or text was lost: counted by `build-data`, failures under `--strict`. */
export const LOSS_CODES = ['coverage', 'structure', 'include-missing'] as const;

/**
 * Warning codes of the paper's structure (counted as "with structure warnings" by build-data): a
 * heading not parsed, a missing include, no article-like root, a conditional or verbatim never closed.
 */
export const STRUCTURE_CODES = ['structure', 'include-missing', 'no-article-root', 'conditional-unclosed', 'verbatim-unclosed'] as const;

/** True when a warning is of the structure kind ({@link STRUCTURE_CODES}). */
export const isStructureWarning = (w: { code: string }): boolean => (STRUCTURE_CODES as readonly string[]).includes(w.code);

/** Throw {@link CoverageError} when the paper carries a coverage, structure or missing-include warning (used for `--strict`, also on papers read from a cache). */
export function assertCoverage(p: Pick<Paper, 'id' | 'warnings'>): void {
  const w = p.warnings.find((x) => x.code === 'coverage');
  if (w) throw new CoverageError(`${p.id}: text lost in ingestion (strict): ${w.message}`);
  const s = p.warnings.find((x) => x.code === 'structure' || x.code === 'include-missing');
  if (s) throw new CoverageError(`${p.id}: structure lost in ingestion (strict): ${s.file ? `${s.file}${s.line ? `:${s.line}` : ''}: ` : ''}${s.message}`);
}

/** Options of {@link loadPaper}. */
export interface LoadPaperOptions {
  /** Paper id (default: the file/dir name without archive extensions). */
  id?: string;
  domain?: string;
  /** Where temp dirs are created (default OS temp). */
  workDir?: string;
  limits?: Partial<ArchiveLimits>;
  /** Per-section parse time limit (default 5000 ms). */
  parseTimeoutMs?: number;
  /** Convert without a worker thread (no time limit). */
  inProcess?: boolean;
  /** Bounds on the total expansion of the sources (inclusions, characters); past them the paper fails. */
  expansionLimits?: ExpansionLimits;
  /** A coverage warning fails the paper ({@link CoverageError}). */
  strictCoverage?: boolean;
}

const BOILERPLATE: [RegExp, string][] = [
  [/^acknowledge?ments?\b/i, 'acknowledgements'],
  [/^author contributions?( statement)?\b/i, 'author contributions'],
  [/^(competing interests?|conflicts? of interest)\b/i, 'competing interests'],
  [/^funding\b/i, 'funding'],
  [/^(references|bibliography)\b/i, 'references'],
  [/^consortium\b/i, 'consortium list'],
  [/^(data|code|code and data|data and code) availability\b/i, 'data/code availability statement'],
  [/^supporting information\b/i, 'supporting information'],
  [/^additional information\b/i, 'additional information'],
];
/** Who-did-what wording of an author-contributions statement titled only "Contributions". */
const CREDIT = /\b(conceptuali[sz]ation|wrote the (paper|manuscript)|writing|supervis(ed|ion)|designed|conceived|performed|all authors|[A-Z]\.\s?[A-Z]\.)/;

/**
 * Why a section is boilerplate (never given to the stages), or undefined: acknowledgements, author
 * contributions, competing interests, funding, references, availability statements, … A section
 * titled only "Contributions" is the paper's contributions unless its text reads as a
 * who-did-what statement (names, "wrote the paper", "supervision").
 */
export function boilerplateReason(title: string, text: string): string | undefined {
  for (const [re, why] of BOILERPLATE) if (re.test(title)) return why;
  if (/^contributions?\.?$/i.test(title.trim()) && CREDIT.test(text.slice(0, 2000))) return 'author contributions (who-did-what statement)';
  return undefined;
}

/** Acknowledgement environments (and a class family's other boilerplate environments) in the body: read, never stage text. */
function boilerplateEnvironments(expanded: string, family: ClassFamily | undefined): { title: string; reason: string }[] {
  const envs: Record<string, string> = { acknowledgements: 'Acknowledgements', acknowledgments: 'Acknowledgments', acknowledgement: 'Acknowledgement', acks: 'Acknowledgments', ...family?.boilerplateEnvironments };
  const body = documentBody(expanded);
  return Object.entries(envs)
    .filter(([env]) => new RegExp(`\\\\begin\\{${env}\\}`).test(body))
    .map(([env, title]) => ({ title, reason: `acknowledgements (\\begin{${env}} environment)` }));
}

/**
 * Title when there is no title macro: the first large-font group of a `titlepage` environment,
 * else hyperref's `pdftitle={…}`, else the first large-font group (`{\Large …}`) of the body
 * before its first heading (templates such as SciPost's that typeset the title by hand).
 */
function fallbackTitle(text: string): string | undefined {
  const large = (s: string) => {
    const m = /\{\s*(?:\\textbf\{)?\s*\\(?:LARGE|Large|huge|Huge)\s*(?:\\(?:textbf|bfseries|bf)\s*)?\{?\s*([^{}]+?)\}/.exec(s) ?? /\\(?:LARGE|Huge|huge)\s+([^{}\n]+)/.exec(s);
    return m ? m[1].replace(/\\\\(\[[^\]]*\])?/g, ' ').replace(/\s+/g, ' ').trim() : undefined;
  };
  const tp = /\\begin\{titlepage\}([\s\S]*?)\\end\{titlepage\}/.exec(text);
  const fromTp = tp && large(tp[1]);
  if (fromTp) return fromTp;
  const pdf = /pdftitle\s*=\s*\{/.exec(text);
  if (pdf) {
    const g = readGroup(text, pdf.index + pdf[0].length - 1);
    if (g && g[0].trim()) return g[0].replace(/\s+/g, ' ').trim();
  }
  const b = /\\begin\s*\{document\}/.exec(text);
  if (!b) return undefined;
  const front = text.slice(b.index, b.index + 4000);
  const h = /\\(part|chapter|section|begin\s*\{abstract\})/.exec(front);
  return large(h ? front.slice(0, h.index) : front);
}

/** Paper id from a path: `cs-pysr.tar.gz` → `cs-pysr`. */
export function paperIdFromPath(path: string): string {
  return basename(path.replace(/[\\/]+$/, '')).replace(/\.(tar\.gz|tgz|tar|gz|zip)$/i, '');
}

/** Domain names by the prefix of a paper id (`cs-…`, `physics-…`, `astro-ph-…`). */
export const DOMAINS: Record<string, string> = { cs: 'computer science', physics: 'physics', 'astro-ph': 'astrophysics', astro: 'astrophysics', econ: 'economics', math: 'mathematics', stat: 'statistics', stats: 'statistics', 'q-bio': 'quantitative biology', 'q-fin': 'quantitative finance', eess: 'electrical engineering', bio: 'biology', chem: 'chemistry', ml: 'machine learning', eng: 'engineering' };
/** The domain a paper id's prefix names, or `unknown`. */
export function guessDomain(id: string): string {
  const m = /^([a-z]+(?:-[a-z]{2})?)[-_.]/.exec(id);
  if (m && DOMAINS[m[1]]) return DOMAINS[m[1]];
  const p = /^([a-z]+)[-_.]/.exec(id);
  return (p && DOMAINS[p[1]]) || 'unknown';
}

/** Licence from a LICENSE/COPYING file at the root or one directory down (SPDX-like id). */
export function detectLicence(root: string): string | undefined {
  const cands: string[] = [];
  const scan = (dir: string) => {
    try {
      for (const e of readdirSync(dir, { withFileTypes: true })) {
        if (e.isFile() && /^(licen[cs]e|copying)(\.(md|txt))?$/i.test(e.name)) cands.push(join(dir, e.name));
      }
    } catch {
      /* ignore */
    }
  };
  scan(root);
  try {
    for (const e of readdirSync(root, { withFileTypes: true })) if (e.isDirectory()) scan(join(root, e.name));
  } catch {
    /* ignore */
  }
  for (const f of cands) {
    const t = readFileSync(f, 'utf8').slice(0, 4000);
    if (/MIT License|Permission is hereby granted, free of charge/i.test(t)) return 'MIT';
    if (/Apache License/i.test(t)) return 'Apache-2.0';
    if (/GNU GENERAL PUBLIC LICENSE[\s\S]*Version 3/i.test(t)) return 'GPL-3.0';
    if (/GNU GENERAL PUBLIC LICENSE[\s\S]*Version 2/i.test(t)) return 'GPL-2.0';
    if (/Redistribution and use in source and binary forms/i.test(t)) return /Neither the name|may not be used to endorse/i.test(t) ? 'BSD-3-Clause' : 'BSD-2-Clause';
    if (/Creative Commons|CC BY/i.test(t)) return 'CC-BY-4.0';
    return 'see LICENSE';
  }
  return undefined;
}

/**
 * Load a paper from a directory or archive (see {@link unpackSource} for what is read).
 * @returns title, abstract and top-level sections as plain text, with structured warnings
 *   (encodings, missing or refused includes, several roots, fallback conversions)
 * @throws ArchiveError (refused/corrupt archive, a PDF), Error "no LaTeX sources found" (no .tex
 *   file) or "no main LaTeX file" (no root document)
 */
export async function loadPaper(path: string, opts: LoadPaperOptions = {}): Promise<Paper> {
  const warnings: PaperWarning[] = [];
  const warn = (w: PaperWarning) => warnings.push(w);
  const src = await unpackSource(path, { workDir: opts.workDir, limits: opts.limits });
  try {
    const id = opts.id ?? paperIdFromPath(path);
    let choice;
    try {
      choice = chooseMainFile(src.root, warn, { limits: opts.expansionLimits, paperId: opts.id ?? paperIdFromPath(path) });
    } catch (e) {
      if (e instanceof ExpansionLimitError) throw new ExpansionLimitError(`${path}: ${e.message}`);
      throw e;
    }
    if (!choice) {
      const tex = listFiles(src.root, (n) => /\.tex$/i.test(n), 1);
      if (!tex.length) {
        const pdfs = listFiles(src.root, (n) => /\.pdf$/i.test(n), 5);
        throw new ArchiveError(`${path}: no LaTeX sources found${pdfs.length ? ` (only PDF: ${pdfs.join(', ')})` : ' (no .tex file)'}`, 'no-latex');
      }
      throw new Error(`${path}: no main LaTeX file (no .tex file has \\documentclass or \\documentstyle and \\begin{document} outside comments)`);
    }
    const mainFile = choice.main;
    const flat = choice.flat;
    const store = flat.verbatim;
    const warnMain = (w: PaperWarning) => warn({ ...w, file: w.file ?? mainFile });
    if (flat.missing.length && choice.candidates.filter((c) => c.kind === 'article').length > 1) {
      const others = choice.candidates.filter((c) => c.file !== mainFile && c.kind === 'article').map((c) => c.file);
      throw new Error(
        `${path}: the paper's main file ${mainFile} (${choice.rule}) includes ${flat.missing.map((f) => JSON.stringify(f)).join(', ')}, missing from the source; not ingesting another root (${others.join(', ')}) in its place`,
      );
    }
    const family = classFamilyOf(flat.text);
    // conditionals that only appear once macros are expanded (\newcommand{\hide}[1]{\iffalse#1\fi}) are resolved after expansion
    const expanded = typesetForm(applyClassFamily(stripIffalse(expandMacros(flat.text, warnMain), warnMain), family));
    const st = extractStructure(expanded);
    const { leading, sections: raw } = groupSections(st.headings);
    // headings before the first top-level one (a thesis's front-matter \section*s) stay front matter
    const frontText = st.front + leading.map((h) => `\n\n\\paragraph{${h.title}}\n${h.latex}`).join('');
    const sources = [st.abstract ?? '', frontText, ...raw.map((s) => s.latex)];
    const conv = await latexToTextBatch(sources, { timeoutMs: opts.parseTimeoutMs, inProcess: opts.inProcess, warn: (m) => warn({ code: 'parse-fallback', message: m }) });
    const text = (k: number) => store.restore(conv[k].text);
    const title = (t: string | undefined) => store.restore(inlineText(t && cleanTitle(t)));
    const sections: PaperSection[] = [];
    const front = conv[1];
    if (front.text.length > 200) {
      sections.push({ index: 0, level: 'front', title: 'Front matter', starred: true, appendix: false, subheadings: [], text: text(1), parser: front.parser, boilerplate: false });
    }
    raw.forEach((s, k) => {
      const c = conv[k + 2];
      const t = title(s.title);
      const why = boilerplateReason(t, text(k + 2));
      sections.push({
        index: sections.length,
        level: s.level,
        title: t,
        starred: s.starred,
        appendix: s.appendix,
        subheadings: s.subheadings.map(title),
        text: text(k + 2),
        parser: c.parser,
        boilerplate: why !== undefined,
        ...(why && { boilerplateReason: why }),
      });
    });
    const licence = detectLicence(src.root);
    const paperTitle = title(st.title ?? fallbackTitle(expanded)) || id;
    // No abstract environment or \abstract{…}: a first section headed "Abstract" (\section*{Abstract},
    // \chapter*{Abstract}) is the abstract, as typeset; it stays a section too (the paper's own order).
    const firstBody = sections.find((s) => s.level !== 'front');
    const abstract = text(0) || (firstBody && !firstBody.appendix && /^abstract\.?$/i.test(firstBody.title.trim()) ? firstBody.text : '');
    const stageText = [paperTitle, abstract, ...sections.map((s) => `${s.title}\n${s.text}`)].join('\n');
    const coverage = measureCoverage(expanded, st.headings.map((h) => h.title), stageText);
    const problem = coverageProblem(coverage);
    if (problem) warn({ code: 'coverage', file: mainFile, message: `${problem}: text may have been lost in ingestion` });
    const localFiles = new Map<string, string>();
    for (const rel of listFiles(src.root, (n) => /\.(cls|sty)$/i.test(n), 50)) {
      const t = readTextFile(join(src.root, rel), () => {}, { rel });
      if (t) localFiles.set(rel, t);
    }
    const structure = checkStructure({
      flat: flat.text,
      body: expanded,
      family,
      documentClass: documentClass(flat.text),
      localFiles,
      excluded: flat.excluded,
      skipped: [
        ...sections.filter((s) => s.boilerplate).map((s) => ({ title: s.title, reason: s.boilerplateReason ?? 'boilerplate' })),
        ...boilerplateEnvironments(expanded, family),
      ],
    });
    for (const m of structure.problems) warn({ code: 'structure', file: mainFile, message: m });
    // No section (or none of the source's prose) reached the text: nothing for an item to be built
    // from. Fails whatever --strict says, naming why (the structure warnings that explain it).
    const body = sections.filter((s) => s.level !== 'front').length;
    if (!body || (coverage.words > 0 && coverage.covered === 0)) {
      const why = warnings.filter(isStructureWarning).map(formatWarning);
      throw new CoverageError(
        `${id}: ${!body ? 'no section' : 'none of the prose'} reached the text (${body} section(s), ${formatCoverage(coverage)})${why.length ? `: ${why.join('; ')}` : ''}`,
      );
    }
    if (opts.strictCoverage) assertCoverage({ id, warnings });
    return {
      id,
      title: paperTitle,
      abstract,
      domain: opts.domain ?? guessDomain(id),
      ...(licence && { licence }),
      mainFile,
      files: flat.files,
      missingIncludes: flat.missing,
      sections,
      warnings,
      rootCandidates: choice.candidates,
      mainRule: choice.rule,
      coverage,
      structure,
      ...(family && { classFamily: family.name }),
    };
  } finally {
    src.cleanup();
  }
}
