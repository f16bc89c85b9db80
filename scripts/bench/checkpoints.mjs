/**
 * Benchmark checkpoints through the package's one checkpoint maker (lib/model/checkpoints.ts, from
 * the TypeScript build): random weights with the real Qwen3 shapes (scripts/make_random_qwen3.py,
 * seed 0, the real Qwen3 tokenizer) or the tests' tiny model (scripts/make_tiny_qwen3.py), each made
 * once under `.cache/` of the repository through a temporary directory and a rename.
 */
import { lib } from './harness.mjs';

const maker = await lib('model/checkpoints.js');
const log = (line) => process.stderr.write(`bench: ${line}\n`);

/**
 * A random-weight checkpoint of a real shape (`qwen3-1.7b`, …; `layers` keeps only the first N
 * decoder layers), dtype 'float32' | 'bfloat16' | 'float16', weights initialised on CUDA when
 * `cuda`. Dir: .cache/random-models/SHAPE-DTYPE-s0[-lN].
 */
export function randomModel({ shape, dtype, layers, cuda }) {
  return maker.randomModel({ shape, dtype, layers, cuda }, log);
}

/** The tests' tiny tied Qwen3 (fp32, seed 0), the same directory test/helpers/tiny.ts uses. */
export function tinyModel() {
  return maker.tinyModel('tiny-tied');
}
