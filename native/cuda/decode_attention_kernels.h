// Decode attention over the live KV of each row (split-K "flash decoding": Dao et al. 2023,
// "Flash-Decoding for long-context inference"; the online softmax of Milakov & Gimelshein 2018).
// Plain C++ declarations, defined only with PG_WITH_CUDA_KERNELS (decode_attention_kernels.cu);
// the masked SDPA over every cache slot in model/attention.cc is the fallback and the reference.
#pragma once
#include <cstdint>

namespace pg {
namespace cuda_kernels {

enum class DecodeAttnType { kFloat32, kBFloat16, kFloat16 };

/// Groups of rows that share a prompt (GRPO: the n completions of one prompt, copied from one
/// prefill): rows [g·rows, g·rows + rows) hold the same K/V in every slot in [start[b], prefix_end)
/// that they attend to. rows < 2: no groups.
struct DecodeGroups {
  int64_t rows = 0;
  int64_t prefix_end = 0;
};

/// How DecodeAttention splits the keys (PlanDecodeSplits): `shared` splits of 64 keys each cover
/// slots [0, 64·shared) for whole groups of `group` rows at once (the group kernel: one read of
/// the group's first row per split, its G·rep queries on tensor cores), then splits of `chunk`
/// keys cover the rest of each row's slots; `total` = all splits of a row.
struct DecodeSplits {
  int64_t chunk = 128;
  int64_t total = 0;
  int64_t shared = 0;
  int64_t group = 0;
};

/// The split plan of a call: the group kernel is used where `groups` has rows >= 2, a whole
/// 64-key split lies before prefix_end, the dtype is bf16 / fp16, D is 16, 32, 64 or 128, the GPU
/// is sm 80 or newer (the loaded kernel image from sm 80+ code), at least one per-row split
/// follows, and PAPERGYM_DECODE_GROUP_PROMPT is not "0" (read per call: A/B); its
/// group is the largest divisor G of groups.rows with G · rep <= 64. Otherwise shared = 0.
DecodeSplits PlanDecodeSplits(int64_t B, int64_t nh, int64_t rep, int64_t C, int64_t D, const DecodeGroups& groups, DecodeAttnType type);

/// One query per row against the row's live keys only:
///   o[b, h] = Σ_{s = start[b]}^{slot} softmax_s(scale · q[b, h] · k[b, j, s]) · v[b, j, s],
/// j = h / rep (GQA: query head h uses KV head h / rep, transformers' repeat_kv).
///   q      [B, nkv · rep, D]  contiguous, dtype `type`
///   k, v   [B, nkv, C, D]     the static KV cache (contiguous), dtype `type`
///   start  [B] int32 (device) first live slot of each row (left padding before it is skipped)
///   slot   [1] int64 (device) last live slot, the same for every row (read on the device, so the
///          launch is CUDA-graph capturable)
///   o      [B, nkv · rep, D]  output, dtype `type`
///   work   float32 device scratch of DecodeAttentionWorkFloats(B, nkv · rep, D, splits) elements
///   splits PlanDecodeSplits of the same shapes. With shared splits, slot >= 64 · shared and the
///          rows of each group hold equal K/V there (DecodeGroups); the group kernel reads the
///          first row's and rounds the softmax weights to `type` before P·V (FlashAttention-2's
///          rounding), the rest is the per-row kernel's float32 weights.
/// slot < C. A row with start[b] > slot (a finished row) attends to nothing: its output is 0.
/// Scores and the softmax in float32 (base-2 exponentials), the output rounded once. Supported:
/// D <= 256, rep in {1, 2, 4, 8} (DecodeAttentionSupported).
/// Returns nullptr or the CUDA error string of the launch.
const char* DecodeAttention(const void* q, const void* k, const void* v, const int32_t* start, const int64_t* slot, void* o, float* work, int64_t B,
                            int64_t nkv, int64_t rep, int64_t C, int64_t D, double scale, DecodeAttnType type, const DecodeSplits& splits, void* stream);

/// Whether DecodeAttention takes these head shapes.
bool DecodeAttentionSupported(int64_t rep, int64_t D);

/// float32 scratch elements DecodeAttention needs (per-split partial sums, maxima and denominators).
int64_t DecodeAttentionWorkFloats(int64_t B, int64_t nh, int64_t D, const DecodeSplits& splits);

}  // namespace cuda_kernels
}  // namespace pg
