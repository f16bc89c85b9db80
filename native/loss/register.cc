// Registration of the loss exports (filled in by native/loss/).
#include "napi/util.h"

namespace pg {
void RegisterLoss(Napi::Env env, Napi::Object exports) {}
}  // namespace pg
