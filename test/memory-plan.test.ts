/**
 * The memory plan (lib/train/memory-plan.ts), pure arithmetic on CPU: it reproduces the
 * measured H200 peaks of the `train` command within the stated tolerance, its estimates grow with
 * every size knob and shrink with recompute, the plan it makes respects the budget (and the
 * --max-memory cap) and keeps the settings the user gave.
 */
import { expect } from 'chai';
import {
  planMemory,
  estimatePhases,
  planForRun,
  pinnedSettings,
  flagsThatFit,
  readModelShape,
  residentBytes,
  updateBytes,
  formatPlan,
  gb,
  mergedWeightBytes,
  QWEN3_SHAPES,
  CALIBRATION_TOLERANCE,
  type PlanInputs,
  type PlanSettings,
} from '../lib/train/memory-plan.js';
import { resolveConfig } from '../lib/config/train.js';
import { ensureDefaultModel } from '../lib/train/run.js';

const ALL7 = ['q_proj', 'k_proj', 'v_proj', 'o_proj', 'gate_proj', 'up_proj', 'down_proj'];

/** The measured runs: `train --preset qwen3-X --model <random X> --device cuda --opsd-steps 1 --grpo-steps 1`, embedded dataset. */
function presetInputs(shape: keyof typeof QWEN3_SHAPES, budgetGB = 1e6): PlanInputs {
  return {
    shape: QWEN3_SHAPES[shape],
    dtypeBytes: 2,
    lora: { r: 64, targetModules: ALL7, dropout: 0.05 },
    stages: ['opsd', 'grpo'],
    // Longest student / teacher prompt of data/sample/papergym-sample.jsonl (Qwen3 tokenizer, chat template).
    promptTokens: { student: 207, teacher: 525 },
    maxNewTokens: 1024,
    opsd: { batchSize: 32, microBatch: 4, teacher: 'fixed' },
    grpo: { questionsPerStep: 8, groupSize: 8, microBatch: 8, klCoef: 0.01, reference: 'stage-start' },
    sft: { batchSize: 2 },
    recompute: false,
    budgetBytes: budgetGB * 1e9,
  };
}
const AS_MEASURED: PlanSettings = { microBatch: { opsd: 4, grpo: 8 }, recompute: false, rolloutRows: 64, judgeTokensPerCall: 65536 };

describe('memory plan', () => {
  it('reproduces the measured peaks (8B GRPO 108.9 GB, 8B OPSD 64.3 GB, 1.7B GRPO 40.6 GB) within the stated tolerance', () => {
    const cases: [keyof typeof QWEN3_SHAPES, 'update-grpo' | 'update-opsd', number][] = [
      ['qwen3-8b', 'update-grpo', 108.9],
      ['qwen3-8b', 'update-opsd', 64.3],
      ['qwen3-1.7b', 'update-grpo', 40.6],
    ];
    for (const [shape, phase, measuredGB] of cases) {
      const est = estimatePhases(presetInputs(shape), AS_MEASURED)[phase]! / 1e9;
      expect(Math.abs(est / measuredGB - 1), `${shape} ${phase}: ${est.toFixed(1)} GB vs ${measuredGB}`).to.be.below(CALIBRATION_TOLERANCE);
    }
    expect(CALIBRATION_TOLERANCE).to.be.at.most(0.05);
  });

  it('estimates grow with micro-batch, sequence length, rows, LoRA rank and model size; recompute lowers the update', () => {
    const x = presetInputs('qwen3-4b');
    const est = (over: Partial<PlanInputs>, st: Partial<PlanSettings> = {}) => estimatePhases({ ...x, ...over }, { ...AS_MEASURED, ...st });
    let prev = 0;
    for (const mb of [1, 2, 4, 8, 16]) {
      const v = est({}, { microBatch: { ...AS_MEASURED.microBatch, grpo: mb } })['update-grpo']!;
      expect(v).to.be.above(prev);
      prev = v;
    }
    prev = 0;
    for (const n of [128, 256, 512, 1024, 2048]) {
      const e = est({ maxNewTokens: n });
      expect(e['update-grpo']!).to.be.above(prev);
      prev = e['update-grpo']!;
    }
    prev = 0;
    for (const rows of [8, 16, 32, 64]) {
      const v = est({}, { rolloutRows: rows })['rollout-grpo']!;
      expect(v).to.be.at.least(prev);
      prev = v;
    }
    expect(est({ lora: { ...x.lora, r: 128 } })['optimizer']!).to.be.above(est({})['optimizer']!);
    expect(est({}, { recompute: true })['update-grpo']!).to.be.below(est({}, { recompute: false })['update-grpo']! / 4);
    const sizes = (['qwen3-0.6b', 'qwen3-1.7b', 'qwen3-4b', 'qwen3-8b'] as const).map((s) => residentBytes(presetInputs(s)));
    for (let i = 1; i < sizes.length; i++) expect(sizes[i]!).to.be.above(sizes[i - 1]!);
    expect(updateBytes(x, 2, 1000, false, 'grpo')).to.be.above(updateBytes(x, 1, 1000, false, 'grpo'));
  });

  it('the plan respects the budget: every phase under budget × (1 − margin) whenever it says it fits; settings shrink with the budget', () => {
    for (const shape of ['qwen3-1.7b', 'qwen3-4b', 'qwen3-8b'] as const) {
      let prev: ReturnType<typeof planMemory> | undefined;
      for (const budget of [141, 96, 80, 48, 40, 24, 16]) {
        const p = planMemory(presetInputs(shape, budget));
        if (p.fits) for (const [ph, v] of Object.entries(p.phases)) expect(v!, `${shape} @ ${budget} GB: ${ph}`).to.be.at.most(p.limitBytes);
        expect(p.limitBytes).to.equal(budget * 1e9 * 0.9);
        if (prev) {
          // With recompute newly on, a larger micro-batch may fit again.
          if (p.recompute === prev.recompute) {
            expect(p.microBatch.grpo).to.be.at.most(prev.microBatch.grpo!);
            expect(p.microBatch.opsd).to.be.at.most(prev.microBatch.opsd!);
          }
          expect(p.rolloutRows).to.be.at.most(prev.rolloutRows);
          expect(p.judgeTokensPerCall).to.be.at.most(prev.judgeTokensPerCall);
          if (prev.recompute) expect(p.recompute).to.equal(true);
        }
        prev = p;
      }
    }
    // Goals: 8B within 80 GB, 4B and 1.7B within 48 GB (as planned).
    expect(planMemory(presetInputs('qwen3-8b', 80)).fits).to.equal(true);
    expect(planMemory(presetInputs('qwen3-4b', 48)).fits).to.equal(true);
    expect(planMemory(presetInputs('qwen3-1.7b', 48)).fits).to.equal(true);
    // Uncapped on an H200 the measured settings stay (no needless slow-down).
    const big = planMemory(presetInputs('qwen3-8b', 141));
    expect([big.microBatch.grpo, big.microBatch.opsd, big.recompute]).to.deep.equal([8, 4, false]);
    // GRPO rollout rows are whole groups.
    for (const b of [80, 48, 24]) expect(planMemory(presetInputs('qwen3-8b', b)).rolloutRows % 8).to.equal(0);
  });

  it('keeps pinned settings and only reports whether they fit; says what does not fit; suggests flags that fit', () => {
    const x = { ...presetInputs('qwen3-8b', 48), pinned: { microBatch: { grpo: true }, recompute: true } };
    const p = planMemory(x);
    expect(p.microBatch.grpo).to.equal(8);
    expect(p.recompute).to.equal(false);
    expect(p.fits).to.equal(false);
    expect(p.notes.join(' ')).to.match(/does not fit in 43\.2 GB.*update-grpo.* — the run starts anyway: an out of memory halves the micro-batch/);
    expect([gb(43.2e9), gb(0), gb(1e6), gb(4.5e7)]).to.deep.equal(['43.2', '0.0', '0.0010', '0.045']);
    const tiny = planMemory(presetInputs('qwen3-8b', 20));
    expect(tiny.fits).to.equal(false);
    const flags = flagsThatFit(presetInputs('qwen3-4b', 24));
    expect(flags).to.match(/--max-new-tokens \d+/);
    const n = Number(/--max-new-tokens (\d+)/.exec(flags)![1]);
    expect(
      planMemory({
        ...presetInputs('qwen3-4b', 24),
        maxNewTokens: n,
        recompute: true,
        opsd: { batchSize: Number(/--opsd-batch-size (\d+)/.exec(flags)![1]), microBatch: 1, teacher: 'fixed' },
        grpo: { ...presetInputs('qwen3-4b').grpo, microBatch: 1, questionsPerStep: Number(/--questions-per-step (\d+)/.exec(flags)![1]) },
      }).fits,
    ).to.equal(true);
  });

  it('merged-adapter rollouts: the copy counts in the rollout phases; auto merges when it fits beside the chosen rollout rows, else keeps the LoRA branch and says so', () => {
    const s = QWEN3_SHAPES['qwen3-1.7b'];
    // 28 layers × (q/k/v 2048·4096 + o 2048·2048 + gate/up 2·2048·6144 + down 6144·2048) bf16, plus the fp32 gate/up while merging.
    const all = 28 * 2 * (2048 * 4096 + 2048 * 2048 + 2 * 2048 * 6144 + 6144 * 2048) + 4 * 2 * 2048 * 6144;
    expect(mergedWeightBytes(s, ALL7, 2)).to.equal(all);
    expect(mergedWeightBytes(s, ['v_proj'], 2)).to.equal(28 * 2 * 2048 * 4096 + 4 * 2048 * 4096); // the whole fused q/k/v is copied
    expect(mergedWeightBytes(s, [], 2)).to.equal(0);
    const x = presetInputs('qwen3-1.7b', 141);
    const plain = estimatePhases(x, AS_MEASURED),
      merged = estimatePhases(x, { ...AS_MEASURED, mergeAdapter: true });
    for (const ph of ['rollout-grpo', 'rollout-opsd'] as const) expect(merged[ph]! - plain[ph]!, ph).to.equal(all);
    for (const ph of ['update-grpo', 'update-opsd', 'judge', 'reference', 'optimizer'] as const) expect(merged[ph], ph).to.equal(plain[ph]);
    expect(planMemory({ ...x, mergeAdapter: 'auto' }).mergeAdapter).to.equal(true);
    expect(planMemory(x).mergeAdapter).to.equal(false);
    expect(planMemory({ ...x, mergeAdapter: true }).mergeAdapter).to.equal(true);
    // Over budgets from 4 to 40 GB: whenever auto merges, the rollouts with the copy fit; some
    // budget fits the rows but not the copy, and that plan keeps the branch with a note.
    let refused = 0;
    for (let gbs = 4; gbs <= 40; gbs += 0.25) {
      const p = planMemory({ ...presetInputs('qwen3-1.7b', gbs), mergeAdapter: 'auto' });
      const rollout = Math.max(p.phases['rollout-grpo']!, p.phases['rollout-opsd']!);
      if (p.mergeAdapter) expect(rollout, `${gbs} GB`).to.be.at.most(p.limitBytes);
      else if (planMemory(presetInputs('qwen3-1.7b', gbs)).phases['rollout-grpo']! <= p.limitBytes) {
        refused++;
        expect(p.notes.join('; ')).to.match(/merged weights \(2\.9 GB\) do not fit beside \d+ rollout rows/);
      }
    }
    expect(refused).to.be.above(0);
    // Out-of-memory advice with --merge-adapter on: give up the merged copy before cutting the run
    // (8B on 32 GB: the run fits with the LoRA branch at 1024 tokens; with the copy nothing fit).
    const on = { ...presetInputs('qwen3-8b', 32), mergeAdapter: true };
    expect(planMemory(on).fits).to.equal(false);
    const advice = flagsThatFit(on);
    expect(advice).to.include('--merge-adapter off').and.to.include('--max-new-tokens 1024').and.to.include('--questions-per-step 8');
    expect(planMemory({ ...on, mergeAdapter: false, recompute: true, opsd: { ...on.opsd, microBatch: 1 }, grpo: { ...on.grpo, microBatch: 1 } }).fits).to.equal(
      true,
    );
    // Where the copy fits, the advice keeps it.
    expect(flagsThatFit({ ...presetInputs('qwen3-1.7b', 141), mergeAdapter: true })).to.not.include('--merge-adapter');
  });

  it("judge beside the rollout (grpo.judgeOverlap): the GRPO rollout phase holds the judge's working memory too; auto overlaps only when both fit (a note otherwise); planForRun resolves auto on CUDA", () => {
    const x = presetInputs('qwen3-1.7b', 141);
    const apart = estimatePhases(x, AS_MEASURED),
      beside = estimatePhases(x, { ...AS_MEASURED, judgeOverlap: true });
    expect(beside['rollout-grpo']! - apart['rollout-grpo']!).to.equal(apart.judge! - residentBytes(x));
    for (const ph of ['rollout-opsd', 'update-grpo', 'update-opsd', 'judge', 'reference', 'optimizer'] as const) expect(beside[ph], ph).to.equal(apart[ph]);
    expect(planMemory({ ...x, judgeOverlap: 'auto' }).judgeOverlap).to.equal(true);
    expect(planMemory(x).judgeOverlap).to.equal(false);
    expect(planMemory({ ...x, localJudge: false, judgeOverlap: 'auto' }).judgeOverlap).to.equal(undefined);
    // Over budgets from 4 to 40 GB: whenever auto overlaps, the rollout with the judge fits; some
    // budget fits each alone but not both, and that plan judges after the rollout with a note.
    let refused = 0;
    for (let gbs = 4; gbs <= 40; gbs += 0.25) {
      const p = planMemory({ ...presetInputs('qwen3-1.7b', gbs), judgeOverlap: 'auto' });
      if (p.judgeOverlap) expect(p.phases['rollout-grpo']!, `${gbs} GB`).to.be.at.most(p.limitBytes);
      else if (p.fits) {
        refused++;
        expect(p.notes.join('; ')).to.match(/the local judge scores after the rollout: its [\d.]+ GB do not fit beside the rollout/);
      }
    }
    expect(refused).to.be.above(0);
    const gpu = resolveConfig({ preset: 'qwen3-1.7b' });
    expect(gpu.grpo.judgeOverlap).to.equal('auto');
    const g = planForRun(gpu, { shape: QWEN3_SHAPES['qwen3-1.7b'], promptTokens: { student: 207, teacher: 525 }, deviceMemoryBytes: 141e9, pinned: {} })!;
    expect(g.plan.judgeOverlap).to.equal(true);
    expect(gpu.grpo.judgeOverlap).to.equal('on');
    expect(formatPlan(g.plan)).to.include('(beside the rollout)');
    const http = resolveConfig({ preset: 'qwen3-1.7b', flags: { judge: { kind: 'http', url: 'http://127.0.0.1:9/v1', model: 'm' } } as never });
    planForRun(http, { shape: QWEN3_SHAPES['qwen3-1.7b'], promptTokens: { student: 207, teacher: 525 }, deviceMemoryBytes: 141e9, pinned: {} });
    expect(http.grpo.judgeOverlap, 'no local judge: nothing to decide').to.equal('auto');
    const capped = resolveConfig({ preset: 'qwen3-1.7b', flags: { device: 'cpu', memory: { maxMemory: 48 } } as never });
    planForRun(capped, { shape: QWEN3_SHAPES['qwen3-1.7b'], promptTokens: { student: 207, teacher: 525 }, pinned: {} });
    expect(capped.grpo.judgeOverlap, 'CPU: no overlap to decide').to.equal('auto');
  });

  it("--judge-overlap on: the judge's maxTokensPerCall is chosen to fit beside the GRPO rollout (pinned kept); the out-of-memory advice gives the overlap up before cutting the run", () => {
    // 1.7B on 16 GB: alone the judge takes 32768 tokens per call, beside the 32-row rollout only 16384 fit.
    const x = presetInputs('qwen3-1.7b', 16);
    const apart = planMemory(x),
      on = planMemory({ ...x, judgeOverlap: true });
    expect(apart.judgeTokensPerCall).to.equal(32768);
    expect(on.judgeOverlap).to.equal(true);
    expect(on.judgeTokensPerCall).to.equal(16384);
    expect(on.phases['rollout-grpo']!).to.be.at.most(on.limitBytes);
    expect(on.fits).to.equal(true);
    expect(on.notes.join('; ')).to.include('judge maxTokensPerCall 32768 -> 16384 to fit beside the rollout (grpo.judgeOverlap on)');
    // Over budgets from 4 to 40 GB: an overlap-on plan that fits holds the rollout and the judge at once.
    for (let gbs = 4; gbs <= 40; gbs += 0.25) {
      const p = planMemory({ ...presetInputs('qwen3-1.7b', gbs), judgeOverlap: true });
      if (p.fits) expect(p.phases['rollout-grpo']!, `${gbs} GB`).to.be.at.most(p.limitBytes);
      expect(p.judgeTokensPerCall, `${gbs} GB`).to.be.at.most(planMemory(presetInputs('qwen3-1.7b', gbs)).judgeTokensPerCall);
    }
    // A pinned maxTokensPerCall is kept (then the plan says what does not fit).
    const pinned = planMemory({ ...x, judgeOverlap: true, judgeTokensPerCall: 32768, pinned: { judgeTokensPerCall: true } });
    expect(pinned.judgeTokensPerCall).to.equal(32768);
    expect(pinned.fits).to.equal(false);
    expect(pinned.notes.join('; ')).to.match(/does not fit .*rollout-grpo/);
    // 7.25 GB: even 2048 judge tokens do not fit beside the rollout; judged after it, the run fits as configured.
    const tight = { ...presetInputs('qwen3-1.7b', 7.25), judgeOverlap: true };
    expect(planMemory(tight).fits).to.equal(false);
    expect(planMemory({ ...tight, judgeOverlap: false }).fits).to.equal(true);
    const advice = flagsThatFit(tight);
    expect(advice).to.include('--judge-overlap off').and.to.include('--max-new-tokens 1024').and.to.include('--questions-per-step 8');
    expect(flagsThatFit({ ...presetInputs('qwen3-1.7b', 141), judgeOverlap: true })).to.not.include('--judge-overlap');
  });

  it('planForRun: off on CPU without a cap, on with --max-memory; applies the plan to the config; pinned from flags / file only', () => {
    const shape = readModelShape(ensureDefaultModel());
    expect(shape.hiddenSize).to.be.above(0);
    const cpu = resolveConfig({});
    expect(planForRun(cpu, { shape, promptTokens: { student: 200, teacher: 500 }, pinned: {} })).to.equal(undefined);
    const capped = resolveConfig({ preset: 'qwen3-8b', flags: { device: 'cpu', memory: { maxMemory: 48 } } as never });
    const r = planForRun(capped, { shape: QWEN3_SHAPES['qwen3-8b'], promptTokens: { student: 207, teacher: 525 }, deviceMemoryBytes: 141e9, pinned: {} })!;
    expect(r.plan.budgetBytes).to.equal(48e9);
    expect(capped.grpo.microBatch).to.equal(r.plan.microBatch.grpo).and.to.be.below(8);
    expect(capped.memory.rolloutRows).to.equal(r.plan.rolloutRows);
    expect(capped.memory.judgeTokensPerCall).to.equal(r.plan.judgeTokensPerCall);
    const gpu = resolveConfig({ preset: 'qwen3-8b' });
    const g = planForRun(gpu, { shape: QWEN3_SHAPES['qwen3-8b'], promptTokens: { student: 207, teacher: 525 }, deviceMemoryBytes: 80e9, pinned: {} })!;
    expect(g.plan.budgetBytes).to.equal(80e9);
    // sampling.mergeAdapter 'auto' is decided by the CUDA plan; on CPU and when given it stays.
    expect(gpu.sampling.mergeAdapter).to.equal(g.plan.mergeAdapter ? 'on' : 'off');
    expect(cpu.sampling.mergeAdapter).to.equal('auto');
    const off = resolveConfig({ preset: 'qwen3-1.7b', flags: { sampling: { mergeAdapter: 'off' } } as never });
    expect(
      planForRun(off, { shape: QWEN3_SHAPES['qwen3-1.7b'], promptTokens: { student: 207, teacher: 525 }, deviceMemoryBytes: 141e9, pinned: {} })!.plan
        .mergeAdapter,
    ).to.equal(false);
    expect(off.sampling.mergeAdapter).to.equal('off');
    const big = resolveConfig({ preset: 'qwen3-1.7b' });
    expect(
      planForRun(big, { shape: QWEN3_SHAPES['qwen3-1.7b'], promptTokens: { student: 207, teacher: 525 }, deviceMemoryBytes: 141e9, pinned: {} })!.plan
        .mergeAdapter,
    ).to.equal(true);
    expect(big.sampling.mergeAdapter).to.equal('on');
    expect(
      planForRun(resolveConfig({ preset: 'qwen3-8b', flags: { memory: { plan: 'off' } } as never }), {
        shape,
        promptTokens: { student: 1, teacher: 1 },
        deviceMemoryBytes: 80e9,
        pinned: {},
      }),
    ).to.equal(undefined);
    expect(pinnedSettings({ grpo: { microBatch: 2 } }, { memory: { recompute: true } })).to.deep.equal({
      microBatch: { opsd: false, grpo: true },
      recompute: true,
      rolloutRows: false,
      judgeTokensPerCall: false,
    });
    expect(() => resolveConfig({ flags: { memory: { maxMemory: -1 } } as never })).to.throw(/memory\.maxMemory \(--max-memory\) must be in \(0, ∞\)/);
  });
});
