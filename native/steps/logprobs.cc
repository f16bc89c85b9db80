#include <ATen/ATen.h>

#include "loss/common.h"
#include "steps/steps.h"

namespace pg {
namespace steps {

at::Tensor SequenceLogprobs(Qwen3Model& m, const at::Tensor& ids, const at::Tensor& am, const at::Tensor& cm, double temp,
                            const AdapterSel& sel, int64_t chunk) {
  at::NoGradGuard ng;
  auto dev = m.device();
  at::Tensor id = ids.to(dev), mk = am.to(dev), c = cm.to(dev);
  const int64_t B = id.size(0), L = id.size(1);
  at::Tensor h = m.Forward(id, mk, std::nullopt, sel);
  const int64_t H = h.size(-1);
  // Flat row indices (into [B * (L-1)] of the shifted view) of the positions whose token is scored.
  at::Tensor idx = c.narrow(1, 1, L - 1).reshape({-1}).ne(0).nonzero().squeeze(1);
  at::Tensor hs = h.narrow(1, 0, L - 1).reshape({-1, H}).index_select(0, idx);
  at::Tensor tk = id.narrow(1, 1, L - 1).reshape({-1}).index_select(0, idx);
  at::Tensor lp = loss::SelectedLogprobs(hs, m.LmHeadWeight(), tk, temp, chunk);
  at::Tensor out = at::zeros({B, L}, lp.options());
  at::Tensor flat = at::zeros({B * (L - 1)}, lp.options()).index_copy(0, idx, lp).reshape({B, L - 1});
  out.narrow(1, 1, L - 1).copy_(flat);
  return out.to(at::kCPU);
}

at::Tensor PrefixLogprobs(Qwen3Model& m, const at::Tensor& pre, const at::Tensor& suf, const at::Tensor& len, const at::Tensor& cand,
                          const AdapterSel& sel) {
  at::NoGradGuard ng;
  auto dev = m.device();
  const int64_t P = pre.size(1), n = suf.size(0), S = suf.size(1);
  const int64_t cap = P + S;
  // 1) the shared prefix, once
  KVCache one = m.NewCache(1, cap);
  m.Forward(pre.to(dev), at::ones({1, P}, at::TensorOptions().dtype(at::kLong).device(dev)), std::nullopt, sel, &one);
  // 2) its KV repeated for every suffix row
  KVCache cache = m.NewCache(n, cap);
  for (size_t l = 0; l < cache.k.size(); ++l) {
    cache.k[l].narrow(2, 0, P).copy_(one.k[l].narrow(2, 0, P).expand({n, -1, -1, -1}));
    cache.v[l].narrow(2, 0, P).copy_(one.v[l].narrow(2, 0, P).expand({n, -1, -1, -1}));
  }
  cache.len = P;
  one = KVCache();
  // 3) the suffixes, right-padded, attending to the prefix and their own real tokens
  at::Tensor lens = len.to(dev);
  at::Tensor mask = at::ones({n, cap}, at::TensorOptions().dtype(at::kLong).device(dev));
  mask.narrow(1, P, S).copy_(at::arange(S, mask.options()).unsqueeze(0).lt(lens.unsqueeze(1)).to(at::kLong));
  at::Tensor h = m.Forward(suf.to(dev), mask, std::nullopt, sel, &cache);                                // [n, S, H]
  at::Tensor hs = h.gather(1, (lens - 1).view({n, 1, 1}).expand({n, 1, h.size(2)})).squeeze(1);  // [n, H]
  // fp32 logits with fp32 accumulation, as SequenceLogprobs computes them
  at::Tensor lp = at::log_softmax(loss::ChunkLogits(hs, loss::PrepareWeight(m.LmHeadWeight(), hs)), -1);
  return lp.index_select(1, cand.to(dev)).to(at::kCPU, at::kFloat).contiguous();
}

}  // namespace steps
}  // namespace pg
