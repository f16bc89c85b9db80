/**
 * One rank of a 2-process GRPO run (test/dist.test.ts, failed-step cases), started with torchrun's
 * environment; runs `runTraining` with a toy reward so a fault can be put on rank 1 only. Modes
 * (argv[2]): `judge-throws` (rank 1's reward function rejects at the second step) and
 * `judge-nulls` (rank 1's verdicts are all null from the second step: 50% of the step's global
 * verdicts, above --judge-max-null-rate 0.25; rank 0's local rate is 0%). argv[3] is the run dir.
 * Prints one JSON line: `{ok, rank, name?, error?, code?, checkpoint?}`.
 */
import { runTraining } from '../../lib/train/run.js';
import type { RewardFn } from '../../lib/train/trainer.js';
import type { TrainConfig } from '../../lib/config/train.js';

const mode = process.argv[2]!;
const out = process.argv[3]!;
const rank = Number(process.env.RANK);
let calls = 0;

const reward: RewardFn = async (reqs) => {
  calls += 1;
  const second = calls >= 2; // one reward call per sampling chunk: 1 chunk per rank per step
  if (mode === 'judge-throws' && rank === 1 && second) throw new Error('judge endpoint down (test fault on rank 1)');
  const nulls = mode === 'judge-nulls' && rank === 1 && second;
  return reqs.map((r) => {
    const x = ((r.tokenIds?.length ?? r.plan.length) % 3) / 2;
    return {
      reward: x,
      rSpec: x,
      rGen: x,
      judge: { verdicts: 4, nulls: nulls ? 4 : 0, refusals: 0, unparsed: nulls ? 4 : 0, errors: 0, withProb: 0 },
    };
  });
};

const flags = {
  out,
  seed: 3,
  stages: ['grpo'],
  sampling: { maxNewTokens: 4, temperature: 1 } as TrainConfig['sampling'],
  grpo: { steps: 3, questionsPerStep: 2, groupSize: 2, microBatch: 2 } as TrainConfig['grpo'],
  judge: { maxNullRate: 0.25 } as TrainConfig['judge'],
  validation: { validateEvery: 0 } as TrainConfig['validation'],
  checkpoint: { every: 0 },
} as Partial<TrainConfig>;

runTraining({ flags, reward, handleSignals: false, log: () => undefined, dist: { timeoutMs: 60000 } }).then(
  () => {
    process.stdout.write(JSON.stringify({ ok: true, rank }) + '\n');
    process.exit(0);
  },
  (e) => {
    const err = e as Error & { code?: string; checkpoint?: string };
    process.stdout.write(JSON.stringify({ ok: false, rank, name: err.name, error: err.message, code: err.code, checkpoint: err.checkpoint ?? null }) + '\n');
    process.exit(1);
  },
);
