/**
 * `papergym-native build-data --papers DIR_OR_ARCHIVES... --out dataset.jsonl --llm URL --model NAME`
 * (docs/design.md §7): papers → PaperGym items through an OpenAI-compatible endpoint, with SQLite
 * state for resume (`--state`, default `<out>.state.sqlite`), `--force` to redo, and
 * `--format research-plan-gen` for the public dataset's field names.
 */
import { publishPaperGymDataset } from '../../lib/hub/publish.js';
import { existsSync, readFileSync, writeFileSync, renameSync } from 'node:fs';
import { basename } from 'node:path';
import type { CommandModule } from 'yargs';
import { parse as parseYaml } from 'yaml';
import { BUILD_DATA_OPTIONS } from '../../lib/config/settings.js';
import { addSettings, parseList, yargsOption } from '../../lib/config/schema.js';
import { LlmClient } from '../../lib/llm/client.js';
import {
  buildDataset,
  discoverPapers,
  ingestPapers,
  planRubric,
  type IngestOutcome,
  type JsonLlm,
  type RoleEndpoint,
  type RubricOptions,
} from '../../lib/data/pipeline.js';
import { formatCoverage, formatStructure, formatWarning, guessDomain, isStructureWarning, paperIdFromPath } from '../../lib/data/latex/index.js';
import { achievedMix, formatMix, mixOrder, normaliseDomain, parseDomainMix, readDomainsTsv } from '../../lib/data/mix.js';
import { PIPELINE_ROLES, type PipelineRole } from '../../lib/data/prompts.js';
import type { RubricDimension } from '../../lib/data/schema.js';
import { Progress } from '../../lib/data/progress.js';
import { PAPERGYM_FORMAT, toResearchPlanGen, validateItem, writeDataset } from '../../lib/data/schema.js';
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
  /** Hub dataset repo to publish to after building (lib/hub/publish.ts). */
  pushToHub?: string;
  hubPrivateRepo?: boolean;
  paperConcurrency?: number;
  timeout?: number;
  retries?: number;
  maxRetryAfter?: number;
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
  /** A paper with a coverage, structure or missing-include warning (text or headings lost in ingestion) fails instead of being used. */
  strict?: boolean;
  /** Rubric ablations: `q,a` (R_Q, R_A), `innovation,design`, top k, general items on/off. */
  rubricSources?: string | string[];
  rubricDimensions?: string | string[];
  rubricTopK?: number;
  generalItems?: boolean;
  /** `cs=0.5,physics=0.25,economics=0.25`: draw the papers to this mix (lib/data/mix.ts). */
  domainMix?: string;
  mixSeed?: string;
  /** Domains TSV (file / paper_id → domain / field / category). */
  domains?: string;
  maxPapers?: number;
  /** Per-role endpoint settings: `llm<Role>Url`, `llm<Role>Model`, `…Temperature`, `…TopP`, `…MaxTokens`, `…ApiKeyEnv` (roles: Extract, Qa, Rubric, Rank). */
  [roleSetting: `llm${string}`]: string | number | undefined;
}

/** One role's resolved endpoint, as the summary reports it. */
export interface RoleSummary {
  url: string;
  model: string;
  /** Calls sent / answered from the state in this run. */
  calls: number;
  cached: number;
}

/** Summary of a build-data run. */
export interface BuildDataSummary {
  items: number;
  /** Paper ids that became items, in input order. */
  ingested: string[];
  failures: { paper: string; error: string }[];
  /** Ingested papers that carry a coverage warning (stored in the state). */
  withCoverageWarnings: number;
  /** Ingested papers that carry a structure or missing-include warning (stored in the state). */
  withStructureWarnings: number;
  calls: number;
  cached: number;
  requests: number;
  promptTokens: number;
  completionTokens: number;
  out: string;
  state: string;
  roles: Record<PipelineRole, RoleSummary>;
  /** The paper draw (with --domain-mix or --max-papers). */
  mix?: { spec?: string; seed: string; drawn: number; of: number; achieved: Record<string, { count: number; share: number }>; limitedBy?: string };
}

const cap = (r: string) => r[0].toUpperCase() + r.slice(1);

/** Rubric ablation flags → pipeline options. */
export function rubricOptionsFromArgs(a: BuildDataArgs): RubricOptions {
  const list = <T extends string>(v: string | string[] | undefined, flag: string, names: Record<string, T>): T[] | undefined => {
    if (v === undefined) return undefined;
    const raw = parseList({ key: flag, flag, type: 'list', default: null, meaning: '', source: '' }, v) as string[];
    return raw.map((x) => {
      if (!names[x]) throw new Error(`--${flag}: ${x} is not ${Object.keys(names).join(', ')}`);
      return names[x];
    });
  };
  const sources = list(a.rubricSources, 'rubric-sources', { q: 'R_Q', a: 'R_A', R_Q: 'R_Q', R_A: 'R_A' } as const);
  const dimensions = list<RubricDimension>(a.rubricDimensions, 'rubric-dimensions', {
    innovation: 'method_innovation',
    design: 'experimental_design',
    method_innovation: 'method_innovation',
    experimental_design: 'experimental_design',
  });
  const o: RubricOptions = { sources, dimensions, topK: a.rubricTopK, general: a.generalItems };
  try {
    planRubric(o);
  } catch (e) {
    throw new Error(`build-data: ${(e as Error).message}`);
  }
  return o;
}

/**
 * Read a build-data settings file (YAML or JSON): any build-data setting by flag (`max-tokens`) or
 * key (`maxTokens`), and a `roles:` section — `roles: {rubric: {url, model, temperature, top_p,
 * max_tokens, api_key_env}}` for the roles extract, qa, rubric, rank. Returns setting keys (camelCase).
 * @throws Error naming the file and the key for an unknown key or role
 */
export function readBuildDataConfig(path: string): Record<string, unknown> {
  let doc: unknown;
  try {
    doc = parseYaml(readFileSync(path, 'utf8'));
  } catch (e) {
    throw new Error(`${path}: cannot read the build-data config: ${(e as Error).message}`);
  }
  if (doc === null || doc === undefined) return {};
  if (typeof doc !== 'object' || Array.isArray(doc)) throw new Error(`${path}: a build-data config is a mapping of settings`);
  const out: Record<string, unknown> = {};
  const fields: Record<string, string> = {
    url: 'Url',
    model: 'Model',
    temperature: 'Temperature',
    top_p: 'TopP',
    topP: 'TopP',
    max_tokens: 'MaxTokens',
    maxTokens: 'MaxTokens',
    api_key_env: 'ApiKeyEnv',
    apiKeyEnv: 'ApiKeyEnv',
  };
  const fieldList = 'url, model, temperature, top_p, max_tokens, api_key_env';
  for (const [k, v] of Object.entries(doc as Record<string, unknown>)) {
    if (k === 'roles') {
      if (!v || typeof v !== 'object' || Array.isArray(v)) throw new Error(`${path}: roles: a mapping of role → {${fieldList}}`);
      for (const [role, rv] of Object.entries(v as Record<string, unknown>)) {
        if (!(PIPELINE_ROLES as readonly string[]).includes(role)) {
          throw new Error(`${path}: roles.${role}: unknown role (roles: ${PIPELINE_ROLES.join(', ')})`);
        }
        for (const [f, fv] of Object.entries((rv ?? {}) as Record<string, unknown>)) {
          if (!fields[f]) throw new Error(`${path}: roles.${role}.${f}: unknown field (${fieldList})`);
          out[`llm${cap(role)}${fields[f]}`] = fv;
        }
      }
      continue;
    }
    const s = BUILD_DATA_OPTIONS.find((o) => o.flag === k || o.key === k);
    if (!s || s.key === 'config') throw new Error(`${path}: ${k}: not a build-data setting (docs/config.md)`);
    out[s.key] = v;
  }
  return out;
}

const CONFIG_SETTING = BUILD_DATA_OPTIONS.find((s) => s.key === 'config')!;

/** A client's view with another model (roles sharing one endpoint share its client and concurrency). */
const withModel = (client: LlmClient, model: string): JsonLlm => ({
  model,
  chatJson: (schema, req, opts) => client.chatJson(schema, { ...req, model }, opts),
});

/**
 * Draw the papers to `--domain-mix` / `--max-papers` (lib/data/mix.ts), keeping their input order.
 * @throws Error when no paper is left, naming the domains found
 */
function drawPapers(
  papers: string[],
  a: BuildDataArgs,
  domainFor: (p: string) => string,
  log: (m: string) => void,
): { papers: string[]; mix: NonNullable<BuildDataSummary['mix']> } {
  const targets = a.domainMix ? parseDomainMix(a.domainMix) : undefined;
  const seed = a.mixSeed ?? 'papergym';
  const o = mixOrder(papers, (p) => paperIdFromPath(p), domainFor, targets, seed);
  const limit = o.limitedBy ? ` (limited by ${o.limitedBy}: ${o.available[o.limitedBy]} available)` : '';
  let drawn = o.order;
  if (a.maxPapers !== undefined) {
    if (drawn.length < a.maxPapers) log(`build-data: --max-papers ${a.maxPapers}: only ${drawn.length} paper(s)${targets ? ' on the mix' : ''}${limit}`);
    drawn = drawn.slice(0, a.maxPapers);
  }
  if (!drawn.length)
    throw new Error(`build-data: no paper matches ${a.domainMix ?? 'the draw'} (domains found: ${[...new Set(papers.map(domainFor))].join(', ')})`);
  const index = new Map(papers.map((p, i) => [p, i]));
  const out = [...drawn].sort((x, y) => index.get(x)! - index.get(y)!);
  const achieved = achievedMix(out, domainFor, targets);
  const mix = {
    ...(a.domainMix && { spec: a.domainMix }),
    seed,
    drawn: out.length,
    of: papers.length,
    achieved,
    ...(o.limitedBy && { limitedBy: o.limitedBy }),
  };
  const stopped = o.limitedBy && drawn.length < (a.maxPapers ?? Infinity) ? `; limited by ${o.limitedBy} (${o.available[o.limitedBy]} available)` : '';
  const outside = o.outside ? `; ${o.outside} outside the mix` : '';
  log(
    `build-data: drew ${out.length} of ${papers.length} paper(s)${a.domainMix ? ` to ${a.domainMix}` : ''} (seed ${seed}): ${formatMix(achieved)}${stopped}${outside}`,
  );
  return { papers: out, mix };
}

/**
 * The command's work, callable from tests: build, validate, write.
 * @throws on invalid arguments, an unreachable/failed run (all papers failed), or abort
 */
export async function runBuildData(
  a: BuildDataArgs,
  io: { signal?: AbortSignal; log?: (m: string) => void; stream?: NodeJS.WriteStream } = {},
): Promise<BuildDataSummary> {
  const log = io.log ?? ((m: string) => process.stderr.write(`${m}\n`));
  const role = (r: PipelineRole, f: string) => a[`llm${cap(r)}${f}`];
  for (const r of PIPELINE_ROLES) {
    const missing = !(role(r, 'Url') ?? a.llm) ? `endpoint (--llm-${r}-url)` : !(role(r, 'Model') ?? a.model) ? `model (--llm-${r}-model)` : '';
    if (missing) throw new Error(`build-data needs --llm URL and --model NAME (or --dry-run); role ${r} has no ${missing}`);
  }
  const rubric = rubricOptionsFromArgs(a);
  let papers = a.papers.flatMap((p) => discoverPapers(p));
  if (!papers.length) throw new Error(`no paper sources found in ${a.papers.join(', ')}`);
  // domains: --domains TSV, else the paper id's prefix (as the loader guesses it)
  const table = a.domains ? readDomainsTsv(a.domains, log) : undefined;
  const tableDomain = (p: string) => {
    const d = table?.get(basename(p)) ?? table?.get(paperIdFromPath(p));
    return d === undefined ? undefined : normaliseDomain(d);
  };
  const domainFor = (p: string) => tableDomain(p) ?? guessDomain(paperIdFromPath(p));
  let mix: BuildDataSummary['mix'];
  if (a.domainMix || a.maxPapers) ({ papers, mix } = drawPapers(papers, a, domainFor, log));
  const statePath = buildStatePath(a);
  // exclusive (a second build on this state fails at once naming our pid); a corrupt state is an
  // error naming the file, or with --force (every call is redone anyway) set aside and started afresh
  const state = new PipelineState(statePath, { lock: true, onCorrupt: a.force ? 'set-aside' : 'throw' });
  if (state.setAside) log(`build-data: ${statePath} was corrupt; kept as ${state.setAside}, starting a fresh state (--force)`);
  // one client per endpoint (URL and key): roles on one server share its concurrency
  const clients = new Map<string, LlmClient>();
  const clientFor = (url: string, model: string, keyEnv?: string) => {
    const id = `${url}\u0000${keyEnv ?? ''}`;
    let c = clients.get(id);
    if (!c) {
      if (keyEnv && !process.env[keyEnv]) log(`build-data: warning: ${keyEnv} (api key of ${url}) is not set`);
      c = new LlmClient({
        baseUrl: url,
        model,
        ...(keyEnv && { apiKey: process.env[keyEnv] ?? '' }),
        concurrency: a.concurrency ?? 8,
        timeoutMs: (a.timeout ?? 300) * 1000,
        maxRetries: a.retries ?? 5,
        maxRetryAfterMs: (a.maxRetryAfter ?? 120) * 1000,
        onEvent: (e) => {
          if (e.type === 'retry') log(`llm ${url}: retry ${e.attempt} in ${e.delayMs} ms (${e.reason.slice(0, 160)})`);
        },
      });
      clients.set(id, c);
    }
    return c;
  };
  const endpoints = {} as Record<PipelineRole, { url: string; model: string }>;
  const roles: Partial<Record<PipelineRole, RoleEndpoint>> = {};
  for (const r of PIPELINE_ROLES) {
    const url = (role(r, 'Url') as string | undefined) ?? a.llm!;
    const model = (role(r, 'Model') as string | undefined) ?? a.model!;
    endpoints[r] = { url, model };
    roles[r] = {
      llm: withModel(clientFor(url, model, role(r, 'ApiKeyEnv') as string | undefined), model),
      temperature: role(r, 'Temperature') as number | undefined,
      maxTokens: role(r, 'MaxTokens') as number | undefined,
      topP: role(r, 'TopP') as number | undefined,
    };
  }
  const client = roles.extract!.llm;
  const load = () => [...clients.values()].map((c) => c.load()).reduce((x, y) => ({ active: x.active + y.active, queued: x.queued + y.queued }));
  const progress = new Progress({
    label: 'build-data',
    unit: 'papers',
    stream: io.stream,
    load,
    intervalMs: (a.progressInterval ?? 5) * 1000,
    silent: a.progress === 'none',
    plain: a.progress === 'plain' ? true : undefined,
  });
  try {
    const r = await buildDataset({
      papers,
      llm: client,
      roles,
      rubric,
      ...(mix && { domainMix: `${mix.spec ?? 'all domains'} seed ${mix.seed}${a.maxPapers ? ` max ${a.maxPapers}` : ''}` }),
      ...(table && { domainOf: tableDomain }),
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
    if (!r.items.length)
      throw new Error(`no items built: 0 ingested, ${r.failures.length} failed: ${r.failures.map((f) => `${f.paper}: ${f.error}`).join('; ')}`);
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
        `${r.failures.length} paper(s) failed (${why}); ${a.out} (${before} rows) left unchanged, ` +
          `the ${r.items.length} item(s) of this run written to ${target}. ` +
          `Fix the failures and rerun: finished calls come from the state ${statePath}.`,
      );
    }
    const st = { requests: 0, promptTokens: 0, completionTokens: 0 };
    for (const c of clients.values()) {
      const x = c.stats();
      st.requests += x.requests;
      st.promptTokens += x.promptTokens;
      st.completionTokens += x.completionTokens;
    }
    const roleSummary = Object.fromEntries(
      PIPELINE_ROLES.map((k) => [k, { ...endpoints[k], calls: r.stats.byRole[k]?.calls ?? 0, cached: r.stats.byRole[k]?.cached ?? 0 }]),
    );
    return {
      items: r.items.length,
      ingested: r.items.map((it) => it.source.paper_id),
      failures: r.failures,
      withCoverageWarnings: r.items.filter((it) => state.warnings(it.source.paper_id).some((w) => w.code === 'coverage')).length,
      withStructureWarnings: r.items.filter((it) => state.warnings(it.source.paper_id).some(isStructureWarning)).length,
      calls: r.stats.calls,
      cached: r.stats.cached,
      requests: st.requests,
      promptTokens: st.promptTokens,
      completionTokens: st.completionTokens,
      out: a.out,
      state: statePath,
      roles: roleSummary as Record<PipelineRole, RoleSummary>,
      ...(mix && { mix }),
    };
  } finally {
    progress.stop();
    state.close();
  }
}

/** Non-blank lines of an existing output file (0 when there is none). */
function existingRows(path: string): number {
  if (!existsSync(path)) return 0;
  return readFileSync(path, 'utf8')
    .split('\n')
    .filter((l) => l.trim()).length;
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
  const lines = [
    `${p.id}: ingested: "${p.title}" [${p.domain}${p.licence ? `, ${p.licence}` : ''}] main ${p.mainFile}, ${p.files.length} file(s), abstract ${p.abstract.length} chars, ${p.sections.filter((s) => s.level !== 'front').length} section(s)`,
  ];
  if (p.mainRule) lines.push(`  main file rule: ${p.mainRule}`);
  if (p.coverage) lines.push(`  ${formatCoverage(p.coverage)}`);
  if (p.structure) lines.push(`  ${formatStructure(p.structure, p.coverage?.headingsParsed ?? 0)}`);
  if (p.rootCandidates.length > 1) {
    lines.push(`  root documents (${p.rootCandidates.length}):`);
    for (const c of p.rootCandidates)
      lines.push(
        `    ${c.file === p.mainFile ? '* ' : '  '}${c.file} [${c.documentClass || '?'}] ${c.kind}, ${c.sectionChars} chars of section text: ${c.reason}`,
      );
  }
  for (const s of p.sections)
    lines.push(
      `  ${s.appendix ? 'A ' : '  '}${s.level}${s.starred ? '*' : ''} "${s.title}" ${s.text.length} chars${s.boilerplate ? ` (skipped: ${s.boilerplateReason ?? 'boilerplate'})` : ''}${s.parser === 'fallback' ? ' (fallback converter)' : ''}`,
    );
  for (const w of p.warnings) lines.push(`  warning: ${formatWarning(w)}`);
  return lines;
}

export const buildDataCommand: CommandModule<object, BuildDataArgs> = {
  command: 'build-data',
  describe: 'Turn LaTeX paper sources into PaperGym items (question, reference answer, rubric) with an OpenAI-compatible LLM',
  builder: (y) =>
    // --config: yargs layers the file's values over the defaults and under the flags
    addSettings(y, BUILD_DATA_OPTIONS, { withDefaults: true })
      .config('config', String(yargsOption(CONFIG_SETTING, true).describe), readBuildDataConfig)
      .demandOption(['papers'])
      .check((a) => {
        if (!a.out && !a.dryRun) throw new Error('Missing required argument: out (--dry-run needs no --out)');
        if (a.pushToHub && (a.format ?? PAPERGYM_FORMAT) !== PAPERGYM_FORMAT)
          throw new Error(`--push-to-hub publishes PaperGym items: leave --format at ${PAPERGYM_FORMAT}`);
        return true;
      }) as never,
  handler: async (argv) => {
    if (argv.dryRun) {
      const sources = argv.papers.flatMap((p) => discoverPapers(p));
      const opts = { parseTimeoutMs: (argv.parseTimeout ?? 5) * 1000, strictCoverage: argv.strict };
      const out = await ingestPapers(sources, opts, (o) => process.stdout.write(describeOutcome(o).join('\n') + '\n'));
      const ok = out.filter((o) => o.paper).length;
      const warned = out.filter((o) => o.paper?.warnings.some((w) => w.code === 'coverage')).length;
      const lost = out.filter((o) => o.paper?.warnings.some(isStructureWarning)).length;
      process.stdout.write(
        `${ok} ingested, ${out.length - ok} failed${warned ? `, ${warned} with coverage warnings` : ''}${lost ? `, ${lost} with structure warnings` : ''}\n`,
      );
      if (!ok) throw new Error(`no paper ingested (${out.length} failed)`);
      return;
    }
    const s = await handleInterrupt(
      'build-data',
      (signal) => runBuildData(argv, { signal }),
      () => `every finished LLM call and stage output is saved in ${buildStatePath(argv)}`,
    );
    if (s === InterruptedRun) return;
    for (const id of s.ingested) process.stdout.write(`${id}: ingested, item built\n`);
    for (const f of s.failures) process.stdout.write(`${basename(f.paper)}: failed: ${f.error}\n`);
    process.stdout.write(
      `build-data: ${s.items} item(s) → ${s.out}; ${s.calls} LLM call(s) made, ${s.cached} from state (${s.state}); tokens ${s.promptTokens} in / ${s.completionTokens} out\n`,
    );
    for (const r of PIPELINE_ROLES)
      process.stdout.write(`  role ${r}: ${s.roles[r].model} at ${s.roles[r].url}: ${s.roles[r].calls} call(s), ${s.roles[r].cached} from state\n`);
    if (s.mix)
      process.stdout.write(
        `  mix: ${formatMix(s.mix.achieved)} (${s.mix.drawn} of ${s.mix.of} papers, seed ${s.mix.seed}${s.mix.limitedBy ? `, limited by ${s.mix.limitedBy}` : ''})\n`,
      );
    const warned = `${s.withCoverageWarnings ? `, ${s.withCoverageWarnings} with coverage warnings` : ''}${s.withStructureWarnings ? `, ${s.withStructureWarnings} with structure warnings` : ''}`;
    process.stdout.write(`${s.ingested.length} ingested, ${s.failures.length} failed${warned}\n`);
    if (argv.pushToHub && s.items > 0) {
      // datasets' push_to_hub: the split files and a dataset card, through lib/hub (the maintained client).
      const r = await publishPaperGymDataset(s.out, argv.pushToHub, { private: argv.hubPrivateRepo });
      process.stdout.write(`build-data: pushed ${r.files.join(', ')} to ${r.url}${r.commit ? ` (commit ${r.commit})` : ''}\n`);
    }
  },
};
