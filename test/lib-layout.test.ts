/**
 * The rooms of lib/, read from the source tree: a room is a folder of lib/ (lib/judge/, its
 * subfolders included) or one file directly in lib/ (lib/native.ts is the room `native`). The
 * allowed room graph is a list of layers; a room may import (statically, dynamically, or types
 * only — a type import ties two rooms as much as a value import does) rooms of lower layers only,
 * so no two rooms depend on each other and the graph has no cycle. Each registry is the only list
 * of its names: a registered name is a string literal in code (lib/ and bin/) only inside a
 * registry's folder, as the native layout test refuses an architecture name outside its file. The
 * analyses run on the real tree and, so that a broken rule is known to fail, on synthetic trees that
 * break them.
 */
import { expect } from 'chai';
import { readdirSync, readFileSync } from 'node:fs';
import { dirname, join, posix, relative, sep } from 'node:path';
import { fileURLToPath } from 'node:url';
import { JUDGE_BACKENDS } from '../lib/judge/backends/index.js';
import { STAGES } from '../lib/train/stages/index.js';
import { PROTOCOLS } from '../lib/eval/protocols/index.js';
import { FORMATS } from '../lib/eval/formats/index.js';
import { TRACKERS } from '../lib/train/trackers/index.js';

const here = dirname(fileURLToPath(import.meta.url));
const repoDir = join(here, '..', '..');
const libDir = join(repoDir, 'lib');

/**
 * Lowest first. lib/config/ sits below the judge and the trainer: it holds the core settings rows and
 * the hook (lib/config/extensions.ts) through which the registries of judge backends and stages
 * (lib/judge/backends/, lib/train/stages/), which sit in the rooms that use them, hand in their
 * descriptors' own rows when they load: no import from config up to them.
 */
const LAYERS: readonly (readonly string[])[] = [
  ['errors', 'addon'],
  ['util'],
  ['native', 'config', 'llm'],
  ['task'],
  ['data', 'model'],
  ['hub'],
  ['judge'],
  ['eval'],
  ['report', 'serve'],
  ['train'],
  ['index', 'bench'],
  ['cjs'],
];

/** Source files as {path relative to lib/ with '/' separators: text}. */
type Tree = Record<string, string>;

function readTree(dir: string): Tree {
  const out: Tree = {};
  const walk = (d: string): void => {
    for (const e of readdirSync(d, { withFileTypes: true })) {
      const p = join(d, e.name);
      if (e.isDirectory()) walk(p);
      else if (/\.[cm]?ts$/.test(e.name)) out[relative(dir, p).split(sep).join('/')] = readFileSync(p, 'utf8');
    }
  };
  walk(dir);
  return out;
}

/** Room of a path relative to lib/: its first folder, or the file's name without extension. */
const roomOf = (path: string): string => (path.includes('/') ? path.slice(0, path.indexOf('/')) : path.replace(/(\.d)?\.[cm]?[jt]s$/, ''));

interface Layout {
  /** room -> rooms it imports, with one "file -> specifier" example per edge. */
  edges: Map<string, Map<string, string>>;
  /** Edges the layers do not allow ("a -> b (file: specifier)"), and rooms in no layer. */
  violations: string[];
  /** Cycles of the room graph as [a, b, ..., a]. */
  cycles: string[][];
}

function analyseLayout(tree: Tree, layers: readonly (readonly string[])[] = LAYERS): Layout {
  const layerOf = new Map<string, number>();
  layers.forEach((l, i) => l.forEach((r) => layerOf.set(r, i)));
  const edges = new Map<string, Map<string, string>>();
  const spec =
    /(?:^|\n)\s*(?:import|export)\s+(?:type\s+)?[^;'"]*?from\s+'(\.{1,2}\/[^']+)'|import\(\s*'(\.{1,2}\/[^']+)'\s*\)|(?:^|\n)\s*import\s+'(\.{1,2}\/[^']+)'/g;
  for (const [path, text] of Object.entries(tree)) {
    const from = roomOf(path);
    if (!edges.has(from)) edges.set(from, new Map());
    for (const m of text.matchAll(spec)) {
      const s = (m[1] ?? m[2] ?? m[3])!;
      const target = posix.normalize(posix.join(posix.dirname(path), s));
      if (target.startsWith('..')) continue; // outside lib/
      const to = roomOf(target);
      if (to !== from && !edges.get(from)!.has(to)) edges.get(from)!.set(to, `${path}: ${s}`);
    }
  }
  const violations: string[] = [];
  for (const [from, tos] of edges) {
    if (!layerOf.has(from)) violations.push(`room ${from} is in no layer`);
    for (const [to, where] of tos) {
      const a = layerOf.get(from),
        b = layerOf.get(to);
      if (a !== undefined && b !== undefined && b >= a) violations.push(`${from} -> ${to} (${where})`);
    }
  }
  const cycles: string[][] = [];
  const state = new Map<string, 'open' | 'done'>();
  const stack: string[] = [];
  const visit = (r: string): void => {
    state.set(r, 'open');
    stack.push(r);
    for (const t of [...(edges.get(r)?.keys() ?? [])].sort()) {
      if (state.get(t) === 'open') cycles.push([...stack.slice(stack.indexOf(t)), t]);
      else if (!state.has(t)) visit(t);
    }
    stack.pop();
    state.set(r, 'done');
  };
  for (const r of [...edges.keys()].sort()) if (!state.has(r)) visit(r);
  return { edges, violations, cycles };
}

describe('lib/ layout: rooms and the allowed room graph', () => {
  it('the real tree: every import goes to a lower layer, and the room graph has no cycle', () => {
    const tree = readTree(libDir);
    expect(Object.keys(tree).length).to.be.above(50);
    const l = analyseLayout(tree);
    expect(l.violations, l.violations.join('\n')).to.deep.equal([]);
    expect(l.cycles).to.deep.equal([]);
    // The analysis sees the real edges (a regex that matched nothing would pass every rule).
    expect([...l.edges.get('train')!.keys()]).to.include.members(['config', 'judge', 'model']);
    expect([...l.edges.get('judge')!.keys()]).to.include('config');
    // config sits below everything but the two lowest layers: it may read lib/util/ and the addon's
    // declarations (lib/addon.ts imports nothing; settings.ts takes the LoRA target names from it).
    expect([...l.edges.get('config')!.keys()], 'config imports no room but util and the addon declarations').to.satisfy((rooms: string[]) =>
      rooms.every((r) => [...LAYERS[0]!, ...LAYERS[1]!].includes(r)),
    );
  });

  it('fails on a synthetic tree with a config <-> judge cycle (a type-only import counts)', () => {
    const tree: Tree = {
      'config/train.ts': "import { judgeBackend } from '../judge/backends/index.js';\nexport const x = 1;\n",
      'judge/backends/index.ts': "import type { TrainConfig } from '../../config/train.js';\nexport const judgeBackend = 1;\n",
      'util/registry.ts': 'export class Registry {}\n',
    };
    const l = analyseLayout(tree);
    expect(l.violations).to.deep.equal(['config -> judge (config/train.ts: ../judge/backends/index.js)']);
    expect(l.cycles).to.deep.equal([['config', 'judge', 'config']]);
  });

  it('fails on a synthetic tree with an upward dynamic import, a same-layer import and a room in no layer', () => {
    const tree: Tree = {
      'util/a.ts': "export async function f() { return import('../train/run.js'); }\n",
      'native.ts': "import { g } from './config/x.js';\n",
      'config/x.ts': 'export const g = 1;\n',
      'train/run.ts': "export * from '../util/a.js';\n",
      'newroom/y.ts': "import { f } from '../util/a.js';\n",
    };
    const l = analyseLayout(tree);
    expect(l.violations).to.have.members([
      'util -> train (util/a.ts: ../train/run.js)',
      'native -> config (native.ts: ./config/x.js)',
      'room newroom is in no layer',
    ]);
    expect(l.cycles).to.deep.equal([['util', 'train', 'util']]);
  });
});

/** A registry as the name rule sees it: its folder (relative to the repository) and its registered names. */
interface NamedRegistry {
  folder: string;
  names: readonly string[];
}

/**
 * The registries (docs/design.md §9), each with its folder. A descriptor file may name a descriptor
 * of another registry (a dataset format names the protocol that scores it), so a name is allowed
 * inside any of these folders.
 */
const REGISTRIES = (): NamedRegistry[] => [
  { folder: 'lib/judge/backends', names: JUDGE_BACKENDS.names() },
  { folder: 'lib/train/stages', names: STAGES.names() },
  { folder: 'lib/eval/protocols', names: PROTOCOLS.names() },
  { folder: 'lib/eval/formats', names: FORMATS.names() },
  { folder: 'lib/train/trackers', names: TRACKERS.names() },
];

/**
 * The uses outside the registry folders that are not a list or a test of registered names, each with
 * how many times the name appears in that file and why. A use beyond the count fails (ask the
 * registry or its descriptor's capability instead); a count above the uses left fails too (lower it).
 */
const ALLOWED_USES: readonly { file: string; name: string; uses: number; why: string }[] = [
  { file: 'lib/addon.ts', name: 'grpo', uses: 2, why: "GRPO the loss: the aggregation 'grpo' | 'dapo' | 'dr_grpo' and the fused loss kind, not the stage" },
  { file: 'lib/bench.ts', name: 'grpo', uses: 1, why: 'GRPO the fused loss kind' },
  { file: 'lib/config/train.ts', name: 'grpo', uses: 1, why: 'the loss aggregation type' },
  { file: 'lib/train/backend.ts', name: 'grpo', uses: 1, why: 'the loss aggregation type' },
  { file: 'lib/train/memory-model.ts', name: 'grpo', uses: 1, why: "the update estimate's loss head (GRPO's chunked logits)" },
  { file: 'lib/config/settings/grpo.ts', name: 'grpo', uses: 2, why: "the loss aggregation's choice and default" },
  { file: 'lib/config/settings/run.ts', name: 'grpo', uses: 1, why: "the stages' default (the paper's recipe: OPSD then GRPO)" },
  { file: 'lib/config/settings/run.ts', name: 'opsd', uses: 1, why: "the stages' default (the paper's recipe)" },
  { file: 'lib/config/settings.ts', name: 'local', uses: 1, why: "train's default judge kind" },
  { file: 'lib/config/settings/judge.ts', name: 'http', uses: 1, why: "eval's default judge kind" },
  {
    file: 'lib/config/settings/build-data.ts',
    name: 'papergym',
    uses: 4,
    why: "build-data's output formats (its writers, not the import registry) and the default seeds of the split and mix hashes",
  },
  { file: 'lib/config/settings/subset.ts', name: 'papergym', uses: 1, why: "the subset hash's default seed" },
  { file: 'lib/config/settings/build-data.ts', name: 'research-plan-gen', uses: 1, why: "build-data's output formats (its writers)" },
  { file: 'lib/config/judge.ts', name: 'local', uses: 1, why: 'the default judge kind (JUDGE_DEFAULTS)' },
  { file: 'lib/judge/local.ts', name: 'local', uses: 1, why: "the local judge's default display name" },
  { file: 'lib/data/pipeline.ts', name: 'papergym', uses: 1, why: "the split hash's default seed" },
  {
    file: 'lib/data/schema.ts',
    name: 'papergym',
    uses: 1,
    why: "the project's own item format, PAPERGYM_FORMAT (its descriptor in lib/eval/formats/ and the Hub cards read it)",
  },
  { file: 'bin/commands/build-data.ts', name: 'papergym', uses: 3, why: "build-data's output formats and the mix hash's default seed" },
  { file: 'bin/commands/build-data.ts', name: 'research-plan-gen', uses: 2, why: "build-data's output formats" },
  { file: 'bin/commands/subset.ts', name: 'papergym', uses: 1, why: "the subset hash's default seed" },
  {
    file: 'bin/commands/eval.ts',
    name: 'papergym',
    uses: 3,
    why: "the default protocol, and the project's own items (format papergym) evaluated as training validates them",
  },
];

/** `text` with its comments blanked (line numbers kept): names in comments are words, not code. */
function stripComments(text: string): string {
  return text.replace(/\/\*[\s\S]*?\*\//g, (m) => m.replace(/[^\n]/g, ' ')).replace(/(^|[^:'"`\\])\/\/.*$/gm, '$1');
}

/**
 * Every registered name written as a string literal ('x', "x", `x`) in code outside the registry
 * folders, as "file:line: 'name' (folder)", less the allowed uses; then each allowed entry whose
 * count no longer matches. `tree` is keyed by path relative to the repository.
 */
function registeredNameUses(tree: Tree, registries: readonly NamedRegistry[], allowed: typeof ALLOWED_USES = []): string[] {
  const out: string[] = [];
  const counts = new Map<string, number>();
  // A name registered in two registries (a dataset format and its protocol) is one name.
  const byName = new Map<string, string[]>();
  for (const r of registries) for (const n of r.names) byName.set(n, [...(byName.get(n) ?? []), r.folder]);
  for (const [path, text] of Object.entries(tree)) {
    if (registries.some((r) => path.startsWith(`${r.folder}/`))) continue;
    const code = stripComments(text);
    for (const [name, folders] of byName) {
      const re = new RegExp(`(['"\`])${name.replace(/[.*+?^${}()|[\]\\-]/g, '\\$&')}\\1`, 'g');
      for (const m of code.matchAll(re)) {
        const key = `${path}\u0000${name}`;
        counts.set(key, (counts.get(key) ?? 0) + 1);
        const ok = allowed.find((a) => a.file === path && a.name === name);
        if (!ok || counts.get(key)! > ok.uses)
          out.push(`${path}:${code.slice(0, m.index).split('\n').length}: '${name}' (registered in ${folders.map((f) => `${f}/`).join(', ')})`);
      }
    }
  }
  for (const a of allowed) {
    const n = counts.get(`${a.file}\u0000${a.name}`) ?? 0;
    if (n < a.uses) out.push(`${a.file}: '${a.name}' is allowed ${a.uses} time(s) but used ${n}: lower ALLOWED_USES`);
  }
  return out;
}

/** lib/ and bin/ source files keyed by path relative to the repository. */
function readCode(): Tree {
  const out: Tree = {};
  for (const d of ['lib', 'bin']) for (const [p, t] of Object.entries(readTree(join(repoDir, d)))) out[`${d}/${p}`] = t;
  return out;
}

describe('registries: each is the only list of its names', () => {
  it('the real tree: no registered name outside a registry folder but the allowed uses', () => {
    const regs = REGISTRIES();
    // The rule sees the real names (an empty registry would pass every rule).
    expect(regs.map((r) => r.names.length)).to.satisfy((ns: number[]) => ns.every((n) => n >= 3));
    const uses = registeredNameUses(readCode(), regs, ALLOWED_USES);
    expect(uses, uses.join('\n')).to.deep.equal([]);
  });

  it('fails on a synthetic tree with a test of a name outside its folder, a hand-written choice list, and a stale allowed count', () => {
    const regs: NamedRegistry[] = [
      { folder: 'lib/judge/backends', names: ['local', 'http', 'jury'] },
      { folder: 'lib/eval/protocols', names: ['researchqa', 'research-plan-gen'] },
    ];
    const tree: Tree = {
      'bin/commands/compare.ts': "// the jury: 'jury' in a comment is a word\nif (jc.kind === 'jury') return x;\n",
      'lib/config/settings.ts': "const s = { choices: ['researchqa', \"research-plan-gen\"], url: 'http://127.0.0.1/' };\n/* 'http' */\n",
      'lib/judge/backends/jury.ts': "export const juryBackend = { kind: 'jury', members: ['local', 'http'] };\n",
      'lib/eval/protocols/researchqa.ts': "export const p = { name: 'researchqa', judge: 'http' };\n",
    };
    expect(registeredNameUses(tree, regs)).to.deep.equal([
      "bin/commands/compare.ts:2: 'jury' (registered in lib/judge/backends/)",
      "lib/config/settings.ts:1: 'researchqa' (registered in lib/eval/protocols/)",
      "lib/config/settings.ts:1: 'research-plan-gen' (registered in lib/eval/protocols/)",
    ]);
    const allowed = [
      { file: 'bin/commands/compare.ts', name: 'jury', uses: 1, why: 'test' },
      { file: 'lib/config/settings.ts', name: 'researchqa', uses: 2, why: 'test' },
    ];
    expect(registeredNameUses(tree, regs, allowed)).to.deep.equal([
      "lib/config/settings.ts:1: 'research-plan-gen' (registered in lib/eval/protocols/)",
      "lib/config/settings.ts: 'researchqa' is allowed 2 time(s) but used 1: lower ALLOWED_USES",
    ]);
  });
});

describe('package.json exports: the supported entry points only', () => {
  it('exports ".", "./bench" and "./package.json"; an internal module is not importable by package name', async () => {
    const pkg = JSON.parse(readFileSync(join(here, '..', '..', 'package.json'), 'utf8')) as { exports: Record<string, unknown> };
    expect(Object.keys(pkg.exports)).to.deep.equal(['.', './bench', './package.json']);
    // Self-reference by package name goes through the exports map.
    const bench = (await import('papergym-native/bench')) as Record<string, unknown>;
    expect(Object.keys(bench).length).to.be.above(0);
    let err: (Error & { code?: string }) | undefined;
    await import('papergym-native/dist/lib/errors.js' as string).catch((e: Error) => (err = e));
    expect(err?.code).to.equal('ERR_PACKAGE_PATH_NOT_EXPORTED');
  });
});
