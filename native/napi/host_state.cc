// JS class HostState (see napi/host_state.h): captured training state written off the critical path.
#include "napi/host_state.h"

#include "napi/args.h"
#include "napi/util.h"

namespace pg {
namespace {

Napi::FunctionReference* g_ctor = nullptr;

class HostStateWrap : public Napi::ObjectWrap<HostStateWrap> {
 public:
  static Napi::Function Define(Napi::Env env) {
    return DefineClass(env, "HostState",
                       {InstanceMethod("save", &HostStateWrap::Save), InstanceMethod("release", &HostStateWrap::Release),
                        InstanceAccessor("bytes", &HostStateWrap::Bytes, nullptr), InstanceAccessor("kind", &HostStateWrap::Kind, nullptr)});
  }
  explicit HostStateWrap(const Napi::CallbackInfo& info) : Napi::ObjectWrap<HostStateWrap>(info) {
    if (info.Length() < 1 || !info[0].IsExternal()) {
      Napi::TypeError::New(info.Env(), "HostState: made by Model.captureAdapter / captureSnapshot or AdamW.captureState, not by new")
          .ThrowAsJavaScriptException();
      return;
    }
    // Taken out of the External (which lives until V8 collects it), so that release() frees the
    // host memory at once and the next capture reuses the cached pinned block.
    state_ = std::move(*info[0].As<Napi::External<std::shared_ptr<io::HostState>>>().Data());
    accounted_ = state_ ? state_->bytes : 0;
    Napi::MemoryManagement::AdjustExternalMemory(info.Env(), accounted_);
  }
  void Finalize(Napi::Env env) override { Unaccount(env); }

 private:
  void Unaccount(Napi::Env env) {
    if (accounted_) Napi::MemoryManagement::AdjustExternalMemory(env, -accounted_);
    accounted_ = 0;
  }
  Napi::Value Save(const Napi::CallbackInfo& info) {
    return Guard(info.Env(), [&]() -> Napi::Value {
      std::string target = ArgString(info, 0, "HostState.save(target): target");
      Napi::Object o = ArgObject(info, 1, "HostState.save options", true);
      std::string base = GetString(o, "baseModelName", std::string(), "options");
      if (!state_) throw ArgError("HostState.save(" + target + "): the state was released");
      std::shared_ptr<io::HostState> s = state_;  // kept alive by the worker even if released meanwhile
      auto keep = std::make_shared<Napi::ObjectReference>(Napi::Persistent(Value()));
      return Worker::Start(
          info.Env(), [s, target, base]() { io::SaveHostState(*s, target, base); },
          [keep](Napi::Env e) -> Napi::Value {
            keep->Reset();
            return e.Undefined();
          });
    });
  }
  Napi::Value Release(const Napi::CallbackInfo& info) {
    return Guard(info.Env(), [&]() -> Napi::Value {
      state_.reset();
      Unaccount(info.Env());
      return info.Env().Undefined();
    });
  }
  Napi::Value Bytes(const Napi::CallbackInfo& info) { return Napi::Number::New(info.Env(), state_ ? static_cast<double>(state_->bytes) : 0.0); }
  Napi::Value Kind(const Napi::CallbackInfo& info) {
    const char* k = !state_                                         ? "released"
                    : state_->kind == io::HostState::Kind::kAdapter ? "adapter"
                    : state_->kind == io::HostState::Kind::kWeights ? "snapshot"
                                                                    : "tensors";
    return Napi::String::New(info.Env(), k);
  }

  std::shared_ptr<io::HostState> state_;
  int64_t accounted_ = 0;
};

}  // namespace

Napi::Value NewHostState(Napi::Env env, std::shared_ptr<io::HostState> s) {
  auto ext = Napi::External<std::shared_ptr<io::HostState>>::New(env, new std::shared_ptr<io::HostState>(std::move(s)),
                                                                 [](Napi::Env, std::shared_ptr<io::HostState>* p) { delete p; });
  return g_ctor->New({ext});
}

void RegisterHostState(Napi::Env env, Napi::Object exports) {
  auto ctor = HostStateWrap::Define(env);
  g_ctor = new Napi::FunctionReference(Napi::Persistent(ctor));
  exports.Set("HostState", ctor);
}

}  // namespace pg
