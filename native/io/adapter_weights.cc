#include "io/adapter_weights.h"

#include <set>

#include "core/errors.h"
#include "io/safetensors.h"

namespace pg {
namespace io {

using lora::ParameterKey;

void SaveWeights(const std::string& path, const ModuleWeights& w, const std::map<std::string, std::string>& metadata) {
  std::map<std::string, at::Tensor> ts;
  for (const auto& [stem, ab] : w) {
    ts[ParameterKey(stem, false)] = ab.first.detach().to(at::kFloat);
    ts[ParameterKey(stem, true)] = ab.second.detach().to(at::kFloat);
  }
  st::Save(path, ts, metadata);
}

ModuleWeights ReadWeightsLike(const std::string& path, const ModuleWeights& like) {
  auto f = st::File::Open(path);
  std::set<std::string> expected;
  ModuleWeights out;
  for (const auto& [stem, ab] : like) {
    at::Tensor got[2];
    for (int b = 0; b < 2; ++b) {
      const std::string key = ParameterKey(stem, b == 1);
      expected.insert(key);
      if (!f.Has(key)) throw InputError(path + ": no tensor '" + key + "' (the adapter has this module)");
      const at::Tensor& want = b ? ab.second : ab.first;
      const auto& e = f.entries().at(key);
      if (!at::IntArrayRef(e.shape).equals(want.sizes()))
        throw InputError(path + ": tensor '" + key + "' has shape " + c10::str(at::IntArrayRef(e.shape)) + ", the adapter's is " + c10::str(want.sizes()));
      got[b] = f.Read(key).to(at::kFloat);
    }
    out[stem] = {got[0], got[1]};
  }
  for (const auto& [key, e] : f.entries())
    if (!expected.count(key)) throw InputError(path + ": tensor '" + key + "' is not a LoRA parameter of the adapter");
  return out;
}

}  // namespace io
}  // namespace pg
