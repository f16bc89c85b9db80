#include "io/peft_adapter.h"

#include <sys/stat.h>

#include <algorithm>
#include <cmath>
#include <cerrno>
#include <cstring>
#include <regex>
#include <set>

#include "core/errors.h"
#include "io/json.h"
#include "io/safetensors.h"
#include "lora/lora.h"

namespace pg {

namespace {
void MkdirP(const std::string& dir) {
  std::string cur;
  size_t i = 0;
  while (i <= dir.size()) {
    size_t j = dir.find('/', i);
    if (j == std::string::npos) j = dir.size();
    cur = dir.substr(0, j);
    if (!cur.empty() && ::mkdir(cur.c_str(), 0755) != 0 && errno != EEXIST) throw InputError(dir + ": cannot create directory (" + std::strerror(errno) + ")");
    i = j + 1;
  }
  struct stat sb;
  if (::stat(dir.c_str(), &sb) != 0 || !S_ISDIR(sb.st_mode)) throw InputError(dir + ": not a directory");
}
}  // namespace

void SavePeftAdapter(const std::string& dir, const LoraAdapter& ad, const std::string& base_model_name) {
  MkdirP(dir);
  std::map<std::string, at::Tensor> t;
  for (const auto& kv : ad.weights) {
    t["base_model.model." + kv.first + ".lora_A.weight"] = kv.second.first.detach().to(at::kFloat);
    t["base_model.model." + kv.first + ".lora_B.weight"] = kv.second.second.detach().to(at::kFloat);
  }
  st::Save(dir + "/adapter_model.safetensors", t, {{"format", "pt"}});
  using namespace json;
  // target_modules is always a plain list (what vLLM's PEFTHelper and peft both read): the module
  // short names when every layer has the same set of adapted projections, otherwise the full module
  // names (peft matches a list entry equal to the module name exactly), so the saved config
  // reproduces exactly the modules the weights cover.
  std::map<std::string, std::set<std::string>> by_layer;  // layer prefix -> short names
  std::set<std::string> shorts, layers_seen;
  for (const auto& kv : ad.weights) {
    const size_t dot = kv.first.rfind('.');
    const std::string sn = kv.first.substr(dot + 1);
    const size_t pdot = kv.first.rfind('.', dot - 1);
    by_layer[kv.first.substr(0, pdot)].insert(sn);
    shorts.insert(sn);
  }
  bool uniform = by_layer.size() == static_cast<size_t>(ad.num_layers);
  for (const auto& kv : by_layer) uniform = uniform && kv.second == shorts;
  std::vector<Value> tv;
  if (uniform)
    for (const auto& s : shorts) tv.push_back(MakeString(s));
  else
    for (const auto& kv : ad.weights) tv.push_back(MakeString(kv.first));
  auto num = [](double v) { return (v == std::floor(v) && std::fabs(v) < 1e15) ? MakeInt(static_cast<int64_t>(v)) : MakeNumber(v); };
  std::vector<std::pair<std::string, Value>> rp, ap;
  for (const auto& kv : ad.config.rank_pattern) rp.emplace_back(kv.first, MakeInt(kv.second));
  for (const auto& kv : ad.config.alpha_pattern) ap.emplace_back(kv.first, num(kv.second));
  Value cfg = MakeObject({
      {"alpha_pattern", MakeObject(std::move(ap))},
      {"base_model_name_or_path", base_model_name.empty() ? MakeNull() : MakeString(base_model_name)},
      {"bias", MakeString("none")},
      {"exclude_modules", MakeNull()},
      {"fan_in_fan_out", MakeBool(false)},
      {"inference_mode", MakeBool(true)},
      {"init_lora_weights", MakeBool(true)},
      {"layers_pattern", MakeNull()},
      {"layers_to_transform", MakeNull()},
      {"lora_alpha", num(ad.config.alpha)},
      {"lora_bias", MakeBool(false)},
      {"lora_dropout", MakeNumber(ad.config.dropout)},
      {"modules_to_save", MakeNull()},
      {"peft_type", MakeString("LORA")},
      {"r", MakeInt(ad.config.r)},
      {"rank_pattern", MakeObject(std::move(rp))},
      {"revision", MakeNull()},
      {"target_modules", MakeArray(std::move(tv))},
      {"task_type", MakeString("CAUSAL_LM")},
      {"use_dora", MakeBool(false)},
      {"use_rslora", MakeBool(ad.config.use_rslora)},
  });
  st::WriteFileAtomic(dir + "/adapter_config.json", Dump(cfg, 2) + "\n");
}

namespace {

/// Python `re` pattern -> ECMAScript (std::regex) for the constructs peft configs use: named
/// groups `(?P<name>...)` become plain groups; everything else is passed through. InputError naming
/// the field when std::regex rejects it.
std::regex PyRegex(const std::string& pat, const std::string& where) {
  std::string p;
  for (size_t i = 0; i < pat.size(); ++i) {
    if (pat[i] == '\\' && i + 1 < pat.size()) {
      p += pat.substr(i, 2);
      ++i;
    } else if (pat.compare(i, 4, "(?P<") == 0) {
      const size_t e = pat.find('>', i);
      if (e == std::string::npos) break;
      p += '(';
      i = e;
    } else {
      p += pat[i];
    }
  }
  try {
    return std::regex(p, std::regex::ECMAScript);
  } catch (const std::regex_error& e) {
    throw InputError(where + ": regular expression '" + pat + "' is not supported (" + e.what() + ")");
  }
}

bool FullMatch(const std::regex& re, const std::string& s) {
  return std::regex_match(s, re);
}

/// Module names of the decoder (what torch's named_modules() lists for the transformers model,
/// the keys peft matches target_modules / exclude_modules / patterns against).
std::vector<std::string> ModuleNames(const LoraModelDims& mc) {
  std::vector<std::string> out{"model", "model.embed_tokens", "model.layers"};
  for (int64_t l = 0; l < mc.num_layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l);
    out.push_back(p);
    out.push_back(p + ".self_attn");
    for (const LoraProjection& m : kProjections)
      if (std::string(m.parent) == "self_attn") out.push_back(p + ".self_attn." + m.name);
    if (mc.qk_norm) {
      out.push_back(p + ".self_attn.q_norm");
      out.push_back(p + ".self_attn.k_norm");
    }
    out.push_back(p + ".mlp");
    for (const LoraProjection& m : kProjections)
      if (std::string(m.parent) == "mlp") out.push_back(p + ".mlp." + m.name);
    out.push_back(p + ".mlp.act_fn");
    out.push_back(p + ".input_layernorm");
    out.push_back(p + ".post_attention_layernorm");
  }
  for (const char* m : {"model.norm", "model.rotary_emb", "lm_head"}) out.push_back(m);
  return out;
}

bool EndsWithDot(const std::string& key, const std::string& name) {
  return key.size() > name.size() && key.compare(key.size() - name.size(), name.size(), name) == 0 && key[key.size() - name.size() - 1] == '.';
}

}  // namespace

namespace {

/// A field that is present and not null.
const json::Value* Field(const json::Value& root, const char* k) {
  const json::Value* v = root.Find(k);
  return (v && !v->IsNull()) ? v : nullptr;
}

/// A field that is "set" in peft's sense (not false / empty).
bool IsSet(const json::Value* v) {
  return v && !((v->IsBool() && !v->b) || (v->IsArray() && v->arr.empty()) || (v->IsObject() && v->obj.empty()) || (v->IsString() && v->str.empty()));
}

/// peft_type, then the scalar fields (peft LoraConfig defaults: r 8, lora_alpha 8, lora_dropout 0).
LoraConfig ReadScalars(const json::Value& root, const std::string& cpath) {
  auto field = [&](const char* k) { return Field(root, k); };
  auto str = [&](const char* k) -> std::string {
    const json::Value* v = root.Find(k);
    return v && v->IsString() ? v->str : std::string();
  };
  if (str("peft_type") != "LORA") throw InputError(cpath + ": peft_type must be \"LORA\" (got \"" + str("peft_type") + "\")");
  LoraConfig cfg;
  cfg.r = 8;
  cfg.alpha = 8;
  if (const json::Value* r = field("r")) {
    if (!r->IsNumber() || !r->is_int || r->i < 1) throw InputError(cpath + ": r must be a positive integer");
    cfg.r = r->i;
  }
  if (const json::Value* al = field("lora_alpha")) {
    if (!al->IsNumber() || !(al->num > 0)) throw InputError(cpath + ": lora_alpha must be a positive number");
    cfg.alpha = al->num;
  }
  if (const json::Value* d = field("lora_dropout")) {
    if (!d->IsNumber()) throw InputError(cpath + ": lora_dropout must be a number");
    cfg.dropout = d->num;
  }
  if (!(cfg.dropout >= 0 && cfg.dropout < 1)) throw InputError(cpath + ": lora_dropout must be in [0, 1)");
  if (const json::Value* u = field("use_rslora")) {
    if (!u->IsBool()) throw InputError(cpath + ": use_rslora must be true or false");
    cfg.use_rslora = u->b;
  }
  return cfg;
}

/// Variants that change the adapter's math: refused, naming the field.
void RefuseVariants(const json::Value& root, const std::string& cpath) {
  auto field = [&](const char* k) { return Field(root, k); };
  if (const json::Value* b = field("bias"); b && !(b->IsString() && b->str == "none"))
    throw InputError(cpath + ": bias " + json::Dump(*b) + " is not supported (only \"none\": no trained bias terms)");
  const std::pair<const char*, const char*> refused[] = {
      {"use_dora", "DoRA adapters (use_dora: true) are not supported"},
      {"modules_to_save", "modules_to_save (fully trained copies of other modules) is not supported"},
      {"fan_in_fan_out", "fan_in_fan_out: true (Conv1D-style weights) is not supported"},
      {"lora_bias", "lora_bias: true (a bias on LoRA B) is not supported"},
      {"target_parameters", "target_parameters (LoRA on nn.Parameter) is not supported"},
      {"layer_replication", "layer_replication is not supported"},
      {"trainable_token_indices", "trainable_token_indices is not supported"},
      {"alora_invocation_tokens", "activated LoRA (alora_invocation_tokens) is not supported"},
      {"use_qalora", "use_qalora: true is not supported"},
      {"velora_config", "velora_config is not supported"},
      {"monteclora_config", "monteclora_config is not supported"},
      {"use_bdlora", "use_bdlora is not supported"},
      {"arrow_config", "arrow_config is not supported"},
      {"kasa_config", "kasa_config is not supported"},
      {"megatron_config", "megatron_config is not supported"},
  };
  for (const auto& rf : refused)
    if (IsSet(field(rf.first))) throw InputError(cpath + ": " + rf.second + " (field " + rf.first + ")");
}

/// Which modules the config selects, as peft's check_target_module_exists (tuners_utils.py):
/// target_modules, exclude_modules, layers_to_transform / layers_pattern.
struct ModuleSelection {
  const json::Value *tm = nullptr, *ex = nullptr, *lt = nullptr;  // as given (named in messages)
  bool tm_regex = false, ex_regex = false, use_layers = false;
  std::regex tm_re, ex_re;
  std::vector<std::string> tm_list, ex_list;
  std::set<int64_t> layer_idx;
  std::vector<std::regex> lp_res;
  std::regex default_layer_re{R"(.*?\.[^.]*\.(\d+)\.)"};

  bool Targeted(const std::string& key) const;
  /// The selection as the config states it, for messages: "target_modules X, exclude_modules Y, ...".
  std::string Describe() const {
    return "target_modules " + json::Dump(*tm) + (ex ? ", exclude_modules " + json::Dump(*ex) : std::string()) +
           (lt ? ", layers_to_transform " + json::Dump(*lt) : std::string());
  }
};

ModuleSelection ReadSelection(const json::Value& root, const std::string& cpath) {
  auto field = [&](const char* k) { return Field(root, k); };
  ModuleSelection sel;
  const json::Value* tm = sel.tm = field("target_modules");
  if (!tm) throw InputError(cpath + ": target_modules is missing (a list of module names or a regular expression)");
  bool& tm_regex = sel.tm_regex;
  std::regex& tm_re = sel.tm_re;
  std::vector<std::string>& tm_list = sel.tm_list;
  if (tm->IsString()) {
    if (tm->str == "all-linear") {
      tm_list = AllProjectionNames();  // every linear but lm_head
    } else {
      tm_regex = true;
      tm_re = PyRegex(tm->str, cpath + ": target_modules");
    }
  } else if (tm->IsArray()) {
    for (const auto& t : tm->arr) {
      if (!t.IsString()) throw InputError(cpath + ": target_modules entry " + json::Dump(t) + " is not a string");
      tm_list.push_back(t.str);
    }
    if (tm_list.empty()) throw InputError(cpath + ": target_modules is empty");
  } else {
    throw InputError(cpath + ": target_modules must be a list of module names or a regular expression string");
  }
  const json::Value* ex = sel.ex = field("exclude_modules");
  bool& ex_regex = sel.ex_regex;
  std::regex& ex_re = sel.ex_re;
  std::vector<std::string>& ex_list = sel.ex_list;
  if (ex) {
    if (ex->IsString()) {
      ex_regex = !ex->str.empty();
      if (ex_regex) ex_re = PyRegex(ex->str, cpath + ": exclude_modules");
    } else if (ex->IsArray()) {
      for (const auto& t : ex->arr) {
        if (!t.IsString()) throw InputError(cpath + ": exclude_modules entry " + json::Dump(t) + " is not a string");
        ex_list.push_back(t.str);
      }
    } else {
      throw InputError(cpath + ": exclude_modules must be a list of module names or a regular expression string");
    }
  }
  const json::Value* lt = sel.lt = field("layers_to_transform");
  const json::Value* lp = field("layers_pattern");
  std::set<int64_t>& layer_idx = sel.layer_idx;
  bool& use_layers = sel.use_layers;
  if (lt) {
    auto add = [&](const json::Value& v) {
      if (!v.IsNumber() || !v.is_int || v.i < 0) throw InputError(cpath + ": layers_to_transform holds " + json::Dump(v) + ", not a layer index");
      layer_idx.insert(v.i);
    };
    if (lt->IsArray()) {
      for (const auto& v : lt->arr) add(v);
      use_layers = !lt->arr.empty();
    } else {
      add(*lt);
      use_layers = true;
    }
  }
  std::vector<std::regex>& lp_res = sel.lp_res;
  if (lp && IsSet(lp)) {
    if (lp->IsString())
      lp_res.push_back(PyRegex("(?:^|.*?\\.)" + lp->str + "\\.(\\d+)\\.", cpath + ": layers_pattern"));
    else if (lp->IsArray())
      for (const auto& v : lp->arr) {
        if (!v.IsString()) throw InputError(cpath + ": layers_pattern entry " + json::Dump(v) + " is not a string");
        lp_res.push_back(PyRegex("(?:^|.*?\\.)" + v.str + "\\.(\\d+)\\.", cpath + ": layers_pattern"));
      }
    else
      throw InputError(cpath + ": layers_pattern must be a string or a list of strings");
  }
  if (tm_regex && lt) throw InputError(cpath + ": layers_to_transform cannot be used when target_modules is a regular expression (peft refuses it too)");
  if (tm_regex && lp) throw InputError(cpath + ": layers_pattern cannot be used when target_modules is a regular expression (peft refuses it too)");
  if (!lp_res.empty() && !lt) throw InputError(cpath + ": layers_pattern requires layers_to_transform");
  return sel;
}

bool ModuleSelection::Targeted(const std::string& key) const {
  if (ex_regex && FullMatch(ex_re, key)) return false;
  for (const auto& e : ex_list)
    if (key == e || EndsWithDot(key, e)) return false;
  if (tm_regex) return FullMatch(tm_re, key);
  if (std::find(tm_list.begin(), tm_list.end(), key) != tm_list.end()) return true;
  bool found = false;
  for (const auto& t : tm_list) found = found || EndsWithDot(key, t);
  if (found && use_layers) {
    std::smatch m;
    bool ok = false;
    if (lp_res.empty())
      ok = std::regex_search(key, m, default_layer_re, std::regex_constants::match_continuous);
    else
      for (const auto& re : lp_res)
        if ((ok = std::regex_search(key, m, re, std::regex_constants::match_continuous))) break;
    found = ok && layer_idx.count(std::stoll(m[m.size() - 1].str())) > 0;  // idx: the last group (a layers_pattern may hold groups)
  }
  return found;
}

/// The decoder modules `sel` selects (ModuleNames order): stem -> (in, out); InputError when one is
/// not a LoRA projection or none is selected.
std::map<std::string, std::pair<int64_t, int64_t>> SelectedProjections(const ModuleSelection& sel, const LoraModelDims& mc, const std::string& cpath) {
  std::map<std::string, std::pair<int64_t, int64_t>> want;
  for (const auto& key : ModuleNames(mc)) {
    if (!sel.Targeted(key)) continue;
    const size_t dot = key.rfind('.');
    const std::string sn = key.substr(dot + 1);
    const bool proj = IsLoraTarget(sn) && key.rfind("model.layers.", 0) == 0 && key.find('.', 13) != std::string::npos;
    if (!proj)
      throw InputError(cpath + ": target_modules selects module '" + key +
                       "', which this loader cannot adapt (LoRA on the seven projections q/k/v/o/gate/up/down_proj only)");
    want[key] = LoraModuleDims(mc, sn);
  }
  if (want.empty())
    throw InputError(cpath + ": target_modules " + json::Dump(*sel.tm) + " (after exclude_modules / layers_to_transform) matches no module of this " +
                     mc.architecture + " (peft refuses such an adapter too)");

  return want;
}

/// Per-module r / alpha: peft get_pattern_key: the first key K (file order) with
/// re.match(r"(.*\.)?(K)$", module) sets that module's r / alpha. Records the patterns in cfg,
/// each selected module's r in `r_of` and its scaling in ad.scaling where it differs.
void ReadPatterns(const json::Value& root, const std::string& cpath, const std::map<std::string, std::pair<int64_t, int64_t>>& want, LoraConfig& cfg,
                  std::map<std::string, int64_t>& r_of, LoraAdapter& ad) {
  auto field = [&](const char* k) { return Field(root, k); };
  auto patterns = [&](const char* name, bool integer) {
    std::vector<std::pair<std::string, double>> out;
    const json::Value* v = field(name);
    if (!v) return out;
    if (!v->IsObject()) throw InputError(cpath + ": " + name + " must be an object {module pattern: value}");
    for (const auto& kv : v->obj) {
      if (!kv.second.IsNumber() || (integer && (!kv.second.is_int || kv.second.i < 1)) || !(kv.second.num > 0))
        throw InputError(cpath + ": " + name + "['" + kv.first + "'] must be a positive " + (integer ? "integer" : "number"));
      out.emplace_back(kv.first, kv.second.num);
    }
    return out;
  };
  auto rank_p = patterns("rank_pattern", true);
  auto alpha_p = patterns("alpha_pattern", false);
  for (const auto& kv : rank_p) cfg.rank_pattern.emplace_back(kv.first, static_cast<int64_t>(kv.second));
  cfg.alpha_pattern = alpha_p;
  std::vector<std::regex> rank_re, alpha_re;
  for (const auto& kv : rank_p) rank_re.push_back(PyRegex("(.*\\.)?(" + kv.first + ")", cpath + ": rank_pattern"));
  for (const auto& kv : alpha_p) alpha_re.push_back(PyRegex("(.*\\.)?(" + kv.first + ")", cpath + ": alpha_pattern"));
  for (const auto& kv : want) {
    int64_t r = cfg.r;
    double alpha = cfg.alpha;
    for (size_t i = 0; i < rank_re.size(); ++i)
      if (FullMatch(rank_re[i], kv.first)) {
        r = static_cast<int64_t>(rank_p[i].second);
        break;
      }
    for (size_t i = 0; i < alpha_re.size(); ++i)
      if (FullMatch(alpha_re[i], kv.first)) {
        alpha = alpha_p[i].second;
        break;
      }
    r_of[kv.first] = r;
    const double s = cfg.use_rslora ? alpha / std::sqrt(static_cast<double>(r)) : alpha / static_cast<double>(r);
    if (s != cfg.Scaling()) ad.scaling[kv.first] = s;
  }
}

/// The lora_A / lora_B tensors of `dir`'s adapter_model.safetensors: stem -> (A [r, in], B [out, r])
/// float32 on `device`, requires_grad, each queued on `finite`. Every key must be a lora_A / lora_B of
/// a module in `want` with its shape (r from `r_of`; `r_default` names the config's r in messages).
std::map<std::string, std::pair<at::Tensor, at::Tensor>> ReadAdapterWeights(const std::string& dir, const std::string& cpath,
                                                                            const std::map<std::string, std::pair<int64_t, int64_t>>& want,
                                                                            const std::map<std::string, int64_t>& r_of, int64_t r_default, at::Device device,
                                                                            FiniteCheck& finite) {
  const std::string wpath = dir + "/adapter_model.safetensors";
  struct stat sb;
  if (::stat(wpath.c_str(), &sb) != 0 && ::stat((dir + "/adapter_model.bin").c_str(), &sb) == 0)
    throw InputError(wpath + ": missing; " + dir + "/adapter_model.bin (pickle) is not read: convert it to safetensors");
  st::File f = st::File::Open(wpath);
  std::map<std::string, std::pair<at::Tensor, at::Tensor>> got;
  const std::string pre = "base_model.model.";
  for (const auto& kv : f.entries()) {
    const std::string& key = kv.first;
    std::string stem;
    bool is_a = false;
    auto ends = [&](const std::string& suf) { return key.size() > suf.size() && key.compare(key.size() - suf.size(), suf.size(), suf) == 0; };
    if (key.rfind(pre, 0) == 0 && ends(".lora_A.weight")) {
      stem = key.substr(pre.size(), key.size() - pre.size() - 14);
      is_a = true;
    } else if (key.rfind(pre, 0) == 0 && ends(".lora_B.weight")) {
      stem = key.substr(pre.size(), key.size() - pre.size() - 14);
    } else
      throw InputError(wpath + ": unexpected tensor '" + key + "' (expected base_model.model.model.layers.{i}.<module>.lora_{A,B}.weight)");
    auto it = want.find(stem);
    if (it == want.end())
      throw InputError(wpath + ": tensor '" + key + "' belongs to module '" + stem + "', which " + cpath +
                       " does not target on this model (target_modules / exclude_modules / layers_to_transform)");
    const int64_t in = it->second.first, out = it->second.second, r = r_of.at(stem);
    const std::vector<int64_t> expect = is_a ? std::vector<int64_t>{r, in} : std::vector<int64_t>{out, r};
    if (kv.second.shape != expect)
      throw InputError(wpath + ": tensor '" + key + "' has shape [" + (kv.second.shape.size() > 0 ? std::to_string(kv.second.shape[0]) : "") +
                       (kv.second.shape.size() > 1 ? ", " + std::to_string(kv.second.shape[1]) : "") + "], expected [" + std::to_string(expect[0]) + ", " +
                       std::to_string(expect[1]) + "] (r = " + std::to_string(r) + " from " + cpath + (r != r_default ? " rank_pattern" : " r") + ")");
    at::Tensor t = f.Read(key).to(at::kFloat).to(device).contiguous().set_requires_grad(true);
    finite.Add(wpath, key, t);
    (is_a ? got[stem].first : got[stem].second) = t;
  }
  return got;
}

}  // namespace

LoraAdapter LoadPeftAdapter(const std::string& dir, const LoraModelDims& mc, at::Device device, NonFiniteWeights& non_finite) {
  const std::string cpath = dir + "/adapter_config.json";
  const std::string wpath = dir + "/adapter_model.safetensors";
  json::Value root = json::Parse(st::ReadTextFile(cpath), cpath);
  if (!root.IsObject()) throw InputError(cpath + ": not a JSON object");
  LoraConfig cfg = ReadScalars(root, cpath);
  RefuseVariants(root, cpath);
  const ModuleSelection sel = ReadSelection(root, cpath);
  const auto want = SelectedProjections(sel, mc, cpath);
  std::map<std::string, int64_t> r_of;
  LoraAdapter ad;
  ad.num_layers = mc.num_layers;
  ReadPatterns(root, cpath, want, cfg, r_of, ad);

  FiniteCheck finite;
  const auto got = ReadAdapterWeights(dir, cpath, want, r_of, cfg.r, device, finite);
  std::set<std::string> shorts;
  for (const auto& kv : want) {
    auto it = got.find(kv.first);
    if (it == got.end() || !it->second.first.defined() || !it->second.second.defined())
      throw InputError(wpath + ": no LoRA weights (lora_A and lora_B) for module '" + kv.first + "', which " + cpath + " targets (" + sel.Describe() + ")");
    ad.weights[kv.first] = it->second;
    shorts.insert(kv.first.substr(kv.first.rfind('.') + 1));
  }
  finite.Finish(non_finite, "LoRA adapter", "loadAdapter(dir, { allowNonFinite: true }) or --allow-non-finite-weights loads it with a warning");
  cfg.target_modules.assign(shorts.begin(), shorts.end());
  ad.config = cfg;
  return ad;
}

}  // namespace pg
