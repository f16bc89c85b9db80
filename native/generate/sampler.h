// Token sampling from final-position logits: temperature, top-k, top-p, greedy; and the logprob
// of each chosen token under the FULL-vocabulary distribution softmax(logits / T).
#pragma once
#include <ATen/ATen.h>

#include <string>
#include <utility>
#include <vector>

namespace pg {

/// Sampling parameters (validated by ValidateSampling).
struct SamplingOptions {
  /// 0 = greedy (argmax); > 0 divides the logits.
  double temperature = 1.0;
  /// 0 = off; k >= 1 keeps the k most likely tokens (top_k = 1 is greedy).
  int64_t top_k = 0;
  /// Nucleus mass in (0, 1]; 1 = off. Applied after top-k, on the renormalised top-k mass.
  double top_p = 1.0;
  /// Min-p in [0, 1]; 0 = off. Keeps tokens whose probability under softmax(logits / T) is at
  /// least min_p times the most likely token's (transformers' MinPLogitsWarper, applied after
  /// top-k and top-p; the ratio does not depend on the renormalisation).
  double min_p = 0.0;

  bool operator==(const SamplingOptions& o) const { return temperature == o.temperature && top_k == o.top_k && top_p == o.top_p && min_p == o.min_p; }
};

/// Per-row sampling parameters of one batch of R rows (rows may differ in every field).
/// Built on the host from R SamplingOptions (RowSampling::Make), then kept on the logits' device:
/// temperature [R] float32 (0 = greedy), top_k [R] int64 (0 = off), top_p [R] float32,
/// min_p [R] float32. The host summary (uniform / max_k / needs_*) fixes which kernels run, so a
/// call launches a fixed sequence for a fixed summary (CUDA-graph capturable when sync-free).
struct RowSampling {
  std::vector<SamplingOptions> rows;  // host copy, one per row
  at::Tensor temperature, top_k, top_p, min_p;
  bool uniform = true;  // every row has the same options (then SampleTokens(rows[0]) runs)
  bool any_greedy = false, any_cand = false, any_full = false, any_p_only = false, any_min_p = false;
  int64_t max_k = 0;  // largest effective top-k among rows that use top-k
  /// Builds the tensors on `device` for vocabulary size V.
  static RowSampling Make(const std::vector<SamplingOptions>& rows, int64_t V, at::Device device);
  /// The rows `idx` (host indices) of this batch, as a new RowSampling.
  RowSampling Select(const std::vector<int64_t>& idx, int64_t V, at::Device device) const;
};

/// ArgError naming `what`.temperature / .topK / .topP / .minP when out of range
/// (temperature >= 0 and finite, topK >= 0, topP in (0, 1], minP in [0, 1]).
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
std::pair<at::Tensor, at::Tensor> SampleTokens(const at::Tensor& logits, const SamplingOptions& o, const at::Tensor& uniforms);

/// Per-row SampleTokens: row r is sampled exactly as SampleTokens(logits[r:r+1], rs.rows[r],
/// uniforms[r:r+1]) would (same operations per row; when every row has the same options this IS
/// that call on the whole batch, bit for bit what a uniform batch gave before per-row options).
/// Rows that differ share one pass: greedy rows take the argmax, rows with top-k / top-p draw
/// from the sorted top-K candidates (K = the largest k; top-p-only rows as in SampleTokens),
/// the rest from the full vocabulary; min-p masks candidates (or the full row) below
/// min_p * p_max. Returns {tokens [R] int64, logprobs [R] float32} with the logprob defined as
/// in SampleTokens (under the row's own temperature; greedy rows under T = 1).
/// Host synchronisation: only when a row uses top-p without an effective top-k over V > 1024.
std::pair<at::Tensor, at::Tensor> SampleTokensRows(const at::Tensor& logits, const RowSampling& rs, const at::Tensor& uniforms);

/// SamplingIsSyncFree for every row.
bool RowSamplingIsSyncFree(const RowSampling& rs, int64_t vocab_size);

/// True when SampleTokens(logits [R, vocab_size], o, u) never synchronises with the host, so the
/// static decode step can run it inside its CUDA graph: greedy (temperature 0), full-vocabulary
/// sampling, top-k (with or without top-p). False for top-p without an effective top-k over more
/// than 1024 ids (the host check whether the top 1024 candidates hold every row's nucleus).
bool SamplingIsSyncFree(const SamplingOptions& o, int64_t vocab_size);

}  // namespace pg
