/**
 * Data parallelism on libtorch's c10d (native/parallel, lib/train/dist.ts, lib/train/launch.ts) on
 * CPU with Gloo: the collectives across 2 real processes, the fault cases (a dead rank, a hung
 * rank, port in use, unreachable master, mismatched world sizes) and the trainer equivalence —
 * a 2-process `train --nproc-per-node 2` gives the same adapters (≤ 1e-5) as 1 process with the
 * same flags for SFT, OPSD and GRPO, and a run resumed with the other number of processes
 * continues the same data order; Ctrl-C and a killed worker through the launcher.
 */
import { strict as assert } from 'node:assert';
import { spawn, spawnSync } from 'node:child_process';
import { cpSync, existsSync, mkdtempSync, readFileSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { native, packageRoot } from '../lib/native.js';
import { readDistEnv, resolveBatches, resumedBatches, shard } from '../lib/train/dist.js';
import { ensureDefaultModel } from '../lib/train/run.js';
import { resolveConfig, resolveConfigWithOrigins } from '../lib/config/train.js';

const WORKER = join(packageRoot, 'dist', 'test', 'helpers', 'dist-worker.js');
const CLI = join(packageRoot, 'dist', 'bin', 'papergym-native.js');

async function freePort(): Promise<number> {
  return new Promise((res, rej) => {
    const s = createServer();
    s.once('error', rej);
    s.listen(0, '127.0.0.1', () => {
      const p = (s.address() as { port: number }).port;
      s.close(() => res(p));
    });
  });
}

interface WorkerOut {
  ok: boolean;
  error?: string;
  phase?: string;
  [k: string]: unknown;
}

/** Runs the worker script as the given ranks (each with its own env overrides); returns their JSON lines. */
async function runRanks(
  mode: string,
  ranks: { rank: number; world: number; port: number; env?: Record<string, string> }[],
  script = WORKER,
  args: string[] = [],
): Promise<WorkerOut[]> {
  return Promise.all(
    ranks.map(
      (r) =>
        new Promise<WorkerOut>((res) => {
          const env = {
            ...process.env,
            RANK: String(r.rank),
            WORLD_SIZE: String(r.world),
            LOCAL_RANK: String(r.rank),
            MASTER_ADDR: '127.0.0.1',
            MASTER_PORT: String(r.port),
            OMP_NUM_THREADS: '1',
            ...r.env,
          };
          const p = spawn(process.execPath, [script, mode, ...args], { env, stdio: ['ignore', 'pipe', 'pipe'] });
          let so = '';
          let se = '';
          p.stdout.on('data', (d) => (so += d));
          p.stderr.on('data', (d) => (se += d));
          p.on('exit', (code) => {
            const line = so.trim().split('\n').filter(Boolean).pop();
            res(line ? (JSON.parse(line) as WorkerOut) : { ok: false, error: `rank ${r.rank} exited with ${code} and no output: ${se.slice(-2000)}` });
          });
        }),
    ),
  );
}

describe('dist: torchrun environment and sharding', () => {
  it('reads the torchrun variables and rejects bad ones naming the variable', () => {
    assert.equal(readDistEnv({}), null);
    assert.deepEqual(readDistEnv({ WORLD_SIZE: '4', RANK: '3', LOCAL_RANK: '1', LOCAL_WORLD_SIZE: '2', MASTER_ADDR: 'h', MASTER_PORT: '1234' }), {
      rank: 3,
      worldSize: 4,
      localRank: 1,
      localWorldSize: 2,
      masterAddr: 'h',
      masterPort: 1234,
    });
    assert.throws(() => readDistEnv({ WORLD_SIZE: '2' }), /RANK is not set/);
    assert.throws(() => readDistEnv({ WORLD_SIZE: '2', RANK: '2' }), /RANK=2 is outside/);
    assert.throws(() => readDistEnv({ WORLD_SIZE: 'x', RANK: '0' }), /WORLD_SIZE=x/);
  });
  it('shards units contiguously, covering each once', () => {
    for (const [n, w] of [
      [5, 2],
      [3, 3],
      [2, 4],
      [8, 3],
    ] as const) {
      const parts = Array.from({ length: w }, (_, r) => shard(n, r, w));
      assert.equal(parts[0]![0], 0);
      for (let r = 1; r < w; r++) assert.equal(parts[r]![0], parts[r - 1]![1]);
      assert.equal(parts[w - 1]![1], n);
    }
    assert.deepEqual(shard(5, 0, 2), [0, 3]);
  });
  it('per-rank batches: global = per rank × world size, recorded per stage; one of the two per stage; a resume keeps the global batch', () => {
    const cfg = resolveConfig({ flags: { grpo: { questionsPerRank: 3 }, opsd: { batchSizePerRank: 4, microBatch: 2 } } as never });
    const r = resolveBatches(cfg, 2);
    assert.equal(cfg.grpo.questionsPerStep, 6);
    assert.equal(cfg.opsd.batchSize, 8);
    assert.equal(cfg.sft.batchSize, 2); // global mode: as given
    assert.deepEqual(r, {
      worldSize: 2,
      stages: {
        sft: { mode: 'global', global: 2, perRank: 1 },
        opsd: { mode: 'per-rank', global: 8, perRank: 4 },
        grpo: { mode: 'per-rank', global: 6, perRank: 3 },
      },
    });
    // The preset's global batch gives way to a per-rank flag; a file or flag giving both is an error naming both.
    assert.equal(resolveConfigWithOrigins({ preset: 'qwen3-1.7b', flags: { grpo: { questionsPerRank: 4 } } as never }).config.grpo.questionsPerRank, 4);
    // A later layer wins (a global flag over a file's per-rank batch is tested through train below); both on one layer is an error.
    assert.throws(
      () => resolveConfig({ flags: { grpo: { questionsPerStep: 8, questionsPerRank: 4 } } as never }),
      /grpo\.questionsPerStep \(--questions-per-step, the global batch\) and grpo\.questionsPerRank \(--questions-per-rank, the batch per process\) are both given/,
    );
    assert.throws(
      () => resolveConfig({ flags: { opsd: { batchSizePerRank: 3, microBatch: 2 } } as never }),
      /opsd\.batchSizePerRank \(--opsd-batch-size-per-rank\) must be a multiple of opsd\.microBatch/,
    );
    // Resumed on 3 processes (saved on 2, global 6): the global batch stays 6, 2 per process, said once.
    const back = resumedBatches(cfg, 3);
    assert.equal(cfg.grpo.questionsPerStep, 6);
    assert.deepEqual(back.record.stages.grpo, { mode: 'per-rank', global: 6, perRank: 2 });
    assert.equal(back.notes.length, 2);
    assert.match(
      back.notes.join('\n'),
      /grpo: the run was started with grpo\.questionsPerRank 3 on 2 process\(es\) \(global batch 6\); resumed on 3, it keeps the global batch 6/,
    );
    assert.deepEqual(resumedBatches(cfg, 2).notes, []);
  });
});

describe('dist: c10d Gloo collectives across 2 processes', function () {
  this.timeout(120000);
  before(function () {
    const a = native().distAvailable() as { gloo: boolean };
    assert.ok(a.gloo, 'this addon was built without the gloo headers (install libgloo-dev: scripts/setup.sh as root, then rebuild)');
  });

  it('all-reduce (buckets, dtypes, scale, max), broadcast, all-gather of objects, barrier', async () => {
    const port = await freePort();
    const outs = await runRanks(
      'ops',
      [0, 1].map((rank) => ({ rank, world: 2, port })),
    );
    for (const o of outs) {
      assert.ok(o.ok, o.error);
      assert.deepEqual(o.sum, [[3, 6, 9], [1.5]]);
      assert.deepEqual(o.sumShapes, [[3], [1, 1]]);
      assert.deepEqual(o.avg, [1]);
      assert.deepEqual(o.max, [1]);
      assert.deepEqual(o.bc, [11, 21]);
      assert.deepEqual(o.objs, [
        { rank: 0, text: 'é' },
        { rank: 1, text: 'éé' },
      ]);
    }
  });

  it('a rank that dies makes the survivor fail naming it', async () => {
    const port = await freePort();
    const [r0, r1] = await runRanks(
      'die',
      [0, 1].map((rank) => ({ rank, world: 2, port, env: { TEST_TIMEOUT_MS: '30000' } })),
    );
    assert.equal(r1!.ok, false); // exited without output
    assert.equal(r0!.ok, false);
    assert.match(r0!.error!, /rank 0: allReduce \(collective #\d+/);
    assert.match(r0!.error!, /rank 1 is gone/);
  });

  it('a rank that hangs makes the others time out naming it', async () => {
    const port = await freePort();
    const [r0] = await runRanks(
      'hang',
      [0, 1].map((rank) => ({ rank, world: 2, port, env: { TEST_TIMEOUT_MS: '3000' } })),
    );
    assert.equal(r0!.ok, false);
    assert.match(r0!.error!, /rank 0: allReduce/);
    assert.match(r0!.error!, /rank 1 has not entered it/);
  });

  it('port in use, unreachable master and mismatched world sizes fail at init', async () => {
    // Port in use: something else listens on MASTER_PORT.
    const busy = createServer();
    const port = await new Promise<number>((res) => busy.listen(0, '127.0.0.1', () => res((busy.address() as { port: number }).port)));
    try {
      const [r] = await runRanks('init', [{ rank: 0, world: 2, port, env: { TEST_INIT_TIMEOUT_MS: '3000' } }]);
      assert.equal(r!.ok, false);
      assert.match(r!.error!, /rank 0: init: cannot host the rendezvous store on 127\.0\.0\.1:\d+/);
    } finally {
      busy.close();
    }
    // Unreachable master: nobody listens.
    const [u] = await runRanks('init', [{ rank: 1, world: 2, port: await freePort(), env: { TEST_INIT_TIMEOUT_MS: '2000' } }]);
    assert.equal(u!.ok, false);
    assert.match(u!.error!, /rank 1: init: master 127\.0\.0\.1:\d+ unreachable/);
    // Mismatched world sizes: rank 0 thinks 2, rank 1 thinks 3.
    const p2 = await freePort();
    const [m0, m1] = await runRanks(
      'init',
      [
        { rank: 0, world: 2, port: p2 },
        { rank: 1, world: 3, port: p2 },
      ].map((x) => ({ ...x, env: { TEST_INIT_TIMEOUT_MS: '8000' } })),
    );
    assert.equal(m0!.ok, false);
    assert.equal(m1!.ok, false);
    assert.match(m1!.error!, /mismatched world sizes: rank 1 has WORLD_SIZE 3 but rank 0 has 2/);
    assert.match(m0!.error!, /mismatched world sizes/);
  });
});

describe('dist: data-parallel trainer equals one process (Gloo, CPU)', function () {
  this.timeout(600000);
  let tmp: string;
  let cfgFile: string;
  before(function () {
    assert.ok((native().distAvailable() as { gloo: boolean }).gloo, 'addon built without gloo headers');
    ensureDefaultModel();
    tmp = mkdtempSync(join(tmpdir(), 'pg-dist-'));
    cfgFile = join(tmp, 'cfg.yaml');
    // Units that split across 2 ranks: SFT 3 questions (2 + 1: unequal token shares), OPSD 2
    // sampling chunks of 1 question, GRPO 2 chunks of one group of 2; the local judge (real
    // rewards from the tiny model). lr 1e-3 (the tiny default): AdamW's first steps are nearly
    // sign(g) for components with |g| near eps, so rounding-level gradient differences (other
    // padded shapes on 2 ranks) move a handful of such weights by up to ~1e-2 · lr; the global
    // gradient itself agrees to ~1e-7 (checked through the pre-clip grad norm, which AdamW's scale
    // invariance would otherwise hide).
    writeFileSync(
      cfgFile,
      [
        'stages: [sft, opsd, grpo]',
        'seed: 7',
        'sampling: {maxNewTokens: 6, temperature: 1.0}',
        'sft: {steps: 2, lr: 0.001, batchSize: 3}',
        'opsd: {steps: 1, lr: 0.001, batchSize: 2, microBatch: 1}',
        'grpo: {steps: 1, lr: 0.001, questionsPerStep: 2, groupSize: 2, microBatch: 2, advantageScale: none}',
        'validation: { validateEvery: 0, items: 0 }',
        'checkpoint: {every: 1}',
        '',
      ].join('\n'),
    );
  });
  after(() => tmp && rmSync(tmp, { recursive: true, force: true }));

  function train(args: string[], env: Record<string, string> = {}): void {
    const r = spawnSync(process.execPath, [CLI, 'train', ...args], {
      encoding: 'utf8',
      env: { ...process.env, OMP_NUM_THREADS: '1', ...env },
      timeout: 300000,
    });
    assert.equal(r.status, 0, `train ${args.join(' ')} failed (${r.status}):\n${r.stderr.slice(-4000)}`);
  }
  function adapter(dir: string): Record<string, Float32Array> {
    const t = (native().loadSafetensors(join(dir, 'adapter_model.safetensors')) as { tensors: Record<string, { data: Float32Array }> }).tensors;
    return Object.fromEntries(Object.entries(t).map(([k, v]) => [k, v.data]));
  }
  function maxDiff(a: Record<string, Float32Array>, b: Record<string, Float32Array>): number {
    assert.deepEqual(Object.keys(a).sort(), Object.keys(b).sort());
    let m = 0;
    for (const k of Object.keys(a)) for (let i = 0; i < a[k]!.length; i++) m = Math.max(m, Math.abs(a[k]![i]! - b[k]![i]!));
    return m;
  }
  const steps = ['step-000001', 'step-000002', 'step-000003', 'step-000004']; // sft, sft, opsd, grpo

  it('SFT, OPSD and GRPO adapters of 2 processes match 1 process within 1e-5; resuming with 1 process (and 1 -> 2) continues the same data', async () => {
    const one = join(tmp, 'one');
    const two = join(tmp, 'two');
    train(['--config', cfgFile, '--out', one]);
    train(['--config', cfgFile, '--out', two, '--nproc-per-node', '2', '--master-port', String(await freePort())]);
    const ck = (run: string, s: string) => join(run, 'checkpoints', s);
    for (const s of steps) {
      const d = maxDiff(adapter(ck(one, s)), adapter(ck(two, s)));
      assert.ok(d <= 1e-5, `${s}: 2-process adapter differs from 1-process by ${d}`);
    }
    // Every stage moved the adapter (the equality is not vacuous).
    for (let i = 1; i < steps.length; i++)
      assert.ok(maxDiff(adapter(ck(one, steps[i - 1]!)), adapter(ck(one, steps[i]!))) > 1e-5, `${steps[i]} did not change the adapter`);
    assert.ok(maxDiff(adapter(join(one, 'final')), adapter(join(two, 'final'))) <= 1e-5);
    // The same global loss and pre-clip gradient norm per step (rank 0's metrics, aggregated over
    // ranks), plus the all-reduce time; non-zero gradients in every stage.
    const metrics = (run: string) =>
      readFileSync(join(run, 'metrics.jsonl'), 'utf8')
        .trim()
        .split('\n')
        .map((l) => JSON.parse(l) as Record<string, number>)
        .filter((l) => 'loss' in l); // step lines (checkpoints written beside the next step add rows of their own)
    const m1 = metrics(one);
    const m2 = metrics(two);
    assert.equal(m1.length, 4);
    assert.equal(m2.length, 4);
    for (let i = 0; i < 4; i++) {
      assert.ok(m1[i]!.gradNorm! > 1e-3, `step ${i + 1}: zero gradient`);
      assert.ok(Math.abs(m1[i]!.gradNorm! - m2[i]!.gradNorm!) <= 1e-5 * m1[i]!.gradNorm!, `step ${i + 1}: grad norm ${m1[i]!.gradNorm} vs ${m2[i]!.gradNorm}`);
      assert.ok(Math.abs(m1[i]!.loss! - m2[i]!.loss!) <= 1e-5 * Math.max(1, Math.abs(m1[i]!.loss!)), `step ${i + 1}: loss ${m1[i]!.loss} vs ${m2[i]!.loss}`);
      assert.equal(m2[i]!.worldSize, 2);
      assert.ok(m2[i]!.allReduceBytes! > 0 && m2[i]!.allReduceSeconds! >= 0);
      // Rank agreement per step: the phase results travel with the failure flags, and the step
      // seconds with the stop agreement — SFT 2 object all-gathers (was 4), OPSD 3 (was 6), GRPO 3 (was 7).
      assert.equal(m2[i]!.allGathers, [2, 2, 3, 3][i], `step ${i + 1}: ${m2[i]!.allGathers} object all-gathers`);
      assert.ok(m2[i]!.allGatherSeconds! >= 0);
    }
    assert.ok(!readdirSync(two).some((f) => f.startsWith('.write-probe')));

    // Resume the 2-process run after its first step with 1 process: the same data order follows.
    const resumed = join(tmp, 'resumed');
    cpSync(two, resumed, { recursive: true });
    for (const s of steps.slice(1)) rmSync(ck(resumed, s), { recursive: true, force: true });
    rmSync(join(resumed, 'final'), { recursive: true, force: true });
    writeFileSync(join(resumed, 'checkpoints', 'latest'), 'step-000001\n');
    train(['--resume', resumed]);
    for (const s of steps.slice(1)) {
      const d = maxDiff(adapter(ck(one, s)), adapter(ck(resumed, s)));
      assert.ok(d <= 1e-5, `${s} after a 2 -> 1 process resume differs by ${d}`);
    }
    // And the reverse: the 1-process run resumed after its first step with 2 processes.
    const widened = join(tmp, 'widened');
    cpSync(one, widened, { recursive: true });
    for (const s of steps.slice(1)) rmSync(ck(widened, s), { recursive: true, force: true });
    rmSync(join(widened, 'final'), { recursive: true, force: true });
    writeFileSync(join(widened, 'checkpoints', 'latest'), 'step-000001\n');
    train(['--resume', widened, '--nproc-per-node', '2', '--master-port', String(await freePort())]);
    for (const s of steps.slice(1)) {
      const d = maxDiff(adapter(ck(one, s)), adapter(ck(widened, s)));
      assert.ok(d <= 1e-5, `${s} after a 1 -> 2 process resume differs by ${d}`);
    }
  });

  it('--questions-per-rank: the global GRPO batch grows with the processes (1 question per rank on 2 ranks = 2 per step on 1 process); config.json records both', async () => {
    const one = join(tmp, 'per-rank-one');
    const two = join(tmp, 'per-rank-two');
    // The whole schedule: the GRPO step after SFT and OPSD has rewards that differ within a group (a gradient).
    const grpoOnly = ['--config', cfgFile, '--checkpoint-every', '0'];
    train([...grpoOnly, '--out', one, '--questions-per-step', '2']);
    train([...grpoOnly, '--out', two, '--questions-per-rank', '1', '--nproc-per-node', '2', '--master-port', String(await freePort())]);
    const cfg = (run: string) =>
      JSON.parse(readFileSync(join(run, 'config.json'), 'utf8')) as { grpo: { questionsPerStep: number; questionsPerRank: number | null } };
    assert.deepEqual([cfg(one).grpo.questionsPerStep, cfg(one).grpo.questionsPerRank], [2, null]);
    assert.deepEqual([cfg(two).grpo.questionsPerStep, cfg(two).grpo.questionsPerRank], [2, 1]);
    const grpoLine = (run: string) =>
      readFileSync(join(run, 'metrics.jsonl'), 'utf8')
        .trim()
        .split('\n')
        .map((l) => JSON.parse(l) as { stage: string; gradNorm: number })
        .find((l) => l.stage === 'grpo')!;
    assert.ok(grpoLine(one).gradNorm > 1e-3, 'the GRPO step moved the adapter (the equality is not vacuous)');
    const d = maxDiff(adapter(join(one, 'final')), adapter(join(two, 'final')));
    assert.ok(d <= 1e-5, `2 ranks x 1 question differ from 1 process x 2 questions by ${d}`);
    // On one process the same flag is the whole batch: 1 question per step (another adapter).
    const solo = join(tmp, 'per-rank-solo');
    train([...grpoOnly, '--out', solo, '--questions-per-rank', '1']);
    assert.equal(cfg(solo).grpo.questionsPerStep, 1);
    assert.ok(maxDiff(adapter(join(one, 'final')), adapter(join(solo, 'final'))) > 1e-5);
  });

  it('per-rank batches: 2 processes of --questions-per-rank 1 (SFT 2, OPSD 1 per rank) train the global batch 2 × per rank, as 1 process given that global batch; config.json records the mode and the batches', async () => {
    const perRankCfg = join(tmp, 'per-rank.yaml');
    const globalCfg = join(tmp, 'global.yaml');
    const common = [
      'stages: [sft, opsd, grpo]',
      'seed: 7',
      'sampling: {maxNewTokens: 6, temperature: 1.0}',
      'validation: { validateEvery: 0, items: 0 }',
      'checkpoint: {every: 1}',
    ];
    writeFileSync(
      perRankCfg,
      [
        ...common,
        'sft: {steps: 1, lr: 0.001, batchSizePerRank: 2}',
        'opsd: {steps: 1, lr: 0.001, batchSizePerRank: 1, microBatch: 1}',
        'grpo: {steps: 1, lr: 0.001, questionsPerRank: 1, groupSize: 2, microBatch: 2, advantageScale: none}',
        '',
      ].join('\n'),
    );
    writeFileSync(
      globalCfg,
      [
        ...common,
        'sft: {steps: 1, lr: 0.001, batchSize: 4}',
        'opsd: {steps: 1, lr: 0.001, batchSize: 2, microBatch: 1}',
        'grpo: {steps: 1, lr: 0.001, questionsPerStep: 2, groupSize: 2, microBatch: 2, advantageScale: none}',
        '',
      ].join('\n'),
    );
    const two = join(tmp, 'per-rank-all-two');
    const one = join(tmp, 'per-rank-all-one');
    train(['--config', perRankCfg, '--out', two, '--nproc-per-node', '2', '--master-port', String(await freePort())]);
    train(['--config', globalCfg, '--out', one]);
    const conf = JSON.parse(readFileSync(join(two, 'config.json'), 'utf8')) as {
      sft: { batchSize: number };
      opsd: { batchSize: number };
      grpo: { questionsPerStep: number; questionsPerRank: number };
      batching: unknown;
    };
    assert.deepEqual(conf.batching, {
      worldSize: 2,
      stages: {
        sft: { mode: 'per-rank', global: 4, perRank: 2 },
        opsd: { mode: 'per-rank', global: 2, perRank: 1 },
        grpo: { mode: 'per-rank', global: 2, perRank: 1 },
      },
    });
    assert.deepEqual([conf.sft.batchSize, conf.opsd.batchSize, conf.grpo.questionsPerStep, conf.grpo.questionsPerRank], [4, 2, 2, 1]);
    const confOne = JSON.parse(readFileSync(join(one, 'config.json'), 'utf8')) as { batching: { stages: { grpo: unknown } } };
    assert.deepEqual(confOne.batching.stages.grpo, { mode: 'global', global: 2, perRank: 2 });
    for (const s of ['step-000001', 'step-000002', 'step-000003']) {
      const d = maxDiff(adapter(join(one, 'checkpoints', s)), adapter(join(two, 'checkpoints', s)));
      assert.ok(d <= 1e-5, `${s}: per-rank 2-process adapter differs from the 1-process global batch by ${d}`);
    }
    // GRPO took 2 questions × G 2 over the two ranks (one group each).
    const rows = readFileSync(join(two, 'metrics.jsonl'), 'utf8')
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l) as Record<string, number>)
      .filter((l) => 'loss' in l);
    assert.equal(rows.length, 3);
    assert.ok(rows[2]!.keptSequences! <= 4 && rows[2]!.keptSequences! >= 3, `keptSequences ${rows[2]!.keptSequences}`);
  });

  it('Ctrl-C (SIGINT to the launcher) stops both workers at the same step and leaves a checkpoint', async () => {
    const out = join(tmp, 'sigint');
    const p = spawn(
      process.execPath,
      [
        CLI,
        'train',
        '--config',
        cfgFile,
        '--stages',
        'sft',
        '--sft-steps',
        '200',
        '--checkpoint-every',
        '0',
        '--out',
        out,
        '--nproc-per-node',
        '2',
        '--master-port',
        String(await freePort()),
      ],
      { env: { ...process.env, OMP_NUM_THREADS: '1' }, stdio: ['ignore', 'ignore', 'pipe'] },
    );
    let err = '';
    p.stderr.on('data', (d) => (err += d));
    // Interrupt once the first step is in the metrics.
    await new Promise<void>((res, rej) => {
      const iv = setInterval(() => {
        if (existsSync(join(out, 'metrics.jsonl'))) {
          clearInterval(iv);
          p.kill('SIGINT');
          res();
        }
      }, 200);
      p.on('exit', () => {
        clearInterval(iv);
        rej(new Error(`train exited before the first step: ${err.slice(-3000)}`));
      });
    });
    const code = await new Promise<number | null>((res) => p.on('exit', (c) => res(c)));
    assert.equal(code, 130, err.slice(-3000));
    const latest = readFileSync(join(out, 'checkpoints', 'latest'), 'utf8').trim();
    const state = JSON.parse(readFileSync(join(out, 'checkpoints', latest, 'trainer_state.json'), 'utf8')) as { stageStep: number };
    assert.ok(state.stageStep >= 1 && state.stageStep < 200, `stopped at step ${state.stageStep}`);
    assert.match(err, /SIGINT: forwarding to the workers/);
  });

  it('a worker killed mid-run makes the other fail naming its rank, and the launcher exit non-zero', async () => {
    const out = join(tmp, 'kill');
    const p = spawn(
      process.execPath,
      [
        CLI,
        'train',
        '--config',
        cfgFile,
        '--stages',
        'sft',
        '--sft-steps',
        '200',
        '--checkpoint-every',
        '0',
        '--out',
        out,
        '--nproc-per-node',
        '2',
        '--master-port',
        String(await freePort()),
        '--dist-timeout',
        '60',
      ],
      { env: { ...process.env, OMP_NUM_THREADS: '1' }, stdio: ['ignore', 'ignore', 'pipe'] },
    );
    let err = '';
    p.stderr.on('data', (d) => (err += d));
    const exited = new Promise<number | null>((res) => p.on('exit', (c) => res(c)));
    await new Promise<void>((res, rej) => {
      const iv = setInterval(() => {
        const pid = /worker rank 1: pid (\d+)/.exec(err)?.[1];
        if (pid && existsSync(join(out, 'metrics.jsonl'))) {
          clearInterval(iv);
          process.kill(Number(pid), 'SIGKILL');
          res();
        }
      }, 200);
      void exited.then(() => {
        clearInterval(iv);
        rej(new Error(`train exited before the first step: ${err.slice(-3000)}`));
      });
    });
    const code = await exited;
    assert.notEqual(code, 0);
    assert.match(err, /worker rank 1 \(pid \d+\) was killed by SIGKILL/);
    assert.match(err, /rank 0: (allReduce|allGatherObject|barrier) \(collective #\d+.*failed: rank 1 is gone/);
  });

  /** Both ranks of the failed-step worker (test/helpers/dist-train-worker.ts); their JSON lines. */
  async function trainRanks(mode: string, out: string): Promise<WorkerOut[]> {
    const port = await freePort();
    const script = join(packageRoot, 'dist', 'test', 'helpers', 'dist-train-worker.js');
    return runRanks(
      mode,
      [0, 1].map((rank) => ({ rank, world: 2, port, env: { LOCAL_WORLD_SIZE: '2' } })),
      script,
      [out],
    );
  }

  it('a judge that fails on one rank stops both ranks at that step (no hang), rank 0 writing the checkpoint before it', async () => {
    const out = join(tmp, 'judge-throws');
    const [r0, r1] = await trainRanks('judge-throws', out);
    assert.equal(r1!.ok, false, JSON.stringify(r1));
    assert.equal(r1!.name, 'TrainingStoppedError');
    assert.match(r1!.error!, /\[grpo\] step 2 failed: judge endpoint down \(test fault on rank 1\)/);
    assert.equal(r0!.ok, false, JSON.stringify(r0));
    assert.equal(r0!.name, 'TrainingStoppedError');
    assert.match(r0!.error!, /\[grpo\] step 2 failed: GRPO rollouts and rewards failed on rank 1: judge endpoint down/);
    assert.match(r0!.error!, /resume with: papergym-native train --resume /);
    assert.equal(r0!.checkpoint, join(out, 'checkpoints', 'step-000001'));
    assert.ok(existsSync(join(out, 'checkpoints', 'step-000001', 'trainer_state.json')) || existsSync(join(out, 'checkpoints', 'step-000001')));
    const rows = readFileSync(join(out, 'metrics.jsonl'), 'utf8')
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l) as Record<string, unknown>);
    assert.equal(rows.filter((r) => r.stopped).length, 1); // rank 0 alone writes metrics
  });

  it("the judge null rate is judged over all ranks' verdicts: both ranks stop although rank 0's own are all valid", async () => {
    const out = join(tmp, 'judge-nulls');
    const [r0, r1] = await trainRanks('judge-nulls', out);
    for (const r of [r0!, r1!]) {
      assert.equal(r.ok, false, JSON.stringify(r));
      assert.equal(r.name, 'TrainingStoppedError');
      assert.match(r.error!, /\[grpo\] step 2 failed: judge .*GRPO step 2: 8 of 16 verdicts are null \(50% > 25%/);
    }
    assert.equal(r0!.checkpoint, join(out, 'checkpoints', 'step-000001'));
  });
});
