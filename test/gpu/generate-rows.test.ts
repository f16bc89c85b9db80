/**
 * GPU suite: per-row sampling settings in one batch (issue 20 item 1) on CUDA. Skips with a
 * printed reason without CUDA. On the tiny model (fp32), for the dynamic path, the static-cache
 * path and (CUDA builds) the CUDA-graph path: a mixed batch (greedy, top-k, top-p, min-p,
 * different temperatures, seeds and max tokens) gives, for every seeded row, the same ids as the
 * row alone; the graph path equals the static path without graphs; and the step-wise decode
 * engine (serve's continuous batching) gives a seeded row the same ids alone and when it joins
 * a running batch, with CUDA graphs (one per bucket) equal to its eager static and dynamic decode.
 */
import { expect } from 'chai';
import { cudaAvailable, native } from '../../lib/native.js';
import { loadModel, type Qwen3Model } from '../../lib/model/qwen3.js';
import { generate, type GenerateOptions, type GenerateResult } from '../../lib/model/policy.js';
import { DecodeEngine, type EngineRow } from '../../lib/model/engine.js';
import { tinyModel } from '../helpers/tiny.js';

type Row = NonNullable<GenerateOptions['promptOptions']>[number];
type PathResult = GenerateResult & { decodePath: string };
const prompts = [
  [151644, 872, 198, 9707, 1879],
  [13, 77091],
  [151644, 872, 198, 40, 1079, 264, 1273, 13],
  [151644, 872, 198, 3838, 374, 264, 3119, 30],
  [9707, 11, 1879, 0],
];
const mixed: Row[] = [
  { temperature: 1, seed: 11, maxNewTokens: 20 },
  { temperature: 0.7, topK: 5, seed: 12, maxNewTokens: 32 },
  { temperature: 0 },
  { temperature: 1.2, topK: 40, topP: 0.8, seed: 13 },
  { temperature: 1, minP: 0.1, seed: 14, maxNewTokens: 16 },
];
const ids = (r: GenerateResult) => r.completions.map((c) => Array.from(c.tokenIds));

describe('GPU suite: per-row sampling in one batch and the step-wise engine', function () {
  this.timeout(600000);
  let m: Qwen3Model;
  before(async function () {
    if (!cudaAvailable()) {
      console.log('  skipping per-row sampling GPU tests: CUDA is not available to the addon (no GPU, no driver, or a CPU libtorch)');
      this.skip();
    }
    m = await loadModel(tinyModel('tiny-tied'), { device: 'cuda' });
  });
  after(() => m?.dispose());

  const paths: { name: string; o: Record<string, unknown> }[] = [
    { name: 'dynamic', o: { cudaGraphs: false } },
    { name: 'static', o: { cudaGraphs: false, staticCache: true } },
    { name: 'cuda-graphs', o: { cudaGraphs: true } },
  ];
  for (const p of paths)
    it(`${p.name}: seeded rows give the same ids alone as inside the mixed batch`, async function () {
      const graphs = (native() as unknown as { cudaGraphsCompiled?: () => boolean }).cudaGraphsCompiled?.() ?? false;
      if (p.name === 'cuda-graphs' && !graphs) {
        console.log('      (skipped: the addon was built without CUDA graphs)');
        this.skip();
      }
      const all = (await generate(m, { prompts, promptOptions: mixed, maxNewTokens: 24, ...p.o } as GenerateOptions)) as PathResult;
      expect(all.decodePath).to.equal(p.name);
      for (let i = 0; i < mixed.length; i++) {
        const alone = await generate(m, { prompts: [prompts[i]!], promptOptions: [mixed[i]!], maxNewTokens: 24, ...p.o } as GenerateOptions);
        expect(ids(alone)[0], `row ${i}`).to.deep.equal(ids(all)[i]);
      }
      if (p.name === 'cuda-graphs') {
        const eager = await generate(m, { prompts, promptOptions: mixed, maxNewTokens: 24, cudaGraphs: false, staticCache: true, padToBucket: true } as GenerateOptions);
        expect(ids(all)).to.deep.equal(ids(eager));
      }
    });

  it('engine: a seeded row joining a running batch gives the same ids as alone', async () => {
    const rows: EngineRow[] = mixed.map((o, i) => ({ id: i + 1, prompt: prompts[i]!, temperature: o.temperature, topK: o.topK, topP: o.topP, minP: o.minP, seed: o.seed ?? 0, maxNewTokens: o.maxNewTokens ?? 24 }));
    const graphs = (native() as unknown as { cudaGraphsCompiled?: () => boolean }).cudaGraphsCompiled?.() ?? false;
    const run = async (plan: { at: number; row: EngineRow }[], o: { cudaGraphs?: boolean; staticDecode?: boolean } = {}) => {
      const e = new DecodeEngine(m, { maxRows: 8, capacity: 128, ...o });
      if (o.cudaGraphs !== false && graphs) expect(e.decodePath).to.equal('cuda-graphs');
      const out = new Map<number, number[]>();
      let live = 0;
      for (let s = 0; s < 200; s++) {
        for (const p of plan) if (p.at === s) (e.add(p.row), live++);
        if (live === 0 && plan.every((p) => p.at < s)) break;
        for (const t of (await e.step()).tokens) {
          out.set(t.id, [...(out.get(t.id) ?? []), t.token]);
          if (t.finish) live--;
        }
      }
      await e.release();
      return out;
    };
    const plan = rows.map((row, i) => ({ at: i * 3, row }));
    const together = await run(plan);
    for (const row of rows) expect(together.get(row.id), `row ${row.id}`).to.deep.equal((await run([{ at: 0, row }])).get(row.id));
    // graphs == the same static step eager == the dynamic (Forward) decode
    const eager = await run(plan, { cudaGraphs: false, staticDecode: true });
    const dyn = await run(plan, { cudaGraphs: false, staticDecode: false });
    for (const row of rows) {
      expect(together.get(row.id), `row ${row.id} graphs vs eager static`).to.deep.equal(eager.get(row.id));
      expect(dyn.get(row.id), `row ${row.id} dynamic vs static`).to.deep.equal(eager.get(row.id));
    }
  });
});
