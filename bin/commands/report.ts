import type { CommandModule } from 'yargs';
import { REPORT_OPTIONS } from '../../lib/config/settings.js';
import { addSettings, parseList } from '../../lib/config/schema.js';
import { writeReport } from '../../lib/report/html.js';

interface ReportArgs {
  runs: string[];
  out: string;
  eval?: string | string[];
  data?: string;
  png: boolean;
  resamples: number;
  title?: string;
}

/**
 * `papergym-native report RUN_DIR [RUN_DIR…] [--out report.html] [--eval rows.jsonl …]`: one
 * self-contained HTML file with every training plot (runs overlaid, stage boundaries marked) and
 * eval results; each plot also as SVG and PNG in `<name>-plots/`. Reads runs that are still
 * writing, cut metrics lines and old metrics; what is missing is noted in the report.
 */
export const reportCommand: CommandModule<object, ReportArgs> = {
  command: 'report [runs..]',
  describe: 'Write an offline HTML report (plots of every metric, runs overlaid, eval coverage) for run dirs',
  builder: (y) =>
    addSettings(y.positional('runs', { type: 'string', array: true, describe: 'run dirs (train --out), overlaid in this order' }), REPORT_OPTIONS, {
      withDefaults: true,
    }).check((a) => {
      if (!(a.runs as string[] | undefined)?.length && !a.eval) throw new Error('give at least one RUN_DIR or --eval file');
      return true;
    }) as never,
  handler: async (argv) => {
    const evals =
      argv.eval === undefined
        ? []
        : (parseList(
            REPORT_OPTIONS.find((s) => s.key === 'eval')!,
            argv.eval,
          ) as string[]);
    const r = writeReport({ runs: argv.runs ?? [], out: argv.out, evals, data: argv.data, png: argv.png, resamples: argv.resamples, title: argv.title });
    for (const n of r.notes) process.stderr.write(`report: note: ${n}\n`);
    const missing = Object.keys(r.missing);
    if (missing.length) process.stderr.write(`report: no data for ${missing.join(', ')}\n`);
    process.stdout.write(`${r.html}\n`);
    process.stderr.write(`report: ${r.drawn.length} plots (SVG${argv.png ? ' + PNG' : ''}) in ${r.plotsDir}\n`);
  },
};
