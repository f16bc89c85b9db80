/**
 * The seam between the N-API bindings and the compute core, read from the source tree:
 *  - only native/napi/ (and the separate libtorch preloader, native/preload/) include an N-API
 *    header (<napi.h>, <node_api.h>, "napi/..."); the core folders and native/pch.h, which every
 *    translation unit of the addon includes, do not;
 *  - the folder include graph (folder A includes "B/..." for some file of A) has no cycle, so no
 *    two folders include each other.
 *  - an architecture is one file and one registry entry: its name (a `"…ForCausalLM"` string
 *    literal) appears in code only in its own native/model/arch_*.cc, and every row such a file
 *    defines is listed in PG_ARCHITECTURES (native/model/architecture.cc).
 *  - every folder is named for what it holds, never like build output (`dist`, `build`, `out`,
 *    `Release`, `Debug`): the data-parallel collectives live in native/parallel/.
 * The analysis runs on the real tree and, so that a broken rule is known to fail, on small
 * synthetic trees that break each rule.
 */
import { expect } from 'chai';
import { readdirSync, readFileSync } from 'node:fs';
import { dirname, join, relative, sep } from 'node:path';
import { fileURLToPath } from 'node:url';

const here = dirname(fileURLToPath(import.meta.url));
const nativeDir = join(here, '..', '..', 'native');

/** Source files as {path relative to native/ with '/' separators: text}. */
type Tree = Record<string, string>;

function readTree(dir: string): Tree {
  const out: Tree = {};
  const walk = (d: string): void => {
    for (const e of readdirSync(d, { withFileTypes: true })) {
      const p = join(d, e.name);
      if (e.isDirectory()) walk(p);
      else if (/\.(cc|h|cu|cuh)$/.test(e.name)) out[relative(dir, p).split(sep).join('/')] = readFileSync(p, 'utf8');
    }
  };
  walk(dir);
  return out;
}

/** Folder of a file: its first path segment, '.' for files directly in native/. */
const folderOf = (path: string): string => (path.includes('/') ? path.slice(0, path.indexOf('/')) : '.');

/** Folders allowed to include N-API headers: the bindings and the preloader (its own module). */
const NAPI_FOLDERS = new Set(['napi', 'preload']);

interface Layout {
  /** folder -> folders it includes (itself excluded). */
  graph: Map<string, Set<string>>;
  /** "file: include line" for every N-API include outside the binding folders. */
  napiInCore: string[];
  /** Each cycle of the folder graph as a path [a, b, ..., a]. */
  cycles: string[][];
}

function analyseLayout(tree: Tree): Layout {
  const graph = new Map<string, Set<string>>();
  const napiInCore: string[] = [];
  for (const [path, text] of Object.entries(tree)) {
    const from = folderOf(path);
    if (!graph.has(from)) graph.set(from, new Set());
    for (const m of text.matchAll(/^\s*#\s*include\s+([<"])([^>"]+)[>"]/gm)) {
      const [line, quote, target] = m;
      const isNapi = quote === '<' ? /^(napi|node_api|node_api_types|js_native_api)\.h$/.test(target) : target.startsWith('napi/');
      if (isNapi && !NAPI_FOLDERS.has(from)) napiInCore.push(`${path}: ${line.trim()}`);
      if (quote === '"' && target.includes('/')) {
        const to = target.slice(0, target.indexOf('/'));
        if (to !== from) graph.get(from)!.add(to);
      }
    }
  }
  // Cycles: a depth-first search that reports each back edge's cycle.
  const cycles: string[][] = [];
  const state = new Map<string, 'open' | 'done'>();
  const stack: string[] = [];
  const visit = (f: string): void => {
    state.set(f, 'open');
    stack.push(f);
    for (const t of [...(graph.get(f) ?? [])].sort()) {
      if (state.get(t) === 'open') cycles.push([...stack.slice(stack.indexOf(t)), t]);
      else if (!state.has(t)) visit(t);
    }
    stack.pop();
    state.set(f, 'done');
  };
  for (const f of [...graph.keys()].sort()) if (!state.has(f)) visit(f);
  return { graph, napiInCore, cycles };
}

/** Folder names that read as build output (npm's dist/, CMake's build/, node-gyp's Release/). */
const BUILD_OUTPUT_NAMES = new Set(['dist', 'build', 'out', 'release', 'debug', 'obj']);

/** Folders of the tree (any depth) named like build output, sorted. */
function buildOutputFolders(tree: Tree): string[] {
  const folders = new Set<string>();
  for (const path of Object.keys(tree)) {
    const parts = path.split('/').slice(0, -1);
    parts.forEach((p, i) => BUILD_OUTPUT_NAMES.has(p.toLowerCase()) && folders.add(parts.slice(0, i + 1).join('/')));
  }
  return [...folders].sort();
}

/** Where the architecture rule is broken: "file: what" for each name outside its row's file or unregistered row. */
function architectureProblems(tree: Tree): string[] {
  const out: string[] = [];
  const registry = /#define PG_ARCHITECTURES\(X\)(.*)/.exec(tree['model/architecture.cc'] ?? '')?.[1] ?? '';
  const registered = new Set([...registry.matchAll(/X\((\w+)\)/g)].map((m) => m[1]));
  for (const [path, text] of Object.entries(tree)) {
    const code = text.replace(/\/\/.*$/gm, '').replace(/\/\*[\s\S]*?\*\//g, '');
    const isRow = /^model\/arch_\w+\.cc$/.test(path);
    for (const m of code.matchAll(/"(\w+ForCausalLM)"/g)) if (!isRow) out.push(`${path}: architecture name ${m[1]} outside model/arch_*.cc`);
    if (isRow)
      for (const m of code.matchAll(/extern const ArchitectureSpec (\w+)/g))
        if (!registered.has(m[1])) out.push(`${path}: row ${m[1]} not in PG_ARCHITECTURES`);
  }
  return out.sort();
}

describe('native source layout: the binding / compute seam', () => {
  const tree = readTree(nativeDir);
  const layout = analyseLayout(tree);

  it('finds the tree (bindings in napi/, compute in the core folders)', () => {
    expect(Object.keys(tree)).to.include.members(['napi/addon.cc', 'napi/model.cc', 'core/errors.h', 'model/decoder.h', 'model/architecture.cc']);
    for (const f of ['model', 'lora', 'loss', 'generate', 'optim', 'io', 'cuda', 'steps', 'core', 'parallel']) expect(layout.graph.has(f), f).to.equal(true);
  });

  it('every folder is named for what it holds, not like build output (the collectives are native/parallel/)', () => {
    expect(buildOutputFolders(tree)).to.deep.equal([]);
    expect(Object.keys(tree)).to.include.members(['parallel/dist.h', 'parallel/dist.cc']);
    const broken = { 'dist/dist.cc': '', 'model/build/x.h': '', 'parallel/dist.h': '', 'io/Release/y.cc': '' };
    expect(buildOutputFolders(broken)).to.deep.equal(['dist', 'io/Release', 'model/build']);
  });

  it('only native/napi/ includes an N-API header', () => {
    expect(layout.napiInCore, layout.napiInCore.join('\n')).to.deep.equal([]);
    for (const [path] of Object.entries(tree).filter(([p]) => !NAPI_FOLDERS.has(folderOf(p)))) expect(tree[path], path).to.not.match(/Napi::/);
  });

  it('no two folders include each other (the folder include graph has no cycle)', () => {
    const shown = [...layout.graph].map(([f, to]) => `${f} -> ${[...to].sort().join(', ')}`).join('\n');
    expect(
      layout.cycles.map((c) => c.join(' -> ')),
      shown,
    ).to.deep.equal([]);
  });

  it('nothing in the core includes a binding, and the core error header includes nothing of the project', () => {
    for (const [f, to] of layout.graph) if (!NAPI_FOLDERS.has(f)) expect([...to], f).to.not.include('napi');
    expect(layout.graph.get('core')?.size ?? 0).to.equal(0);
  });

  it('an architecture is one model/arch_*.cc file and one PG_ARCHITECTURES entry', () => {
    const rows = Object.keys(tree).filter((p) => /^model\/arch_\w+\.cc$/.test(p));
    expect(rows.length).to.be.at.least(3);
    expect(architectureProblems(tree)).to.deep.equal([]);
    const reg = '#define PG_ARCHITECTURES(X) X(kARow) X(kBRow)\n';
    const fine = {
      'model/architecture.cc': reg,
      'model/arch_a.cc': 'extern const ArchitectureSpec kARow = {"AForCausalLM"};',
      'model/x.cc': '// "AForCausalLM" in a comment\n',
    };
    expect(architectureProblems(fine)).to.deep.equal([]);
    const broken = {
      ...fine,
      'model/config.cc': 'if (name == "AForCausalLM") {}',
      'model/arch_c.cc': 'extern const ArchitectureSpec kCRow = {"CForCausalLM"};',
    };
    expect(architectureProblems(broken)).to.deep.equal([
      'model/arch_c.cc: row kCRow not in PG_ARCHITECTURES',
      'model/config.cc: architecture name AForCausalLM outside model/arch_*.cc',
    ]);
  });

  it('the checks fail on trees that break the rules', () => {
    const napi = analyseLayout({
      'loss/jsd.cc': '#include "loss/jsd.h"\n#include "napi/util.h"\n',
      'model/x.h': '#include <napi.h>\n',
      'napi/a.cc': '#include <napi.h>\n',
    });
    expect(napi.napiInCore).to.deep.equal(['loss/jsd.cc: #include "napi/util.h"', 'model/x.h: #include <napi.h>']);
    const twoWay = analyseLayout({ 'model/qwen3.h': '#include "lora/lora.h"\n', 'lora/lora.h': '  #  include "model/qwen3.h"\n' });
    expect(twoWay.cycles.map((c) => c.join(' -> '))).to.deep.equal(['lora -> model -> lora']);
    const longer = analyseLayout({ 'a/x.h': '#include "b/y.h"', 'b/y.h': '#include "c/z.h"', 'c/z.h': '#include "a/x.h"' });
    expect(longer.cycles).to.have.length(1);
    const fine = analyseLayout({ 'model/qwen3.h': '#include "lora/lora.h"\n#include "model/config.h"\n', 'lora/lora.h': '#include "core/errors.h"\n' });
    expect(fine.cycles).to.deep.equal([]);
    expect(fine.napiInCore).to.deep.equal([]);
  });
});
