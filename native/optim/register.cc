// Registration of the optim exports (filled in by native/optim/).
#include "napi/util.h"

namespace pg {
void RegisterOptim(Napi::Env env, Napi::Object exports) {}
}  // namespace pg
