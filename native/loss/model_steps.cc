// Model-integrated loss steps (registered from RegisterLoss):
//   sequenceLogprobs(model, {inputIds, attentionMask, completionMask?, temperature, adapter, chunkSize})
//     -> JsTensor [B, L] float32: logp of inputIds[b, t] given the prefix (from hidden[b, t-1]) at
//        softmax(logits / temperature); 0 at t = 0 and where completionMask is 0. No grad.
//   opsdBackward(model, {studentIds, studentMask, teacherIds, teacherMask, studentStart, teacherStart,
//                        completionLength, beta, temperature, normalizer, teacher, chunkSize})
//     -> {loss, tokens}: teacher forward (no grad, adapter `teacher`), student forward (grad, active
//        adapter), fused JSD over the completion tokens, backward into the LoRA grads (accumulating).
//   grpoBackward(model, {inputIds, attentionMask, completionMask, oldLogprobs, refLogprobs?, advantages,
//                        epsLow, epsHigh, betaKl, temperature, aggregation, numSequences, numTokens,
//                        maxCompletionLength, chunkSize})
//     -> {loss, meanKl, clipFraction, maskCount, logprobs [B, L]}: fused GRPO, grads accumulate.
//   prefixLogprobs(model, {prefixIds [1, P], suffixIds [n, S] (right-padded), suffixLengths [n],
//                          candidates [K], adapter})
//     -> JsTensor [n, K] float32: log p(candidate | prefix + suffix_i[:len_i]) at each row's last
//        real position (log-softmax over the full vocabulary). The prefix is prefilled once into a
//        KV cache that every suffix row then extends — the local judge's shared question + plan.
// Every step holds model->mutex() on a worker thread with the model's device set.
#include <memory>

#include "loss/common.h"
#include "loss/grpo.h"
#include "loss/jsd.h"
#include "model/binding.h"
#include "napi/util.h"

namespace pg {
Napi::Object GrpoMetricsToJs(Napi::Env env, const loss::GrpoMetrics& m);
loss::GrpoOptions ReadGrpoOptionsPublic(const Napi::Object& o, const char* W);

namespace {

AdapterSel ParseAdapter(const std::string& s) {
  AdapterSel a;
  if (s == "active") a.kind = AdapterSel::Active;
  else if (s == "none") a.kind = AdapterSel::None;
  else {
    if (s.empty()) throw ArgError("adapter must be 'active', 'none' or a snapshot name");
    a.kind = AdapterSel::Snapshot;
    a.name = s;
  }
  return a;
}

at::Tensor Ids2d(const Napi::Object& o, const char* key, const char* W) {
  at::Tensor t = GetTensor(o, key, W);
  if (t.dim() != 2) throw ArgError(std::string(W) + "." + key + " must be [B, L]");
  if (t.scalar_type() != at::kInt && t.scalar_type() != at::kLong) throw ArgError(std::string(W) + "." + key + " must be an Int32Array or BigInt64Array tensor");
  return t.to(at::kLong);
}

at::Tensor Mask2d(const Napi::Object& o, const char* key, const at::Tensor& like, const char* W) {
  at::Tensor t = GetTensor(o, key, W);
  if (t.sizes() != like.sizes()) throw ArgError(std::string(W) + "." + key + " must have the shape of the ids");
  return t.to(at::kFloat);
}

// Flat row indices (into [B * (L-1)] of the shifted view) of positions whose token is scored.
at::Tensor ShiftedSelection(const at::Tensor& cmask) {
  return cmask.narrow(1, 1, cmask.size(1) - 1).reshape({-1}).ne(0).nonzero().squeeze(1);
}

// Runs `run` on a worker thread with the model's device set, holding the model's lock, after
// checking that the model was not disposed meanwhile (InputError); `grad` as Worker::Start.
Napi::Promise StartOnModel(Napi::Env env, const std::shared_ptr<Qwen3Model>& model, std::function<void()> run,
                           Worker::Done done, bool grad) {
  return Worker::Start(
      env,
      [model, run = std::move(run)]() {
        std::lock_guard<std::mutex> lk(model->mutex());
        if (model->disposed()) throw InputError("model was disposed");
        run();
      },
      std::move(done), grad, model->device());
}

Napi::Value SequenceLogprobsJs(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  return Guard(env, [&]() -> Napi::Value {
    const char* W = "sequenceLogprobs";
    auto model = UnwrapModel(info[0], "sequenceLogprobs model");
    auto o = ArgObject(info, 1, "sequenceLogprobs options");
    at::Tensor ids = Ids2d(o, "inputIds", W);
    at::Tensor am = Mask2d(o, "attentionMask", ids, W);
    at::Tensor cm = Has(o, "completionMask") ? Mask2d(o, "completionMask", ids, W) : am;
    if (ids.size(1) < 2) throw ArgError("sequenceLogprobs: inputIds need at least 2 positions");
    double temp = GetNumber(o, "temperature", 1.0, W);
    if (!(temp > 0)) throw ArgError("sequenceLogprobs.temperature must be > 0");
    AdapterSel sel = ParseAdapter(GetString(o, "adapter", std::string("active"), W));
    int64_t chunk = GetInt(o, "chunkSize", 0, W);
    auto res = std::make_shared<at::Tensor>();
    return StartOnModel(
        env, model,
        [=]() {
          at::NoGradGuard ng;
          auto dev = model->device();
          at::Tensor id = ids.to(dev), m = am.to(dev), c = cm.to(dev);
          const int64_t B = id.size(0), L = id.size(1);
          at::Tensor h = model->Forward(id, m, std::nullopt, sel);
          const int64_t H = h.size(-1);
          at::Tensor idx = ShiftedSelection(c);
          at::Tensor hs = h.narrow(1, 0, L - 1).reshape({-1, H}).index_select(0, idx);
          at::Tensor tk = id.narrow(1, 1, L - 1).reshape({-1}).index_select(0, idx);
          at::Tensor lp = loss::SelectedLogprobs(hs, model->LmHeadWeight(), tk, temp, chunk);
          at::Tensor out = at::zeros({B, L}, lp.options());
          at::Tensor flat = at::zeros({B * (L - 1)}, lp.options()).index_copy(0, idx, lp).reshape({B, L - 1});
          out.narrow(1, 1, L - 1).copy_(flat);
          *res = out.to(at::kCPU);
        },
        [res](Napi::Env env) -> Napi::Value { return TensorToJs(env, *res); }, false);
  });
}

Napi::Value PrefixLogprobsJs(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  return Guard(env, [&]() -> Napi::Value {
    const char* W = "prefixLogprobs";
    auto model = UnwrapModel(info[0], "prefixLogprobs model");
    auto o = ArgObject(info, 1, "prefixLogprobs options");
    at::Tensor pre = Ids2d(o, "prefixIds", W);
    at::Tensor suf = Ids2d(o, "suffixIds", W);
    at::Tensor len = GetTensor(o, "suffixLengths", W).to(at::kLong);
    at::Tensor cand = GetTensor(o, "candidates", W).to(at::kLong);
    const int64_t P = pre.size(1), n = suf.size(0), S = suf.size(1), K = cand.numel();
    if (pre.size(0) != 1 || P < 1) throw ArgError("prefixLogprobs.prefixIds must be [1, P] with P >= 1");
    if (n < 1 || S < 1) throw ArgError("prefixLogprobs.suffixIds must be [n, S] with n, S >= 1");
    if (len.dim() != 1 || len.size(0) != n) throw ArgError("prefixLogprobs.suffixLengths must be [n]");
    if (len.min().item<int64_t>() < 1 || len.max().item<int64_t>() > S) throw ArgError("prefixLogprobs.suffixLengths must lie in [1, S]");
    if (cand.dim() != 1 || K < 1) throw ArgError("prefixLogprobs.candidates must be a non-empty [K] vector");
    const int64_t V = model->config().vocab_size;
    if (cand.min().item<int64_t>() < 0 || cand.max().item<int64_t>() >= V) throw ArgError("prefixLogprobs.candidates must be token ids in [0, vocab_size)");
    AdapterSel sel = ParseAdapter(GetString(o, "adapter", std::string("active"), W));
    auto res = std::make_shared<at::Tensor>();
    return StartOnModel(
        env, model,
        [=]() {
          at::NoGradGuard ng;
          auto dev = model->device();
          const int64_t cap = P + S;
          // 1) the shared prefix, once
          KVCache one = model->NewCache(1, cap);
          model->Forward(pre.to(dev), at::ones({1, P}, at::TensorOptions().dtype(at::kLong).device(dev)), std::nullopt, sel, &one);
          // 2) its KV repeated for every suffix row
          KVCache cache = model->NewCache(n, cap);
          for (size_t l = 0; l < cache.k.size(); ++l) {
            cache.k[l].narrow(2, 0, P).copy_(one.k[l].narrow(2, 0, P).expand({n, -1, -1, -1}));
            cache.v[l].narrow(2, 0, P).copy_(one.v[l].narrow(2, 0, P).expand({n, -1, -1, -1}));
          }
          cache.len = P;
          one = KVCache();
          // 3) the suffixes, right-padded, attending to the prefix and their own real tokens
          at::Tensor lens = len.to(dev);
          at::Tensor mask = at::ones({n, cap}, at::TensorOptions().dtype(at::kLong).device(dev));
          mask.narrow(1, P, S).copy_(at::arange(S, mask.options()).unsqueeze(0).lt(lens.unsqueeze(1)).to(at::kLong));
          at::Tensor h = model->Forward(suf.to(dev), mask, std::nullopt, sel, &cache);  // [n, S, H]
          at::Tensor hs = h.gather(1, (lens - 1).view({n, 1, 1}).expand({n, 1, h.size(2)})).squeeze(1);  // [n, H]
          // fp32 logits with fp32 accumulation, as sequenceLogprobs computes them
          at::Tensor lp = at::log_softmax(loss::ChunkLogits(hs, loss::PrepareWeight(model->LmHeadWeight(), hs)), -1);
          *res = lp.index_select(1, cand.to(dev)).to(at::kCPU, at::kFloat).contiguous();
        },
        [res](Napi::Env env) -> Napi::Value { return TensorToJs(env, *res); }, false);
  });
}

Napi::Value OpsdBackwardJs(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  return Guard(env, [&]() -> Napi::Value {
    const char* W = "opsdBackward";
    auto model = UnwrapModel(info[0], "opsdBackward model");
    auto o = ArgObject(info, 1, "opsdBackward options");
    at::Tensor sid = Ids2d(o, "studentIds", W), tid = Ids2d(o, "teacherIds", W);
    at::Tensor sm = Mask2d(o, "studentMask", sid, W), tm = Mask2d(o, "teacherMask", tid, W);
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
    for (int64_t b = 0; b < B; ++b) {
      int64_t s0 = ss[b].item<int64_t>(), t0 = ts[b].item<int64_t>(), n = len[b].item<int64_t>();
      if (s0 < 1 || t0 < 1 || n < 0 || s0 + n > Ls || t0 + n > Lt)
        throw ArgError("opsdBackward: row " + std::to_string(b) + ": completion [start, start + length) must lie in [1, L)");
      for (int64_t k = 0; k < n; ++k) {
        if (sid[b][s0 + k].item<int64_t>() != tid[b][t0 + k].item<int64_t>())
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
    AdapterSel tsel = ParseAdapter(GetString(o, "teacher", std::string("none"), W));
    at::Tensor si = at::tensor(sidx, at::kLong), ti = at::tensor(tidx, at::kLong);
    auto res = std::make_shared<double>(0);
    const double ntok = static_cast<double>(sidx.size());
    return StartOnModel(
        env, model,
        [=]() {
          if (!model->HasLora()) throw InputError("opsdBackward needs a LoRA adapter");
          auto dev = model->device();
          at::Tensor th;
          {
            at::NoGradGuard ng;
            at::Tensor h = model->Forward(tid.to(dev), tm.to(dev), std::nullopt, tsel);
            th = h.reshape({-1, h.size(-1)}).index_select(0, ti.to(dev));
          }
          at::Tensor h = model->Forward(sid.to(dev), sm.to(dev), std::nullopt, AdapterSel{});
          if (!h.requires_grad()) throw InputError("opsdBackward: the active adapter is disabled (no trainable parameters)");
          at::Tensor hs = h.reshape({-1, h.size(-1)}).index_select(0, si.to(dev));
          at::Tensor l = loss::JsdFused(hs, th, model->LmHeadWeight(), at::ones({hs.size(0)}, at::TensorOptions().device(dev)), jo);
          l.backward();
          *res = l.item<double>();
        },
        [res, ntok](Napi::Env env) -> Napi::Value {
          auto out = Napi::Object::New(env);
          out.Set("loss", Napi::Number::New(env, *res));
          out.Set("tokens", Napi::Number::New(env, ntok));
          return out;
        },
        true);
  });
}

Napi::Value GrpoBackwardJs(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  return Guard(env, [&]() -> Napi::Value {
    const char* W = "grpoBackward";
    auto model = UnwrapModel(info[0], "grpoBackward model");
    auto o = ArgObject(info, 1, "grpoBackward options");
    at::Tensor ids = Ids2d(o, "inputIds", W);
    at::Tensor am = Mask2d(o, "attentionMask", ids, W);
    at::Tensor cm = Mask2d(o, "completionMask", ids, W);
    at::Tensor old = Mask2d(o, "oldLogprobs", ids, W);
    at::Tensor ref = Has(o, "refLogprobs") ? Mask2d(o, "refLogprobs", ids, W) : at::Tensor();
    at::Tensor adv = GetTensor(o, "advantages", W).to(at::kFloat);
    const int64_t B = ids.size(0), L = ids.size(1);
    if (L < 2) throw ArgError("grpoBackward: inputIds need at least 2 positions");
    if (!((adv.dim() == 1 && adv.size(0) == B) || (adv.dim() == 2 && adv.size(0) == B && adv.size(1) == L)))
      throw ArgError("grpoBackward.advantages must be [B] or [B, L]");
    if (cm.select(1, 0).ne(0).any().item<bool>()) throw ArgError("grpoBackward.completionMask must be 0 at position 0 (no token predicts it)");
    auto go = ReadGrpoOptionsPublic(o, W);
    if (go.beta_kl != 0 && !ref.defined()) throw ArgError("grpoBackward.refLogprobs is required when betaKl != 0");
    if (go.aggregation == "dr_grpo" && go.max_completion_length <= 0)
      go.max_completion_length = std::max(1.0, cm.sum(1).max().item<double>());
    struct R {
      double loss = 0;
      loss::GrpoMetrics m;
      at::Tensor logp;
    };
    auto res = std::make_shared<R>();
    return StartOnModel(
        env, model,
        [=]() {
          if (!model->HasLora()) throw InputError("grpoBackward needs a LoRA adapter");
          auto dev = model->device();
          at::Tensor id = ids.to(dev);
          at::Tensor h = model->Forward(id, am.to(dev), std::nullopt, AdapterSel{});
          if (!h.requires_grad()) throw InputError("grpoBackward: the active adapter is disabled (no trainable parameters)");
          auto sh = [&](const at::Tensor& t) { return t.defined() ? t.to(dev).narrow(1, 1, L - 1) : t; };
          at::Tensor a = adv.dim() == 2 ? sh(adv) : adv.to(dev);
          at::Tensor l = loss::GrpoFused(h.narrow(1, 0, L - 1), model->LmHeadWeight(), sh(id), sh(old), sh(ref), a, sh(cm), go, &res->m);
          l.backward();
          res->loss = l.item<double>();
          at::Tensor lp = at::zeros({B, L}, at::kFloat);
          lp.narrow(1, 1, L - 1).copy_(res->m.logp.reshape({B, L - 1}).to(at::kCPU, at::kFloat));
          res->logp = lp;
          res->m.logp = at::Tensor();
        },
        [res](Napi::Env env) -> Napi::Value {
          auto out = GrpoMetricsToJs(env, res->m);
          out.Set("loss", Napi::Number::New(env, res->loss));
          out.Set("logprobs", TensorToJs(env, res->logp));
          return out;
        },
        true);
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
