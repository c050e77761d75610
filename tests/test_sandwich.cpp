// Sandwich (Chi et al. 2023; posenc/encodings/sandwich.hpp), reached by name: its bias against
// NeMo's SandwichRelativePositionEmbedding run unchanged (tests/golden/nemo/sandwich.json), its
// declaration and what follows from it (the engine, posenc check's group, the rule), the CLI
// flags and the lab.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "posenc/attention/attention.hpp"
#include "posenc/attention/schemes.hpp"
#include "posenc/core/error.hpp"
#include "posenc/core/npy.hpp"
#include "posenc/core/rng.hpp"
#include "posenc/encodings/rope.hpp"
#include "posenc/encodings/sandwich.hpp"
#include "posenc/verify/checks.hpp"
#include "test_support.hpp"

using namespace posenc;
using json = nlohmann::json;

// NeMo computes in float32 (torch's default dtype); posenc in double. With u = 2^-24, per term
// i of the sum: w_i = 1 / 10000^(2i/d') within 4u (pow, then the division), the angle r w_i
// within 5u |r| w_i, its cosine within 2u more; the float32 sum of d'/2 terms adds at most
// (d'/2)^2 u; subtracting d'/2 and dividing by r_h, 2u of the result. So
//   |nemo - exact| <= (sum_i (5u |r| w_i + 2u) + (d'/2)^2 u) / r_h + 2u |bias|.
TEST(Sandwich, MatchesNeMoWithinItsFloat32Rounding) {
  std::ifstream in(std::filesystem::path(POSENC_SOURCE_DIR) / "tests/golden/nemo/sandwich.json");
  ASSERT_TRUE(in) << "tests/golden/nemo/sandwich.json";
  const json g = json::parse(in);
  ASSERT_EQ(g.at("commit").get<std::string>().substr(0, 8), "000b931e");
  const double u = 0x1p-24;
  int compared = 0;
  double worst = 0;
  for (const auto& c : g.at("cases")) {
    const int64_t H = c.at("heads"), d = c.at("sandwich_dim"), qp = c.at("qpos");
    const auto kpos = c.at("kpos").get<std::vector<int64_t>>();
    const auto bias = c.at("bias").get<std::vector<std::vector<double>>>();
    ASSERT_EQ(static_cast<int64_t>(bias.size()), H);
    for (int64_t h = 0; h < H; ++h)
      for (size_t j = 0; j < kpos.size(); ++j) {
        const double r = std::abs(double(kpos[j] - qp));
        double terms = 0;
        for (int64_t i = 1; i <= d / 2; ++i)
          terms += 5 * u * r * std::pow(10000.0, -2.0 * i / d) + 2 * u;
        const double want = sandwich_bias(h, H, qp, kpos[j], d);
        const int64_t pairs = d / 2;  // d' is even
        const double tol = (terms + double(pairs) * double(pairs) * u) / sandwich_ratio(h, H) +
                           2 * u * std::abs(want);
        EXPECT_LE(std::abs(bias[h][j] - want), tol)
            << "H=" << H << " d'=" << d << " h=" << h << " offset " << kpos[j] - qp;
        worst = std::max(worst, std::abs(bias[h][j] - want) / tol);
        ++compared;
      }
  }
  EXPECT_EQ(compared, 8 * 40 + 12 * 40 + 4 * 300);
  RecordProperty("worst_error_over_tolerance", std::to_string(worst));
}

TEST(Sandwich, TheFormulaOnSmallCases) {
  // d' = 2: one frequency, w_1 = 10000^-1; H = 8: r_h = h + 1.
  EXPECT_EQ(sandwich_bias(0, 8, 5, 5, 2), 0.0);
  EXPECT_DOUBLE_EQ(sandwich_bias(0, 8, 0, 3, 2), std::cos(3e-4) - 1);
  EXPECT_DOUBLE_EQ(sandwich_bias(3, 8, 3, 0, 2), (std::cos(3e-4) - 1) / 4);
  // The table holds value()'s bits.
  const auto t = sandwich_bias_table(3, -5, 7, 16);
  for (int64_t h = 0; h < 3; ++h)
    for (int64_t r = -5; r <= 7; ++r) EXPECT_EQ(t[h * 13 + r + 5], sandwich_bias(h, 3, 0, r, 16));
  EXPECT_THROW(sandwich_check_dim(7), invalid_argument);
  EXPECT_THROW(sandwich_check_dim(0), invalid_argument);
}

TEST(Sandwich, DeclaredOnceAndReachedByName) {
  const scheme_decl& d = scheme_decl_of("sandwich");
  ASSERT_NE(d.named, nullptr);
  EXPECT_EQ(d.bias_props, bias_offset_only | bias_symmetric | bias_bounded);
  EXPECT_FALSE(d.learned);
  // The rule follows from the properties: a score bias combines with everything but CoPE.
  EXPECT_EQ(scheme_conflict(d, scheme_decl_of("rope")), "");
  EXPECT_EQ(scheme_conflict(d, scheme_decl_of("alibi")), "");
  EXPECT_NE(scheme_conflict(d, scheme_decl_of("cope")), "");
  // Its arguments: the default, a given value, and errors naming the parameter.
  EXPECT_EQ(named_scheme_args(d, {}, 4), std::vector<double>{128});
  const std::vector<std::pair<std::string, double>> given = {{"sandwich_dim", 16}};
  EXPECT_EQ(named_scheme_args(d, given, 4), std::vector<double>{16});
  const std::vector<std::pair<std::string, double>> bad = {{"sandwich_dimm", 16}};
  EXPECT_THROW(named_scheme_args(d, bad, 4), invalid_argument);
  const std::vector<std::pair<std::string, double>> odd = {{"sandwich_dim", 15}};
  EXPECT_THROW(named_scheme_args(d, odd, 4), invalid_argument);
}

TEST(Sandwich, EngineForwardAndBackwardWithRope) {
  // Sandwich with RoPE (hook 1 + hook 2b) in float64, tiled against the reference, and CoPE
  // refused by the rule with one message naming both.
  const int64_t T = 9, H = 4, Hkv = 2, D = 8;
  rng r(5);
  std::vector<double> q(T * H * D), k(T * Hkv * D), v(T * Hkv * D), o1(T * H * D), o2(T * H * D);
  for (auto* x : {&q, &k, &v})
    for (auto& e : *x) e = r.normal();
  rope_config rc;
  rc.head_dim = rc.rotary_dim = D;
  const rope_freqs f = rope_frequencies(rc);
  attention_params<double> p;
  p.q = q.data(), p.k = k.data(), p.v = v.data(), p.out = o1.data();
  p.T = p.S = T, p.Hq = H, p.Hkv = Hkv, p.D = D;
  p.causal = true;
  p.pos.named = {rope_scheme(f), {"sandwich", {{"sandwich_dim", 16}}}};
  attention_forward(p);
  p.out = o2.data();
  attention_reference(p);
  for (int64_t i = 0; i < T * H * D; ++i) EXPECT_NEAR(o1[i], o2[i], 1e-13);
  // Without Sandwich the outputs differ: the bias is on.
  std::vector<double> o3(T * H * D);
  p.out = o3.data();
  p.pos.named = {rope_scheme(f)};
  attention_forward(p);
  double dev = 0;
  for (int64_t i = 0; i < T * H * D; ++i) dev = std::max(dev, std::abs(o1[i] - o3[i]));
  EXPECT_GT(dev, 1e-3);
  p.pos.named = {{"sandwich", {}}, {"sandwich", {}}};
  EXPECT_THROW(attention_forward(p), invalid_argument);
  p.pos.named = {{"rope", {}}};  // RoPE without the frequencies of a config
  EXPECT_THROW(attention_forward(p), invalid_argument);
  std::vector<double> e(3 * D, 0.1);
  p.pos.named = {{"sandwich", {}}, {"cope", {}, {named_tensor{"cope", {3, D}, {}, e}}}};
  try {
    attention_forward(p);
    FAIL() << "cope + sandwich ran";
  } catch (const invalid_argument& x) {
    EXPECT_NE(std::string(x.what()).find("cope cannot be combined with sandwich"),
              std::string::npos)
        << x.what();
  }
}

TEST(Sandwich, CheckGroupPasses) {
  int found = 0;
  for (const auto& c : attention_checks()) {
    if (c.name.find("sandwich_") == std::string::npos) continue;
    ++found;
    EXPECT_TRUE(c.passed) << c.name << ": " << c.max_error << " > " << c.tolerance << " "
                          << c.detail;
  }
  // offset-only, symmetric, bounded, engine, permutation, translation, packed, padded, cache,
  // and the case table's three check rows (forward/backward, then finite differences).
  EXPECT_EQ(found, 9 + 3 * 2);
}

TEST(Sandwich, CliFlagsAndErrors) {
  test::temp_dir dir;
  const int64_t T = 6, H = 4, Hkv = 2, D = 8;
  rng r(3);
  auto q = make_npy<double>({T, H, D});
  auto k = make_npy<double>({T, Hkv, D});
  auto v = make_npy<double>({T, Hkv, D});
  for (auto* a : {&q, &k, &v})
    for (int64_t i = 0; i < a->numel(); ++i) a->as<double>()[i] = r.normal();
  write_npy(dir.file("q.npy"), q);
  write_npy(dir.file("k.npy"), k);
  write_npy(dir.file("v.npy"), v);
  const auto attend = [&](std::vector<std::string> extra) {
    std::vector<std::string> a = {
        "attend",   "--q",   dir.file("q.npy"), "--k", dir.file("k.npy"), "--v", dir.file("v.npy"),
        "--causal", "--out", dir.file("o.npy")};
    a.insert(a.end(), extra.begin(), extra.end());
    return test::run_cli(a);
  };
  const auto ok = attend({"--sandwich", "--sandwich-dim", "16"});
  ASSERT_EQ(ok.exit_code, 0) << ok.err;
  EXPECT_NE(ok.out.find("schemes: sandwich"), std::string::npos) << ok.out;
  // The CLI's output is the library's.
  std::vector<double> want(T * H * D);
  attention_params<double> p;
  p.q = q.as<double>(), p.k = k.as<double>(), p.v = v.as<double>(), p.out = want.data();
  p.T = p.S = T, p.Hq = H, p.Hkv = Hkv, p.D = D;
  p.causal = true;
  p.pos.named = {{"sandwich", {{"sandwich_dim", 16}}}};
  attention_forward(p);
  EXPECT_EQ(read_npy(dir.file("o.npy")).to_f64(), want);
  const auto lone = attend({"--sandwich-dim", "16"});
  EXPECT_EQ(lone.exit_code, 2);
  EXPECT_NE(lone.err.find("--sandwich-dim needs --sandwich"), std::string::npos) << lone.err;
  const auto odd = attend({"--sandwich", "--sandwich-dim", "9"});
  EXPECT_EQ(odd.exit_code, 2);
  EXPECT_NE(odd.err.find("sandwich_dim must be an even integer"), std::string::npos) << odd.err;
}

TEST(Sandwich, LabTrainsIt) {
  test::temp_dir dir;
  const auto r = test::run_cli({"lab",      "--task",         "passkey", "--schemes",
                                "sandwich", "--sandwich-dim", "16",      "--steps",
                                "4",        "--seeds",        "1",       "--eval-lens",
                                "64",       "--eval-samples", "2",       "--no-progress",
                                "--format", "json",           "--out",   dir.file("lab")});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("\"sandwich\""), std::string::npos) << r.out;
  const auto bad = test::run_cli({"lab", "--task", "passkey", "--schemes", "sandwich",
                                  "--sandwich-dim", "3", "--steps", "4", "--no-progress"});
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_NE(bad.err.find("sandwich_dim"), std::string::npos) << bad.err;
}
