// Module init only: each concern registers its own exports (see native/napi/util.h).
#include "napi/util.h"

static Napi::Object Init(Napi::Env env, Napi::Object exports) {
  pg::RegisterRuntime(env, exports);
  pg::RegisterModel(env, exports);
  pg::RegisterLoss(env, exports);
  pg::RegisterOptim(env, exports);
  pg::RegisterGenerate(env, exports);
  pg::RegisterIo(env, exports);
  pg::RegisterDist(env, exports);
  exports.Set("napiVersion", Napi::Number::New(env, NAPI_VERSION));
  return exports;
}

NODE_API_MODULE(papergym_native, Init)
