import { writeFileSync } from 'node:fs';
import type { CommandModule } from 'yargs';
import { readDataset, loadGeneralRubric } from '../../lib/data/schema.js';
import { checkJudge, openJudge } from '../../lib/judge/backends/index.js';
import { assertJudgeHealth, formatHealth, judgeHealth, type Judge, type Verdict } from '../../lib/judge/types.js';
import { judgeConfigFromArgs, type JudgeArgs } from '../judge-options.js';
import { Policy } from '../../lib/model/policy.js';
import type { Device, Dtype } from '../../lib/model/qwen3.js';
import { policyPlanGenerator } from '../../lib/eval/backends.js';
import { formatReport, writeRowsJsonl } from '../../lib/eval/report.js';
import { runEval } from '../../lib/eval/run.js';
import { ensureWritableFile } from '../../lib/util/fs.js';
import { EVAL_OPTIONS, JUDGE_OPTIONS } from '../../lib/config/settings.js';
import { addSettings } from '../../lib/config/schema.js';
import { resolveDevice } from '../../lib/model/device.js';

interface EvalArgs extends JudgeArgs {
  model: string;
  adapter?: string;
  data: string;
  out?: string;
  report?: string;
  plans?: string;
  split?: string;
  limit?: number;
  samples: number;
  temperature: number;
  topP: number;
  topK: number;
  maxNewTokens: number;
  thinking: boolean;
  general: boolean;
  generalRubric?: string;
  alpha: number;
  resamples: number;
  seed: number;
  chunk: number;
  device: string;
  dtype?: string;
  keepRaw: boolean;
}

/**
 * `papergym-native eval --model DIR [--adapter DIR] --data bench.jsonl --judge local|http …
 * --out results.jsonl`: generates plans (the training student prompt), judges each against its
 * instance rubric + the general items, prints rubric coverage overall / method innovation /
 * experimental design / general and the mean reward with bootstrap CIs; writes per-item rows
 * (JSONL, --out), the report (JSON, --report) and the plans (JSONL, --plans).
 * `--judge local` uses the same loaded model with its adapter off (no second copy).
 */
export const evalCommand: CommandModule<object, EvalArgs> = {
  command: 'eval',
  describe: 'Generate research plans for a benchmark and report rubric coverage (overall, per dimension) with bootstrap CIs',
  builder: (y) =>
    addSettings(addSettings(y, EVAL_OPTIONS, { withDefaults: true }), JUDGE_OPTIONS, { withDefaults: true }).demandOption(['model', 'data']) as never,
  handler: async (argv) => {
    for (const [flag, path] of [['--out', argv.out], ['--report', argv.report], ['--plans', argv.plans]] as const) if (path) ensureWritableFile(path, flag);
    let items = readDataset(argv.data).items;
    if (argv.split) items = items.filter((it) => it.split === argv.split);
    if (argv.limit !== undefined) items = items.slice(0, argv.limit);
    if (!items.length) throw new Error(`${argv.data}: no items to evaluate`);
    const general = argv.general ? loadGeneralRubric(argv.generalRubric).items : [];
    const jc = judgeConfigFromArgs(argv);
    // Before any compute: the judge must answer a real chat request (a 404 URL or a wrong model fails here).
    await checkJudge(jc);
    const device = resolveDevice(argv.device);
    process.stderr.write(`eval: ${argv.model}${argv.adapter ? ` + ${argv.adapter}` : ''} on ${device}\n`);
    const policy = await Policy.load(argv.model, { adapter: argv.adapter, device: device as Device, dtype: argv.dtype as Dtype | undefined });
    let judge: Judge | undefined;
    try {
      judge = await openJudge(jc, { policy });
      const t0 = Date.now();
      const { report, rows, plans } = await runEval({
        items,
        general,
        judge,
        generator: policyPlanGenerator(policy, { temperature: argv.temperature, topP: argv.topP, topK: argv.topK, maxNewTokens: argv.maxNewTokens, enableThinking: argv.thinking }),
        samples: argv.samples,
        chunkSize: argv.chunk,
        genSeed: argv.seed,
        seed: argv.seed,
        resamples: argv.resamples,
        alpha: argv.alpha,
        keepRaw: argv.keepRaw,
        onProgress: (d, n) => process.stderr.write(`eval: ${d}/${n} questions judged\n`),
      });
      if (argv.out) writeRowsJsonl(argv.out, rows);
      if (argv.plans) writeFileSync(argv.plans, plans.map((p) => JSON.stringify(p)).join('\n') + '\n');
      const meta = { model: argv.model, adapter: argv.adapter ?? null, data: argv.data, judge: judge.name, judgeStats: judge.stats(), samples: argv.samples, seconds: (Date.now() - t0) / 1000 };
      if (argv.report) writeFileSync(argv.report, JSON.stringify({ ...report, meta }, null, 2) + '\n');
      process.stdout.write(formatReport(report) + '\n');
      process.stderr.write(`judge ${judge.name}: ${JSON.stringify(judge.stats())}\n`);
      // Mostly-null verdicts are a broken judge, not a coverage of 0%: exit non-zero (outputs above are kept).
      const health = judgeHealth(rows.map((r) => ({ itemId: r.itemId, met: r.met, refused: r.refused, error: r.error }) as Verdict));
      process.stderr.write(`judge health: ${health.verdicts} verdicts, ${formatHealth(health) || 'no verdicts'}\n`);
      assertJudgeHealth(health, jc.maxNullRate, judge.name, 'eval');
    } finally {
      await judge?.close?.();
      policy.dispose();
    }
  },
};
