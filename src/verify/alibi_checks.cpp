// ALiBi: the property checks of group "alibi" (alibi_checks()). Each check is one function
// (two where they share their data), called in order by alibi_checks(); `posenc check`,
// the report and the tests all read this one list. After the properties come the results of the
// table kernels' small list (check_cases() of include/posenc/verify/table_cases.hpp, group
// "alibi"): alibi_bias_row against the scalar formula, bit for bit.
#include "posenc/encodings/alibi.hpp"

#include <algorithm>
#include <cmath>
#include <string>

#include "posenc/core/error.hpp"
#include "posenc/core/rng.hpp"
#include "posenc/verify/checks.hpp"
#include "posenc/verify/table_cases.hpp"

namespace posenc {

namespace {

constexpr double u = 0x1.0p-53;  // unit roundoff of double

void power_of_two_matches_paper(std::vector<check_result>& out) {
  // Press et al.'s reference code builds the power-of-two slopes as start * ratio^k with
  // start = ratio = 2^(-8/n). Recompute them that way (repeated multiplication, an
  // independent path) and compare with alibi_slopes. start = exp2(-8/H) carries <= 1 ulp
  // (2u relative); raised to the power h+1 <= 64 that is <= 128u; the h <= 63 rounded
  // products add <= 63u; alibi_slopes' own exp2 <= 2u: 193u in all, tolerance 200u.
  double worst = 0;
  for (int64_t H = 1; H <= 64; H *= 2) {
    const auto m = alibi_slopes(H);
    const double start = std::exp2(-8.0 / static_cast<double>(H));
    double s = start;
    for (int64_t h = 0; h < H; ++h) {
      worst = std::max(worst, std::abs(m[h] - s) / s);
      s *= start;
    }
  }
  out.push_back(
      measured_check("alibi", "power_of_two_matches_paper",
                     "for H = 1..64 a power of two, slopes are 2^(-8/H)^(h+1) (Press et al. 2022)",
                     worst, 200 * u, "relative error; (2(h+1) + h + 2)u for h <= 63, see source"));
}

void press_completion_matches_ggml_form(std::vector<check_result>& out) {
  // ggml writes the Press completion as m0^(h+1) for h < P and m1^(2(h-P)+1) after, with
  // m0 = 2^(-b/P), m1 = 2^(-(b/2)/P). Each base carries <= 2u relative error (exp2 within
  // 1 ulp of an exact exponent: b/P is exact for P a power of two), so base^k carries <= 2ku;
  // here k <= 73 (H <= 100: k = 2*36+1), pow adds u and alibi_slopes 2u: 149u, tolerance 150u.
  double worst = 0;
  for (double b : {8.0, 4.0})
    for (int64_t H = 1; H <= 100; ++H) {
      const auto m = alibi_slopes(H, b);
      int64_t P = 1;
      while (P * 2 <= H) P *= 2;
      const double m0 = std::exp2(-b / static_cast<double>(P));
      const double m1 = std::exp2(-(b / 2) / static_cast<double>(P));
      for (int64_t h = 0; h < H; ++h) {
        const double ref = h < P ? std::pow(m0, static_cast<double>(h + 1))
                                 : std::pow(m1, static_cast<double>(2 * (h - P) + 1));
        worst = std::max(worst, std::abs(m[h] - ref) / ref);
      }
    }
  out.push_back(measured_check(
      "alibi", "press_completion_matches_ggml_form",
      "for H = 1..100 and max_bias 8 and 4, Press slopes equal ggml's m0/m1 powers", worst, 150 * u,
      "relative error; pow(x, k) of a base with 1 ulp error carries k ulp (k <= 73)"));
}

void conventions_agree_where_expected(std::vector<check_result>& out) {
  // The MPT rule (P = 2^ceil(log2 H), concat(s[1::2], s[::2])) is the Press rule written
  // differently: with P' = 2P, s[1::2] holds the even terms 2^(-b*2k/(2P)) = geo(P) and s[::2]
  // the odd terms of geo(2P), exactly Press's completion. Both evaluate exp2(-(b*k)/n) with
  // (2k, 2n) in place of (k, n), and scaling both by 2 is exact, so they are bit-identical.
  // The geometric rule agrees only when H is a power of two.
  int bad = 0;
  for (int64_t H = 1; H <= 256; ++H) {
    const bool pow2 = (H & (H - 1)) == 0;
    const auto a = alibi_slopes(H, 8, alibi_convention::press);
    const auto b = alibi_slopes(H, 8, alibi_convention::mpt);
    const auto g = alibi_slopes(H, 8, alibi_convention::geometric);
    if (a != b || pow2 != (a == g)) ++bad;
  }
  out.push_back(measured_check("alibi", "conventions_agree_where_expected",
                               "mpt slopes equal press bit for bit for every H; geometric "
                               "equals them exactly when H is a power of two",
                               bad, 0, fmt::format("{} head counts violated the claim", bad)));
}

void slopes_in_unit_interval_and_distinct(std::vector<check_result>& out) {
  // A slope outside (0, 1) would reward distance; two equal slopes would make two heads
  // redundant. Every convention must avoid both for any head count.
  int bad = 0;
  for (auto conv : {alibi_convention::press, alibi_convention::mpt, alibi_convention::geometric})
    for (int64_t H = 1; H <= 256; ++H) {
      auto m = alibi_slopes(H, 8, conv);
      for (double s : m) bad += !(s > 0 && s < 1);
      std::sort(m.begin(), m.end());
      for (size_t i = 1; i < m.size(); ++i) bad += m[i] == m[i - 1];
    }
  out.push_back(
      measured_check("alibi", "slopes_in_unit_interval_and_distinct",
                     "for H = 1..256, every convention's slopes lie in (0, 1) and are distinct",
                     bad, 0, fmt::format("{} violations", bad)));
}

void translation_invariance(std::vector<check_result>& out) {
  // The bias depends on qpos - kpos only: shifting every position by the same c leaves it
  // bit-identical (the integer difference is exact; the float product is then the same).
  rng r(11);
  const auto m = alibi_slopes(12);
  int bad = 0;
  for (int trial = 0; trial < 2000; ++trial) {
    const int64_t q = static_cast<int64_t>(r.below(1 << 20)),
                  k = static_cast<int64_t>(r.below(1 << 20));
    const int64_t shift = static_cast<int64_t>(r.below(uint64_t{1} << 40)) - (int64_t{1} << 39);
    const double s = m[trial % 12];
    for (bool causal : {false, true})
      bad += alibi_bias(s, q, k, causal) != alibi_bias(s, q + shift, k + shift, causal);
  }
  out.push_back(
      measured_check("alibi", "translation_invariance",
                     "shifting all query and key positions by c leaves every bias bit-identical",
                     bad, 0, fmt::format("{} of 4000 pairs differed", bad)));
}

void slope_gradient_adjoint(std::vector<check_result>& out) {
  // <bias(s), G> = <s, bias^T(G)>: the bias is linear in the slopes. The left side uses the
  // float-rounded bias: each term carries <= 2^-24 relative error, so the tolerance is
  // 2^-24 * sum |bias * G| plus double accumulation error (n u sum), normalised by sum |.|.
  const int64_t H = 12, T = 7, S = 9;
  const auto m = alibi_slopes(H);
  std::vector<int64_t> qp(T), kp(S);
  rng r(5);
  for (auto& x : qp) x = static_cast<int64_t>(r.below(50));
  for (auto& x : kp) x = static_cast<int64_t>(r.below(50));
  std::vector<float> bias(H * T * S), g(H * T * S);
  for (auto& x : g) x = static_cast<float>(r.normal());
  double worst = 0;
  for (bool causal : {false, true}) {
    alibi_bias_dense(m, qp, kp, causal, bias.data());
    std::vector<double> gs(H, 0.0);
    alibi_bias_backward(m, qp, kp, causal, g.data(), gs.data());
    double lhs = 0, mag = 0, rhs = 0;
    for (size_t i = 0; i < bias.size(); ++i) {
      lhs += static_cast<double>(bias[i]) * g[i];
      mag += std::abs(static_cast<double>(bias[i]) * g[i]);
    }
    for (int64_t h = 0; h < H; ++h) rhs += m[h] * gs[h];
    worst = std::max(worst, std::abs(lhs - rhs) / mag);
  }
  out.push_back(
      measured_check("alibi", "slope_gradient_adjoint",
                     "alibi_bias_backward is the adjoint of alibi_bias_dense in the slopes", worst,
                     0x1.0p-24 + 2 * static_cast<double>(H * T * S) * u,
                     "error relative to sum|bias*G|; float rounding of bias 2^-24 + accumulation"));
}

}  // namespace

std::vector<check_result> alibi_checks() {
  std::vector<check_result> out;
  power_of_two_matches_paper(out);
  press_completion_matches_ggml_form(out);
  conventions_agree_where_expected(out);
  slopes_in_unit_interval_and_distinct(out);
  translation_invariance(out);
  slope_gradient_adjoint(out);
  for (const auto& c : table_cases::check_cases())
    if (c.group == "alibi") out.push_back(table_cases::check_case(c));
  return out;
}

}  // namespace posenc
