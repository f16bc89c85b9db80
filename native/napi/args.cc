#include "napi/args.h"

#include <cmath>
#include <random>

#include "napi/util.h"

namespace pg {

AdapterSel ReadAdapter(const Napi::Object& o, const char* key, const std::string& what, AdapterSel::Kind dflt) {
  AdapterSel sel;
  sel.kind = dflt;
  if (!Has(o, key)) return sel;
  Napi::Value v = o.Get(key);
  std::string s = v.IsString() ? v.As<Napi::String>().Utf8Value() : std::string();
  if (s.empty()) throw ArgError(what + "." + key + " must be 'active', 'none' or a snapshot name (a non-empty string)");
  if (s == "active")
    sel.kind = AdapterSel::Active;
  else if (s == "none")
    sel.kind = AdapterSel::None;
  else {
    sel.kind = AdapterSel::Snapshot;
    sel.name = s;
  }
  return sel;
}

at::Tensor ReadIds(const Napi::Object& o, const char* key, const std::string& what) {
  at::Tensor ids = GetTensor(o, key, what.c_str());
  const std::string name = what + "." + key;
  if (ids.dim() != 2 || ids.size(0) < 1 || ids.size(1) < 1) throw ArgError(name + " must have shape [B, T] with B, T >= 1");
  if (ids.scalar_type() != at::kInt && ids.scalar_type() != at::kLong) throw ArgError(name + ".data must be an Int32Array or BigInt64Array");
  return ids.to(at::kLong);
}

at::Tensor ReadMask(const Napi::Object& o, const char* key, const at::Tensor& ids, const char* ids_key, const std::string& what, bool optional) {
  if (optional && !Has(o, key)) return at::ones_like(ids, at::kLong);
  at::Tensor m = GetTensor(o, key, what.c_str());
  const std::string name = what + "." + key;
  if (m.sizes() != ids.sizes()) throw ArgError(name + " must have the shape of " + ids_key);
  if (m.numel() > 0 && (m.ne(0) & m.ne(1)).any().item<bool>()) throw ArgError(name + " must hold only 0 and 1");
  return m.to(at::kLong);
}

at::Tensor ReadPerToken(const Napi::Object& o, const char* key, const at::Tensor& ids, const char* ids_key, const std::string& what) {
  at::Tensor t = GetTensor(o, key, what.c_str());
  if (t.sizes() != ids.sizes()) throw ArgError(what + "." + key + " must have the shape of " + ids_key);
  return t.to(at::kFloat);
}

std::vector<int64_t> ReadTokenList(const Napi::Value& v, const std::string& what) {
  std::vector<int64_t> out;
  if (v.IsTypedArray()) {
    auto ta = v.As<Napi::TypedArray>();
    if (ta.TypedArrayType() == napi_int32_array) {
      auto a = v.As<Napi::Int32Array>();
      out.assign(a.Data(), a.Data() + a.ElementLength());
      return out;
    }
    if (ta.TypedArrayType() == napi_uint32_array) {
      auto a = v.As<Napi::Uint32Array>();
      out.assign(a.Data(), a.Data() + a.ElementLength());
      return out;
    }
    throw ArgError(what + " must be an array of integers, Int32Array or Uint32Array");
  }
  if (!v.IsArray()) throw ArgError(what + " must be an array of token ids");
  auto a = v.As<Napi::Array>();
  out.reserve(a.Length());
  for (uint32_t i = 0; i < a.Length(); ++i) {
    Napi::Value e = a.Get(i);
    double d = e.IsNumber() ? e.As<Napi::Number>().DoubleValue() : NAN;
    if (!std::isfinite(d) || d != std::floor(d)) throw ArgError(what + "[" + std::to_string(i) + "] must be an integer token id");
    out.push_back(static_cast<int64_t>(d));
  }
  return out;
}

SamplingOptions ReadSampling(const Napi::Object& o, const std::string& what, const SamplingOptions& dflt) {
  SamplingOptions s;
  s.temperature = GetNumber(o, "temperature", dflt.temperature, what.c_str());
  s.top_k = GetInt(o, "topK", dflt.top_k, what.c_str());
  s.top_p = GetNumber(o, "topP", dflt.top_p, what.c_str());
  s.min_p = GetNumber(o, "minP", dflt.min_p, what.c_str());
  ValidateSampling(s, what);
  return s;
}

uint64_t ReadSeed(const Napi::Object& o, const std::string& what) {
  if (!Has(o, "seed")) {
    std::random_device rd;
    return ((static_cast<uint64_t>(rd()) << 32) ^ rd()) & ((1ULL << 48) - 1);
  }
  int64_t s = GetInt(o, "seed", std::nullopt, what.c_str());
  if (s < 0) throw ArgError(what + ".seed must be an integer >= 0");
  return static_cast<uint64_t>(s);
}

}  // namespace pg
