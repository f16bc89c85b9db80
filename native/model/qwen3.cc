// Qwen3 decoder: checkpoint loading and the forward pass. Architecture per transformers
// models/qwen3/modeling_qwen3.py as summarised in docs/references.md (own implementation).
#include "model/qwen3.h"

#include <ATen/Context.h>
#include <torch/csrc/autograd/autograd.h>
#include <torch/csrc/autograd/custom_function.h>

#include <array>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <algorithm>
#include <set>

#include "core/dtype.h"
#include "core/errors.h"
#include "io/finite.h"
#include "io/peft_adapter.h"
#include "io/safetensors.h"
#include "lora/lora.h"
#include "model/config.h"
#include "model/fused_ops.h"

namespace pg {

namespace {

/// CachedAdapterDerived tag of a model's merged layer weights (owner: the model).
constexpr int64_t kMergedWeightsTag = -1;

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

}  // namespace

/// Private helpers with access to Qwen3Model internals.
class Qwen3Impl {
 public:
  static void CheckAlive(const Qwen3Model& m) {
    if (m.disposed_) throw DisposedError("model was disposed");
  }
  static const at::Tensor& W(const Qwen3Model& m, const std::string& name) {
    auto it = m.w_.find(name);
    if (it == m.w_.end()) throw InputError("internal: missing weight " + name);
    return it->second;
  }
  static const LoraAdapter* Resolve(const Qwen3Model& m, const AdapterSel& sel) {
    switch (sel.kind) {
      case AdapterSel::None: return nullptr;
      case AdapterSel::Active: return (m.adapter_enabled_ && m.active_) ? &*m.active_ : nullptr;
      case AdapterSel::Snapshot: {
        auto it = m.snapshots_.find(sel.name);
        if (it == m.snapshots_.end()) throw ArgError("no adapter snapshot named '" + sel.name + "'");
        return &it->second;
      }
    }
    return nullptr;
  }

  /// LoRA (A, B) of the seven projections of layer `l` (q, k, v, o, gate, up, down); undefined
  /// tensors where the adapter does not target a module (or no adapter).
  using LayerLora = std::array<std::pair<at::Tensor, at::Tensor>, 7>;
  /// Per-projection LoRA scaling (alpha / r of that module: peft rank_pattern / alpha_pattern).
  using LayerScale = std::array<double, 7>;
  static LayerLora LoraOf(const Qwen3Model& m, int64_t l, const LoraAdapter* ad, LayerScale* sc = nullptr) {
    LayerLora out;
    if (sc) sc->fill(0.0);
    if (!ad) return out;
    const auto& lw = m.layers_[static_cast<size_t>(l)];
    for (int k = 0; k < 7; ++k) {
      auto it = ad->weights.find(lw.stem[k]);
      if (it != ad->weights.end()) {
        out[static_cast<size_t>(k)] = it->second;
        if (sc) (*sc)[static_cast<size_t>(k)] = ad->ScalingOf(lw.stem[k]);
      }
    }
    return out;
  }

  /// RoPE tables for position ids `pos` [...] (int64): cos, sin [..., head_dim] in the model dtype,
  /// as transformers' rotary embedding: freqs = pos * inv_freq in float32, emb = cat(freqs, freqs),
  /// cos / sin times the attention scaling (YaRN; 1 otherwise), then cast.
  static std::pair<at::Tensor, at::Tensor> RopeTables(const Qwen3Model& m, const at::Tensor& pos) {
    at::Tensor freqs = pos.to(at::kFloat).unsqueeze(-1) * m.rope_inv_freq_;
    at::Tensor emb = at::cat({freqs, freqs}, -1);
    at::Tensor cos = emb.cos(), sin = emb.sin();
    if (m.rope_scale_ != 1.0) {
      cos = cos * m.rope_scale_;
      sin = sin * m.rope_scale_;
    }
    return {cos.to(m.dtype_), sin.to(m.dtype_)};
  }

  /// x + b where the bias is defined (architectures with attention / MLP biases).
  static at::Tensor AddBias(const at::Tensor& x, const at::Tensor& b) { return b.defined() ? x + b : x; }

  /// The seam between the one decoder layer and the three ways it runs (training / scoring
  /// forward, the dynamic decode over a growing cache, the static-shape CUDA-graph decode): where
  /// the layer's new keys / values go and which keys its queries attend to. Everything else in the
  /// layer (norms, projections, LoRA, RoPE, MLP, residuals, the casts between them) is the same
  /// code on every path, so bf16 results round at the same points.
  struct KvAttention {
    enum Kind {
      /// No cache, every row right-padded: is_causal SDPA with GQA handled by the kernel
      /// (enable_gqa; no repeated K/V). Padded queries then attend to earlier pads; their outputs
      /// are meaningless either way.
      Causal,
      /// Boolean mask `allowed` [B, 1, T, P + T] (key kept and causal). With `cache`: the new K/V
      /// are written at positions [P, P + T) and the queries attend to the P + T filled ones
      /// (Forward: prefill and the dynamic decode).
      Masked,
      /// Static decode (T = 1, `cache` required): the new K/V are written at cache index `slot`
      /// [1] of every row and the query attends to all C slots under `allowed` [B, 1, 1, C]
      /// (DecodeStatic; no host value that changes between steps, so CUDA-graph capturable).
      /// With `live_start` (int32 [B]): the live-KV kernel attends to slots [live_start[b], slot]
      /// only (LiveKvDecodeAttention) where it applies; the masked attention otherwise.
      Slot,
      /// Every row continues one shared prefix (`prefix`: a one-row cache whose slots
      /// [prefix_pad, prefix->len) hold the prefix's real tokens, left padding before them): the
      /// queries attend to the prefix's K/V as they are — never copied per row — and to their own
      /// row's keys causally (rows right-padded; `allowed` [B, 1, T, T] for the math path), the
      /// two softmaxes merged by their log-sum-exps (SharedPrefixAttention). The new K/V are not
      /// stored (Qwen3Model::ForwardSharedPrefix).
      SharedPrefix,
    };
    Kind kind = Causal;
    at::Tensor allowed;
    KVCache* cache = nullptr;
    int64_t P = 0;
    at::Tensor slot;
    at::Tensor live_start;
    const KVCache* prefix = nullptr;
    int64_t prefix_pad = 0;
  };

  /// Set once ATen's CUDA flash op refused the inputs of a call (e.g. a GPU below sm 80): later
  /// calls take the copy path (Qwen3Model::SharedPrefixFlash).
  static std::atomic<bool>& CudaFlashRefused() {
    static std::atomic<bool> refused{false};
    return refused;
  }

  /// One softmax side of SharedPrefixAttention through the flash kernel, which returns the
  /// softmax's log-sum-exp beside its output: q [Bq, nh, N, hd], k / v [Bq, nh, K, hd] (K/V heads
  /// already repeated) -> (o [Bq, nh, N, hd] in q's dtype, lse [Bq, nh, N] float32, natural log).
  /// CUDA: ATen's FlashAttention-2 op; CPU: ATen's CPU flash op (Qwen3Model::SharedPrefixFlash
  /// says where they apply). Returns false where neither applies or the CUDA op refuses the inputs
  /// (its argument / architecture checks run before any launch; then CudaFlashRefused is set), and
  /// the caller takes the math path. Out of memory and CUDA errors are rethrown, not a refusal.
  static bool FlashSide(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, bool causal, double sm_scale,
                        at::Tensor* o, at::Tensor* lse) {
    if (!Qwen3Model::SharedPrefixFlash(q.device(), q.scalar_type(), q.size(3))) return false;
    if (q.is_cuda()) {
      try {
        auto r = at::_scaled_dot_product_flash_attention(q, k, v, 0.0, causal, false, sm_scale);
        *o = std::get<0>(r);
        *lse = std::get<1>(r).narrow(2, 0, q.size(2));
        return true;
      } catch (const c10::OutOfMemoryError&) {
        throw;
      } catch (const c10::AcceleratorError&) {
        throw;
      } catch (const c10::Error&) {
        CudaFlashRefused().store(true);
        return false;
      }
    }
    auto r = at::_scaled_dot_product_flash_attention_for_cpu(q, k, v, 0.0, causal, std::nullopt, sm_scale);
    *o = std::get<0>(r);
    *lse = std::get<1>(r);
    return true;
  }

  /// Attention of T queries per row over a shared prefix and the row's own keys (the two-level
  /// softmax of "cascade" / shared-prefix attention, e.g. FlashInfer's; exact, not an approximation):
  ///   o = (e^{lse_p} o_p + e^{lse_s} o_s) / (e^{lse_p} + e^{lse_s})
  /// where o_p, lse_p are the softmax-weighted values and log-sum-exp of the scores over the
  /// prefix's real keys, and o_s, lse_s the same over the row's own keys (causal).
  /// q [B, nh, T, hd]; k / v [B, nkv, T, hd]; the prefix's K/V [1, nkv, P0, hd] read in place.
  /// Flash path (FlashSide): the prefix side is ONE flash call of all B·T queries (rows folded into
  /// the query length) against the prefix's keys, the own side one causal call; only the K/V heads
  /// are repeated for GQA (one prefix row, and the suffixes' own few tokens), never the prefix per
  /// row. Math path (only where a flash call was refused at run time; PrefixLogprobs takes the
  /// copy path wherever SharedPrefixFlash is false): float32 matmuls with the query heads of one
  /// KV head grouped. The merge is in float32. Returns o [B, T, nh * hd] in q's dtype.
  static at::Tensor SharedPrefixAttention(const KvAttention& a, int64_t l, const at::Tensor& q, const at::Tensor& k,
                                          const at::Tensor& v, double sm_scale) {
    const int64_t B = q.size(0), nh = q.size(1), T = q.size(2), hd = q.size(3), nkv = k.size(1), rep = nh / nkv;
    const int64_t P0 = a.prefix->len - a.prefix_pad;
    const auto f32 = at::kFloat;
    at::Tensor kp = a.prefix->k[static_cast<size_t>(l)].narrow(2, a.prefix_pad, P0);  // [1, nkv, P0, hd]
    at::Tensor vp = a.prefix->v[static_cast<size_t>(l)].narrow(2, a.prefix_pad, P0);
    at::Tensor op, lp, os, ls;  // per side: o [B, nh, T, hd], lse [B, nh, T]
    {
      auto heads = [&](const at::Tensor& t) { return rep > 1 ? t.repeat_interleave(rep, 1) : t; };
      at::Tensor q1 = q.transpose(0, 1).reshape({1, nh, B * T, hd});  // every row's queries as one
      at::Tensor o1, l1, o2, l2;
      if (FlashSide(q1, heads(kp).to(q.scalar_type()), heads(vp).to(q.scalar_type()), false, sm_scale, &o1, &l1) &&
          FlashSide(q, heads(k), heads(v), true, sm_scale, &o2, &l2)) {
        op = o1.reshape({nh, B, T, hd}).transpose(0, 1).to(f32);
        lp = l1.reshape({nh, B, T}).transpose(0, 1).to(f32);
        os = o2.to(f32);
        ls = l2.to(f32);
      }
    }
    if (!op.defined()) {
      // One softmax side: scores [.., N, K] (masked ones -inf) -> (Σ softmax · V, lse); a row with
      // every key masked gives (0, -inf).
      auto side = [](const at::Tensor& scores, const at::Tensor& values) {
        at::Tensor lse = at::logsumexp(scores, -1, /*keepdim=*/true);
        at::Tensor none = at::isinf(lse) & lse.lt(0);
        at::Tensor p = at::exp(scores - at::where(none, at::zeros_like(lse), lse));
        return std::make_pair(at::matmul(p, values), lse.squeeze(-1));
      };
      // Prefix side: the queries of KV head j from every row and head of its group as one batch entry.
      at::Tensor qg = q.reshape({B, nkv, rep, T, hd}).permute({1, 0, 2, 3, 4}).reshape({nkv, B * rep * T, hd}).to(f32);
      auto [o1, l1] = side(at::bmm(qg, kp.select(0, 0).to(f32).transpose(1, 2)).mul_(sm_scale), vp.select(0, 0).to(f32));
      op = o1.view({nkv, B, rep, T, hd}).permute({1, 0, 2, 3, 4}).reshape({B, nh, T, hd});
      lp = l1.view({nkv, B, rep, T}).permute({1, 0, 2, 3}).reshape({B, nh, T});
      // Own side: each row's queries against its own keys.
      at::Tensor qs = q.reshape({B, nkv, rep * T, hd}).to(f32);
      at::Tensor ss = at::matmul(qs, k.to(f32).transpose(2, 3)).mul_(sm_scale);
      ss = ss.view({B, nkv, rep, T, T}).masked_fill(a.allowed.logical_not().unsqueeze(2), -INFINITY).view({B, nkv, rep * T, T});
      auto [o2, l2] = side(ss, v.to(f32));
      os = o2.reshape({B, nh, T, hd});
      ls = l2.reshape({B, nh, T});
    }
    at::Tensor m = at::maximum(lp, ls);
    m = at::where(at::isinf(m) & m.lt(0), at::zeros_like(m), m).unsqueeze(-1);
    at::Tensor wp = at::exp(lp.unsqueeze(-1) - m), ws = at::exp(ls.unsqueeze(-1) - m);
    at::Tensor o = (op * wp + os * ws) / (wp + ws).clamp_min(1e-30);  // [B, nh, T, hd]
    return o.transpose(1, 2).reshape({B, T, nh * hd}).to(q.scalar_type());
  }

  /// Attention of layer `l` through the seam: q [B, nh, T, hd], k / v [B, nkv, T, hd] after RoPE
  /// -> o [B, T, nh * hd]. Writes k / v into the cache first (Masked with a cache, Slot).
  /// One query per row (T = 1, every decode step): the rep query heads of KV head j (query head
  /// h = j * rep + r uses KV head j, transformers' repeat_kv) become rep query positions of one
  /// head, so K/V are never repeated and the mask [B, 1, 1, L] broadcasts. T > 1 with a mask:
  /// K/V expanded to all query heads (the memory-efficient CUDA backend, the one that takes
  /// arbitrary masks, does not take GQA).
  /// k / v undefined (Slot only): the fused kernel already wrote them at the slot (QkNormRopeFused).
  static at::Tensor Attend(const KvAttention& a, int64_t l, const at::Tensor& q, at::Tensor k, at::Tensor v, double sm_scale) {
    TORCH_CHECK(k.defined() || (a.kind == KvAttention::Slot && a.cache), "Attend: k / v may be left out only for the slot decode");
    const int64_t nkv = k.defined() ? k.size(1) : a.cache->k[static_cast<size_t>(l)].size(1);
    const int64_t B = q.size(0), nh = q.size(1), T = q.size(2), hd = q.size(3), rep = nh / nkv;
    if (a.kind == KvAttention::SharedPrefix) return SharedPrefixAttention(a, l, q, k, v, sm_scale);
    if (a.kind == KvAttention::Causal)
      return at::scaled_dot_product_attention(q, k, v, std::nullopt, 0.0, /*is_causal=*/true, sm_scale, /*enable_gqa=*/rep > 1)
          .transpose(1, 2)
          .reshape({B, T, nh * hd});
    if (a.cache) {
      at::Tensor& kc = a.cache->k[static_cast<size_t>(l)];
      at::Tensor& vc = a.cache->v[static_cast<size_t>(l)];
      if (a.kind == KvAttention::Slot) {
        if (k.defined()) {
          kc.index_copy_(2, a.slot, k.to(kc.scalar_type()));
          vc.index_copy_(2, a.slot, v.to(vc.scalar_type()));
        }
        if (a.live_start.defined() && T == 1) {
          at::Tensor o = LiveKvDecodeAttention(q.reshape({B, nh, hd}).to(kc.scalar_type()), kc, vc, a.live_start, a.slot, sm_scale);
          if (o.defined()) return o.to(q.scalar_type()).reshape({B, 1, nh * hd});
        }
        k = kc;
        v = vc;
      } else {
        kc.narrow(2, a.P, T).copy_(k);
        vc.narrow(2, a.P, T).copy_(v);
        k = kc.narrow(2, 0, a.P + T);
        v = vc.narrow(2, 0, a.P + T);
      }
    }
    if (T == 1)
      return at::scaled_dot_product_attention(q.reshape({B, nkv, rep, hd}), k, v, a.allowed, 0.0, /*is_causal=*/false, sm_scale)
          .reshape({B, 1, nh * hd});
    const int64_t L = k.size(2);
    if (rep > 1) {
      k = k.unsqueeze(2).expand({B, nkv, rep, L, hd}).reshape({B, nh, L, hd});
      v = v.unsqueeze(2).expand({B, nkv, rep, L, hd}).reshape({B, nh, L, hd});
    }
    return at::scaled_dot_product_attention(q, k, v, a.allowed, 0.0, /*is_causal=*/false, sm_scale)
        .transpose(1, 2)
        .reshape({B, T, nh * hd});
  }

  /// The residual stream h + d (d undefined: h) and its RMSNorm with w: (h + d, RMSNorm(h + d)·w).
  /// `fuse`: one kernel for both where it applies (AddRmsNormFused; inference only), else ATen's
  /// add and RmsNorm.
  static std::pair<at::Tensor, at::Tensor> AddNorm(const at::Tensor& h, const at::Tensor& d, const at::Tensor& w, double eps,
                                                   bool fuse) {
    if (!d.defined()) return {h, RmsNorm(h, w, eps)};
    if (fuse) {
      auto f = AddRmsNormFused(h, d, w, eps);
      if (f.first.defined()) return f;
    }
    at::Tensor s = h + d;
    return {s, RmsNorm(s, w, eps)};
  }

  /// One decoder layer: h [B, T, H] -> h' [B, T, H]; cos / sin [B, T, hd] in the model dtype; the
  /// attention (and the KV cache write) through the seam `att`; `merged`: the layer's weights with
  /// the adapter merged in (MergedLayers; then `lo` is empty) instead of the model's. The only copy of the layer math:
  /// Forward, activation recomputation and DecodeStatic all run it.
  /// `pending` (inference only, never under autograd or recomputation): the fused kernels
  /// (fused_ops.h: AddRmsNormFused, QkNormRopeFused) where they apply, and the residual stream
  /// passed on unsummed — the input stream is h + *pending, and on return *pending holds the MLP
  /// output and h' is the stream before it, so the next layer's (or the final) RMSNorm adds it in
  /// the same kernel. Null: ATen ops only and h' summed (training, recomputation).
  static at::Tensor Layer(const Qwen3Model& m, int64_t l, const at::Tensor& h, const at::Tensor& cos, const at::Tensor& sin,
                          const LayerLora& lo, const LayerScale& sc, double drop, const KvAttention& att,
                          const Qwen3Model::LayerWeights* merged = nullptr, at::Tensor* pending = nullptr) {
    const Qwen3Config& c = m.cfg_;
    const Qwen3Model::LayerWeights& lw = merged ? *merged : m.layers_[static_cast<size_t>(l)];
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
    // Projections sharing an input with an adapter on every member and no dropout: one matmul for
    // their A's and one sum (LoraAddGroup); else LoRA per module on slices of the fused output.
    auto grouped = [&](int k0, int k1) {
      if (drop != 0.0) return false;
      for (int k = k0; k <= k1; ++k)
        if (!lo[static_cast<size_t>(k)].first.defined() || sc[static_cast<size_t>(k)] != sc[static_cast<size_t>(k0)]) return false;
      return true;
    };
    // ... and when A / B are in the activations' dtype (float32 models; the model-dtype branch after
    // the per-forward cast), base + LoRA as one node whose matmuls accumulate the LoRA output into
    // the base output (LoraLinearFused): no LoRA output tensor, no separate sums.
    auto fused = [&](int k0, int k1) { return grouped(k0, k1) && lo[static_cast<size_t>(k0)].first.scalar_type() == h.scalar_type(); };
    const bool infer = pending != nullptr;
    at::Tensor hs, x;  // the residual stream h (+ *pending) and its RMSNorm
    std::tie(hs, x) = AddNorm(h, infer ? *pending : at::Tensor(), lw.in_norm, c.rms_norm_eps, infer);
    at::Tensor qkv_out;  // [B, T, qd + 2 kvd] where the q / k / v projections come out as one tensor
    std::vector<at::Tensor> qkv;
    if (fused(0, 2)) {
      qkv_out = AddBias(LoraLinearFused(x, lw.qkv, {lo[0], lo[1], lo[2]}, sc[0]), lw.qkv_b);
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
    at::Tensor q, k, v;  // q [B, T, nh, hd], k [B, T, nkv, hd] after norm and RoPE; v [B, nkv, T, hd]
    if (infer && qkv_out.defined()) {  // one kernel for q / k norm, RoPE and (decode step) the cache write
      const bool to_cache = att.kind == KvAttention::Slot && att.cache && T == 1;
      QkvPrepared p = QkNormRopeFused(qkv_out, c.qk_norm ? lw.q_norm : at::Tensor(), c.qk_norm ? lw.k_norm : at::Tensor(), cos, sin,
                                      c.rms_norm_eps, nh, nkv, hd, to_cache ? att.cache->k[static_cast<size_t>(l)] : at::Tensor(),
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
    at::Tensor o_out = fused(3, 3) ? AddBias(LoraLinearFused(o, lw.o, {lo[3]}, sc[3]), lw.o_b) : lora(at::linear(o, lw.o, lw.o_b), o, 3);
    at::Tensor h2;
    std::tie(h2, x) = AddNorm(hs, o_out, lw.post_norm, c.rms_norm_eps, infer);
    at::Tensor act;
    if (fused(4, 5)) {
      act = SwiGLU(AddBias(LoraLinearFused(x, lw.gate_up, {lo[4], lo[5]}, sc[4]), lw.gate_up_b));  // [.., 2I] -> [.., I]
    } else if (grouped(4, 5) || (!lo[4].first.defined() && !lo[5].first.defined())) {
      at::Tensor gu_out = at::linear(x, lw.gate_up, lw.gate_up_b);  // one matmul for gate, up
      if (grouped(4, 5)) gu_out = LoraAddGroup(gu_out, x, {lo[4], lo[5]}, sc[4], m.lora_fp32_);
      act = SwiGLU(gu_out);
    } else {
      auto gu = at::linear(x, lw.gate_up, lw.gate_up_b).split_with_sizes({I, I}, -1);
      at::Tensor xl = f32(x, 4, 5);
      act = at::silu(lora(gu[0], xl, 4)) * lora(gu[1], xl, 5);
    }
    at::Tensor down = fused(6, 6) ? AddBias(LoraLinearFused(act, lw.down, {lo[6]}, sc[6]), lw.down_b) : lora(at::linear(act, lw.down, lw.down_b), act, 6);
    if (infer) {
      *pending = down;
      return h2;
    }
    return h2 + down;
  }

  /// Every layer's weights with adapter `ad` merged in (LoraMergeScope; PEFT merge_and_unload):
  /// for each targeted projection k, its rows of the fused matrix (q/k/v, gate/up) or its matrix
  /// become W_k + scaling_k · B_k·A_k, summed in float32 and rounded once to the model dtype;
  /// untargeted matrices, norms and biases are the model's tensors (not copied).
  static std::vector<Qwen3Model::LayerWeights> MergedLayers(const Qwen3Model& m, const LoraAdapter& ad) {
    const Qwen3Config& c = m.cfg_;
    const int64_t qd = c.num_attention_heads * c.head_dim, kvd = c.num_key_value_heads * c.head_dim, I = c.intermediate_size;
    std::vector<Qwen3Model::LayerWeights> out;
    out.reserve(m.layers_.size());
    for (size_t l = 0; l < m.layers_.size(); ++l) {
      Qwen3Model::LayerWeights lw = m.layers_[l];
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

  /// The decoder shared by Forward and DecodeStatic: ids [B, T] int64 and position ids [B, T]
  /// int64 on the model device -> final-norm hidden states [B, T, H] in the model dtype. Resolves
  /// the adapter (cast once to the model dtype for the low-precision LoRA branch), builds the RoPE
  /// tables, then runs the embedding, every Layer through the seam `att` (recomputed in backward
  /// when gradient checkpointing applies: grad mode on, a trainable adapter, no cache) and the
  /// final RMSNorm.
  static at::Tensor Decoder(const Qwen3Model& m, const at::Tensor& ids, const at::Tensor& pos, const AdapterSel& sel,
                            const KvAttention& att);
};

namespace {

/// Activation recomputation of one decoder layer (docs/references.md "libtorch pitfalls": no
/// checkpointing in the C++ API, so a custom autograd Function). forward runs the layer under
/// no-grad and keeps only its input (+ the shared RoPE tables / mask and the LoRA leaves);
/// backward re-runs the layer with grad from the saved input and back-propagates `grad_out`
/// through it. With LoRA dropout > 0 the RNG state of the input's device is captured before the
/// first run and restored around the recomputation, so both draw the same masks.
/// Arguments after ctx: h, cos, sin, allowed (nullopt on the causal path), model pointer (the
/// caller keeps the model alive until backward), layer index, bitmask of the projections with
/// LoRA (bit k = module k), scaling, dropout, causal, and the LoRA tensors of the set bits in
/// order (A, B per module). backward returns one gradient per argument (undefined for the
/// non-differentiable ones), as CppNode requires.
struct RecomputedLayer : public torch::autograd::Function<RecomputedLayer> {
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& h, const at::Tensor& cos,
                            const at::Tensor& sin, const std::optional<at::Tensor>& allowed, int64_t model_ptr,
                            int64_t layer, int64_t lora_bits, std::vector<double> scaling, double dropout, bool causal,
                            at::TensorList lora) {
    ctx->save_for_backward({h});
    ctx->saved_data["cos"] = cos;
    ctx->saved_data["sin"] = sin;
    ctx->saved_data["allowed"] = allowed ? c10::IValue(*allowed) : c10::IValue();
    ctx->saved_data["model"] = model_ptr;
    ctx->saved_data["layer"] = layer;
    ctx->saved_data["bits"] = lora_bits;
    ctx->saved_data["scaling"] = scaling;
    ctx->saved_data["dropout"] = dropout;
    ctx->saved_data["causal"] = causal;
    ctx->saved_data["lora"] = lora.vec();
    std::optional<LoraForceDropoutScope> force;
    if (dropout > 0) {
      at::Generator gen = at::globalContext().defaultGenerator(h.device());
      std::lock_guard<std::mutex> lk(gen.mutex());
      ctx->saved_data["rng"] = gen.get_state();
    }
    if (dropout > 0) force.emplace();
    return Run(ctx, h, allowed);
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad_out) {
    at::Tensor h = ctx->get_saved_variables()[0];
    auto lora = ctx->saved_data["lora"].toTensorVector();
    const double dropout = ctx->saved_data["dropout"].toDouble();
    const bool need_h = ctx->needs_input_grad(0);
    at::Tensor cur_rng;
    at::Generator gen;
    if (dropout > 0) {
      gen = at::globalContext().defaultGenerator(h.device());
      std::lock_guard<std::mutex> lk(gen.mutex());
      cur_rng = gen.get_state();
      gen.set_state(ctx->saved_data["rng"].toTensor());
    }
    at::Tensor hd = h.detach().requires_grad_(need_h);
    at::Tensor out;
    {
      at::AutoGradMode on(true);
      std::optional<at::Tensor> allowed;
      if (!ctx->saved_data["allowed"].isNone()) allowed = ctx->saved_data["allowed"].toTensor();
      out = Run(ctx, hd, allowed);
    }
    if (dropout > 0) {
      std::lock_guard<std::mutex> lk(gen.mutex());
      gen.set_state(cur_rng);
    }
    torch::autograd::variable_list inputs;
    if (need_h) inputs.push_back(hd);
    for (const auto& t : lora) inputs.push_back(t);
    torch::autograd::variable_list g;
    if (!inputs.empty())
      g = torch::autograd::grad({out}, inputs, {grad_out[0]}, /*retain_graph=*/false, /*create_graph=*/false, /*allow_unused=*/true);
    // One entry per forward argument: h, cos, sin, allowed, model, layer, bits, scaling, dropout,
    // causal, then each LoRA tensor.
    torch::autograd::variable_list res(10 + lora.size());
    size_t gi = 0;
    if (need_h) res[0] = g[gi++];
    for (size_t i = 0; i < lora.size(); ++i) res[10 + i] = g[gi++];
    return res;
  }

  static at::Tensor Run(torch::autograd::AutogradContext* ctx, const at::Tensor& h, const std::optional<at::Tensor>& allowed) {
    const auto* m = reinterpret_cast<const Qwen3Model*>(ctx->saved_data["model"].toInt());
    const int64_t bits = ctx->saved_data["bits"].toInt();
    auto lora = ctx->saved_data["lora"].toTensorVector();
    Qwen3Impl::LayerLora lo;
    Qwen3Impl::LayerScale sc;
    const auto sv = ctx->saved_data["scaling"].toDoubleVector();
    for (size_t k = 0; k < 7; ++k) sc[k] = sv[k];
    size_t j = 0;
    for (int k = 0; k < 7; ++k)
      if (bits & (int64_t{1} << k)) {
        lo[static_cast<size_t>(k)] = {lora[j], lora[j + 1]};
        j += 2;
      }
    Qwen3Impl::KvAttention att;
    att.kind = ctx->saved_data["causal"].toBool() ? Qwen3Impl::KvAttention::Causal : Qwen3Impl::KvAttention::Masked;
    if (allowed) att.allowed = *allowed;
    return Qwen3Impl::Layer(*m, ctx->saved_data["layer"].toInt(), h, ctx->saved_data["cos"].toTensor(),
                            ctx->saved_data["sin"].toTensor(), lo, sc, ctx->saved_data["dropout"].toDouble(), att);
  }
};

/// Casts a list of tensors (the adapter's float32 A / B) to `dtype` with one concatenation and one
/// cast kernel, returning per-tensor views; backward concatenates the incoming gradients, casts
/// them back with one kernel and splits them (zeros for outputs without a gradient). Replaces two
/// casts per LoRA tensor per forward (and two in backward) on the low-precision LoRA branch.
struct CastAllFn : public torch::autograd::Function<CastAllFn> {
  static torch::autograd::variable_list forward(torch::autograd::AutogradContext* ctx, at::TensorList in, int64_t dtype) {
    std::vector<at::Tensor> flat;
    std::vector<int64_t> numels, dims, sizes;
    for (const auto& t : in) {
      flat.push_back(t.reshape({-1}));
      numels.push_back(t.numel());
      dims.push_back(t.dim());
      for (int64_t s : t.sizes()) sizes.push_back(s);
    }
    ctx->saved_data["numels"] = numels;
    ctx->saved_data["dims"] = dims;
    ctx->saved_data["sizes"] = sizes;
    ctx->saved_data["in_dtype"] = static_cast<int64_t>(in[0].scalar_type());
    at::Tensor all = at::cat(flat).to(static_cast<at::ScalarType>(dtype));
    auto parts = all.split_with_sizes(numels);
    torch::autograd::variable_list out;
    for (size_t i = 0; i < in.size(); ++i) out.push_back(parts[i].view(in[i].sizes()));
    return out;
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx, torch::autograd::variable_list g) {
    auto numels = ctx->saved_data["numels"].toIntVector();
    auto dims = ctx->saved_data["dims"].toIntVector();
    auto sizes = ctx->saved_data["sizes"].toIntVector();
    const auto in_dtype = static_cast<at::ScalarType>(ctx->saved_data["in_dtype"].toInt());
    at::Tensor like;
    for (const auto& t : g)
      if (t.defined()) like = t;
    torch::autograd::variable_list res(g.size() + 1);
    if (!like.defined()) return res;
    std::vector<at::Tensor> flat;
    for (size_t i = 0; i < g.size(); ++i) flat.push_back(g[i].defined() ? g[i].reshape({-1}) : at::zeros({numels[i]}, like.options()));
    auto parts = at::cat(flat).to(in_dtype).split_with_sizes(numels);
    size_t off = 0;
    for (size_t i = 0; i < g.size(); ++i) {
      std::vector<int64_t> shape(sizes.begin() + static_cast<int64_t>(off), sizes.begin() + static_cast<int64_t>(off + dims[i]));
      off += static_cast<size_t>(dims[i]);
      res[i] = parts[i].view(shape);
    }
    return res;
  }
};

/// The adapter with every A / B cast to `dtype` by one CastAllFn (differentiable when grad mode
/// is on and the tensors require grad).
LoraAdapter CastAdapter(const LoraAdapter& ad, at::ScalarType dtype) {
  LoraAdapter out;
  out.config = ad.config;
  out.scaling = ad.scaling;
  std::vector<at::Tensor> in;
  for (const auto& kv : ad.weights) {
    in.push_back(kv.second.first);
    in.push_back(kv.second.second);
  }
  if (in.empty()) return out;
  auto cast = CastAllFn::apply(at::TensorList(in), static_cast<int64_t>(dtype));
  size_t i = 0;
  for (const auto& kv : ad.weights) {
    out.weights[kv.first] = {cast[i], cast[i + 1]};
    i += 2;
  }
  return out;
}

/// True when the host-resident keep mask [B, L] is right-padded in every row (ones, then zeros).
bool RightPadded(const at::Tensor& mask_cpu) {
  if (mask_cpu.size(1) < 2) return true;
  at::Tensor k = mask_cpu.ne(0);
  return !(k.narrow(1, 1, k.size(1) - 1) & k.narrow(1, 0, k.size(1) - 1).logical_not()).any().item<bool>();
}

}  // namespace

std::shared_ptr<Qwen3Model> Qwen3Model::Load(const std::string& dir, at::Device device, at::ScalarType dtype, NonFiniteWeights& non_finite) {
  if (dtype != at::kFloat && dtype != at::kBFloat16 && dtype != at::kHalf)
    throw ArgError("dtype must be float32, bfloat16 or float16");
  const std::string cfg_path = dir + "/config.json";
  std::shared_ptr<Qwen3Model> m(new Qwen3Model());
  m->cfg_ = ParseQwen3Config(st::ReadTextFile(cfg_path), cfg_path);
  m->device_ = device;
  m->dtype_ = dtype;
  const Qwen3Config& c = m->cfg_;
  const int64_t H = c.hidden_size, V = c.vocab_size, I = c.intermediate_size, hd = c.head_dim;
  const int64_t nh = c.num_attention_heads, nkv = c.num_key_value_heads;
  const int64_t qd = nh * hd, kvd = nkv * hd;
  // Expected tensors with the config.json fields behind each dimension (named when a shape differs).
  struct Want {
    std::vector<int64_t> shape;
    std::vector<std::string> dims;  // per dimension: the field expression, e.g. "num_attention_heads*head_dim"
  };
  std::map<std::string, Want> expect{{"model.embed_tokens.weight", {{V, H}, {"vocab_size", "hidden_size"}}},
                                     {"model.norm.weight", {{H}, {"hidden_size"}}}};
  if (!c.tie_word_embeddings) expect["lm_head.weight"] = {{V, H}, {"vocab_size", "hidden_size"}};
  const std::string Q = "num_attention_heads*head_dim", KV = "num_key_value_heads*head_dim";
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    expect[p + "input_layernorm.weight"] = {{H}, {"hidden_size"}};
    expect[p + "post_attention_layernorm.weight"] = {{H}, {"hidden_size"}};
    expect[p + "self_attn.q_proj.weight"] = {{qd, H}, {Q, "hidden_size"}};
    expect[p + "self_attn.k_proj.weight"] = {{kvd, H}, {KV, "hidden_size"}};
    expect[p + "self_attn.v_proj.weight"] = {{kvd, H}, {KV, "hidden_size"}};
    expect[p + "self_attn.o_proj.weight"] = {{H, qd}, {"hidden_size", Q}};
    if (c.qk_norm) {
      expect[p + "self_attn.q_norm.weight"] = {{hd}, {"head_dim"}};
      expect[p + "self_attn.k_norm.weight"] = {{hd}, {"head_dim"}};
    }
    if (c.qkv_bias) {
      expect[p + "self_attn.q_proj.bias"] = {{qd}, {Q}};
      expect[p + "self_attn.k_proj.bias"] = {{kvd}, {KV}};
      expect[p + "self_attn.v_proj.bias"] = {{kvd}, {KV}};
    }
    if (c.o_bias) expect[p + "self_attn.o_proj.bias"] = {{H}, {"hidden_size"}};
    expect[p + "mlp.gate_proj.weight"] = {{I, H}, {"intermediate_size", "hidden_size"}};
    expect[p + "mlp.up_proj.weight"] = {{I, H}, {"intermediate_size", "hidden_size"}};
    expect[p + "mlp.down_proj.weight"] = {{H, I}, {"hidden_size", "intermediate_size"}};
    if (c.mlp_bias) {
      expect[p + "mlp.gate_proj.bias"] = {{I}, {"intermediate_size"}};
      expect[p + "mlp.up_proj.bias"] = {{I}, {"intermediate_size"}};
      expect[p + "mlp.down_proj.bias"] = {{H}, {"hidden_size"}};
    }
  }
  st::Checkpoint ck = st::Checkpoint::Open(dir);
  auto shape_str = [](const std::vector<int64_t>& s) {
    std::string o = "[";
    for (size_t i = 0; i < s.size(); ++i) o += (i ? ", " : "") + std::to_string(s[i]);
    return o + "]";
  };
  // Which switch makes a tensor unexpected (a bias / q_norm the config does not enable).
  auto why_unexpected = [&](const std::string& n) -> std::string {
    auto ends = [&](const char* suf) { const size_t k = std::strlen(suf); return n.size() >= k && n.compare(n.size() - k, k, suf) == 0; };
    if (ends("q_norm.weight") || ends("k_norm.weight")) return " (" + c.architecture + " has no q/k norm)";
    if (n.find(".self_attn.") != std::string::npos && ends(".bias"))
      return c.architecture == "Qwen2ForCausalLM" ? " (Qwen2ForCausalLM has no o_proj bias)" : " (config.json attention_bias is false)";
    if (n.find(".mlp.") != std::string::npos && ends(".bias"))
      return c.architecture == "LlamaForCausalLM" ? " (config.json mlp_bias is false)" : " (" + c.architecture + " has no MLP bias)";
    return "";
  };
  for (const auto& kv : ck.entries()) {
    const std::string& n = kv.first;
    if (expect.count(n)) continue;
    if (c.tie_word_embeddings && n == "lm_head.weight") {
      if (kv.second.shape != std::vector<int64_t>{V, H})
        throw InputError(ck.FileOf(n).path() + ": tensor 'lm_head.weight' has shape " + shape_str(kv.second.shape) + ", expected " + shape_str({V, H}));
      continue;  // tied: the embedding is used, as in transformers
    }
    if (n.size() >= 19 && n.compare(n.size() - 19, 19, "rotary_emb.inv_freq") == 0) continue;
    throw InputError(ck.FileOf(n).path() + ": unexpected tensor '" + n + "' (not part of " + c.architecture + " with this config" + why_unexpected(n) + ")");
  }
  auto defaulted = [&](const std::string& field) {
    return std::find(c.defaulted.begin(), c.defaulted.end(), field) != c.defaulted.end();
  };
  auto field_value = [&](const std::string& f) -> int64_t {
    if (f == "vocab_size") return V;
    if (f == "hidden_size") return H;
    if (f == "intermediate_size") return I;
    if (f == "head_dim") return hd;
    if (f == "num_attention_heads") return nh;
    if (f == "num_key_value_heads") return nkv;
    return -1;
  };
  for (const auto& kv : expect) {
    auto it = ck.entries().find(kv.first);
    if (it == ck.entries().end()) throw InputError(ck.source() + ": missing tensor '" + kv.first + "' (" + c.architecture + " with this config.json)");
    const std::vector<int64_t>& want = kv.second.shape;
    if (it->second.shape != want) {
      // Name the config.json fields of the dimensions that differ (and whether they were absent).
      std::string why;
      for (size_t d = 0; d < want.size(); ++d) {
        if (it->second.shape.size() == want.size() && it->second.shape[d] == want[d]) continue;
        std::string expr = kv.second.dims[d], vals;
        size_t s0 = 0;
        while (s0 <= expr.size()) {
          size_t s1 = expr.find('*', s0);
          if (s1 == std::string::npos) s1 = expr.size();
          const std::string f = expr.substr(s0, s1 - s0);
          vals += (vals.empty() ? "" : ", ") + f + " = " + std::to_string(field_value(f)) +
                  (defaulted(f) ? " (absent from config.json: the " + c.architecture.substr(0, c.architecture.size() - 11) + "Config default)" : "");
          s0 = s1 + 1;
        }
        why += (why.empty() ? "" : "; ") + std::string("dim ") + std::to_string(d) + " is " + expr + " (" + vals + ")";
      }
      throw InputError(ck.FileOf(kv.first).path() + ": tensor '" + kv.first + "' has shape " + shape_str(it->second.shape) +
                       ", expected " + shape_str(want) + " from " + cfg_path + ": " + why);
    }
  }
  at::NoGradGuard ng;
  FiniteCheck finite;  // every tensor as it sits on the device in the model dtype (io/finite.h)
  auto read = [&](const std::string& n) {
    at::Tensor t = ck.Read(n).to(device, dtype).contiguous();
    finite.Add(ck.FileOf(n).path(), n, t);
    return t;
  };
  auto is_fused = [](const std::string& n) {
    for (const char* k : {".self_attn.q_proj.", ".self_attn.k_proj.", ".self_attn.v_proj.", ".mlp.gate_proj.", ".mlp.up_proj."})
      if (n.find(k) != std::string::npos) return true;
    return false;
  };
  for (const auto& kv : expect) {
    if (is_fused(kv.first)) continue;  // fused below
    m->w_[kv.first] = read(kv.first);
  }
  const auto opt = at::TensorOptions().dtype(dtype).device(device);
  // Rows [a; b; ...] of one fused tensor from per-module tensors `names` (sizes `rows`); the
  // per-module entries of w_ become views of it.
  auto fuse = [&](const std::vector<std::string>& names, const std::vector<int64_t>& rows, const std::vector<int64_t>& tail) {
    int64_t total = 0;
    for (int64_t r : rows) total += r;
    std::vector<int64_t> shape{total};
    shape.insert(shape.end(), tail.begin(), tail.end());
    at::Tensor f = at::empty(shape, opt);
    int64_t off = 0;
    for (size_t i = 0; i < names.size(); ++i) {
      f.narrow(0, off, rows[i]).copy_(read(names[i]));
      m->w_[names[i]] = f.narrow(0, off, rows[i]);
      off += rows[i];
    }
    return f;
  };
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    LayerWeights lw;
    // Fused projections: rows [q; k; v] and [gate; up] (one matmul each); the per-module tensors are row views.
    lw.qkv = fuse({p + "self_attn.q_proj.weight", p + "self_attn.k_proj.weight", p + "self_attn.v_proj.weight"}, {qd, kvd, kvd}, {H});
    lw.gate_up = fuse({p + "mlp.gate_proj.weight", p + "mlp.up_proj.weight"}, {I, I}, {H});
    if (c.qkv_bias) lw.qkv_b = fuse({p + "self_attn.q_proj.bias", p + "self_attn.k_proj.bias", p + "self_attn.v_proj.bias"}, {qd, kvd, kvd}, {});
    if (c.mlp_bias) {
      lw.gate_up_b = fuse({p + "mlp.gate_proj.bias", p + "mlp.up_proj.bias"}, {I, I}, {});
      lw.down_b = m->w_.at(p + "mlp.down_proj.bias");
    }
    if (c.o_bias) lw.o_b = m->w_.at(p + "self_attn.o_proj.bias");
    lw.in_norm = m->w_.at(p + "input_layernorm.weight");
    lw.post_norm = m->w_.at(p + "post_attention_layernorm.weight");
    lw.o = m->w_.at(p + "self_attn.o_proj.weight");
    if (c.qk_norm) {
      lw.q_norm = m->w_.at(p + "self_attn.q_norm.weight");
      lw.k_norm = m->w_.at(p + "self_attn.k_norm.weight");
    }
    lw.down = m->w_.at(p + "mlp.down_proj.weight");
    const char* mods[7] = {"self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj", "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj"};
    for (int k = 0; k < 7; ++k) lw.stem[k] = p + mods[k];
    m->layers_.push_back(std::move(lw));
  }
  finite.Finish(non_finite, std::string("model (") + DtypeName(dtype) + " on " + device.str() + ")",
                "Model.load(dir, { allowNonFinite: true }) or --allow-non-finite-weights loads it with a warning");
  auto rope = RopeInvFreq(c);
  m->rope_inv_freq_ = rope.first.to(device);
  m->rope_scale_ = rope.second;
  return m;
}

at::Tensor Qwen3Model::LmHeadWeight() const {
  Qwen3Impl::CheckAlive(*this);
  return Qwen3Impl::W(*this, cfg_.tie_word_embeddings ? "model.embed_tokens.weight" : "lm_head.weight");
}

at::Tensor Qwen3Model::Logits(const at::Tensor& hidden) const {
  return at::linear(hidden.to(dtype_), LmHeadWeight()).to(at::kFloat);
}

KVCache Qwen3Model::NewCache(int64_t batch, int64_t capacity) const {
  Qwen3Impl::CheckAlive(*this);
  if (batch < 1 || capacity < 1) throw ArgError("cache batch and capacity must be positive");
  KVCache kc;
  kc.capacity = capacity;
  auto opt = at::TensorOptions().dtype(dtype_).device(device_);
  for (int64_t l = 0; l < cfg_.num_hidden_layers; ++l) {
    kc.k.push_back(at::zeros({batch, cfg_.num_key_value_heads, capacity, cfg_.head_dim}, opt));
    kc.v.push_back(at::zeros({batch, cfg_.num_key_value_heads, capacity, cfg_.head_dim}, opt));
  }
  return kc;
}

bool Qwen3Model::SharedPrefixFlash(const at::Device& dev, at::ScalarType dtype, int64_t head_dim) {
  if (head_dim % 8 != 0 || head_dim > 256) return false;
  if (dev.is_cuda()) return (dtype == at::kBFloat16 || dtype == at::kHalf) && !Qwen3Impl::CudaFlashRefused().load();
  return dev.is_cpu() && (dtype == at::kFloat || dtype == at::kBFloat16 || dtype == at::kHalf);
}

at::Tensor Qwen3Model::ForwardSharedPrefix(const at::Tensor& input_ids_in, const at::Tensor& lengths_in, const KVCache& prefix,
                                           int64_t prefix_pad, const AdapterSel& sel) const {
  Qwen3Impl::CheckAlive(*this);
  const Qwen3Config& c = cfg_;
  if (input_ids_in.dim() != 2 || input_ids_in.size(0) < 1 || input_ids_in.size(1) < 1) throw ArgError("input_ids must be non-empty [B, T]");
  const int64_t B = input_ids_in.size(0), T = input_ids_in.size(1), P = prefix.len;
  if (lengths_in.dim() != 1 || lengths_in.size(0) != B) throw ArgError("the suffix lengths must have shape [B] = [" + std::to_string(B) + "]");
  if (prefix.k.size() != static_cast<size_t>(c.num_hidden_layers) || prefix.k[0].size(0) != 1)
    throw ArgError("the shared prefix must be a one-row KV cache of this model");
  if (prefix_pad < 0 || prefix_pad >= P) throw ArgError("the shared prefix must hold at least one real position after its padding");
  if (c.max_position_embeddings > 0 && P + T > c.max_position_embeddings)
    throw ArgError("sequence length " + std::to_string(P + T) + " exceeds the model's context (max_position_embeddings " +
                   std::to_string(c.max_position_embeddings) + ")");
  at::Tensor ids = input_ids_in.to(device_, at::kLong);
  at::Tensor qi = at::arange(T, at::TensorOptions().dtype(at::kLong).device(device_));
  at::Tensor keep = qi.unsqueeze(0).lt(lengths_in.to(device_, at::kLong).unsqueeze(1));  // [B, T], right-padded
  // Positions continue the prefix's real tokens (its padded slots take none).
  at::Tensor pos = (keep.to(at::kLong).cumsum(-1) + (P - prefix_pad - 1)).clamp_min(0);
  Qwen3Impl::KvAttention att;
  att.kind = Qwen3Impl::KvAttention::SharedPrefix;
  att.allowed = keep.unsqueeze(1).unsqueeze(1) & qi.unsqueeze(0).le(qi.unsqueeze(1)).unsqueeze(0).unsqueeze(0);  // [B, 1, T, T]
  att.prefix = &prefix;
  att.prefix_pad = prefix_pad;
  return Qwen3Impl::Decoder(*this, ids, pos, sel, att);
}

at::Tensor Qwen3Model::Forward(const at::Tensor& input_ids_in, const at::Tensor& attention_mask_in,
                               const std::optional<at::Tensor>& position_ids_in, const AdapterSel& sel,
                               KVCache* cache) {
  Qwen3Impl::CheckAlive(*this);
  const Qwen3Config& c = cfg_;
  if (input_ids_in.dim() != 2) throw ArgError("input_ids must have shape [B, T]");
  const int64_t B = input_ids_in.size(0), T = input_ids_in.size(1);
  const int64_t P = cache ? cache->len : 0;
  const int64_t L = P + T;
  if (B < 1 || T < 1) throw ArgError("input_ids must be non-empty [B, T]");
  if (c.max_position_embeddings > 0 && L > c.max_position_embeddings)
    throw ArgError("sequence length " + std::to_string(L) + " exceeds the model's context (max_position_embeddings " +
                   std::to_string(c.max_position_embeddings) + ")");
  if (attention_mask_in.dim() != 2 || attention_mask_in.size(0) != B || attention_mask_in.size(1) != L)
    throw ArgError("attention_mask must have shape [B, P + T] = [" + std::to_string(B) + ", " + std::to_string(L) + "]");
  if (cache) {
    if (cache->k.size() != static_cast<size_t>(c.num_hidden_layers)) throw ArgError("KV cache was made for another model");
    if (cache->k[0].size(0) != B) throw ArgError("KV cache batch size differs from input_ids");
    if (L > cache->capacity) throw ArgError("KV cache capacity " + std::to_string(cache->capacity) + " exceeded (need " + std::to_string(L) + ")");
  }
  if (input_ids_in.is_cpu()) {
    // Checked on host inputs (JS batches) only: an out-of-range id on CUDA would be a device-side
    // assert; device-resident ids (the generator's own samples) skip the check to avoid a sync.
    auto mm = at::aminmax(input_ids_in);
    if (std::get<0>(mm).item<int64_t>() < 0 || std::get<1>(mm).item<int64_t>() >= c.vocab_size)
      throw ArgError("input_ids hold a token id outside [0, vocab_size)");
  }
  at::Tensor ids = input_ids_in.to(device_, at::kLong);
  at::Tensor keep = attention_mask_in.to(device_).ne(0);  // [B, L] bool
  at::Tensor pos;
  if (position_ids_in && position_ids_in->defined()) {
    if (position_ids_in->sizes() != input_ids_in.sizes()) throw ArgError("position_ids must have shape [B, T]");
    pos = position_ids_in->to(device_, at::kLong);
  } else {
    pos = (keep.to(at::kLong).cumsum(-1) - 1).clamp_min(0).narrow(1, P, T);
  }
  // Attention mask [B, 1, T, L]: key kept and causal (key j <= P + i). Rows with no allowed key
  // (a padded query with only padded keys before it) attend to everything instead, so no NaN
  // appears; their outputs are meaningless and must be masked by the caller. Skipped (is_causal
  // SDPA, no mask, flash-capable) when there is no cached prefix and the host mask is
  // right-padded: real queries then see exactly the same keys.
  // PAPERGYM_SDPA_MASKED=1 disables this fast path (benchmark A/B of the masked, K/V-expanded path).
  static const bool force_masked = std::getenv("PAPERGYM_SDPA_MASKED") != nullptr;
  Qwen3Impl::KvAttention att;
  const bool causal = !force_masked && !cache && attention_mask_in.is_cpu() && RightPadded(attention_mask_in);
  if (!causal) {
    at::Tensor qi = at::arange(T, at::TensorOptions().dtype(at::kLong).device(device_)).unsqueeze(1) + P;
    at::Tensor kj = at::arange(L, at::TensorOptions().dtype(at::kLong).device(device_)).unsqueeze(0);
    at::Tensor allowed = keep.unsqueeze(1).unsqueeze(1) & kj.le(qi).unsqueeze(0).unsqueeze(0);
    att.kind = Qwen3Impl::KvAttention::Masked;
    att.allowed = allowed | allowed.any(-1, /*keepdim=*/true).logical_not();
    att.cache = cache;
    att.P = P;
  }
  at::Tensor out = Qwen3Impl::Decoder(*this, ids, pos, sel, att);
  if (cache) cache->len = L;
  return out;
}

at::Tensor Qwen3Impl::Decoder(const Qwen3Model& m, const at::Tensor& ids, const at::Tensor& pos, const AdapterSel& sel,
                              const KvAttention& att) {
  const Qwen3Config& c = m.cfg_;
  const LoraAdapter* ad = Resolve(m, sel);
  // The adapter's dropout where LoraAdd would apply it (grad mode, recomputation); 0 in scoring
  // and sampling forwards, which then take the grouped / fused LoRA paths (they need dropout 0)
  // and with them the fused q/k norm + RoPE kernel — the same values: LoraAdd skips the dropout there.
  const double drop = ad && LoraDropoutActive() ? ad->config.dropout : 0.0;
  // Low-precision LoRA branch: all A / B cast to the model dtype once for this forward.
  // In generate (LoraInferenceCacheActive) the cast is made once per call, not once per step.
  std::optional<LoraAdapter> ad_cast;
  std::shared_ptr<const LoraAdapter> ad_cached;
  // generate with mergeAdapter: the adapter merged into the weights once per call, no LoRA branch.
  std::shared_ptr<const std::vector<Qwen3Model::LayerWeights>> merged;
  if (ad && !ad->weights.empty() && LoraMergeActive()) {
    const LoraAdapter& src = *ad;
    merged = std::static_pointer_cast<const std::vector<Qwen3Model::LayerWeights>>(CachedAdapterDerived(
        src, &m, kMergedWeightsTag, [&] { return std::static_pointer_cast<const void>(std::make_shared<const std::vector<Qwen3Model::LayerWeights>>(MergedLayers(m, src))); }));
    ad = nullptr;
  }
  if (ad && !m.lora_fp32_ && m.dtype_ != at::kFloat && !ad->weights.empty() &&
      ad->weights.begin()->second.first.scalar_type() != m.dtype_) {
    if (LoraInferenceCacheActive()) {
      const LoraAdapter& src = *ad;
      ad_cached = CachedAdapterCast(src, m.dtype_, [&] { return CastAdapter(src, m.dtype_); });
      ad = ad_cached.get();
    } else {
      ad_cast = CastAdapter(*ad, m.dtype_);
      ad = &*ad_cast;
    }
  }
  // RoPE tables (fp32, YaRN / llama3 frequencies from load), cast to the model dtype like
  // transformers' rotary embedding: [B, T, hd].
  auto [cos, sin] = RopeTables(m, pos);
  const bool recompute = m.recompute_ && ad && !att.cache && at::GradMode::is_enabled();

  at::Tensor h = at::embedding(W(m, "model.embed_tokens.weight"), ids);  // [B, T, H]
  // Inference (no autograd, no recomputation): the fused kernels, the residual passed on unsummed.
  const bool infer = !recompute && !at::GradMode::is_enabled() && InferenceFusionsApply(h);
  at::Tensor pending;
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    LayerScale sc;
    LayerLora lo = LoraOf(m, l, ad, &sc);
    if (recompute) {
      int64_t bits = 0;
      std::vector<at::Tensor> flat;
      for (int k = 0; k < 7; ++k)
        if (lo[static_cast<size_t>(k)].first.defined()) {
          bits |= int64_t{1} << k;
          flat.push_back(lo[static_cast<size_t>(k)].first);
          flat.push_back(lo[static_cast<size_t>(k)].second);
        }
      std::optional<at::Tensor> am;
      if (att.kind == KvAttention::Masked) am = att.allowed;
      h = RecomputedLayer::apply(h, cos, sin, am, reinterpret_cast<int64_t>(&m), l, bits, std::vector<double>(sc.begin(), sc.end()), drop,
                                 att.kind == KvAttention::Causal, at::TensorList(flat));
    } else {
      h = Layer(m, l, h, cos, sin, lo, sc, drop, att, merged ? &(*merged)[static_cast<size_t>(l)] : nullptr, infer ? &pending : nullptr);
    }
  }
  return AddNorm(h, pending, W(m, "model.norm.weight"), c.rms_norm_eps, infer).second;
}

// ---- LoRA management ----

bool Qwen3Model::SelectsAdapter(const AdapterSel& sel) const {
  const LoraAdapter* a = Qwen3Impl::Resolve(*this, sel);
  return a && !a->weights.empty();
}

void Qwen3Model::AddLora(const LoraConfig& cfg) {
  Qwen3Impl::CheckAlive(*this);
  active_ = MakeLoraAdapter(LoraDims(cfg_), cfg, device_);
}

const LoraAdapter& Qwen3Model::ActiveAdapter() const {
  Qwen3Impl::CheckAlive(*this);
  if (!active_) throw InputError("model has no LoRA adapter (call addLora or loadAdapter first)");
  return *active_;
}

std::vector<at::Tensor> Qwen3Model::LoraParameters() const {
  std::vector<at::Tensor> out;
  for (const auto& kv : ActiveAdapter().weights) {
    out.push_back(kv.second.first);
    out.push_back(kv.second.second);
  }
  return out;
}

std::vector<std::string> Qwen3Model::LoraParameterNames() const {
  std::vector<std::string> out;
  for (const auto& kv : ActiveAdapter().weights) {
    out.push_back("base_model.model." + kv.first + ".lora_A.weight");
    out.push_back("base_model.model." + kv.first + ".lora_B.weight");
  }
  return out;
}

void Qwen3Model::SnapshotAdapter(const std::string& name) {
  const LoraAdapter& a = ActiveAdapter();
  if (name.empty()) throw ArgError("snapshot name must be non-empty");
  LoraAdapter s;
  s.config = a.config;
  s.scaling = a.scaling;
  s.num_layers = a.num_layers;
  at::NoGradGuard ng;
  for (const auto& kv : a.weights) s.weights[kv.first] = {kv.second.first.detach().clone(), kv.second.second.detach().clone()};
  snapshots_[name] = std::move(s);
}

void Qwen3Model::DropSnapshot(const std::string& name) {
  Qwen3Impl::CheckAlive(*this);
  if (!snapshots_.erase(name)) throw ArgError("no adapter snapshot named '" + name + "'");
}

void Qwen3Model::SaveAdapter(const std::string& dir, const std::string& base_model_name) const {
  SavePeftAdapter(dir, ActiveAdapter(), base_model_name);
}

void Qwen3Model::LoadAdapter(const std::string& dir, NonFiniteWeights& non_finite) {
  Qwen3Impl::CheckAlive(*this);
  LoraAdapter loaded = LoadPeftAdapter(dir, LoraDims(cfg_), device_, non_finite);
  // Same modules and shapes as the current adapter: copy in place, so tensors held elsewhere
  // (an optimizer's parameter list, its state) stay valid across a resume. Otherwise replace.
  bool same = active_.has_value() && active_->weights.size() == loaded.weights.size();
  if (same)
    for (const auto& kv : loaded.weights) {
      auto it = active_->weights.find(kv.first);
      if (it == active_->weights.end() || !it->second.first.sizes().equals(kv.second.first.sizes()) ||
          !it->second.second.sizes().equals(kv.second.second.sizes())) {
        same = false;
        break;
      }
    }
  if (!same) {
    active_ = std::move(loaded);
    return;
  }
  at::NoGradGuard ng;
  for (auto& kv : active_->weights) {
    const auto& src = loaded.weights.at(kv.first);
    kv.second.first.copy_(src.first);
    kv.second.second.copy_(src.second);
  }
  const uint64_t seed = active_->config.seed;
  active_->config = loaded.config;
  active_->config.seed = seed;
  active_->scaling = loaded.scaling;
}

int64_t Qwen3Model::ParameterBytes() const {
  if (disposed_) return 0;
  int64_t n = 0;
  for (const auto& kv : w_) n += static_cast<int64_t>(kv.second.nbytes());  // views of fused tensors sum to their size
  auto add = [&](const LoraAdapter& a) {
    for (const auto& kv : a.weights) n += static_cast<int64_t>(kv.second.first.nbytes() + kv.second.second.nbytes());
  };
  if (active_) add(*active_);
  for (const auto& kv : snapshots_) add(kv.second);
  return n;
}

void Qwen3Model::Dispose() {
  w_.clear();
  layers_.clear();
  active_.reset();
  snapshots_.clear();
  disposed_ = true;
}

// ---- Static-shape decode step (CUDA-graph capturable; see qwen3.h) ----
// The same decoder as Forward (Qwen3Impl::Decoder / Layer); only the seam differs: K/V written at
// `slot`, the query attends to all C slots under `keep`. test/generate-static.test.ts checks both
// paths give the same tokens and logprobs.

at::Tensor Qwen3Model::DecodeStatic(const at::Tensor& ids, const at::Tensor& pos, const at::Tensor& slot,
                                    const at::Tensor& keep, const AdapterSel& sel, KVCache& cache, const at::Tensor& live_start) {
  Qwen3Impl::CheckAlive(*this);
  const Qwen3Config& c = cfg_;
  if (ids.dim() != 2 || ids.size(1) != 1 || ids.size(0) < 1 || ids.scalar_type() != at::kLong)
    throw ArgError("DecodeStatic: ids must be int64 [B, 1]");
  const int64_t B = ids.size(0), C = cache.capacity;
  if (cache.k.size() != static_cast<size_t>(c.num_hidden_layers) || cache.v.size() != cache.k.size())
    throw ArgError("DecodeStatic: KV cache was made for another model");
  if (cache.k[0].size(0) != B || cache.k[0].size(2) != C) throw ArgError("DecodeStatic: KV cache shape differs from [B, n_kv, capacity, head_dim]");
  if (pos.dim() != 1 || pos.size(0) != B || pos.scalar_type() != at::kLong) throw ArgError("DecodeStatic: pos must be int64 [B]");
  if (slot.numel() != 1 || slot.dim() > 1 || slot.scalar_type() != at::kLong) throw ArgError("DecodeStatic: slot must be int64 [1] or []");
  if (keep.dim() != 2 || keep.size(0) != B || keep.size(1) != C || keep.scalar_type() != at::kBool)
    throw ArgError("DecodeStatic: keep must be bool [B, capacity]");
  if (ids.device() != device_ || pos.device() != device_ || slot.device() != device_ || keep.device() != device_)
    throw ArgError("DecodeStatic: ids, pos, slot and keep must be on the model device");
  if (live_start.defined() && (live_start.dim() != 1 || live_start.size(0) != B || live_start.scalar_type() != at::kInt || live_start.device() != device_))
    throw ArgError("DecodeStatic: live_start must be int32 [B] on the model device");
  Qwen3Impl::KvAttention att;
  att.kind = Qwen3Impl::KvAttention::Slot;
  att.live_start = live_start;
  att.slot = slot.reshape({1});
  keep.index_fill_(1, att.slot, true);
  att.allowed = keep.view({B, 1, 1, C});  // broadcast over KV heads and the rep axis
  att.cache = &cache;
  at::Tensor h = Qwen3Impl::Decoder(*this, ids, pos.view({B, 1}), sel, att);  // [B, 1, H]
  return Logits(h.select(1, 0));  // [B, V] fp32
}

}  // namespace pg
