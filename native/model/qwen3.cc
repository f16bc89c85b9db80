// Qwen3 decoder: checkpoint loading and the forward pass. Architecture per transformers
// models/qwen3/modeling_qwen3.py as summarised in shared REFERENCES.md (own implementation).
#include "model/qwen3.h"

#include <cmath>
#include <set>

#include "io/peft_adapter.h"
#include "io/safetensors.h"
#include "lora/lora.h"
#include "model/config.h"
#include "napi/util.h"

namespace pg {

namespace {

/// RMSNorm (REFERENCES.md): fp32 x * rsqrt(mean(x^2) + eps), cast back to x's dtype, times weight.
at::Tensor RmsNorm(const at::Tensor& x, const at::Tensor& w, double eps) {
  at::Tensor xf = x.to(at::kFloat);
  at::Tensor var = xf.pow(2).mean(-1, /*keepdim=*/true);
  return w * (xf * at::rsqrt(var + eps)).to(x.scalar_type());
}

/// rotate_half for split-halves RoPE: cat(-x2, x1) over the last dim.
at::Tensor RotateHalf(const at::Tensor& x) {
  const int64_t h = x.size(-1) / 2;
  return at::cat({-x.narrow(-1, h, h), x.narrow(-1, 0, h)}, -1);
}

}  // namespace

/// Private helpers with access to Qwen3Model internals.
class Qwen3Impl {
 public:
  static void CheckAlive(const Qwen3Model& m) {
    if (m.disposed_) throw InputError("model was disposed");
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
};

std::shared_ptr<Qwen3Model> Qwen3Model::Load(const std::string& dir, at::Device device, at::ScalarType dtype) {
  if (dtype != at::kFloat && dtype != at::kBFloat16 && dtype != at::kHalf)
    throw ArgError("dtype must be float32, bfloat16 or float16");
  const std::string cfg_path = dir + "/config.json";
  std::shared_ptr<Qwen3Model> m(new Qwen3Model());
  m->cfg_ = ParseQwen3Config(st::ReadTextFile(cfg_path), cfg_path);
  m->device_ = device;
  m->dtype_ = dtype;
  const Qwen3Config& c = m->cfg_;
  const int64_t H = c.hidden_size, V = c.vocab_size, I = c.intermediate_size, hd = c.head_dim;
  const int64_t qd = c.num_attention_heads * hd, kvd = c.num_key_value_heads * hd;
  std::map<std::string, std::vector<int64_t>> expect{{"model.embed_tokens.weight", {V, H}}, {"model.norm.weight", {H}}};
  if (!c.tie_word_embeddings) expect["lm_head.weight"] = {V, H};
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    expect[p + "input_layernorm.weight"] = {H};
    expect[p + "post_attention_layernorm.weight"] = {H};
    expect[p + "self_attn.q_proj.weight"] = {qd, H};
    expect[p + "self_attn.k_proj.weight"] = {kvd, H};
    expect[p + "self_attn.v_proj.weight"] = {kvd, H};
    expect[p + "self_attn.o_proj.weight"] = {H, qd};
    expect[p + "self_attn.q_norm.weight"] = {hd};
    expect[p + "self_attn.k_norm.weight"] = {hd};
    expect[p + "mlp.gate_proj.weight"] = {I, H};
    expect[p + "mlp.up_proj.weight"] = {I, H};
    expect[p + "mlp.down_proj.weight"] = {H, I};
  }
  st::Checkpoint ck = st::Checkpoint::Open(dir);
  auto shape_str = [](const std::vector<int64_t>& s) {
    std::string o = "[";
    for (size_t i = 0; i < s.size(); ++i) o += (i ? ", " : "") + std::to_string(s[i]);
    return o + "]";
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
    throw InputError(ck.FileOf(n).path() + ": unexpected tensor '" + n + "' (not part of Qwen3ForCausalLM with this config)");
  }
  for (const auto& kv : expect) {
    auto it = ck.entries().find(kv.first);
    if (it == ck.entries().end()) throw InputError(ck.source() + ": missing tensor '" + kv.first + "'");
    if (it->second.shape != kv.second)
      throw InputError(ck.FileOf(kv.first).path() + ": tensor '" + kv.first + "' has shape " + shape_str(it->second.shape) +
                       ", expected " + shape_str(kv.second) + " from config.json");
  }
  at::NoGradGuard ng;
  auto read = [&](const std::string& n) { return ck.Read(n).to(device, dtype).contiguous(); };
  for (const auto& kv : expect) {
    if (kv.first.find(".self_attn.q_proj.") != std::string::npos || kv.first.find(".self_attn.k_proj.") != std::string::npos ||
        kv.first.find(".self_attn.v_proj.") != std::string::npos || kv.first.find(".mlp.gate_proj.") != std::string::npos ||
        kv.first.find(".mlp.up_proj.") != std::string::npos)
      continue;  // fused below
    m->w_[kv.first] = read(kv.first);
  }
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    LayerWeights lw;
    // Fused projections: rows [q; k; v] and [gate; up]; the per-module tensors are row views.
    lw.qkv = at::empty({qd + 2 * kvd, H}, at::TensorOptions().dtype(dtype).device(device));
    lw.qkv.narrow(0, 0, qd).copy_(read(p + "self_attn.q_proj.weight"));
    lw.qkv.narrow(0, qd, kvd).copy_(read(p + "self_attn.k_proj.weight"));
    lw.qkv.narrow(0, qd + kvd, kvd).copy_(read(p + "self_attn.v_proj.weight"));
    m->w_[p + "self_attn.q_proj.weight"] = lw.qkv.narrow(0, 0, qd);
    m->w_[p + "self_attn.k_proj.weight"] = lw.qkv.narrow(0, qd, kvd);
    m->w_[p + "self_attn.v_proj.weight"] = lw.qkv.narrow(0, qd + kvd, kvd);
    lw.gate_up = at::empty({2 * I, H}, at::TensorOptions().dtype(dtype).device(device));
    lw.gate_up.narrow(0, 0, I).copy_(read(p + "mlp.gate_proj.weight"));
    lw.gate_up.narrow(0, I, I).copy_(read(p + "mlp.up_proj.weight"));
    m->w_[p + "mlp.gate_proj.weight"] = lw.gate_up.narrow(0, 0, I);
    m->w_[p + "mlp.up_proj.weight"] = lw.gate_up.narrow(0, I, I);
    lw.in_norm = m->w_.at(p + "input_layernorm.weight");
    lw.post_norm = m->w_.at(p + "post_attention_layernorm.weight");
    lw.o = m->w_.at(p + "self_attn.o_proj.weight");
    lw.q_norm = m->w_.at(p + "self_attn.q_norm.weight");
    lw.k_norm = m->w_.at(p + "self_attn.k_norm.weight");
    lw.down = m->w_.at(p + "mlp.down_proj.weight");
    const char* mods[7] = {"self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj", "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj"};
    for (int k = 0; k < 7; ++k) lw.stem[k] = p + mods[k];
    m->layers_.push_back(std::move(lw));
  }
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
  const LoraAdapter* ad = Qwen3Impl::Resolve(*this, sel);
  const double scaling = ad ? ad->config.Scaling() : 0.0;
  const double drop = ad ? ad->config.dropout : 0.0;

  // RoPE tables (fp32), cast to the model dtype like transformers' rotary embedding.
  const int64_t hd = c.head_dim, nh = c.num_attention_heads, nkv = c.num_key_value_heads, rep = nh / nkv;
  at::Tensor inv_freq = at::pow(c.rope_theta, at::arange(0, hd, 2, at::TensorOptions().dtype(at::kLong).device(device_)).to(at::kFloat) / static_cast<double>(hd)).reciprocal();
  at::Tensor freqs = pos.to(at::kFloat).unsqueeze(-1) * inv_freq;  // [B, T, hd/2]
  at::Tensor emb = at::cat({freqs, freqs}, -1).unsqueeze(1);      // [B, 1, T, hd]
  at::Tensor cos = emb.cos().to(dtype_), sin = emb.sin().to(dtype_);

  // Attention mask [B, 1, T, L]: key kept and causal (key j <= P + i). Rows with no allowed key
  // (a padded query with only padded keys before it) attend to everything instead, so no NaN
  // appears; their outputs are meaningless and must be masked by the caller.
  at::Tensor qi = at::arange(T, at::TensorOptions().dtype(at::kLong).device(device_)).unsqueeze(1) + P;
  at::Tensor kj = at::arange(L, at::TensorOptions().dtype(at::kLong).device(device_)).unsqueeze(0);
  at::Tensor allowed = keep.unsqueeze(1).unsqueeze(1) & kj.le(qi).unsqueeze(0).unsqueeze(0);
  allowed = allowed | allowed.any(-1, /*keepdim=*/true).logical_not();
  const double sm_scale = 1.0 / std::sqrt(static_cast<double>(hd));

  // LoRA delta of module `k` (0..6 = q, k, v, o, gate, up, down) added to its base output.
  auto lora = [&](const at::Tensor& base, const at::Tensor& x, const LayerWeights& lw, int k) {
    if (!ad) return base;
    auto it = ad->weights.find(lw.stem[k]);
    if (it == ad->weights.end()) return base;
    return LoraAdd(base, x, it->second.first, it->second.second, scaling, drop);
  };
  const int64_t qd = nh * hd, kvd = nkv * hd, I = c.intermediate_size;

  at::Tensor h = at::embedding(Qwen3Impl::W(*this, "model.embed_tokens.weight"), ids);  // [B, T, H]
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    const LayerWeights& lw = layers_[static_cast<size_t>(l)];
    at::Tensor x = RmsNorm(h, lw.in_norm, c.rms_norm_eps);
    auto qkv = at::linear(x, lw.qkv).split_with_sizes({qd, kvd, kvd}, -1);  // one matmul for q, k, v
    at::Tensor q = RmsNorm(lora(qkv[0], x, lw, 0).reshape({B, T, nh, hd}), lw.q_norm, c.rms_norm_eps).transpose(1, 2);
    at::Tensor k = RmsNorm(lora(qkv[1], x, lw, 1).reshape({B, T, nkv, hd}), lw.k_norm, c.rms_norm_eps).transpose(1, 2);
    at::Tensor v = lora(qkv[2], x, lw, 2).reshape({B, T, nkv, hd}).transpose(1, 2);
    q = q * cos + RotateHalf(q) * sin;
    k = k * cos + RotateHalf(k) * sin;
    if (cache) {
      cache->k[l].narrow(2, P, T).copy_(k);
      cache->v[l].narrow(2, P, T).copy_(v);
      k = cache->k[l].narrow(2, 0, L);
      v = cache->v[l].narrow(2, 0, L);
    }
    if (rep > 1) {
      k = k.unsqueeze(2).expand({B, nkv, rep, L, hd}).reshape({B, nh, L, hd});
      v = v.unsqueeze(2).expand({B, nkv, rep, L, hd}).reshape({B, nh, L, hd});
    }
    at::Tensor o = at::scaled_dot_product_attention(q, k, v, allowed, 0.0, /*is_causal=*/false, sm_scale);
    o = o.transpose(1, 2).reshape({B, T, qd});
    h = h + lora(at::linear(o, lw.o), o, lw, 3);
    x = RmsNorm(h, lw.post_norm, c.rms_norm_eps);
    auto gu = at::linear(x, lw.gate_up).split_with_sizes({I, I}, -1);  // one matmul for gate, up
    at::Tensor act = at::silu(lora(gu[0], x, lw, 4)) * lora(gu[1], x, lw, 5);
    h = h + lora(at::linear(act, lw.down), act, lw, 6);
  }
  if (cache) cache->len = L;
  return RmsNorm(h, Qwen3Impl::W(*this, "model.norm.weight"), c.rms_norm_eps);
}

// ---- LoRA management ----

void Qwen3Model::AddLora(const LoraConfig& cfg) {
  Qwen3Impl::CheckAlive(*this);
  active_ = MakeLoraAdapter(cfg_, cfg, device_);
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

void Qwen3Model::LoadAdapter(const std::string& dir) {
  Qwen3Impl::CheckAlive(*this);
  LoraAdapter loaded = LoadPeftAdapter(dir, cfg_, device_);
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

}  // namespace pg
