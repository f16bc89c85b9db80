import { writeFileSync } from 'node:fs';
import { resolveModelRef } from '../../lib/hub/resolve.js';
import type { CommandModule } from 'yargs';
import { judgeOptions, PROBE_JUDGE_OPTIONS } from '../../lib/config/settings.js';
import { addSettings } from '../../lib/config/schema.js';
import { resolveDevice } from '../../lib/model/device.js';
import { readDataset, loadGeneralRubric } from '../../lib/data/schema.js';
import { checkJudge, judgeSharesPolicyWeights, openJudge } from '../../lib/judge/backends/index.js';
import { judgeConfigFromArgs, type JudgeArgs } from '../judge-options.js';
import type { Device, Dtype } from '../../lib/model/qwen3.js';
import { ATTACKS, DEFAULT_ATTACKS, formatProbe, runProbe, assertProbeHealth, type Attack } from '../../lib/judge/probe.js';
import type { Judge } from '../../lib/judge/types.js';

interface ProbeArgs extends JudgeArgs {
  data: string;
  model?: string;
  attacks?: string;
  limit?: number;
  general: boolean;
  generalRubric?: string;
  out?: string;
  json: boolean;
  device: string;
  dtype?: string;
}

/**
 * `papergym-native probe-judge --data items.jsonl --judge http --judge-url … --judge-model …`
 * (or `--judge local --model DIR`): judges adversarial plans (restated question, stuffed
 * keywords, grader instruction, empty plan; optional `echo`) and prints the false-positive rate
 * per attack (lib/judge/probe.ts). `--out report.json` writes the full report.
 */
export const probeJudgeCommand: CommandModule<object, ProbeArgs> = {
  command: 'probe-judge',
  describe: "Reward-hacking probe: the judge's false-positive rate on adversarial plans, per attack",
  builder: (y) =>
    addSettings(addSettings(y, PROBE_JUDGE_OPTIONS, { withDefaults: true }), judgeOptions(), { withDefaults: true }).demandOption('data') as never,
  handler: async (argv) => {
    const attacks = (
      argv.attacks
        ? String(argv.attacks)
            .split(',')
            .map((s) => s.trim())
            .filter(Boolean)
        : DEFAULT_ATTACKS
    ) as Attack[];
    for (const a of attacks) if (!(ATTACKS as readonly string[]).includes(a)) throw new Error(`unknown attack ${a} (choices: ${ATTACKS.join(', ')})`);
    let data = readDataset(argv.data).items;
    if (argv.limit !== undefined) data = data.slice(0, argv.limit);
    if (!data.length) throw new Error(`${argv.data}: no valid items`);
    const general = argv.general ? loadGeneralRubric(argv.generalRubric).items : undefined;
    const jc = judgeConfigFromArgs(argv);
    await checkJudge(jc);
    // A judge on a policy's weights loads --model here (it owns that model: close() frees it); the
    // device is resolved only then (an endpoint judge never loads the addon).
    const onModel = judgeSharesPolicyWeights(jc);
    if (onModel && !argv.model) throw new Error(`--judge ${jc.kind} needs --model DIR`);
    const judge: Judge = await openJudge(
      jc,
      onModel
        ? {
            modelDir: await resolveModelRef(argv.model!, { what: '--model' }),
            device: resolveDevice(argv.device) as Device,
            dtype: argv.dtype as Dtype | undefined,
          }
        : {},
    );
    try {
      const report = await runProbe(judge, data, { attacks, general });
      process.stderr.write(`judge stats: ${JSON.stringify(judge.stats())}\n`);
      assertProbeHealth(report, jc.maxNullRate);
      if (argv.out) writeFileSync(argv.out, JSON.stringify({ ...report, stats: judge.stats() }, null, 2) + '\n');
      process.stdout.write((argv.json ? JSON.stringify(report, null, 2) : formatProbe(report)) + '\n');
    } finally {
      await judge.close?.();
    }
  },
};
