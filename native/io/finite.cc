#include "io/finite.h"

#include <map>

#include "core/errors.h"

namespace pg {

void FiniteCheck::Add(const std::string& file, const std::string& name, const at::Tensor& t) {
  if (!t.defined() || !at::isFloatingType(t.scalar_type()) || t.numel() == 0) return;
  at::Tensor flat = t.reshape({-1});
  at::Tensor ok;
  if (flat.numel() <= kFiniteChunk) {
    ok = at::isfinite(flat).all();
  } else {
    std::vector<at::Tensor> parts;
    for (const at::Tensor& c : flat.split(kFiniteChunk)) parts.push_back(at::isfinite(c).all());
    ok = at::stack(parts).all();
  }
  items_.push_back({file, name});
  flags_.push_back(ok);
}

void FiniteCheck::Finish(NonFiniteWeights& policy, const std::string& what, const std::string& hint) const {
  if (flags_.empty()) return;
  // One device-to-host copy (the flags of one load live on one device; .to is a no-op there).
  std::vector<at::Tensor> same;
  for (const auto& f : flags_) same.push_back(f.to(flags_.front().device()));
  at::Tensor all = at::stack(same).cpu();
  const bool* ok = all.data_ptr<bool>();
  std::map<std::string, std::vector<std::string>> bad;  // file -> tensors, in load order
  std::vector<std::string> files;
  for (size_t i = 0; i < items_.size(); ++i)
    if (!ok[i]) {
      if (!bad.count(items_[i].file)) files.push_back(items_[i].file);
      bad[items_[i].file].push_back(items_[i].name);
    }
  if (bad.empty()) return;
  std::string msg;
  for (const auto& f : files) {
    const auto& names = bad[f];
    std::string list;
    for (size_t i = 0; i < names.size() && i < 8; ++i) list += (i ? ", '" : "'") + names[i] + "'";
    if (names.size() > 8) list += " and " + std::to_string(names.size() - 8) + " more";
    msg += (msg.empty() ? "" : "; ") + f + ": " + (names.size() == 1 ? "tensor " : "tensors ") + list +
           (names.size() == 1 ? " holds" : " hold") + " NaN or Inf values";
  }
  if (!policy.allow) throw InputError(msg + " (refusing to load a " + what + " with non-finite weights; " + hint + ")");
  policy.warning = msg + " (loaded anyway: " + what + " with non-finite weights allowed)";
}

}  // namespace pg
