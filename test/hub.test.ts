/**
 * Models by Hub id (lib/hub): the huggingface_hub cache layout read and written both ways — a cache
 * we fill is read back by Python's huggingface_hub (`scan_cache_dir`, `try_to_load_from_cache`), one
 * huggingface_hub filled (its `hf_hub_download` against the same loopback Hub) is read by us — and
 * downloads through the real `@huggingface/hub` client against a loopback server answering the
 * Hub's routes (test/helpers/hub-server.ts): only the files a run needs, refs by branch / tag /
 * commit, 401 (gated: the licence page), 404, a connection cut mid-file and a 500 (resumed with a
 * range request from the bytes kept), a partial `.incomplete` of an earlier run resumed, disk full
 * (nothing marked complete), HF_HUB_OFFLINE, the token file, pickle-only repos refused.
 * Python checks skip when huggingface_hub is missing (fail in CI).
 */
import { expect } from 'chai';
import { spawn } from 'node:child_process';
import { existsSync, lstatSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, readlinkSync, rmSync, statSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { blobPath, cachedCommit, repoFolderName, resolveDatasetRef, resolveModelRef, type HubRepo } from '../lib/hub/index.js';
import { FakeHub, gitBlobSha1, python, sha256 } from './helpers/hub-server.js';
import { CLI, orSkip } from './helpers/run.js';
import { packageRoot } from '../lib/native.js';
import { tinyModel } from './helpers/tiny.js';

/** Deterministic pseudo-random bytes (a stand-in for weights: the content is checked byte for byte). */
function bytes(n: number, seed: number): Buffer {
  const b = Buffer.alloc(n);
  let x = seed >>> 0 || 1;
  for (let i = 0; i < n; i++) {
    x ^= x << 13;
    x ^= x >>> 17;
    x ^= x << 5;
    b[i] = x & 0xff;
  }
  return b;
}

const MODEL = 'org/tiny-model';
const modelRepo: HubRepo = { type: 'model', id: MODEL };
const WEIGHTS = bytes(3 * 1024 * 1024 + 17, 7);
const FILES = {
  'config.json': JSON.stringify({ model_type: 'qwen3', vocab_size: 16 }),
  'generation_config.json': '{"do_sample": true}',
  'model.safetensors': WEIGHTS,
  'tokenizer.json': '{"model":{"vocab":{"a":0}}}',
  'tokenizer_config.json': '{"chat_template": "{{ messages }}"}',
  'README.md': '# not needed by a run',
  'pytorch_model.bin': bytes(1000, 3),
  'onnx/model.onnx': bytes(500, 4),
};

describe('hub: models by id into the huggingface_hub cache', function () {
  this.timeout(60000);
  const hub = new FakeHub();
  let root: string;
  let env: NodeJS.ProcessEnv;
  let main: string;
  const logs: string[] = [];
  const log = (l: string) => logs.push(l);

  before(async () => {
    await hub.start();
    main = hub.addRepo(`model/${MODEL}`, FILES, { lfs: ['model.safetensors', 'pytorch_model.bin', 'onnx/model.onnx'], tag: 'v1.0' });
  });
  after(() => hub.stop());
  beforeEach(() => {
    root = mkdtempSync(join(tmpdir(), 'pg-hub-'));
    env = { HF_HOME: join(root, 'home'), HF_HUB_CACHE: join(root, 'cache'), HF_ENDPOINT: hub.url };
    hub.seen.length = 0;
    hub.faults.length = 0;
    logs.length = 0;
  });
  afterEach(() => rmSync(root, { recursive: true, force: true }));

  it('downloads only the files a run needs, in the huggingface_hub layout (blobs by etag, relative snapshot links, refs/main)', async () => {
    const dir = await resolveModelRef(MODEL, { env, log });
    const repoDir = join(env.HF_HUB_CACHE!, 'models--org--tiny-model');
    expect(dir).to.equal(join(repoDir, 'snapshots', main));
    expect(readFileSync(join(repoDir, 'refs', 'main'), 'utf8')).to.equal(main);
    for (const f of ['config.json', 'generation_config.json', 'model.safetensors', 'tokenizer.json', 'tokenizer_config.json'])
      expect(existsSync(join(dir, f)), f).to.equal(true);
    for (const f of ['README.md', 'pytorch_model.bin', 'onnx/model.onnx']) expect(existsSync(join(dir, f)), f).to.equal(false);
    // LFS file → blob named by its sha256; git file → by its git blob sha1; links relative.
    expect(readlinkSync(join(dir, 'model.safetensors'))).to.equal(`../../blobs/${sha256(WEIGHTS)}`);
    expect(readlinkSync(join(dir, 'config.json'))).to.equal(`../../blobs/${gitBlobSha1(Buffer.from(FILES['config.json']))}`);
    expect(readFileSync(join(dir, 'model.safetensors')).equals(WEIGHTS)).to.equal(true);
    expect(hub.seen.some((r) => r.url.includes('pytorch_model.bin') || r.url.includes('README'))).to.equal(false);
    expect(
      logs.some((l) => /model\.safetensors: 3\.0 MiB in [\d.]+ s \([\d.]+ [KMG]iB\/s\)/.test(l)),
      logs.join('\n'),
    ).to.equal(true);
    // A second resolve of the branch asks for the commit and the tree, downloads nothing.
    hub.seen.length = 0;
    expect(await resolveModelRef(MODEL, { env, log })).to.equal(dir);
    expect(hub.seen.filter((r) => r.url.includes('/resolve/'))).to.have.length(0);
    // A commit sha already complete in the cache needs no request at all.
    hub.seen.length = 0;
    expect(await resolveModelRef(MODEL, { env, log, revision: main })).to.equal(dir);
    expect(hub.seen).to.have.length(0);
  });

  it('is read back by Python huggingface_hub: scan_cache_dir and try_to_load_from_cache', async function () {
    const dir = await resolveModelRef(MODEL, { env, log });
    const out = await python(
      this,
      [
        'import json, huggingface_hub as h',
        'info = h.scan_cache_dir()',
        'repo = [r for r in info.repos if r.repo_id == "org/tiny-model"][0]',
        'rev = list(repo.revisions)[0]',
        'p = h.try_to_load_from_cache("org/tiny-model", "model.safetensors")',
        'q = h.try_to_load_from_cache("org/tiny-model", "config.json", revision="' + main + '")',
        'print(json.dumps({"warnings": [str(w) for w in info.warnings], "type": repo.repo_type, "refs": sorted(rev.refs), "commit": rev.commit_hash, "files": sorted(f.file_name for f in rev.files), "size": repo.size_on_disk, "p": p, "q": q}))',
      ].join('\n'),
      { HF_HUB_CACHE: env.HF_HUB_CACHE, HF_HUB_OFFLINE: '1' },
    );
    const r = JSON.parse(out) as { warnings: string[]; type: string; refs: string[]; commit: string; files: string[]; size: number; p: string; q: string };
    expect(r.warnings).to.deep.equal([]);
    expect(r.type).to.equal('model');
    expect(r.refs).to.deep.equal(['main']);
    expect(r.commit).to.equal(main);
    expect(r.files).to.deep.equal(['config.json', 'generation_config.json', 'model.safetensors', 'tokenizer.json', 'tokenizer_config.json']);
    expect(r.p).to.equal(join(dir, 'model.safetensors'));
    expect(r.q).to.equal(join(dir, 'config.json'));
  });

  it("reads a cache that huggingface_hub's hf_hub_download filled (offline: no request)", async function () {
    await python(
      this,
      [
        'import huggingface_hub as h',
        'for f in ["config.json", "model.safetensors", "tokenizer.json", "generation_config.json"]:',
        '    h.hf_hub_download("org/tiny-model", f, revision="v1.0")',
      ].join('\n'),
      { HF_HUB_CACHE: env.HF_HUB_CACHE, HF_ENDPOINT: hub.url, HF_HUB_DISABLE_XET: '1', HF_HUB_DISABLE_TELEMETRY: '1' },
    );
    expect(cachedCommit(modelRepo, 'v1.0', env.HF_HUB_CACHE)).to.equal(main);
    hub.seen.length = 0;
    const dir = await resolveModelRef(MODEL, { env: { ...env, HF_HUB_OFFLINE: '1' }, revision: 'v1.0', log });
    expect(hub.seen).to.have.length(0);
    expect(readFileSync(join(dir, 'model.safetensors')).equals(WEIGHTS)).to.equal(true);
    // Online, their files are reused: only the one a run also reads that they did not fetch is downloaded.
    const again = await resolveModelRef(MODEL, { env, revision: 'v1.0', log });
    expect(again).to.equal(dir);
    expect([...new Set(hub.seen.filter((r) => r.url.includes('/resolve/')).map((r) => r.url.split('/').pop()))]).to.deep.equal(['tokenizer_config.json']);
  });

  it('HF_HUB_OFFLINE=1 never touches the network: a missing model is a clear error', async () => {
    let err: Error | undefined;
    await resolveModelRef(MODEL, { env: { ...env, HF_HUB_OFFLINE: '1' }, log }).catch((e: Error) => (err = e));
    expect(err?.message).to.match(/HF_HUB_OFFLINE=1 and the Hub cache .* does not hold this revision/);
    expect(hub.seen).to.have.length(0);
  });

  it('no network: the error names the endpoint, the cause (ECONNREFUSED) and HF_HUB_OFFLINE=1 / a local directory', async () => {
    const { createServer } = await import('node:net');
    const srv = createServer();
    await new Promise<void>((r) => srv.listen(0, '127.0.0.1', r));
    const port = (srv.address() as { port: number }).port;
    await new Promise<void>((r) => srv.close(() => r()));
    const endpoint = `http://127.0.0.1:${port}`;
    const err = await resolveModelRef('not-a/real-model-xyz', { env: { ...env, HF_ENDPOINT: endpoint }, log, attempts: 1 }).catch((e: Error) => e);
    expect((err as Error).message).to.include(
      `model not-a/real-model-xyz: cannot reach the Hub at ${endpoint} (fetch failed: connect ECONNREFUSED 127.0.0.1:${port})`,
    );
    expect((err as Error).message).to.include(`HF_HUB_OFFLINE=1 to use the Hub cache ${env.HF_HUB_CACHE} only`);
    expect((err as Error).message).to.include('local model directory');
  });

  it('offline: names the files a cached snapshot lacks, a dangling refs/<rev>, and --revision in the download line', async () => {
    const dir = await resolveModelRef(MODEL, { env, log });
    rmSync(join(dir, 'tokenizer.json'));
    const off = { ...env, HF_HUB_OFFLINE: '1' };
    const e1 = (await resolveModelRef(MODEL, { env: off, log }).catch((e: Error) => e)) as Error;
    expect(e1.message).to.include(`every file the run needs in snapshot ${main} (missing: tokenizer.json)`);
    expect(e1.message).to.include(`\`huggingface-cli download ${MODEL}\``);
    const ghost = 'a'.repeat(40);
    writeFileSync(join(env.HF_HUB_CACHE!, repoFolderName(modelRepo), 'refs', 'v9'), ghost);
    const e2 = (await resolveModelRef(MODEL, { env: off, log, revision: 'v9' }).catch((e: Error) => e)) as Error;
    expect(e2.message).to.include(`refs/v9 points to it but snapshots/${ghost} is absent (a dangling ref)`);
    expect(e2.message).to.include(`\`huggingface-cli download ${MODEL} --revision v9\``);
  });

  it('resolves --revision by tag and by commit; a new commit on main moves refs/main', async () => {
    const byTag = await resolveModelRef(MODEL, { env, log, revision: 'v1.0' });
    expect(readFileSync(join(env.HF_HUB_CACHE!, repoFolderName(modelRepo), 'refs', 'v1.0'), 'utf8')).to.equal(main);
    const next = hub.commit(`model/${MODEL}`, { 'config.json': JSON.stringify({ model_type: 'qwen3', vocab_size: 32 }) });
    try {
      const latest = await resolveModelRef(MODEL, { env, log });
      expect(latest).to.equal(join(env.HF_HUB_CACHE!, repoFolderName(modelRepo), 'snapshots', next));
      expect(JSON.parse(readFileSync(join(latest, 'config.json'), 'utf8')).vocab_size).to.equal(32);
      // The unchanged weights are the same blob, fetched once.
      expect(hub.seen.filter((r) => r.url.includes('model.safetensors') && r.range !== 'bytes=0-0')).to.have.length(1);
      expect(await resolveModelRef(MODEL, { env, log, revision: main })).to.equal(byTag);
    } finally {
      hub.repos.get(`model/${MODEL}`)!.refs.set('main', main);
    }
  });

  it('a gated repo: 401 names the licence page; the token of `huggingface-cli login` ($HF_HOME/token) opens it', async () => {
    hub.addRepo(
      'model/org/gated',
      { 'config.json': '{}', 'model.safetensors': bytes(100, 9), 'tokenizer.json': '{}' },
      { lfs: ['model.safetensors'], token: 'hf_secret' },
    );
    let err: Error | undefined;
    await resolveModelRef('org/gated', { env, log }).catch((e: Error) => (err = e));
    expect(err?.message).to.include(`the Hub answered 401`);
    expect(err?.message).to.include(`Accept its licence at ${hub.url}/org/gated`);
    expect(err?.message).to.include('no token was found');
    mkdirSync(env.HF_HOME!, { recursive: true });
    writeFileSync(join(env.HF_HOME!, 'token'), 'hf_secret\n');
    const dir = await resolveModelRef('org/gated', { env, log });
    expect(existsSync(join(dir, 'model.safetensors'))).to.equal(true);
    expect(hub.seen.filter((r) => r.url.includes('/resolve/')).every((r) => r.auth === 'Bearer hf_secret')).to.equal(true);
  });

  it('not found: an unknown repo, an unknown revision, a path that is no id', async () => {
    const e1 = await resolveModelRef('org/missing', { env, log }).catch((e: Error) => e);
    expect((e1 as Error).message).to.match(/model org\/missing: not found on http:\/\/127\.0\.0\.1:\d+ at revision main/);
    const e2 = await resolveModelRef(MODEL, { env, log, revision: 'nope' }).catch((e: Error) => e);
    expect((e2 as Error).message).to.match(/not found .* at revision nope/);
    // No Hub id (a path): passed on as given, for the loader to name; nothing asked of the Hub.
    hub.seen.length = 0;
    expect(await resolveModelRef('./no/such/dir', { env, log })).to.equal('./no/such/dir');
    expect(await resolveModelRef('/abs/dir', { env, log })).to.equal('/abs/dir');
    expect(hub.seen).to.have.length(0);
  });

  it('refuses a repo with pickle weights only before downloading anything', async () => {
    hub.addRepo('model/org/pickled', { 'config.json': '{}', 'pytorch_model.bin': bytes(100, 5), 'tokenizer.json': '{}' }, { lfs: ['pytorch_model.bin'] });
    const e = await resolveModelRef('org/pickled', { env, log }).catch((x: Error) => x);
    expect((e as Error).message).to.match(/pickle weights only \(pytorch_model\.bin\), no safetensors: refused/);
    expect(hub.seen.filter((r) => r.url.includes('/resolve/'))).to.have.length(0);
  });

  it('a connection cut mid-file then a 500: resumed from the bytes kept (Range), checked by sha256', async () => {
    hub.faults.push({ path: 'model.safetensors', kind: 'cut' }, { path: 'model.safetensors', kind: '500' });
    const dir = await resolveModelRef(MODEL, { env, log });
    expect(readFileSync(join(dir, 'model.safetensors')).equals(WEIGHTS)).to.equal(true);
    const gets = hub.seen.filter((r) => r.url.endsWith('/model.safetensors') && r.range !== 'bytes=0-0');
    expect(gets.length).to.equal(3);
    expect(gets[0]!.range).to.equal(undefined);
    // The cut sent half the file; the next attempts ask for the rest only.
    const half = WEIGHTS.length >> 1;
    expect(gets[1]!.range).to.match(/^bytes=\d+-\d+$/);
    const from = Number(/bytes=(\d+)-/.exec(gets[2]!.range!)![1]);
    expect(from).to.be.greaterThan(0).and.at.most(half);
    expect(gets[2]!.range).to.equal(`bytes=${from}-${WEIGHTS.length - 1}`);
    expect(existsSync(blobPath(modelRepo, sha256(WEIGHTS), env.HF_HUB_CACHE).incomplete)).to.equal(false);
  });

  it("resumes an earlier run's .incomplete file, as huggingface_hub does", async () => {
    const { incomplete } = blobPath(modelRepo, sha256(WEIGHTS), env.HF_HUB_CACHE);
    mkdirSync(join(incomplete, '..'), { recursive: true });
    writeFileSync(incomplete, WEIGHTS.subarray(0, 1_000_000));
    const dir = await resolveModelRef(MODEL, { env, log });
    expect(readFileSync(join(dir, 'model.safetensors')).equals(WEIGHTS)).to.equal(true);
    const get = hub.seen.filter((r) => r.url.endsWith('/model.safetensors') && r.range !== 'bytes=0-0');
    expect(get.map((r) => r.range)).to.deep.equal([`bytes=1000000-${WEIGHTS.length - 1}`]);
    expect(
      logs.some((l) => /resumed at 976\.6 KiB/.test(l)),
      logs.join('\n'),
    ).to.equal(true);
  });

  it('a corrupt partial file (wrong bytes) fails the sha256 check and is removed, never linked', async () => {
    const { blob, incomplete } = blobPath(modelRepo, sha256(WEIGHTS), env.HF_HUB_CACHE);
    mkdirSync(join(incomplete, '..'), { recursive: true });
    writeFileSync(incomplete, Buffer.alloc(1000, 1));
    const e = await resolveModelRef(MODEL, { env, log }).catch((x: Error) => x);
    expect((e as Error).message).to.match(/model\.safetensors: sha256 of the \d+ downloaded bytes is [0-9a-f]{64}, the Hub lists [0-9a-f]{64}/);
    expect(existsSync(incomplete) || existsSync(blob)).to.equal(false);
    expect(cachedCommit(modelRepo, 'main', env.HF_HUB_CACHE)).to.equal(undefined);
    // The next run starts over and succeeds.
    expect(readFileSync(join(await resolveModelRef(MODEL, { env, log }), 'model.safetensors')).equals(WEIGHTS)).to.equal(true);
  });

  it('disk full: a clear error, nothing half-written left as a complete blob or link', async function () {
    if (!existsSync('/dev/full')) this.skip();
    const { blob, incomplete } = blobPath(modelRepo, sha256(WEIGHTS), env.HF_HUB_CACHE);
    mkdirSync(join(incomplete, '..'), { recursive: true });
    symlinkSync('/dev/full', incomplete); // every write there fails with ENOSPC
    const e = await resolveModelRef(MODEL, { env, log }).catch((x: Error) => x);
    expect((e as Error).message).to.match(/model\.safetensors: disk full writing .*\.incomplete .*nothing was marked complete/);
    expect(existsSync(blob)).to.equal(false);
    const snap = join(env.HF_HUB_CACHE!, repoFolderName(modelRepo), 'snapshots', main, 'model.safetensors');
    expect(() => lstatSync(snap)).to.throw();
    expect(cachedCommit(modelRepo, 'main', env.HF_HUB_CACHE)).to.equal(undefined);
  });

  it('two concurrent fetches of one model (data-parallel ranks) download each blob once, under its lock', async () => {
    const [a, b] = await Promise.all([resolveModelRef(MODEL, { env, log }), resolveModelRef(MODEL, { env, log })]);
    expect(a).to.equal(b);
    expect(readFileSync(join(a, 'model.safetensors')).equals(WEIGHTS)).to.equal(true);
    expect(hub.seen.filter((r) => r.url.endsWith('/model.safetensors') && r.range !== 'bytes=0-0')).to.have.length(1);
    expect(
      logs.some((l) => new RegExp(`waiting for pid ${process.pid}, which is downloading blob`).test(l)),
      logs.join('\n'),
    ).to.equal(true);
  });

  it('an adapter id fetches only adapter_config.json and adapter_model.safetensors', async () => {
    hub.addRepo(
      'model/org/adapter',
      { 'adapter_config.json': '{"peft_type":"LORA"}', 'adapter_model.safetensors': bytes(64, 2), 'README.md': '---\nlibrary_name: peft\n---\n' },
      { lfs: ['adapter_model.safetensors'] },
    );
    const dir = await resolveModelRef('hf://org/adapter', { env, log, kind: 'adapter' });
    expect(existsSync(join(dir, 'adapter_model.safetensors'))).to.equal(true);
    expect(existsSync(join(dir, 'README.md'))).to.equal(false);
    const e = await resolveModelRef(MODEL, { env, log, kind: 'adapter' }).catch((x: Error) => x);
    expect((e as Error).message).to.match(/no adapter_config\.json, adapter_model\.safetensors \(not a PEFT adapter repo\)/);
  });

  it('datasets by hf://datasets/org/name[/path]: the selected files only, then offline from the cache', async () => {
    hub.addRepo(
      'dataset/org/bench',
      {
        'README.md': '---\nconfigs: []\n---\n',
        'main/train-00000-of-00001.parquet': bytes(300, 11),
        'main/test-00000-of-00001.parquet': bytes(200, 12),
        'extra/test-00000-of-00001.parquet': bytes(100, 13),
      },
      { lfs: ['main/train-00000-of-00001.parquet', 'main/test-00000-of-00001.parquet', 'extra/test-00000-of-00001.parquet'] },
    );
    const test = (rel: string) => rel.includes('test-');
    const r = await resolveDatasetRef('hf://datasets/org/bench/main', { env, log, select: test });
    expect(r.root).to.equal(join(r.dir, 'main'));
    expect(r.files.map((f) => f.slice(r.dir.length + 1))).to.deep.equal(['main/test-00000-of-00001.parquet']);
    expect(r.dir).to.include(join('datasets--org--bench', 'snapshots'));
    expect(hub.seen.some((q) => q.url.includes('train-'))).to.equal(false);
    hub.seen.length = 0;
    const off = await resolveDatasetRef('hf://datasets/org/bench', { env: { ...env, HF_HUB_OFFLINE: '1' }, log, select: test });
    expect(off.files.map((f) => f.slice(off.dir.length + 1))).to.deep.equal(['main/test-00000-of-00001.parquet']);
    expect(hub.seen).to.have.length(0);
    const e = await resolveDatasetRef('hf://datasets/org/bench', { env, log, select: (rel) => rel.includes('valid') }).catch((x: Error) => x);
    expect((e as Error).message).to.match(/no file to read in the repo \(it has: README\.md, main\/train/);
    // No selection: the whole repo but .gitattributes, the card included (datasets.load_dataset reads its configs).
    const whole = await resolveDatasetRef('hf://datasets/org/bench', { env, log });
    expect(whole.files.map((f) => f.slice(whole.dir.length + 1)).sort()).to.deep.equal([
      'README.md',
      'extra/test-00000-of-00001.parquet',
      'main/test-00000-of-00001.parquet',
      'main/train-00000-of-00001.parquet',
    ]);
  });
});

describe('hub: the commands take a model id (generate on the tiny Qwen3 served by the loopback Hub)', function () {
  this.timeout(180000);
  const hub = new FakeHub();
  let root: string;
  let model: string;

  before(async function () {
    model = await orSkip(this, () => tinyModel('tiny-tied'));
    await hub.start();
    const files: Record<string, Buffer> = {};
    for (const f of readdirSync(model)) if (statSync(join(model, f)).isFile()) files[f] = readFileSync(join(model, f));
    hub.addRepo('model/org/tiny-qwen3', files, { lfs: Object.keys(files).filter((f) => f.endsWith('.safetensors')), tag: 'v1' });
    root = mkdtempSync(join(tmpdir(), 'pg-hub-cli-'));
  });
  after(async () => {
    await hub.stop();
    if (root) rmSync(root, { recursive: true, force: true });
  });

  /** Runs the CLI with `env` added (asynchronously: the loopback Hub answers from this process). */
  const run = (args: string[], env: NodeJS.ProcessEnv) =>
    new Promise<{ code: number | null; out: string; err: string }>((res) => {
      const p = spawn(process.execPath, [CLI, ...args], { env: { ...process.env, CI: 'true', ...env } });
      let out = '';
      let err = '';
      p.stdout.on('data', (b: Buffer) => (out += b.toString()));
      p.stderr.on('data', (b: Buffer) => (err += b.toString()));
      p.on('close', (code) => res({ code, out, err }));
    });

  it('generate --model org/name --revision TAG fetches into the cache, then HF_HUB_OFFLINE=1 runs from it', async () => {
    const env = { HF_HUB_CACHE: join(root, 'cache'), HF_HOME: join(root, 'home'), HF_ENDPOINT: hub.url };
    const args = ['generate', '--model', 'org/tiny-qwen3', '--revision', 'v1', '--prompt', 'hi', '--max-new-tokens', '2', '--seed', '1', '--device', 'cpu'];
    const a = await run(args, env);
    expect(a.code, a.err).to.equal(0);
    expect(a.err).to.match(/hub: org\/tiny-qwen3 model\.safetensors: /);
    hub.seen.length = 0;
    const b = await run(args, { ...env, HF_HUB_OFFLINE: '1' });
    expect(b.code, b.err).to.equal(0);
    expect(hub.seen).to.have.length(0);
    expect(b.out).to.equal(a.out);
    const c = await run(['generate', '--model', 'org/absent', '--prompt', 'hi'], env);
    expect(c.code).to.not.equal(0);
    expect(c.err).to.match(/model org\/absent: not found on http:\/\/127\.0\.0\.1:\d+ at revision main/);
  });
});

describe('hub: import --input hf://datasets/… (the benchmark fixtures served by the loopback Hub)', function () {
  this.timeout(60000);
  const hub = new FakeHub();
  let root: string;
  const FX = join(packageRoot, 'data', 'benchmarks');
  const filesOf = (dir: string, pre = ''): Record<string, Buffer> =>
    Object.assign(
      {},
      ...readdirSync(dir).map((n) =>
        statSync(join(dir, n)).isDirectory() ? filesOf(join(dir, n), `${pre}${n}/`) : { [`${pre}${n}`]: readFileSync(join(dir, n)) },
      ),
    );
  before(async () => {
    await hub.start();
    hub.addRepo('dataset/realliyifei/ResearchQA', { ...filesOf(join(FX, 'researchqa')), 'README.md': '# ResearchQA' });
    const rpg = filesOf(join(FX, 'research-plan-gen'));
    hub.addRepo('dataset/facebook/research-plan-gen', rpg, { lfs: Object.keys(rpg) });
    root = mkdtempSync(join(tmpdir(), 'pg-hub-import-'));
  });
  after(async () => {
    await hub.stop();
    rmSync(root, { recursive: true, force: true });
  });

  const run = (args: string[], env: NodeJS.ProcessEnv) =>
    new Promise<{ code: number | null; out: string; err: string }>((res) => {
      const p = spawn(process.execPath, [CLI, ...args], { env: { ...process.env, CI: 'true', ...env } });
      let out = '';
      let err = '';
      p.stdout.on('data', (b: Buffer) => (out += b.toString()));
      p.stderr.on('data', (b: Buffer) => (err += b.toString()));
      p.on('close', (code) => res({ code, out, err }));
    });
  const items = (f: string) =>
    readFileSync(f, 'utf8')
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l) as { id: string; question: string; rubric: unknown[] });

  it('imports the same items as from the local files, fetching only the split asked for', async () => {
    const env = { HF_HUB_CACHE: join(root, 'cache'), HF_HOME: join(root, 'home'), HF_ENDPOINT: hub.url };
    const viaHub = join(root, 'rqa.jsonl');
    const local = join(root, 'rqa-local.jsonl');
    const a = await run(['import', '--format', 'researchqa', '--input', 'hf://datasets/realliyifei/ResearchQA', '--split', 'test', '--out', viaHub], env);
    expect(a.code, a.err).to.equal(0);
    const b = await run(['import', '--format', 'researchqa', '--input', join(FX, 'researchqa'), '--split', 'test', '--out', local], env);
    expect(b.code, b.err).to.equal(0);
    const strip = (xs: ReturnType<typeof items>) => xs.map(({ id, question, rubric }) => ({ id, question, rubric }));
    expect(strip(items(viaHub))).to.deep.equal(strip(items(local)));
    expect(hub.seen.some((q) => q.url.includes('valid.json') || q.url.includes('README'))).to.equal(false);
    // A config and split of a Parquet dataset in the {config}/{split}/ layout.
    const rpg = join(root, 'rpg.jsonl');
    hub.seen.length = 0;
    const c = await run(
      ['import', '--format', 'research-plan-gen', '--input', 'hf://datasets/facebook/research-plan-gen', '--config', 'ml', '--split', 'test', '--out', rpg],
      env,
    );
    expect(c.code, c.err).to.equal(0);
    const fetched = hub.seen.filter((q) => q.url.includes('/resolve/'));
    expect(fetched.length).to.be.greaterThan(0);
    expect(
      fetched.every((q) => q.url.includes('/ml/test/')),
      fetched.map((q) => q.url).join('\n'),
    ).to.equal(true);
    const d = await run(
      [
        'import',
        '--format',
        'research-plan-gen',
        '--input',
        join(FX, 'research-plan-gen'),
        '--config',
        'ml',
        '--split',
        'test',
        '--out',
        join(root, 'rpg-local.jsonl'),
      ],
      env,
    );
    expect(d.code, d.err).to.equal(0);
    expect(strip(items(rpg))).to.deep.equal(strip(items(join(root, 'rpg-local.jsonl'))));
  });
});
