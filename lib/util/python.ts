/**
 * The Python that runs the model makers, the reference scripts and the trackers' bridges:
 * `$PYTHON`, else the venv scripts/setup.sh makes where python3 is externally managed (PEP 668:
 * Debian 12, Ubuntu 24.04 refuse pip installs outside a venv) — `<user cache dir>/python`, when it
 * is there — else `python3`. scripts/setup.sh and scripts/find-libtorch.cjs pick the same one.
 */
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { userCacheDirPath } from './cache.js';

/** The venv scripts/setup.sh makes for an externally managed python3 (`<user cache dir>/python`). */
export function setupVenvPython(env: NodeJS.ProcessEnv = process.env): string {
  return join(userCacheDirPath(env), 'python', 'bin', 'python');
}

/**
 * `$PYTHON`, else setup's venv once its packages are in (setup writes `.papergym-ready` beside
 * `bin/` after pip succeeded: a venv whose install stopped halfway is not used), else `python3`.
 * Read from `env` on each call.
 */
export function resolvePython(env: NodeJS.ProcessEnv = process.env): string {
  if (env.PYTHON) return env.PYTHON;
  const venv = setupVenvPython(env);
  return existsSync(join(venv, '..', '..', '.papergym-ready')) && existsSync(venv) ? venv : 'python3';
}
