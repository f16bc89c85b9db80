// Inference-only fusions of the decoder layer's small ops (no backward): the residual add with the
// RMSNorm after it, and Qwen3's per-head q / k RMSNorm with RoPE and the KV-cache write of the
// decode step. Plain C++ declarations, defined only with PG_WITH_CUDA_KERNELS (norm_kernels.cu);
// model/fused_ops.cc decides when they apply, and the ATen ops in model/layer.cc are the fallback
// and the reference the GPU tests compare them with.
#pragma once
#include <cstdint>

namespace pg {
namespace cuda_kernels {

enum class NormType { kFloat32, kBFloat16, kFloat16 };

/// Residual add + RMSNorm (Zhang & Sennrich 2019, Eq. 4; transformers' Qwen3RMSNorm) over rows of
/// H elements, all contiguous in `type`:
///   s = round(h + d),  y = round(w · (rstd · s)),  rstd = rsqrt(mean_H(s²) + eps)
/// in float32 from the rounded s — the roundings of ATen's `h + d` followed by its fused
/// at::rms_norm (one rounding each). h, d, s: [rows, H]; w: [H]; y: [rows, H]. One block per row.
/// Returns nullptr or the CUDA error string of the launch.
const char* AddRmsNorm(const void* h, const void* d, const void* w, void* s, void* y, int64_t rows, int64_t H, float eps, NormType type, void* stream);

/// Largest head_dim QkNormRope takes (each lane of a warp holds its head's pairs in registers).
constexpr int64_t kQkNormRopeMaxHeadDim = 256;

/// The q / k / v preparation of one attention layer from the fused projection output, one warp per
/// (row, head):
///   qkv: [R, (nq + 2·nk)·D] (R = B·T rows; columns: nq q heads, nk k heads, nk v heads, D each);
///   q and k heads: optional per-head RMSNorm (q_w / k_w [D]; null = no norm, e.g. Llama / Qwen2.5),
///     z = round(w · (rstd · x)) as above, then RoPE with split halves (transformers'
///     rotate_half; RoFormer Eq. 34), z_d·cos_d + r_d·sin_d with r = (−z_{D/2..}, z_{..D/2}),
///     float32 from the rounded z, rounded once (the roundings of the unfused RmsNorm then RopeQK);
///   v heads: copied unchanged.
/// cos / sin: [R, D]. Outputs: q_out [R, nq, D]; k and v either to k_out / v_out [R, nk, D]
/// (slot == null) or, for a decode step (T = 1, R = B), into the caches k_out / v_out [B, nk, C, D]
/// at cache index *slot (an int64 on the device, read there: CUDA-graph capturable). All tensors
/// contiguous in `type`; D even and ≤ kQkNormRopeMaxHeadDim. Returns nullptr or the CUDA error.
const char* QkNormRope(const void* qkv, const void* q_w, const void* k_w, const void* cos, const void* sin, void* q_out, void* k_out, void* v_out,
                       const int64_t* slot, int64_t R, int64_t nq, int64_t nk, int64_t D, int64_t C, float eps, NormType type, void* stream);

}  // namespace cuda_kernels
}  // namespace pg
