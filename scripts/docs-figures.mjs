#!/usr/bin/env node
// Every figure and transcript of README.md and docs/*.md that a command prints is written here, from
// that command's output, between markers in the doc:
//
//   <!-- gen:NAME -->…text…<!-- /gen:NAME -->
//
// NAME is one of GENERATORS below. `--write` runs the commands and rewrites each region; `--check`
// (the default; test/docs-figures.test.ts runs it in the CPU suite, which CI runs) runs them and
// exits 1 naming each region whose text differs from what the commands print now. Text outside
// numbers must match exactly; numbers within the generator's relative tolerance (sizes move a little
// between toolchains; counts and transcripts are exact unless said). Elapsed times, ETAs and wall
// seconds are not compared. The commands run on what the npm package ships: the built CLI
// (dist/bin), data/ (the sample dataset, data/benchmarks) and the embedded default model.
//
// The mocha test checks the quick generators; CI (.github/workflows/prebuild.yml, CPU job) runs
// every one, the default train run and the served-judge transcript included.
//
// Usage: node scripts/docs-figures.mjs [--write | --check] [--only NAME,NAME] [--docs FILE,FILE] [--list]
import { execFileSync, spawn } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { homedir, tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = resolve(fileURLToPath(new URL('..', import.meta.url)));
const CLI = join(root, 'dist', 'bin', 'papergym-native.js');
const args = process.argv.slice(2);
const write = args.includes('--write');
const only = args.includes('--only') ? args[args.indexOf('--only') + 1].split(',') : undefined;
const MB = (b) => `${(b / 1e6).toFixed(2)} MB`;
const HOME = process.env.HOME || homedir();

/** Runs the CLI in `cwd`; returns stdout + stderr as the user sees them (stderr lines first in time order is not kept: stdout after stderr). */
function cli(cwd, argv, env = {}) {
  try {
    const out = execFileSync(process.execPath, [CLI, ...argv], {
      cwd,
      encoding: 'utf8',
      env: { ...process.env, CI: 'true', ...env },
      stdio: ['ignore', 'pipe', 'pipe'],
      maxBuffer: 64 << 20,
    });
    return { code: 0, out, err: '' };
  } catch (e) {
    return { code: e.status ?? 1, out: String(e.stdout ?? ''), err: String(e.stderr ?? '') };
  }
}

/** Runs a command and returns its console transcript (`$ command` then what it printed, stderr and stdout merged in order). */
function transcript(cwd, shown, argv, env = {}) {
  return new Promise((res, rej) => {
    const c = spawn(process.execPath, [CLI, ...argv], { cwd, env: { ...process.env, CI: 'true', ...env } });
    let text = '';
    c.stdout.on('data', (d) => (text += d));
    c.stderr.on('data', (d) => (text += d));
    c.on('error', rej);
    c.on('close', (code) => res({ code, text: `$ ${shown}\n${text}` }));
  });
}

/** Paths a user would not have: the temp work dir, the home dir. */
const clean = (text, work) =>
  text
    .split(work + '/')
    .join('')
    .split(work)
    .join('.')
    .split(HOME)
    .join('~')
    // A default judge cache under the user cache dir is named by a hash of the run's absolute paths
    // (lib/eval/run.ts evalJudgeCachePath): it differs in every work dir, so the docs show <hash>.
    .replace(/\/eval\/[0-9a-f]{16}\.([\w-]+)\.sqlite/g, '/eval/<hash>.$1.sqlite');

/** A generator that cannot measure here (no build, an inconsistent node_modules): its regions are left as they are, named. */
class Skip extends Error {}

/** State shared by the generators (one train run, one work dir). */
const ctx = { work: '', sizes: undefined, run: undefined };
const sizes = () =>
  (ctx.sizes ??= JSON.parse(execFileSync(process.execPath, [join(root, 'scripts', 'measure-sizes.mjs'), '--json'], { cwd: root, encoding: 'utf8' })));

/** The default `train` (no arguments but --out) in the work dir: its dir, once. */
function defaultRun() {
  if (ctx.run) return ctx.run;
  const r = cli(ctx.work, ['train', '--out', 'run']);
  if (r.code !== 0) throw new Error(`train exited ${r.code}: ${r.err.slice(-2000)}`);
  ctx.run = join(ctx.work, 'run');
  return ctx.run;
}

const SAMPLE = join(root, 'data', 'sample', 'papergym-sample.jsonl');
const FX = join(root, 'data', 'benchmarks');
/** The embedded default model's dir (made when absent, as the first `train` makes it). */
const MODEL = async () => (await import(join(root, 'dist', 'lib', 'train', 'run.js'))).ensureDefaultModel();

/** `import`s the shipped ResearchPlanGen ml/test file into the work dir as rpg-ml.jsonl (once). */
function rpgItems() {
  if (existsSync(join(ctx.work, 'rpg-ml.jsonl'))) return;
  const r = cli(ctx.work, [
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
    'rpg-ml.jsonl',
  ]);
  if (r.code !== 0) throw new Error(`import exited ${r.code}: ${r.err.slice(-2000)}`);
}

/** name → { tol (relative, for numbers), doc (where it is), run() → text }. */
const GENERATORS = {
  // README "What ships": the main package as `npm pack` builds it.
  package: {
    tol: 0.03,
    run: () => {
      const p = sizes().mainPackage;
      return `${p.files} files, ${MB(p.packed)} packed, ${MB(p.unpacked)} unpacked`;
    },
  },
  // README prebuilt variants: the CPU addon binary of a local build (varies with the toolchain).
  'cpu-addon': {
    tol: 0.05,
    run: () => {
      const b = sizes().localBinary;
      if (!b) throw new Skip('no build/Release/papergym_native.node (build the addon first)');
      return MB(b.addon);
    },
  },
  // README "What ships": the production dependency tree.
  deps: {
    tol: 0.1,
    run: () => {
      const n = sizes().productionNodeModules;
      if (n.treeProblems) throw new Skip('node_modules does not match package-lock.json (npm ls reports problems); run npm ci for a true count');
      const top = n.largest.slice(0, 3).map((s) => `\`${s.name}\` ${(s.bytes / 1e6).toFixed(0)} MB`);
      return `${n.packages} packages, ${(n.bytes / 1e6).toFixed(0)} MB of \`node_modules\` (mostly ${top.join(', ')})`;
    },
  },
  // README quick start: the lines of metrics.jsonl of the default run.
  'default-run-metrics': {
    tol: 0,
    run: () => {
      const rows = readFileSync(join(defaultRun(), 'metrics.jsonl'), 'utf8')
        .trim()
        .split('\n')
        .map((l) => JSON.parse(l));
      const steps = rows.filter((r) => typeof r.loss === 'number').length;
      const val = rows.filter((r) => r.validation !== undefined).length;
      const ckpt = rows.filter((r) => r.checkpoint !== undefined).length;
      return `the default run's ${rows.length} lines are ${steps} steps, ${val} validations and ${ckpt} checkpoints`;
    },
  },
  // docs/data.md: a domain mix on the embedded sample (its domains: computer science, astrophysics, economics).
  'subset-sample': {
    tol: 0,
    run: async () => {
      const t = await transcript(
        ctx.work,
        "papergym-native subset --data $SAMPLE --sizes 2,4 --domain-mix 'computer science=0.5,astrophysics=0.25,economics=0.25' --seed 1 --out-dir subsets",
        [
          'subset',
          '--data',
          SAMPLE,
          '--sizes',
          '2,4',
          '--domain-mix',
          'computer science=0.5,astrophysics=0.25,economics=0.25',
          '--seed',
          '1',
          '--out-dir',
          'subsets',
        ],
      );
      if (t.code !== 0) throw new Error(`subset exited ${t.code}: ${t.text}`);
      return (
        '```console\n$ SAMPLE=node_modules/papergym-native/data/sample/papergym-sample.jsonl   # data/sample/… in a checkout\n' +
        clean(t.text, ctx.work).split(SAMPLE).join('$SAMPLE') +
        '```'
      );
    },
  },
  // docs/eval.md §1: importing the shipped benchmark files.
  'eval-import': {
    tol: 0,
    run: async () => {
      const steps = [
        ['researchqa', ['--input', '$FX/researchqa', '--split', 'test', '--out', 'researchqa.jsonl']],
        ['research-plan-gen', ['--input', '$FX/research-plan-gen', '--config', 'ml', '--split', 'test', '--out', 'rpg-ml.jsonl']],
        ['rubrichub', ['--input', '$FX/rubrichub', '--out', 'rubrichub-science.jsonl']],
        ['healthbench', ['--input', '$FX/healthbench', '--out', 'healthbench.jsonl']],
      ];
      let text = '$ FX=node_modules/papergym-native/data/benchmarks   # data/benchmarks in a checkout\n';
      for (const [format, rest] of steps) {
        const argv = ['import', '--format', format, ...rest];
        const t = await transcript(
          ctx.work,
          `papergym-native ${argv.join(' ')}`,
          argv.map((a) => a.replace('$FX', FX)),
        );
        if (t.code !== 0) throw new Error(`import exited ${t.code}: ${t.text}`);
        text += clean(t.text, ctx.work).split(FX).join('$FX');
      }
      return '```console\n' + text + '```';
    },
  },
  // docs/eval.md §2: one benchmark with its own protocol (the default model, the local judge).
  'eval-one': {
    // The plans are sampled: another CPU's rounding may change a token or two.
    tol: 0.1,
    run: async () => {
      const M = await MODEL();
      rpgItems();
      const argv = [
        'eval',
        '--model',
        '$M',
        '--data',
        'rpg-ml.jsonl',
        '--judge',
        'local',
        '--max-new-tokens',
        '16',
        '--out',
        'rpg-rows.jsonl',
        '--plans',
        'rpg-plans.jsonl',
        '--report',
        'rpg.json',
      ];
      const t = await transcript(
        ctx.work,
        `papergym-native ${argv.join(' ')}`,
        argv.map((x) => (x === '$M' ? M : x)),
      );
      if (t.code !== 0) throw new Error(`eval exited ${t.code}: ${t.text}`);
      return '```console\n$ M=~/.cache/papergym-native/models/default-tiny-tied-s0\n' + clean(t.text, ctx.work) + '```';
    },
  },
  // docs/eval.md §3: Table 1 from a suite file (the base model and the default run's adapter).
  'eval-suite': {
    tol: 0.1,
    run: async () => {
      const M = await MODEL();
      const run = defaultRun();
      for (const argv of [
        ['import', '--format', 'researchqa', '--input', join(FX, 'researchqa'), '--split', 'test', '--out', 'researchqa.jsonl'],
        ['import', '--format', 'rubrichub', '--input', join(FX, 'rubrichub'), '--out', 'rubrichub-science.jsonl'],
      ]) {
        const r = cli(ctx.work, argv);
        if (r.code !== 0) throw new Error(`import exited ${r.code}: ${r.err.slice(-2000)}`);
      }
      rpgItems();
      const home = (p) => p.split(HOME).join('~');
      writeFileSync(
        join(ctx.work, 'suite.yaml'),
        `benchmarks:\n  - { name: ResearchQA, data: researchqa.jsonl }\n  - { name: RPG-ML, data: rpg-ml.jsonl }\n  - { name: RubricHub-Science, data: rubrichub-science.jsonl }\nmodels:\n  - { name: base, model: ${home(M)} }\n  - { name: OPSD→GRPO, model: ${home(M)}, adapter: ${join(run, 'final')} }\n`,
      );
      const argv = ['eval', '--suite', 'suite.yaml', '--out', 'suite-results', '--judge', 'local', '--max-new-tokens', '16'];
      const t = await transcript(ctx.work, `papergym-native ${argv.join(' ')}`, argv);
      if (t.code !== 0) throw new Error(`eval --suite exited ${t.code}: ${t.text}`);
      return '```console\n' + clean(t.text, ctx.work) + '```';
    },
  },
  // docs/eval.md §4: compare with a judge that mostly fails (the default model served, writing no verdict).
  'eval-compare-fail': {
    // The plans are sampled: another CPU's rounding may change a token or two of their lengths.
    tol: 0.1,
    run: async () => {
      const M = await MODEL();
      const run = defaultRun();
      rpgItems();
      for (const argv of [
        ['eval', '--model', M, '--data', 'rpg-ml.jsonl', '--judge', 'local', '--plans', 'base.plans.jsonl'],
        ['eval', '--model', M, '--adapter', join(run, 'final'), '--data', 'rpg-ml.jsonl', '--judge', 'local', '--plans', 'grpo.plans.jsonl'],
      ]) {
        const r = cli(ctx.work, argv);
        if (r.code !== 0) throw new Error(`${argv[0]} exited ${r.code}: ${r.err.slice(-2000)}`);
      }
      const serve = spawn(process.execPath, [CLI, 'serve', '--model', M, '--port', '0', '--exit-with-parent'], {
        cwd: ctx.work,
        stdio: ['ignore', 'pipe', 'ignore'],
      });
      try {
        const url = await new Promise((res, rej) => {
          let out = '';
          serve.stdout.on('data', (d) => {
            out += d;
            const m = / at (http:\/\/\S+)/.exec(out);
            if (m) res(m[1]);
          });
          serve.on('close', (c) => rej(new Error(`serve exited ${c}`)));
        });
        const argv = [
          'compare',
          '--data',
          'rpg-ml.jsonl',
          '--plans',
          'base=base.plans.jsonl',
          'grpo=grpo.plans.jsonl',
          '--judge',
          'http',
          '--judge-url',
          url,
          '--judge-model',
          'default-tiny-tied-s0',
          '--judge-max-tokens',
          '64',
          '--report',
          'cmp.json',
        ];
        const t = await transcript(ctx.work, `papergym-native ${argv.join(' ')}`.replace(url, 'http://127.0.0.1:18777/v1'), argv);
        if (t.code === 0) throw new Error('compare was expected to fail (a random model writes no verdict)');
        return '```console\n' + clean(t.text, ctx.work).split(url).join('http://127.0.0.1:18777/v1') + '```';
      } finally {
        serve.kill('SIGTERM');
      }
    },
  },
};

/** The docs holding regions (default README.md and docs/*.md; `--docs` names others, e.g. a test's copy). */
const DOCS = args.includes('--docs')
  ? args[args.indexOf('--docs') + 1].split(',').map((f) => resolve(f))
  : [
      'README.md',
      ...readdirSync(join(root, 'docs'))
        .filter((f) => f.endsWith('.md'))
        .map((f) => join('docs', f)),
    ];
const REGION = /<!-- gen:([\w-]+) -->([\s\S]*?)<!-- \/gen:\1 -->/g;

/** Text with what is never compared (elapsed times, ETAs, wall and per-phase seconds) blanked. */
const volatile = (t) =>
  t
    .replace(/\d+(\.\d+)?s elapsed/g, 'Ns elapsed')
    .replace(/ETA [^\s|]+/g, 'ETA ?')
    .replace(/\b\d+(\.\d+)?(s| s)\b/g, 'Ns');

/** Whether two texts agree: equal outside numbers, numbers within `tol` (relative). */
export function agrees(doc, now, tol) {
  const split = (t) => volatile(t).split(/(-?\d+(?:\.\d+)?)/);
  const a = split(doc);
  const b = split(now);
  if (a.length !== b.length) return false;
  for (let i = 0; i < a.length; i++) {
    if (i % 2 === 0) {
      if (a[i] !== b[i]) return false;
    } else {
      const x = Number(a[i]);
      const y = Number(b[i]);
      if (x !== y && Math.abs(x - y) > tol * Math.max(Math.abs(x), Math.abs(y))) return false;
    }
  }
  return true;
}

if (args.includes('--list')) {
  for (const n of Object.keys(GENERATORS)) console.log(n);
  process.exit(0);
}
ctx.work = mkdtempSync(join(tmpdir(), 'pg-docs-figures-'));
const made = new Map();
const drift = [];
const skipped = [];
try {
  for (const doc of DOCS) {
    const path = resolve(root, doc);
    const text = readFileSync(path, 'utf8');
    let changed = false;
    const regions = [...text.matchAll(REGION)].filter((m) => !only || only.includes(m[1]));
    let next = text;
    for (const m of regions) {
      const name = m[1];
      const g = GENERATORS[name];
      if (!g) throw new Error(`${doc}: unknown region gen:${name} (${Object.keys(GENERATORS).join(', ')})`);
      if (!made.has(name)) {
        try {
          made.set(name, await g.run());
        } catch (e) {
          if (!(e instanceof Skip)) throw e;
          made.set(name, e);
          skipped.push(`${doc}: gen:${name} not checked: ${e.message}`);
        }
      }
      const now = made.get(name);
      if (now instanceof Skip) continue;
      const inner = m[2].startsWith('\n') ? `\n${now}\n` : now;
      if (!agrees(m[2], inner, g.tol)) {
        drift.push(`${doc}: gen:${name}\n  doc: ${m[2].trim().slice(0, 400)}\n  now: ${inner.trim().slice(0, 400)}`);
        if (write) {
          next = next.replace(m[0], `<!-- gen:${name} -->${inner}<!-- /gen:${name} -->`);
          changed = true;
        }
      }
    }
    if (changed) writeFileSync(path, next);
  }
  const unused = Object.keys(GENERATORS).filter((n) => (!only || only.includes(n)) && !made.has(n));
  if (unused.length) console.log(`no region uses: ${unused.join(', ')}`);
} finally {
  rmSync(ctx.work, { recursive: true, force: true });
}
for (const s of skipped) console.log(s);
if (drift.length) {
  console.log(`${write ? 'rewrote' : 'drifted'} ${drift.length} region(s):\n${drift.join('\n')}`);
  if (!write) process.exit(1);
} else console.log(`docs figures: ${made.size} generator(s), every region current`);
