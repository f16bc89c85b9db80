// LoRA management of the decoder: the trainable adapter, frozen snapshots, PEFT save / load.
#include "io/peft_adapter.h"
#include "model/decoder_impl.h"

namespace pg {

bool DecoderModel::SelectsAdapter(const AdapterSel& sel) const {
  const LoraAdapter* a = DecoderImpl::Resolve(*this, sel);
  return a && !a->weights.empty();
}

void DecoderModel::AddLora(const LoraConfig& cfg) {
  DecoderImpl::CheckAlive(*this);
  active_ = MakeLoraAdapter(LoraDims(cfg_), cfg, device_);
}

const LoraAdapter& DecoderModel::ActiveAdapter() const {
  DecoderImpl::CheckAlive(*this);
  if (!active_) throw InputError("model has no LoRA adapter (call addLora or loadAdapter first)");
  return *active_;
}

std::vector<at::Tensor> DecoderModel::LoraParameters() const {
  std::vector<at::Tensor> out;
  for (const auto& kv : ActiveAdapter().weights) {
    out.push_back(kv.second.first);
    out.push_back(kv.second.second);
  }
  return out;
}

std::vector<std::string> DecoderModel::LoraParameterNames() const {
  std::vector<std::string> out;
  for (const auto& kv : ActiveAdapter().weights) {
    out.push_back("base_model.model." + kv.first + ".lora_A.weight");
    out.push_back("base_model.model." + kv.first + ".lora_B.weight");
  }
  return out;
}

void DecoderModel::SnapshotAdapter(const std::string& name) {
  const LoraAdapter& a = ActiveAdapter();
  if (name.empty()) throw ArgError("snapshot name must be non-empty");
  LoraAdapter s;
  s.config = a.config;
  s.scaling = a.scaling;
  s.num_layers = a.num_layers;
  at::NoGradGuard ng;
  for (const auto& kv : a.weights) s.weights[kv.first] = {kv.second.first.detach().clone(), kv.second.second.detach().clone()};
  snapshots_[name] = std::move(s);
}

void DecoderModel::DropSnapshot(const std::string& name) {
  DecoderImpl::CheckAlive(*this);
  if (!snapshots_.erase(name)) throw ArgError("no adapter snapshot named '" + name + "'");
}

void DecoderModel::SaveAdapter(const std::string& dir, const std::string& base_model_name) const {
  SavePeftAdapter(dir, ActiveAdapter(), base_model_name);
}

void DecoderModel::LoadAdapter(const std::string& dir, NonFiniteWeights& non_finite) {
  DecoderImpl::CheckAlive(*this);
  LoraAdapter loaded = LoadPeftAdapter(dir, LoraDims(cfg_), device_, non_finite);
  // Same modules and shapes as the current adapter: copy in place, so tensors held elsewhere
  // (an optimizer's parameter list, its state) stay valid across a resume. Otherwise replace.
  bool same = active_.has_value() && active_->weights.size() == loaded.weights.size();
  if (same)
    for (const auto& kv : loaded.weights) {
      auto it = active_->weights.find(kv.first);
      if (it == active_->weights.end() || !it->second.first.sizes().equals(kv.second.first.sizes()) ||
          !it->second.second.sizes().equals(kv.second.second.sizes())) {
        same = false;
        break;
      }
    }
  if (!same) {
    active_ = std::move(loaded);
    return;
  }
  at::NoGradGuard ng;
  for (auto& kv : active_->weights) {
    const auto& src = loaded.weights.at(kv.first);
    kv.second.first.copy_(src.first);
    kv.second.second.copy_(src.second);
  }
  const uint64_t seed = active_->config.seed;
  active_->config = loaded.config;
  active_->config.seed = seed;
  active_->scaling = loaded.scaling;
}

int64_t DecoderModel::ParameterBytes() const {
  if (disposed_) return 0;
  int64_t n = 0;
  for (const auto& kv : w_) n += static_cast<int64_t>(kv.second.nbytes());  // views of fused tensors sum to their size
  auto add = [&](const LoraAdapter& a) {
    for (const auto& kv : a.weights) n += static_cast<int64_t>(kv.second.first.nbytes() + kv.second.second.nbytes());
  };
  if (active_) add(*active_);
  for (const auto& kv : snapshots_) add(kv.second);
  return n;
}

void DecoderModel::Dispose() {
  w_.clear();
  layers_.clear();
  active_.reset();
  snapshots_.clear();
  disposed_ = true;
}

}  // namespace pg
