// Registration of the model exports (filled in by native/model/).
#include "napi/util.h"

namespace pg {
void RegisterModel(Napi::Env env, Napi::Object exports) {}
}  // namespace pg
