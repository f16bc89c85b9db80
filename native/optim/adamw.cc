#include "optim/adamw.h"

#include <cmath>

#include "core/errors.h"

namespace pg {
namespace optim {

void CheckSchedule(const Schedule& s) {
  if (s.type != "constant" && s.type != "linear" && s.type != "cosine")
    throw ArgError("schedule.type must be 'constant', 'linear' or 'cosine', got '" + s.type + "'");
  if (s.warmup_steps < 0) throw ArgError("schedule.warmupSteps must be >= 0");
  if (s.type != "constant" && s.total_steps <= 0) throw ArgError("schedule.totalSteps must be > 0 for linear / cosine");
}

double ScheduleFactor(const Schedule& s, int64_t k) {
  CheckSchedule(s);
  if (k < 0) throw ArgError("schedule step must be >= 0");
  const double W = static_cast<double>(s.warmup_steps), N = static_cast<double>(s.total_steps), kk = static_cast<double>(k);
  if (k < s.warmup_steps) return kk / std::max(1.0, W);
  if (s.type == "constant") return 1.0;
  if (s.type == "linear") return std::max(0.0, (N - kk) / std::max(1.0, N - W));
  double progress = (kk - W) / std::max(1.0, N - W);
  return std::max(0.0, 0.5 * (1.0 + std::cos(M_PI * s.num_cycles * 2.0 * progress)));
}

AdamW::AdamW(std::vector<at::Tensor> params, std::vector<std::string> names, AdamWOptions o)
    : params_(std::move(params)), names_(std::move(names)), o_(std::move(o)) {
  if (names_.size() != params_.size()) throw ArgError("AdamW: names and params differ in length");
  if (!(o_.lr >= 0)) throw ArgError("AdamW: lr must be >= 0");
  if (!(o_.beta1 >= 0 && o_.beta1 < 1 && o_.beta2 >= 0 && o_.beta2 < 1)) throw ArgError("AdamW: betas must be in [0, 1)");
  if (!(o_.eps >= 0)) throw ArgError("AdamW: eps must be >= 0");
  if (!(o_.weight_decay >= 0)) throw ArgError("AdamW: weightDecay must be >= 0");
  CheckSchedule(o_.schedule);
  for (auto& p : params_) {
    if (!at::isFloatingType(p.scalar_type())) throw ArgError("AdamW: parameters must be floating point");
    at::NoGradGuard ng;
    m_.push_back(at::zeros_like(p, at::MemoryFormat::Preserve));
    v_.push_back(at::zeros_like(p, at::MemoryFormat::Preserve));
  }
}

namespace {
/// Gradients grouped by (device, dtype) for the multi-tensor (_foreach_*) kernels, with the indices
/// of their parameters: a handful of launches per step instead of several per parameter.
struct Group {
  std::vector<size_t> idx;
  std::vector<at::Tensor> grads;
};
std::vector<Group> GroupsWithGrad(const std::vector<at::Tensor>& params) {
  std::vector<Group> groups;
  std::vector<std::pair<at::Device, at::ScalarType>> keys;
  for (size_t i = 0; i < params.size(); ++i) {
    const at::Tensor& g = params[i].grad();
    if (!g.defined()) continue;
    auto key = std::make_pair(g.device(), g.scalar_type());
    size_t k = 0;
    while (k < keys.size() && keys[k] != key) ++k;
    if (k == keys.size()) {
      keys.push_back(key);
      groups.emplace_back();
    }
    groups[k].idx.push_back(i);
    groups[k].grads.push_back(g);
  }
  return groups;
}
}  // namespace

double AdamW::ClipGradNorm(double max_norm) {
  at::NoGradGuard ng;
  // As clip_grad_norm_ (foreach): per-tensor norms in the gradient dtype, stacked per device and
  // promoted to a common dtype (fp32 grads give an fp32 total, fp64 grads an fp64 one), one host
  // read of the total, then every gradient scaled by min(1, max_norm / (total + 1e-6)).
  auto groups = GroupsWithGrad(params_);
  if (groups.empty()) return 0.0;
  std::vector<at::Tensor> per_group;
  at::ScalarType common = groups[0].grads[0].scalar_type();
  for (auto& g : groups) common = at::promoteTypes(common, g.grads[0].scalar_type());
  for (auto& g : groups) {
    auto norms = at::_foreach_norm(g.grads, 2);
    per_group.push_back(at::linalg_vector_norm(at::stack(norms), 2).to(at::kCPU, common));
  }
  at::Tensor total = at::linalg_vector_norm(at::stack(per_group), 2);
  double tn = total.item<double>();
  if (max_norm > 0) {
    at::Tensor coef = (max_norm / (total + 1e-6)).clamp_max(1.0);
    for (auto& g : groups) at::_foreach_mul_(g.grads, coef.to(g.grads[0].device(), g.grads[0].scalar_type()));
  }
  return tn;
}

StepResult AdamW::Step(double max_norm, bool skip_non_finite) {
  at::NoGradGuard ng;
  StepResult r;
  r.grad_norm = ClipGradNorm(skip_non_finite ? 0.0 : max_norm);
  if (skip_non_finite) {
    if (!std::isfinite(r.grad_norm)) {
      r.skipped = true;
      r.step = step_;
      r.lr = CurrentLr();
      return r;
    }
    if (max_norm > 0) ClipGradNorm(max_norm);
  }
  const double lr = CurrentLr();
  ++step_;
  const double bc1 = 1.0 - std::pow(o_.beta1, static_cast<double>(step_));
  const double bc2 = 1.0 - std::pow(o_.beta2, static_cast<double>(step_));
  const double step_size = lr / bc1;
  const double bc2_sqrt = std::sqrt(bc2);
  // torch.optim.AdamW's multi-tensor update (the same elementwise formulas per parameter, each as
  // one _foreach kernel over all parameters of a device / dtype group).
  for (auto& g : GroupsWithGrad(params_)) {
    std::vector<at::Tensor> p, m, v;
    for (size_t i : g.idx) {
      p.push_back(params_[i]);
      m.push_back(m_[i]);
      v.push_back(v_[i]);
    }
    if (o_.weight_decay != 0) at::_foreach_mul_(p, 1.0 - lr * o_.weight_decay);
    at::_foreach_lerp_(m, g.grads, 1.0 - o_.beta1);
    at::_foreach_mul_(v, o_.beta2);
    at::_foreach_addcmul_(v, g.grads, g.grads, 1.0 - o_.beta2);
    auto denom = at::_foreach_sqrt(v);
    at::_foreach_div_(denom, bc2_sqrt);
    at::_foreach_add_(denom, o_.eps);
    at::_foreach_addcdiv_(p, m, denom, -step_size);
  }
  r.lr = lr;
  r.step = step_;
  return r;
}

void AdamW::ZeroGrad() {
  for (auto& p : params_)
    if (p.grad().defined()) p.mutable_grad() = at::Tensor();
}

std::map<std::string, at::Tensor> AdamW::State() const {
  std::map<std::string, at::Tensor> s;
  for (size_t i = 0; i < params_.size(); ++i) {
    s["exp_avg." + names_[i]] = m_[i].detach().to(at::kCPU).clone();
    s["exp_avg_sq." + names_[i]] = v_[i].detach().to(at::kCPU).clone();
  }
  s["step"] = at::full({1}, step_, at::kLong);
  return s;
}

std::map<std::string, at::Tensor> AdamW::MomentTensors() const {
  std::map<std::string, at::Tensor> s;
  for (size_t i = 0; i < params_.size(); ++i) {
    s["exp_avg." + names_[i]] = m_[i].detach();
    s["exp_avg_sq." + names_[i]] = v_[i].detach();
  }
  return s;
}

void AdamW::LoadState(const std::map<std::string, at::Tensor>& state) {
  at::NoGradGuard ng;
  std::map<std::string, size_t> idx;
  for (size_t i = 0; i < names_.size(); ++i) idx[names_[i]] = i;
  auto it = state.find("step");
  if (it == state.end() || it->second.numel() != 1) throw InputError("optimizer state: missing 'step'");
  int64_t step = it->second.to(at::kDouble).item<double>();
  if (step < 0) throw InputError("optimizer state: negative step");
  std::vector<at::Tensor> m = m_, v = v_;
  std::vector<int> seen(names_.size() * 2, 0);
  for (const auto& [k, t] : state) {
    if (k == "step") continue;
    bool is_m = k.rfind("exp_avg.", 0) == 0, is_v = k.rfind("exp_avg_sq.", 0) == 0;
    if (!is_m && !is_v) throw InputError("optimizer state: unknown key '" + k + "'");
    std::string name = k.substr(is_m ? 8 : 11);
    auto f = idx.find(name);
    if (f == idx.end()) throw InputError("optimizer state: no parameter named '" + name + "'");
    const at::Tensor& p = params_[f->second];
    if (t.sizes() != p.sizes()) throw InputError("optimizer state: shape mismatch for '" + k + "'");
    (is_m ? m : v)[f->second] = t.to(p.device(), p.scalar_type()).clone();
    seen[f->second * 2 + (is_m ? 0 : 1)] = 1;
  }
  for (size_t i = 0; i < seen.size(); ++i)
    if (!seen[i]) throw InputError(std::string("optimizer state: missing ") + (i % 2 ? "exp_avg_sq." : "exp_avg.") + names_[i / 2]);
  m_ = std::move(m);
  v_ = std::move(v);
  step_ = step;
}

}  // namespace optim
}  // namespace pg
