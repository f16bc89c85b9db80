import type { CommandModule } from 'yargs';
import { doctor, loadNative, addonSelection, selectAddon, type AddonCandidate } from '../../lib/native.js';
import { DOCTOR_OPTIONS } from '../../lib/config/settings.js';
import { addSettings } from '../../lib/config/schema.js';

function candidateRows(cands: AddonCandidate[]): string[] {
  return cands.map((c) => `  ${c.status.padEnd(7)} ${c.name}${c.path && c.path !== c.name && c.source !== 'prebuilt' ? ` (${c.path})` : ''}: ${c.reason}`);
}

/**
 * `papergym-native doctor [--json]`: environment report (see lib/native.ts doctor()), the libtorch
 * provider the loader matched against, and every candidate binary with why it was taken or
 * skipped. When no binary loads it prints the loader's message and exits 1.
 */
export const doctorCommand: CommandModule<object, { json: boolean }> = {
  command: 'doctor',
  describe: 'Report Node, N-API, libtorch, CUDA and GPUs, and which addon binary loads (candidates tried and why)',
  builder: (y) => addSettings(y, DOCTOR_OPTIONS, { withDefaults: true }) as never,
  handler: (argv) => {
    try {
      loadNative();
    } catch (e) {
      if (argv.json) process.stdout.write(JSON.stringify({ error: (e as Error).message, ...(addonSelection() ?? selectAddon()) }, null, 2) + '\n');
      else process.stderr.write(`${(e as Error).message}\n`);
      process.exitCode = 1;
      return;
    }
    const r = doctor();
    if (argv.json) {
      process.stdout.write(JSON.stringify(r, null, 2) + '\n');
      return;
    }
    const p = r.provider;
    const rows: [string, string][] = [
      ['node', r.node],
      ['N-API (node / addon)', `${r.napiVersion} / ${r.addonNapiVersion}`],
      ['addon binary', r.addonPath],
      ['libtorch', `${r.libtorchVersion} at ${r.libtorchPath}`],
      ['provider (matched against)', p ? `torch ${p.version} (${p.variant}) from the ${p.source} at ${p.root}` : 'unknown'],
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
    process.stdout.write(`addon candidates (in order):\n${candidateRows(r.candidates).join('\n')}\n`);
  },
};
