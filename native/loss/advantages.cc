#include "loss/advantages.h"

#include <cmath>
#include <vector>

#include "core/errors.h"

namespace pg {
namespace loss {

Advantages ComputeAdvantages(const at::Tensor& rewards, const AdvantageOptions& o) {
  if (rewards.dim() != 1) throw ArgError("computeAdvantages: rewards must be [B]");
  if (!at::isFloatingType(rewards.scalar_type())) throw ArgError("computeAdvantages: rewards must be float32 or float64");
  const int64_t B = rewards.size(0), G = o.group_size;
  if (G < 1) throw ArgError("computeAdvantages: groupSize must be >= 1");
  if (B % G != 0) throw ArgError("computeAdvantages: rewards length " + std::to_string(B) + " is not a multiple of groupSize " + std::to_string(G));
  if (o.scale != "group" && o.scale != "batch" && o.scale != "none") throw ArgError("computeAdvantages: scale must be 'group', 'batch' or 'none'");
  if (!(o.std_floor >= 0) || !(o.eps >= 0)) throw ArgError("computeAdvantages: stdFloor and eps must be >= 0");
  at::Tensor r = rewards.detach().to(at::kCPU, at::kDouble).contiguous();
  const double* rp = r.data_ptr<double>();
  for (int64_t i = 0; i < B; ++i)
    if (!std::isfinite(rp[i])) throw InputError("computeAdvantages: reward " + std::to_string(i) + " is not finite");
  const int64_t NG = G ? B / G : 0;
  std::vector<double> mean(NG), sd(NG);
  std::vector<bool> equal(NG);
  for (int64_t g = 0; g < NG; ++g) {
    const double* x = rp + g * G;
    bool eq = true;
    double s = 0;
    for (int64_t i = 0; i < G; ++i) {
      s += x[i];
      eq = eq && x[i] == x[0];
    }
    equal[g] = eq;
    double m = eq ? x[0] : s / static_cast<double>(G);
    double ss = 0;
    for (int64_t i = 0; i < G; ++i) ss += (x[i] - m) * (x[i] - m);
    mean[g] = m;
    sd[g] = eq || G < 2 ? 0.0 : std::sqrt(ss / static_cast<double>(G - 1));
  }
  double batch_sd = 0;
  if (o.scale == "batch" && B > 1) {
    double s = 0;
    for (int64_t i = 0; i < B; ++i) s += rp[i];
    double m = s / static_cast<double>(B), ss = 0;
    for (int64_t i = 0; i < B; ++i) ss += (rp[i] - m) * (rp[i] - m);
    batch_sd = std::sqrt(ss / static_cast<double>(B - 1));
  }
  at::Tensor adv = at::zeros({B}, at::kDouble);
  at::Tensor keep = at::ones({B}, at::kByte);
  double* ap = adv.data_ptr<double>();
  uint8_t* kp = keep.data_ptr<uint8_t>();
  for (int64_t g = 0; g < NG; ++g) {
    for (int64_t i = 0; i < G; ++i) {
      const int64_t b = g * G + i;
      if (equal[g]) {
        ap[b] = 0.0;
        if (o.drop_zero_variance) kp[b] = 0;
        continue;
      }
      double d = rp[b] - mean[g];
      if (o.scale == "group")
        d /= std::max(sd[g], o.std_floor) + o.eps;
      else if (o.scale == "batch")
        d /= std::max(batch_sd, o.std_floor) + o.eps;
      ap[b] = d;
    }
  }
  Advantages out;
  out.advantages = adv.to(rewards.scalar_type() == at::kDouble ? at::kDouble : at::kFloat);
  out.keep = keep;
  out.group_std = at::from_blob(sd.data(), {NG}, at::kDouble).clone();
  return out;
}

}  // namespace loss
}  // namespace pg
