/**
 * The kernel profile of one training step (`--profile-step N`, log.profileStep): each timed phase
 * of that step runs under the backend's kernel profiler (TrainBackend.profileStart / profileStop),
 * and the step's phases are written to <run>/profile/<stage>-step<N>[-rankR].json with a line per
 * phase (lib/train/trainer.ts times the phases; docs/performance.md reads the files).
 */
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import type { ProfileResult } from '../addon.js';
import type { TrainConfig } from '../config/train.js';
import type { TrainBackend } from './backend.js';
import type { DistContext } from './dist.js';
import { kernelUsByKind } from '../util/kernels.js';
import { RUN_FILES } from './checkpoint.js';

/** What the profiler reads of its trainer. */
export interface StepProfilerDeps {
  backend: () => TrainBackend;
  cfg: () => TrainConfig;
  runDir: () => string;
  dist: () => DistContext;
  /** The stage in flight (the lines' prefix). */
  stage: () => string | undefined;
  log: (line: string) => void;
}

/** The --profile-step profile of the step in flight, if it is the profiled one. */
export class StepProfiler {
  /** The step in flight's kernel profiles per phase when it is the --profile-step, else undefined. */
  private stepProfiles: Record<string, ProfileResult[]> | undefined;
  /** A phase's profile is running (a phase inside or beside it counts in it). */
  private profiling = false;
  private profileSkipSaid = false;

  constructor(private readonly deps: StepProfilerDeps) {}

  /** At the start of step `step` (0-based) of `stage`: it is profiled when it is log.profileStep and the run can profile. */
  beginStep(stage: string, step: number): void {
    this.stepProfiles = this.deps.cfg().log.profileStep === step + 1 && this.profilable(stage) ? {} : undefined;
  }

  /**
   * Before a timed phase: starts the profiler when the step is profiled and no phase's profile runs.
   * A profiler that cannot start (no CUPTI, one already running) costs the profile, never the step.
   * Returns whether it started (then {@link stopPhase} follows the phase).
   */
  startPhase(): boolean {
    const backend = this.deps.backend();
    let profile = this.stepProfiles !== undefined && !this.profiling && backend.profileStart !== undefined && backend.profileStop !== undefined;
    if (profile) {
      try {
        backend.profileStart!();
        this.profiling = true;
      } catch (e) {
        profile = false;
        this.stepProfiles = undefined;
        this.deps.log(`[${this.deps.stage()}] --profile-step: the kernel profiler did not start (${(e as Error).message}); no profile for this step`);
      }
    }
    return profile;
  }

  /** After a phase whose {@link startPhase} started the profiler: its profile joins the step's (a failure costs the profile, never the phase). */
  stopPhase(phase: string): void {
    this.profiling = false;
    try {
      const r = this.deps.backend().profileStop!();
      if (this.stepProfiles) (this.stepProfiles[phase] ??= []).push(r);
    } catch (e) {
      // Never in place of the phase's own error (an out-of-memory the update recovers from).
      this.stepProfiles = undefined;
      this.deps.log(`[${this.deps.stage()}] --profile-step: the kernel profile of ${phase} failed (${(e as Error).message}); no profile for this step`);
    }
  }

  /** After the step's phases: writes its profile (when profiled) with their wall seconds, then profiles no more. */
  endStep(stage: string, step: number, phaseSeconds: Record<string, number>): void {
    if (!this.stepProfiles) return;
    this.write(stage, step, phaseSeconds);
    this.stepProfiles = undefined;
  }

  /**
   * Whether --profile-step can profile this run: a backend with a profiler and a CUDA device (the
   * profile records GPU kernels; on the CPU there are none). Says once why not.
   */
  private profilable(stage: string): boolean {
    const backend = this.deps.backend();
    const cfg = this.deps.cfg();
    if (backend.profileStart && backend.profileStop && cfg.device.startsWith('cuda')) return true;
    if (!this.profileSkipSaid) {
      this.profileSkipSaid = true;
      this.deps.log(
        `[${stage}] --profile-step ${cfg.log.profileStep}: no kernel profile — ${cfg.device.startsWith('cuda') ? 'this backend has no profiler' : `it records GPU kernels and this run is on ${cfg.device}`}`,
      );
    }
    return false;
  }

  /**
   * Writes the profiled step's phases to <run>/profile/<stage>-step<N>[-rankR].json: per phase its
   * wall seconds, GPU busy seconds (the union of the kernels' intervals), GPU seconds by kind and
   * the kernels by total time; and prints one line per phase. Returns the file.
   */
  private write(stage: string, step: number, phaseSeconds: Record<string, number>): string {
    const dist = this.deps.dist();
    const phases: Record<string, unknown> = {};
    const lines: string[] = [];
    for (const [phase, runs] of Object.entries(this.stepProfiles ?? {})) {
      const byName = new Map<string, { count: number; totalUs: number }>();
      for (const r of runs)
        for (const k of r.kernels) {
          const e = byName.get(k.name) ?? { count: 0, totalUs: 0 };
          e.count += k.count;
          e.totalUs += k.totalUs;
          byName.set(k.name, e);
        }
      const kernels = [...byName.entries()].map(([name, v]) => ({ name, ...v })).sort((a, b) => b.totalUs - a.totalUs);
      const busy = runs.reduce((n, r) => n + r.gpuBusyUs, 0) / 1e6;
      const kinds = Object.fromEntries(Object.entries(kernelUsByKind(kernels)).map(([k, us]) => [k, us / 1e6]));
      phases[phase] = { wallSeconds: phaseSeconds[phase] ?? null, gpuBusySeconds: busy, gpuSecondsByKind: kinds, kernels: kernels.slice(0, 60) };
      const top = Object.entries(kinds)
        .sort((a, b) => b[1] - a[1])
        .slice(0, 4)
        .map(([k, v]) => `${k} ${v.toFixed(2)}`)
        .join(', ');
      lines.push(`${phase} ${(phaseSeconds[phase] ?? 0).toFixed(2)} s, GPU busy ${busy.toFixed(2)} s (${top})`);
    }
    const dir = join(this.deps.runDir(), RUN_FILES.profile);
    mkdirSync(dir, { recursive: true });
    const file = join(dir, `${stage}-step${step}${dist.worldSize > 1 ? `-rank${dist.rank}` : ''}.json`);
    writeFileSync(file, JSON.stringify({ stage, step, rank: dist.rank, phases }, null, 1));
    this.deps.log(`[${stage}] kernel profile of step ${step}: ${lines.join('; ')} → ${file}`);
    return file;
  }
}
