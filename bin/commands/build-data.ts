/**
 * `papergym-native build-data --papers DIR_OR_ARCHIVES... --out dataset.jsonl --llm URL --model NAME`
 * (DESIGN.md §7): papers → PaperGym items through an OpenAI-compatible endpoint, with SQLite
 * state for resume (`--state`, default `<out>.state.sqlite`), `--force` to redo, and
 * `--format research-plan-gen` for the public dataset's field names.
 */
import { writeFileSync, renameSync } from 'node:fs';
import type { CommandModule } from 'yargs';
import { BUILD_DATA_OPTIONS } from '../../lib/config/settings.js';
import { addSettings } from '../../lib/config/schema.js';
import { LlmClient } from '../../lib/llm/client.js';
import { buildDataset, discoverPapers } from '../../lib/data/pipeline.js';
import { loadPaper } from '../../lib/data/latex/index.js';
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
}

/** Summary of a build-data run. */
export interface BuildDataSummary {
  items: number;
  failures: { paper: string; error: string }[];
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
export async function runBuildData(a: BuildDataArgs, io: { signal?: AbortSignal; log?: (m: string) => void } = {}): Promise<BuildDataSummary> {
  const log = io.log ?? ((m: string) => process.stderr.write(`${m}\n`));
  if (!a.llm || !a.model) throw new Error('build-data needs --llm URL and --model NAME (or --dry-run)');
  const papers = a.papers.flatMap((p) => discoverPapers(p));
  if (!papers.length) throw new Error(`no paper sources found in ${a.papers.join(', ')}`);
  const statePath = a.state ?? `${a.out}.state.sqlite`;
  const state = new PipelineState(statePath);
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
  const progress = new Progress({ label: 'build-data', unit: 'papers', silent: a.progress === 'none', plain: a.progress === 'plain' ? true : undefined });
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
    });
    progress.stop();
    if (!r.items.length) throw new Error(`no items built; failures: ${r.failures.map((f) => `${f.paper}: ${f.error}`).join('; ')}`);
    if ((a.format ?? 'papergym') === 'research-plan-gen') {
      const rows = r.items.map((it) => {
        const v = validateItem(it);
        if (!v.ok) throw new Error(`item ${it.id} invalid: ${v.errors.join('; ')}`);
        return JSON.stringify(toResearchPlanGen(it));
      });
      const tmp = `${a.out}.tmp-${process.pid}`;
      writeFileSync(tmp, rows.join('\n') + '\n');
      renameSync(tmp, a.out);
    } else writeDataset(a.out, r.items);
    const st = client.stats();
    return {
      items: r.items.length,
      failures: r.failures,
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

export const buildDataCommand: CommandModule<object, BuildDataArgs> = {
  command: 'build-data',
  describe: 'Turn LaTeX paper sources into PaperGym items (question, reference answer, rubric) with an OpenAI-compatible LLM',
  builder: (y) =>
    addSettings(y, BUILD_DATA_OPTIONS, { withDefaults: true }).demandOption(['papers', 'out']) as never,
  handler: async (argv) => {
    if (argv.dryRun) {
      for (const path of argv.papers.flatMap((p) => discoverPapers(p))) {
        const p = await loadPaper(path);
        process.stdout.write(`${p.id}: "${p.title}" [${p.domain}${p.licence ? `, ${p.licence}` : ''}] main ${p.mainFile}, ${p.files.length} file(s), abstract ${p.abstract.length} chars\n`);
        for (const s of p.sections) process.stdout.write(`  ${s.appendix ? 'A ' : '  '}${s.level}${s.starred ? '*' : ''} "${s.title}" ${s.text.length} chars${s.boilerplate ? ' (skipped: boilerplate)' : ''}${s.parser === 'fallback' ? ' (fallback converter)' : ''}\n`);
        for (const w of p.warnings) process.stdout.write(`  warning: ${w}\n`);
      }
      return;
    }
    const ac = new AbortController();
    const onSig = () => {
      process.stderr.write('\nbuild-data: interrupted; finished calls are stored, rerun the same command to resume\n');
      ac.abort();
    };
    process.once('SIGINT', onSig);
    process.once('SIGTERM', onSig);
    try {
      const s = await runBuildData(argv, { signal: ac.signal });
      process.stdout.write(
        `build-data: ${s.items} item(s) → ${s.out}; ${s.failures.length} failed paper(s); ${s.calls} LLM call(s) made, ${s.cached} from state (${s.state}); tokens ${s.promptTokens} in / ${s.completionTokens} out\n`,
      );
      for (const f of s.failures) process.stderr.write(`  failed: ${f.paper}: ${f.error}\n`);
    } finally {
      process.off('SIGINT', onSig);
      process.off('SIGTERM', onSig);
    }
  },
};
