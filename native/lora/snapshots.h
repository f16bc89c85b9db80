// Adapter snapshots as tensors on the model's device: the EMA teacher update (the snapshot's
// safetensors file: io/adapter_weights.h). No JS copies: the binding (napi/adapter_state.cc) calls these on the model's
// own tensors under the model lock.
#pragma once
#include <ATen/ATen.h>

#include <map>
#include <string>
#include <utility>

namespace pg {
namespace lora {

/// The tensors of one adapter: module stem ("model.layers.3.self_attn.q_proj") → (A [r, in],
/// B [out, r]), float32 (the layout of LoraAdapter::weights).
using ModuleWeights = std::map<std::string, std::pair<at::Tensor, at::Tensor>>;

/// PEFT parameter key of a module's A (`b` false) or B: "base_model.model.<stem>.lora_A.weight" /
/// ".lora_B.weight" (the keys of adapter_model.safetensors and of Model.loraWeights()).
std::string ParameterKey(const std::string& stem, bool b);

/// EMA of a snapshot toward the active adapter, in place: s ← d·s + (1 − d)·a for every element
/// (exponential moving average teacher; decay d in [0, 1], ArgError otherwise). `snapshot` and
/// `active` must hold the same modules with the same shapes (InputError naming the module
/// otherwise; nothing is changed then). Arithmetic: the two products and the sum in float64, one
/// rounding to float32 (round to nearest even) at the store — the same operations, in the same
/// order, as the formula evaluated on JS numbers and stored into a Float32Array, so the result is
/// identical to it bit for bit. Runs on the tensors' device (float64 temporaries one module at a
/// time); no host copies.
void EmaUpdate(ModuleWeights& snapshot, const ModuleWeights& active, double decay);

}  // namespace lora
}  // namespace pg
