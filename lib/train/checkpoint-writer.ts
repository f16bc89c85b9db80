/**
 * The checkpoint written beside the next step (`checkpoint.background`, lib/train/trainer.ts
 * checkpoint): the state's tensors are already copied to host memory (TrainBackend.captureState);
 * the files are written, synced and committed (lib/train/checkpoint.ts writeCheckpoint: the same
 * atomic sequence as a checkpoint the step waits for) while the next step runs. One write at a
 * time; its failure is thrown at the next step or checkpoint.
 */
import type { CapturedState } from './backend.js';
import { writeCheckpoint, type TrainerState } from './checkpoint.js';

/** What the writer reads of its trainer. */
export interface CheckpointWriterDeps {
  runDir: () => string;
  /** Writes the metrics row of a committed background checkpoint. */
  writeMetrics: (row: Record<string, unknown>) => void;
  /** The log line and hook of a committed checkpoint (`note` is appended to the line). */
  afterCommit: (dir: string, note: string) => Promise<void>;
  /** The stage name of `state` (the metrics row's `stage`). */
  stageOf: (state: TrainerState) => string | undefined;
  /** The error that stops the run when the write failed (`what` failed; `e` its cause). */
  stopped: (e: unknown, what: string) => Error;
}

/** The background checkpoint write in flight, one at a time. */
export class CheckpointWriter {
  /** The write in flight: its promise (the committed dir), and its error once it failed. */
  private writing: { done: Promise<string>; failed?: { error: unknown } } | undefined;
  /** Background writes started so far (the fault hook below counts them). */
  private backgroundWrites = 0;
  /** Test hook (PAPERGYM_FAULT=checkpoint:beside-next-step:N): resolves when the N-th background write has its files in the temp dir. */
  private faultTensorsWritten: (() => void) | undefined;
  private faultTensorsReady: Promise<void> | undefined;

  constructor(private readonly deps: CheckpointWriterDeps) {}

  /**
   * Waits for the checkpoint written in the background (if any).
   * @throws deps.stopped(its error) when it failed.
   */
  async settle(): Promise<void> {
    const w = this.writing;
    if (!w) return;
    this.writing = undefined;
    try {
      await w.done;
    } catch (e) {
      throw this.deps.stopped(e, 'the checkpoint written beside the next step');
    }
  }

  /**
   * Writes `captured` as the checkpoint of `state` in the background, then a metrics row
   * `{checkpoint, checkpointCaptureSeconds, checkpointWriteSeconds, checkpointBytes}` and the
   * committed checkpoint's line and hook. `captured` is released when the write ends.
   */
  start(state: TrainerState, captured: CapturedState, captureSeconds: number, saveTotalLimit: number | null): void {
    const n = ++this.backgroundWrites;
    const fault = /^checkpoint:beside-next-step:(\d+)$/.exec(process.env.PAPERGYM_FAULT ?? '');
    const t0 = performance.now();
    const w: NonNullable<CheckpointWriter['writing']> = {
      done: (async () => {
        try {
          const dir = await writeCheckpoint(
            this.deps.runDir(),
            state,
            async (tmp) => {
              await captured.save(tmp);
              if (fault && Number(fault[1]) === n) {
                // The files are in the temp dir, nothing committed; the next step kills the process.
                this.faultTensorsWritten?.();
                await new Promise(() => {});
              }
            },
            { saveTotalLimit },
          );
          const writeSeconds = (performance.now() - t0) / 1000;
          this.deps.writeMetrics({
            stage: this.deps.stageOf(state),
            step: state.stageStep,
            globalStep: state.globalStep,
            checkpoint: dir,
            checkpointCaptureSeconds: captureSeconds,
            checkpointWriteSeconds: writeSeconds,
            checkpointBytes: captured.bytes,
          });
          await this.deps.afterCommit(
            dir,
            ` (written beside the next step: ${writeSeconds.toFixed(2)} s; the step paid ${captureSeconds.toFixed(2)} s for the copy)`,
          );
          return dir;
        } finally {
          captured.release();
        }
      })(),
    };
    if (fault && Number(fault[1]) === n) this.faultTensorsReady = new Promise((r) => (this.faultTensorsWritten = r));
    w.done.catch((error) => {
      w.failed = { error };
    });
    this.writing = w;
  }

  /** At the start of a step: a failed background write stops the run; the fault hook kills the process beside a write in flight. */
  async beforeStep(): Promise<void> {
    if (this.writing?.failed) await this.settle();
    if (this.faultTensorsReady) {
      await this.faultTensorsReady;
      process.kill(process.pid, 'SIGKILL');
    }
  }
}
