/**
 * A float64 re-computation of the token sampler (native/generate/sampler.cc) for tests: which ids
 * a row's settings keep, in which order the inverse CDF walks them, and with what mass; and the
 * teacher-forced logprobs a decode's logprobs are compared with.
 */
import { native } from '../../lib/native.js';

/** One row's sampling settings (the sampler's SamplingOptions, plus the seed of its generator). */
export type Sampling = { temperature?: number; topK?: number; topP?: number; minP?: number; seed?: number };

/** The sampler's distribution (native/generate/sampler.cc) of one row's logits L [V] in float64:
 * ids in draw order (id order for full-vocabulary rows, descending for top-k / top-p), their
 * unnormalised masses after top-k / top-p / min-p, and the total. */
export function drawOrder(L: Float32Array, o: Sampling): { order: number[]; w: number[]; total: number } {
  const V = L.length,
    T = o.temperature ?? 1;
  const s = Array.from(L, (v) => v / T);
  let mx = -Infinity;
  for (const v of s) mx = Math.max(mx, v);
  const useK = (o.topK ?? 0) > 0 && o.topK! < V,
    useP = (o.topP ?? 1) < 1;
  let order: number[] = Array.from(s.keys());
  if (useK || useP) order.sort((i, j) => s[j]! - s[i]!);
  if (useK) order = order.slice(0, o.topK!);
  let w = order.map((i) => Math.exp(s[i]! - mx));
  if (useP) {
    const norm = useK ? w.reduce((p, q) => p + q, 0) : s.reduce((p, v) => p + Math.exp(v - mx), 0);
    let before = 0;
    w = w.map((v, j) => {
      const keep = j === 0 || before < o.topP!;
      before += v / norm;
      return keep ? v : 0;
    });
  }
  if ((o.minP ?? 0) > 0) w = w.map((v) => (v >= o.minP! ? v : 0)); // mass relative to the max (= 1)
  return { order, w, total: w.reduce((p, q) => p + q, 0) };
}

/**
 * Teacher-forced logprobs of each completion (the addon's sequenceLogprobs over prompt +
 * completion, right-padded, at temperature T): result[b][t] is log p(completion b's token t | its
 * prompt and tokens < t), the forward a decode's reported logprobs are compared with.
 */
export async function teacherForcedLogprobs(
  model: Parameters<ReturnType<typeof native>['sequenceLogprobs']>[0],
  prompts: ArrayLike<number>[],
  completions: { promptIndex: number; tokenIds: ArrayLike<number> }[],
  T: number,
): Promise<number[][]> {
  const rows = completions.map((c) => [...Array.from(prompts[c.promptIndex]!), ...Array.from(c.tokenIds)]);
  const L = Math.max(...rows.map((x) => x.length));
  const ids = new Int32Array(rows.length * L),
    mask = new Int32Array(rows.length * L),
    comp = new Int32Array(rows.length * L);
  rows.forEach((x, b) => {
    ids.set(x, b * L);
    mask.fill(1, b * L, b * L + x.length);
    comp.fill(1, b * L + prompts[completions[b]!.promptIndex]!.length, b * L + x.length);
  });
  const out = await native().sequenceLogprobs(model, {
    inputIds: { data: ids, shape: [rows.length, L] },
    attentionMask: { data: mask, shape: [rows.length, L] },
    completionMask: { data: comp, shape: [rows.length, L] },
    temperature: T,
  });
  return completions.map((c, b) => Array.from(out.data.subarray(b * L + prompts[c.promptIndex]!.length, b * L + rows[b]!.length)));
}
