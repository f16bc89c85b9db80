// Runtime surface: libtorch build facts for `doctor`, CUDA device list, memory accounting,
// intra-op thread count. Exported as `runtimeInfo()`, `cudaMemory(device)`, `cudaResetPeak(device)`,
// `cudaEmptyCache()`, `setNumThreads(n)`, `manualSeed(seed)`; leaf-op counts and the Kineto
// kernel profile for the benchmarks (`opCountStart/Stop`, `profileStart/Stop`).
#include <ATen/record_function.h>
#include <torch/csrc/autograd/profiler_kineto.h>
#include <torch/version.h>

#include <algorithm>
#include <cmath>
#include <map>

#include <dlfcn.h>
#include <sys/stat.h>
#include <unistd.h>

#include <mutex>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "cuda/kernels.h"
#include "napi/util.h"

#ifdef PG_WITH_CUDA
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAGuard.h>
#endif

namespace pg {

// Root of the libtorch actually loaded (the directory above lib/libtorch_cpu.so): found with dladdr
// on a libtorch_cpu function, so a prebuilt binary reports the user's torch, not the build machine's.
static std::string LoadedLibtorchRoot() {
  Dl_info di{};
  if (dladdr(reinterpret_cast<void*>(&at::get_num_threads), &di) == 0 || !di.dli_fname) return "unknown";
  std::string p = di.dli_fname;
  for (int up = 0; up < 2; ++up) {
    auto slash = p.find_last_of('/');
    if (slash == std::string::npos) return di.dli_fname;
    p.resize(slash);
  }
  return p;
}

static Napi::Value RuntimeInfo(const Napi::CallbackInfo& info) {
  return Guard(info.Env(), [&]() -> Napi::Value {
    Napi::Env env = info.Env();
    auto o = Napi::Object::New(env);
    o.Set("libtorchVersion", TORCH_VERSION);
    o.Set("libtorchPath", LoadedLibtorchRoot());
    o.Set("cxx11Abi", Napi::Boolean::New(env, _GLIBCXX_USE_CXX11_ABI != 0));
#ifdef PG_WITH_CUDA
    o.Set("cudaBuild", true);
#else
    o.Set("cudaBuild", false);
#endif
    o.Set("fusedKernels", CudaKernelsCompiled());
    bool avail = torch::cuda::is_available();
    o.Set("cudaAvailable", avail);
    auto devs = Napi::Array::New(env);
    if (avail) {
      for (int64_t i = 0; i < static_cast<int64_t>(torch::cuda::device_count()); ++i) {
        auto d = Napi::Object::New(env);
        d.Set("index", static_cast<double>(i));
#ifdef PG_WITH_CUDA
        const cudaDeviceProp* p = at::cuda::getDeviceProperties(static_cast<c10::DeviceIndex>(i));
        d.Set("name", p->name);
        d.Set("totalMemoryBytes", static_cast<double>(p->totalGlobalMem));
        d.Set("computeCapability", std::to_string(p->major) + "." + std::to_string(p->minor));
#endif
        devs.Set(static_cast<uint32_t>(i), d);
      }
    }
    o.Set("cudaDevices", devs);
    o.Set("numThreads", static_cast<double>(at::get_num_threads()));
    o.Set("parallelInfo", at::get_parallel_info());
    return o;
  });
}

static int DeviceIndexArg(const Napi::CallbackInfo& info, size_t at = 0) {
  if (info.Length() <= at || info[at].IsUndefined()) return 0;
  if (!info[at].IsNumber()) throw ArgError("device index must be a number");
  int i = info[at].As<Napi::Number>().Int32Value();
  if (i < 0) throw ArgError("device index must be >= 0");
  return i;
}

/// cudaMemory(device = 0) -> {allocatedBytes, reservedBytes, peakAllocatedBytes, peakReservedBytes}
/// from the CUDA caching allocator; null when CUDA is unavailable.
static Napi::Value CudaMemory(const Napi::CallbackInfo& info) {
  return Guard(info.Env(), [&]() -> Napi::Value {
    int dev = DeviceIndexArg(info);
    if (!torch::cuda::is_available()) return info.Env().Null();
#ifdef PG_WITH_CUDA
    if (dev >= static_cast<int>(torch::cuda::device_count())) throw ArgError("no CUDA device " + std::to_string(dev));
    at::globalContext().lazyInitDevice(c10::DeviceType::CUDA);  // the allocator exists only after init
    auto s = c10::cuda::CUDACachingAllocator::getDeviceStats(static_cast<c10::DeviceIndex>(dev));
    const size_t agg = static_cast<size_t>(c10::CachingAllocator::StatType::AGGREGATE);
    auto o = Napi::Object::New(info.Env());
    o.Set("allocatedBytes", static_cast<double>(s.allocated_bytes[agg].current));
    o.Set("reservedBytes", static_cast<double>(s.reserved_bytes[agg].current));
    o.Set("peakAllocatedBytes", static_cast<double>(s.allocated_bytes[agg].peak));
    o.Set("peakReservedBytes", static_cast<double>(s.reserved_bytes[agg].peak));
    return o;
#else
    return info.Env().Null();
#endif
  });
}

static Napi::Value CudaResetPeak(const Napi::CallbackInfo& info) {
  return Guard(info.Env(), [&]() -> Napi::Value {
    int dev = DeviceIndexArg(info);
#ifdef PG_WITH_CUDA
    if (torch::cuda::is_available()) {
      if (dev >= static_cast<int>(torch::cuda::device_count())) throw ArgError("no CUDA device " + std::to_string(dev));
      at::globalContext().lazyInitDevice(c10::DeviceType::CUDA);
      c10::cuda::CUDACachingAllocator::resetPeakStats(static_cast<c10::DeviceIndex>(dev));
    }
#endif
    return info.Env().Undefined();
  });
}

static Napi::Value CudaEmptyCache(const Napi::CallbackInfo& info) {
  return Guard(info.Env(), [&]() -> Napi::Value {
#ifdef PG_WITH_CUDA
    if (torch::cuda::is_available()) {
      at::globalContext().lazyInitDevice(c10::DeviceType::CUDA);
      c10::cuda::CUDACachingAllocator::emptyCache();
    }
#endif
    return info.Env().Undefined();
  });
}

// cudaSetMemoryLimit(bytes, device = 0): caps what the caching allocator of `device` may hold
// (allocated + cached) at `bytes` (c10 CUDACachingAllocator::setMemoryFraction(bytes / total)).
// Past the cap the allocator frees its cached blocks and retries, then raises out-of-memory
// (ERR_PG_OOM), as on a device of that size. bytes >= the device's memory lifts the cap. No-op
// without CUDA. Errors: TypeError for a non-positive or non-number `bytes`, a missing device.
static Napi::Value CudaSetMemoryLimit(const Napi::CallbackInfo& info) {
  return Guard(info.Env(), [&]() -> Napi::Value {
    if (info.Length() < 1 || !info[0].IsNumber() || !(info[0].As<Napi::Number>().DoubleValue() > 0))
      throw ArgError("cudaSetMemoryLimit(bytes, device): bytes must be a positive number");
    const double bytes = info[0].As<Napi::Number>().DoubleValue();
    int dev = DeviceIndexArg(info, 1);
#ifdef PG_WITH_CUDA
    if (torch::cuda::is_available()) {
      if (dev >= static_cast<int>(torch::cuda::device_count())) throw ArgError("no CUDA device " + std::to_string(dev));
      at::globalContext().lazyInitDevice(c10::DeviceType::CUDA);
      size_t free_b = 0, total_b = 0;
      {
        c10::cuda::CUDAGuard g(static_cast<c10::DeviceIndex>(dev));
        C10_CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
      }
      const double fraction = std::min(1.0, bytes / static_cast<double>(total_b));
      c10::cuda::CUDACachingAllocator::setMemoryFraction(fraction, static_cast<c10::DeviceIndex>(dev));
    }
#else
    (void)bytes;
    (void)dev;
#endif
    return info.Env().Undefined();
  });
}

static Napi::Value SetNumThreads(const Napi::CallbackInfo& info) {
  return Guard(info.Env(), [&]() -> Napi::Value {
    if (info.Length() < 1 || !info[0].IsNumber()) throw ArgError("setNumThreads(n): n must be a positive integer");
    int n = info[0].As<Napi::Number>().Int32Value();
    if (n < 1) throw ArgError("setNumThreads(n): n must be a positive integer");
    at::set_num_threads(n);
    return info.Env().Undefined();
  });
}

/// manualSeed(seed): seeds libtorch's default generators (CPU and CUDA), e.g. LoRA dropout masks.
/// Training derives one seed per step so a resumed run replays the same masks.
static Napi::Value ManualSeed(const Napi::CallbackInfo& info) {
  return Guard(info.Env(), [&]() -> Napi::Value {
    if (info.Length() < 1 || !info[0].IsNumber()) throw ArgError("manualSeed(seed): seed must be a non-negative integer");
    double d = info[0].As<Napi::Number>().DoubleValue();
    if (!(d >= 0) || d != std::floor(d) || d > 9007199254740991.0) throw ArgError("manualSeed(seed): seed must be a non-negative integer");
    torch::manual_seed(static_cast<uint64_t>(d));
    return info.Env().Undefined();
  });
}

namespace {
// Leaf-op counting (opCountStart / opCountStop): a global RecordFunction observer counts the ATen
// ops that call no other op, except metadata-only ones (views, allocation, dtype queries) — on
// CUDA roughly one kernel launch each (an approximation: a matmul that calls a helper op counts as
// that helper). Used by the benchmarks to report launches per step; off (no observer) unless started.
std::mutex g_ops_mu;
std::unordered_map<std::string, int64_t> g_ops;
std::optional<at::CallbackHandle> g_ops_handle;
thread_local std::vector<char> t_op_stack;  // per open op: 1 when it has called another op

bool IsMetaOp(const char* name) {
  static const std::unordered_set<std::string> kMeta = {"aten::as_strided",
                                                        "aten::as_strided_",
                                                        "aten::empty",
                                                        "aten::empty_strided",
                                                        "aten::empty_like",
                                                        "aten::view",
                                                        "aten::_unsafe_view",
                                                        "aten::_reshape_alias",
                                                        "aten::reshape",
                                                        "aten::alias",
                                                        "detach",
                                                        "aten::detach",
                                                        "aten::result_type",
                                                        "aten::t",
                                                        "aten::transpose",
                                                        "aten::permute",
                                                        "aten::narrow",
                                                        "aten::slice",
                                                        "aten::select",
                                                        "aten::expand",
                                                        "aten::unsqueeze",
                                                        "aten::squeeze",
                                                        "aten::split",
                                                        "aten::split_with_sizes",
                                                        "aten::resize_",
                                                        "aten::set_",
                                                        "aten::lift_fresh",
                                                        "aten::to",
                                                        "aten::is_nonzero",
                                                        "aten::item",
                                                        "aten::resolve_conj",
                                                        "aten::resolve_neg"};
  return kMeta.count(name) != 0;
}

// Stack entry per open op: 0 = leaf so far, 1 = called a counted (non-metadata) op, 2 = metadata.
std::unique_ptr<at::ObserverContext> OpStart(const at::RecordFunction& fn) {
  const bool meta = IsMetaOp(fn.name());
  if (!meta && !t_op_stack.empty() && t_op_stack.back() == 0) t_op_stack.back() = 1;
  t_op_stack.push_back(meta ? 2 : 0);
  return nullptr;
}
void OpEnd(const at::RecordFunction& fn, at::ObserverContext*) {
  if (t_op_stack.empty()) return;
  const char v = t_op_stack.back();
  t_op_stack.pop_back();
  if (v != 0) return;
  std::lock_guard<std::mutex> lk(g_ops_mu);
  ++g_ops[fn.name()];
}
}  // namespace

/// opCountStart(): starts (or restarts from zero) counting leaf ATen ops on every thread.
static Napi::Value OpCountStart(const Napi::CallbackInfo& info) {
  return Guard(info.Env(), [&]() -> Napi::Value {
    std::lock_guard<std::mutex> lk(g_ops_mu);
    g_ops.clear();
    if (!g_ops_handle) g_ops_handle = at::addGlobalCallback(at::RecordFunctionCallback(OpStart, OpEnd).scopes({at::RecordScope::FUNCTION}));
    return info.Env().Undefined();
  });
}

/// opCountStop() -> {total, ops: {name: count}}: stops counting and returns the counts.
static Napi::Value OpCountStop(const Napi::CallbackInfo& info) {
  return Guard(info.Env(), [&]() -> Napi::Value {
    std::lock_guard<std::mutex> lk(g_ops_mu);
    if (g_ops_handle) {
      at::removeCallback(*g_ops_handle);
      g_ops_handle.reset();
    }
    auto o = Napi::Object::New(info.Env());
    auto ops = Napi::Object::New(info.Env());
    double total = 0;
    for (const auto& kv : g_ops) {
      ops.Set(kv.first, static_cast<double>(kv.second));
      total += static_cast<double>(kv.second);
    }
    o.Set("total", total);
    o.Set("ops", ops);
    g_ops.clear();
    return o;
  });
}

namespace {
// Kernel profiling (profileStart / profileStop) over libtorch's Kineto profiler (the engine of
// torch.profiler): CUPTI records every kernel, memcpy and memset on every device and thread —
// kernels replayed from CUDA graphs included — between the two calls.
std::mutex g_prof_mu;
bool g_prof_on = false;

// A profile still running when the process exits: libtorch's exit-time teardown found the
// profiler on and crashed the process (SIGSEGV in ~ProfilerStateBase). Turned off before that,
// on the thread that runs JS, while its thread-locals still exist: at the process's 'exit' event
// (a normal end, process.exit(), an uncaught error) and in the environment's cleanup hook (a
// worker's end). Not from atexit: exit() destroys the thread-locals the profiler state lives in
// before it runs atexit handlers. Idempotent.
void StopProfileAtExit() {
  std::lock_guard<std::mutex> lk(g_prof_mu);
  if (!g_prof_on) return;
  g_prof_on = false;
  try {
    torch::autograd::profiler::disableProfiler();
  } catch (...) {
  }
}

// Registers StopProfileAtExit on this environment's process 'exit' event, once per environment.
void OnProcessExit(Napi::Env env) {
  static std::mutex mu;
  static std::set<napi_env> done;
  {
    std::lock_guard<std::mutex> lk(mu);
    if (!done.insert(static_cast<napi_env>(env)).second) return;
  }
  try {  // a replaced `process` costs only the exit-time stop (the cleanup hook still runs), never profileStart
    Napi::Object process = env.Global().Get("process").As<Napi::Object>();
    Napi::Function once = process.Get("once").As<Napi::Function>();
    once.Call(process, {Napi::String::New(env, "exit"), Napi::Function::New(env, [](const Napi::CallbackInfo&) { StopProfileAtExit(); })});
  } catch (const Napi::Error&) {
  }
  env.AddCleanupHook([env] {
    std::lock_guard<std::mutex> lk(mu);
    done.erase(static_cast<napi_env>(env));
  });
}

// Why `path` cannot take the trace (empty when it can): its directory must exist and be writable,
// and the path must not be a directory.
std::string TracePathProblem(const std::string& path) {
  if (path.empty()) return "is empty";
  struct stat st {};
  if (stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) return "is a directory";
  const auto slash = path.find_last_of('/');
  const std::string dir = slash == std::string::npos ? "." : slash == 0 ? "/" : path.substr(0, slash);
  if (stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) return "is in a directory that does not exist (" + dir + ")";
  if (access(dir.c_str(), W_OK | X_OK) != 0) return "is in a directory that is not writable (" + dir + ")";
  return "";
}
}  // namespace

/// profileStart(): starts recording GPU activity (CUDA kernels, copies, sets) of every thread.
/// Error when a profile is already running, or libtorch's own error when its profiler cannot
/// start (a libtorch without Kineto, CUPTI missing).
static Napi::Value ProfileStart(const Napi::CallbackInfo& info) {
  return Guard(info.Env(), [&]() -> Napi::Value {
    std::lock_guard<std::mutex> lk(g_prof_mu);
    if (g_prof_on) throw ArgError("profileStart(): a profile is already running (call profileStop() first)");
    using torch::profiler::impl::ActivityType;
    using torch::profiler::impl::ProfilerConfig;
    using torch::profiler::impl::ProfilerState;
    const ProfilerConfig cfg(ProfilerState::KINETO);
    // GPU activity only where a GPU is (Kineto reports a CUDA error on machines without one).
    std::set<ActivityType> acts = {ActivityType::CPU};
    if (at::hasCUDA()) acts.insert(ActivityType::CUDA);
    torch::autograd::profiler::prepareProfiler(cfg, acts);
    torch::autograd::profiler::enableProfiler(cfg, acts);
    g_prof_on = true;
    OnProcessExit(info.Env());
    return info.Env().Undefined();
  });
}

/// profileStop(opts?: {tracePath?: string, top?: number}) -> {kernels: [{name, count, totalUs,
/// meanUs, maxUs}] (by total time, descending, the `top` (default 40) largest), gpuUs (summed
/// durations of all GPU activities, µs), gpuBusyUs (their union: time some activity ran, µs),
/// gpuSpanUs (first start to last end, µs), events (GPU activities recorded)}. Writes the Chrome
/// trace (chrome://tracing, Perfetto) to tracePath when given. ArgError (the profile keeps running)
/// when no profile runs, or on a bad opts.top / opts.tracePath (not a non-empty string, a directory,
/// or in a directory that does not exist or is not writable); InputError naming the path when the
/// trace could not be written after all (the profile has stopped then).
static Napi::Value ProfileStop(const Napi::CallbackInfo& info) {
  return Guard(info.Env(), [&]() -> Napi::Value {
    std::string trace;
    int64_t top = 40;
    if (info.Length() >= 1 && !info[0].IsUndefined()) {
      if (!info[0].IsObject()) throw ArgError("profileStop(opts): opts must be an object");
      auto o = info[0].As<Napi::Object>();
      if (o.Has("tracePath") && !o.Get("tracePath").IsUndefined()) {
        if (!o.Get("tracePath").IsString()) throw ArgError("profileStop(opts): opts.tracePath must be a string");
        trace = o.Get("tracePath").As<Napi::String>().Utf8Value();
        const std::string why = TracePathProblem(trace);
        if (!why.empty()) throw ArgError("profileStop(opts): opts.tracePath '" + trace + "' " + why);
      }
      if (o.Has("top") && !o.Get("top").IsUndefined()) {
        const double t = o.Get("top").IsNumber() ? o.Get("top").As<Napi::Number>().DoubleValue() : 0.0;
        if (!std::isfinite(t) || t < 1 || t != std::floor(t)) throw ArgError("profileStop(opts): opts.top must be an integer >= 1");
        top = static_cast<int64_t>(std::min(t, 1e12));
      }
    }
    std::unique_ptr<torch::autograd::profiler::ProfilerResult> res;
    {
      std::lock_guard<std::mutex> lk(g_prof_mu);
      if (!g_prof_on) throw ArgError("profileStop(): no profile is running (call profileStart() first)");
      g_prof_on = false;
      res = torch::autograd::profiler::disableProfiler();
    }
    struct Agg {
      int64_t count = 0;
      uint64_t total = 0, max = 0;
    };
    std::map<std::string, Agg> by_name;
    std::vector<std::pair<uint64_t, uint64_t>> spans;
    uint64_t sum = 0;
    for (const auto& e : res->events()) {
      if (e.deviceType() != c10::DeviceType::CUDA) continue;
      const uint64_t d = e.durationNs();
      auto& a = by_name[e.name()];
      ++a.count;
      a.total += d;
      a.max = std::max(a.max, d);
      sum += d;
      spans.emplace_back(e.startNs(), e.startNs() + d);
    }
    std::sort(spans.begin(), spans.end());
    uint64_t busy = 0, cur_lo = 0, cur_hi = 0;
    for (size_t i = 0; i < spans.size(); ++i) {
      if (i == 0 || spans[i].first > cur_hi) {
        busy += cur_hi - cur_lo;
        cur_lo = spans[i].first;
        cur_hi = spans[i].second;
      } else {
        cur_hi = std::max(cur_hi, spans[i].second);
      }
    }
    busy += cur_hi - cur_lo;
    uint64_t span = 0;
    if (!spans.empty()) {
      uint64_t end = 0;
      for (const auto& s : spans) end = std::max(end, s.second);
      span = end - spans.front().first;
    }
    if (!trace.empty()) {
      // Kineto reports a failed write on stderr only: check that the file is there.
      res->save(trace);
      struct stat st {};
      if (stat(trace.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) {
        std::remove((trace + ".tmp").c_str());  // Kineto writes <path>.tmp, then renames it
        throw InputError("profileStop(opts): the trace could not be written to '" + trace + "' (the profile has stopped)");
      }
    }
    std::vector<std::pair<std::string, Agg>> rows(by_name.begin(), by_name.end());
    std::sort(rows.begin(), rows.end(), [](const auto& x, const auto& y) { return x.second.total > y.second.total; });
    auto env = info.Env();
    auto out = Napi::Object::New(env);
    auto ks = Napi::Array::New(env);
    for (size_t i = 0; i < rows.size() && static_cast<int64_t>(i) < top; ++i) {
      auto k = Napi::Object::New(env);
      k.Set("name", rows[i].first);
      k.Set("count", static_cast<double>(rows[i].second.count));
      k.Set("totalUs", rows[i].second.total / 1e3);
      k.Set("meanUs", rows[i].second.total / 1e3 / static_cast<double>(rows[i].second.count));
      k.Set("maxUs", rows[i].second.max / 1e3);
      ks.Set(static_cast<uint32_t>(i), k);
    }
    out.Set("kernels", ks);
    out.Set("gpuUs", sum / 1e3);
    out.Set("gpuBusyUs", busy / 1e3);
    out.Set("gpuSpanUs", span / 1e3);
    out.Set("events", static_cast<double>(spans.size()));
    return out;
  });
}

/// setFusedKernels(on: boolean): uses the own CUDA kernels (true) or the ATen paths (false) for
/// later calls; returns the previous value. Starts from PAPERGYM_NO_FUSED_KERNELS. TypeError on a
/// non-boolean.
static Napi::Value SetFusedKernels(const Napi::CallbackInfo& info) {
  return Guard(info.Env(), [&]() -> Napi::Value {
    if (info.Length() < 1 || !info[0].IsBoolean()) throw ArgError("setFusedKernels(on): on must be a boolean");
    const bool prev = CudaKernelsSwitchedOn();
    SetCudaKernelsEnabled(info[0].As<Napi::Boolean>().Value());
    return Napi::Boolean::New(info.Env(), prev);
  });
}

void RegisterRuntime(Napi::Env env, Napi::Object exports) {
  env.AddCleanupHook([] { StopProfileAtExit(); });
  exports.Set("setFusedKernels", Napi::Function::New(env, SetFusedKernels, "setFusedKernels"));
  exports.Set("opCountStart", Napi::Function::New(env, OpCountStart, "opCountStart"));
  exports.Set("opCountStop", Napi::Function::New(env, OpCountStop, "opCountStop"));
  exports.Set("profileStart", Napi::Function::New(env, ProfileStart, "profileStart"));
  exports.Set("profileStop", Napi::Function::New(env, ProfileStop, "profileStop"));
  exports.Set("runtimeInfo", Napi::Function::New(env, RuntimeInfo, "runtimeInfo"));
  exports.Set("cudaMemory", Napi::Function::New(env, CudaMemory, "cudaMemory"));
  exports.Set("cudaResetPeak", Napi::Function::New(env, CudaResetPeak, "cudaResetPeak"));
  exports.Set("cudaEmptyCache", Napi::Function::New(env, CudaEmptyCache, "cudaEmptyCache"));
  exports.Set("cudaSetMemoryLimit", Napi::Function::New(env, CudaSetMemoryLimit, "cudaSetMemoryLimit"));
  exports.Set("setNumThreads", Napi::Function::New(env, SetNumThreads, "setNumThreads"));
  exports.Set("manualSeed", Napi::Function::New(env, ManualSeed, "manualSeed"));
}

}  // namespace pg
