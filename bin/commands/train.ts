import type { CommandModule } from 'yargs';
import { publishAdapter } from '../../lib/hub/publish.js';
import { type PRESETS, type TrainConfig, type DeepPartial } from '../../lib/config/train.js';
import { TRAIN_COMMAND_OPTIONS, trainSettings } from '../../lib/config/settings.js';
import { addSettings, parseList, setPath } from '../../lib/config/schema.js';
import { runTraining } from '../../lib/train/run.js';
import { Trainer } from '../../lib/train/trainer.js';
import { launchWorkers, WORKER_ENV } from '../../lib/train/launch.js';
import { DEFAULT_DIST_TIMEOUT_MS } from '../../lib/train/dist.js';

// ---- data parallelism (lib/train/launch.ts, lib/train/dist.ts): torchrun-style flags, declared
// with the other command options in TRAIN_COMMAND_OPTIONS (lib/config/settings.ts) ----
interface DistArgs {
  'nproc-per-node'?: number;
  nnodes?: number;
  'node-rank'?: number;
  'master-addr'?: string;
  'master-port'?: number;
  'dist-timeout'?: number;
}
type TrainArgs = Record<string, unknown> &
  DistArgs & {
    config?: string;
    preset?: keyof typeof PRESETS;
    resume?: string;
    pushToHub?: string;
    hubPrivateRepo?: boolean;
    hubStrategy?: 'end' | 'every_save';
  };

/** Launcher (`--nproc-per-node`, not inside a worker): spawns the workers; null otherwise. */
async function maybeLaunch(a: DistArgs): Promise<number | null> {
  if (a['nproc-per-node'] === undefined || process.env[WORKER_ENV] === '1') return null;
  return launchWorkers({
    nprocPerNode: a['nproc-per-node'],
    nnodes: a.nnodes ?? 1,
    nodeRank: a['node-rank'] ?? 0,
    masterAddr: a['master-addr'] ?? '127.0.0.1',
    masterPort: a['master-port'] ?? 29500,
  });
}

/** Maps the CLI flags that were given onto a partial config (each flag is one schema entry). */
export function flagsToConfig(a: Record<string, unknown>): DeepPartial<TrainConfig> {
  const f: Record<string, unknown> = {};
  for (const st of trainSettings()) {
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
  builder: (y) => addSettings(addSettings(y, TRAIN_COMMAND_OPTIONS, { withDefaults: false }), trainSettings(), { withDefaults: false }) as never,
  handler: async (argv) => {
    const launched = await maybeLaunch(argv);
    if (launched !== null) {
      process.exitCode = launched;
      return;
    }
    const timeout = argv['dist-timeout'];
    if (timeout !== undefined && !(timeout > 0)) throw new Error(`--dist-timeout must be > 0 seconds (got ${timeout})`);
    // TRL hub_strategy every_save: each committed checkpoint's adapter is pushed beside training (rank 0 writes them).
    const pushEvery = argv.pushToHub && argv.hubStrategy === 'every_save' && (process.env.RANK ?? '0') === '0';
    const summary = await runTraining({
      ...(pushEvery && {
        onCheckpoint: async (dir: string) => {
          const r = await publishAdapter({ runDir: dir.replace(/[\\/]checkpoints[\\/][^\\/]+$/, ''), adapterDir: dir, stages: [] }, argv.pushToHub!, {
            private: argv.hubPrivateRepo,
          });
          process.stderr.write(`train: checkpoint ${dir} pushed to ${r.url}${r.commit ? ` (commit ${r.commit})` : ''}\n`);
        },
      }),
      preset: argv.preset,
      file: argv.config,
      flags: flagsToConfig(argv) as never,
      resume: argv.resume,
      overwriteOutputDir: argv['overwrite-output-dir'] === true,
      dist: { timeoutMs: (timeout ?? DEFAULT_DIST_TIMEOUT_MS / 1000) * 1000 },
    });
    if (summary.interrupted) process.exitCode = 130;
    // Every step skipped (non-finite loss or gradient): final/ is written (nothing lost) but holds
    // the starting adapter, so the run fails (exit 1) rather than passing for a trained one; no push.
    else if (summary.noUpdate) throw new Error(Trainer.noUpdateMessage(summary));
    // TRL push_to_hub (hub_strategy end): rank 0 uploads the final adapter and its model card (lib/hub/publish.ts).
    else if (argv.pushToHub && (process.env.RANK ?? '0') === '0') {
      const r = await publishAdapter({ runDir: summary.runDir, stages: summary.stages }, argv.pushToHub, { private: argv.hubPrivateRepo });
      process.stderr.write(`train: adapter pushed to ${r.url}${r.commit ? ` (commit ${r.commit})` : ''}\n`);
    }
  },
};
