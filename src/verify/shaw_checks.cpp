// Shaw relative positions: the property checks of group "shaw" (shaw_checks()). Each check is one
// function (two where they share their data), called in order by shaw_checks(); after them come
// the results of the case table's small list (check_cases() of
// include/posenc/verify/shaw_cases.hpp: float32 against float64, and the backwards against
// finite differences). `posenc check`, the report and the tests all read this one list.
#include "posenc/encodings/shaw.hpp"

#include <algorithm>
#include <cmath>
#include <string>

#include "posenc/core/error.hpp"
#include "posenc/core/rng.hpp"
#include "posenc/verify/checks.hpp"
#include "posenc/verify/shaw_cases.hpp"

namespace posenc {

namespace {

constexpr double u = 0x1.0p-53;

// A random single-head problem in double: positions with repeats and gaps, K small enough
// that both clipped and unclipped pairs occur.
struct case_data {
  std::vector<int64_t> qpos, kpos;
  int64_t clip, dim;
  std::vector<double> q, k, v, ak, av, probs;
  shaw_problem problem() const { return {qpos, kpos, clip, dim}; }
};

case_data make_case(uint64_t seed, int64_t T, int64_t S, int64_t K, int64_t D) {
  rng r(seed);
  case_data c{std::vector<int64_t>(T), std::vector<int64_t>(S), K, D, {}, {}, {}, {}, {}, {}};
  for (auto& x : c.qpos) x = static_cast<int64_t>(r.below(static_cast<uint64_t>(4 * K + 6)));
  for (auto& x : c.kpos) x = static_cast<int64_t>(r.below(static_cast<uint64_t>(4 * K + 6)));
  auto fill = [&](std::vector<double>& a, size_t n) {
    a.resize(n);
    for (auto& x : a) x = r.normal();
  };
  fill(c.q, T * D);
  fill(c.k, S * D);
  fill(c.v, S * D);
  fill(c.ak, (2 * K + 1) * D);
  fill(c.av, (2 * K + 1) * D);
  fill(c.probs, T * S);
  return c;
}

double dot(const std::vector<double>& a, const std::vector<double>& b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

void clipping(std::vector<check_result>& out) {
  // Shaw et al. eq. 5: offsets are clipped to [-K, K]; a key further than K from the query
  // uses the edge row. Moving such a key even further away (same content) leaves the score
  // bit-identical, while within the window every offset has its own row.
  int bad = 0;
  for (int64_t K : {0, 1, 3, 16})
    for (int64_t r = -3 * K - 5; r <= 3 * K + 5; ++r) {
      const int64_t want = std::clamp<int64_t>(r, -K, K) + K;
      bad += shaw_index(100, 100 + r, K) != want;
      bad += shaw_index(-7 - r, -7, K) != want;
    }
  auto cd = make_case(1, 1, 2, 3, 8);
  std::vector<int64_t> q{10}, k1{4, 17}, k2{-100, 1000};  // offsets -6, 7 -> -200.., 990
  std::vector<double> s1(2), s2(2);
  shaw_scores<double>({q, k1, 3, 8}, cd.q.data(), cd.k.data(), cd.ak.data(), 0.5, s1.data());
  shaw_scores<double>({q, k2, 3, 8}, cd.q.data(), cd.k.data(), cd.ak.data(), 0.5, s2.data());
  bad += s1 != s2;
  out.push_back(measured_check(
      "shaw", "clipping", "index = clip(kpos - qpos, -K, K) + K; keys beyond K share the edge rows",
      bad, 0, fmt::format("{} violations", bad)));
}

void translation_invariance(std::vector<check_result>& out) {
  // Scores and outputs depend on positions through kpos - qpos only: bit-identical after a
  // common shift.
  auto cd = make_case(2, 9, 13, 4, 7);
  auto shifted = cd;
  for (auto& x : shifted.qpos) x += int64_t{1} << 45;
  for (auto& x : shifted.kpos) x += int64_t{1} << 45;
  std::vector<double> a(9 * 13), b(a.size()), oa(9 * 7), ob(oa.size());
  shaw_scores<double>(cd.problem(), cd.q.data(), cd.k.data(), cd.ak.data(), 0.3, a.data());
  shaw_scores<double>(shifted.problem(), cd.q.data(), cd.k.data(), cd.ak.data(), 0.3, b.data());
  shaw_values<double>(cd.problem(), cd.probs.data(), cd.v.data(), cd.av.data(), oa.data());
  shaw_values<double>(shifted.problem(), cd.probs.data(), cd.v.data(), cd.av.data(), ob.data());
  const int bad = (a != b) + (oa != ob);
  out.push_back(measured_check("shaw", "translation_invariance",
                               "shifting all positions by c leaves scores and outputs "
                               "bit-identical",
                               bad, 0, fmt::format("{} of 2 outputs differed", bad)));
}

void adjoint_identities(std::vector<check_result>& out) {
  // Adjoint identities. scores is linear in q (k, a^K fixed) and linear in (k, a^K) (q fixed),
  // so <scores, G> = <q, dq> = <k, dk> + <a^K, da^K>; outputs are linear in p and in
  // (v, a^V): <out, G> = <p, dp> = <v, dv> + <a^V, da^V>. Everything in double: each side is
  // a sum of n <= T S D products accumulated with <= n u relative error each, so the
  // tolerance relative to the sum of |terms| is 4 n u.
  double worst = 0, tol = 0;
  for (auto [T, S, K, D] : {std::tuple<int64_t, int64_t, int64_t, int64_t>{5, 7, 2, 3},
                            {17, 13, 0, 8},
                            {3, 33, 6, 5}}) {
    auto cd = make_case(static_cast<uint64_t>(T * 100 + S), T, S, K, D);
    const auto pr = cd.problem();
    rng r(9);
    std::vector<double> gs(T * S), go(T * D), sc(T * S), o(T * D);
    for (auto& x : gs) x = r.normal();
    for (auto& x : go) x = r.normal();
    std::vector<double> dq(T * D, 0.0), dk(S * D, 0.0), dak((2 * K + 1) * D, 0.0);
    std::vector<double> dp(T * S, 0.0), dv(S * D, 0.0), dav((2 * K + 1) * D, 0.0);
    const double scale = 0.7;
    shaw_scores<double>(pr, cd.q.data(), cd.k.data(), cd.ak.data(), scale, sc.data());
    shaw_scores_backward<double>(pr, cd.q.data(), cd.k.data(), cd.ak.data(), scale, gs.data(),
                                 dq.data(), dk.data(), dak.data());
    shaw_values<double>(pr, cd.probs.data(), cd.v.data(), cd.av.data(), o.data());
    shaw_values_backward<double>(pr, cd.probs.data(), cd.v.data(), cd.av.data(), go.data(),
                                 dp.data(), dv.data(), dav.data());
    // Magnitude: sum over (i, j, d) of |scale q g (k + a)| bounds every side's terms.
    double mag_s = 0, mag_o = 0;
    for (int64_t i = 0; i < T; ++i)
      for (int64_t j = 0; j < S; ++j) {
        const auto cc = static_cast<size_t>(shaw_index(cd.qpos[i], cd.kpos[j], K));
        for (int64_t d = 0; d < D; ++d) {
          const double kk = std::abs(cd.k[j * D + d]) + std::abs(cd.ak[cc * D + d]);
          const double vv = std::abs(cd.v[j * D + d]) + std::abs(cd.av[cc * D + d]);
          mag_s += std::abs(scale * cd.q[i * D + d] * gs[i * S + j]) * kk;
          mag_o += std::abs(cd.probs[i * S + j] * go[i * D + d]) * vv;
        }
      }
    const double ls = dot(sc, gs), lo = dot(o, go);
    worst = std::max({worst, std::abs(ls - dot(cd.q, dq)) / mag_s,
                      std::abs(ls - dot(cd.k, dk) - dot(cd.ak, dak)) / mag_s,
                      std::abs(lo - dot(cd.probs, dp)) / mag_o,
                      std::abs(lo - dot(cd.v, dv) - dot(cd.av, dav)) / mag_o});
    tol = std::max(tol, 4.0 * static_cast<double>(T * S * D) * u);
  }
  out.push_back(measured_check("shaw", "adjoint_identities",
                               "<f(x), G> = <x, f^T(G)> for scores in q, in (k, aK), and for "
                               "outputs in p, in (v, aV)",
                               worst, tol,
                               "relative to sum of |terms|; 4 n u with n = T S D double products"));
}

}  // namespace

std::vector<check_result> shaw_checks() {
  std::vector<check_result> out;
  clipping(out);
  translation_invariance(out);
  adjoint_identities(out);
  for (const auto& c : shaw_cases::check_cases())
    for (auto& r : shaw_cases::run_case(c)) out.push_back(std::move(r));
  return out;
}

}  // namespace posenc
