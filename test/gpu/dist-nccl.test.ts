/**
 * c10d ProcessGroupNCCL across 2 GPUs (native/parallel): the collectives of test/dist.test.ts on
 * NCCL (cuda:RANK per process) and a 256 MiB all-reduce (printed seconds; no timed assertion).
 * Skips, printing why, without 2 CUDA devices or an addon built with NCCL.
 */
import { strict as assert } from 'node:assert';
import { spawn } from 'node:child_process';
import { createServer } from 'node:net';
import { join } from 'node:path';
import { native, packageRoot, cudaAvailable } from '../../lib/native.js';

const WORKER = join(packageRoot, 'dist', 'test', 'helpers', 'dist-worker.js');

async function freePort(): Promise<number> {
  return new Promise((res) => {
    const s = createServer();
    s.listen(0, '127.0.0.1', () => {
      const p = (s.address() as { port: number }).port;
      s.close(() => res(p));
    });
  });
}

function runRanks(mode: string, port: number, env: Record<string, string> = {}): Promise<Record<string, unknown>[]> {
  return Promise.all(
    [0, 1].map(
      (rank) =>
        new Promise<Record<string, unknown>>((res) => {
          const p = spawn(process.execPath, [WORKER, mode], {
            env: {
              ...process.env,
              RANK: String(rank),
              WORLD_SIZE: '2',
              LOCAL_RANK: String(rank),
              MASTER_ADDR: '127.0.0.1',
              MASTER_PORT: String(port),
              TEST_BACKEND: 'nccl',
              TEST_DEVICE: `cuda:${rank}`,
              NCCL_NVLS_ENABLE: '0',
              ...env,
            },
            stdio: ['ignore', 'pipe', 'pipe'],
          });
          let so = '';
          let se = '';
          p.stdout.on('data', (d) => (so += d));
          p.stderr.on('data', (d) => (se += d));
          p.on('exit', (code) => {
            const line = so.trim().split('\n').filter(Boolean).pop();
            res(line ? JSON.parse(line) : { ok: false, error: `rank ${rank} exited ${code}: ${se.slice(-3000)}` });
          });
        }),
    ),
  );
}

describe('gpu: c10d NCCL process group on 2 GPUs', function () {
  this.timeout(300000);
  before(function () {
    const devices = cudaAvailable() ? native().runtimeInfo().cudaDevices.length : 0;
    const avail = native().distAvailable() as { nccl: boolean };
    if (devices < 2 || !avail.nccl) {
      console.log(`    skipped: needs 2 CUDA devices and an addon built with NCCL (devices ${devices}, nccl ${avail.nccl})`);
      this.skip();
    }
  });

  it('all-reduce, broadcast, all-gather of objects and barrier give the Gloo results', async () => {
    const outs = await runRanks('ops', await freePort());
    for (const o of outs) {
      assert.ok(o.ok, String(o.error));
      assert.deepEqual(o.sum, [[3, 6, 9], [1.5]]);
      assert.deepEqual(o.avg, [1]);
      assert.deepEqual(o.max, [1]);
      assert.deepEqual(o.bc, [11, 21]);
      assert.deepEqual(o.objs, [
        { rank: 0, text: 'é' },
        { rank: 1, text: 'éé' },
      ]);
    }
  });

  it('256 MiB all-reduce in 25 MiB buckets sums exactly (seconds printed)', async () => {
    const outs = await runRanks('big', await freePort(), { TEST_BIG_MB: '256' });
    for (const o of outs) {
      assert.ok(o.ok, String(o.error));
      assert.equal(o.first, 3);
      assert.equal(o.last, 3);
      console.log(
        `    rank ${o.rank}: 256 MiB all-reduce (host->device->host included) seconds ${(o.seconds as number[]).map((s) => s.toFixed(4)).join(', ')}`,
      );
    }
  });
});
