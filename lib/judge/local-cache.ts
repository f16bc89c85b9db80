/**
 * The local judge's answer cache: an eval (or a probe) judged by the local model, killed and run
 * again, re-scores no plan it already judged — as the http judge's SQLite cache does for its
 * requests (lib/judge/cache.ts, the same table). A request's verdicts are stored under a key of
 * everything they depend on: the judge model's identity ({@link judgeModelIdentity}), the judge's
 * own settings (yes/no token ids, scoring, prompt template, threshold, context) and the request
 * (question, plan, items). A verdict that carries an error is never stored.
 */
import { closeSync, openSync, readdirSync, readFileSync, readSync, realpathSync, statSync } from 'node:fs';
import { createHash } from 'node:crypto';
import { join } from 'node:path';
import { requestHash } from './cache.js';
import type { JudgeRequest } from './types.js';

/** Bytes hashed at each end of a weights file (with its size and mtime: a rewrite changes one of them). */
const EDGE_BYTES = 1 << 20;

function edges(path: string, size: number): string {
  const h = createHash('sha256');
  const fd = openSync(path, 'r');
  try {
    const n = Math.min(EDGE_BYTES, size);
    const buf = Buffer.alloc(n);
    h.update(buf.subarray(0, readSync(fd, buf, 0, n, 0)));
    if (size > n) h.update(buf.subarray(0, readSync(fd, buf, 0, n, size - n)));
  } finally {
    closeSync(fd);
  }
  return h.digest('hex');
}

/**
 * The identity of a judge model as loaded: the checkpoint dir (real path), its config.json and
 * tokenizer files by content hash, every weights file (`*.safetensors`, `*.bin`) by name, size,
 * mtime and a hash of its first and last MiB, and the device type and dtype it runs in (bf16 and
 * fp32 give different P(yes)). Reads ~2 MiB per weights file, not the weights.
 * @param placement `device` (`cpu`, `cuda`, `cuda:N`: only the type counts) and `dtype` as loaded
 *   (undefined = the loader's default for that device).
 * @throws Error naming the dir when it cannot be read.
 */
export function judgeModelIdentity(dir: string, placement: { device?: string; dtype?: string }): string {
  const root = realpathSync(dir);
  const files = readdirSync(root).sort();
  const parts: unknown[] = ['local-judge-model-v1', root, (placement.device ?? 'cpu').replace(/:\d+$/, ''), placement.dtype ?? 'default'];
  for (const f of files) {
    const p = join(root, f);
    if (/^(config|generation_config|tokenizer|tokenizer_config|special_tokens_map)\.json$|\.jinja$/.test(f)) {
      parts.push([f, createHash('sha256').update(readFileSync(p)).digest('hex')]);
    } else if (/\.(safetensors|bin)$/.test(f)) {
      const st = statSync(p);
      parts.push([f, st.size, st.mtimeMs, edges(p, st.size)]);
    }
  }
  return requestHash(parts);
}

/**
 * The cache key of one request's verdicts.
 * @param identity {@link judgeModelIdentity}
 * @param judge the judge's settings its verdicts depend on (JSON-serialisable)
 */
export function localVerdictKey(identity: string, judge: unknown, r: JudgeRequest): string {
  return requestHash(['local-judge-verdicts-v1', identity, judge, r.question, r.plan, r.items.map((it) => [it.id, it.text])]);
}
