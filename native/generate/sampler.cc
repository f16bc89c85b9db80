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
  at::Tensor lse = at::logsumexp(scaled, {-1});  // [R]

  at::Tensor cand_vals, cand_idx;  // candidate logits and their vocab ids, [R, K]
  const bool use_k = o.top_k > 0 && o.top_k < V;
  const bool use_p = o.top_p < 1.0;
  if (use_k) {
    auto tk = at::topk(scaled, o.top_k, -1, /*largest=*/true, /*sorted=*/true);
    cand_vals = std::get<0>(tk);
    cand_idx = std::get<1>(tk);
  } else if (use_p) {
    auto st = at::sort(scaled, -1, /*descending=*/true);
    cand_vals = std::get<0>(st);
    cand_idx = std::get<1>(st);
  } else {
    cand_vals = scaled;  // the whole vocabulary in id order: inverse CDF works in any order
  }

  at::Tensor probs = at::softmax(cand_vals, -1);  // renormalised over the candidates
  if (use_p) {
    at::Tensor before = probs.cumsum(-1) - probs;  // mass of the more likely candidates
    at::Tensor drop = before.ge(o.top_p);
    drop.select(1, 0).fill_(false);
    probs = probs.masked_fill(drop, 0.0);
  }
  at::Tensor cdf = probs.cumsum(-1);
  at::Tensor target = (uniforms.to(cdf.device(), at::kFloat) * cdf.select(1, cdf.size(1) - 1)).unsqueeze(1);
  // First index whose cumulative mass exceeds the target: zero-mass candidates are never chosen.
  at::Tensor pos = at::searchsorted(cdf, target, /*out_int32=*/false, /*right=*/true);
  // Rounding can push the target onto the total mass: clamp to the last candidate with mass.
  at::Tensor ar = at::arange(cdf.size(1), at::TensorOptions().dtype(at::kLong).device(cdf.device()));
  at::Tensor last = at::where(probs.gt(0), ar.unsqueeze(0), at::zeros_like(ar).unsqueeze(0)).amax(-1, /*keepdim=*/true);
  pos = at::minimum(pos, last);
  at::Tensor tok = cand_idx.defined() ? cand_idx.gather(1, pos).squeeze(1) : pos.squeeze(1);
  at::Tensor lp = scaled.gather(1, tok.unsqueeze(1)).squeeze(1) - lse;
  return {tok, lp};
}

}  // namespace pg
