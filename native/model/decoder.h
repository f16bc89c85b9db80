// The decoder (Hugging Face `Qwen3ForCausalLM`, `Qwen2ForCausalLM`, `LlamaForCausalLM`: one
// implementation, the architectures' differences read from their rows in model/architecture.h)
// with PEFT-style LoRA adapters. Source of the architecture: transformers
// models/qwen3/modeling_qwen3.py (and qwen2 / llama); facts in docs/references.md. This header is
// the contract between model/ and its users (generate/, steps/, the bindings in napi/): keep
// signatures stable, extend rather than change. The config type lives in model/config.h, the
// weights' layout in model/weights.h, the LoRA types in lora/lora.h.
#pragma once
#include <ATen/ATen.h>
#include <torch/types.h>

#include <map>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <optional>
#include <string>
#include <vector>

#include "io/finite.h"
#include "lora/lora.h"
#include "model/config.h"
#include "model/weights.h"

namespace pg {

/// Per-layer key/value cache for incremental decoding. k[l], v[l]: [B, n_kv_heads, L_max, head_dim]
/// preallocated; `len` = filled positions (same for all rows; padding handled by the mask).
struct KVCache {
  std::vector<at::Tensor> k, v;
  int64_t len = 0;
  int64_t capacity = 0;
};

class DecoderModel {
 public:
  /// Loads `dir`/config.json + safetensors (model.safetensors or model.safetensors.index.json).
  /// Throws pg::InputError naming the file / tensor on any problem; pg::ArgError on bad options.
  /// Weights holding NaN or Inf once on the device in `dtype` are an InputError naming the shard
  /// and the tensors unless `non_finite.allow` (then non_finite.warning says which; io/finite.h).
  static std::shared_ptr<DecoderModel> Load(const std::string& dir, at::Device device, at::ScalarType dtype, NonFiniteWeights& non_finite);

  const DecoderConfig& config() const { return cfg_; }
  at::Device device() const { return device_; }
  at::ScalarType dtype() const { return dtype_; }

  /// Decoder forward. input_ids [B, T] int64; attention_mask [B, P + T] (1 keep, 0 pad) over the
  /// cached prefix P = cache ? cache->len : 0 plus the new tokens; position_ids [B, T] int64 (when
  /// undefined: cumsum(mask) - 1 clamped at 0, so right and left padding both work). Appends the
  /// new K/V to `cache` when given. Returns the final-norm hidden states [B, T, H] in the model
  /// dtype. Grad flows only into the LoRA A/B of `sel` when grad mode is on.
  at::Tensor Forward(const at::Tensor& input_ids, const at::Tensor& attention_mask, const std::optional<at::Tensor>& position_ids, const AdapterSel& sel,
                     KVCache* cache = nullptr);
  /// Decoder forward of B rows that all continue one shared prefix, without copying it per row:
  /// input_ids [B, T] int64, each row right-padded to T; lengths [B] (int, each in [1, T]) its real
  /// tokens; `prefix` a one-row cache (NewCache(1, ..)) filled by Forward with P = prefix.len
  /// positions, the first `prefix_pad` of them left padding (masked in that Forward). Row b's token
  /// i sits at position (P − prefix_pad) + i and attends to the prefix's real slots and its own
  /// tokens up to i — what Forward gives for that row with the prefix's K/V copied into a B-row
  /// cache, as one softmax split in two and merged by log-sum-exp (KvAttention::SharedPrefix:
  /// flash kernels on CUDA bf16 / fp16 and on the CPU, float32 matmuls otherwise). Inference only
  /// (call under no-grad); the new K/V are not stored. Returns the final-norm hidden states
  /// [B, T, H] in the model dtype (rows' padded positions meaningless). ArgError on shape
  /// mismatches, a prefix of another model or no real prefix position.
  at::Tensor ForwardSharedPrefix(const at::Tensor& input_ids, const at::Tensor& lengths, const KVCache& prefix, int64_t prefix_pad,
                                 const AdapterSel& sel) const;
  /// Whether ForwardSharedPrefix's softmax sides run on flash kernels for a model on `dev` with
  /// this dtype and head size: CUDA bf16 / fp16 (ATen's FlashAttention-2 op; false from the first
  /// call it refused, e.g. on a GPU below sm 80) or CPU float32 / bf16 / fp16 (ATen's CPU flash
  /// op), head_dim a multiple of 8 up to 256. Elsewhere it runs float32 matmuls.
  static bool SharedPrefixFlash(const at::Device& dev, at::ScalarType dtype, int64_t head_dim);
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
  ///   live_start [B] int32 (optional): when every row's kept slots are exactly [live_start[b],
  ///                       slot] (a left-padded prompt, then the decoded tokens), the attention
  ///                       reads only those slots with the live-KV kernel (LiveKvDecodeAttention:
  ///                       CUDA, own kernels compiled in) instead of masking all C — the cost then
  ///                       follows the live length, not the capacity. The masked path elsewhere.
  ///                       A row with live_start > slot (finished; its output is ignored) reads
  ///                       no KV on the kernel path.
  ///   prompt_group, prompt_end (with live_start): rows [g·prompt_group, (g + 1)·prompt_group)
  ///                       hold the same K/V in every live slot before prompt_end (the n
  ///                       completions of one prompt, copied from one prefill); the live-KV kernel
  ///                       then reads one copy for the group there (LiveKvDecodeAttention).
  ///                       prompt_group < 2: none.
  at::Tensor DecodeStatic(const at::Tensor& ids, const at::Tensor& pos, const at::Tensor& slot, const at::Tensor& keep, const AdapterSel& sel, KVCache& cache,
                          const at::Tensor& live_start = at::Tensor(), int64_t prompt_group = 0, int64_t prompt_end = 0);

  // ---- LoRA ----
  /// Creates the trainable adapter (replaces an existing one).
  void AddLora(const LoraConfig& cfg);
  bool HasLora() const { return active_.has_value(); }
  /// Whether forwards with `sel` run an adapter with weights (the active one while enabled, or the
  /// snapshot; ArgError for a snapshot name that does not exist, as the forwards raise).
  bool SelectsAdapter(const AdapterSel& sel) const;
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
  /// Non-finite lora_A / lora_B: as Load (InputError, or the warning when allowed).
  void LoadAdapter(const std::string& dir, NonFiniteWeights& non_finite);

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

  /// The model's lock. Held exclusively by every operation that may change the model or that
  /// records autograd state (training steps, adapter and weight changes, dispose, the step-wise
  /// engine); held shared by the read-only inference calls (generate, sequenceLogprobs,
  /// prefixLogprobs: no grad, weights and adapters only read, their caches per thread), so a judge
  /// can score on one worker thread while another decodes (each on its own CUDA stream).
  std::shared_mutex& mutex() { return mu_; }
  /// Bytes held by base weights + adapters (for V8 external memory accounting).
  int64_t ParameterBytes() const;
  /// Frees all tensors; later calls throw DisposedError("model was disposed").
  void Dispose();
  bool disposed() const { return disposed_; }

 private:
  DecoderModel() = default;
  DecoderConfig cfg_;
  at::Device device_{at::kCPU};
  at::ScalarType dtype_ = at::kFloat;
  std::map<std::string, at::Tensor> w_;  // HF names, no grad (q/k/v and gate/up are row views of the fused tensors below)
  /// Per-layer weights for the forward (model/weights.h: fused projections, LoRA module stems).
  using LayerWeights = DecoderLayerWeights;
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
  std::shared_mutex mu_;
  friend class DecoderImpl;
};

}  // namespace pg
