// `posenc rope compare` end to end: the verdict and exit code for an engine with exact angles
// (ok, 0), transformers' float32 RoPE (ok as hf_f32, 0; its distance to exact shown apart), a
// wrong theta (MISMATCH, 1), a pair-layout swap (MISMATCH with the layout hint under hf_f32,
// 1), the JSON form, and malformed inputs (exit code 2, a message naming the argument).
//
// The engines' outputs are written here from the engines' formulas, not from posenc's code:
// exact angles in long double; transformers' float32 pipeline (inv_freq = 1 / (theta **
// (float(2i) / float(R))) in float32, angle = inv_freq * float(p), float32 cos / sin, q * cos +
// rotate_half(q) * sin as a product, a product and a sum). torch's float32 pow is SLEEF's
// (1 ulp); here it is the correctly rounded float of the double power, which the hf_f32
// tolerance covers either way.
#include <gtest/gtest.h>

#include <cmath>
#include <nlohmann/json.hpp>
#include <random>

#include "posenc/core/npy.hpp"
#include "test_support.hpp"

using namespace posenc;
using nlohmann::json;

namespace {

constexpr int64_t kT = 32, kH = 2, kD = 128;

std::string data(const std::string& name) {
  return std::string(POSENC_SOURCE_DIR) + "/tests/data/rope/" + name;
}

// (T,) positions from 0 to 99999, quadratically spaced.
std::vector<int64_t> positions() {
  std::vector<int64_t> p(kT);
  for (int64_t t = 0; t < kT; ++t) {
    const double f = static_cast<double>(t) / (kT - 1);
    p[t] = std::llround(99999.0 * f * f);
  }
  return p;
}

// x: (T, H, D) uniform in [-1, 1) from a fixed seed, exactly representable in float32.
std::vector<float> inputs() {
  std::mt19937_64 gen(20261203);
  std::vector<float> x(kT * kH * kD);
  for (auto& v : x) v = static_cast<float>(static_cast<double>(gen() >> 40) * 0x1p-24 * 2 - 1);
  return x;
}

// Exact angles: omega_i = theta^(-2i/D) and p omega_i in long double, cos / sin in long double.
std::vector<double> exact_rope(const std::vector<float>& x, const std::vector<int64_t>& pos,
                               long double theta) {
  std::vector<double> y(x.size());
  const int64_t half = kD / 2;
  for (int64_t t = 0; t < kT; ++t)
    for (int64_t i = 0; i < half; ++i) {
      const long double w = std::pow(theta, -static_cast<long double>(2 * i) / kD);
      const long double ang = static_cast<long double>(pos[t]) * w;
      const long double c = std::cos(ang), s = std::sin(ang);
      for (int64_t h = 0; h < kH; ++h) {
        const size_t o = static_cast<size_t>((t * kH + h) * kD);
        const long double u = x[o + i], v = x[o + i + half];
        y[o + i] = static_cast<double>(u * c - v * s);
        y[o + i + half] = static_cast<double>(v * c + u * s);
      }
    }
  return y;
}

// transformers' float32 pipeline, half (rotate_half) or interleaved (rotate_every_two) layout.
std::vector<float> hf_rope(const std::vector<float>& x, const std::vector<int64_t>& pos,
                           float theta, bool interleaved) {
  std::vector<float> y(x.size());
  const int64_t half = kD / 2;
  for (int64_t t = 0; t < kT; ++t)
    for (int64_t i = 0; i < half; ++i) {
      const float e = static_cast<float>(2 * i) / static_cast<float>(kD);
      const float pf = static_cast<float>(std::pow(static_cast<double>(theta), e));
      const float inv = 1.0f / pf;
      const float ang = inv * static_cast<float>(pos[t]);
      const float c = static_cast<float>(std::cos(static_cast<double>(ang)));
      const float s = static_cast<float>(std::sin(static_cast<double>(ang)));
      for (int64_t h = 0; h < kH; ++h) {
        const size_t o = static_cast<size_t>((t * kH + h) * kD);
        const size_t a = interleaved ? o + 2 * i : o + i;
        const size_t b = interleaved ? o + 2 * i + 1 : o + i + half;
        const float u = x[a], v = x[b];
        const float t1 = u * c, t2 = -v * s, t3 = v * c, t4 = u * s;
        y[a] = t1 + t2;
        y[b] = t3 + t4;
      }
    }
  return y;
}

template <typename T>
void write(const std::string& path, const std::vector<T>& v, std::vector<int64_t> shape) {
  auto a = make_npy<T>(shape);
  std::copy(v.begin(), v.end(), a.template as<T>());
  write_npy(path, a);
}

struct files {
  test::temp_dir d;
  std::string x, pos;
  std::vector<float> xv = inputs();
  std::vector<int64_t> pv = positions();
  files() : x(d.file("x.npy")), pos(d.file("pos.npy")) {
    write(x, xv, {kT, kH, kD});
    write(pos, pv, {kT});
  }
  template <typename T>
  std::string out(const std::string& name, const std::vector<T>& v) {
    write(d.file(name), v, {kT, kH, kD});
    return d.file(name);
  }
};

}  // namespace

TEST(CliRopeCompare, ExactAnglesAreOk) {
  files f;
  const auto a = f.out("exact.npy", exact_rope(f.xv, f.pv, 10000.0L));
  const auto r = test::run_cli({"rope", "compare", "--actual", a, "--x", f.x, "--positions", f.pos,
                                "--hf-config", data("llama2_7b.json")});
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_EQ(r.out.rfind("ok: max error", 0), 0u) << r.out;
}

TEST(CliRopeCompare, TransformersFloat32IsOkAsHfF32) {
  files f;
  for (const char* cfg : {"llama2_7b.json", "codellama_7b.json"}) {
    const float theta = std::string(cfg) == "llama2_7b.json" ? 1e4f : 1e6f;
    const auto a = f.out("hf.npy", hf_rope(f.xv, f.pv, theta, false));
    const auto r = test::run_cli({"rope", "compare", "--actual", a, "--x", f.x, "--positions",
                                  f.pos, "--hf-config", data(cfg)});
    EXPECT_EQ(r.exit_code, 0) << cfg << "\n" << r.out << r.err;
    EXPECT_EQ(r.out.rfind("ok as transformers' float32 (hf_f32): max error", 0), 0u) << r.out;
    EXPECT_NE(r.out.find("\nagainst exact angles (exact): max error"), std::string::npos) << r.out;
    // JSON: the same verdict, and the distance to exact far outside the exact tolerance
    const auto rj = test::run_cli({"rope", "compare", "--actual", a, "--x", f.x, "--positions",
                                   f.pos, "--hf-config", data(cfg), "--format", "json"});
    ASSERT_EQ(rj.exit_code, 0) << rj.err;
    const auto j = json::parse(rj.out);
    EXPECT_EQ(j["ok"], true);
    EXPECT_EQ(j["pipeline"], "hf_f32");
    EXPECT_EQ(j["verdict"], "ok as transformers' float32 (hf_f32)");
    EXPECT_LE(j["match"]["max_ratio"].get<double>(), 1.0);
    EXPECT_GT(j["max_ratio"].get<double>(), 100.0);
    EXPECT_GT(j["worst_position"].get<int64_t>(), 10000);
  }
}

TEST(CliRopeCompare, ExplicitFlagsAndExpected) {
  files f;
  const auto a = f.out("hf.npy", hf_rope(f.xv, f.pv, 1e4f, false));
  // the rope flags, head dim from --actual
  auto r = test::run_cli(
      {"rope", "compare", "--actual", a, "--x", f.x, "--positions", f.pos, "--theta", "10000"});
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_EQ(r.out.rfind("ok as transformers' float32 (hf_f32)", 0), 0u) << r.out;
  // posenc's exact output given as --expected: the same verdict
  const auto e = f.out("e.npy", exact_rope(f.xv, f.pv, 10000.0L));
  r = test::run_cli({"rope", "compare", "--actual", a, "--expected", e, "--x", f.x, "--positions",
                     f.pos, "--theta", "10000"});
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_EQ(r.out.rfind("ok as transformers' float32 (hf_f32)", 0), 0u) << r.out;
  // --expected alone (no input to recompute from): a mismatch against exact angles
  r = test::run_cli({"rope", "compare", "--actual", a, "--expected", e});
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  EXPECT_EQ(r.out.rfind("MISMATCH: max error", 0), 0u) << r.out;
}

TEST(CliRopeCompare, WrongThetaIsAMismatch) {
  files f;
  const auto a = f.out("hf.npy", hf_rope(f.xv, f.pv, 1e4f * 1.001f, false));
  const auto r = test::run_cli({"rope", "compare", "--actual", a, "--x", f.x, "--positions", f.pos,
                                "--hf-config", data("llama2_7b.json")});
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  EXPECT_EQ(r.out.rfind("MISMATCH: max error", 0), 0u) << r.out;
  EXPECT_NE(r.out.find("\nclosest pipeline: "), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("hint:"), std::string::npos) << r.out;
  // The JSON form of a mismatch: no pipeline matched, so "pipeline" is null (it once ended in
  // an internal error, exit 3).
  const auto j = test::run_cli({"rope", "compare", "--actual", a, "--x", f.x, "--positions", f.pos,
                                "--hf-config", data("llama2_7b.json"), "--format", "json"});
  EXPECT_EQ(j.exit_code, 1) << j.out << j.err;
  EXPECT_NE(j.out.find("\"pipeline\": null"), std::string::npos) << j.out;
}

TEST(CliRopeCompare, LayoutSwapUnderHfF32IsNamed) {
  files f;
  const auto a = f.out("hf_gptj.npy", hf_rope(f.xv, f.pv, 1e4f, true));
  const auto r = test::run_cli({"rope", "compare", "--actual", a, "--x", f.x, "--positions", f.pos,
                                "--hf-config", data("llama2_7b.json"), "--layout", "half"});
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  EXPECT_EQ(r.out.rfind("MISMATCH", 0), 0u) << r.out;
  EXPECT_NE(r.out.find("\nhint: matches the other pair layout (interleaved) under transformers' "
                       "float32 (hf_f32); posenc used half"),
            std::string::npos)
      << r.out;
  // told the right layout, it is ok as hf_f32
  const auto ok = test::run_cli({"rope", "compare", "--actual", a, "--x", f.x, "--positions", f.pos,
                                 "--hf-config", data("llama2_7b.json"), "--layout", "interleaved"});
  EXPECT_EQ(ok.exit_code, 0) << ok.out << ok.err;
}

TEST(CliRopeCompare, BadInputExitsTwoNamingTheArgument) {
  files f;
  const auto a = f.out("hf.npy", hf_rope(f.xv, f.pv, 1e4f, false));
  write(f.d.file("x_short.npy"), std::vector<float>(kH * kD, 0.0f), {1, kH, kD});
  write(f.d.file("pos_f.npy"), std::vector<double>(kT, 0.0), {kT});
  write(f.d.file("pos_short.npy"), std::vector<int64_t>(3, 0), {3});
  write(f.d.file("neg.npy"), std::vector<int64_t>(kT, -1), {kT});
  const std::vector<std::string> base = {"rope", "compare", "--actual", a};
  auto run = [&](std::vector<std::string> extra) {
    auto args = base;
    args.insert(args.end(), extra.begin(), extra.end());
    return test::run_cli(args);
  };
  const std::string cfg = data("llama2_7b.json");
  const struct {
    std::vector<std::string> args;
    const char* msg;
  } cases[] = {
      {{"--x", f.d.file("x_short.npy"), "--hf-config", cfg}, "--x must have the shape of --actual"},
      {{"--x", f.x}, "--x and a config (--hf-config, --gguf or the rope flags) are required"},
      {{"--x", f.x, "--hf-config", cfg, "--layout", "neox"},
       "--layout must be half or interleaved"},
      {{"--x", f.x, "--hf-config", cfg, "--angle", "fp32"}, "--angle must be"},
      {{"--x", f.x, "--hf-config", cfg, "--positions", f.d.file("pos_f.npy")},
       "--positions must be int64"},
      {{"--x", f.x, "--hf-config", cfg, "--positions", f.d.file("pos_short.npy")},
       "--positions must have shape (T,) = (32,)"},
      {{"--x", f.x, "--hf-config", cfg, "--positions", f.d.file("neg.npy")},
       "positions must be >= 0"},
      {{"--x", f.x, "--theta", "10000", "--head-dim", "64"},
       "actual must have head dim D = cfg head_dim = 64"},
      {{"--x", f.x, "--hf-config", cfg, "--rtol", "-1"}, "--rtol must be finite and >= 0"},
      {{"--x", f.d.file("missing.npy"), "--hf-config", cfg}, "missing.npy"},
  };
  for (const auto& c : cases) {
    const auto r = run(c.args);
    EXPECT_EQ(r.exit_code, 2) << c.msg << "\n" << r.out << r.err;
    EXPECT_NE(r.err.find(c.msg), std::string::npos) << c.msg << "\n" << r.err;
    EXPECT_EQ(r.out, "") << c.msg;
  }
}

// A per-layer model (Gemma 3's legacy keys: rope_theta 1e6 for the full layers,
// rope_local_base_freq 1e4 for the sliding ones): --layer-type picks the one to judge by. An
// engine's sliding layer rotated at 1e4 is ok as sliding_attention and a mismatch as
// full_attention; --layer-type with neither --hf-config nor --gguf is refused.
TEST(CliRopeCompare, LayerTypeChoosesThePerLayerConfig) {
  files f;
  const std::string cfg = f.d.file("gemma3.json");
  {
    FILE* fp = std::fopen(cfg.c_str(), "w");
    std::fputs(R"({"model_type": "gemma3_text", "head_dim": 128, "num_hidden_layers": 6,
                   "hidden_size": 1152, "num_attention_heads": 4, "rope_theta": 1000000.0,
                   "rope_local_base_freq": 10000.0, "max_position_embeddings": 131072})",
               fp);
    std::fclose(fp);
  }
  const auto a = f.out("sliding.npy", exact_rope(f.xv, f.pv, 10000.0L));
  const std::vector<std::string> base = {"rope",        "compare", "--actual",    a,  "--x", f.x,
                                         "--positions", f.pos,     "--hf-config", cfg};
  auto args = base;
  args.insert(args.end(), {"--layer-type", "sliding_attention"});
  auto r = test::run_cli(args);
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_EQ(r.out.rfind("ok: max error", 0), 0u) << r.out;
  args = base;
  args.insert(args.end(), {"--layer-type", "full_attention"});
  r = test::run_cli(args);
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  EXPECT_EQ(r.out.rfind("MISMATCH", 0), 0u) << r.out;
  args = base;
  args.insert(args.end(), {"--layer-type", "chunked_attention"});
  r = test::run_cli(args);
  EXPECT_EQ(r.exit_code, 2) << r.out << r.err;
  EXPECT_NE(r.err.find("sliding_attention"), std::string::npos) << r.err;
  r = test::run_cli({"rope", "compare", "--actual", a, "--x", f.x, "--positions", f.pos,
                     "--layer-type", "full_attention"});
  EXPECT_EQ(r.exit_code, 2) << r.out << r.err;
  EXPECT_NE(r.err.find("--layer-type needs --hf-config"), std::string::npos) << r.err;
}
