#include "optim/model_params.h"

#include "model/binding.h"
#include "napi/util.h"

namespace pg {
namespace optim {
ModelParamSet ModelParams(const Napi::Value& v, const char* what) {
  auto m = UnwrapModel(v, what);
  std::lock_guard<std::mutex> lk(m->mutex());
  if (!m->HasLora()) throw InputError(std::string(what) + ": the model has no LoRA adapter (addLora / loadAdapter first)");
  ModelParamSet s;
  s.params = m->LoraParameters();
  s.names = m->LoraParameterNames();
  s.mutex = &m->mutex();
  s.holder = m;
  return s;
}
}  // namespace optim
}  // namespace pg
