/**
 * `papergym-native build-data --papers DIR_OR_ARCHIVES... --out dataset.jsonl --llm URL --model NAME`
 * (DESIGN.md §7): papers → PaperGym items through an OpenAI-compatible endpoint, with SQLite
 * state for resume (`--state`, default `<out>.state.sqlite`), `--force` to redo, and
 * `--format research-plan-gen` for the public dataset's field names.
 */
import { writeFileSync, renameSync } from 'node:fs';
import type { CommandModule } from 'yargs';
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
    y
      .option('papers', { type: 'array', string: true, demandOption: true, describe: 'paper sources: .tar.gz/.tar/.gz archives, paper directories, or directories of them' })
      .option('out', { type: 'string', demandOption: true, describe: 'output JSONL' })
      .option('llm', { type: 'string', describe: 'OpenAI-compatible base URL (e.g. http://127.0.0.1:8000/v1); key from PAPERGYM_LLM_API_KEY or OPENAI_API_KEY' })
      .option('model', { type: 'string', describe: 'served model name (required with --llm)' })
      .option('state', { type: 'string', describe: 'SQLite state file (default <out>.state.sqlite); a rerun resumes from it' })
      .option('force', { type: 'boolean', default: false, describe: 'ignore stored answers and redo every call' })
      .option('format', { choices: ['papergym', 'research-plan-gen'] as const, default: 'papergym' as const, describe: 'output format' })
      .option('concurrency', { type: 'number', default: 8, describe: 'max LLM requests in flight' })
      .option('paper-concurrency', { type: 'number', default: 2, describe: 'papers processed at once' })
      .option('timeout', { type: 'number', default: 300, describe: 'per-request timeout in seconds' })
      .option('retries', { type: 'number', default: 5, describe: 'retries per request' })
      .option('max-tokens', { type: 'number', default: 4096 })
      .option('temperature', { type: 'number', default: 0 })
      .option('val-fraction', { type: 'number', default: 0.1 })
      .option('test-fraction', { type: 'number', default: 0.1 })
      .option('split-seed', { type: 'string', default: 'papergym' })
      .option('response-format', { type: 'boolean', default: false, describe: 'send JSON schemas as response_format (guided decoding on vLLM/SGLang/OpenAI)' })
      .option('progress', { choices: ['auto', 'plain', 'none'] as const, default: 'auto' as const })
      .option('dry-run', { type: 'boolean', default: false, describe: 'only ingest the papers and print what was found (no LLM calls, nothing written)' }) as never,
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
