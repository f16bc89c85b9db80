/**
 * Native adapter state (snapshots, the EMA teacher update, optimizer state, checkpoint I/O) on the
 * embedded tiny model: the native EMA equals the JS formula bit for bit, snapshot files round-trip
 * bit for bit (and files of the previous version load), a checkpointed-and-resumed run equals an
 * uninterrupted one bit for bit, and a checkpoint write in flight leaves the event loop running
 * (timers fire, a loopback HTTP request is answered) while the model is busy.
 */
import { expect } from 'chai';
import { createServer, request, type Server } from 'node:http';
import { mkdtempSync, rmSync, existsSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { AddressInfo } from 'node:net';
import { native, type JsTensor } from '../lib/native.js';
import { ensureDefaultModel } from '../lib/train/run.js';
import { writeCheckpoint, resolveCheckpoint, type TrainerState } from '../lib/train/checkpoint.js';
import { Policy, generate } from '../lib/model/policy.js';
import { NativeBackend } from '../lib/train/native-backend.js';
import { resolveConfig } from '../lib/config/train.js';
import type { Sequence } from '../lib/train/backend.js';
import { mulberry32 } from '../lib/util/random.js';
import { rejection } from './helpers/run.js';

type Rec = Record<string, JsTensor<Float32Array>>;

/** Values of every kind a LoRA tensor can hold: normal, tiny, subnormal, ±0, large, negative. */
function knownValues(rec: Rec, seed: number): Rec {
  const r = mulberry32(seed);
  const special = [0, -0, 1e-40, -3e-39, 1.5e-45, 3.4e38, -1e30, 1, -1, 0.1, 1 / 3, 65504];
  const out: Rec = {};
  for (const [k, t] of Object.entries(rec)) {
    const d = new Float32Array(t.data.length);
    for (let i = 0; i < d.length; i++) d[i] = i < special.length && seed % 2 === 0 ? special[i]! : (r() - 0.5) * 10 ** Math.floor(r() * 8 - 5);
    out[k] = { data: d, shape: t.shape };
  }
  return out;
}

/** The EMA as the previous JS implementation computed it: JS numbers, stored into a Float32Array. */
function jsEma(s: Rec, a: Rec, decay: number): Rec {
  const out: Rec = {};
  for (const [k, at] of Object.entries(a)) {
    const st = s[k]!;
    const d = new Float32Array(at.data.length);
    for (let i = 0; i < d.length; i++) d[i] = decay * st.data[i]! + (1 - decay) * at.data[i]!;
    out[k] = { data: d, shape: at.shape };
  }
  return out;
}

function readSnapshotFile(path: string): Rec {
  return (native().loadSafetensors(path) as { tensors: Rec }).tensors;
}

/** Bitwise comparison (distinguishes -0 / 0 and every NaN payload); returns the first mismatch. */
function firstBitDiff(a: Rec, b: Rec): string | null {
  expect(Object.keys(a).sort()).to.deep.equal(Object.keys(b).sort());
  for (const k of Object.keys(a)) {
    const x = new Uint32Array(a[k]!.data.buffer, a[k]!.data.byteOffset, a[k]!.data.length);
    const y = new Uint32Array(b[k]!.data.buffer, b[k]!.data.byteOffset, b[k]!.data.length);
    for (let i = 0; i < x.length; i++) if (x[i] !== y[i]) return `${k}[${i}]: ${a[k]!.data[i]} vs ${b[k]!.data[i]}`;
  }
  return null;
}

describe('native adapter state: snapshots, EMA, optimizer state, checkpoints', function () {
  this.timeout(120000);
  let tmp: string;
  let policy: Policy;
  before(async () => {
    tmp = mkdtempSync(join(tmpdir(), 'pg-adapter-state-'));
    policy = await Policy.load(ensureDefaultModel());
    policy.model.addLora({ r: 4, alpha: 8, seed: 3 });
  });
  after(() => {
    policy?.dispose();
    rmSync(tmp, { recursive: true, force: true });
  });

  it('emaUpdate equals the JS formula s ← d·s + (1 − d)·a bit for bit, over several decays, and leaves the active adapter alone', async () => {
    const m = policy.model;
    const base = m.loraWeights();
    let s = knownValues(base, 2);
    m.setLoraWeights(s);
    m.snapshotAdapter('ema');
    for (const [i, decay] of [0.99, 0.9, 0.5, 0.37, 0.999, 1, 0].entries()) {
      const a = knownValues(base, 11 + 2 * i + (i % 2));
      m.setLoraWeights(a);
      m.emaUpdate('ema', decay);
      s = jsEma(s, a, decay);
      const path = join(tmp, `ema-${i}.safetensors`);
      await m.saveSnapshot('ema', path);
      expect(firstBitDiff(readSnapshotFile(path), s), `decay ${decay}`).to.equal(null);
      expect(firstBitDiff(m.loraWeights(), a)).to.equal(null);
    }
    m.dropSnapshot('ema');
  });

  it('rejects a bad name, decay or file with errors naming them', async () => {
    const m = policy.model;
    expect(() => m.emaUpdate('nope', 0.9)).to.throw(TypeError, /no adapter snapshot named 'nope'/);
    m.snapshotAdapter('e');
    expect(() => m.emaUpdate('e', 1.5)).to.throw(TypeError, /decay must be in \[0, 1\]/);
    expect(() => m.emaUpdate('e', NaN)).to.throw(TypeError, /decay/);
    expect(() => m.emaUpdate('active', 0.5)).to.throw(TypeError, /reserved/);
    expect((await rejection(m.saveSnapshot('nope', join(tmp, 'x.safetensors')))).message).to.match(/no adapter snapshot named 'nope'/);
    // A file whose tensors do not fit the adapter: named file and tensor, nothing installed.
    const w = m.loraWeights();
    const [k0] = Object.keys(w);
    const bad = join(tmp, 'bad.safetensors');
    native().saveSafetensors(bad, { ...w, [k0!]: { data: new Float32Array(3), shape: [3] } });
    let e = await rejection(m.loadSnapshot('b', bad));
    expect(e.code).to.equal('ERR_PG_INPUT');
    expect(e.message).to.include('bad.safetensors').and.include(k0!);
    const missing = { ...w };
    delete missing[k0!];
    native().saveSafetensors(bad, missing);
    e = await rejection(m.loadSnapshot('b', bad));
    expect(e.message).to.include(`no tensor '${k0}'`);
    native().saveSafetensors(bad, { ...w, extra: { data: new Float32Array(1), shape: [1] } });
    e = await rejection(m.loadSnapshot('b', bad));
    expect(e.message).to.include("'extra'");
    expect((await rejection(m.forward({ inputIds: { data: Int32Array.from([1, 2]), shape: [1, 2] }, adapter: 'b' }))).message).to.match(
      /no adapter snapshot named 'b'/,
    );
    m.dropSnapshot('e');
  });

  it('saveSnapshot / loadSnapshot round-trip bit for bit; files written by the previous version (Model.loraWeights() via saveSafetensors) load', async () => {
    const m = policy.model;
    m.setLoraWeights(knownValues(m.loraWeights(), 5));
    m.snapshotAdapter('ref');
    const p1 = join(tmp, 'ref.safetensors');
    await m.saveSnapshot('ref', p1);
    m.setLoraWeights(knownValues(m.loraWeights(), 7)); // active differs from the snapshot now
    await m.loadSnapshot('copy', p1);
    const p2 = join(tmp, 'copy.safetensors');
    await m.saveSnapshot('copy', p2);
    expect(firstBitDiff(readSnapshotFile(p2), readSnapshotFile(p1))).to.equal(null);
    // The snapshot is what forwards select by name.
    const ids = { data: Int32Array.from([9, 8, 7, 6, 5]), shape: [1, 5] };
    const a = await m.forward({ inputIds: ids, adapter: 'ref' });
    const b = await m.forward({ inputIds: ids, adapter: 'copy' });
    expect(Buffer.from(b.logits!.data.buffer).equals(Buffer.from(a.logits!.data.buffer))).to.equal(true);
    // Previous version: the JS copy of the weights written with saveSafetensors.
    const old = m.loraWeights();
    const p3 = join(tmp, 'snapshot-old.safetensors');
    native().saveSafetensors(p3, old, { snapshot: 'old', format: 'pt' });
    await m.loadSnapshot('old', p3);
    const p4 = join(tmp, 'old-again.safetensors');
    await m.saveSnapshot('old', p4);
    expect(firstBitDiff(readSnapshotFile(p4), old)).to.equal(null);
    for (const n of ['ref', 'copy', 'old']) m.dropSnapshot(n);
  });

  it('a checkpointed and resumed OPSD run with an EMA teacher equals the uninterrupted run bit for bit (adapter, EMA snapshot, optimizer state)', async () => {
    const dir = ensureDefaultModel();
    const cfg = resolveConfig({ flags: { stages: ['opsd'] } });
    const r = mulberry32(17);
    const tok = () => 100 + Math.floor(r() * 5000);
    const seq = (p: number, c: number): Sequence => ({ promptIds: Array.from({ length: p }, tok), completionIds: Array.from({ length: c }, tok) });
    const batches = Array.from({ length: 4 }, () =>
      [0, 1].map(() => {
        const student = seq(5, 4);
        return { student, teacher: { promptIds: [...student.promptIds, tok(), tok()], completionIds: student.completionIds } };
      }),
    );
    const step = async (b: NativeBackend, k: number) => {
      await b.opsdBackward(batches[k]!, { jsdBeta: 0.5, temperature: 1, normalizer: 8, teacher: 'ema-teacher' });
      await b.optimizerStep(1.0);
      b.emaUpdate('ema-teacher', 0.8);
    };
    const open = async () => {
      const p = await Policy.load(dir);
      p.model.addLora({ r: 4, alpha: 8, seed: 9 });
      return { p, b: new NativeBackend(p, cfg) };
    };
    const finalState = async (b: NativeBackend, out: string) => {
      await b.saveState(out);
      return {
        adapter: readSnapshotFile(join(out, 'adapter_model.safetensors')),
        ema: readSnapshotFile(join(out, 'snapshot-ema-teacher.safetensors')),
        opt: readSnapshotFile(join(out, 'optimizer.safetensors')),
        optMeta: (native().loadSafetensors(join(out, 'optimizer.safetensors')) as { metadata: Record<string, string> }).metadata,
      };
    };
    // Uninterrupted: 4 steps.
    const u = await open();
    u.b.resetOptimizer(1e-2, 4);
    u.b.snapshotAdapter('ema-teacher');
    for (let k = 0; k < 4; k++) await step(u.b, k);
    const full = await finalState(u.b, join(tmp, 'full'));
    u.p.dispose();
    // Interrupted after 2 steps: checkpoint, new process state, resume, 2 more steps.
    const run = join(tmp, 'resumed');
    const a = await open();
    a.b.resetOptimizer(1e-2, 4);
    a.b.snapshotAdapter('ema-teacher');
    for (let k = 0; k < 2; k++) await step(a.b, k);
    const state = {
      version: 1,
      stageIndex: 0,
      stageStep: 2,
      globalStep: 2,
      cursor: { epoch: 0, position: 0 },
      validation: [],
      stageDone: false,
      seed: 0,
      config: {},
      wallSeconds: 0,
    } satisfies TrainerState;
    await writeCheckpoint(run, state, (d) => a.b.saveState(d));
    a.p.dispose();
    const b = await open();
    await b.b.loadState(resolveCheckpoint(run).dir);
    b.b.resetOptimizer(1e-2, 4);
    for (let k = 2; k < 4; k++) await step(b.b, k);
    const resumed = await finalState(b.b, join(tmp, 'resumed-final'));
    b.p.dispose();
    expect(firstBitDiff(resumed.adapter, full.adapter)).to.equal(null);
    expect(firstBitDiff(resumed.ema, full.ema)).to.equal(null);
    expect(firstBitDiff(resumed.opt, full.opt)).to.equal(null);
    expect(resumed.optMeta.step).to.equal('4');
    // The run moved the adapter, and the EMA teacher lags it.
    expect(firstBitDiff(full.ema, full.adapter)).to.not.equal(null);
  });

  it("captureState: the files its save writes after the state moved on equal saveState's at the capture, byte for byte; release and bad use are clear errors", async () => {
    const dir = ensureDefaultModel();
    const cfg = resolveConfig({ flags: { stages: ['opsd'] } });
    const r = mulberry32(23);
    const tok = () => 100 + Math.floor(r() * 5000);
    const seq = (p: number, c: number): Sequence => ({ promptIds: Array.from({ length: p }, tok), completionIds: Array.from({ length: c }, tok) });
    const batch = [0, 1].map(() => {
      const student = seq(5, 4);
      return { student, teacher: { promptIds: [...student.promptIds, tok(), tok()], completionIds: student.completionIds } };
    });
    const p = await Policy.load(dir);
    try {
      p.model.addLora({ r: 4, alpha: 8, seed: 3 });
      const b = new NativeBackend(p, cfg);
      b.resetOptimizer(1e-2, 4);
      b.snapshotAdapter('ema-teacher');
      const step = async () => {
        await b.opsdBackward(batch, { jsdBeta: 0.5, temperature: 1, normalizer: 8, teacher: 'ema-teacher' });
        await b.optimizerStep(1.0);
        b.emaUpdate('ema-teacher', 0.8);
      };
      await step();
      const direct = join(tmp, 'capture-direct');
      await b.saveState(direct);
      const captured = await b.captureState();
      // The tensors held: adapter A/B, the two moments per parameter, the snapshot (float32).
      const params = p.model.loraParameterNames().length;
      const numel = Object.values(p.model.loraWeights()).reduce((n, t) => n + t.data.length, 0);
      expect(params).to.be.greaterThan(0);
      expect(captured.bytes).to.equal(4 * numel * 4);
      await step(); // the adapter, optimizer and snapshot change after the capture
      const later = join(tmp, 'capture-later');
      await captured.save(later);
      const files = readdirSync(direct).sort();
      expect(files).to.deep.equal(['adapter_config.json', 'adapter_model.safetensors', 'optimizer.safetensors', 'snapshot-ema-teacher.safetensors']);
      expect(readdirSync(later).sort()).to.deep.equal(files);
      for (const f of files) expect(readFileSync(join(later, f)).equals(readFileSync(join(direct, f))), f).to.equal(true);
      const now = join(tmp, 'capture-now');
      await b.saveState(now);
      expect(readFileSync(join(now, 'adapter_model.safetensors')).equals(readFileSync(join(later, 'adapter_model.safetensors')))).to.equal(false);
      captured.release();
      // A released capture, a wrong argument, and the class used directly: errors, never a crash.
      const h = await p.model.captureAdapter();
      expect(h.kind).to.equal('adapter');
      h.release();
      expect(h.bytes).to.equal(0);
      expect(() => h.save(join(tmp, 'capture-released'))).to.throw(/released/);
      const o = await p.model.captureSnapshot('ema-teacher');
      expect(() => o.save(42 as unknown as string)).to.throw(/target/);
      expect((await rejection(p.model.captureSnapshot('nope'))).message).to.match(/no adapter snapshot named 'nope'/);
      o.release();
      const Ctor = (native() as unknown as { HostState: new () => unknown }).HostState;
      expect(() => new Ctor()).to.throw(/captureAdapter/);
      // A write error names the path and loses nothing: the capture can be saved again elsewhere.
      const again = await b.captureState();
      const blocker = join(tmp, 'capture-file');
      writeFileSync(blocker, 'not a dir');
      expect((await rejection(again.save(join(blocker, 'sub')))).message).to.match(/capture-file/);
      await again.save(join(tmp, 'capture-again'));
      expect(readFileSync(join(tmp, 'capture-again', 'adapter_model.safetensors')).equals(readFileSync(join(now, 'adapter_model.safetensors')))).to.equal(true);
      again.release();
    } finally {
      p.dispose();
    }
  });

  describe('a checkpoint write in flight keeps the event loop running', () => {
    let server: Server;
    let port: number;
    before(async () => {
      server = createServer((_req, res) => res.end('judged'));
      await new Promise<void>((r) => server.listen(0, '127.0.0.1', () => r()));
      port = (server.address() as AddressInfo).port;
    });
    after(() => server.close());
    const get = () =>
      new Promise<string>((resolveGet, reject) => {
        request({ host: '127.0.0.1', port, path: '/' }, (res) => {
          let body = '';
          res.on('data', (c) => (body += c));
          res.on('end', () => resolveGet(body));
        })
          .on('error', reject)
          .end();
      });

    it('while a generation holds the model, writeCheckpoint(saveState) and the native snapshot / optimizer / adapter calls stay pending, timers tick and HTTP requests are answered; then they complete', async () => {
      const m = policy.model;
      const cfg = resolveConfig({ flags: { stages: ['opsd'] } });
      const backend = new NativeBackend(policy, cfg);
      backend.resetOptimizer(1e-3, 10);
      backend.snapshotAdapter('ema-teacher');
      const snapFile = join(tmp, 'busy-in.safetensors');
      await m.saveSnapshot('ema-teacher', snapFile);
      const ac = new AbortController();
      // A generation that only ends when aborted: it holds the model lock on its worker thread.
      const gen = generate(m, { prompts: [Int32Array.from([1, 2, 3])], maxNewTokens: 30000, temperature: 1, seed: 1, stopIds: [] }, ac.signal).catch(
        (e: Error) => e,
      );
      await new Promise((r) => setTimeout(r, 20));
      const settled: string[] = [];
      const track = <T>(name: string, p: Promise<T>) =>
        p.then(
          () => settled.push(name),
          (e: Error) => settled.push(`${name}: ${e.message}`),
        );
      const run = join(tmp, 'busy');
      const state = {
        version: 1,
        stageIndex: 0,
        stageStep: 0,
        globalStep: 1,
        cursor: { epoch: 0, position: 0 },
        validation: [],
        stageDone: false,
        seed: 0,
        config: {},
        wallSeconds: 0,
      } satisfies TrainerState;
      const all = Promise.all([
        track(
          'checkpoint',
          writeCheckpoint(run, state, (d) => backend.saveState(d)),
        ),
        track('saveSnapshot', m.saveSnapshot('ema-teacher', join(tmp, 'busy-snap.safetensors'))),
        track('loadSnapshot', m.loadSnapshot('busy-copy', snapFile)),
        track('saveAdapter', m.saveAdapter(join(tmp, 'busy-adapter'))),
      ]);
      let ticks = 0;
      const timer = setInterval(() => ticks++, 1);
      const bodies = [await get(), await get(), await get()];
      await new Promise((r) => setTimeout(r, 30));
      clearInterval(timer);
      expect(bodies).to.deep.equal(['judged', 'judged', 'judged']);
      expect(ticks).to.be.greaterThan(0);
      expect(settled, 'nothing may finish while the generation holds the model').to.deep.equal([]);
      ac.abort();
      expect(((await gen) as Error).name).to.equal('AbortError');
      await all;
      expect(settled.sort()).to.deep.equal(['checkpoint', 'loadSnapshot', 'saveAdapter', 'saveSnapshot']);
      const ck = resolveCheckpoint(run).dir;
      for (const f of ['adapter_model.safetensors', 'adapter_config.json', 'optimizer.safetensors', 'snapshot-ema-teacher.safetensors', 'trainer_state.json'])
        expect(existsSync(join(ck, f)), f).to.equal(true);
      expect(firstBitDiff(readSnapshotFile(join(ck, 'snapshot-ema-teacher.safetensors')), m.loraWeights())).to.equal(null);
      m.dropSnapshot('ema-teacher');
      m.dropSnapshot('busy-copy');
    });
  });
});
