/**
 * Fetches the files of one Hub repo revision into the huggingface_hub cache (lib/hub/cache.ts).
 * The HTTP is the maintained client's, `@huggingface/hub`: `modelInfo` / `datasetInfo`
 * (`GET /api/{models,datasets}/<id>/revision/<rev>`: the commit sha), `listFiles`
 * (`GET /api/…/tree/<commit>?recursive=true`: path, size, git oid, LFS sha256) and `downloadFile`
 * (`GET /<id>/resolve/<commit>/<path>`, a range request for the rest of a partial file).
 *
 * Each file goes to `blobs/<etag>.incomplete` first (appended to when a previous download left
 * one: resumed, as huggingface_hub does), is checked (size from the tree; sha256 against the LFS
 * oid, or the git blob sha1 `sha1("blob <size>\0" + bytes)` for a file kept in git), then renamed to
 * `blobs/<etag>` and linked from `snapshots/<commit>/<path>`; `refs/<revision>` gets the commit last.
 * A failure leaves at most an `.incomplete` file, never a blob or link that looks complete.
 */
import { createHash, type Hash } from 'node:crypto';
import { createReadStream, createWriteStream, existsSync, renameSync, rmSync, statSync, truncateSync } from 'node:fs';
import { mkdir } from 'node:fs/promises';
import { dirname, join } from 'node:path';
import { Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import type { ReadableStream as WebReadableStream } from 'node:stream/web';
import { datasetInfo, downloadFile, HubApiError, listFiles, modelInfo, type ListFileEntry } from '@huggingface/hub';
import cliProgress from 'cli-progress';
import { acquireLock, LockHeldError, type Lock } from '../util/lock.js';
import {
  blobPath,
  cachedCommit,
  hubCacheDir,
  hubEndpoint,
  hubOffline,
  hubToken,
  isCommitHash,
  linkSnapshotFile,
  repoFolderName,
  snapshotDir,
  snapshotHas,
  writeRef,
  type HubRepo,
} from './cache.js';

/** Options of {@link fetchRepoFiles}. */
export interface FetchRepoOptions {
  /** Branch, tag or commit sha (default `main`). */
  revision?: string;
  /** Which repo paths to fetch (the others are never downloaded). */
  select: (path: string) => boolean;
  /** Throws when the listing cannot serve the run (e.g. pickle weights only); gets every path of the revision. */
  checkListing?: (paths: string[]) => void;
  /** True when a cached snapshot dir already holds everything the run needs (then, for a commit sha or offline, nothing is asked of the network). */
  complete?: (dir: string) => boolean;
  /** The needed files a snapshot folder lacks (named in the offline error); default: none known. */
  missing?: (dir: string) => string[];
  /** Environment to read HF_* from (default process.env). */
  env?: NodeJS.ProcessEnv;
  /** fetch for the client (default the global one). */
  fetch?: typeof fetch;
  /** Progress and warnings (default stderr). */
  log?: (line: string) => void;
  /** Attempts per file when the connection fails mid-file (each resumes from the bytes kept); default 3. */
  attempts?: number;
}

/** What {@link fetchRepoFiles} resolved. */
export interface FetchedRepo {
  /** The snapshot folder (`<cache>/<repo>/snapshots/<commit>`). */
  dir: string;
  commit: string;
  /** Paths downloaded by this call (bytes fetched over the network). */
  downloaded: string[];
  /** True when the cache alone answered (offline, or a cached commit). */
  fromCache: boolean;
}

const MiB = 1024 * 1024;
const fmtBytes = (n: number) =>
  n >= 1024 * MiB ? `${(n / 1024 / MiB).toFixed(2)} GiB` : n >= MiB ? `${(n / MiB).toFixed(1)} MiB` : `${(n / 1024).toFixed(1)} KiB`;

/** `org/name` → the Hub page URL (where a gated repo's licence is accepted). */
export function repoPage(repo: HubRepo, env: NodeJS.ProcessEnv = process.env): string {
  return `${hubEndpoint(env)}/${repo.type === 'model' ? '' : `${repo.type}s/`}${repo.id}`;
}

const describe = (repo: HubRepo) => `${repo.type} ${repo.id}`;

/**
 * Rewrites a client error into one naming the repo and what to do: 401/403 (gated or private:
 * the licence page and the token sources), 404 (repo or revision not found), a token the client
 * refuses, a network failure. Other errors pass through with the repo named.
 */
export function hubError(repo: HubRepo, revision: string, e: unknown, env: NodeJS.ProcessEnv = process.env): Error {
  const msg = (e as Error)?.message ?? String(e);
  if (e instanceof HubApiError) {
    if (e.statusCode === 401 || e.statusCode === 403)
      return new Error(
        `${describe(repo)}: the Hub answered ${e.statusCode} (${msg}): the repo is gated or private. Accept its licence at ${repoPage(repo, env)} with your account, then give a token: HF_TOKEN=hf_… or \`huggingface-cli login\` (writes ${env.HF_TOKEN_PATH || '$HF_HOME/token'})${hubToken(env) ? ' (a token was sent: it lacks access to this repo)' : ' (no token was found)'}`,
      );
    if (e.statusCode === 404)
      return new Error(
        `${describe(repo)}: not found on ${hubEndpoint(env)} at revision ${revision} (${msg}): check the id and --revision (there is no local directory of that name either)`,
      );
    return new Error(`${describe(repo)}: the Hub answered ${e.statusCode}: ${msg}`);
  }
  if (e instanceof TypeError && /must start with 'hf_'/.test(msg))
    return new Error(`${describe(repo)}: the Hub token (HF_TOKEN or the token file) is not a Hub token: ${msg}`);
  if (isNetworkError(e))
    return new Error(
      `${describe(repo)}: cannot reach the Hub at ${hubEndpoint(env)} (${msg}${causeOf(e)}): no network? Set HF_HUB_OFFLINE=1 to use the Hub cache ${hubCacheDir(env)} only, give a local model directory, or point HF_ENDPOINT at a reachable mirror (there is no local directory of that name either)`,
    );
  return new Error(`${describe(repo)}: ${msg}`);
}

/** The underlying cause of a failed fetch (undici's `TypeError: fetch failed` keeps it in `cause`: code and message), as `: CODE message`. */
function causeOf(e: unknown): string {
  const c = (e as { cause?: unknown })?.cause as { code?: unknown; message?: unknown; errors?: { code?: unknown; message?: unknown }[] } | undefined;
  if (!c) return '';
  const first = c.message || !c.errors?.length ? c : c.errors[0]!;
  const code = typeof first.code === 'string' ? first.code : typeof c.code === 'string' ? c.code : '';
  const m = typeof first.message === 'string' ? first.message : String(c);
  return `: ${code && !m.includes(code) ? `${code} ` : ''}${m}`;
}

/** True for an error of the connection (refused, reset, DNS), not an answer of the Hub. */
function isNetworkError(e: unknown): boolean {
  if (e instanceof HubApiError) return e.statusCode >= 500;
  // The client's WebBlob.stream() aborts the stream with the error's message (a string): a failed
  // range request or a dropped connection mid-file, worth another attempt from the bytes kept.
  if (typeof e === 'string') return true;
  const m = `${(e as Error)?.message ?? ''} ${String((e as { cause?: unknown })?.cause ?? '')}`;
  return e instanceof TypeError || /fetch failed|ECONNREFUSED|ECONNRESET|ENOTFOUND|EAI_AGAIN|socket|terminated|aborted|premature/i.test(m);
}

/** The blob name huggingface_hub uses: the LFS sha256 oid, else the git blob oid (sha1). */
function etagOf(f: ListFileEntry): string {
  const e = f.lfs?.oid ?? f.oid;
  if (!e) throw new Error(`${f.path}: the Hub's tree gave no oid`);
  return e;
}

/** The hash an etag is checked with: sha256 of the bytes (LFS), else git's blob sha1 over "blob <size>\0" + bytes. */
function hasherOf(f: ListFileEntry): Hash {
  if (f.lfs) return createHash('sha256');
  const h = createHash('sha1');
  h.update(`blob ${f.size}\0`);
  return h;
}

/** Feeds `path`'s first `n` bytes to `h` (the part of a download kept from an earlier attempt). */
async function hashPrefix(path: string, n: number, h: Hash): Promise<void> {
  if (n === 0) return;
  for await (const chunk of createReadStream(path, { start: 0, end: n - 1 })) h.update(chunk as Buffer);
}

interface Progress {
  start(path: string, total: number, done: number): void;
  add(n: number): void;
  stop(ok: boolean): void;
}

/** A cli-progress bar with bytes and rate on a TTY; else one line per file when it completes. */
function progressBar(repo: HubRepo, log: (l: string) => void): Progress {
  const tty = process.stderr.isTTY === true;
  let bar: cliProgress.SingleBar | undefined;
  let path = '';
  let total = 0;
  let done = 0;
  let t0 = 0;
  let startBytes = 0;
  const rate = () => {
    const s = (Date.now() - t0) / 1000;
    return s > 0 ? `${fmtBytes((done - startBytes) / s)}/s` : '-';
  };
  return {
    start(p, tot, d) {
      path = p;
      total = tot;
      done = d;
      startBytes = d;
      t0 = Date.now();
      if (tty) {
        bar = new cliProgress.SingleBar(
          { format: `${repo.id} ${p} [{bar}] {percentage}% {bytes} {rate}`, hideCursor: true, clearOnComplete: false, stream: process.stderr },
          cliProgress.Presets.shades_classic,
        );
        bar.start(tot, d, { bytes: `${fmtBytes(d)}/${fmtBytes(tot)}`, rate: '-' });
      }
    },
    add(n) {
      done += n;
      bar?.update(done, { bytes: `${fmtBytes(done)}/${fmtBytes(total)}`, rate: rate() });
    },
    stop(ok) {
      bar?.stop();
      bar = undefined;
      if (ok && !tty)
        log(
          `hub: ${repo.id} ${path}: ${fmtBytes(done - startBytes)} in ${((Date.now() - t0) / 1000).toFixed(1)} s (${rate()})${startBytes ? `, resumed at ${fmtBytes(startBytes)}` : ''}`,
        );
    },
  };
}

/**
 * Waits for the download lock of one blob (`<cache>/.locks/<repo>/<etag>.papergym.lock`, beside
 * huggingface_hub's own `.lock` files): the data-parallel ranks of one run, or two commands, never
 * append to the same `.incomplete`. An OS lock (lib/util/lock.ts): a killed holder releases it.
 */
async function lockBlob(repo: HubRepo, etag: string, cacheDir: string, log: (l: string) => void): Promise<Lock> {
  const path = join(cacheDir, '.locks', repoFolderName(repo), `${etag}.papergym.lock`);
  let told = false;
  for (;;) {
    try {
      return acquireLock(path, `the download of ${repo.id} blob ${etag}`);
    } catch (e) {
      if (!(e instanceof LockHeldError)) throw e;
      if (!told) log(`hub: ${repo.id}: waiting for ${e.holder ? `pid ${e.holder.pid}` : 'another process'}, which is downloading blob ${etag}`);
      told = true;
      await new Promise((r) => setTimeout(r, 500));
    }
  }
}

/** Downloads one file into its blob (resuming `.incomplete`) under its lock, checks size and hash, links it into the snapshot. */
async function fetchFile(
  repo: HubRepo,
  commit: string,
  f: ListFileEntry,
  common: { hubUrl: string; accessToken?: string; fetch?: typeof fetch },
  cacheDir: string,
  attempts: number,
  progress: Progress,
  log: (l: string) => void,
): Promise<void> {
  const etag = etagOf(f);
  const { blob } = blobPath(repo, etag, cacheDir);
  await mkdir(dirname(blob), { recursive: true });
  const lock = await lockBlob(repo, etag, cacheDir, log);
  try {
    // Another process may have completed it while we waited.
    if (existsSync(blob) && statSync(blob).size === f.size) {
      linkSnapshotFile(repo, commit, f.path, etag, cacheDir);
      return;
    }
    await fetchBlob(repo, commit, f, common, cacheDir, attempts, progress);
    linkSnapshotFile(repo, commit, f.path, etag, cacheDir);
  } finally {
    lock.release();
  }
}

/** The download of one blob into `blobs/<etag>` through its `.incomplete` file, under its lock ({@link fetchFile}). */
async function fetchBlob(
  repo: HubRepo,
  commit: string,
  f: ListFileEntry,
  common: { hubUrl: string; accessToken?: string; fetch?: typeof fetch },
  cacheDir: string,
  attempts: number,
  progress: Progress,
): Promise<void> {
  const etag = etagOf(f);
  const { blob, incomplete } = blobPath(repo, etag, cacheDir);
  let lastErr: unknown;
  for (let attempt = 1; attempt <= attempts; attempt++) {
    let have = existsSync(incomplete) ? statSync(incomplete).size : 0;
    if (have > f.size) {
      truncateSync(incomplete, 0);
      have = 0;
    }
    const h = hasherOf(f);
    await hashPrefix(incomplete, have, h);
    progress.start(f.path, f.size, have);
    try {
      if (have < f.size) {
        const whole = await downloadFile({ repo: { type: repo.type, name: repo.id }, path: f.path, revision: commit, ...common });
        if (!whole) throw new Error(`${f.path}: not in the revision ${commit} (the tree listed it)`);
        const part = have > 0 ? whole.slice(have) : whole;
        await pipeline(
          Readable.fromWeb(part.stream() as unknown as WebReadableStream<Uint8Array>),
          async function* (src: AsyncIterable<Buffer>) {
            for await (const chunk of src) {
              h.update(chunk);
              progress.add(chunk.length);
              yield chunk;
            }
          },
          createWriteStream(incomplete, { flags: 'a' }),
        );
      }
      const got = statSync(incomplete).size;
      if (got !== f.size) {
        lastErr = new Error(`${f.path}: the download ended at ${got} of ${f.size} bytes`);
        progress.stop(false);
        continue;
      }
      const digest = h.digest('hex');
      if (digest !== etag) {
        rmSync(incomplete, { force: true });
        progress.stop(false);
        throw new Error(
          `${f.path}: ${f.lfs ? 'sha256' : 'git blob sha1'} of the ${f.size} downloaded bytes is ${digest}, the Hub lists ${etag}: the download is corrupt (removed; run again)`,
        );
      }
      renameSync(incomplete, blob);
      progress.stop(true);
      return;
    } catch (e) {
      progress.stop(false);
      const code = (e as NodeJS.ErrnoException).code;
      if (code === 'ENOSPC' || code === 'EDQUOT') {
        const kept = existsSync(incomplete) ? statSync(incomplete).size : 0;
        throw new Error(
          `${repo.id} ${f.path}: disk full writing ${incomplete} (${kept} of ${f.size} bytes kept there, resumed by the next run; nothing was marked complete): free space or set HF_HUB_CACHE to a larger disk`,
        );
      }
      if (!isNetworkError(e) || attempt === attempts) throw typeof e === 'string' ? new Error(`${repo.id} ${f.path}: ${e}`) : e;
      lastErr = e;
    }
  }
  throw lastErr instanceof Error ? lastErr : new Error(String(lastErr));
}

/**
 * Resolves `repo` at `revision` to a snapshot folder of the huggingface_hub cache holding the
 * selected files, fetching what is missing. Offline (`HF_HUB_OFFLINE=1`) only the cache answers;
 * online, a commit sha whose cached snapshot is `complete` needs no request, a branch or tag is
 * asked for its current commit (when the Hub cannot be reached, the cached `refs/<revision>` is
 * used with a warning, as huggingface_hub does).
 *
 * Errors: gated / private (401/403: the licence page), not found (404), the listing refused by
 * `checkListing`, a size or hash mismatch, disk full; each names the repo, and leaves no blob or
 * snapshot link of a file that is not complete.
 */
export async function fetchRepoFiles(repo: HubRepo, opts: FetchRepoOptions): Promise<FetchedRepo> {
  const env = opts.env ?? process.env;
  const log = opts.log ?? ((l: string) => process.stderr.write(`${l}\n`));
  const revision = opts.revision ?? 'main';
  const cacheDir = hubCacheDir(env);
  const complete = (dir: string) => existsSync(dir) && (opts.complete ? opts.complete(dir) : true);
  const cached = cachedCommit(repo, revision, cacheDir);
  if (hubOffline(env)) {
    if (cached && complete(snapshotDir(repo, cached, cacheDir)))
      return { dir: snapshotDir(repo, cached, cacheDir), commit: cached, downloaded: [], fromCache: true };
    const snap = cached && snapshotDir(repo, cached, cacheDir);
    const lacks = snap && existsSync(snap) ? (opts.missing?.(snap) ?? []) : [];
    const what = !cached
      ? 'this revision'
      : !existsSync(snap as string)
        ? `snapshot ${cached}: refs/${revision} points to it but snapshots/${cached} is absent (a dangling ref)`
        : `every file the run needs in snapshot ${cached}${lacks.length ? ` (missing: ${lacks.join(', ')})` : ''}`;
    const cli = `huggingface-cli download ${repo.type === 'model' ? '' : `--repo-type ${repo.type} `}${repo.id}${opts.revision !== undefined ? ` --revision ${revision}` : ''}`;
    throw new Error(
      `${describe(repo)}@${revision}: HF_HUB_OFFLINE=1 and the Hub cache ${cacheDir} does not hold ${what}: fetch it once online (or \`${cli}\`), or unset HF_HUB_OFFLINE (there is no local directory of that name either)`,
    );
  }
  if (cached && isCommitHash(revision) && complete(snapshotDir(repo, cached, cacheDir)))
    return { dir: snapshotDir(repo, cached, cacheDir), commit: cached, downloaded: [], fromCache: true };

  const token = hubToken(env);
  const common = { hubUrl: hubEndpoint(env), ...(token && { accessToken: token }), ...(opts.fetch && { fetch: opts.fetch }) };
  let commit: string;
  let files: ListFileEntry[];
  try {
    const info =
      repo.type === 'dataset'
        ? await datasetInfo({ name: repo.id, revision, additionalFields: ['sha'], ...common })
        : await modelInfo({ name: repo.id, revision, additionalFields: ['sha'], ...common });
    commit = (info as { sha?: string }).sha ?? '';
    if (!isCommitHash(commit)) throw new Error(`the Hub gave no commit sha for revision ${revision} (got ${JSON.stringify(commit)})`);
    files = [];
    for await (const f of listFiles({ repo: { type: repo.type, name: repo.id }, revision: commit, recursive: true, ...common }))
      if (f.type === 'file') files.push(f);
  } catch (e) {
    if (isNetworkError(e) && !(e instanceof HubApiError) && cached && complete(snapshotDir(repo, cached, cacheDir))) {
      log(
        `warning: ${describe(repo)}: the Hub (${common.hubUrl}) cannot be reached (${(e as Error).message}); using the cached snapshot ${cached} of ${revision}`,
      );
      return { dir: snapshotDir(repo, cached, cacheDir), commit: cached, downloaded: [], fromCache: true };
    }
    throw hubError(repo, revision, e, env);
  }
  opts.checkListing?.(files.map((f) => f.path));
  const want = files.filter((f) => opts.select(f.path));
  const progress = progressBar(repo, log);
  const downloaded: string[] = [];
  for (const f of want) {
    if (snapshotHas(repo, commit, f.path, cacheDir)) continue;
    try {
      await fetchFile(repo, commit, f, common, cacheDir, opts.attempts ?? 3, progress, log);
    } catch (e) {
      throw e instanceof HubApiError ? hubError(repo, revision, e, env) : e;
    }
    downloaded.push(f.path);
  }
  writeRef(repo, revision, commit, cacheDir);
  return { dir: snapshotDir(repo, commit, cacheDir), commit, downloaded, fromCache: downloaded.length === 0 };
}
