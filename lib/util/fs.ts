/** Path checks run before any compute, so a bad path fails fast and loses nothing. */
import { accessSync, constants, mkdirSync, existsSync, statSync } from 'node:fs';
import { dirname, resolve } from 'node:path';
import { inputError } from '../errors.js';

/**
 * Ensures `file` can be written: its directory exists (created if missing) and is writable, and
 * `file` itself is not a directory. Throws an Error naming the path otherwise (e.g. a parent that
 * is a regular file).
 */
export function ensureWritableFile(file: string, what = 'output file'): void {
  const p = resolve(file);
  const dir = dirname(p);
  try {
    mkdirSync(dir, { recursive: true });
    accessSync(dir, constants.W_OK);
  } catch (e) {
    throw new Error(`${what} ${file}: directory ${dir} is not writable (${(e as NodeJS.ErrnoException).code ?? (e as Error).message})`);
  }
  if (existsSync(p) && statSync(p).isDirectory()) throw new Error(`${what} ${file} is a directory`);
}

/**
 * Ensures `dir` is an existing directory (an input: a model checkpoint, an adapter, …). Throws an
 * Error (code `ERR_PG_INPUT`) naming `what` and the path: `model directory X does not exist`,
 * `… is not a directory`, or `… cannot be read (EACCES)`.
 */
export function ensureInputDir(dir: string, what: string): void {
  let isDir: boolean;
  try {
    isDir = statSync(dir).isDirectory();
  } catch (e) {
    const code = (e as NodeJS.ErrnoException).code;
    throw inputError(
      code === 'ENOENT' || code === 'ENOTDIR' ? `${what} ${dir} does not exist` : `${what} ${dir} cannot be read (${code ?? (e as Error).message})`,
    );
  }
  if (!isDir) throw inputError(`${what} ${dir} is not a directory`);
}

/**
 * A path as a shell would read it in a config file: a leading `~` (or `~/…`) is the home
 * directory, `$NAME` and `${NAME}` are environment variables. Used for the paths inside config and
 * suite files, which no shell expands.
 * @param where names the file and key in the error (`config run.yaml: model`).
 * @throws Error naming `where` and the variable when a variable is not set (never an empty silent default).
 */
export function expandPath(p: string, where: string, env: NodeJS.ProcessEnv = process.env): string {
  const home = env.HOME ?? env.USERPROFILE;
  let out = p;
  if (out === '~' || out.startsWith('~/')) {
    if (!home) throw new Error(`${where}: ${p} starts with ~ but HOME is not set`);
    out = home + out.slice(1);
  }
  return out.replace(/\$\{([A-Za-z_][A-Za-z0-9_]*)\}|\$([A-Za-z_][A-Za-z0-9_]*)/g, (_m, a: string | undefined, b: string | undefined) => {
    const name = (a ?? b)!;
    const v = env[name];
    if (v === undefined) throw new Error(`${where}: ${p} names $${name}, which is not set`);
    return v;
  });
}
