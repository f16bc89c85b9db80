// The merge of the two softmax sides of the shared-prefix attention (model/attention.cc,
// SharedPrefixAttention) in one kernel: it replaced about a dozen ATen launches per layer (the
// float32 casts, transposes and elementwise ops of the merge; docs/changelog-performance.md §12–13). Plain
// C++ declarations, defined only with PG_WITH_CUDA_KERNELS (attention_merge_kernels.cu); the ATen
// merge in model/attention.cc is the fallback and the reference the GPU tests compare it with.
#pragma once
#include <cstdint>

namespace pg {
namespace cuda_kernels {

enum class MergeType { kFloat32, kBFloat16, kFloat16 };

/// Strides, in elements, of one softmax side's output o and log-sum-exp lse, indexed by query
/// row b, query head h and query position t (o's last dimension D has stride 1).
struct MergeSide {
  const void* o;     // element type `type`
  const float* lse;  // float32, natural log
  int64_t o_b, o_h, o_t;
  int64_t l_b, l_h, l_t;
};

/// Two-level ("cascade") softmax merge, exact (FlashInfer's merge of attention states; the same
/// formula as the ATen path of SharedPrefixAttention, with its float32 roundings and order):
///   m = max(lse_p, lse_s)   (0 where both are -inf: every key of both sides masked)
///   w_p = exp(lse_p - m),  w_s = exp(lse_s - m)
///   out[b, t, h, :] = round((o_p · w_p + o_s · w_s) / max(w_p + w_s, 1e-30))
/// p: the prefix side, s: the row's own side, each o [B, nh, T, D] and lse [B, nh, T] at the
/// strides given; out [B, T, nh, D] contiguous in `type`. D a multiple of the 16-byte vector
/// (8 bf16 / fp16, 4 fp32), o rows 16-byte aligned (MergeSupported). One thread per 16-byte
/// vector of out. Returns nullptr or the CUDA error string of the launch.
const char* MergeAttentionStates(const MergeSide& p, const MergeSide& s, void* out, int64_t B, int64_t T, int64_t nh, int64_t D, MergeType type, void* stream);

/// Whether MergeAttentionStates takes these sides: D a multiple of the vector, every o pointer
/// and every o stride a multiple of 16 bytes.
bool MergeSupported(const MergeSide& p, const MergeSide& s, const void* out, int64_t D, MergeType type);

}  // namespace cuda_kernels
}  // namespace pg
