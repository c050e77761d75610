// Sinusoidal encoding: the property checks of group "sinusoidal" (sinusoidal_checks()). Each check
// is one function (two where they share their data), called in order by sinusoidal_checks();
// `posenc check`, the report and the tests all read this one list. After the properties come the
// results of the table kernels' small list (check_cases() of
// include/posenc/verify/table_cases.hpp, group "sinusoidal"): the fast table against the long
// double reference within the bound derived in that header.
#include "posenc/encodings/sinusoidal.hpp"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <numbers>

#include <fmt/format.h>

#include "posenc/core/error.hpp"
#include "posenc/core/threads.hpp"
#include "posenc/verify/checks.hpp"
#include "posenc/verify/table_cases.hpp"

namespace posenc {

namespace detail {
// omega_r = base^(-e_r) in long double, as the table uses it (defined in sinusoidal.cpp).
long double sinusoidal_omega_ld(const sinusoidal_params& p, int64_t r);
}  // namespace detail

namespace {

constexpr double u53 = 0x1.0p-53;  // unit roundoff of double

check_result make(std::string name, std::string claim, double max_error, double tol,
                  std::string detail) {
  return measured_check("sinusoidal", std::move(name), std::move(claim), max_error, tol,
                        std::move(detail));
}

std::vector<int64_t> iota_positions(int64_t n) {
  std::vector<int64_t> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] = i;
  return v;
}

sinusoidal_params paper(int64_t width) {
  sinusoidal_params p;
  p.width = width;
  return p;
}

// 1. Width 4 at positions 0, 1, 2 against the seed's printed values. Tolerance: half a unit
// in the last printed digit (4 decimals, or 5 for the two 0.9999x entries); the table's own
// error (< 1e-15) is negligible beside it.
void seed_width4_positions_0_1_2(std::vector<check_result>& out) {
  const double seed[3][4] = {
      {0, 1, 0, 1}, {0.8415, 0.5403, 0.0100, 0.99995}, {0.9093, -0.4161, 0.0200, 0.99980}};
  const double half_unit[4] = {5e-5, 5e-5, 5e-5, 5e-6};
  const std::vector<int64_t> pos = {0, 1, 2};
  const auto t = sinusoidal_table(paper(4), pos);
  double worst = 0;  // in units of the allowed half-unit
  double max_err = 0;
  for (size_t i = 0; i < 3; ++i)
    for (size_t c = 0; c < 4; ++c) {
      const double e = std::abs(t[i * 4 + c] - seed[i][c]);
      max_err = std::max(max_err, e);
      worst = std::max(worst, e / half_unit[c]);
    }
  out.push_back(
      make("seed_width4_positions_0_1_2",
           "width 4, positions 0,1,2 give (0,1,0,1), (0.8415,0.5403,0.0100,0.99995), "
           "(0.9093,-0.4161,0.0200,0.99980)",
           max_err, 5e-5,
           fmt::format("tolerance: half a unit in the seed's last printed digit (5e-5, or 5e-6 for "
                       "the 5-decimal cos entries); worst entry used {:.3f} of its allowance",
                       worst)));
  out.back().passed = worst <= 1;
}

// 2. Widths 20 and 50, position 5, channels 2/3: phases 5*omega_1 = 1.99054 and 3.45915
// (printed to 5 decimals: half unit 5e-6). The seed also prints omega_1 = 0.398108 and
// 0.691831; 10000^-0.1 = 0.39810717 rounds to 0.398107, so the first is off by 8.3e-7 in the
// seed's rounding (the phase it gives is right). Channels 2/3 must equal sin/cos of the
// phase within the entry bound + 2^-53 (std::sin of a double) on each side.
void seed_width20_50_position5_channels2_3(std::vector<check_result>& out) {
  const std::vector<int64_t> pos = {5};
  double max_err = 0, table_err = 0;
  std::string detail;
  const struct {
    int64_t width;
    double phase;
  } cases[] = {{20, 1.99054}, {50, 3.45915}};
  for (const auto& c : cases) {
    const auto p = paper(c.width);
    const double w1 = sinusoidal_frequencies(p)[1];
    const double phase = 5 * w1;
    max_err = std::max(max_err, std::abs(phase - c.phase));
    const auto t = sinusoidal_table(p, pos);
    table_err =
        std::max({table_err, std::abs(t[2] - std::sin(phase)), std::abs(t[3] - std::cos(phase))});
    detail += fmt::format(
        "width {}: omega_1 = {:.9f}, phase = {:.9f}, (ch2, ch3) = ({:.6f}, "
        "{:.6f}); ",
        c.width, w1, phase, t[2], t[3]);
  }
  const double tb = 2 * sinusoidal_entry_error_bound(paper(20), 5) + 2 * u53;
  out.push_back(make("seed_width20_50_position5_channels2_3",
                     "at position 5, channels 2/3 have phase 5*10000^(-2/d): 1.99054 (d=20) and "
                     "3.45915 (d=50)",
                     max_err, 5e-6,
                     detail + fmt::format("tolerance: half a unit of the printed 5th decimal; "
                                          "channels equal sin/cos of the phase to {:.2e} (bound "
                                          "{:.2e}); note the seed's omega_1 = 0.398108 is "
                                          "10000^-0.1 = 0.39810717 rounded up",
                                          table_err, tb)));
  out.back().passed = out.back().passed && table_err <= tb;
}

// 3. q = 2r/d = 0.4: r = 4 at width 20 (channels 8/9), r = 10 at width 50 (channels 20/21),
// both 10000^-0.4 = 0.025119 (printed to 6 decimals: half unit 5e-7). The two frequencies
// come from exponents 8/20 and 20/50 that are the same long double 0.4, so they must agree
// exactly.
void seed_q04_same_frequency(std::vector<check_result>& out) {
  const auto p20 = paper(20), p50 = paper(50);
  const double w20 = sinusoidal_frequencies(p20)[4], w50 = sinusoidal_frequencies(p50)[10];
  const bool ch = sinusoidal_channel(p20, 4, false) == 8 && sinusoidal_channel(p20, 4, true) == 9 &&
                  sinusoidal_channel(p50, 10, false) == 20 &&
                  sinusoidal_channel(p50, 10, true) == 21;
  const double err = std::max(std::abs(w20 - 0.025119), std::abs(w50 - 0.025119));
  out.push_back(make("seed_q04_same_frequency",
                     "q = 0.4 gives frequency 0.025119 at channels 8/9 (width 20) and 20/21 "
                     "(width 50)",
                     err, 5e-7,
                     fmt::format("omega(20, r=4) = {:.12g}, omega(50, r=10) = {:.12g}, equal: "
                                 "{}; channels 8/9 and 20/21: {}; tolerance half a unit of the "
                                 "6th decimal",
                                 w20, w50, w20 == w50, ch)));
  out.back().passed = out.back().passed && w20 == w50 && ch;
}

// 4. Wavelengths at width 4: 2*pi and 200*pi. Relative error: omega (2^-53 + long double
// terms), 2*pi/omega in long double (2^-63), rounding to double (2^-53): tolerance 3 * 2^-53.
void seed_wavelengths_width4(std::vector<check_result>& out) {
  const auto l = sinusoidal_wavelengths(paper(4));
  const long double pi = std::numbers::pi_v<long double>;
  const double e0 = static_cast<double>(std::abs((l[0] - 2 * pi) / (2 * pi)));
  const double e1 = static_cast<double>(std::abs((l[1] - 200 * pi) / (200 * pi)));
  out.push_back(make("seed_wavelengths_width4", "width 4 has wavelengths 2*pi and 200*pi",
                     std::max(e0, e1), 3 * u53,
                     fmt::format("wavelengths {:.12g} and {:.12g}; relative error, tolerance "
                                 "3 * 2^-53 (omega, division, final rounding)",
                                 l[0], l[1])));
}

// 5. Squared norm d/2 at every position. Per pair s^2 + c^2 with entry errors <= eps differs
// from 1 by <= 2*sqrt(2)*eps + 2 * 2^-53 (two products and a sum); over d/2 pairs the sum
// adds (d/2)^2 * 2^-53 of summation error: tol = d/2 * (3 eps + 2^-52) + (d/2)^2 * 2^-53.
void squared_norm_is_half_width(std::vector<check_result>& out) {
  double worst = 0, tol_all = 0;
  std::string detail;
  for (int64_t d : {4, 20, 50, 512}) {
    const auto p = paper(d);
    const int64_t n = 4096;
    const auto t = sinusoidal_table(p, iota_positions(n));
    const double eps = sinusoidal_entry_error_bound(p, n);
    const int64_t pairs = d / 2;  // every width here is even
    const double h = static_cast<double>(pairs);
    const double tol = h * (3 * eps + 2 * u53) + h * h * u53;
    double m = 0;
    for (int64_t i = 0; i < n; ++i) {
      double s = 0;
      for (int64_t c = 0; c < d; ++c)
        s += t[static_cast<size_t>(i * d + c)] * t[static_cast<size_t>(i * d + c)];
      m = std::max(m, std::abs(s - h));
    }
    // Report the error relative to each width's own tolerance, scaled to the largest.
    worst = std::max(worst, m / tol);
    tol_all = std::max(tol_all, tol);
    detail += fmt::format("d={}: max |norm^2 - {}| = {:.2e} (tol {:.2e}); ", d, d / 2, m, tol);
  }
  out.push_back(make("squared_norm_is_half_width",
                     "||PE(pos)||^2 = d/2 for positions 0..4095 (10 at d=20, 25 at d=50)",
                     worst * tol_all, tol_all, detail + "max_error scaled to the largest tol"));
}

// 6. Shift is a rotation independent of pos: PE(pos+k) = R(k) PE(pos) for every pair, with
// R(k) computed once per (pair, k) and applied at every pos. Error: R's entries are within
// eR = (|k| + 1) * 2^-53 (k*omega rounding, omega <= 1, and sin/cos); each output
// a*s + b*c with |(s,c)| = 1 errs by <= sqrt(2) (eR + eps) + 2 * 2^-53; PE(pos+k) adds eps.
// tol = 2 (eR + eps) + eps + 2^-52, eps the entry bound at the largest position.
void shift_is_rotation(std::vector<check_result>& out) {
  double worst = 0, tol_all = 0;
  for (int64_t d : {4, 20, 50, 128}) {
    for (auto lay : {sin_layout::interleaved, sin_layout::halves}) {
      sinusoidal_params p = paper(d);
      p.layout = lay;
      const int64_t n = 600;
      const auto t = sinusoidal_table(p, iota_positions(n));
      const auto w = sinusoidal_frequencies(p);
      for (int64_t k : {1, 3, 17, 100, 299}) {
        const double eps = sinusoidal_entry_error_bound(p, n);
        const double eR = static_cast<double>(k + 1) * u53;
        const double tol = 2 * (eR + eps) + eps + 2 * u53;
        tol_all = std::max(tol_all, tol);
        for (int64_t r = 0; r < d / 2; ++r) {
          const auto R =
              sinusoidal_shift_rotation(w[static_cast<size_t>(r)], static_cast<double>(k));
          const auto cs = sinusoidal_channel(p, r, false), cc = sinusoidal_channel(p, r, true);
          for (int64_t pos = 0; pos + k < n; ++pos) {
            const double s = t[static_cast<size_t>(pos * d + cs)];
            const double c = t[static_cast<size_t>(pos * d + cc)];
            const double s2 = t[static_cast<size_t>((pos + k) * d + cs)];
            const double c2 = t[static_cast<size_t>((pos + k) * d + cc)];
            const double e =
                std::max(std::abs(R[0] * s + R[1] * c - s2), std::abs(R[2] * s + R[3] * c - c2));
            worst = std::max(worst, e / tol);
          }
        }
      }
    }
  }
  out.push_back(make("shift_is_rotation",
                     "PE(pos+k) = R(k) PE(pos) pair by pair, one R(k) for every pos (widths 4, "
                     "20, 50, 128; both layouts; k = 1, 3, 17, 100, 299; pos < 600 - k)",
                     worst * tol_all, tol_all,
                     "tol = 2 (eR + eps) + eps + 2^-52 with eR = (k+1) 2^-53 the error of "
                     "R(k)'s entries and eps the table entry bound; max_error scaled to the "
                     "largest tol"));
}

// 7. PE(i) . PE(j) = sum_r cos((i-j) omega_r): depends only on i - j. Compared with the
// sum of cosines in long double. A d-term dot product of entries with error eps and norm
// sqrt(d/2) errs by <= 2 * sqrt(d/2) * sqrt(d) * eps <= 2 d eps, plus (d/2) * d * 2^-53 of
// summation error (sum of |products| <= d/2, d terms): tol = 2 d eps + d^2 2^-54.
void dot_depends_only_on_offset(std::vector<check_result>& out) {
  double worst = 0, tol_all = 0;
  for (int64_t d : {4, 20, 50, 64}) {
    const auto p = paper(d);
    const int64_t n = 1000;
    const auto t = sinusoidal_table(p, iota_positions(n));
    const double eps = sinusoidal_entry_error_bound(p, n);
    const double tol = 2 * static_cast<double>(d) * eps + static_cast<double>(d * d) * u53 / 2;
    tol_all = std::max(tol_all, tol);
    std::vector<long double> w(static_cast<size_t>(d / 2));
    for (int64_t r = 0; r < d / 2; ++r)
      w[static_cast<size_t>(r)] = detail::sinusoidal_omega_ld(p, r);
    for (int64_t i = 0; i < n; i += 7) {
      for (int64_t j = 0; j < n; j += 13) {
        double dot = 0;
        for (int64_t c = 0; c < d; ++c)
          dot += t[static_cast<size_t>(i * d + c)] * t[static_cast<size_t>(j * d + c)];
        long double ref = 0;
        for (long double wr : w) ref += std::cos(static_cast<long double>(i - j) * wr);
        worst = std::max(worst, std::abs(dot - static_cast<double>(ref)) / tol);
      }
    }
  }
  out.push_back(make("dot_depends_only_on_offset",
                     "PE(i) . PE(j) = sum_r cos((i - j) omega_r) for i, j < 1000 (widths 4, 20, "
                     "50, 64)",
                     worst * tol_all, tol_all,
                     "tol = 2 d eps + d^2 2^-54 (entry errors through a d-term dot product, "
                     "plus summation rounding); max_error scaled to the largest tol"));
}

// 8. The sine-only product depends on i + j: sin(a) sin(b) = (cos(a-b) - cos(a+b)) / 2.
// Counterexample at width 4: pairs (0,1) and (1,2) have the same offset; the full product
// agrees to the dot-product tolerance, the sine-only product differs by ~0.77.
void sine_only_product_depends_on_sum(std::vector<check_result>& out) {
  const auto p = paper(4);
  const auto t = sinusoidal_table(p, std::vector<int64_t>{0, 1, 2});
  auto full = [&](size_t i, size_t j) {
    double s = 0;
    for (size_t c = 0; c < 4; ++c) s += t[i * 4 + c] * t[j * 4 + c];
    return s;
  };
  auto sine_only = [&](size_t i, size_t j) {
    return t[i * 4] * t[j * 4] + t[i * 4 + 2] * t[j * 4 + 2];
  };
  const double full_diff = std::abs(full(0, 1) - full(1, 2));
  const double sine_diff = std::abs(sine_only(0, 1) - sine_only(1, 2));
  // Full products differ only by rounding: 2 * (2 d eps + d^2 2^-54) with d = 4.
  const double tol = 2 * (8 * sinusoidal_entry_error_bound(p, 2) + 16 * u53 / 2);
  out.push_back(make(
      "sine_only_product_depends_on_sum",
      "with sines alone the product changes with i + j: (0,1) and (1,2) share offset 1 but not "
      "the sine-only product; with sin and cos the products agree",
      full_diff, tol,
      fmt::format("width 4: full PE(0).PE(1) = {:.9f}, PE(1).PE(2) = {:.9f} (diff {:.2e}); "
                  "sine-only: {:.9f} vs {:.9f} (diff {:.6f}; (cos((i-j)w) - cos((i+j)w))/2)",
                  full(0, 1), full(1, 2), full_diff, sine_only(0, 1), sine_only(1, 2), sine_diff)));
  out.back().passed = out.back().passed && sine_diff > 0.5;
}

// 9. Distinct positions: over positions 0..1023 every pair of distinct positions is at
// Euclidean distance at least m > 0, where m must exceed the distance's numerical error
// 2 sqrt(d) eps + d 2^-53 by far (required: m > 1000 times it).
void distinct_positions(std::vector<check_result>& out) {
  std::string detail;
  bool ok = true;
  double min_all = std::numeric_limits<double>::infinity();
  for (int64_t d : {4, 20, 50, 128}) {
    const auto p = paper(d);
    const auto st = sinusoidal_distances(p, 1024);
    const double err =
        2 * std::sqrt(static_cast<double>(d)) * sinusoidal_entry_error_bound(p, 1024) +
        static_cast<double>(d) * u53;
    ok = ok && st.min_pairwise > 1000 * err;
    min_all = std::min(min_all, st.min_pairwise);
    detail += fmt::format("d={}: min distance {:.6f} at ({}, {}) (error < {:.1e}); ", d,
                          st.min_pairwise, st.min_i, st.min_j, err);
  }
  out.push_back(make("distinct_positions",
                     "positions 0..1023 give pairwise distinct vectors (widths 4, 20, 50, 128)", 0,
                     0, detail));
  out.back().passed = ok;
}

// 10. Neighbours are close: ||PE(i+1) - PE(i)||^2 = sum_r (2 - 2 cos omega_r)
// = sum_r 4 sin^2(omega_r / 2) for every i, much less than the typical distance sqrt(d).
// The distance from entries with error eps errs by <= 2 sqrt(d) eps + d 2^-53.
void neighbours_close(std::vector<check_result>& out) {
  double worst = 0, tol_all = 0;
  std::string detail;
  for (int64_t d : {4, 20, 50, 128}) {
    const auto p = paper(d);
    const int64_t n = 2048;
    const auto t = sinusoidal_table(p, iota_positions(n));
    const auto w = sinusoidal_frequencies(p);
    long double s2 = 0;
    for (double wr : w) s2 += 4 * std::pow(std::sin(static_cast<long double>(wr) / 2), 2);
    const double expect = static_cast<double>(std::sqrt(s2));
    const double tol = 2 * std::sqrt(static_cast<double>(d)) * sinusoidal_entry_error_bound(p, n) +
                       static_cast<double>(d) * u53;
    tol_all = std::max(tol_all, tol);
    for (int64_t i = 0; i + 1 < n; ++i) {
      double s = 0;
      for (int64_t c = 0; c < d; ++c) {
        const double diff =
            t[static_cast<size_t>((i + 1) * d + c)] - t[static_cast<size_t>(i * d + c)];
        s += diff * diff;
      }
      worst = std::max(worst, std::abs(std::sqrt(s) - expect) / tol);
    }
    detail += fmt::format("d={}: neighbour distance {:.6f} vs sqrt(d) = {:.3f}; ", d, expect,
                          std::sqrt(static_cast<double>(d)));
  }
  out.push_back(make("neighbours_close",
                     "||PE(i+1) - PE(i)|| = sqrt(sum_r 4 sin^2(omega_r/2)) for every i < 2047, "
                     "the same small step everywhere",
                     worst * tol_all, tol_all, detail + "max_error scaled to the largest tol"));
}

// 11. The raw product PE(0) . PE(k) oscillates: it is not monotone in k. The profile must
// match sum_r cos(k omega_r) (tolerance as in check 7), and must rise somewhere by more than
// that tolerance.
void dot_profile_oscillates(std::vector<check_result>& out) {
  const auto p = paper(20);
  const int64_t K = 400;
  const auto prof = sinusoidal_dot_profile(p, K);
  const auto t = sinusoidal_table(p, iota_positions(K + 1));
  const double eps = sinusoidal_entry_error_bound(p, K);
  const double tol = 2 * 20 * eps + 400 * u53 / 2;
  double err = 0;
  int64_t rises = 0, first_rise = -1;
  for (int64_t k = 0; k <= K; ++k) {
    // Independent value: sum_r cosl(k omega_r) in long double.
    long double ref = 0;
    for (int64_t r = 0; r < 10; ++r)
      ref += std::cos(static_cast<long double>(k) * detail::sinusoidal_omega_ld(p, r));
    double dot = 0;
    for (int64_t c = 0; c < 20; ++c)
      dot += t[static_cast<size_t>(c)] * t[static_cast<size_t>(k * 20 + c)];
    err = std::max({err, std::abs(dot - static_cast<double>(ref)),
                    std::abs(prof[static_cast<size_t>(k)] - static_cast<double>(ref))});
    if (k > 0 && prof[static_cast<size_t>(k)] > prof[static_cast<size_t>(k - 1)] + tol) {
      ++rises;
      if (first_rise < 0) first_rise = k;
    }
  }
  out.push_back(
      make("dot_profile_oscillates",
           "PE(0) . PE(k) = sum_r cos(k omega_r) is not monotone in k (width 20, "
           "k = 0..400)",
           err, tol,
           fmt::format("it rises at {} of 400 steps, first at k = {} ({:.4f} -> "
                       "{:.4f}); PE(0).PE(0) = {}",
                       rises, first_rise,
                       first_rise > 0 ? prof[static_cast<size_t>(first_rise - 1)] : 0.0,
                       first_rise > 0 ? prof[static_cast<size_t>(first_rise)] : 0.0, prof[0])));
  out.back().passed = out.back().passed && rises > 0;
}

// 12. The fast table against the long-double reference: |fast - ref| <= 2 * entry bound
// (both obey sinusoidal_entry_error_bound), over large positions where a naive double
// product pos * omega would already lose ~pos * 2^-53.
void table_matches_reference(std::vector<check_result>& out) {
  double worst = 0, tol_all = 0;
  std::vector<int64_t> pos;
  for (int64_t i = 0; i < 64; ++i) pos.push_back(i * 15625 * 61 + (i % 7));  // up to ~6e7
  pos.push_back(int64_t{1} << 40);
  for (int64_t d : {2, 20, 64}) {
    for (double base : {10000.0, 500000.0}) {
      for (auto den : {sin_denominator::width, sin_denominator::half_minus_one}) {
        sinusoidal_params p = paper(d);
        p.base = base;
        p.denominator = den;
        std::vector<double> a(pos.size() * static_cast<size_t>(d)), b(a.size());
        sinusoidal_table(p, pos, std::span<double>(a));
        sinusoidal_table_reference(p, pos, std::span<double>(b));
        const double tol = 2 * sinusoidal_entry_error_bound(p, int64_t{1} << 40);
        tol_all = std::max(tol_all, tol);
        for (size_t i = 0; i < a.size(); ++i) worst = std::max(worst, std::abs(a[i] - b[i]) / tol);
      }
    }
  }
  out.push_back(make("table_matches_reference",
                     "the fast table equals the long-double reference within twice the stated "
                     "entry bound, for positions up to 2^40",
                     worst * tol_all, tol_all,
                     "widths 2, 20, 64; bases 1e4 and 5e5; both denominators; max_error "
                     "scaled to the largest tol"));
}

}  // namespace

std::vector<check_result> sinusoidal_checks() {
  std::vector<check_result> out;
  seed_width4_positions_0_1_2(out);
  seed_width20_50_position5_channels2_3(out);
  seed_q04_same_frequency(out);
  seed_wavelengths_width4(out);
  squared_norm_is_half_width(out);
  shift_is_rotation(out);
  dot_depends_only_on_offset(out);
  sine_only_product_depends_on_sum(out);
  distinct_positions(out);
  neighbours_close(out);
  dot_profile_oscillates(out);
  table_matches_reference(out);
  for (const auto& c : table_cases::check_cases())
    if (c.group == "sinusoidal") out.push_back(table_cases::check_case(c));
  return out;
}

}  // namespace posenc
