// JS access to the safetensors reader/writer (native/io/safetensors.h), used for optimizer state
// in training checkpoints: `saveSafetensors(path, {name: JsTensor}, metadata?)` (atomic write) and
// `loadSafetensors(path) → {tensors: {name: JsTensor}, metadata}`. Errors name the file/tensor.
#include "io/safetensors.h"
#include "napi/util.h"

namespace pg {

static Napi::Value SaveSafetensors(const Napi::CallbackInfo& info) {
  return Guard(info.Env(), [&]() -> Napi::Value {
    std::string path = ArgString(info, 0, "saveSafetensors(path)");
    Napi::Object rec = ArgObject(info, 1, "saveSafetensors(path, tensors)");
    std::map<std::string, at::Tensor> tensors;
    Napi::Array keys = rec.GetPropertyNames();
    for (uint32_t i = 0; i < keys.Length(); ++i) {
      std::string k = keys.Get(i).As<Napi::String>().Utf8Value();
      tensors[k] = TensorFromJs(rec.Get(k), "tensors." + k);
    }
    std::map<std::string, std::string> meta;
    if (info.Length() > 2 && !info[2].IsUndefined()) {
      Napi::Object m = ArgObject(info, 2, "saveSafetensors(path, tensors, metadata)");
      Napi::Array mk = m.GetPropertyNames();
      for (uint32_t i = 0; i < mk.Length(); ++i) {
        std::string k = mk.Get(i).As<Napi::String>().Utf8Value();
        if (!m.Get(k).IsString()) throw ArgError("metadata." + k + " must be a string");
        meta[k] = m.Get(k).As<Napi::String>().Utf8Value();
      }
    }
    st::Save(path, tensors, meta);
    return info.Env().Undefined();
  });
}

static Napi::Value LoadSafetensors(const Napi::CallbackInfo& info) {
  return Guard(info.Env(), [&]() -> Napi::Value {
    std::string path = ArgString(info, 0, "loadSafetensors(path)");
    auto f = st::File::Open(path);
    Napi::Env env = info.Env();
    auto out = Napi::Object::New(env);
    auto ts = Napi::Object::New(env);
    for (const auto& [name, e] : f.entries()) ts.Set(name, TensorToJs(env, f.Read(name)));
    auto meta = Napi::Object::New(env);
    for (const auto& [k, v] : f.metadata()) meta.Set(k, v);
    out.Set("tensors", ts);
    out.Set("metadata", meta);
    return out;
  });
}

void RegisterIo(Napi::Env env, Napi::Object exports) {
  exports.Set("saveSafetensors", Napi::Function::New(env, SaveSafetensors, "saveSafetensors"));
  exports.Set("loadSafetensors", Napi::Function::New(env, LoadSafetensors, "loadSafetensors"));
}

}  // namespace pg
