#include "napi/util.h"

#include <c10/util/Exception.h>

#include <cstring>
#include <new>
#include <sstream>

namespace pg {

ErrInfo ClassifyCurrentException() {
  try {
    throw;
  } catch (const ArgError& e) {
    return {ErrKind::Arg, e.what()};
  } catch (const InputError& e) {
    return {ErrKind::Input, e.what()};
  } catch (const DisposedError& e) {
    return {ErrKind::Disposed, e.what()};
  } catch (const AbortedError& e) {
    return {ErrKind::Abort, e.what()};
  } catch (const c10::OutOfMemoryError& e) {
    return {ErrKind::Oom, std::string("out of memory: ") + e.what_without_backtrace()};
  } catch (const std::bad_alloc& e) {
    return {ErrKind::Oom, "out of memory (host allocation failed)"};
  } catch (const c10::Error& e) {
    std::string m = e.what_without_backtrace();
    if (m.find("out of memory") != std::string::npos || m.find("can't allocate memory") != std::string::npos)
      return {ErrKind::Oom, "out of memory: " + m};  // CUDA OOM, or a failed host allocation (DefaultCPUAllocator)
    return {ErrKind::Internal, "libtorch: " + m};
  } catch (const Napi::Error& e) {
    return {ErrKind::Internal, e.Message()};
  } catch (const std::exception& e) {
    return {ErrKind::Internal, e.what()};
  } catch (...) {
    return {ErrKind::Internal, "unknown native exception"};
  }
}

Napi::Error MakeJsError(Napi::Env env, const ErrInfo& e) {
  Napi::Error err = e.kind == ErrKind::Arg ? Napi::TypeError::New(env, e.message) : Napi::Error::New(env, e.message);
  const char* code = "ERR_PG_INTERNAL";
  switch (e.kind) {
    case ErrKind::Arg:
      code = "ERR_PG_ARG";
      break;
    case ErrKind::Input:
      code = "ERR_PG_INPUT";
      break;
    case ErrKind::Disposed:
      code = "ERR_PG_DISPOSED";
      break;
    case ErrKind::Oom:
      code = "ERR_PG_OOM";
      break;
    case ErrKind::Abort:
      code = "ABORT_ERR";
      break;
    default:
      break;
  }
  err.Set("code", Napi::String::New(env, code));
  if (e.kind == ErrKind::Abort) err.Set("name", Napi::String::New(env, "AbortError"));
  return err;
}

Napi::Object ArgObject(const Napi::CallbackInfo& info, size_t i, const char* what, bool optional) {
  if (info.Length() <= i || info[i].IsUndefined()) {
    if (optional) return Napi::Object::New(info.Env());
    throw ArgError(std::string(what) + " is required (an object)");
  }
  if (!info[i].IsObject() || info[i].IsArray()) throw ArgError(std::string(what) + " must be an object");
  return info[i].As<Napi::Object>();
}

std::string ArgString(const Napi::CallbackInfo& info, size_t i, const char* what) {
  if (info.Length() <= i || !info[i].IsString()) throw ArgError(std::string(what) + " must be a string");
  return info[i].As<Napi::String>().Utf8Value();
}

bool Has(const Napi::Object& o, const char* key) {
  return o.Has(key) && !o.Get(key).IsUndefined() && !o.Get(key).IsNull();
}

static std::string Name(const char* what, const char* key) {
  return std::string(what) + "." + key;
}

double GetNumber(const Napi::Object& o, const char* key, std::optional<double> dflt, const char* what) {
  if (!Has(o, key)) {
    if (dflt) return *dflt;
    throw ArgError(Name(what, key) + " is required (a number)");
  }
  Napi::Value v = o.Get(key);
  if (!v.IsNumber()) throw ArgError(Name(what, key) + " must be a number");
  double d = v.As<Napi::Number>().DoubleValue();
  if (!std::isfinite(d)) throw ArgError(Name(what, key) + " must be finite");
  return d;
}

int64_t GetInt(const Napi::Object& o, const char* key, std::optional<int64_t> dflt, const char* what) {
  if (!Has(o, key)) {
    if (dflt) return *dflt;
    throw ArgError(Name(what, key) + " is required (an integer)");
  }
  Napi::Value v = o.Get(key);
  if (!v.IsNumber()) throw ArgError(Name(what, key) + " must be an integer");
  double d = v.As<Napi::Number>().DoubleValue();
  if (!std::isfinite(d) || d != std::floor(d) || std::fabs(d) > 9.007199254740991e15) throw ArgError(Name(what, key) + " must be an integer");
  return static_cast<int64_t>(d);
}

bool GetBool(const Napi::Object& o, const char* key, std::optional<bool> dflt, const char* what) {
  if (!Has(o, key)) {
    if (dflt) return *dflt;
    throw ArgError(Name(what, key) + " is required (a boolean)");
  }
  Napi::Value v = o.Get(key);
  if (!v.IsBoolean()) throw ArgError(Name(what, key) + " must be a boolean");
  return v.As<Napi::Boolean>().Value();
}

std::string GetString(const Napi::Object& o, const char* key, std::optional<std::string> dflt, const char* what) {
  if (!Has(o, key)) {
    if (dflt) return *dflt;
    throw ArgError(Name(what, key) + " is required (a string)");
  }
  Napi::Value v = o.Get(key);
  if (!v.IsString()) throw ArgError(Name(what, key) + " must be a string");
  return v.As<Napi::String>().Utf8Value();
}

std::vector<std::string> GetStringArray(const Napi::Object& o, const char* key, const char* what) {
  Napi::Value v = o.Get(key);
  if (!v.IsArray()) throw ArgError(Name(what, key) + " must be an array of strings");
  auto a = v.As<Napi::Array>();
  std::vector<std::string> out;
  for (uint32_t i = 0; i < a.Length(); ++i) {
    Napi::Value e = a.Get(i);
    if (!e.IsString()) throw ArgError(Name(what, key) + "[" + std::to_string(i) + "] must be a string");
    out.push_back(e.As<Napi::String>().Utf8Value());
  }
  return out;
}

std::vector<int64_t> GetIntArray(const Napi::Object& o, const char* key, const char* what) {
  Napi::Value v = o.Get(key);
  std::vector<int64_t> out;
  if (!v.IsArray()) throw ArgError(Name(what, key) + " must be an array of integers");
  auto a = v.As<Napi::Array>();
  for (uint32_t i = 0; i < a.Length(); ++i) {
    Napi::Value e = a.Get(i);
    double d = e.IsNumber() ? e.As<Napi::Number>().DoubleValue() : NAN;
    if (!std::isfinite(d) || d != std::floor(d)) throw ArgError(Name(what, key) + "[" + std::to_string(i) + "] must be an integer");
    out.push_back(static_cast<int64_t>(d));
  }
  return out;
}

torch::Tensor TensorFromJs(const Napi::Value& v, const std::string& what) {
  if (!v.IsObject()) throw ArgError(what + " must be a tensor object {data: TypedArray, shape: number[]}");
  auto o = v.As<Napi::Object>();
  Napi::Value dv = o.Get("data"), sv = o.Get("shape");
  if (!dv.IsTypedArray()) throw ArgError(what + ".data must be a TypedArray");
  if (!sv.IsArray()) throw ArgError(what + ".shape must be an array of non-negative integers");
  std::vector<int64_t> shape;
  int64_t numel = 1;
  auto sa = sv.As<Napi::Array>();
  for (uint32_t i = 0; i < sa.Length(); ++i) {
    Napi::Value e = sa.Get(i);
    double d = e.IsNumber() ? e.As<Napi::Number>().DoubleValue() : -1;
    if (!(d >= 0) || d != std::floor(d) || d > 1e12) throw ArgError(what + ".shape[" + std::to_string(i) + "] must be a non-negative integer");
    shape.push_back(static_cast<int64_t>(d));
    numel *= shape.back();
  }
  auto ta = dv.As<Napi::TypedArray>();
  torch::ScalarType st;
  switch (ta.TypedArrayType()) {
    case napi_float32_array:
      st = torch::kFloat32;
      break;
    case napi_float64_array:
      st = torch::kFloat64;
      break;
    case napi_int32_array:
      st = torch::kInt32;
      break;
    case napi_bigint64_array:
      st = torch::kInt64;
      break;
    case napi_uint8_array:
      st = torch::kUInt8;
      break;
    default:
      throw ArgError(what + ".data must be a Float32Array, Float64Array, Int32Array, BigInt64Array or Uint8Array");
  }
  if (static_cast<int64_t>(ta.ElementLength()) != numel)
    throw ArgError(what + ": data has " + std::to_string(ta.ElementLength()) + " elements but shape needs " + std::to_string(numel));
  auto t = torch::empty(shape, torch::TensorOptions().dtype(st));
  if (numel > 0) {
    auto ab = ta.ArrayBuffer();
    const uint8_t* src = static_cast<const uint8_t*>(ab.Data()) + ta.ByteOffset();
    std::memcpy(t.data_ptr(), src, ta.ByteLength());
  }
  return t;
}

torch::Tensor GetTensor(const Napi::Object& o, const char* key, const char* what) {
  if (!Has(o, key)) throw ArgError(Name(what, key) + " is required (a tensor {data, shape})");
  return TensorFromJs(o.Get(key), Name(what, key));
}

Napi::Object TensorToJs(Napi::Env env, const torch::Tensor& t0) {
  torch::Tensor t = t0.detach().to(torch::kCPU).contiguous();
  Napi::Object out = Napi::Object::New(env);
  Napi::Array shape = Napi::Array::New(env, t.dim());
  for (int64_t i = 0; i < t.dim(); ++i) shape.Set(static_cast<uint32_t>(i), Napi::Number::New(env, static_cast<double>(t.size(i))));
  const size_t n = static_cast<size_t>(t.numel());
  switch (t.scalar_type()) {
    case torch::kFloat16:
    case torch::kBFloat16:
    case torch::kFloat32: {
      t = t.to(torch::kFloat32);
      auto a = Napi::Float32Array::New(env, n);
      if (n) std::memcpy(a.Data(), t.data_ptr(), n * 4);
      out.Set("data", a);
      break;
    }
    case torch::kFloat64: {
      auto a = Napi::Float64Array::New(env, n);
      if (n) std::memcpy(a.Data(), t.data_ptr(), n * 8);
      out.Set("data", a);
      break;
    }
    case torch::kInt32:
    case torch::kInt64: {
      if (t.scalar_type() == torch::kInt64 && n && (t.max().item<int64_t>() > INT32_MAX || t.min().item<int64_t>() < INT32_MIN))
        throw InputError("tensor values do not fit in int32");
      t = t.to(torch::kInt32);
      auto a = Napi::Int32Array::New(env, n);
      if (n) std::memcpy(a.Data(), t.data_ptr(), n * 4);
      out.Set("data", a);
      break;
    }
    case torch::kBool:
    case torch::kUInt8: {
      t = t.to(torch::kUInt8);
      auto a = Napi::Uint8Array::New(env, n);
      if (n) std::memcpy(a.Data(), t.data_ptr(), n);
      out.Set("data", a);
      break;
    }
    default:
      throw InputError("cannot convert tensor of dtype " + DtypeName(t.scalar_type()) + " to JS");
  }
  out.Set("shape", shape);
  return out;
}

torch::Device ParseDevice(const std::string& s) {
  if (s == "cpu") return torch::Device(torch::kCPU);
  if (s == "cuda" || s.rfind("cuda:", 0) == 0) {
    int idx = 0;
    if (s.size() > 5) {
      try {
        size_t pos = 0;
        idx = std::stoi(s.substr(5), &pos);
        if (pos != s.size() - 5 || idx < 0) throw std::invalid_argument("");
      } catch (...) {
        throw ArgError("device must be 'cpu', 'cuda' or 'cuda:N', got '" + s + "'");
      }
    }
    if (!torch::cuda::is_available()) throw InputError("device '" + s + "' requested but CUDA is not available (libtorch without CUDA, or no GPU/driver)");
    if (idx >= static_cast<int>(torch::cuda::device_count()))
      throw InputError("device '" + s + "' does not exist (" + std::to_string(torch::cuda::device_count()) + " CUDA devices)");
    return torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(idx));
  }
  throw ArgError("device must be 'cpu', 'cuda' or 'cuda:N', got '" + s + "'");
}

Worker::Worker(Napi::Env env, Run run, Done done, bool grad, std::optional<torch::Device> device)
    : Napi::AsyncWorker(env, "papergym-native"),
      deferred_(Napi::Promise::Deferred::New(env)),
      run_(std::move(run)),
      done_(std::move(done)),
      grad_(grad),
      device_(device) {}

Napi::Promise Worker::Start(Napi::Env env, Run run, Done done, bool grad, std::optional<torch::Device> device) {
  auto* w = new Worker(env, std::move(run), std::move(done), grad, device);
  auto p = w->Promise();
  w->Queue();
  return p;
}

void Worker::Execute() {
  try {
    torch::AutoGradMode mode(grad_);
    std::optional<c10::DeviceGuard> dg;
    if (device_ && device_->is_cuda()) dg.emplace(*device_);
    run_();
  } catch (...) {
    err_ = ClassifyCurrentException();
  }
}

void Worker::OnOK() {
  Napi::Env env = Env();
  Napi::HandleScope scope(env);
  if (err_) {
    deferred_.Reject(MakeJsError(env, *err_).Value());
    return;
  }
  try {
    deferred_.Resolve(done_ ? done_(env) : env.Undefined());
  } catch (...) {
    deferred_.Reject(MakeJsError(env, ClassifyCurrentException()).Value());
  }
}

void Worker::OnError(const Napi::Error& e) {
  deferred_.Reject(e.Value());
}

}  // namespace pg
