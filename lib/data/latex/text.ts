/**
 * LaTeX → readable plain text for the LLM stages (docs/design.md §7). Two converters:
 *
 * - {@link astToText}: @unified-latex parse + a walk that keeps prose, inline math as `$…$`,
 *   display math raw, list items, figure/table captions, footnotes in parentheses; drops
 *   citations' keys, labels, graphics and layout commands.
 * - {@link fallbackToText}: a regex/scanner converter that never hangs, used for large inputs,
 *   when the parser throws, or when the parse exceeds its time limit.
 *
 * {@link latexToTextBatch} runs the parser in a worker thread that is terminated when one
 * source takes longer than `timeoutMs` (that source then goes through the fallback and a fresh
 * worker continues with the rest).
 */
import { Worker } from 'node:worker_threads';
import { parse } from '@unified-latex/unified-latex-util-parse';
import { printRaw } from '@unified-latex/unified-latex-util-print-raw';
import type * as Ast from '@unified-latex/unified-latex-types';
import { readGroup, readOptional } from './source.js';

/** Inputs longer than this skip the parser (default cut-off). */
export const MAX_PARSE_CHARS = 150_000;

const DROP_MACROS = new Set([
  'label', 'cite', 'citep', 'citet', 'citealp', 'citeauthor', 'citeyear', 'nocite', 'ref', 'eqref', 'cref', 'Cref', 'autoref', 'pageref', 'includegraphics',
  'vspace', 'hspace', 'newpage', 'clearpage', 'pagebreak', 'linebreak', 'nolinebreak', 'noindent', 'centering', 'maketitle', 'tableofcontents', 'thispagestyle', 'pagestyle',
  'setlength', 'setcounter', 'addtocounter', 'addcontentsline', 'bibliography', 'bibliographystyle', 'printbibliography', 'newcommand', 'renewcommand', 'def', 'usepackage',
  'color', 'definecolor', 'footnotemark', 'marginicon', 'script', 'phantom', 'vfill', 'hfill', 'small', 'footnotesize', 'scriptsize', 'large', 'Large', 'LARGE', 'normalsize',
  'bfseries', 'itshape', 'rmfamily', 'ttfamily', 'normalfont', 'onecolumn', 'twocolumn', 'flushbottom', 'appendix', 'pagenumbering', 'restylefloat', 'floatstyle', 'counterwithin',
  'hypersetup', 'bigskip', 'medskip', 'smallskip', 'par', 'index', 'glossary', 'protect', 'relax', 'ListProperties', 'SetKwFunction', 'DontPrintSemicolon', 'tcbset', 'raisebox',
]);
const CITE_MACROS = new Set(['cite', 'citep', 'citet', 'citealp', 'ref', 'eqref', 'cref', 'Cref', 'autoref']);
const DROP_ENVS = new Set(['tabular', 'tabular*', 'tabularx', 'longtable', 'tikzpicture', 'axis', 'thebibliography', 'comment', 'lstlisting', 'minted', 'algorithm', 'algorithm*', 'algorithmic', 'titlepage', 'acknowledgements', 'acknowledgments']);
const SYMBOLS: Record<string, string> = { '%': '%', '&': '&', $: '$', '#': '#', _: '_', '{': '{', '}': '}', '\\': '\n', ldots: '…', dots: '…', textendash: '–', textemdash: '—', LaTeX: 'LaTeX', TeX: 'TeX', textunderscore: '_', S: '§', '-': '', '/': '', ',': ' ', ';': ' ', ' ': ' ', '@': '', textbackslash: '\\', ss: 'ß', o: 'ø', ae: 'æ', ' \n': ' ' };
const ACCENTS = new Set(["'", '`', '^', '"', '~', '=', '.', 'u', 'v', 'H', 'c', 'k', 'r']);

function argText(n: Ast.Macro, which: 'last' | number = 'last'): Ast.Node[] {
  const args = (n.args ?? []).filter((a) => a.openMark === '{' || (a.content.length && a.openMark !== '['));
  if (!args.length) return [];
  const a = which === 'last' ? args[args.length - 1] : args[which];
  return a?.content ?? [];
}

/** Convert a parsed AST to plain text. */
export function astToText(nodes: Ast.Node[]): string {
  const out: string[] = [];
  const walk = (list: Ast.Node[]) => {
    for (let k = 0; k < list.length; k++) {
      const n = list[k];
      switch (n.type) {
        case 'string':
          out.push(n.content === '~' ? ' ' : typography(n.content));
          break;
        case 'whitespace':
          out.push(' ');
          break;
        case 'parbreak':
          out.push('\n\n');
          break;
        case 'comment':
          break;
        case 'inlinemath':
          out.push(`$${printRaw(n.content)}$`);
          break;
        case 'displaymath':
          out.push(`\n$$${printRaw(n.content)}$$\n`);
          break;
        case 'mathenv':
          out.push(`\n$$${printRaw(n.content)}$$\n`);
          break;
        case 'verb':
          out.push(n.content);
          break;
        case 'verbatim':
          out.push(`\n${n.content}\n`);
          break;
        case 'group':
          walk(n.content);
          break;
        case 'environment': {
          const env = n.env;
          if (DROP_ENVS.has(env)) break;
          if (/^(figure|table|figure\*|table\*|wrapfigure|sidewaystable|sidewaysfigure)$/.test(env)) {
            const caps: Ast.Node[][] = [];
            const findCap = (l: Ast.Node[]) => {
              for (const c of l) {
                if (c.type === 'macro' && c.content === 'caption') caps.push(argText(c));
                else if ('content' in c && Array.isArray(c.content)) findCap(c.content as Ast.Node[]);
              }
            };
            findCap(n.content);
            for (const c of caps) {
              out.push(`\n[${env.replace('*', '')} caption: `);
              walk(c);
              out.push(']\n');
            }
            break;
          }
          if (/^(itemize|enumerate|description|easylist)$/.test(env)) {
            out.push('\n');
            walk(n.content);
            out.push('\n');
            break;
          }
          out.push('\n');
          walk(n.content);
          out.push('\n');
          break;
        }
        case 'macro': {
          const name = n.content;
          if (name === 'item') {
            out.push('\n- ');
            const opt = (n.args ?? []).find((a) => a.openMark === '[' && a.content.length);
            if (opt) {
              walk(opt.content);
              out.push(': ');
            }
            // the item body is attached as the last (mark-less) argument
            const bodyArg = (n.args ?? []).filter((a) => a.openMark === '' && a.content.length).pop();
            if (bodyArg) walk(bodyArg.content);
            break;
          }
          if (name in SYMBOLS) {
            out.push(SYMBOLS[name]);
            break;
          }
          if (ACCENTS.has(name)) {
            out.push(accents(printRaw(n)).replace(/[{}]/g, ''));
            break;
          }
          if (CITE_MACROS.has(name)) {
            out.push(name.startsWith('cite') ? '[citation]' : '[ref]');
            break;
          }
          if (name === 'citeauthor') {
            out.push('the authors');
            break;
          }
          if (DROP_MACROS.has(name)) break;
          if (/^(paragraph|subparagraph|subsection|subsubsection|section)$/.test(name)) {
            out.push('\n\n');
            walk(argText(n));
            out.push('.\n');
            break;
          }
          if (name === 'footnote') {
            out.push(' (footnote: ');
            walk(argText(n));
            out.push(')');
            break;
          }
          if (name === 'href') {
            walk(argText(n));
            break;
          }
          if (name === 'url') {
            out.push(printRaw(argText(n)).replace(/\\([%#_&$~])/g, '$1'));
            break;
          }
          if (name === 'caption') {
            out.push('[caption: ');
            walk(argText(n));
            out.push(']');
            break;
          }
          // Known formatting macros carry their text in the last argument; unknown macros have no
          // attached args (their groups follow as siblings and are walked as groups).
          if (n.args?.length) walk(argText(n));
          break;
        }
        default:
          break;
      }
    }
  };
  walk(nodes);
  // TeX ligatures split over several string nodes (`` … '', ---) outside math
  return tidy(out.join('').replace(/(\$\$[\s\S]*?\$\$|\$[^$]*\$)|``|''|---|--/g, (m, math?: string) => math ?? typography(m)));
}

/** Normalise whitespace: single spaces, at most one blank line. */
export function tidy(s: string): string {
  return s
    .replace(/[ \t\u00a0]+/g, ' ')
    .replace(/ *\n */g, '\n')
    .replace(/\n{3,}/g, '\n\n')
    .replace(/ ([.,;:!?)])/g, '$1')
    .replace(/\( /g, '(')
    .trim();
}

const PRE_DROP = [
  'label', 'counterwithin', 'counterwithout', 'renewcommand', 'newcommand', 'providecommand', 'setlength', 'setcounter', 'addtocounter', 'addcontentsline', 'bibliographystyle',
  'bibliography', 'includegraphics', 'color', 'definecolor', 'hypersetup', 'pagenumbering', 'script', 'marginicon', 'vspace', 'hspace', 'thispagestyle', 'pagestyle',
  'restylefloat', 'floatstyle', 'usepackage', 'nocite', 'tcbset', 'newenvironment', 'renewenvironment', 'newtheorem', 'graphicspath', 'setstretch', 'titleformat',
];
const TWO_ARGS = new Set(['newcommand', 'renewcommand', 'providecommand', 'counterwithin', 'counterwithout', 'setlength', 'setcounter', 'addtocounter']);
const THREE_ARGS = new Set(['definecolor', 'addcontentsline', 'newenvironment', 'renewenvironment']);
const PRE_CITE: Record<string, string> = { citeauthor: 'the authors', citeyear: '[year]' };

/**
 * Remove macros whose braced arguments are not text (labels, counters, definitions…) and turn
 * citations/references into placeholders, before parsing: the parser only attaches arguments
 * for macros it knows, so `\citeauthor{key}` would otherwise leave `key` in the text.
 */
export function preClean(src: string): string {
  const re = /\\([a-zA-Z@]+)\*?/g;
  let out = '';
  let pos = 0;
  let m: RegExpExecArray | null;
  while ((m = re.exec(src))) {
    const name = m[1];
    const isCite = /^(cite[a-zA-Z]*|citep|citet|ref|eqref|cref|Cref|autoref|pageref)$/.test(name);
    if (!isCite && !PRE_DROP.includes(name)) continue;
    let i = m.index + m[0].length;
    const skip = () => {
      let j = i;
      while (j < src.length && /[ \t]/.test(src[j])) j++;
      if (src[j] === '[' || src[j] === '{') i = j;
    };
    // optional args, then up to the needed mandatory args
    const maxGroups = TWO_ARGS.has(name) ? 2 : THREE_ARGS.has(name) ? 3 : 1;
    let groups = 0;
    for (;;) {
      skip();
      if (src[i] === '[') {
        const o = readOptional(src, i);
        if (!o) break;
        i = o[1];
        continue;
      }
      if (groups < maxGroups && src[i] === '{') {
        const g = readGroup(src, i);
        if (!g) break;
        i = g[1];
        groups++;
        continue;
      }
      if (groups < maxGroups && src[i] === '\\' && /newcommand|renewcommand|providecommand/.test(name) && groups === 0) {
        const c = /^\\[a-zA-Z@]+/.exec(src.slice(i));
        if (c) {
          i += c[0].length;
          groups++;
          continue;
        }
      }
      break;
    }
    if (groups === 0 && !['vspace', 'hspace'].includes(name) && !isCite) continue;
    out += src.slice(pos, m.index) + (isCite ? PRE_CITE[name] ?? (name.startsWith('cite') ? '[citation]' : '[ref]') : ' ');
    pos = i;
    re.lastIndex = i;
  }
  // option lists of other macros (\tcbox[colback=…], \begin{figure}[h!]) are layout, not text
  return (out + src.slice(pos)).replace(/(\\([a-zA-Z@]+)\*?|\\begin\{[^}]*\})\[[^\][]{0,600}\]/g, (m, head: string, name?: string) =>
    name && /^(item|left|right|middle|[bB]igg?[lr]?|sqrt|mathopen|mathclose|\w*cite\w*)$/.test(name) ? m : head,
  );
}

/** Parse with @unified-latex and convert (synchronous; may be slow on huge inputs). */
export function parseToText(src: string): string {
  return astToText(parse(preClean(src)).content);
}

/**
 * Regex/scanner converter: never hangs (linear passes), used as the fallback.
 */
export function fallbackToText(src: string): string {
  // inline and display math kept as written ($…$), out of reach of the passes below
  const math: string[] = [];
  let s = preClean(src).replace(/(?<!\\)\$\$[\s\S]*?(?<!\\)\$\$|(?<!\\)\$(?:[^$\\]|\\[\s\S])*?\$|\\\([\s\S]*?\\\)|\\\[[\s\S]*?\\\]/g, (m) => {
    math.push(m.startsWith('\\(') ? `$${m.slice(2, -2)}$` : m.startsWith('\\[') ? `$$${m.slice(2, -2)}$$` : m);
    return `\uE004${math.length - 1}\uE005`;
  });
  // environments dropped entirely
  s = s.replace(/\\begin\{(tabular\*?|tabularx|longtable|tikzpicture|thebibliography|lstlisting|minted|algorithm\*?|titlepage|acknowledge?ments)\}[\s\S]*?\\end\{\1\}/g, ' ');
  // figures/tables: keep captions
  s = s.replace(/\\begin\{(figure\*?|table\*?|wrapfigure)\}([\s\S]*?)\\end\{\1\}/g, (_m, env: string, body: string) => {
    const caps: string[] = [];
    const re = /\\caption(?![a-zA-Z])\s*(\[[^\]]*\])?\s*/g;
    let c: RegExpExecArray | null;
    while ((c = re.exec(body))) {
      const g = readGroup(body, c.index + c[0].length);
      if (g) caps.push(g[0]);
    }
    return caps.map((x) => `\n[${env.replace('*', '')} caption: ${x}]\n`).join('');
  });
  s = s.replace(/\\item\s*\[([^\]]*)\]/g, '\n- $1: ').replace(/\\item(?![a-zA-Z])/g, '\n- ');
  s = s.replace(/\\(paragraph|subparagraph|subsection|subsubsection|section)\*?\s*(\[[^\]]*\])?\s*\{([^{}]*)\}/g, '\n\n$3.\n');
  s = s.replace(/\\(cite[a-z]*|citep|citet)\*?\s*(\[[^\]]*\]\s*){0,2}\{[^{}]*\}/g, (m) => (m.startsWith('\\citeauthor') ? 'the authors' : '[citation]'));
  s = s.replace(/\\(ref|eqref|cref|Cref|autoref|pageref)\*?\s*\{[^{}]*\}/g, '[ref]');
  s = s.replace(/\\(label|includegraphics|bibliography|bibliographystyle|vspace|hspace|setlength|setcounter|addtocounter|addcontentsline|color|marginicon|script|usepackage)\*?\s*(\[[^\]]*\])?\s*(\{[^{}]*\}\s*){0,2}/g, ' ');
  s = s.replace(/\\footnote\s*(?=\{)/g, (m, off: number, all: string) => {
    const g = readGroup(all, off + m.length);
    return g ? ' (footnote: ' : m;
  });
  s = replaceGroups(s, ' (footnote: ', ')');
  s = s.replace(/\\href\s*\{[^{}]*\}/g, '');
  s = s.replace(/\\url\s*\{([^{}]*)\}/g, '$1');
  s = s.replace(/\\begin\{[^}]*\}(\[[^\]]*\])?|\\end\{[^}]*\}/g, '\n');
  s = accents(s);
  s = s.replace(/\\([%&$#_{}])/g, '$1').replace(/\\\\(\[[^\]]*\])?/g, '\n').replace(/~/g, ' ');
  s = typography(s);
  // remaining control words: formatting macros keep their argument's text (braces removed below)
  s = s.replace(/\\[a-zA-Z@]+\*?(\s*\[[^\]]*\])?/g, (m) => (/^\\(ldots|dots)/.test(m) ? '…' : ''));
  // remove braces outside math (keep math as written)
  s = s.replace(/[{}]/g, '');
  return tidy(s).replace(/\uE004(\d+)\uE005/g, (m, k: string) => math[Number(k)] ?? m);
}

const COMBINING: Record<string, string> = { "'": '\u0301', '`': '\u0300', '^': '\u0302', '"': '\u0308', '~': '\u0303', '=': '\u0304', '.': '\u0307', u: '\u0306', v: '\u030C', H: '\u030B', c: '\u0327', k: '\u0328', r: '\u030A', d: '\u0323', b: '\u0331' };

/** TeX accents (`\'e`, `\'{e}`, `\v{c}`, `\'{\i}`) → the accented letter (NFC). */
export function accents(s: string): string {
  return s.replace(/\\(['`^"~=.]|[uvHckrdb](?=\s*\{))\s*(?:\{\s*(\\[ij](?![a-zA-Z])|[a-zA-Z])\s*\}|(\\[ij](?![a-zA-Z])|[a-zA-Z]))/g, (_m, acc: string, a?: string, b?: string) => {
    const letter = (a ?? b ?? '').replace(/^\\i$/, 'i').replace(/^\\j$/, 'j');
    return (letter + (COMBINING[acc] ?? '')).normalize('NFC');
  });
}

/** TeX ligatures of plain text: `---` → —, `--` → –, ``` `` ``` → “, `''` → ”. */
export function typography(s: string): string {
  return s.replace(/---/g, '\u2014').replace(/--/g, '\u2013').replace(/``/g, '\u201C').replace(/''/g, '\u201D');
}

/** Close footnote parentheses opened by the fallback: `(footnote: {…}` → `(footnote: …)`. */
function replaceGroups(s: string, marker: string, close: string): string {
  let out = '';
  let pos = 0;
  for (;;) {
    const i = s.indexOf(marker, pos);
    if (i < 0) break;
    const j = i + marker.length;
    const g = readGroup(s, j);
    if (!g) {
      out += s.slice(pos, j);
      pos = j;
      continue;
    }
    out += s.slice(pos, i) + marker + g[0] + close;
    pos = g[1];
  }
  return out + s.slice(pos);
}

/**
 * Convert one source with the parser, or the fallback when it is too large or the parser throws.
 * No time limit (use {@link latexToTextBatch} for that).
 */
export function latexToText(src: string, maxParseChars = MAX_PARSE_CHARS): { text: string; parser: 'unified-latex' | 'fallback' } {
  if (src.length > maxParseChars) return { text: fallbackToText(src), parser: 'fallback' };
  try {
    return { text: parseToText(src), parser: 'unified-latex' };
  } catch {
    return { text: fallbackToText(src), parser: 'fallback' };
  }
}

/** Options of {@link latexToTextBatch}. */
export interface BatchOptions {
  /** Per-source parse time limit in ms (default 5000). */
  timeoutMs?: number;
  /** Size cut-off above which the fallback is used directly. */
  maxParseChars?: number;
  /** Run in-process without a worker (no time limit). */
  inProcess?: boolean;
  warn?: (m: string) => void;
}

/** Result for one source. */
export interface ConvertedText {
  text: string;
  parser: 'unified-latex' | 'fallback';
  /** Why the fallback was used ('size', 'error', 'timeout'). */
  reason?: string;
}

/**
 * Convert many sources with a per-source time limit: the parser runs in a worker thread; a
 * source that exceeds `timeoutMs` gets the fallback, the worker is terminated and a new one
 * continues with the next source.
 */
export async function latexToTextBatch(sources: string[], opts: BatchOptions = {}): Promise<ConvertedText[]> {
  const timeoutMs = opts.timeoutMs ?? 5000;
  const maxParse = opts.maxParseChars ?? MAX_PARSE_CHARS;
  const results: ConvertedText[] = new Array(sources.length);
  const pending: number[] = [];
  sources.forEach((s, i) => {
    if (s.length > maxParse) results[i] = { text: fallbackToText(s), parser: 'fallback', reason: 'size' };
    else if (!s.trim()) results[i] = { text: '', parser: 'unified-latex' };
    else pending.push(i);
  });
  if (opts.inProcess) {
    for (const i of pending) {
      const r = latexToText(sources[i], maxParse);
      results[i] = r.parser === 'fallback' ? { ...r, reason: 'error' } : r;
    }
    return results;
  }
  let worker: Worker | undefined;
  const newWorker = () => new Worker(new URL('./parse-worker.js', import.meta.url));
  try {
    for (const i of pending) {
      worker ??= newWorker();
      const w = worker;
      const r = await new Promise<ConvertedText>((resolve) => {
        const timer = setTimeout(() => {
          cleanup();
          void w.terminate();
          worker = undefined;
          opts.warn?.(`LaTeX parse exceeded ${timeoutMs} ms; used the fallback converter`);
          resolve({ text: fallbackToText(sources[i]), parser: 'fallback', reason: 'timeout' });
        }, timeoutMs);
        const onMsg = (m: { ok: boolean; text?: string; error?: string }) => {
          cleanup();
          resolve(m.ok ? { text: m.text ?? '', parser: 'unified-latex' } : { text: fallbackToText(sources[i]), parser: 'fallback', reason: 'error' });
        };
        const onErr = () => {
          cleanup();
          worker = undefined;
          resolve({ text: fallbackToText(sources[i]), parser: 'fallback', reason: 'error' });
        };
        const cleanup = () => {
          clearTimeout(timer);
          w.off('message', onMsg);
          w.off('error', onErr);
        };
        w.on('message', onMsg);
        w.on('error', onErr);
        w.postMessage({ src: sources[i] });
      });
      results[i] = r;
    }
  } finally {
    if (worker) await worker.terminate();
  }
  return results;
}

/** Environments whose mandatory arguments are layout (widths, column counts, margins), never text: how many. */
const ENV_LAYOUT_ARGS: Record<string, number> = { minipage: 1, multicols: 1, 'multicols*': 1, adjustwidth: 2, 'adjustwidth*': 2, changemargin: 2, spacing: 1, wrapfigure: 2, wraptable: 2, tcolorbox: 0, mdframed: 0, framed: 0, subfigure: 1, subtable: 1, 'tabular*': 0, 'tabularx': 0, SCfigure: 0, parcolumns: 1, paracol: 1, column: 1, columns: 0 };

/**
 * LaTeX rewritten to the form both converters read right, as TeX typesets it: `\begin {x}` →
 * `\begin{x}` (TeX skips the space; the converters took `x` for a word), the layout arguments of
 * known environments removed (`\begin{multicols}{2}`, `\begin{adjustwidth}{1cm}{1cm}`,
 * `\begin{spacing}{1.5}`, options of boxes), and `\textbackslash ` before a letter made
 * `\textbackslash{}` (TeX eats the space after a control word: `\textbackslash paragraph` prints
 * "\paragraph").
 */
export function typesetForm(src: string): string {
  let s = src.replace(/\\(begin|end)[ \t]*\n?[ \t]*\{/g, '\\$1{').replace(/\\textbackslash[ \t]+(?=[a-zA-Z])/g, '\\textbackslash{}');
  s = s.replace(/\\begin\{([a-zA-Z*]+)\}/g, (m: string, env: string) => m + (env in ENV_LAYOUT_ARGS ? '\uE003' : ''));
  let out = '';
  let pos = 0;
  for (let k = s.indexOf('\uE003'); k >= 0; k = s.indexOf('\uE003', k + 1)) {
    const env = /\\begin\{([a-zA-Z*]+)\}$/.exec(s.slice(Math.max(0, k - 60), k))![1];
    let i = k + 1;
    const skip = () => {
      while (/[ \t]/.test(s[i] ?? '')) i++;
    };
    skip();
    for (;;) {
      const o = s[i] === '[' ? readOptional(s, i) : undefined;
      if (!o) break;
      i = o[1];
      skip();
    }
    let empties = '';
    for (let a = 0; a < ENV_LAYOUT_ARGS[env]; a++) {
      skip();
      const g = readGroup(s, i);
      if (!g) break;
      i = g[1];
      empties += '{}';
    }
    // empty groups stand for the arguments: a parser that knows the environment's signature takes them, not the first word
    out += s.slice(pos, k) + empties;
    pos = i;
  }
  return out + s.slice(pos);
}

/** Plain text of a short inline LaTeX fragment (titles): fallback converter, no worker. */
export function inlineText(src: string | undefined): string {
  if (!src) return '';
  return fallbackToText(src).replace(/\s+/g, ' ').trim();
}

export { readGroup, readOptional };
