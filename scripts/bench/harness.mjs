/**
 * What every benchmark under scripts/bench/ shares: argument parsing with the common options,
 * device and dtype selection, the measured-child-process pattern (each measurement in a fresh
 * process: clean allocator, clean peak), the Python reference runner, deterministic token ids,
 * peak memory, JSON output and the "ours vs reference" ratio formatting. Checkpoints come from
 * ./checkpoints.mjs.
 *
 * Conventions: a child prints its result as the last `{...}` line of stdout; a failed child or
 * reference is `{ error }` (the benchmark prints the row with the error instead of stopping);
 * peak memory is the CUDA caching allocator's peak allocated bytes on CUDA and the process max
 * RSS on CPU (not comparable with each other).
 */
import { spawnSync } from 'node:child_process';
import { readFileSync, writeFileSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';

/** The repository root. */
export const root = resolve(dirname(fileURLToPath(import.meta.url)), '..', '..');
/** The Python of the reference scripts and checkpoint makers (lib/util/python.ts: `$PYTHON`, else setup's venv, else python3). */
export const python = (await import(join(root, 'dist', 'lib', 'util', 'python.js'))).resolvePython();

/**
 * Parses process.argv with node:util parseArgs: `options` (the benchmark's own) plus the common
 * `--device` (default `device`), `--dtype`, `--json FILE`, `--child SPEC` (internal: the measured
 * child process) and `--help` (prints the script's header comment, its usage, and exits 0).
 * Returns the values object. An unknown or malformed option: one line naming it and a pointer to
 * --help on stderr, exit 2.
 */
export function benchArgs(options, { device = 'cpu' } = {}) {
  const script = process.argv[1] ?? 'this benchmark';
  let values;
  try {
    ({ values } = parseArgs({
      options: {
        device: { type: 'string', default: device },
        dtype: { type: 'string' },
        json: { type: 'string' },
        child: { type: 'string' },
        help: { type: 'boolean', default: false },
        ...options,
      },
    }));
  } catch (e) {
    usageError(e.message.split('\n')[0]);
  }
  if (values.help) {
    const head = /\/\*\*([\s\S]*?)\*\//.exec(readFileSync(script, 'utf8'));
    process.stdout.write(
      `${
        head
          ? head[1]
              .split('\n')
              .map((l) => l.replace(/^\s*\* ?/, ''))
              .join('\n')
              .trim()
          : `node ${script}`
      }\n`,
    );
    process.exit(0);
  }
  return values;
}

/** A wrong flag: `message` and a pointer to --help on stderr, exit 2. */
export function usageError(message) {
  process.stderr.write(`${message}\nUsage: node ${process.argv[1] ?? 'this benchmark'} --help\n`);
  process.exit(2);
}

/**
 * The integer value of string flag `--name` (`values[name]`), `min` or more; `fallback` when the
 * flag is absent. A usage error naming the flag otherwise ('abc', '', 1.5, below `min`).
 */
export function intFlag(values, name, min = 1, fallback = undefined) {
  const raw = values[name];
  if (raw === undefined) return fallback;
  const v = typeof raw === 'string' && raw.trim() !== '' ? Number(raw) : NaN;
  if (!Number.isInteger(v) || v < min) usageError(`--${name} must be an integer >= ${min}, got '${raw}'`);
  return v;
}

/** `cpu` / `cuda` / `cuda:N` → { cuda, index } (index -1 on CPU). */
export function deviceOf(device) {
  const cuda = device.startsWith('cuda');
  return { cuda, index: cuda ? Number(device.split(':')[1] ?? 0) : -1 };
}

const DTYPES = { fp32: 'float32', float32: 'float32', bf16: 'bfloat16', bfloat16: 'bfloat16', fp16: 'float16', float16: 'float16' };

/**
 * The dtype name the addon takes for a `--dtype` flag (fp32|bf16|fp16 or the full names); default
 * bf16 on CUDA, fp32 on CPU. Throws naming the flag for anything outside `allowed`.
 */
export function dtypeOf(flag, cuda, allowed = ['float32', 'bfloat16', 'float16']) {
  const name = DTYPES[flag ?? (cuda ? 'bf16' : 'fp32')];
  if (!name || !allowed.includes(name)) {
    const short = Object.entries(DTYPES)
      .filter(([k, v]) => allowed.includes(v) && k.length <= 4)
      .map(([k]) => k);
    throw new Error(`--dtype must be ${short.join('|')}, got ${flag}`);
  }
  return name;
}

/** Imports a module of the TypeScript build (dist/lib/PATH); needs `npm run build:ts`. */
export function lib(path) {
  return import(join(root, 'dist', 'lib', path));
}

/** The last line of `stdout` that starts with `{`, parsed; null when there is none. */
export function lastJson(stdout) {
  const lines = (stdout ?? '')
    .trim()
    .split('\n')
    .filter((l) => l.startsWith('{'));
  return lines.length ? JSON.parse(lines[lines.length - 1]) : null;
}

function outcome(p, what) {
  if (p.status !== 0) {
    const tail = (p.stderr || '').split('\n').filter(Boolean).slice(-1)[0];
    return { error: tail ?? (p.error ? String(p.error) : `${what} exit ${p.status} ${p.signal ?? ''}`) };
  }
  return lastJson(p.stdout) ?? { error: `${what} printed no JSON` };
}

/**
 * Runs the benchmark script `scriptUrl` (its import.meta.url) again as `--child JSON(spec)` in a
 * fresh Node process and returns the child's JSON result, or `{ error }` (its last stderr line)
 * when it fails. `inheritStderr` shows the child's progress lines instead of keeping them for the
 * error. `timeoutMs` bounds it (default none).
 */
export function runChild(scriptUrl, spec, { timeoutMs, inheritStderr = false } = {}) {
  const p = spawnSync(process.execPath, [fileURLToPath(scriptUrl), '--child', JSON.stringify(spec)], {
    encoding: 'utf8',
    env: process.env,
    timeout: timeoutMs,
    maxBuffer: 16 << 20,
    stdio: ['ignore', 'pipe', inheritStderr ? 'inherit' : 'pipe'],
  });
  return outcome(p, 'child');
}

/**
 * Runs a Python reference script (scripts/bench/SCRIPT, `$PYTHON` or python3) and returns its
 * last JSON line, or `{ error }` when it fails. Its stderr (progress) is shown.
 */
export function runPython(script, args, { timeoutMs } = {}) {
  const p = spawnSync(python, [join(root, 'scripts', 'bench', script), ...args], {
    encoding: 'utf8',
    timeout: timeoutMs,
    maxBuffer: 64 << 20,
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  return outcome(p, script);
}

/** Deterministic token ids in [1000, 100000): `rows` × `len`, the same on our side and the reference's. */
export function tokenIds(rows, len, seed) {
  const out = [];
  let x = 12345 + seed * 7919;
  for (let i = 0; i < rows; i++) {
    const r = [];
    for (let j = 0; j < len; j++) {
      x = (x * 1103515245 + 12345) % 2147483648;
      r.push(1000 + (x % 99000));
    }
    out.push(r);
  }
  return out;
}

/** Median of `xs`: the middle value, the mean of the two middle ones for an even count (NaN when empty). */
export function median(xs) {
  const s = [...xs].sort((x, y) => x - y);
  if (!s.length) return NaN;
  return s.length % 2 ? s[(s.length - 1) / 2] : (s[s.length / 2 - 1] + s[s.length / 2]) / 2;
}

/** Before a measured region: on CUDA release cached blocks (`emptyCache`) and reset the peak. */
export function resetPeak(addon, device, { emptyCache = false } = {}) {
  const { cuda, index } = deviceOf(device);
  if (!cuda) return;
  if (emptyCache) addon.cudaEmptyCache();
  addon.cudaResetPeak(index);
}

/** Peak bytes since {@link resetPeak}: CUDA peak allocated, or the process max RSS on CPU. */
export function peakBytes(addon, device) {
  const { cuda, index } = deviceOf(device);
  if (!cuda) return process.resourceUsage().maxRSS * 1024;
  const m = addon.cudaMemory(index);
  return m ? m.peakAllocatedBytes : NaN;
}

/** `ours / ref` when both are positive numbers, else null. */
export function ratio(ours, ref) {
  return typeof ours === 'number' && typeof ref === 'number' && ours > 0 && ref > 0 ? ours / ref : null;
}

/** Number with `d` decimals, `-` for null / undefined / NaN. */
export function fmt(x, d = 1) {
  return x === null || x === undefined || Number.isNaN(x) ? '-' : x.toFixed(d);
}
/** A ratio as `1.23x`, `-` when absent. */
export function fmtRatio(r, d = 2) {
  return r === null || r === undefined || !Number.isFinite(r) ? '-' : `${r.toFixed(d)}x`;
}
/** Bytes as GiB with `d` decimals, `-` when absent. */
export function gib(b, d = 2) {
  return b === null || b === undefined || !Number.isFinite(b) ? '-' : (b / 2 ** 30).toFixed(d);
}
/** Bytes as GB (10⁹) with `d` decimals, `-` when absent. */
export function gb(b, d = 1) {
  return b === null || b === undefined || !Number.isFinite(b) ? '-' : (b / 1e9).toFixed(d);
}

/** Prints a Markdown table: `header` cells, then one line per row. */
export function printTable(header, rows) {
  console.log(`| ${header.join(' | ')} |`);
  console.log(`| ${header.map(() => '---').join(' | ')} |`);
  for (const r of rows) console.log(`| ${r.join(' | ')} |`);
}

/** Writes `obj` as pretty JSON to `path` (no-op without a path: `--json` not given). */
export function writeJson(path, obj) {
  if (path) writeFileSync(path, JSON.stringify(obj, null, 2) + '\n');
}

/** Runs the async `main`, printing an error and exiting 1 when it rejects. */
export function run(main) {
  main().catch((e) => {
    console.error(e);
    process.exit(1);
  });
}
