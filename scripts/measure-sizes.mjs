#!/usr/bin/env node
// Measures the sizes the README states (issue 37: its numbers come from here, not by hand):
//   - the CPU addon binary: build/Release/papergym_native.node (+ papergym_preload.node), and with
//     --pack-dir DIR (tarballs from `scripts/prebuild.sh cpu --pack-dir DIR`) the prebuilt cpu
//     package's binary and tarball size;
//   - the main package as `npm pack` would ship it (files, packed and unpacked bytes);
//   - the production dependency tree in node_modules (`npm ls --omit=dev --all --parseable`, each
//     package dir counted once, its own nested node_modules excluded), and its largest packages.
// Usage: node scripts/measure-sizes.mjs [--pack-dir DIR] [--json]
import { execFileSync } from 'node:child_process';
import { existsSync, lstatSync, mkdtempSync, readdirSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { basename, join, relative, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = resolve(fileURLToPath(new URL('..', import.meta.url)));
const args = process.argv.slice(2);
const packDir = args.includes('--pack-dir') ? resolve(args[args.indexOf('--pack-dir') + 1]) : undefined;
const MB = (b) => `${(b / 1e6).toFixed(2)} MB`;

/** Bytes of the files under `dir` (symlinks not followed), skipping nested node_modules when asked. */
function du(dir, skipNodeModules) {
  let n = 0;
  for (const e of readdirSync(dir)) {
    const p = join(dir, e);
    const st = lstatSync(p);
    if (st.isSymbolicLink()) continue;
    if (st.isDirectory()) {
      if (skipNodeModules && e === 'node_modules') continue;
      n += du(p, skipNodeModules);
    } else n += st.size;
  }
  return n;
}

const out = {};
const rel = join(root, 'build', 'Release');
if (existsSync(join(rel, 'papergym_native.node'))) {
  out.localBinary = {
    addon: statSync(join(rel, 'papergym_native.node')).size,
    preload: existsSync(join(rel, 'papergym_preload.node')) ? statSync(join(rel, 'papergym_preload.node')).size : 0,
  };
}
if (packDir) {
  for (const f of readdirSync(packDir).filter((x) => x.endsWith('.tgz'))) {
    const key = /cpu/.test(f) ? 'cpuPackage' : 'mainTarball';
    const tmp = mkdtempSync(join(tmpdir(), 'pg-sizes-'));
    execFileSync('tar', ['-xzf', join(packDir, f), '-C', tmp]);
    const node = join(tmp, 'package', 'papergym_native.node');
    out[key] = {
      file: f,
      packed: statSync(join(packDir, f)).size,
      unpacked: du(join(tmp, 'package'), false),
      ...(existsSync(node) ? { binary: statSync(node).size } : {}),
    };
    rmSync(tmp, { recursive: true, force: true });
  }
}
const pack = JSON.parse(
  execFileSync('npm', ['pack', '--dry-run', '--json', '--ignore-scripts'], { cwd: root, encoding: 'utf8', stdio: ['ignore', 'pipe', 'ignore'] }),
)[0];
out.mainPackage = { files: pack.entryCount, packed: pack.size, unpacked: pack.unpackedSize };
// The dependency tree (npm ls --json --long), leaving out packages npm marks extraneous (left in a
// shared node_modules by other branches) and dev-only ones.
// npm ls exits 1 when it finds problems (node_modules not matching package-lock.json: extraneous,
// missing or invalid packages) but still prints the tree; the count is then flagged as unreliable.
let treeProblems = false;
const npmLs = () => {
  try {
    return execFileSync('npm', ['ls', '--omit=dev', '--all', '--json', '--long'], {
      cwd: root,
      encoding: 'utf8',
      stdio: ['ignore', 'pipe', 'ignore'],
      maxBuffer: 256 << 20,
    });
  } catch (e) {
    if (!e.stdout) throw e;
    treeProblems = true;
    return String(e.stdout);
  }
};
const tree = JSON.parse(npmLs());
const ls = [];
const walk = (deps) => {
  for (const d of Object.values(deps ?? {})) {
    if (!d || d.extraneous || d.dev || !d.path || !existsSync(d.path)) continue;
    ls.push(resolve(d.path));
    walk(d.dependencies);
  }
};
walk(tree.dependencies);
const seen = new Set();
const sizes = [];
for (const p of ls) {
  if (seen.has(p)) continue;
  seen.add(p);
  sizes.push({ name: relative(join(root, 'node_modules'), p), bytes: du(p, true) });
}
sizes.sort((a, b) => b.bytes - a.bytes);
out.productionNodeModules = { packages: sizes.length, bytes: sizes.reduce((a, s) => a + s.bytes, 0), largest: sizes.slice(0, 5), treeProblems };

if (args.includes('--json')) {
  process.stdout.write(JSON.stringify(out, null, 2) + '\n');
} else {
  if (out.localBinary) console.log(`local CPU build: papergym_native.node ${MB(out.localBinary.addon)}, papergym_preload.node ${MB(out.localBinary.preload)}`);
  if (out.cpuPackage) console.log(`${out.cpuPackage.file}: binary ${MB(out.cpuPackage.binary ?? 0)}, ${MB(out.cpuPackage.packed)} packed`);
  if (out.mainTarball) console.log(`${out.mainTarball.file}: ${MB(out.mainTarball.packed)} packed, ${MB(out.mainTarball.unpacked)} unpacked`);
  console.log(`main package (npm pack): ${out.mainPackage.files} files, ${MB(out.mainPackage.packed)} packed, ${MB(out.mainPackage.unpacked)} unpacked`);
  const n = out.productionNodeModules;
  console.log(`production node_modules: ${n.packages} packages, ${MB(n.bytes)}; largest: ${n.largest.map((s) => `${s.name} ${MB(s.bytes)}`).join(', ')}`);
  if (n.treeProblems) console.log('  (npm ls reports problems: node_modules does not match package-lock.json; run npm ci for a true count)');
  void basename;
}
