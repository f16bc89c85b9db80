/**
 * Issue 51 item 3: one word per setting from flag to kernel. Every training config key is its flag
 * (camelCase, less the section's prefix); the settings renamed to get there still accept their
 * former config keys and flags, each with a deprecation line; a run and a checkpoint written under
 * the former keys still resume. The former names are written out by hand here (what configs and
 * checkpoints of before the rename hold), not read from the settings rows.
 */
import { expect } from 'chai';
import { mkdtempSync, readFileSync, rmSync, writeFileSync, mkdirSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import '../lib/train/stages/index.js';
import '../lib/judge/backends/index.js';
import { commandSettings, trainSettings } from '../lib/config/settings.js';
import { resolveConfig, type TrainConfig } from '../lib/config/train.js';
import { upgradeFormerFlags } from '../lib/config/renames.js';
import { restartableRun } from '../lib/train/checkpoint.js';
import { runTraining } from '../lib/train/run.js';
import { cli } from './helpers/run.js';
import { suffixFlagHints } from '../bin/cli-util.js';

/** The renames of issue 51 item 3, former → now, as configs written before it spell them. */
const FORMER: Record<string, string> = {
  'lora.useRslora': 'lora.rslora',
  'lora.float32Branch': 'lora.fp32Branch',
  'sampling.enableThinking': 'sampling.thinking',
  'optim.betas': 'optim.adamBetas',
  'optim.eps': 'optim.adamEps',
  'optim.schedule': 'optim.lrSchedule',
  'opsd.beta': 'opsd.jsdBeta',
  'grpo.betaKl': 'grpo.klCoef',
  'grpo.scale': 'grpo.advantageScale',
  'grpo.alpha': 'grpo.rewardAlpha',
  'judge.onMemberFailure': 'judge.juryOnMemberFailure',
  'validation.every': 'validation.validateEvery',
  'validation.maxItems': 'validation.items',
  'validation.minImprovement': 'validation.earlyStopThreshold',
  'memory.emptyCacheBetweenPhases': 'memory.emptyCache',
  'memory.maxMemoryGB': 'memory.maxMemory',
  'memory.judgeMaxTokensPerCall': 'memory.judgeTokensPerCall',
};

const camel = (f: string) => f.replace(/-([a-z0-9])/g, (_, c: string) => c.toUpperCase());
const get = (o: unknown, k: string): unknown => k.split('.').reduce<unknown>((x, p) => (x as Record<string, unknown> | undefined)?.[p], o);

/** Rewrites a saved config (nested, with `origins` when config.json) under the former keys. */
function toFormer(cfg: Record<string, unknown>): Record<string, unknown> {
  const c = structuredClone(cfg);
  for (const [old, now] of Object.entries(FORMER)) {
    const [sec, leaf] = now.split('.') as [string, string];
    const section = c[sec] as Record<string, unknown> | undefined;
    if (!section || !(leaf in section)) continue;
    section[old.split('.')[1]!] = section[leaf];
    delete section[leaf];
    const origins = c.origins as Record<string, unknown> | undefined;
    if (origins && now in origins) {
      origins[old] = origins[now];
      delete origins[now];
    }
  }
  return c;
}

describe('one word per setting: keys are flags, former names still read (issue 51 item 3)', function () {
  this.timeout(300_000);
  let tmp = '';
  before(() => (tmp = mkdtempSync(join(tmpdir(), 'pg-renames-'))));
  after(() => rmSync(tmp, { recursive: true, force: true }));

  it("every training key and command option is its flag in camelCase less its section's prefix (the section's selector flag is `kind`)", () => {
    const odd: string[] = [];
    // Every command's options too, by the name messages give them (a judge option `judgeUrl` is judge.url).
    const rows = [...trainSettings(), ...Object.values(commandSettings()).flat()];
    for (const s of rows) {
      const parts = (s.label ?? s.key).split('.');
      const leaf = parts[parts.length - 1]!;
      const section = parts.length > 1 ? parts[0]! : '';
      const ok =
        leaf === camel(s.flag) ||
        (section && s.flag.startsWith(`${section}-`) && leaf === camel(s.flag.slice(section.length + 1))) ||
        (section && s.flag === section && leaf === 'kind');
      if (!ok) odd.push(`${s.label ?? s.key} (--${s.flag})`);
    }
    expect(odd).to.deep.equal([]);
    // The renames' own list is what this test holds.
    const formerKeys = trainSettings().flatMap((s) => (s.formerly?.keys ?? []).map((k) => [k, s.key]));
    expect(Object.fromEntries(formerKeys)).to.deep.equal(FORMER);
  });

  it('α is --reward-alpha in train and eval alike', () => {
    const flagOf = (cmd: string, key: string) => commandSettings()[cmd]!.find((s) => s.key === key)?.flag;
    expect(flagOf('train', 'grpo.rewardAlpha')).to.equal('reward-alpha');
    expect(flagOf('eval', 'rewardAlpha')).to.equal('reward-alpha');
    expect(commandSettings().eval!.some((s) => s.flag === 'alpha')).to.equal(false);
  });

  it('a config file with the former keys resolves to the same values, one deprecation line each naming the file', () => {
    const file = join(tmp, 'old.yaml');
    writeFileSync(
      file,
      [
        'lora: {useRslora: true, float32Branch: true}',
        'sampling: {enableThinking: true}',
        'optim: {betas: [0.8, 0.95], eps: 1.0e-6, schedule: cosine}',
        'opsd: {beta: 0.3}',
        'grpo: {betaKl: 0.02, scale: batch, alpha: 0.6}',
        'judge: {onMemberFailure: continue}',
        'validation: {every: 5, maxItems: 7, minImprovement: 0.01}',
        'memory: {emptyCacheBetweenPhases: true, maxMemoryGB: 40, judgeMaxTokensPerCall: 4096}',
        '',
      ].join('\n'),
    );
    const lines: string[] = [];
    const c = resolveConfig({ file, warn: (l) => lines.push(l) });
    expect(c.lora.rslora).to.equal(true);
    expect(c.lora.fp32Branch).to.equal(true);
    expect(c.sampling.thinking).to.equal(true);
    expect(c.optim.adamBetas).to.deep.equal([0.8, 0.95]);
    expect(c.optim.adamEps).to.equal(1e-6);
    expect(c.optim.lrSchedule).to.equal('cosine');
    expect(c.opsd.jsdBeta).to.equal(0.3);
    expect(c.grpo.klCoef).to.equal(0.02);
    expect(c.grpo.advantageScale).to.equal('batch');
    expect(c.grpo.rewardAlpha).to.equal(0.6);
    expect(c.judge.juryOnMemberFailure).to.equal('continue');
    expect(c.validation).to.include({ validateEvery: 5, items: 7, earlyStopThreshold: 0.01 });
    expect(c.memory).to.include({ emptyCache: true, maxMemory: 40, judgeTokensPerCall: 4096 });
    // No former key is left in the resolved config.
    for (const old of Object.keys(FORMER)) expect(get(c, old), old).to.equal(undefined);
    expect(lines).to.have.length(Object.keys(FORMER).length);
    expect(lines).to.include(
      `config ${file}: grpo.betaKl is a former name of grpo.klCoef (--kl-coef); read as grpo.klCoef (rename it: the former name will be removed)`,
    );
  });

  it('a former key given with its new key is one setting given twice: refused, naming the file and both keys (as a TRL name with ours)', () => {
    const file = join(tmp, 'both.yaml');
    for (const [a, b] of [
      [0.02, 0.05],
      [0.05, 0.05],
    ]) {
      writeFileSync(file, `grpo: {betaKl: ${a}, klCoef: ${b}}\n`);
      expect(() => resolveConfig({ file, warn: () => {} })).to.throw(
        `config ${file}: grpo.betaKl (a former name) and grpo.klCoef (--kl-coef) are the same setting, given twice (${a}, ${b}); give grpo.klCoef only`,
      );
    }
    // A TRL name with a former key: the TRL name is refused by name, after the former key was read.
    writeFileSync(file, 'use_rslora: true\nlora: {useRslora: false}\n');
    expect(() => resolveConfig({ file, warn: () => {} })).to.throw(`config ${file}: use_rslora (TRL) and lora.rslora are the same setting; give one`);
    // A former key in another section than its own: unknown there, with the hint.
    writeFileSync(file, 'opsd: {betaKl: 0.02}\n');
    expect(() => resolveConfig({ file, warn: () => {} })).to.throw(
      `config ${file}: unknown key opsd.betaKl; did you mean \`grpo.klCoef\` (formerly grpo.betaKl, \`--kl-coef\`)?`,
    );
  });

  it('CLI: train --config with former keys prints each deprecation line once', async () => {
    const file = join(tmp, 'cli.yaml');
    writeFileSync(file, 'grpo: {betaKl: 0.02}\nvalidation: {every: 0}\nopsd: {steps: 1, batchSize: 1, microBatch: 1}\nsampling: {maxNewTokens: 2}\n');
    const r = await cli(['train', '--config', file, '--out', join(tmp, 'cli-run'), '--stages', 'opsd', '--checkpoint-every', '0']);
    expect(r.code, r.err).to.equal(0);
    const lines = r.err.split('\n').filter((l) => l.includes('is a former name of'));
    expect(lines).to.deep.equal([
      `warning: config ${file}: grpo.betaKl is a former name of grpo.klCoef (--kl-coef); read as grpo.klCoef (rename it: the former name will be removed)`,
      `warning: config ${file}: validation.every is a former name of validation.validateEvery (--validate-every); read as validation.validateEvery (rename it: the former name will be removed)`,
    ]);
  });

  it('flags given as an object by a library caller: a former key is read as its key, with the line', () => {
    const lines: string[] = [];
    const c = resolveConfig({ flags: { grpo: { betaKl: 0.03 } } as never, warn: (l) => lines.push(l) });
    expect(c.grpo.klCoef).to.equal(0.03);
    expect(get(c, 'grpo.betaKl')).to.equal(undefined);
    expect(lines).to.deep.equal([
      'flags: grpo.betaKl is a former name of grpo.klCoef (--kl-coef); read as grpo.klCoef (rename it: the former name will be removed)',
    ]);
  });

  it('a former flag on the command line is written as the flag, `=` and `--no-` forms too; after `--` it is left alone', () => {
    const { args, lines } = upgradeFormerFlags(['eval', '--alpha', '0.5', '--alpha=0.4', '--', '--alpha'], commandSettings().eval!);
    expect(args).to.deep.equal(['eval', '--reward-alpha', '0.5', '--reward-alpha=0.4', '--', '--alpha']);
    expect(lines).to.deep.equal(['--alpha is a former name of --reward-alpha; read as --reward-alpha (rename it: the former name will be removed)']);
    // A flag of another command with the same word is not touched (train has no former flags).
    expect(upgradeFormerFlags(['train', '--alpha', '1'], commandSettings().train!).args).to.deep.equal(['train', '--alpha', '1']);
  });

  it('CLI: eval --alpha is checked as --reward-alpha, and with --reward-alpha too it is one flag given twice', async () => {
    const range = await cli(['eval', '--alpha', '2', '--rescore', join(tmp, 'none.jsonl')]);
    expect(range.code).to.equal(1);
    expect(range.err).to.include('warning: --alpha is a former name of --reward-alpha; read as --reward-alpha');
    expect(range.err).to.match(/--reward-alpha/);
    expect(range.err).to.not.match(/Unknown argument/);
    const twice = await cli(['eval', '--alpha', '0.5', '--reward-alpha', '0.6', '--rescore', join(tmp, 'none.jsonl')]);
    expect(twice.code).to.equal(1);
    expect(twice.err).to.match(/--reward-alpha.*given (twice|more than once)/);
  });

  it('an unknown flag that is the last word of flags gets them as a hint (train --alpha: --lora-alpha or --reward-alpha)', async () => {
    const train = commandSettings().train!;
    expect(suffixFlagHints(['train', '--alpha', '0.5', '--lr=1e-5', '--opsd-steps', '2', '--', '--steps'], train)).to.deep.equal([
      '--alpha: did you mean `--lora-alpha` or `--reward-alpha`?',
      '--lr: did you mean `--sft-lr`, `--opsd-lr` or `--grpo-lr`?',
    ]);
    expect(suffixFlagHints(['eval', '--nothing-like-it'], commandSettings().eval!)).to.deep.equal([]);
    const r = await cli(['train', '--alpha', '0.5']);
    expect(r.code).to.equal(1);
    expect(r.err).to.include('papergym-native: Unknown argument: alpha\n  --alpha: did you mean `--lora-alpha` or `--reward-alpha`?');
  });

  it('a run stopped before its first checkpoint, its config.json under the former keys, restarts under the new ones', () => {
    const dir = join(tmp, 'restart');
    mkdirSync(dir, { recursive: true });
    writeFileSync(
      join(dir, 'config.json'),
      JSON.stringify({ seed: 1, grpo: { betaKl: 0.02, alpha: 0.5 }, validation: { every: 3 }, origins: { 'grpo.betaKl': 'flag' } }),
    );
    const r = restartableRun(dir)!;
    expect(r.config).to.deep.equal({ seed: 1, grpo: { klCoef: 0.02, rewardAlpha: 0.5 }, validation: { validateEvery: 3 } });
  });

  it('a checkpoint and config.json written under the former keys resume (values kept), and the resumed run writes the new keys', async () => {
    const out = join(tmp, 'run');
    const flags: Partial<TrainConfig> = {
      out,
      seed: 5,
      stages: ['opsd'],
      sampling: { maxNewTokens: 4 } as TrainConfig['sampling'],
      opsd: { steps: 1, batchSize: 1, microBatch: 1, jsdBeta: 0.3 } as TrainConfig['opsd'],
      validation: { validateEvery: 0 } as TrainConfig['validation'],
      checkpoint: { every: 1 },
    };
    await runTraining({ flags, log: () => {}, handleSignals: false });
    // Write the run as a version before the rename would have: config.json and the checkpoint's state.
    const cfgPath = join(out, 'config.json');
    writeFileSync(cfgPath, JSON.stringify(toFormer(JSON.parse(readFileSync(cfgPath, 'utf8')) as Record<string, unknown>), null, 2));
    const latest = readFileSync(join(out, 'checkpoints', 'latest'), 'utf8').trim();
    const statePath = join(out, 'checkpoints', latest, 'trainer_state.json');
    const state = JSON.parse(readFileSync(statePath, 'utf8')) as { config: Record<string, unknown> };
    state.config = toFormer(state.config);
    expect(get(state.config, 'opsd.beta')).to.equal(0.3);
    expect(get(state.config, 'grpo.betaKl')).to.be.a('number');
    writeFileSync(statePath, JSON.stringify(state, null, 2));

    const logs: string[] = [];
    await runTraining({ resume: out, flags: { opsd: { steps: 2 } } as never, log: (l) => logs.push(l), handleSignals: false });
    expect(logs.join('\n')).to.match(
      /resume: .* names \d+ settings by their former names, read as today's: .*opsd\.beta → opsd\.jsdBeta.*grpo\.betaKl → grpo\.klCoef/,
    );
    // A library caller resuming with a former key in its flags: read as the key (validation.every is a run-time setting).
    await runTraining({ resume: out, flags: { opsd: { steps: 3 }, validation: { every: 0 } } as never, log: (l) => logs.push(l), handleSignals: false });
    expect(logs).to.include(
      'warning: flags: validation.every is a former name of validation.validateEvery (--validate-every); read as validation.validateEvery (rename it: the former name will be removed)',
    );
    const after = JSON.parse(readFileSync(cfgPath, 'utf8')) as Record<string, unknown>;
    expect(get(after, 'opsd.jsdBeta')).to.equal(0.3);
    for (const old of Object.keys(FORMER)) expect(get(after, old), old).to.equal(undefined);
    const last = readFileSync(join(out, 'checkpoints', 'latest'), 'utf8').trim();
    expect(last).to.not.equal(latest);
    const newState = JSON.parse(readFileSync(join(out, 'checkpoints', last, 'trainer_state.json'), 'utf8')) as {
      config: Record<string, unknown>;
      globalStep: number;
    };
    expect(newState.globalStep).to.equal(3);
    expect(get(newState.config, 'grpo.klCoef')).to.be.a('number');
    expect(get(newState.config, 'grpo.betaKl')).to.equal(undefined);
  });
});
