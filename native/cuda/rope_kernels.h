// Rotary position embedding (RoPE, split halves as transformers' rotate_half; Su et al. 2021, Eq. 34)
// for q and k in one launch. Plain C++ declarations, defined only with PG_WITH_CUDA_KERNELS
// (rope_kernels.cu); the ATen expression in model/layer.cc is the fallback and the reference.
#pragma once
#include <cstdint>

namespace pg {
namespace cuda_kernels {

enum class RopeType { kFloat32, kBFloat16, kFloat16 };

/// q [B, T, nq, D] and k [B, T, nk, D] (contiguous, dtype `type`) → q_out, k_out (same shapes):
///   out_d = x_d·cos_d + r_d·sin_d,  r = (−x_{D/2..D−1}, x_{0..D/2−1})        (forward)
/// and with `transpose` the adjoint (the gradient w.r.t. x of Σ g·out):
///   gx_d = g_d·cos_d + (d < D/2 ? g_{d+D/2}·sin_{d+D/2} : −g_{d−D/2}·sin_{d−D/2}).
/// cos, sin: [B, T, D] in `type`. Computed in float32, rounded once. Returns nullptr or the CUDA
/// error string of the launch.
const char* Rope(const void* q, const void* k, void* q_out, void* k_out, const void* cos, const void* sin, int64_t B, int64_t T, int64_t nq, int64_t nk,
                 int64_t D, bool transpose, RopeType type, void* stream);

}  // namespace cuda_kernels
}  // namespace pg
