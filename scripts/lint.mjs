#!/usr/bin/env node
/**
 * `npm run lint` (checks) and `npm run format` (`--fix`: rewrites). Three tools, every one run even
 * when an earlier one fails; the exit status is non-zero when any failed:
 *  - ESLint (typescript-eslint, tools/lint/eslint.config.js) over lib/, bin/, test/;
 *  - Prettier (.prettierrc.json, printWidth 160) over the TypeScript and scripts;
 *  - clang-format (.clang-format) over native/'s C++ (`--dry-run --Werror`).
 * ESLint and Prettier come from tools/lint/ (own lock file: `npm run lint:setup` installs it; see the
 * config for why it is separate); clang-format from the system (Debian package clang-format).
 */
import { spawnSync, execFileSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const fix = process.argv.includes('--fix');
const bin = (name) => join(root, 'tools', 'lint', 'node_modules', '.bin', name);
if (!existsSync(bin('eslint')) || !existsSync(bin('prettier'))) {
  process.stderr.write('lint: tools/lint is not installed; run: npm run lint:setup\n');
  process.exit(2);
}
// Tracked files and new ones not yet added (not ignored): a file is linted before its first commit.
const tracked = (...globs) =>
  execFileSync('git', ['ls-files', '--cached', '--others', '--exclude-standard', '--', ...globs], { cwd: root, encoding: 'utf8' })
    .split('\n')
    .filter(Boolean);
const run = (what, cmd, args) => {
  process.stderr.write(`lint: ${what}\n`);
  const r = spawnSync(cmd, args, { cwd: root, stdio: 'inherit' });
  if (r.error) process.stderr.write(`lint: ${what}: ${r.error.message}\n`);
  return r.status === 0;
};
const ts = tracked('lib/*.ts', 'lib/*.cts', 'bin/*.ts', 'test/*.ts', 'scripts/*.mjs', 'scripts/*.cjs', 'tools/lint/eslint.config.js');
const cpp = tracked('native/*.cc', 'native/*.h', 'native/*.cu', 'native/*.cuh');
const results = [
  run('eslint', bin('eslint'), ['--config', 'tools/lint/eslint.config.js', ...(fix ? ['--fix'] : []), 'lib', 'bin', 'test']),
  run(`prettier (${ts.length} files)`, bin('prettier'), [fix ? '--write' : '--check', '--log-level', 'warn', ...ts]),
  run(`clang-format (${cpp.length} files)`, 'clang-format', [...(fix ? ['-i'] : ['--dry-run', '--Werror']), ...cpp]),
];
process.exit(results.every(Boolean) ? 0 : 1);
