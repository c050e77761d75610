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
  checked_bytes("shaw tables", 2 * static_cast<unsigned long long>(clip) + 1,
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

// NOLINTBEGIN(bugprone-macro-parentheses): the argument is a type, spliced into template arguments
// and declarations, where parentheses are not allowed
#define POSENC_SHAW_INSTANTIATE(Real)                                                              \
  template void shaw_scores<Real>(const shaw_problem&, const Real*, const Real*, const Real*,      \
                                  double, Real*);                                                  \
  template void shaw_scores_backward<Real>(const shaw_problem&, const Real*, const Real*,          \
                                           const Real*, double, const Real*, Real*, Real*, Real*); \
  template void shaw_values<Real>(const shaw_problem&, const Real*, const Real*, const Real*,      \
                                  Real*);                                                          \
  template void shaw_values_backward<Real>(const shaw_problem&, const Real*, const Real*,          \
                                           const Real*, const Real*, Real*, Real*, Real*);
// NOLINTEND(bugprone-macro-parentheses)
POSENC_SHAW_INSTANTIATE(float)
POSENC_SHAW_INSTANTIATE(double)
#undef POSENC_SHAW_INSTANTIATE

}  // namespace posenc
