/**
 * A loopback HTTP server answering the Hugging Face Hub routes `@huggingface/hub` calls, for tests
 * (the Hub itself cannot be reached from CI). Repos hold real bytes at real commits; the routes
 * answer as the Hub documents them (huggingface.co/docs/hub/api; huggingface_hub's file_download.py
 * headers):
 *
 * - `GET /api/{models,datasets}/<id>/revision/<rev>` → `{ id, _id, sha, private, gated, siblings }`
 * - `GET /api/{models,datasets}/<id>/tree/<rev>[/<path>]?recursive=…` → `[{ type, path, size, oid, lfs? }]`
 * - `GET /[datasets/]<id>/resolve/<rev>/<path>` → the bytes; `Range: bytes=a-b` → 206 + Content-Range;
 *   `ETag` (the git blob sha1, or `X-Linked-ETag` the LFS sha256), `X-Repo-Commit`
 * - uploads: `POST /api/repos/create`, `POST /api/{models,datasets}/<id>/preupload/<rev>`,
 *   `POST /<id>.git/info/lfs/objects/batch` (+ the PUT it hands out), `POST /api/…/<id>/commit/<rev>`
 *   (NDJSON: header, file (base64), lfsFile (by oid)) making a new commit.
 *
 * Errors as the Hub gives them: 401 with `X-Error-Code: GatedRepo` for a repo with a `token` when the
 * request has none or another, 404 `RepoNotFound` / `RevisionNotFound` / `EntryNotFound`. `faults`
 * are consumed one per matching resolve request: `cut` sends the headers and half the bytes then
 * drops the connection, `500` answers 500.
 */
import { expect } from 'chai';
import { spawn } from 'node:child_process';
import { createHash, randomBytes } from 'node:crypto';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { python as pythonPath } from '../../lib/model/checkpoints.js';

/** One repo of the fake Hub. */
export interface FakeRepo {
  /** Commits by sha: path → bytes; `lfs` paths are stored as LFS (oid = sha256). */
  commits: Map<string, Map<string, Buffer>>;
  /** Branches and tags → commit sha. */
  refs: Map<string, string>;
  /** Paths kept in LFS (else in git). */
  lfs: Set<string>;
  /** When set, every request must carry `Authorization: Bearer <token>` (a gated repo). */
  token?: string;
  private?: boolean;
}

/** A fault for the next resolve request of `path` (any path when undefined). */
export interface HubFault {
  path?: string;
  kind: 'cut' | '500';
}

/** One request the server saw. */
export interface SeenRequest {
  method: string;
  url: string;
  range?: string;
  auth?: string;
}

export const gitBlobSha1 = (b: Buffer) => createHash('sha1').update(`blob ${b.length}\0`).update(b).digest('hex');
export const sha256 = (b: Buffer) => createHash('sha256').update(b).digest('hex');
const newSha = () => randomBytes(20).toString('hex');

/** The fake Hub. */
export class FakeHub {
  readonly repos = new Map<string, FakeRepo>();
  readonly seen: SeenRequest[] = [];
  readonly faults: HubFault[] = [];
  /** LFS objects uploaded through the batch API, by sha256. */
  readonly lfsStore = new Map<string, Buffer>();
  private server?: Server;
  url = '';

  /** Adds a repo (`key` = `model/org/name` or `dataset/org/name`) with one commit on `main`; returns the commit sha. */
  addRepo(key: string, files: Record<string, Buffer | string>, opts: { lfs?: string[]; token?: string; tag?: string } = {}): string {
    const sha = newSha();
    const repo: FakeRepo = { commits: new Map(), refs: new Map([['main', sha]]), lfs: new Set(opts.lfs ?? []), token: opts.token };
    repo.commits.set(sha, new Map(Object.entries(files).map(([p, b]) => [p, Buffer.isBuffer(b) ? b : Buffer.from(b)])));
    if (opts.tag) repo.refs.set(opts.tag, sha);
    this.repos.set(key, repo);
    return sha;
  }

  /** A new commit on `main` of repo `key` replacing the files given; returns its sha. */
  commit(key: string, files: Record<string, Buffer | string>): string {
    const repo = this.repos.get(key)!;
    const prev = repo.commits.get(repo.refs.get('main')!)!;
    const sha = newSha();
    const next = new Map(prev);
    for (const [p, b] of Object.entries(files)) next.set(p, Buffer.isBuffer(b) ? b : Buffer.from(b));
    repo.commits.set(sha, next);
    repo.refs.set('main', sha);
    return sha;
  }

  async start(): Promise<string> {
    this.server = createServer((req, res) => {
      this.handle(req, res).catch((e: Error) => {
        if (!res.headersSent) res.writeHead(500, { 'content-type': 'application/json' });
        res.end(JSON.stringify({ error: e.message }));
      });
    });
    await new Promise<void>((r) => this.server!.listen(0, '127.0.0.1', r));
    this.url = `http://127.0.0.1:${(this.server.address() as AddressInfo).port}`;
    return this.url;
  }

  async stop(): Promise<void> {
    if (!this.server) return;
    this.server.closeAllConnections();
    await new Promise<void>((r) => this.server!.close(() => r()));
  }

  private json(res: ServerResponse, status: number, body: unknown, headers: Record<string, string> = {}): void {
    res.writeHead(status, { 'content-type': 'application/json', ...headers });
    res.end(JSON.stringify(body));
  }

  private async body(req: IncomingMessage): Promise<Buffer> {
    const parts: Buffer[] = [];
    for await (const c of req) parts.push(c as Buffer);
    return Buffer.concat(parts);
  }

  /** The repo and commit for `type/id` at `rev`, or an error answer (401 gated, 404). */
  private lookup(
    req: IncomingMessage,
    res: ServerResponse,
    type: string,
    id: string,
    rev: string,
  ): { repo: FakeRepo; sha: string; files: Map<string, Buffer> } | undefined {
    const repo = this.repos.get(`${type}/${id}`);
    if (!repo) {
      this.json(res, 404, { error: 'Repository not found' }, { 'x-error-code': 'RepoNotFound' });
      return undefined;
    }
    if (repo.token && req.headers.authorization !== `Bearer ${repo.token}`) {
      this.json(
        res,
        401,
        { error: `Access to model ${id} is restricted. You must have access to it and be authenticated to access it. Please log in.` },
        { 'x-error-code': 'GatedRepo' },
      );
      return undefined;
    }
    const r = decodeURIComponent(rev);
    const sha = r === 'HEAD' ? repo.refs.get('main')! : repo.commits.has(r) ? r : repo.refs.get(r);
    if (!sha) {
      this.json(res, 404, { error: `Invalid rev id: ${r}` }, { 'x-error-code': 'RevisionNotFound' });
      return undefined;
    }
    return { repo, sha, files: repo.commits.get(sha)! };
  }

  private treeEntry(repo: FakeRepo, path: string, b: Buffer) {
    return {
      type: 'file',
      path,
      size: b.length,
      oid: repo.lfs.has(path)
        ? gitBlobSha1(Buffer.from(`version https://git-lfs.github.com/spec/v1\noid sha256:${sha256(b)}\nsize ${b.length}\n`))
        : gitBlobSha1(b),
      ...(repo.lfs.has(path) && { lfs: { oid: sha256(b), size: b.length, pointerSize: 134 } }),
    };
  }

  private async handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const u = new URL(req.url!, 'http://x');
    const path = decodeURIComponent(u.pathname);
    this.seen.push({ method: req.method!, url: u.pathname + u.search, range: req.headers.range, auth: req.headers.authorization });
    let m: RegExpExecArray | null;

    if ((m = /^\/api\/(models|datasets)\/([^/]+\/[^/]+)\/revision\/(.+)$/.exec(path))) {
      const hit = this.lookup(req, res, m[1]!.slice(0, -1), m[2]!, m[3]!);
      if (!hit) return;
      return this.json(res, 200, {
        _id: `id-${m[2]}`,
        id: m[2],
        sha: hit.sha,
        private: !!hit.repo.private,
        gated: hit.repo.token ? 'manual' : false,
        siblings: [...hit.files.keys()].map((rfilename) => ({ rfilename })),
      });
    }
    if ((m = /^\/api\/(models|datasets)\/([^/]+\/[^/]+)\/tree\/([^/]+)(?:\/(.*))?$/.exec(path)) && req.method === 'GET') {
      const hit = this.lookup(req, res, m[1]!.slice(0, -1), m[2]!, m[3]!);
      if (!hit) return;
      const under = m[4] ? `${m[4].replace(/\/+$/, '')}/` : '';
      const recursive = u.searchParams.get('recursive') === 'true';
      const out: unknown[] = [];
      const dirs = new Set<string>();
      for (const [p, b] of hit.files) {
        if (!p.startsWith(under)) continue;
        const rest = p.slice(under.length);
        if (!recursive && rest.includes('/')) {
          dirs.add(under + rest.split('/')[0]);
          continue;
        }
        out.push(this.treeEntry(hit.repo, p, b));
      }
      for (const d of dirs) out.push({ type: 'directory', path: d, size: 0, oid: newSha() });
      return this.json(res, 200, out);
    }
    if ((m = /^\/(?:(datasets)\/)?([^/]+\/[^/]+)\/resolve\/([^/]+)\/(.+)$/.exec(path)) && (req.method === 'GET' || req.method === 'HEAD')) {
      const hit = this.lookup(req, res, m[1] ? 'dataset' : 'model', m[2]!, m[3]!);
      if (!hit) return;
      const file = m[4]!;
      const b = hit.files.get(file);
      if (!b) return this.json(res, 404, { error: 'Entry not found' }, { 'x-error-code': 'EntryNotFound' });
      const fi = this.faults.findIndex((f) => !f.path || f.path === file);
      const range = req.headers.range;
      // The client's size probe (`bytes=0-0`) is never faulted: faults hit the transfer of the bytes.
      const probe = range === 'bytes=0-0';
      const headers: Record<string, string> = {
        etag: `"${gitBlobSha1(b)}"`,
        'x-repo-commit': hit.sha,
        'accept-ranges': 'bytes',
        'content-type': 'application/octet-stream',
        ...(hit.repo.lfs.has(file) && { 'x-linked-etag': `"${sha256(b)}"`, 'x-linked-size': String(b.length) }),
      };
      if (fi >= 0 && !probe) {
        const f = this.faults.splice(fi, 1)[0]!;
        if (f.kind === '500') return this.json(res, 500, { error: 'Internal Error - We are working hard to fix this' });
        // cut: promise the whole body, send half, drop the connection.
        res.writeHead(200, { ...headers, 'content-length': String(b.length) });
        res.write(b.subarray(0, b.length >> 1));
        await new Promise((r) => setTimeout(r, 20));
        res.socket?.destroy();
        return;
      }
      const rm = range ? /^bytes=(\d+)-(\d*)$/.exec(range) : null;
      if (rm) {
        const a = Number(rm[1]);
        const z = rm[2] ? Math.min(Number(rm[2]), b.length - 1) : b.length - 1;
        if (a >= b.length) {
          res.writeHead(416, { 'content-range': `bytes */${b.length}` });
          return void res.end();
        }
        res.writeHead(206, { ...headers, 'content-range': `bytes ${a}-${z}/${b.length}`, 'content-length': String(z - a + 1) });
        return void res.end(req.method === 'HEAD' ? undefined : b.subarray(a, z + 1));
      }
      res.writeHead(200, { ...headers, 'content-length': String(b.length) });
      return void res.end(req.method === 'HEAD' ? undefined : b);
    }
    if (path === '/api/repos/create' && req.method === 'POST') {
      if (!/^Bearer hf_/.test(req.headers.authorization ?? '')) return this.json(res, 401, { error: 'Invalid username or password.' });
      const body = JSON.parse((await this.body(req)).toString()) as { name: string; organization?: string; type?: string; visibility?: string };
      const id = body.organization ? `${body.organization}/${body.name}` : body.name;
      const key = `${body.type ?? 'model'}/${id}`;
      if (this.repos.has(key)) return this.json(res, 409, { error: 'You already created this model repo', url: `${this.url}/${id}` });
      const sha = newSha();
      this.repos.set(key, { commits: new Map([[sha, new Map()]]), refs: new Map([['main', sha]]), lfs: new Set(), private: body.visibility === 'private' });
      return this.json(res, 200, { url: `${this.url}/${id}`, name: id });
    }
    if ((m = /^\/api\/(models|datasets)\/([^/]+\/[^/]+)\/preupload\/(.+)$/.exec(path)) && req.method === 'POST') {
      const body = JSON.parse((await this.body(req)).toString()) as { files: { path: string; size: number; sample: string }[] };
      // Binary-looking files and anything over 10 MB go to LFS (the Hub's rule of thumb, .gitattributes aside).
      return this.json(res, 200, {
        files: body.files.map((f) => ({
          path: f.path,
          uploadMode: /\.(safetensors|parquet|bin)$/.test(f.path) || f.size > 10e6 ? 'lfs' : 'regular',
          shouldIgnore: false,
        })),
        commitOid: this.repos.get(`${m[1]!.slice(0, -1)}/${m[2]}`)?.refs.get('main'),
      });
    }
    if ((m = /^\/(?:(datasets)\/)?([^/]+\/[^/]+)\.git\/info\/lfs\/objects\/batch$/.exec(path)) && req.method === 'POST') {
      const body = JSON.parse((await this.body(req)).toString()) as { objects: { oid: string; size: number }[] };
      res.writeHead(200, { 'content-type': 'application/vnd.git-lfs+json' });
      return void res.end(
        JSON.stringify({
          transfer: 'basic',
          objects: body.objects.map((o) =>
            this.lfsStore.has(o.oid)
              ? { oid: o.oid, size: o.size }
              : { oid: o.oid, size: o.size, actions: { upload: { href: `${this.url}/lfs-upload/${o.oid}`, header: {} } } },
          ),
        }),
      );
    }
    if ((m = /^\/lfs-upload\/([0-9a-f]{64})$/.exec(path)) && req.method === 'PUT') {
      const b = await this.body(req);
      if (sha256(b) !== m[1]) return this.json(res, 400, { error: 'sha256 mismatch' });
      this.lfsStore.set(m[1]!, b);
      res.writeHead(200);
      return void res.end();
    }
    if ((m = /^\/api\/(models|datasets)\/([^/]+\/[^/]+)\/commit\/(.+)$/.exec(path)) && req.method === 'POST') {
      const key = `${m[1]!.slice(0, -1)}/${m[2]}`;
      const repo = this.repos.get(key);
      if (!repo) return this.json(res, 404, { error: 'Repository not found' }, { 'x-error-code': 'RepoNotFound' });
      if (!/^Bearer hf_/.test(req.headers.authorization ?? '')) return this.json(res, 401, { error: 'Invalid username or password.' });
      const lines = (await this.body(req)).toString().split('\n').filter(Boolean);
      const next = new Map(repo.commits.get(repo.refs.get('main')!)!);
      for (const l of lines) {
        const op = JSON.parse(l) as { key: string; value: { path: string; content?: string; encoding?: string; oid?: string } };
        if (op.key === 'file') next.set(op.value.path, Buffer.from(op.value.content!, 'base64'));
        else if (op.key === 'lfsFile') {
          const b = this.lfsStore.get(op.value.oid!);
          if (!b) return this.json(res, 400, { error: `lfs object ${op.value.oid} was not uploaded` });
          next.set(op.value.path, b);
          repo.lfs.add(op.value.path);
        } else if (op.key === 'deletedFile') next.delete(op.value.path);
      }
      const sha = newSha();
      repo.commits.set(sha, next);
      repo.refs.set('main', sha);
      return this.json(res, 200, { success: true, commitOid: sha, commitUrl: `${this.url}/${m[2]}/commit/${sha}`, hookOutput: '' });
    }
    this.json(res, 404, { error: `no route ${req.method} ${path}` });
  }
}

const py = pythonPath;

/**
 * Runs a Python snippet (asynchronously: the loopback Hub in this process must keep answering);
 * skips the test when huggingface_hub (or `mod`) is not installed (fails in CI).
 */
export async function python(ctx: Mocha.Context, code: string, env: NodeJS.ProcessEnv, mod = 'huggingface_hub'): Promise<string> {
  const r = await new Promise<{ status: number | null; stdout: string; stderr: string; error?: Error }>((res) => {
    const p = spawn(py, ['-c', code], { env: { ...process.env, ...env } });
    let stdout = '';
    let stderr = '';
    p.stdout.on('data', (b: Buffer) => (stdout += b.toString()));
    p.stderr.on('data', (b: Buffer) => (stderr += b.toString()));
    p.on('error', (error) => res({ status: null, stdout, stderr, error }));
    p.on('close', (status) => res({ status, stdout, stderr }));
  });
  if (r.error || (r.status !== 0 && new RegExp(`No module named '?${mod}`).test(r.stderr))) {
    if (process.env.CI) throw new Error(`python ${mod} unavailable in CI: ${r.error?.message ?? r.stderr}`);
    ctx.skip();
  }
  expect(r.status, r.stderr).to.equal(0);
  return r.stdout;
}
