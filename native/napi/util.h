// Argument checking, JS <-> tensor conversion, error mapping and promise workers shared by every
// binding. Rules: every exported function runs its body through pg::Guard (or a pg::Worker), so a
// C++ exception (c10::Error, std::exception, out-of-memory) becomes a JS Error and never reaches
// std::terminate; argument problems become TypeErrors naming the argument.
#pragma once
#include <napi.h>
#include <ATen/ATen.h>
#include <torch/types.h>
#include <torch/cuda.h>
#include <torch/utils.h>
#include <torch/csrc/autograd/autograd.h>
#include <torch/csrc/autograd/custom_function.h>

#include <functional>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/errors.h"

namespace pg {

/// Error category carried from a worker thread to the JS thread.
enum class ErrKind { Arg, Input, Disposed, Oom, Abort, Internal };
struct ErrInfo {
  ErrKind kind;
  std::string message;
};
/// Classifies the in-flight exception (call inside a catch block).
ErrInfo ClassifyCurrentException();
/// Builds the JS error object for an ErrInfo (TypeError for Arg, AbortError name for Abort,
/// `code` property: ERR_PG_ARG | ERR_PG_INPUT | ERR_PG_DISPOSED | ERR_PG_OOM | ABORT_ERR |
/// ERR_PG_INTERNAL; the same strings as lib/errors.ts).
Napi::Error MakeJsError(Napi::Env env, const ErrInfo& e);

/// Runs f() and converts any C++ exception to a thrown JS exception.
template <typename F>
Napi::Value Guard(Napi::Env env, F&& f) {
  try {
    return f();
  } catch (const Napi::Error&) {
    throw;
  } catch (...) {
    throw MakeJsError(env, ClassifyCurrentException());
  }
}

// ---- argument readers: `what` names the argument in error messages ----
Napi::Object ArgObject(const Napi::CallbackInfo& info, size_t i, const char* what, bool optional = false);
std::string ArgString(const Napi::CallbackInfo& info, size_t i, const char* what);
bool Has(const Napi::Object& o, const char* key);
double GetNumber(const Napi::Object& o, const char* key, std::optional<double> dflt, const char* what);
int64_t GetInt(const Napi::Object& o, const char* key, std::optional<int64_t> dflt, const char* what);
bool GetBool(const Napi::Object& o, const char* key, std::optional<bool> dflt, const char* what);
std::string GetString(const Napi::Object& o, const char* key, std::optional<std::string> dflt, const char* what);
std::vector<std::string> GetStringArray(const Napi::Object& o, const char* key, const char* what);
std::vector<int64_t> GetIntArray(const Napi::Object& o, const char* key, const char* what);

/// A JS tensor is `{data: Float32Array | Float64Array | Int32Array | BigInt64Array | Uint8Array,
/// shape: number[]}`; data length must equal the product of shape. The result is a CPU tensor that
/// owns a copy (safe to use on worker threads) with dtype float32/float64/int32/int64/uint8.
torch::Tensor TensorFromJs(const Napi::Value& v, const std::string& what);
/// Reads `o[key]` as a JS tensor (see TensorFromJs); throws ArgError naming `what.key` if absent.
torch::Tensor GetTensor(const Napi::Object& o, const char* key, const char* what);
/// CPU copy of t as a JS tensor `{data, shape}`: float16/bfloat16/float32 -> Float32Array,
/// float64 -> Float64Array, int32/int64 -> Int32Array (InputError if a value does not fit in
/// int32; token ids always do), bool/uint8 -> Uint8Array.
Napi::Object TensorToJs(Napi::Env env, const torch::Tensor& t);

/// Parses "cpu" | "cuda" | "cuda:N"; ArgError on anything else, InputError if CUDA is unavailable.
torch::Device ParseDevice(const std::string& s);

/// A promise-returning worker. `run` executes on a libuv pool thread with grad mode and the CUDA
/// device set for that thread (both are thread-local in libtorch); `done` converts the result on
/// the JS thread. Exceptions in either are mapped like Guard.
class Worker : public Napi::AsyncWorker {
 public:
  using Run = std::function<void()>;
  using Done = std::function<Napi::Value(Napi::Env)>;
  Worker(Napi::Env env, Run run, Done done, bool grad = false, std::optional<torch::Device> device = std::nullopt);
  Napi::Promise Promise() { return deferred_.Promise(); }
  /// Queues the worker and returns its promise.
  static Napi::Promise Start(Napi::Env env, Run run, Done done, bool grad = false, std::optional<torch::Device> device = std::nullopt);

 protected:
  void Execute() override;
  void OnOK() override;
  void OnError(const Napi::Error& e) override;

 private:
  Napi::Promise::Deferred deferred_;
  Run run_;
  Done done_;
  bool grad_;
  std::optional<torch::Device> device_;
  std::optional<ErrInfo> err_;
};

}  // namespace pg
