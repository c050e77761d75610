// ALiBi slopes and biases (Press, Smith and Lewis, 2022) with the three slope conventions in
// public use, the dense reference bias, its slope gradient, and the property checks.
#include "posenc/encodings/alibi.hpp"

#include <algorithm>
#include <cmath>
#include <string>

#include "posenc/core/error.hpp"
#include "posenc/core/rng.hpp"

namespace posenc {

namespace detail {
// Highway row of tables_simd.cpp (dynamic dispatch).
void alibi_row_simd(double slope, int64_t qpos, const int64_t* kpos, int64_t n, bool causal,
                    bool add, float* out);
}  // namespace detail

namespace {

constexpr int64_t max_heads = int64_t{1} << 20;
constexpr int64_t max_abs_position = int64_t{1} << 62;

// 2^(-b*k/n): the k-th term (k = 1..n) of the geometric sequence of Press et al. 2022,
// Section 3 ("the slopes are a geometric sequence that starts at 2^(-8/n) and uses that number
// as its ratio"), generalised to max_bias b as in ggml and HF MPT. The exponent b*k/n is one
// rounded division (b*k is exact for the b used in practice), exp2 adds <= 1 ulp.
double geo_term(double b, int64_t k, int64_t n) {
  return std::exp2(-(b * static_cast<double>(k)) / static_cast<double>(n));
}

void check_positions(std::span<const int64_t> pos, const char* name) {
  for (size_t i = 0; i < pos.size(); ++i)
    if (pos[i] > max_abs_position || pos[i] < -max_abs_position)
      fail("{}[{}] must satisfy |position| <= 2^62, got {}", name, i, pos[i]);
}

void check_slopes(std::span<const double> slopes) {
  if (slopes.empty()) fail("slopes must hold at least one head, got 0");
  for (size_t h = 0; h < slopes.size(); ++h)
    if (!std::isfinite(slopes[h])) fail("slopes[{}] must be finite, got {}", h, slopes[h]);
}

check_result start_check(const char* name, const char* claim) {
  check_result c;
  c.group = "alibi";
  c.name = name;
  c.claim = claim;
  return c;
}

double distance(int64_t qpos, int64_t kpos, bool causal) {
  return -alibi_bias(1.0, qpos, kpos, causal);  // qpos - kpos, or its absolute value
}

}  // namespace

const char* alibi_convention_name(alibi_convention c) {
  switch (c) {
    case alibi_convention::press:
      return "press";
    case alibi_convention::mpt:
      return "mpt";
    case alibi_convention::geometric:
      return "geometric";
  }
  return "press";
}

alibi_convention alibi_convention_from_name(const std::string& name, const char* arg) {
  if (name == "press") return alibi_convention::press;
  if (name == "mpt") return alibi_convention::mpt;
  if (name == "geometric") return alibi_convention::geometric;
  fail("{} must be one of press, mpt, geometric, got '{}'", arg, name);
}

std::vector<double> alibi_slopes(int64_t heads, double max_bias, alibi_convention c) {
  if (heads < 1 || heads > max_heads) fail("heads must be in [1, 2^20], got {}", heads);
  if (!std::isfinite(max_bias) || !(max_bias > 0))
    fail("max_bias must be finite and > 0, got {}", max_bias);
  std::vector<double> m(static_cast<size_t>(heads));
  int64_t floor_pow2 = 1;
  while (floor_pow2 * 2 <= heads) floor_pow2 *= 2;
  switch (c) {
    case alibi_convention::press: {
      // Press et al. reference get_slopes: geo(P) ++ geo(2P)[0::2][:H-P], P = 2^floor(log2 H).
      // geo(2P)[0::2] are the odd terms k = 1, 3, 5, ... of the finer sequence, which fall
      // between consecutive slopes of geo(P) (the "interleaved completion").
      for (int64_t h = 0; h < heads; ++h)
        m[h] = h < floor_pow2 ? geo_term(max_bias, h + 1, floor_pow2)
                              : geo_term(max_bias, 2 * (h - floor_pow2) + 1, 2 * floor_pow2);
      break;
    }
    case alibi_convention::mpt: {
      // HF MPT build_mpt_alibi_tensor: P = 2^ceil(log2 H); s_k = 2^(-k*b/P), k = 1..P;
      // slopes = concat(s[1::2], s[::2])[:H] (0-based) when P != H.
      const int64_t p = floor_pow2 == heads ? heads : 2 * floor_pow2;
      if (p == heads) {
        for (int64_t h = 0; h < heads; ++h) m[h] = geo_term(max_bias, h + 1, p);
      } else {
        int64_t h = 0;
        for (int64_t idx = 1; idx < p && h < heads; idx += 2)
          m[h++] = geo_term(max_bias, idx + 1, p);
        for (int64_t idx = 0; idx < p && h < heads; idx += 2)
          m[h++] = geo_term(max_bias, idx + 1, p);
      }
      break;
    }
    case alibi_convention::geometric:
      for (int64_t h = 0; h < heads; ++h) m[h] = geo_term(max_bias, h + 1, heads);
      break;
  }
  return m;
}

void alibi_bias_dense(std::span<const double> slopes, std::span<const int64_t> qpos,
                      std::span<const int64_t> kpos, bool causal, float* bias) {
  check_slopes(slopes);
  check_positions(qpos, "qpos");
  check_positions(kpos, "kpos");
  const size_t T = qpos.size(), S = kpos.size();
  // bias: (H, T, S), S contiguous
  for (size_t h = 0; h < slopes.size(); ++h)
    for (size_t i = 0; i < T; ++i) {
      float* row = bias + (h * T + i) * S;
      for (size_t j = 0; j < S; ++j)
        row[j] = static_cast<float>(alibi_bias(slopes[h], qpos[i], kpos[j], causal));
    }
}

// Forward (alibi_bias_dense): row[j] = alibi_bias(slopes[h], qpos[i], kpos[j], causal),
// i.e. bias = -slope * dist, so d bias / d slope = -dist.
void alibi_bias_row(double slope, int64_t qpos, const int64_t* kpos, int64_t n, bool causal,
                    float* out, bool add) {
  if (n > 0) detail::alibi_row_simd(slope, qpos, kpos, n, causal, add, out);
}

void alibi_bias_backward(std::span<const double> slopes, std::span<const int64_t> qpos,
                         std::span<const int64_t> kpos, bool causal, const float* grad_bias,
                         double* grad_slopes) {
  check_slopes(slopes);
  check_positions(qpos, "qpos");
  check_positions(kpos, "kpos");
  const size_t T = qpos.size(), S = kpos.size();
  for (size_t h = 0; h < slopes.size(); ++h) {
    double acc = 0;
    for (size_t i = 0; i < T; ++i) {
      const float* g = grad_bias + (h * T + i) * S;
      for (size_t j = 0; j < S; ++j)
        acc -= static_cast<double>(g[j]) * distance(qpos[i], kpos[j], causal);
    }
    grad_slopes[h] += acc;
  }
}

// ---------------------------------------------------------------------------------------------
// Property checks.

std::vector<check_result> alibi_checks() {
  std::vector<check_result> out;
  const double u = 0x1.0p-53;  // unit roundoff of double

  {
    // Press et al.'s reference code builds the power-of-two slopes as start * ratio^k with
    // start = ratio = 2^(-8/n). Recompute them that way (repeated multiplication, an
    // independent path) and compare with alibi_slopes. start = exp2(-8/H) carries <= 1 ulp
    // (2u relative); raised to the power h+1 <= 64 that is <= 128u; the h <= 63 rounded
    // products add <= 63u; alibi_slopes' own exp2 <= 2u: 193u in all, tolerance 200u.
    check_result c =
        start_check("power_of_two_matches_paper",
                    "for H = 1..64 a power of two, slopes are 2^(-8/H)^(h+1) (Press et al. 2022)");
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
    c.max_error = worst;
    c.tolerance = 200 * u;
    c.passed = worst <= c.tolerance;
    c.detail = "relative error; (2(h+1) + h + 2)u for h <= 63, see source";
    out.push_back(c);
  }
  {
    // ggml writes the Press completion as m0^(h+1) for h < P and m1^(2(h-P)+1) after, with
    // m0 = 2^(-b/P), m1 = 2^(-(b/2)/P). Each base carries <= 2u relative error (exp2 within
    // 1 ulp of an exact exponent: b/P is exact for P a power of two), so base^k carries <= 2ku;
    // here k <= 73 (H <= 100: k = 2*36+1), pow adds u and alibi_slopes 2u: 149u, tolerance 150u.
    check_result c =
        start_check("press_completion_matches_ggml_form",
                    "for H = 1..100 and max_bias 8 and 4, Press slopes equal ggml's m0/m1 powers");
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
    c.max_error = worst;
    c.tolerance = 150 * u;
    c.passed = worst <= c.tolerance;
    c.detail = "relative error; pow(x, k) of a base with 1 ulp error carries k ulp (k <= 73)";
    out.push_back(c);
  }
  {
    // The MPT rule (P = 2^ceil(log2 H), concat(s[1::2], s[::2])) is the Press rule written
    // differently: with P' = 2P, s[1::2] holds the even terms 2^(-b*2k/(2P)) = geo(P) and s[::2]
    // the odd terms of geo(2P), exactly Press's completion. Both evaluate exp2(-(b*k)/n) with
    // (2k, 2n) in place of (k, n), and scaling both by 2 is exact, so they are bit-identical.
    // The geometric rule agrees only when H is a power of two.
    check_result c = start_check("conventions_agree_where_expected",
                                 "mpt slopes equal press bit for bit for every H; geometric "
                                 "equals them exactly when H is a power of two");
    int bad = 0;
    for (int64_t H = 1; H <= 256; ++H) {
      const bool pow2 = (H & (H - 1)) == 0;
      const auto a = alibi_slopes(H, 8, alibi_convention::press);
      const auto b = alibi_slopes(H, 8, alibi_convention::mpt);
      const auto g = alibi_slopes(H, 8, alibi_convention::geometric);
      if (a != b || pow2 != (a == g)) ++bad;
    }
    c.max_error = bad;
    c.tolerance = 0;
    c.passed = bad == 0;
    c.detail = fmt::format("{} head counts violated the claim", bad);
    out.push_back(c);
  }
  {
    // A slope outside (0, 1) would reward distance; two equal slopes would make two heads
    // redundant. Every convention must avoid both for any head count.
    check_result c =
        start_check("slopes_in_unit_interval_and_distinct",
                    "for H = 1..256, every convention's slopes lie in (0, 1) and are distinct");
    int bad = 0;
    for (auto conv : {alibi_convention::press, alibi_convention::mpt, alibi_convention::geometric})
      for (int64_t H = 1; H <= 256; ++H) {
        auto m = alibi_slopes(H, 8, conv);
        for (double s : m) bad += !(s > 0 && s < 1);
        std::sort(m.begin(), m.end());
        for (size_t i = 1; i < m.size(); ++i) bad += m[i] == m[i - 1];
      }
    c.max_error = bad;
    c.passed = bad == 0;
    c.detail = fmt::format("{} violations", bad);
    out.push_back(c);
  }
  {
    // The bias depends on qpos - kpos only: shifting every position by the same c leaves it
    // bit-identical (the integer difference is exact; the float product is then the same).
    check_result c =
        start_check("translation_invariance",
                    "shifting all query and key positions by c leaves every bias bit-identical");
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
    c.max_error = bad;
    c.passed = bad == 0;
    c.detail = fmt::format("{} of 4000 pairs differed", bad);
    out.push_back(c);
  }
  {
    // <bias(s), G> = <s, bias^T(G)>: the bias is linear in the slopes. The left side uses the
    // float-rounded bias: each term carries <= 2^-24 relative error, so the tolerance is
    // 2^-24 * sum |bias * G| plus double accumulation error (n u sum), normalised by sum |.|.
    check_result c =
        start_check("slope_gradient_adjoint",
                    "alibi_bias_backward is the adjoint of alibi_bias_dense in the slopes");
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
    c.max_error = worst;
    c.tolerance = 0x1.0p-24 + 2 * static_cast<double>(H * T * S) * u;
    c.passed = worst <= c.tolerance;
    c.detail = "error relative to sum|bias*G|; float rounding of bias 2^-24 + accumulation";
    out.push_back(c);
  }
  return out;
}

}  // namespace posenc
