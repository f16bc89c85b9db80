#include "io/peft_adapter.h"

#include <sys/stat.h>

#include <algorithm>
#include <cmath>
#include <cerrno>
#include <cstring>
#include <set>

#include "io/json.h"
#include "io/safetensors.h"
#include "lora/lora.h"
#include "napi/util.h"

namespace pg {

namespace {
void MkdirP(const std::string& dir) {
  std::string cur;
  size_t i = 0;
  while (i <= dir.size()) {
    size_t j = dir.find('/', i);
    if (j == std::string::npos) j = dir.size();
    cur = dir.substr(0, j);
    if (!cur.empty() && ::mkdir(cur.c_str(), 0755) != 0 && errno != EEXIST)
      throw InputError(dir + ": cannot create directory (" + std::strerror(errno) + ")");
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
  std::vector<std::string> targets = ad.config.target_modules;
  std::sort(targets.begin(), targets.end());
  targets.erase(std::unique(targets.begin(), targets.end()), targets.end());
  std::vector<Value> tv;
  for (const auto& s : targets) tv.push_back(MakeString(s));
  Value cfg = MakeObject({
      {"alpha_pattern", MakeObject()},
      {"base_model_name_or_path", base_model_name.empty() ? MakeNull() : MakeString(base_model_name)},
      {"bias", MakeString("none")},
      {"fan_in_fan_out", MakeBool(false)},
      {"inference_mode", MakeBool(true)},
      {"init_lora_weights", MakeBool(true)},
      {"layers_pattern", MakeNull()},
      {"layers_to_transform", MakeNull()},
      {"lora_alpha", MakeNumber(ad.config.alpha)},
      {"lora_dropout", MakeNumber(ad.config.dropout)},
      {"modules_to_save", MakeNull()},
      {"peft_type", MakeString("LORA")},
      {"r", MakeInt(ad.config.r)},
      {"rank_pattern", MakeObject()},
      {"revision", MakeNull()},
      {"target_modules", MakeArray(std::move(tv))},
      {"task_type", MakeString("CAUSAL_LM")},
      {"use_dora", MakeBool(false)},
      {"use_rslora", MakeBool(ad.config.use_rslora)},
  });
  // lora_alpha is an integer in most configs; write it as one when it is integral.
  for (auto& kv : cfg.obj)
    if (kv.first == "lora_alpha" && ad.config.alpha == std::floor(ad.config.alpha) && std::fabs(ad.config.alpha) < 1e15)
      kv.second = MakeInt(static_cast<int64_t>(ad.config.alpha));
  st::WriteFileAtomic(dir + "/adapter_config.json", Dump(cfg, 2) + "\n");
}

LoraAdapter LoadPeftAdapter(const std::string& dir, const Qwen3Config& mc, at::Device device) {
  const std::string cpath = dir + "/adapter_config.json";
  const std::string wpath = dir + "/adapter_model.safetensors";
  json::Value root = json::Parse(st::ReadTextFile(cpath), cpath);
  if (!root.IsObject()) throw InputError(cpath + ": not a JSON object");
  auto str = [&](const char* k) -> std::string {
    const json::Value* v = root.Find(k);
    return v && v->IsString() ? v->str : std::string();
  };
  auto is_nullish = [&](const char* k) {
    const json::Value* v = root.Find(k);
    return !v || v->IsNull() || (v->IsArray() && v->arr.empty()) || (v->IsObject() && v->obj.empty()) || (v->IsBool() && !v->b);
  };
  if (str("peft_type") != "LORA") throw InputError(cpath + ": peft_type must be \"LORA\" (got \"" + str("peft_type") + "\")");
  LoraConfig cfg;
  const json::Value* r = root.Find("r");
  if (!r || !r->IsNumber() || !r->is_int || r->i < 1) throw InputError(cpath + ": r must be a positive integer");
  cfg.r = r->i;
  const json::Value* al = root.Find("lora_alpha");
  if (!al || !al->IsNumber() || !(al->num > 0)) throw InputError(cpath + ": lora_alpha must be a positive number");
  cfg.alpha = al->num;
  if (const json::Value* d = root.Find("lora_dropout"); d && d->IsNumber()) cfg.dropout = d->num;
  if (!(cfg.dropout >= 0 && cfg.dropout < 1)) throw InputError(cpath + ": lora_dropout must be in [0, 1)");
  if (const json::Value* u = root.Find("use_rslora"); u && u->IsBool()) cfg.use_rslora = u->b;
  if (const json::Value* b = root.Find("bias"); b && !(b->IsString() && b->str == "none"))
    throw InputError(cpath + ": only bias \"none\" is supported");
  if (!is_nullish("use_dora")) throw InputError(cpath + ": DoRA adapters (use_dora) are not supported");
  if (!is_nullish("modules_to_save")) throw InputError(cpath + ": modules_to_save is not supported");
  if (!is_nullish("rank_pattern") || !is_nullish("alpha_pattern")) throw InputError(cpath + ": rank_pattern/alpha_pattern are not supported");
  if (!is_nullish("fan_in_fan_out")) throw InputError(cpath + ": fan_in_fan_out=true is not supported");
  const json::Value* tm = root.Find("target_modules");
  cfg.target_modules.clear();
  if (tm && tm->IsString()) {
    if (!IsLoraTarget(tm->str)) throw InputError(cpath + ": target_modules '" + tm->str + "' is not a module name (regular expressions are not supported)");
    cfg.target_modules.push_back(tm->str);
  } else if (tm && tm->IsArray()) {
    for (const auto& t : tm->arr) {
      if (!t.IsString() || !IsLoraTarget(t.str))
        throw InputError(cpath + ": target_modules entry '" + (t.IsString() ? t.str : json::Dump(t)) + "' is not one of q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj");
      if (std::find(cfg.target_modules.begin(), cfg.target_modules.end(), t.str) == cfg.target_modules.end()) cfg.target_modules.push_back(t.str);
    }
  } else {
    throw InputError(cpath + ": target_modules must be a list of module names");
  }
  if (cfg.target_modules.empty()) throw InputError(cpath + ": target_modules is empty");
  std::set<int64_t> layers;
  if (const json::Value* lt = root.Find("layers_to_transform"); lt && !lt->IsNull()) {
    auto add = [&](const json::Value& v) {
      if (!v.IsNumber() || !v.is_int || v.i < 0 || v.i >= mc.num_hidden_layers) throw InputError(cpath + ": layers_to_transform holds an invalid layer index");
      layers.insert(v.i);
    };
    if (lt->IsArray()) for (const auto& v : lt->arr) add(v);
    else add(*lt);
  } else {
    for (int64_t l = 0; l < mc.num_hidden_layers; ++l) layers.insert(l);
  }

  st::File f = st::File::Open(wpath);
  std::map<std::string, std::pair<int64_t, int64_t>> want;  // module stem -> (in, out)
  for (int64_t l : layers)
    for (const auto& t : cfg.target_modules)
      want["model.layers." + std::to_string(l) + "." + LoraParent(t) + "." + t] = LoraModuleDims(mc, t);
  std::map<std::string, std::pair<at::Tensor, at::Tensor>> got;
  const std::string pre = "base_model.model.";
  for (const auto& kv : f.entries()) {
    const std::string& key = kv.first;
    std::string stem;
    bool is_a = false;
    auto ends = [&](const std::string& suf) { return key.size() > suf.size() && key.compare(key.size() - suf.size(), suf.size(), suf) == 0; };
    if (key.rfind(pre, 0) == 0 && ends(".lora_A.weight")) { stem = key.substr(pre.size(), key.size() - pre.size() - 14); is_a = true; }
    else if (key.rfind(pre, 0) == 0 && ends(".lora_B.weight")) { stem = key.substr(pre.size(), key.size() - pre.size() - 14); }
    else throw InputError(wpath + ": unexpected tensor '" + key + "' (expected base_model.model.model.layers.{i}.<module>.lora_{A,B}.weight)");
    auto it = want.find(stem);
    if (it == want.end()) throw InputError(wpath + ": tensor '" + key + "' is not a LoRA weight of a targeted module of this model (target_modules / layer index)");
    const int64_t in = it->second.first, out = it->second.second;
    const std::vector<int64_t> expect = is_a ? std::vector<int64_t>{cfg.r, in} : std::vector<int64_t>{out, cfg.r};
    if (kv.second.shape != expect)
      throw InputError(wpath + ": tensor '" + key + "' has shape [" + (kv.second.shape.size() > 0 ? std::to_string(kv.second.shape[0]) : "") +
                       (kv.second.shape.size() > 1 ? ", " + std::to_string(kv.second.shape[1]) : "") + "], expected [" +
                       std::to_string(expect[0]) + ", " + std::to_string(expect[1]) + "] (r = " + std::to_string(cfg.r) + ")");
    at::Tensor t = f.Read(key).to(at::kFloat).to(device).contiguous().set_requires_grad(true);
    (is_a ? got[stem].first : got[stem].second) = t;
  }
  LoraAdapter ad;
  ad.config = cfg;
  for (const auto& kv : want) {
    auto it = got.find(kv.first);
    if (it == got.end() || !it->second.first.defined() || !it->second.second.defined())
      throw InputError(wpath + ": missing LoRA weights for '" + pre + kv.first + "' (lora_A and lora_B required for every targeted module)");
    ad.weights[kv.first] = it->second;
  }
  return ad;
}

}  // namespace pg
