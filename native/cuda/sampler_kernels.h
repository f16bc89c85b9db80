// Fused top-k selection for the sampler (generate/sampler.cc SampleTokens): one pass over each
// row's logits gives the k largest temperature-scaled logits with their ids, in descending order,
// and the row's log-sum-exp over the whole vocabulary. Plain C++ declarations, defined only with
// PG_WITH_CUDA_KERNELS (sampler_kernels.cu); at::topk + sort + logsumexp is the fallback and the
// reference (the GPU suite compares them).
#pragma once
#include <cstdint>

namespace pg {
namespace cuda_kernels {

enum class TopKInType { kFloat32, kBFloat16, kFloat16 };

/// The largest k this kernel takes.
constexpr int64_t kFusedTopKMax = 64;

/// For each row r of logits [R, V] (contiguous, dtype `type`), with s = logits[r] · inv_temperature
/// (float32; inv_temperature = 1 / T rounded to float32 — how ATen's CUDA division by a host
/// scalar computes logits / T, so s equals that tensor bit for bit):
///   vals[r, 0..k)  float32  the k largest s in descending order — ties by the lower id, NaN taken
///                           as -inf (so it is never chosen over a number);
///   ids[r, 0..k)   int64    their vocabulary ids, in [0, V);
///   lse[r]         float32  log Σ_v exp(s_v) over all V ids (online max / sum in float32); NaN
///                           when the row holds a NaN (as logsumexp gives).
/// 1 <= k <= min(V, kFusedTopKMax). One CTA of 512 threads per row, no host synchronisation
/// (CUDA-graph capturable). Returns nullptr or the CUDA error string of the launch.
const char* FusedTopKLse(const void* logits, float inv_temperature, float* vals, int64_t* ids, float* lse, int64_t R, int64_t V, int64_t k, TopKInType type,
                         void* stream);

}  // namespace cuda_kernels
}  // namespace pg
