import type { CommandModule } from 'yargs';
import { doctor } from '../../lib/native.js';

/** `papergym-native doctor [--json]`: environment report (see lib/native.ts doctor()). */
export const doctorCommand: CommandModule<object, { json: boolean }> = {
  command: 'doctor',
  describe: 'Report Node, N-API, libtorch, CUDA and GPUs, and which addon binary loads',
  builder: (y) => y.option('json', { type: 'boolean', default: false, describe: 'print JSON' }) as never,
  handler: (argv) => {
    const r = doctor();
    if (argv.json) {
      process.stdout.write(JSON.stringify(r, null, 2) + '\n');
      return;
    }
    const rows: [string, string][] = [
      ['node', r.node],
      ['N-API (node / addon)', `${r.napiVersion} / ${r.addonNapiVersion}`],
      ['addon binary', r.addonPath],
      ['libtorch', `${r.libtorchVersion} at ${r.libtorchPath}`],
      ['CXX11 ABI', String(r.cxx11Abi)],
      ['CUDA build (graphs, allocator stats)', String(r.cudaBuild)],
      ['fused CUDA loss kernels', String(r.fusedKernels)],
      ['data parallel (c10d)', `gloo ${r.dist.gloo}, nccl ${r.dist.nccl}`],
      ['CUDA available', String(r.cudaAvailable)],
      ['intra-op threads', String(r.numThreads)],
    ];
    for (const g of r.gpus) rows.push([`GPU ${g.index}`, `${g.name}, ${g.totalMemoryGiB.toFixed(1)} GiB, sm ${g.computeCapability}`]);
    if (!r.gpus.length) rows.push(['GPUs', 'none']);
    const w = Math.max(...rows.map(([k]) => k.length));
    for (const [k, v] of rows) process.stdout.write(`${k.padEnd(w)}  ${v}\n`);
  },
};
