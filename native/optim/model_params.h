// The LoRA parameters of a JS Model for the optimizer. Until native/model lands this rejects
// every non-array argument; afterwards it unwraps the Model (see model_params.cc).
#pragma once
#include <napi.h>
#include <ATen/ATen.h>

#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace pg {
namespace optim {
struct ModelParamSet {
  std::vector<at::Tensor> params;
  std::vector<std::string> names;
  std::shared_ptr<void> holder;  // keeps the model alive
  std::mutex* mutex = nullptr;
};
ModelParamSet ModelParams(const Napi::Value& v, const char* what);
}  // namespace optim
}  // namespace pg
