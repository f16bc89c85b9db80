// Bindings of the model-integrated steps (compute in steps/steps.h):
//   sequenceLogprobs(model, {inputIds, attentionMask, completionMask?, temperature, adapter, chunkSize})
//     -> JsTensor [B, L] float32: logp of inputIds[b, t] given the prefix (from hidden[b, t-1]) at
//        softmax(logits / temperature); 0 at t = 0 and where completionMask is 0. No grad.
//   opsdBackward(model, {studentIds, studentMask, teacherIds, teacherMask, studentStart, teacherStart,
//                        completionLength, beta, temperature, normalizer, teacher, chunkSize})
//     -> {loss, tokens}: teacher forward (no grad, adapter `teacher`), student forward (grad, active
//        adapter), fused JSD over the completion tokens, backward into the LoRA grads (accumulating).
//   grpoBackward(model, {inputIds, attentionMask, completionMask, oldLogprobs, refLogprobs?, advantages,
//                        epsLow, epsHigh, klCoef (former name betaKl), temperature, aggregation, numSequences, numTokens,
//                        maxCompletionLength, chunkSize})
//     -> {loss, meanKl, clipFraction, maskCount, logprobs [B, L]}: fused GRPO, grads accumulate.
//   prefixLogprobs(model, {prefixIds [1, P], suffixIds [n, S] (right-padded), suffixLengths [n],
//                          candidates [K], adapter})
//     -> JsTensor [n, K] float32: log p(candidate | prefix + suffix_i[:len_i]) at each row's last
//        real position (log-softmax over the full vocabulary). The prefix is prefilled once into a
//        KV cache that every suffix row then extends — the local judge's shared question + plan.
// Every step runs through StartOnModel (napi/model.h): on a worker thread with the model's device
// set, under the model's lock. Ids, masks and the adapter are read by napi/args.h: masks are 0/1 of
// any numeric dtype, `adapter` / `teacher` absent or 'active' | 'none' | a snapshot name.
#include <memory>

#include "loss/grpo.h"
#include "loss/jsd.h"
#include "napi/args.h"
#include "napi/loss.h"
#include "napi/model.h"
#include "napi/util.h"
#include "steps/steps.h"

namespace pg {
namespace {

Napi::Value SequenceLogprobsJs(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  return Guard(env, [&]() -> Napi::Value {
    const char* W = "sequenceLogprobs";
    auto model = UnwrapModel(info[0], "sequenceLogprobs model");
    auto o = ArgObject(info, 1, "sequenceLogprobs options");
    at::Tensor ids = ReadIds(o, "inputIds", W);
    at::Tensor am = ReadMask(o, "attentionMask", ids, "inputIds", W).to(at::kFloat);
    at::Tensor cm = Has(o, "completionMask") ? ReadMask(o, "completionMask", ids, "inputIds", W).to(at::kFloat) : am;
    if (ids.size(1) < 2) throw ArgError("sequenceLogprobs: inputIds need at least 2 positions");
    double temp = GetNumber(o, "temperature", 1.0, W);
    if (!(temp > 0)) throw ArgError("sequenceLogprobs.temperature must be > 0");
    AdapterSel sel = ReadAdapter(o, "adapter", W);
    int64_t chunk = GetInt(o, "chunkSize", 0, W);
    auto res = std::make_shared<at::Tensor>();
    return StartOnModel(
        env, model, [=]() { *res = steps::SequenceLogprobs(*model, ids, am, cm, temp, sel, chunk); },
        [res](Napi::Env env) -> Napi::Value { return TensorToJs(env, *res); }, /*grad=*/false, ModelAccess::kShared);
  });
}

Napi::Value PrefixLogprobsJs(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  return Guard(env, [&]() -> Napi::Value {
    const char* W = "prefixLogprobs";
    auto model = UnwrapModel(info[0], "prefixLogprobs model");
    auto o = ArgObject(info, 1, "prefixLogprobs options");
    at::Tensor pre = ReadIds(o, "prefixIds", W);
    at::Tensor suf = ReadIds(o, "suffixIds", W);
    // Lengths and token ids are integers: a float tensor is refused, not truncated.
    at::Tensor len = GetTensor(o, "suffixLengths", W);
    at::Tensor cand = GetTensor(o, "candidates", W);
    if (at::isFloatingType(len.scalar_type())) throw ArgError("prefixLogprobs.suffixLengths must be an integer tensor (Int32Array / BigInt64Array)");
    if (at::isFloatingType(cand.scalar_type())) throw ArgError("prefixLogprobs.candidates must be an integer tensor (Int32Array / BigInt64Array)");
    len = len.to(at::kLong);
    cand = cand.to(at::kLong);
    const int64_t n = suf.size(0), S = suf.size(1), K = cand.numel();
    if (pre.size(0) != 1) throw ArgError("prefixLogprobs.prefixIds must be [1, P] with P >= 1");
    if (len.dim() != 1 || len.size(0) != n) throw ArgError("prefixLogprobs.suffixLengths must be [n]");
    if (len.min().item<int64_t>() < 1 || len.max().item<int64_t>() > S) throw ArgError("prefixLogprobs.suffixLengths must lie in [1, S]");
    if (cand.dim() != 1 || K < 1) throw ArgError("prefixLogprobs.candidates must be a non-empty [K] vector");
    // Every id checked here on the host: the prefix and suffixes (padding too) reach the device
    // before the forwards, where an out-of-range id would be a device-side assert or an internal error.
    const int64_t V = model->config().vocab_size;
    for (const auto& [t, name] : {std::pair<const at::Tensor&, const char*>{pre, "prefixIds"}, {suf, "suffixIds"}, {cand, "candidates"}}) {
      auto mm = at::aminmax(t);
      if (std::get<0>(mm).item<int64_t>() < 0 || std::get<1>(mm).item<int64_t>() >= V)
        throw ArgError(std::string("prefixLogprobs.") + name + " must be token ids in [0, vocab_size)");
    }
    AdapterSel sel = ReadAdapter(o, "adapter", W);
    auto res = std::make_shared<at::Tensor>();
    return StartOnModel(
        env, model, [=]() { *res = steps::PrefixLogprobs(*model, pre, suf, len, cand, sel); },
        [res](Napi::Env env) -> Napi::Value { return TensorToJs(env, *res); }, /*grad=*/false, ModelAccess::kShared);
  });
}

Napi::Value OpsdBackwardJs(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  return Guard(env, [&]() -> Napi::Value {
    const char* W = "opsdBackward";
    auto model = UnwrapModel(info[0], "opsdBackward model");
    auto o = ArgObject(info, 1, "opsdBackward options");
    at::Tensor sid = ReadIds(o, "studentIds", W), tid = ReadIds(o, "teacherIds", W);
    at::Tensor sm = ReadMask(o, "studentMask", sid, "studentIds", W).to(at::kFloat);
    at::Tensor tm = ReadMask(o, "teacherMask", tid, "teacherIds", W).to(at::kFloat);
    const int64_t B = sid.size(0);
    if (tid.size(0) != B) throw ArgError("opsdBackward: student and teacher batches differ");
    auto vec = [&](const char* k) {
      at::Tensor t = GetTensor(o, k, W);
      if (t.dim() != 1 || t.size(0) != B) throw ArgError(std::string(W) + "." + k + " must be [B]");
      return t.to(at::kLong);
    };
    at::Tensor ss = vec("studentStart"), ts = vec("teacherStart"), len = vec("completionLength");
    const int64_t Ls = sid.size(1), Lt = tid.size(1);
    std::vector<int64_t> sidx, tidx;
    // Host tensors read through accessors: one element lookup per token (indexing a tensor per
    // token cost 2.5 µs a token, 82 ms per 32 × 1024-token OPSD step on the main thread, measured
    // on a 2-core CPU machine; the accessors 0.07 ms).
    at::Tensor sidc = sid.to(at::kLong).contiguous(), tidc = tid.to(at::kLong).contiguous();
    auto sa = sidc.accessor<int64_t, 2>(), ta = tidc.accessor<int64_t, 2>();
    auto ssa = ss.accessor<int64_t, 1>(), tsa = ts.accessor<int64_t, 1>(), lena = len.accessor<int64_t, 1>();
    for (int64_t b = 0; b < B; ++b) {
      int64_t s0 = ssa[b], t0 = tsa[b], n = lena[b];
      if (s0 < 1 || t0 < 1 || n < 0 || s0 + n > Ls || t0 + n > Lt)
        throw ArgError("opsdBackward: row " + std::to_string(b) + ": completion [start, start + length) must lie in [1, L)");
      for (int64_t k = 0; k < n; ++k) {
        if (sa[b][s0 + k] != ta[b][t0 + k])
          throw ArgError("opsdBackward: row " + std::to_string(b) + ": student and teacher completion tokens differ at offset " + std::to_string(k));
        sidx.push_back(b * Ls + s0 + k - 1);  // hidden at p-1 predicts the token at p
        tidx.push_back(b * Lt + t0 + k - 1);
      }
    }
    loss::JsdOptions jo;
    jo.beta = GetNumber(o, "beta", 0.5, W);
    jo.temperature = GetNumber(o, "temperature", 1.0, W);
    jo.chunk = GetInt(o, "chunkSize", 0, W);
    jo.normalizer = GetNumber(o, "normalizer", static_cast<double>(std::max<size_t>(1, sidx.size())), W);
    if (!(jo.normalizer > 0)) throw ArgError("opsdBackward.normalizer must be > 0");
    AdapterSel tsel = ReadAdapter(o, "teacher", W, AdapterSel::None);
    at::Tensor si = at::tensor(sidx, at::kLong), ti = at::tensor(tidx, at::kLong);
    auto res = std::make_shared<double>(0);
    const double ntok = static_cast<double>(sidx.size());
    return StartOnModel(
        env, model, [=]() { *res = steps::OpsdBackward(*model, sid, sm, tid, tm, si, ti, tsel, jo); },
        [res, ntok](Napi::Env env) -> Napi::Value {
          auto out = Napi::Object::New(env);
          out.Set("loss", Napi::Number::New(env, *res));
          out.Set("tokens", Napi::Number::New(env, ntok));
          return out;
        },
        /*grad=*/true);
  });
}

Napi::Value GrpoBackwardJs(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  return Guard(env, [&]() -> Napi::Value {
    const char* W = "grpoBackward";
    auto model = UnwrapModel(info[0], "grpoBackward model");
    auto o = ArgObject(info, 1, "grpoBackward options");
    at::Tensor ids = ReadIds(o, "inputIds", W);
    at::Tensor am = ReadMask(o, "attentionMask", ids, "inputIds", W).to(at::kFloat);
    at::Tensor cm = ReadMask(o, "completionMask", ids, "inputIds", W).to(at::kFloat);
    at::Tensor old = ReadPerToken(o, "oldLogprobs", ids, "inputIds", W);
    at::Tensor ref = Has(o, "refLogprobs") ? ReadPerToken(o, "refLogprobs", ids, "inputIds", W) : at::Tensor();
    at::Tensor adv = GetTensor(o, "advantages", W).to(at::kFloat);
    const int64_t B = ids.size(0), L = ids.size(1);
    if (L < 2) throw ArgError("grpoBackward: inputIds need at least 2 positions");
    if (!((adv.dim() == 1 && adv.size(0) == B) || (adv.dim() == 2 && adv.size(0) == B && adv.size(1) == L)))
      throw ArgError("grpoBackward.advantages must be [B] or [B, L]");
    if (cm.select(1, 0).ne(0).any().item<bool>()) throw ArgError("grpoBackward.completionMask must be 0 at position 0 (no token predicts it)");
    auto go = ReadGrpoOptions(o, W);
    if (go.kl_coef != 0 && !ref.defined()) throw ArgError("grpoBackward.refLogprobs is required when klCoef != 0");
    if (go.aggregation == "dr_grpo" && go.max_completion_length <= 0) go.max_completion_length = std::max(1.0, cm.sum(1).max().item<double>());
    auto res = std::make_shared<steps::GrpoStepResult>();
    return StartOnModel(
        env, model, [=]() { *res = steps::GrpoBackward(*model, ids, am, cm, old, ref, adv, go); },
        [res](Napi::Env env) -> Napi::Value {
          auto out = GrpoMetricsToJs(env, res->metrics);
          out.Set("loss", Napi::Number::New(env, res->loss));
          out.Set("logprobs", TensorToJs(env, res->logprobs));
          return out;
        },
        /*grad=*/true);
  });
}

}  // namespace

void RegisterModelSteps(Napi::Env env, Napi::Object exports) {
  exports.Set("sequenceLogprobs", Napi::Function::New(env, SequenceLogprobsJs, "sequenceLogprobs"));
  exports.Set("prefixLogprobs", Napi::Function::New(env, PrefixLogprobsJs, "prefixLogprobs"));
  exports.Set("opsdBackward", Napi::Function::New(env, OpsdBackwardJs, "opsdBackward"));
  exports.Set("grpoBackward", Napi::Function::New(env, GrpoBackwardJs, "grpoBackward"));
}
}  // namespace pg
