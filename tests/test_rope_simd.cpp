// The RoPE SIMD kernels (src/encodings/rope_simd.cpp) against the binary128 reference and the
// plain scalar loops: awkward shapes (T in 1, 3, 17, 129; H in 1, 3, 32; D in 32, 59, 80, 96,
// 128 with partial rotary R < D and odd pass-through widths), both layouts, float and double,
// forward and inverse, in place; the exact-mode cos/sin bound at large positions; the fused
// q-and-k entry point; the POSENC_REFERENCE=1 switch.
//
// Tolerances (u = 2^-53 for double, u_f = 2^-24 for float; a = attention factor; per element of
// a pair (u, v), against the exact rotation):
//   cos/sin row (exact mode): <= 2.5 u absolute before scaling by a (rope_simd.cpp: < 1.8 u
//     from SinCosReduced + one rounding of the first-order correction), + 1 u relative for the
//     multiply by a.
//   double rotation: y = fma(u, c, -(v s)): the product v s rounds (u |v s|) and the fma rounds
//     (u |y|): with the cos/sin error, |y - exact| <= (2.5 + 1 + 2) u a (|u| + |v|) = 5.5 u ...
//   float rotation: c, s rounded to float (u_f a each), then the same two roundings in float:
//     |y - exact| <= 3 u_f a (|u| + |v|) + 5.5 u a (|u| + |v|).
// The reference's own error (binary128 reduction, long double sin/cos) is below 1e-18 relative.
#include <gtest/gtest.h>
#include <rapidcheck.h>
#include <rapidcheck/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "posenc/core/error.hpp"
#include "posenc/core/rng.hpp"
#include "posenc/core/threads.hpp"
#include "posenc/encodings/rope.hpp"

using namespace posenc;

namespace {

constexpr double kU = 0x1p-53;
constexpr double kUf = 0x1p-24;

rope_freqs freqs(int64_t D, int64_t R, double theta = 10000, double factor = 1) {
  rope_config c;
  c.head_dim = D;
  c.rotary_dim = R;
  c.theta = theta;
  if (factor != 1) {
    c.type = rope_type::yarn;
    c.factor = factor;
    c.original_max_position_embeddings = 4096;
  }
  return rope_frequencies(c);
}

template <typename T>
double tol_unit() {
  return std::is_same_v<T, float> ? 3 * kUf + 5.5 * kU : 5.5 * kU;
}

// Index of the partner of channel d (< R) in its pair.
int64_t partner(rope_layout l, int64_t R, int64_t d) {
  if (l == rope_layout::interleaved) return d ^ 1;
  return d < R / 2 ? d + R / 2 : d - R / 2;
}

// Compares y (fast, type T) with ref (double) for x: (T, H, D); returns the worst error / bound
// over rotated channels; pass-through channels must be bit-exact copies of x.
template <typename T>
double compare(const rope_freqs& f, rope_layout l, const std::vector<T>& x, const std::vector<T>& y,
               const std::vector<double>& ref, int64_t rows) {
  const int64_t D = f.head_dim, R = f.rotary_dim;
  double worst = 0;
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t d = 0; d < D; ++d) {
      const int64_t e = r * D + d;
      if (d >= R) {
        EXPECT_EQ(std::memcmp(&y[e], &x[e], sizeof(T)), 0) << "pass-through channel " << d;
        continue;
      }
      const double mag = std::fabs(static_cast<double>(x[e])) +
                         std::fabs(static_cast<double>(x[r * D + partner(l, R, d)]));
      const double bound = tol_unit<T>() * f.attention_factor * mag + 1e-300;
      worst = std::max(worst, std::fabs(static_cast<double>(y[e]) - ref[e]) / bound);
    }
  }
  return worst;
}

template <typename T>
std::vector<T> rand_vec(rng& g, size_t n) {
  std::vector<T> v(n);
  for (auto& e : v) e = static_cast<T>(g.normal());
  return v;
}

struct shape {
  int64_t D, R;
};
// Odd pass-through widths (59 - 58 = 1, 59 - 32 = 27, 80 - 24 = 56, 96 - 64 = 32), R/2 odd
// (29, 45: vector tails) and the model shapes.
constexpr shape kShapes[] = {{32, 32}, {59, 58}, {59, 32},   {80, 80}, {80, 24},
                             {96, 96}, {96, 64}, {128, 128}, {128, 90}};

}  // namespace

TEST(RopeSimd, MatchesReferenceOnAwkwardShapes) {
  rng g(77);
  double worst_f = 0, worst_d = 0;
  for (const auto& sh : kShapes)
    for (int64_t T : {1, 3, 17, 129})
      for (int64_t H : {1, 3, 32}) {
        if (T * H > 129 && sh.R != 128) continue;  // keep the ASan run short
        for (auto l : {rope_layout::half, rope_layout::interleaved}) {
          const bool scaled = (T + H) % 2 == 1;  // half the cases with a != 1 (yarn)
          auto f = freqs(sh.D, sh.R, scaled ? 5e5 : 1e4, scaled ? 4.0 : 1.0);
          std::vector<int64_t> pos(T);
          for (auto& p : pos) p = static_cast<int64_t>(g.below(10000000));
          const size_t n = static_cast<size_t>(T * H * sh.D);
          auto xd = rand_vec<double>(g, n);
          std::vector<float> xf(xd.begin(), xd.end());
          std::vector<double> xfd(xf.begin(), xf.end());
          for (bool inverse : {false, true}) {
            std::vector<double> ref(n), reff(n);
            rope_apply_reference(f, l, pos, xd.data(), ref.data(), T, H, sh.D, inverse);
            rope_apply_reference(f, l, pos, xfd.data(), reff.data(), T, H, sh.D, inverse);
            auto yd = xd;
            rope_apply(f, l, rope_angle::exact, pos, yd.data(), T, H, sh.D, inverse);
            auto yf = xf;
            rope_apply(f, l, rope_angle::exact, pos, yf.data(), T, H, sh.D, inverse);
            const double ed = compare(f, l, xd, yd, ref, T * H);
            const double ef = compare(f, l, xf, yf, reff, T * H);
            EXPECT_LE(ed, 1) << "double D=" << sh.D << " R=" << sh.R << " T=" << T << " H=" << H
                             << " " << rope_layout_name(l) << " inverse=" << inverse;
            EXPECT_LE(ef, 1) << "float D=" << sh.D << " R=" << sh.R << " T=" << T << " H=" << H
                             << " " << rope_layout_name(l) << " inverse=" << inverse;
            worst_d = std::max(worst_d, ed);
            worst_f = std::max(worst_f, ef);
          }
        }
      }
  RecordProperty("worst_double_over_bound", std::to_string(worst_d));
  RecordProperty("worst_float_over_bound", std::to_string(worst_f));
}

TEST(RopeSimd, RotateMatchesPlainLoopsWithinOneRoundingPerProduct) {
  // Same cos/sin into both kernels: they differ only in fma vs product-then-add: each output
  // differs by <= 2 roundings of |u c| + |v s| <= |u| + |v| (|c|, |s| <= 1) on each side.
  rng g(3);
  for (const auto& sh : kShapes)
    for (auto l : {rope_layout::half, rope_layout::interleaved})
      for (bool inverse : {false, true}) {
        auto f = freqs(sh.D, sh.R);
        const int64_t H = 5, stride = sh.D + 7;  // heads embedded in a wider row
        auto buf = rand_vec<float>(g, static_cast<size_t>(H * stride));
        std::vector<float> c(sh.R / 2), s(sh.R / 2);
        rope_cos_sin(f, rope_angle::exact, 123457, c.data(), s.data());
        auto a = buf, b = buf;
        rope_rotate(l, sh.R, c.data(), s.data(), a.data(), H, stride, inverse);
        rope_rotate_plain(l, sh.R, c.data(), s.data(), b.data(), H, stride, inverse);
        for (int64_t h = 0; h < H; ++h)
          for (int64_t d = 0; d < stride; ++d) {
            const int64_t e = h * stride + d;
            if (d >= sh.R) {
              EXPECT_EQ(std::memcmp(&a[e], &buf[e], 4), 0) << "untouched channel " << d;
              continue;
            }
            const double mag = std::fabs(buf[e]) + std::fabs(buf[h * stride + partner(l, sh.R, d)]);
            EXPECT_LE(std::fabs(a[e] - b[e]), 4 * kUf * mag) << d;
          }
      }
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

TEST(RopeSimd, ApplyAtHugePositionsStaysWithinBound) {
  // Whole rope_apply at positions near 1e7 and 2^40 (float and double), half and interleaved.
  rng g(12);
  auto f = freqs(96, 80, 1e6);
  std::vector<int64_t> pos = {10000000, 9999991, int64_t{1} << 40, (int64_t{1} << 40) + 12345};
  const int64_t T = 4, H = 3, D = 96;
  auto x = rand_vec<double>(g, static_cast<size_t>(T * H * D));
  std::vector<float> xf(x.begin(), x.end());
  std::vector<double> xfd(xf.begin(), xf.end());
  for (auto l : {rope_layout::half, rope_layout::interleaved}) {
    std::vector<double> ref(x.size()), reff(x.size());
    rope_apply_reference(f, l, pos, x.data(), ref.data(), T, H, D);
    rope_apply_reference(f, l, pos, xfd.data(), reff.data(), T, H, D);
    auto y = x;
    rope_apply(f, l, rope_angle::exact, pos, y.data(), T, H, D);
    auto yf = xf;
    rope_apply(f, l, rope_angle::exact, pos, yf.data(), T, H, D);
    EXPECT_LE(compare(f, l, x, y, ref, T * H), 1);
    EXPECT_LE(compare(f, l, xf, yf, reff, T * H), 1);
  }
}

TEST(RopeSimd, FusedQkEqualsTwoAppliesBitForBit) {
  rng g(21);
  for (auto l : {rope_layout::half, rope_layout::interleaved})
    for (auto angle : {rope_angle::exact, rope_angle::compat_f32}) {
      auto f = freqs(80, 24, 1e6, 2.0);
      const int64_t T = 37, Hq = 8, Hk = 2, D = 80;  // GQA: Hk != Hq
      std::vector<int64_t> pos(T);
      for (auto& p : pos) p = static_cast<int64_t>(g.below(1u << 24));
      auto q = rand_vec<float>(g, static_cast<size_t>(T * Hq * D));
      auto k = rand_vec<float>(g, static_cast<size_t>(T * Hk * D));
      auto q1 = q, k1 = k;
      rope_apply_qk(f, l, angle, pos, q.data(), Hq, k.data(), Hk, T, D, false);
      rope_apply(f, l, angle, pos, q1.data(), T, Hq, D);
      rope_apply(f, l, angle, pos, k1.data(), T, Hk, D);
      EXPECT_EQ(std::memcmp(q.data(), q1.data(), q.size() * 4), 0);
      EXPECT_EQ(std::memcmp(k.data(), k1.data(), k.size() * 4), 0);
      // Double, inverse.
      auto qd = rand_vec<double>(g, static_cast<size_t>(T * Hq * D));
      auto kd = rand_vec<double>(g, static_cast<size_t>(T * Hk * D));
      auto qd1 = qd, kd1 = kd;
      rope_apply_qk(f, l, angle, pos, qd.data(), Hq, kd.data(), Hk, T, D, true);
      rope_apply(f, l, angle, pos, qd1.data(), T, Hq, D, true);
      rope_apply(f, l, angle, pos, kd1.data(), T, Hk, D, true);
      EXPECT_EQ(std::memcmp(qd.data(), qd1.data(), qd.size() * 8), 0);
      EXPECT_EQ(std::memcmp(kd.data(), kd1.data(), kd.size() * 8), 0);
    }
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
    EXPECT_LE(compare(f, l, x, yfast, ref, T * H), 1);
  }
}

RC_GTEST_PROP(RopeSimd, RandomShapesMatchReference, ()) {
  const int64_t D = *rc::gen::inRange<int64_t>(2, 200);
  const int64_t R = 2 * *rc::gen::inRange<int64_t>(1, D / 2 + 1);
  const int64_t T = *rc::gen::inRange<int64_t>(1, 6);
  const int64_t H = *rc::gen::inRange<int64_t>(1, 6);
  const auto l = *rc::gen::arbitrary<bool>() ? rope_layout::half : rope_layout::interleaved;
  const bool inverse = *rc::gen::arbitrary<bool>();
  const int64_t pmax = *rc::gen::element<int64_t>(1000, 10000000, int64_t{1} << 40);
  rng g(*rc::gen::arbitrary<uint64_t>());
  auto f = freqs(D, R, *rc::gen::element(1e4, 1e6));
  std::vector<int64_t> pos(T);
  for (auto& p : pos) p = static_cast<int64_t>(g.uniform() * static_cast<double>(pmax));
  auto x = rand_vec<double>(g, static_cast<size_t>(T * H * D));
  std::vector<float> xf(x.begin(), x.end());
  std::vector<double> xfd(xf.begin(), xf.end());
  std::vector<double> ref(x.size()), reff(x.size());
  rope_apply_reference(f, l, pos, x.data(), ref.data(), T, H, D, inverse);
  rope_apply_reference(f, l, pos, xfd.data(), reff.data(), T, H, D, inverse);
  auto y = x;
  rope_apply(f, l, rope_angle::exact, pos, y.data(), T, H, D, inverse);
  auto yf = xf;
  rope_apply(f, l, rope_angle::exact, pos, yf.data(), T, H, D, inverse);
  RC_ASSERT(compare(f, l, x, y, ref, T * H) <= 1);
  RC_ASSERT(compare(f, l, xf, yf, reff, T * H) <= 1);
}
