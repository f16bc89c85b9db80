/**
 * The one resolver of model, adapter and dataset references, used by every command that takes a
 * model directory (train --model, generate / serve / eval --model and --adapter, eval suites,
 * probe-judge and judge-agreement's local judge) and by `import --input hf://datasets/…`:
 *
 * 1. an existing local path is used as it is;
 * 2. else a Hub id (`org/name`, optionally `hf://org/name`, `hf://datasets/org/name`) is looked up in
 *    the huggingface_hub cache at `--revision` (branch, tag or commit; default `main`), and what is
 *    missing is fetched through `@huggingface/hub` (lib/hub/download.ts) — only the files a run
 *    reads ({@link MODEL_FILES}, {@link ADAPTER_FILES});
 * 3. anything else is passed on as given (the loaders name a directory that does not exist).
 */
import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { fetchRepoFiles, type FetchRepoOptions } from './download.js';
import type { HubRepo, HubRepoType } from './cache.js';

/** What a reference names: a base model, a PEFT adapter, or a dataset. */
export type HubRefKind = 'model' | 'adapter' | 'dataset';

/**
 * Files of a base model a run reads (transformers `from_pretrained` of a safetensors checkpoint):
 * config, safetensors weights and their index, tokenizer and chat template, generation config.
 */
export const MODEL_FILES: readonly RegExp[] = [
  /^config\.json$/,
  /^generation_config\.json$/,
  /^model(-\d+-of-\d+)?\.safetensors$/,
  /^model\.safetensors\.index\.json$/,
  /^tokenizer(_config)?\.json$/,
  /^special_tokens_map\.json$/,
  /^added_tokens\.json$/,
  /^vocab\.json$/,
  /^merges\.txt$/,
  /^chat_template\.(jinja|json)$/,
];

/** Files of a PEFT adapter (peft `PeftModel.from_pretrained`). */
export const ADAPTER_FILES: readonly RegExp[] = [/^adapter_config\.json$/, /^adapter_model\.safetensors$/];

/** Weights only pickle can read (refused: loading them runs arbitrary code, and the addon reads safetensors). */
const PICKLE_WEIGHTS = /(^|\/)(pytorch_model|adapter_model)?[^/]*\.(bin|pt|pth|ckpt|pkl)$/;

const ID = /^[A-Za-z0-9][\w.-]*(\/[A-Za-z0-9][\w.-]*)?$/;

/** A parsed Hub reference. */
export interface HubRef extends HubRepo {
  /** Path inside the repo (`hf://datasets/org/name/data/train.parquet`), '' for the whole repo. */
  path: string;
  /** A revision given inline (`org/name@v1.0`), which --revision does not override. */
  revision?: string;
}

/**
 * Parses `hf://[datasets/|models/|spaces/]org/name[@revision][/path]` or a bare `org/name[@revision]` (type `fallback`);
 * undefined when `ref` is not a Hub reference (a local path: starts with `.`, `/`, `~`, or has more
 * than one `/` without `hf://`).
 */
export function parseHubRef(ref: string, fallback: HubRepoType = 'model'): HubRef | undefined {
  let s = ref;
  let type: HubRepoType = fallback;
  if (s.startsWith('hf://')) {
    s = s.slice(5);
    const m = /^(datasets|models|spaces)\/(.*)$/.exec(s);
    if (m) {
      type = m[1]!.slice(0, -1) as HubRepoType;
      s = m[2]!;
    }
    const parts = s.split('/');
    const at = /^([^@]+)@(.+)$/.exec(parts[1] ?? '');
    if (at) parts[1] = at[1]!;
    const id = parts.slice(0, 2).join('/');
    if (parts.length < 2 || !ID.test(id)) return undefined;
    return { type, id, path: parts.slice(2).join('/'), ...(at && { revision: at[2] }) };
  }
  const at = /^([^@]+)@([^@/][^@]*)$/.exec(s);
  if (at) s = at[1]!;
  if (!ID.test(s) || !s.includes('/')) return undefined;
  return { type, id: s, path: '', ...(at && { revision: at[2] }) };
}

/** Options of {@link resolveModelRef}. */
export interface ResolveOptions extends Pick<FetchRepoOptions, 'env' | 'fetch' | 'log' | 'attempts'> {
  /** Branch, tag or commit sha of a Hub reference (default `main`). */
  revision?: string;
  /** What the reference names (default 'model'); selects the files and the checks. */
  kind?: Exclude<HubRefKind, 'dataset'>;
  /** What to call the reference in errors (default `--model` / `--adapter`). */
  what?: string;
}

const matches = (pats: readonly RegExp[]) => (p: string) => pats.some((r) => r.test(p));

/** True when a snapshot dir holds a loadable base model: config, tokenizer, and every weights shard its index names. */
/** The files a model snapshot needs and lacks: config.json, tokenizer.json, the weights (one file, or the index and its shards). */
function modelMissing(dir: string): string[] {
  const lacks = ['config.json', 'tokenizer.json'].filter((n) => !existsSync(join(dir, n)));
  if (existsSync(join(dir, 'model.safetensors'))) return lacks;
  const idx = join(dir, 'model.safetensors.index.json');
  if (!existsSync(idx)) return [...lacks, 'model.safetensors (or model.safetensors.index.json)'];
  try {
    const shards = new Set(Object.values((JSON.parse(readFileSync(idx, 'utf8')) as { weight_map: Record<string, string> }).weight_map));
    return [...lacks, ...[...shards].filter((s) => !existsSync(join(dir, s)))];
  } catch {
    return [...lacks, 'model.safetensors.index.json (unreadable)'];
  }
}

const adapterMissing = (dir: string) => ['adapter_config.json', 'adapter_model.safetensors'].filter((n) => !existsSync(join(dir, n)));

/**
 * A model or adapter reference → a local directory: the path itself when it exists, else the
 * huggingface_hub cache snapshot of the Hub id (fetched when missing; see the module doc).
 * Errors name the reference: a Hub repo with pickle
 * weights only (no safetensors: refused as for local dirs); and the Hub errors of {@link fetchRepoFiles}.
 */
export async function resolveModelRef(ref: string, opts: ResolveOptions = {}): Promise<string> {
  const kind = opts.kind ?? 'model';
  const what = opts.what ?? `--${kind}`;
  if (typeof ref !== 'string' || ref === '') throw new Error(`${what}: empty reference (a directory or a Hub id org/name)`);
  // A local path (or anything that is no Hub id) is passed on as given: the loaders' own checks
  // name a directory that does not exist (`model directory X does not exist`).
  if (existsSync(ref)) return ref;
  const hub = parseHubRef(ref, 'model');
  if (!hub) return ref;
  if (hub.type !== 'model' || hub.path) throw new Error(`${what} ${ref}: not a model repo id (org/name, hf://org/name)`);
  const files = kind === 'adapter' ? ADAPTER_FILES : MODEL_FILES;
  const r = await fetchRepoFiles(hub, {
    revision: hub.revision ?? opts.revision,
    select: matches(files),
    complete: (dir) => !(kind === 'adapter' ? adapterMissing : modelMissing)(dir).length,
    missing: kind === 'adapter' ? adapterMissing : modelMissing,
    checkListing: (paths) => {
      const safet = paths.some((p) => p.endsWith('.safetensors'));
      const pickle = paths.filter((p) => PICKLE_WEIGHTS.test(p));
      if (!safet && pickle.length)
        throw new Error(
          `${what} ${ref}: the Hub repo has pickle weights only (${pickle.slice(0, 3).join(', ')}), no safetensors: refused (pickle runs code when loaded; convert with safetensors' convert script, or pick a revision with *.safetensors)`,
        );
      const need = kind === 'adapter' ? ['adapter_config.json', 'adapter_model.safetensors'] : ['config.json'];
      const missing = need.filter((n) => !paths.includes(n));
      if (missing.length)
        throw new Error(`${what} ${ref}: the Hub repo has no ${missing.join(', ')} (not a ${kind === 'adapter' ? 'PEFT adapter' : 'transformers model'} repo)`);
    },
    env: opts.env,
    fetch: opts.fetch,
    log: opts.log,
    attempts: opts.attempts,
  });
  return r.dir;
}

/** Options of {@link resolveDatasetRef}. */
export interface DatasetResolveOptions extends Pick<FetchRepoOptions, 'env' | 'fetch' | 'log' | 'attempts'> {
  revision?: string;
  /** Which files to fetch, by their `/`-separated path below the reference (default: all). */
  select?: (rel: string) => boolean;
}

/** Paths (relative, `/`-separated) of the files under `dir` (snapshot links followed). */
function filesUnder(dir: string, pre = ''): string[] {
  if (!existsSync(dir)) return [];
  if (!statSync(dir).isDirectory()) return [pre.replace(/\/$/, '')];
  return readdirSync(dir).flatMap((n) => (statSync(join(dir, n)).isDirectory() ? filesUnder(join(dir, n), `${pre}${n}/`) : [`${pre}${n}`]));
}

/**
 * A `hf://datasets/org/name[@revision][/path]` reference → its files, fetched into the
 * huggingface_hub cache (`datasets--org--name`): the files below `path` (the whole repo when
 * none) that `select` keeps. Returns the snapshot folder, the local path the reference names in it
 * (`root`: a folder, or the file) and the files fetched or found.
 * Errors: not a dataset reference; nothing selected (the repo's files are listed); the Hub errors
 * of {@link fetchRepoFiles}.
 */
export async function resolveDatasetRef(ref: string, opts: DatasetResolveOptions = {}): Promise<{ dir: string; root: string; files: string[] }> {
  const hub = parseHubRef(ref, 'dataset');
  if (!hub || hub.type !== 'dataset') throw new Error(`${ref}: not a Hub dataset reference (hf://datasets/org/name[@revision][/path])`);
  const base = hub.path.replace(/\/+$/, '');
  const below = (p: string) => (!base ? p : p === base ? p.split('/').pop()! : p.startsWith(`${base}/`) ? p.slice(base.length + 1) : undefined);
  const inScope = (p: string) => {
    const rel = below(p);
    return rel !== undefined && p !== '.gitattributes' && (opts.select ? opts.select(rel) : true);
  };
  let chosen: string[] = [];
  const r = await fetchRepoFiles(hub, {
    revision: hub.revision ?? opts.revision,
    select: inScope,
    checkListing: (paths) => {
      chosen = paths.filter(inScope).sort();
      if (!chosen.length)
        throw new Error(
          `${ref}: no file to read${base ? ` below ${base}` : ''} in the repo (it has: ${paths.slice(0, 12).join(', ')}${paths.length > 12 ? ', …' : ''})`,
        );
    },
    complete: (dir) => (chosen.length ? chosen.every((p) => existsSync(join(dir, p))) : filesUnder(dir).some(inScope)),
    env: opts.env,
    fetch: opts.fetch,
    log: opts.log,
    attempts: opts.attempts,
  });
  // Answered from the cache (offline or a cached commit): the files the snapshot holds.
  if (!chosen.length) chosen = filesUnder(r.dir).filter(inScope).sort();
  if (!chosen.length) throw new Error(`${ref}: the cached snapshot ${r.dir} holds no file to read`);
  return { dir: r.dir, root: base ? join(r.dir, base) : r.dir, files: chosen.map((p) => join(r.dir, p)) };
}

/**
 * The base model and adapter of generate / serve / eval as local directories ({@link resolveModelRef}
 * each; `revision` applies to the model, an adapter takes `org/name@revision`).
 */
export async function resolvePolicyRefs(
  a: { model: string; adapter?: string; revision?: string },
  opts: Omit<ResolveOptions, 'kind' | 'revision' | 'what'> = {},
): Promise<{ model: string; adapter?: string }> {
  const model = await resolveModelRef(a.model, { ...opts, revision: a.revision, kind: 'model', what: '--model' });
  const adapter = a.adapter ? await resolveModelRef(a.adapter, { ...opts, kind: 'adapter', what: '--adapter' }) : undefined;
  return { model, ...(adapter && { adapter }) };
}

/** True when `ref` is no existing path but a Hub id (served under its id, as vLLM does). */
export function isHubModelRef(ref: string): boolean {
  return !existsSync(ref) && parseHubRef(ref, 'model')?.type === 'model';
}
