/**
 * What a new user types wrong, and what the CLI does: clear early errors naming the flag (no run
 * dir left behind), negative numbers parsed as numbers, zero steps, resuming a finished run with
 * new step counts, metrics after a resume, unknown flags, a closed stdout pipe.
 */
import { expect } from 'chai';
import { spawnSync } from 'node:child_process';
import { cpSync, existsSync, mkdtempSync, readFileSync, rmSync, truncateSync, statSync, writeFileSync, mkdirSync, readdirSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { ensureDefaultModel, applyResumeFlags } from '../lib/train/run.js';
import { joinNegativeNumbers } from '../bin/cli-util.js';
import { etaSeconds, truncateMetrics } from '../lib/train/metrics.js';
import { Trainer } from '../lib/train/trainer.js';
import { resolveConfig } from '../lib/config/train.js';
import { pruneCheckpoints, type TrainerState } from '../lib/train/checkpoint.js';
import { resolveDevice } from '../lib/model/device.js';
import { CLI, cli, SMALL_TRAIN_FLAGS as SMALL } from './helpers/run.js';

describe('CLI bad input', function () {
  this.timeout(300000);
  let tmp: string;
  before(() => {
    tmp = mkdtempSync(join(tmpdir(), 'pg-badin-'));
  });
  after(() => rmSync(tmp, { recursive: true, force: true }));

  it('--kl-coef -1 and --grpo-lr -1e-5 are range errors naming the flag, before any run dir exists', async () => {
    for (const [flag, val, re] of [
      ['--kl-coef', '-1', /grpo\.klCoef \(--kl-coef\) must be in \[0, ∞\) \(got -1\)/],
      ['--grpo-lr', '-1e-5', /grpo\.lr \(--grpo-lr\) must be in \(0, ∞\) \(got -0\.00001\)/],
    ] as const) {
      const out = join(tmp, `run${flag}`);
      const r = await cli(['train', '--out', out, flag, val]);
      expect(r.code).to.equal(1);
      expect(r.err).to.match(re);
      expect(r.err).to.not.contain('Unknown arguments');
      expect(existsSync(out)).to.equal(false);
    }
    // An empty value is not 0 (yargs' number type read it as 0): "not a number", naming the flag.
    for (const args of [['--profile-step', ''], ['--profile-step='], ['--opsd-steps', '', '--grpo-steps', '0'], ['--grpo-lr']]) {
      const out = join(tmp, 'run-empty');
      const r = await cli(['train', '--out', out, ...args]);
      expect(r.code, args.join(' ')).to.equal(1);
      expect(r.err, args.join(' ')).to.match(new RegExp(`${args[0]!.replace(/=$/, '')}: not a number`));
      expect(existsSync(out)).to.equal(false);
    }
    const twice = await cli(['train', '--out', join(tmp, 'run-twice'), '--profile-step', '2', '--profile-step', '3']);
    expect([twice.code, twice.err.trim().split('\n').at(-1)]).to.deep.equal([1, 'papergym-native: --profile-step: given more than once (2, 3)']);
    expect(joinNegativeNumbers(['train', '--grpo-lr', '-1e-5', '--temperature', '-.5', '--seed', '3', '-x'])).to.deep.equal([
      'train',
      '--grpo-lr=-1e-5',
      '--temperature=-.5',
      '--seed',
      '3',
      '-x',
    ]);
  });

  it('an unknown flag prints one line and a pointer to --help, not the whole help', async () => {
    const r = await cli(['train', '--grpo-stpes', '3']);
    expect(r.code).to.equal(1);
    expect(r.err).to.not.contain('Options:');
    expect(r.err.trim().split('\n')).to.have.length(2);
    expect(r.err)
      .to.match(/Unknown argument.*grpo-stpes/)
      .and.to.contain('papergym-native train --help');
  });

  it('doctor | (a reader that closes at once) exits 0 without an EPIPE stack trace', () => {
    const r = spawnSync('bash', ['-c', `"${process.execPath}" "${CLI}" doctor | true; echo "rc=\${PIPESTATUS[0]}"`], { encoding: 'utf8', env: process.env });
    expect(r.stdout.trim()).to.equal('rc=0');
    expect(r.stderr).to.not.match(/EPIPE|Error/);
  });

  it('zero steps: all stages 0 is an early error; one stage 0 is skipped and the summary shows no NaN', async () => {
    const r = await cli(['train', '--out', join(tmp, 'zero'), '--opsd-steps', '0', '--grpo-steps', '0']);
    expect(r.code).to.equal(1);
    expect(r.err).to.match(/every stage has 0 steps/);
    const text = Trainer.formatSummary({
      runDir: '/r',
      globalStep: 2,
      interrupted: false,
      wallSeconds: 1,
      stages: [
        { stage: 'opsd', index: 0, steps: 0, firstLoss: NaN, lastLoss: NaN, stoppedEarly: false },
        { stage: 'grpo', index: 1, steps: 2, firstLoss: 0.5, lastLoss: 0.25, lastReward: 0.5, stoppedEarly: false },
      ],
    });
    expect(text).to.not.contain('NaN');
    expect(text).to.contain('skipped (0 steps)');
  });

  it('a bad device or a model that fails to load leaves no run dir', async () => {
    const modelDir = ensureDefaultModel();
    const bad = join(tmp, 'bad-model');
    cpSync(modelDir, bad, { recursive: true });
    truncateSync(join(bad, 'model.safetensors'), Math.floor(statSync(join(bad, 'model.safetensors')).size / 2));
    const out = join(tmp, 'run-bad-model');
    const r = await cli(['train', '--model', bad, '--out', out, ...SMALL]);
    expect(r.code).to.equal(1);
    expect(r.err).to.contain(`model ${bad}`);
    expect(r.err).to.not.match(/\n\s+at /);
    expect(existsSync(out)).to.equal(false);
    for (const dev of ['gpu', 'cuda:7']) {
      const o = join(tmp, `run-${dev}`);
      const d = await cli(['train', '--device', dev, '--out', o]);
      expect(d.code).to.equal(1);
      expect(d.err).to.match(dev === 'gpu' ? /--device\) must be cpu \| cuda \| cuda:N/ : /cuda:7/);
      expect(existsSync(o)).to.equal(false);
    }
  });

  it('--resume of a finished run: new step counts extend it, metrics get no duplicate rows, other changes are refused', async () => {
    const run = join(tmp, 'finished');
    const a = await cli(['train', '--out', run, '--opsd-steps', '1', '--grpo-steps', '1', ...SMALL]);
    expect(a.code, a.err).to.equal(0);
    const again = await cli(['train', '--resume', run]);
    expect(again.code).to.equal(1);
    expect(again.err).to.match(/already finished \(2 steps\); to train further pass a larger --grpo-steps than its 1/);
    const other = await cli(['train', '--resume', run, '--kl-coef', '0.5']);
    expect(other.code).to.equal(1);
    expect(other.err).to.match(/--kl-coef cannot change when resuming/);
    // Simulate a crash after a replayed row was logged: a row past the last checkpoint.
    writeFileSync(
      join(run, 'metrics.jsonl'),
      readFileSync(join(run, 'metrics.jsonl'), 'utf8') + JSON.stringify({ stage: 'grpo', step: 2, globalStep: 3, loss: 9 }) + '\n',
    );
    // --merge-adapter may change (a memory setting, as --recompute): the saved run sampled with the LoRA branch (auto on CPU).
    // --profile-step may change too (diagnostics, as --log-every).
    const ext = await cli(['train', '--resume', run, '--grpo-steps', '2', '--merge-adapter', 'on', '--profile-step', '2']);
    expect(ext.code, ext.err).to.equal(0);
    expect(ext.err).to.match(/resume: changed .*sampling\.mergeAdapter = "on"/);
    expect(ext.err).to.match(/resume: changed .*log\.profileStep = 2/);
    expect(ext.err).to.match(/dropped 1 metrics row/);
    const rows = readFileSync(join(run, 'metrics.jsonl'), 'utf8')
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l))
      .filter((o) => 'loss' in o);
    expect(rows.map((o) => o.globalStep)).to.deep.equal([1, 2, 3]);
    expect(rows[2].loss).to.not.equal(9);
    const summary = JSON.parse(readFileSync(join(run, 'summary.json'), 'utf8'));
    expect(summary.globalStep).to.equal(3);
    expect(summary.stages.map((s: { steps: number }) => s.steps)).to.deep.equal([1, 2]);
    const cfg = JSON.parse(readFileSync(join(run, 'config.json'), 'utf8'));
    expect([cfg.grpo.steps, cfg.origins['grpo.steps'], cfg.origins['opsd.steps']]).to.deep.equal([2, 'flag', 'flag']);
    expect([cfg.sampling.mergeAdapter, cfg.origins['sampling.mergeAdapter']]).to.deep.equal(['on', 'flag']);
  });

  it('train --out into a dir that already holds a run (finished, or killed before its first checkpoint) is refused before any compute; nothing there changes', async () => {
    const run = join(tmp, 'taken');
    const a = await cli(['train', '--out', run, '--opsd-steps', '1', '--grpo-steps', '1', ...SMALL]);
    expect(a.code, a.err).to.equal(0);
    const before = readFileSync(join(run, 'metrics.jsonl'), 'utf8');
    const cfgBefore = readFileSync(join(run, 'config.json'), 'utf8');
    const again = await cli(['train', '--out', run, '--opsd-steps', '1', '--grpo-steps', '0', ...SMALL]);
    expect(again.code).to.equal(1);
    expect(again.err).to.contain(`--out ${run} already holds a run`).and.to.contain(`--resume ${run}`);
    expect(again.err).to.not.match(/\n\s+at /);
    expect(readFileSync(join(run, 'metrics.jsonl'), 'utf8')).to.equal(before);
    expect(readFileSync(join(run, 'config.json'), 'utf8')).to.equal(cfgBefore);
    expect(readdirSync(join(run, 'checkpoints')).sort()).to.deep.equal(['latest', 'step-000002']);
    // Killed before its first checkpoint (--checkpoint-every 0): step lines, no checkpoint; --resume cannot continue it either.
    const killed = join(tmp, 'killed-early');
    mkdirSync(killed);
    const line = JSON.stringify({ stage: 'opsd', step: 1, globalStep: 1, loss: 0.5 }) + '\n';
    writeFileSync(join(killed, 'metrics.jsonl'), line);
    const fresh = await cli(['train', '--out', killed, '--opsd-steps', '1', '--grpo-steps', '0', ...SMALL]);
    expect(fresh.code).to.equal(1);
    expect(fresh.err).to.contain(`--out ${killed} already holds a run`);
    expect(readFileSync(join(killed, 'metrics.jsonl'), 'utf8')).to.equal(line);
    // An existing empty dir is fine.
    const empty = join(tmp, 'empty-out');
    mkdirSync(empty);
    const ok = await cli(['train', '--out', empty, '--opsd-steps', '1', '--grpo-steps', '0', ...SMALL]);
    expect(ok.code, ok.err).to.equal(0);
  });

  it('applyResumeFlags: a finished stage keeps its count; the stage in progress cannot go below its done steps', () => {
    const cfg = resolveConfig({ flags: { opsd: { steps: 4 } as never, grpo: { steps: 4 } as never } });
    const state = (stageIndex: number, stageStep: number): TrainerState => ({
      version: 1,
      stageIndex,
      stageStep,
      globalStep: 6,
      cursor: { epoch: 0, position: 0 },
      validation: [],
      stageDone: false,
      seed: 1,
      config: cfg,
      wallSeconds: 0,
      summary: [
        { stage: 'opsd', index: 0, steps: 4 },
        { stage: 'grpo', index: 1, steps: 2 },
      ],
    });
    expect(() => applyResumeFlags(cfg, state(1, 2), { opsd: { steps: 6 } } as never, '/r')).to.throw(/opsd stage already finished after 4 steps/);
    expect(() => applyResumeFlags(cfg, state(1, 2), { grpo: { steps: 1 } } as never, '/r')).to.throw(/below the 2 grpo steps already done/);
    const ok = applyResumeFlags(cfg, state(1, 2), { grpo: { steps: 10 }, opsd: { steps: 4 } } as never, '/r');
    expect(ok.changed).to.deep.equal(['grpo.steps']);
    expect(ok.config.grpo.steps).to.equal(10);
  });

  it('ETA counts only the steps done since the resume; replayed metrics rows are dropped', () => {
    // Resumed at stage step 50 of 100; 5 steps in 10 s → 2 s/step, 45 left → 90 s (not 45 × 10/55).
    expect(etaSeconds(10, 55, 50, 100)).to.equal(90);
    expect(Number.isNaN(etaSeconds(1, 50, 50, 100))).to.equal(true);
    const p = join(tmp, 'm.jsonl');
    writeFileSync(p, [1, 2, 3, 4].map((g) => JSON.stringify({ globalStep: g })).join('\n') + '\n{"globalSt');
    expect(truncateMetrics(p, 2)).to.equal(3);
    expect(
      readFileSync(p, 'utf8')
        .trim()
        .split('\n')
        .map((l) => JSON.parse(l).globalStep),
    ).to.deep.equal([1, 2]);
  });

  it('--save-total-limit keeps the newest N checkpoints, never the one latest names', async () => {
    const root = join(tmp, 'ckpts');
    for (const s of [2, 4, 6, 10]) mkdirSync(join(root, `step-${String(s).padStart(6, '0')}`), { recursive: true });
    expect(await pruneCheckpoints(root, 2, 'step-000010')).to.deep.equal(['step-000002', 'step-000004']);
    expect(readdirSync(root).sort()).to.deep.equal(['step-000006', 'step-000010']);
  });

  it('device auto resolves to cuda only when the addon sees a GPU', () => {
    const d = resolveDevice('auto');
    expect(['cpu', 'cuda']).to.include(d);
    expect(() => resolveDevice('tpu')).to.throw(/--device tpu: expected auto, cpu, cuda or cuda:N/);
  });
});
