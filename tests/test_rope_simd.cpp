// The RoPE SIMD kernels (src/encodings/rope_simd.cpp) against the binary128 reference and the
// plain scalar loops: awkward shapes (T in 1, 3, 17, 129; H in 1, 3, 32; D in 32, 59, 80, 96,
// 128 with partial rotary R < D and odd pass-through widths), both layouts, float and double,
// forward and inverse, in place; rope_apply_qk and rope_unrotate; the exact-mode cos/sin bound
// at large positions; the fused q-and-k entry point; the POSENC_REFERENCE=1 switch.
//
// The kernel-against-reference tests run the groups of the library's case table (full_cases()
// of include/posenc/verify/rope_cases.hpp, which also feeds `posenc check --group rope` and
// `posenc bench`) through its check mode; the bounds are derived in that header (per element of
// a pair (x_u, x_v): 5.5 u a (|x_u| + |x_v|) for double, (3 u_f + 5.5 u) a (|x_u| + |x_v|) for
// float against the reference; 4 u_T (|x_u| + |x_v|) between the SIMD and plain rotate loops;
// bit for bit between rope_apply_qk and two rope_apply calls).
#include <gtest/gtest.h>
#include <rapidcheck.h>
#include <rapidcheck/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <span>
#include <string>
#include <vector>

#include "case_tables.hpp"
#include "posenc/core/error.hpp"
#include "posenc/core/rng.hpp"
#include "posenc/core/threads.hpp"
#include "posenc/encodings/rope.hpp"
#include "posenc/verify/rope_cases.hpp"

using namespace posenc;

namespace {

constexpr double kU = 0x1p-53;

rope_freqs freqs(int64_t D, int64_t R, double theta = 10000, double factor = 1) {
  rope_cases::spec c;
  c.D = D, c.R = R, c.theta = theta, c.factor = factor;
  return rope_cases::freqs(c);
}

template <typename T>
std::vector<T> rand_vec(rng& g, size_t n) {
  std::vector<T> v(n);
  for (auto& e : v) e = static_cast<T>(g.normal());
  return v;
}

// Runs the full list's cases of one group through check mode; n is the group's size (the
// coverage of the test this replaced, or of the new group).
void run_group(const std::string& group, int n) {
  test::run_group(rope_cases::full_cases(), group, n,
                  [](const rope_cases::spec& c) { return rope_cases::check_case(c); });
}

}  // namespace

// Every shape x T x H x layout, forward and inverse, float and double, half of the cases with
// a != 1 (yarn), positions below 1e7: rope_apply against the reference.
TEST(RopeSimd, MatchesReferenceOnAwkwardShapes) {
  run_group("awkward_shapes", 336);
}

// Same cos/sin into rope_rotate and rope_rotate_plain (5 heads in rows of D + 7): they differ
// only in fma vs product-then-add; the gaps and channels [R, D) stay untouched.
TEST(RopeSimd, RotateMatchesPlainLoopsWithinOneRoundingPerProduct) {
  run_group("plain_strided", 72);
}

TEST(RopeSimd, ExactCosSinBoundAtLargePositions) {
  // The documented bound: |cos, sin - exact| <= 2.5 * 2^-53 (a = 1) at every position <= 2^53;
  // 1e-18 slack for the reference's own long double sin/cos.
  rng g(11);
  std::vector<int64_t> pos = {0,
                              1,
                              2,
                              7,
                              9999999,
                              10000000,
                              (int64_t{1} << 40) - 1,
                              int64_t{1} << 40,
                              (int64_t{1} << 53) - 1,
                              int64_t{1} << 53};
  for (int k = 0; k < 300; ++k) pos.push_back(static_cast<int64_t>(g.below(10000001)));
  for (int k = 0; k < 100; ++k)
    pos.push_back(static_cast<int64_t>(g.below(1u << 30)) * 1024 +
                  static_cast<int64_t>(g.below(1024)));
  double worst = 0;
  for (double theta : {1e4, 1e6, 5e8}) {
    auto f = freqs(128, 128, theta);
    std::vector<double> c(64), s(64);
    for (int64_t p : pos) {
      rope_cos_sin(f, rope_angle::exact, p, c.data(), s.data());
      for (int i = 0; i < 64; ++i) {
        long double rc, rs;
        rope_reference_cos_sin(p, f.inv_freq[i], &rc, &rs);
        worst = std::max({worst, static_cast<double>(std::fabs(c[i] - rc)),
                          static_cast<double>(std::fabs(s[i] - rs))});
      }
    }
  }
  EXPECT_LE(worst, 2.5 * kU + 1e-18);
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3e", worst);
  RecordProperty("exact_max_abs_error", buf);
}

// Whole rope_apply at positions near 1e7 and 2^40 (float and double), half and interleaved.
TEST(RopeSimd, ApplyAtHugePositionsStaysWithinBound) {
  run_group("huge_positions", 2);
}

// rope_apply_qk (GQA, R = 24 of D = 80, a != 1) equals rope_apply on q and then on k, bit for
// bit, in both angle modes, forward and inverse, float and double.
TEST(RopeSimd, FusedQkEqualsTwoAppliesBitForBit) {
  run_group("fused_qk", 4);
}

// rope_apply_qk (Hq = 4, Hk = 2) and rope_unrotate (the true inverse, R(p)^T / a) against the
// reference on every shape and layout.
TEST(RopeSimd, FusedQkMatchesReference) {
  run_group("apply_qk_reference", 18);
}
TEST(RopeSimd, UnrotateMatchesReference) {
  run_group("unrotate_reference", 18);
}

TEST(RopeSimd, FusedQkThreadCountDoesNotChangeResults) {
  auto f = freqs(128, 128, 5e5);
  const int64_t T = 300, H = 8, D = 128;
  rng g(9);
  std::vector<int64_t> pos(T);
  for (auto& p : pos) p = static_cast<int64_t>(g.below(1u << 20));
  auto q = rand_vec<float>(g, static_cast<size_t>(T * H * D));
  auto k = rand_vec<float>(g, static_cast<size_t>(T * H * D));
  const int before = num_threads();
  set_num_threads(1);
  auto q1 = q, k1 = k;
  rope_apply_qk(f, rope_layout::interleaved, rope_angle::exact, pos, q1.data(), H, k1.data(), H, T,
                D);
  set_num_threads(3);
  auto q2 = q, k2 = k;
  rope_apply_qk(f, rope_layout::interleaved, rope_angle::exact, pos, q2.data(), H, k2.data(), H, T,
                D);
  set_num_threads(before);
  EXPECT_EQ(std::memcmp(q1.data(), q2.data(), q.size() * 4), 0);
  EXPECT_EQ(std::memcmp(k1.data(), k2.data(), k.size() * 4), 0);
}

TEST(RopeSimd, FusedQkValidation) {
  auto f = freqs(32, 32);
  std::vector<int64_t> pos = {0, 1};
  std::vector<float> q(2 * 2 * 32), k(2 * 1 * 32);
  EXPECT_THROW(
      rope_apply_qk(f, rope_layout::half, rope_angle::exact, pos, q.data(), 2, q.data(), 2, 2, 32),
      invalid_argument);  // aliasing
  EXPECT_THROW(rope_apply_qk(f, rope_layout::half, rope_angle::exact, pos, q.data(), 2,
                             q.data() + 64, 1, 2, 32),
               invalid_argument);  // k inside q
  EXPECT_THROW(
      rope_apply_qk(f, rope_layout::half, rope_angle::exact, pos, q.data(), 2, k.data(), 1, 3, 32),
      invalid_argument);  // positions.size() != T
  EXPECT_THROW(
      rope_apply_qk(f, rope_layout::half, rope_angle::exact, pos, q.data(), 2, k.data(), 1, 2, 30),
      invalid_argument);  // D != head_dim
  EXPECT_THROW(
      rope_apply_qk(f, rope_layout::half, rope_angle::exact, pos, nullptr, 2, k.data(), 1, 2, 32),
      invalid_argument);
  EXPECT_THROW(
      rope_apply_qk(f, rope_layout::half, rope_angle::exact, pos, q.data(), -1, k.data(), 1, 2, 32),
      invalid_argument);
  std::vector<int64_t> bad = {0, -4};
  EXPECT_THROW(
      rope_apply_qk(f, rope_layout::half, rope_angle::exact, bad, q.data(), 2, k.data(), 1, 2, 32),
      invalid_argument);
  // Hk = 0 with a null k is fine and equals rope_apply on q.
  auto q1 = q;
  for (size_t i = 0; i < q.size(); ++i) q[i] = q1[i] = static_cast<float>(i % 7) - 3;
  rope_apply_qk(f, rope_layout::half, rope_angle::exact, pos, q.data(), 2, nullptr, 0, 2, 32);
  rope_apply(f, rope_layout::half, rope_angle::exact, pos, q1.data(), 2, 2, 32);
  EXPECT_EQ(std::memcmp(q.data(), q1.data(), q.size() * 4), 0);
}

TEST(RopeSimd, ReferenceSwitchSelectsTheReference) {
  // POSENC_REFERENCE=1: rope_apply (exact) is rope_apply_reference, rounded once to the type;
  // the default path differs from it (within the bound) in at least one element.
  rng g(31);
  auto f = freqs(96, 64, 1e6, 3.0);
  const int64_t T = 17, H = 3, D = 96;
  std::vector<int64_t> pos(T);
  for (auto& p : pos) p = static_cast<int64_t>(g.below(1u << 30));
  auto x = rand_vec<double>(g, static_cast<size_t>(T * H * D));
  std::vector<float> xf(x.begin(), x.end());
  std::vector<double> xfd(xf.begin(), xf.end());
  for (auto l : {rope_layout::half, rope_layout::interleaved}) {
    std::vector<double> ref(x.size()), reff(x.size());
    rope_apply_reference(f, l, pos, x.data(), ref.data(), T, H, D);
    rope_apply_reference(f, l, pos, xfd.data(), reff.data(), T, H, D);
    ::setenv("POSENC_REFERENCE", "1", 1);
    EXPECT_TRUE(rope_reference_selected());
    auto y = x;
    rope_apply(f, l, rope_angle::exact, pos, y.data(), T, H, D);
    auto yf = xf;
    std::vector<float> kf = xf;
    rope_apply_qk(f, l, rope_angle::exact, pos, yf.data(), H, kf.data(), H, T, D);
    ::setenv("POSENC_REFERENCE", "0", 1);
    EXPECT_FALSE(rope_reference_selected());
    auto yfast = x;
    rope_apply(f, l, rope_angle::exact, pos, yfast.data(), T, H, D);
    ::unsetenv("POSENC_REFERENCE");
    EXPECT_EQ(std::memcmp(y.data(), ref.data(), y.size() * 8), 0);
    size_t differ = 0;
    for (size_t i = 0; i < x.size(); ++i) {
      EXPECT_EQ(yf[i], static_cast<float>(reff[i]));
      EXPECT_EQ(kf[i], static_cast<float>(reff[i]));
      differ += yfast[i] != ref[i];
    }
    EXPECT_GT(differ, 0u) << "the fast path should not be the reference bit for bit";
    EXPECT_LE(rope_cases::reference_ratio<double>(
                  l, f.rotary_dim, D, f.attention_factor, std::span<const double>(x),
                  std::span<const double>(yfast), std::span<const double>(ref)),
              1);
  }
}

// Random shapes through the table's reference mode (rope_apply, both element types).
RC_GTEST_PROP(RopeSimd, RandomShapesMatchReference, ()) {
  rope_cases::spec c;
  c.D = *rc::gen::inRange<int64_t>(2, 200);
  c.R = 2 * *rc::gen::inRange<int64_t>(1, c.D / 2 + 1);
  c.T = *rc::gen::inRange<int64_t>(1, 6);
  c.H = *rc::gen::inRange<int64_t>(1, 6);
  c.layout = *rc::gen::arbitrary<bool>() ? rope_layout::half : rope_layout::interleaved;
  c.inverse = *rc::gen::arbitrary<bool>();
  c.pos_max = *rc::gen::element<int64_t>(1000, 10000000, int64_t{1} << 40);
  c.seed = *rc::gen::arbitrary<uint64_t>();
  c.theta = *rc::gen::element(1e4, 1e6);
  c.name = "random";
  const auto r = rope_cases::check_case(c);
  RC_ASSERT(r.passed);
}
