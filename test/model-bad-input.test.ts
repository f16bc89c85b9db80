/**
 * Bad input never crashes Node: corrupt checkpoints, configs, adapters and wrong JS arguments
 * become an Error (code ERR_PG_INPUT) naming the file and tensor, or a TypeError (ERR_PG_ARG)
 * naming the argument. Corrupted files are written into temp dirs from a valid tiny checkpoint.
 */
import { expect } from 'chai';
import { copyFileSync, mkdtempSync, readFileSync, rmSync, symlinkSync, writeFileSync, mkdirSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { loadModel } from '../lib/model/qwen3.js';
import { native } from '../lib/native.js';
import { int32, tinyModel } from './helpers/tiny.js';

interface StEntry {
  dtype: string;
  shape: number[];
  data_offsets: [number, number];
}
type StHeader = Record<string, StEntry | Record<string, string>>;

function readSt(path: string): { header: StHeader; data: Buffer } {
  const buf = readFileSync(path);
  const n = Number(buf.readBigUInt64LE(0));
  return { header: JSON.parse(buf.subarray(8, 8 + n).toString('utf8')) as StHeader, data: buf.subarray(8 + n) };
}

function writeRaw(path: string, header: object | string, data: Buffer, lenOverride?: bigint): void {
  const h = Buffer.from(typeof header === 'string' ? header : JSON.stringify(header), 'utf8');
  const len = Buffer.alloc(8);
  len.writeBigUInt64LE(lenOverride ?? BigInt(h.length));
  writeFileSync(path, Buffer.concat([len, h, data]));
}

/** Rebuilds a consistent file from {name: {dtype, shape, bytes}}. */
function writeTensors(path: string, tensors: Record<string, { dtype: string; shape: number[]; bytes: Buffer }>): void {
  const header: Record<string, unknown> = { __metadata__: { format: 'pt' } };
  const parts: Buffer[] = [];
  let off = 0;
  for (const [k, t] of Object.entries(tensors)) {
    header[k] = { dtype: t.dtype, shape: t.shape, data_offsets: [off, off + t.bytes.length] };
    parts.push(t.bytes);
    off += t.bytes.length;
  }
  writeRaw(path, header, Buffer.concat(parts));
}

function tensorsOf(path: string): Record<string, { dtype: string; shape: number[]; bytes: Buffer }> {
  const { header, data } = readSt(path);
  const out: Record<string, { dtype: string; shape: number[]; bytes: Buffer }> = {};
  for (const [k, v] of Object.entries(header)) {
    if (k === '__metadata__') continue;
    const e = v as StEntry;
    out[k] = { dtype: e.dtype, shape: e.shape, bytes: Buffer.from(data.subarray(e.data_offsets[0], e.data_offsets[1])) };
  }
  return out;
}

async function loadError(dir: string): Promise<Error & { code?: string }> {
  try {
    const m = await loadModel(dir);
    m.dispose();
  } catch (e) {
    return e as Error & { code?: string };
  }
  throw new Error('expected the load to fail');
}

describe('model: bad input', function () {
  this.timeout(120000);
  let good: string;
  let work: string;
  let st: string;

  before(() => {
    good = tinyModel('tiny-tied');
    work = mkdtempSync(join(tmpdir(), 'pg-bad-'));
    st = join(good, 'model.safetensors');
  });
  after(() => rmSync(work, { recursive: true, force: true }));

  /** A checkpoint dir with the good config and a given model.safetensors writer. */
  function ckpt(name: string, write: (file: string) => void, config?: (c: Record<string, unknown>) => void): string {
    const d = join(work, name);
    mkdirSync(d, { recursive: true });
    const cfg = JSON.parse(readFileSync(join(good, 'config.json'), 'utf8')) as Record<string, unknown>;
    config?.(cfg);
    writeFileSync(join(d, 'config.json'), JSON.stringify(cfg));
    write(join(d, 'model.safetensors'));
    return d;
  }

  it('truncated safetensors file', async () => {
    const d = ckpt('truncated', (f) => writeFileSync(f, readFileSync(st).subarray(0, 4_000_000)));
    const e = await loadError(d);
    expect(e.code).to.equal('ERR_PG_INPUT');
    expect(e.message).to.include(join(d, 'model.safetensors'));
    expect(e.message).to.match(/out of range|truncated/);
  });

  it('file shorter than the 8-byte length prefix', async () => {
    const d = ckpt('tiny-file', (f) => writeFileSync(f, Buffer.from([1, 2, 3])));
    expect((await loadError(d)).message).to.match(/model\.safetensors: truncated safetensors file/);
  });

  it('header length that lies (beyond the file, and over 100 MB)', async () => {
    const { header, data } = readSt(st);
    const d1 = ckpt('len-lies', (f) => writeRaw(f, header, data, 1_000_000_000_000n));
    expect((await loadError(d1)).message).to.match(/header length \d+ exceeds the 100 MB limit/);
    const d2 = ckpt('len-lies2', (f) => writeRaw(f, header, data.subarray(0, 10), 50_000_000n));
    expect((await loadError(d2)).message).to.match(/model\.safetensors: safetensors header length 50000000 exceeds the file size/);
  });

  it('header that is not valid JSON', async () => {
    const d = ckpt('bad-json', (f) => writeRaw(f, '{"a": [1, 2', Buffer.alloc(0)));
    expect((await loadError(d)).message).to.match(/model\.safetensors \(safetensors header\): invalid JSON at byte/);
  });

  it('offsets out of range', async () => {
    const { header, data } = readSt(st);
    const e = header['model.norm.weight'] as StEntry;
    e.data_offsets = [data.length + 16, data.length + 16 + 256];
    const d = ckpt('oob', (f) => writeRaw(f, header, data));
    const err = await loadError(d);
    expect(err.message).to.match(/tensor 'model\.norm\.weight': data_offsets \[\d+, \d+\) out of range/);
  });

  it('overlapping offsets', async () => {
    const { header, data } = readSt(st);
    // two same-sized tensors; point the later one at the earlier one's bytes
    const a = header['model.layers.0.input_layernorm.weight'] as StEntry;
    const b = header['model.layers.0.post_attention_layernorm.weight'] as StEntry;
    const [first, second] = a.data_offsets[0] < b.data_offsets[0] ? [a, b] : [b, a];
    second.data_offsets = [...first.data_offsets];
    const d = ckpt('overlap', (f) => writeRaw(f, header, data));
    expect((await loadError(d)).message).to.match(/overlaps the previous tensor/);
  });

  it('hole in the data buffer / size that disagrees with shape', async () => {
    const { header, data } = readSt(st);
    (header['model.norm.weight'] as StEntry).shape = [65];
    const d = ckpt('size', (f) => writeRaw(f, header, data));
    expect((await loadError(d)).message).to.match(/tensor 'model\.norm\.weight': shape and dtype need 260 bytes but data_offsets span 256/);
    const h2 = readSt(st);
    delete h2.header['model.layers.0.self_attn.q_norm.weight'];
    const d2 = ckpt('hole', (f) => writeRaw(f, h2.header, h2.data));
    expect((await loadError(d2)).message).to.match(/hole in the data buffer before tensor|trailing bytes/);
  });

  it('missing tensor', async () => {
    const t = tensorsOf(st);
    delete t['model.layers.1.self_attn.k_norm.weight'];
    const d = ckpt('missing', (f) => writeTensors(f, t));
    const e = await loadError(d);
    expect(e.code).to.equal('ERR_PG_INPUT');
    expect(e.message).to.include("missing tensor 'model.layers.1.self_attn.k_norm.weight'");
  });

  it('extra tensor', async () => {
    const t = tensorsOf(st);
    t['model.layers.0.mlp.extra_proj.weight'] = { dtype: 'F32', shape: [2], bytes: Buffer.alloc(8) };
    const d = ckpt('extra', (f) => writeTensors(f, t));
    expect((await loadError(d)).message).to.include("unexpected tensor 'model.layers.0.mlp.extra_proj.weight'");
  });

  it('shape mismatch against config.json', async () => {
    const t = tensorsOf(st);
    const n = t['model.norm.weight'];
    t['model.norm.weight'] = { dtype: 'F32', shape: [32], bytes: n.bytes.subarray(0, 128) };
    const d = ckpt('shape', (f) => writeTensors(f, t));
    expect((await loadError(d)).message).to.match(/tensor 'model\.norm\.weight' has shape \[32\], expected \[64\]/);
  });

  it('unknown dtype names tensor and file', async () => {
    const t = tensorsOf(st);
    t['model.norm.weight'] = { dtype: 'F8_E4M3', shape: [64], bytes: Buffer.alloc(64) };
    const d = ckpt('dtype', (f) => writeTensors(f, t));
    const e = await loadError(d);
    expect(e.message).to.include(join(d, 'model.safetensors'));
    expect(e.message).to.include("tensor 'model.norm.weight': unsupported dtype 'F8_E4M3'");
  });

  it('sharded index naming a missing tensor or a path outside the directory', async () => {
    const d = join(work, 'shards');
    mkdirSync(d, { recursive: true });
    copyFileSync(join(good, 'config.json'), join(d, 'config.json'));
    symlinkSync(st, join(d, 'shard.safetensors'));
    const names = Object.keys(tensorsOf(st));
    const wm: Record<string, string> = Object.fromEntries(names.map((n) => [n, 'shard.safetensors']));
    wm['model.layers.9.mlp.up_proj.weight'] = 'shard.safetensors';
    writeFileSync(join(d, 'model.safetensors.index.json'), JSON.stringify({ metadata: {}, weight_map: wm }));
    expect((await loadError(d)).message).to.match(/tensor 'model\.layers\.9\.mlp\.up_proj\.weight' is listed in weight_map but missing/);
    wm['model.layers.9.mlp.up_proj.weight'] = '../evil.safetensors';
    writeFileSync(join(d, 'model.safetensors.index.json'), JSON.stringify({ metadata: {}, weight_map: wm }));
    expect((await loadError(d)).message).to.match(/is not a plain file name inside the checkpoint directory/);
  });

  it('unsupported architectures', async () => {
    const d = ckpt(
      'arch',
      (f) => symlinkSync(st, f),
      (c) => (c.architectures = ['MistralForCausalLM']),
    );
    const e = await loadError(d);
    expect(e.code).to.equal('ERR_PG_INPUT');
    expect(e.message).to.include(join(d, 'config.json'));
    expect(e.message).to.match(/unsupported architectures \[MistralForCausalLM\] \(this addon runs Qwen3ForCausalLM, Qwen2ForCausalLM and LlamaForCausalLM\)/);
  });

  it('config.json that disagrees with the weights names the field (and a default that applied)', async () => {
    // tiny-tied has head_dim 16; without the key Qwen3Config's default 128 applies
    const d = ckpt(
      'no-head-dim',
      (f) => symlinkSync(st, f),
      (c) => delete c.head_dim,
    );
    const e = await loadError(d);
    expect(e.message).to.include(join(d, 'config.json'));
    expect(e.message).to.match(
      /has shape \[\d+(, 64)?\], expected \[\d+(, 64)?\] from .*config\.json: dim 0 is (num_attention_heads\*head_dim|num_key_value_heads\*head_dim|head_dim) \(.*head_dim = 128 \(absent from config\.json: the Qwen3Config default\)\)/,
    );
    const d2 = ckpt(
      'wrong-ffn',
      (f) => symlinkSync(st, f),
      (c) => (c.intermediate_size = 96),
    );
    expect((await loadError(d2)).message).to.match(
      /'model\.layers\.0\.mlp\.down_proj\.weight' has shape \[64, 128\], expected \[64, 96\] from .*config\.json: dim 1 is intermediate_size \(intermediate_size = 96\)/,
    );
    // the same weights read as another architecture: the switch that makes a tensor unexpected is named
    const d3 = ckpt(
      'as-qwen2',
      (f) => symlinkSync(st, f),
      (c) => (c.architectures = ['Qwen2ForCausalLM']),
    );
    expect((await loadError(d3)).message).to.match(
      /unexpected tensor 'model\.layers\.\d\.self_attn\.[qk]_norm\.weight' \(not part of Qwen2ForCausalLM with this config \(Qwen2ForCausalLM has no q\/k norm\)\)/,
    );
    const d4 = ckpt(
      'bias-on',
      (f) => symlinkSync(st, f),
      (c) => (c.attention_bias = true),
    );
    expect((await loadError(d4)).message).to.match(/missing tensor 'model\.layers\.0\.self_attn\.[kqvo]_proj\.bias'/);
  });

  it('RoPE types other than default / yarn / llama3, partial rotary and sliding-window layers are refused', async () => {
    const cases: [(c: Record<string, unknown>) => void, RegExp][] = [
      [(c) => (c.rope_scaling = { type: 'linear', factor: 2 }), /rope_scaling\.rope_type 'linear' is not supported \(default, yarn and llama3 are\)/],
      [(c) => (c.rope_parameters = { rope_type: 'dynamic', factor: 2, rope_theta: 1e6 }), /rope_parameters\.rope_type 'dynamic' is not supported/],
      [(c) => (c.rope_parameters = { rope_type: 'longrope', rope_theta: 1e6 }), /'longrope' is not supported/],
      [(c) => (c.rope_scaling = { rope_type: 'yarn' }), /rope_scaling\.factor is required for rope_type 'yarn'/],
      [(c) => (c.rope_parameters = { rope_type: 'default', rope_theta: 1e6, partial_rotary_factor: 0.5 }), /partial_rotary_factor 0\.5 is not supported/],
      [
        (c) => ((c.use_sliding_window = true), (c.sliding_window = 4096), (c.max_window_layers = 1), delete c.layer_types),
        /sliding-window attention is not supported \(use_sliding_window=true with max_window_layers 1 < num_hidden_layers 2\)/,
      ],
      [
        (c) => (c.layer_types = ['full_attention', 'sliding_attention']),
        /sliding-window attention is not supported \(layer_types names sliding_attention layers\)/,
      ],
    ];
    for (const [i, [f, re]] of cases.entries()) {
      const d = ckpt(`rope-${i}`, (file) => symlinkSync(st, file), f);
      const e = await loadError(d);
      expect(e.code).to.equal('ERR_PG_INPUT');
      expect(e.message).to.include(join(d, 'config.json'));
      expect(e.message).to.match(re);
    }
    // use_sliding_window with every layer below max_window_layers is full attention (loads)
    const ok = ckpt(
      'sw-off',
      (file) => symlinkSync(st, file),
      (c) => ((c.use_sliding_window = true), (c.max_window_layers = 28), delete c.layer_types),
    );
    (await loadModel(ok)).dispose();
  });

  it('missing config.json', async () => {
    const d = join(work, 'noconfig');
    mkdirSync(d, { recursive: true });
    symlinkSync(st, join(d, 'model.safetensors'));
    expect((await loadError(d)).message).to.match(/noconfig\/config\.json: cannot open/);
  });

  it('missing checkpoint directory / weights', async () => {
    const d = ckpt('noweights', () => undefined);
    expect((await loadError(d)).message).to.match(/no model\.safetensors or model\.safetensors\.index\.json/);
  });

  it('loadModel: a non-string dir or bad options give our TypeError; a missing dir is named', async () => {
    const err = (p: Promise<unknown>): Promise<Error & { code?: string }> =>
      p.then(
        () => new Error('expected a rejection'),
        (e) => e as Error & { code?: string },
      );
    const cases: [Promise<unknown>, RegExp][] = [
      [loadModel(5 as never), /^loadModel: dir must be a non-empty string \(the checkpoint directory\), got number 5$/],
      [loadModel(''), /^loadModel: dir must be a non-empty string .*got ""$/],
      [loadModel(good, 'cpu' as never), /^loadModel: options must be an object, got "cpu"$/],
      [loadModel(good, { device: 5 as never }), /^loadModel: options\.device must be a string, got number 5$/],
      [loadModel(good, { dtype: null as never }), /^loadModel: options\.dtype must be a string, got null$/],
    ];
    for (const [p, re] of cases) {
      const e = await err(p);
      expect(e).to.be.instanceOf(TypeError);
      expect(e.code, e.message).to.equal('ERR_PG_ARG');
      expect(e.message).to.match(re);
    }
    const missing = join(work, 'no-such-model');
    const e = await loadError(missing);
    expect(e.message).to.equal(`model directory ${missing} does not exist`);
    expect(e.code).to.equal('ERR_PG_INPUT');
  });

  it('wrong JS argument types give TypeErrors naming the argument', async () => {
    // Calls with the wrong JS types, as untyped JavaScript would make them.
    const Model = native().Model as unknown as { load(...a: unknown[]): unknown; new (...a: unknown[]): unknown };
    expect(() => Model.load(42)).to.throw(TypeError, /dir must be a string/);
    expect(() => Model.load(good, { device: 5 })).to.throw(TypeError, /options\.device must be a string/);
    expect(() => Model.load(good, { device: 'tpu' })).to.throw(TypeError, /device must be 'cpu', 'cuda' or 'cuda:N'/);
    expect(() => Model.load(good, { dtype: 'int8' })).to.throw(TypeError, /dtype must be/);
    expect(() => Model.load(good, 'cpu')).to.throw(TypeError, /options must be an object/);
    expect(() => new Model()).to.throw(TypeError, /Model\.load/);
    const m = await loadModel(good);
    try {
      const raw = m as unknown as Record<string, (...a: unknown[]) => unknown>;
      expect(() => raw.forward.call(m, { inputIds: [1, 2, 3] })).to.throw(TypeError, /args\.inputIds\.data must be a TypedArray/);
      expect(() => raw.forward.call(m, { inputIds: 7 })).to.throw(TypeError, /args\.inputIds must be a tensor object/);
      expect(() => raw.forward.call(m, { inputIds: { data: new Float32Array(2), shape: [1, 2] } })).to.throw(
        TypeError,
        /args\.inputIds\.data must be an Int32Array/,
      );
      expect(() => raw.forward.call(m, { inputIds: int32([[1, 2]]), attentionMask: int32([[1]]) })).to.throw(
        TypeError,
        /attentionMask must have the shape of inputIds/,
      );
      expect(() => raw.forward.call(m, { inputIds: int32([[1, 2]]), outputs: ['probs'] })).to.throw(TypeError, /outputs entries must be 'logits' or 'hidden'/);
      expect(() => raw.forward.call(m)).to.throw(TypeError, /forward\(args\) is required/);
      expect(() => raw.addLora.call(m, { r: 'x', alpha: 2 })).to.throw(TypeError, /lora\.r must be an integer/);
      expect(() => raw.addLora.call(m, { r: 0, alpha: 2 })).to.throw(TypeError, /lora\.r must be a positive integer/);
      expect(() => raw.addLora.call(m, { r: 2, alpha: 2, targetModules: ['lm_head'] })).to.throw(TypeError, /unknown module 'lm_head'/);
      expect(() => raw.addLora.call(m, { r: 2, alpha: 2, dropout: 1.5 })).to.throw(TypeError, /lora\.dropout/);
      expect(() => raw.setAdapterEnabled.call(m, 'yes')).to.throw(TypeError, /enabled must be a boolean/);
      expect(() => raw.snapshotAdapter.call(m, 3)).to.throw(TypeError, /name must be a string/);
      expect(() => raw.saveAdapter.call(m, null)).to.throw(TypeError, /dir must be a string/);
      let err: unknown;
      try {
        await m.forward({ inputIds: int32([[151936]]) });
      } catch (e) {
        err = e;
      }
      expect(err).to.be.instanceOf(TypeError);
      expect((err as Error).message).to.match(/token id outside \[0, vocab_size\)/);
      expect(() => m.loraParameterNames()).to.throw(Error, /no LoRA adapter/);
      m.addLora({ r: 2, alpha: 4 });
      expect(() => m.setLoraWeights({ nope: { data: new Float32Array(1), shape: [1] } })).to.throw(TypeError, /unknown LoRA parameter 'nope'/);
      const k = m.loraParameterNames()[0];
      expect(() => m.setLoraWeights({ [k]: { data: new Float32Array(1), shape: [1] } })).to.throw(TypeError, /wrong shape/);
      expect(() => native().Model.prototype.forward.call({} as never, {} as never)).to.throw();
    } finally {
      m.dispose();
    }
  });

  it('use after dispose', async () => {
    const m = await loadModel(good);
    m.addLora({ r: 2, alpha: 4 });
    m.dispose();
    for (const f of [
      () => m.config,
      () => m.device,
      () => m.loraParameterNames(),
      () => m.loraGrads(),
      () => m.setAdapterEnabled(false),
      () => m.snapshotAdapter('x'),
      () => m.parameterBytes(),
    ])
      expect(f).to.throw(Error, /model was disposed/);
    let err: unknown;
    try {
      await m.saveAdapter(join(work, 'never'));
    } catch (e) {
      err = e;
    }
    expect((err as Error).message).to.match(/model was disposed/);
  });

  it('corrupt adapters: rank/shape mismatch, unknown key, bad config, missing files', async () => {
    const m = await loadModel(good);
    try {
      m.addLora({ r: 4, alpha: 8, targetModules: ['q_proj', 'v_proj'] });
      const ad = join(work, 'adapter');
      await m.saveAdapter(ad);
      const cfg = JSON.parse(readFileSync(join(ad, 'adapter_config.json'), 'utf8'));
      const bad = async (name: string, mutate: (dir: string) => void, re: RegExp) => {
        const d = join(work, name);
        mkdirSync(d, { recursive: true });
        copyFileSync(join(ad, 'adapter_config.json'), join(d, 'adapter_config.json'));
        copyFileSync(join(ad, 'adapter_model.safetensors'), join(d, 'adapter_model.safetensors'));
        mutate(d);
        let err: unknown;
        try {
          await m.loadAdapter(d);
        } catch (e) {
          err = e;
        }
        expect(err, name).to.be.instanceOf(Error);
        expect((err as Error).message, name).to.match(re);
      };
      await bad(
        'ad-rank',
        (d) => writeFileSync(join(d, 'adapter_config.json'), JSON.stringify({ ...cfg, r: 8 })),
        /lora_A\.weight' has shape \[4, 64\], expected \[8, 64\] \(r = 8 from .*adapter_config\.json r\)/,
      );
      await bad(
        'ad-targets',
        (d) => writeFileSync(join(d, 'adapter_config.json'), JSON.stringify({ ...cfg, target_modules: ['q_proj'] })),
        /tensor 'base_model\.model\.model\.layers\.0\.self_attn\.v_proj\.lora_A\.weight' belongs to module 'model\.layers\.0\.self_attn\.v_proj', which .*adapter_config\.json does not target/,
      );
      await bad(
        'ad-missing',
        (d) => writeFileSync(join(d, 'adapter_config.json'), JSON.stringify({ ...cfg, target_modules: ['q_proj', 'v_proj', 'k_proj'] })),
        /adapter_model\.safetensors: no LoRA weights \(lora_A and lora_B\) for module 'model\.layers\.0\.self_attn\.k_proj', which .*adapter_config\.json targets/,
      );
      await bad('ad-dora', (d) => writeFileSync(join(d, 'adapter_config.json'), JSON.stringify({ ...cfg, use_dora: true })), /DoRA/);
      await bad('ad-type', (d) => writeFileSync(join(d, 'adapter_config.json'), JSON.stringify({ ...cfg, peft_type: 'IA3' })), /peft_type must be "LORA"/);
      await bad('ad-noconfig', (d) => rmSync(join(d, 'adapter_config.json')), /adapter_config\.json: cannot open/);
      await bad(
        'ad-key',
        (d) => {
          const t = tensorsOf(join(d, 'adapter_model.safetensors'));
          t['base_model.model.lm_head.weight'] = { dtype: 'F32', shape: [1], bytes: Buffer.alloc(4) };
          writeTensors(join(d, 'adapter_model.safetensors'), t);
        },
        /unexpected tensor 'base_model\.model\.lm_head\.weight'/,
      );
      await bad(
        'ad-trunc',
        (d) => writeFileSync(join(d, 'adapter_model.safetensors'), readFileSync(join(ad, 'adapter_model.safetensors')).subarray(0, 100)),
        /adapter_model\.safetensors: safetensors header length \d+ exceeds the file size/,
      );
      // the model still works after the failed loads
      const r = await m.forward({ inputIds: int32([[1, 2, 3]]) });
      expect(r.logits!.data.every(Number.isFinite)).to.equal(true);
    } finally {
      m.dispose();
    }
  });
  it('a sequence longer than the context and out-of-range labels are TypeErrors naming the problem', async () => {
    const m = await loadModel(good);
    try {
      m.addLora({ r: 2, alpha: 4 });
      let err: unknown;
      try {
        await m.forward({ inputIds: { data: new Int32Array(40961), shape: [1, 40961] } });
      } catch (e) {
        err = e;
      }
      expect(err).to.be.instanceOf(TypeError);
      expect((err as Error).message).to.match(/sequence length 40961 exceeds the model's context \(max_position_embeddings 40960\)/);
      for (const bad of [151941, -7]) {
        err = undefined;
        try {
          await m.crossEntropyBackward({ inputIds: int32([[1, 2, 3]]), labels: int32([[1, bad, 3]]) });
        } catch (e) {
          err = e;
        }
        expect(err, String(bad)).to.be.instanceOf(TypeError);
        expect((err as Error).message).to.match(/labels must be -100 \(ignored\) or a token id/);
      }
    } finally {
      m.dispose();
    }
  });
});
