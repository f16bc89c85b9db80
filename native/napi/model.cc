// JS `Model` class: an ObjectWrap around a shared DecoderModel. Every method goes through pg::Guard
// or a pg::Worker; every operation holds the model's lock (ModelLock, StartOnModel in
// napi/model.h): exclusively, so calls on one model are serialised, except the read-only
// inference calls (generate, sequenceLogprobs, prefixLogprobs), which hold it shared.
#include "napi/model.h"

#include <torch/cuda.h>

#include <map>
#include <mutex>
#include <unordered_map>

#include "napi/adapter_state.h"
#include "napi/host_state.h"
#include "napi/args.h"
#include "napi/util.h"
#include "steps/steps.h"

namespace pg {

namespace {

std::mutex g_ctor_mu;
std::unordered_map<napi_env, Napi::FunctionReference*> g_ctors;

Napi::FunctionReference* Ctor(Napi::Env env) {
  std::lock_guard<std::mutex> lk(g_ctor_mu);
  auto it = g_ctors.find(env);
  return it == g_ctors.end() ? nullptr : it->second;
}

/// process.emitWarning(message, { code: 'PG_NON_FINITE_WEIGHTS' }) when a load with
/// allowNonFinite found NaN / Inf weights (io/finite.h); on the JS thread, after the load.
void EmitNonFiniteWarning(Napi::Env env, const NonFiniteWeights& nf) {
  if (nf.warning.empty()) return;
  Napi::Object process = env.Global().Get("process").As<Napi::Object>();
  Napi::Object opts = Napi::Object::New(env);
  opts.Set("code", "PG_NON_FINITE_WEIGHTS");
  process.Get("emitWarning").As<Napi::Function>().Call(process, {Napi::String::New(env, nf.warning), opts});
}

}  // namespace

class ModelWrap : public Napi::ObjectWrap<ModelWrap> {
 public:
  static Napi::Function Define(Napi::Env env) {
    return DefineClass(env, "Model",
                       {StaticMethod("load", &ModelWrap::Load),
                        InstanceAccessor("config", &ModelWrap::GetConfig, nullptr),
                        InstanceAccessor("device", &ModelWrap::GetDevice, nullptr),
                        InstanceAccessor("dtype", &ModelWrap::GetDtype, nullptr),
                        InstanceAccessor("disposed", &ModelWrap::GetDisposed, nullptr),
                        InstanceMethod("forward", &ModelWrap::Forward),
                        InstanceMethod("forwardChunked", &ModelWrap::ForwardChunked),
                        InstanceMethod("addLora", &ModelWrap::AddLora),
                        InstanceMethod("hasLora", &ModelWrap::HasLora),
                        InstanceMethod("setAdapterEnabled", &ModelWrap::SetAdapterEnabled),
                        InstanceMethod("adapterEnabled", &ModelWrap::AdapterEnabled),
                        InstanceMethod("loraConfig", &ModelWrap::LoraConfigJs),
                        InstanceMethod("snapshotAdapter", &ModelWrap::SnapshotAdapter),
                        InstanceMethod("dropSnapshot", &ModelWrap::DropSnapshot),
                        InstanceMethod("emaUpdate", &ModelWrap::EmaUpdate),
                        InstanceMethod("saveSnapshot", &ModelWrap::SaveSnapshot),
                        InstanceMethod("loadSnapshot", &ModelWrap::LoadSnapshot),
                        InstanceMethod("saveAdapter", &ModelWrap::SaveAdapter),
                        InstanceMethod("captureAdapter", &ModelWrap::CaptureAdapter),
                        InstanceMethod("captureSnapshot", &ModelWrap::CaptureSnapshot),
                        InstanceMethod("loadAdapter", &ModelWrap::LoadAdapter),
                        InstanceMethod("loraParameterNames", &ModelWrap::LoraParameterNames),
                        InstanceMethod("loraWeights", &ModelWrap::LoraWeights),
                        InstanceMethod("setLoraWeights", &ModelWrap::SetLoraWeights),
                        InstanceMethod("loraGrads", &ModelWrap::LoraGrads),
                        InstanceMethod("zeroGrad", &ModelWrap::ZeroGrad),
                        InstanceMethod("crossEntropyBackward", &ModelWrap::CrossEntropyBackward),
                        InstanceMethod("parameterBytes", &ModelWrap::ParameterBytes),
                        InstanceMethod("setGradientCheckpointing", &ModelWrap::SetGradientCheckpointing),
                        InstanceMethod("gradientCheckpointing", &ModelWrap::GradientCheckpointing),
                        InstanceMethod("synchronize", &ModelWrap::Synchronize),
                        InstanceMethod("setLoraFloat32Branch", &ModelWrap::SetLoraFloat32Branch),
                        InstanceMethod("loraFloat32Branch", &ModelWrap::LoraFloat32Branch),
                        InstanceMethod("dispose", &ModelWrap::Dispose)});
  }

  explicit ModelWrap(const Napi::CallbackInfo& info) : Napi::ObjectWrap<ModelWrap>(info) {
    if (info.Length() != 1 || !info[0].IsExternal()) {
      throw MakeJsError(info.Env(), {ErrKind::Arg, "Model cannot be constructed directly; use Model.load(dir, options)"});
    }
    auto* sp = info[0].As<Napi::External<std::shared_ptr<DecoderModel>>>().Data();
    model_ = *sp;
    accounted_ = model_->ParameterBytes();
    Napi::MemoryManagement::AdjustExternalMemory(info.Env(), accounted_);
  }

  ~ModelWrap() override {
    // Finalizer: release V8's account of the weights; the tensors go with the last shared_ptr.
    if (accounted_ != 0) {
      try {
        Napi::MemoryManagement::AdjustExternalMemory(Env(), -accounted_);
      } catch (...) {
      }
    }
  }

  std::shared_ptr<DecoderModel> model() const {
    if (!model_ || model_->disposed()) throw DisposedError("model was disposed");
    return model_;
  }

 private:
  std::shared_ptr<DecoderModel> model_;
  int64_t accounted_ = 0;

  /// Re-syncs V8's external memory with ParameterBytes (after adapters change).
  void Reaccount(Napi::Env env) {
    int64_t now = model_ ? model_->ParameterBytes() : 0;
    if (now != accounted_) Napi::MemoryManagement::AdjustExternalMemory(env, now - accounted_);
    accounted_ = now;
  }

  static Napi::Value Load(const Napi::CallbackInfo& info) {
    return Guard(info.Env(), [&]() -> Napi::Value {
      std::string dir = ArgString(info, 0, "dir");
      Napi::Object opts = ArgObject(info, 1, "options", true);
      std::string dev_s = GetString(opts, "device", std::string("cpu"), "options");
      at::Device dev = ParseDevice(dev_s);
      at::ScalarType dt = ParseDtype(GetString(opts, "dtype", std::string(dev.is_cuda() ? "bfloat16" : "float32"), "options"));
      auto nf = std::make_shared<NonFiniteWeights>();
      nf->allow = GetBool(opts, "allowNonFinite", false, "options");
      auto holder = std::make_shared<std::shared_ptr<DecoderModel>>();
      return Worker::Start(
          info.Env(), [dir, dev, dt, holder, nf]() { *holder = DecoderModel::Load(dir, dev, dt, *nf); },
          [holder, nf](Napi::Env env) -> Napi::Value {
            EmitNonFiniteWarning(env, *nf);
            auto* ctor = Ctor(env);
            if (!ctor) throw InputError("Model class not registered in this environment");
            auto ext = Napi::External<std::shared_ptr<DecoderModel>>::New(env, holder.get());
            Napi::Object obj = ctor->New({ext});
            return obj;
          },
          false, dev);
    });
  }

  Napi::Value GetConfig(const Napi::CallbackInfo& info) {
    return Guard(info.Env(), [&]() -> Napi::Value {
      auto m = model();
      Napi::Object JSON = info.Env().Global().Get("JSON").As<Napi::Object>();
      return JSON.Get("parse").As<Napi::Function>().Call(JSON, {Napi::String::New(info.Env(), m->config().json)});
    });
  }
  Napi::Value GetDevice(const Napi::CallbackInfo& info) {
    return Guard(info.Env(), [&]() -> Napi::Value { return Napi::String::New(info.Env(), model()->device().str()); });
  }
  Napi::Value GetDtype(const Napi::CallbackInfo& info) {
    return Guard(info.Env(), [&]() -> Napi::Value { return Napi::String::New(info.Env(), DtypeName(model()->dtype())); });
  }
  Napi::Value GetDisposed(const Napi::CallbackInfo& info) { return Napi::Boolean::New(info.Env(), !model_ || model_->disposed()); }

  Napi::Value Forward(const Napi::CallbackInfo& info) {
    return Guard(info.Env(), [&]() -> Napi::Value {
      auto m = model();
      Napi::Object o = ArgObject(info, 0, "forward(args)");
      at::Tensor ids = ReadIds(o, "inputIds", "args");
      at::Tensor mask = ReadMask(o, "attentionMask", ids, "inputIds", "args", /*optional=*/true);
      bool want_logits = true, want_hidden = false;
      if (Has(o, "outputs")) {
        want_logits = false;
        for (const auto& s : GetStringArray(o, "outputs", "args")) {
          if (s == "logits")
            want_logits = true;
          else if (s == "hidden")
            want_hidden = true;
          else
            throw ArgError("args.outputs entries must be 'logits' or 'hidden', got '" + s + "'");
        }
      }
      AdapterSel sel = ReadAdapter(o, "adapter", "args");
      auto res = std::make_shared<std::pair<at::Tensor, at::Tensor>>();
      return StartOnModel(
          info.Env(), m,
          [m, ids, mask, sel, want_logits, want_hidden, res]() {
            at::NoGradGuard ng;
            at::Tensor h = m->Forward(ids, mask, std::nullopt, sel);
            if (want_logits) res->first = m->Logits(h).to(at::kCPU);
            if (want_hidden) res->second = h.to(at::kFloat).to(at::kCPU);
          },
          [res](Napi::Env env) -> Napi::Value {
            Napi::Object out = Napi::Object::New(env);
            if (res->first.defined()) out.Set("logits", TensorToJs(env, res->first));
            if (res->second.defined()) out.Set("hidden", TensorToJs(env, res->second));
            return out;
          });
    });
  }

  /// forwardChunked({inputIds, attentionMask, chunk, adapter?}) -> {logits}: the same logits as
  /// forward, computed by feeding `chunk` tokens at a time through a KV cache (prefill + decode
  /// path, for tests of the cache the generator uses).
  Napi::Value ForwardChunked(const Napi::CallbackInfo& info) {
    return Guard(info.Env(), [&]() -> Napi::Value {
      auto m = model();
      Napi::Object o = ArgObject(info, 0, "forwardChunked(args)");
      at::Tensor ids = ReadIds(o, "inputIds", "args");
      at::Tensor mask = ReadMask(o, "attentionMask", ids, "inputIds", "args", /*optional=*/true);
      int64_t chunk = GetInt(o, "chunk", 1, "args");
      if (chunk < 1) throw ArgError("args.chunk must be >= 1");
      AdapterSel sel = ReadAdapter(o, "adapter", "args");
      auto res = std::make_shared<at::Tensor>();
      return StartOnModel(
          info.Env(), m,
          [m, ids, mask, sel, chunk, res]() {
            at::NoGradGuard ng;
            const int64_t B = ids.size(0), T = ids.size(1);
            KVCache cache = m->NewCache(B, T);
            std::vector<at::Tensor> outs;
            for (int64_t s = 0; s < T; s += chunk) {
              int64_t len = std::min(chunk, T - s);
              at::Tensor h = m->Forward(ids.narrow(1, s, len), mask.narrow(1, 0, s + len), std::nullopt, sel, &cache);
              outs.push_back(m->Logits(h));
            }
            *res = at::cat(outs, 1).to(at::kCPU);
          },
          [res](Napi::Env env) -> Napi::Value {
            Napi::Object out = Napi::Object::New(env);
            out.Set("logits", TensorToJs(env, *res));
            return out;
          });
    });
  }

  Napi::Value AddLora(const Napi::CallbackInfo& info) {
    return Guard(info.Env(), [&]() -> Napi::Value {
      auto m = model();
      Napi::Object o = ArgObject(info, 0, "lora");
      LoraConfig c;
      c.r = GetInt(o, "r", std::nullopt, "lora");
      c.alpha = GetNumber(o, "alpha", std::nullopt, "lora");
      c.dropout = GetNumber(o, "dropout", 0.0, "lora");
      c.use_rslora = GetBool(o, "useRslora", false, "lora");
      if (Has(o, "targetModules")) c.target_modules = GetStringArray(o, "targetModules", "lora");
      int64_t seed = GetInt(o, "seed", 0, "lora");
      if (seed < 0) throw ArgError("lora.seed must be a non-negative integer");
      c.seed = static_cast<uint64_t>(seed);
      {
        ModelLock lk(*m);
        m->AddLora(c);
      }
      Reaccount(info.Env());
      return info.Env().Undefined();
    });
  }

  Napi::Value HasLora(const Napi::CallbackInfo& info) {
    return Guard(info.Env(), [&]() -> Napi::Value { return Napi::Boolean::New(info.Env(), model()->HasLora()); });
  }

  Napi::Value SetAdapterEnabled(const Napi::CallbackInfo& info) {
    return Guard(info.Env(), [&]() -> Napi::Value {
      auto m = model();
      if (info.Length() < 1 || !info[0].IsBoolean()) throw ArgError("setAdapterEnabled(enabled): enabled must be a boolean");
      ModelLock lk(*m);
      m->SetAdapterEnabled(info[0].As<Napi::Boolean>().Value());
      return info.Env().Undefined();
    });
  }
  Napi::Value AdapterEnabled(const Napi::CallbackInfo& info) {
    return Guard(info.Env(), [&]() -> Napi::Value { return Napi::Boolean::New(info.Env(), model()->AdapterEnabled()); });
  }

  Napi::Value LoraConfigJs(const Napi::CallbackInfo& info) {
    return Guard(info.Env(), [&]() -> Napi::Value {
      auto m = model();
      ModelLock lk(*m);
      if (!m->HasLora()) return info.Env().Null();
      const LoraConfig& c = m->ActiveAdapter().config;
      Napi::Env env = info.Env();
      Napi::Object o = Napi::Object::New(env);
      o.Set("r", static_cast<double>(c.r));
      o.Set("alpha", c.alpha);
      o.Set("dropout", c.dropout);
      o.Set("useRslora", c.use_rslora);
      o.Set("scaling", c.Scaling());
      Napi::Array t = Napi::Array::New(env, c.target_modules.size());
      for (size_t i = 0; i < c.target_modules.size(); ++i) t.Set(static_cast<uint32_t>(i), c.target_modules[i]);
      o.Set("targetModules", t);
      return o;
    });
  }

  Napi::Value SnapshotAdapter(const Napi::CallbackInfo& info) {
    return Guard(info.Env(), [&]() -> Napi::Value {
      auto m = model();
      std::string name = ArgString(info, 0, "snapshotAdapter(name): name");
      if (name == "active" || name == "none") throw ArgError("snapshotAdapter(name): 'active' and 'none' are reserved");
      {
        ModelLock lk(*m);
        m->SnapshotAdapter(name);
      }
      Reaccount(info.Env());
      return info.Env().Undefined();
    });
  }

  Napi::Value DropSnapshot(const Napi::CallbackInfo& info) {
    return Guard(info.Env(), [&]() -> Napi::Value {
      auto m = model();
      std::string name = ArgString(info, 0, "dropSnapshot(name): name");
      {
        ModelLock lk(*m);
        m->DropSnapshot(name);
      }
      Reaccount(info.Env());
      return info.Env().Undefined();
    });
  }

  // Snapshot state that stays native (implementations in napi/adapter_state.cc).
  Napi::Value EmaUpdate(const Napi::CallbackInfo& info) {
    return Guard(info.Env(), [&]() -> Napi::Value { return ModelEmaUpdate(info, model()); });
  }
  Napi::Value SaveSnapshot(const Napi::CallbackInfo& info) {
    return Guard(info.Env(), [&]() -> Napi::Value { return ModelSaveSnapshot(info, model()); });
  }
  Napi::Value LoadSnapshot(const Napi::CallbackInfo& info) {
    return Guard(info.Env(), [&]() -> Napi::Value {
      auto selfp = std::make_shared<Napi::ObjectReference>(Napi::Persistent(Value()));
      return ModelLoadSnapshot(info, model(), [this, selfp](Napi::Env env) {
        Reaccount(env);
        selfp->Reset();
      });
    });
  }

  Napi::Value SaveAdapter(const Napi::CallbackInfo& info) {
    return Guard(info.Env(), [&]() -> Napi::Value {
      auto m = model();
      std::string dir = ArgString(info, 0, "saveAdapter(dir): dir");
      Napi::Object o = ArgObject(info, 1, "saveAdapter options", true);
      std::string base = GetString(o, "baseModelName", std::string(), "options");
      return StartOnModel(
          info.Env(), m, [m, dir, base]() { m->SaveAdapter(dir, base); }, [](Napi::Env env) -> Napi::Value { return env.Undefined(); });
    });
  }

  /// captureAdapter() -> Promise<HostState>: the trainable adapter copied to host memory (float32,
  /// pinned on CUDA) under the model lock (shared: read-only); HostState.save(dir, {baseModelName})
  /// then writes the same PEFT files as saveAdapter without the lock (napi/host_state.h). For
  /// checkpoints written beside the next step (issue 36).
  Napi::Value CaptureAdapter(const Napi::CallbackInfo& info) {
    return Guard(info.Env(), [&]() -> Napi::Value {
      auto m = model();
      auto res = std::make_shared<std::shared_ptr<io::HostState>>();
      return StartOnModel(
          info.Env(), m,
          [m, res]() {
            *res = std::make_shared<io::HostState>(io::CaptureAdapter(m->ActiveAdapter()));
            io::WaitHostCopies(m->device());
          },
          [res](Napi::Env env) -> Napi::Value { return NewHostState(env, *res); }, false, ModelAccess::kShared);
    });
  }
  /// captureSnapshot(name) -> Promise<HostState>: snapshot `name` likewise (the file saveSnapshot writes).
  Napi::Value CaptureSnapshot(const Napi::CallbackInfo& info) {
    return Guard(info.Env(), [&]() -> Napi::Value { return ModelCaptureSnapshot(info, model()); });
  }

  Napi::Value LoadAdapter(const Napi::CallbackInfo& info) {
    return Guard(info.Env(), [&]() -> Napi::Value {
      auto m = model();
      std::string dir = ArgString(info, 0, "loadAdapter(dir): dir");
      Napi::Object o = ArgObject(info, 1, "loadAdapter options", true);
      auto nf = std::make_shared<NonFiniteWeights>();
      nf->allow = GetBool(o, "allowNonFinite", false, "options");
      Napi::ObjectReference self = Napi::Persistent(Value());
      auto selfp = std::make_shared<Napi::ObjectReference>(std::move(self));
      return StartOnModel(
          info.Env(), m, [m, dir, nf]() { m->LoadAdapter(dir, *nf); },
          [this, selfp, nf](Napi::Env env) -> Napi::Value {
            EmitNonFiniteWarning(env, *nf);
            Reaccount(env);
            selfp->Reset();
            return env.Undefined();
          });
    });
  }

  Napi::Value LoraParameterNames(const Napi::CallbackInfo& info) {
    return Guard(info.Env(), [&]() -> Napi::Value {
      auto m = model();
      ModelLock lk(*m);
      auto names = m->LoraParameterNames();
      Napi::Array a = Napi::Array::New(info.Env(), names.size());
      for (size_t i = 0; i < names.size(); ++i) a.Set(static_cast<uint32_t>(i), names[i]);
      return a;
    });
  }

  Napi::Value TensorRecord(const Napi::CallbackInfo& info, bool grads) {
    auto m = model();
    ModelLock lk(*m);
    auto names = m->LoraParameterNames();
    auto params = m->LoraParameters();
    Napi::Object o = Napi::Object::New(info.Env());
    for (size_t i = 0; i < names.size(); ++i) {
      at::Tensor t = grads ? params[i].grad() : params[i];
      if (!t.defined()) t = at::zeros_like(params[i]);
      o.Set(names[i], TensorToJs(info.Env(), t));
    }
    return o;
  }
  Napi::Value LoraWeights(const Napi::CallbackInfo& info) {
    return Guard(info.Env(), [&]() -> Napi::Value { return TensorRecord(info, false); });
  }
  Napi::Value LoraGrads(const Napi::CallbackInfo& info) {
    return Guard(info.Env(), [&]() -> Napi::Value { return TensorRecord(info, true); });
  }

  Napi::Value SetLoraWeights(const Napi::CallbackInfo& info) {
    return Guard(info.Env(), [&]() -> Napi::Value {
      auto m = model();
      Napi::Object rec = ArgObject(info, 0, "setLoraWeights(record)");
      ModelLock lk(*m);
      auto names = m->LoraParameterNames();
      auto params = m->LoraParameters();
      std::map<std::string, size_t> idx;
      for (size_t i = 0; i < names.size(); ++i) idx[names[i]] = i;
      std::vector<std::pair<size_t, at::Tensor>> updates;
      Napi::Array keys = rec.GetPropertyNames();
      for (uint32_t k = 0; k < keys.Length(); ++k) {
        std::string key = keys.Get(k).As<Napi::String>().Utf8Value();
        auto it = idx.find(key);
        if (it == idx.end()) throw ArgError("setLoraWeights: unknown LoRA parameter '" + key + "'");
        at::Tensor t = TensorFromJs(rec.Get(key), "record['" + key + "']");
        if (t.sizes() != params[it->second].sizes()) throw ArgError("setLoraWeights: record['" + key + "'] has the wrong shape");
        if (!t.is_floating_point()) throw ArgError("setLoraWeights: record['" + key + "'] must be a float tensor");
        updates.emplace_back(it->second, t);
      }
      at::NoGradGuard ng;
      for (auto& u : updates) params[u.first].copy_(u.second.to(at::kFloat));
      return info.Env().Undefined();
    });
  }

  Napi::Value ZeroGrad(const Napi::CallbackInfo& info) {
    return Guard(info.Env(), [&]() -> Napi::Value {
      auto m = model();
      ModelLock lk(*m);
      if (m->HasLora())
        for (auto& p : m->LoraParameters()) p.mutable_grad() = at::Tensor();
      return info.Env().Undefined();
    });
  }

  Napi::Value CrossEntropyBackward(const Napi::CallbackInfo& info) {
    return Guard(info.Env(), [&]() -> Napi::Value {
      auto m = model();
      Napi::Object o = ArgObject(info, 0, "crossEntropyBackward(args)");
      at::Tensor ids = ReadIds(o, "inputIds", "args");
      at::Tensor mask = ReadMask(o, "attentionMask", ids, "inputIds", "args", /*optional=*/true);
      at::Tensor labels = GetTensor(o, "labels", "args");
      if (labels.sizes() != ids.sizes() || labels.is_floating_point()) throw ArgError("args.labels must be an integer tensor shaped like inputIds");
      labels = labels.to(at::kLong);
      AdapterSel sel = ReadAdapter(o, "adapter", "args");
      auto loss = std::make_shared<double>(0);
      return StartOnModel(
          info.Env(), m, [m, ids, mask, labels, sel, loss]() { *loss = steps::SftBackward(*m, ids, mask, labels, sel); },
          [loss](Napi::Env env) -> Napi::Value {
            Napi::Object out = Napi::Object::New(env);
            out.Set("loss", *loss);
            return out;
          },
          /*grad=*/true);
    });
  }

  /// setGradientCheckpointing(on: boolean): activation recomputation per decoder layer for
  /// training calls (DecoderModel::SetGradientCheckpointing). TypeError when `on` is not a boolean.
  Napi::Value SetGradientCheckpointing(const Napi::CallbackInfo& info) {
    return Guard(info.Env(), [&]() -> Napi::Value {
      auto m = model();
      if (info.Length() < 1 || !info[0].IsBoolean()) throw ArgError("setGradientCheckpointing(on): on must be a boolean");
      ModelLock lk(*m);
      m->SetGradientCheckpointing(info[0].As<Napi::Boolean>().Value());
      return info.Env().Undefined();
    });
  }
  Napi::Value GradientCheckpointing(const Napi::CallbackInfo& info) {
    return Guard(info.Env(), [&]() -> Napi::Value { return Napi::Boolean::New(info.Env(), model()->GradientCheckpointing()); });
  }

  /// setLoraFloat32Branch(on: boolean): LoRA branch precision in bf16/fp16 models
  /// (DecoderModel::SetLoraFloat32Branch; default true = float32 as peft). TypeError on a non-boolean.
  Napi::Value SetLoraFloat32Branch(const Napi::CallbackInfo& info) {
    return Guard(info.Env(), [&]() -> Napi::Value {
      auto m = model();
      if (info.Length() < 1 || !info[0].IsBoolean()) throw ArgError("setLoraFloat32Branch(on): on must be a boolean");
      ModelLock lk(*m);
      m->SetLoraFloat32Branch(info[0].As<Napi::Boolean>().Value());
      return info.Env().Undefined();
    });
  }
  Napi::Value LoraFloat32Branch(const Napi::CallbackInfo& info) {
    return Guard(info.Env(), [&]() -> Napi::Value { return Napi::Boolean::New(info.Env(), model()->LoraFloat32Branch()); });
  }

  /// synchronize(): blocks the JS thread until all queued device work on the model's CUDA
  /// device has finished (torch::cuda::synchronize); a no-op on CPU. For benchmark timing.
  /// Waits for a running operation on this model first (takes the model lock).
  Napi::Value Synchronize(const Napi::CallbackInfo& info) {
    return Guard(info.Env(), [&]() -> Napi::Value {
      auto m = model();
      ModelLock lk(*m);
      if (m->device().is_cuda()) torch::cuda::synchronize(m->device().index() < 0 ? 0 : m->device().index());
      return info.Env().Undefined();
    });
  }

  Napi::Value ParameterBytes(const Napi::CallbackInfo& info) {
    return Guard(info.Env(), [&]() -> Napi::Value {
      auto m = model();
      ModelLock lk(*m);
      return Napi::Number::New(info.Env(), static_cast<double>(m->ParameterBytes()));
    });
  }

  /// Frees the weights now (waits for a running operation on this model to finish). Idempotent.
  Napi::Value Dispose(const Napi::CallbackInfo& info) {
    return Guard(info.Env(), [&]() -> Napi::Value {
      if (model_ && !model_->disposed()) {
        std::unique_lock<std::shared_mutex> lk(model_->mutex());  // not ModelLock: disposing twice is a no-op
        model_->Dispose();
      }
      if (accounted_ != 0) Napi::MemoryManagement::AdjustExternalMemory(info.Env(), -accounted_);
      accounted_ = 0;
      return info.Env().Undefined();
    });
  }
};

std::shared_ptr<DecoderModel> UnwrapModel(const Napi::Value& v, const char* what) {
  Napi::FunctionReference* ctor = Ctor(v.Env());
  if (!ctor || !v.IsObject() || !v.As<Napi::Object>().InstanceOf(ctor->Value())) throw ArgError(std::string(what) + " must be a Model (from Model.load)");
  ModelWrap* w = Napi::ObjectWrap<ModelWrap>::Unwrap(v.As<Napi::Object>());
  return w->model();
}

ModelLock::ModelLock(DecoderModel& m, ModelAccess access) {
  if (access == ModelAccess::kShared)
    shared_ = std::shared_lock<std::shared_mutex>(m.mutex());
  else
    excl_ = std::unique_lock<std::shared_mutex>(m.mutex());
  if (m.disposed()) throw DisposedError("model was disposed");
}

Napi::Promise StartOnModel(Napi::Env env, const std::shared_ptr<DecoderModel>& model, std::function<void()> run, Worker::Done done, bool grad,
                           ModelAccess access) {
  return Worker::Start(
      env,
      [model, run = std::move(run), access]() {
        ModelLock lk(*model, access);
        run();
      },
      std::move(done), grad, model->device());
}

ModelParamSet ModelParams(const Napi::Value& v, const char* what) {
  auto m = UnwrapModel(v, what);
  ModelLock lk(*m);
  if (!m->HasLora()) throw InputError(std::string(what) + ": the model has no LoRA adapter (addLora / loadAdapter first)");
  ModelParamSet s;
  s.params = m->LoraParameters();
  s.names = m->LoraParameterNames();
  s.model = m;
  return s;
}

void RegisterModel(Napi::Env env, Napi::Object exports) {
  Napi::Function f = ModelWrap::Define(env);
  auto* ref = new Napi::FunctionReference(Napi::Persistent(f));
  {
    std::lock_guard<std::mutex> lk(g_ctor_mu);
    g_ctors[env] = ref;
  }
  env.AddCleanupHook([env]() {
    std::lock_guard<std::mutex> lk(g_ctor_mu);
    auto it = g_ctors.find(env);
    if (it != g_ctors.end()) {
      delete it->second;
      g_ctors.erase(it);
    }
  });
  exports.Set("Model", f);
}

}  // namespace pg
