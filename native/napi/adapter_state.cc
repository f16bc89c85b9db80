// Model.emaUpdate / saveSnapshot / loadSnapshot (see napi/adapter_state.h): argument checks here,
// the math in lora/snapshots.{h,cc}, the file format in io/adapter_weights.{h,cc}. Every call runs under the model lock;
// the file calls run on a worker thread (the JS thread only queues them).
#include "napi/adapter_state.h"

#include <cmath>

#include "io/adapter_weights.h"
#include "io/host_state.h"
#include "lora/snapshots.h"
#include "napi/host_state.h"
#include "napi/model.h"
#include "napi/util.h"

namespace pg {

namespace {

std::string SnapshotName(const Napi::CallbackInfo& info, const char* what) {
  std::string name = ArgString(info, 0, what);
  if (name.empty()) throw ArgError(std::string(what) + " must be a non-empty string");
  if (name == "active" || name == "none") throw ArgError(std::string(what) + ": 'active' and 'none' are reserved");
  return name;
}

// Under ModelLock (which rejects a disposed model): the model must have an adapter.
void CheckUsable(DecoderModel& m) {
  if (!m.HasLora()) throw InputError("the model has no LoRA adapter (addLora / loadAdapter first)");
}

LoraAdapter& Snapshot(DecoderModel& m, const std::string& name) {
  LoraAdapter* s = m.FindSnapshot(name);
  if (!s) throw ArgError("no adapter snapshot named '" + name + "'");
  return *s;
}

}  // namespace

Napi::Value ModelEmaUpdate(const Napi::CallbackInfo& info, const std::shared_ptr<DecoderModel>& m) {
  std::string name = SnapshotName(info, "emaUpdate(name, decay): name");
  if (info.Length() < 2 || !info[1].IsNumber()) throw ArgError("emaUpdate(name, decay): decay must be a number in [0, 1]");
  const double decay = info[1].As<Napi::Number>().DoubleValue();
  if (!(decay >= 0 && decay <= 1)) throw ArgError("emaUpdate(name, decay): decay must be in [0, 1], got " + std::to_string(decay));
  ModelLock lk(*m);
  CheckUsable(*m);
  LoraAdapter& s = Snapshot(*m, name);
  lora::EmaUpdate(s.weights, m->ActiveAdapter().weights, decay);
  return info.Env().Undefined();
}

Napi::Value ModelSaveSnapshot(const Napi::CallbackInfo& info, const std::shared_ptr<DecoderModel>& m) {
  std::string name = SnapshotName(info, "saveSnapshot(name, path): name");
  if (info.Length() < 2 || !info[1].IsString()) throw ArgError("saveSnapshot(name, path): path must be a string");
  std::string path = info[1].As<Napi::String>().Utf8Value();
  return StartOnModel(
      info.Env(), m,
      [m, name, path]() {
        CheckUsable(*m);
        // Same file as earlier versions wrote from JS (Model.loraWeights() keys, F32), so their
        // checkpoints load.
        io::SaveWeights(path, Snapshot(*m, name).weights, {{"format", "pt"}, {"snapshot", name}});
      },
      nullptr);
}

Napi::Value ModelCaptureSnapshot(const Napi::CallbackInfo& info, const std::shared_ptr<DecoderModel>& m) {
  std::string name = SnapshotName(info, "captureSnapshot(name): name");
  auto res = std::make_shared<std::shared_ptr<io::HostState>>();
  return StartOnModel(
      info.Env(), m,
      [m, name, res]() {
        CheckUsable(*m);
        *res = std::make_shared<io::HostState>(io::CaptureWeights(Snapshot(*m, name).weights, {{"format", "pt"}, {"snapshot", name}}));
        io::WaitHostCopies(m->device());
      },
      [res](Napi::Env env) -> Napi::Value { return NewHostState(env, *res); }, false, ModelAccess::kShared);
}

Napi::Value ModelLoadSnapshot(const Napi::CallbackInfo& info, const std::shared_ptr<DecoderModel>& m, std::function<void(Napi::Env)> after) {
  std::string name = SnapshotName(info, "loadSnapshot(name, path): name");
  if (info.Length() < 2 || !info[1].IsString()) throw ArgError("loadSnapshot(name, path): path must be a string");
  std::string path = info[1].As<Napi::String>().Utf8Value();
  return Worker::Start(
      info.Env(),
      [m, name, path]() {
        lora::ModuleWeights like;
        {
          ModelLock lk(*m);
          CheckUsable(*m);
          like = m->ActiveAdapter().weights;  // shallow: names and shapes only
        }
        lora::ModuleWeights w = io::ReadWeightsLike(path, like);  // file read outside the lock
        ModelLock lk(*m);
        CheckUsable(*m);
        const LoraAdapter& a = m->ActiveAdapter();
        LoraAdapter s;
        s.config = a.config;
        s.scaling = a.scaling;
        s.num_layers = a.num_layers;
        for (auto& [stem, ab] : w) {
          auto it = a.weights.find(stem);
          if (it == a.weights.end() || !it->second.first.sizes().equals(ab.first.sizes()) || !it->second.second.sizes().equals(ab.second.sizes()))
            throw InputError(path + ": the adapter changed while the snapshot was read (module '" + stem + "')");
          s.weights[stem] = {ab.first.to(m->device()), ab.second.to(m->device())};
        }
        m->SetSnapshot(name, std::move(s));
      },
      [after](Napi::Env env) -> Napi::Value {
        if (after) after(env);
        return env.Undefined();
      },
      false, m->device());
}

}  // namespace pg
