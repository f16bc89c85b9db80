// ATen-facing wrappers of the fused loss row kernels (native/cuda/loss_kernels.cu): argument checks,
// output views, the current CUDA stream, errors as c10::Error. Used by jsd.cc, grpo.cc and
// common.cc on CUDA float32 logits; everywhere else (CPU, float64, builds without a CUDA compiler,
// PAPERGYM_NO_FUSED_KERNELS=1) those files run their ATen path, which is the reference.
#pragma once
#include <ATen/ATen.h>

#include <cstdint>

namespace pg {
namespace loss {

/// True when the row kernels are used for float32 logits on `t`'s device (cuda/kernels.h).
bool RowKernelsEnabled(const at::Tensor& t);

/// Logits rows per chunk on the kernel path when the caller asked for automatic (chunk 0): about
/// `budget` float32 logits per chunk. The kernels keep one (GRPO) or two (JSD) [C, V] float32
/// buffers and write gradients over them.
int64_t KernelChunk(int64_t chunk, int64_t vocab, int64_t budget);

/// The gradient rows written over a float32 logits buffer z [C, V] in `dtype`: z itself for
/// float32, else a [C, V] view of z's bytes with row stride 2V (the packed rows).
at::Tensor GradRowsView(const at::Tensor& z, at::ScalarType dtype);

/// JSD_β over a chunk: zs, zt [C, V] float32 contiguous on CUDA (zs overwritten with the gradient
/// rows when need_grad), row_w [C] float32. Returns row_loss [C] float32 (unweighted JSD per row).
at::Tensor JsdRowsCuda(const at::Tensor& zs, const at::Tensor& zt, double temperature, double beta, const at::Tensor& row_w, double grad_factor, bool need_grad,
                       at::ScalarType grad_dtype);

/// GRPO over a chunk: z [C, V] float32 contiguous (overwritten with gradient rows when need_grad),
/// tok [C] int64, old/ref/adv/w [C] float32 (ref ignored when kl_coef == 0). Writes logp [C] and
/// row_loss [C] (float32, contiguous, on the same device).
void GrpoRowsCuda(const at::Tensor& z, double temperature, const at::Tensor& tok, const at::Tensor& old_logp, const at::Tensor& ref_logp, const at::Tensor& adv,
                  const at::Tensor& w, double eps_low, double eps_high, double kl_coef, double kl_clamp, bool need_grad, at::ScalarType grad_dtype,
                  const at::Tensor& logp, const at::Tensor& row_loss);

/// Cross-entropy over a chunk: z [C, V] float32 contiguous (overwritten with w·(softmax − onehot)/τ
/// rows in grad_dtype when need_grad), tok [C] int64, w [C] float32. Writes row_loss [C] = −logp·w.
void CeRowsCuda(const at::Tensor& z, double temperature, const at::Tensor& tok, const at::Tensor& w, bool need_grad, at::ScalarType grad_dtype,
                const at::Tensor& row_loss);

/// logp [C] float32 = z_tok/τ − logsumexp(z/τ) for z [C, V] float32 contiguous on CUDA.
at::Tensor RowLogprobsCuda(const at::Tensor& z, double temperature, const at::Tensor& tok);

}  // namespace loss
}  // namespace pg
