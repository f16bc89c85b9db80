#include "generate/sampler.h"

#include <cmath>
#include <sstream>

#include "napi/util.h"

namespace pg {

static std::string Num(double d) {
  std::ostringstream os;
  os << d;
  return os.str();
}

// The one branch of SampleTokens that reads a device value on the host: top-p without an
// effective top-k over more than 1024 ids checks whether the top 1024 candidates cover every
// row's nucleus (`.item()`) before deciding to sort the whole vocabulary.
static bool NeedsNucleusCheck(const SamplingOptions& o, int64_t V) {
  const bool use_k = o.top_k > 0 && o.top_k < V;
  return o.temperature != 0.0 && o.top_p < 1.0 && !use_k && V > 1024;
}

bool SamplingIsSyncFree(const SamplingOptions& o, int64_t vocab_size) { return !NeedsNucleusCheck(o, vocab_size); }

void ValidateSampling(const SamplingOptions& o, const std::string& what) {
  if (!std::isfinite(o.temperature) || o.temperature < 0)
    throw ArgError(what + ".temperature must be a finite number >= 0 (0 = greedy), got " + Num(o.temperature));
  if (o.top_k < 0) throw ArgError(what + ".topK must be an integer >= 0 (0 = off), got " + std::to_string(o.top_k));
  if (!(o.top_p > 0.0 && o.top_p <= 1.0))
    throw ArgError(what + ".topP must be in (0, 1] (1 = off), got " + Num(o.top_p));
}

std::pair<at::Tensor, at::Tensor> SampleTokens(const at::Tensor& logits_in, const SamplingOptions& o,
                                               const at::Tensor& uniforms) {
  if (logits_in.dim() != 2 || logits_in.size(0) < 1 || logits_in.size(1) < 1)
    throw ArgError("logits must have shape [R, V] with R, V >= 1");
  if (uniforms.dim() != 1 || uniforms.size(0) != logits_in.size(0))
    throw ArgError("uniforms must have shape [R]");
  at::NoGradGuard ng;
  at::Tensor logits = logits_in.to(at::kFloat);
  const int64_t V = logits.size(1);

  if (o.temperature == 0.0) {
    at::Tensor tok = logits.argmax(-1);
    at::Tensor lp = logits.gather(1, tok.unsqueeze(1)).squeeze(1) - at::logsumexp(logits, {-1});
    return {tok, lp};
  }

  at::Tensor scaled = o.temperature == 1.0 ? logits : logits / o.temperature;
  at::Tensor mx = std::get<0>(scaled.max(-1, /*keepdim=*/true));  // [R, 1]
  const bool use_k = o.top_k > 0 && o.top_k < V;
  const bool use_p = o.top_p < 1.0;

  // Draws one index per row from the (unnormalised, non-negative) masses w [R, K] with the row's
  // uniform: the first index whose cumulative mass exceeds the target u * total, so zero-mass
  // entries are never chosen. Every w here has a largest entry of exactly 1 (exp(0)), so
  // total >= 1, and the target is kept strictly below the total even when u * total rounds up.
  auto draw = [&](const at::Tensor& w) {
    at::Tensor cdf = w.cumsum(-1);
    at::Tensor total = cdf.narrow(1, cdf.size(1) - 1, 1);
    at::Tensor target = at::minimum(uniforms.to(cdf.device(), at::kFloat).unsqueeze(1) * total, total * (1.0 - 1.0 / 8388608.0));
    return at::searchsorted(cdf, target, /*out_int32=*/false, /*right=*/true).clamp_max(cdf.size(1) - 1);  // [R, 1]
  };

  at::Tensor lse, tok;
  if (!use_k && !use_p) {
    // Full vocabulary: inverse CDF over exp(scaled - max) in id order (no sort needed).
    at::Tensor w = (scaled - mx).exp_();
    tok = draw(w);
    lse = mx.squeeze(1) + w.sum(-1).log_();
  } else {
    lse = mx.squeeze(1) + (scaled - mx).exp_().sum(-1).log_();
    at::Tensor vals, idx;  // candidates in descending order and their vocab ids, [R, K]
    if (use_k) {
      std::tie(vals, idx) = at::topk(scaled, o.top_k, -1, /*largest=*/true, /*sorted=*/true);
    } else {
      // top-p alone: the nucleus is usually far smaller than the vocabulary; look at the top 1024
      // first and sort everything only when some row's nucleus does not fit in them.
      const int64_t k0 = std::min<int64_t>(V, 1024);
      std::tie(vals, idx) = at::topk(scaled, k0, -1, true, true);
      if (NeedsNucleusCheck(o, V)) {  // k0 < V here
        at::Tensor covered = (vals - lse.unsqueeze(1)).exp().sum(-1);  // full-vocabulary mass of the top k0
        if (covered.lt(o.top_p).any().item<bool>()) std::tie(vals, idx) = at::sort(scaled, -1, /*descending=*/true);
      }
    }
    // Masses renormalised over the candidates (top-k) or the whole vocabulary (top-p alone: the
    // candidates hold all of the nucleus).
    at::Tensor w = (vals - vals.narrow(1, 0, 1)).exp();
    if (use_p) {
      at::Tensor norm = use_k ? w.sum(-1, true) : (lse.unsqueeze(1) - vals.narrow(1, 0, 1)).exp();
      at::Tensor p = w / norm;
      at::Tensor drop = (p.cumsum(-1) - p).ge(o.top_p);  // preceding mass already >= top_p
      drop.select(1, 0).fill_(false);
      w = w.masked_fill(drop, 0.0);
    }
    tok = idx.gather(1, draw(w));
  }
  tok = tok.squeeze(1);
  at::Tensor lp = scaled.gather(1, tok.unsqueeze(1)).squeeze(1) - lse;
  return {tok, lp};
}

}  // namespace pg
