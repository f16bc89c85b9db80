/**
 * `eval --suite suite.yaml`: several benchmarks × several models / adapters (the paper's Table 1:
 * base, SFT, OPSD, GRPO, OPSD→GRPO) → one row per model, one column per benchmark, the average
 * over benchmarks, each with a percentile-bootstrap CI (questions resampled within each
 * benchmark; the average's interval from the mean of the benchmarks' resampled scores, resample
 * by resample — Efron & Tibshirani 1993).
 *
 * suite.yaml:
 * ```yaml
 * benchmarks:            # each: name, data (items JSONL from import, or PaperGym), optional protocol, limit
 *   - { name: ResearchQA, data: rqa.jsonl, limit: 100 }
 *   - { name: RPG-ML, data: rpg-ml.jsonl }
 * models:                # each: name, model (checkpoint dir), optional adapter
 *   - { name: base, model: ./qwen3 }
 *   - { name: GRPO, model: ./qwen3, adapter: runs/grpo/final }
 * ```
 * Relative paths are read from the suite file's directory; `~` and `$VAR` / `${VAR}` are expanded.
 */
import { readFileSync } from 'node:fs';
import { dirname, isAbsolute, resolve } from 'node:path';
import { parse as parseYaml } from 'yaml';
import { quantile } from './report.js';
import { expandPath } from '../util/fs.js';
import { bootstrapMeans, getProtocol, questionScores, scoreRows, type ProtocolRow } from './protocols/index.js';
import { promptOfRows } from './protocols/score.js';

/** One benchmark of a suite. */
export interface SuiteBenchmark {
  name: string;
  data: string;
  protocol?: string;
  limit?: number;
}

/** One model (or adapter) of a suite. */
export interface SuiteModel {
  name: string;
  model: string;
  adapter?: string;
}

/** A parsed suite file. */
export interface Suite {
  benchmarks: SuiteBenchmark[];
  models: SuiteModel[];
}

/**
 * Reads and checks a suite file.
 * @throws Error naming the file and the key that is missing or wrong
 */
export function readSuite(path: string): Suite {
  let doc: unknown;
  try {
    doc = parseYaml(readFileSync(path, 'utf8'));
  } catch (e) {
    throw new Error(`${path}: not a readable YAML suite: ${(e as Error).message}`);
  }
  const o = doc as Record<string, unknown> | null;
  const base = dirname(resolve(path));
  // `~` and $VARS as a shell would (no shell reads this file), then relative to the suite file.
  const abs = (p: string, where: string) => {
    const x = expandPath(p, `${path}: ${where}`);
    return isAbsolute(x) ? x : resolve(base, x);
  };
  const list = (key: string) => {
    const v = o?.[key];
    if (!Array.isArray(v) || !v.length) throw new Error(`${path}: '${key}' must be a non-empty list`);
    return v.map((x, i) => {
      if (!x || typeof x !== 'object') throw new Error(`${path}: ${key}[${i}] must be a mapping`);
      return x as Record<string, unknown>;
    });
  };
  const str = (x: Record<string, unknown>, k: string, where: string, required = true) => {
    const v = x[k];
    if (v === undefined && !required) return undefined;
    if (typeof v !== 'string' || !v.trim()) throw new Error(`${path}: ${where}.${k} must be a non-empty string`);
    return v;
  };
  const benchmarks = list('benchmarks').map((b, i) => {
    const w = `benchmarks[${i}]`;
    const limit = b.limit;
    if (limit !== undefined && !(Number.isInteger(limit) && (limit as number) > 0)) throw new Error(`${path}: ${w}.limit must be a positive integer`);
    const protocol = str(b, 'protocol', w, false);
    if (protocol) getProtocol(protocol);
    return {
      name: str(b, 'name', w)!,
      data: abs(str(b, 'data', w)!, `${w}.data`),
      ...(protocol && { protocol }),
      ...(limit !== undefined && { limit: limit as number }),
    };
  });
  const models = list('models').map((m, i) => {
    const w = `models[${i}]`;
    const adapter = str(m, 'adapter', w, false);
    return { name: str(m, 'name', w)!, model: abs(str(m, 'model', w)!, `${w}.model`), ...(adapter && { adapter: abs(adapter, `${w}.adapter`) }) };
  });
  for (const [what, names] of [
    ['benchmark', benchmarks.map((b) => b.name)],
    ['model', models.map((m) => m.name)],
  ] as const) {
    const dup = names.find((n, i) => names.indexOf(n) !== i);
    if (dup) throw new Error(`${path}: ${what} name '${dup}' is used twice`);
  }
  return { benchmarks, models };
}

/** One cell: a model's score on a benchmark with its CI, or null when nothing could be scored. */
export interface SuiteCell {
  score: number;
  lo: number;
  hi: number;
  /** Plans scored / skipped; verdicts and null verdicts. */
  n: number;
  skipped: number;
  verdicts: number;
  nulls: number;
}

/** The Table-1 layout. */
export interface SuiteTable {
  /** Each benchmark with its protocol and the judge prompt of its column (name, SHA-256 prefix), when recorded. */
  benchmarks: { name: string; protocol: string; prompt?: { name: string; sha256: string } }[];
  models: { name: string; model: string; adapter?: string }[];
  /** cells[model][benchmark]. */
  cells: (SuiteCell | null)[][];
  /** Per model: the mean over benchmarks (null when a cell is missing). */
  average: ({ score: number; lo: number; hi: number } | null)[];
  bootstrap: { resamples: number; seed: number; level: number };
}

/**
 * Builds the table from each (model, benchmark)'s rows.
 * @param rows rows[model][benchmark] (ProtocolRow[] as `eval --out` writes them)
 */
export function suiteTable(
  suite: { benchmarks: { name: string; protocol: string }[]; models: SuiteModel[] },
  rows: ProtocolRow[][][],
  o: { resamples?: number; seed?: number; level?: number; alpha?: number } = {},
): SuiteTable {
  const resamples = o.resamples ?? 1000;
  const seed = o.seed ?? 0;
  const level = o.level ?? 0.95;
  const cells: (SuiteCell | null)[][] = [];
  const average: ({ score: number; lo: number; hi: number } | null)[] = [];
  suite.models.forEach((_m, mi) => {
    const drawsPer: number[][] = [];
    cells.push(
      suite.benchmarks.map((b, bi) => {
        const p = getProtocol(b.protocol);
        const rs = rows[mi]![bi]!;
        const s = scoreRows(p, rs, { resamples, seed: seed + bi, level, alpha: o.alpha });
        if (!s.score) return null;
        drawsPer.push(bootstrapMeans(questionScores(p, rs, o.alpha), p.finish, resamples, seed + bi));
        return { score: s.score.score, lo: s.score.lo, hi: s.score.hi, n: s.score.n, skipped: s.skipped, verdicts: s.verdicts, nulls: s.nulls };
      }),
    );
    const row = cells[mi]!;
    if (row.some((c) => c === null)) {
      average.push(null);
      return;
    }
    const score = row.reduce((a, c) => a + c!.score, 0) / row.length;
    if (!resamples) {
      average.push({ score, lo: score, hi: score });
      return;
    }
    const avg = Array.from({ length: resamples }, (_, s) => drawsPer.reduce((a, d) => a + d[s]!, 0) / drawsPer.length).sort((a, b) => a - b);
    average.push({ score, lo: quantile(avg, (1 - level) / 2), hi: quantile(avg, (1 + level) / 2) });
  });
  // One prompt per column: a column whose models were judged with different prompts is refused.
  const prompts = suite.benchmarks.map((b, bi) => {
    const ps = suite.models.map((_m, mi) => promptOfRows(rows[mi]![bi]!));
    const key = (x: (typeof ps)[number]) => (x ? `${x.name} sha256 ${x.sha256}` : 'not recorded');
    if (new Set(ps.map(key)).size > 1)
      throw new Error(
        `benchmark ${b.name}: the models were judged with different prompts (${ps.map((x, mi) => `${suite.models[mi]!.name}: ${key(x)}`).join('; ')}); not put side by side`,
      );
    return ps[0];
  });
  return {
    benchmarks: suite.benchmarks.map((b, bi) => ({ name: b.name, protocol: b.protocol, ...(prompts[bi] && { prompt: prompts[bi] }) })),
    models: suite.models.map((m) => ({ name: m.name, model: m.model, ...(m.adapter && { adapter: m.adapter }) })),
    cells,
    average,
    bootstrap: { resamples, seed, level },
  };
}

/** The table as Markdown: `score [lo, hi]` per cell (×100, one decimal), then the average. */
export function formatSuiteTable(t: SuiteTable): string {
  const f = (c: { score: number; lo: number; hi: number } | null) =>
    c ? `${(100 * c.score).toFixed(1)} [${(100 * c.lo).toFixed(1)}, ${(100 * c.hi).toFixed(1)}]` : '—';
  const head = ['model', ...t.benchmarks.map((b) => b.name), 'Average'];
  const body = t.models.map((m, i) => [m.name, ...t.cells[i]!.map(f), f(t.average[i]!)]);
  const w = head.map((h, i) => Math.max(h.length, ...body.map((b) => b[i]!.length)));
  const line = (cells: string[]) => `| ${cells.map((c, i) => c.padEnd(w[i]!)).join(' | ')} |`;
  return [
    line(head),
    `|${w.map((n) => '-'.repeat(n + 2)).join('|')}|`,
    ...body.map(line),
    '',
    `scores × 100 with ${100 * t.bootstrap.level}% bootstrap CIs over questions (${t.bootstrap.resamples} resamples); protocols: ${t.benchmarks.map((b) => `${b.name} = ${b.protocol}`).join(', ')}`,
    `judge prompts: ${t.benchmarks.map((b) => `${b.name} = ${b.prompt ? `${b.prompt.name} (sha256 ${b.prompt.sha256})` : 'not recorded'}`).join(', ')}`,
  ].join('\n');
}
