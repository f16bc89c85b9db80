/**
 * Paper ingestion (docs/design.md §7, first half): a paper source (directory or arXiv-style archive)
 * → main file → includes resolved → comments / `\iffalse` removed → simple macros expanded →
 * title, abstract and sections as plain text.
 */
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { basename, join } from 'node:path';
import { ArchiveError, unpackSource, type ArchiveLimits } from './archive.js';
import { chooseMainFile, expandMacros, listFiles, type PaperWarning, type RootCandidate } from './source.js';
import { extractStructure, groupSections, type SectionLevel } from './structure.js';
import { inlineText, latexToTextBatch } from './text.js';

export * from './archive.js';
export {
  stripComments,
  stripIffalse,
  findMainFile,
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
export { extractStructure, topLevelSections, groupSections, documentBody } from './structure.js';
export { latexToText, latexToTextBatch, fallbackToText, parseToText, inlineText } from './text.js';

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
}

const BOILERPLATE = /^(acknowledge?ments?|author contributions?( statement)?|competing interests?|conflicts? of interest|funding|references|bibliography|consortium|data availability|code availability|supporting information|additional information|contributions)\b/i;

/** Title from a `titlepage` environment when there is no `\title`: its first large-font group. */
function titlepageTitle(text: string): string | undefined {
  const tp = /\\begin\{titlepage\}([\s\S]*?)\\end\{titlepage\}/.exec(text);
  if (!tp) return undefined;
  const m = /\{\s*(?:\\textbf\{)?\s*\\(?:LARGE|Large|huge|Huge)\s+([^{}]+?)\}/.exec(tp[1]) ?? /\\(?:LARGE|Huge|huge)\s+([^{}\n]+)/.exec(tp[1]);
  return m ? m[1].replace(/\\\\(\[[^\]]*\])?/g, ' ').trim() : undefined;
}

/** Paper id from a path: `cs-pysr.tar.gz` → `cs-pysr`. */
export function paperIdFromPath(path: string): string {
  return basename(path.replace(/[\\/]+$/, '')).replace(/\.(tar\.gz|tgz|tar|gz|zip)$/i, '');
}

const DOMAINS: Record<string, string> = { cs: 'computer science', physics: 'physics', 'astro-ph': 'astrophysics', astro: 'astrophysics', econ: 'economics', math: 'mathematics', stat: 'statistics', stats: 'statistics', 'q-bio': 'quantitative biology', 'q-fin': 'quantitative finance', eess: 'electrical engineering', bio: 'biology', chem: 'chemistry', ml: 'machine learning', eng: 'engineering' };
function guessDomain(id: string): string {
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
    const choice = chooseMainFile(src.root, warn);
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
    const expanded = expandMacros(flat.text, warn);
    const st = extractStructure(expanded);
    const { leading, sections: raw } = groupSections(st.headings);
    // headings before the first top-level one (a thesis's front-matter \section*s) stay front matter
    const frontText = st.front + leading.map((h) => `\n\n\\paragraph{${h.title}}\n${h.latex}`).join('');
    const sources = [st.abstract ?? '', frontText, ...raw.map((s) => s.latex)];
    const conv = await latexToTextBatch(sources, { timeoutMs: opts.parseTimeoutMs, inProcess: opts.inProcess, warn: (m) => warn({ code: 'parse-fallback', message: m }) });
    const text = (k: number) => store.restore(conv[k].text);
    const title = (t: string | undefined) => store.restore(inlineText(t));
    const sections: PaperSection[] = [];
    const front = conv[1];
    if (front.text.length > 200) {
      sections.push({ index: 0, level: 'front', title: 'Front matter', starred: true, appendix: false, subheadings: [], text: text(1), parser: front.parser, boilerplate: false });
    }
    raw.forEach((s, k) => {
      const c = conv[k + 2];
      const t = title(s.title);
      sections.push({
        index: sections.length,
        level: s.level,
        title: t,
        starred: s.starred,
        appendix: s.appendix,
        subheadings: s.subheadings.map(title),
        text: text(k + 2),
        parser: c.parser,
        boilerplate: BOILERPLATE.test(t),
      });
    });
    const licence = detectLicence(src.root);
    return {
      id,
      title: title(st.title ?? titlepageTitle(expanded)) || id,
      abstract: text(0),
      domain: opts.domain ?? guessDomain(id),
      ...(licence && { licence }),
      mainFile,
      files: flat.files,
      missingIncludes: flat.missing,
      sections,
      warnings,
      rootCandidates: choice.candidates,
    };
  } finally {
    src.cleanup();
  }
}
