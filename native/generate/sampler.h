// Token sampling from final-position logits: temperature, top-k, top-p, greedy; and the logprob
// of each chosen token under the FULL-vocabulary distribution softmax(logits / T).
#pragma once
#include <ATen/ATen.h>

#include <string>
#include <utility>

namespace pg {

/// Sampling parameters (validated by ValidateSampling).
struct SamplingOptions {
  /// 0 = greedy (argmax); > 0 divides the logits.
  double temperature = 1.0;
  /// 0 = off; k >= 1 keeps the k most likely tokens (top_k = 1 is greedy).
  int64_t top_k = 0;
  /// Nucleus mass in (0, 1]; 1 = off. Applied after top-k, on the renormalised top-k mass.
  double top_p = 1.0;
};

/// ArgError naming `what`.temperature / .topK / .topP when out of range
/// (temperature >= 0 and finite, topK >= 0, topP in (0, 1]).
void ValidateSampling(const SamplingOptions& o, const std::string& what);

/// Chooses one token per row.
///
/// logits   [R, V] float32 (any device).
/// uniforms [R] float32 in [0, 1) on the logits' device: the row's random draw (inverse-CDF
///          sampling), so a row's sample depends only on its logits and its uniform.
/// Returns  {tokens [R] int64, logprobs [R] float32}.
///
/// Order of operations (transformers' warper order): scaled = logits / T; top-k keeps the k
/// largest scaled logits; top-p keeps, in descending order, each token whose preceding mass is
/// < top_p (the first token always stays); sample from the renormalised kept mass.
/// The returned logprob is log_softmax(logits / T)[token] over the FULL vocabulary, i.e. BEFORE
/// top-k / top-p truncation: exactly what a teacher-forced forward recomputes with the same T
/// (the GRPO old-logprob, so rho = 1 at step 0). Greedy (T == 0): argmax of the logits (first
/// index on ties) and the logprob under T = 1, log_softmax(logits)[token].
///
/// Host synchronisation: none (only kernel launches with values fixed by `o` and the shapes, so a
/// call can be captured in a CUDA graph) except for top-p without an effective top-k (top_k == 0
/// or top_k >= V) over V > 1024 ids, which reads one bool on the host; see SamplingIsSyncFree.
std::pair<at::Tensor, at::Tensor> SampleTokens(const at::Tensor& logits, const SamplingOptions& o,
                                               const at::Tensor& uniforms);

/// True when SampleTokens(logits [R, vocab_size], o, u) never synchronises with the host, so the
/// static decode step can run it inside its CUDA graph: greedy (temperature 0), full-vocabulary
/// sampling, top-k (with or without top-p). False for top-p without an effective top-k over more
/// than 1024 ids (the host check whether the top 1024 candidates hold every row's nucleus).
bool SamplingIsSyncFree(const SamplingOptions& o, int64_t vocab_size);

}  // namespace pg
