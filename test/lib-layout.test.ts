/**
 * The rooms of lib/, read from the source tree: a room is a folder of lib/ (lib/judge/, its
 * subfolders included) or one file directly in lib/ (lib/native.ts is the room `native`). The
 * allowed room graph is a list of layers; a room may import (statically, dynamically, or types
 * only — a type import ties two rooms as much as a value import does) rooms of lower layers only,
 * so no two rooms depend on each other and the graph has no cycle. The analysis runs on the real
 * tree and, so that a broken rule is known to fail, on synthetic trees that break it.
 */
import { expect } from 'chai';
import { readdirSync, readFileSync } from 'node:fs';
import { dirname, join, posix, relative, sep } from 'node:path';
import { fileURLToPath } from 'node:url';

const here = dirname(fileURLToPath(import.meta.url));
const libDir = join(here, '..', '..', 'lib');

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
    expect(l.edges.get('config')!.size, 'config imports no room but util').to.be.at.most(1);
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
