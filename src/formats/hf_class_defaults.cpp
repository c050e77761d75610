// The defaults transformers' config classes supply for the RoPE keys a published config.json may
// leave out (see posenc/formats/hf_config.hpp, hf_class_defaults). Read from the class definitions
// (models/<family>/configuration_<family>.py: the dataclass field defaults, default_theta and
// __post_init__) of transformers upstream main c49429ed1f8b89749de77c0ec930ef19685c9ae5
// (2026-08-16). tests/golden/transformers/class_defaults.json holds the same quantities as the
// classes themselves produce them, run at that commit; test_rope_config compares the two.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "posenc/core/error.hpp"
#include "posenc/formats/hf_config.hpp"

namespace posenc {
namespace {

using nlohmann::json;
using lp = hf_layer_pattern;

#include "hf_swept_model_types.inc"

constexpr int64_t derived = 0;  // head_dim = hidden_size / num_attention_heads

// model_type, class, theta, local theta, head_dim, hidden_size, heads, layers, max positions,
// partial_rotary_factor, layer pattern, pattern period, MLA rotary head (qk_rope_head_dim), the
// whole RoPE block the class builds (JSON, nullptr when none). The rows written by hand come
// first; hf_class_table.inc adds every other swept model type whose class defaults could be
// measured (scripts/golden/class_table.py).
// A 0 means the class supplies nothing for that key (partial_rotary_factor: 1, no default).
const hf_class_defaults kTable[] = {
    {"llama", "LlamaConfig", 10000, 0, derived, 4096, 32, 32, 2048, 0, lp::none, 0, 0, nullptr},
    {"mistral", "MistralConfig", 10000, 0, derived, 4096, 32, 32, 131072, 0, lp::none, 0, 0,
     nullptr},
    {"mixtral", "MixtralConfig", 1000000, 0, derived, 4096, 32, 32, 131072, 0, lp::none, 0, 0,
     nullptr},
    {"ministral", "MinistralConfig", 10000, 0, derived, 4096, 32, 32, 131072, 0, lp::all_sliding, 0,
     0, nullptr},
    {"qwen2", "Qwen2Config", 10000, 0, derived, 4096, 32, 32, 32768, 0, lp::qwen_window, 28, 0,
     nullptr},
    {"qwen2_moe", "Qwen2MoeConfig", 10000, 0, derived, 2048, 16, 24, 32768, 0, lp::qwen_window, 28,
     0, nullptr},
    {"qwen3", "Qwen3Config", 10000, 0, 128, 4096, 32, 32, 32768, 0, lp::qwen_window, 28, 0,
     nullptr},
    {"qwen3_moe", "Qwen3MoeConfig", 10000, 0, derived, 2048, 32, 24, 32768, 0, lp::none, 0, 0,
     nullptr},
    {"qwen2_vl_text", "Qwen2VLTextConfig", 1000000, 0, derived, 8192, 64, 80, 32768, 0,
     lp::qwen_window, 80, 0, nullptr},
    {"qwen2_5_vl_text", "Qwen2_5_VLTextConfig", 1000000, 0, derived, 8192, 64, 80, 32768, 0,
     lp::qwen_window, 80, 0, nullptr},
    {"qwen3_vl_text", "Qwen3VLTextConfig", 500000, 0, 128, 4096, 32, 32, 128000, 0, lp::none, 0, 0,
     nullptr},
    {"gemma", "GemmaConfig", 10000, 0, 256, 3072, 16, 28, 8192, 0, lp::none, 0, 0, nullptr},
    {"gemma2", "Gemma2Config", 10000, 0, 256, 2304, 8, 26, 8192, 0, lp::every_nth_full, 2, 0,
     nullptr},
    {"gemma3_text", "Gemma3TextConfig", 1000000, 10000, 256, 2304, 8, 26, 131072, 0,
     lp::every_nth_full, 6, 0, nullptr},
    {"gemma4_text", "Gemma4TextConfig", 1000000, 10000, 256, 2304, 8, 30, 131072, 0,
     lp::every_nth_full_last_full, 6, 0, nullptr},
    {"phi", "PhiConfig", 10000, 0, derived, 2048, 32, 24, 2048, 0.5, lp::none, 0, 0, nullptr},
    {"phi3", "Phi3Config", 10000, 0, derived, 3072, 32, 32, 4096, 0, lp::none, 0, 0, nullptr},
    {"phimoe", "PhimoeConfig", 1000000, 0, derived, 4096, 32, 32, 131072, 0, lp::none, 0, 0,
     nullptr},
    {"deepseek_v2", "DeepseekV2Config", 10000, 0, derived, 4096, 32, 32, 2048, 0, lp::none, 0, 64,
     nullptr},
    {"deepseek_v3", "DeepseekV3Config", 10000, 0, derived, 7168, 128, 61, 4096, 0, lp::none, 0, 64,
     nullptr},
    {"gpt_oss", "GptOssConfig", 150000, 0, 64, 2880, 64, 36, 131072, 0, lp::every_nth_full, 2, 0,
     nullptr},
    {"gpt_neox", "GPTNeoXConfig", 10000, 0, derived, 6144, 64, 44, 2048, 0.25, lp::none, 0, 0,
     nullptr},
    {"gpt_neox_japanese", "GPTNeoXJapaneseConfig", 10000, 0, derived, 2560, 32, 32, 2048, 0,
     lp::none, 0, 0, nullptr},
    {"falcon", "FalconConfig", 10000, 0, derived, 4544, 71, 32, 2048, 0, lp::none, 0, 0, nullptr},
    {"olmo", "OlmoConfig", 10000, 0, derived, 4096, 32, 32, 2048, 0, lp::none, 0, 0, nullptr},
    {"olmo2", "Olmo2Config", 10000, 0, derived, 4096, 32, 32, 2048, 0, lp::none, 0, 0, nullptr},
    {"smollm3", "SmolLM3Config", 2000000, 0, derived, 2048, 16, 36, 32768, 0, lp::nope_sliding, 4,
     0, nullptr},
    {"cohere", "CohereConfig", 500000, 0, derived, 8192, 64, 40, 8192, 0, lp::none, 0, 0, nullptr},
    {"cohere2", "Cohere2Config", 10000, 0, derived, 8192, 64, 40, 8192, 0, lp::every_nth_full, 4, 0,
     nullptr},
    {"stablelm", "StableLmConfig", 10000, 0, derived, 2560, 32, 32, 4096, 0.25, lp::none, 0, 0,
     nullptr},
    {"glm", "GlmConfig", 10000, 0, 128, 4096, 32, 40, 131072, 0.5, lp::none, 0, 0, nullptr},
    {"glm4", "Glm4Config", 10000, 0, 128, 4096, 32, 40, 131072, 0.5, lp::none, 0, 0, nullptr},
    {"persimmon", "PersimmonConfig", 10000, 0, derived, 4096, 64, 36, 16384, 0.5, lp::none, 0, 0,
     nullptr},
    {"llama4_text", "Llama4TextConfig", 500000, 0, 128, 5120, 40, 48, 131072, 0, lp::nope_chunked,
     4, 0, nullptr},
#include "hf_class_table.inc"
};

// Composite (multimodal) classes keep the language model in text_config; a text_config that
// names no model_type of its own is read with its composite's text class.
const char* text_class_of(const std::string& composite) {
  if (composite == "gemma3") return "gemma3_text";
  if (composite == "gemma4") return "gemma4_text";
  if (composite == "llama4") return "llama4_text";
  if (composite == "qwen2_vl") return "qwen2_vl_text";
  if (composite == "qwen2_5_vl") return "qwen2_5_vl_text";
  if (composite == "qwen3_vl") return "qwen3_vl_text";
  return nullptr;
}

bool has(const json& o, const char* key) {
  return o.is_object() && o.contains(key) && !o.at(key).is_null();
}

std::string number(double v) {
  return v == std::floor(v) && std::fabs(v) < 1e15 ? fmt::format("{}", static_cast<int64_t>(v))
                                                   : fmt::format("{}", v);
}

// The rope_parameters / rope_scaling block of a config (null when none).
const json* scaling_block(const json& j) {
  if (has(j, "rope_parameters")) return &j.at("rope_parameters");
  if (has(j, "rope_scaling")) return &j.at("rope_scaling");
  return nullptr;
}

bool is_nested(const json& block) {
  if (!block.is_object() || block.contains("rope_type") || block.contains("type")) return false;
  return std::any_of(block.begin(), block.end(), [](const json& v) { return v.is_object(); });
}

}  // namespace

const char* hf_layer_pattern_name(hf_layer_pattern p) {
  switch (p) {
    case hf_layer_pattern::none:
      return "none";
    case hf_layer_pattern::every_nth_full:
      return "every_nth_full";
    case hf_layer_pattern::every_nth_full_last_full:
      return "every_nth_full_last_full";
    case hf_layer_pattern::qwen_window:
      return "qwen_window";
    case hf_layer_pattern::all_sliding:
      return "all_sliding";
    case hf_layer_pattern::nope_chunked:
      return "nope_chunked";
    case hf_layer_pattern::nope_sliding:
      return "nope_sliding";
    case hf_layer_pattern::unmodelled:
      return "unmodelled";
  }
  return "?";
}

std::span<const hf_class_defaults> hf_class_defaults_table() {
  return kTable;
}

const hf_class_defaults* hf_class_defaults_for(const std::string& model_type) {
  for (const auto& d : kTable)
    if (model_type == d.model_type) return &d;
  return nullptr;
}

std::vector<std::string> hf_default_layer_types(const hf_class_defaults& d, const json& j,
                                                int64_t num_layers) {
  std::vector<std::string> out;
  switch (d.pattern) {
    case hf_layer_pattern::none:
    case hf_layer_pattern::unmodelled:
      break;
    case hf_layer_pattern::every_nth_full:
    case hf_layer_pattern::every_nth_full_last_full: {
      // Gemma 3 and Cohere 2 read the period from sliding_window_pattern (kept on the Hub for
      // backward compatibility); Gemma 2, gpt-oss and Gemma 4 fix it.
      int64_t period = d.pattern_period;
      const std::string mt = d.model_type;
      if ((mt == "gemma3_text" || mt == "cohere2") && has(j, "sliding_window_pattern")) {
        const json& v = j.at("sliding_window_pattern");
        if (!v.is_number_integer() || v.get<int64_t>() < 1)
          fail("sliding_window_pattern must be an integer >= 1, got {}", v.dump());
        period = v.get<int64_t>();
      }
      for (int64_t i = 0; i < num_layers; ++i)
        out.push_back((i + 1) % period != 0 ? "sliding_attention" : "full_attention");
      if (d.pattern == hf_layer_pattern::every_nth_full_last_full && !out.empty())
        out.back() = "full_attention";
      break;
    }
    case hf_layer_pattern::qwen_window: {
      // Sliding from layer max_window_layers on, when use_sliding_window is set and the window
      // is not null (use_sliding_window defaults to false, so every layer is full by default).
      const bool use = has(j, "use_sliding_window") && j.at("use_sliding_window").is_boolean() &&
                       j.at("use_sliding_window").get<bool>();
      const bool window = !j.contains("sliding_window") || !j.at("sliding_window").is_null();
      int64_t first = d.pattern_period;
      if (has(j, "max_window_layers") && j.at("max_window_layers").is_number_integer())
        first = j.at("max_window_layers").get<int64_t>();
      for (int64_t i = 0; i < num_layers; ++i)
        out.push_back(use && window && i >= first ? "sliding_attention" : "full_attention");
      break;
    }
    case hf_layer_pattern::all_sliding: {
      const bool window = !j.contains("sliding_window") || !j.at("sliding_window").is_null();
      out.assign(static_cast<size_t>(num_layers), window ? "sliding_attention" : "full_attention");
      break;
    }
    case hf_layer_pattern::nope_chunked:
    case hf_layer_pattern::nope_sliding: {
      // From the RoPE layers: no_rope_layers (1 = RoPE) when given and not empty, else every
      // period-th layer NoPE (no_rope_layer_interval, default 4).
      std::vector<bool> rope;
      if (has(j, "no_rope_layers") && j.at("no_rope_layers").is_array() &&
          !j.at("no_rope_layers").empty()) {
        for (const auto& v : j.at("no_rope_layers"))
          rope.push_back(v.is_boolean() ? v.get<bool>() : v.is_number() && v.get<double>() != 0);
      } else {
        int64_t period = d.pattern_period;
        if (has(j, "no_rope_layer_interval") && j.at("no_rope_layer_interval").is_number_integer())
          period = std::max<int64_t>(1, j.at("no_rope_layer_interval").get<int64_t>());
        for (int64_t i = 0; i < num_layers; ++i) rope.push_back((i + 1) % period != 0);
      }
      if (static_cast<int64_t>(rope.size()) != num_layers) break;  // refused by the plan
      const bool sliding = has(j, "use_sliding_window") &&
                           j.at("use_sliding_window").is_boolean() &&
                           j.at("use_sliding_window").get<bool>() && has(j, "sliding_window");
      for (const bool r : rope)
        out.push_back(d.pattern == hf_layer_pattern::nope_chunked
                          ? (r ? "chunked_attention" : "full_attention")
                          : (sliding && !r ? "sliding_attention" : "full_attention"));
      break;
    }
  }
  return out;
}

namespace {

// The filling of one config by one class, a step per group of keys; each default taken is a
// note.
struct filler {
  json& j;
  const hf_class_defaults* d;
  std::vector<std::string>* notes;

  void take(const std::string& key, const std::string& value) const {
    if (notes)
      notes->push_back(fmt::format(
          "{} is missing; took transformers' {} default {} (model_type {}, transformers "
          "c49429ed)",
          key, d->class_name, value, d->model_type));
  }
  void rope_block();  // the whole block where the class builds one (Gemma 4, gpt-oss)
  void theta();       // rope_theta, Gemma 3's rope_local_base_freq
  void head_dim();    // qk_rope_head_dim, head_dim, hidden_size and num_attention_heads
  void partial();     // partial_rotary_factor
  void lengths();     // max_position_embeddings, for the scalings that read it
  void layer_keys();  // num_hidden_layers, layer_types
};

void filler::rope_block() {
  const std::string mts = d->model_type;
  if (mts == "gemma4_text" && !scaling_block(j)) {
    // Gemma 4 with no RoPE block: the class's per-layer-type default.
    j["rope_parameters"] = {
        {"sliding_attention", {{"rope_type", "default"}, {"rope_theta", d->local_theta}}},
        {"full_attention",
         {{"rope_type", "proportional"},
          {"partial_rotary_factor", 0.25},
          {"rope_theta", d->theta}}}};
    take("rope_parameters",
         "{sliding_attention: default, theta 10000; full_attention: proportional, "
         "partial_rotary_factor 0.25, theta 1000000}");
  } else if (d->rope_block && !scaling_block(j)) {
    // A class-built block other than a plain default RoPE (generated rows: Apertus' llama3 x8,
    // Ministral 3's YaRN, Gemma 3n's per-layer-type block); a rope_theta the config states
    // replaces the block's, as transformers' standardisation folds it in.
    json block = json::parse(d->rope_block);
    if (has(j, "rope_theta") && !is_nested(block)) block["rope_theta"] = j.at("rope_theta");
    j["rope_parameters"] = block;
    take("rope_parameters", block.dump());
  } else if (mts == "gpt_oss" && !scaling_block(j)) {
    j["rope_parameters"] = {{"rope_type", "yarn"},   {"factor", 32.0},
                            {"beta_fast", 32.0},     {"beta_slow", 1.0},
                            {"truncate", false},     {"original_max_position_embeddings", 4096},
                            {"rope_theta", d->theta}};
    take("rope_parameters",
         "{rope_type: yarn, factor 32, beta_fast 32, beta_slow 1, truncate false, "
         "original_max_position_embeddings 4096}");
  }
}

void filler::theta() {
  const std::string mts = d->model_type;
  // theta: absent from the top level, its aliases and the scaling block (or from a per-layer-
  // type block that no other key fills).
  const json* block = scaling_block(j);
  const bool nested = block && is_nested(*block);
  const bool theta_given = has(j, "rope_theta") || has(j, "rotary_emb_base") ||
                           (block && !nested && has(*block, "rope_theta"));
  if (!theta_given && d->theta > 0) {
    bool all_blocks_have_theta = false;
    if (nested) {
      all_blocks_have_theta = true;
      for (const auto& [k, v] : block->items())
        if (v.is_object() && !has(v, "rope_theta") &&
            !(k == "sliding_attention" && has(j, "rope_local_base_freq")))
          all_blocks_have_theta = false;
    }
    if (!all_blocks_have_theta) {
      j["rope_theta"] = d->theta;
      take("rope_theta", number(d->theta));
    }
  }
  if (d->local_theta > 0 && mts == "gemma3_text" && !has(j, "rope_local_base_freq") &&
      !(nested && has(*block, "sliding_attention") &&
        has(block->at("sliding_attention"), "rope_theta"))) {
    j["rope_local_base_freq"] = d->local_theta;
    take("rope_local_base_freq", number(d->local_theta));
  }
}

void filler::head_dim() {
  // head_dim: MLA's rotary head, else a fixed class default, else derived from hidden_size /
  // num_attention_heads (each of those from the class when missing).
  if (d->qk_rope_head_dim > 0 && !has(j, "qk_rope_head_dim")) {
    j["qk_rope_head_dim"] = d->qk_rope_head_dim;
    take("qk_rope_head_dim", number(static_cast<double>(d->qk_rope_head_dim)));
    // MLA whose full q/k head differs from the rotary head (Mistral 4: 128 = 64 + 64 with
    // partial_rotary_factor 0.5): the class's head_dim goes with its rotary head.
    if (d->head_dim > 0 && d->head_dim != d->qk_rope_head_dim && !has(j, "head_dim")) {
      j["head_dim"] = d->head_dim;
      take("head_dim", number(static_cast<double>(d->head_dim)));
    }
  } else if (d->qk_rope_head_dim == 0 && !has(j, "head_dim")) {
    if (d->head_dim > 0) {
      j["head_dim"] = d->head_dim;
      take("head_dim", number(static_cast<double>(d->head_dim)));
    } else {
      if (!has(j, "hidden_size")) {
        j["hidden_size"] = d->hidden_size;
        take("hidden_size", number(static_cast<double>(d->hidden_size)));
      }
      if (!has(j, "num_attention_heads")) {
        j["num_attention_heads"] = d->num_attention_heads;
        take("num_attention_heads", number(static_cast<double>(d->num_attention_heads)));
      }
    }
  }
}

void filler::partial() {
  const json* block = scaling_block(j);
  const bool nested = block && is_nested(*block);
  // partial rotary factor (GPT-NeoX reads rotary_pct; Phi, StableLM, Persimmon and GLM
  // default it).
  if (d->partial_rotary_factor > 0 && !has(j, "partial_rotary_factor") && !has(j, "rotary_pct") &&
      !(block && !nested && has(*block, "partial_rotary_factor"))) {
    j["partial_rotary_factor"] = d->partial_rotary_factor;
    take("partial_rotary_factor", number(d->partial_rotary_factor));
  }
}

void filler::lengths() {
  // max_position_embeddings: read by the scalings that depend on the context length (YaRN and
  // Llama 3's original length default to it, dynamic NTK and LongRoPE switch at it).
  const json* b = scaling_block(j);
  bool length_scaled = false;
  const auto scaled = [](const json& blk) {
    for (const char* k : {"rope_type", "type"})
      if (has(blk, k) && blk.at(k).is_string()) {
        const std::string t = blk.at(k).get<std::string>();
        return t == "yarn" || t == "longrope" || t == "su" || t == "dynamic" || t == "llama3";
      }
    return false;
  };
  if (b && b->is_object()) {
    length_scaled = scaled(*b);
    for (const auto& v : *b)
      if (v.is_object() && scaled(v)) length_scaled = true;
  }
  if (length_scaled && !has(j, "max_position_embeddings")) {
    j["max_position_embeddings"] = d->max_position_embeddings;
    take("max_position_embeddings", number(static_cast<double>(d->max_position_embeddings)));
  }
}

void filler::layer_keys() {
  if (!has(j, "num_hidden_layers")) {
    j["num_hidden_layers"] = d->num_hidden_layers;
    take("num_hidden_layers", number(static_cast<double>(d->num_hidden_layers)));
  }
  if (!has(j, "layer_types") && d->pattern == hf_layer_pattern::unmodelled)
    fail(
        "layer_types is missing, and transformers' {} builds its layer pattern in a way posenc "
        "does not model (tests/golden/transformers/class_table.json); state layer_types in the "
        "config",
        d->class_name);
  if (!has(j, "layer_types") && d->pattern != hf_layer_pattern::none) {
    const json& n = j.at("num_hidden_layers");
    if (n.is_number_integer() && n.get<int64_t>() >= 0 && n.get<int64_t>() <= (int64_t{1} << 20)) {
      j["layer_types"] = hf_default_layer_types(*d, j, n.get<int64_t>());
      std::string rule;
      switch (d->pattern) {
        case hf_layer_pattern::every_nth_full:
          rule = fmt::format("every {}th layer full, the others sliding",
                             j.contains("sliding_window_pattern")
                                 ? j.at("sliding_window_pattern").dump()
                                 : std::to_string(d->pattern_period));
          break;
        case hf_layer_pattern::every_nth_full_last_full:
          rule = fmt::format("every {}th layer full, the others sliding, the last layer full",
                             d->pattern_period);
          break;
        case hf_layer_pattern::qwen_window:
          rule = "sliding from max_window_layers on when use_sliding_window, else full";
          break;
        case hf_layer_pattern::all_sliding:
          rule = "every layer sliding when sliding_window is set";
          break;
        case hf_layer_pattern::nope_chunked:
          rule = "RoPE layers chunked_attention, NoPE layers full_attention";
          break;
        case hf_layer_pattern::nope_sliding:
          rule = "NoPE layers sliding when use_sliding_window, else full";
          break;
        case hf_layer_pattern::none:
        case hf_layer_pattern::unmodelled:
          break;
      }
      take("layer_types", "pattern (" + rule + ")");
    }
  }
}

// OLMo 3 (Olmo3Config, models/olmo3/configuration_olmo3.py, read at transformers 008e5743;
// not in kTable, whose rows are held against the classes run at c49429ed): the class keeps one
// RoPE block per layer type, built by convert_rope_params_to_dict.
//   - A legacy rope_scaling updates the full_attention block alone; the sliding_attention block
//     stays {rope_type: default}, so YaRN and its attention factor apply to the full layers only.
//   - rope_theta goes to the full_attention block (default 500000). The sliding_attention block
//     takes the class default 500000 whatever rope_theta says: the class pops rope_theta from
//     its keyword arguments for the full block, and its second pop, for the sliding block, finds
//     it gone. Given per-layer-type blocks keep their own rope_theta.
//   - layer_types, when missing: every 4th layer full_attention, the others sliding_attention
//     (num_hidden_layers default 32).
// A flat rope_parameters block (one RoPE for every layer) is not what the class builds from:
// refused by name.
void olmo3_per_layer_rope(json& j, bool layers, std::vector<std::string>* notes) {
  constexpr double kTheta = 500000.0;
  const auto note = [&](const std::string& what) {
    if (notes) notes->push_back(what + " (Olmo3Config, model_type olmo3, transformers 008e5743)");
  };
  const json* block = scaling_block(j);
  const bool full_theta_given = has(j, "rope_theta");
  if (has(j, "rope_parameters") && !is_nested(j.at("rope_parameters")))
    fail(
        "model_type olmo3: rope_parameters must hold one block per layer type "
        "(full_attention, sliding_attention), as Olmo3Config builds it; got {}",
        j.at("rope_parameters").dump());
  json rp = block && is_nested(*block) ? *block : json::object();
  if (!rp.contains("full_attention") || !rp.at("full_attention").is_object())
    rp["full_attention"] = {{"rope_type", "default"}};
  if (!rp.contains("sliding_attention") || !rp.at("sliding_attention").is_object())
    rp["sliding_attention"] = {{"rope_type", "default"}};
  if (has(j, "rope_scaling") && !is_nested(j.at("rope_scaling"))) {
    if (!j.at("rope_scaling").is_object())
      fail("rope_scaling must be an object, got {}", j.at("rope_scaling").dump());
    rp["full_attention"].update(j.at("rope_scaling"));
    note(
        "rope_scaling applies to the full_attention layers only; the sliding_attention layers "
        "keep default RoPE");
  }
  if (!has(rp.at("full_attention"), "rope_theta")) {
    rp["full_attention"]["rope_theta"] = full_theta_given ? j.at("rope_theta") : json(kTheta);
    if (!full_theta_given) note("rope_theta is missing; took 500000 for the full_attention layers");
  }
  if (!has(rp.at("sliding_attention"), "rope_theta")) {
    rp["sliding_attention"]["rope_theta"] = kTheta;
    note("the sliding_attention layers take rope_theta 500000, the class default");
  }
  j.erase("rope_scaling");
  j["rope_parameters"] = rp;
  if (layers && !has(j, "layer_types")) {
    if (!has(j, "num_hidden_layers")) {
      j["num_hidden_layers"] = 32;
      note("num_hidden_layers is missing; took 32");
    }
    const json& n = j.at("num_hidden_layers");
    if (n.is_number_integer() && n.get<int64_t>() >= 0 && n.get<int64_t>() <= (int64_t{1} << 20)) {
      std::vector<std::string> types;
      for (int64_t i = 0; i < n.get<int64_t>(); ++i)
        types.push_back((i + 1) % 4 != 0 ? "sliding_attention" : "full_attention");
      j["layer_types"] = types;
      note(
          "layer_types is missing; took the default pattern (every 4th layer full, the others "
          "sliding)");
    }
  }
}

}  // namespace

bool hf_swept_model_type(const std::string& model_type) {
  return std::any_of(std::begin(kSweptModelTypes), std::end(kSweptModelTypes),
                     [&](const char* t) { return model_type == t; });
}

bool hf_swept_rotation_interleaved(const std::string& model_type) {
  return std::any_of(std::begin(kSweptInterleaved), std::end(kSweptInterleaved),
                     [&](const char* t) { return model_type == t; });
}

bool hf_swept_mrope_default(const std::string& model_type, std::array<int64_t, 3>* section,
                            bool* interleaved) {
  for (const auto& m : kSweptMrope)
    if (model_type == m.model_type) {
      *section = {m.section[0], m.section[1], m.section[2]};
      *interleaved = m.interleaved;
      return true;
    }
  return false;
}

const char* hf_swept_commit() {
  return kSweptCommit;
}

bool hf_swept_ignores_partial(const std::string& model_type) {
  return std::any_of(std::begin(kSweptIgnorePartial), std::end(kSweptIgnorePartial),
                     [&](const char* t) { return model_type == t; });
}

nlohmann::json hf_apply_class_defaults(const nlohmann::json& config, const std::string& outer_type,
                                       bool layers, std::vector<std::string>* notes) {
  json j = config;
  std::string mt;
  if (has(j, "model_type") && j.at("model_type").is_string()) {
    mt = j.at("model_type").get<std::string>();
    // A multimodal config whose text keys sit at its top level (older Qwen2-VL files).
    if (const char* t = text_class_of(mt)) mt = t;
  } else if (const char* t = text_class_of(outer_type)) {
    mt = t;
  }
  if (mt == "olmo3") olmo3_per_layer_rope(j, layers, notes);
  const hf_class_defaults* d = hf_class_defaults_for(mt);
  if (!d) {
    // Say what was checked: a class outside the table may supply keys or change RoPE in ways
    // this reading does not know (the table is held against the classes themselves).
    if (!mt.empty() && notes) {
      if (!hf_swept_model_type(mt))
        notes->push_back(fmt::format(
            "model_type {} is not among the {} model types held against transformers {:.8} "
            "(tests/golden/transformers/sweep.json); its class may change RoPE",
            mt, std::size(kSweptModelTypes), kSweptCommit));
      else
        notes->push_back(fmt::format(
            "model_type {} is held against transformers {:.8} for the keys a config states, "
            "but its class's defaults are not among the {} posenc fills in; keys it leaves out "
            "are not filled in",
            mt, kSweptCommit, std::size(kTable)));
    }
    return j;
  }
  filler f{j, d, notes};
  f.rope_block();
  f.theta();
  f.head_dim();
  f.partial();
  f.lengths();
  // The layer keys only where a layer plan or a layer type is asked for.
  if (layers) f.layer_keys();
  return j;
}

}  // namespace posenc
