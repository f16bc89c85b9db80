/**
 * Document structure from flattened LaTeX (docs/design.md §7): title, abstract, the `document`
 * body, and the sectioning commands (`\part`, `\chapter`, `\section`, `\subsection`,
 * `\subsubsection`, `\paragraph`, starred or not, optional short titles) with `\appendix`
 * marking everything after it. A scanner (not a full parse) so it cannot hang on odd input.
 */
import { readGroup, readOptional } from './source.js';

/** Sectioning levels, outermost first. */
export const LEVELS = ['part', 'chapter', 'section', 'subsection', 'subsubsection', 'paragraph', 'subparagraph'] as const;
export type SectionLevel = (typeof LEVELS)[number];

/** One heading and the raw LaTeX up to the next heading (of any level). */
export interface RawHeading {
  level: SectionLevel;
  title: string;
  starred: boolean;
  appendix: boolean;
  /** Raw LaTeX after the heading, up to the next heading. */
  latex: string;
}

/** Top-level structure of a document. */
export interface RawStructure {
  title?: string;
  abstract?: string;
  /** LaTeX of the body before the first heading (after `\maketitle` etc.). */
  front: string;
  headings: RawHeading[];
}

/** The text between `\begin{document}` and `\end{document}` (the whole text when absent). */
export function documentBody(text: string): string {
  const b = /\\begin\s*\{document\}/.exec(text);
  const start = b ? b.index + b[0].length : 0;
  const e = /\\end\s*\{document\}/.exec(text.slice(start));
  return e ? text.slice(start, start + e.index) : text.slice(start);
}

/** The preamble (before `\begin{document}`). */
export function preamble(text: string): string {
  const b = /\\begin\s*\{document\}/.exec(text);
  return b ? text.slice(0, b.index) : '';
}

/**
 * Title macros of the common classes, all `\name*?[short]{full}`: `\title` (article, NeurIPS,
 * ICLR, ACL, IEEEtran, acmart, REVTeX, elsarticle, Springer llncs / svjour / sn-jnl, AMS; Springer
 * svmult's `\title*`), `\icmltitle` (ICML), `\Title` (MDPI). Running heads (`\icmltitlerunning`,
 * `\titlerunning`, `\shorttitle`, `\runningtitle`) are not titles.
 */
export const TITLE_MACROS = ['title', 'icmltitle', 'Title'];

/** First title argument (see {@link TITLE_MACROS}; anywhere, in text order), raw LaTeX. */
export function findTitle(text: string): string | undefined {
  const re = new RegExp(`\\\\(?:${TITLE_MACROS.join('|')})(?![a-zA-Z@])\\*?\\s*`, 'g');
  let m: RegExpExecArray | null;
  while ((m = re.exec(text))) {
    let i = m.index + m[0].length;
    const opt = readOptional(text, i);
    if (opt) i = opt[1];
    while (/\s/.test(text[i] ?? '')) i++;
    const g = readGroup(text, i);
    if (g && g[0].trim()) return g[0].trim();
  }
  return undefined;
}

/** Notes attached to a title, not part of it: `\thanks`, `\footnote`, elsarticle's `\tnoteref` / `\fnref`, acmart's `\titlenote`, … */
const TITLE_NOTES = /\\(thanks|footnote|footnotemark|tnoteref|tnotetext|fnref|corref|titlenote|IEEEauthorrefmark|affiliationmark|support)(?![a-zA-Z@])\*?/g;

/**
 * A title as typeset in the heading: notes (`\thanks{…}`, `\footnote[n]{…}`, `\tnoteref{…}`, …)
 * removed, line breaks (`\\`, `\\[2pt]`, `\\*`, `\newline`, `\linebreak`) made spaces,
 * `\texorpdfstring{TeX}{PDF}` → its TeX argument. Raw LaTeX in, raw LaTeX out.
 */
export function cleanTitle(t: string): string {
  let out = '';
  let pos = 0;
  const re = new RegExp(TITLE_NOTES.source, 'g');
  let m: RegExpExecArray | null;
  while ((m = re.exec(t))) {
    let i = m.index + m[0].length;
    for (;;) {
      const j = i;
      while (/\s/.test(t[i] ?? '')) i++;
      const o = readOptional(t, i);
      if (o) {
        i = o[1];
        continue;
      }
      i = j;
      break;
    }
    let k = i;
    while (/\s/.test(t[k] ?? '')) k++;
    const g = m[1] === 'footnotemark' ? undefined : readGroup(t, k);
    if (g) i = g[1];
    out += t.slice(pos, m.index);
    pos = i;
    re.lastIndex = i;
  }
  out += t.slice(pos);
  out = out.replace(/\\texorpdfstring\s+\{/g, '\\texorpdfstring{');
  for (let k = out.indexOf('\\texorpdfstring{'); k >= 0; k = out.indexOf('\\texorpdfstring{', k + 1)) {
    const a = readGroup(out, k + '\\texorpdfstring'.length);
    const b = a && readGroup(out, a[1]);
    if (a && b) out = out.slice(0, k) + a[0] + out.slice(b[1]);
  }
  return out.replace(/\\\\\*?(\s*\[[^\]]*\])?|\\(newline|linebreak)(?![a-zA-Z@])(\[[^\]]*\])?/g, ' ').replace(/\s+/g, ' ').trim();
}

/**
 * The abstract: every `\begin{abstract}…\end{abstract}` (also in the preamble, as some classes
 * want; a paper with abstracts in two languages has both, joined by a blank line), or `\abstract{…}`.
 */
export function findAbstract(text: string): string | undefined {
  const envs = [...text.matchAll(/\\begin\s*\{abstract\}([\s\S]*?)\\end\s*\{abstract\}/g)].map((m) => m[1].trim()).filter(Boolean);
  if (envs.length) return envs.join('\n\n');
  const m = /\\abstract\s*(?=\{)/.exec(text);
  if (m) {
    const g = readGroup(text, m.index + m[0].length);
    if (g) return g[0].trim();
  }
  return undefined;
}

const HEADING_RE = /\\(part|chapter|section|subsection|subsubsection|paragraph|subparagraph)(?![a-zA-Z@])(\*?)|\\appendix(?![a-zA-Z@])|\\begin\s*\{appendix\}|\\begin\s*\{abstract\}[\s\S]*?\\end\s*\{abstract\}/g;

/**
 * Split the flattened document into headings. Headings inside the preamble are ignored; an
 * abstract environment in the body is cut out of the text (it is reported as `abstract`).
 */
export function extractStructure(flat: string): RawStructure {
  const body = documentBody(flat);
  const title = findTitle(flat);
  const abstract = findAbstract(flat);
  const headings: RawHeading[] = [];
  let appendix = false;
  let front = '';
  let cur: RawHeading | undefined;
  let pos = 0;
  const push = (s: string) => {
    if (cur) cur.latex += s;
    else front += s;
  };
  HEADING_RE.lastIndex = 0;
  let m: RegExpExecArray | null;
  while ((m = HEADING_RE.exec(body))) {
    push(body.slice(pos, m.index));
    pos = m.index + m[0].length;
    if (m[0].startsWith('\\begin')) {
      if (/appendix/.test(m[0])) appendix = true;
      continue; // abstract env: dropped from the body
    }
    if (m[0].startsWith('\\appendix')) {
      appendix = true;
      continue;
    }
    let i = pos;
    while (/\s/.test(body[i] ?? '')) i++;
    const opt = readOptional(body, i);
    if (opt) {
      i = opt[1];
      while (/\s/.test(body[i] ?? '')) i++;
    }
    const g = readGroup(body, i);
    if (!g) continue; // \section used without an argument (e.g. in a macro definition)
    pos = g[1];
    HEADING_RE.lastIndex = pos;
    cur = { level: m[1] as SectionLevel, title: g[0].trim(), starred: m[2] === '*', appendix, latex: '' };
    headings.push(cur);
  }
  push(body.slice(pos));
  return { title, abstract, front, headings };
}

/** A section with its subsections merged in: the unit the map step sees. */
export interface RawSection {
  level: SectionLevel;
  title: string;
  starred: boolean;
  appendix: boolean;
  /** Titles of the merged sub-headings. */
  subheadings: string[];
  latex: string;
}

/**
 * Group headings into top-level sections: the outermost level present among `section` /
 * `chapter` (or whatever is outermost) and everything below it merged in, sub-headings kept as
 * marked lines so that the text stays readable.
 */
export function topLevelSections(headings: RawHeading[]): RawSection[] {
  return groupSections(headings).sections;
}

/**
 * {@link topLevelSections}, plus the headings below the top level that come before the first
 * top-level heading (a thesis's front-matter `\section*`s before its first `\chapter`): they
 * belong to the front matter, not to a section.
 */
export function groupSections(headings: RawHeading[]): { leading: RawHeading[]; sections: RawSection[] } {
  if (!headings.length) return { leading: [], sections: [] };
  const present = new Set(headings.map((h) => h.level));
  const top = LEVELS.find((l) => l !== 'part' && present.has(l)) ?? 'part';
  const topIdx = LEVELS.indexOf(top);
  let first = headings.findIndex((h) => LEVELS.indexOf(h.level) <= topIdx);
  if (first < 0) first = 0;
  const leading = headings.slice(0, first);
  const out: RawSection[] = [];
  let cur: RawSection | undefined;
  for (const h of headings.slice(first)) {
    const idx = LEVELS.indexOf(h.level);
    if (idx < topIdx) {
      // a \part above the top level: its text opens a section of its own
      cur = { level: h.level, title: h.title, starred: h.starred, appendix: h.appendix, subheadings: [], latex: h.latex };
      out.push(cur);
    } else if (idx === topIdx || !cur) {
      cur = { level: h.level, title: h.title, starred: h.starred, appendix: h.appendix, subheadings: [], latex: h.latex };
      out.push(cur);
    } else {
      cur.subheadings.push(h.title);
      cur.latex += `\n\n\\paragraph{${h.title}}\n${h.latex}`;
    }
  }
  return { leading, sections: out };
}
