import type { CommandModule } from 'yargs';
import { type PRESETS, type TrainConfig, type DeepPartial } from '../../lib/config/train.js';
import { TRAIN_COMMAND_OPTIONS, TRAIN_SETTINGS } from '../../lib/config/settings.js';
import { addSettings, parseList, setPath } from '../../lib/config/schema.js';
import { runTraining } from '../../lib/train/run.js';

type TrainArgs = Record<string, unknown> & { config?: string; preset?: keyof typeof PRESETS; resume?: string };

/** Maps the CLI flags that were given onto a partial config (each flag is one schema entry). */
export function flagsToConfig(a: Record<string, unknown>): DeepPartial<TrainConfig> {
  const f: Record<string, unknown> = {};
  for (const st of TRAIN_SETTINGS) {
    const v = a[st.flag];
    if (v === undefined) continue;
    setPath(f, st.key, st.type === 'list' ? parseList(st, v) : v);
  }
  return f as DeepPartial<TrainConfig>;
}

/**
 * `papergym-native train`: OPSD then GRPO (or any `--stages` order, plus `sft`). With no
 * arguments it trains the embedded default: a tiny random Qwen3 on the embedded sample dataset
 * with the local judge, writing under runs/<timestamp>/. Every flag is a schema entry
 * (lib/config/settings.ts; docs/config.md).
 */
export const trainCommand: CommandModule<object, TrainArgs> = {
  command: 'train',
  describe: 'Train a LoRA adapter: OPSD then GRPO (defaults < --preset < --config < flags; no args = embedded tiny demo)',
  builder: (y) => addSettings(addSettings(y, TRAIN_COMMAND_OPTIONS, { withDefaults: false }), TRAIN_SETTINGS, { withDefaults: false }) as never,
  handler: async (argv) => {
    const summary = await runTraining({ preset: argv.preset, file: argv.config, flags: flagsToConfig(argv) as never, resume: argv.resume });
    if (summary.interrupted) process.exitCode = 130;
  },
};
