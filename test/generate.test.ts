/**
 * Native batched generation: greedy parity with transformers `generate` (committed fixture +
 * live run of scripts/ref_generate.py), sampling checks, logprob parity with a teacher-forced
 * forward, n per prompt, stop ids + row compaction, async behaviour (timers, abort, queueing),
 * bad input and out-of-memory.
 *
 * Regenerate the fixtures: python3 scripts/ref_generate.py --model <tiny dir> --job <job> (see
 * test/fixtures/generate/*.json for the job fields; the tiny dirs come from test/helpers/tiny.ts).
 */
import { expect } from 'chai';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { native, packageRoot } from '../lib/native.js';
import { loadModel, type Qwen3Model } from '../lib/model/qwen3.js';
import { generate, sampleFromLogits, type GenerateResult } from '../lib/model/policy.js';
import { python, tinyFingerprint, tinyModel } from './helpers/tiny.js';
import { rejection } from './helpers/run.js';

interface GreedyFixture {
  model: 'tiny-tied' | 'tiny-untied';
  fingerprint: number;
  prompts: number[][];
  max_new_tokens: number;
  stop_ids: number[];
  pad_id: number;
  completions: number[][];
}

const FIX = join(packageRoot, 'test', 'fixtures', 'generate');
const fixture = (name: string): GreedyFixture => JSON.parse(readFileSync(join(FIX, `greedy-${name}.json`), 'utf8'));
const ids = (c: { tokenIds: Int32Array }) => Array.from(c.tokenIds);

/** log-softmax(row / T)[tok] in float64. */
function logprobAt(logits: Float32Array, offset: number, V: number, T: number, tok: number): number {
  let mx = -Infinity;
  for (let v = 0; v < V; v++) mx = Math.max(mx, logits[offset + v] / T);
  let s = 0;
  for (let v = 0; v < V; v++) s += Math.exp(logits[offset + v] / T - mx);
  return logits[offset + tok] / T - mx - Math.log(s);
}

describe('generate (native batched KV-cache sampling)', function () {
  this.timeout(180000);
  const models: Record<string, Qwen3Model> = {};
  let tied: Qwen3Model;
  let base: GreedyFixture;
  before(async () => {
    for (const name of ['tiny-tied', 'tiny-untied'] as const) models[name] = await loadModel(tinyModel(name));
    tied = models['tiny-tied'];
    base = fixture('tiny-tied');
  });

  describe('greedy parity with transformers generate', () => {
    for (const name of ['tiny-tied', 'tiny-untied']) {
      it(`${name}: left-padded batch, 64 new tokens, identical ids (fixture)`, async () => {
        const f = fixture(name);
        expect(tinyFingerprint(tinyModel(f.model)), 'tiny model changed: regenerate the fixture').to.be.closeTo(f.fingerprint, 1e-6 * f.fingerprint);
        const r = await generate(models[name], { prompts: f.prompts, temperature: 0, maxNewTokens: f.max_new_tokens, stopIds: f.stop_ids, padId: f.pad_id });
        expect(r.completions.map(ids)).to.deep.equal(f.completions);
        for (const c of r.completions) expect(c.finishReason).to.equal(f.completions[c.promptIndex].length < f.max_new_tokens ? 'stop' : 'length');
      });
    }

    it('tiny-untied: identical ids to scripts/ref_generate.py run live', async function () {
      const f = fixture('tiny-untied');
      const dir = mkdtempSync(join(tmpdir(), 'pg-gen-'));
      const prompts = [f.prompts[1], f.prompts[3], [100, 200, 300, 400, 500]];
      const job = join(dir, 'job.json');
      writeFileSync(job, JSON.stringify({ prompts, max_new_tokens: 64, stop_ids: f.stop_ids, pad_id: f.pad_id }));
      const py = spawnSync(python, [join(packageRoot, 'scripts', 'ref_generate.py'), '--model', tinyModel('tiny-untied'), '--job', job], {
        encoding: 'utf8',
        env: { ...process.env, OMP_NUM_THREADS: '2' },
      });
      if (py.error || (py.status !== 0 && /No module named/.test(py.stderr ?? ''))) {
        if (process.env.CI) throw new Error(`reference unavailable in CI: ${py.error?.message ?? py.stderr}`);
        this.skip();
      }
      expect(py.status, py.stderr).to.equal(0);
      const ref = JSON.parse(py.stdout) as { completions: number[][] };
      const r = await generate(models['tiny-untied'], { prompts, temperature: 0, maxNewTokens: 64, stopIds: f.stop_ids, padId: f.pad_id });
      expect(r.completions.map(ids)).to.deep.equal(ref.completions);
    });

    // The other architectures / config forms (scripts/make_tiny_qwen3.py): every decode path (the
    // dynamic cache and the static-cache step that CUDA graphs replay) against transformers generate,
    // one reference process for all of them.
    describe('other architectures: identical greedy ids to scripts/ref_generate.py run live', () => {
      const names = ['tiny-nohd', 'tiny-yarn', 'tiny-qwen25', 'tiny-llama3', 'tiny-llama-bias'] as const;
      const f = fixture('tiny-untied');
      const prompts = [f.prompts[1], f.prompts[3], [100, 200, 300, 400, 500]];
      let ref: Record<string, number[][]> | undefined;
      before(function () {
        this.timeout(600000);
        const dir = mkdtempSync(join(tmpdir(), 'pg-gen-'));
        const job = join(dir, 'job.json');
        writeFileSync(job, JSON.stringify({ prompts, max_new_tokens: 32, stop_ids: f.stop_ids, pad_id: f.pad_id }));
        const py = spawnSync(python, [join(packageRoot, 'scripts', 'ref_generate.py'), ...names.flatMap((n) => ['--model', tinyModel(n)]), '--job', job], {
          encoding: 'utf8',
          env: { ...process.env, OMP_NUM_THREADS: '2' },
        });
        if (py.error || (py.status !== 0 && /No module named/.test(py.stderr ?? ''))) {
          if (process.env.CI) throw new Error(`reference unavailable in CI: ${py.error?.message ?? py.stderr}`);
          return;
        }
        expect(py.status, py.stderr).to.equal(0);
        ref = (JSON.parse(py.stdout) as { by_model: Record<string, number[][]> }).by_model;
      });
      for (const name of names)
        it(`${name}: dynamic and static-cache decode`, async function () {
          if (!ref) this.skip();
          const m = await loadModel(tinyModel(name));
          for (const staticCache of [false, true]) {
            const r = await generate(m, { prompts, temperature: 0, maxNewTokens: 32, stopIds: f.stop_ids, padId: f.pad_id, staticCache });
            expect((r as unknown as { decodePath: string }).decodePath).to.equal(staticCache ? 'static' : 'dynamic');
            expect(r.completions.map(ids), `staticCache ${staticCache}`).to.deep.equal(ref![tinyModel(name)]);
          }
          m.dispose();
        });
    });

    it('top-k = 1 at T = 1 equals greedy; n copies of a greedy prompt are identical', async () => {
      const prompts = base.prompts.slice(0, 3);
      const k1 = await generate(tied, { prompts, temperature: 1, topK: 1, maxNewTokens: 24, seed: 5, n: 2 });
      for (const c of k1.completions) expect(ids(c)).to.deep.equal(base.completions[c.promptIndex].slice(0, 24));
      expect(k1.completions.map((c) => [c.promptIndex, c.sampleIndex])).to.deep.equal([
        [0, 0],
        [0, 1],
        [1, 0],
        [1, 1],
        [2, 0],
        [2, 1],
      ]);
    });
  });

  describe('sampling', () => {
    it('same seed → same samples; another seed → different samples', async () => {
      const opts = { prompts: base.prompts.slice(0, 2), temperature: 1.0, topP: 0.95, topK: 50, maxNewTokens: 16, n: 2 };
      const a = await generate(tied, { ...opts, seed: 123 });
      const b = await generate(tied, { ...opts, seed: 123 });
      const c = await generate(tied, { ...opts, seed: 124 });
      expect(a.seed).to.equal(123);
      expect(a.completions.map(ids)).to.deep.equal(b.completions.map(ids));
      expect(a.completions.map(ids)).to.not.deep.equal(c.completions.map(ids));
      const d = await generate(tied, { ...opts });
      expect(d.seed).to.be.a('number');
      const e = await generate(tied, { ...opts, seed: d.seed });
      expect(e.completions.map(ids)).to.deep.equal(d.completions.map(ids));
    });

    it('n per prompt (one prefill, expanded cache) equals repeating the prompt', async () => {
      const p = base.prompts;
      const opts = { temperature: 1.0, maxNewTokens: 12, seed: 9 };
      const expanded = await generate(tied, { ...opts, prompts: [p[0], p[2]], n: 3 });
      const repeated = await generate(tied, { ...opts, prompts: [p[0], p[0], p[0], p[2], p[2], p[2]], n: 1 });
      expect(expanded.completions.map(ids)).to.deep.equal(repeated.completions.map(ids));
      expect(expanded.promptTokens).to.equal(p[0].length + p[2].length);
      // the three samples of one prompt differ
      expect(new Set(expanded.completions.slice(0, 3).map((c) => ids(c).join(','))).size).to.equal(3);
    });

    it('stop ids end a row (stop id kept, finish "stop") while the others continue unchanged through compaction', async () => {
      // stop on the 6th greedy token of prompt 1 (not occurring earlier in any other row's first 40 tokens)
      const stopTok = base.completions[1][5];
      const firstIdx = base.completions[1].indexOf(stopTok);
      for (const [i, c] of base.completions.entries()) if (i !== 1) expect(c.slice(0, 40)).to.not.include(stopTok);
      const r = await generate(tied, { prompts: base.prompts, temperature: 0, maxNewTokens: 40, stopIds: [stopTok, 151645], compactFraction: 0.01 });
      expect(r.completions[1].finishReason).to.equal('stop');
      expect(ids(r.completions[1])).to.deep.equal(base.completions[1].slice(0, firstIdx + 1));
      expect(r.completions[1].logprobs.length).to.equal(firstIdx + 1);
      for (const i of [0, 2, 3]) {
        expect(r.completions[i].finishReason).to.equal('length');
        expect(ids(r.completions[i])).to.deep.equal(base.completions[i].slice(0, 40));
      }
      expect(r.compactions).to.equal(1);
    });

    it('logprobs equal a teacher-forced forward at the same T (≤ 1e-4), full-vocabulary log-softmax', async () => {
      const V = Number(tied.config.vocab_size);
      for (const [T, topK, topP] of [
        [0.7, 20, 0.9],
        [1.0, 0, 1.0],
        [1.3, 0, 0.8],
      ] as const) {
        const prompts = [base.prompts[1], base.prompts[0]];
        const r = await generate(tied, { prompts, temperature: T, topK, topP, maxNewTokens: 10, seed: 77, n: 2 });
        for (const c of r.completions) {
          const p = prompts[c.promptIndex];
          const seq = [...p, ...ids(c)];
          const out = await tied.forward({ inputIds: { data: Int32Array.from(seq), shape: [1, seq.length] } });
          const logits = out.logits!.data;
          for (let j = 0; j < c.tokenIds.length; j++) {
            const ref = logprobAt(logits, (p.length - 1 + j) * V, V, T, c.tokenIds[j]);
            expect(Math.abs(c.logprobs[j] - ref), `T=${T} row ${c.promptIndex}/${c.sampleIndex} token ${j}`).to.be.lessThan(1e-4);
          }
        }
      }
    });

    it('tiny-vocab sampler: empirical frequencies at T = 1 match the softmax (chi-square), truncation renormalises', () => {
      const row = [1.2, -0.3, 0.5, 2.0, -1.5, 0.0];
      const V = row.length;
      const R = 30000;
      const data = new Float32Array(R * V);
      for (let r = 0; r < R; r++) data.set(row, r * V);
      const softmax = (xs: number[]) => {
        const m = Math.max(...xs);
        const e = xs.map((x) => Math.exp(x - m));
        const s = e.reduce((a, b) => a + b, 0);
        return e.map((x) => x / s);
      };
      const chi2 = (counts: number[], probs: number[]) =>
        counts.reduce((acc, c, i) => (probs[i] > 0 ? acc + (c - R * probs[i]) ** 2 / (R * probs[i]) : acc), 0);
      const count = (tok: Int32Array) => {
        const c = new Array(V).fill(0);
        for (const t of tok) c[t]++;
        return c;
      };
      // T = 1, no truncation: 5 degrees of freedom; P(chi2 > 25) ≈ 1.4e-4
      const full = sampleFromLogits({ data, shape: [R, V] }, { temperature: 1, seed: 3 });
      const p = softmax(row);
      expect(chi2(count(full.tokenIds), p)).to.be.lessThan(25);
      for (let r = 0; r < 50; r++) expect(full.logprobs[r]).to.be.closeTo(Math.log(p[full.tokenIds[r]]), 1e-5);
      // top-k 3 at T = 1: sampled from the renormalised top 3, logprob still the full softmax
      const k3 = sampleFromLogits({ data, shape: [R, V] }, { temperature: 1, topK: 3, seed: 4 });
      const top3 = [3, 0, 2];
      const pk = row.map((x, i) => (top3.includes(i) ? Math.exp(x) : 0));
      const sk = pk.reduce((a, b) => a + b, 0);
      const ck = count(k3.tokenIds);
      expect(ck.filter((_, i) => !top3.includes(i)).every((x) => x === 0)).to.equal(true);
      expect(
        chi2(
          ck,
          pk.map((x) => x / sk),
        ),
      ).to.be.lessThan(20); // 2 dof
      for (let r = 0; r < 50; r++) expect(k3.logprobs[r]).to.be.closeTo(Math.log(p[k3.tokenIds[r]]), 1e-5);
      // top-p 0.6: sorted probs ≈ [.50, .22, .11, ...] → keeps the first two (preceding mass .50 < .6, .72 ≥ .6)
      const pp = sampleFromLogits({ data, shape: [R, V] }, { temperature: 1, topP: 0.6, seed: 5 });
      const cp = count(pp.tokenIds);
      expect(cp.filter((_, i) => i !== 3 && i !== 0).every((x) => x === 0)).to.equal(true);
      const q = [p[0], 0, 0, p[3], 0, 0].map((x) => x / (p[0] + p[3]));
      expect(chi2(cp, q)).to.be.lessThan(15); // 1 dof
      // T = 2 changes the distribution to softmax(row / 2)
      const t2 = sampleFromLogits({ data, shape: [R, V] }, { temperature: 2, seed: 6 });
      const p2 = softmax(row.map((x) => x / 2));
      expect(chi2(count(t2.tokenIds), p2)).to.be.lessThan(25);
      expect(t2.logprobs[0]).to.be.closeTo(Math.log(p2[t2.tokenIds[0]]), 1e-5);
      // top-p alone over a large vocabulary: nucleus inside the top 1024 (fast path) …
      const VL = 5000;
      const big = new Float32Array(4000 * VL).fill(-10);
      for (let r = 0; r < 4000; r++) big.set([5, 4, 3, 2, 1], r * VL);
      const np = sampleFromLogits({ data: big, shape: [4000, VL] }, { temperature: 1, topP: 0.9, seed: 8 });
      const e5 = [5, 4, 3].map(Math.exp);
      const cnp = [0, 0, 0];
      for (const t of np.tokenIds) {
        expect(t).to.be.lessThan(3);
        cnp[t]++;
      }
      const chi = cnp.reduce((acc, c, i) => acc + (c - (4000 * e5[i]) / (e5[0] + e5[1] + e5[2])) ** 2 / ((4000 * e5[i]) / (e5[0] + e5[1] + e5[2])), 0);
      expect(chi).to.be.lessThan(20);
      // … and wider than 1024 tokens (falls back to a full sort): flat logits, top-p 0.3 keeps 1500 tokens
      const flat = sampleFromLogits({ data: new Float32Array(200 * VL), shape: [200, VL] }, { temperature: 1, topP: 0.3, seed: 9 });
      expect(new Set(flat.tokenIds).size).to.be.greaterThan(150);
      for (const lp of flat.logprobs) expect(lp).to.be.closeTo(-Math.log(VL), 1e-4);
      // greedy
      const g = sampleFromLogits({ data: Float32Array.from(row), shape: [1, V] }, { temperature: 0 });
      expect(g.tokenIds[0]).to.equal(3);
      // same seed, same draws
      expect(Array.from(sampleFromLogits({ data, shape: [R, V] }, { temperature: 1, seed: 3 }).tokenIds.slice(0, 100))).to.deep.equal(
        Array.from(full.tokenIds.slice(0, 100)),
      );
    });
  });

  describe('async', () => {
    it('keeps the event loop free: timers fire during a long generation', async () => {
      let ticks = 0;
      const iv = setInterval(() => ticks++, 5);
      const t0 = performance.now();
      const r = await generate(tied, { prompts: base.prompts, temperature: 1, maxNewTokens: 48, n: 2, seed: 1 });
      const ms = performance.now() - t0;
      clearInterval(iv);
      expect(r.newTokens).to.equal(8 * 48);
      expect(ticks).to.be.greaterThan(Math.min(10, ms / 20));
    });

    it('AbortSignal cancels within one decode step; queued calls abort without running; the model stays usable', async () => {
      const ac = new AbortController();
      const t0 = performance.now();
      const long = generate(tied, { prompts: base.prompts, temperature: 1, maxNewTokens: 5000, seed: 2 }, ac.signal);
      const queued = generate(tied, { prompts: base.prompts, temperature: 1, maxNewTokens: 5000, seed: 2, signal: ac.signal });
      setTimeout(() => ac.abort(), 300);
      const e = await rejection(long);
      const elapsed = performance.now() - t0;
      expect(e.name).to.equal('AbortError');
      expect(e.code).to.equal('ABORT_ERR');
      expect(elapsed).to.be.lessThan(5000);
      const q = await rejection(queued);
      expect(q.name).to.equal('AbortError');
      // already aborted: rejects at once
      expect((await rejection(generate(tied, { prompts: [[1, 2]] }, ac.signal))).name).to.equal('AbortError');
      const ok = await generate(tied, { prompts: [[1, 2, 3]], temperature: 0, maxNewTokens: 4 });
      expect(ok.completions[0].tokenIds.length).to.equal(4);
    });

    it('queues concurrent calls on one model (results equal sequential ones, no race)', async () => {
      const mk = (seed: number) => ({ prompts: base.prompts.slice(0, 2), temperature: 1, maxNewTokens: 8, seed, n: 2 });
      const seq: GenerateResult[] = [];
      for (const s of [1, 2, 3]) seq.push(await generate(tied, mk(s)));
      const par = await Promise.all([
        generate(tied, mk(1)),
        tied.forward({ inputIds: { data: Int32Array.from([1, 2]), shape: [1, 2] } }),
        generate(tied, mk(2)),
        generate(tied, mk(3)),
      ]);
      const gens = [par[0], par[2], par[3]] as GenerateResult[];
      expect(gens.map((g) => g.completions.map(ids))).to.deep.equal(seq.map((g) => g.completions.map(ids)));
    });

    it('read-only inference calls share the model: prefixLogprobs and sequenceLogprobs resolve while a long generate decodes (the local judge beside the rollout), with the results of calls made alone; training waits for the generate', async () => {
      const long = { prompts: base.prompts.slice(0, 2), temperature: 0, maxNewTokens: 1200, stopIds: [] as number[] };
      const prefixArgs = {
        prefixIds: { data: Int32Array.from([151644, 872, 198, 9707]), shape: [1, 4] },
        suffixIds: { data: Int32Array.from([13, 77091, 40, 1079, 0, 0]), shape: [2, 3] },
        suffixLengths: { data: Int32Array.from([3, 1]), shape: [2] },
        candidates: { data: Int32Array.from([9454, 2753]), shape: [2] },
        adapter: 'none' as const,
      };
      const seqArgs = {
        inputIds: { data: Int32Array.from([151644, 872, 198, 9707, 1879]), shape: [1, 5] },
        attentionMask: { data: Int32Array.from([1, 1, 1, 1, 1]), shape: [1, 5] },
      };
      const n = native();
      const alonePrefix = Array.from((await n.prefixLogprobs(tied, prefixArgs)).data as Float32Array);
      const aloneSeq = Array.from((await n.sequenceLogprobs(tied, seqArgs)).data as Float32Array);
      const aloneGen = await generate(tied, long);
      let generating = true;
      const running = generate(tied, long).finally(() => (generating = false));
      await new Promise((r) => setTimeout(r, 30)); // the generate holds the model on its worker thread
      expect(generating, 'the generate is still decoding').to.equal(true);
      const during = await Promise.all([n.prefixLogprobs(tied, prefixArgs), n.sequenceLogprobs(tied, seqArgs)]);
      expect(generating, 'prefixLogprobs and sequenceLogprobs resolved while the generate decoded').to.equal(true);
      // An exclusive call (a forward with autograd state is exclusive too; here the plain forward) waits for the generate.
      const fwd = tied.forward({ inputIds: { data: Int32Array.from([1, 2]), shape: [1, 2] } }).then(() => generating);
      const gen = await running;
      expect(await fwd, 'the exclusive forward ran after the generate').to.equal(false);
      expect(Array.from(during[0].data as Float32Array)).to.deep.equal(alonePrefix);
      expect(Array.from(during[1].data as Float32Array)).to.deep.equal(aloneSeq);
      expect(gen.completions.map(ids)).to.deep.equal(aloneGen.completions.map(ids));
    });

    it('shared lock: more scoring calls than libuv threads beside a generate, a training step queued among them, then dispose — every call settles with its sequential result or ERR_PG_DISPOSED, nothing crashes', async () => {
      const m = await loadModel(tinyModel('tiny-tied'));
      m.addLora({ r: 2, alpha: 4, seed: 1 });
      const n = native();
      const L = 6;
      const seqArgs = (i: number) => ({
        inputIds: { data: Int32Array.from([151644, 872, 198, 9707 + i, 1879, 13]), shape: [1, L] },
        attentionMask: { data: Int32Array.from(Array(L).fill(1)), shape: [1, L] },
        adapter: (i % 2 ? 'none' : 'active') as 'none' | 'active',
      });
      const ceArgs = {
        inputIds: { data: Int32Array.from([151644, 872, 198, 9707, 1879, 13]), shape: [1, L] },
        labels: { data: Int32Array.from([151644, 872, 198, 9707, 1879, 13]), shape: [1, L] },
      };
      const alone: number[][] = [];
      for (let i = 0; i < 12; i++) alone.push(Array.from((await n.sequenceLogprobs(m, seqArgs(i))).data as Float32Array));
      const aloneLoss = (await m.crossEntropyBackward(ceArgs)).loss;
      m.zeroGrad();
      const _running = generate(m, { prompts: base.prompts.slice(0, 2), temperature: 0, maxNewTokens: 400, stopIds: [] });
      await new Promise((r) => setTimeout(r, 20));
      const scoring = Array.from({ length: 12 }, (_, i) => n.sequenceLogprobs(m, seqArgs(i)));
      const ce = m.crossEntropyBackward(ceArgs);
      const later = Array.from({ length: 4 }, (_, i) => n.sequenceLogprobs(m, seqArgs(i)));
      expect((await ce).loss, 'the exclusive training call between the scoring calls: its sequential loss').to.equal(aloneLoss);
      const out = await Promise.all([...scoring, ...later]);
      out.forEach((o, i) => expect(Array.from(o.data as Float32Array), `call ${i}`).to.deep.equal(alone[i % 12]));
      // Dispose while a generate and scoring calls are in flight: dispose waits for the running calls;
      // each call resolves (it ran first) or rejects with ERR_PG_DISPOSED.
      const gen2 = generate(m, { prompts: base.prompts.slice(0, 2), temperature: 0, maxNewTokens: 400, stopIds: [] });
      await new Promise((r) => setTimeout(r, 20));
      const inflight = [
        gen2,
        ...Array.from({ length: 10 }, (_, i) => n.sequenceLogprobs(m, seqArgs(i))),
        generate(m, { prompts: [[1, 2, 3]], maxNewTokens: 4 }),
      ];
      m.dispose();
      const settled = await Promise.allSettled(inflight);
      for (const s of settled) if (s.status === 'rejected') expect((s.reason as { code?: string }).code, String(s.reason)).to.equal('ERR_PG_DISPOSED');
      expect(settled[settled.length - 1]!.status, 'a generate queued behind the disposed one').to.equal('rejected');
      expect(m.disposed).to.equal(true);
      expect((await rejection((async () => n.sequenceLogprobs(m, seqArgs(0)))())).code).to.equal('ERR_PG_DISPOSED');
    });
  });

  describe('bad input', () => {
    const argErr = async (p: () => Promise<unknown>, re: RegExp) => {
      let e: (Error & { code?: string }) | undefined;
      try {
        await p();
      } catch (x) {
        e = x as Error & { code?: string };
      }
      expect(e, `expected a TypeError matching ${re}`).to.be.instanceOf(TypeError);
      expect(e!.message).to.match(re);
      expect(e!.code).to.equal('ERR_PG_ARG');
    };
    it('rejects empty prompts, too-long prompts, bad temperature/topP/topK/n/maxNewTokens and out-of-vocab ids with TypeErrors naming the argument', async () => {
      const ctx = Number(tied.config.max_position_embeddings);
      await argErr(() => generate(tied, { prompts: [[1, 2], []] }), /prompts\[1\] is empty/);
      await argErr(() => generate(tied, { prompts: [] }), /prompts must be a non-empty/);
      await argErr(() => generate(tied, { prompts: [new Array(ctx + 1).fill(5)] }), /prompts\[0\] has \d+ tokens, longer than the model context/);
      await argErr(() => generate(tied, { prompts: [new Array(ctx - 10).fill(5)], maxNewTokens: 20 }), /prompts\[0\].*maxNewTokens = 20.*context/);
      await argErr(() => generate(tied, { prompts: [[1]], temperature: -0.5 }), /temperature must be a finite number >= 0/);
      await argErr(() => generate(tied, { prompts: [[1]], topP: 0 }), /topP must be in \(0, 1\]/);
      await argErr(() => generate(tied, { prompts: [[1]], topP: 1.5 }), /topP must be in \(0, 1\]/);
      await argErr(() => generate(tied, { prompts: [[1]], topK: -1 }), /topK/);
      await argErr(() => generate(tied, { prompts: [[1]], n: 0 }), /n must be an integer >= 1/);
      await argErr(() => generate(tied, { prompts: [[1]], maxNewTokens: 0 }), /maxNewTokens must be an integer >= 1/);
      await argErr(() => generate(tied, { prompts: [[1, 10 ** 7]] }), /prompts\[0\]\[1\].*outside \[0, vocab_size/);
      await argErr(() => generate(tied, { prompts: [[1]], stopIds: [-3] }), /stopIds\[0\]/);
      await argErr(() => generate({} as never, { prompts: [[1]] }), /model/);
      expect(() => sampleFromLogits({ data: new Float32Array(6), shape: [2, 3] }, { topP: 2 })).to.throw(TypeError, /topP/);
    });

    it('out of memory during generation → Error ERR_PG_OOM, cache freed, model still usable', async () => {
      const e = await rejection(generate(tied, { prompts: base.prompts, temperature: 1, maxNewTokens: 20, simulateOomAtStep: 3 }));
      expect(e.code).to.equal('ERR_PG_OOM');
      expect(e).to.not.be.instanceOf(TypeError);
      const over = readFileSync('/proc/sys/vm/overcommit_memory', 'utf8').trim();
      if (over !== '1') {
        // a real allocation failure: expanding the cache to 10^11 rows (~hundreds of TB) after the prefill
        const big = await rejection(generate(tied, { prompts: [[1, 2, 3]], n: 1e11, maxNewTokens: 4 }));
        expect(big.code).to.equal('ERR_PG_OOM');
      }
      const ok = await generate(tied, { prompts: base.prompts, temperature: 0, maxNewTokens: 8 });
      expect(ok.completions.map(ids)).to.deep.equal(base.completions.map((c) => c.slice(0, 8)));
    });
  });
});
