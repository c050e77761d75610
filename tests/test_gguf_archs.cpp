// Every architecture of llama.cpp at the pinned commit, as its source has it
// (tests/golden/llama_cpp/architectures.json, read from llama_model_rope_type, the per-architecture
// loaders and graphs of src/models/ and the HF -> GGUF converter by
// scripts/golden/llama_cpp_archs.py), held against posenc's GGUF reading through the public API:
// each architecture's rope type, layout and converter permutation, the refusal of those without
// RoPE, the sliding-window layers (pattern, base, scale, the keys that override them) and the
// layers without RoPE. The expected values are the golden's, worked out here from its facts; a
// small GGUF is written per architecture with the tests' own writer.
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <regex>
#include <set>
#include <string>
#include <vector>

#include "posenc/core/error.hpp"
#include "posenc/formats/gguf.hpp"
#include "posenc/formats/hf_config.hpp"
#include "test_gguf_writer.hpp"

using namespace posenc;
using nlohmann::json;
using posenc::test::gguf_writer;

namespace {

const json& llama_golden() {
  static const json j = [] {
    std::ifstream f(std::string(POSENC_SOURCE_DIR) + "/tests/golden/llama_cpp/architectures.json");
    return json::parse(f);
  }();
  return j;
}

const json& llama_archs() {
  return llama_golden()["architectures"];
}

// Architectures llama.cpp rotates whose RoPE posenc refuses, with the word its message gives.
const std::map<std::string, std::string> refused_with_rope = {
    {"step35", "per-layer rotary widths"},  // n_rot_full halved for the full-attention layers
    {"deepseek4", "per-layer bases"},       // base and scale by compression ratio
};

bool llama_rotates(const std::string& arch) {
  const auto& a = llama_archs()[arch];
  const auto t = a["rope_type"];
  return t.is_string() && t != "NONE" && a["rope_layers"]["kind"] != "none";
}

// A model of `n` layers: d_model 512, 8 heads, rotary width 64 (the head dim), base 1e6, linear
// scaling by 4 (so that a scaled and an unscaled layer differ).
gguf_writer arch_writer(const std::string& arch, uint32_t n = 13) {
  gguf_writer w;
  w.add_string("general.architecture", arch);
  w.add_u32(arch + ".context_length", 8192);
  w.add_u32(arch + ".embedding_length", 512);
  w.add_u32(arch + ".attention.head_count", 8);
  w.add_u32(arch + ".rope.dimension_count", 64);
  w.add_f32(arch + ".rope.freq_base", 1000000.0f);
  w.add_u32(arch + ".block_count", n);
  w.add_string(arch + ".rope.scaling.type", "linear");
  w.add_f32(arch + ".rope.scaling.factor", 4.0f);
  return w;
}

// M-RoPE sections (temporal, height, width, 4th) summing to the 32 pairs.
void add_sections(gguf_writer& w, const std::string& arch) {
  w.add_array_u32(arch + ".rope.dimension_sections", {8, 12, 12, 0});
}

gguf_rope read_gguf(const gguf_writer& w, std::vector<std::string>* warnings = nullptr) {
  const auto b = w.bytes();
  return gguf_rope_config(gguf_parse(b, "m.gguf"), b, warnings);
}

// The message of the invalid_argument reading `w` throws ("" when it does not throw).
std::string refusal(const gguf_writer& w) {
  try {
    read_gguf(w);
  } catch (const invalid_argument& e) {
    return e.what();
  }
  return "";
}

bool text_has(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

bool lines_have(const std::vector<std::string>& v, const std::string& part) {
  for (const auto& s : v)
    if (text_has(s, part)) return true;
  return false;
}

// The base and scale the graph gives a layer kind, from graph_rope_args and the loader's swa
// facts: {base, scaled, reads {arch}.rope.freq_base_swa}. model.get_rope_freq_base(cparams, il)
// is the loader's sliding base on a sliding layer and the file's freq_base on a full one
// (src/llama-model.cpp), the scale alike.
struct graph_rotation {
  double base;
  bool scaled;
  bool base_key;
};
constexpr double file_base = 1e6;

graph_rotation rotation_of(const json& a, const json& args, bool sliding) {
  graph_rotation r{file_base, true, false};
  if (args.contains("call")) return {10000, false, false};  // ggml_rope: base 10000, scale 1
  const auto& b = args["freq_base"];
  const auto& s = args["freq_scale"];
  const bool per_layer_base = b.is_string() && text_has(b.get<std::string>(), "get_rope_freq_base");
  if (!sliding && per_layer_base) {
    EXPECT_TRUE(s.is_string() && text_has(s.get<std::string>(), "get_rope_freq_scale")) << s;
    return r;
  }
  if (per_layer_base && a.contains("swa")) {
    const auto& lb = a["swa"]["base"];
    r.base = lb.is_number() ? lb.get<double>() : file_base;
    r.base_key = a["swa"]["freq_base_swa_key"].get<bool>();
  } else if (!per_layer_base) {
    EXPECT_EQ(b, "freq_base");
  }
  if (s.is_number()) {
    r.scaled = s.get<double>() != 1;
  } else if (text_has(s.get<std::string>(), "get_rope_freq_scale") && a.contains("swa")) {
    const auto& ls = a["swa"]["scale"];
    r.scaled = !ls.is_number() || ls.get<double>() != 1;
  } else if (!text_has(s.get<std::string>(), "get_rope_freq_scale")) {
    EXPECT_EQ(s, "freq_scale");
  }
  return r;
}

// The arguments of a layer kind ("sliding" / "full"), else those of every layer.
const json& graph_args(const json& a, const char* kind) {
  const auto& g = a["graph_rope_args"];
  if (g.contains(kind)) return g[kind];
  if (g.contains("all")) return g["all"];
  return g.begin().value();  // a graph that rotates one kind only
}

void expect_rotation(const rope_config& c, const graph_rotation& want, const std::string& what) {
  EXPECT_EQ(c.theta, want.base) << what;
  EXPECT_EQ(c.type, want.scaled ? rope_type::linear : rope_type::default_) << what;
}

// Whether the loader sets the sliding pattern for a file with this window key and block count.
bool pattern_on(const json& when, std::optional<uint32_t> window, uint32_t n) {
  const std::string w = when.get<std::string>();
  std::smatch m;
  if (w == "always") return true;
  if (w == "sliding_window > 0") return window && *window > 0;
  if (w == "sliding_window absent or > 0") return !window || *window > 0;
  if (std::regex_match(w, m, std::regex(R"(hparams\.n_layer\(\) == (\d+))")))
    return n == std::stoul(m[1]);
  ADD_FAILURE() << "a loader condition this test does not read: " << w;
  return false;
}

// The block count that switches the pattern on (exaone4: 64).
uint32_t layers_for(const json& a) {
  std::smatch m;
  const std::string w = a.contains("swa") ? a["swa"]["when"].get<std::string>() : "";
  if (std::regex_match(w, m, std::regex(R"(hparams\.n_layer\(\) == (\d+))")))
    return static_cast<uint32_t>(std::stoul(m[1]));
  return 13;
}

// Layer i sliding under the golden's pattern (per-layer arrays: the test writes i % 3 != 2).
bool sliding_layer(const json& pattern, uint32_t i) {
  const std::string kind = pattern["kind"];
  if (kind == "per_layer_array") return i % 3 != 2;
  const uint32_t p = pattern["period"];
  if (kind == "all_sliding" || p == 0) return true;
  if (kind == "dense_first" || kind == "dense_first_or_array") return i % p != 0;
  return i % p < p - 1;
}

std::vector<uint32_t> per_layer_array(uint32_t n) {
  std::vector<uint32_t> v(n);
  for (uint32_t i = 0; i < n; ++i) v[i] = i % 3 != 2;
  return v;
}

}  // namespace

TEST(GgufArchs, GoldenHoldsEveryArchitectureOfThePinnedCommit) {
  const auto& g = llama_golden();
  EXPECT_EQ(g["llama_cpp"]["commit"], "6dafc14e50e1c248621618f3786f5005767a1d39");
  EXPECT_TRUE(g["unparsed"].empty()) << g["unparsed"].dump(1);
  int total = 0, sum = 0;
  for (const auto& [name, a] : llama_archs().items()) {
    ++total;
    ASSERT_TRUE(a["rope_type"].is_string()) << name;
  }
  for (const char* t : {"NONE", "NORM", "NEOX", "MROPE", "IMROPE", "VISION"})
    sum += g["counts"][t].get<int>();
  EXPECT_EQ(total, g["counts"]["total"].get<int>());
  EXPECT_EQ(sum, total);
  EXPECT_GT(total, 100);
}

// Each architecture llama.cpp rotates: posenc's rope type, layout (NORM interleaved, the others
// half), the converter's q/k permutation, and the base and scale the graph rotates the full
// layers with; the M-RoPE switch of glm4, glm4moe and hunyuan_vl with rope sections.
TEST(GgufArchs, EveryRotatedArchitectureHasLlamaCppsRopeType) {
  int read_ok = 0;
  for (const auto& [arch, a] : llama_archs().items()) {
    if (!llama_rotates(arch)) continue;
    SCOPED_TRACE(arch);
    const std::string type = a["rope_type"];
    auto w = arch_writer(arch);
    if (type == "MROPE" || type == "IMROPE") add_sections(w, arch);
    if (refused_with_rope.count(arch)) {
      const auto msg = refusal(w);
      EXPECT_TRUE(text_has(msg, "general.architecture = '" + arch + "'")) << msg;
      EXPECT_TRUE(text_has(msg, refused_with_rope.at(arch))) << msg;
      continue;
    }
    std::vector<std::string> warnings;
    const auto r = read_gguf(w, &warnings);
    ++read_ok;
    EXPECT_EQ(r.rope_type, type);
    ASSERT_TRUE(r.layout.has_value());
    EXPECT_EQ(*r.layout, type == "NORM" ? rope_layout::interleaved : rope_layout::half);
    const auto& perm = a["converter"]["permuted_from_hf"];
    ASSERT_FALSE(perm == "mixed") << "the converter's classes disagree: decide the row by hand";
    EXPECT_EQ(r.permuted_from_hf, perm == true);
    // The rotated layers' base and scale (the full ones', or the sliding ones' where only those
    // rotate).
    const auto& g = a["graph_rope_args"];
    const bool full = g.contains("full") || g.contains("all");
    const auto want = rotation_of(a, full ? graph_args(a, "full") : g["sliding"], !full);
    expect_rotation(r.config, want, "rotated layers");
    EXPECT_EQ(lines_have(warnings, "scaling is not applied"), !want.scaled);
    EXPECT_EQ(lines_have(warnings, "base 10000 taken"), want.base != file_base);
    if (a.contains("rope_type_with_mrope_sections")) {
      auto ws = arch_writer(arch);
      add_sections(ws, arch);
      const auto rs = read_gguf(ws);
      EXPECT_EQ(rs.rope_type, a["rope_type_with_mrope_sections"]);
      EXPECT_EQ(*rs.layout, rope_layout::half);
    }
  }
  EXPECT_GT(read_ok, 100);
}

// posenc's table holds exactly the architectures llama.cpp rotates (less those refused above):
// the message for an unknown architecture names them all.
TEST(GgufArchs, UnknownArchitectureIsRefusedNamingTheKnownOnes) {
  const auto msg = refusal(arch_writer("no-such-arch"));
  ASSERT_TRUE(text_has(msg,
                       "general.architecture = 'no-such-arch' is not an architecture of "
                       "llama.cpp 6dafc14e50e1c248621618f3786f5005767a1d39"))
      << msg;
  const auto list = msg.substr(msg.rfind(": ") + 2);
  std::set<std::string> named, want;
  for (size_t i = 0; i <= list.size();) {
    const size_t j = std::min(list.find(", ", i), list.size());
    named.insert(list.substr(i, j - i));
    i = j + 2;
  }
  for (const auto& [arch, a] : llama_archs().items())
    if (llama_rotates(arch) && !refused_with_rope.count(arch)) want.insert(arch);
  EXPECT_EQ(named, want);
}

// Architectures without RoPE in llama.cpp (rope type NONE, or a graph that rotates no query:
// starcoder and bert, with learned absolute positions) are refused by name.
TEST(GgufArchs, ArchitecturesWithoutRopeAreRefusedByName) {
  int n = 0;
  for (const auto& [arch, a] : llama_archs().items()) {
    if (llama_rotates(arch)) continue;
    SCOPED_TRACE(arch);
    ++n;
    const auto msg = refusal(arch_writer(arch));
    EXPECT_TRUE(text_has(msg, "m.gguf: general.architecture = '" + arch + "'")) << msg;
    EXPECT_TRUE(text_has(msg, a["rope_type"] == "NONE" ? "no RoPE (llama_model_rope_type: "
                                                         "LLAMA_ROPE_TYPE_NONE)"
                                                       : "rotates no query"))
        << msg;
    EXPECT_TRUE(text_has(msg,
                         "posenc reads the RoPE of llama.cpp's NORM, NEOX, MROPE and IMROPE "
                         "architectures"))
        << msg;
  }
  EXPECT_EQ(n, llama_golden()["counts"]["NONE"].get<int>() + 2);
}

// The sliding-window layers as llama.cpp's loader sets them and its graph rotates them: the
// pattern (period, dense first, per-layer array), the sliding layers' base and scale, the
// {arch}.rope.freq_base_swa override where the graph reads it, no pattern where the loader's
// condition is false, and none for an architecture whose loader sets none.
TEST(GgufArchs, SlidingLayersAsLlamaCppsLoaderAndGraph) {
  // lfm2: its sliding layers are the attention layers, rotated like the full ones (the graph
  // passes freq_base and freq_scale to every layer): one RoPE.
  const std::set<std::string> one_rope = {"lfm2"};
  int modelled = 0;
  for (const auto& [arch, a] : llama_archs().items()) {
    if (!llama_rotates(arch) || refused_with_rope.count(arch)) continue;
    SCOPED_TRACE(arch);
    const uint32_t n = layers_for(a);
    auto w = arch_writer(arch, n);
    w.add_u32(arch + ".attention.sliding_window", 1024);
    if (a.contains("swa") && a["swa"]["pattern"]["kind"] == "per_layer_array")
      w.add_array_u32(arch + ".attention.sliding_window_pattern", per_layer_array(n));
    if (a["rope_layers"]["kind"] == "sliding_or_dense_lead")
      w.add_u32(arch + ".leading_dense_block_count", 1);
    auto& type = a["rope_type"];
    if (type == "MROPE" || type == "IMROPE") add_sections(w, arch);
    const auto r = read_gguf(w);
    if (!a.contains("swa") || one_rope.count(arch)) {
      EXPECT_FALSE(r.sliding.has_value());
      EXPECT_TRUE(r.layer_types.empty());
      continue;
    }
    const auto& swa = a["swa"];
    ASSERT_TRUE(pattern_on(swa["when"], 1024, n));
    ASSERT_TRUE(r.sliding.has_value());
    ++modelled;
    const std::string lt = swa["swa_type"] == "CHUNKED" ? "chunked_attention" : "sliding_attention";
    EXPECT_EQ(r.sliding_type, lt);
    ASSERT_EQ(r.layer_types.size(), n);
    for (uint32_t i = 0; i < n; ++i)
      EXPECT_EQ(r.layer_types[i], sliding_layer(swa["pattern"], i) ? lt : "full_attention") << i;
    const auto want = rotation_of(a, graph_args(a, "sliding"), true);
    expect_rotation(*r.sliding, want, "sliding layers");
    EXPECT_EQ(gguf_rope_layer(r, lt).theta, want.base);

    // {arch}.rope.freq_base_swa: read where the graph takes the per-layer base.
    auto wk = w;
    wk.add_f32(arch + ".rope.freq_base_swa", 20000.0f);
    std::vector<std::string> warnings;
    const auto rk = read_gguf(wk, &warnings);
    EXPECT_EQ(rk.sliding->theta, want.base_key ? 20000.0 : want.base);
    EXPECT_EQ(lines_have(warnings, arch + ".rope.freq_base_swa = 20000 is not used by llama.cpp"),
              !want.base_key);

    // A period from the key, where the pattern has one.
    const std::string kind = swa["pattern"]["kind"];
    if (swa["pattern"].value("period_key", false)) {
      auto wp = arch_writer(arch, n);
      wp.add_u32(arch + ".attention.sliding_window", 1024);
      wp.add_u32(arch + ".attention.sliding_window_pattern", 3);
      if (a["rope_layers"]["kind"] == "sliding_or_dense_lead")
        wp.add_u32(arch + ".leading_dense_block_count", 1);
      const auto rp = read_gguf(wp);
      json p3 = swa["pattern"];
      p3["period"] = 3;
      for (uint32_t i = 0; i < n; ++i)
        EXPECT_EQ(rp.layer_types[i], sliding_layer(p3, i) ? lt : "full_attention") << i;
    }
    // A per-layer array where the loader reads one besides the period.
    if (swa["pattern"].value("per_layer_array_key", false)) {
      auto wa = arch_writer(arch, n);
      wa.add_u32(arch + ".attention.sliding_window", 1024);
      wa.add_array_u32(arch + ".attention.sliding_window_pattern", per_layer_array(n));
      if (a["rope_layers"]["kind"] == "sliding_or_dense_lead")
        wa.add_u32(arch + ".leading_dense_block_count", 1);
      const auto ra = read_gguf(wa);
      for (uint32_t i = 0; i < n; ++i)
        EXPECT_EQ(ra.layer_types[i], i % 3 != 2 ? lt : "full_attention") << i;
    }

    // No pattern where the loader's condition is false.
    for (const std::optional<uint32_t> window : {std::optional<uint32_t>(), std::optional(0u)}) {
      const uint32_t m = n == 13 ? 13 : n + 1;
      if (pattern_on(swa["when"], window, m)) continue;
      auto wn = arch_writer(arch, m);
      if (window) wn.add_u32(arch + ".attention.sliding_window", *window);
      const auto rn = read_gguf(wn);
      EXPECT_FALSE(rn.sliding.has_value()) << (window ? "window 0" : "no window");
    }
  }
  EXPECT_GE(modelled, 18);
}

// The layers llama.cpp's graph does not rotate: the full-attention layers (sliding_only), those
// after the leading dense blocks, and every step-th layer, with the loader's step overrides;
// "full_attention" is refused when none of those layers rotates. Granite's switch turns RoPE
// off for the whole model.
TEST(GgufArchs, LayersWithoutRopeAsLlamaCppsGraph) {
  int with_nope = 0;
  for (const auto& [arch, a] : llama_archs().items()) {
    if (!llama_rotates(arch) || refused_with_rope.count(arch)) continue;
    SCOPED_TRACE(arch);
    const auto& rl = a["rope_layers"];
    const std::string kind = rl["kind"];
    if (kind == "all_unless_rope_finetuned_false") {
      auto w = arch_writer(arch);
      w.add_bool(arch + ".rope.scaling.finetuned", false);
      const auto msg = refusal(w);
      EXPECT_TRUE(text_has(msg, arch + ".rope.scaling.finetuned = false: llama.cpp's " + arch +
                                    " graph rotates no layer"))
          << msg;
      auto on = arch_writer(arch);
      on.add_bool(arch + ".rope.scaling.finetuned", true);
      EXPECT_TRUE(read_gguf(on).nope_layers.empty());
      continue;
    }
    for (const std::optional<uint32_t> window :
         {std::optional(1024u), std::optional(0u), std::optional<uint32_t>()}) {
      const uint32_t n = layers_for(a);
      auto w = arch_writer(arch, n);
      if (window) w.add_u32(arch + ".attention.sliding_window", *window);
      if (kind == "sliding_or_dense_lead") w.add_u32(arch + ".leading_dense_block_count", 1);
      const auto& type = a["rope_type"];
      if (type == "MROPE" || type == "IMROPE") add_sections(w, arch);
      const auto r = read_gguf(w);
      const bool on = a.contains("swa") && pattern_on(a["swa"]["when"], window, n) &&
                      a["swa"]["pattern"]["kind"] != "custom";
      // (a structured binding is not captured: clang 14 refuses it)
      const json pattern = on ? a["swa"]["pattern"] : json();
      const auto full = [&](uint32_t i) { return on && !sliding_layer(pattern, i); };
      std::vector<int64_t> want;
      if (kind == "nope_step") {
        uint32_t step = rl["step_default"];
        for (const auto& set : a.value("no_rope_layer_step_set", json::array())) {
          const std::string when = set["when"];
          const bool applies = when == "always" ||
                               (when == "sliding_window == 0" && window && *window == 0) ||
                               (when == "sliding_window absent or 0" && (!window || *window == 0));
          if (applies) step = set["value"].is_number() ? set["value"].get<uint32_t>() : n;
        }
        const bool every = rl.contains("unless") && step == n;
        for (uint32_t i = 0; i < n && !every; ++i)
          if ((i + rl["offset"].get<uint32_t>()) % step == 0) want.push_back(i);
      } else if (kind == "sliding_only" || kind == "sliding_only_when_swa") {
        for (uint32_t i = 0; i < n; ++i)
          if (full(i)) want.push_back(i);
      } else if (kind == "sliding_or_dense_lead") {
        for (uint32_t i = 1; i < n; ++i)
          if (full(i)) want.push_back(i);
      } else {
        EXPECT_EQ(kind, "all");
      }
      const std::string trace = window ? "window " + std::to_string(*window) : "no window";
      EXPECT_EQ(r.nope_layers, want) << trace;
      if (!want.empty()) {
        ++with_nope;
        EXPECT_TRUE(lines_have(r.notes, "llama.cpp's " + arch + " graph applies no RoPE to"))
            << trace;
      }
      bool every_full = on;
      for (uint32_t i = 0; i < n; ++i)
        if (full(i)) every_full = every_full && std::count(want.begin(), want.end(), i);
      EXPECT_EQ(r.full_nope, every_full) << trace;
      if (r.sliding) {
        const auto msg = [&] {
          try {
            gguf_rope_layer(r, "full_attention");
          } catch (const invalid_argument& e) {
            return std::string(e.what());
          }
          return std::string();
        }();
        EXPECT_EQ(
            text_has(msg, "llama.cpp applies no RoPE to " + arch + "'s full-attention layers"),
            every_full)
            << trace << ": " << msg;
      }
    }
  }
  EXPECT_GE(with_nope, 8);
}

// The query scale by position (llama_graph's build_inp_attn_scale): every architecture whose
// loader reads {arch}.attention.temperature_scale (the golden's query_scale, read from
// llama.cpp's source) gets it in the RoPE config with the positions per step from where its
// loader takes them, at offset 0; another architecture's file with the keys says they are not
// read. llama4's constants (scale 0.1f) are built into its loader and act on its NoPE layers,
// outside the RoPE config: posenc does not carry them from a GGUF file.
TEST(GgufArchs, QueryScaleAsLlamaCppsLoader) {
  int read = 0;
  for (const auto& [arch, a] : llama_archs().items()) {
    if (!llama_rotates(arch) || refused_with_rope.count(arch)) continue;
    SCOPED_TRACE(arch);
    const json qs = a.contains("query_scale") ? a["query_scale"] : json();
    const bool reads_key = !qs.is_null() && qs["scale"] == "key:attention.temperature_scale";
    auto w = arch_writer(arch);
    const auto& type = a["rope_type"];
    if (type == "MROPE" || type == "IMROPE") add_sections(w, arch);
    w.add_f32(arch + ".attention.temperature_scale", 0.25f);
    w.add_u32(arch + ".attention.temperature_length", 4096);
    w.add_u32(arch + ".rope.scaling.original_context_length", 2048);
    std::vector<std::string> warnings;
    const auto r = read_gguf(w, &warnings);
    if (!reads_key) {
      EXPECT_EQ(r.config.llama_4_scaling_beta, 0.0);
      EXPECT_TRUE(lines_have(warnings, arch +
                                           ".attention.temperature_scale is not read by "
                                           "llama.cpp for " +
                                           arch));
      continue;
    }
    ++read;
    EXPECT_EQ(qs["offset"], "0.0f");
    EXPECT_EQ(r.config.llama_4_scaling_beta, 0.25);
    const std::string floor = qs["floor"];
    if (floor == "key:attention.temperature_length") {
      EXPECT_EQ(r.config.llama_4_scaling_floor, 4096);
    } else {
      ASSERT_EQ(floor, "hparams.n_ctx_orig_yarn");
      EXPECT_EQ(r.config.llama_4_scaling_floor, 2048);
      // n_ctx_orig_yarn is the training context without the key (llama_model_base).
      auto bare = arch_writer(arch);
      bare.add_f32(arch + ".attention.temperature_scale", 0.25f);
      EXPECT_EQ(read_gguf(bare).config.llama_4_scaling_floor, 8192);
    }
    // A scale of 0 is none; a scale without its positions per step is refused, as llama.cpp does.
    auto zero = arch_writer(arch);
    zero.add_f32(arch + ".attention.temperature_scale", 0.0f);
    EXPECT_EQ(read_gguf(zero).config.llama_4_scaling_beta, 0.0);
    if (floor == "key:attention.temperature_length") {
      auto no_len = arch_writer(arch);
      no_len.add_f32(arch + ".attention.temperature_scale", 0.25f);
      EXPECT_TRUE(text_has(refusal(no_len), arch + ".attention.temperature_scale = 0.25 needs " +
                                                arch + ".attention.temperature_length > 0"))
          << refusal(no_len);
    }
  }
  EXPECT_EQ(read, 3);  // deepseek2, mistral3, mistral4
}
