/**
 * The one maker of generated checkpoints: the tests' tiny random models (scripts/make_tiny_qwen3.py:
 * Qwen3, Qwen2.5 and Llama-3 architectures, see its docstring), the benchmarks' random-weight
 * checkpoints of real Qwen3 shapes (scripts/make_random_qwen3.py) and the embedded default model of
 * `train` (lib/train/run.ts). Each is made once by the Python maker into a temporary sibling and
 * renamed into place (lib/util/cache.ts ensureDirAtomic); a directory without `fingerprint.json`
 * (the maker's last file) is not trusted and is made again.
 */
import { execFileSync } from 'node:child_process';
import { existsSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { packageRoot } from '../native.js';
import { ensureDirAtomic } from '../util/cache.js';
import { resolvePython } from '../util/python.js';

/** The Python that runs the makers and the reference scripts (lib/util/python.ts: `$PYTHON`, else setup's venv, else python3). */
export const python = resolvePython();

/**
 * Returns `dir`, first running `python scripts/SCRIPT --out TMP ...args` into it when it holds no
 * `fingerprint.json`. `log` gets a line before and after a make.
 * @throws Error naming the script and the requirement (torch + transformers) when the maker fails.
 */
export function makeCheckpointOnce(dir: string, script: string, args: string[], log?: (line: string) => void): string {
  if (existsSync(join(dir, 'fingerprint.json'))) return dir;
  rmSync(dir, { recursive: true, force: true });
  const t0 = Date.now();
  log?.(`making ${dir} …`);
  ensureDirAtomic(dir, (tmp) => {
    try {
      execFileSync(python, [join(packageRoot, 'scripts', script), '--out', tmp, ...args], { stdio: ['ignore', 'ignore', 'inherit'] });
    } catch (e) {
      throw new Error(
        `could not make ${dir} with ${python} scripts/${script} (needs torch + transformers: pip install -r scripts/requirements.txt): ${(e as Error).message}`,
      );
    }
  });
  log?.(`made ${dir} in ${((Date.now() - t0) / 1000).toFixed(0)} s`);
  return dir;
}

/** Architectures and config forms of scripts/make_tiny_qwen3.py. */
export type TinyName = 'tiny-tied' | 'tiny-untied' | 'tiny-nohd' | 'tiny-yarn' | 'tiny-qwen25' | 'tiny-llama3' | 'tiny-llama-bias' | 'tiny-wide';

/** Options of {@link tinyModel} (each maps to a maker flag). */
export interface TinyOptions {
  /** Weight seed (default 0). */
  seed?: number;
  dtype?: 'float32' | 'bfloat16' | 'float16';
  /** Safetensors shards (default 1; > 1 writes model.safetensors.index.json). */
  shards?: number;
  keepTiedLmHead?: boolean;
  /** How config.json states RoPE scaling (tiny-yarn, tiny-llama3): transformers 5 `rope_parameters` (default) or 4 `rope_scaling`. */
  ropeKey?: 'rope_parameters' | 'rope_scaling';
  /** Untied names only: the maker's `--yes-no-readout` (yes/no answer tokens on top after the non-thinking generation prompt, then <|im_end|>). */
  yesNoReadout?: boolean;
  /** Tokenizer directory the maker copies (default: the maker's own choice). */
  tokenizerDir?: string;
}

/**
 * A tiny random checkpoint, made on first use (~10 s) under `cacheRoot` (default
 * `<package>/.cache/tiny-models`, gitignored) in `<name>-s<seed>-<dtype>-x<shards>[-variant]`.
 */
export function tinyModel(name: TinyName, opts: TinyOptions = {}, cacheRoot = join(packageRoot, '.cache', 'tiny-models')): string {
  const seed = opts.seed ?? 0;
  const dtype = opts.dtype ?? 'float32';
  const shards = opts.shards ?? 1;
  const ropeKey = opts.ropeKey ?? 'rope_parameters';
  const tag = `${name}-s${seed}-${dtype}-x${shards}${opts.keepTiedLmHead ? '-lmhead' : ''}${ropeKey === 'rope_scaling' ? '-ropescaling' : ''}${opts.yesNoReadout ? '-yesno' : ''}`;
  const args = ['--name', name, '--seed', String(seed), '--dtype', dtype, '--shards', String(shards)];
  if (opts.keepTiedLmHead) args.push('--keep-tied-lm-head');
  if (ropeKey !== 'rope_parameters') args.push('--rope-key', ropeKey);
  if (opts.yesNoReadout) args.push('--yes-no-readout');
  if (opts.tokenizerDir) args.push('--tokenizer-dir', opts.tokenizerDir);
  return makeCheckpointOnce(join(cacheRoot, tag), 'make_tiny_qwen3.py', args);
}

/** Options of {@link randomModel}. */
export interface RandomModelOptions {
  /** A real shape of scripts/make_random_qwen3.py: `qwen3-0.6b`, `qwen3-1.7b`, `qwen3-4b`, `qwen3-8b`. */
  shape: string;
  dtype: 'float32' | 'bfloat16' | 'float16';
  /** Keep only the first N decoder layers (smoke runs). */
  layers?: number | string;
  /** Initialise the weights on CUDA (faster for the large shapes). */
  cuda?: boolean;
}

/**
 * Random weights (seed 0) with a real Qwen3 shape and the real Qwen3 tokenizer, made once under
 * `<package>/.cache/random-models/<shape>-<dtype>-s0[-l<layers>]`.
 */
export function randomModel(o: RandomModelOptions, log?: (line: string) => void): string {
  const tag = `${o.shape}-${o.dtype}-s0${o.layers ? `-l${o.layers}` : ''}`;
  const args = [
    '--shape',
    o.shape,
    '--dtype',
    o.dtype,
    '--seed',
    '0',
    '--device',
    o.cuda ? 'cuda' : 'cpu',
    ...(o.layers ? ['--layers', String(o.layers)] : []),
  ];
  return makeCheckpointOnce(join(packageRoot, '.cache', 'random-models', tag), 'make_random_qwen3.py', args, log);
}
