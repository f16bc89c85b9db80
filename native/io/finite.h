// Non-finite weights (NaN, +Inf, -Inf) in a loaded checkpoint or adapter: found at load, on the
// device the tensors were loaded to, with one reduction per tensor (isfinite of its float32 sum:
// any NaN / Inf makes it non-finite; a non-finite sum is confirmed element-wise) and one host
// sync for the whole load. Refused (InputError naming the file and the tensors) unless the caller
// allows them, then reported as a warning.
#pragma once
#include <ATen/ATen.h>

#include <string>
#include <vector>

namespace pg {

/// Elements per element-wise isfinite() call of the confirmation (a 16 MiB boolean temporary at most).
constexpr int64_t kFiniteChunk = int64_t{1} << 24;

/// What a loader does with tensors holding NaN or ±Inf.
struct NonFiniteWeights {
  /// false (default): the load fails with an InputError; true: it goes on and `warning` is set.
  bool allow = false;
  /// Set when allowed and found: the message (file, tensors); empty otherwise.
  std::string warning;
};

/// Collects the per-tensor checks of one load (no host sync until Finish).
class FiniteCheck {
 public:
  /// Queues the check of `t` (floating dtypes only; others are skipped), `file` and `name` for the
  /// message. Launches the reduction on t's device; does not wait for it.
  void Add(const std::string& file, const std::string& name, const at::Tensor& t);
  /// Waits for the queued checks (one device-to-host copy). All finite: returns. Otherwise throws
  /// InputError "<file>: tensor '<name>' holds NaN or Inf values ..." (every file and up to 8
  /// tensor names each, the count of the rest) unless `policy.allow`, then sets policy.warning to
  /// the same text. `what` names the load ("model", "adapter") and `hint` the way to allow it.
  void Finish(NonFiniteWeights& policy, const std::string& what, const std::string& hint) const;

 private:
  struct Item {
    std::string file, name;
    at::Tensor tensor;  // the loaded tensor (shared storage, no copy), for the confirmation
  };
  std::vector<Item> items_;
  std::vector<at::Tensor> flags_;  // 0-dim bool per item, on the tensor's device
};

}  // namespace pg
