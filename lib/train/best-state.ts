/**
 * A stage's best state on disk (docs/design.md §6 "Best state"; the decisions are
 * lib/train/validation.ts): the adapter of its best validation written as `best/<stage>/` with
 * best.json, and taken up at the stage's end (validation.loadBestAtEnd) as the adapter the next
 * stage, or final/, starts from.
 */
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import type { Stage } from '../config/train.js';
import type { TrainBackend } from './backend.js';
import { RUN_FILES, writeFinalDir } from './checkpoint.js';
import type { DistContext } from './dist.js';
import { inputError } from '../errors.js';
import { bestValidation, type ValidationPoint } from './validation.js';

/** What writing and taking up a best state reads of the run. */
export interface BestStateRun {
  runDir: string;
  backend: TrainBackend;
  dist: DistContext;
  /** validation.earlyStopThreshold (0 when unset). */
  earlyStopThreshold: number;
  log: (line: string) => void;
  /** Writes a metrics.jsonl row. */
  writeMetrics: (row: Record<string, unknown>) => void;
}

/** A stage's row of the run summary, as far as its best state goes (lib/train/trainer.ts TrainSummary). */
export interface BestStateRecord {
  bestValidation?: number;
  best?: { step: number; globalStep: number; score: number; ci?: [number, number]; dir: string; loaded: boolean };
}

/**
 * Writes the active adapter and best.json (stage, steps, score, interval) as `best/<stage>/`, whole
 * or not at all (writeFinalDir). Resolves with its dir.
 */
export async function writeBestState(
  run: Pick<BestStateRun, 'runDir' | 'backend' | 'earlyStopThreshold'>,
  stage: Stage,
  point: ValidationPoint,
  globalStep: number,
): Promise<string> {
  const { backend } = run;
  return writeFinalDir(
    run.runDir,
    async (dir) => {
      await (backend.saveAdapter ? backend.saveAdapter(dir) : backend.saveState(dir));
      writeFileSync(
        join(dir, 'best.json'),
        JSON.stringify(
          {
            stage,
            step: point.step,
            globalStep,
            validation: point.score,
            validationCI: point.ci,
            earlyStopThreshold: run.earlyStopThreshold,
          },
          null,
          2,
        ),
      );
    },
    join(RUN_FILES.best, stage),
  );
}

/** The stage whose best state is taken up: its name, validation list, last step, and the run's position. */
export interface StageEnd {
  stage: Stage;
  validation: readonly ValidationPoint[];
  /** The stage's last step. */
  lastStep: number;
  /** The run's global step at that last step. */
  globalStep: number;
  /** The next stage (undefined: the run's last, final/ holds the adapter). */
  next: Stage | undefined;
  /** Its summary row: `best` and `bestValidation` are set here. */
  rec: BestStateRecord;
}

/**
 * At the end of a stage with validation.loadBestAtEnd: its best validation's adapter
 * (`best/<stage>/`, whose best.json must name the step the validation list gives) becomes the
 * active adapter, unless the last step is the best. The summary row, config.json (`bestStates`),
 * a metrics row (`event: best_loaded`) and a log line say which step. Also run on a resume that
 * lands on the stage's end, so the next stage starts from the same adapter. Data parallel: every
 * rank loads it (after a barrier); rank 0 writes the row and config.json.
 * @throws PapergymError (input) when best.json is unreadable or names another step.
 */
export async function loadBestState(run: BestStateRun, s: StageEnd): Promise<void> {
  const best = bestValidation(s.validation, run.earlyStopThreshold)!;
  const dir = join(run.runDir, RUN_FILES.best, s.stage);
  const lastStep = s.lastStep;
  const globalStep = s.globalStep - (lastStep - best.point.step);
  s.rec.best = { step: best.point.step, globalStep, score: best.point.score, ci: best.point.ci, dir, loaded: false };
  s.rec.bestValidation = best.point.score;
  const next = s.next;
  const what = next ? `${next.toUpperCase()} starts from it` : 'final/ holds it';
  if (best.point.step === lastStep) {
    s.rec.best.loaded = true;
    run.log(`[${s.stage}] the last step (${lastStep}) is the best validation (${best.point.score.toFixed(4)}); ${what}`);
  } else {
    // Data parallel: rank 0 wrote best/; every rank reads it once that write is surely done.
    if (run.dist.worldSize > 1) await run.dist.barrier();
    let saved: { step?: unknown };
    try {
      saved = JSON.parse(readFileSync(join(dir, 'best.json'), 'utf8')) as { step?: unknown };
    } catch (e) {
      throw inputError(
        `${join(dir, 'best.json')}: unreadable (${(e as Error).message}); the ${s.stage} stage's best state (step ${best.point.step}) is needed to continue`,
      );
    }
    if (saved.step !== best.point.step)
      throw inputError(
        `${dir} holds the adapter of ${s.stage} step ${String(saved.step)}, but the run's validation list makes step ${best.point.step} the best (a run dir edited or written by another run); rerun, or set --no-load-best-at-end`,
      );
    const { backend } = run;
    await (backend.loadAdapter ? backend.loadAdapter(dir) : backend.loadState(dir));
    s.rec.best.loaded = true;
    run.log(
      `[${s.stage}] best validation ${best.point.score.toFixed(4)}${best.point.ci ? ` [${best.point.ci[0].toFixed(4)}, ${best.point.ci[1].toFixed(4)}]` : ''} at step ${best.point.step} (global ${globalStep}), not the last step ${lastStep}: its adapter (${dir}) is loaded; ${what}`,
    );
  }
  if (!run.dist.isMain) return;
  run.writeMetrics({
    stage: s.stage,
    step: lastStep,
    globalStep: s.globalStep,
    event: 'best_loaded',
    bestStep: best.point.step,
    bestGlobalStep: globalStep,
    bestValidation: best.point.score,
    bestDir: dir,
  });
  // config.json says which state each stage handed on (kept by a resume's rewrite of config.json).
  const cfgPath = join(run.runDir, 'config.json');
  try {
    const c = JSON.parse(readFileSync(cfgPath, 'utf8')) as Record<string, unknown>;
    c.bestStates = {
      ...(c.bestStates as object | undefined),
      [s.stage]: { step: best.point.step, globalStep, validation: best.point.score, validationCI: best.point.ci, dir, next: next ?? 'final' },
    };
    writeFileSync(cfgPath, JSON.stringify(c, null, 2));
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code !== 'ENOENT') run.log(`${cfgPath}: the best state of ${s.stage} not recorded (${(e as Error).message})`);
  }
}
