#include "io/finite.h"

#include <map>

#include "core/errors.h"

namespace pg {

namespace {

/// Element-wise check of `t` (the confirmation of a non-finite sum), in chunks of kFiniteChunk
/// elements so the boolean temporary stays small.
bool ExactlyFinite(const at::Tensor& t) {
  at::Tensor flat = t.reshape({-1});
  for (const at::Tensor& c : flat.split(kFiniteChunk))
    if (!at::isfinite(c).all().item<bool>()) return false;
  return true;
}

}  // namespace

void FiniteCheck::Add(const std::string& file, const std::string& name, const at::Tensor& t) {
  if (!t.defined() || !at::isFloatingType(t.scalar_type()) || t.numel() == 0) return;
  // One vectorised reduction, no temporary the size of t: a NaN or ±Inf makes the float32 sum
  // non-finite (NaN propagates, Inf + finite = Inf, Inf - Inf = NaN). A finite sum therefore
  // proves every element finite; a non-finite one is confirmed element-wise in Finish (a float32
  // sum of finite values can overflow only for values beyond ~1e29).
  items_.push_back({file, name, t});
  flags_.push_back(at::isfinite(t.sum(at::kFloat)));
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
    if (!ok[i] && !ExactlyFinite(items_[i].tensor)) {
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
    msg += (msg.empty() ? "" : "; ") + f + ": " + (names.size() == 1 ? "tensor " : "tensors ") + list + (names.size() == 1 ? " holds" : " hold") +
           " NaN or Inf values";
  }
  if (!policy.allow) throw InputError(msg + " (refusing to load a " + what + " with non-finite weights; " + hint + ")");
  policy.warning = msg + " (loaded anyway: " + what + " with non-finite weights allowed)";
}

}  // namespace pg
