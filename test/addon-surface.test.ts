/**
 * The declared native surface (lib/addon.ts) against the loaded binary: every declared export,
 * class member and static exists on the binary with the declared kind, and the binary exports
 * nothing undeclared. The declarations are read from the compiled dist/lib/addon.d.ts (tsc's
 * canonical emit: one member per line, four spaces deep), so a method added to a C++ `Define` /
 * `exports.Set` list without a declaration (or declared but never registered) fails here.
 */
import { expect } from 'chai';
import { readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { native } from '../lib/native.js';
import { loadModel } from '../lib/model/qwen3.js';
import { tinyModel } from './helpers/tiny.js';

/** Member names of each `export interface` in a .d.ts (own members; `new (…)` and `[Symbol.…]` apart). */
function interfaces(dts: string): Map<string, { members: Map<string, string>; construct: boolean; symbols: string[] }> {
  const out = new Map<string, { members: Map<string, string>; construct: boolean; symbols: string[] }>();
  let cur: { members: Map<string, string>; construct: boolean; symbols: string[] } | undefined;
  for (const line of dts.split('\n')) {
    const head = /^export interface (\w+)\b.*\{$/.exec(line);
    if (head) {
      cur = { members: new Map(), construct: false, symbols: [] };
      out.set(head[1], cur);
      continue;
    }
    if (!cur) continue;
    if (line === '}') {
      cur = undefined;
      continue;
    }
    if (/^ {4}new \(/.test(line)) cur.construct = true;
    const sym = /^ {4}\[Symbol\.(\w+)\]/.exec(line);
    if (sym) cur.symbols.push(sym[1]);
    // name, then its type (for `name: Type;` lines) or 'method'
    const m = /^ {4}(?:readonly )?([A-Za-z_$][\w$]*)\??(\(|<|: (.*)$)/.exec(line);
    if (m) cur.members.set(m[1], m[2] === '(' || m[2] === '<' ? 'method' : (/^([\w$]+);$/.exec(m[3] ?? '')?.[1] ?? 'value'));
  }
  return out;
}

interface Declared {
  /** Export name → 'function' | 'value' | class interface name. */
  exports: Map<string, string>;
  classes: Map<string, { statics: string[]; members: string[]; symbols: string[] }>;
}

function declaredSurface(dts: string): Declared {
  const ifs = interfaces(dts);
  const addon = ifs.get('Addon');
  if (!addon) throw new Error('no `export interface Addon` in addon.d.ts');
  const exports = new Map<string, string>();
  const classes = new Map<string, { statics: string[]; members: string[]; symbols: string[] }>();
  for (const [name, kind] of addon.members) {
    const cls = kind !== 'method' ? ifs.get(kind) : undefined;
    if (cls?.construct) {
      const proto = cls.members.get('prototype');
      const inst = proto ? ifs.get(proto) : undefined;
      if (!inst) throw new Error(`${kind}: no prototype interface`);
      classes.set(name, { statics: [...cls.members.keys()].filter((k) => k !== 'prototype'), members: [...inst.members.keys()], symbols: inst.symbols });
      exports.set(name, 'class');
    } else exports.set(name, kind === 'method' ? 'function' : 'value');
  }
  return { exports, classes };
}

/** Differences between a declared surface and a loaded addon object (empty = they match). */
function surfaceDiff(d: Declared, addon: object): string[] {
  const diff: string[] = [];
  const rec: Record<string, unknown> = { ...addon };
  for (const [name, kind] of d.exports) {
    const v = rec[name];
    if (v === undefined) diff.push(`declared, not exported: ${name}`);
    else if (kind === 'function' && (typeof v !== 'function' || d.classes.has(name))) diff.push(`${name}: declared a function, is ${typeof v}`);
    else if (kind === 'value' && typeof v === 'function') diff.push(`${name}: declared a value, is a function`);
    else if (kind === 'class' && typeof v !== 'function') diff.push(`${name}: declared a class, is ${typeof v}`);
  }
  for (const name of Object.keys(rec)) if (!d.exports.has(name)) diff.push(`exported, not declared: ${name}`);
  for (const [name, c] of d.classes) {
    const ctor = rec[name];
    if (typeof ctor !== 'function') continue;
    const protoNames = Object.getOwnPropertyNames(ctor.prototype).filter((k) => k !== 'constructor');
    // own properties every function has (sloppy-mode functions: arguments, caller) are not statics
    const staticNames = Object.getOwnPropertyNames(ctor).filter((k) => !['length', 'name', 'prototype', 'arguments', 'caller'].includes(k));
    for (const m of c.members) if (!protoNames.includes(m)) diff.push(`${name}.prototype.${m}: declared, missing`);
    for (const m of protoNames) if (!c.members.includes(m)) diff.push(`${name}.prototype.${m}: present, not declared`);
    for (const m of c.statics) if (!staticNames.includes(m)) diff.push(`${name}.${m}: declared static, missing`);
    for (const m of staticNames) if (!c.statics.includes(m)) diff.push(`${name}.${m}: static present, not declared`);
    const symbols = Object.getOwnPropertySymbols(ctor.prototype).map((s) =>
      s === Symbol.dispose ? 'dispose' : s === Symbol.asyncDispose ? 'asyncDispose' : String(s),
    );
    for (const s of c.symbols) if (!symbols.includes(s)) diff.push(`${name}.prototype[Symbol.${s}]: declared, missing`);
  }
  return diff;
}

/** Members of one declared interface against a plain object's keys. */
function objectDiff(dts: string, iface: string, obj: object): string[] {
  const decl = interfaces(dts).get(iface);
  if (!decl) return [`no interface ${iface}`];
  const keys = Object.keys(obj);
  return [
    ...[...decl.members.keys()].filter((k) => !keys.includes(k)).map((k) => `${iface}.${k}: declared, missing`),
    ...keys.filter((k) => !decl.members.has(k)).map((k) => `${iface}.${k}: present, not declared`),
  ];
}

describe('native surface: lib/addon.ts matches the loaded binary', function () {
  this.timeout(120000);
  const dts = readFileSync(join(dirname(fileURLToPath(import.meta.url)), '..', 'lib', 'addon.d.ts'), 'utf8');
  let addon: object | undefined;
  let loadError = '';
  try {
    addon = native();
  } catch (e) {
    loadError = (e as Error).message.split('\n')[0];
  }
  /** The loaded addon, or skips the test (with the loader's reason) when none loads. */
  function loaded(ctx: Mocha.Context): object {
    if (addon) return addon;
    console.log(`      (skipped: ${loadError})`);
    return ctx.skip();
  }

  it('reads the declarations (exports, classes, members)', () => {
    const d = declaredSurface(dts);
    expect(d.exports.size).to.be.greaterThan(30);
    expect([...d.classes.keys()].sort()).to.deep.equal(['AdamW', 'HostState', 'Model', 'ProcessGroup']);
    expect(d.classes.get('Model')!.statics).to.deep.equal(['load']);
    expect(d.classes.get('Model')!.members).to.include.members(['forward', 'config', 'disposed', 'dispose', 'crossEntropyBackward']);
    expect(d.classes.get('Model')!.symbols).to.deep.equal(['dispose']);
    expect(d.exports.get('napiVersion')).to.equal('value');
    expect(d.exports.get('generate')).to.equal('function');
  });

  it('every declared export, member and static exists on the binary, and nothing undeclared is exported', function () {
    expect(surfaceDiff(declaredSurface(dts), loaded(this))).to.deep.equal([]);
  });

  it('a declaration the binary lacks, or an export without declaration, is reported (the check can fail)', function () {
    const addon = loaded(this);
    const d = declaredSurface(dts);
    d.exports.set('notInTheBinary', 'function');
    d.exports.delete('k3');
    d.classes.get('Model')!.members.push('noSuchMethod');
    d.classes.get('Model')!.members.splice(d.classes.get('Model')!.members.indexOf('forward'), 1);
    d.classes.get('AdamW')!.statics.push('create');
    expect(surfaceDiff(d, addon)).to.have.members([
      'declared, not exported: notInTheBinary',
      'exported, not declared: k3',
      'Model.prototype.noSuchMethod: declared, missing',
      'Model.prototype.forward: present, not declared',
      'AdamW.create: declared static, missing',
    ]);
  });

  it('the plain objects the addon returns: abort handle and decode engine', async function () {
    loaded(this);
    const a = native();
    expect(objectDiff(dts, 'AbortHandle', a.createAbortHandle())).to.deep.equal([]);
    let dir: string;
    try {
      dir = tinyModel('tiny-tied');
    } catch (e) {
      console.log(`      (engine part skipped: ${(e as Error).message.split('\n')[0]})`);
      return;
    }
    using model = await loadModel(dir);
    const engine = a.createDecodeEngine(model, { maxRows: 2, capacity: 16 });
    expect(objectDiff(dts, 'AddonDecodeEngine', engine)).to.deep.equal([]);
    engine.release();
  });
});
