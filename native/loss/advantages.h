// Group-relative advantages (GRPO, Shao et al. 2024; TRL GRPOTrainer; Dr. GRPO drops the std).
//
// Rewards [B] are contiguous groups of G completions of one prompt (B % G == 0).
//   mean_g  = Σ r / G                                (per group; computed in float64)
//   std     = sqrt(Σ (r − mean)² / (n − 1))          (two-pass, unbiased as TRL's nanstd / torch.std;
//                                                     n = G for scale "group", n = B for "batch")
//   Â       = (r − mean_g) / (max(std, stdFloor) + eps)   scale "group" | "batch"
//   Â       = r − mean_g                             scale "none" (Dr. GRPO)
// A group whose rewards are all equal (bit-identical) gets Â = 0 exactly (never NaN), whatever
// the rounding of its mean (e.g. eight × 0.35). With stdFloor = 0 and eps = 1e-4 this is exactly
// TRL's formula; the default stdFloor = 1e-3 keeps near-ties (rewards differing by 1e-4 from
// shaping noise) from being blown up to ±1 advantages.
// keep[b] = 0 for members of zero-variance groups when dropZeroVariance (DAPO dynamic sampling),
// else 1; dropped entries also get Â = 0.
#pragma once
#include <ATen/ATen.h>

#include <string>

namespace pg {
namespace loss {

struct AdvantageOptions {
  int64_t group_size = 8;
  std::string scale = "group";  // group | batch | none
  double std_floor = 1e-3;
  double eps = 1e-4;
  bool drop_zero_variance = false;
};

struct Advantages {
  at::Tensor advantages;  // [B], dtype of rewards (float32 or float64)
  at::Tensor keep;        // [B] uint8
  at::Tensor group_std;   // [B / G] float64 (unbiased; 0 for equal groups)
};

Advantages ComputeAdvantages(const at::Tensor& rewards, const AdvantageOptions& o);

}  // namespace loss
}  // namespace pg
