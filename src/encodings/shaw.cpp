// Relative position representations (Shaw, Uszkoreit and Vaswani, 2018, eq. 3-5): the table
// initialisation, the single-head reference scores and values with their backward passes, and
// the property checks.
#include "posenc/encodings/shaw.hpp"

#include <algorithm>
#include <cmath>
#include <string>

#include "posenc/core/error.hpp"
#include "posenc/core/rng.hpp"

namespace posenc {

namespace {

constexpr int64_t max_clip = int64_t{1} << 30;
constexpr int64_t max_dim = int64_t{1} << 20;
constexpr int64_t max_abs_position = int64_t{1} << 62;

void check_clip_dim(int64_t clip, int64_t dim) {
  if (clip < 0 || clip > max_clip) fail("clip must be in [0, 2^30], got {}", clip);
  if (dim < 1 || dim > max_dim) fail("dim must be in [1, 2^20], got {}", dim);
}

void check_positions(std::span<const int64_t> pos, const char* name) {
  for (size_t i = 0; i < pos.size(); ++i)
    if (pos[i] > max_abs_position || pos[i] < -max_abs_position)
      fail("{}[{}] must satisfy |position| <= 2^62, got {}", name, i, pos[i]);
}

void check_scale(double scale) {
  if (!std::isfinite(scale)) fail("scale must be finite, got {}", scale);
}

}  // namespace

shaw_tables shaw_init(int64_t clip, int64_t dim, uint64_t seed, double stddev) {
  check_clip_dim(clip, dim);
  if (!std::isfinite(stddev) || stddev < 0) fail("stddev must be finite and >= 0, got {}", stddev);
  checked_bytes("shaw tables", static_cast<unsigned long long>(2 * clip + 1),
                static_cast<unsigned long long>(dim), 2, sizeof(float));
  const auto n = static_cast<size_t>((2 * clip + 1) * dim);
  shaw_tables t{clip, dim, std::vector<float>(n), std::vector<float>(n)};
  rng r(seed);
  for (auto& w : t.keys) w = static_cast<float>(stddev * r.normal());
  for (auto& w : t.values) w = static_cast<float>(stddev * r.normal());
  return t;
}

void shaw_validate(const shaw_tables& t) {
  check_clip_dim(t.clip, t.dim);
  const auto n = static_cast<size_t>((2 * t.clip + 1) * t.dim);
  if (t.keys.size() != n)
    fail("keys must have shape (2K+1, D) = ({}, {}), got {} values", 2 * t.clip + 1, t.dim,
         t.keys.size());
  if (t.values.size() != n)
    fail("values must have shape (2K+1, D) = ({}, {}), got {} values", 2 * t.clip + 1, t.dim,
         t.values.size());
}

void shaw_validate(const shaw_problem& p) {
  check_clip_dim(p.clip, p.dim);
  check_positions(p.qpos, "qpos");
  check_positions(p.kpos, "kpos");
}

// Shaw et al. 2018, eq. 4: e_ij = x_i W^Q (x_j W^K + a^K_ij)^T / sqrt(d_z); here q = x W^Q and
// k = x W^K are given, and the caller chooses the scale.
template <typename Real>
void shaw_scores(const shaw_problem& p, const Real* q, const Real* k, const Real* a_k, double scale,
                 Real* scores) {
  shaw_validate(p);
  check_scale(scale);
  const size_t T = p.qpos.size(), S = p.kpos.size(), D = static_cast<size_t>(p.dim);
  // q: (T, D), k: (S, D), a_k: (2K+1, D), scores: (T, S); last dims contiguous
  for (size_t i = 0; i < T; ++i) {
    const Real* qi = q + i * D;
    for (size_t j = 0; j < S; ++j) {
      const Real* kj = k + j * D;
      const Real* a = a_k + static_cast<size_t>(shaw_index(p.qpos[i], p.kpos[j], p.clip)) * D;
      double acc = 0;
      for (size_t d = 0; d < D; ++d)
        acc +=
            static_cast<double>(qi[d]) * (static_cast<double>(kj[d]) + static_cast<double>(a[d]));
      scores[i * S + j] = static_cast<Real>(scale * acc);
    }
  }
}

// Forward (shaw_scores): `acc += qi[d] * (kj[d] + a[d]); scores[i, j] = scale * acc`.
template <typename Real>
void shaw_scores_backward(const shaw_problem& p, const Real* q, const Real* k, const Real* a_k,
                          double scale, const Real* grad_scores, Real* grad_q, Real* grad_k,
                          Real* grad_a_k) {
  shaw_validate(p);
  check_scale(scale);
  const size_t T = p.qpos.size(), S = p.kpos.size(), D = static_cast<size_t>(p.dim);
  const size_t R = static_cast<size_t>(2 * p.clip + 1);
  std::vector<double> gq(D), gk(S * D, 0.0), ga(R * D, 0.0);
  for (size_t i = 0; i < T; ++i) {
    std::fill(gq.begin(), gq.end(), 0.0);
    const Real* qi = q + i * D;
    for (size_t j = 0; j < S; ++j) {
      const double g = scale * static_cast<double>(grad_scores[i * S + j]);
      if (g == 0) continue;
      const auto c = static_cast<size_t>(shaw_index(p.qpos[i], p.kpos[j], p.clip));
      const Real* kj = k + j * D;
      const Real* a = a_k + c * D;
      double* gkj = gk.data() + j * D;
      double* gac = ga.data() + c * D;
      for (size_t d = 0; d < D; ++d) {
        gq[d] += g * (static_cast<double>(kj[d]) + static_cast<double>(a[d]));
        const double gqd = g * static_cast<double>(qi[d]);
        gkj[d] += gqd;
        gac[d] += gqd;
      }
    }
    for (size_t d = 0; d < D; ++d)
      grad_q[i * D + d] = static_cast<Real>(static_cast<double>(grad_q[i * D + d]) + gq[d]);
  }
  for (size_t e = 0; e < S * D; ++e)
    grad_k[e] = static_cast<Real>(static_cast<double>(grad_k[e]) + gk[e]);
  for (size_t e = 0; e < R * D; ++e)
    grad_a_k[e] = static_cast<Real>(static_cast<double>(grad_a_k[e]) + ga[e]);
}

// Shaw et al. 2018, eq. 3: z_i = sum_j alpha_ij (x_j W^V + a^V_ij).
template <typename Real>
void shaw_values(const shaw_problem& p, const Real* probs, const Real* v, const Real* a_v,
                 Real* out) {
  shaw_validate(p);
  const size_t T = p.qpos.size(), S = p.kpos.size(), D = static_cast<size_t>(p.dim);
  std::vector<double> acc(D);
  // probs: (T, S), v: (S, D), a_v: (2K+1, D), out: (T, D)
  for (size_t i = 0; i < T; ++i) {
    std::fill(acc.begin(), acc.end(), 0.0);
    for (size_t j = 0; j < S; ++j) {
      const double pij = static_cast<double>(probs[i * S + j]);
      if (pij == 0) continue;
      const Real* vj = v + j * D;
      const Real* a = a_v + static_cast<size_t>(shaw_index(p.qpos[i], p.kpos[j], p.clip)) * D;
      for (size_t d = 0; d < D; ++d)
        acc[d] += pij * (static_cast<double>(vj[d]) + static_cast<double>(a[d]));
    }
    for (size_t d = 0; d < D; ++d) out[i * D + d] = static_cast<Real>(acc[d]);
  }
}

// Forward (shaw_values): `acc[d] += pij * (vj[d] + a[d]); out[i, d] = acc[d]`.
template <typename Real>
void shaw_values_backward(const shaw_problem& p, const Real* probs, const Real* v, const Real* a_v,
                          const Real* grad_out, Real* grad_probs, Real* grad_v, Real* grad_a_v) {
  shaw_validate(p);
  const size_t T = p.qpos.size(), S = p.kpos.size(), D = static_cast<size_t>(p.dim);
  const size_t R = static_cast<size_t>(2 * p.clip + 1);
  std::vector<double> gv(S * D, 0.0), ga(R * D, 0.0);
  for (size_t i = 0; i < T; ++i) {
    const Real* go = grad_out + i * D;
    for (size_t j = 0; j < S; ++j) {
      const auto c = static_cast<size_t>(shaw_index(p.qpos[i], p.kpos[j], p.clip));
      const Real* vj = v + j * D;
      const Real* a = a_v + c * D;
      const double pij = static_cast<double>(probs[i * S + j]);
      double gp = 0;
      double* gvj = gv.data() + j * D;
      double* gac = ga.data() + c * D;
      for (size_t d = 0; d < D; ++d) {
        const double g = static_cast<double>(go[d]);
        gp += g * (static_cast<double>(vj[d]) + static_cast<double>(a[d]));
        gvj[d] += pij * g;
        gac[d] += pij * g;
      }
      grad_probs[i * S + j] = static_cast<Real>(static_cast<double>(grad_probs[i * S + j]) + gp);
    }
  }
  for (size_t e = 0; e < S * D; ++e)
    grad_v[e] = static_cast<Real>(static_cast<double>(grad_v[e]) + gv[e]);
  for (size_t e = 0; e < R * D; ++e)
    grad_a_v[e] = static_cast<Real>(static_cast<double>(grad_a_v[e]) + ga[e]);
}

#define POSENC_SHAW_INSTANTIATE(Real)                                                              \
  template void shaw_scores<Real>(const shaw_problem&, const Real*, const Real*, const Real*,      \
                                  double, Real*);                                                  \
  template void shaw_scores_backward<Real>(const shaw_problem&, const Real*, const Real*,          \
                                           const Real*, double, const Real*, Real*, Real*, Real*); \
  template void shaw_values<Real>(const shaw_problem&, const Real*, const Real*, const Real*,      \
                                  Real*);                                                          \
  template void shaw_values_backward<Real>(const shaw_problem&, const Real*, const Real*,          \
                                           const Real*, const Real*, Real*, Real*, Real*);
POSENC_SHAW_INSTANTIATE(float)
POSENC_SHAW_INSTANTIATE(double)
#undef POSENC_SHAW_INSTANTIATE

// ---------------------------------------------------------------------------------------------
// Property checks.

namespace {

check_result start_check(const char* name, const char* claim) {
  check_result c;
  c.group = "shaw";
  c.name = name;
  c.claim = claim;
  return c;
}

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

}  // namespace

std::vector<check_result> shaw_checks() {
  std::vector<check_result> out;
  const double u = 0x1.0p-53;
  {
    // Shaw et al. eq. 5: offsets are clipped to [-K, K]; a key further than K from the query
    // uses the edge row. Moving such a key even further away (same content) leaves the score
    // bit-identical, while within the window every offset has its own row.
    check_result c = start_check(
        "clipping", "index = clip(kpos - qpos, -K, K) + K; keys beyond K share the edge rows");
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
    c.max_error = bad;
    c.passed = bad == 0;
    c.detail = fmt::format("{} violations", bad);
    out.push_back(c);
  }
  {
    // Scores and outputs depend on positions through kpos - qpos only: bit-identical after a
    // common shift.
    check_result c = start_check("translation_invariance",
                                 "shifting all positions by c leaves scores and outputs "
                                 "bit-identical");
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
    c.max_error = bad;
    c.passed = bad == 0;
    c.detail = fmt::format("{} of 2 outputs differed", bad);
    out.push_back(c);
  }
  {
    // Float and double instantiations share the double accumulation, so on float-valued inputs
    // the float result is the double result rounded once: relative error <= 2^-24.
    check_result c = start_check("float_matches_double",
                                 "float scores/outputs are the double ones rounded once");
    auto cd = make_case(3, 11, 19, 5, 24);
    auto to_f = [](const std::vector<double>& a) {
      std::vector<float> f(a.size());
      for (size_t i = 0; i < a.size(); ++i) f[i] = static_cast<float>(a[i]);
      return f;
    };
    auto back = [](const std::vector<float>& f) { return std::vector<double>(f.begin(), f.end()); };
    const auto qf = to_f(cd.q), kf = to_f(cd.k), akf = to_f(cd.ak), vf = to_f(cd.v),
               avf = to_f(cd.av), pf = to_f(cd.probs);
    const auto qd = back(qf), kd = back(kf), akd = back(akf), vd = back(vf), avd = back(avf),
               pd = back(pf);
    std::vector<float> sf(11 * 19), of(11 * 24);
    std::vector<double> sd(sf.size()), od(of.size());
    const double scale = 1 / std::sqrt(24.0);
    shaw_scores<float>(cd.problem(), qf.data(), kf.data(), akf.data(), scale, sf.data());
    shaw_scores<double>(cd.problem(), qd.data(), kd.data(), akd.data(), scale, sd.data());
    shaw_values<float>(cd.problem(), pf.data(), vf.data(), avf.data(), of.data());
    shaw_values<double>(cd.problem(), pd.data(), vd.data(), avd.data(), od.data());
    double worst = 0;
    for (size_t i = 0; i < sf.size(); ++i)
      if (sd[i] != 0) worst = std::max(worst, std::abs(sf[i] - sd[i]) / std::abs(sd[i]));
    for (size_t i = 0; i < of.size(); ++i)
      if (od[i] != 0) worst = std::max(worst, std::abs(of[i] - od[i]) / std::abs(od[i]));
    c.max_error = worst;
    c.tolerance = 0x1.0p-24;
    c.passed = worst <= c.tolerance;
    c.detail = "relative error; one float rounding of the double result";
    out.push_back(c);
  }
  {
    // Adjoint identities. scores is linear in q (k, a^K fixed) and linear in (k, a^K) (q fixed),
    // so <scores, G> = <q, dq> = <k, dk> + <a^K, da^K>; outputs are linear in p and in
    // (v, a^V): <out, G> = <p, dp> = <v, dv> + <a^V, da^V>. Everything in double: each side is
    // a sum of n <= T S D products accumulated with <= n u relative error each, so the
    // tolerance relative to the sum of |terms| is 4 n u.
    check_result c = start_check("adjoint_identities",
                                 "<f(x), G> = <x, f^T(G)> for scores in q, in (k, aK), and for "
                                 "outputs in p, in (v, aV)");
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
    c.max_error = worst;
    c.tolerance = tol;
    c.passed = worst <= tol;
    c.detail = "relative to sum of |terms|; 4 n u with n = T S D double products";
    out.push_back(c);
  }
  return out;
}

}  // namespace posenc
