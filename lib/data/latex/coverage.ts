/**
 * Ingestion coverage (issue 33 item 4): how much of the flattened source's prose reached the
 * text the stages see, and whether every heading a plain scan finds was parsed. It catches loss
 * by any cause — a rule that is missing, a converter that drops a construct, a body cut short —
 * without knowing the cause.
 *
 * Prose words are counted in the flattened, macro-expanded source from the first
 * `\begin{document}` to the last `\end{document}` (so a body cut at an early `\end{document}` shows),
 * leaving out what is never stage text by design: the preamble, comments (already gone),
 * verbatim-like bodies, math, the bibliography, float bodies (figures, tables, algorithms; their
 * captions are counted by neither side), tabulars, TikZ pictures, title pages and the arguments
 * of reference-like and layout macros (`\cite`, `\ref`, `\label`, `\url`, `\includegraphics`,
 * `\author`, …). Words are runs of letters of length ≥ 3, case-folded, compared as multisets
 * against the title, abstract and section texts of the paper.
 */
import { readGroup } from './source.js';

/** Below this share of prose words reached, a paper gets a `coverage` warning. */
export const COVERAGE_MIN_WORDS = 0.9;
/** A paper with fewer prose words than this is not judged on its share (too few to measure). */
export const COVERAGE_MIN_SAMPLE = 50;

/** Coverage of one paper. */
export interface Coverage {
  /** Prose words in the flattened source (see the module doc). */
  words: number;
  /** Of those, words found in the stages' text (multiset intersection). */
  covered: number;
  /** covered / words (1 when there are no words). */
  ratio: number;
  /** Headings (`\part` … `\subsubsection`) a plain scan of the flattened source finds. */
  headingsScanned: number;
  /** Of those, headings the structure parse found (by title). */
  headingsParsed: number;
  /** Titles (raw LaTeX, at most 10) the scan found and the parse did not. */
  missingHeadings: string[];
}

const SKIP_ENVS = [
  'thebibliography', 'figure', 'figure\\*', 'table', 'table\\*', 'wrapfigure', 'wraptable', 'sidewaysfigure', 'sidewaystable', 'algorithm', 'algorithm\\*', 'algorithmic',
  'tabular', 'tabular\\*', 'tabularx', 'longtable', 'tikzpicture', 'equation', 'equation\\*', 'align', 'align\\*', 'gather', 'gather\\*', 'multline', 'multline\\*', 'eqnarray',
  'eqnarray\\*', 'displaymath', 'math', 'titlepage', 'comment', 'filecontents', 'filecontents\\*', 'acknowledgments', 'acknowledgements', 'acknowledgement',
];
const SKIP_ENV_RE = new RegExp(`\\\\begin\\s*\\{(${SKIP_ENVS.join('|')})\\}[\\s\\S]*?\\\\end\\s*\\{\\1\\}`, 'g');
const MATH_RE = /(?<!\\)\$\$[\s\S]*?(?<!\\)\$\$|(?<!\\)\$(?:[^$\\]|\\[\s\S])*?\$|\\\[[\s\S]*?\\\]|\\\([\s\S]*?\\\)/g;
/** Macros whose (last) braced arguments are not prose. */
const NON_PROSE = /\\(label|ref|eqref|cref|Cref|autoref|pageref|nameref|cite[a-zA-Z]*|nocite|url|href|includegraphics|bibliography|bibliographystyle|input|include|usepackage|begin|end|vspace|hspace|setlength|setcounter|addtocounter|color|textcolor|definecolor|author|affiliation|affil|address|email|institute|orcid|thanks|date|keywords|pacs|doi|graphicspath|newcommand|renewcommand|hypersetup|pagestyle|thispagestyle|bibitem|caption|footnotemark|IEEEauthorblockA|IEEEauthorblockN|icmlauthor|icmlaffiliation|icmlcorrespondingauthor|icmlkeywords|titlerunning|authorrunning|icmltitlerunning|mintinline|lstinputlisting|inputminted|Author|correspondence|runningtitle|runningauthor|received|pubdiscuss|revised|accepted|published|firstpage|inst|institute|email)(?![a-zA-Z@])\*?/g;

/** Words (letters only, ≥ 3, case-folded) of plain text. */
export function words(text: string): string[] {
  return (text.normalize('NFC').match(/\p{L}{3,}/gu) ?? []).map((w) => w.toLowerCase());
}

/** The prose of a flattened source's body, as plain words (see the module doc). */
export function sourceProseWords(flat: string): string[] {
  const b = /\\begin\s*\{document\}/.exec(flat);
  const start = b ? b.index + b[0].length : 0;
  const e = flat.lastIndexOf('\\end{document}');
  let s = flat.slice(start, e > start ? e : flat.length);
  s = s.replace(/\uE000\d+\uE001/g, ' ').replace(SKIP_ENV_RE, ' ').replace(MATH_RE, ' ');
  // a heading's short title (\section[short]{long}) is for the table of contents and running heads: not printed in the text
  s = s.replace(/(\\(?:part|chapter|section|subsection|subsubsection|paragraph)\*?)\s*\[[^\]]*\]/g, '$1');
  // non-prose macros with their optional and braced arguments (up to two)
  let out = '';
  let pos = 0;
  const re = new RegExp(NON_PROSE.source, 'g');
  let m: RegExpExecArray | null;
  while ((m = re.exec(s))) {
    let i = m.index + m[0].length;
    const two = /^\\(inputminted|textcolor|href|setlength|setcounter|addtocounter|newcommand|renewcommand|definecolor|icmlaffiliation)/.test(m[0]) ? 2 : 1;
    for (let k = 0; k < two; k++) {
      while (/\s/.test(s[i] ?? '')) i++;
      while (s[i] === '[') {
        const c = s.indexOf(']', i);
        if (c < 0) break;
        i = c + 1;
        while (/\s/.test(s[i] ?? '')) i++;
      }
      const g = readGroup(s, i);
      if (!g) break;
      i = g[1];
    }
    // \textcolor{c}{TEXT} and \href{url}{TEXT}: the last argument is prose
    if (/^\\(textcolor|href)/.test(m[0])) {
      const g = readGroup(s, i);
      if (g) out += s.slice(pos, m.index) + ' ' + g[0];
      else out += s.slice(pos, m.index);
      pos = g ? g[1] : i;
    } else {
      out += s.slice(pos, m.index) + ' ';
      pos = i;
    }
    re.lastIndex = pos;
  }
  out += s.slice(pos);
  // control words are not prose (\textbf, \emph, …; their arguments are)
  return words(out.replace(/\\[a-zA-Z@]+\*?|\\./g, ' '));
}

const SCAN_RE = /\\(part|chapter|section|subsection|subsubsection)(?![a-zA-Z@])\*?\s*(?:\[[^\]]*\]\s*)?(?=\{)/g;

/** Heading titles (raw) a plain scan of the flattened source finds between the first `\begin{document}` and the last `\end{document}`. */
export function scanHeadings(flat: string): string[] {
  const b = /\\begin\s*\{document\}/.exec(flat);
  const start = b ? b.index + b[0].length : 0;
  const e = flat.lastIndexOf('\\end{document}');
  const s = flat.slice(start, e > start ? e : flat.length);
  const out: string[] = [];
  const re = new RegExp(SCAN_RE.source, 'g');
  let m: RegExpExecArray | null;
  while ((m = re.exec(s))) {
    const g = readGroup(s, m.index + m[0].length);
    if (g) out.push(g[0].trim());
  }
  return out;
}

/**
 * Coverage of a paper: `flat` is the flattened, macro-expanded source; `parsedHeadings` the raw
 * titles the structure parse found (every level); `stageText` everything the stages get (title,
 * abstract, section texts).
 */
export function measureCoverage(flat: string, parsedHeadings: string[], stageText: string): Coverage {
  const src = sourceProseWords(flat);
  const have = new Map<string, number>();
  for (const w of words(stageText)) have.set(w, (have.get(w) ?? 0) + 1);
  let covered = 0;
  for (const w of src) {
    const n = have.get(w) ?? 0;
    if (n > 0) {
      covered++;
      have.set(w, n - 1);
    }
  }
  const scanned = scanHeadings(flat);
  const parsed = new Map<string, number>();
  const norm = (t: string) => t.replace(/\s+/g, ' ').trim();
  for (const h of parsedHeadings) parsed.set(norm(h), (parsed.get(norm(h)) ?? 0) + 1);
  const missing: string[] = [];
  for (const h of scanned) {
    const n = parsed.get(norm(h)) ?? 0;
    if (n > 0) parsed.set(norm(h), n - 1);
    else missing.push(h);
  }
  return {
    words: src.length,
    covered,
    ratio: src.length ? covered / src.length : 1,
    headingsScanned: scanned.length,
    headingsParsed: scanned.length - missing.length,
    missingHeadings: missing.slice(0, 10),
  };
}

/** The problems of a coverage below the thresholds ({@link COVERAGE_MIN_WORDS}, every scanned heading parsed), as one message; undefined when fine. */
export function coverageProblem(c: Coverage): string | undefined {
  const parts: string[] = [];
  if (c.words >= COVERAGE_MIN_SAMPLE && c.ratio < COVERAGE_MIN_WORDS) {
    parts.push(`only ${(100 * c.ratio).toFixed(1)}% of the source's ${c.words} prose words reached the text (threshold ${100 * COVERAGE_MIN_WORDS}%)`);
  }
  if (c.missingHeadings.length) {
    const k = c.headingsScanned - c.headingsParsed;
    parts.push(`${k} of ${c.headingsScanned} heading(s) in the source were not parsed (${c.missingHeadings.map((h) => JSON.stringify(h.slice(0, 60))).join(', ')})`);
  }
  return parts.length ? parts.join('; ') : undefined;
}

/** `coverage: 97.2% of 5120 prose words, 14/14 headings`. */
export function formatCoverage(c: Coverage): string {
  return `coverage: ${(100 * c.ratio).toFixed(1)}% of ${c.words} prose words, ${c.headingsParsed}/${c.headingsScanned} headings`;
}
