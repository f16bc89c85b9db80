#include "model/weights.h"

#include <algorithm>
#include <cstring>

#include "core/dtype.h"
#include "core/errors.h"
#include "io/safetensors.h"

namespace pg {

namespace {

/// One expected tensor: its shape and, per dimension, the config.json field expression behind it
/// (e.g. "num_attention_heads*head_dim"), named when a shape differs.
struct Want {
  std::vector<int64_t> shape;
  std::vector<std::string> dims;
};
using Expected = std::map<std::string, Want>;

const std::string kQ = "num_attention_heads*head_dim", kKV = "num_key_value_heads*head_dim";

/// Projection `p` (lora/lora.h kProjections) of config c: its weight [out, in] and its bias switch.
struct ProjectionShape {
  int64_t out, in;
  std::string out_expr, in_expr;
  bool bias;
};
ProjectionShape ShapeOf(const DecoderConfig& c, const std::string& p) {
  const int64_t H = c.hidden_size, I = c.intermediate_size;
  const int64_t qd = c.num_attention_heads * c.head_dim, kvd = c.num_key_value_heads * c.head_dim;
  if (p == "q_proj") return {qd, H, kQ, "hidden_size", c.qkv_bias};
  if (p == "k_proj" || p == "v_proj") return {kvd, H, kKV, "hidden_size", c.qkv_bias};
  if (p == "o_proj") return {H, qd, "hidden_size", kQ, c.o_bias};
  if (p == "gate_proj" || p == "up_proj") return {I, H, "intermediate_size", "hidden_size", c.mlp_bias};
  if (p == "down_proj") return {H, I, "hidden_size", "intermediate_size", c.mlp_bias};
  throw InputError("internal: unknown projection " + p);
}

/// The tensors config c calls for: embeddings, final norm, lm_head unless tied; per layer the two
/// norms, the seven projections (and their biases where the switches say so), q/k norms.
Expected ExpectedTensors(const DecoderConfig& c) {
  const int64_t H = c.hidden_size, V = c.vocab_size;
  Expected expect{{"model.embed_tokens.weight", {{V, H}, {"vocab_size", "hidden_size"}}}, {"model.norm.weight", {{H}, {"hidden_size"}}}};
  if (!c.tie_word_embeddings) expect["lm_head.weight"] = {{V, H}, {"vocab_size", "hidden_size"}};
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    expect[p + "input_layernorm.weight"] = {{H}, {"hidden_size"}};
    expect[p + "post_attention_layernorm.weight"] = {{H}, {"hidden_size"}};
    for (const LoraProjection& pr : kProjections) {
      const ProjectionShape s = ShapeOf(c, pr.name);
      const std::string stem = p + pr.parent + "." + pr.name;
      expect[stem + ".weight"] = {{s.out, s.in}, {s.out_expr, s.in_expr}};
      if (s.bias) expect[stem + ".bias"] = {{s.out}, {s.out_expr}};
    }
    if (c.qk_norm) {
      expect[p + "self_attn.q_norm.weight"] = {{c.head_dim}, {"head_dim"}};
      expect[p + "self_attn.k_norm.weight"] = {{c.head_dim}, {"head_dim"}};
    }
  }
  return expect;
}

std::string ShapeText(const std::vector<int64_t>& s) {
  std::string o = "[";
  for (size_t i = 0; i < s.size(); ++i) o += (i ? ", " : "") + std::to_string(s[i]);
  return o + "]";
}

bool EndsWith(const std::string& n, const char* suf) {
  const size_t k = std::strlen(suf);
  return n.size() >= k && n.compare(n.size() - k, k, suf) == 0;
}

/// Which rule of the architecture's row makes tensor `n` unexpected (a bias / q_norm the config
/// does not enable), as " (...)", or "".
std::string WhyUnexpected(const DecoderConfig& c, const std::string& n) {
  const ArchitectureSpec& a = *c.spec;
  if (EndsWith(n, "q_norm.weight") || EndsWith(n, "k_norm.weight")) return " (" + c.architecture + " has no q/k norm)";
  if (!EndsWith(n, ".bias")) return "";
  const bool attn = n.find(".self_attn.") != std::string::npos, mlp = n.find(".mlp.") != std::string::npos;
  if (!attn && !mlp) return "";
  const ArchitectureSpec::Bias& rule = mlp ? a.mlp_bias : n.find(".o_proj.") != std::string::npos ? a.o_bias : a.qkv_bias;
  if (rule.kind == ArchitectureSpec::Bias::Field) return " (config.json " + std::string(rule.field) + " is false)";
  if (mlp) return " (" + c.architecture + " has no MLP bias)";
  const size_t dot = n.rfind(".bias"), start = n.rfind('.', dot - 1) + 1;
  return " (" + c.architecture + " has no " + n.substr(start, dot - start) + " bias)";
}

/// Every checkpoint tensor is expected (or a tied lm_head of the embedding's shape, or a rotary
/// inv_freq buffer).
void RefuseUnexpected(const st::Checkpoint& ck, const Expected& expect, const DecoderConfig& c) {
  const int64_t V = c.vocab_size, H = c.hidden_size;
  for (const auto& kv : ck.entries()) {
    const std::string& n = kv.first;
    if (expect.count(n)) continue;
    if (c.tie_word_embeddings && n == "lm_head.weight") {
      if (kv.second.shape != std::vector<int64_t>{V, H})
        throw InputError(ck.FileOf(n).path() + ": tensor 'lm_head.weight' has shape " + ShapeText(kv.second.shape) + ", expected " + ShapeText({V, H}));
      continue;  // tied: the embedding is used, as in transformers
    }
    if (EndsWith(n, "rotary_emb.inv_freq")) continue;
    throw InputError(ck.FileOf(n).path() + ": unexpected tensor '" + n + "' (not part of " + c.architecture + " with this config" + WhyUnexpected(c, n) + ")");
  }
}

/// Every expected tensor is present with its shape; a mismatch names the config.json fields of
/// the differing dimensions (and whether they were absent).
void CheckShapes(const st::Checkpoint& ck, const Expected& expect, const DecoderConfig& c, const std::string& cfg_path) {
  const int64_t H = c.hidden_size, V = c.vocab_size, I = c.intermediate_size, hd = c.head_dim;
  const int64_t nh = c.num_attention_heads, nkv = c.num_key_value_heads;
  auto shape_str = ShapeText;
  auto defaulted = [&](const std::string& field) { return std::find(c.defaulted.begin(), c.defaulted.end(), field) != c.defaulted.end(); };
  auto field_value = [&](const std::string& f) -> int64_t {
    if (f == "vocab_size") return V;
    if (f == "hidden_size") return H;
    if (f == "intermediate_size") return I;
    if (f == "head_dim") return hd;
    if (f == "num_attention_heads") return nh;
    if (f == "num_key_value_heads") return nkv;
    return -1;
  };
  for (const auto& kv : expect) {
    auto it = ck.entries().find(kv.first);
    if (it == ck.entries().end()) throw InputError(ck.source() + ": missing tensor '" + kv.first + "' (" + c.architecture + " with this config.json)");
    const std::vector<int64_t>& want = kv.second.shape;
    if (it->second.shape != want) {
      // Name the config.json fields of the dimensions that differ (and whether they were absent).
      std::string why;
      for (size_t d = 0; d < want.size(); ++d) {
        if (it->second.shape.size() == want.size() && it->second.shape[d] == want[d]) continue;
        std::string expr = kv.second.dims[d], vals;
        size_t s0 = 0;
        while (s0 <= expr.size()) {
          size_t s1 = expr.find('*', s0);
          if (s1 == std::string::npos) s1 = expr.size();
          const std::string f = expr.substr(s0, s1 - s0);
          vals += (vals.empty() ? "" : ", ") + f + " = " + std::to_string(field_value(f)) +
                  (defaulted(f) ? " (absent from config.json: the " + std::string(c.spec->config_class) + " default)" : "");
          s0 = s1 + 1;
        }
        why += (why.empty() ? "" : "; ") + std::string("dim ") + std::to_string(d) + " is " + expr + " (" + vals + ")";
      }
      throw InputError(ck.FileOf(kv.first).path() + ": tensor '" + kv.first + "' has shape " + shape_str(it->second.shape) + ", expected " + shape_str(want) +
                       " from " + cfg_path + ": " + why);
    }
  }
}

/// Reads the expected tensors onto the device in the model dtype (queuing each one's finite
/// check), fusing [q; k; v] and [gate; up] with the per-module entries as row views.
DecoderWeights ReadWeights(const st::Checkpoint& ck, const Expected& expect, const DecoderConfig& c, at::Device device, at::ScalarType dtype,
                           FiniteCheck& finite) {
  const int64_t H = c.hidden_size, I = c.intermediate_size;
  const int64_t qd = c.num_attention_heads * c.head_dim, kvd = c.num_key_value_heads * c.head_dim;
  DecoderWeights out;
  auto read = [&](const std::string& n) { return ck.Read(n).to(device, dtype).contiguous(); };
  // The finite check runs on the tensor as the model keeps it (a row view of a fused tensor: no
  // second copy held for the check).
  auto keep = [&](const std::string& n, const at::Tensor& t) {
    finite.Add(ck.FileOf(n).path(), n, t);
    out.by_name[n] = t;
  };
  auto is_fused = [](const std::string& n) {
    for (const char* k : {".self_attn.q_proj.", ".self_attn.k_proj.", ".self_attn.v_proj.", ".mlp.gate_proj.", ".mlp.up_proj."})
      if (n.find(k) != std::string::npos) return true;
    return false;
  };
  for (const auto& kv : expect) {
    if (is_fused(kv.first)) continue;  // fused below
    keep(kv.first, read(kv.first));
  }
  const auto opt = at::TensorOptions().dtype(dtype).device(device);
  // Rows [a; b; ...] of one fused tensor from per-module tensors `names` (sizes `rows`); the
  // per-module entries of by_name become views of it.
  auto fuse = [&](const std::vector<std::string>& names, const std::vector<int64_t>& rows, const std::vector<int64_t>& tail) {
    int64_t total = 0;
    for (int64_t r : rows) total += r;
    std::vector<int64_t> shape{total};
    shape.insert(shape.end(), tail.begin(), tail.end());
    at::Tensor f = at::empty(shape, opt);
    int64_t off = 0;
    for (size_t i = 0; i < names.size(); ++i) {
      f.narrow(0, off, rows[i]).copy_(read(names[i]));
      keep(names[i], f.narrow(0, off, rows[i]));
      off += rows[i];
    }
    return f;
  };
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    DecoderLayerWeights lw;
    for (int k = 0; k < kNumProjections; ++k) lw.stem[k] = p + kProjections[k].parent + "." + kProjections[k].name;
    const std::string* st = lw.stem;  // q, k, v, o, gate, up, down
    // Fused projections: rows [q; k; v] and [gate; up] (one matmul each); the per-module tensors are row views.
    lw.qkv = fuse({st[0] + ".weight", st[1] + ".weight", st[2] + ".weight"}, {qd, kvd, kvd}, {H});
    lw.gate_up = fuse({st[4] + ".weight", st[5] + ".weight"}, {I, I}, {H});
    if (c.qkv_bias) lw.qkv_b = fuse({st[0] + ".bias", st[1] + ".bias", st[2] + ".bias"}, {qd, kvd, kvd}, {});
    if (c.mlp_bias) {
      lw.gate_up_b = fuse({st[4] + ".bias", st[5] + ".bias"}, {I, I}, {});
      lw.down_b = out.by_name.at(st[6] + ".bias");
    }
    if (c.o_bias) lw.o_b = out.by_name.at(st[3] + ".bias");
    lw.in_norm = out.by_name.at(p + "input_layernorm.weight");
    lw.post_norm = out.by_name.at(p + "post_attention_layernorm.weight");
    lw.o = out.by_name.at(st[3] + ".weight");
    if (c.qk_norm) {
      lw.q_norm = out.by_name.at(p + "self_attn.q_norm.weight");
      lw.k_norm = out.by_name.at(p + "self_attn.k_norm.weight");
    }
    lw.down = out.by_name.at(st[6] + ".weight");
    out.layers.push_back(std::move(lw));
  }
  return out;
}

}  // namespace

DecoderWeights LoadDecoderWeights(const std::string& dir, const std::string& cfg_path, const DecoderConfig& c, at::Device device, at::ScalarType dtype,
                                  NonFiniteWeights& non_finite) {
  const Expected expect = ExpectedTensors(c);
  st::Checkpoint ck = st::Checkpoint::Open(dir);
  RefuseUnexpected(ck, expect, c);
  CheckShapes(ck, expect, c, cfg_path);
  at::NoGradGuard ng;
  FiniteCheck finite;  // every tensor as it sits on the device in the model dtype (io/finite.h)
  DecoderWeights w = ReadWeights(ck, expect, c, device, dtype, finite);
  finite.Finish(non_finite, std::string("model (") + DtypeName(dtype) + " on " + device.str() + ")",
                "Model.load(dir, { allowNonFinite: true }) or --allow-non-finite-weights loads it with a warning");
  return w;
}

}  // namespace pg
