/**
 * Shared test helpers: run the CLI as a child process, and read / compare saved adapters.
 */
import { expect } from 'chai';
import { spawn } from 'node:child_process';
import { join } from 'node:path';
import { native, packageRoot } from '../../lib/native.js';

/** The built CLI entry (dist/bin/papergym-native.js). */
export const CLI = join(packageRoot, 'dist', 'bin', 'papergym-native.js');

/** Flags of a train run small enough for the CPU suite (4 new tokens, one question, a group of 2, no validation). */
export const SMALL_TRAIN_FLAGS = [
  '--max-new-tokens',
  '4',
  '--opsd-batch-size',
  '1',
  '--opsd-micro-batch',
  '1',
  '--questions-per-step',
  '1',
  '--group-size',
  '2',
  '--grpo-micro-batch',
  '2',
  '--validate-every',
  '0',
  '--seed',
  '5',
];

/** Runs `papergym-native ARGS` in the package root with CI=true; resolves with the exit code and the collected stdout / stderr. */
export function cli(args: string[]): Promise<{ code: number | null; out: string; err: string }> {
  return new Promise((res) => {
    const p = spawn(process.execPath, [CLI, ...args], { cwd: packageRoot, env: { ...process.env, CI: 'true' } });
    let out = '';
    let err = '';
    p.stdout.on('data', (b: Buffer) => (out += b.toString()));
    p.stderr.on('data', (b: Buffer) => (err += b.toString()));
    p.on('close', (code) => res({ code, out, err }));
  });
}

/** The tensors of `dir/adapter_model.safetensors` (PEFT keys → float32 data). */
export function adapterOf(dir: string): Record<string, Float32Array> {
  const r = native().loadSafetensors(join(dir, 'adapter_model.safetensors')) as { tensors: Record<string, { data: Float32Array }> };
  return Object.fromEntries(Object.entries(r.tensors).map(([k, v]) => [k, v.data]));
}

/** Largest |a − b| over two adapters with the same keys (asserts the keys match). */
export function adapterMaxAbsDiff(a: Record<string, Float32Array>, b: Record<string, Float32Array>): number {
  expect(Object.keys(a).sort()).to.deep.equal(Object.keys(b).sort());
  let m = 0;
  for (const k of Object.keys(a)) for (let i = 0; i < a[k]!.length; i++) m = Math.max(m, Math.abs(a[k]![i]! - b[k]![i]!));
  return m;
}

/** Runs a suite's set-up `f` (loading the tiny model, …); when it throws (no addon, no libtorch,
 * no model) prints why and skips the suite — `ctx` is mocha's `this` in `before`. */
export async function orSkip<T>(ctx: Mocha.Context, f: () => T | Promise<T>): Promise<T> {
  try {
    return await f();
  } catch (e) {
    console.log(`      (skipped: ${(e as Error).message.split('\n')[0]})`);
    return ctx.skip();
  }
}

/** The error `p` rejects with; throws when it resolves. */
export async function rejection(p: Promise<unknown>): Promise<Error & { code?: string }> {
  try {
    await p;
  } catch (e) {
    return e as Error & { code?: string };
  }
  throw new Error('expected a rejection');
}

/** Runs `f` with the addon's own CUDA kernels switched on or off (setFusedKernels), restoring the previous switch after. */
export async function withFusedKernels<T>(on: boolean, f: () => Promise<T>): Promise<T> {
  const prev = native().setFusedKernels(on);
  try {
    return await f();
  } finally {
    native().setFusedKernels(prev);
  }
}
