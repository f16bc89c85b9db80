#include "model/config.h"

#include "io/json.h"
#include "napi/util.h"

namespace pg {

Qwen3Config ParseQwen3Config(const std::string& text, const std::string& path) {
  json::Value root = json::Parse(text, path);
  if (!root.IsObject()) throw InputError(path + ": config is not a JSON object");
  const json::Value* arch = root.Find("architectures");
  bool ok = false;
  std::string found;
  if (arch && arch->IsArray())
    for (const auto& a : arch->arr)
      if (a.IsString()) {
        found += (found.empty() ? "" : ", ") + a.str;
        ok = ok || a.str == "Qwen3ForCausalLM";
      }
  if (!ok)
    throw InputError(path + ": unsupported architectures [" + found + "] (this addon runs Qwen3ForCausalLM only)");
  Qwen3Config c;
  c.json = text;
  auto get_int = [&](const char* key, bool required, int64_t dflt) -> int64_t {
    const json::Value* v = root.Find(key);
    if (!v || v->IsNull()) {
      if (required) throw InputError(path + ": missing integer field '" + key + "'");
      return dflt;
    }
    if (!v->IsNumber() || !v->is_int) throw InputError(path + ": field '" + key + "' must be an integer");
    return v->i;
  };
  auto get_num = [&](const json::Value& o, const char* key, double dflt) -> double {
    const json::Value* v = o.Find(key);
    if (!v || v->IsNull()) return dflt;
    if (!v->IsNumber()) throw InputError(path + ": field '" + key + "' must be a number");
    return v->num;
  };
  c.vocab_size = get_int("vocab_size", true, 0);
  c.hidden_size = get_int("hidden_size", true, 0);
  c.intermediate_size = get_int("intermediate_size", true, 0);
  c.num_hidden_layers = get_int("num_hidden_layers", true, 0);
  c.num_attention_heads = get_int("num_attention_heads", true, 0);
  c.num_key_value_heads = get_int("num_key_value_heads", false, c.num_attention_heads);
  c.max_position_embeddings = get_int("max_position_embeddings", false, 40960);
  for (auto [k, v] : {std::pair<const char*, int64_t>{"vocab_size", c.vocab_size}, {"hidden_size", c.hidden_size},
                      {"intermediate_size", c.intermediate_size}, {"num_hidden_layers", c.num_hidden_layers},
                      {"num_attention_heads", c.num_attention_heads}, {"num_key_value_heads", c.num_key_value_heads}})
    if (v <= 0) throw InputError(path + ": field '" + std::string(k) + "' must be positive");
  if (c.num_attention_heads % c.num_key_value_heads != 0)
    throw InputError(path + ": num_attention_heads must be a multiple of num_key_value_heads");
  c.head_dim = get_int("head_dim", false, c.hidden_size / c.num_attention_heads);
  if (c.head_dim <= 0 || c.head_dim % 2) throw InputError(path + ": head_dim must be a positive even integer");
  c.rope_theta = get_num(root, "rope_theta", 1e6);
  if (const json::Value* rp = root.Find("rope_parameters"); rp && rp->IsObject()) {
    c.rope_theta = get_num(*rp, "rope_theta", c.rope_theta);
    const json::Value* rt = rp->Find("rope_type");
    if (rt && rt->IsString() && rt->str != "default")
      throw InputError(path + ": rope_type '" + rt->str + "' is not supported (only default RoPE)");
  }
  if (const json::Value* rs = root.Find("rope_scaling"); rs && rs->IsObject()) {
    const json::Value* rt = rs->Find("rope_type");
    if (!rt) rt = rs->Find("type");
    if (rt && rt->IsString() && rt->str != "default")
      throw InputError(path + ": rope_scaling type '" + rt->str + "' is not supported (only default RoPE)");
  }
  c.rms_norm_eps = get_num(root, "rms_norm_eps", 1e-6);
  if (const json::Value* t = root.Find("tie_word_embeddings"); t && t->IsBool()) c.tie_word_embeddings = t->b;
  if (const json::Value* t = root.Find("torch_dtype"); t && t->IsString()) c.torch_dtype = t->str;
  if (const json::Value* t = root.Find("dtype"); t && t->IsString()) c.torch_dtype = t->str;
  if (const json::Value* b = root.Find("attention_bias"); b && b->IsBool() && b->b)
    throw InputError(path + ": attention_bias=true is not supported (Qwen3 has no biases)");
  if (const json::Value* sw = root.Find("use_sliding_window"); sw && sw->IsBool() && sw->b)
    throw InputError(path + ": use_sliding_window=true is not supported");
  return c;
}

}  // namespace pg
