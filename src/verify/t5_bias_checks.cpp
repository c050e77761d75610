// T5 bias: the property checks of group "t5" (t5_checks()). Each check is one function
// (two where they share their data), called in order by t5_checks(); after them come the results
// of the case table's small list (check_cases() of include/posenc/verify/t5_cases.hpp: the
// vectorised rows bit for bit against the scalar bucket and the dense reference, and the table
// gradient against finite differences). `posenc check`, the report and the tests all read this
// one list.
#include "posenc/encodings/t5_bias.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

#include "posenc/core/error.hpp"
#include "posenc/core/rng.hpp"
#include "posenc/verify/checks.hpp"
#include "posenc/verify/t5_cases.hpp"

namespace posenc {

namespace {

// Parameter sets: the T5 defaults in both modes, and awkward ones (max_distance not a
// multiple of max_exact, tiny tables, large tables).
const t5_params sets[] = {{32, 128, true}, {32, 128, false}, {64, 256, true}, {16, 100, false},
                          {10, 20, true},  {2, 5, false},    {4, 3, true},    {320, 1000, true}};

void exact_region(std::vector<check_result>& out) {
  // Offsets below max_exact each get their own bucket: bucket = base + n exactly.
  int bad = 0;
  for (const auto& p : sets) {
    const int64_t np = p.bidirectional ? p.num_buckets / 2 : p.num_buckets, E = np / 2;
    for (int64_t n = 0; n < E; ++n) {
      bad += t5_bucket(-n, p) != n;
      if (p.bidirectional) bad += t5_bucket(n, p) != (n == 0 ? 0 : np + n);
    }
  }
  out.push_back(measured_check("t5", "exact_region",
                               "offsets with n < max_exact map to bucket base + n", bad, 0,
                               fmt::format("{} mismatches", bad)));
}

void monotone_and_saturating(std::vector<check_result>& out) {
  // Within one sign the bucket never decreases as the distance grows, and it saturates at the
  // last bucket of that sign from max_distance on (log(n/E)/log(M/E) >= 1 there).
  int bad = 0;
  for (const auto& p : sets) {
    const int64_t np = p.bidirectional ? p.num_buckets / 2 : p.num_buckets;
    for (int sign : {-1, 1}) {
      if (sign == 1 && !p.bidirectional) continue;
      const int64_t base = sign == 1 ? np : 0;
      int64_t prev = t5_bucket(sign, p);
      for (int64_t n = 2; n <= 4 * p.max_distance; ++n) {
        const int64_t b = t5_bucket(sign * n, p);
        bad += b < prev || b < base || b > base + np - 1;
        if (n >= p.max_distance) bad += b != base + np - 1;
        prev = b;
      }
    }
    bad += t5_bucket(INT64_MIN, p) != np - 1;
    if (p.bidirectional) bad += t5_bucket(INT64_MAX, p) != p.num_buckets - 1;
  }
  out.push_back(measured_check(
      "t5", "monotone_and_saturating",
      "bucket is non-decreasing in |offset| per sign and equals the sign's last bucket for "
      "|offset| >= max_distance",
      bad, 0, fmt::format("{} violations", bad)));
}

void sign_structure(std::vector<check_result>& out) {
  // Sign structure. Bidirectional: positive offsets use the upper half,
  // bucket(+n) = bucket(-n) + N/2 for n >= 1, bucket(0) = 0. Causal: future keys map to 0,
  // and causal buckets with N equal the past half of bidirectional buckets with 2N.
  int bad = 0;
  for (const auto& p : sets) {
    for (int64_t n = 1; n <= 3 * p.max_distance; ++n) {
      if (p.bidirectional) {
        bad += t5_bucket(n, p) != t5_bucket(-n, p) + p.num_buckets / 2;
      } else {
        bad += t5_bucket(n, p) != 0;
        bad += t5_bucket(-n, p) != t5_bucket(-n, true, 2 * p.num_buckets, p.max_distance);
      }
    }
    bad += t5_bucket(0, p) != 0;
  }
  out.push_back(measured_check(
      "t5", "sign_structure",
      "bidirectional bucket(+n) = bucket(-n) + N/2; causal maps future keys to 0 and equals "
      "bidirectional(2N) on the past",
      bad, 0, fmt::format("{} violations", bad)));
}

void float32_matches_exact_math_off_boundaries(std::vector<check_result>& out) {
  // The float32 evaluation agrees with the exact real-number bucket E + floor(log(n/E) /
  // log(M/E) * (N'-E)) (long double) everywhere except where the exact value lies within
  // 1e-5 of an integer, the only place float32 rounding can move it across a boundary.
  int bad = 0, near = 0;
  for (const auto& p : sets) {
    const int64_t np = p.bidirectional ? p.num_buckets / 2 : p.num_buckets, E = np / 2;
    for (int64_t n = E; n <= 2 * p.max_distance; ++n) {
      const long double v = std::log(static_cast<long double>(n) / E) /
                            std::log(static_cast<long double>(p.max_distance) / E) * (np - E);
      const int64_t exact = std::min<int64_t>(E + static_cast<int64_t>(std::floor(v)), np - 1);
      if (std::abs(v - std::round(v)) < 1e-5L) {
        ++near;
        continue;
      }
      bad += t5_bucket(-n, p) != exact;
    }
  }
  out.push_back(measured_check(
      "t5", "float32_matches_exact_math_off_boundaries",
      "float32 buckets equal exact-math buckets except within 1e-5 of a bucket boundary", bad, 0,
      fmt::format("{} mismatches away from boundaries; {} offsets skipped as within 1e-5", bad,
                  near)));
}

void translation_invariance(std::vector<check_result>& out) {
  // The bias depends on kpos - qpos only: a common shift leaves the dense bias bit-identical.
  const t5_bias_table t = t5_init({32, 128, true}, 3, 1, 1.0);
  rng r(2);
  std::vector<int64_t> q(20), k(23), q2(20), k2(23);
  for (auto& x : q) x = static_cast<int64_t>(r.below(400));
  for (auto& x : k) x = static_cast<int64_t>(r.below(400));
  const int64_t shift = int64_t{1} << 40;
  for (size_t i = 0; i < q.size(); ++i) q2[i] = q[i] + shift;
  for (size_t i = 0; i < k.size(); ++i) k2[i] = k[i] + shift;
  std::vector<float> a(3 * 20 * 23), b(a.size());
  t5_bias_dense(t, q, k, a.data());
  t5_bias_dense(t, q2, k2, b.data());
  int bad = 0;
  for (size_t i = 0; i < a.size(); ++i) bad += a[i] != b[i];
  out.push_back(measured_check("t5", "translation_invariance",
                               "shifting all positions by c leaves the dense bias bit-identical",
                               bad, 0, fmt::format("{} entries differed", bad)));
}

void table_gradient_adjoint(std::vector<check_result>& out) {
  // <dense(W), G> = <W, dense^T(G)>: the bias is a linear gather from the table. The left
  // side is exact products of float values summed in double (n u relative each); the right
  // side rounds each bucket's double sum to float once (2^-24 relative, and
  // sum |W_b| |gradW_b| <= sum |bias * G|). Tolerance, relative to sum |bias * G|:
  // 2^-24 + 2 n u with n = H T S terms.
  double worst = 0, tol = 0;
  for (bool bidi : {true, false}) {
    const int64_t H = 4, T = 17, S = 29;
    const t5_bias_table t = t5_init({16, 40, bidi}, H, 7, 1.0);
    rng r(3);
    std::vector<int64_t> q(T), k(S);
    for (auto& x : q) x = static_cast<int64_t>(r.below(120));
    for (auto& x : k) x = static_cast<int64_t>(r.below(120));
    std::vector<float> bias(H * T * S), g(H * T * S), gt(t.weights.size(), 0.f);
    for (auto& x : g) x = static_cast<float>(r.normal());
    t5_bias_dense(t, q, k, bias.data());
    t5_bias_backward(t, q, k, g.data(), gt.data());
    double lhs = 0, rhs = 0, mag = 0;
    for (size_t e = 0; e < bias.size(); ++e) {
      lhs += static_cast<double>(bias[e]) * g[e];
      mag += std::abs(static_cast<double>(bias[e]) * g[e]);
    }
    for (size_t e = 0; e < gt.size(); ++e) rhs += static_cast<double>(t.weights[e]) * gt[e];
    worst = std::max(worst, std::abs(lhs - rhs) / mag);
    tol = 0x1.0p-24 + 2.0 * static_cast<double>(H * T * S) * 0x1.0p-53;
  }
  out.push_back(
      measured_check("t5", "table_gradient_adjoint",
                     "t5_bias_backward is the adjoint of t5_bias_dense in the table", worst, tol,
                     "relative to sum|bias*G|; 2^-24 (float rounding of each bucket sum) + 2 n u"));
}

}  // namespace

std::vector<check_result> t5_checks() {
  std::vector<check_result> out;
  exact_region(out);
  monotone_and_saturating(out);
  sign_structure(out);
  float32_matches_exact_math_off_boundaries(out);
  translation_invariance(out);
  table_gradient_adjoint(out);
  for (const auto& c : t5_cases::check_cases())
    for (auto& r : t5_cases::run_case(c)) out.push_back(std::move(r));
  return out;
}

}  // namespace posenc
