#include "lora/lora.h"

#include <ATen/CPUGeneratorImpl.h>
#include <torch/csrc/autograd/custom_function.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "core/errors.h"

namespace pg {

double LoraConfig::Scaling() const {
  return use_rslora ? alpha / std::sqrt(static_cast<double>(r)) : alpha / static_cast<double>(r);
}

std::vector<std::string> AllProjectionNames() {
  std::vector<std::string> out;
  for (const LoraProjection& p : kProjections) out.push_back(p.name);
  return out;
}

bool IsLoraTarget(const std::string& m) {
  for (const LoraProjection& p : kProjections)
    if (m == p.name) return true;
  return false;
}

const char* LoraParent(const std::string& m) {
  for (const LoraProjection& p : kProjections)
    if (m == p.name) return p.parent;
  return "self_attn";
}

std::pair<int64_t, int64_t> LoraModuleDims(const LoraModelDims& c, const std::string& m) {
  const int64_t H = c.hidden_size, q = c.q_size, kv = c.kv_size;
  if (m == "q_proj") return {H, q};
  if (m == "k_proj" || m == "v_proj") return {H, kv};
  if (m == "o_proj") return {q, H};
  if (m == "gate_proj" || m == "up_proj") return {H, c.intermediate_size};
  if (m == "down_proj") return {c.intermediate_size, H};
  throw ArgError("unknown LoRA target module '" + m + "'");
}

void ValidateLoraConfig(const LoraConfig& cfg) {
  if (cfg.r < 1) throw ArgError("lora.r must be a positive integer");
  if (!(cfg.alpha > 0)) throw ArgError("lora.alpha must be > 0");
  if (!(cfg.dropout >= 0 && cfg.dropout < 1)) throw ArgError("lora.dropout must be in [0, 1)");
  if (cfg.target_modules.empty()) throw ArgError("lora.targetModules must not be empty");
  std::string allowed;
  for (const LoraProjection& p : kProjections) allowed += (allowed.empty() ? "" : ", ") + std::string(p.name);
  for (const auto& t : cfg.target_modules)
    if (!IsLoraTarget(t)) throw ArgError("lora.targetModules: unknown module '" + t + "' (allowed: " + allowed + ")");
}

LoraAdapter MakeLoraAdapter(const LoraModelDims& mc, const LoraConfig& cfg, at::Device device) {
  ValidateLoraConfig(cfg);
  LoraAdapter ad;
  ad.config = cfg;
  ad.num_layers = mc.num_layers;
  std::map<std::string, std::pair<int64_t, int64_t>> dims;
  for (int64_t l = 0; l < mc.num_layers; ++l)
    for (const auto& t : cfg.target_modules) dims["model.layers." + std::to_string(l) + "." + LoraParent(t) + "." + t] = LoraModuleDims(mc, t);
  auto gen = at::make_generator<at::CPUGeneratorImpl>(cfg.seed);
  for (const auto& kv : dims) {
    const int64_t in = kv.second.first, out = kv.second.second;
    const double bound = 1.0 / std::sqrt(static_cast<double>(in));  // kaiming_uniform(a=sqrt(5))
    at::Tensor a = at::empty({cfg.r, in}, at::kFloat);
    a.uniform_(-bound, bound, gen);
    at::Tensor b = at::zeros({out, cfg.r}, at::kFloat);
    a = a.to(device).set_requires_grad(true);
    b = b.to(device).set_requires_grad(true);
    ad.weights[kv.first] = {a, b};
  }
  return ad;
}

namespace {
thread_local bool t_force_dropout = false;
thread_local bool t_inference_cache = false;
thread_local bool t_merge = false;

// The grad-free group cache (LoraInferenceCacheScope): per group of members, the concatenated A
// and the block-diagonal B in the branch dtype. An entry holds its source tensors, so their
// storage (and TensorImpl addresses) cannot be reused while it is cached; it is valid while every
// source has the version it was built from (an entry that no longer matches stays unused until
// the call's end empties the cache).
struct GroupCacheEntry {
  std::vector<at::Tensor> src;  // A_0..A_{n-1}, B_0..B_{n-1}
  std::vector<int64_t> versions;
  at::ScalarType dt;
  at::Tensor a_cat, b_bd;
};
// Per thread: a call's CUDA graphs read the cached tensors without holding them, so they must live
// until that call's outermost scope ends, and another thread's concurrent generate (another model)
// must neither clear them at its end nor drop them as stale (its cached storage would return to the
// allocator and be reused under the graph's replay). Each generate runs on one worker thread.
thread_local std::vector<GroupCacheEntry> g_group_cache;

bool Matches(const GroupCacheEntry& e, at::ArrayRef<std::pair<at::Tensor, at::Tensor>> ab, at::ScalarType dt) {
  const size_t n = ab.size();
  if (e.dt != dt || e.src.size() != 2 * n) return false;
  for (size_t i = 0; i < n; ++i) {
    if (!e.src[i].is_same(ab[i].first) || !e.src[n + i].is_same(ab[i].second)) return false;
    if (e.versions[i] != ab[i].first._version() || e.versions[n + i] != ab[i].second._version()) return false;
  }
  return true;
}

// (concatenated A, block-diagonal B) of the group, from this thread's cache or built into it.
std::pair<at::Tensor, at::Tensor> CachedGroup(at::ArrayRef<std::pair<at::Tensor, at::Tensor>> ab, at::ScalarType dt) {
  for (const auto& e : g_group_cache)
    if (Matches(e, ab, dt)) return {e.a_cat, e.b_bd};
  GroupCacheEntry e;
  e.dt = dt;
  std::vector<at::Tensor> as;
  int64_t sum_r = 0, sum_out = 0;
  for (const auto& p : ab) {
    as.push_back(p.first.detach());
    sum_r += p.first.size(0);
    sum_out += p.second.size(0);
  }
  for (const auto& p : ab) e.src.push_back(p.first);
  for (const auto& p : ab) e.src.push_back(p.second);
  for (const auto& t : e.src) e.versions.push_back(t._version());
  e.a_cat = at::cat(as, 0).to(dt);
  e.b_bd = at::zeros({sum_out, sum_r}, ab[0].second.options().dtype(dt).requires_grad(false));
  int64_t ro = 0, co = 0;
  for (const auto& p : ab) {
    const int64_t out = p.second.size(0), r = p.second.size(1);
    e.b_bd.narrow(0, ro, out).narrow(1, co, r).copy_(p.second.detach());
    ro += out;
    co += r;
  }
  g_group_cache.push_back(std::move(e));
  return {g_group_cache.back().a_cat, g_group_cache.back().b_bd};
}
// The per-call cache of values derived from whole adapters (CachedAdapterDerived: the cast,
// merged weights), per thread as the group cache.
struct DerivedCacheEntry {
  const LoraAdapter* ad;
  const void* owner;
  int64_t tag;
  std::vector<at::Tensor> src;  // every A, B in map order (held: addresses stay unique)
  std::vector<int64_t> versions;
  std::shared_ptr<const void> value;
};
thread_local std::vector<DerivedCacheEntry> g_derived_cache;

bool CacheSwitchOn() {
  const char* e = std::getenv("PAPERGYM_LORA_CACHE");
  return !(e && *e && std::string(e) == "0");
}
}  // namespace

bool LoraInferenceCacheActive() {
  return t_inference_cache && !at::GradMode::is_enabled() && CacheSwitchOn();
}

std::shared_ptr<const void> CachedAdapterDerived(const LoraAdapter& ad, const void* owner, int64_t tag,
                                                 const std::function<std::shared_ptr<const void>()>& make) {
  std::vector<at::Tensor> src;
  for (const auto& kv : ad.weights) {
    src.push_back(kv.second.first);
    src.push_back(kv.second.second);
  }
  for (const auto& e : g_derived_cache) {
    if (e.ad != &ad || e.owner != owner || e.tag != tag || e.src.size() != src.size()) continue;
    bool same = true;
    for (size_t i = 0; i < src.size() && same; ++i) same = e.src[i].is_same(src[i]) && e.versions[i] == src[i]._version();
    if (same) return e.value;
  }
  DerivedCacheEntry e;
  e.ad = &ad;
  e.owner = owner;
  e.tag = tag;
  e.src = std::move(src);
  for (const auto& t : e.src) e.versions.push_back(t._version());
  e.value = make();
  g_derived_cache.push_back(e);
  return e.value;
}

std::shared_ptr<const LoraAdapter> CachedAdapterCast(const LoraAdapter& ad, at::ScalarType dtype, const std::function<LoraAdapter()>& cast) {
  return std::static_pointer_cast<const LoraAdapter>(CachedAdapterDerived(
      ad, nullptr, static_cast<int64_t>(dtype), [&] { return std::static_pointer_cast<const void>(std::make_shared<const LoraAdapter>(cast())); }));
}

LoraMergeScope::LoraMergeScope(bool on) : prev_(t_merge) {
  t_merge = on;
}
LoraMergeScope::~LoraMergeScope() {
  t_merge = prev_;
}

bool LoraMergeActive() {
  return t_merge && t_inference_cache && !at::GradMode::is_enabled();
}

LoraForceDropoutScope::LoraForceDropoutScope() : prev_(t_force_dropout) {
  t_force_dropout = true;
}
LoraForceDropoutScope::~LoraForceDropoutScope() {
  t_force_dropout = prev_;
}
bool LoraDropoutActive() {
  return at::GradMode::is_enabled() || t_force_dropout;
}

bool LoraFusedDropoutEnabled() {
  const char* e = std::getenv("PAPERGYM_FUSED_LORA_DROPOUT");
  return !(e && std::strcmp(e, "0") == 0);
}

LoraInferenceCacheScope::LoraInferenceCacheScope() : prev_(t_inference_cache) {
  t_inference_cache = true;
}
LoraInferenceCacheScope::~LoraInferenceCacheScope() {
  t_inference_cache = prev_;
  if (!prev_) {  // this thread's outermost scope ends: hold no device memory between calls
    g_group_cache.clear();
    g_derived_cache.clear();
  }
}

at::Tensor LoraAdd(const at::Tensor& base, const at::Tensor& x, const at::Tensor& a, const at::Tensor& b, double scaling, double dropout, bool fp32_branch) {
  if (!a.defined()) return base;
  if (!fp32_branch && x.scalar_type() != at::kFloat) {
    at::Tensor xd = x;
    if (dropout > 0 && LoraDropoutActive()) xd = std::get<0>(at::native_dropout(xd, dropout, /*train=*/true));
    const auto dt = x.scalar_type();
    at::Tensor lora = at::linear(at::linear(xd, a.to(dt)), b.to(dt));
    // base + scaling·lora in one kernel (computed in float32, rounded once to the result dtype).
    return base.scalar_type() == dt ? at::add(base, lora, scaling) : at::add(base, lora.to(at::kFloat), scaling).to(base.scalar_type());
  }
  at::Tensor xf = x.scalar_type() == at::kFloat ? x : x.to(at::kFloat);
  if (dropout > 0 && LoraDropoutActive()) xf = std::get<0>(at::native_dropout(xf, dropout, /*train=*/true));
  at::Tensor lora = at::linear(at::linear(xf, a), b);
  // float32 sum (a low-precision base is promoted inside the kernel), cast back to base's dtype.
  at::Tensor sum = at::add(base, lora, scaling);
  return base.scalar_type() == at::kFloat ? sum : sum.to(base.scalar_type());
}

at::Tensor LoraAddGroup(const at::Tensor& base, const at::Tensor& x, at::ArrayRef<std::pair<at::Tensor, at::Tensor>> ab, double scaling, bool fp32_branch) {
  const auto dt = (!fp32_branch && x.scalar_type() != at::kFloat) ? x.scalar_type() : at::kFloat;
  // Decode-sized inputs only (rows of x ≤ 512): for a prefill the block-diagonal GEMM's extra
  // zero blocks would cost more than the launches it saves.
  if (LoraInferenceCacheActive() && ab.size() > 1 && x.numel() / std::max<int64_t>(1, x.size(-1)) <= 512) {
    auto [a_cat, b_bd] = CachedGroup(ab, dt);
    const int64_t in = x.size(-1), out = base.size(-1);
    at::Tensor x2 = (x.scalar_type() == dt ? x : x.to(dt)).reshape({-1, in});
    at::Tensor xa = at::mm(x2, a_cat.t());                                                                    // [N, Σr]
    at::Tensor sum = at::addmm(base.reshape({-1, out}).to(dt), xa, b_bd.t(), /*beta=*/1, /*alpha=*/scaling);  // [N, Σout]
    sum = sum.view(base.sizes());
    return sum.scalar_type() == base.scalar_type() ? sum : sum.to(base.scalar_type());
  }
  std::vector<at::Tensor> as;
  for (const auto& p : ab) as.push_back(p.first);
  at::Tensor a = at::cat(as, 0);  // [Σr, in]: one matmul for every member's A
  if (a.scalar_type() != dt) a = a.to(dt);
  at::Tensor xa = at::matmul(x.scalar_type() == dt ? x : x.to(dt), a.t());  // [..., Σr]
  std::vector<at::Tensor> ds;
  int64_t off = 0;
  for (const auto& p : ab) {
    const int64_t r = p.first.size(0);
    ds.push_back(at::matmul(xa.narrow(-1, off, r), (p.second.scalar_type() == dt ? p.second : p.second.to(dt)).t()));
    off += r;
  }
  at::Tensor sum = at::add(base, at::cat(ds, -1), scaling);
  return sum.scalar_type() == base.scalar_type() ? sum : sum.to(base.scalar_type());
}

at::Tensor LoraLinear(const at::Tensor& x, const at::Tensor& w, const at::Tensor& a, const at::Tensor& b, double scaling, double dropout) {
  return LoraAdd(at::linear(x, w), x, a, b, scaling, dropout);
}

namespace {

/// Fused base + LoRA linear over projections that share x (see LoraLinearFused in lora.h).
/// Arguments: x [..., in], W [Σ out, in] (frozen), the members' A [r_k, in] and B [out_k, r_k]
/// (x's dtype), scaling, dropout p. Saves xa = x·Aᵀ [N, Σ r], W and the A / B, and x (p = 0) or
/// each member's dropped input and mask (p > 0), all as saved variables; never the LoRA outputs.
struct LoraLinearFn : public torch::autograd::Function<LoraLinearFn> {
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& x, const at::Tensor& w, at::TensorList as, at::TensorList bs,
                            double scaling, double dropout) {
    const int64_t in = x.size(-1);
    at::Tensor x2 = x.reshape({-1, in});
    at::Tensor a = as.size() == 1 ? as[0] : at::cat(as, 0);  // [Σr, in]
    at::Tensor out = at::mm(x2, w.t());                      // [N, Σout]
    at::Tensor xa;                                           // [N, Σr]
    std::vector<at::Tensor> xds, masks;
    if (dropout > 0) {
      // peft: one dropout module per projection, so one mask per member, drawn in member order
      // with native_dropout as LoraAdd draws them: the same masks as LoraAdd per module from the
      // same generator state.
      std::vector<at::Tensor> xas;
      for (size_t k = 0; k < as.size(); ++k) {
        auto [xd, mk] = at::native_dropout(x2, dropout, /*train=*/true);
        xas.push_back(at::mm(xd, as[k].t()));
        xds.push_back(xd);
        masks.push_back(mk);
      }
      xa = xas.size() == 1 ? xas[0] : at::cat(xas, 1);
    } else {
      xa = at::mm(x2, a.t());
    }
    int64_t off = 0, roff = 0;
    for (size_t k = 0; k < bs.size(); ++k) {
      const int64_t ok = bs[k].size(0), rk = bs[k].size(1);
      // out_k += scaling · xa_k · B_kᵀ: the matmul accumulates into the base output (beta 1).
      out.narrow(1, off, ok).addmm_(xa.narrow(1, roff, rk), bs[k].t(), /*beta=*/1, /*alpha=*/scaling);
      off += ok;
      roff += rk;
    }
    // The dropped inputs and masks are saved variables (after x, xa, w, a), so autograd frees each
    // node's as soon as its backward has run and checks their versions; saved_data would hold them
    // until the whole graph is freed.
    std::vector<at::Tensor> saved{dropout > 0 ? at::Tensor() : x2, xa, w, a};
    saved.insert(saved.end(), xds.begin(), xds.end());
    saved.insert(saved.end(), masks.begin(), masks.end());
    ctx->save_for_backward(saved);
    ctx->saved_data["bs"] = bs.vec();
    ctx->saved_data["scaling"] = scaling;
    ctx->saved_data["dropout"] = dropout;
    ctx->saved_data["xshape"] = x.sizes().vec();
    auto oshape = x.sizes().vec();
    oshape.back() = off;
    return out.view(oshape);
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx, torch::autograd::variable_list go) {
    auto sv = ctx->get_saved_variables();
    const at::Tensor &x2 = sv[0], &xa = sv[1], &w = sv[2], &a = sv[3];
    auto bs = ctx->saved_data["bs"].toTensorVector();
    const double s = ctx->saved_data["scaling"].toDouble();
    const double p = ctx->saved_data["dropout"].toDouble();
    const size_t K = bs.size();
    // p > 0: member k's dropped input at sv[4 + k], its mask at sv[4 + K + k]
    std::vector<at::Tensor> xds, masks;
    if (p > 0) {
      xds.assign(sv.begin() + 4, sv.begin() + 4 + static_cast<std::ptrdiff_t>(K));
      masks.assign(sv.begin() + 4 + static_cast<std::ptrdiff_t>(K), sv.begin() + 4 + 2 * static_cast<std::ptrdiff_t>(K));
    }
    torch::autograd::variable_list res(2 + 2 * K + 2);
    if (!go[0].defined()) return res;  // output unused: no gradient for any input
    at::Tensor g = go[0].reshape({-1, w.size(0)});
    // gxa_k = g_k · B_k (unscaled; the scaling goes into the products below)
    std::vector<at::Tensor> gxa_parts;
    int64_t off = 0;
    for (size_t k = 0; k < K; ++k) {
      gxa_parts.push_back(at::mm(g.narrow(1, off, bs[k].size(0)), bs[k]));
      off += bs[k].size(0);
    }
    at::Tensor gxa = K == 1 ? gxa_parts[0] : at::cat(gxa_parts, 1);  // [N, Σr]
    if (ctx->needs_input_grad(0)) {
      at::Tensor gx = at::mm(g, w);  // base input gradient [N, in]
      if (p > 0) {
        // + scaling · dropout_k'(gxa_k · A_k): each member through its own mask (scale 1 / (1 − p))
        int64_t roff = 0;
        for (size_t k = 0; k < K; ++k) {
          const int64_t rk = bs[k].size(1);
          gx.add_(at::native_dropout_backward(at::mm(gxa.narrow(1, roff, rk), a.narrow(0, roff, rk)), masks[k], 1.0 / (1.0 - p)), s);
          roff += rk;
        }
      } else {
        gx.addmm_(gxa, a, 1, s);  // + scaling · gxa · A, accumulated in the matmul
      }
      res[0] = gx.view(ctx->saved_data["xshape"].toIntVector());
    }
    // dA_k = scaling · gxa_kᵀ · x̃_k (x̃_k = x, or member k's dropped input);  dB_k = scaling · g_kᵀ · xa_k
    bool need_a = false, need_b = false;
    for (size_t k = 0; k < K; ++k) {
      need_a = need_a || ctx->needs_input_grad(2 + k);
      need_b = need_b || ctx->needs_input_grad(2 + K + k);
    }
    at::Tensor ga = need_a && p == 0 ? at::mm(gxa.t(), x2).mul_(s) : at::Tensor();
    at::Tensor xa_s = need_b ? xa * s : at::Tensor();
    int64_t roff = 0;
    off = 0;
    for (size_t k = 0; k < K; ++k) {
      const int64_t ok = bs[k].size(0), rk = bs[k].size(1);
      if (need_a && ctx->needs_input_grad(2 + k)) res[2 + k] = p > 0 ? at::mm(gxa.narrow(1, roff, rk).t(), xds[k]).mul_(s) : ga.narrow(0, roff, rk);
      if (need_b && ctx->needs_input_grad(2 + K + k)) res[2 + K + k] = at::mm(g.narrow(1, off, ok).t(), xa_s.narrow(1, roff, rk));
      off += ok;
      roff += rk;
    }
    return res;
  }
};

}  // namespace

at::Tensor LoraLinearFused(const at::Tensor& x, const at::Tensor& w, at::ArrayRef<std::pair<at::Tensor, at::Tensor>> ab, double scaling, double dropout) {
  if (!(dropout >= 0 && dropout < 1)) throw ArgError("LoraLinearFused: dropout must be in [0, 1)");
  std::vector<at::Tensor> as, bs;
  for (const auto& p : ab) {
    as.push_back(p.first);
    bs.push_back(p.second);
  }
  return LoraLinearFn::apply(x, w.detach(), at::TensorList(as), at::TensorList(bs), scaling, dropout);
}

}  // namespace pg
