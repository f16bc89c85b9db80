// Row kernels of the fused lm_head losses (implementation and formulas: loss_kernels.cu). Plain C++
// declarations, includable without CUDA; defined only in builds with PG_WITH_CUDA_KERNELS. Each
// function launches one kernel on `stream` (a cudaStream_t) and returns nullptr, or the CUDA error
// string of the launch. All pointers are device pointers; logits rows are float32 with row stride
// `ld` (elements); V = vocabulary size.
#pragma once
#include <cstdint>

namespace pg {
namespace cuda_kernels {

/// Element type of the gradient rows written over the logits (the lm_head weight's dtype).
enum class OutType { kFloat32, kBFloat16, kFloat16 };

/// JSD_β rows (native/loss/jsd.h). zs, zt: student / teacher logits [rows, V] (unscaled; divided by
/// `temperature` inside). row_w [rows]: the token's loss weight (0 = masked: loss 0, gradient 0).
/// Writes row_loss [rows] = JSD_β of the row (unweighted) and, with need_grad, over zs the gradient
/// row_w·grad_factor·∂JSD/∂(z_s/τ) in `out` precision (bf16 / fp16 rows packed with stride 2·ld).
/// Unlike GrpoRows / CeRows the 1/τ of the chain rule is not applied here: the caller folds it into
/// grad_factor (jsd.cc passes 1/(normalizer·τ)). NaN logits give a NaN loss and NaN gradient.
const char* JsdRows(float* zs, const float* zt, int64_t rows, int64_t V, int64_t ld, float temperature, double beta, const float* row_w, float grad_factor,
                    bool need_grad, OutType out, float* row_loss, void* stream);

/// GRPO rows (native/loss/grpo.h): logp = z_tok/τ − logsumexp(z/τ) → logp [rows]; per-token
/// clipped-surrogate + β_KL·k3 loss times w → row_loss [rows]; with need_grad, over z the gradient
/// w·(d per / d logp)·(1[j = tok] − softmax_j)/τ. ref_logp is read only when kl_coef != 0.
const char* GrpoRows(float* z, int64_t rows, int64_t V, int64_t ld, float temperature, const int64_t* tok, const float* old_logp, const float* ref_logp,
                     const float* adv, const float* w, float eps_low, float eps_high, float kl_coef, float kl_clamp, bool need_grad, OutType out, float* logp,
                     float* row_loss, void* stream);

/// Cross-entropy rows: logp as GrpoRows, row_loss = −logp·w, and with need_grad over z the gradient
/// w·(softmax_j − 1[j = tok])/τ (torch's cross_entropy gradient, per token weight w).
const char* CeRows(float* z, int64_t rows, int64_t V, int64_t ld, float temperature, const int64_t* tok, const float* w, bool need_grad, OutType out,
                   float* logp, float* row_loss, void* stream);

/// True when this binary holds a kernel image for the current CUDA device (the build's architectures
/// cover it); false e.g. on a GPU older than the oldest compiled architecture.
bool KernelImageAvailable();

/// logp [rows] = z_tok/τ − logsumexp(z/τ) (the same reduction as GrpoRows: identical logprobs).
const char* RowLogprobs(const float* z, int64_t rows, int64_t V, int64_t ld, float temperature, const int64_t* tok, float* logp, void* stream);

}  // namespace cuda_kernels
}  // namespace pg
