// Internals of the decoder (model/decoder.h) shared by its translation units: model/decoder.cc
// (loading, the public forwards, the layer loop), model/layer.cc (the one decoder layer and the
// merged-adapter weights), model/recompute.cc (activation recomputation and the adapter cast) and
// model/adapters.cc (LoRA management). Not part of the model's contract.
#pragma once
#include <ATen/ATen.h>

#include <array>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/errors.h"
#include "lora/lora.h"
#include "model/attention.h"
#include "model/decoder.h"

namespace pg {

/// RMSNorm (docs/references.md): fp32 x * rsqrt(mean(x^2) + eps), cast back to x's dtype, times
/// weight; ATen's fused rms_norm on CUDA (model/layer.cc).
at::Tensor RmsNorm(const at::Tensor& x, const at::Tensor& w, double eps);

/// Private helpers with access to DecoderModel internals.
class DecoderImpl {
 public:
  static void CheckAlive(const DecoderModel& m) {
    if (m.disposed_) throw DisposedError("model was disposed");
  }
  static const at::Tensor& W(const DecoderModel& m, const std::string& name) {
    auto it = m.w_.find(name);
    if (it == m.w_.end()) throw InputError("internal: missing weight " + name);
    return it->second;
  }
  static const LoraAdapter* Resolve(const DecoderModel& m, const AdapterSel& sel) {
    switch (sel.kind) {
      case AdapterSel::None:
        return nullptr;
      case AdapterSel::Active:
        return (m.adapter_enabled_ && m.active_) ? &*m.active_ : nullptr;
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
  using LayerLora = std::array<std::pair<at::Tensor, at::Tensor>, kNumProjections>;
  /// Per-projection LoRA scaling (alpha / r of that module: peft rank_pattern / alpha_pattern).
  using LayerScale = std::array<double, kNumProjections>;
  static LayerLora LoraOf(const DecoderModel& m, int64_t l, const LoraAdapter* ad, LayerScale* sc = nullptr) {
    LayerLora out;
    if (sc) sc->fill(0.0);
    if (!ad) return out;
    const auto& lw = m.layers_[static_cast<size_t>(l)];
    for (int k = 0; k < kNumProjections; ++k) {
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
  static std::pair<at::Tensor, at::Tensor> RopeTables(const DecoderModel& m, const at::Tensor& pos) {
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

  using KvAttention = ::pg::KvAttention;

  /// The residual stream h + d (d undefined: h) and its RMSNorm with w: (h + d, RMSNorm(h + d)·w).
  /// `fuse`: one kernel for both where it applies (AddRmsNormFused; inference only), else ATen's
  /// add and RmsNorm.
  static std::pair<at::Tensor, at::Tensor> AddNorm(const at::Tensor& h, const at::Tensor& d, const at::Tensor& w, double eps, bool fuse);

  /// One decoder layer: h [B, T, H] -> h' [B, T, H]; cos / sin [B, T, hd] in the model dtype; the
  /// attention (and the KV cache write) through the seam `att`; `merged`: the layer's weights with
  /// the adapter merged in (MergedLayers; then `lo` is empty) instead of the model's. The only copy of the layer math:
  /// Forward, activation recomputation and DecodeStatic all run it.
  /// `pending` (inference only, never under autograd or recomputation): the fused kernels
  /// (fused_ops.h: AddRmsNormFused, QkNormRopeFused) where they apply, and the residual stream
  /// passed on unsummed — the input stream is h + *pending, and on return *pending holds the MLP
  /// output and h' is the stream before it, so the next layer's (or the final) RMSNorm adds it in
  /// the same kernel. Null: ATen ops only and h' summed (training, recomputation).
  static at::Tensor Layer(const DecoderModel& m, int64_t l, const at::Tensor& h, const at::Tensor& cos, const at::Tensor& sin, const LayerLora& lo,
                          const LayerScale& sc, double drop, const KvAttention& att, const DecoderLayerWeights* merged = nullptr,
                          at::Tensor* pending = nullptr);

  /// Every layer's weights with adapter `ad` merged in (LoraMergeScope; PEFT merge_and_unload):
  /// for each targeted projection k, its rows of the fused matrix (q/k/v, gate/up) or its matrix
  /// become W_k + scaling_k · B_k·A_k, summed in float32 and rounded once to the model dtype;
  /// untargeted matrices, norms and biases are the model's tensors (not copied).
  static std::vector<DecoderLayerWeights> MergedLayers(const DecoderModel& m, const LoraAdapter& ad);

  /// The decoder shared by Forward and DecodeStatic: ids [B, T] int64 and position ids [B, T]
  /// int64 on the model device -> final-norm hidden states [B, T, H] in the model dtype. Resolves
  /// the adapter (cast once to the model dtype for the low-precision LoRA branch), builds the RoPE
  /// tables, then runs the embedding, every Layer through the seam `att` (recomputed in backward
  /// when gradient checkpointing applies: grad mode on, a trainable adapter, no cache) and the
  /// final RMSNorm.
  static at::Tensor Decoder(const DecoderModel& m, const at::Tensor& ids, const at::Tensor& pos, const AdapterSel& sel, const KvAttention& att);
};

/// Layer `layer` of `m` run by RecomputedLayer (model/recompute.cc: activation recomputation):
/// forward under no-grad keeping only h; backward re-runs it with grad. `allowed`: the mask
/// (nullopt on the causal path); `bits`: the projections with LoRA (bit k = kProjections[k]) and
/// `lora` their A, B in order; the caller keeps `m` alive until backward.
at::Tensor RecomputeLayer(const at::Tensor& h, const at::Tensor& cos, const at::Tensor& sin, const std::optional<at::Tensor>& allowed, const DecoderModel& m,
                          int64_t layer, int64_t bits, std::vector<double> scaling, double dropout, bool causal, at::TensorList lora);

/// The adapter with every A / B cast to `dtype` by one concatenation and one cast kernel
/// (differentiable when grad mode is on and the tensors require grad; model/recompute.cc).
LoraAdapter CastAdapter(const LoraAdapter& ad, at::ScalarType dtype);

}  // namespace pg
