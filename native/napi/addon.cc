// Module entry: each binding file of native/napi/ registers its own exports (one file per JS class
// or namespace). The compute they wrap lives in the core folders (model/, lora/, loss/, steps/,
// generate/, optim/, io/, dist/, cuda/, core/), which include no N-API header.
#include <napi.h>

namespace pg {
void RegisterRuntime(Napi::Env env, Napi::Object exports);     // napi/runtime.cc: build info, memory, threads
void RegisterModel(Napi::Env env, Napi::Object exports);       // napi/model.cc: the Model class (Qwen3 + LoRA + adapters)
void RegisterModelSteps(Napi::Env env, Napi::Object exports);  // napi/model_steps.cc: sequence/prefix logprobs, OPSD / GRPO steps
void RegisterLoss(Napi::Env env, Napi::Object exports);        // napi/loss.cc: fused JSD / GRPO over tensors, advantages
void RegisterOptim(Napi::Env env, Napi::Object exports);       // napi/optim.cc: AdamW, schedules
void RegisterGenerate(Napi::Env env, Napi::Object exports);    // napi/generate.cc: batched sampling, decode engine, abort handles
void RegisterIo(Napi::Env env, Napi::Object exports);          // napi/io.cc: safetensors read/write (optimizer state)
void RegisterHostState(Napi::Env env, Napi::Object exports);   // napi/host_state.cc: captured state written off the critical path
void RegisterDist(Napi::Env env, Napi::Object exports);        // napi/dist.cc: c10d process groups (Gloo / NCCL)
}  // namespace pg

static Napi::Object Init(Napi::Env env, Napi::Object exports) {
  pg::RegisterRuntime(env, exports);
  pg::RegisterModel(env, exports);
  pg::RegisterModelSteps(env, exports);
  pg::RegisterLoss(env, exports);
  pg::RegisterOptim(env, exports);
  pg::RegisterGenerate(env, exports);
  pg::RegisterIo(env, exports);
  pg::RegisterHostState(env, exports);
  pg::RegisterDist(env, exports);
  exports.Set("napiVersion", Napi::Number::New(env, NAPI_VERSION));
  return exports;
}

NODE_API_MODULE(papergym_native, Init)
