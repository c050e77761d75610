// `posenc attend` with Llama 4's query temperature (attn_temperature_tuning) and with one layer
// of a per-layer config.json (--layer: RoPE layers rotate, NoPE layers do not and tune the
// temperature when the config says so). Expected values come from a naive implementation
// written here from the formulas, in double:
//   s(p) = log(floor((p + 1) / floor_scale) + 1) * attn_scale + 1     (Llama 4; transformers'
//          Llama4TextAttention on layers without RoPE)
//   q'_i = s(qpos_i) q_i,  out_i = softmax_j(q'_i . k_j / sqrt(D)) v_j
//   RoPE (Su et al. 2021), half layout, theta 10000, at qpos_i = S - T + i and kpos_j = j.
// Float64 inputs throughout: the binary computes in double and the only errors are rounding,
// about (D + S) 2^-53 times the magnitudes (|q|, |k| <= ~3 sqrt(D), s <= 2): below 1e-13; we
// allow 1e-12. The gradient is checked against central differences (h = 1e-5) of the naive
// loss sum dO . out: truncation h^2 |L'''| / 6 ~ 1e-9, rounding ~ 1e-15 * 10 / h ~ 1e-9;
// tolerance 1e-7.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <tuple>

#include "posenc/core/npy.hpp"
#include "posenc/core/rng.hpp"
#include "test_support.hpp"

using namespace posenc;
using json = nlohmann::json;

namespace {

constexpr int64_t T = 4, S = 6, Hq = 2, Hkv = 1, D = 8;

struct data {
  test::temp_dir dir;
  std::vector<double> q, k, v;
  data() {
    rng r(31);
    q.resize(T * Hq * D), k.resize(S * Hkv * D), v.resize(S * Hkv * D);
    for (auto* x : {&q, &k, &v})
      for (auto& e : *x) e = r.normal();
    write("k.npy", k, {S, Hkv, D});
    write("v.npy", v, {S, Hkv, D});
    write("q.npy", q, {T, Hq, D});
  }
  void write(const std::string& name, const std::vector<double>& x, std::vector<int64_t> shape) {
    auto a = make_npy<double>(std::move(shape));
    std::copy(x.begin(), x.end(), a.as<double>());
    write_npy(dir.file(name), a);
  }
  std::vector<std::string> args(std::vector<std::string> extra) const {
    std::vector<std::string> a = {"attend",
                                  "--q",
                                  dir.file("q.npy"),
                                  "--k",
                                  dir.file("k.npy"),
                                  "--v",
                                  dir.file("v.npy"),
                                  "--out",
                                  dir.file("o.npy"),
                                  "--format",
                                  "json",
                                  "--causal"};
    a.insert(a.end(), extra.begin(), extra.end());
    return a;
  }
};

double llama4_scale(int64_t pos, double floor_scale, double attn_scale, double offset = 1) {
  return std::log(std::floor((double(pos) + offset) / floor_scale) + 1) * attn_scale + 1;
}

// Causal attention of q against k, v (default positions) with the query temperature
// (floor_scale 0 = off) or RoPE, from the formulas above.
// RoPE frequencies theta^(-2i/D) / factor (linear scaling divides every frequency).
std::vector<double> naive(std::vector<double> q, std::vector<double> k,
                          const std::vector<double>& v, double floor_scale, double attn_scale,
                          bool rope, double theta = 10000, double factor = 1, double offset = 1) {
  auto rot = [&](double* x, int64_t pos) {
    for (int64_t i = 0; i < D / 2; ++i) {
      const double a = double(pos) * std::pow(theta, -2.0 * double(i) / D) / factor;
      const double u = x[i], w = x[i + D / 2];
      x[i] = u * std::cos(a) - w * std::sin(a);
      x[i + D / 2] = w * std::cos(a) + u * std::sin(a);
    }
  };
  for (int64_t i = 0; i < T; ++i)
    for (int64_t h = 0; h < Hq; ++h) {
      double* x = &q[(i * Hq + h) * D];
      if (rope) rot(x, S - T + i);
      if (floor_scale > 0)
        for (int64_t d = 0; d < D; ++d)
          x[d] *= llama4_scale(S - T + i, floor_scale, attn_scale, offset);
    }
  if (rope)
    for (int64_t j = 0; j < S; ++j) rot(&k[j * D], j);
  std::vector<double> out(T * Hq * D, 0.0);
  for (int64_t h = 0; h < Hq; ++h)
    for (int64_t i = 0; i < T; ++i) {
      std::vector<double> s(S, -INFINITY);
      double m = -INFINITY;
      for (int64_t j = 0; j <= S - T + i; ++j) {
        double dot = 0;
        for (int64_t d = 0; d < D; ++d) dot += q[(i * Hq + h) * D + d] * k[j * D + d];
        s[j] = dot / std::sqrt(double(D));
        m = std::max(m, s[j]);
      }
      double l = 0;
      for (auto& x : s) l += (x = std::exp(x - m));
      for (int64_t j = 0; j < S; ++j)
        for (int64_t d = 0; d < D; ++d) out[(i * Hq + h) * D + d] += s[j] / l * v[j * D + d];
    }
  return out;
}

double max_diff(const std::string& file, const std::vector<double>& ref) {
  const auto a = read_npy(file);
  EXPECT_EQ(a.type, dtype::f64);
  const auto x = a.to_f64();
  EXPECT_EQ(x.size(), ref.size());
  double m = 0;
  for (size_t i = 0; i < ref.size() && i < x.size(); ++i) m = std::max(m, std::abs(x[i] - ref[i]));
  return m;
}

// A Llama 4 text config: 4 layers, the transformers default no_rope_layer_interval 4 makes layer
// 3 NoPE; the temperature constants are small so that s changes within positions 2..5.
void write_llama4_config(const std::string& path, bool tuning) {
  json c = {{"model_type", "llama4_text"},       {"num_hidden_layers", 4}, {"hidden_size", Hq * D},
            {"num_attention_heads", Hq},         {"head_dim", D},          {"rope_theta", 10000.0},
            {"attn_temperature_tuning", tuning}, {"floor_scale", 2},       {"attn_scale", 0.5}};
  std::ofstream(path) << c.dump(2);
}

}  // namespace

// The flags: s at the default query positions 2..5 with floor_scale 2, attn_scale 0.5 is
// 1 + 0.5 log 2, 1 + 0.5 log 3, 1 + 0.5 log 3, 1 + 0.5 log 4: it differs from plain attention.
TEST(CliAttendTemperature, FlagsMatchNaiveFormula) {
  data in;
  auto r = test::run_cli(
      in.args({"--attn-temperature-tuning", "--floor-scale", "2", "--attn-scale", "0.5"}));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto j = json::parse(r.out);
  EXPECT_EQ(j["schemes"], json({"temperature"}));
  EXPECT_EQ(j["floor_scale"], 2.0);
  EXPECT_EQ(j["attn_scale"], 0.5);
  EXPECT_LE(max_diff(in.dir.file("o.npy"), naive(in.q, in.k, in.v, 2, 0.5, false)), 1e-12);
  EXPECT_GT(max_diff(in.dir.file("o.npy"), naive(in.q, in.k, in.v, 0, 0, false)), 1e-3);
  // Llama 4's own constants (floor_scale 8192) leave positions below 8191 unscaled.
  r = test::run_cli(in.args({"--attn-temperature-tuning"}));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_LE(max_diff(in.dir.file("o.npy"), naive(in.q, in.k, in.v, 0, 0, false)), 1e-12);
}

// The backward through the temperature: dq = s dq'. dq, dk, dv against central differences of
// the naive loss.
TEST(CliAttendTemperature, BackwardMatchesFiniteDifferences) {
  data in;
  std::vector<double> dout(T * Hq * D);
  rng g(12);
  for (auto& e : dout) e = g.normal();
  in.write("do.npy", dout, {T, Hq, D});
  auto r =
      test::run_cli(in.args({"--attn-temperature-tuning", "--floor-scale", "2", "--attn-scale",
                             "0.5", "--dout", in.dir.file("do.npy"), "--dq", in.dir.file("dq.npy"),
                             "--dk", in.dir.file("dk.npy"), "--dv", in.dir.file("dv.npy")}));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::vector<double> q = in.q, k = in.k, v = in.v;
  auto loss = [&] {
    const auto o = naive(q, k, v, 2, 0.5, false);
    double L = 0;
    for (size_t i = 0; i < o.size(); ++i) L += dout[i] * o[i];
    return L;
  };
  for (auto [x, file] : {std::pair{&q, "dq.npy"}, {&k, "dk.npy"}, {&v, "dv.npy"}}) {
    const auto gv = read_npy(in.dir.file(file)).to_f64();
    ASSERT_EQ(gv.size(), x->size()) << file;
    double worst = 0;
    for (size_t e = 0; e < x->size(); ++e) {
      const double x0 = (*x)[e], h = 1e-5;
      (*x)[e] = x0 + h;
      const double lp = loss();
      (*x)[e] = x0 - h;
      const double lm = loss();
      (*x)[e] = x0;
      worst = std::max(worst, std::abs((lp - lm) / (2 * h) - gv[e]));
    }
    EXPECT_LE(worst, 1e-7) << file;
  }
}

// Ministral 3's form: the rotated queries scaled by 1 + beta log(1 + floor(pos / orig)) (offset
// 0), from the flags after --rope and from a ministral3 config's llama_4_scaling_beta on every
// layer. At positions 2..5 with orig 2, beta 0.5, s is 1 + 0.5 log 2, 2, 3, 3.
TEST(CliAttendTemperature, RotatedQueriesScaledAsMinistral3) {
  data in;
  const auto want = naive(in.q, in.k, in.v, 2, 0.5, true, 10000, 1, 0);
  auto r = test::run_cli(in.args({"--rope", "--theta", "10000", "--head-dim", "8", "--layout",
                                  "half", "--attn-temperature-tuning", "--floor-scale", "2",
                                  "--attn-scale", "0.5", "--floor-offset", "0"}));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto j = json::parse(r.out);
  EXPECT_EQ(j["schemes"], json({"rope", "temperature"}));
  EXPECT_EQ(j["floor_offset"], 0.0);
  EXPECT_LE(max_diff(in.dir.file("o.npy"), want), 1e-12);
  // Llama 4's offset 1 gives another answer at these positions.
  EXPECT_GT(max_diff(in.dir.file("o.npy"), naive(in.q, in.k, in.v, 2, 0.5, true)), 1e-3);

  const auto cfg = in.dir.file("config.json");
  json c = {{"model_type", "ministral3"},
            {"num_hidden_layers", 2},
            {"hidden_size", Hq * D},
            {"num_attention_heads", Hq},
            {"head_dim", D},
            {"rope_parameters",
             {{"rope_type", "default"},
              {"rope_theta", 10000.0},
              {"llama_4_scaling_beta", 0.5},
              {"original_max_position_embeddings", 2}}}};
  std::ofstream(cfg) << c.dump(2);
  for (const std::vector<std::string>& layer :
       {std::vector<std::string>{}, std::vector<std::string>{"--layer", "1"}}) {
    std::vector<std::string> a = {"--rope", "--hf-config", cfg, "--layout", "half"};
    a.insert(a.end(), layer.begin(), layer.end());
    r = test::run_cli(in.args(a));
    ASSERT_EQ(r.exit_code, 0) << r.err;
    j = json::parse(r.out);
    EXPECT_EQ(j["schemes"], json({"rope", "temperature"}));
    EXPECT_EQ(j["floor_scale"], 2.0);
    EXPECT_EQ(j["attn_scale"], 0.5);
    EXPECT_LE(max_diff(in.dir.file("o.npy"), want), 1e-12);
  }
  // The config's scale and the flags' are one too many.
  r = test::run_cli(
      in.args({"--rope", "--hf-config", cfg, "--layout", "half", "--attn-temperature-tuning"}));
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("the model config already scales the queries (llama_4_scaling_beta 0.5"),
            std::string::npos)
      << r.err;
}

// --layer reads the layer's convention from the config: layers 0..2 rotate (RoPE from the
// config), layer 3 is NoPE and scales the queries (attn_temperature_tuning); without tuning it
// is plain attention. Gemma 3's layer types pick their RoPE (as --layer-type does). SmolLM3's
// no_rope_layers list (1 = RoPE) works like Llama 4's interval.
TEST(CliAttendTemperature, ConfigLayerPicksRopeNopeAndTemperature) {
  data in;
  const auto cfg = in.dir.file("config.json");
  write_llama4_config(cfg, true);
  auto r =
      test::run_cli(in.args({"--rope", "--hf-config", cfg, "--layout", "half", "--layer", "3"}));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto j = json::parse(r.out);
  EXPECT_EQ(j["layer"], 3);
  EXPECT_EQ(j["layer_rope"], false);
  EXPECT_EQ(j["schemes"], json({"temperature"}));
  EXPECT_LE(max_diff(in.dir.file("o.npy"), naive(in.q, in.k, in.v, 2, 0.5, false)), 1e-12);

  r = test::run_cli(in.args({"--rope", "--hf-config", cfg, "--layout", "half", "--layer", "1"}));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  j = json::parse(r.out);
  EXPECT_EQ(j["layer_rope"], true);
  EXPECT_EQ(j["schemes"], json({"rope"}));
  EXPECT_LE(max_diff(in.dir.file("o.npy"), naive(in.q, in.k, in.v, 0, 0, true)), 1e-12);

  write_llama4_config(cfg, false);
  r = test::run_cli(in.args({"--rope", "--hf-config", cfg, "--layout", "half", "--layer", "3"}));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(json::parse(r.out)["schemes"], json::array());
  EXPECT_LE(max_diff(in.dir.file("o.npy"), naive(in.q, in.k, in.v, 0, 0, false)), 1e-12);

  // Gemma 3's legacy keys: sliding layers (every layer but each 6th, the default pattern) use
  // rope_local_base_freq without scaling, the global ones rope_theta with linear x8.
  json gemma = {{"model_type", "gemma3_text"},
                {"num_hidden_layers", 6},
                {"hidden_size", Hq * D},
                {"num_attention_heads", Hq},
                {"head_dim", D},
                {"rope_theta", 1000000.0},
                {"rope_local_base_freq", 10000.0},
                {"rope_scaling", {{"rope_type", "linear"}, {"factor", 8.0}}}};
  std::ofstream(cfg) << gemma.dump();
  for (const auto& [flag, value, theta, factor] :
       {std::tuple{"--layer", "0", 10000.0, 1.0}, std::tuple{"--layer", "5", 1e6, 8.0},
        std::tuple{"--layer-type", "sliding_attention", 10000.0, 1.0},
        std::tuple{"--layer-type", "full_attention", 1e6, 8.0}}) {
    r = test::run_cli(in.args({"--rope", "--hf-config", cfg, "--layout", "half", flag, value}));
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_LE(max_diff(in.dir.file("o.npy"), naive(in.q, in.k, in.v, 0, 0, true, theta, factor)),
              1e-12)
        << flag << " " << value;
  }

  json smol = {{"model_type", "smollm3"}, {"num_hidden_layers", 3},
               {"hidden_size", Hq * D},   {"num_attention_heads", Hq},
               {"rope_theta", 10000.0},   {"no_rope_layers", {1, 0, 1}}};
  std::ofstream(cfg) << smol.dump();
  for (int layer : {0, 1}) {
    r = test::run_cli(in.args(
        {"--rope", "--hf-config", cfg, "--layout", "half", "--layer", std::to_string(layer)}));
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_LE(max_diff(in.dir.file("o.npy"), naive(in.q, in.k, in.v, 0, 0, layer == 0)), 1e-12)
        << "layer " << layer;
  }
}

TEST(CliAttendTemperature, BadInputsExit2WithoutOutput) {
  data in;
  const auto cfg = in.dir.file("config.json");
  write_llama4_config(cfg, true);
  const std::vector<std::string> rope = {"--rope", "--hf-config", cfg, "--layout", "half"};
  auto with = [&](std::vector<std::string> a, std::vector<std::string> b) {
    a.insert(a.end(), b.begin(), b.end());
    return a;
  };
  struct bad {
    std::vector<std::string> extra;
    std::string msg;
  };
  const std::vector<bad> cases = {
      {{"--attn-temperature-tuning", "--floor-scale", "0"}, "floor_scale must be finite and > 0"},
      {{"--attn-temperature-tuning", "--floor-scale", "inf"}, "floor_scale must be finite"},
      {{"--attn-temperature-tuning", "--attn-scale", "-1"}, "attn_scale must be finite and >= 0"},
      {{"--attn-temperature-tuning", "--floor-offset", "-1"},
       "floor_offset must be finite and >= 0 (Llama 4: 1, Ministral 3: 0), got -1"},
      {{"--attn-temperature-tuning", "--floor-offset", "nan"}, "floor_offset must be finite"},
      {{"--floor-scale", "2"}, "--floor-scale needs --attn-temperature-tuning"},
      {{"--attn-scale", "0.5"}, "--attn-scale needs --attn-temperature-tuning"},
      {{"--floor-offset", "0"}, "--floor-offset needs --attn-temperature-tuning"},
      {{"--layer", "1"}, "--layer and --layer-type need --hf-config"},
      {with(rope, {"--layer", "4"}), "--layer must be in [0, 4)"},
      {with(rope, {"--layer", "-1"}), "--layer must be in [0, 4)"},
      {with(rope, {"--layer", "1", "--layer-type", "full_attention"}),
       "--layer and --layer-type exclude each other"},
      {with(rope, {"--layer-type", "sliding_attention"}),
       "layer type must be one of chunked_attention, full_attention, got 'sliding_attention'"},
      {with(rope, {"--layer", "3", "--attn-temperature-tuning"}),
       "the temperature comes from --hf-config"},
      {{"--hf-config", cfg, "--layer", "3"}, "need --rope"},
  };
  for (const auto& c : cases) {
    const auto r = test::run_cli(in.args(c.extra));
    EXPECT_EQ(r.exit_code, 2) << c.msg << "\n" << r.err;
    EXPECT_NE(r.err.find(c.msg), std::string::npos) << "expected '" << c.msg << "' in " << r.err;
    EXPECT_FALSE(std::filesystem::exists(in.dir.file("o.npy"))) << c.msg;
  }
}
