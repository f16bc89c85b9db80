/**
 * PEFT adapter configs as peft 0.21 interprets them (peft tuners_utils.check_target_module_exists and
 * utils.other.get_pattern_key), live against peft + transformers (scripts/ref_qwen3.py) on the tiny
 * Qwen3 (tiny-tied) and Llama-3 (tiny-llama3) checkpoints. Each variant is an adapter that peft itself
 * made and saved (random nonzero A and B); we load it and compare, on a right-padded batch in fp32,
 * logits (max |Δ| ≤ 1e-4), the CE loss and every LoRA gradient (relative error ≤ 1e-4), and the set
 * of adapted modules (equal to peft's):
 *   exclude_modules as a list ("layers.0.self_attn.q_proj") and as a regex;
 *   target_modules as a regex string (full match); layers_to_transform (an int or a list) with and
 *   without layers_pattern (a string, or a list of regexes);
 *   rank_pattern / alpha_pattern (per-module r and alpha, keys matched as peft does), with rsLoRA;
 *   lora_dropout (logits only: peft's eval forward has no dropout).
 * Refusals name the field (modules_to_save, use_dora, bias, lora_bias); a module that the config
 * targets but the weights lack names both files.
 * Saving: our adapter_config.json read by peft's LoraConfig.from_pretrained field by field (what
 * vLLM's PEFTHelper also reads), and an adapter with exclusions and rank patterns saved by us and
 * loaded by peft builds the same modules with the same r and scaling and reproduces our logits.
 */
import { expect } from 'chai';
import { mkdtempSync, readFileSync, writeFileSync, cpSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { loadModel } from '../lib/model/qwen3.js';
import { int32, maskedMax, paddedBatch, readRefForward, relErr, runReference, tinyModel, type TinyName } from './helpers/tiny.js';

const TOL = 1e-4;
const ALL = ['q_proj', 'k_proj', 'v_proj', 'o_proj', 'gate_proj', 'up_proj', 'down_proj'];

interface Variant {
  name: string;
  model: TinyName;
  peft: { r: number; alpha: number; target_modules: string[] | string; use_rslora?: boolean; extra?: Record<string, unknown> };
  /** The module names peft adapts (checked against our gradients' keys and peft's). */
  modules: (layers: number) => string[];
  grads?: boolean;
}

const every = (layers: number, short: string[]) => {
  const out: string[] = [];
  for (let l = 0; l < layers; l++)
    for (const s of short) out.push(`model.layers.${l}.${['gate_proj', 'up_proj', 'down_proj'].includes(s) ? 'mlp' : 'self_attn'}.${s}`);
  return out.sort();
};

const VARIANTS: Variant[] = [
  {
    name: 'exclude_modules list (suffix match: "layers.0.self_attn.q_proj")',
    model: 'tiny-tied',
    peft: { r: 4, alpha: 8, target_modules: ALL, extra: { exclude_modules: ['layers.0.self_attn.q_proj'] } },
    modules: (n) => every(n, ALL).filter((m) => m !== 'model.layers.0.self_attn.q_proj'),
  },
  {
    name: 'exclude_modules regex (full match)',
    model: 'tiny-llama3',
    peft: {
      r: 4,
      alpha: 8,
      target_modules: ['q_proj', 'v_proj', 'down_proj'],
      extra: { exclude_modules: '.*\\.layers\\.1\\.(mlp|self_attn)\\.(down|q)_proj' },
    },
    modules: (n) => every(n, ['q_proj', 'v_proj', 'down_proj']).filter((m) => m !== 'model.layers.1.mlp.down_proj' && m !== 'model.layers.1.self_attn.q_proj'),
  },
  {
    name: 'target_modules regex string (full match)',
    model: 'tiny-tied',
    peft: { r: 4, alpha: 8, target_modules: '.*\\.layers\\.\\d+\\.self_attn\\.(q_proj|v_proj)' },
    modules: (n) => every(n, ['q_proj', 'v_proj']),
  },
  {
    name: 'layers_to_transform [1] + layers_pattern "layers"',
    model: 'tiny-tied',
    peft: { r: 4, alpha: 8, target_modules: ['q_proj', 'o_proj', 'up_proj'], extra: { layers_to_transform: [1], layers_pattern: 'layers' } },
    modules: () => every(2, ['q_proj', 'o_proj', 'up_proj']).filter((m) => m.startsWith('model.layers.1.')),
  },
  {
    name: 'layers_pattern list whose regex holds a group ["h", "(layers|blocks)"]',
    model: 'tiny-llama3',
    peft: { r: 4, alpha: 8, target_modules: ['v_proj', 'down_proj'], extra: { layers_to_transform: [0], layers_pattern: ['h', '(layers|blocks)'] } },
    modules: () => every(2, ['v_proj', 'down_proj']).filter((m) => m.startsWith('model.layers.0.')),
  },
  {
    name: 'layers_to_transform 0 (an int, no layers_pattern)',
    model: 'tiny-llama3',
    peft: { r: 4, alpha: 8, target_modules: ['k_proj', 'gate_proj'], extra: { layers_to_transform: 0 } },
    modules: () => every(2, ['k_proj', 'gate_proj']).filter((m) => m.startsWith('model.layers.0.')),
  },
  {
    name: 'rank_pattern / alpha_pattern (per-module r and alpha)',
    model: 'tiny-tied',
    peft: {
      r: 4,
      alpha: 8,
      target_modules: ALL,
      extra: {
        rank_pattern: { q_proj: 2, 'layers.1.mlp.down_proj': 6, 'model\\.layers\\.0\\.mlp\\.(gate|up)_proj': 3 },
        alpha_pattern: { v_proj: 3, 'layers\\.\\d\\.self_attn\\.o_proj': 20 },
      },
    },
    modules: (n) => every(n, ALL),
  },
  {
    name: 'rank_pattern with use_rslora (alpha / sqrt(r) per module)',
    model: 'tiny-llama3',
    peft: {
      r: 4,
      alpha: 8,
      use_rslora: true,
      target_modules: ['q_proj', 'k_proj', 'up_proj'],
      extra: { rank_pattern: { k_proj: 8 }, alpha_pattern: { up_proj: 5 } },
    },
    modules: (n) => every(n, ['q_proj', 'k_proj', 'up_proj']),
  },
  {
    name: 'lora_dropout 0.1 (eval forward)',
    model: 'tiny-tied',
    peft: { r: 4, alpha: 8, target_modules: ['q_proj', 'v_proj'], extra: { lora_dropout: 0.1 } },
    modules: (n) => every(n, ['q_proj', 'v_proj']),
    grads: false,
  },
];

describe('PEFT adapter variants as peft interprets them (live vs peft + transformers)', function () {
  this.timeout(600000);
  const batch = paddedBatch();
  const ids = int32(batch.ids);
  const mask = int32(batch.mask);
  const labels = int32(batch.labels);
  let work: string;
  const peftModules: Record<string, Record<string, { r: number; scaling: number }>> = {};

  before(() => {
    work = mkdtempSync(join(tmpdir(), 'pg-peft-variants-'));
    // one reference run: make every adapter with peft, forward + grads with it, read what peft built
    runReference(
      {
        model: tinyModel('tiny-tied'),
        inputs: { input_ids: batch.ids, attention_mask: batch.mask, labels: batch.labels },
        tasks: VARIANTS.flatMap((v, i) => {
          const model = tinyModel(v.model);
          return [
            {
              kind: 'make_peft_adapter',
              model,
              out: join(work, `a${i}`),
              seed: 3 + i,
              b_std: 0.05,
              r: v.peft.r,
              alpha: v.peft.alpha,
              target_modules: v.peft.target_modules,
              use_rslora: v.peft.use_rslora ?? false,
              extra: v.peft.extra ?? {},
            },
            { kind: 'forward', model, adapter: join(work, `a${i}`), out: join(work, `ref${i}`), grads: v.grads !== false },
            { kind: 'read_adapter_config', model, adapter: join(work, `a${i}`), out: join(work, `cfg${i}.json`) },
          ];
        }),
      },
      work,
    );
    VARIANTS.forEach(
      (_, i) =>
        (peftModules[i] = (
          JSON.parse(readFileSync(join(work, `cfg${i}.json`), 'utf8')) as { lora_modules: Record<string, { r: number; scaling: number }> }
        ).lora_modules),
    );
  });

  VARIANTS.forEach((v, i) => {
    it(`${v.model}: ${v.name}`, async () => {
      const ref = readRefForward(join(work, `ref${i}`));
      expect(Object.keys(peftModules[i]).sort(), 'modules peft adapts').to.deep.equal(v.modules(2));
      const m = await loadModel(tinyModel(v.model));
      await m.loadAdapter(join(work, `a${i}`));
      const r = await m.forward({ inputIds: ids, attentionMask: mask });
      expect(maskedMax(r.logits!.data, ref.logits, ref.shape, batch.mask), 'logits').to.be.at.most(TOL);
      if (v.grads !== false) {
        const { loss } = await m.crossEntropyBackward({ inputIds: ids, attentionMask: mask, labels });
        expect(Math.abs(loss - ref.loss!) / ref.loss!).to.be.at.most(TOL);
        const g = m.loraGrads();
        expect(Object.keys(g).sort()).to.deep.equal(Object.keys(ref.grads).sort());
        for (const [k, rg] of Object.entries(ref.grads)) {
          expect(g[k].shape, k).to.deep.equal(rg.shape);
          expect(relErr(g[k].data, rg.data), k).to.be.at.most(TOL);
        }
      } else {
        expect(m.loraConfig()!.dropout).to.equal(0.1);
      }
      const ours = Object.keys(m.loraWeights())
        .filter((k) => k.endsWith('lora_A.weight'))
        .map((k) => k.slice('base_model.model.'.length, -'.lora_A.weight'.length))
        .sort();
      expect(ours, 'modules we adapt').to.deep.equal(v.modules(2));
      m.dispose();
    });
  });

  describe('refused with a message naming the field / both files', () => {
    const base = () => {
      const dir = mkdtempSync(join(tmpdir(), 'pg-peft-bad-'));
      cpSync(join(work, 'a0'), dir, { recursive: true });
      return dir;
    };
    const edit = (dir: string, f: (c: Record<string, unknown>) => void) => {
      const p = join(dir, 'adapter_config.json');
      const c = JSON.parse(readFileSync(p, 'utf8')) as Record<string, unknown>;
      f(c);
      writeFileSync(p, JSON.stringify(c));
    };
    const cases: [string, (c: Record<string, unknown>) => void, RegExp][] = [
      ['modules_to_save', (c) => (c.modules_to_save = ['lm_head']), /modules_to_save/],
      ['use_dora', (c) => (c.use_dora = true), /use_dora/],
      ['bias "all"', (c) => (c.bias = 'all'), /adapter_config\.json: bias "all" is not supported/],
      ['lora_bias', (c) => (c.lora_bias = true), /lora_bias/],
      ['a target regex selecting the embedding', (c) => ((c.target_modules = '.*embed_tokens'), (c.exclude_modules = null)), /embed_tokens/],
      [
        'layers_to_transform with a regex target',
        (c) => ((c.target_modules = '.*q_proj'), (c.layers_to_transform = [0]), (c.exclude_modules = null)),
        /layers_to_transform/,
      ],
    ];
    for (const [what, f, re] of cases)
      it(what, async () => {
        const dir = base();
        edit(dir, f);
        const m = await loadModel(tinyModel('tiny-tied'));
        let err: Error | undefined;
        await m.loadAdapter(dir).catch((e: Error) => (err = e));
        expect(err, 'expected a rejection').to.be.instanceOf(Error);
        expect(err!.message).to.match(re);
        expect(err!.message).to.include('adapter_config.json');
        expect(m.hasLora(), 'nothing loaded').to.equal(false);
        m.dispose();
      });

    it('a module the config targets but the weights lack names both files', async () => {
      const dir = base();
      // a0 excludes layers.0 q_proj; dropping the exclusion targets a module its weights lack
      edit(dir, (c) => (c.exclude_modules = null));
      const m = await loadModel(tinyModel('tiny-tied'));
      let err: Error | undefined;
      await m.loadAdapter(dir).catch((e: Error) => (err = e));
      expect(err!.message).to.include(join(dir, 'adapter_model.safetensors'));
      expect(err!.message).to.include(join(dir, 'adapter_config.json'));
      expect(err!.message).to.include('model.layers.0.self_attn.q_proj');
      m.dispose();
    });

    it('weights of a module the config does not target name both files', async () => {
      const dir = base();
      edit(dir, (c) => (c.exclude_modules = ['layers.0.self_attn.q_proj', 'layers.1.mlp.up_proj']));
      const m = await loadModel(tinyModel('tiny-tied'));
      let err: Error | undefined;
      await m.loadAdapter(dir).catch((e: Error) => (err = e));
      expect(err!.message).to.include(join(dir, 'adapter_model.safetensors'));
      expect(err!.message).to.include('adapter_config.json');
      expect(err!.message).to.include('model.layers.1.mlp.up_proj');
      m.dispose();
    });
  });

  describe('saving: what peft and vLLM read', () => {
    // one reference run for both checks: our plain adapter's config as peft reads it, and two peft
    // adapters (exclusions; rank / alpha patterns) loaded and re-saved by us
    const resaved = [VARIANTS.findIndex((v) => v.name.startsWith('rank_pattern /')), VARIANTS.findIndex((v) => v.name.startsWith('exclude_modules list'))];
    const oursLogits: Record<number, Float32Array> = {};
    before(async () => {
      const m = await loadModel(tinyModel('tiny-tied'));
      m.addLora({ r: 8, alpha: 32, useRslora: true, targetModules: ['q_proj', 'v_proj', 'down_proj'], seed: 2 });
      await m.saveAdapter(join(work, 'ours-plain'), { baseModelName: 'Qwen/Qwen3-1.7B' });
      m.dispose();
      for (const k of resaved) {
        const r = await loadModel(tinyModel('tiny-tied'));
        await r.loadAdapter(join(work, `a${k}`));
        oursLogits[k] = (await r.forward({ inputIds: ids, attentionMask: mask })).logits!.data;
        await r.saveAdapter(join(work, `resaved${k}`), { baseModelName: 'tiny' });
        r.dispose();
      }
      runReference(
        {
          model: tinyModel('tiny-tied'),
          inputs: { input_ids: batch.ids, attention_mask: batch.mask },
          tasks: [
            { kind: 'read_adapter_config', adapter: join(work, 'ours-plain'), out: join(work, 'ours-plain.json') },
            ...resaved.flatMap((k) => [
              { kind: 'read_adapter_config', adapter: join(work, `resaved${k}`), out: join(work, `resaved${k}.json`) },
              { kind: 'forward', adapter: join(work, `resaved${k}`), out: join(work, `resaved${k}-ref`) },
            ]),
          ],
        },
        work,
      );
    });

    it("peft's LoraConfig.from_pretrained reads each field of our adapter_config.json", () => {
      const c = JSON.parse(readFileSync(join(work, 'ours-plain.json'), 'utf8')) as Record<string, unknown> & {
        lora_modules: Record<string, { r: number; scaling: number }>;
      };
      const raw = JSON.parse(readFileSync(join(work, 'ours-plain', 'adapter_config.json'), 'utf8')) as Record<string, unknown>;
      expect(raw.target_modules, 'a plain list in the file').to.deep.equal(['down_proj', 'q_proj', 'v_proj']);
      expect(c.target_modules).to.deep.equal(['down_proj', 'q_proj', 'v_proj']);
      expect(c.r).to.equal(8);
      expect(c.lora_alpha).to.equal(32);
      expect(c.use_rslora).to.equal(true);
      expect(c.bias).to.equal('none');
      expect(c.modules_to_save).to.equal(null);
      expect(c.task_type).to.equal('CAUSAL_LM');
      expect(c.peft_type).to.equal('LORA');
      expect(c.base_model_name_or_path).to.equal('Qwen/Qwen3-1.7B');
      expect(c.use_dora).to.equal(false);
      expect(c.lora_dropout).to.equal(0);
      expect(Object.keys(c.lora_modules).sort()).to.deep.equal(every(2, ['q_proj', 'v_proj', 'down_proj']));
      for (const v of Object.values(c.lora_modules)) {
        expect(v.r).to.equal(8);
        expect(v.scaling).to.be.closeTo(32 / Math.sqrt(8), 1e-12);
      }
    });

    it('an adapter with exclusions and rank / alpha patterns, saved by us, builds the same modules in peft and reproduces our logits', () => {
      for (const k of resaved) {
        const c = JSON.parse(readFileSync(join(work, `resaved${k}.json`), 'utf8')) as { lora_modules: Record<string, { r: number; scaling: number }> };
        expect(c.lora_modules, 'modules, r and scaling peft builds from our saved config').to.deep.equal(peftModules[k]);
        const ref = readRefForward(join(work, `resaved${k}-ref`));
        expect(maskedMax(oursLogits[k], ref.logits, ref.shape, batch.mask)).to.be.at.most(TOL);
      }
    });
  });
});
