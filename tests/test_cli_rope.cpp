// `posenc rope freqs`, `posenc rope apply` and `posenc rope diff` end to end: JSON output for
// real configs, GGUF files and explicit parameters, precedence warnings on stderr, .npy round
// trips in both dtypes, the diff's verdicts and causes, and malformed inputs (exit code 2, no
// output file).
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "posenc/core/file.hpp"
#include "posenc/core/npy.hpp"
#include "posenc/encodings/rope.hpp"
#include "posenc/formats/hf_config.hpp"
#include "test_gguf_writer.hpp"
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
    // float64 with f32 angles, asked for by their former name compat_f32
    write_npy(d.file("x64.npy"), make_x<double>(T, H, D));
    j = run_json({"rope", "apply", "--x", d.file("x64.npy"), "--positions", d.file("p.npy"),
                  "--hf-config", data("pythia_70m.json"), "--layout", layout, "--angle",
                  "compat_f32", "--out", d.file("y64.npy"), "--format", "json"});
    EXPECT_EQ(j["dtype"], "float64");
    EXPECT_EQ(j["angle"], "f32");
    auto y64 = read_npy(d.file("y64.npy"));
    EXPECT_EQ(y64.type, dtype::f64);
    auto e64 = make_x<double>(T, H, D);
    rope_apply(f, lay, rope_angle::f32, pos, e64.as<double>(), T, H, D);
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

namespace {

// Llama 3.1's divisor as llama.cpp's converter computes it (Meta's formula, written here).
double llama3_divisor(double omega) {
  const double wavelen = 2 * M_PI / omega, lo = 1, hi = 4, orig = 8192, factor = 8;
  if (wavelen < orig / hi) return 1;
  if (wavelen > orig / lo) return factor;
  const double smooth = (orig / wavelen - lo) / (hi - lo);
  return 1 / ((1 - smooth) / factor + smooth);
}

// GGUF files as llama.cpp's converter writes them for the configs under tests/data/rope.
struct gguf_files {
  test::temp_dir dir;
  std::string llama31, phi3, phi3_swapped, qwen_yarn, qwen_yarn_no_magnitude,
      qwen_yarn_magnitude_twice, truncated, big_endian, deepseek_no_log_mul;
  gguf_files() {
    using posenc::test::gguf_writer;
    auto base = [](const std::string& arch, uint32_t embd, uint32_t heads, uint32_t rot,
                   float theta, uint32_t ctx) {
      gguf_writer w;
      w.add_string("general.architecture", arch);
      w.add_u32(arch + ".context_length", ctx);
      w.add_u32(arch + ".embedding_length", embd);
      w.add_u32(arch + ".attention.head_count", heads);
      w.add_u32(arch + ".rope.dimension_count", rot);
      w.add_f32(arch + ".rope.freq_base", theta);
      return w;
    };
    {
      auto w = base("llama", 4096, 32, 128, 500000.0f, 131072);
      std::vector<float> d;
      for (int i = 0; i < 64; ++i)
        d.push_back(static_cast<float>(
            llama3_divisor(1.0f / std::pow(500000.0f, static_cast<float>(2 * i) / 128.0f))));
      w.add_tensor_f32("rope_freqs.weight", {64}, d);
      llama31 = dir.file("llama31.gguf");
      w.write(llama31);
      auto b = w.bytes();
      truncated = dir.file("truncated.gguf");
      write_file_atomic(truncated, std::string(b.begin(), b.begin() + 100));
      std::swap(b[4], b[7]);  // version 3 written big-endian
      big_endian = dir.file("big_endian.gguf");
      write_file_atomic(big_endian, std::string(b.begin(), b.end()));
    }
    {
      const auto j = json::parse(test::read_text(data("phi3_vision_128k_longrope.json")));
      std::vector<float> sf, lf;
      for (const auto& x : j["rope_scaling"]["short_factor"]) sf.push_back(x.get<float>());
      for (const auto& x : j["rope_scaling"]["long_factor"]) lf.push_back(x.get<float>());
      for (bool swap : {false, true}) {
        auto w = base("phi3", 3072, 32, 96, 10000.0f, 131072);
        w.add_u32("phi3.rope.scaling.original_context_length", 4096);
        w.add_f32("phi3.rope.scaling.attn_factor",
                  static_cast<float>(std::sqrt(1 + std::log(32.0) / std::log(4096.0))));
        w.add_tensor_f32("rope_factors_long.weight", {48}, swap ? sf : lf);
        w.add_tensor_f32("rope_factors_short.weight", {48}, swap ? lf : sf);
        (swap ? phi3_swapped : phi3) = dir.file(swap ? "phi3_swapped.gguf" : "phi3.gguf");
        w.write(swap ? phi3_swapped : phi3);
      }
    }
    {
      // DeepSeek-V2 converted without yarn_log_multiplier (the mscale pair dropped).
      auto w = base("deepseek2", 5120, 128, 64, 10000.0f, 163840);
      w.add_u32("deepseek2.attention.key_length", 192);
      w.add_string("deepseek2.rope.scaling.type", "yarn");
      w.add_f32("deepseek2.rope.scaling.factor", 40.0f);
      w.add_u32("deepseek2.rope.scaling.original_context_length", 4096);
      deepseek_no_log_mul = dir.file("deepseek.gguf");
      w.write(deepseek_no_log_mul);
    }
    // Qwen2.5 YaRN (factor 4): no attn_factor (HF's 0.1 ln 4 + 1), 1 (magnitude dropped), and
    // (0.1 ln 4 + 1)^2 (applied twice).
    const double m = 0.1 * std::log(4.0) + 1;
    for (int k = 0; k < 3; ++k) {
      auto w = base("qwen2", 3584, 28, 128, 1000000.0f, 32768);
      w.add_string("qwen2.rope.scaling.type", "yarn");
      w.add_f32("qwen2.rope.scaling.factor", 4.0f);
      w.add_u32("qwen2.rope.scaling.original_context_length", 32768);
      if (k == 1) w.add_f32("qwen2.rope.scaling.attn_factor", 1.0f);
      if (k == 2) w.add_f32("qwen2.rope.scaling.attn_factor", static_cast<float>(m * m));
      std::string& path = k == 0   ? qwen_yarn
                          : k == 1 ? qwen_yarn_no_magnitude
                                   : qwen_yarn_magnitude_twice;
      path = dir.file("qwen" + std::to_string(k) + ".gguf");
      w.write(path);
    }
  }
};

}  // namespace

// `rope freqs --gguf` prints what `--hf-config` prints for the config the file came from.
TEST(CliRope, FreqsFromGgufMatchHfConfig) {
  gguf_files g;
  struct pair_case {
    std::string gguf, hf, seq_len;
  };
  for (const auto& c : std::vector<pair_case>{{g.llama31, "llama3_1_8b.json", "0"},
                                              {g.phi3, "phi3_vision_128k_longrope.json", "0"},
                                              {g.phi3, "phi3_vision_128k_longrope.json", "8192"},
                                              {g.qwen_yarn, "qwen2_5_7b_yarn.json", "0"}}) {
    const auto a = run_json(
        {"rope", "freqs", "--hf-config", data(c.hf), "--format", "json", "--seq-len", c.seq_len});
    test::cli_result r;
    const auto b = run_json(
        {"rope", "freqs", "--gguf", c.gguf, "--format", "json", "--seq-len", c.seq_len}, &r);
    for (const char* k : {"rotary_dim", "scaling", "head_dim", "theta", "factor", "seq_len"})
      EXPECT_EQ(a[k], b[k]) << c.hf << " " << k;
    EXPECT_NEAR(a["attention_factor"].get<double>(), b["attention_factor"].get<double>(),
                0x1p-22 * a["attention_factor"].get<double>())
        << c.hf;
    ASSERT_EQ(a["inv_freq"].size(), b["inv_freq"].size());
    for (size_t i = 0; i < a["inv_freq"].size(); ++i) {
      const double x = a["inv_freq"][i], y = b["inv_freq"][i];
      EXPECT_NEAR(x, y, 0x1p-22 * x) << c.hf << " pair " << i;
    }
  }
  // The checked-in fixture: Llama 3.1 at head_dim 64 (text output, first line).
  const auto r =
      test::run_cli({"rope", "freqs", "--gguf",
                     std::string(POSENC_SOURCE_DIR) + "/tests/data/gguf/tiny_llama3.gguf"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out.substr(0, r.out.find('\n')),
            "scaling llama3, head_dim 64, rotary_dim 64, theta 500000, factor 8, "
            "attention_factor 1, seq_len 0");
}

TEST(CliRope, BadGgufExits2NamingOffsetAndField) {
  gguf_files g;
  struct bad_case {
    std::string path, message;
  };
  for (const auto& c :
       std::vector<bad_case>{{g.truncated, "truncated.gguf: offset "},
                             {g.big_endian, "offset 4: version: big-endian GGUF"},
                             {g.dir.file("missing.gguf"), "missing.gguf"},
                             {data("llama2_7b.json"), "offset 0: magic: not a GGUF file"}}) {
    const auto r = test::run_cli({"rope", "freqs", "--gguf", c.path});
    EXPECT_EQ(r.exit_code, 2) << c.message;
    EXPECT_NE(r.err.find(c.message), std::string::npos) << r.err;
    EXPECT_TRUE(r.out.empty()) << r.out;
  }
  const auto r = test::run_cli(
      {"rope", "freqs", "--gguf", g.llama31, "--hf-config", data("llama3_1_8b.json")});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_TRUE(r.out.empty());
}

// Regression: "head_dim": 1000000000 ran for more than 10 s; a size above 2^20 is refused.
TEST(CliRope, HugeHeadDimInConfigExits2) {
  test::temp_dir d;
  auto j = json::parse(test::read_text(data("llama2_7b.json")));
  j["head_dim"] = 2097152;
  write_file_atomic(d.file("c.json"), j.dump());
  auto r = test::run_cli({"rope", "freqs", "--hf-config", d.file("c.json")});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("head_dim must be in [2, 1048576], got 2097152"), std::string::npos)
      << r.err;
  EXPECT_TRUE(r.out.empty());
  j["head_dim"] = 1000000000;
  write_file_atomic(d.file("c.json"), j.dump());
  r = test::run_cli({"rope", "freqs", "--hf-config", d.file("c.json")});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("got 1000000000"), std::string::npos) << r.err;
}

// `rope diff`: exit 0 when equivalent within float32, 1 with the likely cause when not.
TEST(CliRope, DiffEquivalentSidesExit0) {
  gguf_files g;
  for (const auto& [a, b] : std::vector<std::pair<std::string, std::string>>{
           {"hf:" + data("llama3_1_8b.json"), "gguf:" + g.llama31},
           {data("llama3_1_8b.json"), g.llama31},  // detected by content
           {"hf:" + data("phi3_vision_128k_longrope.json"), "gguf:" + g.phi3},
           {"hf:" + data("qwen2_5_7b_yarn.json"), "gguf:" + g.qwen_yarn},
           {"hf:" + data("llama3_1_8b.json"),
            "params:head-dim=128,theta=500000,scaling=llama3,factor=8,original-max-pos=8192,"
            "low-freq-factor=1,high-freq-factor=4,layout=half"}}) {
    const auto r = test::run_cli({"rope", "diff", a, b});
    EXPECT_EQ(r.exit_code, 0) << a << " vs " << b << "\n" << r.out << r.err;
    EXPECT_NE(r.out.find("verdict: equivalent within float32"), std::string::npos) << r.out;
  }
  // The layout of a llama GGUF (ggml NORM on permuted rows) is HF's half on the checkpoint.
  const auto r = test::run_cli(
      {"rope", "diff", "hf:" + data("llama3_1_8b.json"), "gguf:" + g.llama31, "--format", "json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto j = json::parse(r.out);
  EXPECT_EQ(j["A"]["layout"], "half");
  EXPECT_EQ(j["B"]["layout"], "half");
  EXPECT_NE(j["B"]["layout_note"].get<std::string>().find("permuted"), std::string::npos);
  EXPECT_EQ(j["pairs_differing"], 0);
  EXPECT_EQ(j["pairs"].size(), 64u);
  EXPECT_LE(j["max_rel_difference"].get<double>(), 0x1p-23);
}

TEST(CliRope, DiffNamesTheLikelyCause) {
  gguf_files g;
  struct diff_case {
    std::string a, b, cause;
  };
  const std::string llama31 = "hf:" + data("llama3_1_8b.json");
  for (const auto& c : std::vector<diff_case>{
           // Llama 3.1 converted without rope_freqs: plain RoPE at theta 500000.
           {llama31, "params:head-dim=128,theta=500000",
            "Llama 3.1 smoothing missing in B: A is llama3 (factor 8, low_freq_factor 1, "
            "high_freq_factor 4), B is default"},
           // A linear factor dropped.
           {"params:head-dim=64,scaling=linear,factor=4", "params:head-dim=64",
            "factor 4 applied on one side only"},
           {"params:head-dim=64,scaling=linear,factor=4",
            "params:head-dim=64,scaling=linear,factor=16",
            "factor 4 applied twice in B (16 = 4^2)"},
           // Phi-3's factor tensors exchanged, at a short and a long length.
           {"hf:" + data("phi3_vision_128k_longrope.json"), "gguf:" + g.phi3_swapped,
            "LongRoPE long/short swapped"},
           // YaRN's magnitude dropped or applied twice.
           {"hf:" + data("qwen2_5_7b_yarn.json"), "gguf:" + g.qwen_yarn_no_magnitude,
            "YaRN magnitude 0.1 ln(4) + 1 = 1.138629436111989 missing in B"},
           {"hf:" + data("qwen2_5_7b_yarn.json"), "gguf:" + g.qwen_yarn_magnitude_twice,
            "YaRN magnitude 1.138629436111989 applied twice in B"},
           {"hf:" + data("deepseek_v2.json"), "gguf:" + g.deepseek_no_log_mul,
            "DeepSeek mscale: A uses get_mscale(40, mscale = 0.707) / get_mscale(40, "
            "mscale_all_dim = 0.707) = 1, B the default 0.1 ln(40) + 1"},
           // Pythia's rotary_pct lost.
           {"hf:" + data("pythia_70m.json"), "params:head-dim=64",
            "partial rotary width lost: rotary_dim 16 in A, 64 in B"},
           // Same frequencies, other pairing.
           {"params:head-dim=64,layout=half", "params:head-dim=64,layout=interleaved",
            "NeoX/GPT-J layout: A pairs half"},
           {"params:head-dim=64", "params:head-dim=64,theta=500000",
            "rope_theta differs: 10000 in A, 500000 in B"}}) {
    const auto r = test::run_cli({"rope", "diff", c.a, c.b});
    EXPECT_EQ(r.exit_code, 1) << c.a << " vs " << c.b << "\n" << r.out << r.err;
    EXPECT_NE(r.out.find("verdict: differ"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("likely cause: "), std::string::npos) << r.out;
    EXPECT_NE(r.out.find(c.cause), std::string::npos) << c.cause << "\n" << r.out;
  }
  // Swapped LongRoPE tensors at a long length too.
  const auto r = test::run_cli({"rope", "diff", "hf:" + data("phi3_vision_128k_longrope.json"),
                                "gguf:" + g.phi3_swapped, "--seq-len", "100000"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.out.find("B's short_factor gives A's frequencies at seq_len 100000"),
            std::string::npos)
      << r.out;
}

TEST(CliRope, DiffBadSidesExit2) {
  for (const auto& args : std::vector<std::vector<std::string>>{
           {"rope", "diff", "params:head-dim=64,bogus=1", "params:head-dim=64"},
           {"rope", "diff", "params:head-dim=64", "params:head-dim"},
           {"rope", "diff", "params:head-dim=64", "params:head-dim=64,layout=neox"},
           {"rope", "diff", "hf:", "params:head-dim=64"},
           {"rope", "diff", "gguf:/nonexistent/m.gguf", "params:head-dim=64"},
           {"rope", "diff", "params:head-dim=64"},
           {"rope", "diff", "params:head-dim=64", "params:head-dim=64", "--seq-len", "-1"}}) {
    const auto r = test::run_cli(args);
    EXPECT_EQ(r.exit_code, 2) << args[2] << " " << args.back() << ": " << r.out << r.err;
    EXPECT_FALSE(r.err.empty());
    EXPECT_TRUE(r.out.empty()) << r.out;
  }
  const auto r =
      test::run_cli({"rope", "diff", "params:head-dim=64,bogus=1", "params:head-dim=64"});
  EXPECT_NE(r.err.find("A (params:head-dim=64,bogus=1): unknown parameter 'bogus'; allowed: "),
            std::string::npos)
      << r.err;
}

TEST(CliRope, FreqsPerLayerType) {
  // Gemma 3 legacy keys: sliding layers 10^4 with no scaling, global 10^6 linear x8 (pair 64 of
  // D = 256: 10^4^(-1/2) = 0.01 and 10^6^(-1/2) / 8 = 1.25e-4, by hand).
  auto s = run_json({"rope", "freqs", "--hf-config", data("gemma3_1b_legacy.json"), "--layer-type",
                     "sliding_attention", "--format", "json"});
  EXPECT_EQ(s["scaling"], "default");
  EXPECT_EQ(s["layer_type"], "sliding_attention");
  EXPECT_NEAR(s["inv_freq"][64].get<double>(), 0.01, 1e-17);
  auto g = run_json({"rope", "freqs", "--hf-config", data("gemma3_1b_legacy.json"), "--layer-type",
                     "full_attention", "--format", "json"});
  EXPECT_EQ(g["scaling"], "linear");
  EXPECT_NEAR(g["inv_freq"][64].get<double>(), 1.25e-4, 1e-19);
  // Unknown layer type: exit 2, the allowed values named.
  auto r = test::run_cli(
      {"rope", "freqs", "--hf-config", data("gemma3_1b_legacy.json"), "--layer-type", "global"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("sliding_attention, full_attention"), std::string::npos) << r.err;
  EXPECT_TRUE(r.out.empty());
  // --layer-type without a config.json.
  r = test::run_cli({"rope", "freqs", "--head-dim", "64", "--layer-type", "full_attention"});
  EXPECT_EQ(r.exit_code, 2);
}

TEST(CliRope, LayersListing) {
  auto j = run_json(
      {"rope", "layers", "--hf-config", data("gemma4_proportional.json"), "--format", "json"});
  ASSERT_EQ(j["types"].size(), 2u);
  EXPECT_EQ(j["types"][0]["layer_type"], "sliding_attention");
  EXPECT_EQ(j["types"][0]["layers"], (std::vector<int64_t>{0, 1, 3, 4}));
  EXPECT_EQ(j["types"][1]["layer_type"], "full_attention");
  EXPECT_EQ(j["types"][1]["layers"], (std::vector<int64_t>{2, 5}));
  EXPECT_EQ(j["types"][1]["scaling"], "proportional");
  EXPECT_EQ(j["types"][1]["rotated_pairs"], 64);
  EXPECT_EQ(j["types"][1]["head_dim"], 512);
  auto l =
      run_json({"rope", "layers", "--hf-config", data("llama4_irope.json"), "--format", "json"});
  EXPECT_EQ(l["nope_layers"], (std::vector<int64_t>{3, 7, 11}));
  EXPECT_EQ(l["attn_temperature_tuning"], true);
  auto t = test::run_cli({"rope", "layers", "--hf-config", data("gemma3_1b_legacy.json")});
  EXPECT_EQ(t.exit_code, 0) << t.err;
  EXPECT_NE(t.out.find("layers: 5, 11, 17, 23"), std::string::npos) << t.out;
  EXPECT_NE(t.out.find("layers: 0-4, 6-10, 12-16, 18-22, 24-25"), std::string::npos) << t.out;
}

// M-RoPE through the CLI: Qwen2-VL's sections [16, 24, 24] of 64 pairs (D = 128, theta 10^6),
// positions (3, T). Expected values from the formula written here: pair i turns by
// id_c(i) * 10^6^(-2i/128), c(i) = t below 16, h below 40, w after (half layout).
TEST(CliRope, ApplyMropeThreeRowPositions) {
  test::temp_dir d;
  const int64_t T = 2, H = 1, D = 128;
  write_npy(d.file("x.npy"), make_x<double>(T, H, D));
  auto p3 = make_npy<int64_t>({3, T});
  const int64_t ids[6] = {4, 7, 5, 9, 6, 2};  // t: 4 7, h: 5 9, w: 6 2
  for (int k = 0; k < 6; ++k) p3.as<int64_t>()[k] = ids[k];
  write_npy(d.file("p3.npy"), p3);
  test::cli_result r;
  run_json(
      {"rope", "apply", "--x", d.file("x.npy"), "--positions", d.file("p3.npy"), "--hf-config",
       data("qwen2_vl_7b.json"), "--layout", "half", "--out", d.file("y.npy"), "--format", "json"},
      &r);
  const auto x = make_x<double>(T, H, D);
  const auto y = read_npy(d.file("y.npy"));
  for (int64_t t = 0; t < T; ++t)
    for (int64_t i = 0; i < 64; ++i) {
      const int c = i < 16 ? 0 : (i < 40 ? 1 : 2);
      const double th =
          static_cast<double>(ids[c * T + t]) * std::pow(1e6, -2.0 * static_cast<double>(i) / 128);
      const double u = x.as<double>()[t * D + i], v = x.as<double>()[t * D + i + 64];
      EXPECT_NEAR(y.as<double>()[t * D + i], u * std::cos(th) - v * std::sin(th), 1e-14);
      EXPECT_NEAR(y.as<double>()[t * D + i + 64], v * std::cos(th) + u * std::sin(th), 1e-14);
    }
  // (3, T) positions with a 1-D config, and a malformed section: exit 2, no output.
  auto bad = test::run_cli({"rope", "apply", "--x", d.file("x.npy"), "--positions",
                            d.file("p3.npy"), "--hf-config", data("llama2_7b.json"), "--layout",
                            "half", "--out", d.file("no.npy")});
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_NE(bad.err.find("M-RoPE config"), std::string::npos) << bad.err;
  auto j = json::parse(test::read_text(data("qwen2_vl_7b.json")));
  j["rope_scaling"]["mrope_section"] = {16, 24, 16};
  { std::ofstream(d.file("bad.json")) << j.dump(); }
  bad = test::run_cli({"rope", "apply", "--x", d.file("x.npy"), "--positions", d.file("p3.npy"),
                       "--hf-config", d.file("bad.json"), "--layout", "half", "--out",
                       d.file("no.npy")});
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_NE(bad.err.find("mrope_section must sum to rotary_dim / 2 = 64"), std::string::npos)
      << bad.err;
  EXPECT_FALSE(std::filesystem::exists(d.file("no.npy")));
}

TEST(CliRope, AttendWithMropeEqualsAttendOnRotatedInputs) {
  test::temp_dir d;
  const int64_t T = 3, H = 2, D = 128;
  write_npy(d.file("q.npy"), make_x<double>(T, H, D));
  auto k = make_x<double>(T, H, D);
  for (int64_t e = 0; e < T * H * D; ++e) k.as<double>()[e] *= -0.5;
  write_npy(d.file("k.npy"), k);
  write_npy(d.file("v.npy"), make_x<double>(T, H, D));
  auto p3 = make_npy<int64_t>({3, T});
  const int64_t ids[9] = {0, 1, 1, 0, 1, 2, 0, 2, 1};
  for (int e = 0; e < 9; ++e) p3.as<int64_t>()[e] = ids[e];
  write_npy(d.file("p3.npy"), p3);
  for (const char* name : {"q", "k"})
    run_json({"rope", "apply", "--x", d.file(std::string(name) + ".npy"), "--positions",
              d.file("p3.npy"), "--hf-config", data("qwen2_vl_7b.json"), "--layout", "half",
              "--out", d.file(std::string(name) + "r.npy"), "--format", "json"});
  run_json({"attend",
            "--q",
            d.file("q.npy"),
            "--k",
            d.file("k.npy"),
            "--v",
            d.file("v.npy"),
            "--causal",
            "--rope",
            "--hf-config",
            data("qwen2_vl_7b.json"),
            "--layout",
            "half",
            "--q-positions",
            d.file("p3.npy"),
            "--k-positions",
            d.file("p3.npy"),
            "--out",
            d.file("o.npy"),
            "--format",
            "json"});
  run_json({"attend", "--q", d.file("qr.npy"), "--k", d.file("kr.npy"), "--v", d.file("v.npy"),
            "--causal", "--out", d.file("o2.npy"), "--format", "json"});
  EXPECT_EQ(read_npy(d.file("o.npy")).data, read_npy(d.file("o2.npy")).data);
  // (3, T) positions without --rope: exit 2.
  auto r = test::run_cli({"attend", "--q", d.file("q.npy"), "--k", d.file("k.npy"), "--v",
                          d.file("v.npy"), "--q-positions", d.file("p3.npy"), "--k-positions",
                          d.file("p3.npy"), "--out", d.file("o3.npy")});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_FALSE(std::filesystem::exists(d.file("o3.npy")));
}
