// The declarations of every position scheme and the one rule that says which combine
// (posenc/attention/schemes.hpp).
#include "posenc/attention/schemes.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <nlohmann/json.hpp>
#include <type_traits>

#include "hooks.hpp"
#include "posenc/core/error.hpp"

namespace posenc {
namespace {

// Parameters, as posenc.attention's keywords spell them.
constexpr scheme_param kRope[] = {
    {"rope", "scalar", "RopeConfig", "None",
     "RoPE frequencies and scaling (a RopeConfig at its sequence length)"},
    {"rope_layout", "scalar", "str", "half", "pair layout: half (NeoX) or interleaved (GPT-J)",
     "half|interleaved"},
    {"rope_angle", "scalar", "str", "exact", "angles: exact, f32, hf_f32 or ggml_f32",
     "exact|f32|hf_f32|ggml_f32"},
};
constexpr scheme_param kMrope[] = {
    {"mrope", "scalar", "RopeConfig", "None", "an M-RoPE config (its mrope_section)"},
    {"mrope_temporal", "scalar", "int", "0", "rotary pairs of the temporal component"},
    {"mrope_height", "scalar", "int", "0", "rotary pairs of the height component"},
    {"mrope_width", "scalar", "int", "0", "rotary pairs of the width component"},
    {"mrope_interleaved", "scalar", "bool", "False", "Qwen3-VL's interleaved components"},
    {"mrope_layout", "scalar", "str", "half", "pair layout: half (NeoX) or interleaved (GPT-J)",
     "half|interleaved"},
    {"mrope_angle", "scalar", "str", "exact", "angles: exact, f32, hf_f32 or ggml_f32",
     "exact|f32|hf_f32|ggml_f32"},
    {"mrope_q_ids", "(3, T)", "ids", "None", "temporal, height, width ids of the queries"},
    {"mrope_k_ids", "(3, S)", "ids", "None",
     "temporal, height, width ids of the keys (none when they are given rotated)"},
};
constexpr scheme_param kXpos[] = {
    {"xpos", "scalar", "bool", "False", "switch xPos on (half layout, rotary width D)"},
    {"xpos_theta", "scalar", "float", "10000", "RoPE base of the rotation"},
    {"xpos_gamma", "scalar", "float", "0.4", "zeta offset of the decay"},
    {"xpos_scale_base", "scalar", "float", "512", "positions per e-fold of the scale"},
    {"xpos_center", "scalar", "float", "0", "position of scale 1"},
};
constexpr scheme_param kTemperature[] = {
    {"attn_temperature_tuning", "scalar", "bool", "False", "the query temperature on"},
    {"floor_scale", "scalar", "float", "8192", "positions per temperature step"},
    {"attn_scale", "scalar", "float", "0.1", "temperature slope"},
    {"floor_offset", "scalar", "float", "1", "added to the position (Llama 4 1, Ministral 3 0)"},
};
constexpr scheme_param kAlibi[] = {
    {"alibi", "(Hq,)", "bool | tensor64", "False",
     "True (slopes for Hq heads from alibi_max_bias and alibi_convention) or the slopes"},
    {"alibi_max_bias", "scalar", "float", "8", "b of the slopes 2^(-b k / n) (Press et al. 2022)"},
    {"alibi_convention", "scalar", "str", "press", "the slopes for a head count not a power of two",
     "press|mpt|geometric"},
};
constexpr scheme_param kT5[] = {
    {"t5_table", "(num_buckets, Hq)", "tensor", "None", "learned bias per bucket and head"},
    {"t5_num_buckets", "scalar", "int", "0",
     "rows of t5_table (0: its shape's, checked when given; the lab's model: 32)"},
    {"t5_max_distance", "scalar", "int", "128", "distance of the last logarithmic bucket"},
    {"t5_bidirectional", "scalar", "bool", "not causal", "buckets for both directions"},
};
constexpr scheme_param kShaw[] = {
    {"shaw_keys", "(C, D)", "tensor", "None", "a^K: a key vector per clipped offset, C = 2K + 1"},
    {"shaw_values", "(C, D)", "tensor", "None", "a^V: a value vector per clipped offset"},
    {"shaw_clip", "scalar", "int", "-1",
     "K: offsets clipped to [-K, K] (-1: from the tables' C = 2K + 1 rows; checked when given)"},
};
constexpr scheme_param kKerple[] = {
    {"kerple", "(2, Hq)", "tensor", "None", "rows a1, a2 of the kernel's parameters"},
    {"kerple_kernel", "scalar", "str", "log", "log: -r1 log(1 + r2 d); power: -r1 d^r2",
     "log|power"},
};
constexpr scheme_param kFire[] = {
    {"fire", "(Hq, W)", "tensor", "None",
     "per-head MLP [w1 (m) | b1 (m) | w2 (m) | b2, a_c, a_L], W = 3m + 3"},
    {"fire_hidden", "scalar", "int", "0", "m, the MLP's hidden units (0: from fire's width W)"},
};
constexpr scheme_param kSandwich[] = {
    {"sandwich", "scalar", "bool", "False", "switch Sandwich on (nothing to learn)"},
    {"sandwich_dim", "scalar", "int", "128", "d', the sinusoidal embedding's dimension (even)"},
};
constexpr scheme_param kFox[] = {
    {"fox", "(S, Hq)", "tensor", "None",
     "log forget gates log f_t <= 0 of the key tokens (the queries are the last T)"},
};
constexpr scheme_param kSelfExtend[] = {
    {"self_extend", "scalar", "bool", "False", "switch Self-Extend on (RoPE's positions per pair)"},
    {"self_extend_group", "scalar", "int", "4", "G: positions beyond the window divided by G"},
    {"self_extend_window", "scalar", "int", "512", "w: the neighbour window of exact positions"},
};
constexpr scheme_param kDca[] = {
    {"dca", "scalar", "bool", "False",
     "switch Dual Chunk Attention on (RoPE's positions per pair)"},
    {"dca_chunk_size", "scalar", "int", "262144", "chunk_size of dual_chunk_attention_config"},
    {"dca_local_size", "scalar", "int", "8192", "local_size: the successive-chunk window"},
    {"dca_original_max_position_embeddings", "scalar", "int", "0",
     "length scaling of the scores past it, as vLLM (0 = none)"},
};
constexpr scheme_param kStreamingLlm[] = {
    {"streaming_llm", "scalar", "bool", "False",
     "switch StreamingLLM's cache on: sink tokens and a window, positions in the cache"},
    {"streaming_sink_tokens", "scalar", "int", "4", "n: the first tokens kept (attention sinks)"},
    {"streaming_window", "scalar", "int", "1020", "W: the recent tokens kept"},
};
constexpr scheme_param kCope[] = {
    {"cope", "(npos, D)", "tensor", "None", "position embeddings, shared by the heads"},
    {"cope_npos", "scalar", "int", "0",
     "npos, rows of cope (0: its shape's, checked when given; the lab's model: 64)"},
};
constexpr scheme_param kSinusoidal[] = {
    {"input_amplitude", "scalar", "float", "1", "x_0 = E[token] + a PE(pos)"},
};
constexpr scheme_param kLearned[] = {
    {"max_positions", "scalar", "int", "64", "rows of the table (positions 0 .. rows - 1)"},
};
constexpr scheme_param kIrope[] = {
    {"irope_interval", "scalar", "int", "4", "layer l is NoPE when (l + 1) % interval == 0"},
    {"irope_floor_scale", "scalar", "float", "64", "NoPE layers' temperature floor_scale"},
    {"irope_attn_scale", "scalar", "float", "0.1", "NoPE layers' temperature attn_scale"},
};

constexpr uint32_t kHook1 = scheme_qk_transform;

}  // namespace
namespace detail {
// What each hook file registers (hooks.hpp, scheme_impl): hook_<name>.cpp defines <name>_impl.
extern const scheme_impl rope_impl, nope_impl, sinusoidal_impl, learned_impl, irope_impl;
extern const named_transform rope_transform_decl;         // hook_rope.cpp
extern const named_transform mrope_transform_decl;        // hook_mrope.cpp
extern const named_bias alibi_bias_decl;                  // hook_alibi.cpp
extern const named_bias t5_bias_decl;                     // hook_t5.cpp
extern const named_bias shaw_tables_decl;                 // hook_shaw.cpp
extern const named_bias kerple_bias_decl;                 // hook_kerple.cpp
extern const named_bias fire_bias_decl;                   // hook_fire.cpp
extern const named_bias sandwich_bias_decl;               // hook_sandwich.cpp
extern const named_bias fox_bias_decl;                    // hook_fox.cpp
extern const named_bias cope_decl;                        // hook_cope.cpp
extern const named_pairs self_extend_pairs_decl;          // hook_self_extend.cpp
extern const named_transform xpos_transform_decl;         // hook_xpos.cpp
extern const named_transform temperature_transform_decl;  // hook_temperature.cpp
extern const named_pairs dca_pairs_decl;                  // hook_dca.cpp
extern const named_pairs streaming_llm_pairs_decl;        // hook_streaming_llm.cpp
}  // namespace detail
namespace {

// A declaration of a scheme the model applies (its model hook), with what its hook file
// registers.
constexpr scheme_decl with_impl(scheme_decl d, const detail::scheme_impl* impl) {
  d.impl = impl;
  return d;
}

// A q/k transform reached by name, its hook file's named_transform.
constexpr scheme_decl with_transform(scheme_decl d, const detail::named_transform* t) {
  d.transform = t;
  return d;
}

// Trained at L in the lab's context-extension preset, beside RoPE and its methods, as a scheme
// that needs no extension (scheme_decl::lab_extend_trained).
constexpr scheme_decl extend_trained(scheme_decl d) {
  d.lab_extend_trained = true;
  return d;
}

// name, title, citation, points, learned, causal only, float K/V only, attention level, params.
// Constant-initialised (constinit): other files' static initialisers (the bench's case
// registration) read the declarations, so they must not wait for dynamic initialisation.
constinit const scheme_decl kDecls[] = {
    with_impl(
        with_transform({"rope", "RoPE", "Su et al. 2021", kHook1, false, false, false, true, kRope},
                       &detail::rope_transform_decl),
        &detail::rope_impl),
    with_transform({"mrope", "M-RoPE", "Wang et al. 2024 (Qwen2-VL)", kHook1, false, false, false,
                    true, kMrope},
                   &detail::mrope_transform_decl),
    with_transform({"xpos", "xPos", "Sun et al. 2022", kHook1, false, false, false, true, kXpos},
                   &detail::xpos_transform_decl),
    with_transform({"temperature", "query temperature", "Llama 4 (Meta 2025)", scheme_query_scale,
                    false, false, false, true, kTemperature},
                   &detail::temperature_transform_decl),
    extend_trained({"alibi", "ALiBi", "Press et al. 2022", scheme_score_bias, true, false, false,
                    true, kAlibi, &detail::alibi_bias_decl, bias_offset_only}),
    {"t5", "T5 buckets", "Raffel et al. 2020", scheme_score_bias, true, false, false, true, kT5,
     &detail::t5_bias_decl, bias_offset_only},
    {"shaw", "Shaw", "Shaw et al. 2018", scheme_relative_keys | scheme_value_term, true, false,
     false, true, kShaw, &detail::shaw_tables_decl, bias_offset_only},
    extend_trained({"kerple", "Kerple", "Chi et al. 2022", scheme_score_bias, true, false, false,
                    true, kKerple, &detail::kerple_bias_decl, bias_offset_only | bias_symmetric}),
    {"fire", "FIRE", "Li et al. 2023", scheme_score_bias, true, false, false, true, kFire,
     &detail::fire_bias_decl},
    {"sandwich", "Sandwich", "Chi et al. 2023", scheme_score_bias, false, false, false, true,
     kSandwich, &detail::sandwich_bias_decl, bias_offset_only | bias_symmetric | bias_bounded},
    {"self_extend", "Self-Extend", "Jin et al. 2024", scheme_rope_pairs, false, true, true, true,
     kSelfExtend, nullptr, 0, &detail::self_extend_pairs_decl, "rope"},
    {"dca", "Dual Chunk Attention", "An et al. 2024", scheme_rope_pairs, false, true, true, true,
     kDca, nullptr, 0, &detail::dca_pairs_decl, "rope"},
    {"streaming_llm", "StreamingLLM", "Xiao et al. 2024", scheme_rope_pairs, false, true, true,
     true, kStreamingLlm, nullptr, 0, &detail::streaming_llm_pairs_decl, "rope"},
    extend_trained({"fox", "Forgetting Attention", "Lin et al. 2025", scheme_score_bias, true, true,
                    false, true, kFox, &detail::fox_bias_decl}),
    {"cope", "CoPE", "Golovneva et al. 2024", scheme_own_path, true, true, true, true, kCope,
     &detail::cope_decl},
    extend_trained(
        with_impl({"nope", "NoPE", "Kazemnejad et al. 2023", 0, false, true, false, false, {}},
                  &detail::nope_impl)),
    with_impl({"sinusoidal", "sinusoidal", "Vaswani et al. 2017", scheme_input, false, false, false,
               false, kSinusoidal},
              &detail::sinusoidal_impl),
    with_impl({"learned", "learned absolute", "Gehring et al. 2017", scheme_input, true, false,
               false, false, kLearned},
              &detail::learned_impl),
    with_impl({"irope", "iRoPE", "Llama 4 (Meta 2025)", scheme_layer_plan, false, false, false,
               false, kIrope},
              &detail::irope_impl),
};

std::string points_text(uint32_t p) {
  std::vector<std::string> out;
  if (p & scheme_input) out.push_back("input");
  if (p & scheme_qk_transform) out.push_back("q/k transform (hook 1)");
  if (p & scheme_query_scale) out.push_back("query scale (hook 1, composes)");
  if (p & scheme_score_bias) out.push_back("score bias (hook 2b)");
  if (p & scheme_relative_keys) out.push_back("relative keys (hook 2a)");
  if (p & scheme_value_term) out.push_back("value term (hook 3)");
  if (p & scheme_own_path) out.push_back("content-dependent positions (own path)");
  if (p & scheme_layer_plan) out.push_back("per-layer plan");
  if (p & scheme_rope_pairs) out.push_back("RoPE positions per (query, key) pair (own path)");
  if (out.empty()) out.push_back("none (order from the causal mask alone)");
  return fmt::format("{}", fmt::join(out, ", "));
}

// What posenc check tests of a scheme reached by name: "" for the others.
std::string properties_text(const scheme_decl& d) {
  if (!d.reached_by_name()) return "";
  std::vector<std::string> out{d.config_valued() ? "reached by name, from a RoPE config"
                                                 : "reached by name"};
  if (d.rides_on) out.push_back(fmt::format("needs {}", d.rides_on));
  if (d.bias_props & bias_offset_only) out.push_back("offset-only");
  if (d.bias_props & bias_symmetric) out.push_back("symmetric");
  if (d.bias_props & bias_bounded) out.push_back("bounded");
  return fmt::format("{}", fmt::join(out, ", "));
}

}  // namespace

std::span<const scheme_decl> scheme_decls() {
  return kDecls;
}

bool scheme_decl::config_valued() const {
  return !params.empty() && std::string(params[0].dtype) == "RopeConfig";
}

std::vector<const scheme_decl*> named_scheme_decls() {
  std::vector<const scheme_decl*> out;
  for (const auto& d : kDecls)
    if (d.reached_by_name() && !d.config_valued()) out.push_back(&d);
  return out;
}

const scheme_decl& scheme_decl_of(const std::string& name) {
  for (const auto& d : kDecls)
    if (name == d.name) return d;
  std::vector<std::string> names;
  for (const auto& d : kDecls) names.push_back(d.name);
  fail("scheme must be one of {}, got '{}'", fmt::join(names, ", "), name);
}

std::string scheme_conflict(const scheme_decl& a, const scheme_decl& b) {
  if (&a == &b) return "";
  if (a.rides_on && b.rides_on)
    return "both place RoPE's rotation per (query, key) pair on paths of their own; at most one "
           "is allowed";
  for (const scheme_decl* s : {&a, &b}) {
    const scheme_decl& other = s == &a ? b : a;
    if (s->rides_on && std::string(s->rides_on) != other.name)
      return fmt::format(
          "{} places {}'s rotation per (query, key) pair on a path of its own that applies no "
          "other position scheme",
          s->name, s->rides_on);
  }
  for (const scheme_decl* s : {&a, &b})
    if (s->points & scheme_own_path)
      return fmt::format(
          "{}'s positions come from the content (counted gates) on a path of its own that "
          "applies no other position scheme",
          s->name);
  if ((a.points & scheme_qk_transform) && (b.points & scheme_qk_transform))
    return "both map q and k at hook 1 and the engine composes no two q/k transforms; at most "
           "one is allowed";
  const uint32_t rel = scheme_relative_keys | scheme_value_term;
  if ((a.points & rel) && (b.points & rel))
    return "both own the relative tables of hooks 2a / 3; at most one is allowed";
  return "";
}

void check_scheme_combination(std::span<const std::string> on) {
  for (size_t i = 0; i < on.size(); ++i)
    for (size_t j = i + 1; j < on.size(); ++j) {
      const scheme_decl& a = scheme_decl_of(on[i]);
      const scheme_decl& b = scheme_decl_of(on[j]);
      // The content-dependent or per-pair scheme is named first: it excludes the other.
      const uint32_t own = scheme_own_path | scheme_rope_pairs;
      const bool swap = (b.points & own) && !(a.points & own);
      const std::string why = scheme_conflict(a, b);
      if (!why.empty())
        fail("{} cannot be combined with {}: {}", swap ? b.name : a.name, swap ? a.name : b.name,
             why);
    }
}

template <typename Real>
std::vector<std::string> schemes_on(const attention_position<Real>& p) {
  // The schemes of p.named (each name checked), in declaration order.
  for (const auto& n : p.named) (void)scheme_decl_of(n.name);
  std::vector<std::string> on;
  for (const auto& d : kDecls)
    for (const auto& n : p.named)
      if (n.name == d.name) on.push_back(d.name);
  return on;
}
template std::vector<std::string> schemes_on(const attention_position<float>&);
template std::vector<std::string> schemes_on(const attention_position<double>&);

namespace {

// A table cell: '|' escaped so that it stays one cell.
std::string cell(const std::string& s) {
  std::string out;
  for (const char c : s) {
    if (c == '|') out += '\\';
    out += c;
  }
  return out;
}

}  // namespace

std::string schemes_markdown() {
  std::string out =
      "| scheme | paper | enters at | learned | causal only | float K/V only | parameters |\n"
      "|---|---|---|---|---|---|---|\n";
  for (const auto& d : kDecls) {
    std::vector<std::string> ps;
    for (const auto& p : d.params)
      ps.push_back(cell(fmt::format(
          "`{}` {} {}{}{}: {}", p.name, p.shape, p.dtype,
          p.choices ? fmt::format(" ({})", fmt::join(param_choices(p), ", ")) : std::string(),
          *p.def ? fmt::format(" = {}", p.def) : std::string(), p.doc)));
    const std::string props = properties_text(d);
    out += fmt::format("| `{}` ({}) | {} | {} | {} | {} | {} | {} |\n", d.name, d.title, d.citation,
                       points_text(d.points) + (props.empty() ? "" : "; " + props),
                       d.learned ? "yes" : "no", d.causal_only ? "yes" : "no",
                       d.float_kv_only ? "yes" : "no",
                       ps.empty() ? std::string("none") : fmt::format("{}", fmt::join(ps, "; ")));
  }
  return out;
}

std::string schemes_json() {
  nlohmann::ordered_json out = nlohmann::ordered_json::array();
  for (const auto& d : kDecls) {
    nlohmann::ordered_json s;
    s["name"] = d.name;
    s["title"] = d.title;
    s["citation"] = d.citation;
    s["enters_at"] = points_text(d.points);
    s["learned"] = d.learned;
    s["causal_only"] = d.causal_only;
    s["float_kv_only"] = d.float_kv_only;
    s["attention_level"] = d.attention_level;
    // Reached by name with the arguments of its declaration's keywords and flags (the front ends
    // generate those); a scheme whose switch is a config is reached through its config.
    s["named"] = d.reached_by_name() && !d.config_valued();
    s["rides_on"] = d.rides_on ? nlohmann::ordered_json(d.rides_on) : nlohmann::ordered_json();
    s["bias_properties"] = {{"offset_only", (d.bias_props & bias_offset_only) != 0},
                            {"symmetric", (d.bias_props & bias_symmetric) != 0},
                            {"bounded", (d.bias_props & bias_bounded) != 0}};
    nlohmann::ordered_json ps = nlohmann::ordered_json::array();
    for (const auto& p : d.params)
      ps.push_back({{"name", p.name},
                    {"shape", p.shape},
                    {"dtype", p.dtype},
                    {"default", p.def},
                    {"doc", p.doc}});
    for (size_t i = 0; i < d.params.size(); ++i)
      if (d.params[i].choices) ps[i]["choices"] = param_choices(d.params[i]);
    s["params"] = ps;
    std::vector<std::string> conflicts;
    for (const auto& o : kDecls)
      if (o.attention_level && d.attention_level && !scheme_conflict(d, o).empty())
        conflicts.push_back(o.name);
    s["conflicts_with"] = conflicts;
    out.push_back(s);
  }
  return out.dump(2);
}

}  // namespace posenc
