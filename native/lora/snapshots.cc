#include "lora/snapshots.h"

#include "core/errors.h"

namespace pg {
namespace lora {

namespace {

/// s ← round_f32(fl64(fl64(d·s) + fl64(w·a))), w = 1 − d: separate kernels, so no fused
/// multiply-add merges a product into the sum.
void Blend(const at::Tensor& s, const at::Tensor& a, double d, double w) {
  at::Tensor t = s.to(at::kDouble, /*non_blocking=*/false, /*copy=*/true).mul_(d);
  t.add_(a.detach().to(s.device(), at::kDouble, /*non_blocking=*/false, /*copy=*/true).mul_(w));
  s.copy_(t);
}

}  // namespace

std::string ParameterKey(const std::string& stem, bool b) {
  return "base_model.model." + stem + (b ? ".lora_B.weight" : ".lora_A.weight");
}

void EmaUpdate(ModuleWeights& snapshot, const ModuleWeights& active, double decay) {
  if (!(decay >= 0 && decay <= 1)) throw ArgError("EMA decay must be in [0, 1], got " + std::to_string(decay));
  if (snapshot.size() != active.size())
    throw InputError("EMA update: the snapshot has " + std::to_string(snapshot.size()) + " LoRA modules, the active adapter " + std::to_string(active.size()));
  for (const auto& [stem, s] : snapshot) {
    auto it = active.find(stem);
    if (it == active.end()) throw InputError("EMA update: the active adapter has no module '" + stem + "'");
    if (!s.first.sizes().equals(it->second.first.sizes()) || !s.second.sizes().equals(it->second.second.sizes()))
      throw InputError("EMA update: module '" + stem + "' has A " + c10::str(s.first.sizes()) + ", B " + c10::str(s.second.sizes()) +
                       " in the snapshot but A " + c10::str(it->second.first.sizes()) + ", B " + c10::str(it->second.second.sizes()) +
                       " in the active adapter");
  }
  at::NoGradGuard ng;
  const double w = 1.0 - decay;
  for (auto& [stem, s] : snapshot) {
    const auto& a = active.at(stem);
    Blend(s.first, a.first, decay, w);
    Blend(s.second, a.second, decay, w);
  }
}

}  // namespace lora
}  // namespace pg
