/**
 * Reads what a run dir holds for the report, tolerating every partial state a real run leaves:
 * a missing or empty dir, a `metrics.jsonl` whose last line was cut by a kill mid-write (or that
 * is being appended to right now), rows from older versions that lack some fields, duplicate
 * rows of replayed steps, an unreadable `config.json` / `summary.json`. Never throws for the
 * content of a run dir: every problem becomes a note shown in the report.
 */
import { existsSync, readFileSync, statSync } from 'node:fs';
import { basename, join, resolve } from 'node:path';

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
  validation: { stage: string; step: number; globalStep: number; score: number }[];
  /** Early-stop events (global step where a stage ended early). */
  earlyStops: { stage: string; globalStep: number }[];
  /** First global step of each stage, in order (stage boundaries). */
  stageStarts: { stage: string; globalStep: number }[];
  /** Resolved config.json, when readable. */
  config?: Record<string, unknown>;
  /** summary.json (written when the run ends or is interrupted). */
  summary?: Record<string, unknown>;
  /** True while the run has no summary.json (still running, or killed). */
  inProgress: boolean;
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
  const run: RunData = { dir: abs, label: label ?? basename(abs), steps: [], validation: [], earlyStops: [], stageStarts: [], inProgress: true, notes: [] };
  let isDir = false;
  try {
    isDir = statSync(abs).isDirectory();
  } catch {
    /* missing */
  }
  if (!isDir) {
    run.notes.push(existsSync(abs) ? `${abs} is not a directory` : `${abs} does not exist`);
    run.inProgress = false;
    return run;
  }
  run.config = readJson(join(abs, 'config.json'), run.notes);
  run.summary = readJson(join(abs, 'summary.json'), run.notes);
  run.inProgress = !run.summary;
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
      run.notes.push(`stopped after global step ${gs}: ${typeof o.error === 'string' ? o.error.split('\n')[0] : o.stopped}`);
      return;
    }
    if (o.event === 'early_stop') {
      run.earlyStops.push({ stage, globalStep: gs });
      return;
    }
    if ('validation' in o && !('loss' in o)) {
      const score = num(o.validation);
      if (score !== undefined) valByGlobal.set(`${stage}:${gs}`, { stage, step: num(o.step) ?? gs, globalStep: gs, score });
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
  return run;
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
