#include "model/fused_ops.h"

#include <torch/csrc/autograd/custom_function.h>

#include <algorithm>

#include "cuda/kernels.h"

#ifdef PG_WITH_CUDA_KERNELS
#include <c10/cuda/CUDAStream.h>

#include "cuda/decode_attention_kernels.h"
#include "cuda/norm_kernels.h"
#include "cuda/rope_kernels.h"
#include "cuda/swiglu_kernels.h"
#endif

#include <cstdlib>
#include <cstring>

namespace pg {

namespace {

/// rotate_half over the last dim: cat(−x2, x1).
at::Tensor RotateHalf(const at::Tensor& x) {
  const int64_t h = x.size(-1) / 2;
  return at::cat({-x.narrow(-1, h, h), x.narrow(-1, 0, h)}, -1);
}

#ifdef PG_WITH_CUDA_KERNELS
namespace ck = pg::cuda_kernels;

std::pair<at::Tensor, at::Tensor> Launch(const at::Tensor& q, const at::Tensor& k, const at::Tensor& cos, const at::Tensor& sin, bool transpose) {
  ck::RopeType t;
  switch (q.scalar_type()) {
    case at::kFloat:
      t = ck::RopeType::kFloat32;
      break;
    case at::kBFloat16:
      t = ck::RopeType::kBFloat16;
      break;
    case at::kHalf:
      t = ck::RopeType::kFloat16;
      break;
    default:
      TORCH_CHECK(false, "RoPE kernel: unsupported dtype ", q.scalar_type());
  }
  at::Tensor qc = q.contiguous(), kc = k.contiguous();
  at::Tensor qo = at::empty_like(qc), ko = at::empty_like(kc);
  const char* err = ck::Rope(qc.data_ptr(), kc.data_ptr(), qo.data_ptr(), ko.data_ptr(), cos.data_ptr(), sin.data_ptr(), q.size(0), q.size(1), q.size(2),
                             k.size(2), q.size(3), transpose, t, c10::cuda::getCurrentCUDAStream(q.device().index()).stream());
  TORCH_CHECK(err == nullptr, "RoPE kernel launch failed: ", err ? err : "");
  return {qo, ko};
}

struct RopeFn : public torch::autograd::Function<RopeFn> {
  static torch::autograd::variable_list forward(torch::autograd::AutogradContext* ctx, const at::Tensor& q, const at::Tensor& k, const at::Tensor& cos,
                                                const at::Tensor& sin) {
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

ck::SwigluType SwigluTypeOf(at::ScalarType t) {
  switch (t) {
    case at::kFloat:
      return ck::SwigluType::kFloat32;
    case at::kBFloat16:
      return ck::SwigluType::kBFloat16;
    case at::kHalf:
      return ck::SwigluType::kFloat16;
    default:
      TORCH_CHECK(false, "SwiGLU kernel: unsupported dtype ", t);
  }
}

struct SwigluFn : public torch::autograd::Function<SwigluFn> {
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& gu_in) {
    at::Tensor gu = gu_in.contiguous();
    const int64_t I = gu.size(-1) / 2, rows = gu.numel() / std::max<int64_t>(1, 2 * I);
    auto out_sizes = gu.sizes().vec();
    out_sizes.back() = I;
    at::Tensor act = at::empty(out_sizes, gu.options());
    const char* err = ck::SwigluForward(gu.data_ptr(), act.data_ptr(), rows, I, SwigluTypeOf(gu.scalar_type()),
                                        c10::cuda::getCurrentCUDAStream(gu.device().index()).stream());
    TORCH_CHECK(err == nullptr, "SwiGLU kernel launch failed: ", err ? err : "");
    ctx->save_for_backward({gu});
    return act;
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx, torch::autograd::variable_list g) {
    at::Tensor gu = ctx->get_saved_variables()[0];
    at::Tensor d = g[0].contiguous();
    const int64_t I = gu.size(-1) / 2, rows = gu.numel() / std::max<int64_t>(1, 2 * I);
    at::Tensor dgu = at::empty_like(gu);
    const char* err = ck::SwigluBackward(gu.data_ptr(), d.data_ptr(), dgu.data_ptr(), rows, I, SwigluTypeOf(gu.scalar_type()),
                                         c10::cuda::getCurrentCUDAStream(gu.device().index()).stream());
    TORCH_CHECK(err == nullptr, "SwiGLU backward kernel launch failed: ", err ? err : "");
    return {dgu};
  }
};
#endif

}  // namespace

std::pair<at::Tensor, at::Tensor> RopeQK(const at::Tensor& q, const at::Tensor& k, const at::Tensor& cos, const at::Tensor& sin) {
#ifdef PG_WITH_CUDA_KERNELS
  if (CudaKernelsEnabled(q) && q.scalar_type() == k.scalar_type() && cos.scalar_type() == q.scalar_type() && sin.scalar_type() == q.scalar_type() &&
      q.dim() == 4 && k.dim() == 4 && q.size(-1) % 2 == 0) {
    // The kernel indexes cos / sin as [B, T, D] with q's B, T, D (no broadcasting).
    const std::vector<int64_t> want{q.size(0), q.size(1), q.size(3)};
    TORCH_CHECK(cos.sizes() == want && sin.sizes() == want && k.size(0) == q.size(0) && k.size(1) == q.size(1) && k.size(3) == q.size(3) &&
                    cos.device() == q.device() && k.device() == q.device(),
                "RopeQK: cos / sin must be [B, T, D] and k [B, T, nk, D] with q's B, T, D on q's device");
    at::Tensor c = cos.contiguous(), s = sin.contiguous();
    auto out = RopeFn::apply(q, k, c, s);
    return {out[0], out[1]};
  }
#endif
  at::Tensor c = cos.unsqueeze(2), s = sin.unsqueeze(2);  // [B, T, 1, D]
  return {q * c + RotateHalf(q) * s, k * c + RotateHalf(k) * s};
}

at::Tensor SwiGLU(const at::Tensor& gu) {
  const int64_t I = gu.size(-1) / 2;
#ifdef PG_WITH_CUDA_KERNELS
  if (CudaKernelsEnabled(gu) && gu.size(-1) % 2 == 0 && (gu.scalar_type() == at::kFloat || gu.scalar_type() == at::kBFloat16 || gu.scalar_type() == at::kHalf))
    return SwigluFn::apply(gu);
#endif
  return at::silu(gu.narrow(-1, 0, I)) * gu.narrow(-1, I, I);
}

#ifdef PG_WITH_CUDA_KERNELS
namespace {
/// PAPERGYM_LIVE_KV (unset or not "0" = on), read once: the switch of LiveKvDecodeAttention.
bool LiveKvAttentionSwitchedOn() {
  static const bool on = [] {
    const char* e = std::getenv("PAPERGYM_LIVE_KV");
    return !(e && *e && std::strcmp(e, "0") == 0);
  }();
  return on;
}
}  // namespace
#endif

bool LiveKvDecodeAttentionApplies(const at::Tensor& like, int64_t nh, int64_t nkv, int64_t D) {
#ifdef PG_WITH_CUDA_KERNELS
  const auto dt = like.scalar_type();
  return LiveKvAttentionSwitchedOn() && CudaKernelsEnabled(like) && nkv >= 1 && nh % nkv == 0 && ck::DecodeAttentionSupported(nh / nkv, D) &&
         (dt == at::kFloat || dt == at::kBFloat16 || dt == at::kHalf);
#else
  (void)like, (void)nh, (void)nkv, (void)D;
  return false;
#endif
}

#ifdef PG_WITH_CUDA_KERNELS
namespace {
ck::DecodeAttnType DecodeAttnTypeOf(at::ScalarType t) {
  return t == at::kFloat ? ck::DecodeAttnType::kFloat32 : t == at::kBFloat16 ? ck::DecodeAttnType::kBFloat16 : ck::DecodeAttnType::kFloat16;
}
}  // namespace
#endif

int64_t LiveKvPromptGroup(const at::Tensor& like, int64_t B, int64_t nh, int64_t nkv, int64_t C, int64_t D, int64_t group_rows, int64_t prefix_end) {
#ifdef PG_WITH_CUDA_KERNELS
  if (!LiveKvDecodeAttentionApplies(like, nh, nkv, D)) return 0;
  const ck::DecodeSplits sp = ck::PlanDecodeSplits(B, nh, nh / nkv, C, D, ck::DecodeGroups{group_rows, prefix_end}, DecodeAttnTypeOf(like.scalar_type()));
  return sp.shared > 0 ? sp.group : 0;
#else
  (void)like, (void)B, (void)nh, (void)nkv, (void)C, (void)D, (void)group_rows, (void)prefix_end;
  return 0;
#endif
}

at::Tensor LiveKvDecodeAttention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& start, const at::Tensor& slot, double scale,
                                 int64_t group_rows, int64_t prefix_end) {
#ifdef PG_WITH_CUDA_KERNELS
  if (q.dim() != 3 || k.dim() != 4 || v.sizes() != k.sizes()) return at::Tensor();
  const int64_t B = q.size(0), nh = q.size(1), D = q.size(2), nkv = k.size(1), C = k.size(2);
  if (k.size(0) != B || k.size(3) != D || !LiveKvDecodeAttentionApplies(q, nh, nkv, D)) return at::Tensor();
  if (k.scalar_type() != q.scalar_type() || v.scalar_type() != q.scalar_type() || !k.is_contiguous() || !v.is_contiguous()) return at::Tensor();
  const ck::DecodeAttnType t = DecodeAttnTypeOf(q.scalar_type());
  TORCH_CHECK(start.scalar_type() == at::kInt && start.dim() == 1 && start.size(0) == B && start.device() == q.device() && slot.scalar_type() == at::kLong &&
                  slot.numel() == 1 && slot.device() == q.device(),
              "LiveKvDecodeAttention: start must be int32 [B] and slot int64 [1] on q's device");
  at::Tensor qc = q.contiguous(), sc = start.contiguous(), sl = slot.contiguous();
  // The kernel loads each lane's slice of a K/V/q row as one vector: rows must start 16-byte
  // aligned (fresh caches and contiguous q always do; a view at an odd offset takes the masked path).
  auto aligned = [](const at::Tensor& t) {
    return reinterpret_cast<uintptr_t>(t.data_ptr()) % 16 == 0 && (t.size(-1) * static_cast<int64_t>(t.element_size())) % 16 == 0;
  };
  if (!aligned(qc) || !aligned(k) || !aligned(v)) return at::Tensor();
  at::Tensor o = at::empty_like(qc);
  const ck::DecodeSplits sp = ck::PlanDecodeSplits(B, nh, nh / nkv, C, D, ck::DecodeGroups{group_rows, prefix_end}, t);
  at::Tensor work = at::empty({ck::DecodeAttentionWorkFloats(B, nh, D, sp)}, q.options().dtype(at::kFloat));
  const char* err =
      ck::DecodeAttention(qc.data_ptr(), k.data_ptr(), v.data_ptr(), sc.data_ptr<int32_t>(), sl.data_ptr<int64_t>(), o.data_ptr(), work.data_ptr<float>(), B,
                          nkv, nh / nkv, C, D, scale, t, sp, c10::cuda::getCurrentCUDAStream(q.device().index()).stream());
  TORCH_CHECK(err == nullptr, "decode attention kernel launch failed: ", err ? err : "");
  return o;
#else
  (void)q, (void)k, (void)v, (void)start, (void)slot, (void)scale, (void)group_rows, (void)prefix_end;
  return at::Tensor();
#endif
}

bool InferenceFusionsApply(const at::Tensor& like) {
#ifdef PG_WITH_CUDA_KERNELS
  static const bool on = [] {
    const char* e = std::getenv("PAPERGYM_FUSED_NORM_ROPE");
    return !(e && *e && std::strcmp(e, "0") == 0);
  }();
  const auto dt = like.scalar_type();
  return on && CudaKernelsEnabled(like) && (dt == at::kFloat || dt == at::kBFloat16 || dt == at::kHalf);
#else
  (void)like;
  return false;
#endif
}

#ifdef PG_WITH_CUDA_KERNELS
namespace {
ck::NormType NormTypeOf(at::ScalarType t) {
  return t == at::kFloat ? ck::NormType::kFloat32 : t == at::kBFloat16 ? ck::NormType::kBFloat16 : ck::NormType::kFloat16;
}
}  // namespace
#endif

std::pair<at::Tensor, at::Tensor> AddRmsNormFused(const at::Tensor& h, const at::Tensor& d, const at::Tensor& w, double eps) {
#ifdef PG_WITH_CUDA_KERNELS
  if (!InferenceFusionsApply(h) || h.dim() < 1 || d.sizes() != h.sizes() || d.scalar_type() != h.scalar_type() || w.scalar_type() != h.scalar_type() ||
      w.dim() != 1 || w.size(0) != h.size(-1) || d.device() != h.device() || w.device() != h.device())
    return {};
  at::Tensor hc = h.contiguous(), dc = d.contiguous(), wc = w.contiguous();
  at::Tensor s = at::empty_like(hc), y = at::empty_like(hc);
  const int64_t H = h.size(-1), rows = H == 0 ? 0 : h.numel() / H;
  const char* err = ck::AddRmsNorm(hc.data_ptr(), dc.data_ptr(), wc.data_ptr(), s.data_ptr(), y.data_ptr(), rows, H, static_cast<float>(eps),
                                   NormTypeOf(h.scalar_type()), c10::cuda::getCurrentCUDAStream(h.device().index()).stream());
  TORCH_CHECK(err == nullptr, "residual add + RMSNorm kernel launch failed: ", err ? err : "");
  return {s, y};
#else
  (void)h, (void)d, (void)w, (void)eps;
  return {};
#endif
}

QkvPrepared QkNormRopeFused(const at::Tensor& qkv, const at::Tensor& q_w, const at::Tensor& k_w, const at::Tensor& cos, const at::Tensor& sin, double eps,
                            int64_t nq, int64_t nk, int64_t D, const at::Tensor& kc, const at::Tensor& vc, const at::Tensor& slot) {
#ifdef PG_WITH_CUDA_KERNELS
  const auto dt = qkv.scalar_type();
  if (!InferenceFusionsApply(qkv) || qkv.dim() != 3 || qkv.size(2) != (nq + 2 * nk) * D || D % 2 != 0 || D > ck::kQkNormRopeMaxHeadDim ||
      q_w.defined() != k_w.defined())
    return {};
  const int64_t B = qkv.size(0), T = qkv.size(1);
  const std::vector<int64_t> cs_shape{B, T, D};
  if (cos.sizes() != cs_shape || sin.sizes() != cs_shape || cos.scalar_type() != dt || sin.scalar_type() != dt) return {};
  if (q_w.defined() && (q_w.scalar_type() != dt || k_w.scalar_type() != dt || q_w.numel() != D || k_w.numel() != D)) return {};
  const bool to_cache = kc.defined();
  if (to_cache) {
    if (T != 1 || !vc.defined() || kc.dim() != 4 || kc.size(0) != B || kc.size(1) != nk || kc.size(3) != D || vc.sizes() != kc.sizes() ||
        kc.scalar_type() != dt || vc.scalar_type() != dt || !kc.is_contiguous() || !vc.is_contiguous() || !slot.defined() || slot.scalar_type() != at::kLong ||
        slot.numel() != 1 || slot.device() != qkv.device() || kc.device() != qkv.device())
      return {};
  }
  at::Tensor x = qkv.contiguous(), c = cos.contiguous(), s = sin.contiguous();
  at::Tensor qw = q_w.defined() ? q_w.contiguous() : at::Tensor(), kw = k_w.defined() ? k_w.contiguous() : at::Tensor();
  QkvPrepared out;
  out.q = at::empty({B, T, nq, D}, qkv.options());
  if (!to_cache) {
    out.k = at::empty({B, T, nk, D}, qkv.options());
    out.v = at::empty({B, T, nk, D}, qkv.options());
  }
  at::Tensor sl = to_cache ? slot.contiguous() : at::Tensor();
  const char* err = ck::QkNormRope(x.data_ptr(), qw.defined() ? qw.data_ptr() : nullptr, kw.defined() ? kw.data_ptr() : nullptr, c.data_ptr(), s.data_ptr(),
                                   out.q.data_ptr(), to_cache ? kc.data_ptr() : out.k.data_ptr(), to_cache ? vc.data_ptr() : out.v.data_ptr(),
                                   to_cache ? sl.data_ptr<int64_t>() : nullptr, B * T, nq, nk, D, to_cache ? kc.size(2) : 0, static_cast<float>(eps),
                                   NormTypeOf(dt), c10::cuda::getCurrentCUDAStream(qkv.device().index()).stream());
  TORCH_CHECK(err == nullptr, "q / k norm + RoPE kernel launch failed: ", err ? err : "");
  return out;
#else
  (void)qkv, (void)q_w, (void)k_w, (void)cos, (void)sin, (void)eps, (void)nq, (void)nk, (void)D, (void)kc, (void)vc, (void)slot;
  return {};
#endif
}

}  // namespace pg
