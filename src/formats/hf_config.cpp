// Reading a RoPE configuration from a Hugging Face config.json (see posenc/formats/hf_config.hpp
// for the keys and the precedence rules).
#include "posenc/formats/hf_config.hpp"

#include <fmt/ranges.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <set>

#include "posenc/core/error.hpp"
#include "posenc/core/file.hpp"

namespace posenc {
namespace {

using nlohmann::json;

bool present(const json& o, const char* key) {
  return o.is_object() && o.contains(key) && !o.at(key).is_null();
}

std::optional<double> get_number(const json& o, const char* key, const std::string& prefix) {
  if (!present(o, key)) return std::nullopt;
  const json& v = o.at(key);
  if (!v.is_number()) fail("{}{} must be a number, got {}", prefix, key, v.dump());
  const double d = v.get<double>();
  if (!std::isfinite(d)) fail("{}{} must be finite, got {}", prefix, key, d);  // nan, inf, -inf
  return d;
}

std::optional<int64_t> get_int(const json& o, const char* key, const std::string& prefix) {
  if (!present(o, key)) return std::nullopt;
  const json& v = o.at(key);
  if (v.is_number_integer()) return v.get<int64_t>();
  if (v.is_number_float()) {
    const double d = v.get<double>();
    if (std::isfinite(d) && d == std::floor(d) && std::fabs(d) < 9.0e15)
      return static_cast<int64_t>(d);
  }
  fail("{}{} must be an integer, got {}", prefix, key,
       v.is_number_float() ? fmt::format("{}", v.get<double>()) : v.dump());  // nan, not null
}

std::vector<double> get_list(const json& o, const char* key, const std::string& prefix) {
  if (!present(o, key)) fail("{}{} is required for rope_type longrope", prefix, key);
  const json& v = o.at(key);
  if (!v.is_array()) fail("{}{} must be a list of numbers, got {}", prefix, key, v.dump());
  std::vector<double> out;
  for (size_t i = 0; i < v.size(); ++i) {
    if (!v[i].is_number()) fail("{}{}[{}] must be a number, got {}", prefix, key, i, v[i].dump());
    out.push_back(v[i].get<double>());
  }
  return out;
}

// Two sources for one setting: the first wins; a disagreement is a warning.
template <typename T>
std::optional<T> first_of(std::optional<T> a, const std::string& a_name, std::optional<T> b,
                          const std::string& b_name, std::vector<std::string>* warnings) {
  if (a && b && *a != *b && warnings)
    warnings->push_back(
        fmt::format("{} = {} and {} = {} disagree; using {}", a_name, *a, b_name, *b, a_name));
  return a ? a : b;
}

constexpr int64_t max_config_head_dim = int64_t{1} << 20;
constexpr int64_t max_config_length = int64_t{1} << 53;

// The scaling block's type name ("default" when there is no block or no name).
std::string scaling_type_name(const json& rs) {
  for (const char* key : {"rope_type", "type"})
    if (present(rs, key) && rs.at(key).is_string()) return rs.at(key).get<std::string>();
  return "default";
}

// The transformers model class of a config: model_type, else the first architecture's name
// mapped to its model_type for the classes posenc distinguishes ("" when neither says).
std::string model_class(const json& j) {
  if (present(j, "model_type") && j.at("model_type").is_string())
    return j.at("model_type").get<std::string>();
  if (present(j, "architectures") && j.at("architectures").is_array())
    for (const auto& a : j.at("architectures")) {
      if (!a.is_string()) continue;
      auto n = a.get<std::string>();  // not const: the return moves it
      if (n.rfind("Llama", 0) == 0) return "llama";
      if (n.rfind("GPTNeoX", 0) == 0) return "gpt_neox";
      if (n.rfind("Phi3", 0) == 0) return "phi3";
      return n;
    }
  return "";
}

// Model classes whose rotary embedding applies partial_rotary_factor (rotary_pct) for the
// default type.
bool applies_partial(const std::string& model_type) {
  static const std::set<std::string> known = {"gpt_neox", "gpt_neox_japanese", "phi3",     "phi",
                                              "phimoe",   "stablelm",          "persimmon"};
  return known.count(model_type) > 0;
}

// The keys of a per-layer-type rope_parameters block whose values are objects.
std::vector<std::string> nested_types(const json& rp) {
  std::vector<std::string> out;
  if (rp.is_object())
    for (auto it = rp.begin(); it != rp.end(); ++it)
      if (it.value().is_object()) out.push_back(it.key());
  return out;
}

// Multimodal configs (Gemma 3, Llama 4, Qwen2-VL) keep the language model's keys in
// text_config: used when the top level has no head size of its own.
// The decoder's part of a config, as transformers' get_text_config(decoder=True) finds it: a
// text_config object when there is one (whatever the top level also holds: Voxtral's and Music
// Flamingo's top levels carry an audio tower's sizes), else the config itself.
const json& text_part(const json& j) {
  if (present(j, "text_config") && j.at("text_config").is_object()) return j.at("text_config");
  return j;
}

// Why a config's model applies no RoPE at all although its class has a rotary embedding ("" when
// it does apply it): position_embedding_type other than "rotary" / "rope" (ESM's default is
// "absolute", Granite 4 hybrid's null), Zamba2's use_mem_rope false (its default). A key the
// config leaves out takes its class's default (transformers c49429ed).
std::string rope_switched_off(const json& j) {
  const std::string mt = model_class(j);
  if (j.contains("position_embedding_type") || mt == "esm" || mt == "granitemoehybrid") {
    json v = j.contains("position_embedding_type") ? j.at("position_embedding_type")
             : mt == "esm"                         ? json("absolute")
                                                   : json(nullptr);
    if (!(v.is_string() && (v.get<std::string>() == "rotary" || v.get<std::string>() == "rope")))
      return fmt::format("position_embedding_type is {}{}, not \"rotary\" / \"rope\"", v.dump(),
                         j.contains("position_embedding_type") ? "" : " (the class default)");
  }
  if (mt == "zamba2") {
    const bool on = j.contains("use_mem_rope") && j.at("use_mem_rope").is_boolean() &&
                    j.at("use_mem_rope").get<bool>();
    if (!on)
      return fmt::format("use_mem_rope is {}", j.contains("use_mem_rope")
                                                   ? j.at("use_mem_rope").dump()
                                                   : "false (the class default)");
  }
  return "";
}

// Model classes whose rotary embedding posenc does not model, found by the sweep of every
// rotary model type (tests/golden/transformers/sweep.json, transformers c49429ed): reading
// them as a plain RoPE would give wrong numbers without a word, so they are refused by name.
const char* unmodelled_rotary(const std::string& mt) {
  static const std::map<std::string, const char*> table = {
      {"cosmos3_edge_text",
       "Cosmos3EdgeTextRotaryEmbedding keeps three inv_freq tables of head_dim / 2 (one per "
       "M-RoPE axis, 3 x 64 at head_dim 128), not one"},
      {"ernie4_5_vl_moe_text",
       "Ernie4_5_VLMoeTextRotaryEmbedding spreads its frequencies over the three M-RoPE axes in "
       "its own order (pair 21 gets 1.8e-4 where plain RoPE has 1.3e-2)"},
      {"xcodec2",
       "Xcodec2's attention rotates by the head index (arange(num_heads)), not by the token's "
       "position"},
      {"minimax_m3_vl_text",
       "MiniMaxM3VLRotaryEmbedding rotates head_dim * partial_rotary_factor dimensions and "
       "ignores the config's rotary_dim, so the file names two different widths"},
  };
  auto it = table.find(mt);
  return it == table.end() ? nullptr : it->second;
}

bool is_gemma2(const std::string& mt) {
  return mt == "gemma2";
}
bool is_gemma3(const std::string& mt) {
  return mt == "gemma3" || mt == "gemma3_text";
}

// The text part of a config with every key its transformers class supplies filled in (a
// text_config that names no model_type is given its composite's text class, as transformers
// does).
// transformers' attribute_map of the classes that store a RoPE key under another name (the
// sweep's classes at c49429ed): {model_type, the name transformers reads, the stored name}.
struct attribute_alias {
  const char* model_type;
  const char* key;
  const char* stored;
};
constexpr attribute_alias kAttributeMap[] = {
    {"bamba", "layer_types", "layers_block_type"},
    {"falcon_h1", "layer_types", "layers_block_type"},
    {"dbrx", "num_attention_heads", "n_heads"},
    {"dbrx", "hidden_size", "d_model"},
    {"dbrx", "num_hidden_layers", "n_layers"},
    {"dbrx", "max_position_embeddings", "max_seq_len"},
    {"glm4_moe_lite", "head_dim", "qk_rope_head_dim"},
    {"jetmoe", "head_dim", "kv_channels"},
    {"moonshine", "num_key_value_heads", "decoder_num_key_value_heads"},
    {"moonshine", "num_attention_heads", "decoder_num_attention_heads"},
    {"moonshine", "num_hidden_layers", "decoder_num_hidden_layers"},
    {"recurrent_gemma", "sliding_window", "attention_window_size"},
};

// The config with each aliased key under the name transformers reads (the stored name stays).
json with_attribute_map(const json& t) {
  if (!present(t, "model_type") || !t.at("model_type").is_string()) return t;
  const std::string mt = t.at("model_type").get<std::string>();
  json out = t;
  for (const auto& a : kAttributeMap)
    if (mt == a.model_type && !present(out, a.key) && present(out, a.stored))
      out[a.key] = out.at(a.stored);
  return out;
}

json filled(const json& config, bool layers, std::vector<std::string>* notes) {
  const json& t0 = text_part(config);
  std::string outer;
  if (&t0 != &config && present(config, "model_type") && config.at("model_type").is_string())
    outer = config.at("model_type").get<std::string>();
  const json t = with_attribute_map(t0);
  json j = hf_apply_class_defaults(t, outer, layers, notes);
  if (!present(j, "model_type") && !outer.empty())
    if (const hf_class_defaults* d = hf_class_defaults_for(outer + "_text"))
      j["model_type"] = d->model_type;
  return j;
}

// The plan's layer types (p.layer_types, p.types, p.source) from layer_types,
// sliding_window_pattern, the Gemma 2 / Gemma 3 defaults, rope_parameters or
// rope_local_base_freq.
void plan_layer_types(const json& j, const std::string& mt, std::optional<int64_t> n_layers,
                      int64_t L, bool stated_types, rope_layer_plan& p) {
  // Layer types: layer_types, else sliding_window_pattern (Gemma 3: every pattern-th layer is
  // global, the others sliding), else Gemma 3's default pattern 6, else Gemma 2's alternation
  // (even layers sliding, odd global).
  if (present(j, "layer_types")) {
    const json& lt = j.at("layer_types");
    if (!lt.is_array()) fail("layer_types must be a list of strings, got {}", lt.dump());
    for (size_t i = 0; i < lt.size(); ++i) {
      if (!lt[i].is_string()) fail("layer_types[{}] must be a string, got {}", i, lt[i].dump());
      p.layer_types.push_back(lt[i].get<std::string>());
    }
    if (n_layers && static_cast<int64_t>(p.layer_types.size()) != L)
      fail("layer_types must have num_hidden_layers = {} entries, got {}", L, p.layer_types.size());
    p.source = "layer_types";
    if (!stated_types) {
      if (const hf_class_defaults* d = hf_class_defaults_for(mt))
        p.source = fmt::format("{}'s default pattern ({}, period {}; transformers c49429ed)",
                               d->class_name, hf_layer_pattern_name(d->pattern), d->pattern_period);
      else if (mt == "olmo3")
        p.source = "Olmo3Config's default pattern (every 4th layer full; transformers 008e5743)";
    }
  } else if (present(j, "sliding_window_pattern") || (is_gemma3(mt) && n_layers)) {
    const int64_t pattern = get_int(j, "sliding_window_pattern", "").value_or(6);
    if (pattern < 1) fail("sliding_window_pattern must be >= 1, got {}", pattern);
    // Without num_hidden_layers the two types are still known (a layer-type query needs no
    // more); which layer has which is not.
    if (!n_layers) p.types = {"sliding_attention", "full_attention"};
    for (int64_t i = 0; i < L; ++i)
      p.layer_types.push_back((i + 1) % pattern != 0 ? "sliding_attention" : "full_attention");
    p.source = fmt::format("sliding_window_pattern = {}{}", pattern,
                           present(j, "sliding_window_pattern") ? "" : " (Gemma 3 default)");
  } else if (is_gemma2(mt) && n_layers) {
    for (int64_t i = 0; i < L; ++i)
      p.layer_types.push_back(i % 2 == 0 ? "sliding_attention" : "full_attention");
    p.source = "gemma2 alternation (even layers sliding)";
  }
  for (const auto& t : p.layer_types)
    if (std::find(p.types.begin(), p.types.end(), t) == p.types.end()) p.types.push_back(t);
  if (present(j, "rope_parameters"))
    for (const auto& t : nested_types(j.at("rope_parameters")))
      if (std::find(p.types.begin(), p.types.end(), t) == p.types.end()) {
        p.types.push_back(t);
        if (p.source.empty()) p.source = "rope_parameters";
      }
  if (p.types.empty() && present(j, "rope_local_base_freq")) {
    p.types = {"sliding_attention", "full_attention"};
    p.source = "rope_local_base_freq";
  }
}

// The plan's NoPE layers (p.rope_layers, p.nope_source) from no_rope_layers or
// no_rope_layer_interval.
void plan_nope_layers(const json& j, const std::string& mt, std::optional<int64_t> n_layers,
                      int64_t L, rope_layer_plan& p) {
  // NoPE layers (SmolLM3, Llama 4): no_rope_layers[i] = 1 means layer i applies RoPE, 0 that it
  // does not; without the list, transformers generates it from no_rope_layer_interval
  // (default 4): layer i is NoPE when (i + 1) % interval == 0. Only these two model classes
  // (and configs that name a list or an interval) have NoPE layers.
  const bool nope_class = mt == "smollm3" || mt == "llama4" || mt == "llama4_text";
  std::optional<int64_t> interval = get_int(j, "no_rope_layer_interval", "");
  if (!interval) interval = get_int(j, "nope_layer_interval", "");
  if (present(j, "no_rope_layers") &&
      !(j.at("no_rope_layers").is_array() && j.at("no_rope_layers").empty())) {
    const json& nl = j.at("no_rope_layers");
    if (!nl.is_array()) fail("no_rope_layers must be a list of 0 / 1, got {}", nl.dump());
    if (n_layers && static_cast<int64_t>(nl.size()) != L)
      fail("no_rope_layers must have num_hidden_layers = {} entries, got {}", L, nl.size());
    for (size_t i = 0; i < nl.size(); ++i) {
      if (!nl[i].is_number_integer() && !nl[i].is_boolean())
        fail("no_rope_layers[{}] must be 0 or 1, got {}", i, nl[i].dump());
      const int64_t v = nl[i].is_boolean() ? nl[i].get<bool>() : nl[i].get<int64_t>();
      if (v != 0 && v != 1) fail("no_rope_layers[{}] must be 0 or 1, got {}", i, v);
      p.rope_layers.push_back(v == 1);
    }
    p.nope_source = "no_rope_layers (1 = RoPE, 0 = NoPE)";
  } else if (interval || (nope_class && n_layers)) {
    const int64_t iv = interval.value_or(4);
    if (iv < 1) fail("no_rope_layer_interval must be >= 1, got {}", iv);
    if (!n_layers)
      fail(
          "no_rope_layer_interval = {} says which layers are NoPE only with num_hidden_layers, "
          "which this config (model_type '{}', no class default known) does not give",
          iv, mt);
    for (int64_t i = 0; i < L; ++i) p.rope_layers.push_back((i + 1) % iv != 0);
    p.nope_source =
        fmt::format("no_rope_layer_interval = {}{}", iv, interval ? "" : " (transformers default)");
  }
}

// The NoPE layers an attention class implies (p.rope_layers, p.nope_source) when no list or
// interval named them and the layer types are known.
void plan_class_nope_layers(const json& j, const std::string& mt, rope_layer_plan& p) {
  // Layers whose attention class does not rotate q and k although the model has a rotary
  // embedding (read from the attention classes, transformers c49429ed; each found by the sweep,
  // tests/golden/transformers/sweep.json, running the class's own layers):
  //   cohere2, cohere2_moe   rotate only a layer that has a sliding window, that is a
  //             sliding_attention layer of a config whose sliding_window is not null (Command
  //             R7B's full layers have no position at all). Cohere2MoeAttention also rotates a
  //             layer whose MLP is dense when prefix_dense_sliding_window_pattern is 1
  //             (force_rope; mlp_layer_types, else dense for the first first_k_dense_replace);
  //   exaone4, exaone_moe    rotate every layer when sliding_window is null, else only the
  //             sliding_attention layers ("global NoPE for hybrid attention", EXAONE 4.0);
  //   afmoe     AfmoeAttention rotates only its sliding_attention layers, whatever the window;
  //   any model a linear_attention layer (Qwen3-Next, Qwen 3.5, MiniMax, Granite 4 hybrid): a
  //             linear (recurrent) mixer, no softmax attention and no RoPE.
  // A sliding_window left out is the class default (4096 in each), not null.
  if (p.rope_layers.empty() && !p.layer_types.empty()) {
    const bool windowed = !(j.contains("sliding_window") && j.at("sliding_window").is_null());
    const bool cohere = mt == "cohere2" || mt == "cohere2_moe";
    const bool exaone = mt == "exaone4" || mt == "exaone_moe";
    std::vector<bool> force(p.layer_types.size(), false);
    if (mt == "cohere2_moe" &&
        get_int(j, "prefix_dense_sliding_window_pattern", "").value_or(1) == 1) {
      if (present(j, "mlp_layer_types") && j.at("mlp_layer_types").is_array()) {
        const json& ml = j.at("mlp_layer_types");
        for (size_t i = 0; i < ml.size() && i < force.size(); ++i)
          force[i] = ml[i].is_string() && ml[i].get<std::string>() == "dense";
      } else {
        const int64_t k = get_int(j, "first_k_dense_replace", "").value_or(0);
        for (size_t i = 0; i < force.size(); ++i) force[i] = static_cast<int64_t>(i) < k;
      }
    }
    const bool linear = std::find(p.layer_types.begin(), p.layer_types.end(), "linear_attention") !=
                        p.layer_types.end();
    if (cohere || (exaone && windowed) || mt == "afmoe" || linear) {
      for (size_t i = 0; i < p.layer_types.size(); ++i) {
        const std::string& t = p.layer_types[i];
        bool rope = t != "linear_attention";
        if (cohere) rope = (windowed && t == "sliding_attention") || force[i];
        if (exaone || mt == "afmoe") rope = t == "sliding_attention";
        p.rope_layers.push_back(rope);
      }
      if (cohere || exaone || mt == "afmoe") {
        const char* cls = mt == "cohere2"       ? "Cohere2Attention"
                          : mt == "cohere2_moe" ? "Cohere2MoeAttention"
                          : mt == "exaone4"     ? "Exaone4Attention"
                          : mt == "exaone_moe"  ? "ExaoneMoeAttention"
                                                : "AfmoeAttention";
        p.nope_source = fmt::format(
            "{} rotates only its sliding_attention layers{}{} (transformers c49429ed)", cls,
            cohere && !windowed ? ", and sliding_window is null: none" : "",
            mt == "cohere2_moe" ? " and those it forces (dense MLP, prefix pattern 1)" : "");
      } else {
        p.nope_source = "linear_attention layers: a linear mixer, no RoPE";
      }
    }
  }
}

// The head dim of the layers of type layer_type when they have their own (nullopt when they take
// the config's head_dim).
std::optional<int64_t> layer_type_head_dim(const json& j, const rope_layer_plan& plan,
                                           const std::string& layer_type,
                                           std::vector<std::string>* warnings) {
  // Gemma 4: global layers may have their own head dim: per_layer_config (transformers 5's
  // saved form: {"<layer index>": {"head_dim": ..}}), else global_head_dim, else the class's
  // default 512 (Gemma4TextConfig and the classes built on it pop global_head_dim with 512).
  const std::string mt = model_class(j);
  std::optional<int64_t> layer_head_dim;
  if (present(j, "per_layer_config")) {
    const json& plc = j.at("per_layer_config");
    if (!plc.is_object())
      fail("per_layer_config must be an object of layer index -> overrides, got {}", plc.dump());
    // One pass over the overrides ({"<layer index>": {...}}, the index as transformers' int()
    // reads it): the head_dim of each layer of this type that has one.
    std::set<int64_t> dims;
    size_t overridden = 0;
    for (auto it = plc.begin(); it != plc.end(); ++it) {
      char* end = nullptr;
      const long long k = std::strtoll(it.key().c_str(), &end, 10);
      if (it.key().empty() || *end != '\0' || k < 0 ||
          static_cast<size_t>(k) >= plan.layer_types.size())
        fail("per_layer_config keys must be layer indices in [0, {}), got '{}'",
             plan.layer_types.size(), it.key());
      if (plan.layer_types[static_cast<size_t>(k)] != layer_type ||
          !present(it.value(), "head_dim"))
        continue;
      dims.insert(get_int(it.value(), "head_dim", "per_layer_config.").value());
      ++overridden;
    }
    const auto of_type = static_cast<size_t>(
        std::count(plan.layer_types.begin(), plan.layer_types.end(), layer_type));
    const bool some_plain = overridden < of_type;
    if (dims.size() > 1 || (dims.size() == 1 && some_plain))
      fail(
          "per_layer_config gives the {} layers different head_dim values ({}{}); posenc reads one "
          "RoPE per layer type",
          layer_type, fmt::join(dims, ", "), some_plain ? " and the top-level one" : "");
    if (dims.size() == 1) layer_head_dim = *dims.begin();
  } else if (layer_type == "full_attention" && present(j, "global_head_dim")) {
    layer_head_dim = get_int(j, "global_head_dim", "");
  } else if (layer_type == "full_attention" &&
             (mt == "gemma4_text" || mt == "gemma4_unified_text" || mt == "diffusion_gemma_text")) {
    layer_head_dim = 512;
    warnings->push_back(fmt::format(
        "global_head_dim is missing; took transformers' {} default 512 for the full_attention "
        "layers (transformers c49429ed)",
        mt));
  }
  return layer_head_dim;
}

rope_config config_from_view(const json& j, std::vector<std::string>* warnings);

}  // namespace

rope_layer_plan hf_layer_plan(const nlohmann::json& config) {
  if (!config.is_object()) fail("config must be a JSON object, got {}", config.type_name());
  rope_layer_plan p;
  const bool stated_types = present(with_attribute_map(text_part(config)), "layer_types");
  const json j = filled(config, true, &p.defaults);
  const std::string mt = model_class(j);
  const auto n_layers = get_int(j, "num_hidden_layers", "");
  if (n_layers && (*n_layers < 0 || *n_layers > (int64_t{1} << 20)))
    fail("num_hidden_layers must be in [0, 2^20], got {}", *n_layers);
  const int64_t L = n_layers.value_or(0);

  plan_layer_types(j, mt, n_layers, L, stated_types, p);
  plan_nope_layers(j, mt, n_layers, L, p);
  plan_class_nope_layers(j, mt, p);

  if (const std::string off = rope_switched_off(j); !off.empty() && L > 0) {
    p.rope_layers.assign(static_cast<size_t>(L), false);
    p.nope_source = off + ": no layer applies RoPE";
  } else if (mt == "xcodec2" && L > 0) {
    p.rope_layers.assign(static_cast<size_t>(L), false);
    p.nope_source = "Xcodec2 rotates by the head index, not by the token's position";
  }

  // Llama 4's attention temperature tuning on NoPE layers.
  if (present(j, "attn_temperature_tuning")) {
    const json& t = j.at("attn_temperature_tuning");
    if (t.is_boolean())
      p.temperature_tuning = t.get<bool>();
    else if (t.is_number())
      p.temperature_tuning = t.get<double>() != 0;  // older Llama 4 configs wrote an int
    else
      fail("attn_temperature_tuning must be true or false, got {}", t.dump());
  } else {
    p.temperature_tuning = mt == "llama4" || mt == "llama4_text";  // transformers' default
  }
  p.floor_scale = get_number(j, "floor_scale", "").value_or(8192.0);
  p.attn_scale = get_number(j, "attn_scale", "").value_or(0.1);
  if (p.floor_scale <= 0) fail("floor_scale must be > 0, got {}", p.floor_scale);
  return p;
}

rope_config rope_config_from_json(const nlohmann::json& config, const std::string& layer_type,
                                  std::vector<std::string>* warnings) {
  if (!config.is_object()) fail("config must be a JSON object, got {}", config.type_name());
  std::vector<std::string> local;
  if (!warnings) warnings = &local;
  const json j = filled(config, !layer_type.empty(), warnings);
  if (layer_type.empty()) return config_from_view(j, warnings);
  const auto plan = hf_layer_plan(j);
  if (std::find(plan.types.begin(), plan.types.end(), layer_type) == plan.types.end()) {
    if (plan.types.empty())
      fail(
          "layer type '{}': this config has no per-layer-type RoPE (no layer_types, "
          "sliding_window_pattern, rope_local_base_freq or per-layer-type rope_parameters); "
          "omit the layer type",
          layer_type);
    fail("layer type must be one of {}, got '{}'", fmt::join(plan.types, ", "), layer_type);
  }
  // A view of the config with one plain RoPE block, read by the one-configuration reader.
  json view = j;
  view.erase("rope_local_base_freq");
  const json* rp = present(j, "rope_parameters") ? &j.at("rope_parameters") : nullptr;
  const bool nested = rp && rp->is_object() && !nested_types(*rp).empty();
  std::string where;
  if (nested) {
    if (!rp->contains(layer_type) || !rp->at(layer_type).is_object())
      fail("rope_parameters has no block for layer type '{}' (it has {})", layer_type,
           fmt::join(nested_types(*rp), ", "));
    json block = rp->at(layer_type);
    // A block without rope_theta: Gemma 3's sliding layers take rope_local_base_freq, the
    // others the top-level rope_theta (as transformers' standardisation fills them in).
    if (!present(block, "rope_theta")) {
      if (layer_type == "sliding_attention" && present(j, "rope_local_base_freq"))
        block["rope_theta"] = j.at("rope_local_base_freq");
      else if (present(j, "rope_theta"))
        block["rope_theta"] = j.at("rope_theta");
    }
    view.erase("rope_scaling");
    view["rope_parameters"] = block;
    where = "rope_parameters." + layer_type + ".";
  } else if (layer_type == "sliding_attention" && present(j, "rope_local_base_freq")) {
    // Gemma 3 legacy keys: sliding layers use rope_local_base_freq with no scaling;
    // rope_theta and rope_scaling belong to the global layers.
    view.erase("rope_scaling");
    view.erase("rope_parameters");
    view["rope_theta"] = j.at("rope_local_base_freq");
  }
  const std::optional<int64_t> layer_head_dim = layer_type_head_dim(j, plan, layer_type, warnings);
  if (layer_head_dim) view["head_dim"] = *layer_head_dim;
  try {
    return config_from_view(view, warnings);
  } catch (const invalid_argument& e) {
    std::string m = e.what();
    if (!where.empty())
      for (size_t p = m.find("rope_parameters."); p != std::string::npos;
           p = m.find("rope_parameters.", p + where.size()))
        m.replace(p, 16, where);
    throw invalid_argument(fmt::format("layer type {}: {}", layer_type, m));
  }
}

std::optional<rope_layout> hf_rope_layout(const nlohmann::json& config) {
  if (!config.is_object()) return std::nullopt;
  const std::string mt = model_class(config);
  if (mt.empty()) return std::nullopt;
  // A swept model type: as the sweep measured its rotation (hf_swept_rotation_interleaved);
  // the two older classes whose RoPE is computed inside the attention (no rotary module to
  // sweep) by hand: GPT-J and CodeGen rotate adjacent pairs.
  if (hf_swept_model_type(mt))
    return hf_swept_rotation_interleaved(mt) ? rope_layout::interleaved : rope_layout::half;
  static const std::set<std::string> interleaved = {"gptj", "codegen"};
  return interleaved.count(mt) ? rope_layout::interleaved : rope_layout::half;
}

rope_config rope_config_from_json(const nlohmann::json& config,
                                  std::vector<std::string>* warnings) {
  if (!config.is_object()) fail("config must be a JSON object, got {}", config.type_name());
  std::vector<std::string> local;
  if (!warnings) warnings = &local;
  return config_from_view(filled(config, false, warnings), warnings);
}

namespace {

// Reads one plain RoPE configuration (a text part with its class defaults filled in, or a
// per-layer-type view of one), one group of keys per method, in this order.
class view_reader {
 public:
  view_reader(const json& j, std::vector<std::string>* warnings) : j(j), warnings(warnings) {}
  rope_config read() {
    select_block();
    read_theta();
    read_head_dim();
    read_rotary_width();
    read_lengths();
    if (!has_block) {
      rope_validate(c);
      return c;
    }
    read_type_and_factor();
    read_type_params();
    validate_block();
    return c;
  }

 private:
  void select_block();          // rope_parameters or rope_scaling (rs, px), nested blocks refused
  void read_theta();            // rope_theta, rotary_emb_base
  void read_head_dim();         // qk_rope_head_dim, head_dim, hidden_size / heads
  void read_rotary_width();     // partial_rotary_factor, rotary_pct, rotary_dim, proportional
  void read_lengths();          // max_position_embeddings, original_max_position_embeddings
  void read_type_and_factor();  // rope_type, mrope_section, factor
  void read_type();             // rope_type or type, and the class rules on it
  void read_mrope_section();    // mrope_section, mrope_interleaved
  void read_factor();           // factor, or max / original max position embeddings
  void read_type_params();      // yarn, longrope and llama3 parameters
  void validate_block();        // unused keys, then rope_validate with the block's key names

  const json& j;
  std::vector<std::string>* warnings;
  rope_config c;
  const json empty = json::object();
  const json* rs = &empty;  // the scaling block (empty when the config has none)
  std::string px;           // its key with a dot ("rope_parameters."), "" when none
  bool has_block = false;
  bool mla_rope_head = false;   // head_dim is MLA's qk_rope_head_dim
  std::set<std::string> known;  // the block's keys the rope type reads
  std::string tn;               // the rope type's name
};

void view_reader::select_block() {
  if (present(j, "rope_local_base_freq"))
    warnings->push_back(
        "rope_local_base_freq is the sliding layers' base; this is the full_attention "
        "configuration (choose one with a layer type)");
  // The scaling block: rope_parameters (newer) wins over rope_scaling.
  if (present(j, "rope_parameters")) {
    rs = &j.at("rope_parameters");
    px = "rope_parameters.";
    if (present(j, "rope_scaling"))
      warnings->push_back(
          "both rope_parameters and rope_scaling are present; using "
          "rope_parameters");
  } else if (present(j, "rope_scaling")) {
    rs = &j.at("rope_scaling");
    px = "rope_scaling.";
  }
  if (!rs->is_object())
    fail("{} must be an object, got {}", px.substr(0, px.size() - 1), rs->dump());
  has_block = !px.empty();
  if (has_block && !present(*rs, "type") && !present(*rs, "rope_type")) {
    for (auto it = rs->begin(); it != rs->end(); ++it)
      if (it.value().is_object())
        fail(
            "{}{} is a per-layer-type block ({}{} is an object); choose a layer type (one of "
            "{}; posenc rope freqs --layer-type)",
            px, it.key(), px, it.key(), fmt::join(nested_types(*rs), ", "));
  }
}

void view_reader::read_theta() {
  auto theta = first_of(get_number(*rs, "rope_theta", px), px + "rope_theta",
                        get_number(j, "rope_theta", ""), "rope_theta", warnings);
  theta = first_of(theta, "rope_theta", get_number(j, "rotary_emb_base", ""), "rotary_emb_base",
                   warnings);
  c.theta = theta.value_or(10000.0);
}

void view_reader::read_head_dim() {
  // head_dim: MLA's rotary head (qk_rope_head_dim) > head_dim > hidden_size / heads. Every
  // size read from a config is bounded before it sizes anything (a head_dim of 10^9 would
  // otherwise allocate and compute 5 * 10^8 frequencies).
  if (auto q = get_int(j, "qk_rope_head_dim", "")) {
    c.head_dim = *q;
    if (c.head_dim < 2 || c.head_dim > max_config_head_dim)
      fail("qk_rope_head_dim must be in [2, {}], got {}", max_config_head_dim, c.head_dim);
    mla_rope_head = true;
  } else if (auto h = get_int(j, "head_dim", "")) {
    c.head_dim = *h;
  } else {
    auto hs = get_int(j, "hidden_size", "");
    auto nh = get_int(j, "num_attention_heads", "");
    if (!hs || !nh)
      fail(
          "head_dim is missing and cannot be derived: need hidden_size and "
          "num_attention_heads");
    if (*nh <= 0 || *hs <= 0 || *hs % *nh != 0)
      fail(
          "hidden_size ({}) must be a positive multiple of num_attention_heads ({}) to derive "
          "head_dim",
          *hs, *nh);
    c.head_dim = *hs / *nh;
  }
  if (c.head_dim < 2 || c.head_dim > max_config_head_dim)
    fail("head_dim must be in [2, {}], got {}", max_config_head_dim, c.head_dim);
}

void view_reader::read_rotary_width() {
  auto prf =
      first_of(get_number(*rs, "partial_rotary_factor", px), px + "partial_rotary_factor",
               get_number(j, "partial_rotary_factor", ""), "partial_rotary_factor", warnings);
  prf = first_of(prf, "partial_rotary_factor", get_number(j, "rotary_pct", ""), "rotary_pct",
                 warnings);
  if (prf && (*prf <= 0 || *prf > 1)) fail("partial_rotary_factor must be in (0, 1], got {}", *prf);
  if (has_block && scaling_type_name(*rs) == "proportional") {
    // transformers' proportional type (Gemma 4 family): the cos / sin span the full head dim;
    // floor(partial_rotary_factor * head_dim / 2) pairs rotate, the rest get frequency 0.
    if (c.head_dim % 2 != 0)
      fail("head_dim must be even for rope_type proportional, got {}", c.head_dim);
    c.rotary_dim = c.head_dim;
    c.rotated_pairs =
        static_cast<int64_t>(std::floor(static_cast<double>(c.head_dim) * prf.value_or(1.0) / 2.0));
    if (present(j, "rotary_dim"))
      warnings->push_back("rotary_dim is not used by rope_type proportional; ignored");
  }
  const auto full = get_int(j, "head_dim", "");
  if (mla_rope_head && prf && full && *full != c.head_dim && !c.rotated_pairs) {
    // MLA with a partial factor and a full q/k head_dim (Mistral 4, DeepSeek V4): the factor
    // maps head_dim to the rotary head; transformers' rotary takes int(head_dim * factor), which
    // must be qk_rope_head_dim. It is not applied a second time to the rotary head. (DeepSeek V2
    // and V3 set head_dim = qk_rope_head_dim: a factor there applies to the rotary head.)
    const auto r = static_cast<int64_t>(static_cast<double>(*full) * *prf);
    if (r != c.head_dim)
      fail("qk_rope_head_dim ({}) disagrees with head_dim * partial_rotary_factor ({} * {} = {})",
           c.head_dim, *full, *prf, r);
    prf.reset();
  }
  // transformers' width: int(head_dim * partial_rotary_factor), the product of two doubles
  // truncated (MiMo-V2-Flash: 192 * 0.334 = 64.128 gives 64; Moonshine: 36 * 0.9 gives 32).
  const double rd = c.rotated_pairs ? static_cast<double>(c.rotary_dim)
                                    : static_cast<double>(c.head_dim) * prf.value_or(1.0);
  const auto width = static_cast<int64_t>(rd);
  if (width % 2 != 0) {
    if (!prf) fail("head_dim must be an even integer (RoPE rotates pairs), got {}", c.head_dim);
    fail(
        "int(head_dim * partial_rotary_factor) = int({} * {}) = {} must be an even integer (the "
        "rotary width)",
        c.head_dim, *prf, width);
  }
  if (static_cast<double>(width) != rd)
    warnings->push_back(fmt::format(
        "head_dim * partial_rotary_factor = {} * {} = {} is not an integer; rotary_dim = {}, "
        "truncated as transformers does (int())",
        c.head_dim, prf.value_or(1.0), rd, width));
  c.rotary_dim = width;
  // transformers' Llama rotary class computes the default frequencies over head_dim and ignores
  // partial_rotary_factor; GPT-NeoX's and Phi-3's (and the generic scaled types) apply it. For
  // the swept model types, which is measured (hf_swept_ignores_partial).
  if (prf && *prf != 1 && scaling_type_name(*rs) == "default") {
    const std::string mt = model_class(j);
    // (recurrent_gemma: transformers drops the factor, the model rotates half the head; posenc
    // keeps the model's 0.5, tests/python/test_golden_sweep.py's DIVERGES)
    if (mt == "llama" || (hf_swept_ignores_partial(mt) && mt != "recurrent_gemma")) {
      warnings->push_back(fmt::format(
          "model_type {}: transformers' rotary class ignores partial_rotary_factor = {} for "
          "rope_type default (GPT-NeoX and Phi-3 apply it; measured at transformers {}); "
          "rotary_dim = head_dim = {}",
          mt, *prf, hf_swept_commit(), c.head_dim));
      prf.reset();
      c.rotary_dim = c.head_dim;
    } else if (!mt.empty() && !applies_partial(mt) && !hf_swept_model_type(mt)) {
      warnings->push_back(fmt::format(
          "model_type {}: posenc does not know whether this model class applies "
          "partial_rotary_factor = {} for rope_type default; applying it (GPT-NeoX and Phi-3 do, "
          "Llama's class ignores it)",
          mt, *prf));
    }
  }
  if (auto r = c.rotated_pairs ? std::nullopt : get_int(j, "rotary_dim", "")) {
    if (prf && *r != c.rotary_dim)
      fail("rotary_dim ({}) disagrees with head_dim * partial_rotary_factor ({})", *r,
           c.rotary_dim);
    c.rotary_dim = *r;
  }
  if (c.rotary_dim < 2 || c.rotary_dim % 2 || c.rotary_dim > c.head_dim)
    fail("rotary_dim must be even and in [2, head_dim = {}], got {}", c.head_dim, c.rotary_dim);
}

void view_reader::read_lengths() {
  c.max_position_embeddings = get_int(j, "max_position_embeddings", "").value_or(0);
  if (c.max_position_embeddings < 0 || c.max_position_embeddings > max_config_length)
    fail("max_position_embeddings must be in [0, 2^53], got {}", c.max_position_embeddings);
  auto ompe = first_of(get_int(*rs, "original_max_position_embeddings", px),
                       px + "original_max_position_embeddings",
                       get_int(j, "original_max_position_embeddings", ""),
                       "original_max_position_embeddings", warnings);
  c.original_max_position_embeddings = ompe.value_or(0);
  if (c.original_max_position_embeddings < 0 ||
      c.original_max_position_embeddings > max_config_length)
    fail("original_max_position_embeddings must be in [0, 2^53], got {}",
         c.original_max_position_embeddings);
}

void view_reader::read_type_and_factor() {
  read_type();
  known = {"rope_type",     "type",
           "rope_theta",    "partial_rotary_factor",
           "factor",        "original_max_position_embeddings",
           "mrope_section", "mrope_interleaved"};
  read_mrope_section();
  read_factor();
}

// The block's rope_type (or type), with the class rules on it: sets c.type and tn.
void view_reader::read_type() {
  std::optional<std::string> tname;
  for (const char* key : {"rope_type", "type"}) {
    if (!present(*rs, key)) continue;
    if (!rs->at(key).is_string())
      fail("{}{} must be a string, got {}", px, key, rs->at(key).dump());
    std::string v = rs->at(key).get<std::string>();
    // Qwen2-VL's configs name the type "mrope"; transformers reads it as default RoPE with
    // mrope_section (the sections are read below).
    if (v == "mrope") v = "default";
    if (tname && *tname != v)
      fail("{}rope_type ('{}') and {}type ('{}') disagree", px, *tname, px, v);
    tname = v;
  }
  if (!tname) fail("{}rope_type (or {}type) is missing", px, px);
  // Class rules on the type (read from the classes at transformers c49429ed): Phi3Config and
  // Phi4MultimodalConfig read "su" and "yarn" as longrope (backward compatibility) and accept
  // only default and longrope (validate_rope); RecurrentGemmaRotaryEmbedding only default;
  // PhimoeConfig.validate_rope needs short_mscale and long_mscale for any other type.
  const std::string mt = model_class(j);
  const bool phi3 = mt == "phi3" || mt == "phi4_multimodal";
  if (phi3 && *tname == "yarn") {
    warnings->push_back(fmt::format(
        "{}rope_type 'yarn' is read as longrope: transformers' {} class renames it (its "
        "backward compatibility with configs that said yarn for Phi-3's longrope)",
        px, mt));
    tname = "longrope";
  }
  c.type = rope_type_from_name(*tname, px + "rope_type");
  tn = rope_type_name(c.type);
  if (phi3 && c.type != rope_type::default_ && c.type != rope_type::longrope)
    fail("{}rope_type must be default or longrope for model_type {} (transformers' {}), got '{}'",
         px, mt, mt == "phi3" ? "Phi3Config" : "Phi4MultimodalConfig", tn);
  if (mt == "recurrent_gemma" && c.type != rope_type::default_)
    fail(
        "{}rope_type must be default for model_type recurrent_gemma "
        "(RecurrentGemmaRotaryEmbedding supports no other), got '{}'",
        px, tn);
  if (mt == "phimoe" && c.type != rope_type::default_)
    for (const char* k : {"short_mscale", "long_mscale"})
      if (!present(*rs, k) || !rs->at(k).is_number())
        fail("{}{} must be a number for rope_type {} of model_type phimoe (PhimoeConfig), got {}",
             px, k, tn, present(*rs, k) ? rs->at(k).dump() : std::string("nothing"));
}

// M-RoPE's mrope_section and mrope_interleaved, when the block has them.
void view_reader::read_mrope_section() {
  // M-RoPE (Qwen2-VL, Qwen2.5-VL; Qwen3-VL with mrope_interleaved): pairs per position
  // component, checked to sum to rotary_dim / 2. A class whose rotary module has sections of its
  // own (Qwen3-VL, Qwen3.5, GLM-OCR: hf_swept_mrope_default) applies them when the block states
  // none, interleaved or not as the class does when the block does not say.
  std::array<int64_t, 3> class_section{};
  bool class_interleaved = false;
  const std::string mt = model_class(j);
  const bool has_class = hf_swept_mrope_default(mt, &class_section, &class_interleaved);
  const bool given = present(*rs, "mrope_section");
  if (!given && !has_class) return;
  if (given) {
    const json& ms = rs->at("mrope_section");
    if (!ms.is_array()) fail("{}mrope_section must be a list of integers, got {}", px, ms.dump());
    for (size_t i = 0; i < ms.size(); ++i) {
      if (!ms[i].is_number_integer())
        fail("{}mrope_section[{}] must be an integer, got {}", px, i, ms[i].dump());
      c.mrope_section.push_back(ms[i].get<int64_t>());
    }
  } else {
    c.mrope_section.assign(class_section.begin(), class_section.end());
  }
  if (present(*rs, "mrope_interleaved")) {
    if (!rs->at("mrope_interleaved").is_boolean())
      fail("{}mrope_interleaved must be true or false, got {}", px,
           rs->at("mrope_interleaved").dump());
    c.mrope_interleaved = rs->at("mrope_interleaved").get<bool>();
  } else if (has_class) {
    c.mrope_interleaved = class_interleaved;
  }
  if (!given)
    warnings->push_back(fmt::format(
        "{}mrope_section is missing; took transformers' {} rotary default [{}, {}, {}]{} "
        "(measured at transformers {})",
        px, mt, class_section[0], class_section[1], class_section[2],
        c.mrope_interleaved ? ", interleaved" : "", hf_swept_commit()));
  else if (has_class && class_interleaved && !present(*rs, "mrope_interleaved"))
    warnings->push_back(fmt::format(
        "{}mrope_interleaved is missing; transformers' {} rotary interleaves the sections "
        "(measured at transformers {})",
        px, mt, hf_swept_commit()));
  try {
    (void)mrope_components(c.mrope_section, c.mrope_interleaved, c.rotary_dim / 2);
  } catch (const invalid_argument& e) {
    throw invalid_argument(px + e.what());
  }
}

// The block's factor, or the one the lengths imply, as c.type needs it.
void view_reader::read_factor() {
  auto factor = get_number(*rs, "factor", px);
  if (factor && *factor < 1) fail("{}factor must be >= 1, got {}", px, *factor);
  const bool have_ratio = c.max_position_embeddings > 0 && c.original_max_position_embeddings > 0;
  const double ratio = have_ratio ? static_cast<double>(c.max_position_embeddings) /
                                        static_cast<double>(c.original_max_position_embeddings)
                                  : 0.0;
  switch (c.type) {
    case rope_type::default_:
      if (factor && *factor != 1)
        warnings->push_back(
            fmt::format("{}factor = {} is ignored for rope_type default", px, *factor));
      break;
    case rope_type::linear:
    case rope_type::dynamic:
    case rope_type::llama3:
      if (!factor) fail("{}factor is required for rope_type {}", px, tn);
      c.factor = *factor;
      break;
    case rope_type::proportional:
      // transformers reads it with a default of 1.
      c.factor = factor.value_or(1.0);
      break;
    case rope_type::yarn:
    case rope_type::longrope:
      if (factor) {
        // Precedence: an explicit factor wins; say so when the lengths imply another one.
        c.factor = *factor;
        if (have_ratio && std::fabs(ratio - *factor) > 1e-9 * *factor)
          warnings->push_back(fmt::format(
              "{}factor = {} disagrees with max_position_embeddings / "
              "original_max_position_embeddings = {} / {} = {}; using factor = {} (an explicit "
              "factor wins; some implementations use the ratio instead, which for {} changes "
              "the frequencies and the attention factor)",
              px, *factor, c.max_position_embeddings, c.original_max_position_embeddings, ratio,
              *factor, tn));
      } else {
        if (!have_ratio)
          fail(
              "{}factor is missing and cannot be derived: rope_type {} needs factor or both "
              "max_position_embeddings and original_max_position_embeddings",
              px, tn);
        if (ratio < 1)
          fail(
              "max_position_embeddings / original_max_position_embeddings = {} / {} must be "
              ">= 1 when {}factor is absent",
              c.max_position_embeddings, c.original_max_position_embeddings, px);
        c.factor = ratio;
      }
      break;
  }
}

void view_reader::read_type_params() {
  // Hunyuan's NTK alpha: read by the Hunyuan rotary classes only (transformers'
  // HunYuanDenseV1RotaryEmbedding, HunYuanMoEV1RotaryEmbedding); another class's dynamic NTK
  // does not read it, and a 0 means none there too (`if config.rope_scaling["alpha"]`).
  const std::string mt = model_class(j);
  if (c.type == rope_type::dynamic && (mt == "hunyuan_v1_dense" || mt == "hunyuan_v1_moe")) {
    known.insert("alpha");
    if (auto a = get_number(*rs, "alpha", px); a && *a != 0) c.dynamic_alpha = *a;
  }
  // Ministral 3's and Mistral 4's query scale by position (their attention classes read it from
  // rope_parameters whatever the rope_type; transformers' config classes put 0.1 there).
  if (mt == "ministral3" || mt == "mistral4") {
    known.insert("llama_4_scaling_beta");
    const auto b = get_number(*rs, "llama_4_scaling_beta", px);
    if (!b) {
      warnings->push_back(fmt::format(
          "{}llama_4_scaling_beta is missing: transformers' {} attention multiplies its queries "
          "by it and fails on this config; posenc applies no query scale",
          px, mt));
    } else if (!std::isfinite(*b) || *b < 0) {
      fail("{}llama_4_scaling_beta must be finite and >= 0, got {}", px, *b);
    } else if (*b > 0 && c.original_max_position_embeddings <= 0) {
      warnings->push_back(fmt::format(
          "{}llama_4_scaling_beta = {} without original_max_position_embeddings (its positions "
          "per step): transformers' {} attention fails on this config; posenc applies no query "
          "scale",
          px, *b, mt));
    } else {
      c.llama_4_scaling_beta = *b;
      c.llama_4_scaling_floor = c.original_max_position_embeddings;
    }
  }
  if (c.type == rope_type::yarn) {
    known.insert(
        {"beta_fast", "beta_slow", "truncate", "attention_factor", "mscale", "mscale_all_dim"});
    // HF reads beta_fast / beta_slow with `or` defaults: a 0 or null means the default.
    if (auto b = get_number(*rs, "beta_fast", px); b && *b != 0) c.beta_fast = *b;
    if (auto b = get_number(*rs, "beta_slow", px); b && *b != 0) c.beta_slow = *b;
    if (present(*rs, "truncate")) {
      if (!rs->at("truncate").is_boolean())
        fail("{}truncate must be true or false, got {}", px, rs->at("truncate").dump());
      c.truncate = rs->at("truncate").get<bool>();
    }
    c.attention_factor = get_number(*rs, "attention_factor", px);
    c.mscale = get_number(*rs, "mscale", px);
    c.mscale_all_dim = get_number(*rs, "mscale_all_dim", px);
    if (c.attention_factor && (c.mscale || c.mscale_all_dim))
      warnings->push_back(
          fmt::format("{}attention_factor = {} is given, so mscale / mscale_all_dim are not used",
                      px, *c.attention_factor));
    else if (static_cast<bool>(c.mscale) != static_cast<bool>(c.mscale_all_dim))
      warnings->push_back(fmt::format(
          "{}{} is given without {}; following HF, the attention factor is 0.1 ln(factor) + 1 "
          "(DeepSeek's reference code would use get_mscale(factor, mscale) / "
          "get_mscale(factor, mscale_all_dim) with defaults 1 and 0)",
          px, c.mscale ? "mscale" : "mscale_all_dim", c.mscale ? "mscale_all_dim" : "mscale"));
    if (c.original_max_position_embeddings == 0)
      warnings->push_back(fmt::format(
          "{}original_max_position_embeddings is absent; yarn uses max_position_embeddings = "
          "{} as the original context",
          px, c.max_position_embeddings));
  } else if (c.type == rope_type::longrope) {
    known.insert({"short_factor", "long_factor", "attention_factor"});
    c.short_factor = get_list(*rs, "short_factor", px);
    c.long_factor = get_list(*rs, "long_factor", px);
    const size_t half = static_cast<size_t>(c.rotary_dim / 2);
    for (const auto* l : {&c.short_factor, &c.long_factor})
      if (l->size() != half)
        fail("{}{} must have rotary_dim/2 = {} entries, got {}", px,
             l == &c.short_factor ? "short_factor" : "long_factor", half, l->size());
    c.attention_factor = get_number(*rs, "attention_factor", px);
    if (c.original_max_position_embeddings == 0)
      warnings->push_back(
          "original_max_position_embeddings is absent; longrope switches to "
          "long_factor beyond max_position_embeddings");
  } else if (c.type == rope_type::llama3) {
    known.insert({"low_freq_factor", "high_freq_factor"});
    auto lo = get_number(*rs, "low_freq_factor", px);
    auto hi = get_number(*rs, "high_freq_factor", px);
    if (!lo) fail("{}low_freq_factor is required for rope_type llama3", px);
    if (!hi) fail("{}high_freq_factor is required for rope_type llama3", px);
    c.low_freq_factor = *lo;
    c.high_freq_factor = *hi;
    if (c.original_max_position_embeddings == 0)
      fail("{}original_max_position_embeddings is required for rope_type llama3", px);
  }
}

void view_reader::validate_block() {
  for (auto it = rs->begin(); it != rs->end(); ++it)
    if (!known.count(it.key()))
      warnings->push_back(
          fmt::format("{}{} is not used by rope_type {}; ignored", px, it.key(), tn));

  // Validation with the block's key names in the messages.
  try {
    rope_validate(c);
  } catch (const invalid_argument& e) {
    std::string m = e.what();
    if (px != "rope_scaling.") {
      for (size_t p = m.find("rope_scaling."); p != std::string::npos;
           p = m.find("rope_scaling.", p + px.size()))
        m.replace(p, 13, px);
    }
    throw invalid_argument(m);
  }
}

rope_config config_from_view(const json& j, std::vector<std::string>* warnings) {
  std::vector<std::string> local;
  const std::string mt = model_class(j);
  if (const std::string off = rope_switched_off(j); !off.empty())
    fail(
        "model_type '{}': {}: the model applies no RoPE (its layers get no position from a "
        "rotary embedding); nothing to read",
        mt, off);
  if (const char* why = unmodelled_rotary(mt))
    fail(
        "model_type '{}': posenc does not model this class's RoPE ({}); refused rather than "
        "read as a plain RoPE (transformers c49429ed)",
        mt, why);
  return view_reader(j, warnings ? warnings : &local).read();
}

}  // namespace

hf_dca_config hf_dca_config_from_json(const nlohmann::json& config,
                                      std::vector<std::string>* warnings) {
  hf_dca_config out;
  const json* c = nullptr;
  for (const json* j : {&config, config.contains("text_config") ? &config["text_config"] : nullptr})
    if (j && j->is_object() && j->contains("dual_chunk_attention_config") &&
        !(*j)["dual_chunk_attention_config"].is_null()) {
      c = &(*j)["dual_chunk_attention_config"];
      break;
    }
  if (!c) return out;
  if (!c->is_object())
    fail("dual_chunk_attention_config must be an object with chunk_size and local_size, got {}",
         c->dump());
  auto integer = [&](const char* key, bool required) -> int64_t {
    if (!c->contains(key) || (*c)[key].is_null()) {
      if (required) fail("dual_chunk_attention_config.{} is missing", key);
      return -1;
    }
    const json& v = (*c)[key];
    if (!v.is_number() || v.get<double>() < 0 || v.get<double>() != std::floor(v.get<double>()) ||
        v.get<double>() > 0x1p40)
      fail("dual_chunk_attention_config.{} must be an integer in [0, 2^40], got {}", key, v.dump());
    return static_cast<int64_t>(v.get<double>());
  };
  out.present = true;
  out.chunk_size = integer("chunk_size", true);
  out.local_size = integer("local_size", true);
  if (out.chunk_size < 1 || out.local_size >= out.chunk_size)
    fail(
        "dual_chunk_attention_config needs 0 <= local_size < chunk_size (chunks of chunk_size - "
        "local_size >= 1 positions), got chunk_size {} and local_size {}",
        out.chunk_size, out.local_size);
  const int64_t L0 = integer("original_max_position_embeddings", false);
  if (L0 < 0 && warnings)
    warnings->push_back(
        "dual_chunk_attention_config has no original_max_position_embeddings: no length scaling "
        "of the scores (vLLM's prefill needs the key)");
  out.original_max_position_embeddings = std::max<int64_t>(L0, 0);
  return out;
}

namespace {

// Python's json module writes a non-finite float as NaN, Infinity or -Infinity (allow_nan, its
// default, and so transformers' save_pretrained), tokens JSON has no literal for. Outside
// strings, each becomes a marker string here, and the parsed tree gets the number back, so that
// the reader names the key that holds it ("rope_theta must be finite, got nan") instead of
// failing to parse the file.
constexpr const char* kNonFinite[] = {"-Infinity", "Infinity", "NaN"};
const std::string kMarker = std::string(1, '\0') + "posenc-nonfinite:";

std::string mark_non_finite(const char* p, const char* end) {
  std::string out;
  out.reserve(static_cast<size_t>(end - p));
  bool in_string = false;
  while (p < end) {
    const char ch = *p;
    if (in_string) {
      out += ch;
      if (ch == '\\' && p + 1 < end)
        out += *++p;
      else if (ch == '"')
        in_string = false;
      ++p;
      continue;
    }
    if (ch == '"') in_string = true;
    bool replaced = false;
    for (const char* tok : kNonFinite) {
      const size_t n = std::strlen(tok);
      if (static_cast<size_t>(end - p) >= n && std::memcmp(p, tok, n) == 0 &&
          (p + n == end || !std::isalnum(static_cast<unsigned char>(p[n])))) {
        out += "\"\\u0000posenc-nonfinite:" + std::string(tok) + "\"";
        p += n;
        replaced = true;
        break;
      }
    }
    if (!replaced) out += *p++;
  }
  return out;
}

void unmark_non_finite(json& v) {
  if (v.is_string()) {
    const std::string& s = v.get_ref<const std::string&>();
    if (s.rfind(kMarker, 0) == 0) {
      const std::string tok = s.substr(kMarker.size());
      v = tok == "NaN" ? std::numeric_limits<double>::quiet_NaN()
                       : (tok == "Infinity" ? 1 : -1) * std::numeric_limits<double>::infinity();
    }
  } else if (v.is_structured()) {
    for (auto& e : v) unmark_non_finite(e);
  }
}

}  // namespace

nlohmann::json hf_config_read(const std::string& path) {
  const auto bytes = read_file(path);
  const char* b = reinterpret_cast<const char*>(bytes.data());
  try {
    json j = json::parse(mark_non_finite(b, b + bytes.size()));
    unmark_non_finite(j);
    return j;
  } catch (const json::exception& e) {
    fail_io("{} is not valid JSON: {}", path, e.what());
  }
}

rope_config rope_config_from_file(const std::string& path, std::vector<std::string>* warnings) {
  return rope_config_from_file(path, "", warnings);
}

rope_config rope_config_from_file(const std::string& path, const std::string& layer_type,
                                  std::vector<std::string>* warnings) {
  const json j = hf_config_read(path);
  try {
    return rope_config_from_json(j, layer_type, warnings);
  } catch (const invalid_argument& e) {
    throw invalid_argument(fmt::format("{}: {}", path, e.what()));
  }
}

}  // namespace posenc

namespace posenc {

nlohmann::ordered_json rope_config_to_json(const rope_config& c) {
  rope_validate(c);
  if (!c.mrope_section.empty() || c.type == rope_type::proportional)
    fail("rope_config_to_json: M-RoPE sections and rope_type proportional are not written");
  nlohmann::ordered_json j;
  j["head_dim"] = c.head_dim;
  if (c.rotary_dim != c.head_dim)
    j["partial_rotary_factor"] =
        static_cast<double>(c.rotary_dim) / static_cast<double>(c.head_dim);
  j["rope_theta"] = c.theta;
  if (c.max_position_embeddings > 0) j["max_position_embeddings"] = c.max_position_embeddings;
  if (c.type == rope_type::default_ && c.llama_4_scaling_beta == 0) return j;
  nlohmann::ordered_json rs;
  rs["rope_type"] = rope_type_name(c.type);
  if (c.type != rope_type::default_) rs["factor"] = c.factor;
  if (c.original_max_position_embeddings > 0)
    rs["original_max_position_embeddings"] = c.original_max_position_embeddings;
  // Only the Hunyuan classes read alpha: the config names one, so that it reads back the same.
  if (c.dynamic_alpha > 0) {
    j["model_type"] = "hunyuan_v1_dense";
    rs["alpha"] = c.dynamic_alpha;
  }
  // Likewise only Ministral 3's and Mistral 4's attention reads llama_4_scaling_beta.
  if (c.llama_4_scaling_beta > 0) {
    if (c.llama_4_scaling_floor != c.original_max_position_embeddings)
      fail(
          "rope_config_to_json: a query scale with {} positions per step (llama_4_scaling_floor) "
          "other than original_max_position_embeddings = {} has no config.json key",
          c.llama_4_scaling_floor, c.original_max_position_embeddings);
    j["model_type"] = "ministral3";
    rs["llama_4_scaling_beta"] = c.llama_4_scaling_beta;
  }
  switch (c.type) {
    case rope_type::yarn:
      rs["beta_fast"] = c.beta_fast;
      rs["beta_slow"] = c.beta_slow;
      rs["truncate"] = c.truncate;
      if (c.mscale) rs["mscale"] = *c.mscale;
      if (c.mscale_all_dim) rs["mscale_all_dim"] = *c.mscale_all_dim;
      break;
    case rope_type::longrope:
      rs["short_factor"] = c.short_factor;
      rs["long_factor"] = c.long_factor;
      break;
    case rope_type::llama3:
      rs["low_freq_factor"] = c.low_freq_factor;
      rs["high_freq_factor"] = c.high_freq_factor;
      break;
    default:
      break;
  }
  if (c.attention_factor) rs["attention_factor"] = *c.attention_factor;
  j["rope_scaling"] = rs;
  return j;
}

}  // namespace posenc
