/**
 * The size bounds of a model's config.json (issue 38 item 2, issue 50 item 1): every command that
 * loads a model (lib/model/decoder.ts loadModel) checks the size fields before the addon allocates
 * anything, and `train` also checks that the weights can hold what the config describes.
 */
import { closeSync, openSync, readFileSync, readSync, readdirSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { inputError } from '../errors.js';

/**
 * Largest values of the size fields of a model's config.json that any command loads. Far above any
 * released decoder (Qwen3-235B: 94 layers, hidden 4096; Llama-3.1-405B: 126 layers, hidden 16384,
 * vocab 128256; context 1M tokens at most): a larger value is a corrupt or hostile file, refused
 * before the addon reads it (1e8 layers would allocate gigabytes before any other check).
 */
export const MODEL_CONFIG_LIMITS: Record<string, number> = {
  num_hidden_layers: 1024,
  hidden_size: 65536,
  intermediate_size: 1 << 20,
  num_attention_heads: 1024,
  num_key_value_heads: 1024,
  head_dim: 4096,
  vocab_size: 1 << 22,
  max_position_embeddings: 1 << 24,
};

/** Bytes per element of the safetensors dtypes (the format's spec, huggingface/safetensors README). */
export const ELEMENT_BYTES: Record<string, number> = {
  F64: 8,
  I64: 8,
  U64: 8,
  F32: 4,
  I32: 4,
  U32: 4,
  F16: 2,
  BF16: 2,
  I16: 2,
  U16: 2,
  I8: 1,
  U8: 1,
  BOOL: 1,
  F8_E4M3: 1,
  F8_E5M2: 1,
};

/**
 * The smallest bytes per element among the tensors of a safetensors file, read from its header
 * alone (8-byte little-endian length, JSON header); 1 when the header cannot be read (a floor).
 */
function smallestElementBytes(file: string): number {
  let fd: number | undefined;
  try {
    fd = openSync(file, 'r');
    const head = Buffer.alloc(8);
    readSync(fd, head, 0, 8, 0);
    const len = Number(head.readBigUInt64LE(0));
    if (!(len > 0 && len < 100e6)) return 1;
    const hb = Buffer.alloc(len);
    readSync(fd, hb, 0, len, 8);
    const h = JSON.parse(hb.toString('utf8')) as Record<string, { dtype?: string }>;
    const sizes = Object.entries(h)
      .filter(([k]) => k !== '__metadata__')
      .map(([, t]) => ELEMENT_BYTES[String(t?.dtype)] ?? 1);
    return sizes.length ? Math.min(...sizes) : 1;
  } catch {
    return 1;
  } finally {
    if (fd !== undefined) closeSync(fd);
  }
}

/**
 * Checks the size fields of `<dir>/config.json` ({@link MODEL_CONFIG_LIMITS}: positive integers
 * within the limits) and that the weights can hold what the config describes. A lower bound of the
 * parameters, `vocab × hidden` (the embedding) + `layers × (3 × hidden × intermediate` (MLP) `+ 2 ×
 * hidden × heads × head_dim + 2 × hidden × kv_heads × head_dim)` (attention projections), times the
 * smallest bytes per element among the tensors of the first weights file (its header), must not
 * exceed the bytes of the `*.safetensors` files. `weights: false` checks the sizes only (and
 * leaves an unreadable config.json to the loader, which names it).
 * @throws Error (`ERR_PG_INPUT`) naming the file and the field.
 */
export function checkModelConfigSizes(dir: string, opts: { weights?: boolean } = {}): void {
  const path = join(dir, 'config.json');
  let c: Record<string, unknown>;
  try {
    c = JSON.parse(readFileSync(path, 'utf8')) as Record<string, unknown>;
  } catch (e) {
    // Sizes only (the loader's pre-check): a missing or unparsable config.json is the loader's to name.
    if (opts.weights === false) return;
    throw inputError(`${path}: ${(e as Error).message}`);
  }
  if (!c || typeof c !== 'object') {
    if (opts.weights === false) return;
    throw inputError(`${path}: not a JSON object`);
  }
  for (const [k, max] of Object.entries(MODEL_CONFIG_LIMITS)) {
    const v = c[k];
    if (v === undefined || v === null) continue;
    if (typeof v !== 'number' || !Number.isInteger(v) || v < 1 || v > max) {
      throw inputError(`${path}: ${k} is ${JSON.stringify(v)}, not an integer in [1, ${max}] (a corrupt or hand-edited config; refused before loading)`);
    }
  }
  // `weights: false` (every loader, lib/model/decoder.ts): the sizes alone; a truncated weights file is named by the loader.
  if (opts.weights === false) return;
  const n = (k: string, d = 0) => (typeof c[k] === 'number' ? (c[k] as number) : d);
  const layers = n('num_hidden_layers');
  const hidden = n('hidden_size');
  const heads = n('num_attention_heads', 1);
  const headDim = n('head_dim', hidden / heads);
  const params =
    n('vocab_size') * hidden +
    layers * (3 * hidden * n('intermediate_size') + 2 * hidden * heads * headDim + 2 * hidden * n('num_key_value_heads', heads) * headDim);
  const files = readdirSync(dir)
    .filter((f) => f.endsWith('.safetensors'))
    .sort();
  let bytes = 0;
  for (const f of files) bytes += statSync(join(dir, f)).size;
  const need = files.length ? params * smallestElementBytes(join(dir, files[0]!)) : 0;
  if (bytes > 0 && need > bytes * 1.01) {
    throw inputError(
      `model ${dir}: its weights (*.safetensors) hold only ${bytes} bytes, but ${path} (num_hidden_layers ${layers}, hidden_size ${hidden}, …) describes at least ${params.toExponential(2)} parameters, ${need.toExponential(2)} bytes: config.json does not match the weights, or a weights file is truncated`,
    );
  }
}
