// Decoder-layer ops with a fused CUDA kernel (native/cuda/*.cu) and an ATen fallback:
//   RopeQK  — rotary position embedding of q and k (Qwen3 / transformers' apply_rotary_pos_emb with
//             rotate_half; RoFormer, Su et al. 2021, Eq. 34): x·cos + rotate_half(x)·sin;
//   SwiGLU  — silu(gate)·up of the MLP (Shazeer 2020, Eq. 6).
// The kernels are used on CUDA when compiled in (cuda/kernels.h); the GPU tests compare them with
// the ATen path (PAPERGYM_NO_FUSED_KERNELS=1).
#pragma once
#include <ATen/ATen.h>

#include <utility>

namespace pg {

/// q [B, T, nq, D], k [B, T, nk, D] (model dtype), cos / sin [B, T, D] (model dtype) → rotated
/// (q, k), same shapes, differentiable w.r.t. q and k. On CUDA with the own kernels
/// (cuda/kernels.h): one launch forward and one backward for q and k together, computed in
/// float32 and rounded once (the ATen expression rounds after each product and the sum, so bf16
/// results can differ by an ulp). Elsewhere: the ATen expression.
std::pair<at::Tensor, at::Tensor> RopeQK(const at::Tensor& q, const at::Tensor& k, const at::Tensor& cos,
                                         const at::Tensor& sin);

/// gu [..., 2I] (gate = first I columns, up = last I; the fused gate/up projection output) →
/// silu(gate)·up [..., I], differentiable w.r.t. gu. CUDA kernel: one launch forward and one
/// backward, float32 math rounded once (ATen rounds silu(gate) before the product).
at::Tensor SwiGLU(const at::Tensor& gu);

}  // namespace pg
