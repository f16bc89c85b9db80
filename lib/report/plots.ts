/**
 * The report's training plots: which metrics-row fields each plot draws (lib/train/trainer.ts
 * writes them), over the global step, every run overlaid, stage boundaries marked. A plot whose
 * fields no run has is reported as missing (older runs, CPU runs without GPU memory, …).
 */
import type { LineChartSpec, LineSeries, VLine } from './charts.js';
import type { RunData, StepRow } from './read.js';

/** One plot of the report. */
export interface PlotDef {
  /** File-name-safe id (`<id>.svg`, `<id>.png`). */
  id: string;
  title: string;
  yName: string;
  /** The metrics.jsonl fields it reads (shown when no run has them). */
  fields: string;
  build: (runs: RunData[]) => LineSeries[];
  logY?: boolean;
}

/** Value at a dotted path of a row (`passRate.method_innovation`); undefined unless a finite number. */
export function pick(row: Record<string, unknown>, path: string): number | undefined {
  let v: unknown = row;
  for (const k of path.split('.')) {
    if (!v || typeof v !== 'object') return undefined;
    v = (v as Record<string, unknown>)[k];
  }
  return typeof v === 'number' && Number.isFinite(v) ? v : undefined;
}

/** [globalStep, value] of the rows that have the field; a gap (null) where the stage changes, so stages are not joined by a line. */
function points(rows: StepRow[], path: string, scale = 1): [number, number | null][] {
  const out: [number, number | null][] = [];
  let stage: string | undefined;
  for (const r of rows) {
    const v = pick(r, path);
    if (v === undefined) continue;
    if (stage !== undefined && r.stage !== stage) out.push([r.globalStep - 0.5, null]);
    stage = r.stage;
    out.push([r.globalStep, v * scale]);
  }
  return out;
}

/** One series per run (label = run label, or `run · suffix` when a plot has several fields). */
function perRun(runs: RunData[], fields: { path: string; name?: string; scale?: number }[]): LineSeries[] {
  const out: LineSeries[] = [];
  for (const run of runs) {
    for (const f of fields) {
      const p = points(run.steps, f.path, f.scale);
      if (!p.length) continue;
      const name = f.name ? (runs.length > 1 ? `${run.label} · ${f.name}` : f.name) : run.label;
      out.push({ name, points: p });
    }
  }
  return out;
}

/** Keys of an object-valued field over all rows (e.g. the phases in `phaseSeconds`). */
function subKeys(runs: RunData[], field: string, filter: (k: string) => boolean = () => true): string[] {
  const keys = new Set<string>();
  for (const run of runs)
    for (const r of run.steps) {
      const o = r[field];
      if (o && typeof o === 'object') for (const [k, v] of Object.entries(o)) if (typeof v === 'number' && filter(k)) keys.add(k);
    }
  return [...keys].sort();
}

const GiB = 1 / 1024 ** 3;
const DIMENSIONS: [string, string][] = [
  ['method_innovation', 'method innovation'],
  ['experimental_design', 'experimental design'],
  ['general', 'general'],
];

/** Every training plot the report draws, in order. */
export const PLOTS: PlotDef[] = [
  { id: 'loss', title: 'Loss', yName: 'loss (nats)', fields: 'loss', build: (runs) => perRun(runs, [{ path: 'loss' }]) },
  { id: 'jsd', title: 'OPSD generalised JSD', yName: 'JSD (nats/token)', fields: 'jsd', build: (runs) => perRun(runs, [{ path: 'jsd' }]) },
  {
    id: 'reward',
    title: 'GRPO reward (mean ± std over completions)',
    yName: 'reward',
    fields: 'rewardMean, rewardStd',
    build: (runs) =>
      runs.flatMap((run) => {
        const rows = run.steps.filter((r) => pick(r, 'rewardMean') !== undefined);
        if (!rows.length) return [];
        const band = rows
          .filter((r) => pick(r, 'rewardStd') !== undefined)
          .map((r) => {
            const m = pick(r, 'rewardMean')!;
            const s = pick(r, 'rewardStd')!;
            return [r.globalStep, m - s, m + s] as [number, number, number];
          });
        return [{ name: run.label, points: rows.map((r) => [r.globalStep, pick(r, 'rewardMean')!] as [number, number]), band }];
      }),
  },
  {
    id: 'reward-parts',
    title: 'Reward parts: r_spec and r_gen',
    yName: 'fraction of items met',
    fields: 'rSpecMean, rGenMean',
    build: (runs) =>
      perRun(runs, [
        { path: 'rSpecMean', name: 'r_spec' },
        { path: 'rGenMean', name: 'r_gen' },
      ]),
  },
  {
    id: 'pass-rate',
    title: 'Rubric pass rate per dimension',
    yName: 'pass rate',
    fields: 'passRate.{method_innovation, experimental_design, general}',
    build: (runs) =>
      perRun(
        runs,
        DIMENSIONS.map(([k, name]) => ({ path: `passRate.${k}`, name })),
      ),
  },
  { id: 'kl', title: 'KL to the reference policy (k3)', yName: 'KL (nats/token)', fields: 'kl', build: (runs) => perRun(runs, [{ path: 'kl' }]) },
  {
    id: 'clip-fraction',
    title: 'Clip fraction',
    yName: 'fraction of tokens clipped',
    fields: 'clipFraction',
    build: (runs) => perRun(runs, [{ path: 'clipFraction' }]),
  },
  {
    id: 'sampler-trainer',
    title: 'Sampler–trainer agreement on the sampled tokens (GRPO)',
    yName: 'nats',
    fields: 'agreement.*',
    build: (runs) =>
      perRun(runs, [
        { path: 'agreement.meanAbsLogprobDiff', name: 'mean |Δ logprob|' },
        { path: 'agreement.maxAbsLogprobDiff', name: 'max |Δ logprob|' },
        { path: 'agreement.klK3', name: 'KL(sampler‖trainer), k3' },
      ]),
  },
  {
    id: 'ratio-histogram',
    title: 'Ratio π/π_old at the update: share of tokens per bin (GRPO)',
    yName: 'fraction of tokens',
    fields: 'ratioHistogram',
    build: (runs) => {
      const out: LineSeries[] = [];
      for (const run of runs) {
        const rows = run.steps.filter((r) => r.ratioHistogram && typeof r.ratioHistogram === 'object');
        const first = rows[0]?.ratioHistogram as { edges?: number[] } | undefined;
        const edges = first?.edges ?? [];
        for (let i = 0; i <= edges.length; i++) {
          const name = i === 0 ? `< ${edges[0]}` : i === edges.length ? `≥ ${edges[i - 1]}` : `[${edges[i - 1]}, ${edges[i]})`;
          const points: [number, number][] = rows.map((r) => {
            const h = r.ratioHistogram as { counts: number[] };
            const n = h.counts.reduce((a, b) => a + b, 0);
            return [r.globalStep, n ? (h.counts[i] ?? 0) / n : 0];
          });
          if (points.some(([, y]) => y > 0)) out.push({ name: runs.length > 1 ? `${run.label} · ${name}` : name, points });
        }
      }
      return out;
    },
  },
  { id: 'grad-norm', title: 'Gradient norm (before clipping)', yName: 'L2 norm', fields: 'gradNorm', build: (runs) => perRun(runs, [{ path: 'gradNorm' }]) },
  {
    id: 'completion-length',
    title: 'Completion length',
    yName: 'tokens per completion',
    fields: 'completionLength',
    build: (runs) => perRun(runs, [{ path: 'completionLength' }]),
  },
  {
    id: 'token-divergence',
    title: 'OPSD JSD by token class (format: whitespace, punctuation, markdown; content: the rest) and top-1 agreement',
    yName: 'JSD (nats/token) / fraction',
    fields: 'tokenDivergence.*',
    build: (runs) =>
      perRun(runs, [
        { path: 'tokenDivergence.format.meanJsd', name: 'format tokens: mean JSD' },
        { path: 'tokenDivergence.content.meanJsd', name: 'content tokens: mean JSD' },
        { path: 'tokenDivergence.format.jsdShare', name: "format tokens' share of the JSD" },
        { path: 'tokenDivergence.top1Agreement', name: "teacher's top token = student's" },
      ]),
  },
  {
    id: 'length-truncation',
    title: 'OPSD completion length (p90) and truncation (share cut at max-new-tokens)',
    yName: 'tokens / fraction',
    fields: 'completionLengthP90, truncationRate',
    build: (runs) =>
      perRun(runs, [
        { path: 'completionLengthMean', name: 'mean length' },
        { path: 'completionLengthP90', name: 'p90 length' },
        { path: 'truncationRate', name: 'truncation rate × 100', scale: 100 },
      ]),
  },
  {
    id: 'stop-rate',
    title: 'Stop rate (completions ending with a stop token)',
    yName: 'fraction',
    fields: 'stopRate',
    build: (runs) => perRun(runs, [{ path: 'stopRate' }]),
  },
  {
    id: 'throughput',
    title: 'Throughput',
    yName: 'completion tokens / s',
    fields: 'tokensPerSecond',
    build: (runs) => perRun(runs, [{ path: 'tokensPerSecond' }]),
  },
  {
    id: 'phase-seconds',
    title: 'Seconds per phase',
    yName: 'seconds per step',
    fields: 'phaseSeconds.*',
    build: (runs) =>
      perRun(
        runs,
        subKeys(runs, 'phaseSeconds').map((k) => ({ path: `phaseSeconds.${k}`, name: k })),
      ),
  },
  {
    id: 'memory',
    title: 'Memory per phase (GPU peak allocated; process RSS on CPU)',
    yName: 'GiB',
    fields: 'memory.peak<Phase>Bytes / memory.rssBytes',
    build: (runs) => {
      const keys = subKeys(runs, 'memory', (k) => /^peak.+Bytes$/.test(k) && k !== 'peakAllocatedBytes');
      const use = keys.length ? keys : subKeys(runs, 'memory', (k) => k === 'rssBytes');
      return perRun(
        runs,
        use.map((k) => ({
          path: `memory.${k}`,
          name:
            k === 'rssBytes'
              ? 'process RSS'
              : k
                  .replace(/^peak/, '')
                  .replace(/Bytes$/, '')
                  .toLowerCase(),
          scale: GiB,
        })),
      );
    },
  },
  {
    id: 'validation',
    title: 'Validation score (mean r_spec of greedy plans on held-out items, 95% bootstrap band)',
    yName: 'score',
    fields: 'validation rows',
    build: (runs) =>
      runs
        .filter((r) => r.validation.length)
        .map((run) => {
          const band = run.validation.filter((v) => v.ci).map((v) => [v.globalStep, v.ci![0], v.ci![1]] as [number, number, number]);
          return {
            name: run.label,
            symbols: true,
            points: run.validation.map((v) => [v.globalStep, v.score] as [number, number]),
            ...(band.length && { band }),
            marks: [
              ...run.earlyStops.map((e) => {
                const v = [...run.validation].reverse().find((x) => x.globalStep <= e.globalStep) ?? run.validation[run.validation.length - 1]!;
                return { x: e.globalStep, y: v.score, label: 'stop' };
              }),
              // The state each stage handed on (validation.loadBestAtEnd).
              ...run.bestStates.map((b) => ({ x: b.globalStep, y: b.score, label: `best (${b.stage} step ${b.step})` })),
            ],
          };
        }),
  },
];

/** Stage boundaries and early stops of the runs as vertical lines (deduplicated; run label added when runs differ). */
export function stageLines(runs: RunData[]): VLine[] {
  const all = runs.flatMap((run) => [
    ...run.stageStarts.slice(1).map((s) => ({ run: run.label, x: s.globalStep - 0.5, label: `→ ${s.stage}` })),
    ...run.earlyStops.map((e) => ({ run: run.label, x: e.globalStep, label: 'early stop' })),
  ]);
  const keys = new Map<string, string[]>();
  for (const a of all) {
    const k = `${a.x}|${a.label}`;
    keys.set(k, [...(keys.get(k) ?? []), a.run]);
  }
  return [...keys.entries()].map(([k, rs]) => {
    const [x, label] = k.split('|') as [string, string];
    return { x: Number(x), label: runs.length > 1 && rs.length < runs.length ? `${label} (${rs.join(', ')})` : label };
  });
}

/** The chart spec of one plot for these runs, or undefined when no run has its fields. */
export function plotSpec(p: PlotDef, runs: RunData[]): LineChartSpec | undefined {
  const series = p.build(runs);
  if (!series.some((s) => s.points.some(([, y]) => y !== null))) return undefined;
  return { title: p.title, xName: 'global step', yName: p.yName, series, vlines: stageLines(runs), logY: p.logY };
}
