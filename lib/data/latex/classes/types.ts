/**
 * Journal class families (issue 49): the sectioning and abstract commands a class defines beyond
 * LaTeX's own, so that the reader sees them as TeX typesets them. One descriptor per family,
 * registered in ./index.ts ({@link CLASS_FAMILIES}); the reader rewrites a family's commands into
 * the standard ones (`\section`, `\begin{abstract}`) before the structure is read.
 */
import type { SectionLevel } from '../structure.js';

/** A sectioning command of a class. */
export interface ClassHeading {
  /** Command name without the backslash (`introduction`). */
  command: string;
  level: SectionLevel;
  /** The heading the class prints (`Introduction`); an optional argument `[…]` replaces it. */
  title: string;
  /**
   * `heading`: `\cmd` or `\cmd[title]`, its text follows (Copernicus' `\introduction`);
   * `statement`: `\cmd{text}`, the text is the argument (Copernicus' `\codeavailability{…}`);
   * `title`: `\cmd{title}`, its text follows (Springer Nature's `\bmhead{…}`).
   */
  form: 'heading' | 'statement' | 'title';
  /** Printed unnumbered (`\section*`). */
  starred?: boolean;
}

/** A multi-part abstract command (`\abstract{context}{aims}{methods}{results}{conclusions}`). */
export interface PartedAbstract {
  command: string;
  /** Run-in label of each part as printed, in order. */
  parts: string[];
}

/** A family of document classes (or a journal style package) with commands of its own. */
export interface ClassFamily {
  /** Registry key (`copernicus`). */
  name: string;
  /** `\documentclass` names that select it. */
  classes: string[];
  /** Packages (`\usepackage{jheppub}`) that select it on a standard class. */
  packages?: string[];
  /** The family's own sectioning commands. */
  headings?: ClassHeading[];
  /** A multi-part abstract. */
  abstract?: PartedAbstract;
  /** Environments the class prints with a heading of their own that are boilerplate (acknowledgements): accounted for by the structure guard, not stage text. */
  boilerplateEnvironments?: Record<string, string>;
  /** Commands of the class whose typeset form is plain LaTeX (`\IEEEPARstart{T}{his}` → `This`), expanded like user macros. */
  macros?: Record<string, { nargs: number; body: string }>;
  /** Where the class is documented (author guide / class file). */
  source: string;
}
