/**
 * Completion masks (docs/design.md §4–5). A completion is valid up to and including the first stop token
 * (Qwen3: 151645 `<|im_end|>`, 151643 `<|endoftext|>`) and never past its generated length.
 * Padding is masked by position (t ≥ length), never by comparing with a pad id: Qwen3 pads with
 * 151643, which is also a stop id, so "token != pad" would both keep padding after other stops
 * and drop a genuine end-of-text token. Same convention as TRL's GRPOTrainer (the EOS token is
 * inside the mask).
 */

/** Qwen3's stop ids: `<|im_end|>` and `<|endoftext|>`. */
export const QWEN3_STOP_IDS: readonly number[] = [151645, 151643];

/**
 * mask[b][t] = 1 when t < lengths[b] and no stop id occurs in tokens[b][0 .. t-1]; else 0.
 * @param tokens completion token ids per row (rows may be padded to a common width with anything)
 * @param lengths generated tokens per row (defaults to each row's length); clamped to the row width
 * @param stopIds ids that end a completion (the stop token itself stays in the mask)
 * @throws TypeError on a negative or non-integer length, or when lengths and tokens differ in rows
 */
export function completionMask(tokens: ArrayLike<number>[], lengths?: ArrayLike<number>, stopIds: readonly number[] = QWEN3_STOP_IDS): Uint8Array[] {
  if (lengths && lengths.length !== tokens.length) throw new TypeError('completionMask: lengths must have one entry per row');
  const stops = new Set(stopIds);
  return tokens.map((row, b) => {
    const len = lengths ? lengths[b] : row.length;
    if (!Number.isInteger(len) || len < 0) throw new TypeError(`completionMask: lengths[${b}] must be a non-negative integer`);
    const n = Math.min(len, row.length);
    const m = new Uint8Array(row.length);
    for (let t = 0; t < n; t++) {
      m[t] = 1;
      if (stops.has(row[t])) break;
    }
    return m;
  });
}

/** completionMask flattened into a [B, T] float tensor (T = max row width, rows right-padded with 0). */
export function completionMaskTensor(
  tokens: ArrayLike<number>[],
  lengths?: ArrayLike<number>,
  stopIds: readonly number[] = QWEN3_STOP_IDS,
): { data: Float32Array; shape: number[] } {
  const rows = completionMask(tokens, lengths, stopIds);
  const T = rows.reduce((a, r) => Math.max(a, r.length), 0);
  const data = new Float32Array(rows.length * T);
  rows.forEach((r, b) => r.forEach((v, t) => (data[b * T + t] = v)));
  return { data, shape: [rows.length, T] };
}
