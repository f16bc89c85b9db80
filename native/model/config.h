// config.json parsing for Qwen3Config.
#pragma once
#include <string>

#include "model/qwen3.h"

namespace pg {
/// Parses `text` (the contents of `path`, used in messages) into a Qwen3Config.
/// Requires `architectures` to contain "Qwen3ForCausalLM" (InputError naming the file and the
/// architectures found otherwise), positive vocab/hidden/intermediate/layers/heads, heads divisible
/// by key/value heads. head_dim is read from the file (falls back to hidden/heads only when the key
/// is absent, as transformers does); rope_theta also accepts `rope_parameters.rope_theta`.
Qwen3Config ParseQwen3Config(const std::string& text, const std::string& path);
}  // namespace pg
