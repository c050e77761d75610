// `posenc rope freqs` and `posenc rope apply` end to end: JSON output for real configs and
// explicit parameters, precedence warnings on stderr, .npy round trips in both dtypes, and
// malformed inputs (exit code 2, no output file).
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "posenc/core/file.hpp"
#include "posenc/core/npy.hpp"
#include "posenc/encodings/rope.hpp"
#include "posenc/encodings/rope_config.hpp"
#include "test_support.hpp"

using namespace posenc;
using nlohmann::json;

namespace {

std::string data(const std::string& name) {
  return std::string(POSENC_SOURCE_DIR) + "/tests/data/rope/" + name;
}

json run_json(const std::vector<std::string>& args, test::cli_result* out = nullptr) {
  auto r = test::run_cli(args);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  if (out) *out = r;
  return r.exit_code == 0 ? json::parse(r.out) : json();
}

// x: (T, H, D) with x[t, h, d] = ((7 d + 3 h + t) mod 11 - 5) / 4.
template <typename T>
npy_array make_x(int64_t nT, int64_t H, int64_t D) {
  auto a = make_npy<T>({nT, H, D});
  for (int64_t t = 0; t < nT; ++t)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t d = 0; d < D; ++d)
        a.template as<T>()[(t * H + h) * D + d] =
            static_cast<T>(static_cast<double>((7 * d + 3 * h + t) % 11 - 5) / 4.0);
  return a;
}

npy_array make_pos(std::vector<int64_t> p) {
  auto a = make_npy<int64_t>({static_cast<int64_t>(p.size())});
  for (size_t i = 0; i < p.size(); ++i) a.as<int64_t>()[i] = p[i];
  return a;
}

}  // namespace

TEST(CliRope, FreqsFromLlama31Config) {
  auto j = run_json({"rope", "freqs", "--hf-config", data("llama3_1_8b.json"), "--format", "json"});
  EXPECT_EQ(j["rotary_dim"], 128);
  EXPECT_EQ(j["scaling"], "llama3");
  EXPECT_EQ(j["attention_factor"], 1.0);
  ASSERT_EQ(j["inv_freq"].size(), 64u);
  // Pair 0 keeps omega = 1; the slowest pair (wavelength > 8192) is divided by 8.
  EXPECT_EQ(j["inv_freq"][0].get<double>(), 1.0);
  EXPECT_NEAR(j["inv_freq"][63].get<double>(), std::pow(500000.0, -126.0 / 128) / 8, 1e-30);
}

TEST(CliRope, FreqsFromParametersWarnsOnPrecedence) {
  test::cli_result r;
  auto j = run_json(
      {"rope", "freqs", "--head-dim", "128", "--theta", "1e6", "--scaling", "yarn", "--factor", "4",
       "--max-pos", "32768", "--original-max-pos", "32768", "--format", "json"},
      &r);
  EXPECT_EQ(j["scaling"], "yarn");
  EXPECT_EQ(j["factor"], 4.0);
  EXPECT_NEAR(j["attention_factor"].get<double>(), 0.1 * std::log(4.0) + 1, 1e-15);
  EXPECT_NE(r.err.find("warning: rope_scaling.factor = 4 disagrees"), std::string::npos) << r.err;
  // The same as the Qwen2.5 config file.
  auto k =
      run_json({"rope", "freqs", "--hf-config", data("qwen2_5_7b_yarn.json"), "--format", "json"});
  EXPECT_EQ(j["inv_freq"], k["inv_freq"]);
  // Partial rotary from parameters: R = 80 * 0.3 = 24.
  auto p = run_json({"rope", "freqs", "--head-dim", "80", "--partial", "0.3", "--format", "json"});
  EXPECT_EQ(p["rotary_dim"], 24);
  EXPECT_EQ(p["inv_freq"].size(), 12u);
}

TEST(CliRope, SeqLenDrivesLongRopeAndDynamic) {
  auto s = run_json(
      {"rope", "freqs", "--hf-config", data("phi3_vision_128k_longrope.json"), "--format", "json"});
  auto l = run_json({"rope", "freqs", "--hf-config", data("phi3_vision_128k_longrope.json"),
                     "--seq-len", "4097", "--format", "json"});
  // Pair 47: short factor 3.049999999999997, long factor 64.81001281738281 (the config file).
  EXPECT_NEAR(s["inv_freq"][47].get<double>() / l["inv_freq"][47].get<double>(),
              64.81001281738281 / 3.049999999999997, 1e-12);
  auto d0 = run_json({"rope", "freqs", "--head-dim", "64", "--scaling", "dynamic", "--factor", "2",
                      "--max-pos", "4096", "--format", "json"});
  auto d1 = run_json({"rope", "freqs", "--head-dim", "64", "--scaling", "dynamic", "--factor", "2",
                      "--max-pos", "4096", "--seq-len", "8192", "--format", "json"});
  auto plain = run_json({"rope", "freqs", "--head-dim", "64", "--format", "json"});
  EXPECT_EQ(d0["inv_freq"], plain["inv_freq"]);  // seq_len unknown: unscaled base
  EXPECT_LT(d1["inv_freq"][31].get<double>(), d0["inv_freq"][31].get<double>());
  // CSV and text formats list one row per pair.
  auto c = test::run_cli({"rope", "freqs", "--head-dim", "8", "--format", "csv"});
  EXPECT_EQ(c.exit_code, 0);
  EXPECT_EQ(c.out.substr(0, 26), "pair,inv_freq,wavelength\n0");
  EXPECT_EQ(std::count(c.out.begin(), c.out.end(), '\n'), 5);
}

TEST(CliRope, ApplyKeepsDtypeAndMatchesTheLibrary) {
  test::temp_dir d;
  const int64_t T = 3, H = 2, D = 64;
  const std::vector<int64_t> pos{1000, 0, 77};
  write_npy(d.file("p.npy"), make_pos(pos));
  std::vector<std::string> w;
  const auto f = rope_frequencies(rope_config_from_file(data("pythia_70m.json"), &w));
  for (const char* layout : {"half", "interleaved"}) {
    const auto lay = rope_layout_from_name(layout);
    // float32
    write_npy(d.file("x32.npy"), make_x<float>(T, H, D));
    auto j = run_json({"rope", "apply", "--x", d.file("x32.npy"), "--positions", d.file("p.npy"),
                       "--hf-config", data("pythia_70m.json"), "--layout", layout, "--out",
                       d.file("y32.npy"), "--format", "json"});
    EXPECT_EQ(j["dtype"], "float32");
    EXPECT_EQ(j["rotary_dim"], 16);
    auto y = read_npy(d.file("y32.npy"));
    EXPECT_EQ(y.type, dtype::f32);
    EXPECT_EQ(y.shape, (std::vector<int64_t>{T, H, D}));
    auto expect = make_x<float>(T, H, D);
    rope_apply(f, lay, rope_angle::exact, pos, expect.as<float>(), T, H, D);
    EXPECT_EQ(y.data, expect.data);
    // float64 with compat_f32 angles
    write_npy(d.file("x64.npy"), make_x<double>(T, H, D));
    j = run_json({"rope", "apply", "--x", d.file("x64.npy"), "--positions", d.file("p.npy"),
                  "--hf-config", data("pythia_70m.json"), "--layout", layout, "--angle",
                  "compat_f32", "--out", d.file("y64.npy"), "--format", "json"});
    EXPECT_EQ(j["dtype"], "float64");
    EXPECT_EQ(j["angle"], "compat_f32");
    auto y64 = read_npy(d.file("y64.npy"));
    EXPECT_EQ(y64.type, dtype::f64);
    auto e64 = make_x<double>(T, H, D);
    rope_apply(f, lay, rope_angle::compat_f32, pos, e64.as<double>(), T, H, D);
    EXPECT_EQ(y64.data, e64.data);
  }
}

TEST(CliRope, ApplySeqLenDefaultsToMaxPositionPlusOne) {
  test::temp_dir d;
  write_npy(d.file("x.npy"), make_x<double>(2, 1, 96));
  write_npy(d.file("p.npy"), make_pos({5000, 3}));
  auto j = run_json({"rope", "apply", "--x", d.file("x.npy"), "--positions", d.file("p.npy"),
                     "--hf-config", data("phi3_vision_128k_longrope.json"), "--layout", "half",
                     "--out", d.file("y.npy"), "--format", "json"});
  EXPECT_EQ(j["seq_len"], 5001);  // > 4096: long_factor, like HF's forward
  EXPECT_EQ(j["scaling"], "longrope");
}

TEST(CliRope, MalformedInputsExit2WithoutOutput) {
  test::temp_dir d;
  write_npy(d.file("x.npy"), make_x<float>(3, 2, 64));
  write_npy(d.file("p.npy"), make_pos({0, 1, 2}));
  write_npy(d.file("p2.npy"), make_pos({0, 1}));
  write_npy(d.file("pneg.npy"), make_pos({0, -1, 2}));
  write_npy(d.file("xi.npy"), make_npy<int32_t>({3, 2, 64}));
  write_npy(d.file("x2d.npy"), make_npy<float>({3, 64}));
  write_file_atomic(d.file("bad.npy"), std::string("NOTNUMPY and some bytes"));
  auto good = read_file(d.file("x.npy"));
  good.resize(good.size() - 10);
  write_file_atomic(d.file("trunc.npy"), std::span<const std::byte>(good));
  const std::string cfg = data("pythia_70m.json");
  struct bad_case {
    std::vector<std::string> args;
    std::string message;
  };
  const std::vector<bad_case> cases = {
      {{"--x", d.file("bad.npy"), "--positions", d.file("p.npy")}, "bad.npy"},
      {{"--x", d.file("trunc.npy"), "--positions", d.file("p.npy")}, "trunc.npy"},
      {{"--x", d.file("x.npy"), "--positions", d.file("p2.npy")}, "--positions must have shape"},
      {{"--x", d.file("x.npy"), "--positions", d.file("pneg.npy")}, "must be >= 0"},
      {{"--x", d.file("xi.npy"), "--positions", d.file("p.npy")}, "float32 or float64"},
      {{"--x", d.file("x2d.npy"), "--positions", d.file("p.npy")}, "(T, H, D)"},
      {{"--x", d.file("x.npy"), "--positions", d.file("x.npy")}, "--positions must be int64"},
      {{"--x", d.file("missing.npy"), "--positions", d.file("p.npy")}, "missing.npy"},
  };
  for (const auto& c : cases) {
    std::vector<std::string> args = {"rope",     "apply", "--hf-config", cfg,
                                     "--layout", "half",  "--out",       d.file("y.npy")};
    args.insert(args.end(), c.args.begin(), c.args.end());
    auto r = test::run_cli(args);
    EXPECT_EQ(r.exit_code, 2) << c.message;
    EXPECT_NE(r.err.find(c.message), std::string::npos) << r.err;
    EXPECT_FALSE(std::filesystem::exists(d.file("y.npy"))) << c.message;
  }
  // Head dim mismatch: x has D = 64, the config says 128.
  auto r = test::run_cli({"rope", "apply", "--hf-config", data("llama2_7b.json"), "--layout",
                          "half", "--x", d.file("x.npy"), "--positions", d.file("p.npy"), "--out",
                          d.file("y.npy")});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("head_dim = 128"), std::string::npos) << r.err;
  // Bad parameters.
  for (const auto& args : std::vector<std::vector<std::string>>{
           {"rope", "freqs", "--head-dim", "7"},
           {"rope", "freqs", "--head-dim", "64", "--scaling", "ntk"},
           {"rope", "freqs", "--head-dim", "64", "--scaling", "linear", "--factor", "0.5"},
           {"rope", "freqs", "--head-dim", "64", "--hf-config", cfg},
           {"rope", "freqs", "--hf-config", d.file("nope.json")},
           {"rope", "freqs"},
           {"rope", "apply", "--hf-config", cfg, "--layout", "neox", "--x", d.file("x.npy"),
            "--positions", d.file("p.npy"), "--out", d.file("y.npy")}}) {
    auto rr = test::run_cli(args);
    EXPECT_EQ(rr.exit_code, 2) << args.back() << ": " << rr.err;
    EXPECT_FALSE(rr.err.empty());
  }
  EXPECT_FALSE(std::filesystem::exists(d.file("y.npy")));
}

TEST(CliRope, CheckGroupRopePasses) {
  auto j = run_json({"check", "--group", "rope", "--format", "json"});
  EXPECT_EQ(j["passed"], true);
  EXPECT_GE(j["checks"].size(), 10u);
}
