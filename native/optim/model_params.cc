#include "optim/model_params.h"

#include "napi/util.h"

namespace pg {
namespace optim {
ModelParamSet ModelParams(const Napi::Value& v, const char* what) {
  throw ArgError(std::string(what) + ": expected an array of tensors (Model support needs native/model)");
}
}  // namespace optim
}  // namespace pg
