// The attention seam of the decoder layer (model/decoder.cc): where a layer's new keys / values go
// and which keys its queries attend to, for the three ways the one layer runs (training / scoring
// forward, the dynamic decode over a growing cache, the static-shape CUDA-graph decode) and the
// shared-prefix scoring forward.
#pragma once
#include <ATen/ATen.h>

#include <cstdint>

#include "model/decoder.h"

namespace pg {

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
    /// only (LiveKvDecodeAttention) where it applies; the masked attention otherwise. With
    /// live_prompt_group >= 2: groups of that many rows share their K/V before live_prompt_end
    /// (one read per group there).
    Slot,
    /// Every row continues one shared prefix (`prefix`: a one-row cache whose slots
    /// [prefix_pad, prefix->len) hold the prefix's real tokens, left padding before them): the
    /// queries attend to the prefix's K/V as they are — never copied per row — and to their own
    /// row's keys causally (rows right-padded; `allowed` [B, 1, T, T] for the math path), the
    /// two softmaxes merged by their log-sum-exps (SharedPrefixAttention). The new K/V are not
    /// stored (DecoderModel::ForwardSharedPrefix).
    SharedPrefix,
  };
  Kind kind = Causal;
  at::Tensor allowed;
  KVCache* cache = nullptr;
  int64_t P = 0;
  at::Tensor slot;
  at::Tensor live_start;
  int64_t live_prompt_group = 0;
  int64_t live_prompt_end = 0;
  const KVCache* prefix = nullptr;
  int64_t prefix_pad = 0;
};

/// Attention of layer `l` through the seam: q [B, nh, T, hd], k / v [B, nkv, T, hd] after RoPE
/// -> o [B, T, nh * hd]. Writes k / v into the cache first (Masked with a cache, Slot).
/// One query per row (T = 1, every decode step): the rep query heads of KV head j (query head
/// h = j * rep + r uses KV head j, transformers' repeat_kv) become rep query positions of one
/// head, so K/V are never repeated and the mask [B, 1, 1, L] broadcasts. T > 1 with a mask:
/// K/V expanded to all query heads (the memory-efficient CUDA backend, the one that takes
/// arbitrary masks, does not take GQA).
/// k / v undefined (Slot only): the fused kernel already wrote them at the slot (QkNormRopeFused).
at::Tensor Attend(const KvAttention& a, int64_t l, const at::Tensor& q, at::Tensor k, at::Tensor v, double sm_scale);

}  // namespace pg
