/**
 * One rank of the c10d tests (test/dist.test.ts), started with torchrun's environment. Modes
 * (argv[2]): `ops` runs every collective and prints the results as JSON; `die` (rank 1 exits after
 * the first barrier) and `hang` (rank 1 stops calling collectives) make rank 0's next all-reduce
 * fail; `init` only joins; `big` times a large all-reduce (host tensors copied to the group's
 * device and back). TEST_BACKEND / TEST_DEVICE pick nccl + cuda:N. Prints one JSON line `{ok, ...}` or `{ok: false, error}`.
 */
import { native } from '../../lib/native.js';
import type { NativeProcessGroup } from '../../lib/train/dist.js';

const mode = process.argv[2] ?? 'ops';
const rank = Number(process.env.RANK);
const world = Number(process.env.WORLD_SIZE);
const timeoutMs = Number(process.env.TEST_TIMEOUT_MS ?? 20000);
const out = (o: object) => process.stdout.write(JSON.stringify(o) + '\n');

async function main(): Promise<void> {
  let pg: NativeProcessGroup;
  try {
    pg = await native().distInit({
      rank,
      worldSize: world,
      masterAddr: process.env.MASTER_ADDR,
      masterPort: Number(process.env.MASTER_PORT),
      backend: process.env.TEST_BACKEND === 'nccl' ? 'nccl' : 'gloo',
      device: process.env.TEST_DEVICE ?? 'cpu',
      timeoutMs,
      initTimeoutMs: Number(process.env.TEST_INIT_TIMEOUT_MS ?? 20000),
    });
  } catch (e) {
    out({ ok: false, phase: 'init', error: (e as Error).message });
    return;
  }
  try {
    if (mode === 'init') {
      await pg.barrier();
      out({ ok: true, rank: pg.rank, worldSize: pg.worldSize, backend: pg.backend });
    } else if (mode === 'ops') {
      // Sum over ranks of (rank + 1) * [1, 2, 3] and of a float64 tensor, split into 1-element buckets.
      const sum = await pg.allReduce(
        [
          { data: Float32Array.from([1, 2, 3].map((x) => x * (rank + 1))), shape: [3] },
          { data: Float64Array.from([0.5 * (rank + 1)]), shape: [1, 1] },
        ],
        { op: 'sum', bucketBytes: 4 },
      );
      const avg = await pg.allReduce([{ data: Float32Array.from([rank * 2]), shape: [1] }], { op: 'sum', scale: 1 / world });
      const max = await pg.allReduce([{ data: Float32Array.from([rank]), shape: [1] }], { op: 'max' });
      const bc = await pg.broadcast([{ data: Float32Array.from([rank + 10, rank + 20]), shape: [2] }], { root: world - 1 });
      const objs = await pg.allGatherObject(JSON.stringify({ rank, text: 'é'.repeat(rank + 1) }));
      await pg.barrier();
      out({
        ok: true,
        rank,
        sum: sum.map((t) => Array.from(t.data)),
        sumShapes: sum.map((t) => t.shape),
        avg: Array.from(avg[0]!.data),
        max: Array.from(max[0]!.data),
        bc: Array.from(bc[0]!.data),
        objs: objs.map((s) => JSON.parse(s)),
      });
    } else if (mode === 'big') {
      // All-reduce of TEST_BIG_MB MiB of float32 in 25 MiB buckets, 3 timed repeats after a warm-up.
      const n = Number(process.env.TEST_BIG_MB ?? 256) * 262144;
      const t = { data: new Float32Array(n).fill(rank + 1), shape: [n] };
      await pg.allReduce([t]);
      const times: number[] = [];
      let r: { data: ArrayLike<number> }[] = [];
      for (let i = 0; i < 3; i++) {
        const t0 = performance.now();
        r = await pg.allReduce([t], { bucketBytes: 25 << 20 });
        times.push((performance.now() - t0) / 1000);
      }
      out({ ok: true, rank, first: r[0]!.data[0], last: r[0]!.data[n - 1], seconds: times });
    } else if (mode === 'die' || mode === 'hang') {
      await pg.barrier();
      if (rank === 1) {
        if (mode === 'die') process.exit(3);
        await new Promise((r) => setTimeout(r, timeoutMs * 3)); // alive (heartbeat beats) but never arrives
        out({ ok: true, rank });
        return;
      }
      try {
        await pg.allReduce([{ data: Float32Array.from([1]), shape: [1] }]);
        out({ ok: true, rank });
      } catch (e) {
        out({ ok: false, phase: 'allReduce', error: (e as Error).message });
      }
    }
  } finally {
    pg.destroy();
  }
}

main().then(
  () => process.exit(0),
  (e) => {
    out({ ok: false, phase: 'main', error: (e as Error).message });
    process.exit(1);
  },
);
