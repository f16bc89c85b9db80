// AdamW (Loshchilov & Hutter 2019) exactly as torch.optim.AdamW (single-tensor path, no amsgrad):
//   p ← p·(1 − lr·wd)                          (decoupled weight decay; default wd = 0)
//   m ← lerp(m, g, 1 − β1);  v ← β2·v + (1 − β2)·g²
//   p ← p − (lr / (1 − β1^t)) · m / (sqrt(v) / sqrt(1 − β2^t) + eps)
// Global grad-norm clipping as torch.nn.utils.clip_grad_norm_: total = ‖(‖g_i‖₂)_i‖₂, every grad
// multiplied by min(1, max_norm / (total + 1e-6)); the pre-clip total is returned.
// LR schedules as Hugging Face transformers' get_*_schedule_with_warmup (LambdaLR factor at the
// number of optimizer steps already taken, k = 0 for the first step; W = warmup, N = total):
//   warmup (k < W):  k / max(1, W)
//   constant:        1
//   linear:          max(0, (N − k) / max(1, N − W))
//   cosine:          max(0, ½·(1 + cos(π · 2·cycles · (k − W) / max(1, N − W)))),  cycles = 0.5
#pragma once
#include <ATen/ATen.h>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace pg {
namespace optim {

struct Schedule {
  std::string type = "constant";  // constant | linear | cosine
  int64_t warmup_steps = 0;
  int64_t total_steps = 0;  // required (> 0) for linear / cosine
  double num_cycles = 0.5;
};
/// lr multiplier at step k (see above); throws pg::ArgError on a bad schedule.
double ScheduleFactor(const Schedule& s, int64_t k);
void CheckSchedule(const Schedule& s);

struct AdamWOptions {
  double lr = 1e-5;
  double beta1 = 0.9, beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0.0;
  Schedule schedule;
};

struct StepResult {
  double grad_norm = 0;  // pre-clip global L2 norm (NaN if a gradient is non-finite)
  double lr = 0;         // lr used by this step
  int64_t step = 0;      // optimizer steps taken after this one
  bool skipped = false;  // true when the norm was non-finite and skipNonFinite was set
};

class AdamW {
 public:
  AdamW(std::vector<at::Tensor> params, std::vector<std::string> names, AdamWOptions o);
  /// Clips (max_norm > 0) and applies one update to every parameter that has a gradient.
  StepResult Step(double max_norm, bool skip_non_finite = false);
  /// Pre-clip global norm; scales grads in place when max_norm > 0.
  double ClipGradNorm(double max_norm);
  void ZeroGrad();
  double CurrentLr() const { return o_.lr * ScheduleFactor(o_.schedule, step_); }
  int64_t step() const { return step_; }
  AdamWOptions& options() { return o_; }
  const std::vector<at::Tensor>& params() const { return params_; }
  const std::vector<std::string>& names() const { return names_; }
  /// State as name → tensor: "exp_avg.<param name>", "exp_avg_sq.<param name>" (CPU copies) and
  /// "step" (int64 [1]). Parameters never stepped have zero moments.
  std::map<std::string, at::Tensor> State() const;
  /// The moments under the same names as State ("exp_avg.<name>", "exp_avg_sq.<name>"; no "step"),
  /// where they live (the parameters' device): aliases of the optimizer's own tensors, valid until
  /// its next step — for a caller that copies them at once (checkpoint captures, io/host_state.h).
  std::map<std::string, at::Tensor> MomentTensors() const;
  /// Restores State(); every key must match a parameter of this optimizer (InputError otherwise).
  void LoadState(const std::map<std::string, at::Tensor>& state);

 private:
  std::vector<at::Tensor> params_;
  std::vector<std::string> names_;
  std::vector<at::Tensor> m_, v_;
  AdamWOptions o_;
  int64_t step_ = 0;
};

}  // namespace optim
}  // namespace pg
