/**
 * `papergym-native report`: one self-contained HTML file (inline SVG charts and CSS; no script,
 * no network) for one or more run dirs, every plot of lib/report/plots.ts with the runs overlaid,
 * plus eval results (coverage with bootstrap CIs, hardest rubric items, a paired bootstrap of two
 * adapters). Each chart is also written as `<name>-plots/<plot>.svg` and `.png` beside the HTML.
 * Files are replaced atomically (temp + rename), so a browser or a second `report` reading while
 * `train` rewrites it never sees half a file.
 */
import type { SuiteTable } from '../eval/suite.js';
import { mkdirSync, renameSync, writeFileSync, existsSync, readFileSync } from 'node:fs';
import { basename, dirname, join, relative, resolve } from 'node:path';
import { barChartSvg, lineChartSvg, svgToPng } from './charts.js';
import { PLOTS, plotSpec } from './plots.js';
import { readRuns, type RunData } from './read.js';
import { buildReport, type EvalReport, type EvalRow } from '../eval/report.js';
import { COVERAGE_KEYS, hardestItems, pairedBootstrap, readEvalRows, type PairedComparison } from '../eval/compare.js';

export interface ReportOptions {
  /** Run dirs, overlaid in this order. */
  runs: string[];
  /** Output HTML path (default `report.html` in the current dir; `train` uses `<run>/report.html`). */
  out: string;
  /** Eval row files (`eval --out`), optionally labelled `label=path`. */
  evals?: string[];
  /** Dataset JSONL to show rubric item texts in the hardest-items table. */
  data?: string;
  /** Also write PNG files (default true). */
  png?: boolean;
  /** Bootstrap resamples for eval CIs (default 1000). */
  resamples?: number;
  /** Title (default: the run labels). */
  title?: string;
  /** A benchmark suite's Table-1 layout (`eval --suite`): one row per model, one column per benchmark, the average. */
  suite?: SuiteTable;
}

export interface ReportResult {
  html: string;
  plotsDir: string;
  /** Plots drawn (ids), including the eval charts. */
  drawn: string[];
  /** Plots with no data in any run: id → fields they need. */
  missing: Record<string, string>;
  notes: string[];
}

const esc = (s: unknown) => String(s).replace(/[&<>"']/g, (c) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' })[c]!);

function atomicWrite(path: string, data: string | Buffer): void {
  const tmp = `${path}.tmp-${process.pid}`;
  writeFileSync(tmp, data);
  renameSync(tmp, path);
}

/** Strips the XML prolog so an SVG document can be inlined in HTML. */
function inlineSvg(svg: string): string {
  return svg.replace(/^<\?xml[^>]*>\s*/, '');
}

function flatten(o: unknown, prefix = '', out: Record<string, unknown> = {}): Record<string, unknown> {
  if (o && typeof o === 'object' && !Array.isArray(o)) {
    for (const [k, v] of Object.entries(o)) {
      if (k === 'origins' && !prefix) continue;
      flatten(v, prefix ? `${prefix}.${k}` : k, out);
    }
  } else if (prefix) out[prefix] = o;
  return out;
}

const fmt = (v: number, d = 3) => (Number.isFinite(v) ? v.toFixed(d) : '–');
const pct = (v: number) => (Number.isFinite(v) ? `${(100 * v).toFixed(1)}%` : '–');

interface EvalInput {
  label: string;
  path: string;
  rows: EvalRow[];
  report?: EvalReport;
  notes: string[];
}

function loadEvals(specs: string[], resamples: number): EvalInput[] {
  return specs.map((spec) => {
    const eq = spec.indexOf('=');
    const [label, path] = eq > 0 && !existsSync(spec) ? [spec.slice(0, eq), spec.slice(eq + 1)] : [basename(spec).replace(/\.jsonl$/, ''), spec];
    try {
      const { rows, notes } = readEvalRows(path);
      if (!rows.length) return { label, path, rows, notes: [...notes, 'no eval rows'] };
      return { label, path, rows, report: buildReport(rows, { resamples }), notes };
    } catch (e) {
      return { label, path, rows: [], notes: [`unreadable: ${(e as Error).message}`] };
    }
  });
}

/** Rubric item texts from a dataset JSONL: `${questionId}\0${itemId}` → text. Bad lines are ignored. */
function itemTexts(path: string | undefined, notes: string[]): Map<string, string> {
  const m = new Map<string, string>();
  if (!path) return m;
  try {
    for (const line of readFileSync(path, 'utf8').split('\n')) {
      if (!line.trim()) continue;
      try {
        const it = JSON.parse(line) as { id?: string; rubric?: { id: string; text: string }[] };
        for (const r of it.rubric ?? []) m.set(`${it.id}\u0000${r.id}`, r.text);
      } catch {
        /* not an item */
      }
    }
  } catch (e) {
    notes.push(`--data ${path}: ${(e as Error).message}`);
  }
  return m;
}

const DIM_LABEL: Record<string, string> = {
  overall: 'overall',
  method_innovation: 'method innovation',
  experimental_design: 'experimental design',
  general: 'general items',
};

const CSS = `
body{font-family:"DejaVu Sans","Liberation Sans",Arial,sans-serif;margin:24px;color:#222;background:#fafafa}
h1{font-size:22px;margin:0 0 4px}h2{font-size:18px;margin:28px 0 8px;border-bottom:1px solid #ccc}
table{border-collapse:collapse;font-size:13px;margin:8px 0}td,th{border:1px solid #ddd;padding:3px 8px;text-align:left;vertical-align:top}
th{background:#eee}td.num{text-align:right;font-variant-numeric:tabular-nums}
.grid{display:grid;grid-template-columns:repeat(auto-fill,minmax(660px,1fr));gap:14px}
figure.chart{margin:0;background:#fff;border:1px solid #ddd;padding:6px}figure.chart svg{display:block;max-width:100%;height:auto}
figcaption{font-size:12px;color:#555}figure.missing{color:#777;font-size:13px;padding:12px}
.note{color:#8a4b00;font-size:13px}.muted{color:#777;font-size:12px}`;

function plotFigure(id: string, svg: string, caption: string, relDir: string, png: boolean): string {
  const links = `<a href="${esc(relDir)}/${id}.svg">SVG</a>${png ? ` · <a href="${esc(relDir)}/${id}.png">PNG</a>` : ''}`;
  return `<figure class="chart" data-plot="${esc(id)}">${inlineSvg(svg)}<figcaption>${esc(caption)} · ${links}</figcaption></figure>`;
}

/** The dir a report written to `out` (an .html path) puts its charts in, beside it: `<name>-plots/`. */
export function reportPlotsDir(out: string): string {
  return join(dirname(out), `${basename(out).replace(/\.html?$/i, '')}-plots`);
}

/**
 * Writes the report (HTML + per-plot SVG/PNG). Never throws for what the run dirs or eval files
 * contain (missing dirs, cut lines, old fields become notes); throws only when the output cannot
 * be written.
 */
export function writeReport(o: ReportOptions): ReportResult {
  const out = resolve(o.out);
  const png = o.png ?? true;
  const resamples = o.resamples ?? 1000;
  const plotsDir = reportPlotsDir(out);
  mkdirSync(plotsDir, { recursive: true });
  const relDir = relative(dirname(out), plotsDir) || '.';
  const runs = readRuns(o.runs);
  const notes: string[] = [];
  const drawn: string[] = [];
  const missing: Record<string, string> = {};
  const writePlot = (id: string, svg: string) => {
    atomicWrite(join(plotsDir, `${id}.svg`), svg);
    if (png) {
      try {
        atomicWrite(join(plotsDir, `${id}.png`), svgToPng(svg));
      } catch (e) {
        notes.push(`PNG of ${id} not written: ${(e as Error).message}`);
      }
    }
    drawn.push(id);
  };

  // ---- training plots ----
  const figures: string[] = [];
  for (const p of PLOTS) {
    const spec = runs.length ? plotSpec(p, runs) : undefined;
    if (!spec) {
      missing[p.id] = p.fields;
      figures.push(
        `<figure class="chart missing" data-plot="${esc(p.id)}" data-missing="1"><b>${esc(p.title)}</b><br>no data: no run has <code>${esc(p.fields)}</code> in metrics.jsonl</figure>`,
      );
      continue;
    }
    const svg = lineChartSvg(spec);
    writePlot(p.id, svg);
    figures.push(plotFigure(p.id, svg, `${p.title} over the global step; dashed lines: stage boundaries`, relDir, png));
  }

  // ---- eval ----
  const evals = loadEvals(o.evals ?? [], resamples);
  const evalHtml = evals.length ? evalSection(evals, itemTexts(o.data, notes), resamples, relDir, png, writePlot) : '';

  // Reload only while a run may still be writing (running, or unknown for runs of older versions);
  // a stopped run's page says why and stays put.
  const inProgress = runs.some((r) => r.inProgress && (r.steps.length > 0 || r.config !== undefined));
  const runningLabel = runs.some((r) => r.status === 'running') ? 'a run is still writing' : 'a run may still be writing (no lock file to tell)';
  const title = o.title ?? `papergym-native report: ${runs.map((r) => r.label).join(', ') || 'no runs'}`;
  const html = `<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
${inProgress ? '<meta http-equiv="refresh" content="60">' : ''}<title>${esc(title)}</title><style>${CSS}</style></head>
<body>
<h1>${esc(title)}</h1>
<p class="muted">written ${esc(new Date().toISOString())} by papergym-native report${inProgress ? ` · ${runningLabel}: this page reloads every 60 s` : ''}</p>
${runsSection(runs)}
${notes.length ? `<p class="note">${notes.map(esc).join('<br>')}</p>` : ''}
<h2 id="training">Training</h2>
${Object.keys(missing).length ? `<p class="muted">plots without data: ${Object.keys(missing).map(esc).join(', ')}</p>` : ''}
<div class="grid">
${figures.join('\n')}
</div>
${tokenSection(runs)}
${o.suite ? suiteSection(o.suite) : ''}
${evalHtml}
${settingsSection(runs)}
</body></html>
`;
  atomicWrite(out, html);
  return { html: out, plotsDir, drawn, missing, notes: [...notes, ...runs.flatMap((r) => r.notes.map((n) => `${r.label}: ${n}`))] };
}

/** The suite's table: score × 100 with its CI per model × benchmark, then the average. */
function suiteSection(t: SuiteTable): string {
  const f = (c: { score: number; lo: number; hi: number } | null) =>
    c ? `${(100 * c.score).toFixed(1)} <span class="muted">[${(100 * c.lo).toFixed(1)}, ${(100 * c.hi).toFixed(1)}]</span>` : '—';
  const head = `<tr><th>model</th>${t.benchmarks.map((b) => `<th>${esc(b.name)}<br><span class="muted">${esc(b.protocol)}</span></th>`).join('')}<th>Average</th></tr>`;
  const rows = t.models.map(
    (m, i) => `<tr><td>${esc(m.name)}</td>${t.cells[i]!.map((c) => `<td>${f(c)}</td>`).join('')}<td><b>${f(t.average[i]!)}</b></td></tr>`,
  );
  return `<h2 id="suite">Benchmarks</h2><p class="muted">Each benchmark scored by its own protocol (docs/eval.md), × 100, with ${100 * t.bootstrap.level}% bootstrap CIs over questions (${t.bootstrap.resamples} resamples).</p><table>${head}${rows.join('')}</table>`;
}

/**
 * OPSD's highest-divergence tokens (lib/train/token-divergence.ts) at each run's last OPSD step
 * that has them: id, text, occurrences, mean JSD, plus the step's format / content split and top-1 agreement.
 */
function tokenSection(runs: RunData[]): string {
  const parts: string[] = [];
  for (const r of runs) {
    const row = [...r.steps].reverse().find((x) => x.tokenDivergence && typeof x.tokenDivergence === 'object');
    if (!row) continue;
    const d = row.tokenDivergence as {
      tokens: number;
      meanJsd: number;
      top1Agreement: number;
      format: { tokens: number; meanJsd: number; jsdShare: number };
      content: { tokens: number; meanJsd: number; jsdShare: number };
      topTokens?: { id: number; text: string; count: number; meanJsd: number }[];
    };
    const f = (x: number) => (Number.isFinite(x) ? x.toFixed(4) : '–');
    const rows = (d.topTokens ?? []).map(
      (t) =>
        `<tr><td class="num">${t.id}</td><td><code>${esc(JSON.stringify(t.text))}</code></td><td class="num">${t.count}</td><td class="num">${f(t.meanJsd)}</td></tr>`,
    );
    parts.push(
      `<h3>${esc(r.label)}: OPSD step ${row.step} (global ${row.globalStep})</h3><p>${d.tokens} diagnosed tokens, mean JSD ${f(d.meanJsd)}; format tokens ${d.format.tokens} (mean ${f(d.format.meanJsd)}, ${(100 * d.format.jsdShare).toFixed(1)}% of the JSD), content tokens ${d.content.tokens} (mean ${f(d.content.meanJsd)}); the teacher's top token is the student's for ${(100 * d.top1Agreement).toFixed(1)}% of the tokens</p><table><tr><th>id</th><th>text</th><th>count</th><th>mean JSD</th></tr>${rows.join('')}</table>`,
    );
  }
  return parts.length ? `<h2 id="opsd-tokens">OPSD: highest-divergence tokens</h2>${parts.join('')}` : '';
}

function runsSection(runs: RunData[]): string {
  if (!runs.length) return '<p class="note">no run dirs given</p>';
  const rows = runs.map((r) => {
    // A stage that handed on its best state (not its last) says which step.
    const stages =
      r.stageStarts
        .map((s) => {
          const b = r.bestStates.find((x) => x.stage === s.stage);
          return b ? `${s.stage} (best: ${s.stage.toUpperCase()} step ${b.step}, ${b.score.toFixed(3)})` : s.stage;
        })
        .join(' → ') || '–';
    const last = r.steps[r.steps.length - 1];
    const status =
      r.status === 'missing'
        ? 'missing'
        : `${r.status}${r.statusReason && r.statusReason !== r.status ? `: ${r.statusReason.replace(/^(finished|running|stopped|interrupted)[: ]*/, '')}` : ''}`;
    const wall = typeof r.summary?.wallSeconds === 'number' ? `${(r.summary.wallSeconds as number).toFixed(1)} s` : '–';
    return `<tr><td>${esc(r.label)}</td><td><code>${esc(r.dir)}</code></td><td>${esc(status)}</td><td>${esc(stages)}</td><td class="num">${last ? last.globalStep : 0}</td><td class="num">${wall}</td><td class="note">${r.notes.map(esc).join('<br>')}</td></tr>`;
  });
  return `<h2 id="runs">Runs</h2><table><tr><th>run</th><th>dir</th><th>status</th><th>stages</th><th>steps</th><th>wall</th><th>notes</th></tr>${rows.join('')}</table>`;
}

function settingsSection(runs: RunData[]): string {
  const withCfg = runs.filter((r) => r.config);
  if (!withCfg.length) return '';
  const flats = withCfg.map((r) => flatten(r.config));
  const origins = withCfg.map((r) => (r.config?.origins ?? {}) as Record<string, string>);
  const keys = [...new Set(flats.flatMap((f) => Object.keys(f)))].sort();
  const differ = (k: string) => new Set(flats.map((f) => JSON.stringify(f[k]))).size > 1;
  const shown = withCfg.length > 1 ? keys.filter(differ) : keys;
  const cell = (f: Record<string, unknown>, og: Record<string, string>, k: string) =>
    `<td>${esc(JSON.stringify(f[k]) ?? '–')}${og[k] ? ` <span class="muted">(${esc(og[k])})</span>` : ''}</td>`;
  const head = `<tr><th>setting</th>${withCfg.map((r) => `<th>${esc(r.label)}</th>`).join('')}</tr>`;
  const body = shown.map((k) => `<tr><td><code>${esc(k)}</code></td>${flats.map((f, i) => cell(f, origins[i]!, k)).join('')}</tr>`).join('');
  const what = withCfg.length > 1 ? 'Settings that differ between the runs' : 'Settings (value and where it came from)';
  return `<h2 id="settings">${what}</h2>${shown.length ? `<table>${head}${body}</table>` : '<p class="muted">the runs use the same settings</p>'}`;
}

function evalSection(
  evals: EvalInput[],
  texts: Map<string, string>,
  resamples: number,
  relDir: string,
  png: boolean,
  writePlot: (id: string, svg: string) => void,
): string {
  const parts: string[] = ['<h2 id="eval">Evaluation</h2>'];
  for (const e of evals) if (e.notes.length) parts.push(`<p class="note">${esc(e.label)} (${esc(e.path)}): ${e.notes.map(esc).join('; ')}</p>`);
  const ok = evals.filter((e) => e.report);
  if (!ok.length) return parts.join('\n');
  const level = Math.round(100 * ok[0]!.report!.bootstrap.level);
  const statOf = (r: EvalReport, k: string) =>
    k === 'overall' ? r.overall : k === 'general' ? r.general : r.byDimension[k as 'method_innovation' | 'experimental_design'];
  // Coverage table + bar chart.
  const head = `<tr><th>result</th><th>questions</th><th>plans</th>${COVERAGE_KEYS.map((k) => `<th>${esc(DIM_LABEL[k])}</th>`).join('')}<th>reward</th></tr>`;
  const rows = ok.map((e) => {
    const r = e.report!;
    const c = (s: { mean: number; lo: number; hi: number; met?: number; n: number }) =>
      `<td class="num">${pct(s.mean)} <span class="muted">[${pct(s.lo)}, ${pct(s.hi)}]${s.met !== undefined ? ` ${s.met}/${s.n}` : ''}</span></td>`;
    return `<tr><td>${esc(e.label)}</td><td class="num">${r.questions}</td><td class="num">${r.plans}</td>${COVERAGE_KEYS.map((k) => c(statOf(r, k))).join('')}<td class="num">${fmt(r.reward.mean)} <span class="muted">[${fmt(r.reward.lo)}, ${fmt(r.reward.hi)}]</span></td></tr>`;
  });
  parts.push(
    `<p class="muted">Rubric coverage (share of rubric items met; null verdicts count as not met) with ${level}% bootstrap CIs over questions (${resamples} resamples).</p><table>${head}${rows.join('')}</table>`,
  );
  const covSvg = barChartSvg({
    title: `Rubric coverage with ${level}% bootstrap CI`,
    yName: 'coverage',
    categories: COVERAGE_KEYS.map((k) => DIM_LABEL[k]!),
    groups: ok.map((e) => ({ name: e.label, values: COVERAGE_KEYS.map((k) => statOf(e.report!, k)) })),
    yMin: 0,
    yMax: 1,
  });
  writePlot('eval-coverage', covSvg);
  const figs = [plotFigure('eval-coverage', covSvg, 'coverage per dimension, whiskers: bootstrap CI', relDir, png)];

  // A jury's agreement (lib/judge/agreement.ts), per result that has one.
  for (const e of ok) {
    const a = e.report!.agreement;
    if (!a) continue;
    const est = (x: { value: number | null; lo: number | null; hi: number | null; reason?: string }) =>
      x.value === null
        ? `<span class="muted">n/a (${esc(x.reason ?? '')})</span>`
        : `${fmt(x.value, 3)} <span class="muted">[${x.lo === null ? '?' : fmt(x.lo, 3)}, ${x.hi === null ? '?' : fmt(x.hi, 3)}]</span>`;
    const groups = [['overall', a.overall], ...Object.entries(a.byDimension)] as const;
    const th = `<tr><th>units</th><th>judges</th><th>agreement</th><th>Cohen κ</th></tr>`;
    const tr = groups.flatMap(([g, x]) => [
      `<tr><td>${esc(DIM_LABEL[g] ?? g)} (${x.units})</td><td>all (Fleiss κ)</td><td></td><td class="num">${est(x.fleiss)}</td></tr>`,
      ...x.pairs.map(
        (p) => `<tr><td></td><td>${esc(p.a)} vs ${esc(p.b)}</td><td class="num">${est(p.agreement)}</td><td class="num">${est(p.kappa)}</td></tr>`,
      ),
    ]);
    parts.push(
      `<h3>Judge agreement: ${esc(e.label)}</h3><p class="muted">Jury members' verdicts: share of equal verdicts and Cohen's κ per pair, Fleiss' κ over all, ${level}% bootstrap CIs over questions.</p><table>${th}${tr.join('')}</table>`,
    );
  }

  // Paired comparison of the first result with each other one.
  const comps: { a: EvalInput; b: EvalInput; c: PairedComparison }[] = [];
  for (const b of ok.slice(1)) {
    try {
      comps.push({ a: ok[0]!, b, c: pairedBootstrap(ok[0]!.rows, b.rows, { resamples }) });
    } catch (err) {
      parts.push(`<p class="note">${esc(ok[0]!.label)} vs ${esc(b.label)}: ${esc((err as Error).message)}</p>`);
    }
  }
  if (comps.length) {
    const th = `<tr><th>B vs A</th><th>shared questions</th>${COVERAGE_KEYS.map((k) => `<th>${esc(DIM_LABEL[k])}: B − A</th>`).join('')}</tr>`;
    const tr = comps.map(
      ({ a, b, c }) =>
        `<tr><td>${esc(b.label)} vs ${esc(a.label)}</td><td class="num">${c.questions}${c.onlyA || c.onlyB ? ` <span class="muted">(${c.onlyA} only in A, ${c.onlyB} only in B)</span>` : ''}</td>${COVERAGE_KEYS.map(
          (k) => {
            const s = c.stats[k];
            return `<td class="num">${fmt(100 * s.diff, 1)} pt <span class="muted">[${fmt(100 * s.lo, 1)}, ${fmt(100 * s.hi, 1)}] · P(B−A≤0) ${fmt(s.pBNotBetter, 3)}</span></td>`;
          },
        ).join('')}</tr>`,
    );
    parts.push(
      `<h3>Paired bootstrap</h3><p class="muted">Both results resampled on the same questions; B − A in percentage points with ${level}% CI and the share of resamples where B is not better.</p><table>${th}${tr.join('')}</table>`,
    );
    const diffSvg = barChartSvg({
      title: `Paired bootstrap: coverage difference B − A (${level}% CI)`,
      yName: 'Δ coverage (points)',
      categories: COVERAGE_KEYS.map((k) => DIM_LABEL[k]!),
      groups: comps.map(({ a, b, c }) => ({
        name: `${b.label} − ${a.label}`,
        values: COVERAGE_KEYS.map((k) => ({ mean: 100 * c.stats[k].diff, lo: 100 * c.stats[k].lo, hi: 100 * c.stats[k].hi })),
      })),
    });
    writePlot('eval-paired', diffSvg);
    figs.push(plotFigure('eval-paired', diffSvg, 'paired bootstrap difference per dimension', relDir, png));
  }
  parts.push(`<div class="grid">${figs.join('\n')}</div>`);

  // Hardest items (over all results together).
  const hard = hardestItems(
    ok.flatMap((e) => e.rows),
    10,
  );
  if (hard.length) {
    const perResult = (q: string, it: string) =>
      ok
        .map((e) => {
          const rs = e.rows.filter((r) => r.questionId === q && r.itemId === it);
          return `<td class="num">${rs.length ? `${rs.filter((r) => r.met === true).length}/${rs.length}` : '–'}</td>`;
        })
        .join('');
    const hh = `<tr><th>question</th><th>item</th><th>dimension</th><th>pass rate</th>${ok.map((e) => `<th>${esc(e.label)}</th>`).join('')}<th>text</th></tr>`;
    const hr = hard.map(
      (h) =>
        `<tr><td>${esc(h.questionId)}</td><td>${esc(h.itemId)}</td><td>${esc(h.dimension ?? '')}</td><td class="num">${pct(h.rate)} (${h.met}/${h.n})</td>${perResult(h.questionId, h.itemId)}<td>${esc(texts.get(`${h.questionId}\u0000${h.itemId}`) ?? '')}</td></tr>`,
    );
    parts.push(`<h3>Hardest rubric items</h3><table>${hh}${hr.join('')}</table>`);
  }
  return parts.join('\n');
}
