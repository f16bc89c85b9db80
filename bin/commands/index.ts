/** Registry of CLI commands; each lives in its own file. */
import type { CommandModule } from 'yargs';
import { doctorCommand } from './doctor.js';
import { trainCommand } from './train.js';

// eslint-disable-next-line @typescript-eslint/no-explicit-any
export const commands: CommandModule<any, any>[] = [doctorCommand, trainCommand];
import { probeJudgeCommand } from './probe-judge.js';
commands.push(probeJudgeCommand);
import { buildDataCommand } from './build-data.js'; import { leakageCommand } from './leakage.js'; commands.push(buildDataCommand, leakageCommand);
import { generateCommand } from './generate.js'; commands.push(generateCommand);
import { evalCommand } from './eval.js'; import { serveCommand } from './serve.js'; commands.push(evalCommand, serveCommand);
