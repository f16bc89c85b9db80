// JS bindings of generate/: generate (Promise, worker thread), createAbortHandle, sampleFromLogits.
#include <atomic>
#include <memory>
#include <mutex>

#include "generate/cuda_graph.h"
#include "generate/engine.h"
#include "generate/generate.h"
#include "generate/sampler.h"
#include "napi/args.h"
#include "napi/model.h"
#include "napi/util.h"

namespace pg {
namespace {

constexpr napi_type_tag kAbortTag = {0x7067616272743031ULL, 0x61626f7274666c67ULL};
using Flag = std::shared_ptr<std::atomic<bool>>;

// createAbortHandle() -> {abort(): void, aborted(): boolean}: a flag shared with worker threads.
Napi::Value CreateAbortHandle(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  return Guard(env, [&]() -> Napi::Value {
    Flag flag = std::make_shared<std::atomic<bool>>(false);
    Napi::Object o = Napi::Object::New(env);
    o.TypeTag(&kAbortTag);
    auto* holder = new Flag(flag);
    napi_status st = napi_wrap(
        env, o, holder, [](napi_env, void* data, void*) { delete static_cast<Flag*>(data); }, nullptr, nullptr);
    if (st != napi_ok) {
      delete holder;
      throw std::runtime_error("napi_wrap failed");
    }
    o.Set("abort", Napi::Function::New(
                       env,
                       [flag](const Napi::CallbackInfo& i) {
                         flag->store(true);
                         return i.Env().Undefined();
                       },
                       "abort"));
    o.Set("aborted", Napi::Function::New(
                         env, [flag](const Napi::CallbackInfo& i) { return Napi::Boolean::New(i.Env(), flag->load()); }, "aborted"));
    return o;
  });
}

Flag UnwrapAbort(Napi::Env env, const Napi::Value& v, const char* what) {
  if (!v.IsObject() || !v.As<Napi::Object>().CheckTypeTag(&kAbortTag)) throw ArgError(std::string(what) + " must be a handle from createAbortHandle()");
  void* data = nullptr;
  if (napi_unwrap(env, v, &data) != napi_ok || !data) throw ArgError(std::string(what) + " is not a valid abort handle");
  return *static_cast<Flag*>(data);
}

// One completion as JS: {promptIndex, sampleIndex, tokenIds: Int32Array, logprobs: Float32Array, finishReason}.
Napi::Object CompletionToJs(Napi::Env e, const Completion& c) {
  Napi::Object co = Napi::Object::New(e);
  co.Set("promptIndex", Napi::Number::New(e, static_cast<double>(c.prompt_index)));
  co.Set("sampleIndex", Napi::Number::New(e, static_cast<double>(c.sample_index)));
  auto ti = Napi::Int32Array::New(e, c.tokens.size());
  std::copy(c.tokens.begin(), c.tokens.end(), ti.Data());
  auto lp = Napi::Float32Array::New(e, c.logprobs.size());
  std::copy(c.logprobs.begin(), c.logprobs.end(), lp.Data());
  co.Set("tokenIds", ti);
  co.Set("logprobs", lp);
  co.Set("finishReason", Napi::String::New(e, c.stopped ? "stop" : "length"));
  return co;
}

// options.onGroupDone: the decode thread hands each finished group to the JS thread through a
// thread-safe function ({promptIndex, completions}); released with the request. A throwing
// callback is ignored here (lib/model/policy.ts generate reports it when the call settles).
void SetOnGroupDone(Napi::Env env, const Napi::Value& f, GenerateRequest& req) {
  if (!f.IsFunction()) throw ArgError("options.onGroupDone must be a function");
  using Group = std::pair<int64_t, std::vector<Completion>>;
  auto tsfn = std::shared_ptr<Napi::ThreadSafeFunction>(
      new Napi::ThreadSafeFunction(Napi::ThreadSafeFunction::New(env, f.As<Napi::Function>(), "papergym generate onGroupDone", 0, 1)),
      [](Napi::ThreadSafeFunction* t) {
        t->Release();
        delete t;
      });
  req.on_group_done = [tsfn](int64_t p, const std::vector<Completion>& group) {
    auto* data = new Group(p, group);
    napi_status st = tsfn->NonBlockingCall(data, [](Napi::Env e, Napi::Function cb, Group* d) {
      std::unique_ptr<Group> own(d);
      if (e == nullptr || cb == nullptr) return;  // the environment is going away
      try {
        Napi::Object g = Napi::Object::New(e);
        g.Set("promptIndex", Napi::Number::New(e, static_cast<double>(d->first)));
        Napi::Array comps = Napi::Array::New(e, d->second.size());
        for (size_t i = 0; i < d->second.size(); ++i) comps.Set(static_cast<uint32_t>(i), CompletionToJs(e, d->second[i]));
        g.Set("completions", comps);
        cb.Call({g});
      } catch (const Napi::Error&) {
        // swallowed: the JS wrapper catches its callback's errors itself
      }
    });
    if (st != napi_ok) delete data;
  };
}

// generate(model, options) -> Promise<GenerateResult>; see lib/model/policy.ts for the typed surface.
Napi::Value GenerateJs(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  return Guard(env, [&]() -> Napi::Value {
    std::shared_ptr<DecoderModel> model = UnwrapModel(info[0], "model");
    Napi::Object o = ArgObject(info, 1, "options");
    auto req = std::make_shared<GenerateRequest>();
    if (!Has(o, "prompts")) throw ArgError("options.prompts is required (an array of token-id arrays)");
    Napi::Value pv = o.Get("prompts");
    if (!pv.IsArray()) throw ArgError("options.prompts must be an array of token-id arrays");
    auto pa = pv.As<Napi::Array>();
    for (uint32_t i = 0; i < pa.Length(); ++i) req->prompts.push_back(ReadTokenList(pa.Get(i), "prompts[" + std::to_string(i) + "]"));
    req->n = GetInt(o, "n", 1, "options");
    req->max_new_tokens = GetInt(o, "maxNewTokens", 256, "options");
    req->sampling = ReadSampling(o, "options");
    req->seed = ReadSeed(o, "options");
    if (Has(o, "stopIds")) req->stop_ids = GetIntArray(o, "stopIds", "options");
    // promptOptions: one object per prompt overriding temperature / topK / topP / minP / seed /
    // maxNewTokens / stopIds for that prompt's rows (generate.h, GenerateRequest::row_*).
    if (Has(o, "promptOptions")) {
      Napi::Value pov = o.Get("promptOptions");
      if (!pov.IsArray()) throw ArgError("options.promptOptions must be an array with one object per prompt");
      auto po = pov.As<Napi::Array>();
      if (po.Length() != pa.Length())
        throw ArgError("options.promptOptions must have one entry per prompt (" + std::to_string(pa.Length()) + "), got " + std::to_string(po.Length()));
      bool any_seed = false;
      for (uint32_t i = 0; i < po.Length(); ++i) {
        const std::string w = "options.promptOptions[" + std::to_string(i) + "]";
        Napi::Value e = po.Get(i);
        if (!e.IsObject()) throw ArgError(w + " must be an object");
        Napi::Object eo = e.As<Napi::Object>();
        req->row_sampling.push_back(ReadSampling(eo, w, req->sampling));
        int64_t sd = -1;
        if (Has(eo, "seed")) {
          sd = GetInt(eo, "seed", std::nullopt, w.c_str());
          if (sd < 0) throw ArgError(w + ".seed must be an integer >= 0");
          any_seed = true;
        }
        req->row_seeds.push_back(sd);
        req->row_max_new_tokens.push_back(GetInt(eo, "maxNewTokens", GetInt(o, "maxNewTokens", 256, "options"), w.c_str()));
        req->row_stop_ids.push_back(Has(eo, "stopIds") ? GetIntArray(eo, "stopIds", w.c_str()) : req->stop_ids);
      }
      if (!any_seed) req->row_seeds.clear();  // no per-row seed: the call's generator, as without promptOptions
    }
    req->pad_id = GetInt(o, "padId", 0, "options");
    req->adapter = ReadAdapter(o, "adapter", "options");
    req->compact_fraction = GetNumber(o, "compactFraction", 0.125, "options");
    req->simulate_oom_at_step = GetInt(o, "simulateOomAtStep", -1, "options");
    // Decode path (generate.h): cudaGraphs (default true: used on CUDA builds with a CUDA model),
    // staticCache (default: on exactly when graphs are used), padToBucket (static path; default:
    // with graphs).
    req->cuda_graphs = GetBool(o, "cudaGraphs", true, "options");
    if (Has(o, "staticCache")) req->static_cache = GetBool(o, "staticCache", std::nullopt, "options") ? 1 : 0;
    if (Has(o, "padToBucket")) req->pad_to_bucket = GetBool(o, "padToBucket", std::nullopt, "options") ? 1 : 0;
    // liveKv (static path, CUDA): attend over each row's filled slots only (default true).
    req->live_kv = GetBool(o, "liveKv", true, "options");
    // mergeAdapter: sample from the adapter merged into the weights (default false).
    req->merge_adapter = GetBool(o, "mergeAdapter", false, "options");
    // syncEvery (static path): read the sampled tokens back every this many steps (default 8).
    req->sync_every = GetInt(o, "syncEvery", 8, "options");
    req->abort = Has(o, "abortHandle") ? UnwrapAbort(env, o.Get("abortHandle"), "options.abortHandle") : std::make_shared<std::atomic<bool>>(false);
    ValidateRequest(*model, *req);  // argument errors reject before any work is queued
    if (Has(o, "onGroupDone") && !o.Get("onGroupDone").IsUndefined()) SetOnGroupDone(env, o.Get("onGroupDone"), *req);
    auto res = std::make_shared<GenerateResult>();
    auto run = [model, req, res]() { *res = Generate(*model, *req); };
    auto done = [res](Napi::Env e) -> Napi::Value {
      Napi::Object out = Napi::Object::New(e);
      Napi::Array comps = Napi::Array::New(e, res->completions.size());
      for (size_t i = 0; i < res->completions.size(); ++i) comps.Set(static_cast<uint32_t>(i), CompletionToJs(e, res->completions[i]));
      out.Set("completions", comps);
      out.Set("seed", Napi::Number::New(e, static_cast<double>(res->seed)));
      out.Set("promptTokens", Napi::Number::New(e, static_cast<double>(res->prompt_tokens)));
      out.Set("newTokens", Napi::Number::New(e, static_cast<double>(res->new_tokens)));
      out.Set("steps", Napi::Number::New(e, static_cast<double>(res->steps)));
      out.Set("compactions", Napi::Number::New(e, static_cast<double>(res->compactions)));
      out.Set("prefillMs", Napi::Number::New(e, res->prefill_ms));
      out.Set("decodeMs", Napi::Number::New(e, res->decode_ms));
      out.Set("decodePath", Napi::String::New(e, res->decode_path));
      out.Set("decodeAttention", Napi::String::New(e, res->decode_attention));
      out.Set("decodePromptGroup", Napi::Number::New(e, static_cast<double>(res->decode_prompt_group)));
      out.Set("adapterMerged", Napi::Boolean::New(e, res->adapter_merged));
      out.Set("graphCaptures", Napi::Number::New(e, static_cast<double>(res->graph_captures)));
      out.Set("batchRows", Napi::Number::New(e, static_cast<double>(res->batch_rows)));
      out.Set("samplingInStep", Napi::Boolean::New(e, res->sampling_in_step));
      return out;
    };
    return StartOnModel(env, model, run, done, /*grad=*/false, ModelAccess::kShared);  // read-only inference
  });
}

// sampleFromLogits(logits {data: Float32Array, shape: [R, V]}, {temperature, topK, topP, minP, seed,
//                   rows?: [{temperature, topK, topP, minP}] (R entries), device?: 'cpu' | 'cuda[:i]'})
//   -> {tokenIds: Int32Array [R], logprobs: Float32Array [R], uniforms: Float32Array [R], seed}
// The sampler of generate() on given logits, for tests and tools: R uniforms from one CPU
// generator seeded with `seed`, then SampleTokens (one setting) or, with `rows`, SampleTokensRows
// (a setting per row), on `device` (default cpu; the logits are copied there).
Napi::Value SampleFromLogitsJs(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  return Guard(env, [&]() -> Napi::Value {
    if (info.Length() < 1) throw ArgError("logits is required (a tensor {data, shape: [R, V]})");
    at::Tensor logits = TensorFromJs(info[0], "logits");
    if (logits.dim() != 2 || logits.size(0) < 1 || logits.size(1) < 1) throw ArgError("logits must have shape [R, V] with R, V >= 1");
    if (!at::isFloatingType(logits.scalar_type())) throw ArgError("logits must be a Float32Array or Float64Array tensor");
    Napi::Object o = ArgObject(info, 1, "options", /*optional=*/true);
    SamplingOptions s = ReadSampling(o, "options");
    uint64_t seed = ReadSeed(o, "options");
    const at::Device dev = ParseDevice(GetString(o, "device", std::string("cpu"), "options"));
    const int64_t R = logits.size(0);
    std::vector<SamplingOptions> rows;
    if (Has(o, "rows")) {
      Napi::Value rv = o.Get("rows");
      if (!rv.IsArray()) throw ArgError("options.rows must be an array of sampling options (one per logits row)");
      Napi::Array ra = rv.As<Napi::Array>();
      if (static_cast<int64_t>(ra.Length()) != R)
        throw ArgError("options.rows must have one entry per logits row (" + std::to_string(R) + "), got " + std::to_string(ra.Length()));
      for (uint32_t i = 0; i < ra.Length(); ++i) {
        Napi::Value e = ra.Get(i);
        if (!e.IsObject()) throw ArgError("options.rows[" + std::to_string(i) + "] must be an object");
        rows.push_back(ReadSampling(e.As<Napi::Object>(), ("options.rows[" + std::to_string(i) + "]").c_str()));
      }
    }
    at::NoGradGuard ng;
    at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(seed);
    at::Tensor u = at::rand({R}, gen, at::TensorOptions().dtype(at::kFloat));
    at::Tensor lg = logits.to(at::kFloat).to(dev);
    at::Tensor tok, lp;
    if (rows.empty())
      std::tie(tok, lp) = SampleTokens(lg, s, u.to(dev));
    else
      std::tie(tok, lp) = SampleTokensRows(lg, RowSampling::Make(rows, lg.size(1), dev), u.to(dev));
    Napi::Object out = Napi::Object::New(env);
    out.Set("tokenIds", TensorToJs(env, tok.cpu()).Get("data"));
    out.Set("logprobs", TensorToJs(env, lp.cpu()).Get("data"));
    out.Set("uniforms", TensorToJs(env, u).Get("data"));
    out.Set("seed", Napi::Number::New(env, static_cast<double>(seed)));
    return out;
  });
}

// createDecodeEngine(model, {maxRows, capacity, padId, adapter, maxPrefillTokens})
//   -> {add(row), cancel(id), waiting(), step(): Promise<StepResult>, release()}
// The step-wise continuous-batching engine (generate/engine.h); see lib/model/engine.ts.
Napi::Value CreateDecodeEngineJs(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  return Guard(env, [&]() -> Napi::Value {
    std::shared_ptr<DecoderModel> model = UnwrapModel(info[0], "model");
    Napi::Object o = ArgObject(info, 1, "options");
    const int64_t ctx = model->config().max_position_embeddings;
    const int64_t max_rows = GetInt(o, "maxRows", 32, "options");
    const int64_t capacity = GetInt(o, "capacity", ctx > 0 ? std::min<int64_t>(ctx, 4096) : 4096, "options");
    const int static_decode = Has(o, "staticDecode") ? (GetBool(o, "staticDecode", std::nullopt, "options") ? 1 : 0) : -1;
    auto eng = std::make_shared<DecodeEngine>(model, max_rows, capacity, GetInt(o, "padId", 0, "options"), ReadAdapter(o, "adapter", "options"),
                                              GetInt(o, "maxPrefillTokens", 8192, "options"), GetBool(o, "cudaGraphs", true, "options"), static_decode);
    auto busy = std::make_shared<std::atomic<bool>>(false);
    Napi::Object out = Napi::Object::New(env);
    out.Set("maxRows", Napi::Number::New(env, static_cast<double>(max_rows)));
    out.Set("capacity", Napi::Number::New(env, static_cast<double>(capacity)));
    out.Set("decodePath", Napi::String::New(env, eng->graphs() ? "cuda-graphs" : eng->static_decode() ? "static" : "dynamic"));
    out.Set("add", Napi::Function::New(
                       env,
                       [eng](const Napi::CallbackInfo& i) -> Napi::Value {
                         return Guard(i.Env(), [&]() -> Napi::Value {
                           Napi::Object r = ArgObject(i, 0, "row");
                           EngineRowSpec s;
                           s.id = GetInt(r, "id", std::nullopt, "row");
                           if (!Has(r, "prompt")) throw ArgError("row.prompt is required (token ids)");
                           s.prompt = ReadTokenList(r.Get("prompt"), "row.prompt");
                           s.sampling = ReadSampling(r, "row");
                           s.seed = ReadSeed(r, "row");
                           s.max_new_tokens = GetInt(r, "maxNewTokens", 256, "row");
                           if (Has(r, "stopIds")) s.stop_ids = GetIntArray(r, "stopIds", "row");
                           s.top_logprobs = GetInt(r, "topLogprobs", -1, "row");
                           eng->Validate(s, "row");
                           eng->Add(std::move(s));
                           return i.Env().Undefined();
                         });
                       },
                       "add"));
    out.Set("cancel", Napi::Function::New(
                          env,
                          [eng](const Napi::CallbackInfo& i) -> Napi::Value {
                            return Guard(i.Env(), [&]() -> Napi::Value {
                              if (i.Length() < 1 || !i[0].IsNumber()) throw ArgError("cancel(id): id must be a number");
                              eng->Cancel(static_cast<int64_t>(i[0].As<Napi::Number>().DoubleValue()));
                              return i.Env().Undefined();
                            });
                          },
                          "cancel"));
    out.Set("waiting",
            Napi::Function::New(
                env, [eng](const Napi::CallbackInfo& i) -> Napi::Value { return Napi::Number::New(i.Env(), static_cast<double>(eng->Waiting())); }, "waiting"));
    out.Set("release", Napi::Function::New(
                           env,
                           [eng, busy](const Napi::CallbackInfo& i) -> Napi::Value {
                             return Guard(i.Env(), [&]() -> Napi::Value {
                               if (busy->load()) throw InputError("release() while a step is running (await it first)");
                               eng->Release();
                               return i.Env().Undefined();
                             });
                           },
                           "release"));
    out.Set("step", Napi::Function::New(
                        env,
                        [eng, busy, model](const Napi::CallbackInfo& i) -> Napi::Value {
                          Napi::Env e = i.Env();
                          return Guard(e, [&]() -> Napi::Value {
                            if (busy->exchange(true)) throw InputError("step() while another step is running (await it first)");
                            auto res = std::make_shared<EngineStepResult>();
                            auto run = [eng, model, res, busy]() {
                              struct Clear {
                                std::shared_ptr<std::atomic<bool>> b;
                                ~Clear() { b->store(false); }
                              } clear{busy};  // cleared however the step ends, a disposed model included
                              ModelLock lk(*model);
                              *res = eng->Step();
                            };
                            auto done = [res](Napi::Env env2) -> Napi::Value {
                              Napi::Object so = Napi::Object::New(env2);
                              Napi::Array toks = Napi::Array::New(env2, res->tokens.size());
                              for (size_t k = 0; k < res->tokens.size(); ++k) {
                                const EngineToken& t = res->tokens[k];
                                Napi::Object to = Napi::Object::New(env2);
                                to.Set("id", Napi::Number::New(env2, static_cast<double>(t.id)));
                                to.Set("token", Napi::Number::New(env2, static_cast<double>(t.token)));
                                to.Set("logprob", Napi::Number::New(env2, t.logprob));
                                to.Set("finish", t.finish == 0 ? env2.Null() : Napi::String::New(env2, t.finish == 1 ? "stop" : "length"));
                                if (t.prompt_tokens >= 0) to.Set("promptTokens", Napi::Number::New(env2, static_cast<double>(t.prompt_tokens)));
                                to.Set("rawLogprob", Napi::Number::New(env2, t.raw_logprob));
                                if (!t.top_ids.empty()) {
                                  auto ti = Napi::Int32Array::New(env2, t.top_ids.size());
                                  for (size_t j = 0; j < t.top_ids.size(); ++j) ti[j] = static_cast<int32_t>(t.top_ids[j]);
                                  auto tv = Napi::Float32Array::New(env2, t.top_logprobs.size());
                                  std::copy(t.top_logprobs.begin(), t.top_logprobs.end(), tv.Data());
                                  to.Set("topIds", ti);
                                  to.Set("topLogprobs", tv);
                                }
                                toks.Set(static_cast<uint32_t>(k), to);
                              }
                              so.Set("tokens", toks);
                              so.Set("active", Napi::Number::New(env2, static_cast<double>(res->active)));
                              so.Set("waiting", Napi::Number::New(env2, static_cast<double>(res->waiting)));
                              so.Set("joined", Napi::Number::New(env2, static_cast<double>(res->joined)));
                              so.Set("prefillTokens", Napi::Number::New(env2, static_cast<double>(res->prefill_tokens)));
                              so.Set("batchRows", Napi::Number::New(env2, static_cast<double>(res->batch_rows)));
                              so.Set("shifts", Napi::Number::New(env2, static_cast<double>(res->shifts)));
                              so.Set("graphCaptures", Napi::Number::New(env2, static_cast<double>(res->graph_captures)));
                              so.Set("prefillMs", Napi::Number::New(env2, res->prefill_ms));
                              so.Set("decodeMs", Napi::Number::New(env2, res->decode_ms));
                              so.Set("sampleMs", Napi::Number::New(env2, res->sample_ms));
                              return so;
                            };
                            try {
                              return Worker::Start(e, run, done, /*grad=*/false, model->device());
                            } catch (...) {
                              busy->store(false);
                              throw;
                            }
                          });
                        },
                        "step"));
    return out;
  });
}

}  // namespace

void RegisterGenerate(Napi::Env env, Napi::Object exports) {
  exports.Set("generate", Napi::Function::New(env, GenerateJs, "generate"));
  exports.Set("createDecodeEngine", Napi::Function::New(env, CreateDecodeEngineJs, "createDecodeEngine"));
  exports.Set("createAbortHandle", Napi::Function::New(env, CreateAbortHandle, "createAbortHandle"));
  exports.Set("sampleFromLogits", Napi::Function::New(env, SampleFromLogitsJs, "sampleFromLogits"));
  exports.Set("cudaGraphsCompiled",
              Napi::Function::New(
                  env, [](const Napi::CallbackInfo& i) { return Napi::Boolean::New(i.Env(), CudaGraphsCompiled()); }, "cudaGraphsCompiled"));
}

}  // namespace pg
