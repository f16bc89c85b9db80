/**
 * The data pipeline (docs/design.md §7; the PaperGym recipe): papers → map (section → four stages)
 * → reduce (per stage; experimental design without numbers) → question (goals + background)
 * → reference answer (methods + design) → rubric candidates R_Q (question) and R_A (question +
 * answer), 10 each over two dimensions → normalised-text dedupe → LLM-judged duplicates →
 * importance ranking → top 10 → schema-valid items.
 *
 * Every LLM call goes through {@link CachedLlm}: keyed by (model, prompt version, input) in the
 * SQLite state, so a resumed run never repeats a finished call; `force` ignores stored answers
 * (and replaces them). Every stage output is stored too.
 */
import { createHash } from 'node:crypto';
import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { LlmLengthError, validatorFor, type ChatJsonResult, type ChatRequest, type ChatJsonOptions } from '../llm/client.js';
import { assertCoverage, formatWarning, loadPaper, paperIdFromPath, sourceKind, type Paper, type LoadPaperOptions } from './latex/index.js';
import { dataPromptSetVersion, loadDataPrompt, renderPrompt, systemMessage, TASK_ROLES, PIPELINE_ROLES, type DataTask, type PipelineRole } from './prompts.js';
import { Progress } from './progress.js';
import {
  DEFAULT_GENERAL_RUBRIC_SET, NO_GENERAL_RUBRIC_SET, RUBRIC_DIMENSIONS, RUBRIC_SIZE, validateItem,
  type ItemProvenance, type PaperGymItem, type RubricDimension, type RubricItem, type RubricOrigin, type Split,
} from './schema.js';
import { callKey, PipelineStateError, type PipelineState } from './state.js';

/** What the pipeline needs from an LLM client (LlmClient satisfies it). */
export interface JsonLlm {
  readonly model: string;
  chatJson<T = unknown>(schema: object, req: ChatRequest, opts?: ChatJsonOptions): Promise<ChatJsonResult<T>>;
}

/** Per-paper call counters ({@link CachedLlm.call}'s `tally`): `live` calls sent, `cached` ones recalled or shared. */
export interface CallTally {
  live: number;
  cached: number;
}

/** Counters of a {@link CachedLlm}; `byRole` splits calls / cached / failed by pipeline role. */
export interface CachedLlmStats {
  calls: number;
  cached: number;
  /** Stored answers that failed their task's schema when read (edited or damaged state), asked again. */
  invalidCached: number;
  failed: number;
  lengthRetries: number;
  promptTokens: number;
  completionTokens: number;
  byRole: Record<string, { calls: number; cached: number; failed: number }>;
}

/** The endpoint of one pipeline role: its client (model) and sampling; unset sampling = the CachedLlm's. */
export interface RoleEndpoint {
  llm: JsonLlm;
  temperature?: number;
  maxTokens?: number;
  topP?: number;
}

/** Options of {@link CachedLlm}. */
export interface CachedLlmOptions {
  force?: boolean;
  temperature?: number;
  maxTokens?: number;
  topP?: number;
  signal?: AbortSignal;
  progress?: Progress;
  promptsDir?: string;
  useResponseFormat?: boolean;
  /** Per-role endpoints (lib/data/prompts.ts TASK_ROLES); a role not named uses `llm` and the sampling above. */
  roles?: Partial<Record<PipelineRole, RoleEndpoint>>;
  /** Told of a stored answer that fails its schema when read (it is asked again); default stderr. */
  warn?: (line: string) => void;
}

/**
 * LLM calls with SQLite memoisation. Identical concurrent calls share one request.
 * Key = sha256(model, prompt version, {messages, temperature, maxTokens[, topP]}) with the model
 * and sampling of the task's role: the prompt version names the task and so the role, so keys are
 * per role and model — switching one role's model re-asks only that role's calls, and keys of
 * builds made before roles existed are unchanged. Each stored call records its role.
 */
export class CachedLlm {
  readonly stats: CachedLlmStats = { calls: 0, cached: 0, invalidCached: 0, failed: 0, lengthRetries: 0, promptTokens: 0, completionTokens: 0, byRole: {} };
  private readonly inflight = new Map<string, Promise<unknown>>();
  private readonly refreshed = new Set<string>();

  constructor(
    readonly llm: JsonLlm,
    readonly state: PipelineState,
    readonly opts: CachedLlmOptions = {},
  ) {}

  /** The role, client and sampling a task's call uses. */
  endpoint(task: DataTask): { role: PipelineRole | undefined; llm: JsonLlm; temperature: number; maxTokens: number; topP?: number } {
    const role = task === 'rubric-dimension' ? undefined : TASK_ROLES[task];
    const r = role ? this.opts.roles?.[role] : undefined;
    const topP = r?.topP ?? this.opts.topP;
    return {
      role,
      llm: r?.llm ?? this.llm,
      temperature: r?.temperature ?? this.opts.temperature ?? 0,
      maxTokens: r?.maxTokens ?? this.opts.maxTokens ?? 4096,
      ...(topP !== undefined && { topP }),
    };
  }

  /** The model of each role. */
  models(): Record<PipelineRole, string> {
    return Object.fromEntries(PIPELINE_ROLES.map((r) => [r, this.opts.roles?.[r]?.llm.model ?? this.llm.model])) as Record<PipelineRole, string>;
  }

  /** Key a call would have (for tests and reports). `appendix` is text added to the user message (rendered by the caller). */
  keyOf(task: DataTask, vars: Record<string, string | number>, appendix?: string): { key: string; messages: ChatRequest['messages'] } {
    const p = loadDataPrompt(task, this.opts.promptsDir);
    const user = renderPrompt(p.template, vars);
    const messages: ChatRequest['messages'] = [
      { role: 'system', content: systemMessage(p) },
      { role: 'user', content: appendix ? `${user}\n\n${appendix}` : user },
    ];
    const ep = this.endpoint(task);
    const input = { messages, temperature: ep.temperature, maxTokens: ep.maxTokens, ...(ep.topP !== undefined && { topP: ep.topP }) };
    return { key: callKey(ep.llm.model, p.version, input), messages };
  }

  private roleStats(role: PipelineRole | undefined) {
    return (this.stats.byRole[role ?? 'other'] ??= { calls: 0, cached: 0, failed: 0 });
  }

  /**
   * Run (or recall) one task on its role's endpoint.
   * `tally` (optional) counts this call as live or cached, e.g. per paper; `appendix` as in {@link keyOf}.
   * @throws the client's errors (LlmJsonError, LlmHttpError, LlmAbortError, …); a
   *   finish_reason "length" answer is retried once with twice the token budget
   */
  async call<T>(task: DataTask, vars: Record<string, string | number>, schema: object, tally?: CallTally, appendix?: string): Promise<T> {
    const p = loadDataPrompt(task, this.opts.promptsDir);
    const { key, messages } = this.keyOf(task, vars, appendix);
    const ep = this.endpoint(task);
    const rs = this.roleStats(ep.role);
    if (!this.opts.force || this.refreshed.has(key)) {
      let hit = this.state.getCall(key);
      // Re-validated on read: an edited or damaged answer (a number where the task's schema wants a
      // list) is asked again, never handed to the stages (where it failed every paper unnamed).
      const validate = validatorFor(schema);
      const problem = hit && (hit.unreadable ?? (validate(hit.value) ? undefined : (validate.errors ?? []).map((e) => `${e.instancePath || '/'} ${e.message ?? 'invalid'}`).join('; ')));
      if (hit && problem) {
        this.stats.invalidCached++;
        (this.opts.warn ?? ((l: string) => process.stderr.write(l + '\n')))(
          `build-data: warning: pipeline state ${this.state.path}: stored ${task} answer ${key} fails its schema (${problem}); asking again`,
        );
        hit = undefined;
      }
      if (hit) {
        this.stats.cached++;
        rs.cached++;
        if (tally) tally.cached++;
        this.opts.progress?.call(true);
        return hit.value as T;
      }
    }
    const running = this.inflight.get(key);
    if (running) {
      if (tally) tally.cached++;
      return (await running) as T;
    }
    if (tally) tally.live++;
    const work = (async () => {
      const { maxTokens, llm } = ep;
      const req: ChatRequest = { messages, temperature: ep.temperature, maxTokens, ...(ep.topP !== undefined && { topP: ep.topP }), signal: this.opts.signal };
      const jsonOpts = { useResponseFormat: this.opts.useResponseFormat, schemaName: task.replace(/-/g, '_') };
      let r: ChatJsonResult<T>;
      this.opts.progress?.callStart();
      try {
        try {
          r = await llm.chatJson<T>(schema, req, jsonOpts);
        } catch (e) {
          if (!(e instanceof LlmLengthError)) throw e;
          this.stats.lengthRetries++;
          r = await llm.chatJson<T>(schema, { ...req, maxTokens: maxTokens * 2 }, jsonOpts);
        }
      } catch (e) {
        this.stats.failed++;
        rs.failed++;
        this.opts.progress?.callEnd(this.opts.signal?.aborted ? { aborted: true } : { failed: true });
        throw e;
      }
      const request = { messages, temperature: req.temperature, maxTokens, ...(ep.topP !== undefined && { topP: ep.topP }) };
      const usage = { promptTokens: r.usage.promptTokens, completionTokens: r.usage.completionTokens };
      const stored = { key, model: llm.model, ...(ep.role && { role: ep.role }), prompt: p.version, request, value: r.value, content: r.content };
      this.state.putCall({ ...stored, ...usage });
      this.refreshed.add(key);
      this.stats.calls++;
      rs.calls++;
      this.stats.promptTokens += r.usage.promptTokens;
      this.stats.completionTokens += r.usage.completionTokens;
      this.opts.progress?.callEnd({ promptTokens: r.usage.promptTokens, completionTokens: r.usage.completionTokens });
      return r.value;
    })();
    this.inflight.set(key, work);
    try {
      return (await work) as T;
    } finally {
      this.inflight.delete(key);
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Schemas of the task answers

const strList = { type: 'array', items: { type: 'string' } };
export const TASK_SCHEMAS = {
  map: { type: 'object', required: ['goals', 'background', 'methods', 'experimental_design'], properties: { goals: strList, background: strList, methods: strList, experimental_design: strList } },
  reduce: { type: 'object', required: ['text'], properties: { text: { type: 'string' } } },
  question: { type: 'object', required: ['question'], properties: { question: { type: 'string', minLength: 20 } } },
  answer: { type: 'object', required: ['answer'], properties: { answer: { type: 'string', minLength: 20 } } },
  rubric: {
    type: 'object',
    required: ['items'],
    properties: {
      items: {
        type: 'array',
        minItems: 4,
        items: { type: 'object', required: ['text', 'dimension'], properties: { text: { type: 'string', minLength: 8 }, dimension: { enum: ['method_innovation', 'experimental_design'] } } },
      },
    },
  },
  dedupe: { type: 'object', required: ['groups'], properties: { groups: { type: 'array', items: { type: 'array', items: { type: 'string' } } } } },
  rank: { type: 'object', required: ['ranking'], properties: { ranking: { type: 'array', items: { type: 'string' } } } },
  leakage: { type: 'object', required: ['inferable'], properties: { inferable: { type: 'boolean' }, reason: { type: 'string' } } },
} as const;

type MapOut = { goals: string[]; background: string[]; methods: string[]; experimental_design: string[] };
const STAGES = ['goals', 'background', 'methods', 'experimental_design'] as const;
type Stage = (typeof STAGES)[number];
const STAGE_DESCRIPTIONS: Record<Stage, string> = {
  goals: 'the research goals, questions or hypotheses',
  background: 'the context, prior work and motivation',
  methods: 'the approach, models, algorithms and design choices',
  experimental_design: 'how the approach is tested and evaluated',
};

// ---------------------------------------------------------------------------------------------
// Deterministic helpers (exported for tests)

/** Max characters of one map unit; longer sections are split at paragraph boundaries. */
export const MAX_CHUNK_CHARS = 12_000;

/** Split text into chunks of at most `max` characters at blank lines (hard cut as a last resort). */
export function chunkText(text: string, max = MAX_CHUNK_CHARS): string[] {
  if (text.length <= max) return [text];
  const out: string[] = [];
  let cur = '';
  for (const para of text.split(/\n{2,}/)) {
    const pieces = para.length > max ? para.match(new RegExp(`[\\s\\S]{1,${max}}`, 'g'))! : [para];
    for (const p of pieces) {
      if (cur && cur.length + p.length + 2 > max) {
        out.push(cur);
        cur = '';
      }
      cur = cur ? `${cur}\n\n${p}` : p;
    }
  }
  if (cur) out.push(cur);
  return out;
}

/**
 * Remove concrete numbers (PaperGym: experimental design without numbers): numerals, decimals,
 * percentages and scientific notation become `N`; numbers that are part of a name (L2, Qwen3,
 * F1) are kept.
 */
export function stripNumbers(text: string): string {
  return text
    .replace(/\$[^$]*\d[^$]*\$/g, 'N')
    .replace(/(?<![\p{L}\d_])[-+−]?\d+(?:[.,]\d+)*(?:\s*(?:×|x)\s*10\^?[-−]?\d+)?(?:\s*(?:%|percent\b))?(?![\p{L}\d])/gu, 'N')
    .replace(/\bN(?:\s*[-–]\s*N)+\b/g, 'N')
    .replace(/[ \t]{2,}/g, ' ');
}

/** Normalised text for exact-duplicate detection of rubric items. */
export function normaliseRubricText(t: string): string {
  return t
    .toLowerCase()
    .replace(/[^\p{L}\p{N} ]+/gu, ' ')
    .replace(/\s+/g, ' ')
    .trim();
}

/** A rubric candidate during merging. */
export interface RubricCandidate {
  id: string;
  text: string;
  dimension: RubricDimension;
  origins: Set<'R_Q' | 'R_A'>;
}

/** Merge R_Q and R_A candidates, removing normalised-text duplicates (origins unite). */
export function mergeCandidates(rq: { text: string; dimension: RubricDimension }[], ra: { text: string; dimension: RubricDimension }[]): RubricCandidate[] {
  const byNorm = new Map<string, RubricCandidate>();
  const out: RubricCandidate[] = [];
  const add = (c: { text: string; dimension: RubricDimension }, origin: 'R_Q' | 'R_A') => {
    const text = c.text.replace(/\s+/g, ' ').trim();
    if (!text) return;
    const k = normaliseRubricText(text);
    const hit = byNorm.get(k);
    if (hit) {
      hit.origins.add(origin);
      return;
    }
    const cand: RubricCandidate = { id: `c${String(out.length + 1).padStart(2, '0')}`, text, dimension: c.dimension, origins: new Set([origin]) };
    byNorm.set(k, cand);
    out.push(cand);
  };
  rq.forEach((c) => add(c, 'R_Q'));
  ra.forEach((c) => add(c, 'R_A'));
  return out;
}

/** Apply LLM-judged duplicate groups: union-find over ids; the earliest id represents a group. Unknown ids are ignored. */
export function applyDuplicateGroups(cands: RubricCandidate[], groups: string[][]): RubricCandidate[] {
  const idx = new Map(cands.map((c, i) => [c.id, i]));
  const parent = cands.map((_, i) => i);
  const find = (i: number): number => (parent[i] === i ? i : (parent[i] = find(parent[i])));
  for (const g of groups) {
    const ids = g.map((id) => idx.get(String(id).replace(/^\[|\]$/g, '').trim())).filter((i): i is number => i !== undefined);
    for (let k = 1; k < ids.length; k++) {
      const a = find(ids[0]);
      const b = find(ids[k]);
      if (a !== b) parent[Math.max(a, b)] = Math.min(a, b);
    }
  }
  const out: RubricCandidate[] = [];
  const rep = new Map<number, RubricCandidate>();
  cands.forEach((c, i) => {
    const r = find(i);
    const head = rep.get(r);
    if (head) c.origins.forEach((o) => head.origins.add(o));
    else {
      const copy = { ...c, origins: new Set(c.origins) };
      rep.set(r, copy);
      out.push(copy);
    }
  });
  return out;
}

/**
 * Final rubric: candidates ordered by the LLM ranking (unknown/duplicate ids ignored, unranked
 * candidates appended in order), top `n` kept, every dimension of `dimensions` guaranteed when
 * possible (the lowest-ranked kept item gives way to the best-ranked one of a missing dimension).
 * @throws Error when fewer than `n` candidates exist
 */
export function selectRubric(
  cands: RubricCandidate[],
  ranking: string[],
  itemId: string,
  n = RUBRIC_SIZE,
  dimensions: readonly RubricDimension[] = RUBRIC_DIMENSIONS,
): RubricItem[] {
  if (cands.length < n) throw new Error(`only ${cands.length} distinct rubric candidates (need ${n})`);
  const byId = new Map(cands.map((c) => [c.id, c]));
  const seen = new Set<string>();
  const ordered: RubricCandidate[] = [];
  for (const raw of ranking) {
    const id = String(raw).replace(/^\[|\]$/g, '').trim();
    const c = byId.get(id);
    if (c && !seen.has(id)) {
      seen.add(id);
      ordered.push(c);
    }
  }
  for (const c of cands) if (!seen.has(c.id)) ordered.push(c);
  const top = ordered.slice(0, n);
  let slot = top.length - 1;
  for (const dim of dimensions) {
    if (!top.some((c) => c.dimension === dim)) {
      const sub = ordered.slice(n).find((c) => c.dimension === dim);
      if (sub && slot >= 0) top[slot--] = sub;
    }
  }
  return top.map((c, i) => ({
    id: `${itemId}-r${String(i + 1).padStart(2, '0')}`,
    text: c.text,
    dimension: c.dimension,
    origin: (c.origins.size === 2 ? 'both' : [...c.origins][0]) as RubricOrigin,
    rank: i + 1,
  }));
}

/** Deterministic split of a paper (all items of a paper share it, so nothing leaks across splits). */
export function assignSplit(paperId: string, fractions: { val: number; test: number } = { val: 0.1, test: 0.1 }, seed = 'papergym'): Split {
  const h = parseInt(createHash('sha256').update(`${seed}:${paperId}`).digest('hex').slice(0, 8), 16) / 2 ** 32;
  if (h < fractions.test) return 'test';
  if (h < fractions.test + fractions.val) return 'val';
  return 'train';
}

/** Extensions of paper sources taken from a directory of papers (content decides what they are). */
const SOURCE_EXT = /\.(tar\.gz|tgz|tar|gz|tex|pdf)$/i;

/**
 * Expand a path into paper sources: an archive or a paper directory, or a directory of them.
 * In a directory of papers, a file is a source when its name ends in `.tar.gz`/`.tgz`/`.tar`/
 * `.gz`/`.pdf`, or when it has no extension (e-prints: `2101.00001`, `hep-th-9901001`) and its
 * bytes are gzip, tar, TeX or PDF; every subdirectory is a paper. A path that does not exist, or
 * a directory with no source at all, is returned as itself so that it is reported as a failed
 * paper (`paper source not found`, `no LaTeX sources found`) instead of stopping the run.
 */
export function discoverPapers(path: string): string[] {
  if (!existsSync(path)) return [path];
  const st = statSync(path);
  if (st.isFile()) return [path];
  const entries = readdirSync(path, { withFileTypes: true }).filter((e) => !e.name.startsWith('.')).sort((a, b) => a.name.localeCompare(b.name));
  if (entries.some((e) => e.isFile() && /\.tex$/i.test(e.name))) return [path]; // a paper directory
  const out: string[] = [];
  for (const e of entries) {
    const p = join(path, e.name);
    if (e.isDirectory()) out.push(p);
    else if (e.isFile() && SOURCE_EXT.test(e.name)) out.push(p);
    else if (e.isFile() && /^[^.]+(\.\d+(v\d+)?)?$/.test(e.name)) {
      let kind: string;
      try {
        kind = sourceKind(p);
      } catch {
        continue;
      }
      if (kind === 'gzip' || kind === 'tar' || kind === 'tex' || kind === 'pdf') out.push(p);
    }
  }
  return out.length ? out : [path];
}

/** One paper's outcome in a dry run ({@link ingestPapers}). */
export interface IngestOutcome {
  source: string;
  paper?: Paper;
  error?: string;
}

/**
 * Load every source (no LLM), reporting each as ingested or failed; never stops at a bad one.
 * `onPaper` sees each outcome as it is known (in input order).
 */
export async function ingestPapers(sources: string[], opts: Omit<LoadPaperOptions, 'id'> = {}, onPaper?: (o: IngestOutcome) => void): Promise<IngestOutcome[]> {
  const out: IngestOutcome[] = [];
  for (const source of sources) {
    let o: IngestOutcome;
    try {
      o = { source, paper: await loadPaper(source, opts) };
    } catch (e) {
      o = { source, error: (e as Error)?.message ?? String(e) };
    }
    out.push(o);
    onPaper?.(o);
  }
  return out;
}

// ---------------------------------------------------------------------------------------------
// The pipeline

/** Options of {@link buildDataset}. */
export interface BuildOptions {
  /** Paper sources (archives or directories). */
  papers: string[];
  llm: JsonLlm;
  state: PipelineState;
  force?: boolean;
  signal?: AbortSignal;
  /** Papers processed at once (LLM concurrency is the client's). Default 2. */
  paperConcurrency?: number;
  splitFractions?: { val: number; test: number };
  splitSeed?: string;
  temperature?: number;
  maxTokens?: number;
  /** Send schemas as response_format json_schema (guided decoding). */
  useResponseFormat?: boolean;
  /** Gets `add(papers.length)` once, then tick()/fail() per paper and call() per LLM call. */
  progress?: Progress;
  loadOptions?: Omit<LoadPaperOptions, 'id'>;
  log?: (msg: string) => void;
  promptsDir?: string;
  generalRubricSet?: string;
  /** Per-role endpoints (a role not named uses `llm`, `temperature`, `maxTokens`). */
  roles?: Partial<Record<PipelineRole, RoleEndpoint>>;
  /** Rubric ablations (default: the paper's recipe). */
  rubric?: RubricOptions;
  /** Recorded in each item's provenance.domain_mix (the papers are drawn by the caller, {@link drawToMix}). */
  domainMix?: string;
  /** A paper's domain when known from outside the paper (`--domains` TSV); replaces the loader's guess. */
  domainOf?: (path: string) => string | undefined;
}

/** Result of {@link buildDataset}. */
export interface BuildResult {
  items: PaperGymItem[];
  failures: { paper: string; error: string }[];
  stats: CachedLlmStats;
}

/** Bump when loadPaper's output changes, so cached parses are not reused. */
export const LOADER_VERSION = 'latex-v4';

/**
 * {@link loadPaper} with the result stored in the state (stage `paper`, keyed by the archive's
 * sha256 and the loader version), so a resumed run does not re-parse. Directories are not cached.
 */
export async function loadPaperCached(path: string, state: PipelineState, opts?: Omit<LoadPaperOptions, 'id'>, force = false): Promise<Paper> {
  let key: string | undefined;
  if (statSync(path).isFile()) {
    key = `${LOADER_VERSION}:${createHash('sha256').update(readFileSync(path)).digest('hex')}`;
    const pid = paperIdFromPath(path);
    const hit = force ? undefined : state.getStage<Paper>(pid, 'paper', key);
    if (hit && opts?.strictCoverage) assertCoverage(hit);
    if (hit) return hit;
  }
  const paper = await loadPaper(path, opts);
  if (key) state.putStage(paper.id, 'paper', key, paper);
  return paper;
}

const sha = (x: unknown) => createHash('sha256').update(JSON.stringify(x)).digest('hex').slice(0, 16);

/**
 * Rubric ablations (issue 39; the paper's Table 4): which candidate sources, which dimensions, how
 * many items are kept, whether the general items go with the item. Recorded in `item.provenance`.
 */
export interface RubricOptions {
  /** R_Q (from the question alone), R_A (question + reference answer); default both. */
  sources?: readonly ('R_Q' | 'R_A')[];
  /** Dimensions asked for and kept; default both. One dimension adds the `rubric-dimension` prompt to the writer's request. */
  dimensions?: readonly RubricDimension[];
  /** Items kept after ranking; default 10 (the paper's). */
  topK?: number;
  /** General rubric items with the item (default true); off: `general_rubric_set` is `none`. */
  general?: boolean;
}

/** Options of {@link buildItem}. */
export interface BuildItemOptions {
  split: Split;
  promptVersion: string;
  generalRubricSet?: string;
  tally?: CallTally;
  rubric?: RubricOptions;
  /** Recorded as provenance.domain_mix. */
  domainMix?: string;
}

/**
 * The resolved rubric plan. Candidates per source: ⌈2k / #sources⌉, so the pool the ranking picks
 * from keeps the paper's size (10 R_Q + 10 R_A for k = 10) when one source is left out.
 * @throws RangeError on an empty source or dimension list, or k outside 1..50
 */
export function planRubric(o: RubricOptions = {}): RubricPlan {
  const sources = [...new Set(o.sources ?? (['R_Q', 'R_A'] as const))];
  const dimensions = RUBRIC_DIMENSIONS.filter((d) => (o.dimensions ?? RUBRIC_DIMENSIONS).includes(d));
  const topK = o.topK ?? RUBRIC_SIZE;
  if (!sources.length) throw new RangeError('rubric sources: at least one of R_Q, R_A');
  if (!dimensions.length) throw new RangeError(`rubric dimensions: at least one of ${RUBRIC_DIMENSIONS.join(', ')}`);
  if (!Number.isInteger(topK) || topK < 1 || topK > 50) throw new RangeError(`rubric top-k: an integer in 1..50 (got ${topK})`);
  return { sources, dimensions, topK, perSource: Math.ceil((2 * topK) / sources.length), general: o.general ?? true };
}

/** A resolved {@link RubricOptions}: `perSource` candidates asked of each source. */
export interface RubricPlan {
  sources: ('R_Q' | 'R_A')[];
  dimensions: RubricDimension[];
  topK: number;
  perSource: number;
  general: boolean;
}

/** What each rubric dimension checks (as the rubric prompts state it). */
const DIMENSION_DESCRIPTIONS: Record<RubricDimension, string> = {
  method_innovation: "whether the plan's approach is sound, well chosen and insightful for this problem",
  experimental_design: 'whether the plan tests and evaluates its approach convincingly (comparisons, controls, data, metrics, robustness)',
};

/** The single-dimension instruction appended to the rubric writer's request (prompts/data-rubric-dimension.v1.md). */
function dimensionAppendix(dim: RubricDimension, dir?: string): string {
  return renderPrompt(loadDataPrompt('rubric-dimension', dir).template, { dimension: dim, dimension_description: DIMENSION_DESCRIPTIONS[dim] });
}

/**
 * Build one item from a loaded paper (all LLM stages).
 * @throws on LLM failures, or when the paper yields too few rubric candidates
 */
export async function buildItem(paper: Paper, llm: CachedLlm, state: PipelineState, opts: BuildItemOptions): Promise<PaperGymItem> {
  const pid = paper.id;
  type Vars = Record<string, string | number>;
  const call = <T>(task: DataTask, vars: Vars, schema: object, appendix?: string) => llm.call<T>(task, vars, schema, opts.tally, appendix);
  const rubricPlan = planRubric(opts.rubric);
  // map
  const units: { title: string; text: string }[] = [];
  if (paper.abstract.trim()) units.push({ title: 'Abstract', text: paper.abstract });
  for (const s of paper.sections) {
    if (s.boilerplate || !s.text.trim()) continue;
    if (s.level === 'front' && paper.abstract.trim()) continue; // title/author block when an abstract exists
    // A first \section*{Abstract} read as the abstract (lib/data/latex/index.ts) stays a section of
    // the paper; its text is mapped once, as the abstract above.
    if (paper.abstract.trim() && s.text.trim() === paper.abstract.trim()) continue;
    const parts = chunkText(s.text);
    parts.forEach((t, i) => units.push({ title: parts.length > 1 ? `${s.title} (part ${i + 1} of ${parts.length})` : s.title, text: t }));
  }
  if (!units.length) throw new Error('no section text found');
  const maps = await Promise.all(
    units.map(async (u, i) => {
      const out = await call<MapOut>('map', { paper_title: paper.title, section_title: u.title, section: u.text }, TASK_SCHEMAS.map);
      state.putStage(pid, `map:${String(i).padStart(3, '0')}`, sha(u), out);
      return out;
    }),
  );
  // reduce
  const stages = {} as Record<Stage, string>;
  await Promise.all(
    STAGES.map(async (st) => {
      const seen = new Set<string>();
      const stmts: string[] = [];
      let size = 0;
      for (const m of maps)
        for (const s of m[st] ?? []) {
          const t = String(s).replace(/\s+/g, ' ').trim();
          const k = normaliseRubricText(t);
          if (!t || seen.has(k) || size > 24_000) continue;
          seen.add(k);
          stmts.push(`- ${t}`);
          size += t.length;
        }
      let text = '';
      if (stmts.length) {
        const task = st === 'experimental_design' ? 'reduce-design' : 'reduce';
        const r = await call<{ text: string }>(task, { paper_title: paper.title, stage: st, stage_description: STAGE_DESCRIPTIONS[st], statements: stmts.join('\n') }, TASK_SCHEMAS.reduce);
        text = r.text.trim();
      }
      if (st === 'experimental_design') text = stripNumbers(text);
      stages[st] = text;
      state.putStage(pid, `reduce:${st}`, sha(stmts), text);
    }),
  );
  if (!stages.goals && !stages.background) throw new Error('no goals or background found: cannot write a question');
  if (!stages.methods && !stages.experimental_design) throw new Error('no methods or experimental design found: cannot write a reference answer');
  // question and answer
  const { question } = await call<{ question: string }>('question', { paper_title: paper.title, goals: stages.goals || '(none)', background: stages.background || '(none)' }, TASK_SCHEMAS.question);
  state.putStage(pid, 'question', sha([stages.goals, stages.background]), question);
  const { answer } = await call<{ answer: string }>('answer', { question, methods: stages.methods || '(none)', experimental_design: stages.experimental_design || '(none)' }, TASK_SCHEMAS.answer);
  state.putStage(pid, 'answer', sha([question, stages.methods, stages.experimental_design]), answer);
  // rubric candidates (from the chosen sources, of the chosen dimensions)
  type Cand = { text: string; dimension: RubricDimension };
  const { sources, dimensions, topK, perSource } = rubricPlan;
  const appendix = dimensions.length < RUBRIC_DIMENSIONS.length ? dimensionAppendix(dimensions[0], llm.opts.promptsDir) : undefined;
  const none = Promise.resolve({ items: [] as Cand[] });
  const [rq, ra] = await Promise.all([
    sources.includes('R_Q') ? call<{ items: Cand[] }>('rubric-q', { question, n: perSource }, TASK_SCHEMAS.rubric, appendix) : none,
    sources.includes('R_A') ? call<{ items: Cand[] }>('rubric-a', { question, answer, n: perSource }, TASK_SCHEMAS.rubric, appendix) : none,
  ]);
  if (sources.includes('R_Q')) state.putStage(pid, 'rubric-q', sha(question), rq.items);
  if (sources.includes('R_A')) state.putStage(pid, 'rubric-a', sha([question, answer]), ra.items);
  const keep = (items: Cand[]) => items.filter((c) => dimensions.includes(c.dimension)).slice(0, perSource);
  const merged = mergeCandidates(keep(rq.items), keep(ra.items));
  const list = (cs: RubricCandidate[]) => cs.map((c) => `[${c.id}] ${c.text}`).join('\n');
  const dd = await call<{ groups: string[][] }>('rubric-dedupe', { candidates: list(merged) }, TASK_SCHEMAS.dedupe);
  const deduped = applyDuplicateGroups(merged, dd.groups);
  state.putStage(pid, 'rubric-dedupe', sha(merged.map((c) => c.text)), deduped.map((c) => ({ id: c.id, text: c.text, dimension: c.dimension, origins: [...c.origins] })));
  const rk = await call<{ ranking: string[] }>('rubric-rank', { question, answer, candidates: list(deduped) }, TASK_SCHEMAS.rank);
  const itemId = `${pid}-q1`;
  const rubric = selectRubric(deduped, rk.ranking, itemId, topK, dimensions);
  state.putStage(pid, 'rubric', sha(deduped.map((c) => c.id)), rubric);
  const item: PaperGymItem = {
    id: itemId,
    source: { paper_id: pid, title: paper.title, domain: paper.domain, ...(paper.licence && { licence: paper.licence }) },
    question,
    reference_answer: answer,
    rubric,
    general_rubric_set: rubricPlan.general ? (opts.generalRubricSet ?? DEFAULT_GENERAL_RUBRIC_SET) : NO_GENERAL_RUBRIC_SET,
    split: opts.split,
    stages,
    meta: { prompt_version: opts.promptVersion, model: llm.llm.model },
    provenance: {
      models: llm.models(),
      rubric_sources: [...sources],
      rubric_dimensions: [...dimensions],
      rubric_top_k: topK,
      general_items: rubricPlan.general,
      ...(opts.domainMix && { domain_mix: opts.domainMix }),
    } satisfies ItemProvenance,
  };
  const v = validateItem(item);
  if (!v.ok) throw new Error(`built item is invalid: ${v.errors.join('; ')}`);
  state.putStage(pid, 'item', sha(item), item);
  return item;
}

/**
 * Run the pipeline over papers. Failed papers are reported (and recorded in the state) without
 * stopping the others; an abort (`signal`) stops everything and rejects with the abort error.
 * @returns items in input order, failures, call counters
 */
export async function buildDataset(o: BuildOptions): Promise<BuildResult> {
  const log = o.log ?? (() => {});
  const llm = new CachedLlm(o.llm, o.state, {
    force: o.force, temperature: o.temperature, maxTokens: o.maxTokens, signal: o.signal, progress: o.progress,
    promptsDir: o.promptsDir, useResponseFormat: o.useResponseFormat, roles: o.roles, warn: o.log,
  });
  planRubric(o.rubric); // bad ablation settings fail before any paper
  const promptVersion = dataPromptSetVersion(o.promptsDir);
  const results: (PaperGymItem | undefined)[] = new Array(o.papers.length);
  const failures: BuildResult['failures'] = [];
  let next = 0;
  // a broken state stops every worker: it is not one paper's failure
  let fatal: unknown;
  // the bar counts papers: all known now, so the total never changes; a failed paper is done
  // (with an error), LLM calls are a secondary counter
  o.progress?.add(o.papers.length);
  const worker = async () => {
    while (next < o.papers.length) {
      const i = next++;
      const path = o.papers[i];
      if (o.signal?.aborted || fatal) return;
      let pid = path;
      const tally: CallTally = { live: 0, cached: 0 };
      try {
        const paper = await loadPaperCached(path, o.state, o.loadOptions, o.force);
        const domain = o.domainOf?.(path);
        if (domain) paper.domain = domain;
        pid = paper.id;
        o.state.putWarnings(pid, paper.warnings);
        for (const w of paper.warnings) log(`${pid}: warning: ${formatWarning(w)}`);
        // sections read but not given to the stages, each with why (issue 49: nothing dropped without a word)
        const skipped = paper.structure?.skipped ?? [];
        o.state.putStage(pid, 'skipped-sections', LOADER_VERSION, skipped);
        for (const k of skipped) log(`${pid}: section "${k.title}" skipped: ${k.reason}`);
        o.state.setPaperStatus(pid, 'running');
        const split = assignSplit(pid, o.splitFractions, o.splitSeed);
        const itemOpts = { split, promptVersion, generalRubricSet: o.generalRubricSet, tally, rubric: o.rubric, domainMix: o.domainMix };
        results[i] = await buildItem(paper, llm, o.state, itemOpts);
        o.state.setPaperStatus(pid, 'done');
        o.progress?.tick(tally.live === 0);
      } catch (e) {
        if (o.signal?.aborted) throw e;
        if (e instanceof PipelineStateError) {
          fatal ??= e;
          throw e;
        }
        const msg = (e as Error)?.message ?? String(e);
        failures.push({ paper: pid, error: msg });
        try {
          o.state.setPaperStatus(pid, 'failed', msg);
        } catch {
          /* state closed */
        }
        log(`${pid}: failed: ${msg}`);
        o.progress?.fail(tally.live === 0);
      }
    }
  };
  const n = Math.max(1, Math.min(o.paperConcurrency ?? 2, o.papers.length));
  const runs = Array.from({ length: n }, () => worker());
  const settled = await Promise.allSettled(runs);
  const rejected = settled.find((s) => s.status === 'rejected') as PromiseRejectedResult | undefined;
  if (rejected) throw rejected.reason;
  return { items: results.filter((x): x is PaperGymItem => !!x), failures, stats: llm.stats };
}
