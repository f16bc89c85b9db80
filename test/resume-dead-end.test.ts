/**
 * Issue 50 item 2, with the real CLI: a resumed state is not trusted for its numbers (NaN in the
 * optimizer's moments or the adapter, in files of the right size, refused naming the file and the
 * tensor), and a run killed before its first checkpoint is never a dead end: `--resume` starts it
 * again from the start, `--overwrite-output-dir` clears it, and the refusal of a fresh run on its
 * dir says both.
 */
import { expect } from 'chai';
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { checkTensorsFinite } from '../lib/train/checkpoint.js';
import { cli, SMALL_TRAIN_FLAGS as SMALL } from './helpers/run.js';

/** Runs the CLI with PAPERGYM_FAULT set (the process SIGKILLs itself at that point of its first checkpoint write). */
async function cliWithFault(fault: string, args: string[]) {
  process.env.PAPERGYM_FAULT = fault;
  try {
    return await cli(args);
  } finally {
    delete process.env.PAPERGYM_FAULT;
  }
}

/** Writes a float32 NaN (0x7fc00000) over element `index` of tensor `name` of a safetensors file, in place (same size). */
function plantNaN(file: string, pick: (name: string) => boolean, index = 0): string {
  const buf = readFileSync(file);
  const n = Number(buf.readBigUInt64LE(0));
  const header = JSON.parse(buf.subarray(8, 8 + n).toString('utf8')) as Record<string, { dtype: string; data_offsets: [number, number] }>;
  const name = Object.keys(header).find((k) => k !== '__metadata__' && header[k]!.dtype === 'F32' && pick(k))!;
  expect(name, `a float32 tensor in ${file}`).to.be.a('string');
  buf.writeUInt32LE(0x7fc00000, 8 + n + header[name]!.data_offsets[0] + 4 * index);
  writeFileSync(file, buf);
  return name;
}

describe('resume never dead-ends and never trusts numbers (issue 50 item 2)', function () {
  this.timeout(300000);
  let tmp: string;
  before(() => (tmp = mkdtempSync(join(tmpdir(), 'pg-dead-end-'))));
  after(() => rmSync(tmp, { recursive: true, force: true }));
  const TRAIN = ['--opsd-steps', '1', '--grpo-steps', '1', ...SMALL];

  it('a run killed before its first checkpoint: a fresh run names both ways out; --resume starts it again; --overwrite-output-dir clears it', async () => {
    const out = join(tmp, 'killed');
    const k = await cliWithFault('checkpoint:after-tensors', ['train', '--out', out, ...TRAIN]);
    expect(k.code, k.err).to.equal(null); // SIGKILLed inside its first checkpoint write
    expect(existsSync(join(out, 'config.json'))).to.equal(true);
    const again = await cli(['train', '--out', out, ...TRAIN]);
    expect(again.code).to.equal(1);
    expect(again.err).to.contain(`--out ${out} holds a run that stopped before its first checkpoint`);
    expect(again.err).to.contain(`papergym-native train --resume ${out}`);
    expect(again.err).to.contain('--overwrite-output-dir');
    // --resume: from the start with the saved settings (the same step counts: one OPSD, one GRPO step).
    const r = await cli(['train', '--resume', out]);
    expect(r.code, r.err).to.equal(0);
    expect(r.err).to.contain(
      `resume: ${out} stopped before its first checkpoint (nothing to resume): starting it again from the start with its saved settings`,
    );
    const summary = JSON.parse(readFileSync(join(out, 'summary.json'), 'utf8')) as { globalStep: number };
    expect(summary.globalStep).to.equal(2);
    const rows = readFileSync(join(out, 'metrics.jsonl'), 'utf8').trim().split('\n');
    expect(rows.length).to.be.greaterThan(0);
    // --overwrite-output-dir: a second killed run is cleared and replaced.
    const out2 = join(tmp, 'killed2');
    const k2 = await cliWithFault('checkpoint:after-tensors', ['train', '--out', out2, ...TRAIN]);
    expect(k2.code).to.equal(null);
    const o = await cli(['train', '--out', out2, '--overwrite-output-dir', ...TRAIN]);
    expect(o.code, o.err).to.equal(0);
    expect(o.err).to.match(new RegExp(`--overwrite-output-dir: cleared the previous run in ${out2} \\(config\\.json, metrics\\.jsonl, checkpoints`));
    expect(existsSync(join(out2, 'final', 'adapter_model.safetensors'))).to.equal(true);
    // A run that has checkpoints: the refusal names --resume and --overwrite-output-dir.
    const held = await cli(['train', '--out', out2, ...TRAIN]);
    expect(held.code).to.equal(1);
    expect(held.err).to.contain(`--out ${out2} already holds a run`);
    expect(held.err).to.contain('--overwrite-output-dir');
  });

  it('--resume without a dir, with --out DIR, continues DIR (TRL resume_from_checkpoint=True + output_dir); without --out it is refused', async () => {
    const out = join(tmp, 'trl-habit');
    const a = await cli(['train', '--out', out, ...TRAIN]);
    expect(a.code, a.err).to.equal(0);
    const r = await cli(['train', '--resume', '--out', out, '--grpo-steps', '2']);
    expect(r.code, r.err).to.equal(0);
    expect(r.err).to.contain(`resume: --resume without a dir continues the run in --out ${out}`);
    expect(r.err).to.not.contain('already holds a run');
    expect((JSON.parse(readFileSync(join(out, 'summary.json'), 'utf8')) as { globalStep: number }).globalStep).to.equal(3);
    const none = await cli(['train', '--resume', ...TRAIN]);
    expect(none.code).to.equal(1);
    expect(none.err).to.contain('--resume was given without a dir and there is no --out to continue');
    expect(none.err).to.contain('papergym-native train --resume --out DIR');
  });

  it('NaN in the optimizer moments or the adapter of a resumed checkpoint (files of the right size) is refused naming the file and tensor', async () => {
    const out = join(tmp, 'nan');
    const a = await cli(['train', '--out', out, ...TRAIN]);
    expect(a.code, a.err).to.equal(0);
    const ck = join(out, 'checkpoints', readFileSync(join(out, 'checkpoints', 'latest'), 'utf8').trim());
    const opt = join(ck, 'optimizer.safetensors');
    const size = readFileSync(opt).length;
    expect(() => checkTensorsFinite(opt)).not.to.throw();
    const moment = plantNaN(opt, () => true, 1);
    expect(readFileSync(opt).length).to.equal(size);
    const r = await cli(['train', '--resume', out, '--grpo-steps', '2']);
    expect(r.code).to.equal(1);
    expect(r.err).to.contain(`${opt}: tensor '${moment}' holds a non-finite value (NaN or Inf) at element 1`);
    expect(r.err).to.not.match(/\n\s+at /);
    // The adapter: Inf (0x7f800000) in a LoRA matrix.
    const out2 = join(tmp, 'inf');
    const b = await cli(['train', '--out', out2, ...TRAIN]);
    expect(b.code, b.err).to.equal(0);
    const ck2 = join(out2, 'checkpoints', readFileSync(join(out2, 'checkpoints', 'latest'), 'utf8').trim());
    const ad = join(ck2, 'adapter_model.safetensors');
    const buf = readFileSync(ad);
    const n = Number(buf.readBigUInt64LE(0));
    const header = JSON.parse(buf.subarray(8, 8 + n).toString('utf8')) as Record<string, { data_offsets: [number, number] }>;
    const name = Object.keys(header).find((x) => x.includes('lora_A'))!;
    buf.writeUInt32LE(0x7f800000, 8 + n + header[name]!.data_offsets[0]);
    writeFileSync(ad, buf);
    const r2 = await cli(['train', '--resume', out2, '--grpo-steps', '2']);
    expect(r2.code).to.equal(1);
    expect(r2.err).to.contain(`${ad}: tensor '${name}' holds a non-finite value (NaN or Inf) at element 0`);
  });

  it('checkTensorsFinite reads bf16 and f16 by their exponent bits', () => {
    // A hand-written safetensors file: two BF16 values (1.0 = 0x3f80, NaN = 0x7fc0) and two F16 (1.0 = 0x3c00, -Inf = 0xfc00).
    const header = JSON.stringify({
      a: { dtype: 'BF16', shape: [2], data_offsets: [0, 4] },
      h: { dtype: 'F16', shape: [2], data_offsets: [4, 8] },
    });
    const len = Buffer.alloc(8);
    len.writeBigUInt64LE(BigInt(header.length));
    const data = Buffer.alloc(8);
    data.writeUInt16LE(0x3f80, 0);
    data.writeUInt16LE(0x3f80, 2);
    data.writeUInt16LE(0x3c00, 4);
    data.writeUInt16LE(0xfc00, 6);
    const f = join(tmp, 'halves.safetensors');
    writeFileSync(f, Buffer.concat([len, Buffer.from(header), data]));
    expect(() => checkTensorsFinite(f)).to.throw(/tensor 'h' holds a non-finite value \(NaN or Inf\) at element 1/);
    data.writeUInt16LE(0x7fc0, 2);
    writeFileSync(f, Buffer.concat([len, Buffer.from(header), data]));
    expect(() => checkTensorsFinite(f)).to.throw(/tensor 'a' holds a non-finite value \(NaN or Inf\) at element 1/);
  });
});
