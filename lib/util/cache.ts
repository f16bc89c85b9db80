/**
 * Per-user cache directory and atomic writes into it.
 *
 * The cache never lives inside the installed package (node_modules may be read-only, shared by
 * several users, or replaced on the next install): `$PAPERGYM_NATIVE_CACHE_DIR`, else
 * `$XDG_CACHE_HOME/papergym-native`, else `~/.cache/papergym-native` (the XDG Base Directory
 * default). Entries are made in a temporary sibling and renamed into place, so an interrupted run
 * never leaves a half-made entry that later runs would take for a complete one.
 */
import { mkdirSync, renameSync, rmSync, writeFileSync, existsSync } from 'node:fs';
import { homedir } from 'node:os';
import { dirname, join } from 'node:path';
import { randomBytes } from 'node:crypto';

/** The per-user cache root's path (see the module docstring), not created. */
export function userCacheDirPath(env: NodeJS.ProcessEnv = process.env): string {
  return env.PAPERGYM_NATIVE_CACHE_DIR || join(env.XDG_CACHE_HOME || join(homedir(), '.cache'), 'papergym-native');
}

/** The per-user cache root (see the module docstring); created on first use. */
export function userCacheDir(): string {
  const dir = userCacheDirPath();
  mkdirSync(dir, { recursive: true });
  return dir;
}

function tmpSibling(path: string): string {
  return `${path}.tmp-${process.pid}-${randomBytes(4).toString('hex')}`;
}

/** Writes `data` to `file` through a temporary sibling and a rename (readers see old or new, never half). */
export function writeFileAtomic(file: string, data: string | Uint8Array): void {
  mkdirSync(dirname(file), { recursive: true });
  const tmp = tmpSibling(file);
  try {
    writeFileSync(tmp, data);
    renameSync(tmp, file);
  } catch (e) {
    rmSync(tmp, { force: true });
    throw e;
  }
}

/**
 * Returns `dir` when it exists; otherwise runs `make(tmpDir)` to fill a temporary sibling
 * directory and renames it to `dir`. A failed `make` removes its temporary directory and rethrows,
 * so `dir` either is complete or does not exist. When another process wins the race, its `dir`
 * is kept and ours is discarded.
 */
export function ensureDirAtomic(dir: string, make: (tmpDir: string) => void): string {
  if (existsSync(dir)) return dir;
  mkdirSync(dirname(dir), { recursive: true });
  const tmp = tmpSibling(dir);
  try {
    mkdirSync(tmp);
    make(tmp);
    try {
      renameSync(tmp, dir);
    } catch (e) {
      if (!existsSync(dir)) throw e;
    }
  } finally {
    rmSync(tmp, { recursive: true, force: true });
  }
  return dir;
}
