// Sinusoidal absolute encoding: the seeds' worked numbers as golden values, every error path,
// layouts and denominators, the fast table against the long-double reference, and RapidCheck
// properties (shift = rotation, dot product depends on the offset only).
//
// Golden values were computed independently with system python3 (math.sin, math.cos and
// 10000 ** x in double, each within 1 ulp), from Vaswani et al. (2017) sec. 3.5:
//   PE(pos, 2r) = sin(pos * 10000^(-2r/d)),  PE(pos, 2r+1) = cos(pos * 10000^(-2r/d)).
// Tolerance for golden comparisons: the library's entry bound (about 1e-15 here) plus python's
// own error (<= 2 ulp of a value <= 1 after the angle's rounding: 2^-52 * (1 + |angle|)); we use
// 4e-15, an order above both and far below the 1e-4 differences a wrong formula produces.
#include <gtest/gtest.h>
#include <rapidcheck.h>
#include <rapidcheck/gtest.h>

#include <cmath>
#include <numbers>
#include <string>

#include "posenc/core/error.hpp"
#include "posenc/core/threads.hpp"
#include "posenc/encodings/sinusoidal.hpp"
#include "posenc/verify/checks.hpp"

using namespace posenc;

namespace {

constexpr double golden_tol = 4e-15;

sinusoidal_params paper(int64_t width) {
  sinusoidal_params p;
  p.width = width;
  return p;
}

std::vector<int64_t> iota(int64_t n) {
  std::vector<int64_t> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] = i;
  return v;
}

// Runs f, expects posenc::invalid_argument whose message contains every needle.
template <typename F>
void expect_invalid(F&& f, const std::vector<std::string>& needles) {
  try {
    f();
    ADD_FAILURE() << "expected invalid_argument";
  } catch (const invalid_argument& e) {
    const std::string m = e.what();
    for (const auto& n : needles) EXPECT_NE(m.find(n), std::string::npos) << m << " lacks " << n;
  }
}

}  // namespace

TEST(SinusoidalGolden, Width4Positions012) {
  // The seed: "Position zero is (0,1,0,1). Position one is approximately
  // (0.8415,0.5403,0.0100,0.99995). Position two is approximately (0.9093,-0.4161,0.0200,0.99980)."
  // Full-precision values from python3: sin/cos of 1, 0.01, 2, 0.02.
  const double want[3][4] = {
      {0, 1, 0, 1},
      {0.8414709848078965, 0.5403023058681398, 0.009999833334166664, 0.9999500004166653},
      {0.9092974268256817, -0.4161468365471424, 0.01999866669333308, 0.9998000066665778}};
  const auto t = sinusoidal_table(paper(4), iota(3));
  ASSERT_EQ(t.size(), 12u);
  for (int i = 0; i < 3; ++i)
    for (int c = 0; c < 4; ++c) EXPECT_NEAR(t[i * 4 + c], want[i][c], golden_tol) << i << "," << c;
  // Position 0 is exact: sin 0 = 0 and cos 0 = 1 with no rounding at all.
  EXPECT_EQ(t[0], 0.0);
  EXPECT_EQ(t[1], 1.0);
  // The seed's printed digits (half a unit in the last digit).
  EXPECT_NEAR(t[4], 0.8415, 5e-5);
  EXPECT_NEAR(t[7], 0.99995, 5e-6);
  EXPECT_NEAR(t[9], -0.4161, 5e-5);
  EXPECT_NEAR(t[11], 0.99980, 5e-6);
}

TEST(SinusoidalGolden, Width20And50Position5Channels2And3) {
  // python3: w = 10000 ** (-2/d); phase = 5 * w; sin(phase), cos(phase).
  struct {
    int64_t d;
    double omega, phase, s, c;
  } cases[] = {
      {20, 0.3981071705534972, 1.990535852767486, 0.9131951203434904, -0.4075226032759879},
      {50, 0.6918309709189365, 3.459154854594683, -0.3122515830471297, -0.9499994467811871}};
  for (const auto& k : cases) {
    const auto p = paper(k.d);
    const auto w = sinusoidal_frequencies(p);
    EXPECT_NEAR(w[1], k.omega, 2e-16);
    EXPECT_NEAR(5 * w[1], k.phase, 1e-15);
    const auto t = sinusoidal_table(p, std::vector<int64_t>{5});
    EXPECT_NEAR(t[2], k.s, golden_tol);
    EXPECT_NEAR(t[3], k.c, golden_tol);
    // Channels 0/1 are sin(5), cos(5) at every width.
    EXPECT_NEAR(t[0], std::sin(5.0), golden_tol);
    EXPECT_NEAR(t[1], std::cos(5.0), golden_tol);
  }
  // The seed's rounded phases.
  EXPECT_NEAR(5 * sinusoidal_frequencies(paper(20))[1], 1.99054, 5e-6);
  EXPECT_NEAR(5 * sinusoidal_frequencies(paper(50))[1], 3.45915, 5e-6);
}

TEST(SinusoidalGolden, FractionQ04SameFrequency) {
  // 10000 ** -0.4 = 0.025118864315095794 (python3); r = 4 at d = 20, r = 10 at d = 50.
  const auto p20 = paper(20), p50 = paper(50);
  const double w20 = sinusoidal_frequencies(p20)[4], w50 = sinusoidal_frequencies(p50)[10];
  EXPECT_NEAR(w20, 0.025118864315095794, 1e-17);
  EXPECT_EQ(w20, w50);  // the same long-double exponent 0.4, rounded once
  EXPECT_NEAR(w20, 0.025119, 5e-7);
  EXPECT_EQ(sinusoidal_channel(p20, 4, false), 8);
  EXPECT_EQ(sinusoidal_channel(p20, 4, true), 9);
  EXPECT_EQ(sinusoidal_channel(p50, 10, false), 20);
  EXPECT_EQ(sinusoidal_channel(p50, 10, true), 21);
}

TEST(SinusoidalGolden, WavelengthsAndNorms) {
  const auto l = sinusoidal_wavelengths(paper(4));
  ASSERT_EQ(l.size(), 2u);
  // 2*pi = 6.283185307179586, 200*pi = 628.3185307179587 (python3); relative 2 ulp.
  EXPECT_NEAR(l[0], 6.283185307179586, 2 * 0x1.0p-52 * 6.3);
  EXPECT_NEAR(l[1], 628.3185307179587, 2 * 0x1.0p-52 * 629);
  // Squared norm d/2: 10 at width 20 and 25 at width 50 (seed), at any position.
  for (int64_t d : {20, 50}) {
    const auto t = sinusoidal_table(paper(d), std::vector<int64_t>{0, 7, 123456});
    for (int i = 0; i < 3; ++i) {
      double s = 0;
      for (int64_t c = 0; c < d; ++c) s += t[i * d + c] * t[i * d + c];
      EXPECT_NEAR(s, d / 2.0, 1e-13);
    }
  }
}

TEST(SinusoidalGolden, Width8Position3) {
  // The eight-channel example, row 3: omegas 1, 0.1, 0.01, 0.001 (python3).
  const double want[8] = {0.1411200080598672,   -0.9899924966004454, 0.2955202066613396,
                          0.955336489125606,    0.02999550020249566, 0.9995500337489875,
                          0.002999995500002025, 0.999995500003375};
  const auto t = sinusoidal_table(paper(8), std::vector<int64_t>{3});
  for (int c = 0; c < 8; ++c) EXPECT_NEAR(t[c], want[c], golden_tol) << c;
}

TEST(SinusoidalConventions, HalvesIsAPermutationOfInterleaved) {
  for (int64_t d : {2, 4, 18, 64}) {
    auto pi = paper(d), ph = paper(d);
    ph.layout = sin_layout::halves;
    const auto pos = std::vector<int64_t>{0, 1, 5, 1000, 99999};
    const auto a = sinusoidal_table(pi, pos), b = sinusoidal_table(ph, pos);
    for (size_t n = 0; n < pos.size(); ++n)
      for (int64_t r = 0; r < d / 2; ++r) {
        EXPECT_EQ(a[n * d + 2 * r], b[n * d + r]);
        EXPECT_EQ(a[n * d + 2 * r + 1], b[n * d + d / 2 + r]);
      }
    EXPECT_EQ(sinusoidal_channel(ph, 0, true), d / 2);
  }
  // Width 4 halves, position 1: [sin 1, sin 0.01 | cos 1, cos 0.01].
  auto ph = paper(4);
  ph.layout = sin_layout::halves;
  const auto t = sinusoidal_table(ph, std::vector<int64_t>{1});
  EXPECT_NEAR(t[0], 0.8414709848078965, golden_tol);
  EXPECT_NEAR(t[1], 0.009999833334166664, golden_tol);
  EXPECT_NEAR(t[2], 0.5403023058681398, golden_tol);
  EXPECT_NEAR(t[3], 0.9999500004166653, golden_tol);
}

TEST(SinusoidalConventions, HalfMinusOneDenominator) {
  // tensor2tensor / fairseq: omega_r = 10000^(-r/(d/2-1)); width 8: 10000^(-r/3) (python3).
  auto p = paper(8);
  p.denominator = sin_denominator::half_minus_one;
  const auto w = sinusoidal_frequencies(p);
  const double want[4] = {1.0, 0.046415888336127795, 0.0021544346900318843, 0.0001};
  for (int r = 0; r < 4; ++r) EXPECT_NEAR(w[r], want[r], 2 * 0x1.0p-53 * want[r]) << r;
  // The lowest frequency is exactly 1/base (up to rounding), unlike 10000^(-6/8) = 0.001.
  EXPECT_NEAR(w[3], 1e-4, 1e-19);
  // d = 2: one pair; the denominator max(d/2 - 1, 1) = 1 gives omega_0 = 1 for both.
  for (auto den : {sin_denominator::width, sin_denominator::half_minus_one}) {
    auto q = paper(2);
    q.denominator = den;
    EXPECT_EQ(sinusoidal_frequencies(q), std::vector<double>{1.0});
  }
}

TEST(SinusoidalConventions, NamesRoundTrip) {
  for (auto l : {sin_layout::interleaved, sin_layout::halves})
    EXPECT_EQ(parse_sin_layout(sin_layout_name(l)), l);
  for (auto d : {sin_denominator::width, sin_denominator::half_minus_one})
    EXPECT_EQ(parse_sin_denominator(sin_denominator_name(d)), d);
  expect_invalid([] { parse_sin_layout("diagonal", "--layout"); },
                 {"--layout", "interleaved", "halves", "diagonal"});
  expect_invalid([] { parse_sin_denominator("d", "--denominator"); },
                 {"--denominator", "width", "half-minus-one"});
}

TEST(SinusoidalRotation, MatchesSeedMatrix) {
  // omega = 1, k = 1: [[cos 1, sin 1], [-sin 1, cos 1]]; applied to (0, 1) it gives
  // (0.8415, 0.5403), applied to that it gives (0.9093, -0.4161) (the seed's example).
  const auto R = sinusoidal_shift_rotation(1.0, 1.0);
  EXPECT_NEAR(R[0], 0.5403023058681398, 1e-16);
  EXPECT_NEAR(R[1], 0.8414709848078965, 1e-16);
  EXPECT_NEAR(R[2], -0.8414709848078965, 1e-16);
  EXPECT_NEAR(R[3], 0.5403023058681398, 1e-16);
  const double s1 = R[0] * 0 + R[1] * 1, c1 = R[2] * 0 + R[3] * 1;
  const double s2 = R[0] * s1 + R[1] * c1, c2 = R[2] * s1 + R[3] * c1;
  EXPECT_NEAR(s2, 0.9092974268256817, 4e-16);
  EXPECT_NEAR(c2, -0.4161468365471424, 4e-16);
  // k = 0 is the identity; R(-k) is the inverse (transpose) of R(k).
  EXPECT_EQ(sinusoidal_shift_rotation(0.3, 0.0), (std::array<double, 4>{1, 0, -0.0, 1}));
  const auto A = sinusoidal_shift_rotation(0.3, 5), B = sinusoidal_shift_rotation(0.3, -5);
  EXPECT_EQ(A[0], B[0]);
  EXPECT_EQ(A[1], B[2]);
}

TEST(SinusoidalErrors, BadParameters) {
  std::vector<int64_t> pos = {0, 1};
  std::vector<double> out(8);
  for (int64_t w : std::vector<int64_t>{0, -2, 1, 7, sinusoidal_max_width + 2}) {
    auto p = paper(w);
    expect_invalid([&] { sinusoidal_validate(p); }, {"width", std::to_string(w), "even"});
    expect_invalid([&] { sinusoidal_table(p, pos, std::span<double>(out)); }, {"width"});
    expect_invalid([&] { sinusoidal_frequencies(p); }, {"width"});
  }
  for (double b : std::vector<double>{1.0, 0.5, -3.0, 0.0, HUGE_VAL, -HUGE_VAL, std::nan("")}) {
    auto p = paper(4);
    p.base = b;
    expect_invalid([&] { sinusoidal_validate(p); }, {"base", "> 1"});
    expect_invalid([&] { sinusoidal_wavelengths(p); }, {"base"});
  }
}

TEST(SinusoidalErrors, BadPositionsAndBuffers) {
  const auto p = paper(4);
  std::vector<double> out(12);
  std::vector<int64_t> neg = {0, 5, -1};
  expect_invalid([&] { sinusoidal_table(p, neg, std::span<double>(out)); },
                 {"positions[2]", "non-negative", "-1"});
  std::vector<int64_t> huge = {(int64_t{1} << 53) + 1};
  std::vector<double> out1(4);
  expect_invalid([&] { sinusoidal_table(p, huge, std::span<double>(out1)); }, {"positions[0]"});
  std::vector<int64_t> three = {0, 1, 2};
  std::vector<double> small(11);
  expect_invalid([&] { sinusoidal_table(p, three, std::span<double>(small)); },
                 {"out", "12", "11"});
  std::vector<float> small32(13);
  expect_invalid([&] { sinusoidal_table(p, three, std::span<float>(small32)); }, {"out"});
  expect_invalid([&] { sinusoidal_table_reference(p, neg, std::span<double>(out)); },
                 {"positions[2]"});
  // Over the memory cap: 65 positions x 2^24 channels x 8 bytes = 8.1 GiB > 8 GiB. Rejected
  // before anything is allocated or written.
  auto wide = paper(sinusoidal_max_width);
  std::vector<int64_t> many = iota(65);
  expect_invalid([&] { sinusoidal_table(wide, many); }, {"sinusoidal table", "cap"});
  expect_invalid([&] { sinusoidal_table(wide, many, std::span<double>()); }, {"cap"});
  // Dot profile and distances validate their ranges.
  expect_invalid([&] { sinusoidal_dot_profile(p, -1); }, {"max_offset"});
  expect_invalid([&] { sinusoidal_distances(p, 1); }, {"n"});
  expect_invalid([&] { sinusoidal_channel(p, 2, false); }, {"r", "[0, 1]"});
}

TEST(SinusoidalTable, EmptyPositionsIsEmptyTable) {
  EXPECT_TRUE(sinusoidal_table(paper(4), std::vector<int64_t>{}).empty());
}

TEST(SinusoidalTable, FloatIsTheDoubleTableRounded) {
  // The float overload rounds the same double value once: bit-identical to casting.
  for (auto lay : {sin_layout::interleaved, sin_layout::halves}) {
    auto p = paper(96);
    p.layout = lay;
    const auto pos = iota(300);
    const auto d = sinusoidal_table(p, pos);
    std::vector<float> f(d.size());
    sinusoidal_table(p, pos, std::span<float>(f));
    for (size_t i = 0; i < d.size(); ++i) ASSERT_EQ(f[i], static_cast<float>(d[i])) << i;
  }
}

TEST(SinusoidalTable, IndependentOfThreadCount) {
  const auto p = paper(64);
  const auto pos = iota(5000);
  const int saved = num_threads();
  set_num_threads(1);
  const auto a = sinusoidal_table(p, pos);
  set_num_threads(4);
  const auto b = sinusoidal_table(p, pos);
  set_num_threads(saved);
  EXPECT_EQ(a, b);
}

TEST(SinusoidalTable, AddPositionsIsEPlusPE) {
  const auto p = paper(6);
  const std::vector<int64_t> pos = {3, 0, 9};
  std::vector<float> e(18);
  for (size_t i = 0; i < e.size(); ++i) e[i] = 0.25f * static_cast<float>(i) - 2;
  const auto t = sinusoidal_table(p, pos);
  std::vector<float> h(18);
  add_positions(e, p, pos, h);
  // h = float(E + PE) with the sum formed in double: within half a float ulp of it.
  for (size_t i = 0; i < h.size(); ++i) EXPECT_EQ(h[i], static_cast<float>(e[i] + t[i])) << i;
  // In place.
  add_positions(e, p, pos, e);
  EXPECT_EQ(e, h);
  std::vector<float> bad(17);
  expect_invalid([&] { add_positions(bad, p, pos, h); }, {"token_embeddings", "18", "17"});
  expect_invalid([&] { add_positions(h, p, pos, bad); }, {"out"});
}

TEST(SinusoidalTable, FastPathBeatsNaiveAtLargePositions) {
  // At pos = 10^9 + 7 and omega_1 = 0.1 (width 4, base 100) a naive double product pos * 0.1
  // may round by up to 2^-53 * 1e8 = 1.1e-8 (plus 0.1's own representation error times pos).
  // The fast path's stated bound there is 1.2e-9 and it must hold against the long-double
  // reference.
  sinusoidal_params p = paper(4);
  p.base = 100;
  const std::vector<int64_t> pos = {1000000007};
  std::vector<double> a(4), b(4);
  sinusoidal_table(p, pos, std::span<double>(a));
  sinusoidal_table_reference(p, pos, std::span<double>(b));
  const double tol = 2 * sinusoidal_entry_error_bound(p, pos[0]);
  EXPECT_LT(tol, 1.1e-8);
  for (int c = 0; c < 4; ++c) EXPECT_NEAR(a[c], b[c], tol) << c;
}

TEST(SinusoidalData, DotProfileAndDistances) {
  // python3: sum(cos(7 * 10000 ** (-2k/20)) for k in range(10)) = 7.147087517979776.
  const auto prof = sinusoidal_dot_profile(paper(20), 10);
  ASSERT_EQ(prof.size(), 11u);
  EXPECT_NEAR(prof[0], 10.0, 1e-15);
  EXPECT_NEAR(prof[7], 7.147087517979776, 1e-14);
  // python3: sqrt(sum(4 sin(w/2)^2)): d=4 0.958903221097098, d=20 1.0514743559026738.
  const auto s4 = sinusoidal_distances(paper(4), 200);
  EXPECT_NEAR(s4.max_neighbour, 0.958903221097098, 1e-13);
  const auto s20 = sinusoidal_distances(paper(20), 200);
  EXPECT_NEAR(s20.max_neighbour, 1.0514743559026738, 1e-13);
  EXPECT_GT(s20.min_pairwise, 0.5);
  EXPECT_LT(s20.min_i, s20.min_j);
}

TEST(SinusoidalChecks, AllPass) {
  const auto checks = sinusoidal_checks();
  EXPECT_GE(checks.size(), 12u);
  for (const auto& c : checks) {
    EXPECT_TRUE(c.passed) << c.name << ": max_error " << c.max_error << " tol " << c.tolerance
                          << "; " << c.detail;
    EXPECT_EQ(c.group, "sinusoidal");
    EXPECT_FALSE(c.claim.empty());
    EXPECT_FALSE(c.detail.empty());
  }
}

// ---------------------------------------------------------------------------------------------
// RapidCheck properties over widths, bases, positions and offsets.

namespace {

sinusoidal_params gen_params() {
  sinusoidal_params p;
  p.width = 2 * *rc::gen::inRange<int64_t>(1, 65);
  // base in (1.01, 1e6): log-uniform-ish from an integer exponent grid.
  p.base = std::pow(10.0, *rc::gen::inRange(1, 600) / 100.0) + 0.01;
  p.layout = *rc::gen::element(sin_layout::interleaved, sin_layout::halves);
  p.denominator = *rc::gen::element(sin_denominator::width, sin_denominator::half_minus_one);
  return p;
}

}  // namespace

RC_GTEST_PROP(SinusoidalProps, FastWithinBoundOfReference, ()) {
  const auto p = gen_params();
  const auto pos =
      *rc::gen::container<std::vector<int64_t>>(4, rc::gen::inRange<int64_t>(0, int64_t{1} << 40));
  std::vector<double> a(pos.size() * static_cast<size_t>(p.width)), b(a.size());
  sinusoidal_table(p, pos, std::span<double>(a));
  sinusoidal_table_reference(p, pos, std::span<double>(b));
  const int64_t mx = *std::max_element(pos.begin(), pos.end());
  // Both obey the entry bound, so they differ by at most twice it.
  const double tol = 2 * sinusoidal_entry_error_bound(p, mx);
  for (size_t i = 0; i < a.size(); ++i) RC_ASSERT(std::abs(a[i] - b[i]) <= tol);
}

RC_GTEST_PROP(SinusoidalProps, ShiftIsRotationIndependentOfPos, ()) {
  const auto p = gen_params();
  const int64_t k = *rc::gen::inRange<int64_t>(-5000, 5000);
  const auto pos =
      *rc::gen::container<std::vector<int64_t>>(6, rc::gen::inRange<int64_t>(5000, 2000000));
  std::vector<int64_t> shifted;
  for (int64_t x : pos) shifted.push_back(x + k);
  const auto a = sinusoidal_table(p, pos), b = sinusoidal_table(p, shifted);
  const auto w = sinusoidal_frequencies(p);
  const int64_t d = p.width;
  // Entry error eps at the largest position; R(k) entries err by eR <= (|k| omega + 1) 2^-53
  // with omega <= 1; each output a*s + b*c errs by <= sqrt(2)(eR + eps) + 2 * 2^-53 and the
  // shifted row adds eps: tol = 2 (eR + eps) + eps + 2^-52.
  const double eps = sinusoidal_entry_error_bound(p, 2005000);
  const double eR = (std::abs(static_cast<double>(k)) + 1) * 0x1.0p-53;
  const double tol = 2 * (eR + eps) + eps + 0x1.0p-52;
  for (int64_t r = 0; r < d / 2; ++r) {
    // One R(k) for every pos.
    const auto R = sinusoidal_shift_rotation(w[static_cast<size_t>(r)], static_cast<double>(k));
    const int64_t cs = sinusoidal_channel(p, r, false), cc = sinusoidal_channel(p, r, true);
    for (size_t n = 0; n < pos.size(); ++n) {
      const double s = a[n * d + cs], c = a[n * d + cc];
      RC_ASSERT(std::abs(R[0] * s + R[1] * c - b[n * d + cs]) <= tol);
      RC_ASSERT(std::abs(R[2] * s + R[3] * c - b[n * d + cc]) <= tol);
    }
  }
}

RC_GTEST_PROP(SinusoidalProps, DotDependsOnlyOnOffset, ()) {
  const auto p = gen_params();
  const int64_t i = *rc::gen::inRange<int64_t>(0, 100000);
  const int64_t j = *rc::gen::inRange<int64_t>(0, 100000);
  const int64_t s = *rc::gen::inRange<int64_t>(0, 100000);
  const auto t = sinusoidal_table(p, std::vector<int64_t>{i, j, i + s, j + s});
  const int64_t d = p.width;
  auto dot = [&](int a, int b) {
    double v = 0;
    for (int64_t c = 0; c < d; ++c) v += t[a * d + c] * t[b * d + c];
    return v;
  };
  // Each dot errs by <= 2 d eps + d^2 2^-54 (see sinusoidal_checks); two of them differ by
  // at most twice that.
  const double eps = sinusoidal_entry_error_bound(p, 200000);
  const double tol = 2 * (2 * d * eps + static_cast<double>(d * d) * 0x1.0p-54);
  RC_ASSERT(std::abs(dot(0, 1) - dot(2, 3)) <= tol);
  // And it equals sum_r cos((i - j) omega_r) (long double).
  const auto w = sinusoidal_frequencies(p);
  long double ref = 0;
  for (double wr : w) ref += std::cos(static_cast<long double>(i - j) * wr);
  // Using the double omega in ref adds |i - j| * omega * 2^-53 per term: d/2 * 1e5 * 2^-53.
  RC_ASSERT(std::abs(dot(0, 1) - static_cast<double>(ref)) <=
            tol + static_cast<double>(d) / 2 * 1e5 * 0x1.0p-53);
}

RC_GTEST_PROP(SinusoidalProps, PairsLieOnTheUnitCircle, ()) {
  const auto p = gen_params();
  const int64_t pos = *rc::gen::inRange<int64_t>(0, int64_t{1} << 50);
  const auto t = sinusoidal_table(p, std::vector<int64_t>{pos});
  const double eps = sinusoidal_entry_error_bound(p, pos);
  for (int64_t r = 0; r < p.width / 2; ++r) {
    const double s = t[sinusoidal_channel(p, r, false)], c = t[sinusoidal_channel(p, r, true)];
    // s^2 + c^2 - 1 <= 2 sqrt(2) eps + 2 * 2^-53 (see sinusoidal_checks).
    RC_ASSERT(std::abs(s * s + c * c - 1) <= 3 * eps + 0x1.0p-52);
  }
}
