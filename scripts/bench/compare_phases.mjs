#!/usr/bin/env node
/**
 * The trainer's GRPO step next to `grpo_step.mjs`, phase by phase: reads the benchmark's JSON
 * (`phaseSeconds`, `stepSeconds`, `completionTokens`, `config`) and a run dir's metrics.jsonl step
 * lines of one stage (`phaseSeconds`, `stepSeconds`, `completionTokens`; docs/performance.md
 * "Phases of a step"), and prints one row per phase: benchmark seconds, the trainer's median over
 * its steps (the first step dropped as warm-up when there are two or more), the difference and
 * the ratio. The trainer's step is compared without its checkpoint (the benchmark writes none);
 * the checkpoint gets its own row. The trainer's `judge` is only the wait after the last rollout
 * chunk (judging that overlapped sampling is hidden), the benchmark's the whole judge.
 * Warns when the shapes differ (questions, group, new tokens, micro-batch from the run's config.json).
 *
 * Usage: node scripts/bench/compare_phases.mjs --bench grpo_step.json --run runs/<dir> [--stage grpo] [--json out.json]
 * Also from grpo_step.mjs: --compare runs/<dir>.
 */
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { benchArgs, fmtRatio, median, printTable, writeJson } from './harness.mjs';

/** The phases of a GRPO step, in the order of the trainer's metrics lines (lib/train/stages/stage.ts StepPhase). */
export const GRPO_PHASES = ['rollout', 'judge', 'reference', 'update', 'optimizer', 'host'];

/**
 * The step lines of `stage` in `runDir`/metrics.jsonl (lines with a numeric `stepSeconds`).
 * Throws naming the file when it is missing or holds no such line.
 */
export function readStepLines(runDir, stage = 'grpo') {
  const path = join(runDir, 'metrics.jsonl');
  if (!existsSync(path)) throw new Error(`${path}: no such file (a run dir of \`train\` holds one)`);
  const lines = readFileSync(path, 'utf8')
    .split('\n')
    .filter((l) => l.trim())
    .flatMap((l) => {
      try {
        return [JSON.parse(l)];
      } catch {
        return []; // a cut last line of a run still writing
      }
    })
    .filter((o) => o.stage === stage && typeof o.stepSeconds === 'number');
  if (!lines.length) throw new Error(`${path}: no ${stage} step lines`);
  return lines;
}

/**
 * One comparison row per phase plus the step without checkpoint, the checkpoint and completion
 * tokens/s. `bench`: the benchmark's JSON object; `steps`: trainer step lines (readStepLines).
 * Returns { rows: [{ name, bench, trainer, diff, ratio }], trainerSteps, warnings }.
 */
export function comparePhases(bench, steps, runConfig) {
  const timed = steps.length >= 2 ? steps.slice(1) : steps;
  const med = (f) => median(timed.map(f).filter((x) => typeof x === 'number' && Number.isFinite(x)));
  const row = (name, b, t) => ({
    name,
    bench: b ?? null,
    trainer: Number.isFinite(t) ? t : null,
    diff: b != null && Number.isFinite(t) ? t - b : null,
    ratio: b > 0 && Number.isFinite(t) ? t / b : null,
  });
  const bp = bench.phaseSeconds ?? {};
  const noCkpt = (s) => s.stepSeconds - (s.phaseSeconds?.checkpoint ?? 0);
  const rows = [
    ...GRPO_PHASES.map((p) =>
      row(
        p,
        bp[p],
        med((s) => s.phaseSeconds?.[p]),
      ),
    ),
    row('step (without checkpoint)', bench.stepSeconds, med(noCkpt)),
    row(
      'checkpoint',
      null,
      med((s) => s.phaseSeconds?.checkpoint),
    ),
    row(
      'completion tokens / s',
      bench.stepSeconds > 0 ? bench.completionTokens / bench.stepSeconds : null,
      med((s) => s.completionTokens / noCkpt(s)),
    ),
  ];
  const warnings = [];
  const c = bench.config ?? {};
  if (runConfig) {
    const pairs = [
      ['questions', c.questions, runConfig.grpo?.questionsPerStep],
      ['group', c.group, runConfig.grpo?.groupSize],
      ['new tokens', c['new-tokens'], runConfig.sampling?.maxNewTokens],
      ['micro-batch', c['micro-batch'], runConfig.grpo?.microBatch],
    ];
    for (const [what, b, t] of pairs) if (b !== undefined && t !== undefined && Number(b) !== Number(t)) warnings.push(`${what}: benchmark ${b}, trainer ${t}`);
  }
  const missing = GRPO_PHASES.filter((p) => typeof bp[p] !== 'number');
  if (missing.length) warnings.push(`the benchmark JSON has no phaseSeconds.${missing.join('/')} (written by an older grpo_step.mjs?)`);
  return { rows, trainerSteps: timed.map((s) => s.globalStep), warnings };
}

/** Prints comparePhases' rows as a Markdown table (seconds, 2 decimals) and its warnings. */
export function printComparison(cmp) {
  const f = (x) => (x === null ? '-' : x.toFixed(2));
  printTable(
    ['phase', 'benchmark s', 'trainer s (median)', 'trainer − benchmark', 'trainer / benchmark'],
    cmp.rows.map((r) => [r.name, f(r.bench), f(r.trainer), r.diff === null ? '-' : (r.diff >= 0 ? '+' : '') + r.diff.toFixed(2), fmtRatio(r.ratio)]),
  );
  console.log(
    `(trainer: median over global steps ${cmp.trainerSteps.join(', ')}; its judge is the wait after the last rollout chunk, the benchmark's the whole judge)`,
  );
  for (const w of cmp.warnings) console.log(`warning: shapes differ — ${w}`);
}

/** Reads a run dir's config.json (undefined when absent or unreadable). */
export function readRunConfig(runDir) {
  try {
    return JSON.parse(readFileSync(join(runDir, 'config.json'), 'utf8'));
  } catch {
    return undefined;
  }
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? '').href) {
  const a = benchArgs({ bench: { type: 'string' }, run: { type: 'string' }, stage: { type: 'string', default: 'grpo' } });
  if (!a.bench || !a.run) {
    console.error('usage: node scripts/bench/compare_phases.mjs --bench grpo_step.json --run RUN_DIR [--stage grpo] [--json out.json]');
    process.exit(2);
  }
  const bench = JSON.parse(readFileSync(a.bench, 'utf8'));
  const cmp = comparePhases(bench, readStepLines(a.run, a.stage), readRunConfig(a.run));
  printComparison(cmp);
  writeJson(a.json, cmp);
}
