// The decoder model: loading (config.json through the architecture registry, the weights through
// model/weights.cc), the public forwards (Forward, ForwardSharedPrefix, DecodeStatic) and the layer
// loop they share. The layer itself is in model/layer.cc, the attention seam in model/attention.cc.
#include "model/decoder.h"

#include <cstdlib>
#include <optional>

#include "io/safetensors.h"
#include "model/config.h"
#include "model/decoder_impl.h"
#include "model/fused_ops.h"
#include "model/weights.h"

namespace pg {

namespace {

/// CachedAdapterDerived tag of a model's merged layer weights (owner: the model).
constexpr int64_t kMergedWeightsTag = -1;

/// True when the host-resident keep mask [B, L] is right-padded in every row (ones, then zeros).
bool RightPadded(const at::Tensor& mask_cpu) {
  if (mask_cpu.size(1) < 2) return true;
  at::Tensor k = mask_cpu.ne(0);
  return !(k.narrow(1, 1, k.size(1) - 1) & k.narrow(1, 0, k.size(1) - 1).logical_not()).any().item<bool>();
}

}  // namespace

std::shared_ptr<DecoderModel> DecoderModel::Load(const std::string& dir, at::Device device, at::ScalarType dtype, NonFiniteWeights& non_finite) {
  if (dtype != at::kFloat && dtype != at::kBFloat16 && dtype != at::kHalf) throw ArgError("dtype must be float32, bfloat16 or float16");
  const std::string cfg_path = dir + "/config.json";
  std::shared_ptr<DecoderModel> m(new DecoderModel());
  m->cfg_ = ParseDecoderConfig(st::ReadTextFile(cfg_path), cfg_path);
  m->device_ = device;
  m->dtype_ = dtype;
  DecoderWeights w = LoadDecoderWeights(dir, cfg_path, m->cfg_, device, dtype, non_finite);
  m->w_ = std::move(w.by_name);
  m->layers_ = std::move(w.layers);
  auto rope = RopeInvFreq(m->cfg_);
  m->rope_inv_freq_ = rope.first.to(device);
  m->rope_scale_ = rope.second;
  return m;
}

at::Tensor DecoderModel::LmHeadWeight() const {
  DecoderImpl::CheckAlive(*this);
  return DecoderImpl::W(*this, cfg_.tie_word_embeddings ? "model.embed_tokens.weight" : "lm_head.weight");
}

at::Tensor DecoderModel::Logits(const at::Tensor& hidden) const {
  return at::linear(hidden.to(dtype_), LmHeadWeight()).to(at::kFloat);
}

KVCache DecoderModel::NewCache(int64_t batch, int64_t capacity) const {
  DecoderImpl::CheckAlive(*this);
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

at::Tensor DecoderModel::ForwardSharedPrefix(const at::Tensor& input_ids_in, const at::Tensor& lengths_in, const KVCache& prefix, int64_t prefix_pad,
                                             const AdapterSel& sel) const {
  DecoderImpl::CheckAlive(*this);
  const DecoderConfig& c = cfg_;
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
  DecoderImpl::KvAttention att;
  att.kind = DecoderImpl::KvAttention::SharedPrefix;
  att.allowed = keep.unsqueeze(1).unsqueeze(1) & qi.unsqueeze(0).le(qi.unsqueeze(1)).unsqueeze(0).unsqueeze(0);  // [B, 1, T, T]
  att.prefix = &prefix;
  att.prefix_pad = prefix_pad;
  return DecoderImpl::Decoder(*this, ids, pos, sel, att);
}

at::Tensor DecoderModel::Forward(const at::Tensor& input_ids_in, const at::Tensor& attention_mask_in, const std::optional<at::Tensor>& position_ids_in,
                                 const AdapterSel& sel, KVCache* cache) {
  DecoderImpl::CheckAlive(*this);
  const DecoderConfig& c = cfg_;
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
  DecoderImpl::KvAttention att;
  const bool causal = !force_masked && !cache && attention_mask_in.is_cpu() && RightPadded(attention_mask_in);
  if (!causal) {
    at::Tensor qi = at::arange(T, at::TensorOptions().dtype(at::kLong).device(device_)).unsqueeze(1) + P;
    at::Tensor kj = at::arange(L, at::TensorOptions().dtype(at::kLong).device(device_)).unsqueeze(0);
    at::Tensor allowed = keep.unsqueeze(1).unsqueeze(1) & kj.le(qi).unsqueeze(0).unsqueeze(0);
    att.kind = DecoderImpl::KvAttention::Masked;
    att.allowed = allowed | allowed.any(-1, /*keepdim=*/true).logical_not();
    att.cache = cache;
    att.P = P;
  }
  at::Tensor out = DecoderImpl::Decoder(*this, ids, pos, sel, att);
  if (cache) cache->len = L;
  return out;
}

at::Tensor DecoderImpl::Decoder(const DecoderModel& m, const at::Tensor& ids, const at::Tensor& pos, const AdapterSel& sel, const KvAttention& att) {
  const DecoderConfig& c = m.cfg_;
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
  std::shared_ptr<const std::vector<DecoderLayerWeights>> merged;
  if (ad && !ad->weights.empty() && LoraMergeActive()) {
    const LoraAdapter& src = *ad;
    merged = std::static_pointer_cast<const std::vector<DecoderLayerWeights>>(CachedAdapterDerived(src, &m, kMergedWeightsTag, [&] {
      return std::static_pointer_cast<const void>(std::make_shared<const std::vector<DecoderLayerWeights>>(MergedLayers(m, src)));
    }));
    ad = nullptr;
  }
  if (ad && !m.lora_fp32_ && m.dtype_ != at::kFloat && !ad->weights.empty() && ad->weights.begin()->second.first.scalar_type() != m.dtype_) {
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
      for (int k = 0; k < kNumProjections; ++k)
        if (lo[static_cast<size_t>(k)].first.defined()) {
          bits |= int64_t{1} << k;
          flat.push_back(lo[static_cast<size_t>(k)].first);
          flat.push_back(lo[static_cast<size_t>(k)].second);
        }
      std::optional<at::Tensor> am;
      if (att.kind == KvAttention::Masked) am = att.allowed;
      h = RecomputeLayer(h, cos, sin, am, m, l, bits, std::vector<double>(sc.begin(), sc.end()), drop, att.kind == KvAttention::Causal, at::TensorList(flat));
    } else {
      h = Layer(m, l, h, cos, sin, lo, sc, drop, att, merged ? &(*merged)[static_cast<size_t>(l)] : nullptr, infer ? &pending : nullptr);
    }
  }
  return AddNorm(h, pending, W(m, "model.norm.weight"), c.rms_norm_eps, infer).second;
}

// ---- Static-shape decode step (CUDA-graph capturable; see decoder.h) ----
// The same decoder as Forward (DecoderImpl::Decoder / Layer); only the seam differs: K/V written at
// `slot`, the query attends to all C slots under `keep`. test/generate-static.test.ts checks both
// paths give the same tokens and logprobs.

at::Tensor DecoderModel::DecodeStatic(const at::Tensor& ids, const at::Tensor& pos, const at::Tensor& slot, const at::Tensor& keep, const AdapterSel& sel,
                                      KVCache& cache, const at::Tensor& live_start, int64_t prompt_group, int64_t prompt_end) {
  DecoderImpl::CheckAlive(*this);
  const DecoderConfig& c = cfg_;
  if (ids.dim() != 2 || ids.size(1) != 1 || ids.size(0) < 1 || ids.scalar_type() != at::kLong) throw ArgError("DecodeStatic: ids must be int64 [B, 1]");
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
  if (prompt_group >= 2 && (!live_start.defined() || prompt_end < 0 || prompt_end > C))
    throw ArgError("DecodeStatic: prompt_group needs live_start and prompt_end in [0, capacity]");
  DecoderImpl::KvAttention att;
  att.kind = DecoderImpl::KvAttention::Slot;
  att.live_start = live_start;
  att.live_prompt_group = prompt_group;
  att.live_prompt_end = prompt_end;
  att.slot = slot.reshape({1});
  keep.index_fill_(1, att.slot, true);
  att.allowed = keep.view({B, 1, 1, C});  // broadcast over KV heads and the rep axis
  att.cache = &cache;
  at::Tensor h = DecoderImpl::Decoder(*this, ids, pos.view({B, 1}), sel, att);  // [B, 1, H]
  return Logits(h.select(1, 0));                                                // [B, V] fp32
}

}  // namespace pg
