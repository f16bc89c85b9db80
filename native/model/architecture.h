// One row per decoder architecture this addon runs: the transformers config class's defaults, the
// switches the one decoder (model/decoder.h) reads, and what the architecture refuses. The rows
// live one per file (model/arch_<name>.cc); the registry (model/architecture.cc) lists them.
// Adding an architecture that this decoder can run = one arch_<name>.cc with its row + one
// entry in PG_ARCHITECTURES (docs/design.md "Extending").
#pragma once
#include <cstdint>
#include <string>

namespace pg {

struct ArchitectureSpec {
  /// The `architectures` entry of config.json, e.g. "Qwen3ForCausalLM".
  const char* name;
  /// The transformers config class, named in messages about defaulted fields, e.g. "Qwen3Config".
  const char* config_class;
  /// The config class's defaults for absent fields (transformers 5). head_dim 0 = hidden_size /
  /// num_attention_heads; kv_heads 0 = num_attention_heads.
  struct Defaults {
    int64_t vocab, hidden, intermediate, layers, heads, kv_heads, head_dim, max_pos;
  } defaults;
  /// Per-head RMSNorm of q and k before RoPE (q_norm / k_norm weights).
  bool qk_norm;
  /// Where one bias switch comes from: never, always, or a boolean config.json field (absent or
  /// null = false). Named in the message for an unexpected bias tensor.
  struct Bias {
    enum Kind { Never, Always, Field } kind;
    const char* field;  // for Field
  };
  Bias qkv_bias;  // q/k/v_proj
  Bias o_bias;    // o_proj
  Bias mlp_bias;  // gate/up/down_proj
  /// Whether config.json's sliding-window keys apply (use_sliding_window, sliding_window,
  /// max_window_layers, layer_types; Qwen2Config / Qwen3Config). A config whose layers would use
  /// sliding-window attention is refused.
  bool sliding_window_keys;
};

/// The registered row named `name`, or nullptr.
const ArchitectureSpec* FindArchitecture(const std::string& name);
/// The registered names for messages: "A, B and C".
std::string ArchitectureNames();

}  // namespace pg
