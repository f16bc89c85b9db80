/**
 * Install without a compiler, as a user would: `scripts/prebuild.sh cpu --pack-dir`
 * packs the main package and the cpu prebuilt package (relinking the objects of this checkout's
 * ./build without its RUNPATH, so CI does not compile twice); both tarballs are installed into an
 * empty project whose PATH holds node, npm, python3 and a shell, plus stubs named cmake, g++, gcc,
 * c++, cc, make, ninja, nvcc, clang that record any call and fail. Then, from the installed package:
 * ESM import + a forward pass (logits equal to this checkout's addon), CommonJS with and without
 * require(esm), `doctor`, the embedded default `train` (1 OPSD + 1 GRPO step, caches in the
 * per-user cache dir), and the same forward pass after `npm install --ignore-scripts`.
 *
 * Only the package registry is used, as on this machine (no loopback stand-ins, no binary hosts):
 * SQLite's engine comes from libsql's per-platform registry package (lib/util/sqlite.ts), and npm
 * fetches every package from the registry or its cache (--prefer-offline; filled by npm ci).
 */
import { expect } from 'chai';
import { spawn, spawnSync, type SpawnSyncReturns } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, symlinkSync, writeFileSync, chmodSync, realpathSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { packageRoot } from '../lib/native.js';
import { loadModel } from '../lib/model/qwen3.js';
import { python, tinyModel } from './helpers/tiny.js';

const STUBS = ['cmake', 'g++', 'gcc', 'c++', 'cc', 'make', 'ninja', 'nvcc', 'clang', 'clang++', 'ld'];
const IDS = [9707, 11, 1879, 0, 151645];

function run(cmd: string, args: string[], opts: { cwd: string; env: NodeJS.ProcessEnv; timeout?: number }): SpawnSyncReturns<string> {
  return spawnSync(cmd, args, { cwd: opts.cwd, env: opts.env, encoding: 'utf8', timeout: opts.timeout ?? 300_000, maxBuffer: 64 << 20 });
}

/** Like run(), without blocking the event loop (the loopback release host answers meanwhile). */
function runAsync(cmd: string, args: string[], opts: { cwd: string; env: NodeJS.ProcessEnv; timeout?: number }): Promise<SpawnSyncReturns<string>> {
  return new Promise((res) => {
    const ch = spawn(cmd, args, { cwd: opts.cwd, env: opts.env, stdio: ['ignore', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    ch.stdout.on('data', (d) => (stdout += d));
    ch.stderr.on('data', (d) => (stderr += d));
    const t = setTimeout(() => ch.kill('SIGKILL'), opts.timeout ?? 300_000);
    ch.on('close', (status, signal) => {
      clearTimeout(t);
      res({ pid: ch.pid ?? 0, output: [null, stdout, stderr], stdout, stderr, status, signal });
    });
  });
}

function must(r: SpawnSyncReturns<string>, what: string): string {
  if (r.status !== 0) throw new Error(`${what} exited ${r.status ?? r.signal}:\n${(r.stdout ?? '').slice(-4000)}\n${(r.stderr ?? '').slice(-4000)}`);
  return r.stdout;
}

describe('install without a compiler (packed tarballs into a fresh project)', function () {
  this.timeout(900_000);
  let tmp = '';
  let packs: string[] = [];
  let env: NodeJS.ProcessEnv = {};
  let stubLog = '';
  let modelDir = '';
  let expected: Float32Array;
  let skipReason = '';

  before(async function () {
    const build = join(packageRoot, 'build');
    if (!existsSync(join(build, 'build.ninja')) || !existsSync(join(build, 'Release', 'papergym_preload.node'))) {
      skipReason = 'no ninja build with papergym_preload.node under ./build to relink (run scripts/setup.sh)';
    } else if (readFileSync(join(build, 'build.ninja'), 'utf8').includes('-DPG_WITH_CUDA')) {
      skipReason = './build was compiled with CUDA headers; the cpu prebuilt needs a CPU build to relink';
    } else if (spawnSync('npm', ['--version']).status !== 0) {
      skipReason = 'npm is not on PATH';
    }
    if (skipReason) {
      console.log(`    (skipped: ${skipReason})`);
      this.skip();
    }
    tmp = mkdtempSync(join(tmpdir(), 'pg-install-'));
    const realPython = spawnSync(python, ['-c', 'import sys; print(sys.executable)'], { encoding: 'utf8' }).stdout.trim();

    // 1. Pack: main package + @papergym-native/<platform>-torch<minor>-cpu.
    const packDir = join(tmp, 'packs');
    must(
      run('bash', ['scripts/prebuild.sh', 'cpu', '--pack-dir', packDir, '--reuse-build'], { cwd: packageRoot, env: { ...process.env, PYTHON: realPython } }),
      'scripts/prebuild.sh cpu',
    );
    packs = readdirSync(packDir)
      .filter((f) => f.endsWith('.tgz'))
      .map((f) => join(packDir, f));
    expect(packs.length).to.equal(2);

    // 2. PATH: node, npm, npx, python3 and a shell; compilers and build tools are recording stubs.
    const tools = join(tmp, 'tools');
    const stubs = join(tmp, 'stubs');
    mkdirSync(tools);
    mkdirSync(stubs);
    stubLog = join(tmp, 'compiler-calls.log');
    const which = (t: string) => spawnSync('sh', ['-c', `command -v ${t}`], { encoding: 'utf8' }).stdout.trim();
    for (const t of ['node', 'npm', 'npx', 'sh', 'bash', 'env']) symlinkSync(realpathSync(which(t)), join(tools, t));
    symlinkSync(realPython, join(tools, 'python3'));
    for (const s of STUBS) {
      writeFileSync(join(stubs, s), `#!/bin/sh\necho "${s} $*" >> '${stubLog}'\nexit 127\n`);
      chmodSync(join(stubs, s), 0o755);
    }
    env = {
      HOME: process.env.HOME,
      PATH: `${stubs}:${tools}`,
      PYTHON: realPython,
      TMPDIR: tmpdir(),
      PAPERGYM_NATIVE_CACHE_DIR: join(tmp, 'user-cache'),
      npm_config_update_notifier: 'false',
      OMP_NUM_THREADS: '2',
    };

    // The reference: this checkout's addon on the same tiny model and ids.
    modelDir = tinyModel('tiny-tied');
    const m = await loadModel(modelDir);
    try {
      const r = await m.forward({ inputIds: { data: Int32Array.from(IDS), shape: [1, IDS.length] } });
      expected = r.logits!.data;
    } finally {
      m.dispose();
    }
  });

  after(async () => {
    if (tmp) rmSync(tmp, { recursive: true, force: true });
  });

  async function install(name: string, extra: string[]): Promise<{ dir: string; out: string }> {
    const dir = join(tmp, name);
    mkdirSync(dir);
    writeFileSync(join(dir, 'package.json'), JSON.stringify({ name: `pg-consumer-${name}`, version: '1.0.0', private: true }));
    const r = await runAsync('npm', ['install', '--prefer-offline', '--no-audit', '--no-fund', '--foreground-scripts', ...extra, ...packs], { cwd: dir, env });
    const out = must(r, `npm install ${extra.join(' ')}`) + r.stderr;
    return { dir, out };
  }

  const FORWARD_ESM = `
    import { loadModel, doctor } from 'papergym-native';
    const m = await loadModel(process.argv[1]);
    const r = await m.forward({ inputIds: { data: Int32Array.from(${JSON.stringify(IDS)}), shape: [1, ${IDS.length}] } });
    process.stdout.write(JSON.stringify({ shape: r.logits.shape, logits: Array.from(r.logits.data), addon: doctor().addonPath }));
    m.dispose();`;

  function checkForward(out: string): string {
    const j = JSON.parse(out.trim().split('\n').pop()!) as { shape: number[]; logits: number[]; addon: string };
    expect(j.shape).to.deep.equal([1, IDS.length, 151936]);
    let maxDiff = 0;
    for (let i = 0; i < expected.length; i++) maxDiff = Math.max(maxDiff, Math.abs(j.logits[i] - expected[i]));
    expect(maxDiff).to.be.lessThan(1e-4);
    return j.addon;
  }

  let project = '';

  it('npm install takes the cpu prebuilt and never runs a compiler or cmake', async function () {
    const { dir, out } = await install('scripts', []);
    project = dir;
    expect(existsSync(stubLog), existsSync(stubLog) ? readFileSync(stubLog, 'utf8') : '').to.equal(false);
    expect(out).to.match(/papergym-native: using prebuilt @papergym-native\/linux-x64-torch[\d.]+-cpu/);
    const pkg = join(dir, 'node_modules', 'papergym-native');
    for (const p of ['build', '.cache', 'test', 'scripts/bench', 'dist/test', 'build-prebuild']) expect(existsSync(join(pkg, p)), p).to.equal(false);
    for (const p of ['LICENSE', 'README.md', 'docs/design.md', 'dist/lib/cjs/index.cjs', 'scripts/make_tiny_qwen3.py'])
      expect(existsSync(join(pkg, p)), p).to.equal(true);
  });

  it('imports from ESM and runs a forward pass with the prebuilt binary (same logits as this checkout)', function () {
    if (!project) this.skip();
    const addon = checkForward(must(run('node', ['--input-type=module', '-e', FORWARD_ESM, modelDir], { cwd: project, env }), 'ESM forward'));
    expect(addon).to.match(/node_modules\/@papergym-native\/linux-x64-torch[\d.]+-cpu\/papergym_native\.node$/);
  });

  it('requires from CommonJS, with require(esm) and without it (load())', function () {
    if (!project) this.skip();
    const withEsm = `
      const pg = require('papergym-native');
      if (typeof pg.loadModel !== 'function') throw new Error('no sync loadModel with require(esm)');
      pg.loadModel(process.argv[1]).then(async (m) => {
        const r = await m.forward({ inputIds: { data: Int32Array.from(${JSON.stringify(IDS)}), shape: [1, ${IDS.length}] } });
        process.stdout.write(JSON.stringify({ shape: r.logits.shape, logits: Array.from(r.logits.data), addon: pg.doctor().addonPath }));
        m.dispose();
      });`;
    checkForward(must(run('node', ['-e', withEsm, modelDir], { cwd: project, env }), 'CommonJS forward'));
    const noEsm = `
      const pg = require('papergym-native');
      if (pg.loadModel !== undefined) throw new Error('require(esm) should be off');
      pg.load().then(async (api) => {
        const m = await api.loadModel(process.argv[1]);
        const r = await m.forward({ inputIds: { data: Int32Array.from(${JSON.stringify(IDS)}), shape: [1, ${IDS.length}] } });
        process.stdout.write(JSON.stringify({ shape: r.logits.shape, logits: Array.from(r.logits.data), addon: api.doctor().addonPath }));
        m.dispose();
      });`;
    checkForward(
      must(run('node', ['--no-experimental-require-module', '-e', noEsm, modelDir], { cwd: project, env }), 'CommonJS forward without require(esm)'),
    );
  });

  it('doctor lists the candidates and why each was taken or skipped', function () {
    if (!project) this.skip();
    const j = JSON.parse(must(run('npx', ['papergym-native', 'doctor', '--json'], { cwd: project, env }), 'doctor')) as {
      addonPath: string;
      candidates: { name: string; source: string; status: string; reason: string }[];
      provider: { version: string };
    };
    const byName = Object.fromEntries(j.candidates.map((c) => [c.name, c]));
    expect(byName['local build'].status).to.equal('skipped');
    const cpu = j.candidates.find((c) => /-cpu$/.test(c.name))!;
    expect(cpu.status).to.equal('loaded');
    expect(cpu.reason).to.match(/test load passed/);
    // Every other variant of this torch is named with a reason (here: not installed, or refused).
    expect(j.candidates.filter((c) => c.source === 'prebuilt' && c !== cpu).every((c) => c.reason.length > 0)).to.equal(true);
  });

  it('the embedded default trains from the installed package; caches go to the per-user cache dir', function () {
    if (!project) this.skip();
    const out = join(project, 'run');
    must(
      run(
        'npx',
        [
          'papergym-native',
          'train',
          '--opsd-steps',
          '1',
          '--grpo-steps',
          '1',
          '--questions-per-step',
          '1',
          '--group-size',
          '2',
          '--max-new-tokens',
          '16',
          '--out',
          out,
        ],
        { cwd: project, env, timeout: 600_000 },
      ),
      'train',
    );
    expect(existsSync(join(out, 'summary.json'))).to.equal(true);
    const model = join(env.PAPERGYM_NATIVE_CACHE_DIR!, 'models', 'default-tiny-tied-s0');
    for (const f of ['tokenizer.json', 'config.json', 'model.safetensors', 'fingerprint.json']) expect(existsSync(join(model, f)), f).to.equal(true);
    expect(existsSync(join(project, 'node_modules', 'papergym-native', '.cache'))).to.equal(false);
    expect(readdirSync(dirname(model)).filter((f) => f.includes('.tmp-'))).to.deep.equal([]);
  });

  it('npm install --ignore-scripts works too: the binary is chosen at load time', async function () {
    const { dir } = await install('ignore-scripts', ['--ignore-scripts']);
    expect(existsSync(stubLog)).to.equal(false);
    const addon = checkForward(must(run('node', ['--input-type=module', '-e', FORWARD_ESM, modelDir], { cwd: dir, env }), 'ESM forward (--ignore-scripts)'));
    expect(addon).to.match(/-cpu\/papergym_native\.node$/);
  });

  it('SQLite (pipeline state, judge cache) works after --ignore-scripts: libsql from its registry package, no better-sqlite3', function () {
    const dir = join(tmp, 'ignore-scripts');
    if (!existsSync(dir)) this.skip();
    const nm = join(dir, 'node_modules');
    expect(existsSync(join(nm, 'better-sqlite3')), 'better-sqlite3 installed').to.equal(false);
    expect(existsSync(join(nm, '@libsql', `${process.platform}-${process.arch}-gnu`, 'index.node'))).to.equal(true);
    const code = `
      // Internal modules (not in the exports map) are read by file URL from the installed package.
      const pkg = new URL('./node_modules/papergym-native/dist/lib/', 'file://' + process.cwd() + '/');
      const { JudgeCache } = await import(new URL('judge/cache.js', pkg).href);
      const { sqliteEngine } = await import(new URL('util/sqlite.js', pkg).href);
      const path = process.argv[1];
      const a = new JudgeCache(path); a.set('k', { content: 'yes', promptTokens: 3, completionTokens: 1, prob: 0.75 });
      const b = new JudgeCache(path);
      process.stdout.write(JSON.stringify({ engine: sqliteEngine(), got: b.get('k') }));`;
    const out = must(
      run('node', ['--input-type=module', '-e', code, join(dir, 'cache', 'judge.sqlite')], { cwd: dir, env }),
      'SQLite from the installed package',
    );
    expect(JSON.parse(out)).to.deep.equal({ engine: 'libsql', got: { content: 'yes', promptTokens: 3, completionTokens: 1, prob: 0.75 } });
    expect(existsSync(stubLog)).to.equal(false);
  });

  it('falls back to a source build only when no binary matches, with one message, and leaves no build/ behind when it fails', async function () {
    const dir = join(tmp, 'ignore-scripts');
    if (!existsSync(dir)) this.skip();
    rmSync(join(dir, 'node_modules', '@papergym-native'), { recursive: true, force: true });
    const pkg = join(dir, 'node_modules', 'papergym-native');
    const r = run('node', [join(pkg, 'scripts', 'install.cjs')], { cwd: pkg, env });
    expect(r.status).to.equal(0); // a failed source build never fails npm install
    const out = r.stdout + r.stderr;
    expect(out.match(/no usable addon binary\. Looked for/g)?.length).to.equal(1);
    expect(out).to.match(/linux-x64-torch[\d.]+-cpu: not installed/);
    expect(out).to.match(/building from source \(cmake-js\)/);
    expect(out).to.match(/the native addon was NOT built/);
    // The source build was attempted (the cmake stub recorded it) and removed what it left.
    expect(readFileSync(stubLog, 'utf8')).to.match(/^cmake /m);
    expect(existsSync(join(pkg, 'build'))).to.equal(false);
  });
});
