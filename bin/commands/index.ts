/** Registry of CLI commands; each lives in its own file. */
import type { CommandModule } from 'yargs';
import { doctorCommand } from './doctor.js';
import { trainCommand } from './train.js';
import { generateCommand } from './generate.js';
import { evalCommand } from './eval.js';
import { serveCommand } from './serve.js';
import { probeJudgeCommand } from './probe-judge.js';
import { buildDataCommand } from './build-data.js';
import { leakageCommand } from './leakage.js';
import { subsetCommand } from './subset.js';
import { reportCommand } from './report.js';
import { importCommand } from './import.js';
import { compareCommand } from './compare.js';
import { judgeAgreementCommand } from './judge-agreement.js';

// eslint-disable-next-line @typescript-eslint/no-explicit-any
export const commands: CommandModule<any, any>[] = [
  trainCommand,
  generateCommand,
  evalCommand,
  reportCommand,
  serveCommand,
  buildDataCommand,
  leakageCommand,
  importCommand,
  compareCommand,
  subsetCommand,
  probeJudgeCommand,
  judgeAgreementCommand,
  doctorCommand,
];
