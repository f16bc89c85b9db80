/**
 * LaTeX source handling before structure extraction (DESIGN.md §7): comment removal (unescaped
 * `%`, the `comment` environment), `\iffalse … \fi` blocks, main-file detection, include
 * resolution (`\input`, `\include`, `\subfile`, `\import`, `\subimport`) confined to the paper's
 * root, and expansion of simple user macros (`\newcommand`, `\def` without optional arguments).
 */
import { existsSync, readdirSync, readFileSync, realpathSync, statSync } from 'node:fs';
import { basename, dirname, join, relative, resolve, sep } from 'node:path';

/** Max bytes read from one .tex file (larger files are skipped with a warning). */
export const MAX_TEX_BYTES = 8 * 2 ** 20;

/**
 * Remove TeX comments: from each unescaped `%` (preceded by an even number of backslashes) to
 * the end of the line, including the newline when the line held only a comment (as TeX does);
 * `\begin{comment}…\end{comment}` blocks are removed too.
 */
export function stripComments(src: string): string {
  const out: string[] = [];
  const lines = src.split(/\r?\n/);
  for (const line of lines) {
    let cut = -1;
    for (let i = 0; i < line.length; i++) {
      if (line[i] === '%') {
        let bs = 0;
        for (let j = i - 1; j >= 0 && line[j] === '\\'; j--) bs++;
        if (bs % 2 === 0) {
          cut = i;
          break;
        }
      }
    }
    if (cut < 0) out.push(line);
    else if (line.slice(0, cut).trim() === '') continue; // whole-line comment: drop the line
    else out.push(line.slice(0, cut));
  }
  return out.join('\n').replace(/\\begin\{comment\}[\s\S]*?(\\end\{comment\}|$)/g, '');
}

/**
 * Remove `\iffalse … \fi` blocks (nesting of other `\if…` conditionals respected; an `\else` at
 * the outer level keeps its branch). Also `\if0 … \fi`.
 */
export function stripIffalse(src: string): string {
  const re = /\\(iffalse|if0)(?![a-zA-Z])/g;
  let out = '';
  let pos = 0;
  let m: RegExpExecArray | null;
  while ((m = re.exec(src))) {
    out += src.slice(pos, m.index);
    const tok = /\\(if[a-zA-Z@]*|else|fi)(?![a-zA-Z@])/g;
    tok.lastIndex = m.index + m[0].length;
    let depth = 1;
    let end = src.length;
    let keepFrom = -1;
    let t: RegExpExecArray | null;
    while ((t = tok.exec(src))) {
      const name = t[1];
      if (name === 'fi') {
        depth--;
        if (depth === 0) {
          end = t.index;
          break;
        }
      } else if (name === 'else') {
        if (depth === 1 && keepFrom < 0) keepFrom = t.index + t[0].length;
      } else if (name.startsWith('if') && name !== 'ifnextchar') depth++;
    }
    if (keepFrom >= 0) out += src.slice(keepFrom, end);
    pos = Math.min(src.length, end === src.length ? end : end + 3);
    re.lastIndex = pos;
  }
  return out + src.slice(pos);
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

/** True when the (comment-stripped) text is a LaTeX root document. */
export function isRootDocument(text: string): boolean {
  return /\\documentclass\s*(\[[^\]]*\])?\s*\{/.test(text) && /\\begin\s*\{document\}/.test(text);
}

/** Warnings collected while reading a paper. */
export type Warn = (msg: string) => void;

/** True when a buffer looks binary (NUL bytes, or mostly non-text). */
export function isBinary(buf: Buffer): boolean {
  const n = Math.min(buf.length, 8192);
  let bad = 0;
  for (let i = 0; i < n; i++) {
    const b = buf[i];
    if (b === 0) return true;
    if (b < 7 || (b > 13 && b < 32)) bad++;
  }
  return n > 0 && bad / n > 0.1;
}

/** Read a text file, or undefined (with a warning) when missing, too large or binary. */
export function readTextFile(path: string, warn: Warn): string | undefined {
  let st;
  try {
    st = statSync(path);
  } catch {
    return undefined;
  }
  if (!st.isFile()) return undefined;
  if (st.size > MAX_TEX_BYTES) {
    warn(`skipped ${basename(path)}: ${st.size} bytes is over the ${MAX_TEX_BYTES} byte limit`);
    return undefined;
  }
  const buf = readFileSync(path);
  if (isBinary(buf)) {
    warn(`skipped ${basename(path)}: binary file`);
    return undefined;
  }
  return buf.toString('utf8').replace(/^\uFEFF/, '');
}

/** All `.tex` files under root (relative paths), at most `limit`, skipping symlinked dirs. */
export function listTexFiles(root: string, limit = 2000): string[] {
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
      else if (e.isFile() && /\.tex$/i.test(e.name)) out.push(relative(root, p));
    }
  };
  walk(root, 0);
  return out;
}

const INCLUDE_RE = /\\(input|include|subfile|import|subimport|subinputfrom|inputfrom|includefrom|subincludefrom)(?![a-zA-Z@])\*?/g;

/** Include targets (as written) in comment-stripped text. */
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

function scanIncludes(text: string): IncludeRef[] {
  const refs: IncludeRef[] = [];
  INCLUDE_RE.lastIndex = 0;
  let m: RegExpExecArray | null;
  while ((m = INCLUDE_RE.exec(text))) {
    const cmd = m[1];
    let i = skipWs(text, m.index + m[0].length);
    const twoArgs = /import|from/.test(cmd);
    if (twoArgs) {
      const a = readGroup(text, i);
      if (!a) continue;
      const b = readGroup(text, skipWs(text, a[1]));
      if (!b) continue;
      refs.push({ start: m.index, end: b[1], cmd, dir: a[0].trim(), file: b[0].trim() });
      INCLUDE_RE.lastIndex = b[1];
      continue;
    }
    const g = readGroup(text, i);
    if (g) {
      refs.push({ start: m.index, end: g[1], cmd, file: g[0].trim() });
      INCLUDE_RE.lastIndex = g[1];
    } else if (cmd === 'input') {
      // TeX primitive syntax: \input file.tex
      const t = /^[^\s{}\\%[]+/.exec(text.slice(i));
      if (t) {
        refs.push({ start: m.index, end: i + t[0].length, cmd, file: t[0] });
        INCLUDE_RE.lastIndex = i + t[0].length;
      }
    }
  }
  return refs;
}

function within(root: string, p: string): boolean {
  return p === root || p.startsWith(root.endsWith(sep) ? root : root + sep);
}

/** Result of {@link flattenDocument}. */
export interface FlattenResult {
  /** Comment-free, `\iffalse`-free source with all resolvable includes spliced in. */
  text: string;
  /** Files read (relative to root), main file first. */
  files: string[];
  /** Include targets that were not found (as written). */
  missing: string[];
}

/**
 * Inline every include of `mainFile` recursively. Paths are resolved like TeX does for arXiv
 * sources: relative to the main file's directory (for `\import`/`\subimport`, relative to the
 * given directory / the including file's directory); no extension → `.tex` first. Anything
 * resolving outside `root` (also through symlinks) is refused with a warning; missing files are
 * tolerated with a warning; cycles and depth > 20 stop.
 */
export function flattenDocument(root: string, mainFile: string, warn: Warn): FlattenResult {
  const rootReal = realpathSync(root);
  const mainAbs = resolve(root, mainFile);
  const baseDir = dirname(mainAbs);
  const files: string[] = [];
  const missing: string[] = [];
  const stack: string[] = [];

  const REFUSED = '\0refused';
  const resolveTarget = (fromDir: string, target: string): string | undefined => {
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
        warn(`include ${JSON.stringify(target)} resolves outside the paper root; ignored`);
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

  const expand = (absReal: string, depth: number, fileDir: string): string => {
    const raw = readTextFile(absReal, warn);
    if (raw === undefined) return '';
    files.push(relative(rootReal, absReal));
    stack.push(absReal);
    const text = stripIffalse(stripComments(raw));
    let out = '';
    let pos = 0;
    for (const ref of scanIncludes(text)) {
      out += text.slice(pos, ref.start);
      pos = ref.end;
      let dir = baseDir;
      if (ref.cmd === 'subimport' || ref.cmd.startsWith('sub')) dir = resolve(fileDir, ref.dir ?? '');
      else if (ref.dir !== undefined) dir = resolve(baseDir, ref.dir);
      const label = ref.dir ? `${ref.dir}/${ref.file}` : ref.file;
      if (/[\\#]/.test(ref.file)) continue; // macro argument (\newcommand\x[1]{\input{#1}}) or macro path
      const target = resolveTarget(dir, ref.file) ?? (dir !== baseDir ? undefined : resolveTarget(fileDir, ref.file));
      if (target === REFUSED) continue;
      if (!target) {
        if (!within(rootReal, resolve(dir, ref.file))) warn(`include ${JSON.stringify(label)} points outside the paper root; ignored`);
        else {
          missing.push(label);
          warn(`include ${JSON.stringify(label)} not found; skipped`);
        }
        continue;
      }
      if (stack.includes(target)) {
        warn(`include cycle at ${JSON.stringify(label)}; skipped`);
        continue;
      }
      if (depth >= 20) {
        warn(`include depth limit reached at ${JSON.stringify(label)}; skipped`);
        continue;
      }
      const body = expand(target, depth + 1, dirname(target));
      out += ref.cmd === 'include' ? `\n${body}\n` : body;
    }
    out += text.slice(pos);
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
  const text = expand(mainReal, 0, dirname(mainReal));
  return { text, files, missing };
}

/**
 * Find the main file under `root`: a `.tex` file with `\documentclass` and `\begin{document}`
 * outside comments. Among several: not included by another candidate, then most sectioning
 * commands (a paper beats a cover letter), then a conventional name (main, ms, paper, article,
 * arxiv), then size.
 * @returns relative path, or undefined when there is none
 */
export function findMainFile(root: string, warn: Warn = () => {}): string | undefined {
  const tex = listTexFiles(root);
  const info: { rel: string; text: string; sections: number; size: number }[] = [];
  const includedNames = new Set<string>();
  for (const rel of tex) {
    const raw = readTextFile(join(root, rel), warn);
    if (raw === undefined) continue;
    const text = stripComments(raw);
    for (const t of includeTargets(text)) includedNames.add(basename(t).replace(/\.tex$/i, ''));
    if (isRootDocument(text)) info.push({ rel, text, sections: (text.match(/\\(section|chapter)\*?\s*[{[]/g) ?? []).length, size: raw.length });
  }
  if (!info.length) return undefined;
  const conventional = (r: string) => (/^(main|ms|paper|article|arxiv|manuscript)\.tex$/i.test(basename(r)) ? 1 : 0);
  info.sort(
    (a, b) =>
      Number(includedNames.has(basename(a.rel, '.tex'))) - Number(includedNames.has(basename(b.rel, '.tex'))) ||
      b.sections - a.sections ||
      conventional(b.rel) - conventional(a.rel) ||
      b.size - a.size ||
      a.rel.localeCompare(b.rel),
  );
  if (info.length > 1) warn(`several root documents (${info.map((i) => i.rel).join(', ')}); using ${info[0].rel}`);
  return info[0].rel;
}

/** A user macro definition. */
interface MacroDef {
  nargs: number;
  body: string;
}

const PROTECTED = new Set(['section', 'subsection', 'subsubsection', 'paragraph', 'chapter', 'part', 'appendix', 'begin', 'end', 'input', 'include', 'item', 'title', 'abstract', 'documentclass', 'iffalse', 'fi', 'else']);

/**
 * Collect `\newcommand`/`\renewcommand`/`\providecommand`/`\def` definitions (no optional
 * default argument; `\def` only without parameters) and expand their uses, a bounded number of
 * rounds, so that e.g. `\pysr` becomes `\textsc{PySR}` and `\referee{x}` becomes `{x}`.
 * Definitions are removed from the output.
 */
export function expandSimpleMacros(src: string, maxRounds = 4): string {
  const defs = new Map<string, MacroDef>();
  const defRe = /\\(?:re)?(?:newcommand|providecommand)\*?\s*(?:\{\s*\\([a-zA-Z@]+)\s*\}|\\([a-zA-Z@]+))\s*(?:\[(\d)\])?\s*(\[)?|\\def\s*\\([a-zA-Z@]+)\s*(?=\{)/g;
  let text = '';
  let pos = 0;
  let m: RegExpExecArray | null;
  while ((m = defRe.exec(src))) {
    const name = m[1] ?? m[2] ?? m[5];
    const nargs = m[3] ? Number(m[3]) : 0;
    let i = m.index + m[0].length;
    if (m[4]) {
      // optional default argument: skip the definition (not expanded)
      const opt = readOptional(src, i - 1);
      if (!opt) continue;
      i = opt[1];
      const g = readGroup(src, skipWs(src, i));
      if (!g) continue;
      text += src.slice(pos, m.index);
      pos = g[1];
      defRe.lastIndex = g[1];
      continue;
    }
    const g = readGroup(src, skipWs(src, i));
    if (!g) continue;
    text += src.slice(pos, m.index);
    pos = g[1];
    defRe.lastIndex = g[1];
    if (!PROTECTED.has(name) && g[0].length < 2000) defs.set(name, { nargs, body: g[0] });
  }
  text += src.slice(pos);
  if (!defs.size) return text;
  const useRe = new RegExp(`\\\\(${[...defs.keys()].map((k) => k.replace(/[@]/g, '\\@')).sort((a, b) => b.length - a.length).join('|')})(?![a-zA-Z@])`, 'g');
  for (let round = 0; round < maxRounds; round++) {
    let changed = false;
    let out = '';
    let p = 0;
    useRe.lastIndex = 0;
    while ((m = useRe.exec(text))) {
      const def = defs.get(m[1])!;
      let i = m.index + m[0].length;
      const args: string[] = [];
      let ok = true;
      for (let a = 0; a < def.nargs; a++) {
        const j = skipWs(text, i);
        const g = readGroup(text, j);
        if (g) {
          args.push(g[0]);
          i = g[1];
        } else if (j < text.length && text[j] !== '}' && text[j] !== '\\') {
          args.push(text[j]);
          i = j + 1;
        } else {
          ok = false;
          break;
        }
      }
      if (!ok) continue;
      let body = def.body.replace(/#(\d)/g, (_s, d: string) => args[Number(d) - 1] ?? '');
      body = body.replace(/\\xspace(?![a-zA-Z])/g, '');
      // keep a word boundary after a control word used as text (\pysr is → PySR is)
      out += text.slice(p, m.index) + body + (def.nargs === 0 && /^[a-zA-Z]/.test(text[i] ?? '') ? ' ' : '');
      if (def.nargs === 0 && text.slice(i, i + 2) === '{}') i += 2;
      p = i;
      useRe.lastIndex = i;
      changed = true;
      if (out.length > 4 * src.length + 100_000) return text; // runaway expansion: give up
    }
    out += text.slice(p);
    text = out;
    if (!changed) break;
  }
  return text;
}
