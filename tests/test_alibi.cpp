// ALiBi (Press, Smith and Lewis, 2022): slopes for every head count and convention against
// independently derived values, the bias formula, the dense reference and its slope gradient,
// every error path, and RapidCheck properties.
#include <gtest/gtest.h>
#include <rapidcheck.h>
#include <rapidcheck/gtest.h>

#include <cmath>
#include <limits>

#include "posenc/core/error.hpp"
#include "posenc/encodings/alibi.hpp"
#include "posenc/verify/checks.hpp"

using namespace posenc;

namespace {

// Golden slopes. Derivation (Press et al. 2022, Section 3 and their reference get_slopes): for
// n a power of two, slope_h = 2^(-8(h+1)/n); otherwise, with P = 2^floor(log2 n), heads
// 0..P-1 take exponents 8(h+1)/P and heads P..n-1 take 8(2j+1)/(2P), j = 0..n-P-1. The
// exponents below were written out as exact fractions and each value evaluated with python3 as
// repr(2.0 ** -float(e)) (math only, no numpy):
struct golden {
  int64_t heads;
  std::vector<double> slopes;
};
const std::vector<golden> press_golden = {
    // H = 8: exponents 1, 2, 3, 4, 5, 6, 7, 8
    {8, {0.5, 0.25, 0.125, 0.0625, 0.03125, 0.015625, 0.0078125, 0.00390625}},
    // H = 12: exponents 1, 2, 3, 4, 5, 6, 7, 8, 1/2, 3/2, 5/2, 7/2
    {12,
     {0.5, 0.25, 0.125, 0.0625, 0.03125, 0.015625, 0.0078125, 0.00390625, 0.7071067811865476,
      0.3535533905932738, 0.1767766952966369, 0.08838834764831845}},
    // H = 16: exponents 1/2, 1, 3/2, ..., 8
    {16,
     {0.7071067811865476, 0.5, 0.3535533905932738, 0.25, 0.1767766952966369, 0.125,
      0.08838834764831845, 0.0625, 0.04419417382415922, 0.03125, 0.02209708691207961, 0.015625,
      0.011048543456039806, 0.0078125, 0.005524271728019903, 0.00390625}},
    // H = 20: exponents 1/2, 1, ..., 8 (the 16 above), then 1/4, 3/4, 5/4, 7/4
    {20, {0.7071067811865476,   0.5,
          0.3535533905932738,   0.25,
          0.1767766952966369,   0.125,
          0.08838834764831845,  0.0625,
          0.04419417382415922,  0.03125,
          0.02209708691207961,  0.015625,
          0.011048543456039806, 0.0078125,
          0.005524271728019903, 0.00390625,
          0.8408964152537145,   0.5946035575013605,
          0.42044820762685725,  0.29730177875068026}},
    // H = 24: as H = 20, then 9/4, 11/4, 13/4, 15/4
    {24, {0.7071067811865476,   0.5,
          0.3535533905932738,   0.25,
          0.1767766952966369,   0.125,
          0.08838834764831845,  0.0625,
          0.04419417382415922,  0.03125,
          0.02209708691207961,  0.015625,
          0.011048543456039806, 0.0078125,
          0.005524271728019903, 0.00390625,
          0.8408964152537145,   0.5946035575013605,
          0.42044820762685725,  0.29730177875068026,
          0.21022410381342863,  0.14865088937534013,
          0.10511205190671431,  0.07432544468767006}},
    // H = 6: exponents 2, 4, 6, 8, 1, 3
    {6, {0.25, 0.0625, 0.015625, 0.00390625, 0.5, 0.125}},
    // H = 1: exponent 8
    {1, {0.00390625}},
};

// Tolerance: alibi_slopes' exp2 is within 1 ulp of 2^-e and python's 2.0 ** x within 1 ulp,
// so they differ by <= 2 ulp, i.e. <= 4 u relative (u = 2^-53; an ulp is <= 2u relative).
constexpr double slope_rel_tol = 4 * 0x1.0p-53;

void expect_slopes(const std::vector<double>& got, const std::vector<double>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t h = 0; h < want.size(); ++h)
    EXPECT_LE(std::abs(got[h] - want[h]), slope_rel_tol * want[h]) << "head " << h;
}

}  // namespace

TEST(AlibiSlopes, PressGolden) {
  for (const auto& g : press_golden) {
    SCOPED_TRACE(g.heads);
    expect_slopes(alibi_slopes(g.heads), g.slopes);
    expect_slopes(alibi_slopes(g.heads, 8.0, alibi_convention::press), g.slopes);
  }
}

TEST(AlibiSlopes, MptRuleGivesThePressValues) {
  // MPT rule, evaluated by hand for H = 6: P = 2^ceil(log2 6) = 8, s_k = 2^(-k) for k = 1..8;
  // concat(s[1::2], s[::2]) = (s_2, s_4, s_6, s_8, s_1, s_3, s_5, s_7), first 6:
  // 2^-2, 2^-4, 2^-6, 2^-8, 2^-1, 2^-3 -- the Press values for H = 6 above. In general
  // s[1::2] is geo(P/2) and s[::2] the odd terms of geo(P), so both rules give one sequence.
  expect_slopes(alibi_slopes(6, 8.0, alibi_convention::mpt),
                {0.25, 0.0625, 0.015625, 0.00390625, 0.5, 0.125});
  for (const auto& g : press_golden)
    expect_slopes(alibi_slopes(g.heads, 8.0, alibi_convention::mpt), g.slopes);
  // max_bias = 4, H = 6: P = 8, s_k = 2^(-k/2): (2^-1, 2^-2, 2^-3, 2^-4, 2^-1/2, 2^-3/2);
  // python3: 1/2**(k*(4/8)).
  expect_slopes(alibi_slopes(6, 4.0, alibi_convention::mpt),
                {0.5, 0.25, 0.125, 0.0625, 0.7071067811865475, 0.35355339059327373});
}

TEST(AlibiSlopes, GeometricGolden) {
  // 2^(-8(h+1)/H): H = 6 exponents 4/3, 8/3, 4, 16/3, 20/3, 8; H = 12: 2/3, 4/3, ..., 8.
  // python3: 2**(-8*(h+1)/H).
  expect_slopes(alibi_slopes(6, 8.0, alibi_convention::geometric),
                {0.3968502629920499, 0.15749013123685915, 0.0625, 0.024803141437003122,
                 0.009843133202303695, 0.00390625});
  expect_slopes(alibi_slopes(12, 8.0, alibi_convention::geometric),
                {0.6299605249474366, 0.3968502629920499, 0.25, 0.15749013123685915,
                 0.09921256574801246, 0.0625, 0.03937253280921478, 0.024803141437003122, 0.015625,
                 0.009843133202303695, 0.0062007853592507805, 0.00390625});
  // Powers of two: identical to Press.
  EXPECT_EQ(alibi_slopes(16, 8.0, alibi_convention::geometric), alibi_slopes(16));
}

TEST(AlibiSlopes, MaxBiasScalesTheExponent) {
  // max_bias b replaces 8: H = 8, b = 16 gives 2^(-2(h+1)) (ggml's m0 = 2^(-b/P)).
  const auto m = alibi_slopes(8, 16.0);
  for (int h = 0; h < 8; ++h) EXPECT_EQ(m[h], std::ldexp(1.0, -2 * (h + 1)));
}

TEST(AlibiSlopes, ErrorPaths) {
  auto expect_fail = [](auto fn, const char* word) {
    try {
      fn();
      ADD_FAILURE() << "no exception";
    } catch (const invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find(word), std::string::npos) << e.what();
    }
  };
  expect_fail([] { alibi_slopes(0); }, "heads");
  expect_fail([] { alibi_slopes(-3); }, "heads");
  expect_fail([] { alibi_slopes((int64_t{1} << 20) + 1); }, "heads");
  expect_fail([] { alibi_slopes(8, 0.0); }, "max_bias");
  expect_fail([] { alibi_slopes(8, -1.0); }, "max_bias");
  expect_fail([] { alibi_slopes(8, std::nan("")); }, "max_bias");
  expect_fail([] { alibi_slopes(8, std::numeric_limits<double>::infinity()); }, "max_bias");
  expect_fail([] { alibi_convention_from_name("bloom"); }, "press, mpt, geometric");
  std::vector<int64_t> p{0, 1};
  float out[8];
  expect_fail([&] { alibi_bias_dense({}, p, p, true, out); }, "slopes");
  const std::vector<double> bad{0.5, std::nan("")};
  expect_fail([&] { alibi_bias_dense(bad, p, p, true, out); }, "slopes[1]");
  const std::vector<double> one{0.5};
  const std::vector<int64_t> far{0, (int64_t{1} << 62) + 1};
  expect_fail([&] { alibi_bias_dense(one, far, p, true, out); }, "qpos[1]");
  double gs[1] = {0};
  expect_fail([&] { alibi_bias_backward(one, p, far, true, out, gs); }, "kpos[1]");
}

TEST(AlibiSlopes, ConventionNames) {
  for (auto c : {alibi_convention::press, alibi_convention::mpt, alibi_convention::geometric})
    EXPECT_EQ(alibi_convention_from_name(alibi_convention_name(c)), c);
}

TEST(AlibiBias, HandValues) {
  // slope 1/2, query at 10, key at 3: distance 7 -> -3.5 either way.
  EXPECT_EQ(alibi_bias(0.5, 10, 3, true), -3.5);
  EXPECT_EQ(alibi_bias(0.5, 10, 3, false), -3.5);
  // Key after the query: causal formula gives +3.5 (masked in practice), bidirectional -3.5.
  EXPECT_EQ(alibi_bias(0.5, 3, 10, true), 3.5);
  EXPECT_EQ(alibi_bias(0.5, 3, 10, false), -3.5);
  EXPECT_EQ(alibi_bias(0.25, 5, 5, true), 0.0);
  // Large position ids (KV continuation far into a stream): exact while |distance| <= 2^53.
  EXPECT_EQ(alibi_bias(0.5, (int64_t{1} << 40) + 6, int64_t{1} << 40, true), -3.0);
}

TEST(AlibiBias, DenseLayoutAndSlopeGradientByFiniteDifferences) {
  const auto m = alibi_slopes(5);
  const std::vector<int64_t> q{0, 4, 9}, k{0, 1, 2, 7};
  const size_t H = 5, T = 3, S = 4;
  std::vector<float> b(H * T * S);
  for (bool causal : {true, false}) {
    alibi_bias_dense(m, q, k, causal, b.data());
    for (size_t h = 0; h < H; ++h)
      for (size_t i = 0; i < T; ++i)
        for (size_t j = 0; j < S; ++j)
          EXPECT_EQ(b[(h * T + i) * S + j],
                    static_cast<float>(alibi_bias(m[h], q[i], k[j], causal)));
    // L(s) = sum G * bias(s) in double; L is linear in s so the central difference is exact up
    // to rounding: |error| <= 2 n u sum|G bias| / (2 eps) with eps = 2^-10, n = 60 terms, i.e.
    // < 1e-10 for these magnitudes (sum |G bias| < 1e3).
    std::vector<float> g(H * T * S);
    for (size_t e = 0; e < g.size(); ++e) g[e] = static_cast<float>(std::sin(1.0 + e));
    std::vector<double> gs(H, 0.0);
    alibi_bias_backward(m, q, k, causal, g.data(), gs.data());
    auto loss = [&](std::vector<double> s) {
      double L = 0;
      for (size_t h = 0; h < H; ++h)
        for (size_t i = 0; i < T; ++i)
          for (size_t j = 0; j < S; ++j)
            L += g[(h * T + i) * S + j] * alibi_bias(s[h], q[i], k[j], causal);
      return L;
    };
    const double eps = 0x1.0p-10;
    for (size_t h = 0; h < H; ++h) {
      auto sp = m, sm = m;
      sp[h] += eps;
      sm[h] -= eps;
      EXPECT_NEAR(gs[h], (loss(sp) - loss(sm)) / (2 * eps), 1e-10) << "head " << h;
    }
    // Accumulates: a second call doubles the gradient.
    auto gs2 = gs;
    alibi_bias_backward(m, q, k, causal, g.data(), gs2.data());
    for (size_t h = 0; h < H; ++h) EXPECT_EQ(gs2[h], 2 * gs[h]);
  }
}

TEST(AlibiChecks, AllPass) {
  for (const auto& c : alibi_checks()) EXPECT_TRUE(c.passed) << c.name << ": " << c.detail;
}

RC_GTEST_PROP(AlibiProps, TranslationInvariance, ()) {
  const auto H = *rc::gen::inRange<int64_t>(1, 70);
  const auto m = alibi_slopes(H);
  const auto h = *rc::gen::inRange<int64_t>(0, H);
  const auto q = *rc::gen::inRange<int64_t>(0, 1 << 30);
  const auto k = *rc::gen::inRange<int64_t>(0, 1 << 30);
  const auto c = *rc::gen::inRange<int64_t>(-(int64_t{1} << 40), int64_t{1} << 40);
  for (bool causal : {true, false})
    RC_ASSERT(alibi_bias(m[h], q, k, causal) == alibi_bias(m[h], q + c, k + c, causal));
}

RC_GTEST_PROP(AlibiProps, CausalAndBidirectionalAgreeOnThePast, ()) {
  const auto s = *rc::gen::map(rc::gen::inRange(1, 1000), [](int x) { return x / 1024.0; });
  const auto q = *rc::gen::inRange<int64_t>(0, 100000);
  const auto k = *rc::gen::inRange<int64_t>(0, 100000);
  RC_ASSERT(alibi_bias(s, q, k, false) == alibi_bias(s, k, q, false));  // symmetric
  RC_ASSERT(alibi_bias(s, q, k, false) <= 0.0);
  if (k <= q) RC_ASSERT(alibi_bias(s, q, k, true) == alibi_bias(s, q, k, false));
}

RC_GTEST_PROP(AlibiProps, SlopesDecreaseWithinEachGeometricRun, ()) {
  // Press: heads 0..P-1 and P..H-1 are each strictly decreasing geometric runs.
  const auto H = *rc::gen::inRange<int64_t>(1, 300);
  const auto m = alibi_slopes(H);
  int64_t P = 1;
  while (P * 2 <= H) P *= 2;
  for (int64_t h = 1; h < H; ++h)
    if (h != P) RC_ASSERT(m[h] < m[h - 1]);
}
