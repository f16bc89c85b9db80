/**
 * Experiment trackers, TRL's `report_to` convention (transformers TrainingArguments.report_to):
 * `--report-to tensorboard,mlflow,wandb` or `log.reportTo` in the config file. Every row of
 * `metrics.jsonl` goes to every tracker (its finite numbers, keys `<stage>/<field>`, nested objects
 * flattened with `/`, step = the row's globalStep); the resolved config goes once as parameters;
 * when the run ends the final adapter (`final/`), `report.html` and `summary.json` go as artifacts.
 *
 * The run's own files stay the record: a tracker that fails (at start or mid-run) prints one warning
 * naming it and the reason, is switched off for the rest of the run, and training continues.
 *
 * One file per tracker (tensorboard.ts, mlflow.ts, wandb.ts), each a {@link TrackerKind} descriptor;
 * {@link TRACKERS} is the registry, and its names are the `--report-to` choices (lib/config/extensions.ts).
 * A new tracker is one file here and one line in the `register` call below (docs/design.md §9).
 */
import type { TrainConfig } from '../../config/train.js';
import { provideNames } from '../../config/extensions.js';
import { Registry } from '../../util/registry.js';
import { mlflowTracker } from './mlflow.js';
import { tensorboardTracker } from './tensorboard.js';
import { wandbTracker } from './wandb.js';

/** What a tracker is started with. */
export interface TrackerStart {
  /** The run dir (metrics.jsonl, final/, report.html). */
  runDir: string;
  /** Run name shown by the tracker: the run dir's base name. */
  runName: string;
  /** The resolved config, flattened to dotted keys (`lora.r`, `grpo.groupSize`, …). */
  params: Record<string, string | number | boolean | null>;
  /** This row is a resume of an earlier run (the trackers start a new run; steps continue). */
  resumed: boolean;
  log: (line: string) => void;
}

/** One tracker's connection. Methods may throw or reject; the {@link TrackerSet} catches. */
export interface Tracker {
  readonly name: TrackerName;
  /** Scalars of one metrics row at `step` (global step). Called in row order. */
  logMetrics(step: number, scalars: Record<string, number>, wallTimeMs: number): void | Promise<void>;
  /** Files or dirs to keep with the run (absolute paths; missing ones are skipped). */
  logArtifacts(paths: string[]): void | Promise<void>;
  /** Ends the run: `FINISHED`, `FAILED` (an error stopped it) or `KILLED` (a signal). */
  finish(status: 'FINISHED' | 'FAILED' | 'KILLED'): void | Promise<void>;
}

/** A registered tracker's name (a `--report-to` value). */
export type TrackerName = string;

/** One tracker: its `--report-to` name and how it starts. */
export interface TrackerKind {
  /** The `--report-to` / `log.reportTo` value. */
  readonly name: string;
  /** One line for docs and errors. */
  readonly describe: string;
  /** What it writes in the run dir, as names under it (what `train --overwrite-output-dir` clears). Absent: nothing. */
  readonly runDirEntries?: readonly string[];
  /** Starts the tracker for one run. @throws Error (or rejects) when it cannot start: the run warns and goes on without it. */
  open(s: TrackerStart): Promise<Tracker>;
}

/** The registry: `--report-to` names → descriptor, in registration order. */
export const TRACKERS = new Registry<TrackerKind>('experiment tracker', (t) => t.name);
TRACKERS.register(tensorboardTracker, mlflowTracker, wandbTracker);
provideNames('trackers', () => TRACKERS.names());

/** `report-to` values: tracker names; `none` (TRL's) or an empty list = no tracker; `all` = every one. */
export function parseReportTo(v: readonly string[] | string | undefined | null): TrackerName[] {
  const list = (typeof v === 'string' ? v.split(',') : (v ?? [])).map((s) => s.trim()).filter(Boolean);
  if (list.includes('all')) return TRACKERS.names();
  const out: TrackerName[] = [];
  for (const n of list) {
    if (n === 'none') continue;
    if (!TRACKERS.has(n)) throw new Error(`--report-to: unknown tracker '${n}' (known: ${TRACKERS.names().join(', ')}, all, none)`);
    if (!out.includes(n)) out.push(n);
  }
  return out;
}

/**
 * The scalars of one metrics row: finite numbers (booleans as 0/1 are left out), nested objects
 * flattened with '/', keyed `<stage>/<path>`; `step`, `globalStep` and `time` are not scalars.
 */
export function rowScalars(row: Record<string, unknown>): Record<string, number> {
  const stage = typeof row.stage === 'string' ? row.stage : 'train';
  const out: Record<string, number> = {};
  const walk = (prefix: string, v: unknown, depth: number) => {
    if (typeof v === 'number') {
      if (Number.isFinite(v)) out[prefix] = v;
    } else if (v && typeof v === 'object' && !Array.isArray(v) && depth < 4) {
      for (const [k, x] of Object.entries(v)) walk(`${prefix}/${k}`, x, depth + 1);
    }
  };
  for (const [k, v] of Object.entries(row)) {
    if (k === 'stage' || k === 'step' || k === 'globalStep' || k === 'time') continue;
    walk(`${stage}/${k}`, v, 0);
  }
  return out;
}

/** The config flattened to dotted keys; arrays as JSON strings. */
export function flattenParams(
  cfg: unknown,
  prefix = '',
  out: Record<string, string | number | boolean | null> = {},
): Record<string, string | number | boolean | null> {
  if (cfg && typeof cfg === 'object' && !Array.isArray(cfg)) {
    for (const [k, v] of Object.entries(cfg)) flattenParams(v, prefix ? `${prefix}.${k}` : k, out);
  } else if (prefix) {
    out[prefix] = Array.isArray(cfg) ? JSON.stringify(cfg) : cfg === undefined ? null : (cfg as string | number | boolean | null);
  }
  return out;
}

/**
 * The trackers of one run. `log()` is synchronous (MetricsLog.write calls it): each tracker's
 * calls are chained in order; the first failure warns once and switches that tracker off.
 */
export class TrackerSet {
  private chains = new Map<Tracker, Promise<void>>();
  private off = new Set<Tracker>();
  private constructor(
    private readonly trackers: Tracker[],
    private readonly warn: (line: string) => void,
  ) {
    for (const t of trackers) this.chains.set(t, Promise.resolve());
  }

  /** Names of the trackers still on. */
  get active(): TrackerName[] {
    return this.trackers.filter((t) => !this.off.has(t)).map((t) => t.name);
  }

  /** Starts each named tracker; one that cannot start warns and is left out. */
  static async open(
    names: readonly TrackerName[],
    cfg: TrainConfig,
    o: { runDir: string; runName: string; resumed: boolean; log: (line: string) => void },
  ): Promise<TrackerSet> {
    const params = flattenParams(cfg);
    const started: Tracker[] = [];
    for (const name of names) {
      try {
        started.push(await TRACKERS.get(name, '--report-to').open({ ...o, params }));
        o.log(`--report-to: ${name} started`);
      } catch (e) {
        o.log(`warning: --report-to ${name} did not start (${(e as Error).message}); training continues, metrics.jsonl is the record`);
      }
    }
    return new TrackerSet(started, o.log);
  }

  private run(t: Tracker, what: string, f: () => void | Promise<void>): void {
    if (this.off.has(t)) return;
    const next = this.chains.get(t)!.then(async () => {
      if (this.off.has(t)) return;
      try {
        await f();
      } catch (e) {
        this.off.add(t);
        this.warn(
          `warning: --report-to ${t.name} failed (${what}: ${(e as Error).message}); it is off for the rest of the run, training continues, metrics.jsonl is the record`,
        );
      }
    });
    this.chains.set(t, next);
  }

  /** One metrics row (as written to metrics.jsonl); rows without a numeric globalStep are skipped. */
  log(row: Record<string, unknown>): void {
    if (typeof row.globalStep !== 'number') return;
    const scalars = rowScalars(row);
    if (!Object.keys(scalars).length) return;
    const step = row.globalStep;
    const wall = typeof row.time === 'string' ? Date.parse(row.time) : Date.now();
    for (const t of this.trackers) this.run(t, `metrics of step ${step}`, () => t.logMetrics(step, scalars, wall));
  }

  /** Waits for every queued call. */
  async flush(): Promise<void> {
    await Promise.all(this.chains.values());
  }

  /** Artifacts (paths that exist), then finish; resolves when every tracker is done. */
  async finish(status: 'FINISHED' | 'FAILED' | 'KILLED', artifacts: string[]): Promise<void> {
    for (const t of this.trackers) if (artifacts.length) this.run(t, 'artifacts', () => t.logArtifacts(artifacts));
    await this.flush();
    // finish even a tracker that failed: an MLflow run should not stay RUNNING, a W&B bridge must exit
    await Promise.all(
      this.trackers.map(async (t) => {
        try {
          await t.finish(this.off.has(t) && status === 'FINISHED' ? 'FAILED' : status);
        } catch (e) {
          if (!this.off.has(t)) this.warn(`warning: --report-to ${t.name} failed (finish: ${(e as Error).message})`);
        }
      }),
    );
  }
}
