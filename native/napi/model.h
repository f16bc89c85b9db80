// The JS `Model` object (napi/model.cc, an ObjectWrap around a shared DecoderModel) for the other
// bindings that take a model argument, and the one way every binding runs work on a model.
#pragma once
#include <napi.h>
#include <ATen/ATen.h>

#include <functional>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <string>
#include <vector>

#include "model/decoder.h"
#include "napi/util.h"

namespace pg {

/// Returns the model behind a JS `Model` instance; ArgError naming `what` if `v` is not one,
/// DisposedError ("model was disposed") if it was disposed.
std::shared_ptr<DecoderModel> UnwrapModel(const Napi::Value& v, const char* what);

/// How an operation holds the model's lock (DecoderModel::mutex): exclusive (the default: it may
/// change the model or runs with autograd) or shared (read-only inference: generate,
/// sequenceLogprobs, prefixLogprobs, which then run concurrently with each other).
enum class ModelAccess { kExclusive, kShared };

/// Holds a model's lock for its scope, and throws DisposedError("model was disposed") when the
/// model was disposed before the lock was taken. The one way a binding runs work on a model:
/// directly on the JS thread for quick calls, or through StartOnModel for work on a worker thread.
class ModelLock {
 public:
  explicit ModelLock(DecoderModel& m, ModelAccess access = ModelAccess::kExclusive);

 private:
  std::unique_lock<std::shared_mutex> excl_;
  std::shared_lock<std::shared_mutex> shared_;
};

/// Runs `run` on a libuv worker thread (pg::Worker) with the model's device set and grad mode
/// `grad`, under ModelLock with `access`; `done` converts the result on the JS thread. Returns the
/// promise.
Napi::Promise StartOnModel(Napi::Env env, const std::shared_ptr<DecoderModel>& model, std::function<void()> run, Worker::Done done, bool grad = false,
                           ModelAccess access = ModelAccess::kExclusive);

/// The LoRA parameters of a JS Model (for the optimizer and data-parallel collectives): the
/// tensors and PEFT names in LoraParameters order, and the model that owns them (lock it with
/// ModelLock while using them). InputError when the model has no adapter.
struct ModelParamSet {
  std::vector<at::Tensor> params;
  std::vector<std::string> names;
  std::shared_ptr<DecoderModel> model;
};
ModelParamSet ModelParams(const Napi::Value& v, const char* what);

}  // namespace pg
