// LoRA linear with PEFT semantics (peft tuners/lora/layer.py; docs/references.md "PEFT LoRA").
#pragma once
#include <ATen/ATen.h>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace pg {

/// The seven decoder projections LoRA may target, in the decoder's order (index k of the per-layer
/// LoRA arrays and module stems: q, k, v, o, gate, up, down), each with its parent module. The one
/// list: the default targets, their validation, the PEFT module names and the decoder's weight
/// names all derive from it.
struct LoraProjection {
  const char* name;    // "q_proj"
  const char* parent;  // "self_attn" or "mlp"
};
constexpr int kNumProjections = 7;
inline constexpr LoraProjection kProjections[kNumProjections] = {
    {"q_proj", "self_attn"}, {"k_proj", "self_attn"}, {"v_proj", "self_attn"}, {"o_proj", "self_attn"},
    {"gate_proj", "mlp"},    {"up_proj", "mlp"},      {"down_proj", "mlp"},
};
/// The seven names in that order.
std::vector<std::string> AllProjectionNames();

/// LoRA hyper-parameters with PEFT semantics: scaling = alpha / r (rsLoRA: alpha / sqrt(r)).
struct LoraConfig {
  int64_t r = 8;
  double alpha = 16;
  double dropout = 0.0;
  bool use_rslora = false;
  std::vector<std::string> target_modules = AllProjectionNames();
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

/// What LoRA needs to know of the decoder it adapts (model/config.h LoraDims fills it from the
/// model config): the in / out features of the seven projections, the layer count, and whether the
/// attention has per-head q/k norms (part of the module names peft matches target_modules against).
struct LoraModelDims {
  std::string architecture;  // e.g. "Qwen3ForCausalLM", named in messages
  int64_t num_layers = 0;
  int64_t hidden_size = 0;
  int64_t q_size = 0;   // num_attention_heads * head_dim
  int64_t kv_size = 0;  // num_key_value_heads * head_dim
  int64_t intermediate_size = 0;
  bool qk_norm = false;
};

/// Whether `module` is one of kProjections, and its parent ("self_attn" / "mlp").
bool IsLoraTarget(const std::string& module);
const char* LoraParent(const std::string& module);

/// y = x W^T + scaling * B(A(dropout(x))).
/// x [..., in] in the model dtype; W [out, in] (frozen); A [r, in], B [out, r] float32.
/// Precision choice (same as peft's default `cast_input_dtype`): the LoRA branch runs in float32
/// (x is cast to float32), the base output is upcast, the sum is formed in float32 and cast back to
/// x's dtype. Matches peft in fp32 to rounding (base + scaling·lora is one fused add). Dropout (p = `dropout`) only when grad mode is on, and
/// only on the LoRA branch. Undefined A means "no adapter on this module" (plain linear).
at::Tensor LoraLinear(const at::Tensor& x, const at::Tensor& w, const at::Tensor& a, const at::Tensor& b, double scaling, double dropout);

/// The LoRA half of LoraLinear: returns base + scaling * B(A(dropout(x))) with the same precision
/// rules (float32 branch, float32 sum, cast back to base's dtype). `base` = x W^T computed by the
/// caller (e.g. a slice of a fused q/k/v or gate/up matmul).
/// `fp32_branch` false (and x not float32): the branch runs in x's dtype instead (A, B cast to it
/// per call; their grads still accumulate in float32), and the sum is formed in x's dtype — the
/// mixed-precision (autocast-like) variant: bf16 tensor-core matmuls, no float32 copy of x saved.
at::Tensor LoraAdd(const at::Tensor& base, const at::Tensor& x, const at::Tensor& a, const at::Tensor& b, double scaling, double dropout,
                   bool fp32_branch = true);

/// LoRA of projections that share their input x and whose base outputs are adjacent slices of one
/// fused matmul (q/k/v, gate/up): base [..., Σ out_k] = x [W_1; W_2; ...]^T. Returns
/// base + scaling · cat_k(B_k A_k x) along the last dim — the same value as LoraAdd on each slice
/// (same precision rules), with one matmul for all the A_k (concatenated, [Σ r_k, in]) and one
/// elementwise sum. No dropout: peft draws an independent dropout mask per module, so callers use
/// LoraAdd per module when dropout > 0. Every member must have an adapter (A, B defined).
at::Tensor LoraAddGroup(const at::Tensor& base, const at::Tensor& x, at::ArrayRef<std::pair<at::Tensor, at::Tensor>> ab, double scaling, bool fp32_branch);

/// Base projection and LoRA of projections sharing x in one autograd node: for members k with
/// base rows W_k (stacked in w [Σ out_k, in], frozen) returns x·wᵀ with scaling·(x·A_kᵀ)·B_kᵀ added
/// into each member's columns by the matmul itself (beta 1), so no LoRA output is materialised or
/// saved; backward accumulates the LoRA input gradient into the base one the same way. Same value
/// as at::linear(x, w) + LoraAddGroup in exact arithmetic; one rounding of each sum instead of two.
/// Requires A, B in x's dtype (the float32 model, or the model-dtype LoRA branch after the per-
/// forward cast). x [..., in] → [..., Σ out_k].
/// `dropout` p in [0, 1) (ArgError otherwise): each member's A sees its own dropout of x (peft's
/// one lora_dropout module per projection: mask m_k ~ Bernoulli(1 − p), x̃_k = x·m_k / (1 − p)),
/// drawn in member order with at::native_dropout as LoraAdd draws them, so the same masks as
/// LoraAdd per module from the same generator state. Saves each x̃_k and its bool
/// mask instead of x; backward sends member k's input gradient through its mask. Callers pass
/// p > 0 only where dropout applies (grad mode or a recomputation).
at::Tensor LoraLinearFused(const at::Tensor& x, const at::Tensor& w, at::ArrayRef<std::pair<at::Tensor, at::Tensor>> ab, double scaling, double dropout = 0.0);

/// While alive on this thread (a generate call: the adapter does not change during it), a
/// grad-free LoraAddGroup runs from a cache of the members' concatenated A ([Σ r_k, in]) and
/// block-diagonal B ([Σ out_k, Σ r_k], B_k at rows of member k and columns of its r_k), keyed by
/// the A / B tensors and their version counters (an in-place update or a new tensor misses):
/// xa = x·Aᵀ, then base + scaling·xa·B_bdᵀ in one addmm — 5 kernels per group instead of 9 in the
/// decode step (H200, 1.7B shapes, r 64, batch 64: +2.5% decode tokens/s). The zero
/// blocks add exact zeros, so only the GEMM's summation order differs from the per-member path
/// (float32 rounding). Only for decode-sized inputs (≤ 512 rows); not used with grad on, or
/// outside the scope (the serve engine's graphs outlive an adapter update, so they read the
/// weights themselves). The caches are per thread (a generate call runs on one worker thread;
/// its CUDA graphs read the cached tensors without holding them), and the thread's outermost
/// scope's end empties them (no device memory is held between calls; a concurrent call on
/// another model keeps its own). The same scope serves the low-precision branch's whole-adapter cast
/// (CachedAdapterCast). PAPERGYM_LORA_CACHE=0 turns both caches off (A/B).
class LoraInferenceCacheScope {
 public:
  LoraInferenceCacheScope();
  ~LoraInferenceCacheScope();
  LoraInferenceCacheScope(const LoraInferenceCacheScope&) = delete;
  LoraInferenceCacheScope& operator=(const LoraInferenceCacheScope&) = delete;

 private:
  bool prev_;
};

/// True while a LoraInferenceCacheScope is alive on this thread, grad mode is off and
/// PAPERGYM_LORA_CACHE is not "0" (read at each call: an in-process A/B switch for tests and
/// benchmarks).
bool LoraInferenceCacheActive();

/// Inside an active LoraInferenceCacheScope: `ad` with every A / B cast to `dtype`, made by `cast`
/// once per call and adapter state (keyed by the adapter's address, dtype, and every A / B tensor
/// and its version counter) instead of once per forward — the low-precision LoRA branch of a
/// decode step otherwise recasts the whole adapter every step (≈ 280 MB of float32 read at
/// Qwen3-1.7B, r 64), inside its CUDA graph too. The same cast, so the same values. The entry
/// lives until the outermost scope ends (a captured graph reads its tensors until then).
std::shared_ptr<const LoraAdapter> CachedAdapterCast(const LoraAdapter& ad, at::ScalarType dtype, const std::function<LoraAdapter()>& cast);

/// The cache behind CachedAdapterCast, for any value derived from an adapter (its cast, a model's
/// merged weights): made by `make` once per call and adapter state, keyed by (`owner`, `tag`, the
/// adapter's address, every A / B tensor and its version counter). Same lifetime as
/// CachedAdapterCast's entries. Call only while a LoraInferenceCacheScope is alive with grad off.
std::shared_ptr<const void> CachedAdapterDerived(const LoraAdapter& ad, const void* owner, int64_t tag,
                                                 const std::function<std::shared_ptr<const void>()>& make);

/// While alive on this thread with `on` (a generate call with `mergeAdapter`), forwards inside a
/// LoraInferenceCacheScope with grad off run from the adapter merged into the base weights,
/// W' = W + scaling · B·A formed in float32 and rounded once to the model dtype (PEFT's
/// merge_and_unload; the weights vLLM serves in TRL's GRPO), made once per call and adapter state
/// (CachedAdapterDerived) and freed when the call ends: no LoRA branch in the decode step (at
/// Qwen3-1.7B, r 64, batch 64 on an H200 the branch is ~25% of the bf16 step). One copy of the
/// targeted weights is held during the call. Outputs differ from the unmerged forward by the
/// rounding of W' (model dtype), so sampled ids may differ in bf16.
class LoraMergeScope {
 public:
  explicit LoraMergeScope(bool on);
  ~LoraMergeScope();
  LoraMergeScope(const LoraMergeScope&) = delete;
  LoraMergeScope& operator=(const LoraMergeScope&) = delete;

 private:
  bool prev_;
};

/// True while a LoraMergeScope(true) and a LoraInferenceCacheScope are alive on this thread and
/// grad mode is off (independent of PAPERGYM_LORA_CACHE).
bool LoraMergeActive();

/// While alive on this thread, LoraAdd applies its dropout even with grad mode off. Used by
/// activation recomputation (model/recompute.cc), whose first forward runs under no-grad but must
/// draw the same dropout masks as the recomputation in backward (same RNG state restored).
class LoraForceDropoutScope {
 public:
  LoraForceDropoutScope();
  ~LoraForceDropoutScope();
  LoraForceDropoutScope(const LoraForceDropoutScope&) = delete;
  LoraForceDropoutScope& operator=(const LoraForceDropoutScope&) = delete;

 private:
  bool prev_;
};

/// Whether LoraAdd applies a configured dropout now: grad mode on, or a LoraForceDropoutScope alive
/// on this thread. Forward passes without it (scoring, sampling, the reference policy) run the
/// adapter as with dropout 0, so they may take the grouped / fused LoRA paths.
bool LoraDropoutActive();

/// Whether the decoder applies LoRA dropout inside the fused base + LoRA node (LoraLinearFused with
/// p > 0: no LoRA output tensor, no separate sums, the SwiGLU kernel on gate / up) rather than per
/// module (LoraAdd). Same masks either way. On unless PAPERGYM_FUSED_LORA_DROPOUT=0, read at each
/// call (an A/B in one process).
bool LoraFusedDropoutEnabled();

/// Fresh adapter tensors for `cfg` over `model` (A ~ U(+-1/sqrt(in)) from a CPU generator seeded
/// with cfg.seed, walking modules in sorted-name order; B = 0), float32 on the model device,
/// requires_grad = true. ArgError on r < 1, alpha <= 0, dropout outside [0, 1) or unknown targets.
LoraAdapter MakeLoraAdapter(const LoraModelDims& mc, const LoraConfig& cfg, at::Device device);

/// Validates a LoraConfig (ArgError naming the field).
void ValidateLoraConfig(const LoraConfig& cfg);

/// Input / output feature sizes of a target module for this config.
std::pair<int64_t, int64_t> LoraModuleDims(const LoraModelDims& mc, const std::string& module);

}  // namespace pg
