#include "loss/row_kernels.h"

#include <c10/util/Exception.h>

#include <algorithm>

#include "core/errors.h"
#include "cuda/kernels.h"

#ifdef PG_WITH_CUDA_KERNELS
#include <c10/cuda/CUDAStream.h>

#include "cuda/loss_kernels.h"
#endif

namespace pg {
namespace loss {

bool RowKernelsEnabled(const at::Tensor& t) {
  return CudaKernelsEnabled(t);
}

int64_t KernelChunk(int64_t chunk, int64_t vocab, int64_t budget) {
  if (chunk < 0) throw ArgError("chunkSize must be >= 0 (0 = automatic)");
  if (chunk > 0) return chunk;
  return std::clamp<int64_t>(budget / std::max<int64_t>(vocab, 1), 16, 4096);
}

at::Tensor GradRowsView(const at::Tensor& z, at::ScalarType dtype) {
  if (dtype == at::kFloat) return z;
  return z.view(dtype).narrow(1, 0, z.size(1));
}

#ifdef PG_WITH_CUDA_KERNELS
namespace {
namespace ck = pg::cuda_kernels;

ck::OutType OutOf(at::ScalarType t) {
  switch (t) {
    case at::kFloat:
      return ck::OutType::kFloat32;
    case at::kBFloat16:
      return ck::OutType::kBFloat16;
    case at::kHalf:
      return ck::OutType::kFloat16;
    default:
      TORCH_CHECK(false, "fused loss kernels: unsupported gradient dtype ", t);
  }
}

void NeedRows(const at::Tensor& z, const char* what) {
  TORCH_CHECK(z.is_cuda() && z.scalar_type() == at::kFloat && z.dim() == 2 && z.is_contiguous(), what, ": logits must be contiguous float32 [C, V] on CUDA");
}

void NeedVec(const at::Tensor& v, int64_t n, at::ScalarType t, const char* what) {
  TORCH_CHECK(v.is_cuda() && v.scalar_type() == t && v.dim() == 1 && v.size(0) == n && v.is_contiguous(), what, ": expected a contiguous [", n, "] ", t,
              " vector on CUDA");
}

void Check(const char* err, const char* what) {
  TORCH_CHECK(err == nullptr, what, ": CUDA kernel launch failed: ", err ? err : "");
}

void* Stream(const at::Tensor& t) {
  return c10::cuda::getCurrentCUDAStream(t.device().index()).stream();
}
}  // namespace

at::Tensor JsdRowsCuda(const at::Tensor& zs, const at::Tensor& zt, double temperature, double beta, const at::Tensor& row_w, double grad_factor, bool need_grad,
                       at::ScalarType grad_dtype) {
  NeedRows(zs, "jsd rows");
  NeedRows(zt, "jsd rows (teacher)");
  TORCH_CHECK(zt.sizes() == zs.sizes(), "jsd rows: student and teacher logits differ in shape");
  const int64_t C = zs.size(0), V = zs.size(1);
  NeedVec(row_w, C, at::kFloat, "jsd rows (weights)");
  at::Tensor loss = at::empty({C}, zs.options());
  Check(ck::JsdRows(zs.data_ptr<float>(), zt.data_ptr<float>(), C, V, V, static_cast<float>(temperature), beta, row_w.data_ptr<float>(),
                    static_cast<float>(grad_factor), need_grad, OutOf(grad_dtype), loss.data_ptr<float>(), Stream(zs)),
        "jsd rows");
  return loss;
}

void GrpoRowsCuda(const at::Tensor& z, double temperature, const at::Tensor& tok, const at::Tensor& old_logp, const at::Tensor& ref_logp, const at::Tensor& adv,
                  const at::Tensor& w, double eps_low, double eps_high, double kl_coef, double kl_clamp, bool need_grad, at::ScalarType grad_dtype,
                  const at::Tensor& logp, const at::Tensor& row_loss) {
  NeedRows(z, "grpo rows");
  const int64_t C = z.size(0), V = z.size(1);
  NeedVec(tok, C, at::kLong, "grpo rows (tokens)");
  NeedVec(old_logp, C, at::kFloat, "grpo rows (old logprobs)");
  if (kl_coef != 0) NeedVec(ref_logp, C, at::kFloat, "grpo rows (reference logprobs)");
  NeedVec(adv, C, at::kFloat, "grpo rows (advantages)");
  NeedVec(w, C, at::kFloat, "grpo rows (weights)");
  NeedVec(logp, C, at::kFloat, "grpo rows (logprobs out)");
  NeedVec(row_loss, C, at::kFloat, "grpo rows (loss out)");
  Check(ck::GrpoRows(z.data_ptr<float>(), C, V, V, static_cast<float>(temperature), tok.data_ptr<int64_t>(), old_logp.data_ptr<float>(),
                     kl_coef != 0 ? ref_logp.data_ptr<float>() : nullptr, adv.data_ptr<float>(), w.data_ptr<float>(), static_cast<float>(eps_low),
                     static_cast<float>(eps_high), static_cast<float>(kl_coef), static_cast<float>(kl_clamp), need_grad, OutOf(grad_dtype),
                     logp.data_ptr<float>(), row_loss.data_ptr<float>(), Stream(z)),
        "grpo rows");
}

void CeRowsCuda(const at::Tensor& z, double temperature, const at::Tensor& tok, const at::Tensor& w, bool need_grad, at::ScalarType grad_dtype,
                const at::Tensor& row_loss) {
  NeedRows(z, "cross-entropy rows");
  const int64_t C = z.size(0), V = z.size(1);
  NeedVec(tok, C, at::kLong, "cross-entropy rows (tokens)");
  NeedVec(w, C, at::kFloat, "cross-entropy rows (weights)");
  NeedVec(row_loss, C, at::kFloat, "cross-entropy rows (loss out)");
  at::Tensor logp = at::empty({C}, z.options());
  Check(ck::CeRows(z.data_ptr<float>(), C, V, V, static_cast<float>(temperature), tok.data_ptr<int64_t>(), w.data_ptr<float>(), need_grad, OutOf(grad_dtype),
                   logp.data_ptr<float>(), row_loss.data_ptr<float>(), Stream(z)),
        "cross-entropy rows");
}

at::Tensor RowLogprobsCuda(const at::Tensor& z, double temperature, const at::Tensor& tok) {
  NeedRows(z, "row logprobs");
  const int64_t C = z.size(0), V = z.size(1);
  NeedVec(tok, C, at::kLong, "row logprobs (tokens)");
  at::Tensor out = at::empty({C}, z.options());
  Check(ck::RowLogprobs(z.data_ptr<float>(), C, V, V, static_cast<float>(temperature), tok.data_ptr<int64_t>(), out.data_ptr<float>(), Stream(z)),
        "row logprobs");
  return out;
}

#else  // !PG_WITH_CUDA_KERNELS

at::Tensor JsdRowsCuda(const at::Tensor&, const at::Tensor&, double, double, const at::Tensor&, double, bool, at::ScalarType) {
  TORCH_CHECK(false, "this build has no fused loss kernels (no CUDA compiler at build time)");
}
void GrpoRowsCuda(const at::Tensor&, double, const at::Tensor&, const at::Tensor&, const at::Tensor&, const at::Tensor&, const at::Tensor&, double, double,
                  double, double, bool, at::ScalarType, const at::Tensor&, const at::Tensor&) {
  TORCH_CHECK(false, "this build has no fused loss kernels (no CUDA compiler at build time)");
}
void CeRowsCuda(const at::Tensor&, double, const at::Tensor&, const at::Tensor&, bool, at::ScalarType, const at::Tensor&) {
  TORCH_CHECK(false, "this build has no fused loss kernels (no CUDA compiler at build time)");
}
at::Tensor RowLogprobsCuda(const at::Tensor&, double, const at::Tensor&) {
  TORCH_CHECK(false, "this build has no fused loss kernels (no CUDA compiler at build time)");
}

#endif

}  // namespace loss
}  // namespace pg
