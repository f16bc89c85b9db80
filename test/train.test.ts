/**
 * The `train` command end to end on the embedded tiny model: metrics and checkpoints, exact resume
 * after a kill, SIGINT checkpoint, bad input caught before compute, non-finite steps, and honest
 * learning-direction checks (GRPO on a checkable toy reward; OPSD lowering the JSD to its teacher).
 */
import { expect } from 'chai';
import { spawn, type ChildProcess } from 'node:child_process';
import { cpSync, existsSync, mkdtempSync, readdirSync, readFileSync, writeFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { packageRoot } from '../lib/native.js';
import { runTraining, ensureDefaultModel } from '../lib/train/run.js';
import { cleanCheckpointTemps, resolveCheckpoint, writeFinalDir } from '../lib/train/checkpoint.js';
import { sampleDatasetPath } from '../lib/data/schema.js';
import { Policy, generate } from '../lib/model/policy.js';
import { NativeBackend } from '../lib/train/native-backend.js';
import { Trainer, type RewardFn } from '../lib/train/trainer.js';
import { resolveConfig } from '../lib/config/train.js';
import { CLI, SMALL_TRAIN_FLAGS, adapterOf, adapterMaxAbsDiff as maxAbsDiff } from './helpers/run.js';

const quiet = () => {};
/** A small, fast schedule (both stages, checkpoints every step). */
const SMALL = [
  '--opsd-steps',
  '3',
  '--grpo-steps',
  '3',
  '--opsd-batch-size',
  '2',
  '--questions-per-step',
  '1',
  '--group-size',
  '2',
  '--max-new-tokens',
  '6',
  '--checkpoint-every',
  '1',
  '--validate-every',
  '0',
  '--seed',
  '7',
];

function run(
  args: string[],
  opts: { onLine?: (l: string, p: ChildProcess) => void; env?: Record<string, string> } = {},
): Promise<{ code: number | null; signal: NodeJS.Signals | null; out: string }> {
  return new Promise((resolveRun) => {
    const p = spawn(process.execPath, [CLI, ...args], { cwd: packageRoot, env: { ...process.env, CI: 'true', ...opts.env } });
    let out = '';
    const feed = (b: Buffer) => {
      const s = b.toString();
      out += s;
      for (const l of s.split('\n')) if (l) opts.onLine?.(l, p);
    };
    p.stdout.on('data', feed);
    p.stderr.on('data', feed);
    p.on('close', (code, signal) => resolveRun({ code, signal, out }));
  });
}

describe('train (embedded tiny model)', function () {
  this.timeout(600000);
  let tmp: string;
  before(() => {
    ensureDefaultModel();
    tmp = mkdtempSync(join(tmpdir(), 'pg-train-'));
  });
  after(() => rmSync(tmp, { recursive: true, force: true }));

  let uninterrupted: string;
  it('runs OPSD then GRPO, writing metrics per step, checkpoints and a PEFT adapter', async () => {
    uninterrupted = join(tmp, 'full');
    const r = await run(['train', '--out', uninterrupted, ...SMALL]);
    expect(r.code, r.out).to.equal(0);
    const lines = readFileSync(join(uninterrupted, 'metrics.jsonl'), 'utf8')
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l));
    const steps = lines.filter((l) => typeof l.loss === 'number');
    expect(steps.map((l) => l.stage)).to.deep.equal(['opsd', 'opsd', 'opsd', 'grpo', 'grpo', 'grpo']);
    for (const l of steps) {
      for (const k of ['loss', 'lr', 'gradNorm', 'tokensPerSecond', 'stepSeconds', 'memory']) expect(l, k).to.have.property(k);
      expect(Number.isFinite(l.loss)).to.equal(true);
    }
    const grpo = steps.filter((l) => l.stage === 'grpo');
    for (const k of ['rewardMean', 'rewardStd', 'kl', 'clipFraction', 'passRate']) expect(grpo[0], k).to.have.property(k);
    expect(steps.filter((l) => l.stage === 'opsd')[0]).to.have.property('jsd');
    expect(existsSync(join(uninterrupted, 'final', 'adapter_config.json'))).to.equal(true);
    const cfg = JSON.parse(readFileSync(join(uninterrupted, 'final', 'adapter_config.json'), 'utf8'));
    expect(cfg.peft_type).to.equal('LORA');
    expect(resolveCheckpoint(uninterrupted).state.globalStep).to.equal(6);
    expect(r.out).to.match(/stage\s+steps/); // the summary table
    // Checkpoints after steps 1-5 were written beside the next step (a row each, once committed);
    // the final one (step 6) in the step.
    const written = lines.filter((l) => typeof l.checkpointWriteSeconds === 'number');
    expect(written.map((l) => l.globalStep)).to.deep.equal([1, 2, 3, 4, 5]);
    for (const l of written) {
      expect(l.checkpoint).to.match(/checkpoints\/step-00000\d$/);
      expect(l.checkpointBytes).to.be.greaterThan(0);
      expect(l.checkpointCaptureSeconds).to.be.at.least(0);
    }
    expect(r.out).to.match(/written beside the next step/);
    const summary = JSON.parse(readFileSync(join(uninterrupted, 'summary.json'), 'utf8'));
    expect(summary).to.deep.include({ skippedSteps: 0, noUpdate: false });
    expect(summary.stages.map((s: { skippedSteps: number }) => s.skippedSteps)).to.deep.equal([0, 0]);
  });

  it('a run whose every update was skipped (non-finite gradient) says so, counts the skips per stage, keeps final/ and exits 1', async () => {
    const out = join(tmp, 'all-skipped');
    // alpha / r = 3e38 / 8 scales the LoRA branch past float32: every OPSD gradient norm is Infinity.
    const r = await run(['train', '--out', out, ...SMALL_TRAIN_FLAGS, '--stages', 'opsd', '--opsd-steps', '2', '--lora-alpha', '3e38']);
    expect(r.code, r.out).to.equal(1);
    expect(r.out).to.match(/\[opsd\] step 2: non-finite loss or gradient .*grad norm Infinity.*; step skipped/);
    expect(r.out).to.match(/^opsd\s+2\s+2\s/m); // the summary table's skipped column
    expect(r.out).to.contain('WARNING: no update was applied: all 2 steps of the run were skipped for a non-finite loss or gradient (last: opsd step 2: loss');
    expect(r.out).to.contain('papergym-native: no update was applied');
    expect(r.out).to.contain(`${join(out, 'final')} holds the starting adapter`);
    expect(existsSync(join(out, 'final', 'adapter_model.safetensors'))).to.equal(true);
    const summary = JSON.parse(readFileSync(join(out, 'summary.json'), 'utf8'));
    expect(summary).to.deep.include({ globalStep: 2, skippedSteps: 2, noUpdate: true });
    expect(summary.stages.map((s: { skippedSteps: number }) => s.skippedSteps)).to.deep.equal([2]);
    expect(summary.stages[0].lastSkip).to.match(/^opsd step 2: loss [\d.e+-]+, grad norm Infinity$/);
  });

  it('a kill while a checkpoint is written beside the next step leaves the previous one as latest; the resumed run equals the uninterrupted one', async () => {
    const dir = join(tmp, 'killed-beside');
    // PAPERGYM_FAULT=checkpoint:beside-next-step:4 kills the process once step 5 has started and the
    // 4th background write has its files in the temp dir, uncommitted (no timing luck).
    const first = await run(['train', '--out', dir, ...SMALL], { env: { PAPERGYM_FAULT: 'checkpoint:beside-next-step:4' } });
    expect(first.signal, first.out).to.equal('SIGKILL');
    expect(resolveCheckpoint(dir).state.globalStep).to.equal(3);
    expect(readdirSync(join(dir, 'checkpoints')).filter((n) => n.startsWith('.tmp-step-000004'))).to.have.length(1);
    const second = await run(['train', '--resume', dir]);
    expect(second.code, second.out).to.equal(0);
    expect(second.out).to.match(/removed 1 leftover/);
    expect(resolveCheckpoint(dir).state.globalStep).to.equal(6);
    expect(maxAbsDiff(adapterOf(join(dir, 'final')), adapterOf(join(uninterrupted, 'final')))).to.be.at.most(1e-6);
  });

  it('final/ is written whole or not at all: a finished run whose final/ was cut short is rewritten from its last checkpoint by --resume; a complete one is left alone', async () => {
    const dir = join(tmp, 'final-cut');
    cpSync(uninterrupted, dir, { recursive: true });
    const ck = resolveCheckpoint(dir);
    const files = Object.keys(ck.state.files ?? {}).filter((f) => f !== 'trainer_state.json');
    expect(files).to.include.members(['adapter_model.safetensors', 'adapter_config.json', 'optimizer.safetensors']);
    // final/ holds the state of the final checkpoint, byte for byte.
    for (const f of files) expect(readFileSync(join(dir, 'final', f)).equals(readFileSync(join(ck.dir, f))), f).to.equal(true);
    // A failed write leaves the old final/ as it was and no temp dir behind.
    const before = readFileSync(join(dir, 'final', 'adapter_model.safetensors'));
    let err: Error | undefined;
    await writeFinalDir(dir, async (t) => {
      writeFileSync(join(t, 'adapter_model.safetensors'), 'partial');
      throw new Error('disk full');
    }).catch((e: Error) => (err = e));
    expect(err?.message).to.equal('disk full');
    expect(readFileSync(join(dir, 'final', 'adapter_model.safetensors')).equals(before)).to.equal(true);
    await cleanCheckpointTemps(dir);
    expect(readdirSync(dir).filter((n) => n.startsWith('.final-'))).to.deep.equal([]);
    // Cut short (as a disk that filled up left it before final/ was written atomically).
    rmSync(join(dir, 'final', 'optimizer.safetensors'));
    const r = await run(['train', '--resume', dir]);
    expect(r.code, r.out).to.equal(0);
    expect(r.out).to.match(/final was missing or incomplete: rewritten from .*step-000006/);
    for (const f of files) expect(readFileSync(join(dir, 'final', f)).equals(readFileSync(join(ck.dir, f))), f).to.equal(true);
    const again = await run(['train', '--resume', dir]);
    expect(again.code).to.not.equal(0);
    expect(again.out).to.match(/the run already finished/);
  });

  it('resumes exactly after the process is killed mid-run', async () => {
    const dir = join(tmp, 'killed');
    const first = await run(['train', '--out', dir, ...SMALL], {
      onLine: (l, p) => {
        if (/checkpoints\/step-000004/.test(l)) p.kill('SIGKILL'); // mid-GRPO
      },
    });
    expect(first.signal).to.equal('SIGKILL');
    const mid = resolveCheckpoint(dir).state.globalStep;
    expect(mid).to.be.within(4, 5);
    const second = await run(['train', '--resume', dir]);
    expect(second.code, second.out).to.equal(0);
    expect(second.out).to.match(/resuming/);
    expect(resolveCheckpoint(dir).state.globalStep).to.equal(6);
    const d = maxAbsDiff(adapterOf(join(dir, 'final')), adapterOf(join(uninterrupted, 'final')));
    expect(d).to.be.at.most(1e-6);
    // The summary keeps the stage finished before the kill.
    const summary = JSON.parse(readFileSync(join(dir, 'summary.json'), 'utf8'));
    expect(summary.stages.map((s: { stage: string; steps: number }) => [s.stage, s.steps])).to.deep.equal([
      ['opsd', 3],
      ['grpo', 3],
    ]);
  });

  it('resumes a checkpoint written before sampling.mergeAdapter existed (the LoRA branch, as it ran)', async () => {
    // The saved config of an older run has no sampling.mergeAdapter: resuming must not fail the
    // config check ("must be set"), and the run continues with the LoRA branch ('off').
    const dir = join(tmp, 'pre-merge');
    cpSync(uninterrupted, dir, { recursive: true });
    for (const ck of readdirSync(join(dir, 'checkpoints')).filter((d) => d.startsWith('step-'))) {
      const f = join(dir, 'checkpoints', ck, 'trainer_state.json');
      const st = JSON.parse(readFileSync(f, 'utf8'));
      delete st.config.sampling.mergeAdapter;
      writeFileSync(f, JSON.stringify(st));
    }
    const logs: string[] = [];
    await runTraining({ resume: dir, flags: { grpo: { steps: 4 } } as never, log: (l) => logs.push(l), handleSignals: false });
    expect(resolveCheckpoint(dir).state.globalStep).to.equal(7);
    expect((resolveCheckpoint(dir).state.config as { sampling: { mergeAdapter?: string } }).sampling.mergeAdapter).to.equal('off');
    expect(logs.join('\n')).to.match(/judge totals: /);
  });

  it('SIGINT writes a checkpoint before exiting', async () => {
    const dir = join(tmp, 'sigint');
    let sent = false;
    const noCkpt = SMALL.map((a, i) => (SMALL[i - 1] === '--checkpoint-every' ? '100' : a));
    const r = await run(['train', '--out', dir, ...noCkpt], {
      onLine: (l, p) => {
        if (!sent && /\[opsd\] step 1\//.test(l)) {
          sent = true;
          p.kill('SIGINT');
        }
      },
    });
    expect(r.code, r.out).to.equal(130);
    expect(r.out).to.match(/SIGINT/);
    const st = resolveCheckpoint(dir).state;
    expect(st.globalStep).to.be.at.least(1);
    expect(r.out).to.match(/resume with --resume/);
  });

  it('runs the ablation orders and teacher variants (grpo,opsd with an EMA teacher; sft; opsd with the current adapter as teacher)', async () => {
    for (const [stages, teacher] of [
      ['grpo,opsd', 'ema'],
      ['sft', 'fixed'],
      ['opsd', 'current'],
    ] as const) {
      const dir = join(tmp, `abl-${stages}-${teacher}`);
      const r = await run([
        'train',
        '--out',
        dir,
        '--stages',
        stages,
        '--teacher',
        teacher,
        '--opsd-steps',
        '2',
        '--grpo-steps',
        '1',
        '--sft-steps',
        '2',
        '--opsd-batch-size',
        '2',
        '--questions-per-step',
        '1',
        '--group-size',
        '2',
        '--max-new-tokens',
        '4',
        '--checkpoint-every',
        '1',
        '--validate-every',
        '0',
      ]);
      expect(r.code, r.out).to.equal(0);
      const st = resolveCheckpoint(dir);
      expect(st.state.stageIndex).to.equal(stages.split(',').length);
      if (teacher === 'ema') expect(existsSync(join(st.dir, 'snapshot-ema-teacher.safetensors'))).to.equal(true);
    }
  });

  describe('bad input is caught before any compute', () => {
    it('reports invalid dataset rows with line numbers and skips them; --strict stops', async () => {
      const good = readFileSync(sampleDatasetPath(), 'utf8').trim().split('\n');
      const data = join(tmp, 'mixed.jsonl');
      writeFileSync(data, [good[0], '{"id": "broken"', good[1], JSON.stringify({ ...JSON.parse(good[2]!), rubric: [] }), ...good.slice(3)].join('\n') + '\n');
      const logs: string[] = [];
      const s = await runTraining({
        flags: {
          data,
          out: join(tmp, 'mixed'),
          stages: ['sft'],
          sft: { steps: 1, lr: 1e-3, batchSize: 1 },
          validation: { validateEvery: 0, items: 0 },
          checkpoint: { every: 0 },
        },
        log: (l) => logs.push(l),
        handleSignals: false,
      });
      expect(s.globalStep).to.equal(1);
      expect(logs.join('\n'))
        .to.match(/line 2:/)
        .and.to.match(/line 4:/);
      let err: Error | undefined;
      try {
        await runTraining({ flags: { data, strict: true, out: join(tmp, 'strict') }, log: quiet, handleSignals: false });
      } catch (e) {
        err = e as Error;
      }
      expect(err?.message).to.match(/line 2/);
    });
    it('rejects a model dir without weights, a mismatched tokenizer and an unwritable output dir', async () => {
      const model = ensureDefaultModel();
      const noWeights = join(tmp, 'no-weights');
      cpSync(model, noWeights, { recursive: true });
      rmSync(join(noWeights, 'model.safetensors'));
      const expectErr = async (flags: object, re: RegExp) => {
        let err: Error | undefined;
        try {
          await runTraining({ flags: flags as never, log: quiet, handleSignals: false });
        } catch (e) {
          err = e as Error;
        }
        expect(err?.message ?? 'no error').to.match(re);
      };
      await expectErr({ model: noWeights, out: join(tmp, 'o1') }, /has no weights/);
      const badTok = join(tmp, 'bad-tok');
      cpSync(model, badTok, { recursive: true });
      const cfg = JSON.parse(readFileSync(join(badTok, 'config.json'), 'utf8'));
      writeFileSync(join(badTok, 'config.json'), JSON.stringify({ ...cfg, vocab_size: 1000 }));
      await expectErr({ model: badTok, out: join(tmp, 'o2') }, /does not match the model/);
      const file = join(tmp, 'a-file');
      writeFileSync(file, 'x');
      await expectErr({ out: join(file, 'run') }, /not writable/);
    });
  });

  it('sampling.mergeAdapter: on = the rollouts sample from the merged adapter, off = the LoRA branch; auto is off on CPU; out of memory with the copy falls back to the branch', async () => {
    const policy = await Policy.load(ensureDefaultModel());
    try {
      policy.model.addLora({ r: 4, alpha: 8, seed: 2 });
      const w = policy.model.loraWeights();
      for (const [k, t] of Object.entries(w)) if (k.includes('lora_B')) for (let i = 0; i < t.data.length; i++) t.data[i] = Math.sin(i * 0.3 + k.length) * 0.2;
      policy.model.setLoraWeights(w);
      const prompt = await policy.encodePrompts(['Design an experiment on rubric judges.'], { enableThinking: false });
      const o = { n: 3, temperature: 1, topK: 20, topP: 1, maxNewTokens: 10, seed: 5 };
      const tok = policy.tokenizer;
      for (const [setting, merged] of [
        ['on', true],
        ['off', false],
        ['auto', false],
      ] as const) {
        const backend = new NativeBackend(policy, resolveConfig({ flags: { sampling: { mergeAdapter: setting } } as never }));
        expect(backend.mergeAdapter, setting).to.equal(merged);
        const ro = await backend.generate(prompt, o);
        const direct = await generate(policy.model, { prompts: prompt, ...o, stopIds: [...tok.stopIds], padId: tok.padTokenId, mergeAdapter: merged });
        expect(direct.adapterMerged, setting).to.equal(merged);
        expect(
          ro.map((r) => r.tokenIds),
          setting,
        ).to.deep.equal(direct.completions.map((c) => Array.from(c.tokenIds)));
        expect(
          ro.map((r) => r.logprobs),
          setting,
        ).to.deep.equal(direct.completions.map((c) => Array.from(c.logprobs)));
      }
      // Out of memory with the merged copy: the same call through the LoRA branch, and the branch
      // (sampling.mergeAdapter off, carried by the config into checkpoints) for the rest of the run.
      const cfg = resolveConfig({ flags: { sampling: { mergeAdapter: 'on' } } as never });
      const lines: string[] = [];
      const backend = new NativeBackend(policy, cfg, { simulateMergedRolloutOom: true, log: (l) => lines.push(l) });
      const ro = await backend.generate(prompt, o);
      const branch = await generate(policy.model, { prompts: prompt, ...o, stopIds: [...tok.stopIds], padId: tok.padTokenId });
      expect(ro.map((r) => r.tokenIds)).to.deep.equal(branch.completions.map((c) => Array.from(c.tokenIds)));
      expect(ro.map((r) => r.logprobs)).to.deep.equal(branch.completions.map((c) => Array.from(c.logprobs)));
      expect(lines).to.have.length(1);
      expect(lines[0]).to.match(
        /^rollout: out of memory with the merged adapter \(.*simulated out of memory.*\); sampling through the LoRA branch from now on \(sampling\.mergeAdapter off\)$/,
      );
      expect(cfg.sampling.mergeAdapter).to.equal('off');
      expect(backend.mergeAdapter).to.equal(false);
      await backend.generate(prompt, o);
      expect(lines, 'no second fallback: the branch does not hit the merged-copy hook').to.have.length(1);
      // Without the merged adapter an out-of-memory is not retried here (the trainer's own handling).
      const off = new NativeBackend(policy, resolveConfig({ flags: { sampling: { mergeAdapter: 'off' } } as never }), { simulateMergedRolloutOom: true });
      expect((await off.generate(prompt, o)).length).to.equal(3);
    } finally {
      policy.dispose();
    }
  });

  it('skips a non-finite step with a log line and stops with a checkpoint after repeated NaNs', async () => {
    const policy = await Policy.load(ensureDefaultModel());
    try {
      policy.model.addLora({ r: 4, alpha: 8, seed: 1 });
      const cfg = resolveConfig({
        flags: { stages: ['sft'], sft: { steps: 6, lr: 1e-3, batchSize: 1 }, validation: { validateEvery: 0, items: 0 }, checkpoint: { every: 0 } },
      });
      const inner = new NativeBackend(policy, cfg);
      let calls = 0;
      const nanAt = new Set([1, 3, 4, 5]);
      const backend = Object.create(inner) as NativeBackend;
      backend.sftBackward = async (b) => {
        const r = await inner.sftBackward(b);
        return nanAt.has(calls++) ? { loss: NaN } : r;
      };
      const items = readFileSync(sampleDatasetPath(), 'utf8')
        .trim()
        .split('\n')
        .map((l) => JSON.parse(l));
      const logs: string[] = [];
      const runDir = join(tmp, 'nan');
      const t = new Trainer(cfg, {
        backend,
        items,
        reward: (async () => []) as RewardFn,
        advantages: () => ({ advantages: [], keep: [] }),
        runDir,
        log: (l) => logs.push(l),
      });
      let err: Error | undefined;
      try {
        await t.run();
      } catch (e) {
        err = e as Error;
      }
      expect(logs.filter((l) => /non-finite/.test(l)).length).to.equal(4);
      expect(err?.message).to.match(/3 consecutive non-finite steps/);
      // Steps 0–4 ran (1, 3, 4 skipped); the third consecutive non-finite step (5) stops the run.
      expect(resolveCheckpoint(runDir).state.stageStep).to.equal(5);
    } finally {
      policy.dispose();
    }
  });
});
