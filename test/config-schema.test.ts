/** The settings schema: every entry complete, every config key covered, docs/config.md current, help and validation driven by it. */
import { expect } from 'chai';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { spawnSync } from 'node:child_process';
import yargs from 'yargs';
import { packageRoot } from '../lib/native.js';
import { commandSettings, trainSettings } from '../lib/config/settings.js';
// The schema holds the registered stages' and judge backends' rows: their registries load first.
import '../lib/train/stages/index.js';
import '../lib/judge/backends/index.js';
import { checkValue, leafKeys, type Setting } from '../lib/config/schema.js';
import { DEFAULTS, PRESETS, resolveConfig, resolveConfigWithOrigins } from '../lib/config/train.js';
import { renderConfigDocs } from '../lib/config/docs.js';

const CLI = join(packageRoot, 'dist', 'bin', 'papergym-native.js');

describe('settings schema', () => {
  const COMMAND_SETTINGS = commandSettings();
  const TRAIN_SETTINGS = trainSettings();
  it('every setting has a name, flag, type, default, range, meaning and source', () => {
    const problems: string[] = [];
    for (const [cmd, list] of Object.entries(COMMAND_SETTINGS)) {
      const flags = new Set<string>();
      for (const s of list as Setting[]) {
        const id = `${cmd} --${s.flag}`;
        if (!s.key || !s.flag || !s.type) problems.push(`${id}: name/flag/type missing`);
        if (!('default' in s) || s.default === undefined) problems.push(`${id}: default missing (null = unset)`);
        if (!s.meaning || s.meaning.length < 10) problems.push(`${id}: meaning missing`);
        if (!s.source || s.source.length < 4) problems.push(`${id}: source missing`);
        if ((s.type === 'number' || s.type === 'integer') && s.min === undefined && s.max === undefined) problems.push(`${id}: numeric range missing`);
        if (s.type === 'enum' && !s.choices?.length) problems.push(`${id}: choices missing`);
        if ((s.type === 'string' || s.type === 'path') && !s.values) problems.push(`${id}: accepted values missing`);
        if (s.type === 'list' && !s.choices && !s.values && !s.items) problems.push(`${id}: list items missing`);
        if (s.default !== null && checkValue(s, s.default)) problems.push(`${id}: default out of its own range: ${checkValue(s, s.default)}`);
        if (flags.has(s.flag)) problems.push(`${id}: flag declared twice`);
        flags.add(s.flag);
      }
    }
    expect(problems).to.deep.equal([]);
  });

  it('covers every key of the training config, and the presets use only schema keys', () => {
    const keys = TRAIN_SETTINGS.map((s) => s.key).sort();
    expect(leafKeys(DEFAULTS).sort()).to.deep.equal(keys);
    for (const [name, p] of Object.entries(PRESETS)) for (const k of leafKeys(p)) expect(keys, `${name}: ${k}`).to.include(k);
  });

  it('docs/config.md is generated from the schema and current (node scripts/gen-config-docs.mjs)', () => {
    const docs = readFileSync(join(packageRoot, 'docs', 'config.md'), 'utf8');
    expect(docs, 'docs/config.md is stale: run `npm run build:ts && node scripts/gen-config-docs.mjs`').to.equal(renderConfigDocs());
    for (const list of Object.values(COMMAND_SETTINGS)) for (const s of list) expect(docs).to.contain(`\`--${s.flag}\``);
  });

  it("every command's --help lists each of its settings with its meaning", async () => {
    // In process: the same yargs command modules the CLI registers, asked for `<cmd> --help`.
    const { commands } = await import('../bin/commands/index.js');
    expect(commands.map((c) => String(c.command).split(' ')[0]).sort()).to.deep.equal(Object.keys(COMMAND_SETTINGS).sort());
    for (const [cmd, list] of Object.entries(COMMAND_SETTINGS)) {
      const c = commands.find((x) => String(x.command).split(' ')[0] === cmd)!;
      const help = await new Promise<string>((res) => {
        yargs()
          .scriptName('papergym-native')
          .command(c)
          .exitProcess(false)
          .wrap(null)
          .help()
          .parse([cmd, '--help'], (_e: unknown, _a: unknown, out: string) => res(out));
      });
      for (const s of list) {
        expect(help, `${cmd} --${s.flag}`).to.contain(s.flag.length === 1 ? `-${s.flag} ` : `--${s.flag} `);
        expect(help, `${cmd} --${s.flag} meaning`).to.contain(s.meaning);
      }
    }
    // And the real binary prints it (one spawn).
    const r = spawnSync(process.execPath, [CLI, 'train', '--help'], { encoding: 'utf8' });
    expect(r.status, r.stderr).to.equal(0);
    expect(r.stdout).to.contain('--kl-coef').and.to.contain('--save-total-limit');
  });

  it('validates every key against its range, naming the key and its flag', () => {
    expect(() => resolveConfig({ flags: { grpo: { klCoef: -1 } as never } })).to.throw(/grpo\.klCoef \(--kl-coef\) must be in \[0, ∞\) \(got -1\)/);
    expect(() => resolveConfig({ flags: { grpo: { lr: -1e-5 } as never } })).to.throw(/grpo\.lr \(--grpo-lr\) must be in \(0, ∞\)/);
    expect(() => resolveConfig({ flags: { device: 'gpu' } })).to.throw(/device \(--device\) must be cpu \| cuda \| cuda:N/);
    expect(() => resolveConfig({ flags: { opsd: { steps: 0 } as never, grpo: { steps: 0 } as never } })).to.throw(/every stage has 0 steps/);
    expect(() => resolveConfig({ flags: { lora: { targetModules: ['q_proj', 'qkv'] } as never } })).to.throw(/unknown item "qkv"/);
    expect(resolveConfig({ flags: { opsd: { steps: 0 } as never } }).opsd.steps).to.equal(0);
  });

  it('records where each resolved value came from (default, preset, file, flag)', () => {
    const { config, origins } = resolveConfigWithOrigins({ preset: 'qwen3-4b', flags: { seed: 5 } });
    expect(config.lora.r).to.equal(64);
    expect(origins['lora.r']).to.equal('preset');
    expect(origins.seed).to.equal('flag');
    expect(origins['opsd.emaDecay']).to.equal('default');
    expect(Object.keys(origins).sort()).to.deep.equal(TRAIN_SETTINGS.map((s) => s.key).sort());
  });
});
