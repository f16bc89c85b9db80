/**
 * LaTeX source handling before structure extraction (docs/design.md §7):
 *
 * - reading: bytes → text by content (UTF-8 with or without BOM; UTF-16 with BOM; invalid UTF-8
 *   → the encoding declared by `inputenc`, else Latin-1/windows-1252, with a warning naming the
 *   file); `\r\n`, `\n` and lone `\r` all become `\n`;
 * - one left-to-right scan per file ({@link scanSource}) that removes comments (unescaped `%` to
 *   the end of the line; `comment` environments) and makes verbatim-like bodies (`verbatim`,
 *   `Verbatim`, `lstlisting`, `minted`, `filecontents(*)`, environments declared with
 *   `\lstnewenvironment`/`\DefineVerbatimEnvironment`/`\newminted`, `\verb|…|`, `\lstinline`,
 *   `\mintinline`) opaque: each becomes a placeholder that no later scan looks into (comments,
 *   `\begin{document}`, headings, includes, macros) and whose text is put back, `%` and all,
 *   after conversion to plain text ({@link VerbatimStore});
 * - `\iffalse … \fi` blocks, root-document detection (`\documentclass` or LaTeX 2.09
 *   `\documentstyle`, with `\begin{document}`), main-file choice among several roots
 *   ({@link chooseMainFile}), include resolution confined to the paper's root, and expansion of
 *   user macros with parameters ({@link expandMacros}).
 */
import { existsSync, readdirSync, readFileSync, realpathSync, statSync } from 'node:fs';
import { basename, dirname, join, relative, resolve, sep } from 'node:path';

/** Max bytes read from one .tex file (larger files are skipped with a warning). */
export const MAX_TEX_BYTES = 8 * 2 ** 20;

// ---------------------------------------------------------------------------------------------
// Warnings

/** Codes of {@link PaperWarning}. */
export type WarningCode =
  | 'encoding'
  | 'binary-file'
  | 'file-too-large'
  | 'include-missing'
  | 'include-outside-root'
  | 'include-cycle'
  | 'include-depth'
  | 'several-roots'
  | 'no-article-root'
  | 'verbatim-unclosed'
  | 'macro-limit'
  | 'parse-fallback'
  | 'conditional-unclosed'
  | 'readme-missing-file'
  | 'readme-invalid'
  | 'coverage'
  | 'structure';

/** A structured ingestion warning: what, where (file relative to the paper root, 1-based line). */
export interface PaperWarning {
  code: WarningCode;
  message: string;
  file?: string;
  line?: number;
}

/** Receives warnings while a paper is read. */
export type Warn = (w: PaperWarning) => void;

/** One line for humans: `file:line: message [code]`. */
export function formatWarning(w: PaperWarning): string {
  const where = w.file ? `${w.file}${w.line ? `:${w.line}` : ''}: ` : '';
  return `${where}${w.message} [${w.code}]`;
}

// ---------------------------------------------------------------------------------------------
// Bytes → text

/** Encodings LaTeX's `inputenc` names, as WHATWG labels Node's TextDecoder reads. */
const INPUTENC: Record<string, string> = {
  latin1: 'iso-8859-1', // WHATWG reads it as windows-1252, a superset for printable text
  latin2: 'iso-8859-2',
  latin3: 'iso-8859-3',
  latin4: 'iso-8859-4',
  latin5: 'iso-8859-9',
  latin9: 'iso-8859-15',
  cp1250: 'windows-1250',
  cp1251: 'windows-1251',
  cp1252: 'windows-1252',
  cp1257: 'windows-1257',
  ansinew: 'windows-1252',
  applemac: 'macintosh',
  macce: 'x-mac-cyrillic',
  koi8r: 'koi8-r',
  'koi8-r': 'koi8-r',
  cp866: 'ibm866',
};

/** The `inputenc` option declared in (Latin-1-read) text, if any: `\usepackage[latin1]{inputenc}`, `\inputencoding{latin9}`. */
export function declaredInputenc(text: string): string | undefined {
  const m = /^[^%\n\r]*\\usepackage\s*\[([^\]]*)\]\s*\{inputenc\}/m.exec(text) ?? /^[^%\n\r]*\\inputencoding\s*\{([^}]*)\}/m.exec(text);
  if (!m) return undefined;
  const opts = m[1].split(',').map((s) => s.trim().toLowerCase()).filter(Boolean);
  return opts.at(-1);
}

const UTF8 = new TextDecoder('utf-8', { fatal: true });

/** windows-1252 at 0x80–0x9F (WHATWG Encoding index); Node 20's TextDecoder reads these bytes as C1 controls. */
const CP1252_HIGH = '\u20AC\u0081\u201A\u0192\u201E\u2026\u2020\u2021\u02C6\u2030\u0160\u2039\u0152\u008D\u017D\u008F\u0090\u2018\u2019\u201C\u201D\u2022\u2013\u2014\u02DC\u2122\u0161\u203A\u0153\u009D\u017E\u0178';

/** Decode with a WHATWG label; windows-1252 (also what `latin1` means there) mapped by {@link CP1252_HIGH}. */
function decodeAs(buf: Uint8Array, label: string): string {
  const d = new TextDecoder(label);
  if (d.encoding !== 'windows-1252') return d.decode(buf);
  return Buffer.from(buf.buffer, buf.byteOffset, buf.byteLength)
    .toString('latin1')
    .replace(/[\u0080-\u009F]/g, (c) => CP1252_HIGH[c.charCodeAt(0) - 0x80]);
}

/**
 * Decode a TeX file's bytes: UTF-8 (a BOM is dropped), UTF-16 with a BOM; invalid UTF-8 → the
 * encoding its own `inputenc` declares, else `fallbackEncoding` (the main file's declaration),
 * else Latin-1 (read as windows-1252), with an `encoding` warning naming the file. Line ends
 * (`\r\n`, lone `\r`) become `\n`.
 * @param file name used in the warning (relative to the paper root)
 */
export function decodeTex(buf: Uint8Array, file: string, warn: Warn = () => {}, fallbackEncoding?: string): string {
  let text: string;
  if (buf.length >= 2 && ((buf[0] === 0xff && buf[1] === 0xfe) || (buf[0] === 0xfe && buf[1] === 0xff))) {
    text = new TextDecoder(buf[0] === 0xff ? 'utf-16le' : 'utf-16be').decode(buf);
  } else {
    try {
      text = UTF8.decode(buf);
    } catch {
      const asLatin = decodeAs(buf, 'windows-1252');
      const own = declaredInputenc(asLatin);
      const declared = own && own !== 'utf8' ? own : fallbackEncoding && fallbackEncoding !== 'utf8' ? fallbackEncoding : undefined;
      const label = declared ? INPUTENC[declared] : undefined;
      if (label) {
        text = decodeAs(buf, label);
        warn({ code: 'encoding', file, message: `not valid UTF-8; decoded as ${declared} (${own === declared ? 'declared by its inputenc' : "the main file's inputenc"})` });
      } else {
        text = asLatin;
        warn({ code: 'encoding', file, message: `not valid UTF-8; decoded as Latin-1 (windows-1252)${declared ? ` (inputenc ${declared} is not supported)` : ''}` });
      }
    }
  }
  return text.replace(/^\uFEFF/, '').replace(/\r\n?/g, '\n');
}

/** True when a buffer looks binary (NUL bytes, or mostly non-text). */
export function isBinary(buf: Uint8Array): boolean {
  if (buf.length >= 2 && ((buf[0] === 0xff && buf[1] === 0xfe) || (buf[0] === 0xfe && buf[1] === 0xff))) return false; // UTF-16 BOM
  const n = Math.min(buf.length, 8192);
  let bad = 0;
  for (let i = 0; i < n; i++) {
    const b = buf[i];
    if (b === 0) return true;
    if (b < 7 || (b > 13 && b < 32 && b !== 27)) bad++;
  }
  return n > 0 && bad / n > 0.1;
}

/** Options of {@link readTextFile}. */
export interface ReadTextOptions {
  /** Name for warnings (default the base name). */
  rel?: string;
  /** inputenc option of the main file, used for files that declare none. */
  encoding?: string;
}

/** Read a TeX file as text (see {@link decodeTex}), or undefined (with a warning) when missing, too large or binary. */
export function readTextFile(path: string, warn: Warn, opts: ReadTextOptions = {}): string | undefined {
  let st;
  try {
    st = statSync(path);
  } catch {
    return undefined;
  }
  if (!st.isFile()) return undefined;
  const file = opts.rel ?? basename(path);
  if (st.size > MAX_TEX_BYTES) {
    warn({ code: 'file-too-large', file, message: `skipped: ${st.size} bytes is over the ${MAX_TEX_BYTES} byte limit` });
    return undefined;
  }
  const buf = readFileSync(path);
  if (isBinary(buf)) {
    warn({ code: 'binary-file', file, message: 'skipped: binary file' });
    return undefined;
  }
  return decodeTex(buf, file, warn, opts.encoding);
}

// ---------------------------------------------------------------------------------------------
// Comments and verbatim-like bodies: one scan

/** Environments whose bodies TeX reads verbatim (kept as text, never scanned). */
export const VERBATIM_ENVS = ['verbatim', 'verbatim*', 'Verbatim', 'Verbatim*', 'BVerbatim', 'LVerbatim', 'SaveVerbatim', 'lstlisting', 'minted', 'filecontents', 'filecontents*', 'spverbatim', 'alltt*'];
/** Environments whose bodies are dropped (never typeset), never scanned. */
export const COMMENT_ENVS = ['comment'];
/** Commands whose argument is read verbatim: `\verb|…|`, listings' `\lstinline[opts]{…}`, minted's `\mintinline[opts]{lang}{…}`, fancyvrb's `\Verb`. */
export const INLINE_VERBS = ['verb', 'lstinline', 'mintinline', 'Verb'];
/** Verbatim-like environments' begin code: `\newenvironment{code}{\verbatim}{\endverbatim}` makes `code` verbatim too. */
const VERBATIM_BEGIN = /^\\(verbatim|Verbatim|BVerbatim|LVerbatim|lstlisting|minted|spverbatim|alltt)(?![a-zA-Z@])/;
const ENV_DEFINERS = new Set(['newenvironment', 'renewenvironment', 'NewDocumentEnvironment', 'RenewDocumentEnvironment', 'DeclareDocumentEnvironment', 'ProvideDocumentEnvironment', 'NewEnvironment', 'RenewEnvironment']);
const XPARSE_CMD_DEFINERS = new Set(['NewDocumentCommand', 'RenewDocumentCommand', 'DeclareDocumentCommand', 'ProvideDocumentCommand']);

const PH_OPEN = '\uE000';
const PH_CLOSE = '\uE001';
const PH_RE = /\uE000(\d+)\uE001/g;

/** A verbatim-like body cut out of the source. */
export interface VerbatimBody {
  kind: 'env' | 'inline';
  /** Environment or command name. */
  name: string;
  /** The text TeX would print (options and language arguments removed). */
  body: string;
  /** The original source, `\begin` to `\end`. */
  raw: string;
}

/**
 * The verbatim-like bodies of one paper, each standing in the text as a placeholder
 * (U+E000 index U+E001) that no scan matches and both text converters pass through.
 */
export class VerbatimStore {
  readonly bodies: VerbatimBody[] = [];
  /** Environments read verbatim (grows with `\lstnewenvironment{x}` etc. as the scan meets them). */
  readonly verbatimEnvs = new Set(VERBATIM_ENVS);
  readonly commentEnvs = new Set(COMMENT_ENVS);
  /** Commands whose argument TeX reads verbatim (grows with `\newmintinline`, an xparse `v` argument, …). */
  readonly inlineVerbs = new Set(INLINE_VERBS);

  add(b: VerbatimBody): string {
    this.bodies.push(b);
    return `${PH_OPEN}${this.bodies.length - 1}${PH_CLOSE}`;
  }

  /** Placeholders → printed text (environments on lines of their own). */
  restore(text: string): string {
    return text.replace(PH_RE, (m, k: string) => {
      const b = this.bodies[Number(k)];
      if (!b) return m;
      return b.kind === 'env' ? `\n${b.body.replace(/^\n+|\n+$/g, '')}\n` : b.body;
    });
  }

  /** Placeholders → the original source. */
  restoreRaw(text: string): string {
    return text.replace(PH_RE, (m, k: string) => this.bodies[Number(k)]?.raw ?? m);
  }
}

/** Result of {@link scanSource}. */
export interface ScannedSource {
  /** Comment-free text with verbatim-like bodies as placeholders. */
  text: string;
  /** Source line (1-based) where each output line starts. */
  lineStarts: number[];
}

/** 1-based source line of offset `pos` of a {@link ScannedSource}'s text. */
export function sourceLine(s: ScannedSource, pos: number): number {
  let n = 0;
  for (let i = s.text.indexOf('\n'); i >= 0 && i < pos; i = s.text.indexOf('\n', i + 1)) n++;
  return s.lineStarts[Math.min(n, s.lineStarts.length - 1)] ?? 1;
}

const DEFINERS: Record<string, 'verbatim' | 'comment' | 'minted' | 'mintinline'> = {
  lstnewenvironment: 'verbatim',
  DefineVerbatimEnvironment: 'verbatim',
  CustomVerbatimEnvironment: 'verbatim',
  RecustomVerbatimEnvironment: 'verbatim',
  newtcblisting: 'verbatim',
  DeclareTCBListing: 'verbatim',
  NewTCBListing: 'verbatim',
  newminted: 'minted',
  newmintinline: 'mintinline',
  excludecomment: 'comment',
};

/**
 * An environment or xparse command defined at `after` (just past the defining command `w`) that
 * changes how the scan must read later text: an environment whose begin code is `\verbatim` (or
 * `\Verbatim`, `\lstlisting`, …) is verbatim-like; one whose begin code is `\comment`, or an
 * xparse environment that grabs its body (`b`) and never uses it, is comment-like; an xparse
 * command whose only mandatory argument is `v` reads that argument verbatim.
 */
function noteDefinition(src: string, after: number, w: string, store: VerbatimStore): void {
  const env = ENV_DEFINERS.has(w);
  let i = skipWs(src, after);
  if (src[i] === '*') i = skipWs(src, i + 1);
  let name: string | undefined;
  const g = readGroup(src, i);
  if (g) {
    name = g[0].trim().replace(/^\\/, '');
    i = g[1];
  } else if (!env) {
    const b = /^\\([a-zA-Z@]+)/.exec(src.slice(i, i + 80));
    if (b) {
      name = b[1];
      i += b[0].length;
    }
  }
  if (!name || !/^[a-zA-Z@*]+$/.test(name)) return;
  const xparse = /Document/.test(w);
  let spec = '';
  if (xparse) {
    const sg = readGroup(src, skipWs(src, i));
    if (!sg) return;
    spec = sg[0];
    i = sg[1];
  } else {
    for (let k = 0; k < 2; k++) {
      const o = readOptional(src, skipWs(src, i));
      if (o) i = o[1];
    }
  }
  const begin = readGroup(src, skipWs(src, i));
  if (!begin) return;
  if (env) {
    const code = begin[0].trim();
    if (VERBATIM_BEGIN.test(code)) store.verbatimEnvs.add(name);
    else if (/^\\comment(?![a-zA-Z@])/.test(code)) store.commentEnvs.add(name);
    else if (xparse) {
      const args = parseArgSpec(spec);
      const bodyArg = args ? args.findIndex((a) => a.kind === 'b') : -1;
      if (bodyArg >= 0) {
        const end = readGroup(src, skipWs(src, begin[1]));
        const used = new RegExp(`#${bodyArg + 1}(?![0-9])`);
        if (!used.test(begin[0]) && !(end && used.test(end[0]))) store.commentEnvs.add(name);
      }
    }
    return;
  }
  const args = parseArgSpec(spec);
  if (args && args.some((a) => a.kind === 'v') && args.filter((a) => a.kind !== 'o').every((a) => a.kind === 'v')) store.inlineVerbs.add(name);
}

/**
 * One left-to-right pass over a file's text (line ends already `\n`): comments removed (a line
 * holding only a comment goes with its line end, as in TeX), `comment` environments removed,
 * verbatim-like bodies replaced by placeholders in `store`. Escapes (`\%`, `\\`) are honoured;
 * a `%` inside a verbatim body is text.
 */
export function scanSource(src: string, store: VerbatimStore, warn: Warn = () => {}, file?: string): ScannedSource {
  const parts: string[] = [];
  let curLine = ''; // output text since the last '\n' (to detect whole-line comments)
  const lineStarts = [1];
  let line = 1;
  const emit = (s: string) => {
    if (!s) return;
    parts.push(s);
    const k = s.lastIndexOf('\n');
    if (k >= 0) curLine = s.slice(k + 1);
    else curLine += s;
  };
  const countLines = (a: number, b: number) => {
    let n = 0;
    for (let k = src.indexOf('\n', a); k >= 0 && k < b; k = src.indexOf('\n', k + 1)) n++;
    return n;
  };
  const special = /[%\\\n]/g;
  let i = 0;
  const n = src.length;
  while (i < n) {
    special.lastIndex = i;
    const m = special.exec(src);
    if (!m) {
      emit(src.slice(i));
      break;
    }
    const j = m.index;
    emit(src.slice(i, j));
    const c = src[j];
    if (c === '\n') {
      emit('\n');
      line++;
      lineStarts.push(line);
      i = j + 1;
      continue;
    }
    if (c === '%') {
      let e = src.indexOf('\n', j);
      if (e < 0) e = n;
      if (curLine.trim() === '' && e < n) {
        // whole-line comment: drop the line and its line end
        let k = curLine.length;
        while (k > 0) {
          const last = parts.pop()!;
          if (last.length > k) parts.push(last.slice(0, last.length - k));
          k -= Math.min(k, last.length);
        }
        curLine = '';
        i = e + 1;
        line++;
        lineStarts[lineStarts.length - 1] = line;
        continue;
      }
      i = e;
      continue;
    }
    // backslash
    const next = src[j + 1];
    if (next === undefined) {
      emit('\\');
      i = j + 1;
      continue;
    }
    if (!/[a-zA-Z@]/.test(next)) {
      if (next === '\n') {
        emit('\\');
        i = j + 1;
      } else {
        emit(src.slice(j, j + 2));
        i = j + 2;
      }
      continue;
    }
    const w = /^[a-zA-Z@]+/.exec(src.slice(j + 1, j + 64))![0];
    const after = j + 1 + w.length;
    if (w === 'begin') {
      const em = /^\s*\{([^{}\n]{1,40})\}/.exec(src.slice(after, after + 64));
      const env = em?.[1].trim();
      if (env && (store.verbatimEnvs.has(env) || store.commentEnvs.has(env))) {
        const bodyStart = after + em![0].length;
        const endTok = `\\end{${env}}`;
        let end = src.indexOf(endTok, bodyStart);
        if (end < 0) {
          warn({ code: 'verbatim-unclosed', file, line, message: `\\begin{${env}} without \\end{${env}}; read to the end of the file` });
          end = n;
        }
        const stop = Math.min(n, end + endTok.length);
        const raw = src.slice(j, stop);
        line += countLines(j, stop);
        if (store.verbatimEnvs.has(env)) {
          // options and language/file-name arguments on the \begin line: [opts]{lang}
          let body = src.slice(bodyStart, Math.min(end, n)).replace(/^[ \t]*(\[[^\]\n]*\])?[ \t]*/, '');
          if (/^(minted|filecontents\*?)$/.test(env)) body = body.replace(/^\{[^}\n]*\}/, '');
          body = body.replace(/^[ \t]*\n/, '');
          emit(store.add({ kind: 'env', name: env, body, raw }));
        }
        i = stop;
        continue;
      }
      emit(src.slice(j, after));
      i = after;
      continue;
    }
    if (store.inlineVerbs.has(w)) {
      let k = after;
      if (src[k] === '*') k++;
      if (w !== 'verb') {
        // options may hold brackets in braces: \lstinline[language={[LaTeX]TeX}]{…}
        let q = k;
        while (src[q] === ' ' || src[q] === '\t') q++;
        const o = src[q] === '[' ? readOptional(src.slice(0, q + 400), q) : undefined;
        if (o && !src.slice(q, o[1]).includes('\n')) k = o[1];
      }
      if (w === 'mintinline') {
        const l = /^\s*\{[^}\n]*\}/.exec(src.slice(k, k + 100));
        if (l) k += l[0].length;
      }
      const d = src[k];
      let close = -1;
      if (d && !/[a-zA-Z\s*]/.test(d)) {
        if (d === '{' && w !== 'verb') {
          let depth = 0;
          for (let q = k; q < n && src[q] !== '\n'; q++) {
            if (src[q] === '{') depth++;
            else if (src[q] === '}' && --depth === 0) {
              close = q;
              break;
            }
          }
        } else {
          const q = src.indexOf(d, k + 1);
          const nl = src.indexOf('\n', k + 1);
          if (q >= 0 && (nl < 0 || q < nl)) close = q;
        }
      }
      if (close >= 0) {
        const raw = src.slice(j, close + 1);
        emit(store.add({ kind: 'inline', name: w, body: src.slice(k + 1, close), raw }));
        i = close + 1;
        continue;
      }
      emit(src.slice(j, after));
      i = after;
      continue;
    }
    if ((w === 'url' || w === 'href') && src[after] === '{') {
      // URLs are read verbatim by url/hyperref: a % inside is a character, not a comment
      const close = src.indexOf('}', after);
      const nl = src.indexOf('\n', after);
      if (close > 0 && (nl < 0 || close < nl) && !src.slice(after + 1, close).includes('{')) {
        emit(`\\${w}{${src.slice(after + 1, close).replace(/(?<!\\)%/g, '\\%')}}`);
        i = close + 1;
        continue;
      }
    }
    if (ENV_DEFINERS.has(w) || XPARSE_CMD_DEFINERS.has(w)) noteDefinition(src, after, w, store);
    const def = DEFINERS[w];
    if (def) {
      const g = /^\s*(\[[^\]\n]*\])?\s*\{([^{}\n]{1,40})\}/.exec(src.slice(after, after + 200));
      if (g) {
        const name = g[2].trim();
        if (def === 'comment') store.commentEnvs.add(name);
        else if (def === 'mintinline') {
          // \newmintinline{python}{opts} → \pythoninline; \newmintinline[py]{python}{opts} → \py
          store.inlineVerbs.add(g[1] ? g[1].slice(1, -1).trim() : `${name}inline`);
        } else if (def === 'minted') {
          store.verbatimEnvs.add(g[1] ? g[1].slice(1, -1).trim() : `${name}code`);
        } else store.verbatimEnvs.add(name);
      }
    }
    emit(src.slice(j, after));
    i = after;
  }
  return { text: parts.join(''), lineStarts };
}

/**
 * Remove TeX comments: from each unescaped `%` to the end of the line, including the line end
 * when the line held only a comment (as TeX does); `comment` environments are removed too.
 * Verbatim-like bodies are kept as written, `%` and all.
 */
export function stripComments(src: string): string {
  const store = new VerbatimStore();
  return store.restoreRaw(scanSource(src.replace(/\r\n?/g, '\n'), store).text);
}

/** Read `{…}` with balanced braces starting at `i` (which must be `{`); returns [content, indexAfter] or undefined. */
export function readGroup(s: string, i: number): [string, number] | undefined {
  if (s[i] !== '{') return undefined;
  let depth = 0;
  for (let j = i; j < s.length; j++) {
    const c = s[j];
    if (c === '\\') {
      j++;
      continue;
    }
    if (c === '{') depth++;
    else if (c === '}') {
      depth--;
      if (depth === 0) return [s.slice(i + 1, j), j + 1];
    }
  }
  return undefined;
}

/** Read `[…]` (no nesting of brackets, braces balanced). */
export function readOptional(s: string, i: number): [string, number] | undefined {
  if (s[i] !== '[') return undefined;
  let depth = 0;
  for (let j = i + 1; j < s.length; j++) {
    const c = s[j];
    if (c === '\\') {
      j++;
      continue;
    }
    if (c === '{') depth++;
    else if (c === '}') depth--;
    else if (c === ']' && depth === 0) return [s.slice(i + 1, j), j + 1];
  }
  return undefined;
}

function skipWs(s: string, i: number): number {
  while (i < s.length && /[ \t\n\r]/.test(s[i])) i++;
  return i;
}

// ---------------------------------------------------------------------------------------------
// Roots

const CLASS_RE = /\\document(class|style)\s*(?:\[[^\]]*\])?\s*\{\s*([^}\s]*)\s*\}/;

/**
 * True when the (scanned: comment-free, verbatim-opaque) text is a LaTeX root document:
 * `\documentclass` or LaTeX 2.09's `\documentstyle`, and `\begin{document}`.
 */
export function isRootDocument(text: string): boolean {
  return CLASS_RE.test(text) && /\\begin\s*\{document\}/.test(text);
}

/** The class of a root document (`article`, `beamer`, …), or undefined. */
export function documentClass(text: string): string | undefined {
  return CLASS_RE.exec(text)?.[2];
}

/** All `.tex` files under root (relative paths), at most `limit`, skipping symlinked dirs. */
export function listTexFiles(root: string, limit = 2000): string[] {
  return listFiles(root, (name) => /\.tex$/i.test(name), limit);
}

/** Files under root whose name passes `keep` (relative paths, sorted walk, symlinked dirs skipped). */
export function listFiles(root: string, keep: (name: string) => boolean, limit = 2000): string[] {
  const out: string[] = [];
  const walk = (dir: string, depth: number) => {
    if (depth > 12 || out.length >= limit) return;
    let entries;
    try {
      entries = readdirSync(dir, { withFileTypes: true });
    } catch {
      return;
    }
    for (const e of entries.sort((a, b) => a.name.localeCompare(b.name))) {
      const p = join(dir, e.name);
      if (e.isDirectory()) walk(p, depth + 1);
      else if (e.isFile() && keep(e.name)) out.push(relative(root, p));
    }
  };
  walk(root, 0);
  return out;
}

// ---------------------------------------------------------------------------------------------
// Includes

const INCLUDE_RE = /\\(input|include|subfile|import|subimport|subinputfrom|inputfrom|includefrom|subincludefrom)(?![a-zA-Z@])\*?/g;
const INCLUDE_CMDS = new Set(['input', 'include', 'subfile', 'import', 'subimport', 'subinputfrom', 'inputfrom', 'includefrom', 'subincludefrom']);
const HAS_INCLUDE = /\\(input|include|subfile|import|subimport|subinputfrom|inputfrom|includefrom|subincludefrom)(?![a-zA-Z@])/;

/** Include targets (as written) in scanned text. */
export function includeTargets(text: string): string[] {
  const out: string[] = [];
  for (const inc of scanIncludes(text)) out.push(inc.dir ? `${inc.dir}/${inc.file}` : inc.file);
  return out;
}

interface IncludeRef {
  start: number;
  end: number;
  cmd: string;
  dir?: string;
  file: string;
}

/** The include command at `start` (its name `cmd` ends at `after`), or undefined when its argument is not there. */
function includeAt(text: string, start: number, cmd: string, after: number): IncludeRef | undefined {
  let i = after;
  if (text[i] === '*') i++;
  i = skipWs(text, i);
  if (/import|from/.test(cmd)) {
    const a = readGroup(text, i);
    if (!a) return undefined;
    const b = readGroup(text, skipWs(text, a[1]));
    if (!b) return undefined;
    return { start, end: b[1], cmd, dir: a[0].trim(), file: b[0].trim() };
  }
  const g = readGroup(text, i);
  if (g) return { start, end: g[1], cmd, file: g[0].trim() };
  if (cmd === 'input') {
    // TeX primitive syntax: \input file.tex
    const t = /^[^\s{}\\%[\uE000]+/.exec(text.slice(i, i + 300));
    if (t) return { start, end: i + t[0].length, cmd, file: t[0] };
  }
  return undefined;
}

function scanIncludes(text: string): IncludeRef[] {
  const refs: IncludeRef[] = [];
  const re = new RegExp(INCLUDE_RE.source, 'g');
  let m: RegExpExecArray | null;
  while ((m = re.exec(text))) {
    const ref = includeAt(text, m.index, m[1], m.index + 1 + m[1].length);
    if (!ref) continue;
    refs.push(ref);
    re.lastIndex = ref.end;
  }
  return refs;
}

function within(root: string, p: string): boolean {
  return p === root || p.startsWith(root.endsWith(sep) ? root : root + sep);
}

// ---------------------------------------------------------------------------------------------
// Conditionals (TeX's \if… \else \fi, \newif switches, etoolbox toggles / ifthen booleans)

/**
 * TeX conditionals whose value depends on state this reader does not have (`\ifx`, `\ifdim`,
 * `\ifdefined`, …, and `\if`/`\ifnum`/`\ifodd` on anything but literal characters / integers):
 * they nest like every conditional; their tokens stay in the text and both branches are kept.
 */
const OPAQUE_IFS = new Set([
  'if', 'ifcat', 'ifnum', 'ifdim', 'ifodd', 'ifx', 'ifcase', 'ifeof', 'ifvoid', 'ifhbox', 'ifvbox', 'ifmmode', 'ifvmode', 'ifhmode', 'ifinner', 'ifdefined', 'ifcsname',
  'iffontchar', 'ifincsname', 'ifabsnum', 'ifabsdim', 'ifpdfprimitive', 'ifpdfabsnum', 'ifpdfabsdim', 'ifprimitive',
]);
/** Engine switches (ifpdf / iftex / ifxetex / ifluatex packages) as under pdfLaTeX, arXiv's default compiler. */
const ENGINE_IFS: Record<string, boolean> = { ifpdf: true, ifpdftex: true, ifPDFTeX: true, ifxetex: false, ifXeTeX: false, ifluatex: false, ifLuaTeX: false, ifvtex: false, ifVTeX: false };
/** Switches that class files declare with \newif (IEEEtran's \ifCLASSOPTION…, \ifCLASSINFO…): conditionals of unknown value. */
const CLASS_SWITCH = /^if(CLASSOPTION|CLASSINFO)[a-zA-Z@]*$/;

interface CondFrame {
  /** undefined: a conditional of unknown value (both branches kept). */
  value: boolean | undefined;
  inElse: boolean;
  name: string;
  file?: string;
  line?: number;
}

/** TeX state shared by all files of one document while it is read in order. */
class TexState {
  readonly stack: CondFrame[] = [];
  /** `\newif\ifX` switches: X → value. */
  readonly switches = new Map<string, boolean>();
  /** Switches declared in the paper's .sty / .cls files: conditionals of unknown value. */
  readonly opaque = new Set<string>();
  /** etoolbox toggles and ifthen booleans. */
  readonly toggles = new Map<string, boolean>();
  /** User macros whose body holds an include command, followed where they are used. */
  readonly incMacros = new Map<string, MacroDef>();
  /** LaTeX's `\input@path` (`\def\input@path{{sections/}{figures/}}`): directories tried after the current one. */
  inputPath: string[] = [];
  /** `\includeonly{a,b}`: the only `\include`d files typeset (undefined: all). */
  includeOnly?: Set<string>;
  /** Prose-like words in branches that TeX skips (false conditionals): excluded, not lost. */
  skippedWords = 0;
  private inactive = 0;

  get active(): boolean {
    return this.inactive === 0;
  }

  /** Is `\name` a TeX conditional (`name` begins with `if`)? Macros such as `\ifthenelse`, `\iftoggle`, `\ifdefempty` are not. */
  isConditional(name: string): boolean {
    if (name === 'iftrue' || name === 'iffalse' || OPAQUE_IFS.has(name) || name in ENGINE_IFS || CLASS_SWITCH.test(name)) return true;
    const base = name.slice(2);
    return this.switches.has(base) || this.opaque.has(base);
  }

  push(f: CondFrame): void {
    this.stack.push(f);
    if (!frameActive(f)) this.inactive++;
  }

  pop(): CondFrame | undefined {
    const f = this.stack.pop();
    if (f && !frameActive(f)) this.inactive--;
    return f;
  }

  /** `\else` of the innermost conditional. */
  flip(f: CondFrame): void {
    const before = frameActive(f);
    f.inElse = !f.inElse;
    const after = frameActive(f);
    if (before && !after) this.inactive++;
    else if (!before && after) this.inactive--;
  }
}

const frameActive = (f: CondFrame) => f.value === undefined || f.value !== f.inElse;

/** One file (or macro body from it) being read by {@link runTex}. */
interface TexRun {
  /** File name relative to the paper root, for warnings. */
  file: string;
  /** 1-based source line of an offset in `text`. */
  lineOf: (pos: number) => number;
  /** Splice an include (returns the included text, already read). */
  include?: (ref: IncludeRef, line: number) => string;
  /** `\endinput` ends this run (file level only). */
  fileLevel: boolean;
  /** Nesting of include macros expanded (limit {@link MAX_MACRO_DEPTH}). */
  macroDepth: number;
  warn: Warn;
  /** Counts include-macro expansions (bounded). */
  onExpansion?: () => void;
}

const MAX_MACRO_DEPTH = 20;
const CTRL_RE = /\\(?:([a-zA-Z@]+)|[^a-zA-Z@])/g;
const DEF_NAMES = new Set([
  'newcommand', 'renewcommand', 'providecommand', 'DeclareRobustCommand', 'def', 'gdef', 'edef', 'xdef', 'newenvironment', 'renewenvironment',
  'NewDocumentCommand', 'RenewDocumentCommand', 'DeclareDocumentCommand', 'ProvideDocumentCommand', 'NewExpandableDocumentCommand', 'RenewExpandableDocumentCommand', 'DeclareExpandableDocumentCommand', 'ProvideExpandableDocumentCommand',
  'NewDocumentEnvironment', 'RenewDocumentEnvironment', 'DeclareDocumentEnvironment', 'ProvideDocumentEnvironment',
]);

/**
 * Read scanned TeX text in order as TeX would for what it typesets: conditionals evaluated
 * (`\iftrue`/`\iffalse`, `\if` on two literal characters such as `\if 0 …` or `\if00`, `\ifnum`
 * / `\ifodd` on literal integers, `\newif` switches set by `\Xtrue` / `\Xfalse` / `\let`, the
 * engine switches as under pdfLaTeX, `\iftoggle` / `\ifbool` / `\ifthenelse{\boolean{x}}` on known
 * toggles), `\else`, nesting (also across files, as in TeX); other conditionals (`\ifx`, `\ifdim`,
 * …) nest but keep both branches; macros whose names merely begin with `if` (etoolbox, ifthen,
 * xifthen) are not conditionals. `\endinput` ends the file after its line. Definitions are passed
 * through unread (a conditional or include inside a body is not acted on where it is defined);
 * user macros whose body holds an include are followed where used; includes are handed to
 * `run.include`. In skipped text only conditionals are counted, as in TeX.
 */
function runTex(text: string, st: TexState, run: TexRun): string {
  const out: string[] = [];
  let pos = 0;
  let stopAt = text.length;
  const flush = (to: number) => {
    if (st.active && to > pos) out.push(text.slice(pos, to));
    else if (to > pos) st.skippedWords += countWords(text.slice(pos, to));
    pos = to;
  };
  const re = new RegExp(CTRL_RE.source, 'g');
  let m: RegExpExecArray | null;
  while ((m = re.exec(text)) && m.index < stopAt) {
    const name = m[1];
    if (!name) continue;
    const at = m.index;
    const end = at + m[0].length;
    const active = st.active;
    if (name === 'fi') {
      flush(at);
      const f = st.pop();
      if ((!f || f.value === undefined) && st.active) out.push('\\fi');
      pos = end;
      continue;
    }
    if (name === 'else') {
      flush(at);
      const f = st.stack.at(-1);
      if (!f || f.value === undefined) {
        if (st.active) out.push('\\else');
      } else st.flip(f);
      pos = end;
      continue;
    }
    if (name === 'newif') {
      const d = /^\s*\\if([a-zA-Z@]+)/.exec(text.slice(end, end + 120));
      if (d) {
        flush(at);
        if (active || !st.switches.has(d[1])) st.switches.set(d[1], false);
        pos = end + d[0].length;
        re.lastIndex = pos;
      }
      continue;
    }
    if (name === 'let') {
      const d = /^\s*\\if([a-zA-Z@]+)\s*=?\s*\\if(true|false)(?![a-zA-Z@])/.exec(text.slice(end, end + 160));
      if (d) {
        flush(at);
        if (active || !st.switches.has(d[1])) st.switches.set(d[1], active ? d[2] === 'true' : st.switches.get(d[1]) ?? false);
        pos = end + d[0].length;
        re.lastIndex = pos;
      }
      continue;
    }
    if (name.startsWith('if') && st.isConditional(name)) {
      flush(at);
      const frame: CondFrame = { value: undefined, inElse: false, name, file: run.file, line: run.lineOf(at) };
      pos = end;
      if (!active) {
        // skipped text: only nesting counts
      } else if (name === 'iftrue' || name === 'iffalse') frame.value = name === 'iftrue';
      else if (name in ENGINE_IFS) frame.value = ENGINE_IFS[name];
      else if (st.switches.has(name.slice(2))) frame.value = st.switches.get(name.slice(2));
      else {
        const lit = literalCondition(name, text, end);
        if (lit) {
          frame.value = lit.value;
          pos = lit.end;
        } else out.push(text.slice(at, end));
      }
      re.lastIndex = pos;
      st.push(frame);
      continue;
    }
    if (!active) continue;
    // ---- typeset text only below
    if ((name.endsWith('true') || name.endsWith('false')) && st.switches.has(name.replace(/(true|false)$/, ''))) {
      flush(at);
      st.switches.set(name.replace(/(true|false)$/, ''), name.endsWith('true'));
      pos = end;
      continue;
    }
    const tog = toggleAt(name, text, end, st);
    if (tog) {
      flush(at);
      if (tog.body !== undefined) out.push(nested(tog.body, at));
      pos = tog.end;
      re.lastIndex = pos;
      continue;
    }
    if (name === 'endinput' && run.fileLevel) {
      flush(at);
      pos = end;
      const nl = text.indexOf('\n', end);
      stopAt = nl < 0 ? text.length : nl;
      continue;
    }
    if (name === 'includeonly') {
      const g = readGroup(text, skipWs(text, end));
      if (g) {
        flush(at);
        st.includeOnly = new Set(g[0].split(',').map((f) => f.trim().replace(/\.tex$/i, '')).filter(Boolean));
        pos = g[1];
        re.lastIndex = pos;
      }
      continue;
    }
    if (/^(g@addto@macro|appto|gappto|preto|gpreto)$/.test(name)) {
      const d = /^\s*\\input@path\s*(?=\{)/.exec(text.slice(end, end + 40));
      const g = d && readGroup(text, end + d[0].length);
      if (g) {
        flush(at);
        const dirs = pathGroups(g[0]);
        st.inputPath = name.includes('pre') ? [...dirs, ...st.inputPath] : [...st.inputPath, ...dirs];
        pos = g[1];
        re.lastIndex = pos;
      }
      continue;
    }
    if (DEF_NAMES.has(name)) {
      const d = readDefinition(text, at, m[0]);
      if (d?.name === 'input@path') st.inputPath = pathGroups(d.def.body);
      if (d) {
        if (d.name && !d.environment) {
          if (HAS_INCLUDE.test(d.def.body) && d.expandable) st.incMacros.set(d.name, d.def);
          else if (!/providecommand/.test(name)) st.incMacros.delete(d.name);
        }
        flush(d.end);
        re.lastIndex = d.end;
      }
      continue;
    }
    if (INCLUDE_CMDS.has(name) && run.include) {
      const ref = includeAt(text, at, name, end);
      if (ref) {
        flush(at);
        if (/[\\#]/.test(ref.file) || /[\\#]/.test(ref.dir ?? '')) {
          run.warn({ code: 'include-missing', file: run.file, line: run.lineOf(at), message: `include target ${JSON.stringify(ref.file)} is built by a macro this reader cannot expand; skipped` });
        } else out.push(run.include(ref, run.lineOf(at)));
        pos = ref.end;
        re.lastIndex = pos;
      }
      continue;
    }
    const def = st.incMacros.get(name);
    if (def) {
      const use = readUse(text, end, def);
      if (!use) continue;
      flush(at);
      if (run.macroDepth >= MAX_MACRO_DEPTH) {
        run.warn({ code: 'macro-limit', file: run.file, line: run.lineOf(at), message: `\\${name} still expanding after ${MAX_MACRO_DEPTH} nested uses (recursive macro?); stopped there` });
      } else {
        run.onExpansion?.();
        out.push(nested(substitute(def.body, use.args, def), at));
      }
      pos = use.end;
      re.lastIndex = pos;
    }
  }
  flush(stopAt);
  return out.join('');

  function nested(body: string, at: number): string {
    const line = run.lineOf(at);
    return runTex(body, st, { ...run, lineOf: () => line, fileLevel: false, macroDepth: run.macroDepth + 1 });
  }
}

/** Directories of an `\input@path` value: `{sections/}{figures/}` → ['sections/', 'figures/']. */
function pathGroups(body: string): string[] {
  const out: string[] = [];
  for (let i = skipWs(body, 0); i < body.length; i = skipWs(body, i)) {
    const g = readGroup(body, i);
    if (!g) break;
    if (g[0].trim()) out.push(g[0].trim());
    i = g[1];
  }
  return out;
}

/** Words (runs of ≥ 3 letters) of LaTeX text, control words left out: a measure of prose skipped on purpose. */
export function countWords(tex: string): number {
  return tex.replace(/\\[a-zA-Z@]+\*?/g, ' ').match(/\p{L}{3,}/gu)?.length ?? 0;
}

/** `\if` on two literal characters, `\ifnum` / `\ifodd` on literal integers: the value and where the test ends. */
function literalCondition(name: string, text: string, end: number): { value: boolean; end: number } | undefined {
  if (name === 'if') {
    // spaces after a control word are skipped; then two tokens are compared by character code
    let j = end;
    while (j < text.length && /[ \t\n]/.test(text[j])) j++;
    const a = text[j];
    const plain = (c: string | undefined) => c !== undefined && !/[\\{}$%&#^_~\uE000-\uE003]/.test(c);
    if (!plain(a) || /\s/.test(a)) return undefined;
    const b = text[j + 1];
    if (b === undefined) return undefined;
    if (/[ \t\n]/.test(b)) {
      let k = j + 1;
      while (k < text.length && /[ \t]/.test(text[k])) k++;
      if (text[k] === '\n') k++;
      return { value: false, end: k };
    }
    if (!plain(b)) return undefined;
    return { value: a === b, end: j + 2 };
  }
  if (name === 'ifnum') {
    const n = /^\s*(-?\d+)\s*([<=>])\s*(-?\d+)(?![\d.])/.exec(text.slice(end, end + 80));
    if (!n) return undefined;
    const x = Number(n[1]);
    const y = Number(n[3]);
    return { value: n[2] === '<' ? x < y : n[2] === '>' ? x > y : x === y, end: end + n[0].length };
  }
  if (name === 'ifodd') {
    const n = /^\s*(-?\d+)(?![\d.])/.exec(text.slice(end, end + 40));
    return n ? { value: Math.abs(Number(n[1])) % 2 === 1, end: end + n[0].length } : undefined;
  }
  return undefined;
}

/**
 * etoolbox toggles / booleans and ifthen booleans: declarations and settings (removed from the
 * text, state updated), and `\iftoggle{x}{…}{…}`, `\nottoggle`, `\ifbool`, `\notbool`,
 * `\ifthenelse{\boolean{x}}{…}{…}` on a known name (replaced by the branch TeX takes; `body`).
 * Anything else, or an unknown name: undefined (the macro stays as text, both branches with it).
 */
function toggleAt(name: string, text: string, end: number, st: TexState): { end: number; body?: string } | undefined {
  const arg = (i: number) => readGroup(text, skipWs(text, i));
  switch (name) {
    case 'newtoggle':
    case 'providetoggle':
    case 'newboolean':
    case 'provideboolean':
    case 'newbool':
    case 'providebool': {
      const a = arg(end);
      if (!a) return undefined;
      if (!st.toggles.has(a[0].trim()) || name.startsWith('new')) st.toggles.set(a[0].trim(), false);
      return { end: a[1] };
    }
    case 'toggletrue':
    case 'togglefalse':
    case 'booltrue':
    case 'boolfalse': {
      const a = arg(end);
      if (!a) return undefined;
      st.toggles.set(a[0].trim(), name.endsWith('true'));
      return { end: a[1] };
    }
    case 'settoggle':
    case 'setbool':
    case 'setboolean': {
      const a = arg(end);
      const v = a && arg(a[1]);
      if (!a || !v || !/^(true|false)$/.test(v[0].trim())) return undefined;
      st.toggles.set(a[0].trim(), v[0].trim() === 'true');
      return { end: v[1] };
    }
    case 'iftoggle':
    case 'nottoggle':
    case 'ifbool':
    case 'notbool':
    case 'ifthenelse': {
      const a = arg(end);
      if (!a) return undefined;
      let key = a[0].trim();
      if (name === 'ifthenelse') {
        const b = /^\\boolean\s*\{([^{}]+)\}$/.exec(key);
        if (!b) return undefined;
        key = b[1].trim();
      }
      const v = st.toggles.get(key);
      if (v === undefined) return undefined;
      const t = arg(a[1]);
      const f = t && arg(t[1]);
      if (!t || !f) return undefined;
      const yes = name.startsWith('not') ? !v : v;
      return { end: f[1], body: yes ? t[0] : f[0] };
    }
    default:
      return undefined;
  }
}

/** Arguments of a use of a user macro at `i` (just after its name), or undefined when they are not all there. */
function readUse(text: string, i: number, def: MacroDef): { args: string[]; end: number } | undefined {
  return readMacroArgs(text, i, def);
}

const substitute = (body: string, args: string[], def?: MacroDef) => {
  const out = body.replace(/##|#([1-9])/g, (s, d?: string) => (d ? args[Number(d) - 1] ?? '' : '#'));
  return def?.spec ? resolveXparse(out) : out;
};

/**
 * Remove what TeX would skip in conditionals (see {@link runTex}: `\iffalse`, `\if0 `, `\newif`
 * switches, nesting, `\else`) from text without includes; an unclosed false branch drops the rest.
 */
export function stripIffalse(src: string, warn: Warn = () => {}, file?: string): string {
  const st = new TexState();
  const out = runTex(src, st, { file: file ?? '', lineOf: () => 0, fileLevel: true, macroDepth: 0, warn });
  warnUnclosed(st, warn);
  return out;
}

function warnUnclosed(st: TexState, warn: Warn): void {
  for (const f of st.stack) {
    if (f.value === undefined) continue;
    const dropped = !frameActive(f);
    warn({ code: 'conditional-unclosed', file: f.file || undefined, line: f.line || undefined, message: `\\${f.name} is never closed by \\fi; ${dropped ? 'everything after it was skipped, as TeX would' : 'read to the end'}` });
  }
}

// ---------------------------------------------------------------------------------------------
// Flattening

/** Bounds on the total expansion of one paper's sources (issue 38: an \input fan-out). */
export interface ExpansionLimits {
  /** File inclusions in one document (default 5000). */
  maxInclusions?: number;
  /** Characters read from all included files together (default 32 Mi). */
  maxChars?: number;
  /** Include-macro expansions (default 20000). */
  maxExpansions?: number;
}

export const DEFAULT_EXPANSION_LIMITS: Required<ExpansionLimits> = { maxInclusions: 5000, maxChars: 32 * 2 ** 20, maxExpansions: 20000 };

/** A paper's sources expand past {@link ExpansionLimits}: the paper fails (nothing partial is used). */
export class ExpansionLimitError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'ExpansionLimitError';
  }
}

/** Result of {@link flattenDocument}. */
export interface FlattenResult {
  /** Comment-free source with conditionals resolved and all resolvable includes spliced in; verbatim-like bodies are placeholders of `verbatim`. */
  text: string;
  /** Files read (relative to root), main file first (a file included twice is listed once). */
  files: string[];
  /** Include targets that were not found (as written). */
  missing: string[];
  /** The verbatim-like bodies cut out of `text`. */
  verbatim: VerbatimStore;
  /** File inclusions made and characters read (see {@link ExpansionLimits}). */
  inclusions: number;
  chars: number;
  /** Text TeX does not typeset on purpose: files left out by `\includeonly`, words in false branches. */
  excluded: ExcludedText[];
}

/** Source text left out on purpose (counted, not lost). */
export interface ExcludedText {
  /** The file (as written in the include) or `conditionals`. */
  what: string;
  reason: string;
  /** Words (≥ 3 letters) in it. */
  words: number;
}

/** Options of {@link flattenDocument}. */
export interface FlattenOptions {
  limits?: ExpansionLimits;
  /** The paper's id / archive name (`HAFiscal`): a root of that name is the paper's own (see {@link chooseMainFile}). */
  paperId?: string;
}

/** Offsets of line starts, for line numbers by binary search. */
function lineIndex(s: ScannedSource, base = 0): (pos: number) => number {
  const nl: number[] = [];
  for (let i = s.text.indexOf('\n'); i >= 0; i = s.text.indexOf('\n', i + 1)) nl.push(i);
  return (pos: number) => {
    const p = pos + base;
    let lo = 0;
    let hi = nl.length;
    while (lo < hi) {
      const mid = (lo + hi) >> 1;
      if (nl[mid] < p) lo = mid + 1;
      else hi = mid;
    }
    return s.lineStarts[Math.min(lo, s.lineStarts.length - 1)] ?? 1;
  };
}

/** Classes whose document wrapper is dropped when the file is included (subfiles, standalone). */
const WRAPPED = /\\documentclass\s*(?:\[[^\]]*\])?\s*\{\s*(subfiles|standalone)\s*\}/;

/**
 * Inline every include of `mainFile` recursively, reading the files in document order as TeX
 * does ({@link runTex}: conditionals, `\newif` switches, `\endinput`, include macros). Paths are
 * resolved as TeX does for arXiv sources: `\input` / `\include` relative to the main file's
 * directory (inside a file brought in by `\import`, relative to that file's directory first, as
 * the import package sets the input path), then the including file's directory; `\import{dir}{f}`
 * / `\inputfrom` / `\includefrom` relative to the main file's directory, `\subimport` /
 * `\subinputfrom` / `\subincludefrom` relative to the current import directory; no extension →
 * `.tex` first. A `\subfile` (or an included `subfiles` / `standalone` document) loses its own
 * preamble and `\begin{document}` / `\end{document}`, as the subfiles package does. Anything
 * resolving outside `root` (also through symlinks) is refused with a warning; missing files are
 * tolerated with a warning (file and line of the include); cycles and depth > 20 stop with a
 * warning; a conditional never closed is warned about where it opened.
 * @throws ExpansionLimitError past {@link ExpansionLimits} (inclusions, characters, macro expansions)
 */
export function flattenDocument(root: string, mainFile: string, warn: Warn, store: VerbatimStore = new VerbatimStore(), opts: FlattenOptions = {}): FlattenResult {
  const limits = { ...DEFAULT_EXPANSION_LIMITS, ...opts.limits };
  const rootReal = realpathSync(root);
  const mainAbs = resolve(root, mainFile);
  const baseDir = dirname(mainAbs);
  const files: string[] = [];
  const missing: string[] = [];
  const excluded: ExcludedText[] = [];
  const stack: string[] = [];
  const st = new TexState();
  for (const rel of listFiles(root, (n) => /\.(sty|cls)$/i.test(n), 200)) {
    const t = readTextFile(join(root, rel), () => {}, { rel });
    for (const d of t?.matchAll(/\\newif\s*\\if([a-zA-Z@]+)/g) ?? []) st.opaque.add(d[1]);
    // a package of the paper's own may define verbatim-like environments (\lstnewenvironment, …) used in the text
    if (t && /\.sty$/i.test(rel)) scanSource(t, store);
  }
  let encoding: string | undefined;
  let inclusions = 0;
  let chars = 0;
  let expansions = 0;
  const over = (what: string, at: string) => {
    throw new ExpansionLimitError(`sources expand past the limit of ${what} (${at}); an \\input fan-out or recursive include?`);
  };

  const REFUSED = '\0refused';
  const resolveTarget = (fromDir: string, target: string, at: { file: string; line: number }): string | undefined => {
    const t = target.replace(/^"|"$/g, '');
    const cands = /\.[a-zA-Z]{1,4}$/.test(t) && !/\.tex$/i.test(t) ? [`${t}.tex`, t] : /\.tex$/i.test(t) ? [t] : [`${t}.tex`, t];
    for (const c of cands) {
      const abs = resolve(fromDir, c);
      if (!existsSync(abs)) continue;
      let real: string;
      try {
        real = realpathSync(abs);
      } catch {
        continue;
      }
      if (!within(rootReal, real)) {
        warn({ code: 'include-outside-root', ...at, message: `include ${JSON.stringify(target)} resolves outside the paper root; ignored` });
        return REFUSED;
      }
      try {
        if (!statSync(real).isFile()) continue;
      } catch {
        continue;
      }
      return real;
    }
    return undefined;
  };

  /** Read one file in the shared state; `importDir`: the import package's input path (undefined outside \import). */
  const expand = (absReal: string, depth: number, importDir: string | undefined, unwrap: boolean, from?: string): string => {
    const rel = relative(rootReal, absReal);
    const raw = readTextFile(absReal, warn, { rel, encoding });
    if (raw === undefined) return '';
    if (!files.length) encoding = declaredInputenc(raw);
    chars += raw.length;
    if (chars > limits.maxChars) over(`${limits.maxChars} characters read`, `${chars} at ${rel}${from ? `, included from ${from}` : ''}`);
    if (!files.includes(rel)) files.push(rel);
    stack.push(absReal);
    const scanned = scanSource(raw, store, warn, rel);
    let text = scanned.text;
    let base = 0;
    if (depth > 0 && (unwrap || WRAPPED.test(text))) {
      // a subfile spliced in: its own preamble and document wrapper are not typeset
      const b = /\\begin\s*\{document\}/.exec(text);
      if (b && /\\document(class|style)/.test(text.slice(0, b.index))) {
        base = b.index + b[0].length;
        text = text.slice(base);
        const e = /\\end\s*\{document\}/.exec(text);
        if (e) text = text.slice(0, e.index);
      }
    }
    const fileDir = dirname(absReal);
    const out = runTex(text, st, {
      file: rel,
      lineOf: lineIndex(scanned, base),
      fileLevel: true,
      macroDepth: 0,
      warn,
      onExpansion: () => {
        if (++expansions > limits.maxExpansions) over(`${limits.maxExpansions} include-macro expansions`, `at ${rel}`);
      },
      include: (ref, line) => {
        const at = { file: rel, line };
        const label = ref.dir ? `${ref.dir}/${ref.file}` : ref.file;
        const imported = /import|from/.test(ref.cmd);
        const dirs: string[] = [];
        if (imported) {
          if (ref.cmd.startsWith('sub')) dirs.push(resolve(importDir ?? fileDir, ref.dir ?? ''), resolve(fileDir, ref.dir ?? ''));
          else dirs.push(resolve(baseDir, ref.dir ?? ''));
        } else {
          if (importDir) dirs.push(importDir);
          dirs.push(baseDir, fileDir);
          // LaTeX tries each \input@path prefix after the file as named
          for (const p of st.inputPath) dirs.push(resolve(baseDir, p));
        }
        let target: string | undefined;
        for (const d of [...new Set(dirs)]) {
          target = resolveTarget(d, ref.file, at);
          if (target) break;
        }
        if (target === REFUSED) return '';
        if (ref.cmd === 'include' && st.includeOnly && !st.includeOnly.has(ref.file.replace(/\.tex$/i, ''))) {
          // \includeonly: LaTeX reads only the .aux of the others; their text is not typeset
          const t = target && readTextFile(target, () => {}, { rel: label });
          excluded.push({ what: label, reason: `not in \\includeonly{${[...st.includeOnly].join(',')}}`, words: t ? countWords(scanSource(t, new VerbatimStore()).text) : 0 });
          return '';
        }
        if (!target) {
          if (!within(rootReal, resolve(dirs[0], ref.file))) warn({ code: 'include-outside-root', ...at, message: `include ${JSON.stringify(label)} points outside the paper root; ignored` });
          else {
            missing.push(label);
            warn({ code: 'include-missing', ...at, message: `include ${JSON.stringify(label)} not found; skipped` });
          }
          return '';
        }
        if (stack.includes(target)) {
          warn({ code: 'include-cycle', ...at, message: `include cycle at ${JSON.stringify(label)}; skipped` });
          return '';
        }
        if (depth >= 20) {
          warn({ code: 'include-depth', ...at, message: `include depth limit reached at ${JSON.stringify(label)}; skipped` });
          return '';
        }
        if (++inclusions > limits.maxInclusions) over(`${limits.maxInclusions} file inclusions`, `at ${JSON.stringify(label)} included from ${rel}:${line}`);
        const childImport = imported ? dirname(target) : importDir;
        const body = expand(target, depth + 1, childImport, ref.cmd === 'subfile', `${rel}:${line}`);
        return /^(include|includefrom|subincludefrom)$/.test(ref.cmd) ? `\n${body}\n` : body;
      },
    });
    stack.pop();
    return out;
  };

  let mainReal: string;
  try {
    mainReal = realpathSync(mainAbs);
  } catch {
    throw new Error(`main file not found: ${mainFile}`);
  }
  if (!within(rootReal, mainReal)) throw new Error(`main file ${mainFile} lies outside the paper root`);
  const text = expand(mainReal, 0, undefined, false);
  warnUnclosed(st, warn);
  if (st.skippedWords) excluded.push({ what: 'conditionals', reason: 'branches TeX skips (false conditionals)', words: st.skippedWords });
  return { text, files, missing, verbatim: store, inclusions, chars, excluded };
}

// ---------------------------------------------------------------------------------------------
// arXiv's statements of which file is the paper

/** What arXiv's `00README.XXX` / `00README.json` (or `00README` in JSON) and `%auto-ignore` say about the files. */
export interface ArxivDirectives {
  /** The directive file read (`00README.XXX`, `00README.json`, `00README`), if any. */
  source?: string;
  /** Declared top-level files (relative to the root), in the order arXiv assembles them (alphanumeric). */
  toplevel: string[];
  /** Files to leave out: `ignore` directives and files whose first line is `%auto-ignore`, with why. */
  ignored: Map<string, string>;
}

/**
 * Read arXiv's directives: `00README.XXX` lines `FILE toplevelfile` / `FILE ignore` (other
 * directives such as `include`, `landscape`, `nohypertex`, `nostamp` are not about the text);
 * `00README.json` (or `00README` holding JSON) `{"sources": [{"filename": F, "usage":
 * "toplevel" | "ignore" | "include" | "append"}]}` and its YAML form (`00README.yaml`, or a
 * `00README` with `sources:`); and any `.tex` file whose first line is
 * `%auto-ignore` (arXiv's mark for files AutoTeX skips). Declared names that do not exist are
 * warned about (`readme-missing-file`, naming the directive file) and dropped; names leaving the
 * root are refused the same way.
 * @see https://info.arxiv.org/help/00README.html
 */
export function readArxivDirectives(root: string, texFiles: string[], warn: Warn = () => {}): ArxivDirectives {
  const out: ArxivDirectives = { toplevel: [], ignored: new Map() };
  const rootReal = realpathSync(root);
  const names = (() => {
    try {
      return readdirSync(root);
    } catch {
      return [];
    }
  })();
  const pick = (n: string) => names.find((x) => x.toLowerCase() === n.toLowerCase());
  const file = pick('00README.json') ?? pick('00README.yaml') ?? pick('00README.yml') ?? pick('00README.XXX') ?? pick('00README');
  const entries: { name: string; usage: string; line?: number }[] = [];
  if (file) {
    let text = '';
    try {
      if (statSync(join(root, file)).size <= 2 ** 20) text = readFileSync(join(root, file), 'utf8');
    } catch {
      /* unreadable: as absent */
    }
    out.source = file;
    if (/^\s*sources\s*:/m.test(text) && !/^\s*[{[]/.test(text)) {
      // the YAML form: `sources:` then `- filename: F` / `usage: U` pairs
      for (const m of text.matchAll(/filename\s*:\s*["']?([^"'\n]+?)["']?\s*\n\s*usage\s*:\s*["']?(\w+)/g)) entries.push({ name: m[1].trim(), usage: m[2] });
    } else if (/^\s*[{[]/.test(text)) {
      try {
        const j = JSON.parse(text) as { sources?: { filename?: unknown; usage?: unknown }[] };
        for (const s of Array.isArray(j.sources) ? j.sources : []) {
          if (typeof s?.filename === 'string' && typeof s.usage === 'string') entries.push({ name: s.filename, usage: s.usage });
        }
      } catch (e) {
        warn({ code: 'readme-invalid', file, message: `not valid JSON (${(e as Error).message}); its directives are not used` });
      }
    } else {
      text.split(/\r\n?|\n/).forEach((l, k) => {
        const m = /^\s*(\S+)\s+(toplevelfile|ignore)\s*$/.exec(l);
        if (m) entries.push({ name: m[1], usage: m[2] === 'toplevelfile' ? 'toplevel' : 'ignore', line: k + 1 });
      });
    }
  }
  for (const e of entries) {
    if (e.usage !== 'toplevel' && e.usage !== 'ignore') continue;
    const abs = resolve(root, e.name);
    let ok = false;
    try {
      ok = within(rootReal, realpathSync(abs)) && statSync(abs).isFile();
    } catch {
      ok = false;
    }
    if (!ok) {
      warn({ code: 'readme-missing-file', file, line: e.line, message: `names ${JSON.stringify(e.name)} (${e.usage}), which is not a file in the paper; directive not used` });
      continue;
    }
    const rel = relative(rootReal, realpathSync(abs));
    if (e.usage === 'toplevel') out.toplevel.push(rel);
    else out.ignored.set(rel, `${file}: ignore`);
  }
  out.toplevel.sort((a, b) => (a < b ? -1 : a > b ? 1 : 0));
  for (const rel of texFiles) {
    if (out.ignored.has(rel)) continue;
    try {
      const head = readFileSync(join(root, rel)).subarray(0, 64).toString('latin1');
      if (/^\uFEFF?%auto-ignore/i.test(head.replace(/^\xEF\xBB\xBF/, ''))) out.ignored.set(rel, '%auto-ignore');
    } catch {
      /* unreadable: handled where read */
    }
  }
  return out;
}

// ---------------------------------------------------------------------------------------------
// Main file among several roots

/** What a root document is, for the main-file choice. Only `article` documents are papers. */
export type RootKind = 'article' | 'presentation' | 'standalone' | 'letter' | 'response' | 'title-page' | 'subfile' | 'included';

/** One root document considered by {@link chooseMainFile}. */
export interface RootCandidate {
  file: string;
  documentClass: string;
  kind: RootKind;
  /** Characters of LaTeX under headings in the resolved include tree. */
  sectionChars: number;
  /** Headings in the resolved include tree. */
  headings: number;
  /**
   * Signs that this root is the paper itself, not a companion document: its name is the
   * archive's, it has a title and an abstract (+1 each); a name or folder of a companion
   * (appendix, supplement, code, notes, slides) −2.
   */
  ownRoot?: number;
  /** Why this candidate was (not) chosen. */
  reason: string;
}

/** Result of {@link chooseMainFile}. */
export interface MainChoice {
  main: string;
  candidates: RootCandidate[];
  /** The flattened main file (reused by the caller). */
  flat: FlattenResult;
  /** Which rule chose the main file (arXiv directive, the only root, or the heuristic and why), and what was left out. */
  rule: string;
}

const PRESENTATION = new Set(['beamer', 'powerdot', 'prosper', 'seminar', 'slides', 'tikzposter', 'a0poster', 'sciposter', 'baposter', 'beamerposter']);
const LETTER = new Set(['letter', 'newlfm', 'scrlttr2', 'lettre', 'dinbrief', 'moderncv', 'res', 'resume']);
const KIND_TEXT: Record<RootKind, string> = {
  article: 'article-like',
  presentation: 'a presentation/poster class, never preferred over an article-like root',
  standalone: 'a standalone figure, never preferred over an article-like root',
  letter: 'a letter, never preferred over an article-like root',
  response: 'a response to reviewers / cover letter, never preferred over an article-like root',
  'title-page': 'title page only (no sections, little text), never preferred over an article-like root',
  subfile: 'a subfile of another document, never preferred over an article-like root',
  included: 'included by another root, never preferred',
};

const RESPONSE_NAME = /(^|[^a-z])(response|responses|rebuttal|reply|replies|cover[-_ ]?letter|letter|referee|reviewers?)([^a-z]|$)/i;
const RESPONSE_TEXT = /\b(responses? to (the )?(reviewers?|referees?|editors?|comments)|reply to (the )?(reviewers?|referees?)|dear (editor|reviewers?|referees?|dr\.?|prof)|point[- ]by[- ]point)\b/i;

function classify(file: string, cls: string, flatText: string, headings: { title: string; latex: string }[], included: boolean): RootKind {
  if (included) return 'included';
  if (PRESENTATION.has(cls)) return 'presentation';
  if (cls === 'standalone') return 'standalone';
  if (cls === 'subfiles') return 'subfile';
  const body = bodyOf(flatText);
  if (LETTER.has(cls) || /\\begin\s*\{letter\}|\\opening\s*\{/.test(body)) return 'letter';
  const head = `${headings.slice(0, 3).map((h) => h.title).join('\n')}\n${body.slice(0, 2500)}`;
  if (RESPONSE_NAME.test(basename(file, '.tex')) || RESPONSE_TEXT.test(head)) return 'response';
  if (!headings.length && body.replace(/\\[a-zA-Z@]+\*?|[{}[\]\s]/g, '').length < 1500) return 'title-page';
  return 'article';
}

function bodyOf(text: string): string {
  const b = /\\begin\s*\{document\}/.exec(text);
  const start = b ? b.index + b[0].length : 0;
  const e = /\\end\s*\{document\}/.exec(text.slice(start));
  return e ? text.slice(start, start + e.index) : text.slice(start);
}

const HEADING_SCAN = /\\(part|chapter|section|subsection|subsubsection)(?![a-zA-Z@])\*?\s*(?:\[[^\]]*\]\s*)?(?=\{)/g;

/** Headings and the LaTeX under them in a body (a light version of structure extraction, for the main-file choice). */
function headingStats(text: string): { title: string; latex: string }[] {
  const body = bodyOf(text);
  const out: { title: string; latex: string; start: number }[] = [];
  const re = new RegExp(HEADING_SCAN.source, 'g');
  let m: RegExpExecArray | null;
  while ((m = re.exec(body))) {
    const g = readGroup(body, m.index + m[0].length);
    if (!g) continue;
    if (out.length) out[out.length - 1].latex = body.slice(out[out.length - 1].start, m.index);
    out.push({ title: g[0], latex: '', start: g[1] });
    re.lastIndex = g[1];
  }
  if (out.length) out[out.length - 1].latex = body.slice(out[out.length - 1].start);
  return out;
}

const COMPANION = /(^|[^a-z])(appendix|appendices|supplement|supplementary|suppl|online|si|code|codes|software|slides|poster)([^a-z]|$)/i;
const norm = (s: string) => s.toLowerCase().replace(/[^a-z0-9]/g, '');

/** See {@link RootCandidate.ownRoot}. */
function ownRootScore(rel: string, flatText: string, paperId?: string): number {
  let n = 0;
  const name = basename(rel).replace(/\.tex$/i, '');
  if (paperId && norm(name) && norm(name) === norm(paperId.replace(/^[a-z]+(-[a-z]{2})?[-_.]/, '')) ) n++;
  if (paperId && norm(name) === norm(paperId)) n++;
  if (/\\(title|icmltitle|Title)\*?\s*[[{]/.test(flatText)) n++;
  if (/\\begin\s*\{abstract\}|\\abstract\s*\{/.test(flatText)) n++;
  if (COMPANION.test(name) || COMPANION.test(dirname(rel).split(sep).join(' '))) n -= 2;
  return n;
}

const conventional = (r: string) => (/^(main|ms|paper|article|arxiv|manuscript)\.tex$/i.test(basename(r)) ? 1 : 0);

/**
 * Choose the main file under `root`. arXiv's own statements come first ({@link readArxivDirectives}):
 * a top-level file declared in `00README.XXX` / `00README.json` is the paper (several declared ones
 * are read in arXiv's order, the later ones' bodies appended), and files marked `ignore` or
 * `%auto-ignore` are never candidates. Otherwise, among the root documents (a `.tex` with
 * `\documentclass` or `\documentstyle` and `\begin{document}` outside comments and verbatim
 * bodies, also when they arrive through its `\input`s, e.g. a preamble file):
 * presentations (`beamer`, posters), `standalone` figures, letters, responses to reviewers /
 * cover letters, subfiles, title-page-only documents and roots included by another root never
 * win over an article-like root; among article-like roots the one whose resolved include tree
 * holds the most section text wins (ties: conventional name, then path). With no article-like
 * root, the best other root is used with a `no-article-root` warning.
 * @returns the choice with every candidate and why, and the rule that chose it; undefined when there is no root
 * @throws ExpansionLimitError when a candidate's sources expand past the limits
 */
export function chooseMainFile(root: string, warn: Warn = () => {}, opts: FlattenOptions = {}): MainChoice | undefined {
  const tex = listTexFiles(root);
  const directives = readArxivDirectives(root, tex, warn);
  const roots: { rel: string; cls: string; text: string }[] = [];
  const fragments: string[] = [];
  const includedNames = new Set<string>();
  const quiet: Warn = () => {};
  for (const rel of tex) {
    if (directives.ignored.has(rel)) continue;
    const raw = readTextFile(join(root, rel), quiet, { rel });
    if (raw === undefined) continue;
    const text = scanSource(raw, new VerbatimStore()).text;
    const targets = includeTargets(text);
    for (const t of targets) includedNames.add(basename(t).replace(/\.tex$/i, ''));
    if (isRootDocument(text)) roots.push({ rel, cls: documentClass(text) ?? '', text });
    else if (targets.length) fragments.push(rel);
  }
  const flats = new Map<string, FlattenResult>();
  const warnings = new Map<string, PaperWarning[]>();
  const flatten = (rel: string): FlattenResult => {
    let flat = flats.get(rel);
    if (!flat) {
      const ws: PaperWarning[] = [];
      flat = flattenDocument(root, rel, (w) => ws.push(w), new VerbatimStore(), opts);
      flats.set(rel, flat);
      warnings.set(rel, ws);
    }
    return flat;
  };
  // a \documentclass that arrives through an \input (main.tex \input's preamble.tex): the includer is the root
  for (const rel of fragments) {
    if (includedNames.has(basename(rel, '.tex'))) continue;
    const f = flatten(rel);
    if (isRootDocument(f.text)) roots.push({ rel, cls: documentClass(f.text) ?? '', text: f.text });
  }
  const declared = directives.toplevel[0];
  if (declared && !roots.some((r) => r.rel === declared)) {
    const f = flatten(declared);
    roots.push({ rel: declared, cls: documentClass(f.text) ?? '', text: f.text });
  }
  if (!roots.length) return undefined;
  const cands: RootCandidate[] = roots.map(({ rel, cls, text }) => {
    // presentations, figures and subfiles are classed by their class alone: not resolved unless chosen
    const byClass = roots.length > 1 && rel !== declared && (PRESENTATION.has(cls) || cls === 'standalone' || cls === 'subfiles');
    // headings made by user macros (\NewDocumentCommand{\mysec}{m}{\section{#1}}) count: read after expansion
    const read = byClass ? text : expandMacros(flatten(rel).text);
    const hs = headingStats(read);
    const included = roots.length > 1 && includedNames.has(basename(rel, '.tex'));
    const kind = classify(rel, cls, read, hs, included);
    const own = byClass ? 0 : ownRootScore(rel, flatten(rel).text, opts.paperId);
    return { file: rel, documentClass: cls, kind, sectionChars: hs.reduce((a, h) => a + h.latex.length, 0), headings: hs.length, ownRoot: own, reason: KIND_TEXT[kind] };
  });
  const order = (a: RootCandidate, b: RootCandidate) =>
    (b.ownRoot ?? 0) - (a.ownRoot ?? 0) || b.sectionChars - a.sectionChars || conventional(b.file) - conventional(a.file) || a.file.localeCompare(b.file);
  const articles = cands.filter((c) => c.kind === 'article').sort(order);
  let chosen: RootCandidate;
  let rule: string;
  if (declared) {
    chosen = cands.find((c) => c.file === declared)!;
    chosen.reason = `declared the top-level file by ${directives.source}`;
    for (const c of cands) if (c !== chosen) c.reason = `not declared top-level by ${directives.source}`;
    rule = `${directives.source} declares ${declared} the top-level file`;
  } else if (articles.length) {
    chosen = articles[0];
    const byOwn = articles.length > 1 && (chosen.ownRoot ?? 0) > (articles[1].ownRoot ?? 0);
    chosen.reason =
      articles.length > 1
        ? byOwn
          ? `article-like, the paper's own root (name, title, abstract: ${chosen.ownRoot})`
          : `article-like, most section text (${chosen.sectionChars} chars)`
        : 'the only article-like root';
    for (const c of articles.slice(1))
      c.reason = (c.ownRoot ?? 0) < (chosen.ownRoot ?? 0) ? `article-like, a companion document (own-root signs ${c.ownRoot} < ${chosen.ownRoot})` : `article-like, less section text (${c.sectionChars} chars)`;
    rule = cands.length === 1 ? 'the only root document' : `heuristic: ${chosen.reason}`;
  } else {
    const rest = [...cands].sort((a, b) => Number(a.kind === 'included') - Number(b.kind === 'included') || order(a, b));
    chosen = rest[0];
    chosen.reason = `no article-like root; used anyway (${KIND_TEXT[chosen.kind].replace(/, never.*$/, '')})`;
    rule = cands.length === 1 ? `the only root document (${chosen.kind})` : `heuristic: ${chosen.reason}`;
    warn({ code: 'no-article-root', file: chosen.file, message: `no article-like root document; using ${chosen.file} (${chosen.documentClass || 'unknown class'}: ${KIND_TEXT[chosen.kind].replace(/, never.*$/, '')})` });
  }
  const flat = flatten(chosen.file);
  for (const w of warnings.get(chosen.file) ?? []) warn(w);
  if (cands.length > 1 && !declared) warn({ code: 'several-roots', file: chosen.file, message: `several root documents (${cands.map((c) => `${c.file} [${c.documentClass || '?'}, ${c.kind}]`).join(', ')}); using ${chosen.file}` });
  // further declared top-level files: arXiv assembles them into one PDF after the first
  for (const extra of directives.toplevel.slice(1)) {
    const f = flattenDocument(root, extra, warn, flat.verbatim, opts);
    const body = bodyOf(f.text);
    const e = flat.text.lastIndexOf('\\end{document}');
    flat.text = e >= 0 ? `${flat.text.slice(0, e)}\n${body}\n${flat.text.slice(e)}` : `${flat.text}\n${body}`;
    for (const x of f.files) if (!flat.files.includes(x)) flat.files.push(x);
    flat.missing.push(...f.missing);
    rule += `; ${extra} appended (also declared top-level)`;
  }
  if (directives.ignored.size) rule += `; left out: ${[...directives.ignored].map(([f, why]) => `${f} (${why})`).join(', ')}`;
  const sorted = [chosen, ...cands.filter((c) => c !== chosen)];
  return { main: chosen.file, candidates: sorted, flat, rule };
}

/** The main file under `root` ({@link chooseMainFile}), or undefined when there is no root document. */
export function findMainFile(root: string, warn: Warn = () => {}): string | undefined {
  return chooseMainFile(root, warn)?.main;
}

// ---------------------------------------------------------------------------------------------
// Macros

/** A user macro definition. */
interface MacroDef {
  nargs: number;
  /** Default of the first argument (`\newcommand{\x}[2][default]{…}`): then #1 is optional. */
  optDefault?: string;
  /** xparse argument specification (`\NewDocumentCommand`), one entry per parameter. */
  spec?: ArgSpec[];
  body: string;
}

/**
 * One parameter of an xparse (LaTeX 2020+ `\NewDocumentCommand`) argument specification:
 * `m` mandatory; `o` / `O{default}` optional in brackets; `s` star, `t<tok>` a token (true or
 * false); `r<open><close>` / `R…{default}` required and `d<open><close>` / `D…{default}` optional
 * delimited; `e{tokens}` / `E{tokens}{defaults}` embellishments (one parameter per token); `b`
 * an environment's body; `v` verbatim. Prefixes `+` (long), `!` (no space skipping) and
 * `>{processor}` do not change what is read here.
 * @see the LaTeX3 `ltcmd` documentation (usrguide3, "Creating document commands")
 */
export interface ArgSpec {
  kind: 'm' | 'o' | 's' | 't' | 'r' | 'd' | 'e' | 'b' | 'v';
  /** `t` and `e`: the token; `r` / `d`: the opening token. */
  token?: string;
  close?: string;
  /** Value when absent (`O`, `D`, `R`, `E`); absent otherwise → `-NoValue-`. */
  default?: string;
}

/** xparse's marker for an optional argument not given (tested by `\IfNoValueTF`). */
export const NO_VALUE = '-NoValue-';

/** Parse an xparse argument specification; undefined for kinds this reader cannot read (`u`, `l`, `g`, `G`). */
export function parseArgSpec(spec: string): ArgSpec[] | undefined {
  const out: ArgSpec[] = [];
  let i = 0;
  const tok = (): string | undefined => {
    i = skipWs(spec, i);
    const c = /^\\([a-zA-Z@]+|.)|^[^\s]/.exec(spec.slice(i));
    if (!c) return undefined;
    i += c[0].length;
    return c[0];
  };
  const group = (): string | undefined => {
    i = skipWs(spec, i);
    const g = readGroup(spec, i);
    if (!g) return undefined;
    i = g[1];
    return g[0];
  };
  for (;;) {
    i = skipWs(spec, i);
    if (i >= spec.length) return out;
    const c = spec[i++];
    if (c === '+' || c === '!' || c === '=') {
      if (c === '=' && group() === undefined) return undefined;
      continue;
    }
    if (c === '>') {
      if (group() === undefined) return undefined;
      continue;
    }
    switch (c) {
      case 'm':
      case 'o':
      case 's':
      case 'b':
      case 'v':
        out.push({ kind: c });
        break;
      case 'O': {
        const d = group();
        if (d === undefined) return undefined;
        out.push({ kind: 'o', default: d });
        break;
      }
      case 't': {
        const t = tok();
        if (!t) return undefined;
        out.push({ kind: 't', token: t });
        break;
      }
      case 'r':
      case 'R':
      case 'd':
      case 'D': {
        const a = tok();
        const b = tok();
        if (!a || !b) return undefined;
        const d = c === 'R' || c === 'D' ? group() : undefined;
        if ((c === 'R' || c === 'D') && d === undefined) return undefined;
        out.push({ kind: c.toLowerCase() as 'r' | 'd', token: a, close: b, ...(d !== undefined && { default: d }) });
        break;
      }
      case 'e':
      case 'E': {
        const ts = group();
        if (ts === undefined) return undefined;
        const defs: string[] = [];
        if (c === 'E') {
          const dg = group();
          if (dg === undefined) return undefined;
          for (let k = 0; k < dg.length; ) {
            const g = readGroup(dg, skipWs(dg, k));
            if (!g) break;
            defs.push(g[0]);
            k = g[1];
          }
        }
        const toks = ts.match(/\\[a-zA-Z@]+|\\.|\S/g) ?? [];
        toks.forEach((t, k) => out.push({ kind: 'e', token: t, ...(defs[k] !== undefined && { default: defs[k] }) }));
        break;
      }
      default:
        return undefined;
    }
  }
}

/** Text of a delimited argument from `i` (just after its opening token) to `close` at brace depth 0. */
function readDelimited(s: string, i: number, close: string): [string, number] | undefined {
  let depth = 0;
  for (let j = i; j < s.length; j++) {
    const c = s[j];
    if (c === '\\') {
      j++;
      continue;
    }
    if (c === '{') depth++;
    else if (c === '}') depth--;
    else if (depth === 0 && s.startsWith(close, j)) return [s.slice(i, j), j + close.length];
    if (depth < 0) return undefined;
  }
  return undefined;
}

/** The arguments of a use of a macro at `i` (just after its name), or undefined when they are not all there. */
function readMacroArgs(text: string, i: number, def: MacroDef): { args: string[]; end: number } | undefined {
  const args: string[] = [];
  if (!def.spec) {
    for (let a = 0; a < def.nargs; a++) {
      if (a === 0 && def.optDefault !== undefined) {
        const o = readOptional(text, skipSpaces(text, i));
        if (o) {
          args.push(o[0]);
          i = o[1];
        } else args.push(def.optDefault);
        continue;
      }
      const arg = readArgument(text, i);
      if (!arg) return undefined;
      args.push(arg[0]);
      i = arg[1];
    }
    return { args, end: i };
  }
  const spec = def.spec;
  for (let a = 0; a < spec.length; a++) {
    const p = spec[a];
    const j = skipSpaces(text, i);
    switch (p.kind) {
      case 'm':
      case 'v':
      case 'b': {
        const arg = p.kind === 'v' && text[j] !== '{' && text[j] !== PH_OPEN && text[j] && !/[a-zA-Z\s]/.test(text[j]) ? readDelimited(text, j + 1, text[j]) : readArgument(text, i);
        if (!arg) return undefined;
        args.push(arg[0]);
        i = arg[1];
        break;
      }
      case 'o': {
        const o = readOptional(text, j);
        if (o) {
          args.push(o[0]);
          i = o[1];
        } else args.push(p.default ?? NO_VALUE);
        break;
      }
      case 's':
      case 't': {
        const t = p.kind === 's' ? '*' : p.token!;
        const hit = text.startsWith(t, j) && !(/^\\[a-zA-Z@]+$/.test(t) && /[a-zA-Z@]/.test(text[j + t.length] ?? ''));
        args.push(hit ? '\\BooleanTrue' : '\\BooleanFalse');
        if (hit) i = j + t.length;
        break;
      }
      case 'r':
      case 'd': {
        if (text.startsWith(p.token!, j)) {
          const d = readDelimited(text, j + p.token!.length, p.close!);
          if (!d) return undefined;
          args.push(d[0]);
          i = d[1];
        } else if (p.kind === 'r' && p.default === undefined) return undefined;
        else args.push(p.default ?? NO_VALUE);
        break;
      }
      case 'e': {
        // embellishments come in any order: read every one present, then fill in this group
        let k = a;
        while (k < spec.length && spec[k].kind === 'e') k++;
        const group = spec.slice(a, k);
        const got = new Map<string, string>();
        for (;;) {
          const q = skipSpaces(text, i);
          const e = group.find((g) => !got.has(g.token!) && text.startsWith(g.token!, q));
          if (!e) break;
          const arg = readArgument(text, q + e.token!.length);
          if (!arg) return undefined;
          got.set(e.token!, arg[0]);
          i = arg[1];
        }
        for (const g of group) args.push(got.get(g.token!) ?? g.default ?? NO_VALUE);
        a = k - 1;
        break;
      }
    }
  }
  return { args, end: i };
}

const XPARSE_IF = /\\(IfBoolean|IfNoValue|IfValue|IfBlank|IfNoValueOrEmpty)(TF|T|F)(?![a-zA-Z@])/g;

/**
 * Resolve xparse's tests on known values in a substituted body: `\IfBooleanTF{\BooleanTrue}{a}{b}`
 * → `a`, `\IfNoValueTF{-NoValue-}{a}{b}` → `a`, `\IfValueT`, `\IfBooleanF`, … (tests on anything
 * else stay); then a `-NoValue-` left over typesets as nothing.
 */
function resolveXparse(body: string): string {
  for (let guard = 0; guard < 200; guard++) {
    const re = new RegExp(XPARSE_IF.source, 'g');
    let m: RegExpExecArray | null;
    let done = true;
    while ((m = re.exec(body))) {
      const test = readArgument(body, m.index + m[0].length);
      if (!test) continue;
      const v = test[0].trim();
      let truth: boolean | undefined;
      if (m[1] === 'IfBoolean') truth = v === '\\BooleanTrue' ? true : v === '\\BooleanFalse' ? false : undefined;
      else if (!/#/.test(v)) {
        const none = v === NO_VALUE || (m[1] !== 'IfNoValue' && m[1] !== 'IfValue' && v === '');
        truth = m[1] === 'IfValue' ? !none : none;
      }
      if (truth === undefined) continue;
      const branches = m[2].length;
      let i = test[1];
      const bs: string[] = [];
      for (let k = 0; k < branches; k++) {
        const g = readGroup(body, skipSpaces(body, i));
        if (!g) break;
        bs.push(g[0]);
        i = g[1];
      }
      if (bs.length < branches) continue;
      const pick = m[2] === 'TF' ? (truth ? bs[0] : bs[1]) : m[2] === 'T' ? (truth ? bs[0] : '') : truth ? '' : bs[0];
      body = body.slice(0, m.index) + pick + body.slice(i);
      done = false;
      break;
    }
    if (done) break;
  }
  return body.split(NO_VALUE).join('');
}

const PROTECTED = new Set(['section', 'subsection', 'subsubsection', 'paragraph', 'subparagraph', 'chapter', 'part', 'appendix', 'begin', 'end', 'input', 'include', 'item', 'title', 'abstract', 'documentclass', 'document', 'iffalse', 'fi', 'else', 'def', 'newcommand', 'renewcommand', 'providecommand']);

/** Limits of {@link expandMacros}. */
export interface MacroLimits {
  /** Expansion rounds (nesting depth of macros in macros; default 10). */
  maxRounds?: number;
  /** Max output length; default 4 × input + 1 MB. */
  maxChars?: number;
  /** Longest definition body expanded (default 4000 chars; longer ones are only removed). */
  maxBodyChars?: number;
}

/** A definition read by {@link readDefinition}. */
interface ParsedDefinition {
  /** Macro name (undefined for environments). */
  name?: string;
  environment: boolean;
  /** False for `\def`s with delimited parameters (removed, never expanded). */
  expandable: boolean;
  def: MacroDef;
  /** Offset just after the definition. */
  end: number;
}

/**
 * The definition starting at `at` with the defining command `tok` (`\newcommand`, `\def`,
 * `\newenvironment`, …, as matched; a `*` after it is allowed): name, parameters, body, extent.
 */
function readDefinition(src: string, at: number, tok: string): ParsedDefinition | undefined {
  let i = at + tok.length;
  if (src[i] === '*' && !tok.endsWith('*')) i++;
  const xparse = /Document/.test(tok);
  if (/environment/i.test(tok)) {
    // \newenvironment{name}[n][default]{begin}{end}, \NewDocumentEnvironment{name}{spec}{begin}{end}: removed, not expanded
    i = skipWs(src, i);
    const name = readGroup(src, i);
    if (!name) return undefined;
    i = name[1];
    if (xparse) {
      const sp = readGroup(src, skipWs(src, i));
      if (!sp) return undefined;
      i = sp[1];
    } else
      for (let k = 0; k < 2; k++) {
        const o = readOptional(src, skipWs(src, i));
        if (o) i = o[1];
      }
    const b = readGroup(src, skipWs(src, i));
    if (!b) return undefined;
    const e = readGroup(src, skipWs(src, b[1]));
    if (!e) return undefined;
    return { environment: true, expandable: false, def: { nargs: 0, body: '' }, end: e[1] };
  }
  i = skipWs(src, i);
  let name: string | undefined;
  const isDef = /def$/.test(tok);
  const braced = /^\{\s*\\([a-zA-Z@]+|.)\s*\}/.exec(src.slice(i, i + 80));
  const bare = /^\\([a-zA-Z@]+|[^a-zA-Z@\s])/.exec(src.slice(i, i + 80));
  if (braced && !isDef) {
    name = braced[1];
    i += braced[0].length;
  } else if (bare) {
    name = bare[1];
    i += bare[0].length;
  }
  if (!name) return undefined;
  let nargs = 0;
  let optDefault: string | undefined;
  let expandable = true;
  let spec: ArgSpec[] | undefined;
  if (xparse) {
    const sp = readGroup(src, skipWs(src, i));
    if (!sp) return undefined;
    spec = parseArgSpec(sp[0]);
    if (!spec) expandable = false;
    else nargs = spec.length;
    i = skipWs(src, sp[1]);
  } else if (isDef) {
    // parameter text up to the body's brace
    const brace = src.indexOf('{', i);
    if (brace < 0 || brace - i > 200) return undefined;
    const params = src.slice(i, brace).replace(/\s+/g, '');
    if (params && !/^(#[1-9])+$/.test(params)) expandable = false; // delimited parameters
    else {
      nargs = params.length / 2;
      if (params && params !== Array.from({ length: nargs }, (_, k) => `#${k + 1}`).join('')) expandable = false;
    }
    i = brace;
  } else {
    const n = readOptional(src, skipWs(src, i));
    if (n) {
      nargs = Number(n[0].trim()) || 0;
      i = n[1];
      const d = readOptional(src, skipWs(src, i));
      if (d) {
        optDefault = d[0];
        i = d[1];
      }
    }
    i = skipWs(src, i);
  }
  const g = readGroup(src, i);
  if (!g) return undefined;
  return { name, environment: false, expandable, def: { nargs, optDefault, ...(spec && { spec }), body: g[0] }, end: g[1] };
}

const DEF_RE =
  /\\(?:re)?(?:newcommand|providecommand)\*?|\\DeclareRobustCommand\*?|\\[gex]?def(?![a-zA-Z@])|\\(?:re)?newenvironment\*?|\\(?:New|Renew|Declare|Provide)(?:Expandable)?Document(?:Command|Environment)(?![a-zA-Z@])/g;

/**
 * Expand user macros: `\newcommand`, `\renewcommand`, `\providecommand`, `\DeclareRobustCommand`
 * (`{\x}` or `\x`, `[n]` parameters, `[default]` for an optional first one) and `\def`/`\gdef`/
 * `\edef`/`\xdef` with undelimited parameters `#1…#9`. Definitions (also `\newenvironment`, and
 * `\def`s with delimited parameters, which are not expanded) are removed from the text, so a
 * heading inside a definition is never a heading; uses are replaced by the body with arguments
 * substituted (`##` → `#`), repeatedly for nested macros, within `limits` (depth and size; a
 * `macro-limit` warning when hit, keeping the last text within the limits).
 */
export function expandMacros(src: string, warn: Warn = () => {}, limits: MacroLimits = {}): string {
  const maxRounds = limits.maxRounds ?? 10;
  const maxChars = limits.maxChars ?? 4 * src.length + 2 ** 20;
  const maxBody = limits.maxBodyChars ?? 4000;
  const defs = new Map<string, MacroDef>();
  let text = '';
  let pos = 0;
  const re = new RegExp(DEF_RE.source, 'g');
  let m: RegExpExecArray | null;
  while ((m = re.exec(src))) {
    const d = readDefinition(src, m.index, m[0]);
    if (!d) continue;
    text += src.slice(pos, m.index);
    pos = d.end;
    re.lastIndex = d.end;
    const name = d.name;
    if (!name || !d.expandable || PROTECTED.has(name) || d.def.body.length > maxBody || !/^[a-zA-Z@]+$/.test(name)) continue;
    if (/providecommand|Provide/.test(m[0]) && defs.has(name)) continue;
    defs.set(name, d.def);
  }
  text += src.slice(pos);
  if (!defs.size) return text;
  const useRe = new RegExp(`\\\\(${[...defs.keys()].map((k) => k.replace(/[@]/g, '\\@')).sort((a, b) => b.length - a.length).join('|')})(?![a-zA-Z@])`, 'g');
  for (let round = 0; ; round++) {
    if (round >= maxRounds) {
      warn({ code: 'macro-limit', message: `macro expansion still changing after ${maxRounds} rounds (recursive macro?); stopped there` });
      return text;
    }
    let changed = false;
    const out: string[] = [];
    let outLen = 0;
    let p = 0;
    useRe.lastIndex = 0;
    while ((m = useRe.exec(text))) {
      const def = defs.get(m[1])!;
      let i = m.index + m[0].length;
      const use = readMacroArgs(text, i, def);
      if (!use) continue;
      const args = use.args;
      i = use.end;
      const body = substitute(def.body, args, def).replace(/\\xspace(?![a-zA-Z])/g, '');
      const piece = text.slice(p, m.index) + body + (def.nargs === 0 && /^[a-zA-Z]/.test(text[i] ?? '') ? ' ' : '');
      out.push(piece);
      outLen += piece.length;
      if (def.nargs === 0 && text.slice(i, i + 2) === '{}') i += 2;
      p = i;
      useRe.lastIndex = i;
      changed = true;
      if (outLen > maxChars) {
        warn({ code: 'macro-limit', message: `macro expansion exceeded ${maxChars} characters (runaway macro?); stopped at the previous round` });
        return text;
      }
    }
    if (!changed) return text;
    out.push(text.slice(p));
    text = out.join('');
  }
}

/** @deprecated name kept for callers: {@link expandMacros}. */
export const expandSimpleMacros = (src: string, warn?: Warn): string => expandMacros(src, warn);

function skipSpaces(s: string, i: number): number {
  while (i < s.length && (s[i] === ' ' || s[i] === '\t' || (s[i] === '\n' && s[i + 1] !== '\n'))) i++;
  return i;
}

/** One undelimited TeX argument at `i`: a `{group}` (braces removed), a control sequence, or one character. */
function readArgument(s: string, i: number): [string, number] | undefined {
  const j = skipSpaces(s, i);
  const c = s[j];
  if (c === undefined || c === '}' || c === '\n') return undefined;
  if (c === '{') return readGroup(s, j);
  if (c === '\\') {
    const w = /^\\([a-zA-Z@]+|.)/s.exec(s.slice(j, j + 64));
    return w ? [w[0], j + w[0].length] : undefined;
  }
  if (c === PH_OPEN) {
    const e = s.indexOf(PH_CLOSE, j);
    if (e > 0) return [s.slice(j, e + 1), e + 1];
  }
  return [c, j + 1];
}
