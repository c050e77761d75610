// transformers' config-class defaults (posenc/formats/hf_config.hpp, "transformers' class
// defaults"): the keys published configs leave out are filled in as the class fills them, each with
// a note. The configs below are the published text_config blocks of google/gemma-3-4b-it, -12b-it
// and -27b-it (only their RoPE-relevant keys), which rely on Gemma3TextConfig's defaults; the
// expected values are the class's own (models/gemma3/configuration_gemma3.py at transformers
// c49429ed: default_theta {"global": 1e6, "local": 1e4}, head_dim 256, sliding_window_pattern 6).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "posenc/core/error.hpp"
#include "posenc/encodings/rope.hpp"
#include "posenc/formats/hf_config.hpp"
#include "posenc/positions/positions.hpp"

using namespace posenc;
using nlohmann::json;

namespace {

json gemma3(const json& text) {
  return {{"architectures", {"Gemma3ForConditionalGeneration"}},
          {"model_type", "gemma3"},
          {"text_config", text}};
}

const json kGemma3_4b = {{"hidden_size", 2560},
                         {"intermediate_size", 10240},
                         {"model_type", "gemma3_text"},
                         {"num_hidden_layers", 34},
                         {"rope_scaling", {{"factor", 8.0}, {"rope_type", "linear"}}},
                         {"sliding_window", 1024}};
const json kGemma3_12b = {{"hidden_size", 3840},
                          {"intermediate_size", 15360},
                          {"model_type", "gemma3_text"},
                          {"num_attention_heads", 16},
                          {"num_hidden_layers", 48},
                          {"num_key_value_heads", 8},
                          {"rope_scaling", {{"factor", 8.0}, {"rope_type", "linear"}}},
                          {"sliding_window", 1024}};

bool has_note(const std::vector<std::string>& notes, const std::string& key) {
  return std::any_of(notes.begin(), notes.end(), [&](const std::string& n) {
    return n.rfind(key + " is missing", 0) == 0 && n.find("Gemma3TextConfig") != std::string::npos;
  });
}

}  // namespace

TEST(HfClassDefaults, Gemma3TextConfigSuppliesThetaLocalBaseAndHeadDim) {
  for (const json& text : {kGemma3_4b, kGemma3_12b}) {
    const json cfg = gemma3(text);
    std::vector<std::string> w;
    const rope_config full = rope_config_from_json(cfg, "full_attention", &w);
    EXPECT_EQ(full.type, rope_type::linear);
    EXPECT_EQ(full.factor, 8.0);
    EXPECT_EQ(full.theta, 1e6);
    EXPECT_EQ(full.head_dim, 256);  // not hidden_size / heads (12B: 3840 / 16 = 240)
    EXPECT_EQ(full.rotary_dim, 256);
    EXPECT_TRUE(has_note(w, "rope_theta")) << w.size();
    EXPECT_TRUE(has_note(w, "head_dim"));
    // Sliding layers: the local base, unscaled (the linear x8 belongs to the full layers).
    w.clear();
    const rope_config sliding = rope_config_from_json(cfg, "sliding_attention", &w);
    EXPECT_EQ(sliding.type, rope_type::default_);
    EXPECT_EQ(sliding.theta, 1e4);
    EXPECT_EQ(sliding.head_dim, 256);
    EXPECT_TRUE(has_note(w, "rope_local_base_freq"));
    // The layer plan: every sixth layer full (sliding_window_pattern 6), notes kept.
    const rope_layer_plan plan = hf_layer_plan(cfg);
    const size_t L = text.at("num_hidden_layers").get<size_t>();
    ASSERT_EQ(plan.layer_types.size(), L);
    for (size_t i = 0; i < L; ++i)
      EXPECT_EQ(plan.layer_types[i], i % 6 == 5 ? "full_attention" : "sliding_attention") << i;
    EXPECT_NE(plan.source.find("Gemma3TextConfig"), std::string::npos) << plan.source;
    EXPECT_TRUE(has_note(plan.defaults, "layer_types"));
  }
}

TEST(HfClassDefaults, GivenKeysWinAndTakeNoNote) {
  json text = kGemma3_12b;
  text["rope_theta"] = 5e5;
  text["rope_local_base_freq"] = 2e4;
  text["head_dim"] = 240;
  std::vector<std::string> w;
  const rope_config full = rope_config_from_json(gemma3(text), "full_attention", &w);
  EXPECT_EQ(full.theta, 5e5);
  EXPECT_EQ(full.head_dim, 240);
  EXPECT_FALSE(has_note(w, "rope_theta"));
  EXPECT_FALSE(has_note(w, "head_dim"));
  EXPECT_EQ(rope_config_from_json(gemma3(text), "sliding_attention", nullptr).theta, 2e4);
}

TEST(HfClassDefaults, A4bTextConfigWithoutHeadDimIsRead) {
  // Before class defaults: "head_dim is missing and cannot be derived".
  const rope_config c = rope_config_from_json(gemma3(kGemma3_4b), nullptr);
  EXPECT_EQ(c.head_dim, 256);
  EXPECT_EQ(c.theta, 1e6);
}

TEST(HfClassDefaults, LayerTypeQueryWithoutNumHiddenLayers) {
  // A model class posenc has no table row for, with a pattern and no num_hidden_layers: the two
  // types are known, a layer-type query needs nothing more.
  const json cfg = {{"model_type", "my_gemma_like"},
                    {"head_dim", 64},
                    {"sliding_window_pattern", 4},
                    {"rope_theta", 1e6},
                    {"rope_local_base_freq", 1e4}};
  const rope_layer_plan plan = hf_layer_plan(cfg);
  EXPECT_EQ(plan.types, (std::vector<std::string>{"sliding_attention", "full_attention"}));
  EXPECT_TRUE(plan.layer_types.empty());
  EXPECT_EQ(rope_config_from_json(cfg, "sliding_attention", nullptr).theta, 1e4);
  EXPECT_EQ(rope_config_from_json(cfg, "full_attention", nullptr).theta, 1e6);
  // Gemma 3 itself without num_hidden_layers: the class's 26 layers.
  json text = kGemma3_4b;
  text.erase("num_hidden_layers");
  std::vector<std::string> notes;
  EXPECT_EQ(hf_layer_plan(gemma3(text)).layer_types.size(), 26u);
  EXPECT_EQ(rope_config_from_json(gemma3(text), "sliding_attention", &notes).theta, 1e4);
  EXPECT_TRUE(has_note(notes, "num_hidden_layers"));
}

TEST(HfClassDefaults, Gemma4WithoutLayerTypesGetsTheClassPattern) {
  // Gemma4TextConfig: sliding : full = 5 : 1 and the last layer forced full; with no RoPE block
  // the class's own per-layer-type block (proportional, partial 0.25, theta 1e6 on full layers).
  const json cfg = {{"model_type", "gemma4_text"},
                    {"num_hidden_layers", 8},
                    {"head_dim", 256},
                    {"global_head_dim", 512}};
  const rope_layer_plan plan = hf_layer_plan(cfg);
  const std::vector<std::string> want = {
      "sliding_attention", "sliding_attention", "sliding_attention", "sliding_attention",
      "sliding_attention", "full_attention",    "sliding_attention", "full_attention"};
  EXPECT_EQ(plan.layer_types, want);
  const rope_config full = rope_config_from_json(cfg, "full_attention", nullptr);
  EXPECT_EQ(full.type, rope_type::proportional);
  EXPECT_EQ(full.theta, 1e6);
  EXPECT_EQ(full.head_dim, 512);
  ASSERT_TRUE(full.rotated_pairs.has_value());
  EXPECT_EQ(*full.rotated_pairs, 64);  // floor(0.25 * 512 / 2)
  const rope_config sliding = rope_config_from_json(cfg, "sliding_attention", nullptr);
  EXPECT_EQ(sliding.type, rope_type::default_);
  EXPECT_EQ(sliding.theta, 1e4);
  EXPECT_EQ(sliding.head_dim, 256);
}

TEST(HfClassDefaults, OtherClasses) {
  std::vector<std::string> w;
  // Qwen3Config: head_dim 128 by default, not hidden_size / heads.
  EXPECT_EQ(rope_config_from_json(json{{"model_type", "qwen3"},
                                       {"hidden_size", 2560},
                                       {"num_attention_heads", 32},
                                       {"rope_theta", 1e6}},
                                  &w)
                .head_dim,
            128);
  // GptOssConfig: theta 150000, head_dim 64 and YaRN x32 (truncate false) when no block.
  const rope_config oss = rope_config_from_json(json{{"model_type", "gpt_oss"}}, nullptr);
  EXPECT_EQ(oss.type, rope_type::yarn);
  EXPECT_EQ(oss.theta, 150000.0);
  EXPECT_EQ(oss.head_dim, 64);
  EXPECT_EQ(oss.factor, 32.0);
  EXPECT_FALSE(oss.truncate);
  EXPECT_EQ(oss.original_max_position_embeddings, 4096);
  // GPT-NeoX: rotary_pct 0.25; Phi: 0.5; Mixtral: theta 1e6.
  EXPECT_EQ(rope_config_from_json(
                json{{"model_type", "gpt_neox"}, {"hidden_size", 512}, {"num_attention_heads", 8}},
                nullptr)
                .rotary_dim,
            16);
  EXPECT_EQ(
      rope_config_from_json(
          json{{"model_type", "phi"}, {"hidden_size", 2560}, {"num_attention_heads", 32}}, nullptr)
          .rotary_dim,
      40);
  EXPECT_EQ(rope_config_from_json(json{{"model_type", "mixtral"}}, nullptr).theta, 1e6);
  // DeepSeek V3: the MLA rotary head, 64.
  EXPECT_EQ(rope_config_from_json(json{{"model_type", "deepseek_v3"}}, nullptr).head_dim, 64);
  // An unknown class gets nothing filled in: the old error stands.
  EXPECT_THROW(rope_config_from_json(json{{"model_type", "no_such_model"}}, nullptr),
               invalid_argument);
}

// OLMo 3: Olmo3Config keeps a RoPE block per layer type (models/olmo3/configuration_olmo3.py
// at transformers 008e5743, convert_rope_params_to_dict): a legacy rope_scaling (YaRN in the
// published Olmo-3 configs) updates the full_attention block only, the sliding_attention block
// stays default RoPE; rope_theta goes to the full block and the sliding block takes the class
// default 500000; layer_types defaults to every 4th layer full. Expected values from that code,
// read by hand.
TEST(HfClassDefaults, Olmo3ScalesOnlyItsFullAttentionLayers) {
  json cfg = {{"model_type", "olmo3"},
              {"hidden_size", 4096},
              {"num_attention_heads", 32},
              {"num_hidden_layers", 8},
              {"max_position_embeddings", 65536},
              {"rope_theta", 500000},
              {"sliding_window", 4096},
              {"rope_scaling",
               {{"rope_type", "yarn"},
                {"factor", 8.0},
                {"original_max_position_embeddings", 8192},
                {"attention_factor", 1.2079441541679836},
                {"beta_fast", 32},
                {"beta_slow", 1}}}};
  std::vector<std::string> w;
  const rope_config full = rope_config_from_json(cfg, "full_attention", &w);
  EXPECT_EQ(full.type, rope_type::yarn);
  EXPECT_EQ(full.factor, 8.0);
  EXPECT_EQ(full.attention_factor, 1.2079441541679836);
  EXPECT_EQ(full.theta, 500000.0);
  const rope_config sliding = rope_config_from_json(cfg, "sliding_attention", &w);
  EXPECT_EQ(sliding.type, rope_type::default_);
  EXPECT_FALSE(sliding.attention_factor.has_value());  // no YaRN factor: 1
  EXPECT_EQ(sliding.theta, 500000.0);
  EXPECT_EQ(sliding.head_dim, 128);
  const rope_layer_plan plan = hf_layer_plan(cfg);
  ASSERT_EQ(plan.layer_types.size(), 8u);
  for (size_t i = 0; i < 8; ++i)
    EXPECT_EQ(plan.layer_types[i], (i + 1) % 4 != 0 ? "sliding_attention" : "full_attention") << i;
  EXPECT_NE(plan.source.find("Olmo3Config"), std::string::npos) << plan.source;
  // rope_theta reaches the full layers only.
  cfg["rope_theta"] = 10000;
  EXPECT_EQ(rope_config_from_json(cfg, "full_attention", &w).theta, 10000.0);
  EXPECT_EQ(rope_config_from_json(cfg, "sliding_attention", &w).theta, 500000.0);
  // One flat block is not what the class builds from: refused by name.
  cfg.erase("rope_scaling");
  cfg["rope_parameters"] = {{"rope_type", "default"}, {"rope_theta", 10000}};
  try {
    rope_config_from_json(cfg, "full_attention", &w);
    ADD_FAILURE() << "a flat rope_parameters block for olmo3 was accepted";
  } catch (const invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("olmo3"), std::string::npos) << e.what();
  }
}

TEST(HfClassDefaults, TableMatchesTheClassesRunAtTheirCommit) {
  // tests/golden/transformers/class_defaults.json: what each class itself builds when
  // instantiated with nothing, and with hidden_size 1536 / 12 heads (how head_dim is derived),
  // run unchanged at transformers c49429ed (scripts/golden/transformers.py). Every row of the
  // table is held against it.
  const std::filesystem::path p =
      std::filesystem::path(POSENC_SOURCE_DIR) / "tests/golden/transformers/class_defaults.json";
  std::ifstream in(p);
  ASSERT_TRUE(in) << p;
  const json golden = json::parse(in);
  ASSERT_EQ(golden.at("transformers_commit").get<std::string>().substr(0, 8), "c49429ed");
  const json& classes = golden.at("classes");
  const auto num = [](const json& o, const char* k) -> std::optional<double> {
    if (!o.is_object() || !o.contains(k) || !o.at(k).is_number()) return std::nullopt;
    return o.at(k).get<double>();
  };
  // The generated rows (hf_class_table.inc) against what scripts/golden/class_table.py measured
  // of their classes (tests/golden/transformers/class_table.json), the hand rows against
  // class_defaults.json below.
  std::ifstream tin(std::filesystem::path(POSENC_SOURCE_DIR) /
                    "tests/golden/transformers/class_table.json");
  ASSERT_TRUE(tin);
  const json table = json::parse(tin);
  ASSERT_EQ(table.at("transformers_commit").get<std::string>().substr(0, 8), "c49429ed");
  std::map<std::string, json> measured;
  for (const auto& [mt, m] : table.at("model_types").items())
    if (m.contains("text_model_type"))
      measured.emplace(m.at("text_model_type").get<std::string>(), m);
  const auto hand = table.at("hand_rows").get<std::vector<std::string>>();
  int compared = 0, generated = 0;
  for (const hf_class_defaults& d : hf_class_defaults_table()) {
    SCOPED_TRACE(d.model_type);
    if (std::find(hand.begin(), hand.end(), d.model_type) == hand.end()) {
      ASSERT_TRUE(measured.count(d.model_type)) << "neither golden has this row";
      const json& m = measured.at(d.model_type);
      EXPECT_EQ(m.at("config_class").get<std::string>(), d.class_name);
      EXPECT_EQ(num(m, "theta").value_or(0.0), d.theta);
      EXPECT_EQ(num(m, "head_dim"), d.head_dim);
      EXPECT_EQ(num(m, "hidden_size"), d.hidden_size);
      EXPECT_EQ(num(m, "num_attention_heads"), d.num_attention_heads);
      EXPECT_EQ(num(m, "num_hidden_layers"), d.num_hidden_layers);
      EXPECT_EQ(num(m, "max_position_embeddings").value_or(0.0), d.max_position_embeddings);
      EXPECT_EQ(m.at("pattern").get<std::string>(), hf_layer_pattern_name(d.pattern));
      EXPECT_EQ(num(m, "period"), d.pattern_period);
      EXPECT_EQ(m.at("block").is_null(), d.rope_block == nullptr);
      if (d.rope_block) {
        EXPECT_EQ(json::parse(d.rope_block), m.at("block"));
      }
      ++compared, ++generated;
      continue;
    }
    const json& g = classes.at(d.model_type);
    EXPECT_EQ(g.at("class").get<std::string>(), d.class_name);
    ASSERT_TRUE(g.at("instance_with_nothing").at("ok").get<bool>());
    const json& c = g.at("instance_with_nothing").at("config");
    const json& rp = c.at("rope_parameters");
    if (rp.contains("full_attention")) {
      EXPECT_EQ(num(rp.at("full_attention"), "rope_theta"), d.theta);
      EXPECT_EQ(num(rp.at("sliding_attention"), "rope_theta"), d.local_theta);
    } else {
      EXPECT_EQ(num(rp, "rope_theta"), d.theta);
      const auto prf = num(rp, "partial_rotary_factor");
      EXPECT_EQ(prf.value_or(num(c, "partial_rotary_factor").value_or(1.0)),
                d.partial_rotary_factor > 0 ? d.partial_rotary_factor : 1.0);
    }
    if (d.qk_rope_head_dim > 0) {
      EXPECT_EQ(num(c, "qk_rope_head_dim"), d.qk_rope_head_dim);
    } else {
      EXPECT_EQ(num(c, "hidden_size"), d.hidden_size);
      EXPECT_EQ(num(c, "num_attention_heads"), d.num_attention_heads);
      const int64_t want = d.head_dim > 0 ? d.head_dim : d.hidden_size / d.num_attention_heads;
      // Gemma 4 keeps head_dim per layer (its instance lists none): the field default then.
      const auto hd =
          num(c, "head_dim") ? num(c, "head_dim") : num(g.at("field_defaults"), "head_dim");
      EXPECT_EQ(hd.value_or(static_cast<double>(d.hidden_size) /
                            static_cast<double>(d.num_attention_heads)),
                want);
      // Fixed or derived: with 1536 / 12 heads a derived head_dim is 128.
      const json& probes = g.at("probes");
      if (num(c, "head_dim") && probes.contains("hidden_1536_heads_12") &&
          probes.at("hidden_1536_heads_12").at("ok").get<bool>()) {
        const json& pc = probes.at("hidden_1536_heads_12").at("config");
        EXPECT_EQ(num(pc, "head_dim").value_or(128.0), d.head_dim > 0 ? d.head_dim : 128);
      }
    }
    EXPECT_EQ(num(c, "num_hidden_layers"), d.num_hidden_layers);
    EXPECT_EQ(num(c, "max_position_embeddings"), d.max_position_embeddings);
    // The class's layer_types, from the instance's own keys (window settings, NoPE layers).
    json keys = c;
    keys.erase("layer_types");
    const auto mine = hf_default_layer_types(d, keys, d.num_hidden_layers);
    if (c.contains("layer_types") && c.at("layer_types").is_array()) {
      EXPECT_EQ(c.at("layer_types").get<std::vector<std::string>>(), mine);
    } else {
      EXPECT_TRUE(mine.empty());
    }
    ++compared;
  }
  EXPECT_EQ(compared, static_cast<int>(hf_class_defaults_table().size()));
  EXPECT_GE(generated, 80);
}

TEST(MropePositions, TheTwoTransformersRules) {
  // A video of grid (4, 2, 3) (t > max(h, w)) after 2 text tokens, then 1 text token.
  const std::vector<mrope_segment> seg = {{2, 4, 2, 3}, {1, 0, 0, 0}};
  const auto v5 = positions_mrope(seg);  // default: transformers 5 (PR #43972)
  const auto v4 = positions_mrope(seg, 0, mrope_rule::transformers_v4);
  const size_t n = 2 + 24 + 1;
  ASSERT_EQ(v5.size(), 3 * n);
  ASSERT_EQ(v4.size(), 3 * n);
  // Video ids agree: temporal 2 + a, height 2 + b, width 2 + c.
  for (size_t k = 0; k < n - 1; ++k)
    for (size_t r = 0; r < 3; ++r) EXPECT_EQ(v5[r * n + k], v4[r * n + k]) << r << " " << k;
  // The text after it: 2 + max(h, w) = 5 against 2 + max(t, h, w) = 6.
  for (size_t r = 0; r < 3; ++r) {
    EXPECT_EQ(v5[r * n + n - 1], 5);
    EXPECT_EQ(v4[r * n + n - 1], 6);
  }
  // An image (t = 1) gets the same ids under both.
  const std::vector<mrope_segment> img = {{3, 1, 2, 5}, {2, 0, 0, 0}};
  EXPECT_EQ(positions_mrope(img), positions_mrope(img, 0, mrope_rule::transformers_v4));
  EXPECT_EQ(mrope_rule_from_name("v4", "rule"), mrope_rule::transformers_v4);
  EXPECT_THROW(mrope_rule_from_name("v3", "rule"), invalid_argument);
}
