// config.json parsing for the decoder architectures (Qwen3, Qwen2 / Qwen2.5, Llama 3.x).
#pragma once
#include <ATen/ATen.h>

#include <string>
#include <utility>

#include "model/qwen3.h"

namespace pg {
/// Parses `text` (the contents of `path`, used in messages) into a Qwen3Config.
/// `architectures` must contain Qwen3ForCausalLM, Qwen2ForCausalLM or LlamaForCausalLM (InputError
/// naming the file and the architectures found otherwise). Every absent field takes the default of
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
Qwen3Config ParseQwen3Config(const std::string& text, const std::string& path);

/// RoPE inverse frequencies [head_dim / 2] float32 (CPU) and the attention scaling that multiplies
/// cos / sin, computed with the float32 tensor ops of transformers' modeling_rope_utils.py:
/// default (inv_freq = 1 / theta^(2i/d)), yarn (_compute_yarn_parameters: NTK-by-parts ramp between
/// interpolated and extrapolated frequencies, beta_fast / beta_slow correction range, attention
/// factor 0.1·ln(factor) + 1 unless given; Peng et al. 2023, "YaRN", Eq. 19-22) and llama3
/// (_compute_llama3_parameters: low / high frequency wavelength bands and smooth interpolation).
std::pair<at::Tensor, double> RopeInvFreq(const Qwen3Config& c);
}  // namespace pg
