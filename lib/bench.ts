/**
 * Benchmark-only entry of the package (`papergym-native/bench`; scripts/bench/ uses it): natives
 * that exist to time the addon and are not part of the training / serving API, kept out of the
 * default export (lib/index.ts).
 */
import { native } from './native.js';

/** Options of {@link benchLoss}. */
export interface BenchLossOptions {
  /** `jsd` (generalised JSD, β 0.5, τ 1) or `grpo` (one sequence, old = ref logprobs −5, advantage 1, β_KL 0.04, ε 0.2, dapo). */
  kind: 'jsd' | 'grpo';
  /** Tokens. */
  T: number;
  /** Vocabulary size (rows of the frozen lm_head weight [V, H], randn / √H). */
  V: number;
  /** Hidden size. */
  H: number;
  /** `cpu` / `cuda` / `cuda:N`. */
  device: string;
  /** `float32` | `bfloat16` | `float16`. */
  dtype: string;
  /** Fused chunked path (default true) or the unfused reference path. */
  fused?: boolean;
  /** Tokens per chunk of the fused path; 0 = automatic (default). */
  chunkSize?: number;
  /** Timed forward + backward runs (default 1). */
  iters?: number;
  /** Only create the inputs on the device (their memory alone), no loss. */
  setupOnly?: boolean;
}

/**
 * Times the native fused loss (forward + backward of the hidden states) on inputs drawn on the
 * device, so no host transfer is timed (native/napi/loss.cc `_benchLoss`). Resolves with the
 * wall milliseconds of each run (device synchronised around each) and the last loss.
 * @throws TypeError (code ERR_PG_ARG) on a bad option.
 */
export function benchLoss(o: BenchLossOptions): Promise<{ ms: number[]; loss: number }> {
  return native()._benchLoss(o);
}
