// Registration of the model exports: the `Model` class (see model/binding.cc).
#include "napi/util.h"

namespace pg {
void RegisterModelClass(Napi::Env env, Napi::Object exports);  // model/binding.cc
void RegisterModel(Napi::Env env, Napi::Object exports) { RegisterModelClass(env, exports); }
}  // namespace pg
