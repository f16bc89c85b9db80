#!/usr/bin/env node
/** CLI entry: one yargs command per file in bin/commands/. */
import yargs from 'yargs';
import { hideBin } from 'yargs/helpers';
import { commands } from './commands/index.js';

const cli = yargs(hideBin(process.argv)).scriptName('papergym-native').strict().demandCommand(1).help().recommendCommands();
for (const c of commands) cli.command(c);
cli.fail((msg, err, y) => {
  if (err) {
    process.stderr.write(`papergym-native: ${err.message}\n`);
  } else {
    process.stderr.write(`${y.help()}\n\npapergym-native: ${msg}\n`);
  }
  process.exit(1);
});
await cli.parseAsync();
