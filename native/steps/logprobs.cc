#include <ATen/ATen.h>

#include <cstdlib>
#include <cstring>
#include <memory>

#include "cuda/kernels.h"
#include "generate/cuda_graph.h"
#include "loss/common.h"
#include "steps/steps.h"

namespace pg {
namespace steps {

namespace {
/// The stream of a scoring call (SequenceLogprobs, PrefixLogprobs) on CUDA. These calls may run
/// while a generate decodes on the same model (the local judge beside the rollout: the model's
/// read-only calls share its lock), so they run on their thread's own non-blocking stream, by
/// default a high-priority one (their kernels dispatched ahead of the decode's when both wait).
/// PAPERGYM_SCORING_STREAM (read once): "high" (default), "side" (normal priority) or "default"
/// (the thread's current stream, the legacy default).
std::unique_ptr<SideStreamScope> ScoringStream(const at::Device& dev) {
  static const int mode = [] {
    const char* e = std::getenv("PAPERGYM_SCORING_STREAM");
    if (e && std::strcmp(e, "default") == 0) return 0;
    if (e && std::strcmp(e, "side") == 0) return 1;
    return 2;
  }();
  if (!dev.is_cuda() || mode == 0) return nullptr;
  return std::make_unique<SideStreamScope>(dev, /*high_priority=*/mode == 2);
}

/// Whether PrefixLogprobs takes the shared-prefix attention (the suffixes read the one prefix's
/// K/V in place) rather than copying the prefix's K/V into every suffix row: where its softmax
/// sides run on flash kernels (DecoderModel::SharedPrefixFlash: CUDA bf16 / fp16 and the CPU; a
/// float32 CUDA model would take float32 matmuls, which measured slower than the copies on an
/// H200) while the fused paths' switch is on (native().setFusedKernels /
/// PAPERGYM_NO_FUSED_KERNELS: the A/B, and the CPU and GPU tests' comparison of the two paths).
/// PAPERGYM_JUDGE_ATTENTION=copy (read once) forces the copy path.
bool SharedPrefixPath(const DecoderModel& m) {
  static const bool copy = [] {
    const char* e = std::getenv("PAPERGYM_JUDGE_ATTENTION");
    return e && std::strcmp(e, "copy") == 0;
  }();
  return !copy && CudaKernelsSwitchedOn() && DecoderModel::SharedPrefixFlash(m.device(), m.dtype(), m.config().head_dim);
}
}  // namespace

at::Tensor SequenceLogprobs(DecoderModel& m, const at::Tensor& ids, const at::Tensor& am, const at::Tensor& cm, double temp, const AdapterSel& sel,
                            int64_t chunk) {
  at::NoGradGuard ng;
  auto dev = m.device();
  auto stream = ScoringStream(dev);
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

at::Tensor PrefixLogprobs(DecoderModel& m, const at::Tensor& pre, const at::Tensor& suf, const at::Tensor& len, const at::Tensor& cand, const AdapterSel& sel) {
  at::NoGradGuard ng;
  auto dev = m.device();
  auto stream = ScoringStream(dev);
  const int64_t P0 = pre.size(1), n = suf.size(0), S0 = suf.size(1);
  // Bucketed shapes (steps.h): the prefix left-padded to a multiple of 64 (masked slots, never
  // attended; positions from the mask count real tokens only), the suffixes right-padded to a
  // multiple of 16 (beyond every row's length, so never attended or read).
  // Not beyond the model's context (the forward checks the padded length): unpadded there.
  int64_t P = (P0 + 63) / 64 * 64, S = (S0 + 15) / 16 * 16;
  const int64_t ctx = m.config().max_position_embeddings;
  if (ctx > 0 && P + S > ctx) P = P0, S = S0;
  const int64_t pad = P - P0;
  const int64_t cap = P + S;
  auto lopt = at::TensorOptions().dtype(at::kLong);
  at::Tensor pre_ids = at::zeros({1, P}, lopt), pre_keep = at::zeros({1, P}, lopt);
  pre_ids.narrow(1, pad, P0).copy_(pre);
  pre_keep.narrow(1, pad, P0).fill_(1);
  at::Tensor suf_ids = at::zeros({n, S}, lopt);
  suf_ids.narrow(1, 0, S0).copy_(suf);
  at::Tensor lens = len.to(dev);
  const bool shared = SharedPrefixPath(m);
  // 1) the shared prefix, once (the copy path leaves room for the suffixes in its cache)
  KVCache one = m.NewCache(1, shared ? P : cap);
  m.Forward(pre_ids, pre_keep, std::nullopt, sel, &one);
  at::Tensor h;  // [n, S, H]
  if (shared) {
    // 2) the suffixes attend to its K/V in place (never copied per row) and to their own real
    // tokens (DecoderModel::ForwardSharedPrefix)
    h = m.ForwardSharedPrefix(suf_ids.to(dev), lens, one, pad, sel);
  } else {
    // 2) its KV repeated for every suffix row
    KVCache cache = m.NewCache(n, cap);
    for (size_t l = 0; l < cache.k.size(); ++l) {
      cache.k[l].narrow(2, 0, P).copy_(one.k[l].narrow(2, 0, P).expand({n, -1, -1, -1}));
      cache.v[l].narrow(2, 0, P).copy_(one.v[l].narrow(2, 0, P).expand({n, -1, -1, -1}));
    }
    cache.len = P;
    one = KVCache();
    // 3) the suffixes, right-padded, attending to the prefix and their own real tokens
    at::Tensor mask = at::ones({n, cap}, at::TensorOptions().dtype(at::kLong).device(dev));
    mask.narrow(1, 0, pad).zero_();
    mask.narrow(1, P, S).copy_(at::arange(S, mask.options()).unsqueeze(0).lt(lens.unsqueeze(1)).to(at::kLong));
    h = m.Forward(suf_ids.to(dev), mask, std::nullopt, sel, &cache);
  }
  at::Tensor hs = h.gather(1, (lens - 1).view({n, 1, 1}).expand({n, 1, h.size(2)})).squeeze(1);  // [n, H]
  // fp32 logits with fp32 accumulation, as SequenceLogprobs computes them
  at::Tensor lp = at::log_softmax(loss::ChunkLogits(hs, loss::PrepareWeight(m.LmHeadWeight(), hs)), -1);
  return lp.index_select(1, cand.to(dev)).to(at::kCPU, at::kFloat).contiguous();
}

}  // namespace steps
}  // namespace pg
