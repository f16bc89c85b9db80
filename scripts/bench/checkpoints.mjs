/**
 * Benchmark checkpoints, made once and cached under `.cache/` of the repository: random weights
 * with the real Qwen3 shapes (scripts/make_random_qwen3.py, seed 0, the real Qwen3 tokenizer) or
 * the tests' tiny model (scripts/make_tiny_qwen3.py). Each is written to `DIR.tmp-PID` and renamed
 * into place, so an interrupted make leaves nothing that looks finished; a dir holding
 * `fingerprint.json` is reused.
 */
import { execFileSync } from 'node:child_process';
import { existsSync, mkdirSync, renameSync, rmSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

export const root = resolve(dirname(fileURLToPath(import.meta.url)), '..', '..');
const python = process.env.PYTHON ?? 'python3';

/** Runs `script` (under scripts/) with `--out TMP ...args` unless `dir` exists; returns `dir`. */
export function madeOnce(dir, script, args) {
  if (existsSync(join(dir, 'fingerprint.json'))) return dir;
  mkdirSync(dirname(dir), { recursive: true });
  const tmp = `${dir}.tmp-${process.pid}`;
  rmSync(tmp, { recursive: true, force: true });
  const t0 = Date.now();
  process.stderr.write(`bench: making ${dir} …\n`);
  execFileSync(python, [join(root, 'scripts', script), '--out', tmp, ...args], { stdio: ['ignore', 'ignore', 'inherit'] });
  renameSync(tmp, dir);
  process.stderr.write(`bench: made ${dir} in ${((Date.now() - t0) / 1000).toFixed(0)} s\n`);
  return dir;
}

/**
 * A random-weight checkpoint of a real shape (`qwen3-1.7b`, …; `layers` keeps only the first N
 * decoder layers), dtype 'float32' | 'bfloat16' | 'float16', weights initialised on CUDA when
 * `cuda`. Dir: .cache/random-models/SHAPE-DTYPE-s0[-lN].
 */
export function randomModel({ shape, dtype, layers, cuda }) {
  const tag = `${shape}-${dtype}-s0${layers ? `-l${layers}` : ''}`;
  return madeOnce(join(root, '.cache', 'random-models', tag), 'make_random_qwen3.py', ['--shape', shape, '--dtype', dtype, '--seed', '0', '--device', cuda ? 'cuda' : 'cpu', ...(layers ? ['--layers', String(layers)] : [])]);
}

/** The tests' tiny tied Qwen3 (fp32, seed 0), as test/helpers/tiny.ts caches it. */
export function tinyModel() {
  return madeOnce(join(root, '.cache', 'tiny-models', 'tiny-tied-s0-float32-x1'), 'make_tiny_qwen3.py', ['--name', 'tiny-tied', '--seed', '0', '--dtype', 'float32', '--shards', '1']);
}
