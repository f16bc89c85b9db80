// Bindings of the loss exports: standalone fused/unfused losses over JS tensors (tests,
// benchmarks), advantages, logprob helpers; the model-integrated steps are in napi/model_steps.cc.
//
// Exports (all return Promises; arguments are checked on the JS thread and raise TypeError):
//   jsdLoss(o)            -> {loss, gradStudentHidden?}
//   grpoLoss(o)           -> {loss, meanKl, clipFraction:{low,high,region}, maskCount, logprobs, gradHidden?}
//   selectedLogprobs(o)   -> JsTensor [N]
//   k3(o)                 -> JsTensor (sync)
//   computeAdvantages(o)  -> {advantages, keep, groupStd} (sync)
//   _benchLoss(o)         -> {ms[], loss} random inputs generated natively (benchmarks; setupOnly: inputs only)
#include <chrono>
#include <memory>

#include "loss/advantages.h"
#include "loss/common.h"
#include "loss/grpo.h"
#include "loss/jsd.h"
#include "napi/loss.h"
#include "napi/util.h"

namespace pg {

namespace {

struct Place {
  torch::Device device{torch::kCPU};
  std::optional<torch::ScalarType> dtype;  // cast of hidden/weight (bench); null = as given
};

Place ReadPlace(const Napi::Object& o, const char* what) {
  Place p;
  p.device = ParseDevice(GetString(o, "device", std::string("cpu"), what));
  if (Has(o, "dtype")) p.dtype = ParseDtype(GetString(o, "dtype", std::nullopt, what));
  return p;
}

torch::Tensor Put(const torch::Tensor& t, const Place& p, bool cast) {
  torch::Tensor x = t.to(p.device);
  if (cast && p.dtype) x = x.to(*p.dtype);
  return x;
}

Napi::Value JsdLossJs(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  return Guard(env, [&]() -> Napi::Value {
    auto o = ArgObject(info, 0, "jsdLoss options");
    const char* W = "jsdLoss";
    if (Has(o, "studentLogits")) {
      // Direct logits (tests of the per-chunk math, e.g. with -inf entries a matmul cannot produce).
      auto sl = GetTensor(o, "studentLogits", W), tl = GetTensor(o, "teacherLogits", W);
      if (sl.dim() != 2 || tl.sizes() != sl.sizes()) throw ArgError("jsdLoss: studentLogits and teacherLogits must both be [N, V]");
      if (!at::isFloatingType(sl.scalar_type())) throw ArgError("jsdLoss: logits must be float");
      double beta = GetNumber(o, "beta", 0.5, W), temp = GetNumber(o, "temperature", 1.0, W);
      if (!(beta >= 0 && beta <= 1) || !(temp > 0)) throw ArgError("jsdLoss: need 0 <= beta <= 1 and temperature > 0");
      torch::NoGradGuard ng;
      auto ls = at::log_softmax(sl / temp, -1), lt = at::log_softmax(tl.to(sl.scalar_type()) / temp, -1);
      torch::Tensor per, dz;
      loss::JsdChunk(ls, lt, beta, &per, &dz);
      double n = std::max<double>(1, sl.size(0));
      auto out = Napi::Object::New(env);
      out.Set("loss", Napi::Number::New(env, per.sum().item<double>() / n));
      out.Set("perToken", TensorToJs(env, per));
      out.Set("gradStudentLogits", TensorToJs(env, dz / (n * temp)));
      auto d = Napi::Promise::Deferred::New(env);
      d.Resolve(out);
      return d.Promise();
    }
    auto sh = GetTensor(o, "studentHidden", W);
    bool teacher_logits = Has(o, "teacherLogits");
    auto teacher = teacher_logits ? GetTensor(o, "teacherLogits", W) : GetTensor(o, "teacherHidden", W);
    auto weight = GetTensor(o, "weight", W);
    auto mask = Has(o, "mask") ? GetTensor(o, "mask", W) : torch::ones({sh.dim() ? sh.size(0) : 0});
    loss::JsdOptions jo;
    jo.beta = GetNumber(o, "beta", 0.5, W);
    jo.temperature = GetNumber(o, "temperature", 1.0, W);
    jo.chunk = GetInt(o, "chunkSize", 0, W);
    jo.normalizer = GetNumber(o, "normalizer", -1.0, W);
    bool fused = GetBool(o, "fused", true, W);
    bool want_grad = GetBool(o, "grad", true, W);
    Place pl = ReadPlace(o, W);
    if (!fused && teacher_logits) throw ArgError("jsdLoss: the unfused reference takes teacherHidden");
    auto res = std::make_shared<std::pair<torch::Tensor, torch::Tensor>>();
    return Worker::Start(
        env,
        [=]() {
          auto s = Put(sh, pl, true).detach().requires_grad_(want_grad);
          auto t = Put(teacher, pl, !teacher_logits);
          auto w = Put(weight, pl, true);
          auto m = mask.to(pl.device);
          torch::Tensor l =
              fused ? (teacher_logits ? loss::JsdFusedTeacherLogits(s, t, w, m, jo) : loss::JsdFused(s, t, w, m, jo)) : loss::JsdReference(s, t, w, m, jo);
          if (want_grad) {
            l.backward();
            res->second = s.grad();
          }
          res->first = l.detach();
        },
        [res](Napi::Env env) -> Napi::Value {
          auto out = Napi::Object::New(env);
          out.Set("loss", Napi::Number::New(env, res->first.to(torch::kDouble).item<double>()));
          if (res->second.defined()) out.Set("gradStudentHidden", TensorToJs(env, res->second));
          return out;
        },
        /*grad=*/true, pl.device);
  });
}

}  // namespace

Napi::Object GrpoMetricsToJs(Napi::Env env, const loss::GrpoMetrics& m) {
  auto out = Napi::Object::New(env);
  out.Set("meanKl", Napi::Number::New(env, m.MeanKl()));
  auto cf = Napi::Object::New(env);
  double n = m.mask_count > 0 ? m.mask_count : 1;
  cf.Set("low", Napi::Number::New(env, m.clip_low_sum / n));
  cf.Set("high", Napi::Number::New(env, m.clip_high_sum / n));
  cf.Set("region", Napi::Number::New(env, m.clip_region_sum / n));
  out.Set("clipFraction", cf);
  out.Set("maskCount", Napi::Number::New(env, m.mask_count));
  if (m.logp.defined()) out.Set("logprobs", TensorToJs(env, m.logp));
  return out;
}

loss::GrpoOptions ReadGrpoOptions(const Napi::Object& o, const char* W) {
  loss::GrpoOptions g;
  double eps = GetNumber(o, "epsilon", 0.2, W);
  g.eps_low = GetNumber(o, "epsLow", eps, W);
  g.eps_high = GetNumber(o, "epsHigh", eps, W);
  // klCoef, or its former name betaKl (issue 51: one word per setting, the training flag --kl-coef);
  // both given with different values cannot be read either way.
  const double kl_former = GetNumber(o, "betaKl", 0.0, W);
  g.kl_coef = GetNumber(o, "klCoef", kl_former, W);
  if (Has(o, "klCoef") && Has(o, "betaKl") && kl_former != g.kl_coef)
    throw ArgError(std::string(W) + ": klCoef and its former name betaKl are given with different values; give klCoef only");
  if (g.kl_coef < 0) throw ArgError(std::string(W) + "." + (Has(o, "klCoef") ? "klCoef" : "betaKl") + " must be >= 0 (got " + std::to_string(g.kl_coef) + ")");
  g.temperature = GetNumber(o, "temperature", 1.0, W);
  g.chunk = GetInt(o, "chunkSize", 0, W);
  g.aggregation = GetString(o, "aggregation", std::string("dapo"), W);
  g.num_sequences = GetNumber(o, "numSequences", -1.0, W);
  g.num_tokens = GetNumber(o, "numTokens", -1.0, W);
  g.max_completion_length = GetNumber(o, "maxCompletionLength", -1.0, W);
  if (g.aggregation != "grpo" && g.aggregation != "dapo" && g.aggregation != "dr_grpo")
    throw ArgError(std::string(W) + ".aggregation must be 'grpo', 'dapo' or 'dr_grpo'");
  return g;
}

namespace {

Napi::Value GrpoLossJs(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  return Guard(env, [&]() -> Napi::Value {
    auto o = ArgObject(info, 0, "grpoLoss options");
    const char* W = "grpoLoss";
    auto hidden = GetTensor(o, "hidden", W);
    auto weight = GetTensor(o, "weight", W);
    auto tokens = GetTensor(o, "tokens", W);
    auto old = GetTensor(o, "oldLogprobs", W);
    auto adv = GetTensor(o, "advantages", W);
    auto mask = GetTensor(o, "mask", W);
    torch::Tensor ref = Has(o, "refLogprobs") ? GetTensor(o, "refLogprobs", W) : torch::Tensor();
    auto go = ReadGrpoOptions(o, W);
    if (go.kl_coef != 0.0 && !ref.defined()) throw ArgError("grpoLoss.refLogprobs is required when klCoef != 0");
    bool fused = GetBool(o, "fused", true, W);
    bool want_grad = GetBool(o, "grad", true, W);
    Place pl = ReadPlace(o, W);
    struct R {
      torch::Tensor loss, grad;
      loss::GrpoMetrics m;
    };
    auto res = std::make_shared<R>();
    return Worker::Start(
        env,
        [=]() {
          auto h = Put(hidden, pl, true).detach().requires_grad_(want_grad);
          auto w = Put(weight, pl, true);
          auto r = ref.defined() ? ref.to(pl.device) : ref;
          torch::Tensor l = fused ? loss::GrpoFused(h, w, tokens.to(pl.device), old.to(pl.device), r, adv.to(pl.device), mask.to(pl.device), go, &res->m)
                                  : loss::GrpoReference(h, w, tokens.to(pl.device), old.to(pl.device), r, adv.to(pl.device), mask.to(pl.device), go, &res->m);
          if (want_grad) {
            l.backward();
            res->grad = h.grad();
          }
          res->loss = l.detach();
        },
        [res](Napi::Env env) -> Napi::Value {
          auto out = GrpoMetricsToJs(env, res->m);
          out.Set("loss", Napi::Number::New(env, res->loss.to(torch::kDouble).item<double>()));
          if (res->grad.defined()) out.Set("gradHidden", TensorToJs(env, res->grad));
          return out;
        },
        true, pl.device);
  });
}

Napi::Value SelectedLogprobsJs(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  return Guard(env, [&]() -> Napi::Value {
    auto o = ArgObject(info, 0, "selectedLogprobs options");
    const char* W = "selectedLogprobs";
    auto hidden = GetTensor(o, "hidden", W);
    auto weight = GetTensor(o, "weight", W);
    auto tokens = GetTensor(o, "tokens", W);
    double temp = GetNumber(o, "temperature", 1.0, W);
    int64_t chunk = GetInt(o, "chunkSize", 0, W);
    Place pl = ReadPlace(o, W);
    auto res = std::make_shared<torch::Tensor>();
    return Worker::Start(
        env, [=]() { *res = loss::SelectedLogprobs(Put(hidden, pl, true), Put(weight, pl, true), tokens.to(pl.device), temp, chunk); },
        [res](Napi::Env env) -> Napi::Value { return TensorToJs(env, *res); }, false, pl.device);
  });
}

Napi::Value K3Js(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  return Guard(env, [&]() -> Napi::Value {
    auto o = ArgObject(info, 0, "k3 options");
    auto lp = GetTensor(o, "logprobs", "k3"), ref = GetTensor(o, "refLogprobs", "k3");
    if (lp.sizes() != ref.sizes()) throw ArgError("k3: logprobs and refLogprobs must have the same shape");
    torch::NoGradGuard ng;
    return TensorToJs(env, loss::K3(lp, ref.to(lp.scalar_type())));
  });
}

Napi::Value ComputeAdvantagesJs(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  return Guard(env, [&]() -> Napi::Value {
    auto o = ArgObject(info, 0, "computeAdvantages options");
    const char* W = "computeAdvantages";
    auto r = GetTensor(o, "rewards", W);
    loss::AdvantageOptions ao;
    ao.group_size = GetInt(o, "groupSize", std::nullopt, W);
    ao.scale = GetString(o, "scale", std::string("group"), W);
    ao.std_floor = GetNumber(o, "stdFloor", 1e-3, W);
    ao.eps = GetNumber(o, "eps", 1e-4, W);
    ao.drop_zero_variance = GetBool(o, "dropZeroVariance", false, W);
    torch::NoGradGuard ng;
    auto a = loss::ComputeAdvantages(r, ao);
    auto out = Napi::Object::New(env);
    out.Set("advantages", TensorToJs(env, a.advantages));
    out.Set("keep", TensorToJs(env, a.keep));
    out.Set("groupStd", TensorToJs(env, a.group_std));
    return out;
  });
}

// Benchmark driver: random inputs created on the device (no JS copies of a [V, H] weight).
Napi::Value BenchLossJs(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  return Guard(env, [&]() -> Napi::Value {
    auto o = ArgObject(info, 0, "_benchLoss options");
    const char* W = "_benchLoss";
    std::string kind = GetString(o, "kind", std::nullopt, W);
    if (kind != "jsd" && kind != "grpo") throw ArgError("_benchLoss.kind must be 'jsd' or 'grpo'");
    int64_t T = GetInt(o, "T", std::nullopt, W), V = GetInt(o, "V", std::nullopt, W), H = GetInt(o, "H", std::nullopt, W);
    int64_t iters = GetInt(o, "iters", 1, W), chunk = GetInt(o, "chunkSize", 0, W);
    bool fused = GetBool(o, "fused", true, W);
    bool setup_only = GetBool(o, "setupOnly", false, W);
    Place pl = ReadPlace(o, W);
    auto dtype = pl.dtype.value_or(torch::kFloat);
    auto res = std::make_shared<std::pair<std::vector<double>, double>>();
    return Worker::Start(
        env,
        [=]() {
          torch::manual_seed(0);
          auto opt = torch::TensorOptions().device(pl.device).dtype(dtype);
          torch::Tensor w, h, th, tok, old, adv, mask;
          {
            torch::NoGradGuard ng;
            w = torch::randn({V, H}, opt).mul_(1.0 / std::sqrt(static_cast<double>(H)));  // in place: no 2nd [V, H] at setup
            h = torch::randn({T, H}, opt);
            th = torch::randn({T, H}, opt);
            tok = torch::randint(0, V, {1, T}, torch::TensorOptions().device(pl.device).dtype(torch::kLong));
            old = torch::full({1, T}, -5.0, torch::TensorOptions().device(pl.device));
            adv = torch::ones({1}, torch::TensorOptions().device(pl.device));
            mask = torch::ones({T}, torch::TensorOptions().device(pl.device));
          }
          if (setup_only) {
            if (pl.device.is_cuda()) torch::cuda::synchronize(pl.device.index());
            return;
          }
          for (int64_t i = 0; i < iters; ++i) {
            if (pl.device.is_cuda()) torch::cuda::synchronize(pl.device.index());
            auto t0 = std::chrono::steady_clock::now();
            auto x = h.detach().requires_grad_(true);
            torch::Tensor l;
            if (kind == "jsd") {
              loss::JsdOptions jo;
              jo.chunk = chunk;
              l = fused ? loss::JsdFused(x, th, w, mask, jo) : loss::JsdReference(x, th, w, mask, jo);
            } else {
              loss::GrpoOptions go;
              go.chunk = chunk;
              go.kl_coef = 0.04;
              auto x3 = x.unsqueeze(0);
              auto m2 = mask.unsqueeze(0);
              l = fused ? loss::GrpoFused(x3, w, tok, old, old, adv, m2, go, nullptr) : loss::GrpoReference(x3, w, tok, old, old, adv, m2, go, nullptr);
            }
            l.backward();
            res->second = l.item<double>();
            if (pl.device.is_cuda()) torch::cuda::synchronize(pl.device.index());
            res->first.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
          }
        },
        [res](Napi::Env env) -> Napi::Value {
          auto out = Napi::Object::New(env);
          auto a = Napi::Array::New(env, res->first.size());
          for (size_t i = 0; i < res->first.size(); ++i) a.Set(static_cast<uint32_t>(i), Napi::Number::New(env, res->first[i]));
          out.Set("ms", a);
          out.Set("loss", Napi::Number::New(env, res->second));
          return out;
        },
        true, pl.device);
  });
}

}  // namespace

void RegisterLoss(Napi::Env env, Napi::Object exports) {
  exports.Set("jsdLoss", Napi::Function::New(env, JsdLossJs, "jsdLoss"));
  exports.Set("grpoLoss", Napi::Function::New(env, GrpoLossJs, "grpoLoss"));
  exports.Set("selectedLogprobs", Napi::Function::New(env, SelectedLogprobsJs, "selectedLogprobs"));
  exports.Set("k3", Napi::Function::New(env, K3Js, "k3"));
  exports.Set("computeAdvantages", Napi::Function::New(env, ComputeAdvantagesJs, "computeAdvantages"));
  exports.Set("_benchLoss", Napi::Function::New(env, BenchLossJs, "_benchLoss"));
}
}  // namespace pg
