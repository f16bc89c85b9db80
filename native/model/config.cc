#include "model/config.h"

#include <algorithm>
#include <cmath>

#include "core/errors.h"
#include "io/json.h"

namespace pg {

namespace {

std::string NumText(double v) {
  char b[64];
  std::snprintf(b, sizeof b, "%.17g", v);
  return b;
}

/// Reads the fields of one config.json (`root`, from `path`) into `c`: typed getters that name
/// the field in errors and record the fields that took the architecture's default. Each Read*
/// step fills one group of DecoderConfig fields.
struct ConfigReader {
  const json::Value& root;
  const std::string& path;
  DecoderConfig& c;

  /// A key that is absent or null takes the class default (transformers: the dataclass default,
  /// and None -> derived for num_key_value_heads / head_dim).
  static bool Present(const json::Value& o, const char* key) {
    const json::Value* v = o.Find(key);
    return v && !v->IsNull();
  }
  int64_t Int(const char* key, int64_t dflt) {
    const json::Value* v = root.Find(key);
    if (!v || v->IsNull()) {
      c.defaulted.push_back(key);
      return dflt;
    }
    if (!v->IsNumber() || !v->is_int) throw InputError(path + ": field '" + key + "' must be an integer");
    return v->i;
  }
  double Num(const json::Value& o, const std::string& where, const char* key, double dflt) const {
    const json::Value* v = o.Find(key);
    if (!v || v->IsNull()) return dflt;
    if (!v->IsNumber()) throw InputError(path + ": field '" + where + key + "' must be a number");
    return v->num;
  }
  bool Bool(const char* key, bool dflt) const {
    const json::Value* v = root.Find(key);
    if (!v || v->IsNull()) return dflt;
    if (!v->IsBool()) throw InputError(path + ": field '" + std::string(key) + "' must be true or false");
    return v->b;
  }

  /// The first `architectures` entry with a registered row (model/architecture.h).
  void ReadArchitecture() {
    const json::Value* arch = root.Find("architectures");
    std::string found;
    if (arch && arch->IsArray())
      for (const auto& a : arch->arr)
        if (a.IsString()) {
          found += (found.empty() ? "" : ", ") + a.str;
          if (!c.spec) c.spec = FindArchitecture(a.str);
        }
    if (!c.spec) throw InputError(path + ": unsupported architectures [" + found + "] (this addon runs " + ArchitectureNames() + ")");
    c.architecture = c.spec->name;
  }

  /// Sizes (vocab, hidden, intermediate, layers, heads, kv heads, head_dim, context), norm eps,
  /// tied embeddings and the informational dtype.
  void ReadDimensions() {
    const ArchitectureSpec::Defaults& d = c.spec->defaults;
    c.vocab_size = Int("vocab_size", d.vocab);
    c.hidden_size = Int("hidden_size", d.hidden);
    c.intermediate_size = Int("intermediate_size", d.intermediate);
    c.num_hidden_layers = Int("num_hidden_layers", d.layers);
    c.num_attention_heads = Int("num_attention_heads", d.heads);
    c.num_key_value_heads = Int("num_key_value_heads", d.kv_heads ? d.kv_heads : c.num_attention_heads);
    // transformers: Qwen3Config.head_dim = 128; LlamaConfig: None -> hidden // heads; Qwen2Config has
    // no head_dim (getattr(config, "head_dim", None) or hidden // heads, a key in the file still counts).
    c.max_position_embeddings = Int("max_position_embeddings", d.max_pos);
    for (auto [k, v] : {std::pair<const char*, int64_t>{"vocab_size", c.vocab_size},
                        {"hidden_size", c.hidden_size},
                        {"intermediate_size", c.intermediate_size},
                        {"num_hidden_layers", c.num_hidden_layers},
                        {"num_attention_heads", c.num_attention_heads},
                        {"num_key_value_heads", c.num_key_value_heads},
                        {"max_position_embeddings", c.max_position_embeddings}})
      if (v <= 0) throw InputError(path + ": field '" + std::string(k) + "' must be positive");
    if (c.num_attention_heads % c.num_key_value_heads != 0)
      throw InputError(path + ": num_attention_heads (" + std::to_string(c.num_attention_heads) + ") must be a multiple of num_key_value_heads (" +
                       std::to_string(c.num_key_value_heads) + ")");
    c.head_dim = Int("head_dim", d.head_dim ? d.head_dim : c.hidden_size / c.num_attention_heads);
    if (c.head_dim <= 0 || c.head_dim % 2) throw InputError(path + ": head_dim must be a positive even integer (got " + std::to_string(c.head_dim) + ")");
    c.rms_norm_eps = Num(root, "", "rms_norm_eps", 1e-6);
    if (!(c.rms_norm_eps > 0)) throw InputError(path + ": field 'rms_norm_eps' must be positive");
    c.tie_word_embeddings = Bool("tie_word_embeddings", false);
    // transformers 5: `dtype` wins, the legacy `torch_dtype` applies when dtype is absent or null.
    if (const json::Value* t = root.Find("torch_dtype"); t && t->IsString()) c.torch_dtype = t->str;
    if (const json::Value* t = root.Find("dtype"); t && t->IsString()) c.torch_dtype = t->str;
  }

  bool ResolveBias(const ArchitectureSpec::Bias& b) const {
    switch (b.kind) {
      case ArchitectureSpec::Bias::Never:
        return false;
      case ArchitectureSpec::Bias::Always:
        return true;
      case ArchitectureSpec::Bias::Field:
        return Bool(b.field, false);
    }
    return false;
  }

  /// The decoder's switches from the architecture's row (q/k norm, biases and their fields).
  void ReadSwitches() {
    c.qk_norm = c.spec->qk_norm;
    c.qkv_bias = ResolveBias(c.spec->qkv_bias);
    c.o_bias = ResolveBias(c.spec->o_bias);
    c.mlp_bias = ResolveBias(c.spec->mlp_bias);
  }

  /// Sliding-window layers (Qwen2Config / Qwen3Config.__post_init__) are refused.
  void RefuseSlidingWindow() const {
    if (!c.spec->sliding_window_keys) return;
    const bool use_sw = Bool("use_sliding_window", false);
    bool sliding = false;
    std::string why;
    if (const json::Value* lt = root.Find("layer_types"); lt && lt->IsArray()) {
      for (const auto& v : lt->arr)
        if (v.IsString() && v.str == "sliding_attention") sliding = true;
      why = "layer_types names sliding_attention layers";
    } else if (use_sw && (Present(root, "sliding_window") || !root.Find("sliding_window"))) {  // absent: 4096
      int64_t mwl = 28;
      if (const json::Value* m = root.Find("max_window_layers"); m && m->IsNumber()) mwl = static_cast<int64_t>(m->num);
      sliding = mwl < c.num_hidden_layers;
      why = "use_sliding_window=true with max_window_layers " + std::to_string(mwl) + " < num_hidden_layers " + std::to_string(c.num_hidden_layers);
    }
    if (sliding) throw InputError(path + ": sliding-window attention is not supported (" + why + ")");
  }

  /// RoPE (RotaryEmbeddingConfigMixin.convert_rope_params_to_dict / standardize_rope_params):
  /// rope_theta, the scaling dict (`rope_scaling` wins over `rope_parameters` when both are
  /// non-empty), its type and the type's parameters; then the context limit YaRN extends.
  void ReadRope() {
    const json::Value* rs = root.Find("rope_scaling");
    const json::Value* rp = root.Find("rope_parameters");
    const json::Value* rope = nullptr;
    std::string rname;
    if (rs && rs->IsObject() && !rs->obj.empty()) {
      rope = rs;
      rname = "rope_scaling";
    } else if (rp && rp->IsObject() && !rp->obj.empty()) {
      rope = rp;
      rname = "rope_parameters";
    }
    for (const json::Value* v : {rs, rp})
      if (v && !v->IsNull() && !v->IsObject())
        throw InputError(path + ": field '" + std::string(v == rs ? "rope_scaling" : "rope_parameters") + "' must be an object or null");
    c.rope_theta = Num(root, "", "rope_theta", 1e4);
    if (rope) ReadRopeScaling(*rope, rname + ".");
    if (!(c.rope_theta > 0)) throw InputError(path + ": rope_theta must be positive");
    // YaRN extends the context to factor × original_max_position_embeddings (the Qwen3 model cards:
    // 4 × 32768 = 131072 with max_position_embeddings 40960); the length limit follows it, as vLLM
    // derives max_model_len from the rope scaling.
    if (c.rope_type == "yarn")
      c.max_position_embeddings =
          std::max(c.max_position_embeddings, static_cast<int64_t>(c.rope_factor * static_cast<double>(c.rope_original_max_position_embeddings)));
  }

  /// The scaling dict `rope` (field prefix `w`, e.g. "rope_parameters."): theta, type, partial
  /// rotary factor, and the yarn / llama3 parameters.
  void ReadRopeScaling(const json::Value& rope, const std::string& w) {
    // A per-layer-type dict ({"full_attention": {...}, "sliding_attention": {...}}) is not supported.
    if (rope.Find("full_attention") || rope.Find("sliding_attention"))
      throw InputError(path + ": per-layer-type " + w.substr(0, w.size() - 1) + " is not supported");
    c.rope_theta = Num(rope, w, "rope_theta", c.rope_theta);
    const json::Value* rt = rope.Find("rope_type");
    if (!rt || rt->IsNull()) rt = rope.Find("type");
    if (rt && !rt->IsNull()) {
      if (!rt->IsString()) throw InputError(path + ": field '" + w + "rope_type' must be a string");
      c.rope_type = rt->str;
    }
    const double prf = Num(rope, w, "partial_rotary_factor", Num(root, "", "partial_rotary_factor", 1.0));
    if (prf != 1.0) throw InputError(path + ": partial_rotary_factor " + NumText(prf) + " is not supported (only 1.0)");
    if (c.rope_type != "default" && c.rope_type != "yarn" && c.rope_type != "llama3")
      throw InputError(path + ": " + w + "rope_type '" + c.rope_type + "' is not supported (default, yarn and llama3 are)");
    if (c.rope_type == "yarn" || c.rope_type == "llama3") ReadRopeFactor(rope, w);
    if (c.rope_type == "yarn")
      ReadYarn(rope, w);
    else if (c.rope_type == "llama3")
      ReadLlama3(rope, w);
  }

  /// yarn / llama3: original_max_position_embeddings and factor.
  void ReadRopeFactor(const json::Value& rope, const std::string& w) {
    // A top-level original_max_position_embeddings wins (Phi-3 convention), then the dict's, then
    // max_position_embeddings.
    const json::Value* om = root.Find("original_max_position_embeddings");
    if (!om || om->IsNull()) om = rope.Find("original_max_position_embeddings");
    if (om && !om->IsNull()) {
      if (!om->IsNumber() || !(om->num > 0)) throw InputError(path + ": field '" + w + "original_max_position_embeddings' must be a positive number");
      c.rope_original_max_position_embeddings = static_cast<int64_t>(om->num);
    } else {
      c.rope_original_max_position_embeddings = c.max_position_embeddings;
    }
    const json::Value* f = rope.Find("factor");
    if (!f) throw InputError(path + ": " + w + "factor is required for rope_type '" + c.rope_type + "'");
    if (f->IsNull() && c.rope_type == "yarn") {
      c.rope_factor = static_cast<double>(c.max_position_embeddings) / static_cast<double>(c.rope_original_max_position_embeddings);
    } else {
      if (!f->IsNumber() || !(f->num > 0)) throw InputError(path + ": field '" + w + "factor' must be a positive number");
      c.rope_factor = f->num;
    }
  }

  /// yarn: attention factor (given, or from mscale / mscale_all_dim), beta_fast / beta_slow, truncate.
  void ReadYarn(const json::Value& rope, const std::string& w) {
    auto mscale_of = [](double scale, double m) { return scale <= 1 ? 1.0 : 0.1 * m * std::log(scale) + 1.0; };
    const double ms = Num(rope, w, "mscale", 0), ms_all = Num(rope, w, "mscale_all_dim", 0);
    const json::Value* af = rope.Find("attention_factor");
    if (af && !af->IsNull()) {
      if (!af->IsNumber() || af->num < 0) throw InputError(path + ": field '" + w + "attention_factor' must be a non-negative number");
      c.yarn_attention_factor = af->num;
    } else if (ms != 0 && ms_all != 0) {
      c.yarn_attention_factor = mscale_of(c.rope_factor, ms) / mscale_of(c.rope_factor, ms_all);
    } else {
      c.yarn_attention_factor = mscale_of(c.rope_factor, 1.0);
    }
    // transformers: `get("beta_fast") or 32`, `get("beta_slow") or 1` (0 also means the default).
    c.yarn_beta_fast = Num(rope, w, "beta_fast", 0);
    if (c.yarn_beta_fast == 0) c.yarn_beta_fast = 32;
    c.yarn_beta_slow = Num(rope, w, "beta_slow", 0);
    if (c.yarn_beta_slow == 0) c.yarn_beta_slow = 1;
    if (const json::Value* t = rope.Find("truncate"); t && !t->IsNull()) {
      if (!t->IsBool()) throw InputError(path + ": field '" + w + "truncate' must be true or false");
      c.yarn_truncate = t->b;
    }
  }

  /// llama3: low / high frequency factors (both required).
  void ReadLlama3(const json::Value& rope, const std::string& w) {
    for (const char* k : {"low_freq_factor", "high_freq_factor"})
      if (!Present(rope, k)) throw InputError(path + ": " + w + k + " is required for rope_type 'llama3'");
    c.llama3_low_freq_factor = Num(rope, w, "low_freq_factor", 1);
    c.llama3_high_freq_factor = Num(rope, w, "high_freq_factor", 4);
    if (!(c.llama3_high_freq_factor > c.llama3_low_freq_factor) || !(c.llama3_low_freq_factor > 0))
      throw InputError(path + ": " + w + "high_freq_factor must exceed low_freq_factor > 0");
  }
};

}  // namespace

DecoderConfig ParseDecoderConfig(const std::string& text, const std::string& path) {
  json::Value root = json::Parse(text, path);
  if (!root.IsObject()) throw InputError(path + ": config is not a JSON object");
  DecoderConfig c;
  c.json = text;
  ConfigReader r{root, path, c};
  r.ReadArchitecture();
  r.ReadDimensions();
  r.ReadSwitches();
  r.RefuseSlidingWindow();
  r.ReadRope();
  return c;
}

std::pair<at::Tensor, double> RopeInvFreq(const DecoderConfig& c) {
  const int64_t dim = c.head_dim;
  const double base = c.rope_theta;
  auto f32 = at::TensorOptions().dtype(at::kFloat);
  // base ** (arange(0, dim, 2) / dim), as in every transformers RoPE init function.
  at::Tensor pos_freqs = at::pow(base, at::arange(0, dim, 2, at::TensorOptions().dtype(at::kLong)).to(at::kFloat) / static_cast<double>(dim));
  if (c.rope_type == "yarn") {
    const double factor = c.rope_factor;
    const double omax = static_cast<double>(c.rope_original_max_position_embeddings);
    auto correction_dim = [&](double rot) { return (dim * std::log(omax / (rot * 2 * M_PI))) / (2 * std::log(base)); };
    double low = correction_dim(c.yarn_beta_fast), high = correction_dim(c.yarn_beta_slow);
    if (c.yarn_truncate) {
      low = std::floor(low);
      high = std::ceil(high);
    }
    low = std::max(low, 0.0);
    high = std::min(high, static_cast<double>(dim - 1));
    if (low == high) high += 0.001;  // linear_ramp_factor: prevent a singularity
    at::Tensor ramp = ((at::arange(dim / 2, f32) - low) / (high - low)).clamp(0, 1);
    at::Tensor extra = 1 - ramp;  // inv_freq_extrapolation_factor
    at::Tensor inv_extra = pos_freqs.reciprocal();
    at::Tensor inv_inter = (pos_freqs * factor).reciprocal();
    return {inv_inter * (1 - extra) + inv_extra * extra, c.yarn_attention_factor};
  }
  at::Tensor inv = pos_freqs.reciprocal();
  if (c.rope_type == "llama3") {
    const double factor = c.rope_factor, lf = c.llama3_low_freq_factor, hf = c.llama3_high_freq_factor;
    const double old_ctx = static_cast<double>(c.rope_original_max_position_embeddings);
    const double low_wl = old_ctx / lf, high_wl = old_ctx / hf;
    at::Tensor wavelen = inv.reciprocal() * (2 * M_PI);
    at::Tensor il = at::where(wavelen > low_wl, inv / factor, inv);
    at::Tensor smooth = (wavelen.reciprocal() * old_ctx - lf) / (hf - lf);
    at::Tensor smoothed = (1 - smooth) * il / factor + smooth * il;
    at::Tensor medium = (wavelen < high_wl).logical_not() & (wavelen > low_wl).logical_not();
    return {at::where(medium, smoothed, il), 1.0};
  }
  return {inv, 1.0};
}

LoraModelDims LoraDims(const DecoderConfig& c) {
  LoraModelDims d;
  d.architecture = c.architecture;
  d.num_layers = c.num_hidden_layers;
  d.hidden_size = c.hidden_size;
  d.q_size = c.num_attention_heads * c.head_dim;
  d.kv_size = c.num_key_value_heads * c.head_dim;
  d.intermediate_size = c.intermediate_size;
  d.qk_norm = c.qk_norm;
  return d;
}

}  // namespace pg
