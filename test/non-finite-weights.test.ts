/**
 * Non-finite weights (issue 38 item 8): a model or adapter tensor holding NaN or ±Inf is refused at
 * load with an Error (code ERR_PG_INPUT) naming the file and the tensor, or loaded with a process
 * warning (code PG_NON_FINITE_WEIGHTS) naming them when allowed (`allowNonFinite`, the CLI's
 * `--allow-non-finite-weights`). The check runs on the loaded tensor (native/io/finite.h), so a
 * finite float32 value that overflows float16 counts as well. The checkpoints are real tiny
 * checkpoints (lib/util/checkpoints.ts) with one value rewritten in their safetensors data.
 */
import { expect } from 'chai';
import { spawnSync } from 'node:child_process';
import { copyFileSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { loadModel } from '../lib/model/qwen3.js';
import { Policy } from '../lib/model/policy.js';
import { packageRoot } from '../lib/native.js';
import { tinyModel } from './helpers/tiny.js';

interface StEntry {
  dtype: string;
  shape: number[];
  data_offsets: [number, number];
}

/**
 * Rewrites element `index` of tensor `tensor` in safetensors file `path` to `value` (in the
 * tensor's stored dtype: F32, BF16 or F16), leaving everything else byte for byte.
 */
function poke(path: string, tensor: string, value: number, index = 0): void {
  const buf = readFileSync(path);
  const n = Number(buf.readBigUInt64LE(0));
  const header = JSON.parse(buf.subarray(8, 8 + n).toString('utf8')) as Record<string, StEntry>;
  const e = header[tensor];
  if (!e) throw new Error(`${path}: no tensor ${tensor}`);
  const size = e.dtype === 'F32' ? 4 : 2;
  const at = 8 + n + e.data_offsets[0] + index * size;
  if (e.dtype === 'F32') buf.writeFloatLE(value, at);
  else {
    const f = Buffer.alloc(4);
    f.writeFloatLE(value, 0);
    const bits = f.readUInt32LE(0);
    if (e.dtype === 'BF16') buf.writeUInt16LE(bits >>> 16, at);
    else if (Number.isNaN(value)) buf.writeUInt16LE(0x7e00, at);
    else buf.writeUInt16LE(value > 0 ? 0x7c00 : 0xfc00, at); // F16: only NaN / ±Inf are poked
  }
  writeFileSync(path, buf);
}

/** Runs `fn` and returns the process warnings it emitted with code PG_NON_FINITE_WEIGHTS. */
async function warningsOf(fn: () => Promise<void>): Promise<string[]> {
  const seen: string[] = [];
  const on = (w: Error & { code?: string }) => {
    if (w.code === 'PG_NON_FINITE_WEIGHTS') seen.push(w.message);
  };
  process.on('warning', on);
  try {
    await fn();
    await new Promise((r) => setImmediate(r)); // warnings are emitted on the next tick
  } finally {
    process.off('warning', on);
  }
  return seen;
}

async function loadError(p: Promise<unknown>): Promise<Error & { code?: string }> {
  try {
    const m = (await p) as { dispose?: () => void } | undefined;
    m?.dispose?.();
  } catch (e) {
    return e as Error & { code?: string };
  }
  throw new Error('expected the load to fail');
}

describe('non-finite weights are refused at load (or warned when allowed)', function () {
  this.timeout(120000);
  let work: string;
  let adir: string;
  const key = 'base_model.model.model.layers.0.mlp.down_proj.lora_A.weight';
  /** A copy of a tiny checkpoint, every file but the weights shared by a copy. */
  const copyOf = (src: string, name: string): string => {
    const dst = join(work, name);
    rmSync(dst, { recursive: true, force: true });
    mkdirSync(dst);
    for (const f of readdirSync(src)) copyFileSync(join(src, f), join(dst, f));
    return dst;
  };

  before(async () => {
    work = mkdtempSync(join(tmpdir(), 'pg-nonfinite-'));
    // A real adapter (saved by saveAdapter) with one NaN written into a lora_A.
    adir = join(work, 'nan-adapter');
    {
      using m = await loadModel(tinyModel('tiny-tied'));
      m.addLora({ r: 2, alpha: 4, targetModules: ['q_proj', 'down_proj'] });
      await m.saveAdapter(adir);
    }
    poke(join(adir, 'adapter_model.safetensors'), key, NaN, 5);
  });
  after(() => rmSync(work, { recursive: true, force: true }));

  it('a NaN in a model tensor: ERR_PG_INPUT naming the file and the tensor; allowNonFinite loads it with a warning', async () => {
    const dir = copyOf(tinyModel('tiny-tied'), 'nan-model');
    const st = join(dir, 'model.safetensors');
    poke(st, 'model.layers.1.mlp.down_proj.weight', NaN, 3);
    const e = await loadError(loadModel(dir));
    expect(e.code).to.equal('ERR_PG_INPUT');
    expect(e.message).to.include(`${st}: tensor 'model.layers.1.mlp.down_proj.weight' holds NaN or Inf values`);
    expect(e.message).to.match(/allowNonFinite/);
    let hidden = NaN;
    const warned = await warningsOf(async () => {
      using m = await loadModel(dir, { allowNonFinite: true });
      const out = await m.forward({ inputIds: { data: new Int32Array([1, 2, 3]), shape: [1, 3] } });
      hidden = out.logits!.data[0]!;
    });
    expect(warned).to.have.length(1);
    expect(warned[0]).to.include(`${st}: tensor 'model.layers.1.mlp.down_proj.weight' holds NaN or Inf values`);
    expect(Number.isNaN(hidden), 'the NaN reaches the logits (the weights were loaded as they are)').to.equal(true);
  });

  it('Inf in the second shard of a bfloat16 checkpoint names that shard; several tensors are listed', async () => {
    const src = tinyModel('tiny-untied', { dtype: 'bfloat16', shards: 2 });
    const dir = copyOf(src, 'inf-shards');
    const shards = readdirSync(dir)
      .filter((f) => /^model-0000\d-of-0000\d\.safetensors$/.test(f))
      .sort();
    expect(shards).to.have.length(2);
    const second = join(dir, shards[1]!);
    const names = Object.keys(
      JSON.parse(
        readFileSync(second)
          .subarray(8, 8 + Number(readFileSync(second).readBigUInt64LE(0)))
          .toString('utf8'),
      ) as object,
    )
      .filter((k) => k !== '__metadata__')
      .sort();
    poke(second, names[0]!, Infinity);
    poke(second, names[1]!, -Infinity, 1);
    const e = await loadError(loadModel(dir));
    expect(e.code).to.equal('ERR_PG_INPUT');
    expect(e.message).to.include(`${second}: tensors '`);
    for (const n of names.slice(0, 2)) expect(e.message).to.include(`'${n}'`);
    expect(e.message).to.not.include(shards[0]!);
  });

  it('a finite float32 weight that overflows float16 is refused when loading as float16 (the check runs on the loaded tensor)', async () => {
    const dir = copyOf(tinyModel('tiny-tied'), 'overflow');
    poke(join(dir, 'model.safetensors'), 'model.norm.weight', 1e6);
    using ok = await loadModel(dir, { dtype: 'float32' });
    expect(ok.dtype).to.equal('float32');
    const e = await loadError(loadModel(dir, { dtype: 'float16' }));
    expect(e.code).to.equal('ERR_PG_INPUT');
    expect(e.message).to.match(/tensor 'model\.norm\.weight' holds NaN or Inf values.*float16/);
  });

  it('a NaN in an adapter: loadAdapter refuses naming the file and the key and keeps the active adapter; allowNonFinite warns', async () => {
    const model = tinyModel('tiny-tied');
    using m = await loadModel(model);
    m.addLora({ r: 2, alpha: 4, targetModules: ['q_proj', 'down_proj'], seed: 7 });
    const before = m.loraWeights();
    const e = await loadError(m.loadAdapter(adir));
    expect(e.code).to.equal('ERR_PG_INPUT');
    expect(e.message).to.include(`${join(adir, 'adapter_model.safetensors')}: tensor '${key}' holds NaN or Inf values`);
    expect(m.loraWeights()[key]!.data).to.deep.equal(before[key]!.data); // nothing replaced
    const warned = await warningsOf(() => m.loadAdapter(adir, { allowNonFinite: true }));
    expect(warned).to.have.length(1);
    expect(warned[0]).to.include(key);
    expect(Number.isNaN(m.loraWeights()[key]!.data[5]!)).to.equal(true);
    // Policy.load passes the option to both loads.
    const e2 = await loadError(Policy.load(model, { adapter: adir }));
    expect(e2.message).to.include(key);
    const w2 = await warningsOf(async () => {
      using p = await Policy.load(model, { adapter: adir, allowNonFinite: true });
      expect(p.model.hasLora()).to.equal(true);
    });
    expect(w2).to.have.length(1);
  });

  it('generate refuses a NaN adapter (exit 1, the file named) and loads it with --allow-non-finite-weights (a warning on stderr)', () => {
    const model = tinyModel('tiny-tied');
    const cli = join(packageRoot, 'dist', 'bin', 'papergym-native.js');
    const args = [cli, 'generate', '--model', model, '--adapter', adir, '--prompt', 'hi', '--max-new-tokens', '2', '--seed', '1', '--device', 'cpu'];
    const refused = spawnSync(process.execPath, args, { encoding: 'utf8', env: process.env });
    expect(refused.status, refused.stderr).to.equal(1);
    expect(refused.stderr).to.include('adapter_model.safetensors').and.include('holds NaN or Inf values');
    const allowed = spawnSync(process.execPath, [...args, '--allow-non-finite-weights'], { encoding: 'utf8', env: process.env });
    expect(allowed.status, allowed.stderr).to.equal(0);
    expect(allowed.stderr).to.match(/PG_NON_FINITE_WEIGHTS|NaN or Inf values/);
  });
});
