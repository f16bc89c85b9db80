/**
 * Parity with transformers + peft (live: spawns scripts/ref_qwen3.py) on tiny configs of each
 * architecture and config form (scripts/make_tiny_qwen3.py): Qwen3 tiny-tied (tied lm_head, GQA 2),
 * tiny-untied (untied, GQA 4, head_dim != hidden/heads), tiny-nohd (config.json without head_dim /
 * rope_theta / rms_norm_eps / tie / attention_bias: transformers' Qwen3Config defaults, head_dim 128),
 * tiny-yarn (YaRN RoPE as transformers 5 rope_parameters and as transformers 4 rope_scaling), Qwen2.5
 * tiny-qwen25 (q/k/v bias, no q/k norm), Llama-3 tiny-llama3 (llama3 RoPE scaling, tied) and
 * tiny-llama-bias (attention_bias + mlp_bias):
 *   - base logits of a right-padded batch, fp32: max |Δ| ≤ 1e-4 at non-pad positions;
 *   - an adapter saved by peft (random nonzero A and B) loaded by us: logits ≤ 1e-4, CE loss and
 *     LoRA A/B gradients relative error ≤ 1e-4 (‖g − g_ref‖ / ‖g_ref‖ per tensor);
 *   - our saved adapter loaded by peft's PeftModel.from_pretrained: logits ≤ 1e-4.
 * Plus an offline check against the committed golden fixture (test/fixtures/model/).
 * PG_UPDATE_GOLDEN=1 rewrites the fixture from the live reference.
 */
import { expect } from 'chai';
import { cpSync, existsSync, mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { loadModel, type Qwen3Model } from '../lib/model/qwen3.js';
import { packageRoot, type JsTensor } from '../lib/native.js';
import {
  int32,
  maskedMax,
  paddedBatch,
  relErr,
  readRefForward,
  runReference,
  tinyFingerprint,
  tinyModel,
  type RefForward,
  type TinyName,
  type TinyOptions,
} from './helpers/tiny.js';

const TOL = 1e-4;
const GOLDEN = join(packageRoot, 'test', 'fixtures', 'model', 'golden-logits.json');
const GOLDEN_VOCAB = [0, 1, 13, 198, 872, 1879, 9707, 77091, 151643, 151644, 151645, 151935];

function lcgB(model: Qwen3Model, seed: number): Record<string, JsTensor<Float32Array>> {
  let s = seed >>> 0;
  const out: Record<string, JsTensor<Float32Array>> = {};
  for (const [k, v] of Object.entries(model.loraWeights()))
    if (k.includes('lora_B'))
      out[k] = {
        data: v.data.map(() => {
          s = (s * 1664525 + 1013904223) >>> 0;
          return (s / 2 ** 32 - 0.5) * 0.1;
        }),
        shape: v.shape,
      };
  return out;
}

interface Case {
  name: TinyName;
  opts?: TinyOptions;
  peft: { r: number; alpha: number; target_modules: string[]; use_rslora: boolean };
  ours: { r: number; alpha: number; targetModules?: ('q_proj' | 'k_proj' | 'v_proj' | 'o_proj' | 'gate_proj' | 'up_proj' | 'down_proj')[]; useRslora: boolean };
}

const CASES: Case[] = [
  {
    name: 'tiny-tied',
    peft: { r: 4, alpha: 8, target_modules: ['q_proj', 'k_proj', 'v_proj', 'o_proj', 'gate_proj', 'up_proj', 'down_proj'], use_rslora: false },
    ours: { r: 8, alpha: 16, useRslora: false },
  },
  {
    name: 'tiny-untied',
    peft: { r: 6, alpha: 12, target_modules: ['k_proj', 'o_proj', 'gate_proj', 'up_proj'], use_rslora: true },
    ours: { r: 4, alpha: 8, targetModules: ['q_proj', 'v_proj', 'down_proj'], useRslora: true },
  },
  {
    name: 'tiny-nohd',
    peft: { r: 4, alpha: 8, target_modules: ['q_proj', 'k_proj', 'v_proj', 'o_proj'], use_rslora: false },
    ours: { r: 4, alpha: 16, targetModules: ['k_proj', 'up_proj'], useRslora: false },
  },
  {
    name: 'tiny-yarn',
    peft: { r: 4, alpha: 8, target_modules: ['q_proj', 'k_proj', 'v_proj', 'o_proj', 'gate_proj', 'up_proj', 'down_proj'], use_rslora: false },
    ours: { r: 4, alpha: 8, useRslora: false },
  },
  {
    name: 'tiny-yarn',
    opts: { ropeKey: 'rope_scaling' },
    peft: { r: 2, alpha: 4, target_modules: ['q_proj', 'k_proj'], use_rslora: false },
    ours: { r: 2, alpha: 4, targetModules: ['q_proj', 'k_proj'], useRslora: false },
  },
  {
    name: 'tiny-qwen25',
    peft: { r: 4, alpha: 8, target_modules: ['q_proj', 'k_proj', 'v_proj', 'o_proj', 'gate_proj', 'up_proj', 'down_proj'], use_rslora: false },
    ours: { r: 8, alpha: 16, useRslora: false },
  },
  {
    name: 'tiny-llama3',
    peft: { r: 4, alpha: 8, target_modules: ['q_proj', 'k_proj', 'v_proj', 'o_proj', 'gate_proj', 'up_proj', 'down_proj'], use_rslora: true },
    ours: { r: 4, alpha: 8, useRslora: false },
  },
  {
    name: 'tiny-llama-bias',
    peft: { r: 4, alpha: 8, target_modules: ['q_proj', 'v_proj', 'o_proj', 'down_proj'], use_rslora: false },
    ours: { r: 4, alpha: 8, targetModules: ['k_proj', 'o_proj', 'gate_proj'], useRslora: false },
  },
];

const label = (c: Case) => `${c.name}${c.opts?.ropeKey === 'rope_scaling' ? ' (rope_scaling)' : ''}`;

const measured: Record<string, number> = {};

/**
 * For every case: our adapter (random nonzero B) saved and its logits, then ONE reference process for
 * all cases (each task names its checkpoint): a peft adapter made and saved, base / peft / ours
 * forwards in fp32 and the base in bf16. Run once, by the first case's before hook.
 */
let prepared: Promise<string[]> | undefined;
function prepareAll(): Promise<string[]> {
  prepared ??= (async () => {
    const batch = paddedBatch();
    const root = mkdtempSync(join(tmpdir(), 'pg-parity-'));
    const works: string[] = [];
    const tasks: object[] = [];
    for (const [i, c] of CASES.entries()) {
      const dir = tinyModel(c.name, c.opts);
      const work = join(root, `${i}-${c.name}`);
      works.push(work);
      const m = await loadModel(dir);
      m.addLora({ ...c.ours, seed: 21 });
      m.setLoraWeights(lcgB(m, 5));
      await m.saveAdapter(join(work, 'ours'), { baseModelName: dir });
      const logits = (await m.forward({ inputIds: int32(batch.ids), attentionMask: int32(batch.mask) })).logits!.data;
      writeFileSync(join(work, 'ours.logits.bin'), Buffer.from(logits.buffer, logits.byteOffset, logits.byteLength));
      m.dispose();
      tasks.push(
        { kind: 'make_peft_adapter', model: dir, out: join(work, 'peft'), seed: 1, b_std: 0.05, ...c.peft },
        { kind: 'forward', model: dir, adapter: null, out: join(work, 'base') },
        { kind: 'forward', model: dir, adapter: join(work, 'peft'), out: join(work, 'peft-ref'), grads: true },
        { kind: 'forward', model: dir, adapter: join(work, 'ours'), out: join(work, 'ours-ref') },
        { kind: 'forward', model: dir, adapter: null, out: join(work, 'base-bf16'), dtype: 'bfloat16' },
      );
    }
    runReference({ model: tinyModel(CASES[0].name), inputs: { input_ids: batch.ids, attention_mask: batch.mask, labels: batch.labels }, tasks }, root);
    return works;
  })();
  return prepared;
}

for (const [ci, c] of CASES.entries()) {
  describe(`model parity vs transformers+peft: ${label(c)}`, function () {
    this.timeout(900000);
    const batch = paddedBatch();
    const ids = int32(batch.ids);
    const mask = int32(batch.mask);
    const labels = int32(batch.labels);
    let dir: string;
    let work: string;
    let base: RefForward;
    let peftRef: RefForward;
    let oursRef: RefForward;
    let oursLogits: Float32Array;

    before(async () => {
      dir = tinyModel(c.name, c.opts);
      work = (await prepareAll())[ci];
      const lb = readFileSync(join(work, 'ours.logits.bin'));
      oursLogits = new Float32Array(lb.buffer.slice(lb.byteOffset, lb.byteOffset + lb.byteLength));
      base = readRefForward(join(work, 'base'));
      peftRef = readRefForward(join(work, 'peft-ref'));
      oursRef = readRefForward(join(work, 'ours-ref'));
    });

    it('base logits of a right-padded batch match (fp32, max |Δ| ≤ 1e-4)', async () => {
      const m = await loadModel(dir);
      const r = await m.forward({ inputIds: ids, attentionMask: mask });
      expect(r.logits!.shape).to.deep.equal(base.shape);
      const d = maskedMax(r.logits!.data, base.logits, base.shape, batch.mask);
      measured[`${label(c)} base logits`] = d;
      expect(d).to.be.at.most(TOL);
      if (process.env.PG_UPDATE_GOLDEN && !c.opts) writeGolden(c.name, dir, base);
      m.dispose();
    });

    it('bfloat16 logits match transformers in bfloat16 (measured: max |Δ| ≈ 0.08, mean ≈ 0.007; bound 0.2 / 0.02)', async () => {
      const ref = readRefForward(join(work, 'base-bf16'));
      const m = await loadModel(dir, { dtype: 'bfloat16' });
      const r = await m.forward({ inputIds: ids, attentionMask: mask });
      const d = maskedMax(r.logits!.data, ref.logits, ref.shape, batch.mask);
      const [B, T, V] = ref.shape;
      let sum = 0;
      let n = 0;
      for (let i = 0; i < B; i++)
        for (let j = 0; j < T; j++)
          if (batch.mask[i][j])
            for (let v = 0; v < V; v++) {
              sum += Math.abs(r.logits!.data[(i * T + j) * V + v] - ref.logits[(i * T + j) * V + v]);
              n++;
            }
      measured[`${label(c)} bf16 logits max`] = d;
      measured[`${label(c)} bf16 logits mean`] = sum / n;
      expect(d).to.be.at.most(0.2);
      expect(sum / n).to.be.at.most(0.02);
      m.dispose();
    });

    it('loads the adapter peft saved: logits, CE loss and LoRA grads match', async () => {
      const m = await loadModel(dir);
      await m.loadAdapter(join(work, 'peft'));
      const r = await m.forward({ inputIds: ids, attentionMask: mask });
      const d = maskedMax(r.logits!.data, peftRef.logits, peftRef.shape, batch.mask);
      measured[`${label(c)} peft-adapter logits`] = d;
      expect(d).to.be.at.most(TOL);
      const { loss } = await m.crossEntropyBackward({ inputIds: ids, attentionMask: mask, labels });
      expect(Math.abs(loss - peftRef.loss!) / peftRef.loss!).to.be.at.most(TOL);
      const g = m.loraGrads();
      const refKeys = Object.keys(peftRef.grads).sort();
      expect(Object.keys(g).sort()).to.deep.equal(refKeys);
      let worst = 0;
      for (const k of refKeys) {
        expect(g[k].shape, k).to.deep.equal(peftRef.grads[k].shape);
        const e = relErr(g[k].data, peftRef.grads[k].data);
        expect(e, k).to.be.at.most(TOL);
        worst = Math.max(worst, e);
      }
      measured[`${label(c)} LoRA grad rel err`] = worst;
      m.dispose();
    });

    it("peft's PeftModel.from_pretrained loads our saved adapter and reproduces our logits", () => {
      const d = maskedMax(oursLogits, oursRef.logits, oursRef.shape, batch.mask);
      measured[`${label(c)} our-adapter-in-peft logits`] = d;
      expect(d).to.be.at.most(TOL);
      // and the adapter really changes the output
      expect(maskedMax(oursLogits, base.logits, base.shape, batch.mask)).to.be.above(1e-3);
    });
  });
}

describe('RoPE scaling is applied (the same weights without it give other logits)', function () {
  this.timeout(300000);
  for (const name of ['tiny-yarn', 'tiny-llama3'] as const) {
    it(`${name}: dropping rope_parameters from config.json changes the logits by > 1e-3`, async () => {
      const dir = tinyModel(name);
      const plain = mkdtempSync(join(tmpdir(), `pg-rope-${name}-`));
      cpSync(dir, plain, { recursive: true });
      const cfg = JSON.parse(readFileSync(join(dir, 'config.json'), 'utf8')) as Record<string, unknown>;
      const theta = (cfg.rope_parameters as { rope_theta: number }).rope_theta;
      delete cfg.rope_parameters;
      cfg.rope_theta = theta;
      writeFileSync(join(plain, 'config.json'), JSON.stringify(cfg));
      const b = paddedBatch();
      const a = await loadModel(dir);
      const p = await loadModel(plain);
      const la = (await a.forward({ inputIds: int32(b.ids), attentionMask: int32(b.mask) })).logits!;
      const lp = (await p.forward({ inputIds: int32(b.ids), attentionMask: int32(b.mask) })).logits!;
      expect(maskedMax(la.data, lp.data, la.shape, b.mask)).to.be.above(1e-3);
      a.dispose();
      p.dispose();
    });
  }
});

after(() => {
  if (Object.keys(measured).length) console.log('    measured max errors:', JSON.stringify(measured));
});

interface Golden {
  generatedBy: string;
  models: Record<string, { fingerprint: number; vocab: number[]; positions: [number, number][]; logits: number[][] }>;
  batch: ReturnType<typeof paddedBatch>;
}

function writeGolden(name: string, dir: string, ref: RefForward): void {
  let g: Golden;
  try {
    g = JSON.parse(readFileSync(GOLDEN, 'utf8')) as Golden;
  } catch {
    g = {
      generatedBy: 'scripts/ref_qwen3.py (transformers, fp32, eager) via PG_UPDATE_GOLDEN=1 mocha dist/test/model-parity.test.js',
      models: {},
      batch: paddedBatch(),
    };
  }
  const b = paddedBatch();
  const [, T, V] = ref.shape;
  const positions: [number, number][] = [];
  const logits: number[][] = [];
  for (let i = 0; i < b.ids.length; i++)
    for (let j = 0; j < T; j++)
      if (b.mask[i][j]) {
        positions.push([i, j]);
        logits.push(GOLDEN_VOCAB.map((v) => ref.logits[(i * T + j) * V + v]));
      }
  g.models[name] = { fingerprint: tinyFingerprint(dir), vocab: GOLDEN_VOCAB, positions, logits };
  writeFileSync(GOLDEN, JSON.stringify(g) + '\n');
}

describe('model parity: committed golden fixture (offline)', function () {
  this.timeout(300000);
  it('fixture exists', () => expect(existsSync(GOLDEN), GOLDEN).to.equal(true));
  const g: Golden = existsSync(GOLDEN) ? (JSON.parse(readFileSync(GOLDEN, 'utf8')) as Golden) : { generatedBy: '', models: {}, batch: paddedBatch() };
  for (const name of Object.keys(g.models) as TinyName[]) {
    it(`${name}: logits at fixed positions/vocab ids match the fixture (≤ 1e-4)`, async () => {
      const fx = g.models[name];
      const dir = tinyModel(name);
      expect(Math.abs(tinyFingerprint(dir) - fx.fingerprint) / fx.fingerprint, 'tiny checkpoint differs from the one the fixture was made from').to.be.below(
        1e-9,
      );
      const m = await loadModel(dir);
      const r = await m.forward({ inputIds: int32(g.batch.ids), attentionMask: int32(g.batch.mask) });
      const [, T, V] = r.logits!.shape;
      let worst = 0;
      fx.positions.forEach(([i, j], p) => {
        fx.vocab.forEach((v, q) => {
          worst = Math.max(worst, Math.abs(r.logits!.data[(i * T + j) * V + v] - fx.logits[p][q]));
        });
      });
      expect(worst).to.be.at.most(TOL);
      m.dispose();
    });
  }
});
