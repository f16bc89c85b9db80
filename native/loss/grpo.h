// GRPO policy loss (Shao et al. 2024; DAPO, Yu et al. 2025; Dr. GRPO, Liu et al. 2025; docs/design.md §5),
// fused with the lm_head projection and chunked over tokens.
//
// Per completion token (logp = log softmax(logits / T)[token], T = the sampling temperature):
//   ρ    = exp(logp − logp_old)
//   ℓ    = −min(ρ·Â, clip(ρ, 1−ε_low, 1+ε_high)·Â) + β_KL·k3
//   k3   = exp(x) − x − 1,  x = clamp(logp_ref − logp, −kKlClamp, +kKlClamp)   (kKlClamp = 20:
//          finite for any log-ratio, k3(x, x) = 0, k3 ≥ 0; outside the clamp the KL gradient is 0,
//          torch.clamp semantics, as verl's low_var_kl. TRL does not clamp; inside ±20 both agree.)
// Gradients follow torch autograd of that expression exactly (torch.min splits ties ½/½; clamp
// passes the gradient on the closed interval), so values and grads match TRL's compute_loss.
//
// Aggregation → per-token weight w (the loss is Σ w·ℓ). The normalisers are those of the whole
// optimizer window (all micro-batches), so accumulating micro-batch gradients reproduces the full
// batch gradient exactly:
//   grpo    : w = mask / (max(1, Σ_t mask_b) · numSequences)     (TRL "grpo": mean of sequence means)
//   dapo    : w = mask / numTokens                                (TRL "dapo": token mean over the window)
//   dr_grpo : w = mask / (numSequences · maxCompletionLength)     (TRL "dr_grpo": B × max_completion_length)
// Defaults when not given: numSequences = B, numTokens = Σ mask, maxCompletionLength = T (the
// padded completion width of this call) — pass the window values when accumulating.
#pragma once
#include <ATen/ATen.h>

#include <cstdint>
#include <string>

namespace pg {
namespace loss {

constexpr double kKlClamp = 20.0;

/// k3 estimator of KL(π‖π_ref) per token with the clamped log-ratio (see above).
at::Tensor K3(const at::Tensor& logp, const at::Tensor& ref_logp);

struct GrpoOptions {
  double eps_low = 0.2, eps_high = 0.2;
  double kl_coef = 0.0;
  double temperature = 1.0;
  int64_t chunk = 0;
  std::string aggregation = "dapo";   // grpo | dapo | dr_grpo
  double num_sequences = -1;          // <= 0: B
  double num_tokens = -1;             // <= 0: Σ mask
  double max_completion_length = -1;  // <= 0: T
};

/// Masked statistics of one call (fractions over mask; sums and count returned for window means).
struct GrpoMetrics {
  double mask_count = 0;
  double kl_sum = 0, clip_low_sum = 0, clip_high_sum = 0, clip_region_sum = 0;
  at::Tensor logp;  // [N] float32 (or float64) detached
  double MeanKl() const { return mask_count > 0 ? kl_sum / mask_count : 0; }
};

/// Per-token aggregation weights [B, T] (see above). mask [B, T].
at::Tensor GrpoTokenWeights(const at::Tensor& mask, const GrpoOptions& o);

/// Fused GRPO. hidden [B, T, H] (the positions that predict `tokens`; grad flows when it requires
/// grad), weight [V, H] frozen, tokens/old_logp/mask [B, T], ref_logp [B, T] (undefined allowed when
/// kl_coef == 0), advantages [B] or [B, T]. Returns the 0-dim loss; metrics filled when given.
at::Tensor GrpoFused(const at::Tensor& hidden, const at::Tensor& weight, const at::Tensor& tokens, const at::Tensor& old_logp, const at::Tensor& ref_logp,
                     const at::Tensor& advantages, const at::Tensor& mask, const GrpoOptions& o, GrpoMetrics* metrics);

/// Unfused reference (full logits, log_softmax, TRL's expression, autograd). Tests only.
at::Tensor GrpoReference(const at::Tensor& hidden, const at::Tensor& weight, const at::Tensor& tokens, const at::Tensor& old_logp, const at::Tensor& ref_logp,
                         const at::Tensor& advantages, const at::Tensor& mask, const GrpoOptions& o, GrpoMetrics* metrics);

}  // namespace loss
}  // namespace pg
