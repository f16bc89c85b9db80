// config.json parsing for the decoder architectures (model/architecture.h: Qwen3, Qwen2 / Qwen2.5,
// Llama 3.x).
#pragma once
#include <ATen/ATen.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "lora/lora.h"
#include "model/architecture.h"

namespace pg {

/// Parsed config.json of one of the decoder architectures this addon runs, each field defaulted as
/// the matching transformers config class does when the key is absent (the architecture's row in
/// model/architecture.h). The architectures differ only by the switches below: one decoder
/// implementation reads them (model/decoder.cc), not one copy per architecture.
struct DecoderConfig {
  /// The architecture's row (model/arch_*.cc); never null after ParseDecoderConfig.
  const ArchitectureSpec* spec = nullptr;
  /// Its name, e.g. "Qwen3ForCausalLM" (from `architectures`).
  std::string architecture;
  int64_t vocab_size = 0, hidden_size = 0, intermediate_size = 0, num_hidden_layers = 0;
  int64_t num_attention_heads = 0, num_key_value_heads = 0, head_dim = 0;
  /// The context limit: config.json max_position_embeddings, or with YaRN factor ×
  /// original_max_position_embeddings when that is larger (what vLLM derives as max_model_len).
  int64_t max_position_embeddings = 0;
  double rope_theta = 1e4, rms_norm_eps = 1e-6;
  bool tie_word_embeddings = false;
  // ---- per-architecture switches (resolved from the spec's rules and config.json) ----
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
  std::string json;  // the raw config.json text (returned to JS as `config`)
};
/// Parses `text` (the contents of `path`, used in messages) into a DecoderConfig.
/// `architectures` must contain a registered architecture (model/architecture.h: Qwen3ForCausalLM,
/// Qwen2ForCausalLM or LlamaForCausalLM; InputError naming the file and the architectures found
/// otherwise). Every absent field takes the default of
/// the transformers 5 config class of that architecture (Qwen3Config: head_dim 128, vocab 151936,
/// hidden 4096, intermediate 22016, 32 layers, 32 heads, 32 kv heads, max_position_embeddings
/// 32768; Qwen2Config: the same but head_dim = hidden / heads; LlamaConfig: vocab 32000,
/// intermediate 11008, kv heads = heads, head_dim = hidden / heads, max_position_embeddings 2048;
/// all: rms_norm_eps 1e-6, rope_theta 10000, tie_word_embeddings false, attention_bias / mlp_bias
/// false). Switches: Qwen3 has q/k norm (and q/k/v/o bias when attention_bias); Qwen2 always has
/// q/k/v bias and no o bias; Llama has q/k/v/o bias when attention_bias and gate/up/down bias when
/// mlp_bias. RoPE: `rope_scaling` (transformers 4) or `rope_parameters` (transformers 5; the former
/// wins when both are non-empty, as transformers does) of rope_type "default", "yarn" or "llama3";
/// other types, partial_rotary_factor != 1 and sliding-window layers (use_sliding_window with
/// max_window_layers < num_hidden_layers, or layer_types naming sliding_attention) are refused.
DecoderConfig ParseDecoderConfig(const std::string& text, const std::string& path);

/// RoPE inverse frequencies [head_dim / 2] float32 (CPU) and the attention scaling that multiplies
/// cos / sin, computed with the float32 tensor ops of transformers' modeling_rope_utils.py:
/// default (inv_freq = 1 / theta^(2i/d)), yarn (_compute_yarn_parameters: NTK-by-parts ramp between
/// interpolated and extrapolated frequencies, beta_fast / beta_slow correction range, attention
/// factor 0.1·ln(factor) + 1 unless given; Peng et al. 2023, "YaRN", Eq. 19-22) and llama3
/// (_compute_llama3_parameters: low / high frequency wavelength bands and smooth interpolation).
std::pair<at::Tensor, double> RopeInvFreq(const DecoderConfig& c);

/// The decoder dimensions LoRA and the PEFT loader need (lora/lora.h LoraModelDims) for this config.
LoraModelDims LoraDims(const DecoderConfig& c);
}  // namespace pg
