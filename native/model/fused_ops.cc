#include "model/rope.h"

#include <torch/csrc/autograd/custom_function.h>

#include "cuda/kernels.h"

#ifdef PG_WITH_CUDA_KERNELS
#include <c10/cuda/CUDAStream.h>

#include "cuda/rope_kernels.h"
#endif

namespace pg {

namespace {

/// rotate_half over the last dim: cat(−x2, x1).
at::Tensor RotateHalf(const at::Tensor& x) {
  const int64_t h = x.size(-1) / 2;
  return at::cat({-x.narrow(-1, h, h), x.narrow(-1, 0, h)}, -1);
}

#ifdef PG_WITH_CUDA_KERNELS
namespace ck = pg::cuda_kernels;

std::pair<at::Tensor, at::Tensor> Launch(const at::Tensor& q, const at::Tensor& k, const at::Tensor& cos,
                                         const at::Tensor& sin, bool transpose) {
  ck::RopeType t;
  switch (q.scalar_type()) {
    case at::kFloat: t = ck::RopeType::kFloat32; break;
    case at::kBFloat16: t = ck::RopeType::kBFloat16; break;
    case at::kHalf: t = ck::RopeType::kFloat16; break;
    default: TORCH_CHECK(false, "RoPE kernel: unsupported dtype ", q.scalar_type());
  }
  at::Tensor qc = q.contiguous(), kc = k.contiguous();
  at::Tensor qo = at::empty_like(qc), ko = at::empty_like(kc);
  const char* err = ck::Rope(qc.data_ptr(), kc.data_ptr(), qo.data_ptr(), ko.data_ptr(), cos.data_ptr(), sin.data_ptr(),
                             q.size(0), q.size(1), q.size(2), k.size(2), q.size(3), transpose, t,
                             c10::cuda::getCurrentCUDAStream(q.device().index()).stream());
  TORCH_CHECK(err == nullptr, "RoPE kernel launch failed: ", err ? err : "");
  return {qo, ko};
}

struct RopeFn : public torch::autograd::Function<RopeFn> {
  static torch::autograd::variable_list forward(torch::autograd::AutogradContext* ctx, const at::Tensor& q,
                                                const at::Tensor& k, const at::Tensor& cos, const at::Tensor& sin) {
    ctx->saved_data["cos"] = cos;
    ctx->saved_data["sin"] = sin;
    ctx->saved_data["qshape"] = q.sizes().vec();
    ctx->saved_data["kshape"] = k.sizes().vec();
    auto [qo, ko] = Launch(q, k, cos, sin, false);
    return {qo, ko};
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx, torch::autograd::variable_list g) {
    at::Tensor cos = ctx->saved_data["cos"].toTensor(), sin = ctx->saved_data["sin"].toTensor();
    // An output whose gradient is undefined contributes zero.
    at::Tensor g0 = g[0].defined() ? g[0] : at::zeros(ctx->saved_data["qshape"].toIntVector(), cos.options());
    at::Tensor g1 = g[1].defined() ? g[1] : at::zeros(ctx->saved_data["kshape"].toIntVector(), cos.options());
    auto [dq, dk] = Launch(g0, g1, cos, sin, true);
    return {dq, dk, at::Tensor(), at::Tensor()};
  }
};
#endif

}  // namespace

std::pair<at::Tensor, at::Tensor> RopeQK(const at::Tensor& q, const at::Tensor& k, const at::Tensor& cos,
                                         const at::Tensor& sin) {
#ifdef PG_WITH_CUDA_KERNELS
  if (CudaKernelsEnabled(q) && q.scalar_type() == k.scalar_type() && cos.scalar_type() == q.scalar_type() &&
      sin.scalar_type() == q.scalar_type() && q.dim() == 4 && k.dim() == 4 && q.size(-1) % 2 == 0) {
    at::Tensor c = cos.contiguous(), s = sin.contiguous();
    auto out = RopeFn::apply(q, k, c, s);
    return {out[0], out[1]};
  }
#endif
  at::Tensor c = cos.unsqueeze(2), s = sin.unsqueeze(2);  // [B, T, 1, D]
  return {q * c + RotateHalf(q) * s, k * c + RotateHalf(k) * s};
}

}  // namespace pg
