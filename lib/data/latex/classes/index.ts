/**
 * The registry of journal class families (docs/design.md §9 "Extending"): one descriptor file per
 * family, one entry in {@link CLASS_FAMILIES}. {@link classFamilyOf} picks a paper's family from
 * its `\documentclass` (or a journal package); {@link applyClassFamily} rewrites the family's own
 * commands into LaTeX's (`\introduction[T]` → `\section{T}`, A&A's five-part `\abstract` → one
 * abstract environment with its run-in labels) so that the one structure reader handles them.
 */
import { Registry } from '../../../util/registry.js';
import { readGroup, readOptional } from '../source.js';
import { aanda } from './aanda.js';
import { acmart } from './acmart.js';
import { copernicus } from './copernicus.js';
import { elsarticle } from './elsarticle.js';
import { ieeetran } from './ieeetran.js';
import { jhep } from './jhep.js';
import { revtex } from './revtex.js';
import { springer } from './springer.js';
import type { ClassFamily } from './types.js';

export type { ClassFamily, ClassHeading, PartedAbstract } from './types.js';

export const CLASS_FAMILIES = new Registry<ClassFamily>('class family', (f) => f.name).register(copernicus, aanda, jhep, revtex, ieeetran, acmart, springer, elsarticle);

/** The family of a (comment-free) source: by `\documentclass{…}`, else by a `\usepackage` of a journal style. */
export function classFamilyOf(text: string): ClassFamily | undefined {
  const cls = /\\document(?:class|style)\s*(?:\[[^\]]*\])?\s*\{\s*([^}\s]*)\s*\}/.exec(text)?.[1];
  const fams = CLASS_FAMILIES.values();
  const byClass = cls && fams.find((f) => f.classes.includes(cls));
  if (byClass) return byClass;
  const pkgs = new Set([...text.matchAll(/\\usepackage\s*(?:\[[^\]]*\])?\s*\{([^}]*)\}/g)].flatMap((m) => m[1].split(',').map((p) => p.trim())));
  return fams.find((f) => f.packages?.some((p) => pkgs.has(p)));
}

/** Every command name any registered family treats as a heading (for the structure guard). */
export function familyHeadingCommands(f: ClassFamily | undefined): Set<string> {
  return new Set((f?.headings ?? []).map((h) => h.command));
}

const skipWs = (s: string, i: number) => {
  while (i < s.length && /\s/.test(s[i])) i++;
  return i;
};

/**
 * Rewrite a family's commands in flattened, macro-expanded LaTeX: headings (`\introduction`,
 * `\conclusions[Summary]` → `\section{…}`; statements such as `\codeavailability{text}` →
 * `\section*{Code availability} text`), a multi-part abstract → `\begin{abstract}` with each
 * part after its label, and the class's simple macros (`\IEEEPARstart{T}{his}` → `This`).
 */
export function applyClassFamily(text: string, f: ClassFamily | undefined): string {
  if (!f) return text;
  const heads = new Map((f.headings ?? []).map((h) => [h.command, h]));
  const names = [...heads.keys(), ...Object.keys(f.macros ?? {}), ...(f.abstract ? [f.abstract.command] : [])];
  if (!names.length) return text;
  const re = new RegExp(`\\\\(${names.join('|')})(?![a-zA-Z@])`, 'g');
  let out = '';
  let pos = 0;
  let m: RegExpExecArray | null;
  while ((m = re.exec(text))) {
    const name = m[1];
    let i = m.index + m[0].length;
    let rep: string | undefined;
    const h = heads.get(name);
    if (h && h.form === 'heading') {
      const o = readOptional(text, skipWs(text, i));
      const title = o ? o[0] : h.title;
      if (o) i = o[1];
      rep = `\\${h.level}${h.starred ? '*' : ''}{${title}}`;
    } else if (h && h.form === 'title') {
      const g = readGroup(text, skipWs(text, i));
      if (g) {
        rep = `\\${h.level}${h.starred ? '*' : ''}{${g[0]}}`;
        i = g[1];
      }
    } else if (h) {
      const g = readGroup(text, skipWs(text, i));
      if (g) {
        rep = `\\${h.level}${h.starred ? '*' : ''}{${h.title}}\n${g[0]}\n`;
        i = g[1];
      }
    } else if (f.abstract && name === f.abstract.command) {
      const parts: string[] = [];
      let j = i;
      for (let k = 0; k < f.abstract.parts.length; k++) {
        const g = readGroup(text, skipWs(text, j));
        if (!g) break;
        parts.push(g[0]);
        j = g[1];
      }
      if (parts.length > 1) {
        rep = `\\begin{abstract}\n${parts.map((p, k) => (p.trim() ? `\\textit{${f.abstract!.parts[k]}} ${p.trim()}` : '')).filter(Boolean).join('\n\n')}\n\\end{abstract}`;
        i = j;
      }
    } else {
      const mac = f.macros![name];
      const args: string[] = [];
      let j = i;
      for (let k = 0; k < mac.nargs; k++) {
        const g = readGroup(text, skipWs(text, j));
        if (!g) break;
        args.push(g[0]);
        j = g[1];
      }
      if (args.length === mac.nargs) {
        rep = mac.body.replace(/#([1-9])/g, (_, d: string) => args[Number(d) - 1]);
        i = j;
      }
    }
    if (rep === undefined) continue;
    out += text.slice(pos, m.index) + rep;
    pos = i;
    re.lastIndex = i;
  }
  return out + text.slice(pos);
}
