// Registration of the optim exports:
//   new AdamW(params: JsTensor[] | Model, {lr, betas, eps, weightDecay, schedule, names?})
//     .step({maxGradNorm?, skipNonFinite?}) -> {gradNorm, lr, step, skipped}
//     .zeroGrad(); .setGrads(JsTensor[]) (tensor-list optimizers); .params() -> JsTensor[]
//     .state() -> {step, tensors: {name: JsTensor}} (copies, for inspection); .lr; .stepCount; .names
//     .saveState(path) / .loadStateFile(path) -> Promise<void>: the one persistent form of the
//     state (a safetensors file, written and read on a worker thread; see SaveState below)
//   lrAt({type, lr, warmupSteps, totalSteps, numCycles}, step) -> number
//   clipGradNorm is part of step (maxGradNorm); the pre-clip norm is returned.
#include <memory>
#include <optional>

#include "io/host_state.h"
#include "io/safetensors.h"
#include "napi/host_state.h"
#include "napi/model.h"
#include "napi/util.h"
#include "optim/adamw.h"

namespace pg {
namespace {

optim::Schedule ReadSchedule(const Napi::Object& s, const char* what) {
  optim::Schedule sc;
  sc.type = GetString(s, "type", std::string("constant"), what);
  sc.warmup_steps = GetInt(s, "warmupSteps", 0, what);
  sc.total_steps = GetInt(s, "totalSteps", 0, what);
  sc.num_cycles = GetNumber(s, "numCycles", 0.5, what);
  optim::CheckSchedule(sc);
  return sc;
}

class AdamWWrap : public Napi::ObjectWrap<AdamWWrap> {
 public:
  static Napi::Function Define(Napi::Env env) {
    return DefineClass(
        env, "AdamW",
        {InstanceMethod("step", &AdamWWrap::Step), InstanceMethod("zeroGrad", &AdamWWrap::ZeroGrad), InstanceMethod("setGrads", &AdamWWrap::SetGrads),
         InstanceMethod("params", &AdamWWrap::Params), InstanceMethod("state", &AdamWWrap::State), InstanceMethod("saveState", &AdamWWrap::SaveState),
         InstanceMethod("captureState", &AdamWWrap::CaptureState), InstanceMethod("loadStateFile", &AdamWWrap::LoadStateFile),
         InstanceAccessor("lr", &AdamWWrap::Lr, nullptr), InstanceAccessor("stepCount", &AdamWWrap::StepCount, nullptr),
         InstanceAccessor("names", &AdamWWrap::Names, nullptr)});
  }

  explicit AdamWWrap(const Napi::CallbackInfo& info) : Napi::ObjectWrap<AdamWWrap>(info) {
    Napi::Env env = info.Env();
    Guard(env, [&]() -> Napi::Value {
      const char* W = "AdamW options";
      auto o = ArgObject(info, 1, W, true);
      optim::AdamWOptions ao;
      ao.lr = GetNumber(o, "lr", 1e-5, W);
      if (Has(o, "betas")) {
        Napi::Value b = o.Get("betas");
        if (!b.IsArray() || b.As<Napi::Array>().Length() != 2) throw ArgError("AdamW options.betas must be [beta1, beta2]");
        auto ba = b.As<Napi::Array>();
        if (!ba.Get(0u).IsNumber() || !ba.Get(1u).IsNumber()) throw ArgError("AdamW options.betas must hold numbers");
        ao.beta1 = ba.Get(0u).As<Napi::Number>().DoubleValue();
        ao.beta2 = ba.Get(1u).As<Napi::Number>().DoubleValue();
      }
      ao.eps = GetNumber(o, "eps", 1e-8, W);
      ao.weight_decay = GetNumber(o, "weightDecay", 0.0, W);
      if (Has(o, "schedule")) {
        if (!o.Get("schedule").IsObject()) throw ArgError("AdamW options.schedule must be an object");
        ao.schedule = ReadSchedule(o.Get("schedule").As<Napi::Object>(), "AdamW options.schedule");
      }
      if (info.Length() < 1) throw ArgError("AdamW: first argument must be an array of tensors or a Model");
      std::vector<at::Tensor> params;
      std::vector<std::string> names;
      if (info[0].IsArray()) {
        auto a = info[0].As<Napi::Array>();
        for (uint32_t i = 0; i < a.Length(); ++i) {
          at::Tensor t = TensorFromJs(a.Get(i), "AdamW params[" + std::to_string(i) + "]");
          if (!at::isFloatingType(t.scalar_type())) throw ArgError("AdamW params must be float tensors");
          params.push_back(t.set_requires_grad(true));
          names.push_back(std::to_string(i));
        }
        if (Has(o, "names")) {
          names = GetStringArray(o, "names", W);
          if (names.size() != params.size()) throw ArgError("AdamW options.names must have one name per tensor");
        }
        owns_ = true;
      } else {
        auto mp = ModelParams(info[0], "AdamW model");
        params = std::move(mp.params);
        names = std::move(mp.names);
        model_ = std::move(mp.model);
      }
      opt_ = std::make_unique<optim::AdamW>(std::move(params), std::move(names), ao);
      return env.Undefined();
    });
  }

 private:
  std::unique_ptr<optim::AdamW> opt_;
  bool owns_ = false;
  std::shared_ptr<DecoderModel> model_;  // set for an optimizer over a Model's LoRA parameters

  /// The model's lock (ModelLock) for an optimizer over a Model; nothing for one over JS tensors.
  static std::optional<ModelLock> Lock(const std::shared_ptr<DecoderModel>& m) {
    std::optional<ModelLock> lk;
    if (m) lk.emplace(*m);
    return lk;
  }
  std::optional<ModelLock> Lock() { return Lock(model_); }

  Napi::Value Step(const Napi::CallbackInfo& info) {
    return Guard(info.Env(), [&]() -> Napi::Value {
      auto o = ArgObject(info, 0, "step options", true);
      double mx = GetNumber(o, "maxGradNorm", 0.0, "step options");
      bool skip = GetBool(o, "skipNonFinite", false, "step options");
      auto lk = Lock();
      auto r = opt_->Step(mx, skip);
      auto out = Napi::Object::New(info.Env());
      out.Set("gradNorm", Napi::Number::New(info.Env(), r.grad_norm));
      out.Set("lr", Napi::Number::New(info.Env(), r.lr));
      out.Set("step", Napi::Number::New(info.Env(), static_cast<double>(r.step)));
      out.Set("skipped", Napi::Boolean::New(info.Env(), r.skipped));
      return out;
    });
  }
  Napi::Value ZeroGrad(const Napi::CallbackInfo& info) {
    return Guard(info.Env(), [&]() -> Napi::Value {
      auto lk = Lock();
      opt_->ZeroGrad();
      return info.Env().Undefined();
    });
  }
  Napi::Value SetGrads(const Napi::CallbackInfo& info) {
    return Guard(info.Env(), [&]() -> Napi::Value {
      if (!owns_) throw ArgError("setGrads is only for optimizers over JS tensors (a Model's grads come from its backward)");
      if (info.Length() < 1 || !info[0].IsArray()) throw ArgError("setGrads: argument must be an array of tensors");
      auto a = info[0].As<Napi::Array>();
      const auto& ps = opt_->params();
      if (a.Length() != ps.size()) throw ArgError("setGrads: expected " + std::to_string(ps.size()) + " tensors");
      std::vector<at::Tensor> gs;
      for (uint32_t i = 0; i < a.Length(); ++i) {
        if (a.Get(i).IsNull() || a.Get(i).IsUndefined()) {
          gs.emplace_back();
          continue;
        }
        at::Tensor g = TensorFromJs(a.Get(i), "setGrads[" + std::to_string(i) + "]");
        if (g.sizes() != ps[i].sizes()) throw ArgError("setGrads[" + std::to_string(i) + "]: shape mismatch");
        gs.push_back(g.to(ps[i].scalar_type()));
      }
      for (size_t i = 0; i < gs.size(); ++i) {
        at::Tensor p = ps[i];
        p.mutable_grad() = gs[i];
      }
      return info.Env().Undefined();
    });
  }
  Napi::Value Params(const Napi::CallbackInfo& info) {
    return Guard(info.Env(), [&]() -> Napi::Value {
      auto lk = Lock();
      const auto& ps = opt_->params();
      auto a = Napi::Array::New(info.Env(), ps.size());
      for (size_t i = 0; i < ps.size(); ++i) a.Set(static_cast<uint32_t>(i), TensorToJs(info.Env(), ps[i]));
      return a;
    });
  }
  Napi::Value State(const Napi::CallbackInfo& info) {
    return Guard(info.Env(), [&]() -> Napi::Value {
      auto lk = Lock();
      auto s = opt_->State();
      auto out = Napi::Object::New(info.Env());
      auto ts = Napi::Object::New(info.Env());
      for (auto& [k, t] : s)
        if (k != "step") ts.Set(k, TensorToJs(info.Env(), t));
      out.Set("step", Napi::Number::New(info.Env(), static_cast<double>(opt_->step())));
      out.Set("tensors", ts);
      return out;
    });
  }
  // Runs `run` on a worker thread (resolving with undefined) while this JS object, and with it
  // opt_, is kept alive; the reference is released when the worker ends, on success and on error.
  Napi::Value StartKeepingThis(Napi::Env env, std::function<void()> run) {
    auto keep = std::make_shared<Napi::ObjectReference>(Napi::Persistent(Value()));
    return Worker::Start(env, std::move(run), [keep](Napi::Env e) -> Napi::Value {
      keep->Reset();
      return e.Undefined();
    });
  }
  // saveState(path) -> Promise<void>: safetensors (atomic temp + rename) with the moments as F32
  // tensors "exp_avg.<name>" / "exp_avg_sq.<name>" and __metadata__ {format: "pt", optimizer:
  // "adamw", step: "<n>"}; bit-exact for float32 parameters (LoRA), float64 moments are rounded to
  // F32. loadStateFile(path) -> Promise<void> restores it, and also the files earlier versions
  // wrote from JS (same tensors, __metadata__ {format, step}); InputError naming the file on any
  // mismatch, the optimizer unchanged then.
  Napi::Value SaveState(const Napi::CallbackInfo& info) {
    return Guard(info.Env(), [&]() -> Napi::Value {
      std::string path = ArgString(info, 0, "saveState(path)");
      optim::AdamW* opt = opt_.get();
      std::shared_ptr<DecoderModel> model = model_;
      return StartKeepingThis(info.Env(), [opt, model, path]() {
        auto lk = Lock(model);
        std::map<std::string, at::Tensor> ts;
        for (auto& [k, t] : opt->MomentTensors()) ts[k] = t.to(at::kFloat);
        st::Save(path, ts, {{"format", "pt"}, {"optimizer", "adamw"}, {"step", std::to_string(opt->step())}});
      });
    });
  }
  // captureState() -> Promise<HostState> (napi/host_state.h): the same tensors and metadata as
  // saveState, copied to host memory (pinned on CUDA) under the model lock; HostState.save(path)
  // writes the identical file later without the lock (checkpoints beside the next step, issue 36).
  Napi::Value CaptureState(const Napi::CallbackInfo& info) {
    return Guard(info.Env(), [&]() -> Napi::Value {
      optim::AdamW* opt = opt_.get();
      std::shared_ptr<DecoderModel> model = model_;
      auto keep = std::make_shared<Napi::ObjectReference>(Napi::Persistent(Value()));
      auto res = std::make_shared<std::shared_ptr<io::HostState>>();
      return Worker::Start(
          info.Env(),
          [opt, model, res]() {
            auto lk = Lock(model);
            // The moments where they live (not State(): its per-tensor CPU copies cost ~0.5 s per GB).
            std::map<std::string, at::Tensor> ts = opt->MomentTensors();
            std::optional<at::Device> dev;
            for (auto& [k, t] : ts)
              if (t.is_cuda()) dev = t.device();
            *res = std::make_shared<io::HostState>(io::CaptureTensors(ts, {{"format", "pt"}, {"optimizer", "adamw"}, {"step", std::to_string(opt->step())}}));
            if (dev) io::WaitHostCopies(*dev);
          },
          [keep, res](Napi::Env env) -> Napi::Value {
            keep->Reset();
            return NewHostState(env, *res);
          });
    });
  }
  Napi::Value LoadStateFile(const Napi::CallbackInfo& info) {
    return Guard(info.Env(), [&]() -> Napi::Value {
      std::string path = ArgString(info, 0, "loadStateFile(path)");
      optim::AdamW* opt = opt_.get();
      std::shared_ptr<DecoderModel> model = model_;
      return StartKeepingThis(info.Env(), [opt, model, path]() {
        auto f = st::File::Open(path);
        std::map<std::string, at::Tensor> m;
        for (auto& [k, e] : f.entries()) m[k] = f.Read(k);
        auto it = f.metadata().find("step");
        if (it == f.metadata().end()) throw InputError(path + ": no 'step' in __metadata__ (not an optimizer state file)");
        int64_t step = 0;
        try {
          step = std::stoll(it->second);
        } catch (...) {
          throw InputError(path + ": bad 'step' in __metadata__");
        }
        m["step"] = at::full({1}, step, at::kLong);
        auto lk = Lock(model);
        try {
          opt->LoadState(m);
        } catch (const InputError& e) {
          throw InputError(path + ": " + e.what());
        }
      });
    });
  }
  Napi::Value Lr(const Napi::CallbackInfo& info) {
    return Guard(info.Env(), [&]() -> Napi::Value { return Napi::Number::New(info.Env(), opt_->CurrentLr()); });
  }
  Napi::Value StepCount(const Napi::CallbackInfo& info) { return Napi::Number::New(info.Env(), static_cast<double>(opt_->step())); }
  Napi::Value Names(const Napi::CallbackInfo& info) {
    auto a = Napi::Array::New(info.Env(), opt_->names().size());
    for (size_t i = 0; i < opt_->names().size(); ++i) a.Set(static_cast<uint32_t>(i), opt_->names()[i]);
    return a;
  }
};

Napi::Value LrAtJs(const Napi::CallbackInfo& info) {
  return Guard(info.Env(), [&]() -> Napi::Value {
    auto s = ArgObject(info, 0, "schedule");
    double lr = GetNumber(s, "lr", std::nullopt, "schedule");
    auto sc = ReadSchedule(s, "schedule");
    if (info.Length() < 2 || !info[1].IsNumber()) throw ArgError("lrAt: step must be a non-negative integer");
    double k = info[1].As<Napi::Number>().DoubleValue();
    if (!(k >= 0) || k != std::floor(k)) throw ArgError("lrAt: step must be a non-negative integer");
    return Napi::Number::New(info.Env(), lr * optim::ScheduleFactor(sc, static_cast<int64_t>(k)));
  });
}

}  // namespace

void RegisterOptim(Napi::Env env, Napi::Object exports) {
  exports.Set("AdamW", AdamWWrap::Define(env));
  exports.Set("lrAt", Napi::Function::New(env, LrAtJs, "lrAt"));
}
}  // namespace pg
