#!/usr/bin/env node
/** CLI entry: one yargs command per file in bin/commands/. */
import yargs from 'yargs';
import { hideBin } from 'yargs/helpers';
import { commands } from './commands/index.js';
import { dashFlags, joinNegativeNumbers, quietOnEpipe, repeatedFlag, suffixFlagHint } from './cli-util.js';
import { trlAliasArgs, trlHint, unknownFlagHints } from '../lib/config/trl.js';
import { upgradeFormerFlags } from '../lib/config/renames.js';
import { commandSettings, TRAIN_COMMAND_OPTIONS, trainSettings } from '../lib/config/settings.js';

// `doctor | head`: a closed pipe ends the process quietly instead of with an EPIPE stack trace.
quietOnEpipe(process.stdout);
quietOnEpipe(process.stderr);

const typed = dashFlags(joinNegativeNumbers(hideBin(process.argv)));
// A renamed setting's former flag (`eval --alpha`) is read as its flag, with a deprecation line (lib/config/renames.ts).
const sub0 = typed.find((a) => !a.startsWith('-'));
const upgraded = upgradeFormerFlags(typed, (sub0 && commandSettings()[sub0]) || []);
for (const line of upgraded.lines) process.stderr.write(`warning: ${line}\n`);
const given = upgraded.args;
// train: TRL's exact names (`--output-dir`, `--num-generations`) are read as ours (lib/config/trl.ts).
const args = given.find((a) => !a.startsWith('-')) === 'train' ? trlAliasArgs(given, [...TRAIN_COMMAND_OPTIONS, ...trainSettings()]) : given;
// A scalar flag given twice (also as ours and its TRL alias) is an error, never merged by the parser
// (bin/cli-util.ts repeatedFlag).
const command = args.find((a) => !a.startsWith('-'));
const repeated = command ? repeatedFlag(args, commandSettings()[command] ?? []) : undefined;
if (repeated) {
  process.stderr.write(`papergym-native: ${repeated}\n`);
  process.exit(1);
}
const cli = yargs(args).scriptName('papergym-native').strict().demandCommand(1).help().recommendCommands().wrap(null);
for (const c of commands) cli.command(c);
cli.fail((msg, err) => {
  // One line naming the problem; the full help stays one `--help` away.
  const sub = hideBin(process.argv).find((a) => !a.startsWith('-'));
  const known = commands.some((c) => c.command === sub);
  // A TRL / PEFT name (`--learning-rate`): say which flag it is here.
  const unknown = !err && /^Unknown argument/.test(msg);
  const own = (sub && commandSettings()[sub]) || [];
  // A TRL name (train), else a flag's last word (`--alpha`: --lora-alpha or --reward-alpha?).
  const trl = (name: string) => (sub === 'train' ? trlHint(name, own) : undefined);
  const hints = unknown ? unknownFlagHints(args, own, (name) => trl(name) ?? suffixFlagHint(name, own)) : [];
  process.stderr.write(
    `papergym-native: ${err ? err.message : msg}\n${hints.map((h) => `  ${h}\n`).join('')}${err ? '' : `run 'papergym-native ${known ? `${sub} ` : ''}--help' for the options\n`}`,
  );
  process.exit(1);
});
await cli.parseAsync();
