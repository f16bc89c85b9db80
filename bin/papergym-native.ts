#!/usr/bin/env node
/** CLI entry: one yargs command per file in bin/commands/. */
import yargs from 'yargs';
import { hideBin } from 'yargs/helpers';
import { commands } from './commands/index.js';
import { joinNegativeNumbers, quietOnEpipe, repeatedFlag } from './cli-util.js';
import { commandSettings } from '../lib/config/settings.js';

// `doctor | head`: a closed pipe ends the process quietly instead of with an EPIPE stack trace.
quietOnEpipe(process.stdout);
quietOnEpipe(process.stderr);

const cli = yargs(joinNegativeNumbers(hideBin(process.argv)))
  .scriptName('papergym-native')
  .strict()
  .demandCommand(1)
  .help()
  .recommendCommands()
  .wrap(null);
for (const c of commands) cli.command(c);
// A scalar flag given twice is an error, never merged by the parser (bin/cli-util.ts repeatedFlag).
const args = joinNegativeNumbers(hideBin(process.argv));
const sub = args.find((a) => !a.startsWith('-'));
const repeated = sub ? repeatedFlag(args, commandSettings()[sub] ?? []) : undefined;
if (repeated) {
  process.stderr.write(`papergym-native: ${repeated}\n`);
  process.exit(1);
}
cli.fail((msg, err) => {
  // One line naming the problem; the full help stays one `--help` away.
  const sub = hideBin(process.argv).find((a) => !a.startsWith('-'));
  const known = commands.some((c) => c.command === sub);
  process.stderr.write(`papergym-native: ${err ? err.message : msg}\n${err ? '' : `run 'papergym-native ${known ? `${sub} ` : ''}--help' for the options\n`}`);
  process.exit(1);
});
await cli.parseAsync();
