/**
 * A training backend with no model (pure TypeScript) for Trainer tests: fixed rollouts, constant
 * losses, finite grad norms; saveState writes a marker file. `opts` changes the losses or makes
 * saveState fail, to drive the trainer's non-finite and checkpoint-failure paths.
 */
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import type { TrainBackend } from '../../lib/train/backend.js';

export interface FakeBackendOptions {
  /** SFT loss of every step (default 1; NaN drives the non-finite skip). */
  sftLoss?: number;
  /** Called at each saveState with its 1-based call count; throw to fail that checkpoint. */
  onSave?: (call: number, dir: string) => void | Promise<void>;
  /** Give the backend captureState (its save is saveState's write, onSave included): checkpoints go beside the next step. */
  capture?: boolean;
}

export function fakeBackend(opts: FakeBackendOptions = {}): TrainBackend & { saved: string[] } {
  const saved: string[] = [];
  const saveState = async (dir: string) => {
    await opts.onSave?.(saved.length + 1, dir);
    mkdirSync(dir, { recursive: true });
    writeFileSync(join(dir, 'adapter.txt'), 'x');
    saved.push(dir);
  };
  return {
    saved,
    ...(opts.capture ? { captureState: async () => ({ bytes: 1, save: saveState, release: () => {} }) } : {}),
    promptIds: async (m) => [1, 2, m[m.length - 1]!.content.length % 7],
    answerIds: async () => [3, 4],
    generate: async (prompts, o) =>
      prompts.flatMap((_, p) =>
        Array.from({ length: o.n }, (_, k) => ({
          promptIndex: p,
          tokenIds: [5 + k, 6],
          logprobs: [-1, -1],
          text: `plan ${p}.${k}`,
          finishReason: 'stop' as const,
        })),
      ),
    completionLogprobs: async (seqs) => seqs.map((s) => s.completionIds.map(() => -1)),
    opsdBackward: async () => ({ loss: 0.5 }),
    grpoBackward: async () => ({ loss: 0.1, meanKl: 0, clipFraction: 0 }),
    sftBackward: async () => ({ loss: opts.sftLoss ?? 1 }),
    optimizerStep: async () => ({ gradNorm: 1, lr: 1e-3, skipped: false }),
    zeroGrad: () => {},
    resetOptimizer: () => {},
    snapshotAdapter: () => {},
    emaUpdate: () => {},
    saveState,
    loadState: async () => {},
    seedStep: () => {},
    memory: () => ({}),
  };
}
