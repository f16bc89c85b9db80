// Generalised Jensen–Shannon divergence (GKD, Agarwal et al. 2024, Eq. 1; docs/design.md §5) between a
// student and a teacher next-token distribution, fused with the lm_head projection and chunked over
// tokens so that [N, V] logits never exist for all tokens at once.
//
// With S = softmax(z_s / τ), T = softmax(z_t / τ) and M = β·T + (1−β)·S (built in log space):
//   JSD_β = β·KL(T‖M) + (1−β)·KL(S‖M)          for 0 < β < 1,
//   β = 0  →  KL(T‖S)  (forward KL, "mode covering"; TRL's beta == 0 branch),
//   β = 1  →  KL(S‖T)  (reverse KL, "mode seeking"; TRL's beta == 1 branch).
// loss = Σ_n mask_n · JSD_β(n) / normalizer  (normalizer defaults to Σ mask: token mean).
//
// Numerics: log M is computed relative to the larger of log S / log T with log1p/expm1 of the
// difference d = log T − log S, so student == teacher gives exactly 0 (value and gradient), vocab
// entries with probability 0 (−inf logits) contribute exactly 0 and never NaN. The gradient w.r.t.
// the student logits is analytic: ∂JSD/∂log S_j = (1−β)·S_j·(log S_j − log M_j), pushed through
// log-softmax and 1/τ, then through the frozen weight into dHidden (no dW is ever formed).
#pragma once
#include <ATen/ATen.h>

#include <cstdint>

namespace pg {
namespace loss {

struct JsdOptions {
  double beta = 0.5;
  double temperature = 1.0;
  int64_t chunk = 0;       // tokens per chunk (0 = automatic)
  double normalizer = -1;  // <= 0: Σ mask
};

/// Fused, chunked JSD with a custom autograd function. student_hidden [N, H] (grad flows into it
/// when it requires grad), teacher_hidden [N, H] (treated as constant), weight [V, H] (frozen),
/// mask [N] (0/1 or weights). Returns a 0-dim float32 (float64 for float64 inputs) loss.
at::Tensor JsdFused(const at::Tensor& student_hidden, const at::Tensor& teacher_hidden, const at::Tensor& weight, const at::Tensor& mask, const JsdOptions& o);

/// Same, with the teacher given as logits [N, V] (e.g. a precomputed teacher). Used by tests.
at::Tensor JsdFusedTeacherLogits(const at::Tensor& student_hidden, const at::Tensor& teacher_logits, const at::Tensor& weight, const at::Tensor& mask,
                                 const JsdOptions& o);

/// Unfused reference: full [N, V] logits, log_softmax, mixture by logsumexp of the stacked
/// (log S + log(1−β), log T + log β), KL terms, plain autograd. Tests only.
at::Tensor JsdReference(const at::Tensor& student_hidden, const at::Tensor& teacher_hidden, const at::Tensor& weight, const at::Tensor& mask,
                        const JsdOptions& o);

/// Per-token JSD and d(JSD)/d(student scaled logits) for one chunk of log-probabilities
/// (ls, lt: [C, V] log-softmax of logits/τ; both are overwritten — pass buffers you no longer need).
void JsdChunk(const at::Tensor& ls, const at::Tensor& lt, double beta, at::Tensor* per_token, at::Tensor* dz_student);

}  // namespace loss
}  // namespace pg
