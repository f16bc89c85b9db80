/** Argument and stream handling of the CLI entry, kept apart so tests can call it. */

import { unknownFlagHints } from '../lib/config/trl.js';

/** A number literal that yargs would otherwise read as short flags (`-1e-5` → `-1 -e …`). */
const NEGATIVE_NUMBER = /^-(\d+\.?\d*|\.\d+)(e[+-]?\d+)?$/i;

/**
 * Joins `--flag -1e-5` into `--flag=-1e-5` so a negative number (plain, decimal or in exponent
 * form) reaches the flag as its value and is range-checked there, instead of being parsed as the
 * short flags `-1`, `-e`. Other arguments are returned unchanged.
 */
export function joinNegativeNumbers(args: string[]): string[] {
  const out: string[] = [];
  for (let i = 0; i < args.length; i++) {
    const a = args[i]!;
    const next = args[i + 1];
    if (/^--[^=]+$/.test(a) && next !== undefined && NEGATIVE_NUMBER.test(next)) {
      out.push(`${a}=${next}`);
      i += 1;
    } else {
      out.push(a);
    }
  }
  return out;
}

/** On EPIPE (the reader closed the pipe: `| head`), exit 0 without a stack trace; other errors are rethrown. */
export function quietOnEpipe(stream: NodeJS.WriteStream): void {
  stream.on('error', (e: NodeJS.ErrnoException) => {
    if (e.code === 'EPIPE') process.exit(0);
    throw e;
  });
}

/** What {@link repeatedFlag} needs of a setting (lib/config/schema.ts Setting). */
interface FlagSpec {
  flag: string;
  type: string;
  repeatable?: boolean;
  alias?: string;
}

/**
 * The first scalar flag given more than once in `args` (before a bare `--`), as the error to print:
 * `--opsd-steps: given more than once (2, 1)`; undefined when none is. yargs-parser 21 would
 * merge such a repeat (a later value of exactly 1 is read as a count increment: `--opsd-steps 2
 * --opsd-steps 1` became 3), so repeats are refused from the raw arguments, before parsing.
 * Repeatable settings (`--prompt a --prompt b`) and booleans (the last wins) are not checked; a
 * flag is matched by its name, its camelCase form or its short alias, with `--flag=v` or `--flag v`.
 */
export function repeatedFlag(args: readonly string[], settings: readonly FlagSpec[]): string | undefined {
  const kebab = (s: string) => s.replace(/[A-Z]/g, (c) => `-${c.toLowerCase()}`);
  const seen = new Map<string, string[]>();
  for (let i = 0; i < args.length; i++) {
    const a = args[i]!;
    if (a === '--') break;
    const m = /^(--?)([^=]+)(=(.*))?$/s.exec(a);
    if (!m) continue;
    const name = m[1] === '--' ? kebab(m[2]!) : m[2]!;
    const s = settings.find((x) => (m[1] === '--' ? x.flag === name : x.alias === name));
    if (!s || s.repeatable || s.type === 'boolean') continue;
    let value = m[4];
    if (value === undefined && i + 1 < args.length && !args[i + 1]!.startsWith('--')) value = args[++i]!;
    const vals = seen.get(s.flag) ?? [];
    vals.push(value ?? '');
    seen.set(s.flag, vals);
  }
  for (const [flag, vals] of seen) {
    if (vals.length < 2) continue;
    const shown = vals.map((v) => (v.trim() !== '' && Number.isFinite(Number(v)) ? String(Number(v)) : JSON.stringify(v)));
    return `--${flag}: given more than once (${shown.join(', ')})`;
  }
  return undefined;
}

/**
 * `--output_dir` → `--output-dir`: TRL's command line (transformers HfArgumentParser) takes a flag
 * with underscores or dashes alike, and so does this one (no flag here has an underscore). Values
 * and everything after `--` are left alone.
 */
export function dashFlags(args: string[]): string[] {
  const end = args.indexOf('--');
  return args.map((a, i) => ((end < 0 || i < end) && /^--[^=]*_/.test(a) ? a.replace(/^--([^=]*)/, (_m, f: string) => `--${f.replace(/_/g, '-')}`) : a));
}

/**
 * "did you mean `--lora-alpha` or `--reward-alpha`?" for a flag name that is the last word(s) of
 * one or more of `settings`' flags (`alpha`, `steps`, `lr`: the section's prefix left out);
 * undefined when it is none.
 */
export function suffixFlagHint(name: string, settings: readonly FlagSpec[]): string | undefined {
  const said = settings.filter((s) => s.flag.endsWith(`-${name}`)).map((s) => `\`--${s.flag}\``);
  if (!said.length) return undefined;
  return `did you mean ${said.length > 1 ? `${said.slice(0, -1).join(', ')} or ${said[said.length - 1]}` : said[0]}?`;
}

/** {@link suffixFlagHint} for each unknown flag of `args` (lib/config/trl.ts unknownFlagHints: before `--`, one line each). */
export function suffixFlagHints(args: readonly string[], settings: readonly FlagSpec[]): string[] {
  return unknownFlagHints(args, settings, (name) => suffixFlagHint(name, settings));
}
