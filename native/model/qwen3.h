// Qwen3 dense decoder (Hugging Face `Qwen3ForCausalLM`) with PEFT-style LoRA adapters.
// Source of the architecture: transformers models/qwen3/modeling_qwen3.py; facts in
// shared REFERENCES.md. This header is the contract between model/, lora/, io/, generate/, loss/
// and the training steps: keep signatures stable, extend rather than change.
#pragma once
#include <ATen/ATen.h>
#include <torch/types.h>

#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

namespace pg {

/// Parsed config.json of one of the decoder architectures this addon runs, each field defaulted as
/// the matching transformers config class does when the key is absent (Qwen3Config, Qwen2Config,
/// LlamaConfig; see model/config.h). The architectures differ only by the switches below: one
/// decoder implementation reads them (model/qwen3.cc), not one copy per architecture.
struct Qwen3Config {
  /// "Qwen3ForCausalLM", "Qwen2ForCausalLM" or "LlamaForCausalLM" (from `architectures`).
  std::string architecture = "Qwen3ForCausalLM";
  int64_t vocab_size = 0, hidden_size = 0, intermediate_size = 0, num_hidden_layers = 0;
  int64_t num_attention_heads = 0, num_key_value_heads = 0, head_dim = 0;
  /// The context limit: config.json max_position_embeddings, or with YaRN factor ×
  /// original_max_position_embeddings when that is larger (what vLLM derives as max_model_len).
  int64_t max_position_embeddings = 0;
  double rope_theta = 1e4, rms_norm_eps = 1e-6;
  bool tie_word_embeddings = false;
  // ---- per-architecture switches ----
  bool qk_norm = true;    // per-head RMSNorm of q and k before RoPE (Qwen3 only)
  bool qkv_bias = false;  // bias on q/k/v_proj (Qwen2 always; Qwen3/Llama: attention_bias)
  bool o_bias = false;    // bias on o_proj (Qwen3/Llama: attention_bias; Qwen2 never)
  bool mlp_bias = false;  // bias on gate/up/down_proj (Llama: mlp_bias)
  // ---- RoPE (transformers modeling_rope_utils.py) ----
  std::string rope_type = "default";  // "default", "yarn" or "llama3"
  double rope_factor = 1.0;           // yarn / llama3 `factor`
  int64_t rope_original_max_position_embeddings = 0;
  double yarn_attention_factor = 1.0;  // resolved (given, or from factor / mscale / mscale_all_dim)
  double yarn_beta_fast = 32, yarn_beta_slow = 1;
  bool yarn_truncate = true;
  double llama3_low_freq_factor = 1, llama3_high_freq_factor = 4;
  std::string torch_dtype;  // `dtype` (or legacy `torch_dtype`) as written in config.json, informational
  /// Fields absent from config.json that took the architecture's transformers default (named in
  /// shape-mismatch errors).
  std::vector<std::string> defaulted;
  std::string json;         // the raw config.json text (returned to JS as `config`)
};
/// LoRA hyper-parameters with PEFT semantics: scaling = alpha / r (rsLoRA: alpha / sqrt(r)).
struct LoraConfig {
  int64_t r = 8;
  double alpha = 16;
  double dropout = 0.0;
  bool use_rslora = false;
  std::vector<std::string> target_modules{"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"};
  uint64_t seed = 0;  // init seed for A (kaiming-uniform a=sqrt(5), i.e. U(+-1/sqrt(in))); B = 0
  /// As read from a loaded adapter_config.json (peft regex keys -> per-module r / alpha, in file
  /// order); written back unchanged on save. Empty for adapters made by AddLora.
  std::vector<std::pair<std::string, int64_t>> rank_pattern;
  std::vector<std::pair<std::string, double>> alpha_pattern;
  double Scaling() const;
};

/// One adapter: for each targeted module name (PEFT key stem, e.g.
/// "model.layers.3.self_attn.q_proj") the pair A [r, in], B [out, r] in float32 on the model device.
struct LoraAdapter {
  LoraConfig config;
  std::map<std::string, std::pair<at::Tensor, at::Tensor>> weights;
  /// Per-module scaling where it differs from config.Scaling() (peft rank_pattern / alpha_pattern:
  /// alpha_m / r_m, or alpha_m / sqrt(r_m) with rsLoRA), keyed like `weights`.
  std::map<std::string, double> scaling;
  int64_t num_layers = 0;  // decoder layers of the model it was made for (saving: uniform targets)
  double ScalingOf(const std::string& module) const {
    auto it = scaling.find(module);
    return it == scaling.end() ? config.Scaling() : it->second;
  }
};

/// Which adapter a forward uses: the trainable one, none (the frozen base = reference policy /
/// judge), or a named frozen snapshot.
struct AdapterSel {
  enum Kind { Active, None, Snapshot } kind = Active;
  std::string name;  // for Snapshot
};

/// Per-layer key/value cache for incremental decoding. k[l], v[l]: [B, n_kv_heads, L_max, head_dim]
/// preallocated; `len` = filled positions (same for all rows; padding handled by the mask).
struct KVCache {
  std::vector<at::Tensor> k, v;
  int64_t len = 0;
  int64_t capacity = 0;
};

class Qwen3Model {
 public:
  /// Loads `dir`/config.json + safetensors (model.safetensors or model.safetensors.index.json).
  /// Throws pg::InputError naming the file / tensor on any problem; pg::ArgError on bad options.
  static std::shared_ptr<Qwen3Model> Load(const std::string& dir, at::Device device, at::ScalarType dtype);

  const Qwen3Config& config() const { return cfg_; }
  at::Device device() const { return device_; }
  at::ScalarType dtype() const { return dtype_; }

  /// Decoder forward. input_ids [B, T] int64; attention_mask [B, P + T] (1 keep, 0 pad) over the
  /// cached prefix P = cache ? cache->len : 0 plus the new tokens; position_ids [B, T] int64 (when
  /// undefined: cumsum(mask) - 1 clamped at 0, so right and left padding both work). Appends the
  /// new K/V to `cache` when given. Returns the final-norm hidden states [B, T, H] in the model
  /// dtype. Grad flows only into the LoRA A/B of `sel` when grad mode is on.
  at::Tensor Forward(const at::Tensor& input_ids, const at::Tensor& attention_mask,
                     const std::optional<at::Tensor>& position_ids, const AdapterSel& sel,
                     KVCache* cache = nullptr);
  /// lm_head weight [V, H] (the embedding when tied); never requires grad.
  at::Tensor LmHeadWeight() const;
  /// hidden [..., H] -> logits [..., V] in float32 (matmul in the model dtype, fp32 accumulate).
  at::Tensor Logits(const at::Tensor& hidden) const;
  /// Allocates an empty cache for `batch` rows and up to `capacity` positions.
  KVCache NewCache(int64_t batch, int64_t capacity) const;
  /// One decode step with static shapes (CUDA-graph capturable: no host syncs, no host-side
  /// cache length, shapes independent of the step). All tensors on the model device:
  ///   ids  [B, 1] int64   the new token of each row;
  ///   pos  [B] int64      its position id (RoPE);
  ///   slot [1] (or []) int64  the cache index the new K/V go to (same for every row);
  ///   keep [B, C] bool    which cache slots each row may attend to, C = cache.capacity. Updated
  ///                       IN PLACE: keep[:, slot] = true before attending (so every row, padded
  ///                       ones included, has at least one key and no NaN appears);
  ///   cache               k/v [B, n_kv, C, head_dim] from NewCache(B, C); written at `slot` with
  ///                       index_copy_; cache.len is neither read nor changed.
  /// Attends over all C slots with the boolean mask (GQA without repeated K/V: the query heads of
  /// one KV head become the query-length axis, as Forward does for one-token steps). The same
  /// decoder as Forward (one layer implementation; only where K/V are written and which keys are
  /// attended differ), so for a row whose `keep` equals Forward's attention mask the logits agree
  /// to rounding, with bf16 rounded at the same points. Does not advance pos or
  /// slot. Returns logits [B, V] float32. ArgError on shape / dtype / device mismatches.
  at::Tensor DecodeStatic(const at::Tensor& ids, const at::Tensor& pos, const at::Tensor& slot, const at::Tensor& keep,
                          const AdapterSel& sel, KVCache& cache);

  // ---- LoRA ----
  /// Creates the trainable adapter (replaces an existing one).
  void AddLora(const LoraConfig& cfg);
  bool HasLora() const { return active_.has_value(); }
  const LoraAdapter& ActiveAdapter() const;
  /// Trainable tensors in a stable order (sorted module name, A then B); requires_grad = true.
  std::vector<at::Tensor> LoraParameters() const;
  std::vector<std::string> LoraParameterNames() const;  // PEFT keys, same order
  /// Frozen deep copy of the active adapter under `name` (e.g. the stage-start reference policy).
  void SnapshotAdapter(const std::string& name);
  void DropSnapshot(const std::string& name);
  /// Snapshot `name`, or nullptr: for in-place native updates (EMA) and checkpoint I/O
  /// (lora/snapshots.h, napi/adapter_state.cc).
  LoraAdapter* FindSnapshot(const std::string& name) {
    auto it = snapshots_.find(name);
    return it == snapshots_.end() ? nullptr : &it->second;
  }
  /// Installs `s` as snapshot `name` (replacing one of that name); the tensors must not require grad.
  void SetSnapshot(const std::string& name, LoraAdapter s) { snapshots_[name] = std::move(s); }
  /// Default for AdapterSel::Active forwards: false makes Active behave like None.
  void SetAdapterEnabled(bool on) { adapter_enabled_ = on; }
  bool AdapterEnabled() const { return adapter_enabled_; }
  /// Saves / loads PEFT format (adapter_model.safetensors + adapter_config.json). LoadAdapter
  /// copies into the existing LoRA tensors in place when the module set and shapes match (so
  /// optimizer references stay valid), otherwise replaces the active adapter.
  void SaveAdapter(const std::string& dir, const std::string& base_model_name) const;
  void LoadAdapter(const std::string& dir);

  /// Activation recomputation per decoder layer (gradient checkpointing). When on, training
  /// forwards (grad mode on, no KV cache, a trainable adapter selected) run each decoder layer
  /// under no-grad, keep only the layer input [B, T, H], and recompute the layer with grad during
  /// backward (LoRA dropout masks reproduced by saving/restoring the RNG state). Gradients equal
  /// those without recomputation; activation memory drops from O(layers * per-layer activations)
  /// to O(layers * B*T*H + one layer's activations), at the cost of one extra layer forward.
  void SetGradientCheckpointing(bool on) { recompute_ = on; }
  bool GradientCheckpointing() const { return recompute_; }

  /// Precision of the LoRA branch in bf16/fp16 models: true (default, peft's semantics) = float32
  /// branch; false = the model dtype (tensor-core matmuls, A/B cast per forward, float32 grads;
  /// like autocast). No effect on float32 models.
  void SetLoraFloat32Branch(bool on) { lora_fp32_ = on; }
  bool LoraFloat32Branch() const { return lora_fp32_; }

  /// Serialises every operation on this model (generation, forward, training steps).
  std::mutex& mutex() { return mu_; }
  /// Bytes held by base weights + adapters (for V8 external memory accounting).
  int64_t ParameterBytes() const;
  /// Frees all tensors; later calls throw InputError("model was disposed").
  void Dispose();
  bool disposed() const { return disposed_; }

 private:
  Qwen3Model() = default;
  Qwen3Config cfg_;
  at::Device device_{at::kCPU};
  at::ScalarType dtype_ = at::kFloat;
  std::map<std::string, at::Tensor> w_;  // HF names, no grad (q/k/v and gate/up are row views of the fused tensors below)
  /// Per-layer weights for the forward: fused [q; k; v] and [gate; up] projections (one matmul
  /// each; the per-module tensors in w_ are views into them, so no extra memory) and the LoRA
  /// module stems of the seven projections.
  struct LayerWeights {
    at::Tensor in_norm, post_norm, qkv, o, q_norm, k_norm, gate_up, down;
    /// Biases (undefined when the architecture's switches say none): fused [q; k; v], o, fused
    /// [gate; up], down. q_norm / k_norm are undefined without q/k norm (Qwen2, Llama).
    at::Tensor qkv_b, o_b, gate_up_b, down_b;
    std::string stem[7];  // q, k, v, o, gate, up, down: "model.layers.{i}.self_attn.q_proj", ...
  };
  std::vector<LayerWeights> layers_;
  /// RoPE inverse frequencies [head_dim / 2] float32 on the model device and the factor on cos / sin
  /// (YaRN attention factor; 1 otherwise), from RopeInvFreq (model/config.h) at load.
  at::Tensor rope_inv_freq_;
  double rope_scale_ = 1.0;
  std::optional<LoraAdapter> active_;
  std::map<std::string, LoraAdapter> snapshots_;
  bool adapter_enabled_ = true;
  bool disposed_ = false;
  bool recompute_ = false;
  bool lora_fp32_ = true;
  std::mutex mu_;
  friend class Qwen3Impl;
};

}  // namespace pg
