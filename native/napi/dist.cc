// Bindings of the dist exports (data-parallel process groups over libtorch c10d, dist.h):
//   distAvailable() -> {gloo: boolean, nccl: boolean}
//   distInit({rank, worldSize, masterAddr, masterPort, backend: 'gloo'|'nccl', device?: 'cpu'|'cuda:N',
//             timeoutMs?, initTimeoutMs?}) -> Promise<ProcessGroup>
//   ProcessGroup: .rank .worldSize .backend
//     .allReduce(tensors: JsTensor[], {op?, scale?, bucketBytes?}) -> Promise<JsTensor[]>
//     .allReduceGrads(model, {op?, scale?, preScale?, bucketBytes?}) -> Promise<{buckets, tensors, bytes}>
//         in place on the LoRA parameters' .grad (a missing grad counts as zeros)
//     .broadcast(tensors: JsTensor[], {root?}) -> Promise<JsTensor[]>
//     .broadcastParams(model, {root?}) -> Promise<void>   (LoRA weights in place)
//     .allGatherObject(string) -> Promise<string[]>       (rank order)
//     .barrier() -> Promise<void>;  .destroy()
// Every collective runs on a libuv pool thread; failures reject with the rank, the operation and
// the peers that did not arrive (dist.h).
#include "parallel/dist.h"
#include "napi/model.h"
#include "napi/util.h"

namespace pg {
namespace {

Napi::FunctionReference* g_ctor = nullptr;

struct ReduceArgs {
  std::string op = "sum";
  double scale = 1.0;
  double pre_scale = 1.0;           // allReduceGrads: each rank's grads multiplied by this before the reduce
  int64_t bucket_bytes = 25 << 20;  // DDP's default bucket_cap_mb = 25
};
ReduceArgs ReadReduce(const Napi::CallbackInfo& info, size_t i, const char* W) {
  auto o = ArgObject(info, i, W, true);
  ReduceArgs a;
  a.op = GetString(o, "op", std::string("sum"), W);
  if (a.op != "sum" && a.op != "max" && a.op != "min") throw ArgError(std::string(W) + ".op must be 'sum', 'max' or 'min'");
  a.scale = GetNumber(o, "scale", 1.0, W);
  a.pre_scale = GetNumber(o, "preScale", 1.0, W);
  a.bucket_bytes = GetInt(o, "bucketBytes", a.bucket_bytes, W);
  if (a.bucket_bytes < 1) throw ArgError(std::string(W) + ".bucketBytes must be >= 1");
  return a;
}

class ProcessGroupWrap : public Napi::ObjectWrap<ProcessGroupWrap> {
 public:
  static Napi::Function Define(Napi::Env env) {
    return DefineClass(
        env, "ProcessGroup",
        {InstanceMethod("allReduce", &ProcessGroupWrap::AllReduce), InstanceMethod("allReduceGrads", &ProcessGroupWrap::AllReduceGrads),
         InstanceMethod("broadcast", &ProcessGroupWrap::Broadcast), InstanceMethod("broadcastParams", &ProcessGroupWrap::BroadcastParams),
         InstanceMethod("allGatherObject", &ProcessGroupWrap::AllGatherObject), InstanceMethod("barrier", &ProcessGroupWrap::Barrier),
         InstanceMethod("destroy", &ProcessGroupWrap::Destroy), InstanceAccessor("rank", &ProcessGroupWrap::Rank, nullptr),
         InstanceAccessor("worldSize", &ProcessGroupWrap::WorldSize, nullptr), InstanceAccessor("backend", &ProcessGroupWrap::Backend, nullptr)});
  }
  explicit ProcessGroupWrap(const Napi::CallbackInfo& info) : Napi::ObjectWrap<ProcessGroupWrap>(info) {
    if (info.Length() < 1 || !info[0].IsExternal()) {
      Napi::TypeError::New(info.Env(), "ProcessGroup: use distInit(...)").ThrowAsJavaScriptException();
      return;
    }
    group_ = *info[0].As<Napi::External<std::shared_ptr<dist::Group>>>().Data();
  }

 private:
  std::shared_ptr<dist::Group> group_;

  std::shared_ptr<dist::Group> G() {
    if (!group_ || group_->destroyed()) throw DisposedError("ProcessGroup: used after destroy()");
    return group_;
  }
  std::optional<torch::Device> Dev() {
    int d = group_->options().device_index;
    if (d >= 0) return torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(d));
    return std::nullopt;
  }

  Napi::Value AllReduce(const Napi::CallbackInfo& info) {
    return Guard(info.Env(), [&]() -> Napi::Value {
      auto g = G();
      if (info.Length() < 1 || !info[0].IsArray()) throw ArgError("allReduce: first argument must be an array of tensors");
      auto a = info[0].As<Napi::Array>();
      auto ts = std::make_shared<std::vector<at::Tensor>>();
      for (uint32_t i = 0; i < a.Length(); ++i) ts->push_back(TensorFromJs(a.Get(i), "allReduce tensors[" + std::to_string(i) + "]"));
      auto ra = ReadReduce(info, 1, "allReduce options");
      return Worker::Start(
          info.Env(), [g, ts, ra]() { g->AllReduce(*ts, ra.op, ra.scale, ra.bucket_bytes); },
          [ts](Napi::Env env) -> Napi::Value {
            auto out = Napi::Array::New(env, ts->size());
            for (size_t i = 0; i < ts->size(); ++i) out.Set(static_cast<uint32_t>(i), TensorToJs(env, (*ts)[i]));
            return out;
          },
          false, Dev());
    });
  }

  Napi::Value AllReduceGrads(const Napi::CallbackInfo& info) {
    return Guard(info.Env(), [&]() -> Napi::Value {
      auto g = G();
      if (info.Length() < 1) throw ArgError("allReduceGrads: first argument must be a Model");
      auto mp = std::make_shared<ModelParamSet>(ModelParams(info[0], "allReduceGrads model"));
      auto ra = ReadReduce(info, 1, "allReduceGrads options");
      auto res = std::make_shared<std::array<double, 3>>();
      return Worker::Start(
          info.Env(),
          [g, mp, ra, res]() {
            ModelLock lk(*mp->model);
            std::vector<at::Tensor> grads;
            double bytes = 0;
            for (auto& p : mp->params) {
              if (!p.grad().defined()) p.mutable_grad() = at::zeros_like(p);
              if (ra.pre_scale != 1.0) p.mutable_grad().mul_(ra.pre_scale);
              grads.push_back(p.grad());
              bytes += static_cast<double>(p.grad().numel() * p.grad().element_size());
            }
            (*res)[0] = static_cast<double>(g->AllReduce(grads, ra.op, ra.scale, ra.bucket_bytes));
            (*res)[1] = static_cast<double>(grads.size());
            (*res)[2] = bytes;
          },
          [res](Napi::Env env) -> Napi::Value {
            auto o = Napi::Object::New(env);
            o.Set("buckets", (*res)[0]);
            o.Set("tensors", (*res)[1]);
            o.Set("bytes", (*res)[2]);
            return o;
          },
          false, Dev());
    });
  }

  Napi::Value Broadcast(const Napi::CallbackInfo& info) {
    return Guard(info.Env(), [&]() -> Napi::Value {
      auto g = G();
      if (info.Length() < 1 || !info[0].IsArray()) throw ArgError("broadcast: first argument must be an array of tensors");
      auto a = info[0].As<Napi::Array>();
      auto ts = std::make_shared<std::vector<at::Tensor>>();
      for (uint32_t i = 0; i < a.Length(); ++i) ts->push_back(TensorFromJs(a.Get(i), "broadcast tensors[" + std::to_string(i) + "]"));
      auto o = ArgObject(info, 1, "broadcast options", true);
      int root = static_cast<int>(GetInt(o, "root", 0, "broadcast options"));
      if (root < 0 || root >= g->world_size()) throw ArgError("broadcast options.root must be a rank in [0, worldSize)");
      return Worker::Start(
          info.Env(), [g, ts, root]() { g->Broadcast(*ts, root); },
          [ts](Napi::Env env) -> Napi::Value {
            auto out = Napi::Array::New(env, ts->size());
            for (size_t i = 0; i < ts->size(); ++i) out.Set(static_cast<uint32_t>(i), TensorToJs(env, (*ts)[i]));
            return out;
          },
          false, Dev());
    });
  }

  Napi::Value BroadcastParams(const Napi::CallbackInfo& info) {
    return Guard(info.Env(), [&]() -> Napi::Value {
      auto g = G();
      if (info.Length() < 1) throw ArgError("broadcastParams: first argument must be a Model");
      auto mp = std::make_shared<ModelParamSet>(ModelParams(info[0], "broadcastParams model"));
      auto o = ArgObject(info, 1, "broadcastParams options", true);
      int root = static_cast<int>(GetInt(o, "root", 0, "broadcastParams options"));
      if (root < 0 || root >= g->world_size()) throw ArgError("broadcastParams options.root must be a rank in [0, worldSize)");
      return Worker::Start(
          info.Env(),
          [g, mp, root]() {
            ModelLock lk(*mp->model);
            torch::NoGradGuard ng;
            std::vector<at::Tensor> ps;
            for (auto& p : mp->params) ps.push_back(p.detach());
            g->Broadcast(ps, root);
          },
          [](Napi::Env env) -> Napi::Value { return env.Undefined(); }, false, Dev());
    });
  }

  Napi::Value AllGatherObject(const Napi::CallbackInfo& info) {
    return Guard(info.Env(), [&]() -> Napi::Value {
      auto g = G();
      std::string payload = ArgString(info, 0, "allGatherObject(payload)");
      auto res = std::make_shared<std::vector<std::string>>();
      return Worker::Start(
          info.Env(), [g, payload, res]() { *res = g->AllGatherObject(payload); },
          [res](Napi::Env env) -> Napi::Value {
            auto out = Napi::Array::New(env, res->size());
            for (size_t i = 0; i < res->size(); ++i) out.Set(static_cast<uint32_t>(i), Napi::String::New(env, (*res)[i]));
            return out;
          },
          false, Dev());
    });
  }

  Napi::Value Barrier(const Napi::CallbackInfo& info) {
    return Guard(info.Env(), [&]() -> Napi::Value {
      auto g = G();
      return Worker::Start(
          info.Env(), [g]() { g->Barrier(); }, [](Napi::Env env) -> Napi::Value { return env.Undefined(); }, false, Dev());
    });
  }

  Napi::Value Destroy(const Napi::CallbackInfo& info) {
    return Guard(info.Env(), [&]() -> Napi::Value {
      if (group_) group_->Destroy();
      return info.Env().Undefined();
    });
  }
  Napi::Value Rank(const Napi::CallbackInfo& info) { return Napi::Number::New(info.Env(), group_ ? group_->rank() : -1); }
  Napi::Value WorldSize(const Napi::CallbackInfo& info) { return Napi::Number::New(info.Env(), group_ ? group_->world_size() : 0); }
  Napi::Value Backend(const Napi::CallbackInfo& info) { return Napi::String::New(info.Env(), group_ ? group_->backend() : ""); }
};

Napi::Value DistAvailableJs(const Napi::CallbackInfo& info) {
  auto o = Napi::Object::New(info.Env());
  o.Set("gloo", dist::HasGloo());
  o.Set("nccl", dist::HasNccl());
  return o;
}

Napi::Value DistInitJs(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  return Guard(env, [&]() -> Napi::Value {
    const char* W = "distInit options";
    auto o = ArgObject(info, 0, W);
    dist::InitOptions io;
    io.rank = static_cast<int>(GetInt(o, "rank", std::nullopt, W));
    io.world_size = static_cast<int>(GetInt(o, "worldSize", std::nullopt, W));
    io.master_addr = GetString(o, "masterAddr", std::string("127.0.0.1"), W);
    io.master_port = static_cast<int>(GetInt(o, "masterPort", 29500, W));
    io.backend = GetString(o, "backend", std::string("gloo"), W);
    double t = GetNumber(o, "timeoutMs", 600000.0, W), it = GetNumber(o, "initTimeoutMs", 60000.0, W);
    if (!(t > 0) || !(it > 0)) throw ArgError("distInit options.timeoutMs / initTimeoutMs must be > 0");
    io.timeout = std::chrono::milliseconds(static_cast<int64_t>(t));
    io.init_timeout = std::chrono::milliseconds(static_cast<int64_t>(it));
    std::optional<torch::Device> dev;
    std::string d = GetString(o, "device", std::string("cpu"), W);
    if (d != "cpu") {
      dev = ParseDevice(d);
      if (dev->is_cuda()) io.device_index = dev->has_index() ? dev->index() : 0;
    }
    auto res = std::make_shared<std::shared_ptr<dist::Group>>();
    return Worker::Start(
        env, [io, res]() { *res = dist::Group::Init(io); },
        [res](Napi::Env env) -> Napi::Value {
          auto ext = Napi::External<std::shared_ptr<dist::Group>>::New(env, new std::shared_ptr<dist::Group>(*res),
                                                                       [](Napi::Env, std::shared_ptr<dist::Group>* p) { delete p; });
          return g_ctor->New({ext});
        },
        false, dev);
  });
}

}  // namespace

void RegisterDist(Napi::Env env, Napi::Object exports) {
  auto ctor = ProcessGroupWrap::Define(env);
  g_ctor = new Napi::FunctionReference(Napi::Persistent(ctor));
  exports.Set("ProcessGroup", ctor);
  exports.Set("distAvailable", Napi::Function::New(env, DistAvailableJs, "distAvailable"));
  exports.Set("distInit", Napi::Function::New(env, DistInitJs, "distInit"));
}
}  // namespace pg
