// PEFT-format LoRA adapters (docs/design.md §3; docs/references.md "PEFT LoRA"): a directory with
// adapter_model.safetensors (keys base_model.model.model.layers.{i}.{self_attn|mlp}.{mod}.lora_{A,B}.weight,
// A [r, in], B [out, r], float32, __metadata__ {"format": "pt"}) and adapter_config.json.
#pragma once
#include <string>

#include <ATen/ATen.h>

#include "io/finite.h"
#include "lora/lora.h"

namespace pg {

/// Writes `ad` to `dir` (created if missing). Both files are written atomically (temp + rename).
/// adapter_config.json holds what vLLM's PEFTHelper and peft's LoraConfig read: peft_type LORA,
/// task_type CAUSAL_LM, base_model_name_or_path, r, lora_alpha, lora_dropout, use_rslora, bias
/// "none", modules_to_save null, use_dora false, and target_modules as a plain list: the sorted
/// short names when every layer has the same adapted projections, else the sorted full module
/// names (peft matches those exactly), so the file describes exactly the modules the weights cover.
/// rank_pattern / alpha_pattern of a loaded adapter are written back unchanged (vLLM applies one
/// r / alpha to every module and does not read them). Throws InputError naming the path on I/O failure.
void SavePeftAdapter(const std::string& dir, const LoraAdapter& ad, const std::string& base_model_name);

/// Reads a PEFT LoRA adapter for a model of dimensions `mc` (model/config.h LoraDims) onto `device` (float32, requires_grad =
/// true), selecting modules as peft 0.21 does (tuners_utils.check_target_module_exists) over the
/// decoder's module names (model.layers.{i}.self_attn.q_proj, ...):
///   - exclude_modules: a string is a full regex match, a list matches a name exactly or as a
///     dotted suffix; an excluded module is never adapted;
///   - target_modules: a string is a full regex match ("all-linear" = the seven projections); a list
///     matches exactly or as a dotted suffix, and only for suffix matches layers_to_transform (an int
///     or a list) keeps the layer index read by layers_pattern (a regex or list; default: the first
///     numbered path segment). layers_to_transform / layers_pattern with a regex target, or
///     layers_pattern without layers_to_transform, are refused as peft refuses them;
///   - rank_pattern / alpha_pattern: per module, the first key K (file order) whose
///     `(.*\.)?(K)` fully matches the module name gives its r / alpha (peft get_pattern_key);
///     scaling alpha / r, or alpha / sqrt(r) with use_rslora.
/// Absent fields take peft's LoraConfig defaults (r 8, lora_alpha 8, lora_dropout 0). Python regex
/// syntax is read by std::regex (ECMAScript; named groups (?P<..>) accepted); an unsupported
/// construct is an InputError naming the field. Refused, naming the field: bias other than "none",
/// use_dora, modules_to_save, fan_in_fan_out, lora_bias, target_parameters, layer_replication,
/// trainable_token_indices, alora_invocation_tokens, use_qalora and the other non-LoRA variants; a
/// target that selects a module other than the seven projections (embeddings, lm_head, norms); a
/// config that selects no module. Weights: every key must be a lora_A / lora_B of a selected
/// module with A [r_m, in], B [out, r_m]; a selected module without both, or weights of a module
/// the config does not select, is an InputError naming both files and the module. A lora_A /
/// lora_B holding NaN or Inf is an InputError naming the file and the tensors (io/finite.h),
/// unless `non_finite.allow` (then its `warning` says which).
LoraAdapter LoadPeftAdapter(const std::string& dir, const LoraModelDims& mc, at::Device device, NonFiniteWeights& non_finite);

}  // namespace pg
