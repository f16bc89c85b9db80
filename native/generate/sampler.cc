#include "generate/sampler.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <sstream>

#include "core/errors.h"
#include "cuda/kernels.h"

#ifdef PG_WITH_CUDA_KERNELS
#include <c10/cuda/CUDAStream.h>

#include "cuda/sampler_kernels.h"
#endif

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

bool SamplingIsSyncFree(const SamplingOptions& o, int64_t vocab_size) {
  return !NeedsNucleusCheck(o, vocab_size);
}

void ValidateSampling(const SamplingOptions& o, const std::string& what) {
  if (!std::isfinite(o.temperature) || o.temperature < 0)
    throw ArgError(what + ".temperature must be a finite number >= 0 (0 = greedy), got " + Num(o.temperature));
  if (o.top_k < 0) throw ArgError(what + ".topK must be an integer >= 0 (0 = off), got " + std::to_string(o.top_k));
  if (!(o.top_p > 0.0 && o.top_p <= 1.0)) throw ArgError(what + ".topP must be in (0, 1] (1 = off), got " + Num(o.top_p));
  if (!(o.min_p >= 0.0 && o.min_p <= 1.0)) throw ArgError(what + ".minP must be in [0, 1] (0 = off), got " + Num(o.min_p));
}

// Draws one index per row from the (unnormalised, non-negative) masses w [R, K] with the row's
// uniform: the first index whose cumulative mass exceeds the target u * total, so zero-mass
// entries are never chosen. Every w here has a largest entry of exactly 1 (exp(0)), so
// total >= 1, and the target is kept strictly below the total even when u * total rounds up.
// Trailing zero-mass entries do not change the result (the cumulative sums of the leading
// entries and the total are the same).
static at::Tensor Draw(const at::Tensor& w, const at::Tensor& uniforms) {
  at::Tensor cdf = w.cumsum(-1);
  at::Tensor total = cdf.narrow(1, cdf.size(1) - 1, 1);
  at::Tensor target = at::minimum(uniforms.to(cdf.device(), at::kFloat).unsqueeze(1) * total, total * (1.0 - 1.0 / 8388608.0));
  // The number of cumulative masses <= target is the first index whose cumulative mass exceeds it
  // (searchsorted with right = true on the non-decreasing cdf), as one plain comparison and sum on
  // every backend.
  return cdf.le(target).sum(-1, /*keepdim=*/true).clamp_max(cdf.size(1) - 1);  // [R, 1] int64
}

// The K largest entries of every row of x [R, V] in descending order and their ids. at::topk's
// `sorted` flag is not relied on for the order (the inverse CDF of Draw depends on it and the
// candidate columns of SampleTokensRows are masked by position): the K values are sorted again,
// stably, which is a no-op where topk already returned them in order.
static std::pair<at::Tensor, at::Tensor> TopKSorted(const at::Tensor& x, int64_t k) {
  auto [vals, idx] = at::topk(x, k, -1, /*largest=*/true, /*sorted=*/true);
  auto [svals, perm] = vals.sort(/*stable=*/true, -1, /*descending=*/true);
  return {svals, idx.gather(1, perm)};
}

// The top-k candidates of logits / T in descending order with their ids, and the full-vocabulary
// log-sum-exp of logits / T, from the fused kernel (cuda/sampler_kernels.h: one pass over each row,
// no [R, V] float32 copy, no sort) where it applies: CUDA logits, the own kernels on, k <= 64, and
// at least PAPERGYM_FUSED_TOPK_MIN_ROWS rows (default 256). Measured on the H200 (V = 151936, k =
// 20, one call per decode step): 230 / 238 / 286 / 371 µs at 1 / 32 / 64 / 256 rows, against
// ATen's top-k, sort and reductions at about 75 / 133 / 220 / 720 µs — each CTA scans its row
// with one load in flight per warp (latency-bound), so it only pays where ATen's cost grows with
// the rows. Returns {} otherwise (SampleTokens then takes at::topk, a stable sort and logsumexp).
static int64_t FusedTopKMinRows() {
  const char* e = std::getenv("PAPERGYM_FUSED_TOPK_MIN_ROWS");  // read per call: tests lower it
  const long long v = e && *e ? std::atoll(e) : 256;
  return v > 0 ? static_cast<int64_t>(v) : 256;
}
struct TopKLse {
  at::Tensor vals, idx, lse;
};
static TopKLse FusedTopK(const at::Tensor& logits, double temperature, int64_t k) {
#ifdef PG_WITH_CUDA_KERNELS
  namespace ck = cuda_kernels;
  const auto dt = logits.scalar_type();
  if (!CudaKernelsEnabled(logits) || logits.size(0) < FusedTopKMinRows() || k < 1 || k > ck::kFusedTopKMax || k > logits.size(1) || temperature <= 0.0 ||
      (dt != at::kFloat && dt != at::kBFloat16 && dt != at::kHalf))
    return {};
  at::Tensor x = logits.contiguous();
  const int64_t R = x.size(0), V = x.size(1);
  auto fo = x.options().dtype(at::kFloat);
  TopKLse out{at::empty({R, k}, fo), at::empty({R, k}, x.options().dtype(at::kLong)), at::empty({R}, fo)};
  const ck::TopKInType t = dt == at::kFloat ? ck::TopKInType::kFloat32 : dt == at::kBFloat16 ? ck::TopKInType::kBFloat16 : ck::TopKInType::kFloat16;
  // 1 / T as ATen's CUDA division by a host scalar forms it (float32 reciprocal of float32 T).
  const float inv_t = 1.0f / static_cast<float>(temperature);
  const char* err = ck::FusedTopKLse(x.data_ptr(), inv_t, out.vals.data_ptr<float>(), out.idx.data_ptr<int64_t>(), out.lse.data_ptr<float>(), R, V, k, t,
                                     c10::cuda::getCurrentCUDAStream(x.device().index()).stream());
  TORCH_CHECK(err == nullptr, "fused top-k kernel launch failed: ", err ? err : "");
  return out;
#else
  (void)logits, (void)temperature, (void)k;
  return {};
#endif
}

std::pair<at::Tensor, at::Tensor> SampleTokens(const at::Tensor& logits_in, const SamplingOptions& o, const at::Tensor& uniforms) {
  if (logits_in.dim() != 2 || logits_in.size(0) < 1 || logits_in.size(1) < 1) throw ArgError("logits must have shape [R, V] with R, V >= 1");
  if (uniforms.dim() != 1 || uniforms.size(0) != logits_in.size(0)) throw ArgError("uniforms must have shape [R]");
  at::NoGradGuard ng;
  const int64_t V = logits_in.size(1);

  if (o.temperature == 0.0) {
    at::Tensor logits = logits_in.to(at::kFloat);
    at::Tensor tok = logits.argmax(-1);
    at::Tensor lp = logits.gather(1, tok.unsqueeze(1)).squeeze(1) - at::logsumexp(logits, {-1});
    return {tok, lp};
  }

  const bool use_k = o.top_k > 0 && o.top_k < V;
  const bool use_p = o.top_p < 1.0;
  const bool use_m = o.min_p > 0.0;
  auto draw = [&](const at::Tensor& w) { return Draw(w, uniforms); };
  // min-p: keep scaled >= max + log(min_p), i.e. p >= min_p * p_max (min_p = 1: the maxima only).
  const double log_min_p = use_m ? std::log(o.min_p) : 0.0;
  // Top-k candidates and the log-sum-exp in one pass where the fused kernel applies (the same
  // candidates, so the same draws; the log-sum-exp summed in another order); else ATen below.
  TopKLse fused = use_k ? FusedTopK(logits_in, o.temperature, o.top_k) : TopKLse{};
  at::Tensor scaled, mx;
  if (!fused.vals.defined()) {
    at::Tensor logits = logits_in.to(at::kFloat);
    scaled = o.temperature == 1.0 ? logits : logits / o.temperature;
    mx = std::get<0>(scaled.max(-1, /*keepdim=*/true));  // [R, 1]
  }

  if (!use_k && !use_p) {
    // Full vocabulary: inverse CDF over exp(scaled - max) in id order (no sort needed).
    at::Tensor w = (scaled - mx).exp_();
    at::Tensor lse = mx.squeeze(1) + w.sum(-1).log_();
    if (use_m) w = w.masked_fill(scaled < mx + log_min_p, 0.0);
    at::Tensor tok = draw(w).squeeze(1);
    return {tok, scaled.gather(1, tok.unsqueeze(1)).squeeze(1) - lse};
  }
  at::Tensor vals, idx, lse;  // candidates in descending order, their vocab ids [R, K]; log-sum-exp [R]
  if (fused.vals.defined()) {
    vals = fused.vals, idx = fused.idx, lse = fused.lse;
  } else {
    lse = mx.squeeze(1) + (scaled - mx).exp_().sum(-1).log_();
    if (use_k) {
      std::tie(vals, idx) = TopKSorted(scaled, o.top_k);
    } else {
      // top-p alone: the nucleus is usually far smaller than the vocabulary; look at the top 1024
      // first and sort everything only when some row's nucleus does not fit in them.
      const int64_t k0 = std::min<int64_t>(V, 1024);
      std::tie(vals, idx) = TopKSorted(scaled, k0);
      if (NeedsNucleusCheck(o, V)) {                                   // k0 < V here
        at::Tensor covered = (vals - lse.unsqueeze(1)).exp().sum(-1);  // full-vocabulary mass of the top k0
        if (covered.lt(o.top_p).any().item<bool>()) std::tie(vals, idx) = at::sort(scaled, -1, /*descending=*/true);
      }
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
  if (use_m) {
    at::Tensor drop = vals < vals.narrow(1, 0, 1) + log_min_p;  // vals[:, 0] is the row max
    drop.select(1, 0).fill_(false);
    w = w.masked_fill(drop, 0.0);
  }
  at::Tensor pos = draw(w);  // [R, 1] position among the candidates
  // The chosen candidate's scaled logit is vals at its position (vals = scaled at idx).
  return {idx.gather(1, pos).squeeze(1), vals.gather(1, pos).squeeze(1) - lse};
}

RowSampling RowSampling::Make(const std::vector<SamplingOptions>& rows, int64_t V, at::Device device) {
  RowSampling rs;
  rs.rows = rows;
  const int64_t R = static_cast<int64_t>(rows.size());
  std::vector<float> t(R), p(R), m(R);
  std::vector<int64_t> k(R);
  for (int64_t r = 0; r < R; ++r) {
    const SamplingOptions& o = rows[r];
    if (!(o == rows[0])) rs.uniform = false;
    t[r] = static_cast<float>(o.temperature);
    p[r] = static_cast<float>(o.top_p);
    m[r] = static_cast<float>(o.min_p);
    const bool use_k = o.top_k > 0 && o.top_k < V;
    k[r] = use_k ? o.top_k : 0;
    if (o.temperature == 0.0) {
      rs.any_greedy = true;
      continue;
    }
    if (o.min_p > 0.0) rs.any_min_p = true;
    if (use_k || o.top_p < 1.0) {
      rs.any_cand = true;
      if (use_k)
        rs.max_k = std::max(rs.max_k, o.top_k);
      else
        rs.any_p_only = true;
    } else {
      rs.any_full = true;
    }
  }
  auto fopt = at::TensorOptions().dtype(at::kFloat);
  rs.temperature = at::tensor(t, fopt).to(device);
  rs.top_p = at::tensor(p, fopt).to(device);
  rs.min_p = at::tensor(m, fopt).to(device);
  rs.top_k = at::tensor(k, at::TensorOptions().dtype(at::kLong)).to(device);
  return rs;
}

RowSampling RowSampling::Select(const std::vector<int64_t>& idx, int64_t V, at::Device device) const {
  std::vector<SamplingOptions> sub;
  sub.reserve(idx.size());
  for (int64_t i : idx) sub.push_back(rows[static_cast<size_t>(i)]);
  return Make(sub, V, device);
}

bool RowSamplingIsSyncFree(const RowSampling& rs, int64_t vocab_size) {
  for (const auto& o : rs.rows)
    if (!SamplingIsSyncFree(o, vocab_size)) return false;
  return true;
}

std::pair<at::Tensor, at::Tensor> SampleTokensRows(const at::Tensor& logits_in, const RowSampling& rs, const at::Tensor& uniforms) {
  if (logits_in.dim() != 2 || logits_in.size(0) < 1 || logits_in.size(1) < 1) throw ArgError("logits must have shape [R, V] with R, V >= 1");
  if (static_cast<int64_t>(rs.rows.size()) != logits_in.size(0)) throw ArgError("row sampling options must have one entry per logits row");
  if (rs.uniform) return SampleTokens(logits_in, rs.rows[0], uniforms);
  if (uniforms.dim() != 1 || uniforms.size(0) != logits_in.size(0)) throw ArgError("uniforms must have shape [R]");
  at::NoGradGuard ng;
  at::Tensor logits = logits_in.to(at::kFloat);
  const int64_t V = logits.size(1);
  const at::Device dev = logits.device();
  at::Tensor T = rs.temperature.to(dev);
  at::Tensor greedy = T.eq(0);                                            // [R]
  at::Tensor tdiv = at::where(greedy, at::ones_like(T), T).unsqueeze(1);  // [R, 1]
  // Per row the same operations as SampleTokens: x / T (x / 1 == x), max, exp(x - max), sums.
  at::Tensor scaled = logits / tdiv;
  at::Tensor mx = std::get<0>(scaled.max(-1, /*keepdim=*/true));  // [R, 1]
  at::Tensor e = (scaled - mx).exp_();
  at::Tensor lse = mx.squeeze(1) + e.sum(-1).log_();  // [R]
  at::Tensor logmp = rs.any_min_p ? at::where(rs.min_p.to(dev) > 0, rs.min_p.to(dev).log(), at::full_like(T, -INFINITY)).unsqueeze(1) : at::Tensor();

  at::Tensor tok = at::zeros({logits.size(0)}, at::TensorOptions().dtype(at::kLong).device(dev));
  if (rs.any_full) {
    at::Tensor w = e;
    if (rs.any_min_p) w = w.masked_fill(scaled < mx + logmp, 0.0);
    tok = Draw(w, uniforms).squeeze(1);
  }
  if (rs.any_cand) {
    at::Tensor kk = rs.top_k.to(dev);  // [R] 0 = off
    at::Tensor use_k = kk.gt(0);
    at::Tensor use_p = rs.top_p.to(dev).lt(1.0f);
    at::Tensor cand = use_k | use_p;
    // Candidates: the top K = max(largest k, 1024 if some row uses top-p alone) in descending
    // order; when a top-p-only row's nucleus is not inside them (host check, as SampleTokens
    // does), the whole vocabulary sorted. Trailing candidates of zero mass do not change a draw.
    const int64_t K = rs.any_p_only ? std::max<int64_t>(rs.max_k, std::min<int64_t>(V, 1024)) : rs.max_k;
    at::Tensor vals, idx;
    if (K < V) {
      std::tie(vals, idx) = TopKSorted(scaled, K);
      if (rs.any_p_only) {
        at::Tensor covered = (vals - lse.unsqueeze(1)).exp().sum(-1);  // full-vocabulary mass of the top K
        at::Tensor p_only = use_p & ~use_k & ~greedy;
        if ((covered.lt(rs.top_p.to(dev)) & p_only).any().item<bool>()) vals = idx = at::Tensor();
      }
    }
    if (!vals.defined()) std::tie(vals, idx) = at::sort(scaled, -1, /*descending=*/true);
    at::Tensor col = at::arange(vals.size(1), at::TensorOptions().dtype(at::kLong).device(dev)).unsqueeze(0);  // [1, K]
    at::Tensor beyond_k = use_k.unsqueeze(1) & col.ge(kk.unsqueeze(1));                                        // outside the row's top-k
    at::Tensor w = (vals - vals.narrow(1, 0, 1)).exp().masked_fill(beyond_k, 0.0);
    // top-p normaliser: the top-k mass (summed over exactly k entries, as SampleTokens sums its k
    // candidates: one sum per distinct k) or the full-vocabulary mass for top-p alone.
    at::Tensor norm = (lse.unsqueeze(1) - vals.narrow(1, 0, 1)).exp();  // [R, 1]
    std::vector<int64_t> ks;
    for (const auto& o : rs.rows)
      if (o.temperature != 0.0 && o.top_k > 0 && o.top_k < V && o.top_p < 1.0 && std::find(ks.begin(), ks.end(), o.top_k) == ks.end()) ks.push_back(o.top_k);
    for (int64_t k : ks) norm = at::where(kk.eq(k).unsqueeze(1), w.narrow(1, 0, std::min<int64_t>(k, w.size(1))).sum(-1, true), norm);
    at::Tensor p = w / norm;
    at::Tensor drop = (p.cumsum(-1) - p).ge(rs.top_p.to(dev).unsqueeze(1)) & use_p.unsqueeze(1);
    if (rs.any_min_p) drop = drop | (vals < vals.narrow(1, 0, 1) + logmp);
    drop.select(1, 0).fill_(false);
    w = w.masked_fill(drop, 0.0);
    at::Tensor tok_c = idx.gather(1, Draw(w, uniforms)).squeeze(1);
    tok = at::where(cand, tok_c, tok);
  }
  at::Tensor lp = scaled.gather(1, tok.unsqueeze(1)).squeeze(1) - lse;
  if (rs.any_greedy) {
    at::Tensor tok_g = logits.argmax(-1);
    at::Tensor lp_g = logits.gather(1, tok_g.unsqueeze(1)).squeeze(1) - at::logsumexp(logits, {-1});
    tok = at::where(greedy, tok_g, tok);
    lp = at::where(greedy, lp_g, lp);
  }
  return {tok, lp};
}

}  // namespace pg
