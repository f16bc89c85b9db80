/**
 * Uploads to the Hugging Face Hub through `@huggingface/hub` (`createRepo`: `POST /api/repos/create`;
 * `uploadFiles`: `POST /api/…/preupload/<branch>`, the LFS batch API and its PUTs for large
 * files, `POST /api/…/commit/<branch>`). Used by `train --push-to-hub` (the PEFT adapter and its
 * model card) and `build-data --push-to-hub` (the dataset and its dataset card).
 */
import { openAsBlob, readdirSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { createRepo, HubApiError, uploadFiles } from '@huggingface/hub';
import { hubEndpoint, hubOffline, hubToken, type HubRepo } from './cache.js';
import { repoPage } from './download.js';

/** One file to upload: its path in the repo and its bytes (a local file, or text / bytes). */
export interface UploadFile {
  path: string;
  /** A local file path, or the content itself. */
  from: { file: string } | { content: string | Uint8Array };
}

/** Options of {@link pushToHub}. */
export interface PushOptions {
  /** Create the repo private (TRL hub_private_repo); an existing repo keeps its visibility. */
  private?: boolean;
  /** Commit title. */
  message: string;
  env?: NodeJS.ProcessEnv;
  fetch?: typeof fetch;
}

/** What {@link pushToHub} made. */
export interface PushResult {
  /** The repo page. */
  url: string;
  /** The commit sha, when the Hub gave it. */
  commit?: string;
}

/** Every file below `dir` as an {@link UploadFile} under `prefix` (sorted paths). */
export function filesOfDir(dir: string, prefix = ''): UploadFile[] {
  return readdirSync(dir)
    .sort()
    .flatMap((n) => {
      const p = join(dir, n);
      return statSync(p).isDirectory() ? filesOfDir(p, `${prefix}${n}/`) : [{ path: `${prefix}${n}`, from: { file: p } }];
    });
}

/**
 * Creates `repo` when it does not exist (409 = it does) and commits `files` to its `main` in one
 * commit. Needs a token with write access (HF_TOKEN or the `huggingface-cli login` token file).
 * Errors name the repo: no token, 401/403 (the token cannot write there), other Hub answers.
 */
export async function pushToHub(repo: HubRepo, files: UploadFile[], opts: PushOptions): Promise<PushResult> {
  const env = opts.env ?? process.env;
  const accessToken = hubToken(env);
  const what = `--push-to-hub ${repo.id}`;
  if (hubOffline(env)) throw new Error(`${what}: HF_HUB_OFFLINE=1: pushing needs the network (unset HF_HUB_OFFLINE)`);
  if (!accessToken) throw new Error(`${what}: pushing needs a Hub token with write access: HF_TOKEN=hf_… or \`huggingface-cli login\``);
  if (!/^[\w.-]+\/[\w.-]+$/.test(repo.id)) throw new Error(`${what}: the repo id must be org/name (your user name or an organization)`);
  const common = { hubUrl: hubEndpoint(env), accessToken, ...(opts.fetch && { fetch: opts.fetch }) };
  const hubRepo = { type: repo.type as 'model' | 'dataset', name: repo.id };
  try {
    await createRepo({ repo: hubRepo, ...(opts.private !== undefined && { private: opts.private }), ...common });
  } catch (e) {
    if (!(e instanceof HubApiError && e.statusCode === 409)) throw pushError(what, repo, e, env);
  }
  const blobs = await Promise.all(
    files.map(async (f) => ({
      path: f.path,
      content:
        'file' in f.from ? await openAsBlob(f.from.file) : new Blob([typeof f.from.content === 'string' ? f.from.content : new Uint8Array(f.from.content)]),
    })),
  );
  try {
    const out = await uploadFiles({ repo: hubRepo, files: blobs, commitTitle: opts.message, ...common });
    return { url: repoPage(repo, env), commit: out?.commit?.oid };
  } catch (e) {
    throw pushError(what, repo, e, env);
  }
}

function pushError(what: string, repo: HubRepo, e: unknown, env: NodeJS.ProcessEnv): Error {
  const msg = (e as Error)?.message ?? String(e);
  if (e instanceof HubApiError && (e.statusCode === 401 || e.statusCode === 403))
    return new Error(
      `${what}: the Hub answered ${e.statusCode} (${msg}): the token cannot write to ${repoPage(repo, env)} (a write token of the owner or a member of the organization is needed)`,
    );
  return new Error(`${what}: ${msg}`);
}
