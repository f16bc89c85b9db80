/**
 * Out-of-memory recovery of the update, on CPU with the fault-injection hook
 * (PAPERGYM_SIMULATE_OOM_TOKENS: an update micro-batch above that many tokens throws the addon's
 * ERR_PG_OOM error). The run halves the micro-batch (then turns recompute on), retries the step
 * with the same seed and rollouts, logs one line per reduction and keeps the smaller setting: its
 * adapter equals an uninjected run at the setting it settled on (bit for bit) and, with dropout 0,
 * an uninjected run at the original micro-batch (the window normaliser makes micro-batching
 * invisible to the gradient, to float rounding). At the smallest setting it stops with a
 * checkpoint, the peak and advice. Also: splitting a GRPO window into micro-batches through the
 * backend, and ordering it longest first (the stages' length-bucketed micro-batches), gives the
 * same LoRA gradients.
 */
import { expect } from 'chai';
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { runTraining, ensureDefaultModel } from '../lib/train/run.js';
import { resolveCheckpoint } from '../lib/train/checkpoint.js';
import { Policy } from '../lib/model/policy.js';
import { NativeBackend } from '../lib/train/native-backend.js';
import { resolveConfig, type TrainConfig } from '../lib/config/train.js';
import { adapterOf, adapterMaxAbsDiff as maxAbsDiff } from './helpers/run.js';
import { chunks, longestFirst } from '../lib/train/stages/stage.js';

function maxAbs(a: Record<string, Float32Array>): number {
  let m = 0;
  for (const v of Object.values(a)) for (const x of v) m = Math.max(m, Math.abs(x));
  return m;
}

/** OPSD 1 step (4 questions) then GRPO 2 steps (2 questions × 4), 6 new tokens; rollout rows pinned at 8. */
function flags(out: string, over: { opsdMb: number; grpoMb: number; dropout: number; recompute?: boolean; maxMemory?: number }): Partial<TrainConfig> {
  return {
    out,
    seed: 11,
    stages: ['opsd', 'grpo'],
    lora: { dropout: over.dropout } as TrainConfig['lora'],
    sampling: { maxNewTokens: 6 } as TrainConfig['sampling'],
    opsd: { steps: 1, batchSize: 4, microBatch: over.opsdMb } as TrainConfig['opsd'],
    grpo: { steps: 2, questionsPerStep: 2, groupSize: 4, microBatch: over.grpoMb } as TrainConfig['grpo'],
    validation: { validateEvery: 0 } as TrainConfig['validation'],
    checkpoint: { every: 0 },
    memory: { rolloutRows: 8, recompute: over.recompute ?? false, ...(over.maxMemory ? { maxMemory: over.maxMemory } : {}) } as TrainConfig['memory'],
  };
}

async function train(out: string, over: Parameters<typeof flags>[1], oomTokens?: number): Promise<{ lines: string[]; error?: Error }> {
  const lines: string[] = [];
  if (oomTokens) process.env.PAPERGYM_SIMULATE_OOM_TOKENS = String(oomTokens);
  try {
    await runTraining({ flags: flags(out, over), handleSignals: false, log: (l) => lines.push(l) });
    return { lines };
  } catch (e) {
    return { lines, error: e as Error };
  } finally {
    delete process.env.PAPERGYM_SIMULATE_OOM_TOKENS;
  }
}

describe('out-of-memory recovery of the update (fault injection, tiny model)', function () {
  this.timeout(600000);
  let tmp: string;
  const origWrite = process.stdout.write.bind(process.stdout);
  before(() => {
    ensureDefaultModel();
    tmp = mkdtempSync(join(tmpdir(), 'pg-oom-'));
  });
  after(() => rmSync(tmp, { recursive: true, force: true }));
  beforeEach(() => {
    // runTraining prints the summary table on stdout.
    process.stdout.write = (() => true) as typeof process.stdout.write;
  });
  afterEach(() => {
    process.stdout.write = origWrite;
  });

  it('halves the micro-batch, retries with the same draws, keeps the smaller setting: adapter equals uninjected runs', async () => {
    // Prompts are 131–207 tokens + 6 new: micro-batches of 4+ rows exceed 500 tokens, 2 rows do not.
    const injected = await train(join(tmp, 'inj'), { opsdMb: 4, grpoMb: 8, dropout: 0.05 }, 500);
    expect(injected.error, injected.error?.stack).to.equal(undefined);
    const oomLines = injected.lines.filter((l) => /out of memory in the update/.test(l));
    expect(oomLines.length, injected.lines.join('\n')).to.equal(3); // OPSD 4 -> 2; GRPO 8 -> 4 -> 2 (then kept)
    expect(oomLines[0]).to.match(/^\[opsd\] step 0: .*micro-batch 4.*retrying the step with micro-batch 2/);
    expect(oomLines[1]).to.match(/^\[grpo\] step 0: .*micro-batch 8.*retrying the step with micro-batch 4/);
    expect(oomLines[2]).to.match(/^\[grpo\] step 0: .*micro-batch 4.*retrying the step with micro-batch 2/);
    const st = resolveCheckpoint(join(tmp, 'inj')).state.config as TrainConfig;
    expect([st.opsd.microBatch, st.grpo.microBatch]).to.deep.equal([2, 2]);

    // Uninjected at the setting it settled on (dropout 0.05: same dropout draws): bit for bit.
    const settled = await train(join(tmp, 'settled'), { opsdMb: 2, grpoMb: 2, dropout: 0.05 });
    expect(settled.error).to.equal(undefined);
    const a = adapterOf(join(tmp, 'inj', 'final'));
    expect(maxAbsDiff(a, adapterOf(join(tmp, 'settled', 'final')))).to.equal(0);
    expect(maxAbs(a)).to.be.above(0);

    // Dropout 0: equals the uninjected run at the original micro-batches (accumulation invariance).
    const inj0 = await train(join(tmp, 'inj0'), { opsdMb: 4, grpoMb: 8, dropout: 0 }, 500);
    const orig0 = await train(join(tmp, 'orig0'), { opsdMb: 4, grpoMb: 8, dropout: 0 });
    expect(inj0.error).to.equal(undefined);
    expect(orig0.error).to.equal(undefined);
    expect(inj0.lines.filter((l) => /out of memory in the update/.test(l)).length).to.equal(3);
    const d = maxAbsDiff(adapterOf(join(tmp, 'inj0', 'final')), adapterOf(join(tmp, 'orig0', 'final')));
    // AdamW's first steps move each parameter by ≈ lr·sign(g) (lr 1e-3, 3 steps: up to 3e-3), so a
    // rounding-level gradient difference on a near-zero gradient shows at ~1e-6: bound 1e-5 (0.3%).
    expect(d).to.be.below(1e-5);
  });

  it('turns recompute on below micro-batch 1; at the smallest setting stops with a checkpoint, the peak and flags that fit', async () => {
    // 120 tokens: every single row fails without recompute, passes with it (the hook doubles its limit).
    const rc = await train(join(tmp, 'rc'), { opsdMb: 1, grpoMb: 2, dropout: 0 }, 120);
    expect(rc.error, rc.error?.stack).to.equal(undefined);
    const oom = rc.lines.filter((l) => /out of memory in the update/.test(l));
    expect(
      oom.some((l) => /recompute on \(kept/.test(l)),
      oom.join('\n'),
    ).to.equal(true);
    const cfg = resolveCheckpoint(join(tmp, 'rc')).state.config as TrainConfig;
    expect(cfg.memory.recompute).to.equal(true);
    const ref = await train(join(tmp, 'rc-ref'), { opsdMb: 1, grpoMb: 1, dropout: 0, recompute: true });
    expect(ref.error).to.equal(undefined);
    expect(maxAbsDiff(adapterOf(join(tmp, 'rc', 'final')), adapterOf(join(tmp, 'rc-ref', 'final')))).to.be.below(1e-5);

    // 50 tokens: nothing fits even with recompute: the run stops (with --max-memory the plan gives advice).
    const fatal = await train(join(tmp, 'fatal'), { opsdMb: 2, grpoMb: 2, dropout: 0, maxMemory: 1000 }, 50);
    expect(fatal.error).to.be.instanceOf(Error);
    expect((fatal.error as Error & { code?: string }).code).to.equal('ERR_PG_OOM');
    expect(fatal.error!.message).to.match(
      /out of memory at the smallest setting \(micro-batch 1, recompute on\); peak allocated .*; checkpoint .*Flags that would fit: --max-new-tokens/,
    );
    expect(existsSync(join(tmp, 'fatal', 'checkpoints'))).to.equal(true);
    expect(resolveCheckpoint(join(tmp, 'fatal')).state.globalStep).to.equal(0);
    const saved = JSON.parse(readFileSync(join(tmp, 'fatal', 'config.json'), 'utf8'));
    expect(saved.memoryPlan).to.have.property('phases');
    expect(fatal.lines.some((l) => /^memory plan: budget 1000\.0 GB/.test(l))).to.equal(true);
  });

  it('splitting a GRPO window into micro-batches through the backend leaves the accumulated LoRA gradient unchanged', async () => {
    const cfg = resolveConfig({ flags: { lora: { dropout: 0 } } as never });
    const policy = await Policy.load(ensureDefaultModel(), { device: 'cpu' });
    try {
      policy.model.addLora({ r: 8, alpha: 16, dropout: 0, targetModules: cfg.lora.targetModules as never, seed: 3 });
      // Non-zero B so every LoRA tensor gets a gradient.
      const w = policy.model.loraWeights();
      for (const [k, t] of Object.entries(w)) if (k.includes('lora_B')) for (let i = 0; i < t.data.length; i++) t.data[i] = Math.sin(i + k.length) * 0.05;
      policy.model.setLoraWeights(w);
      const backend = new NativeBackend(policy, cfg);
      const seqs = [5, 9, 3, 7, 12, 4, 8, 6].map((n, b) => ({
        promptIds: Array.from({ length: 4 + (b % 3) }, (_, i) => 100 + i * 7 + b),
        completionIds: Array.from({ length: n }, (_, i) => 200 + ((i * 13 + b * 5) % 300)),
      }));
      const batch = seqs.map((s, b) => ({
        seq: s,
        oldLogprobs: s.completionIds.map((_, i) => -3 - 0.1 * ((i + b) % 5)),
        refLogprobs: s.completionIds.map(() => -3.2),
        advantage: ((b % 4) - 1.5) / 1.2,
      }));
      const totalTokens = seqs.reduce((a, s) => a + s.completionIds.length, 0);
      // The stages' length-bucketed order (longest first): same gradient, less padding computed.
      const sorted = longestFirst(batch, (x) => x.seq.promptIds.length + x.seq.completionIds.length);
      const padded = (xs: typeof batch, mb: number) =>
        chunks(xs, mb).reduce((n, part) => n + part.length * Math.max(...part.map((x) => x.seq.promptIds.length + x.seq.completionIds.length)), 0);
      expect(padded(sorted, 2)).to.be.below(padded(batch, 2));
      const lens = sorted.map((x) => x.seq.promptIds.length + x.seq.completionIds.length);
      expect(lens).to.deep.equal([...lens].sort((a, b) => b - a));
      const grads = async (mb: number, aggregation: 'grpo' | 'dapo' | 'dr_grpo', order = batch) => {
        backend.zeroGrad();
        for (let i = 0; i < order.length; i += mb) {
          await backend.grpoBackward(order.slice(i, i + mb), {
            epsLow: 0.2,
            epsHigh: 0.28,
            klCoef: 0.04,
            temperature: 1.1,
            aggregation,
            totalSequences: batch.length,
            totalCompletionTokens: totalTokens,
            maxCompletionLength: 12,
          });
        }
        return Object.fromEntries(Object.entries(policy.model.loraGrads()).map(([k, v]) => [k, Float32Array.from(v.data)]));
      };
      for (const agg of ['grpo', 'dapo', 'dr_grpo'] as const) {
        const whole = await grads(8, agg);
        const scale = maxAbs(whole);
        expect(scale).to.be.above(0);
        for (const mb of [1, 3, 4]) expect(maxAbsDiff(await grads(mb, agg), whole) / scale, `${agg} mb ${mb}`).to.be.below(1e-5);
        expect(maxAbsDiff(await grads(2, agg, sorted), whole) / scale, `${agg} longest first, mb 2`).to.be.below(1e-5);
      }
    } finally {
      policy.dispose();
    }
  });
});
