// PEFT-format LoRA adapters (DESIGN.md §3; REFERENCES.md "PEFT LoRA"): a directory with
// adapter_model.safetensors (keys base_model.model.model.layers.{i}.{self_attn|mlp}.{mod}.lora_{A,B}.weight,
// A [r, in], B [out, r], float32, __metadata__ {"format": "pt"}) and adapter_config.json.
#pragma once
#include <string>

#include "model/qwen3.h"

namespace pg {

/// Writes `ad` to `dir` (created if missing). Both files are written atomically (temp + rename).
/// adapter_config.json holds peft_type LORA, task_type CAUSAL_LM, base_model_name_or_path, r,
/// lora_alpha, lora_dropout, target_modules (sorted list), bias "none", use_rslora,
/// init_lora_weights true, fan_in_fan_out false, use_dora false, modules_to_save null, plus
/// inference_mode/layers_to_transform/layers_pattern/rank_pattern/alpha_pattern defaults.
/// Throws InputError naming the path on I/O failure.
void SavePeftAdapter(const std::string& dir, const LoraAdapter& ad, const std::string& base_model_name);

/// Reads a PEFT LoRA adapter for a model with config `mc` onto `device` (float32,
/// requires_grad = true). Validates: peft_type LORA; r >= 1; lora_alpha > 0; target_modules (list,
/// or a single module name) among the seven projections; bias "none"; no DoRA; no
/// modules_to_save; no rank/alpha patterns; fan_in_fan_out false; every key is a lora_A/lora_B of
/// a targeted module of an existing layer, A [r, in] and B [out, r]; every targeted module of
/// every layer (or of `layers_to_transform`) has both. Errors are InputError naming file and key.
LoraAdapter LoadPeftAdapter(const std::string& dir, const Qwen3Config& mc, at::Device device);

}  // namespace pg
