/**
 * Issue 56 item 1: TRL / transformers / PEFT names. An unknown flag or config key that is a TRL
 * GRPOConfig / TrainingArguments / ModelConfig / PEFT LoraConfig name gets "did you mean"; one with
 * exactly the same meaning is accepted as an alias; `all-linear` is every linear layer but lm_head.
 */
import { expect } from 'chai';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import yargs from 'yargs';
import '../lib/train/stages/index.js';
import '../lib/judge/backends/index.js';
import { trainSettings, TRAIN_COMMAND_OPTIONS } from '../lib/config/settings.js';
import { readConfigFile } from '../lib/config/train.js';
import { trlAliasArgs, trlFlagHints, trlHint } from '../lib/config/trl.js';
import { renderConfigDocs } from '../lib/config/docs.js';
import { flagsToConfig, trainCommand } from '../bin/commands/train.js';
import { dashFlags } from '../bin/cli-util.js';
import { cli } from './helpers/run.js';

/** Qwen3's linear layers inside a decoder layer (config.json of Qwen3; PEFT all-linear leaves out lm_head). */
const QWEN3_LINEAR = ['q_proj', 'k_proj', 'v_proj', 'o_proj', 'gate_proj', 'up_proj', 'down_proj'];

/** The train command's flags parsed as the CLI does, mapped onto a partial config. */
function parseTrain(args: string[]): Record<string, unknown> {
  const y = (trainCommand.builder as (y: ReturnType<typeof yargs>) => ReturnType<typeof yargs>)(
    yargs(trlAliasArgs(dashFlags(args), [...TRAIN_COMMAND_OPTIONS, ...trainSettings()])).strict(),
  );
  return flagsToConfig(y.parseSync() as Record<string, unknown>) as Record<string, unknown>;
}

describe('TRL / PEFT names (issue 56)', function () {
  this.timeout(30000);
  let tmp = '';
  before(() => (tmp = mkdtempSync(join(tmpdir(), 'pg-trl-'))));
  after(() => rmSync(tmp, { recursive: true, force: true }));
  const all = () => [...TRAIN_COMMAND_OPTIONS, ...trainSettings()];

  it('a TRL name that is not the same setting gets "did you mean" naming ours, GRPO first', () => {
    expect(trlHint('learning_rate', all())).to.equal('did you mean `--grpo-lr`, `--sft-lr` or `--opsd-lr` (TRL: `learning_rate`)?');
    expect(trlHint('--bf16', all())).to.equal('did you mean `--dtype bfloat16` (TRL: `bf16`)?');
    expect(trlHint('beta', all())).to.equal('did you mean `--kl-coef` (TRL: `beta`)?');
    expect(trlHint('no-such-thing', all())).to.equal(undefined);
    // Accepted aliases are not hinted.
    expect(trlFlagHints(['--num-generations', '4', '--output-dir', 'x', '--learning-rate', '1e-5'], all())).to.deep.equal([
      '--learning-rate: did you mean `--grpo-lr`, `--sft-lr` or `--opsd-lr` (TRL: `learning_rate`)?',
    ]);
  });

  it('the CLI prints the hints under "Unknown arguments" (dashes or underscores, as TRL takes both)', async () => {
    const r = await cli(['train', '--learning_rate', '1e-5', '--max-steps', '3', '--fp16']);
    expect(r.code).to.equal(1);
    expect(r.err).to.match(/Unknown arguments?: .*learning-rate/);
    expect(r.err).to.include('--learning-rate: did you mean `--grpo-lr`');
    expect(r.err).to.include('--max-steps: did you mean `--grpo-steps`, `--sft-steps` or `--opsd-steps` (TRL: `max_steps`)?');
    expect(r.err).to.include('--fp16: did you mean `--dtype float16` (TRL: `fp16`)?');
    expect(r.err).to.not.match(/\n\s+at /);
  });

  it('exact TRL names are accepted as aliases, dashed or underscored', () => {
    const c = parseTrain([
      '--output_dir',
      '/tmp/run-a',
      '--num-generations',
      '4',
      '--max-completion-length',
      '64',
      '--epsilon-high',
      '0.28',
      '--logging-steps',
      '3',
      '--gradient_checkpointing',
      '--use-rslora',
    ]);
    expect(c).to.deep.include({ out: '/tmp/run-a' });
    expect(c.grpo).to.deep.equal({ groupSize: 4, epsHigh: 0.28 });
    expect(c.sampling).to.deep.equal({ maxNewTokens: 64 });
    expect(c.log).to.deep.equal({ every: 3 });
    expect(c.memory).to.deep.equal({ recompute: true });
    expect(c.lora).to.deep.equal({ rslora: true });
  });

  it('--lora-target-modules all-linear is every linear layer of the decoder layers, not lm_head', () => {
    expect((parseTrain(['--lora-target-modules', 'all-linear']).lora as { targetModules: string[] }).targetModules).to.have.members(QWEN3_LINEAR);
    expect((parseTrain(['--lora-target-modules', 'q_proj,v_proj']).lora as { targetModules: string[] }).targetModules).to.deep.equal(['q_proj', 'v_proj']);
  });

  it("a config file takes TRL's flat keys: aliases moved to ours, other TRL names refused with the hint", () => {
    const f = join(tmp, 'trl.yaml');
    writeFileSync(f, 'output_dir: /tmp/run-b\nnum_generations: 6\ntarget_modules: all-linear\nlr_scheduler_type: cosine\ngrpo:\n  steps: 3\n');
    const c = readConfigFile(f) as Record<string, Record<string, unknown>>;
    expect(c.out).to.equal('/tmp/run-b');
    expect(c.grpo).to.deep.equal({ steps: 3, groupSize: 6 });
    expect(c.lora!.targetModules).to.have.members(QWEN3_LINEAR);
    expect(c.optim).to.deep.equal({ lrSchedule: 'cosine' });
    writeFileSync(f, 'learning_rate: 1e-5\n');
    expect(() => readConfigFile(f)).to.throw('unknown key learning_rate; did you mean `grpo.lr: …` (`--grpo-lr`)');
    writeFileSync(f, 'grpo:\n  learning_rate: 1e-5\n');
    expect(() => readConfigFile(f)).to.throw(/unknown key grpo\.learning_rate; did you mean `grpo\.lr/);
    writeFileSync(f, 'num_generations: 6\ngrpo:\n  groupSize: 4\n');
    expect(() => readConfigFile(f)).to.throw('num_generations (TRL) and grpo.groupSize are the same setting; give one');
  });

  it("docs/config.md's TRL / PEFT column lists each name, alias or hint", () => {
    const md = renderConfigDocs();
    const row = (flag: string) => md.split('\n').find((l) => l.startsWith(`| \`--${flag}\` | \``))!;
    expect(row('grpo-lr')).to.match(/`learning_rate` \(hint\) \|$/);
    expect(row('group-size')).to.match(/`num_generations` \(alias\) \|$/);
    expect(row('dtype')).to.match(/`bf16` = bfloat16, `fp16` = float16, `torch_dtype` \(alias\) \|$/);
    expect(row('lora-target-modules')).to.include('or all-linear (every one)');
  });
});
