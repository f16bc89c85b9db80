// The one decoder layer (norms, projections with LoRA, q/k norm and RoPE, the attention seam,
// SwiGLU MLP, residuals) and the merged-adapter layer weights. Architecture per transformers
// models/qwen3/modeling_qwen3.py (and the Qwen2 / Llama switches, model/architecture.h) as
// summarised in docs/references.md (own implementation).
#include <cmath>
#include <cstdlib>
#include <tuple>

#include "model/decoder_impl.h"
#include "model/fused_ops.h"

namespace pg {

/// RMSNorm (docs/references.md): fp32 x * rsqrt(mean(x^2) + eps), cast back to x's dtype, times weight.
/// On CUDA: ATen's fused rms_norm (one kernel forward, one backward instead of ~8 and ~12; fp32
/// statistics, the weight product in fp32 and one rounding, so bf16 results can differ from
/// transformers' two roundings by an ulp). PAPERGYM_UNFUSED_RMSNORM=1 keeps the composite on CUDA.
at::Tensor RmsNorm(const at::Tensor& x, const at::Tensor& w, double eps) {
  static const bool unfused = [] {
    const char* e = std::getenv("PAPERGYM_UNFUSED_RMSNORM");
    return e && *e && std::string(e) != "0";
  }();
  if (x.is_cuda() && !unfused && w.scalar_type() == x.scalar_type()) return at::rms_norm(x, {x.size(-1)}, w, eps);
  at::Tensor xf = x.to(at::kFloat);
  at::Tensor var = xf.pow(2).mean(-1, /*keepdim=*/true);
  return w * (xf * at::rsqrt(var + eps)).to(x.scalar_type());
}

std::pair<at::Tensor, at::Tensor> DecoderImpl::AddNorm(const at::Tensor& h, const at::Tensor& d, const at::Tensor& w, double eps, bool fuse) {
  if (!d.defined()) return {h, RmsNorm(h, w, eps)};
  if (fuse) {
    auto f = AddRmsNormFused(h, d, w, eps);
    if (f.first.defined()) return f;
  }
  at::Tensor s = h + d;
  return {s, RmsNorm(s, w, eps)};
}

at::Tensor DecoderImpl::Layer(const DecoderModel& m, int64_t l, const at::Tensor& h, const at::Tensor& cos, const at::Tensor& sin, const LayerLora& lo,
                              const LayerScale& sc, double drop, const KvAttention& att, const DecoderLayerWeights* merged, at::Tensor* pending) {
  const DecoderConfig& c = m.cfg_;
  const DecoderLayerWeights& lw = merged ? *merged : m.layers_[static_cast<size_t>(l)];
  const int64_t B = h.size(0), T = h.size(1);
  const int64_t hd = c.head_dim, nh = c.num_attention_heads, nkv = c.num_key_value_heads;
  const int64_t qd = nh * hd, kvd = nkv * hd, I = c.intermediate_size;
  const double sm_scale = 1.0 / std::sqrt(static_cast<double>(hd));
  auto lora = [&](const at::Tensor& base, const at::Tensor& x, int k) {
    const auto& ab = lo[static_cast<size_t>(k)];
    if (!ab.first.defined()) return base;
    return LoraAdd(base, x, ab.first, ab.second, sc[static_cast<size_t>(k)], drop, m.lora_fp32_);
  };
  // The LoRA branch runs in float32 (LoraAdd); projections sharing an input share one float32
  // copy of it (q/k/v, gate/up), so autograd saves it once instead of once per module.
  auto f32 = [&](const at::Tensor& t, int k0, int k1) {
    bool any = false;
    for (int k = k0; k <= k1; ++k) any = any || lo[static_cast<size_t>(k)].first.defined();
    return (any && m.lora_fp32_ && t.scalar_type() != at::kFloat) ? t.to(at::kFloat) : t;
  };
  // Every member of projections k0..k1 has an adapter, all with one scaling.
  auto all_adapted = [&](int k0, int k1) {
    for (int k = k0; k <= k1; ++k)
      if (!lo[static_cast<size_t>(k)].first.defined() || sc[static_cast<size_t>(k)] != sc[static_cast<size_t>(k0)]) return false;
    return true;
  };
  // Projections sharing an input with an adapter on every member and no dropout: one matmul for
  // their A's and one sum (LoraAddGroup); else LoRA per module on slices of the fused output.
  auto grouped = [&](int k0, int k1) { return drop == 0.0 && all_adapted(k0, k1); };
  // ... and when A / B are in the activations' dtype (float32 models; the model-dtype branch after
  // the per-forward cast), base + LoRA as one node whose matmuls accumulate the LoRA output into
  // the base output (LoraLinearFused): no LoRA output tensor, no separate sums.
  // With dropout (training) the same node draws one mask per member (LoraLinearFused), the masks
  // LoraAdd per module would draw (PAPERGYM_FUSED_LORA_DROPOUT=0 takes the per-module path).
  const bool node_takes_dropout = drop == 0.0 || LoraFusedDropoutEnabled();
  auto fused = [&](int k0, int k1) { return node_takes_dropout && all_adapted(k0, k1) && lo[static_cast<size_t>(k0)].first.scalar_type() == h.scalar_type(); };
  const bool infer = pending != nullptr;
  at::Tensor hs, x;  // the residual stream h (+ *pending) and its RMSNorm
  std::tie(hs, x) = AddNorm(h, infer ? *pending : at::Tensor(), lw.in_norm, c.rms_norm_eps, infer);
  at::Tensor qkv_out;  // [B, T, qd + 2 kvd] where the q / k / v projections come out as one tensor
  std::vector<at::Tensor> qkv;
  if (fused(0, 2)) {
    qkv_out = AddBias(LoraLinearFused(x, lw.qkv, {lo[0], lo[1], lo[2]}, sc[0], drop), lw.qkv_b);
  } else if (grouped(0, 2)) {
    qkv_out = LoraAddGroup(at::linear(x, lw.qkv, lw.qkv_b), x, {lo[0], lo[1], lo[2]}, sc[0], m.lora_fp32_);
  } else {
    qkv_out = at::linear(x, lw.qkv, lw.qkv_b);  // one matmul for q, k, v
    if (lo[0].first.defined() || lo[1].first.defined() || lo[2].first.defined()) {
      qkv = qkv_out.split_with_sizes({qd, kvd, kvd}, -1);
      qkv_out = at::Tensor();
      at::Tensor xl = f32(x, 0, 2);
      for (int k = 0; k < 3; ++k) qkv[static_cast<size_t>(k)] = lora(qkv[static_cast<size_t>(k)], xl, k);
    }
  }
  at::Tensor q, k, v;                // q [B, T, nh, hd], k [B, T, nkv, hd] after norm and RoPE; v [B, nkv, T, hd]
  if (infer && qkv_out.defined()) {  // one kernel for q / k norm, RoPE and (decode step) the cache write
    const bool to_cache = att.kind == KvAttention::Slot && att.cache && T == 1;
    QkvPrepared p = QkNormRopeFused(qkv_out, c.qk_norm ? lw.q_norm : at::Tensor(), c.qk_norm ? lw.k_norm : at::Tensor(), cos, sin, c.rms_norm_eps, nh, nkv, hd,
                                    to_cache ? att.cache->k[static_cast<size_t>(l)] : at::Tensor(),
                                    to_cache ? att.cache->v[static_cast<size_t>(l)] : at::Tensor(), att.slot);
    q = p.q;
    k = p.k;
    if (p.v.defined()) v = p.v.transpose(1, 2);
  }
  if (!q.defined()) {
    if (qkv.empty()) qkv = qkv_out.split_with_sizes({qd, kvd, kvd}, -1);
    q = qkv[0].reshape({B, T, nh, hd});
    k = qkv[1].reshape({B, T, nkv, hd});
    if (c.qk_norm) {  // Qwen3: per-head RMSNorm before RoPE
      q = RmsNorm(q, lw.q_norm, c.rms_norm_eps);
      k = RmsNorm(k, lw.k_norm, c.rms_norm_eps);
    }
    std::tie(q, k) = RopeQK(q, k, cos, sin);  // [B, T, heads, hd]
    v = qkv[2].reshape({B, T, nkv, hd}).transpose(1, 2);
  }
  at::Tensor o = Attend(att, l, q.transpose(1, 2), k.defined() ? k.transpose(1, 2) : k, v, sm_scale);  // [B, T, qd]
  at::Tensor o_out = fused(3, 3) ? AddBias(LoraLinearFused(o, lw.o, {lo[3]}, sc[3], drop), lw.o_b) : lora(at::linear(o, lw.o, lw.o_b), o, 3);
  at::Tensor h2;
  std::tie(h2, x) = AddNorm(hs, o_out, lw.post_norm, c.rms_norm_eps, infer);
  at::Tensor act;
  if (fused(4, 5)) {
    act = SwiGLU(AddBias(LoraLinearFused(x, lw.gate_up, {lo[4], lo[5]}, sc[4], drop), lw.gate_up_b));  // [.., 2I] -> [.., I]
  } else if (grouped(4, 5) || (!lo[4].first.defined() && !lo[5].first.defined())) {
    at::Tensor gu_out = at::linear(x, lw.gate_up, lw.gate_up_b);  // one matmul for gate, up
    if (grouped(4, 5)) gu_out = LoraAddGroup(gu_out, x, {lo[4], lo[5]}, sc[4], m.lora_fp32_);
    act = SwiGLU(gu_out);
  } else {
    auto gu = at::linear(x, lw.gate_up, lw.gate_up_b).split_with_sizes({I, I}, -1);
    at::Tensor xl = f32(x, 4, 5);
    // gate before up, as transformers' act_fn(gate_proj(x)) * up_proj(x) evaluates them: the order
    // in which their dropout masks are drawn (an operator's operands have no evaluation order in C++).
    at::Tensor gate = lora(gu[0], xl, 4);
    at::Tensor up = lora(gu[1], xl, 5);
    act = at::silu(gate) * up;
  }
  at::Tensor down = fused(6, 6) ? AddBias(LoraLinearFused(act, lw.down, {lo[6]}, sc[6], drop), lw.down_b) : lora(at::linear(act, lw.down, lw.down_b), act, 6);
  if (infer) {
    *pending = down;
    return h2;
  }
  return h2 + down;
}

std::vector<DecoderLayerWeights> DecoderImpl::MergedLayers(const DecoderModel& m, const LoraAdapter& ad) {
  const DecoderConfig& c = m.cfg_;
  const int64_t qd = c.num_attention_heads * c.head_dim, kvd = c.num_key_value_heads * c.head_dim, I = c.intermediate_size;
  std::vector<DecoderLayerWeights> out;
  out.reserve(m.layers_.size());
  for (size_t l = 0; l < m.layers_.size(); ++l) {
    DecoderLayerWeights lw = m.layers_[l];
    // (matrix, first module, row offsets of its members)
    auto merge = [&](at::Tensor& w, int k0, std::initializer_list<int64_t> offs) {
      at::Tensor wf;
      int k = k0;
      for (int64_t off : offs) {
        auto it = ad.weights.find(lw.stem[k]);
        if (it != ad.weights.end()) {
          if (!wf.defined()) wf = w.to(at::kFloat, /*non_blocking=*/false, /*copy=*/true);
          const at::Tensor& a = it->second.first;
          const at::Tensor& b = it->second.second;
          wf.narrow(0, off, b.size(0)).addmm_(b.detach().to(at::kFloat), a.detach().to(at::kFloat), 1.0, ad.ScalingOf(lw.stem[k]));
        }
        ++k;
      }
      if (wf.defined()) w = wf.to(w.scalar_type());
    };
    merge(lw.qkv, 0, {0, qd, qd + kvd});
    merge(lw.o, 3, {0});
    merge(lw.gate_up, 4, {0, I});
    merge(lw.down, 6, {0});
    out.push_back(std::move(lw));
  }
  return out;
}

}  // namespace pg
