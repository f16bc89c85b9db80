/**
 * `papergym-native build-data --papers DIR_OR_ARCHIVES... --out dataset.jsonl --llm URL --model NAME`
 * (docs/design.md §7): papers → PaperGym items through an OpenAI-compatible endpoint, with SQLite
 * state for resume (`--state`, default `<out>.state.sqlite`), `--force` to redo, and
 * `--format research-plan-gen` for the public dataset's field names.
 */
import { existsSync, readFileSync, writeFileSync, renameSync } from 'node:fs';
import { basename } from 'node:path';
import type { CommandModule } from 'yargs';
import { BUILD_DATA_OPTIONS } from '../../lib/config/settings.js';
import { addSettings } from '../../lib/config/schema.js';
import { LlmClient } from '../../lib/llm/client.js';
import { buildDataset, discoverPapers, ingestPapers, type IngestOutcome } from '../../lib/data/pipeline.js';
import { formatCoverage, formatWarning } from '../../lib/data/latex/index.js';
import { Progress } from '../../lib/data/progress.js';
import { toResearchPlanGen, validateItem, writeDataset } from '../../lib/data/schema.js';
import { PipelineState } from '../../lib/data/state.js';

export interface BuildDataArgs {
  papers: string[];
  out: string;
  llm: string;
  model: string;
  state?: string;
  force?: boolean;
  format?: 'papergym' | 'research-plan-gen';
  concurrency?: number;
  paperConcurrency?: number;
  timeout?: number;
  retries?: number;
  maxTokens?: number;
  temperature?: number;
  valFraction?: number;
  testFraction?: number;
  splitSeed?: string;
  responseFormat?: boolean;
  progress?: 'auto' | 'plain' | 'none';
  dryRun?: boolean;
  /** Seconds between plain progress lines (default 5). */
  progressInterval?: number;
  /** Per-section LaTeX parse time limit in seconds (default 5; past it the fallback converter is used). */
  parseTimeout?: number;
  /** A paper with a coverage warning (text lost in ingestion) fails instead of being used. */
  strict?: boolean;
}

/** Summary of a build-data run. */
export interface BuildDataSummary {
  items: number;
  /** Paper ids that became items, in input order. */
  ingested: string[];
  failures: { paper: string; error: string }[];
  /** Ingested papers that carry a coverage warning (stored in the state). */
  withCoverageWarnings: number;
  calls: number;
  cached: number;
  requests: number;
  promptTokens: number;
  completionTokens: number;
  out: string;
  state: string;
}

/**
 * The command's work, callable from tests: build, validate, write.
 * @throws on invalid arguments, an unreachable/failed run (all papers failed), or abort
 */
export async function runBuildData(a: BuildDataArgs, io: { signal?: AbortSignal; log?: (m: string) => void; stream?: NodeJS.WriteStream } = {}): Promise<BuildDataSummary> {
  const log = io.log ?? ((m: string) => process.stderr.write(`${m}\n`));
  if (!a.llm || !a.model) throw new Error('build-data needs --llm URL and --model NAME (or --dry-run)');
  const papers = a.papers.flatMap((p) => discoverPapers(p));
  if (!papers.length) throw new Error(`no paper sources found in ${a.papers.join(', ')}`);
  const statePath = buildStatePath(a);
  // exclusive (a second build on this state fails at once naming our pid); a corrupt state is an
  // error naming the file, or with --force (every call is redone anyway) set aside and started afresh
  const state = new PipelineState(statePath, { lock: true, onCorrupt: a.force ? 'set-aside' : 'throw' });
  if (state.setAside) log(`build-data: ${statePath} was corrupt; kept as ${state.setAside}, starting a fresh state (--force)`);
  const client = new LlmClient({
    baseUrl: a.llm,
    model: a.model,
    concurrency: a.concurrency ?? 8,
    timeoutMs: (a.timeout ?? 300) * 1000,
    maxRetries: a.retries ?? 5,
    onEvent: (e) => {
      if (e.type === 'retry') log(`llm: retry ${e.attempt} in ${e.delayMs} ms (${e.reason.slice(0, 160)})`);
    },
  });
  const progress = new Progress({ label: 'build-data', unit: 'papers', stream: io.stream, load: () => client.load(), intervalMs: (a.progressInterval ?? 5) * 1000, silent: a.progress === 'none', plain: a.progress === 'plain' ? true : undefined });
  try {
    const r = await buildDataset({
      papers,
      llm: client,
      state,
      force: a.force,
      signal: io.signal,
      paperConcurrency: a.paperConcurrency,
      splitFractions: { val: a.valFraction ?? 0.1, test: a.testFraction ?? 0.1 },
      splitSeed: a.splitSeed,
      temperature: a.temperature ?? 0,
      maxTokens: a.maxTokens ?? 4096,
      useResponseFormat: a.responseFormat,
      progress,
      log,
      loadOptions: { parseTimeoutMs: (a.parseTimeout ?? 5) * 1000, strictCoverage: a.strict },
    });
    progress.stop();
    if (!r.items.length) throw new Error(`no items built: 0 ingested, ${r.failures.length} failed: ${r.failures.map((f) => `${f.paper}: ${f.error}`).join('; ')}`);
    // a run with failed papers never replaces a larger existing output: its items go beside it
    const before = existingRows(a.out);
    const shrinks = r.failures.length > 0 && before > r.items.length;
    const target = shrinks ? incompletePath(a.out) : a.out;
    if ((a.format ?? 'papergym') === 'research-plan-gen') {
      const rows = r.items.map((it) => {
        const v = validateItem(it);
        if (!v.ok) throw new Error(`item ${it.id} invalid: ${v.errors.join('; ')}`);
        return JSON.stringify(toResearchPlanGen(it));
      });
      const tmp = `${target}.tmp-${process.pid}`;
      writeFileSync(tmp, rows.join('\n') + '\n');
      renameSync(tmp, target);
    } else writeDataset(target, r.items);
    if (shrinks) {
      const why = r.failures.map((f) => `${basename(f.paper)}: ${f.error}`).join('; ');
      throw new Error(
        `${r.failures.length} paper(s) failed (${why}); ${a.out} (${before} rows) left unchanged, the ${r.items.length} item(s) of this run written to ${target}. ` +
          `Fix the failures and rerun: finished calls come from the state ${statePath}.`,
      );
    }
    const st = client.stats();
    return {
      items: r.items.length,
      ingested: r.items.map((it) => it.source.paper_id),
      failures: r.failures,
      withCoverageWarnings: r.items.filter((it) => state.warnings(it.source.paper_id).some((w) => w.code === 'coverage')).length,
      calls: r.stats.calls,
      cached: r.stats.cached,
      requests: st.requests,
      promptTokens: st.promptTokens,
      completionTokens: st.completionTokens,
      out: a.out,
      state: statePath,
    };
  } finally {
    progress.stop();
    state.close();
  }
}

/** Non-blank lines of an existing output file (0 when there is none). */
function existingRows(path: string): number {
  if (!existsSync(path)) return 0;
  return readFileSync(path, 'utf8').split('\n').filter((l) => l.trim()).length;
}

/** Where a failed run's items go when they would replace a larger output: `x.jsonl` → `x.incomplete.jsonl`. */
export const incompletePath = (out: string) => (/\.jsonl$/i.test(out) ? out.replace(/\.jsonl$/i, '.incomplete.jsonl') : `${out}.incomplete`);

/** The state file of a build-data run. */
export const buildStatePath = (a: Pick<BuildDataArgs, 'state' | 'out'>) => a.state ?? `${a.out}.state.sqlite`;

/** This process's command line, shell-quoted, for "resume with: …". */
export function resumeCommand(argv: string[] = process.argv.slice(2)): string {
  const q = (x: string) => (/^[\w@%+=:,./-]+$/.test(x) ? x : `'${x.replace(/'/g, `'\\''`)}'`);
  return ['papergym-native', ...argv.map(q)].join(' ');
}

/** Returned by {@link handleInterrupt} when the run was stopped by Ctrl-C. */
export const InterruptedRun = Symbol('interrupted');

/**
 * Run `work` with SIGINT/SIGTERM turned into an abort. On an interrupt the abort error is not an
 * error: the run's state is already saved (work closes it), a line says where and gives the
 * command that resumes, and the exit status is 130 (as `train`). A second Ctrl-C exits at once.
 */
export async function handleInterrupt<T>(name: string, work: (signal: AbortSignal) => Promise<T>, saved: () => string): Promise<T | typeof InterruptedRun> {
  const ac = new AbortController();
  let interrupted = false;
  const onSig = () => {
    if (interrupted) {
      process.stderr.write(`\n${name}: second interrupt; exiting now\n`);
      process.exit(130);
    }
    interrupted = true;
    process.stderr.write(`\n${name}: interrupted; stopping the calls in flight…\n`);
    ac.abort();
  };
  process.on('SIGINT', onSig);
  process.on('SIGTERM', onSig);
  try {
    return await work(ac.signal);
  } catch (e) {
    if (!interrupted) throw e;
    process.stderr.write(`${name}: ${saved()}\n${name}: resume with: ${resumeCommand()}\n`);
    process.exitCode = 130;
    // nothing else to wait for: leave even if an idle socket would keep the loop alive
    setTimeout(() => process.exit(130), 1000).unref();
    return InterruptedRun;
  } finally {
    process.off('SIGINT', onSig);
    process.off('SIGTERM', onSig);
  }
}

/** Dry-run report of one paper (lines without a trailing newline). */
export function describeOutcome(o: IngestOutcome): string[] {
  if (!o.paper) return [`${basename(o.source)}: failed: ${o.error}`];
  const p = o.paper;
  const lines = [`${p.id}: ingested: "${p.title}" [${p.domain}${p.licence ? `, ${p.licence}` : ''}] main ${p.mainFile}, ${p.files.length} file(s), abstract ${p.abstract.length} chars, ${p.sections.filter((s) => s.level !== 'front').length} section(s)`];
  if (p.mainRule) lines.push(`  main file rule: ${p.mainRule}`);
  if (p.coverage) lines.push(`  ${formatCoverage(p.coverage)}`);
  if (p.rootCandidates.length > 1) {
    lines.push(`  root documents (${p.rootCandidates.length}):`);
    for (const c of p.rootCandidates) lines.push(`    ${c.file === p.mainFile ? '* ' : '  '}${c.file} [${c.documentClass || '?'}] ${c.kind}, ${c.sectionChars} chars of section text: ${c.reason}`);
  }
  for (const s of p.sections) lines.push(`  ${s.appendix ? 'A ' : '  '}${s.level}${s.starred ? '*' : ''} "${s.title}" ${s.text.length} chars${s.boilerplate ? ' (skipped: boilerplate)' : ''}${s.parser === 'fallback' ? ' (fallback converter)' : ''}`);
  for (const w of p.warnings) lines.push(`  warning: ${formatWarning(w)}`);
  return lines;
}

export const buildDataCommand: CommandModule<object, BuildDataArgs> = {
  command: 'build-data',
  describe: 'Turn LaTeX paper sources into PaperGym items (question, reference answer, rubric) with an OpenAI-compatible LLM',
  builder: (y) =>
    addSettings(y, BUILD_DATA_OPTIONS, { withDefaults: true }).demandOption(['papers', 'out']) as never,
  handler: async (argv) => {
    if (argv.dryRun) {
      const sources = argv.papers.flatMap((p) => discoverPapers(p));
      const opts = { parseTimeoutMs: (argv.parseTimeout ?? 5) * 1000, strictCoverage: argv.strict };
      const out = await ingestPapers(sources, opts, (o) => process.stdout.write(describeOutcome(o).join('\n') + '\n'));
      const ok = out.filter((o) => o.paper).length;
      const warned = out.filter((o) => o.paper?.warnings.some((w) => w.code === 'coverage')).length;
      process.stdout.write(`${ok} ingested, ${out.length - ok} failed${warned ? `, ${warned} with coverage warnings` : ''}\n`);
      if (!ok) throw new Error(`no paper ingested (${out.length} failed)`);
      return;
    }
    const s = await handleInterrupt('build-data', (signal) => runBuildData(argv, { signal }), () => `every finished LLM call and stage output is saved in ${buildStatePath(argv)}`);
    if (s === InterruptedRun) return;
    for (const id of s.ingested) process.stdout.write(`${id}: ingested, item built\n`);
    for (const f of s.failures) process.stdout.write(`${basename(f.paper)}: failed: ${f.error}\n`);
    process.stdout.write(
      `build-data: ${s.items} item(s) → ${s.out}; ${s.calls} LLM call(s) made, ${s.cached} from state (${s.state}); tokens ${s.promptTokens} in / ${s.completionTokens} out\n`,
    );
    const warned = s.withCoverageWarnings ? `, ${s.withCoverageWarnings} with coverage warnings` : '';
    process.stdout.write(`${s.ingested.length} ingested, ${s.failures.length} failed${warned}\n`);
  },
};
