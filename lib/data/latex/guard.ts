/**
 * The structural guard (issue 49), beside the word coverage: every sectioning-like command that a
 * paper's source uses or defines must end as a parsed heading or be accounted for with a reason.
 *
 * - LaTeX's own (`\part` … `\subsubsection`): the coverage scan checks each one against the parse.
 * - User macros and xparse commands whose body holds a sectioning command: expanded by the reader
 *   into headings; a use left unexpanded (arguments it could not read) is a problem.
 * - A class family's own commands (classes/): rewritten into LaTeX's, so they are headings.
 * - Commands that a `.cls` / `.sty` of the paper defines around a sectioning command, or that are
 *   named like a heading (`\introduction`, `\conclusions`, …) and that no rule knows: a problem
 *   naming the command (a heading this reader would lose).
 * - Text TeX does not typeset on purpose (files left out by `\includeonly`, false branches) and
 *   sections skipped as boilerplate: accounted for, with the reason.
 */
import type { ClassFamily } from './classes/index.js';
import { readGroup, readOptional, type ExcludedText } from './source.js';

/** What became of one sectioning-like command. */
export interface StructureCommand {
  command: string;
  /** Where it comes from: `latex`, `user macro`, `class <family>`, `package/class file <file>`, `unknown`. */
  origin: string;
  uses: number;
  outcome: 'heading' | 'accounted' | 'lost';
  reason: string;
}

/** The structure report of one paper. */
export interface StructureReport {
  commands: StructureCommand[];
  /** Text left out on purpose (not lost). */
  excluded: ExcludedText[];
  /** Sections read but not given to the stages, with why (boilerplate). */
  skipped: { title: string; reason: string }[];
  /** Each a structural loss, one line naming the command or file. */
  problems: string[];
}

const SECTIONING = /\\(part|chapter|section|subsection|subsubsection|@startsection)(?![a-zA-Z])/;
/** Names a journal class gives its own heading commands. */
const HEADING_NAME = /^(introduction|intro|conclusions?|summary|discussion|results|methods?|methodology|background|relatedwork|outlook|motivation|preliminaries|experiments?|evaluation|acknowledge?ments?|acks)$/i;
/** Front-matter commands that classes typeset under a heading of their own (`\keywords` → "Keywords"): accounted for, not stage text. */
const FRONT_MATTER = /^(keywords?|terms|pacs|ccsdesc|subjclass|msc|jel|classification|dedication|highlights|authorsnames|received|accepted)$/i;
const DEFINE_RE =
  /\\(?:(?:re)?newcommand|providecommand|DeclareRobustCommand|(?:New|Renew|Declare|Provide)(?:Expandable)?DocumentCommand)\*?\s*\{?\s*\\([a-zA-Z@]+)\s*\}?|\\[gex]?def\s*\\([a-zA-Z@]+)/g;

/** Commands defined in `text` whose definition body holds a sectioning command. */
export function sectioningDefinitions(text: string): string[] {
  const out = new Set<string>();
  for (const m of text.matchAll(DEFINE_RE)) {
    const name = m[1] ?? m[2];
    let i = m.index! + m[0].length;
    const ws = () => {
      while (/\s/.test(text[i] ?? '')) i++;
    };
    ws();
    if (/Document/.test(m[0])) {
      const spec = readGroup(text, i);
      if (!spec) continue;
      i = spec[1];
    } else if (m[2]) {
      const b = text.indexOf('{', i);
      if (b < 0 || b - i > 100) continue;
      i = b;
    } else
      for (;;) {
        ws();
        const o = readOptional(text, i);
        if (!o) break;
        i = o[1];
      }
    ws();
    const body = readGroup(text, i);
    if (body && SECTIONING.test(body[0]) && !/^(part|chapter|section|subsection|subsubsection|paragraph|subparagraph)$/.test(name)) out.add(name);
  }
  return [...out];
}

const uses = (body: string, name: string) => body.match(new RegExp(`\\\\${name.replace(/@/g, '\\@')}(?![a-zA-Z@])`, 'g'))?.length ?? 0;

/** Inputs of {@link checkStructure}. */
export interface StructureInput {
  /** Flattened source before macro expansion (definitions in place). */
  flat: string;
  /** Document body after expansion and the class family's rewrite (what the structure reader saw). */
  body: string;
  family?: ClassFamily;
  documentClass?: string;
  /** `.cls` / `.sty` files of the paper: name → text. */
  localFiles: Map<string, string>;
  excluded: ExcludedText[];
  skipped: { title: string; reason: string }[];
}

/** Build the {@link StructureReport} of a paper (see the module doc). */
export function checkStructure(inp: StructureInput): StructureReport {
  const commands: StructureCommand[] = [];
  const problems: string[] = [];
  const flatBody = inp.flat.slice(Math.max(0, inp.flat.search(/\\begin\s*\{document\}/)));
  const known = new Set<string>();
  for (const name of sectioningDefinitions(inp.flat)) {
    known.add(name);
    const n = uses(flatBody, name);
    const left = uses(inp.body, name);
    if (left) {
      commands.push({ command: name, origin: 'user macro', uses: n, outcome: 'lost', reason: `${left} use(s) not expanded (arguments not readable)` });
      problems.push(`\\${name} (a user macro around a sectioning command) was not expanded at ${left} use(s); its heading(s) may be lost`);
    } else commands.push({ command: name, origin: 'user macro', uses: n, outcome: n ? 'heading' : 'accounted', reason: n ? 'expanded into headings' : 'defined, never used' });
  }
  for (const h of inp.family?.headings ?? []) {
    known.add(h.command);
    const n = uses(flatBody, h.command);
    if (n) commands.push({ command: h.command, origin: `class ${inp.family!.name}`, uses: n, outcome: 'heading', reason: `the class's ${h.level} "${h.title}"` });
  }
  for (const [file, text] of inp.localFiles) {
    for (const name of sectioningDefinitions(text)) {
      if (known.has(name)) continue;
      known.add(name);
      const n = uses(inp.body, name);
      if (!n) continue;
      if (FRONT_MATTER.test(name)) {
        commands.push({ command: name, origin: `package/class file ${file}`, uses: n, outcome: 'accounted', reason: 'front matter (keywords, classification codes): not stage text' });
        continue;
      }
      commands.push({ command: name, origin: `package/class file ${file}`, uses: n, outcome: 'lost', reason: 'defined around a sectioning command in a file this reader does not expand' });
      problems.push(`\\${name} is a sectioning command defined in ${file}, which this reader does not know; ${n} heading(s) lost`);
    }
  }
  // commands named like a heading that no rule knows (an unknown class's \introduction)
  const seen = new Map<string, number>();
  for (const m of inp.body.matchAll(/(?:^|\n)[ \t]*\\([a-zA-Z]+)\*?(?=[ \t]*(?:\[|\{|\n|$))/g)) {
    if (HEADING_NAME.test(m[1]) && !known.has(m[1])) seen.set(m[1], (seen.get(m[1]) ?? 0) + 1);
  }
  // a command named like a heading that a file of the paper defines without any sectioning command is not one
  const definedLocally = new Set([...inp.localFiles.values()].flatMap((t) => [...t.matchAll(DEFINE_RE)].map((m) => m[1] ?? m[2])));
  for (const [name, n] of seen) {
    if (definedLocally.has(name)) continue;
    const cls = inp.documentClass ? `class ${inp.documentClass}` : 'its class';
    commands.push({ command: name, origin: 'unknown', uses: n, outcome: 'lost', reason: `not a command of LaTeX or a known class family (${cls})` });
    problems.push(`\\${name} looks like a sectioning command of ${cls}, which this reader does not know; ${n} heading(s) may be lost`);
  }
  return { commands, excluded: inp.excluded, skipped: inp.skipped, problems };
}

/** `structure: 14 heading(s); \introduction ×1 → heading (class copernicus: …); excluded: rebuttal (not in \includeonly{…}, 120 words); skipped: "Funding" (funding)`. */
export function formatStructure(r: StructureReport, headings: number): string {
  const parts = [`structure: ${headings} heading(s)`];
  for (const c of r.commands) parts.push(`\\${c.command} ×${c.uses} → ${c.outcome} (${c.origin}: ${c.reason})`);
  for (const e of r.excluded) parts.push(`excluded: ${e.what} (${e.reason}, ${e.words} words)`);
  for (const k of r.skipped) parts.push(`skipped: "${k.title}" (${k.reason})`);
  return parts.join('; ');
}
