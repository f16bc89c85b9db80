/**
 * The Hugging Face Hub cache, read and written exactly as Python's `huggingface_hub` lays it out
 * (huggingface_hub docs, "Understand caching"; `file_download.py` `hf_hub_download`), so that
 * transformers and vLLM reuse what we fetch and we reuse theirs:
 *
 * ```
 * <cache>/models--<org>--<name>/            (datasets--…, spaces--… for the other repo types)
 *   blobs/<etag>                            file contents; etag = the LFS sha256 oid, else the git blob sha1
 *   blobs/<etag>.incomplete                 a download in progress (resumed from its size)
 *   refs/<revision>                         the commit sha (40 hex) a branch or tag pointed to when fetched
 *   snapshots/<commit>/<path>               relative symlink ../../blobs/<etag> (one `..` more per sub-dir)
 * ```
 *
 * `<cache>` is `$HF_HUB_CACHE`, else `$HUGGINGFACE_HUB_CACHE` (legacy), else `$HF_HOME/hub`, else
 * `~/.cache/huggingface/hub` (`$XDG_CACHE_HOME/huggingface/hub` when set), as `huggingface_hub.constants`.
 */
import { existsSync, lstatSync, mkdirSync, readFileSync, readlinkSync, renameSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { homedir } from 'node:os';
import { dirname, join, relative, sep } from 'node:path';

/** The repo types of the Hub (the cache folder prefix is the plural). */
export type HubRepoType = 'model' | 'dataset' | 'space';

/** A Hub repo named by id (`org/name`) and type. */
export interface HubRepo {
  type: HubRepoType;
  /** `org/name` (or a bare `name` for the few legacy repos without an owner). */
  id: string;
}

const TRUE = /^(1|on|yes|true)$/i;

/** `$HF_HOME`, else `$XDG_CACHE_HOME/huggingface`, else `~/.cache/huggingface` (huggingface_hub.constants.HF_HOME). */
export function hfHome(env: NodeJS.ProcessEnv = process.env): string {
  if (env.HF_HOME) return env.HF_HOME;
  return join(env.XDG_CACHE_HOME || join(homedir(), '.cache'), 'huggingface');
}

/** The hub cache dir: `$HF_HUB_CACHE`, `$HUGGINGFACE_HUB_CACHE`, else `<HF_HOME>/hub` (huggingface_hub.constants.HF_HUB_CACHE). */
export function hubCacheDir(env: NodeJS.ProcessEnv = process.env): string {
  return env.HF_HUB_CACHE || env.HUGGINGFACE_HUB_CACHE || join(hfHome(env), 'hub');
}

/** True when `HF_HUB_OFFLINE` is 1 / on / yes / true: nothing is fetched, the cache alone answers. */
export function hubOffline(env: NodeJS.ProcessEnv = process.env): boolean {
  return TRUE.test(env.HF_HUB_OFFLINE ?? '');
}

/** The Hub endpoint: `$HF_ENDPOINT` (a mirror) else https://huggingface.co, without a trailing slash. */
export function hubEndpoint(env: NodeJS.ProcessEnv = process.env): string {
  return (env.HF_ENDPOINT || 'https://huggingface.co').replace(/\/+$/, '');
}

/**
 * The access token: `$HF_TOKEN`, `$HUGGING_FACE_HUB_TOKEN` (legacy), else the file written by
 * `huggingface-cli login` / `hf auth login` (`$HF_TOKEN_PATH`, else `<HF_HOME>/token`); undefined when none.
 */
export function hubToken(env: NodeJS.ProcessEnv = process.env): string | undefined {
  const t = env.HF_TOKEN || env.HUGGING_FACE_HUB_TOKEN;
  if (t) return t.trim();
  const file = env.HF_TOKEN_PATH || join(hfHome(env), 'token');
  try {
    const s = readFileSync(file, 'utf8').trim();
    return s || undefined;
  } catch {
    return undefined;
  }
}

/** `models--org--name` (huggingface_hub `repo_folder_name`: the type's plural, `/` → `--`). */
export function repoFolderName(repo: HubRepo): string {
  return [`${repo.type}s`, ...repo.id.split('/')].join('--');
}

/** The repo's folder in `cacheDir`. */
export function repoCacheDir(repo: HubRepo, cacheDir = hubCacheDir()): string {
  return join(cacheDir, repoFolderName(repo));
}

/** True when `rev` is a full commit sha (40 lowercase hex), as huggingface_hub's REGEX_COMMIT_HASH. */
export function isCommitHash(rev: string): boolean {
  return /^[0-9a-f]{40}$/.test(rev);
}

/**
 * The commit a revision names in the cache: the revision itself when it is a commit sha whose
 * snapshot folder exists, else the content of `refs/<revision>` (`main`, a tag, `refs/pr/1`);
 * undefined when the cache does not know it.
 */
export function cachedCommit(repo: HubRepo, revision: string, cacheDir = hubCacheDir()): string | undefined {
  const root = repoCacheDir(repo, cacheDir);
  if (isCommitHash(revision)) return existsSync(join(root, 'snapshots', revision)) ? revision : undefined;
  try {
    const c = readFileSync(join(root, 'refs', revision), 'utf8').trim();
    return isCommitHash(c) ? c : undefined;
  } catch {
    return undefined;
  }
}

/** The snapshot folder of `commit` (may not exist). */
export function snapshotDir(repo: HubRepo, commit: string, cacheDir = hubCacheDir()): string {
  return join(repoCacheDir(repo, cacheDir), 'snapshots', commit);
}

/** The blob path of `etag` and its `.incomplete` partner. */
export function blobPath(repo: HubRepo, etag: string, cacheDir = hubCacheDir()): { blob: string; incomplete: string } {
  const blob = join(repoCacheDir(repo, cacheDir), 'blobs', etag);
  return { blob, incomplete: `${blob}.incomplete` };
}

/** True when the snapshot holds `path` and its link resolves to a complete blob (not a dangling link). */
export function snapshotHas(repo: HubRepo, commit: string, path: string, cacheDir = hubCacheDir()): boolean {
  return existsSync(join(snapshotDir(repo, commit, cacheDir), path));
}

/**
 * Links `snapshots/<commit>/<path>` to `blobs/<etag>` with a relative symlink as huggingface_hub
 * does (`_create_symlink`: `../../blobs/<etag>`, one more `..` per folder of `path`); an existing
 * link or file there is replaced atomically (link to a temp name, then rename).
 */
export function linkSnapshotFile(repo: HubRepo, commit: string, path: string, etag: string, cacheDir = hubCacheDir()): string {
  const pointer = join(snapshotDir(repo, commit, cacheDir), path);
  const { blob } = blobPath(repo, etag, cacheDir);
  mkdirSync(dirname(pointer), { recursive: true });
  const target = relative(dirname(pointer), blob).split(sep).join('/');
  try {
    if (lstatSync(pointer).isSymbolicLink() && readlinkSync(pointer) === target) return pointer;
  } catch {
    /* not there yet */
  }
  const tmp = `${pointer}.${process.pid}.tmp-link`;
  rmSync(tmp, { force: true });
  symlinkSync(target, tmp);
  renameSync(tmp, pointer);
  return pointer;
}

/** Writes `refs/<revision>` = `commit` (not for a revision that is itself a commit sha), atomically. */
export function writeRef(repo: HubRepo, revision: string, commit: string, cacheDir = hubCacheDir()): void {
  if (isCommitHash(revision) || revision === commit) return;
  const ref = join(repoCacheDir(repo, cacheDir), 'refs', revision);
  mkdirSync(dirname(ref), { recursive: true });
  const tmp = `${ref}.${process.pid}.tmp`;
  writeFileSync(tmp, commit);
  renameSync(tmp, ref);
}
