/** Argument and stream handling of the CLI entry, kept apart so tests can call it. */

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

/**
 * `--output_dir` → `--output-dir`: TRL's command line (transformers HfArgumentParser) takes a flag
 * with underscores or dashes alike, and so does this one (no flag here has an underscore). Values
 * and everything after `--` are left alone.
 */
export function dashFlags(args: string[]): string[] {
  const end = args.indexOf('--');
  return args.map((a, i) => ((end < 0 || i < end) && /^--[^=]*_/.test(a) ? a.replace(/^--([^=]*)/, (_m, f: string) => `--${f.replace(/_/g, '-')}`) : a));
}
