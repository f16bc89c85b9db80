/**
 * Reads what a run dir holds for the report, tolerating every partial state a real run leaves:
 * a missing or empty dir, a `metrics.jsonl` whose last line was cut by a kill mid-write (or that
 * is being appended to right now), rows from older versions that lack some fields, duplicate
 * rows of replayed steps, an unreadable `config.json` / `summary.json`. Never throws for the
 * content of a run dir: every problem becomes a note shown in the report.
 */
import { existsSync, readFileSync, statSync } from 'node:fs';
import { hostname } from 'node:os';
import { basename, join, resolve } from 'node:path';
import { upgradeSavedConfig } from '../config/renames.js';

/** One metrics row of a training step (lib/train/metrics.ts StepMetrics) as read back; every field optional. */
export interface StepRow {
  stage: string;
  step: number;
  globalStep: number;
  [k: string]: unknown;
}

/** What the report knows about one run. */
export interface RunData {
  /** Absolute run dir. */
  dir: string;
  /** Legend label (the dir's base name, made unique among the runs of one report). */
  label: string;
  /** Step rows (one per optimizer step; the last row wins when a step was written twice). */
  steps: StepRow[];
  /** Validation rows: score (mean r_spec of greedy plans on held-out items) per stage step. */
  validation: { stage: string; step: number; globalStep: number; score: number; ci?: [number, number] }[];
  /** The state each stage ended on (`event: best_loaded` rows; validation.loadBestAtEnd): its best validation's step and score. */
  bestStates: { stage: string; step: number; globalStep: number; score: number }[];
  /** Early-stop events (global step where a stage ended early). */
  earlyStops: { stage: string; globalStep: number }[];
  /** First global step of each stage, in order (stage boundaries). */
  stageStarts: { stage: string; globalStep: number }[];
  /** Resolved config.json, when readable. */
  config?: Record<string, unknown>;
  /** summary.json (written when the run ends or is interrupted). */
  summary?: Record<string, unknown>;
  /** True while the run may still be writing: status `running`, or `unknown` (the page then reloads). */
  inProgress: boolean;
  /**
   * `finished` / `interrupted` (summary.json), `stopped` (an error row in metrics.jsonl, or the
   * process that held the run dir is gone: killed or crashed), `running` (a live process holds the
   * run dir's lock), `unknown` (no lock file: a run of an older version), `missing` (no dir).
   */
  status: 'running' | 'finished' | 'interrupted' | 'stopped' | 'unknown' | 'missing';
  /** Why the status is what it is, for the report (e.g. `pid 123 is gone without a summary (killed or crashed)`). */
  statusReason: string;
  /** Human-readable problems and gaps (missing files, skipped lines, missing fields). */
  notes: string[];
}

function readJson(path: string, notes: string[]): Record<string, unknown> | undefined {
  if (!existsSync(path)) return undefined;
  try {
    const v = JSON.parse(readFileSync(path, 'utf8')) as unknown;
    if (v && typeof v === 'object' && !Array.isArray(v)) return v as Record<string, unknown>;
    notes.push(`${basename(path)} is not a JSON object; ignored`);
  } catch (e) {
    notes.push(`${basename(path)} is unreadable (${(e as Error).message}); ignored`);
  }
  return undefined;
}

const num = (v: unknown): number | undefined => (typeof v === 'number' && Number.isFinite(v) ? v : undefined);

/**
 * Reads one run dir. `label` defaults to the dir's base name. Problems are collected in `notes`;
 * the function throws only for programming errors, never for the files' content.
 */
export function readRun(dir: string, label?: string): RunData {
  const abs = resolve(dir);
  const run: RunData = {
    dir: abs,
    label: label ?? basename(abs),
    steps: [],
    validation: [],
    earlyStops: [],
    bestStates: [],
    stageStarts: [],
    inProgress: true,
    status: 'unknown',
    statusReason: '',
    notes: [],
  };
  let isDir = false;
  try {
    isDir = statSync(abs).isDirectory();
  } catch {
    /* missing */
  }
  if (!isDir) {
    run.notes.push(existsSync(abs) ? `${abs} is not a directory` : `${abs} does not exist`);
    run.inProgress = false;
    run.status = 'missing';
    run.statusReason = existsSync(abs) ? 'not a directory' : 'does not exist';
    return run;
  }
  run.config = readJson(join(abs, 'config.json'), run.notes);
  // A run begun before a setting was renamed: its settings under today's keys, comparable with a newer run's.
  if (run.config)
    try {
      upgradeSavedConfig(run.config, join(abs, 'config.json'));
    } catch (e) {
      run.notes.push((e as Error).message);
    }
  run.summary = readJson(join(abs, 'summary.json'), run.notes);
  Object.assign(run, runStatus(abs, run.summary));
  run.inProgress = run.status === 'running' || run.status === 'unknown';
  if (!run.config) run.notes.push('no readable config.json (settings unknown)');
  const mpath = join(abs, 'metrics.jsonl');
  if (!existsSync(mpath)) {
    run.notes.push('no metrics.jsonl yet (the run has not finished a step, or this is not a run dir)');
    return run;
  }
  let text: string;
  try {
    text = readFileSync(mpath, 'utf8');
  } catch (e) {
    run.notes.push(`metrics.jsonl is unreadable (${(e as Error).message})`);
    return run;
  }
  const lines = text.split('\n');
  // A line without its trailing newline is being written right now (or was cut by a kill).
  const partialLast = !text.endsWith('\n') && lines[lines.length - 1] !== '';
  const byGlobal = new Map<number, StepRow>();
  const valByGlobal = new Map<string, RunData['validation'][number]>();
  let bad = 0;
  let stoppedRow: string | undefined;
  let firstBad = 0;
  lines.forEach((line, i) => {
    if (!line.trim()) return;
    let o: Record<string, unknown>;
    try {
      o = JSON.parse(line) as Record<string, unknown>;
      if (!o || typeof o !== 'object' || Array.isArray(o)) throw new Error('not an object');
    } catch {
      if (!(partialLast && i === lines.length - 1)) {
        bad += 1;
        firstBad ||= i + 1;
      } else {
        run.notes.push(`metrics.jsonl: last line ${i + 1} is incomplete (run killed mid-write, or still writing); skipped`);
      }
      return;
    }
    const stage = typeof o.stage === 'string' ? o.stage : 'unknown';
    const gs = num(o.globalStep) ?? num(o.step);
    if (gs === undefined) {
      bad += 1;
      firstBad ||= i + 1;
      return;
    }
    // The line a stopped run appends (stage, the last finished step, `stopped`, `error`): a note, not a step row (it would replace that step's row).
    if (typeof o.stopped === 'string') {
      stoppedRow = `stopped after global step ${gs}: ${typeof o.error === 'string' ? o.error.split('\n')[0] : o.stopped}`;
      run.notes.push(stoppedRow);
      return;
    }
    if (o.event === 'early_stop') {
      run.earlyStops.push({ stage, globalStep: gs });
      return;
    }
    if (o.event === 'best_loaded') {
      const step = num(o.bestStep);
      const bg = num(o.bestGlobalStep);
      const score = num(o.bestValidation);
      if (step !== undefined && bg !== undefined && score !== undefined) run.bestStates.push({ stage, step, globalStep: bg, score });
      return;
    }
    // The row a checkpoint written beside the next step appends once committed: its seconds join
    // the row of the step it saved (never replace it).
    if (typeof o.checkpointWriteSeconds === 'number' && !('loss' in o)) {
      const prev = byGlobal.get(gs);
      if (prev) byGlobal.set(gs, { ...prev, checkpointWriteSeconds: o.checkpointWriteSeconds, checkpointBytes: o.checkpointBytes });
      return;
    }
    if ('validation' in o && !('loss' in o)) {
      const score = num(o.validation);
      const ci = Array.isArray(o.validationCI) && o.validationCI.length === 2 ? (o.validationCI.map(num) as [number?, number?]) : undefined;
      if (score !== undefined)
        valByGlobal.set(`${stage}:${gs}`, {
          stage,
          step: num(o.step) ?? gs,
          globalStep: gs,
          score,
          ...(ci && ci[0] !== undefined && ci[1] !== undefined && { ci: [ci[0], ci[1]] as [number, number] }),
        });
      return;
    }
    byGlobal.set(gs, { ...o, stage, step: num(o.step) ?? gs, globalStep: gs });
  });
  if (bad) run.notes.push(`metrics.jsonl: ${bad} unreadable line(s) skipped (first: line ${firstBad})`);
  run.steps = [...byGlobal.values()].sort((a, b) => a.globalStep - b.globalStep);
  run.validation = [...valByGlobal.values()].sort((a, b) => a.globalStep - b.globalStep);
  for (const r of run.steps) {
    const last = run.stageStarts[run.stageStarts.length - 1];
    if (!last || last.stage !== r.stage) run.stageStarts.push({ stage: r.stage, globalStep: r.globalStep });
  }
  // Early stops recorded by older versions only in summary.json: the last step of that stage.
  const stages = (run.summary?.stages as { stage?: string; index?: number; stoppedEarly?: boolean }[] | undefined) ?? [];
  if (!run.earlyStops.length) {
    stages.forEach((s) => {
      if (!s?.stoppedEarly) return;
      const last = [...run.steps].reverse().find((r) => r.stage === s.stage);
      if (last) run.earlyStops.push({ stage: String(s.stage), globalStep: last.globalStep });
    });
  }
  if (!run.steps.length) run.notes.push('metrics.jsonl has no step rows yet');
  if (stoppedRow && !run.summary) {
    Object.assign(run, runStatus(abs, run.summary, stoppedRow));
    run.inProgress = false;
  }
  return run;
}

/** The run dir's lock file (lib/train/run.ts RUN_LOCK; held by `train` while it runs, lib/util/lock.ts). */
const RUN_LOCK = 'train.lock';

function pidAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (e) {
    return (e as NodeJS.ErrnoException).code === 'EPERM';
  }
}

/**
 * Running or stopped, and why: summary.json ends a run (finished / interrupted); an error row in
 * metrics.jsonl stops it; otherwise the run dir's lock tells — its `.owner` file names the pid that
 * holds it, which is running only while that process lives (a killed holder leaves a stale owner).
 * No lock file at all (older versions): unknown.
 */
export function runStatus(dir: string, summary: Record<string, unknown> | undefined, stoppedRow?: string): Pick<RunData, 'status' | 'statusReason'> {
  if (summary) {
    const wall = typeof summary.wallSeconds === 'number' ? ` after ${(summary.wallSeconds as number).toFixed(1)} s` : '';
    if (summary.interrupted) return { status: 'interrupted', statusReason: `interrupted (SIGINT) with a checkpoint${wall}` };
    return { status: 'finished', statusReason: `finished${wall}` };
  }
  if (stoppedRow) return { status: 'stopped', statusReason: stoppedRow };
  const lock = join(dir, RUN_LOCK);
  if (!existsSync(lock)) return { status: 'unknown', statusReason: 'running or stopped: no summary.json and no lock file (a run of an older version)' };
  let owner: { pid?: unknown; host?: unknown; since?: unknown } | undefined;
  try {
    owner = JSON.parse(readFileSync(`${lock}.owner`, 'utf8')) as typeof owner;
  } catch {
    owner = undefined;
  }
  if (!owner || typeof owner.pid !== 'number') return { status: 'stopped', statusReason: 'stopped without a summary: no process holds the run dir' };
  const since = typeof owner.since === 'string' ? ` since ${owner.since}` : '';
  if (typeof owner.host === 'string' && owner.host !== hostname()) {
    return { status: 'running', statusReason: `held by pid ${owner.pid} on host ${owner.host}${since} (not checkable from ${hostname()})` };
  }
  if (pidAlive(owner.pid)) return { status: 'running', statusReason: `running: pid ${owner.pid}${since}` };
  return { status: 'stopped', statusReason: `stopped without a summary: pid ${owner.pid} is gone (killed or crashed)` };
}

/** Reads several runs and makes their labels unique (`name`, `name (2)`, …). */
export function readRuns(dirs: string[]): RunData[] {
  const runs = dirs.map((d) => readRun(d));
  const seen = new Map<string, number>();
  for (const r of runs) {
    const n = (seen.get(r.label) ?? 0) + 1;
    seen.set(r.label, n);
    if (n > 1) r.label = `${r.label} (${n})`;
  }
  return runs;
}
