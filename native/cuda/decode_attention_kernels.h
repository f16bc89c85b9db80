// Decode attention over the live KV of each row (split-K "flash decoding": Dao et al. 2023,
// "Flash-Decoding for long-context inference"; the online softmax of Milakov & Gimelshein 2018).
// Plain C++ declarations, defined only with PG_WITH_CUDA_KERNELS (decode_attention_kernels.cu);
// the masked SDPA over every cache slot in model/attention.cc is the fallback and the reference.
#pragma once
#include <cstdint>

namespace pg {
namespace cuda_kernels {

enum class DecodeAttnType { kFloat32, kBFloat16, kFloat16 };

/// One query per row against the row's live keys only:
///   o[b, h] = Σ_{s = start[b]}^{slot} softmax_s(scale · q[b, h] · k[b, j, s]) · v[b, j, s],
/// j = h / rep (GQA: query head h uses KV head h / rep, transformers' repeat_kv).
///   q      [B, nkv · rep, D]  contiguous, dtype `type`
///   k, v   [B, nkv, C, D]     the static KV cache (contiguous), dtype `type`
///   start  [B] int32 (device) first live slot of each row (left padding before it is skipped)
///   slot   [1] int64 (device) last live slot, the same for every row (read on the device, so the
///          launch is CUDA-graph capturable)
///   o      [B, nkv · rep, D]  output, dtype `type`
///   work   float32 device scratch of WorkFloats(B, nkv · rep, C, D) elements
/// slot < C. A row with start[b] > slot (a finished row) attends to nothing: its output is 0.
/// Scores and the softmax in float32 (base-2 exponentials), the output rounded once. Supported:
/// D <= 256, rep in {1, 2, 4, 8} (DecodeAttentionSupported).
/// Returns nullptr or the CUDA error string of the launch.
const char* DecodeAttention(const void* q, const void* k, const void* v, const int32_t* start, const int64_t* slot, void* o, float* work, int64_t B,
                            int64_t nkv, int64_t rep, int64_t C, int64_t D, double scale, DecodeAttnType type, void* stream);

/// Whether DecodeAttention takes these head shapes.
bool DecodeAttentionSupported(int64_t rep, int64_t D);

/// float32 scratch elements DecodeAttention needs (per-split partial sums, maxima and denominators).
int64_t DecodeAttentionWorkFloats(int64_t B, int64_t nh, int64_t C, int64_t D);

}  // namespace cuda_kernels
}  // namespace pg
