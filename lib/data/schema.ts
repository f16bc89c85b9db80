/**
 * PaperGym item schema (docs/design.md §7; the PaperGym recipe: question from goals + background,
 * reference answer from methods + experimental design, 10 specific rubric items over two
 * dimensions, plus a shared set of general rubric items).
 *
 * One item per JSONL line. `validateItem` checks one parsed object; `readDataset` reads a
 * JSONL file, reports failing rows with their 1-based line numbers and skips them (or throws
 * in strict mode); `writeDataset` validates every item before writing.
 */
import { existsSync, readFileSync, writeFileSync, renameSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { Ajv, type ErrorObject, type ValidateFunction } from 'ajv';
import type { BenchmarkItem } from '../task/types.js';

/** The two rubric dimensions of the PaperGym recipe. */
export type RubricDimension = 'method_innovation' | 'experimental_design';
/** Where a rubric item came from: the question alone (R_Q), question + answer (R_A), or both after merging. */
export type RubricOrigin = 'R_Q' | 'R_A' | 'both';
/** Dataset split. */
export type Split = 'train' | 'val' | 'test';

export const RUBRIC_DIMENSIONS: readonly RubricDimension[] = ['method_innovation', 'experimental_design'];
export const RUBRIC_ORIGINS: readonly RubricOrigin[] = ['R_Q', 'R_A', 'both'];
export const SPLITS: readonly Split[] = ['train', 'val', 'test'];
/** Number of instance-specific rubric items per item (PaperGym: top 10 after ranking). */
export const RUBRIC_SIZE = 10;
/** Largest `--rubric-top-k` (the schema's bound on rubric length). */
export const MAX_RUBRIC_TOP_K = 50;
/**
 * The name of this project's item format: the `--format` of its descriptor (lib/eval/formats/papergym.ts,
 * which reads PaperGym items through this module), the `format` and source dataset of the benchmark
 * items made from them, and what the Hub cards of a PaperGym dataset and of an adapter trained on
 * one call that data (lib/hub/cards.ts, lib/hub/publish.ts).
 */
export const PAPERGYM_FORMAT = 'papergym';
/** Id of the shared general rubric shipped in data/general-rubric.json. */
export const DEFAULT_GENERAL_RUBRIC_SET = 'goel2025-general-v1';

/** One binary, instance-specific rubric item. `rank` 1 = most important. */
export interface RubricItem {
  id: string;
  text: string;
  dimension: RubricDimension;
  origin: RubricOrigin;
  rank: number;
}

/** Provenance of an item. */
export interface ItemSource {
  paper_id: string;
  title: string;
  domain: string;
  licence?: string;
}

/** The four stage texts extracted from the paper (map → reduce). */
export interface ItemStages {
  goals: string;
  background: string;
  methods: string;
  experimental_design: string;
}

/** Which prompts / model produced the item (absent or `model: "human"` for hand-made items). */
export interface ItemMeta {
  prompt_version: string;
  model: string;
}

/**
 * How an item was built, for grouping results by data experiment (docs/data.md; the paper's
 * Table 4 ablations and Figure 3 scaling). Written by `build-data`; absent in items built before it.
 */
export interface ItemProvenance {
  /** The model of each pipeline role (lib/data/prompts.ts PIPELINE_ROLES): extract, qa, rubric, rank. */
  models?: Record<string, string>;
  /** Rubric candidate sources used: R_Q (question alone), R_A (question + answer). */
  rubric_sources?: ('R_Q' | 'R_A')[];
  /** Rubric dimensions asked for and kept. */
  rubric_dimensions?: RubricDimension[];
  /** Rubric items kept after ranking (the paper: 10). */
  rubric_top_k?: number;
  /** Whether the general rubric items go with this item (false: `general_rubric_set` is `none`). */
  general_items?: boolean;
  /** The domain mix the papers were drawn to (`cs=0.5,physics=0.25,economics=0.25 seed S`). */
  domain_mix?: string;
}

/** `general_rubric_set` of items built with the general rubric items off. */
export const NO_GENERAL_RUBRIC_SET = 'none';

/** One PaperGym item (one JSONL row). */
export interface PaperGymItem {
  id: string;
  source: ItemSource;
  question: string;
  reference_answer: string;
  rubric: RubricItem[];
  general_rubric_set: string;
  split: Split;
  stages: ItemStages;
  meta?: ItemMeta;
  provenance?: ItemProvenance;
}

/** One general (shared) rubric item. */
export interface GeneralRubricItem {
  id: string;
  text: string;
}

/** The general rubric file (data/general-rubric.json). */
export interface GeneralRubricSet {
  id: string;
  source: string;
  items: GeneralRubricItem[];
}

const nonEmpty = { type: 'string', minLength: 1, pattern: '\\S' } as const;

/** JSON Schema (draft-07 / ajv) of one rubric item. */
export const rubricItemJsonSchema = {
  type: 'object',
  additionalProperties: false,
  required: ['id', 'text', 'dimension', 'origin', 'rank'],
  properties: {
    id: nonEmpty,
    text: nonEmpty,
    dimension: { enum: [...RUBRIC_DIMENSIONS] },
    origin: { enum: [...RUBRIC_ORIGINS] },
    rank: { type: 'integer', minimum: 1 },
  },
} as const;

/** JSON Schema (ajv) of one PaperGym item. */
export const itemJsonSchema = {
  $id: 'https://papergym-native/schemas/item.json',
  type: 'object',
  additionalProperties: false,
  required: ['id', 'source', 'question', 'reference_answer', 'rubric', 'general_rubric_set', 'split', 'stages'],
  properties: {
    id: nonEmpty,
    source: {
      type: 'object',
      additionalProperties: false,
      required: ['paper_id', 'title', 'domain'],
      properties: { paper_id: nonEmpty, title: nonEmpty, domain: nonEmpty, licence: { type: 'string' } },
    },
    question: nonEmpty,
    reference_answer: nonEmpty,
    // exactly RUBRIC_SIZE unless provenance.rubric_top_k says otherwise (semanticErrors)
    rubric: { type: 'array', minItems: 1, maxItems: MAX_RUBRIC_TOP_K, items: rubricItemJsonSchema },
    general_rubric_set: nonEmpty,
    split: { enum: [...SPLITS] },
    stages: {
      type: 'object',
      additionalProperties: false,
      required: ['goals', 'background', 'methods', 'experimental_design'],
      properties: { goals: { type: 'string' }, background: { type: 'string' }, methods: { type: 'string' }, experimental_design: { type: 'string' } },
    },
    meta: {
      type: 'object',
      additionalProperties: false,
      required: ['prompt_version', 'model'],
      properties: { prompt_version: nonEmpty, model: nonEmpty },
    },
    provenance: {
      type: 'object',
      additionalProperties: false,
      properties: {
        models: { type: 'object', additionalProperties: nonEmpty },
        rubric_sources: { type: 'array', minItems: 1, uniqueItems: true, items: { enum: ['R_Q', 'R_A'] } },
        rubric_dimensions: { type: 'array', minItems: 1, uniqueItems: true, items: { enum: [...RUBRIC_DIMENSIONS] } },
        rubric_top_k: { type: 'integer', minimum: 1, maximum: MAX_RUBRIC_TOP_K },
        general_items: { type: 'boolean' },
        domain_mix: { type: 'string' },
      },
    },
  },
} as const;

/** JSON Schema of data/general-rubric.json. */
export const generalRubricJsonSchema = {
  type: 'object',
  additionalProperties: false,
  required: ['id', 'source', 'items'],
  properties: {
    id: nonEmpty,
    source: { type: 'string' },
    items: {
      type: 'array',
      minItems: 1,
      items: { type: 'object', additionalProperties: false, required: ['id', 'text'], properties: { id: nonEmpty, text: nonEmpty } },
    },
  },
} as const;

let ajvSingleton: Ajv | undefined;
/** Shared ajv instance (allErrors, strict schema mode). */
export function getAjv(): Ajv {
  if (!ajvSingleton) ajvSingleton = new Ajv({ allErrors: true, strict: true });
  return ajvSingleton;
}
let itemValidator: ValidateFunction | undefined;
let generalValidator: ValidateFunction | undefined;

/** Result of validating one object. */
export interface ValidationResult {
  ok: boolean;
  /** Human-readable errors (`/path: message`), empty when ok. */
  errors: string[];
}

function fmtErrors(errs: ErrorObject[] | null | undefined): string[] {
  return (errs ?? []).map((e) => `${e.instancePath || '/'}: ${e.message ?? 'invalid'}${e.params && 'allowedValues' in e.params ? ` (${(e.params as { allowedValues: unknown[] }).allowedValues.join(', ')})` : ''}`);
}

/**
 * Semantic checks beyond JSON Schema: unique rubric ids, ranks 1..n each once, every dimension
 * present — n = provenance.rubric_top_k (default 10), the dimensions = provenance.rubric_dimensions
 * (default both).
 */
function semanticErrors(item: PaperGymItem): string[] {
  const errs: string[] = [];
  const n = item.provenance?.rubric_top_k ?? RUBRIC_SIZE;
  if (item.rubric.length !== n) errs.push(`/rubric: must have ${n} items${item.provenance?.rubric_top_k ? ' (provenance.rubric_top_k)' : ''} (got ${item.rubric.length})`);
  const dims = item.provenance?.rubric_dimensions ?? RUBRIC_DIMENSIONS;
  const ids = new Set(item.rubric.map((r) => r.id));
  if (ids.size !== item.rubric.length) errs.push('/rubric: rubric item ids must be unique');
  const ranks = item.rubric.map((r) => r.rank).sort((a, b) => a - b);
  if (!ranks.every((r, i) => r === i + 1)) errs.push(`/rubric: ranks must be 1..${item.rubric.length}, each once (got ${ranks.join(',')})`);
  for (const d of n >= dims.length ? dims : []) {
    if (!item.rubric.some((r) => r.dimension === d)) errs.push(`/rubric: no item of dimension ${d}`);
  }
  for (const r of item.rubric) if (!dims.includes(r.dimension)) errs.push(`/rubric: item ${r.id} has dimension ${r.dimension}, not in provenance.rubric_dimensions`);
  return errs;
}

/**
 * Validate one parsed object as a PaperGym item (JSON Schema + semantic checks: unique rubric
 * ids, ranks a permutation of 1..10, both dimensions represented).
 * @param x any parsed JSON value
 * @returns `{ok, errors}`; never throws
 */
export function validateItem(x: unknown): ValidationResult & { item?: PaperGymItem } {
  itemValidator ??= getAjv().compile(itemJsonSchema);
  if (!itemValidator(x)) return { ok: false, errors: fmtErrors(itemValidator.errors) };
  const item = x as PaperGymItem;
  const sem = semanticErrors(item);
  return sem.length ? { ok: false, errors: sem } : { ok: true, errors: [], item };
}

/** Type guard form of {@link validateItem}. */
export function isItem(x: unknown): x is PaperGymItem {
  return validateItem(x).ok;
}

/** Validate a general rubric set object (data/general-rubric.json). */
export function validateGeneralRubric(x: unknown): ValidationResult {
  generalValidator ??= getAjv().compile(generalRubricJsonSchema);
  if (!generalValidator(x)) return { ok: false, errors: fmtErrors(generalValidator.errors) };
  const ids = new Set((x as GeneralRubricSet).items.map((i) => i.id));
  if (ids.size !== (x as GeneralRubricSet).items.length) return { ok: false, errors: ['/items: ids must be unique'] };
  return { ok: true, errors: [] };
}

/** Raised by `readDataset(..., {strict: true})` and `writeDataset` for invalid rows. */
export class DatasetValidationError extends Error {
  constructor(message: string, readonly problems: DatasetProblem[]) {
    super(message);
    this.name = 'DatasetValidationError';
  }
}

/** One rejected row. `line` is 1-based (0 for writeDataset, where `index` is the array index). */
export interface DatasetProblem {
  line: number;
  index?: number;
  errors: string[];
}

/** Options for {@link readDataset}. */
export interface ReadDatasetOptions {
  /** Throw a DatasetValidationError on the first invalid row instead of skipping it. */
  strict?: boolean;
  /** Called for each skipped row (default: a warning on stderr). */
  onProblem?: (p: DatasetProblem) => void;
  /** Reject duplicate item ids (default true). */
  uniqueIds?: boolean;
}

/** Result of {@link readDataset}. */
export interface ReadDatasetResult {
  items: PaperGymItem[];
  problems: DatasetProblem[];
}

/**
 * Parse JSONL text into items. Blank lines are ignored. Invalid JSON, schema failures and
 * duplicate ids are reported with their 1-based line number and skipped; with `strict` the
 * first one throws a {@link DatasetValidationError}.
 */
export function parseDataset(text: string, opts: ReadDatasetOptions = {}): ReadDatasetResult {
  const items: PaperGymItem[] = [];
  const problems: DatasetProblem[] = [];
  const seen = new Set<string>();
  const report = opts.onProblem ?? ((p: DatasetProblem) => process.stderr.write(`dataset: line ${p.line} skipped: ${p.errors.join('; ')}\n`));
  const lines = text.split(/\r?\n/);
  for (let i = 0; i < lines.length; i++) {
    const raw = lines[i].trim();
    if (!raw) continue;
    let errors: string[] = [];
    let parsed: unknown;
    try {
      parsed = JSON.parse(raw);
    } catch (e) {
      errors = [`invalid JSON: ${(e as Error).message}`];
    }
    if (!errors.length) {
      const v = validateItem(parsed);
      if (!v.ok) errors = v.errors;
      else if (opts.uniqueIds !== false && seen.has(v.item!.id)) errors = [`duplicate id ${v.item!.id}`];
      else {
        seen.add(v.item!.id);
        items.push(v.item!);
      }
    }
    if (errors.length) {
      const p = { line: i + 1, errors };
      if (opts.strict) throw new DatasetValidationError(`dataset line ${p.line}: ${errors.join('; ')}`, [p]);
      problems.push(p);
      report(p);
    }
  }
  return { items, problems };
}

/**
 * Read and validate a PaperGym JSONL dataset.
 * @param path JSONL file
 * @param opts `{strict}`: throw on the first bad row (default: skip and report with line number)
 * @returns valid items and the problems of skipped rows
 * @throws DatasetValidationError (strict), or the fs error when the file can't be read
 */
export function readDataset(path: string, opts: ReadDatasetOptions = {}): ReadDatasetResult {
  return parseDataset(readFileSync(path, 'utf8'), opts);
}

/**
 * Validate all items and write them as JSONL atomically (temp file + rename).
 * @throws DatasetValidationError listing every invalid item (nothing is written then)
 */
export function writeDataset(path: string, items: PaperGymItem[]): void {
  const problems: DatasetProblem[] = [];
  const seen = new Set<string>();
  items.forEach((it, index) => {
    const v = validateItem(it);
    if (!v.ok) problems.push({ line: 0, index, errors: v.errors });
    else if (seen.has(it.id)) problems.push({ line: 0, index, errors: [`duplicate id ${it.id}`] });
    seen.add(it.id);
  });
  if (problems.length) {
    throw new DatasetValidationError(`${problems.length} invalid item(s): ${problems.map((p) => `#${p.index}: ${p.errors.join('; ')}`).join(' | ')}`, problems);
  }
  const tmp = `${path}.tmp-${process.pid}`;
  writeFileSync(tmp, items.map((it) => JSON.stringify(it)).join('\n') + (items.length ? '\n' : ''));
  renameSync(tmp, path);
}

/** Row of the public `facebook/research-plan-gen` dataset (Goel et al. 2025). */
export interface ResearchPlanGenRow {
  Goal: string;
  Rubric: string[];
  'Reference solution': string;
  article_id: string;
  q_id: string;
}

/** Convert an item to the research-plan-gen interop format (rubric texts in rank order). */
export function toResearchPlanGen(item: PaperGymItem): ResearchPlanGenRow {
  return {
    Goal: item.question,
    Rubric: [...item.rubric].sort((a, b) => a.rank - b.rank).map((r) => r.text),
    'Reference solution': item.reference_answer,
    article_id: item.source.paper_id,
    q_id: item.id,
  };
}

/**
 * Load a general rubric set (default: the packaged data/general-rubric.json).
 * @throws Error when the file is missing or invalid
 */
export function loadGeneralRubric(path?: string): GeneralRubricSet {
  const p = path ?? defaultDataPath('general-rubric.json');
  const obj = JSON.parse(readFileSync(p, 'utf8'));
  const v = validateGeneralRubric(obj);
  if (!v.ok) throw new Error(`${p}: invalid general rubric: ${v.errors.join('; ')}`);
  return obj as GeneralRubricSet;
}

/**
 * Absolute path of a file in the packaged `data/` dir (works from lib/ and dist/lib/).
 */
export function defaultDataPath(rel: string): string {
  const here = new URL('.', import.meta.url);
  // lib/data/ → ../../data ; dist/lib/data/ → ../../../data
  const candidates = [new URL('../../data/' + rel, here), new URL('../../../data/' + rel, here)];
  for (const c of candidates) if (existsSync(c)) return fileURLToPath(c);
  return fileURLToPath(candidates[0]);
}

/** Path of the embedded sample dataset used by `train` by default. */
export function sampleDatasetPath(): string {
  return defaultDataPath('sample/papergym-sample.jsonl');
}

/** JSON Schema (ajv) of one imported benchmark item ({@link BenchmarkItem}, lib/task/types.ts; written by `import`). */
export const benchmarkItemJsonSchema = {
  $id: 'https://papergym-native/schemas/benchmark-item.json',
  type: 'object',
  additionalProperties: false,
  required: ['id', 'format', 'question', 'rubric', 'source'],
  properties: {
    id: nonEmpty,
    format: nonEmpty,
    question: nonEmpty,
    messages: {
      type: 'array',
      minItems: 1,
      items: {
        type: 'object',
        required: ['role', 'content'],
        properties: { role: { enum: ['system', 'user', 'assistant', 'tool', 'developer'] }, content: { type: 'string' } },
      },
    },
    reference_answer: { type: 'string' },
    rubric: {
      type: 'array',
      minItems: 1,
      items: {
        type: 'object',
        additionalProperties: false,
        required: ['id', 'text', 'weight'],
        properties: {
          id: nonEmpty,
          text: nonEmpty,
          weight: { type: 'number' },
          type: { type: 'string' },
          axis: { type: 'string' },
          tags: { type: 'array', items: { type: 'string' } },
          title: { type: 'string' },
          dimension: { type: 'string' },
          origin: { type: 'string' },
        },
      },
    },
    split: { type: 'string' },
    tags: { type: 'array', items: { type: 'string' } },
    source: {
      type: 'object',
      additionalProperties: false,
      required: ['dataset', 'file', 'row'],
      properties: { dataset: nonEmpty, file: nonEmpty, row: { type: 'integer', minimum: 1 }, config: { type: 'string' }, id: { type: 'string' } },
    },
  },
} as const;

let benchmarkValidator: ValidateFunction | undefined;
/** Validate one parsed object as a {@link BenchmarkItem} (JSON Schema + unique rubric ids); never throws. */
export function validateBenchmarkItem(x: unknown): ValidationResult & { item?: BenchmarkItem } {
  benchmarkValidator ??= getAjv().compile(benchmarkItemJsonSchema);
  if (!benchmarkValidator(x)) return { ok: false, errors: fmtErrors(benchmarkValidator.errors) };
  const item = x as BenchmarkItem;
  if (new Set(item.rubric.map((r) => r.id)).size !== item.rubric.length) return { ok: false, errors: ['/rubric: rubric item ids must be unique'] };
  if (!item.rubric.every((r) => Number.isFinite(r.weight))) return { ok: false, errors: ['/rubric: weights must be finite numbers'] };
  return { ok: true, errors: [], item };
}

/**
 * A PaperGym item as a benchmark item (format `papergym`, weight 1, dimension and origin kept; rank is
 * dropped). `file` / `row` name where it was read.
 */
export function paperGymToBenchmark(it: PaperGymItem, file: string, row: number): BenchmarkItem {
  return {
    id: it.id,
    format: PAPERGYM_FORMAT,
    question: it.question,
    reference_answer: it.reference_answer,
    rubric: it.rubric.map((r) => ({ id: r.id, text: r.text, weight: 1, dimension: r.dimension, origin: r.origin })),
    split: it.split,
    source: { dataset: PAPERGYM_FORMAT, file, row, id: it.source.paper_id },
  };
}

/**
 * Reads an eval item file: JSONL whose rows are imported benchmark items ({@link BenchmarkItem}, a
 * `format` field) or PaperGym items (read as format `papergym`, {@link paperGymToBenchmark}), mixed
 * freely. Bad rows are reported with their 1-based line and skipped (strict: the first throws).
 * @throws DatasetValidationError (strict), or the fs error when the file can't be read
 */
export function readEvalItems(path: string, opts: ReadDatasetOptions = {}): { items: BenchmarkItem[]; problems: DatasetProblem[] } {
  const items: BenchmarkItem[] = [];
  const problems: DatasetProblem[] = [];
  const seen = new Set<string>();
  const report = opts.onProblem ?? ((p: DatasetProblem) => process.stderr.write(`${path}: line ${p.line} skipped: ${p.errors.join('; ')}\n`));
  readFileSync(path, 'utf8').split(/\r?\n/).forEach((line, i) => {
    const raw = line.trim();
    if (!raw) return;
    let errors: string[];
    let item: BenchmarkItem | undefined;
    try {
      const o = JSON.parse(raw) as Record<string, unknown>;
      if (o && typeof o === 'object' && 'format' in o) {
        const v = validateBenchmarkItem(o);
        errors = v.errors;
        item = v.item;
      } else {
        const v = validateItem(o);
        errors = v.errors;
        item = v.item && paperGymToBenchmark(v.item, path, i + 1);
      }
    } catch (e) {
      errors = [`invalid JSON: ${(e as Error).message}`];
    }
    if (item && opts.uniqueIds !== false && seen.has(item.id)) errors = [`duplicate id ${item.id}`];
    if (item && !errors.length) {
      seen.add(item.id);
      items.push(item);
      return;
    }
    const p = { line: i + 1, errors };
    if (opts.strict) throw new DatasetValidationError(`${path}: line ${p.line}: ${errors.join('; ')}`, [p]);
    problems.push(p);
    report(p);
  });
  return { items, problems };
}

/**
 * Writes benchmark items as JSONL atomically (temp file + rename), each validated first.
 * @throws DatasetValidationError listing every invalid item (nothing is written then)
 */
export function writeEvalItems(path: string, items: BenchmarkItem[]): void {
  const problems: DatasetProblem[] = [];
  items.forEach((it, index) => {
    const v = validateBenchmarkItem(it);
    if (!v.ok) problems.push({ line: 0, index, errors: v.errors });
  });
  if (problems.length) throw new DatasetValidationError(`${problems.length} invalid item(s): ${problems.map((p) => `#${p.index}: ${p.errors.join('; ')}`).join(' | ')}`, problems);
  const tmp = `${path}.tmp-${process.pid}`;
  writeFileSync(tmp, items.map((it) => JSON.stringify(it)).join('\n') + (items.length ? '\n' : ''));
  renameSync(tmp, path);
}
