// FIRE (Li et al. 2023): the engine's score bias, a per-head MLP over the log-transformed
// distance normalised by the query position (progressive interpolation with a learned
// threshold), with the gradient of every parameter; and the model's hook: one (H, 3m + 3)
// parameter tensor per layer.
//   x      = psi(d) / psi(M),  d = |qpos - kpos|,  M = max(L, qpos),  psi(y) = log(c y + 1)
//   bias_h = w2 . relu(w1 x + b1) + b2,  c = softplus(a_c),  L = softplus(a_L)
#include <algorithm>
#include <cmath>
#include <cstdlib>

#include <utility>
#include <vector>

#include "hooks.hpp"
#include "posenc/core/error.hpp"

namespace posenc::detail {
namespace {

// Hook 2b. Parameters of head h at params + h (3m + 3): w1 [0, m), b1 [m, 2m), w2 [2m, 3m),
// b2 3m, a_c 3m + 1, a_L 3m + 2; held in double for the call. psi(d) = log(c d + 1) comes from a
// per-call table over the visible distances (where Hq (dmax + 1) <= 2^21), psi(M) once per row.
// The float64 row computes what value() computes, operation for operation, and rounds once (the
// same bits): the MLP runs over 64 keys at a time, hidden unit by hidden unit, so that the loop
// over keys vectorises while each key's sum keeps value()'s order (b2, then units 0 .. m-1).
// The float32 row uses that the MLP is piecewise linear in x (Li et al. 2023's f is one relu
// layer): between two consecutive kinks x_u = -b1_u / w1_u (sorted, per head, once per call) the
// set of active units is fixed and bias = alpha_s + beta_s x, alpha_s = b2 + sum_active w2 b1,
// beta_s = sum_active w2 w1. Within a row x = psi(d) / psi(M) is monotone in d on either side of
// the query, so a run of keys in one segment costs one multiply-add per key in double
// (alpha_s + (beta_s / psi(M)) psi(d)), rounded once to float; only a run that crosses a kink
// takes the segment per key. Error against value(): the double sums of alpha, beta and the
// product differ from value()'s order by at most (m + 4) u_64 S, S = |b2| + sum |w2| (|w1| x +
// |b1|), so the row is value() rounded to float within 2^-24 |value()| + 2 (m + 4) 2^-53 S
// (tests/test_attention.cpp, FireFloatRowWithinItsBound).
template <typename Real>
class fire_bias_term final : public score_bias<Real> {
 public:
  fire_bias_term(const attention_fire<Real>& f, int64_t Hq, const attention_plan& pl, Real* dparams)
      : m_(f.hidden), W_(3 * f.hidden + 3), Hq_(Hq), dparams_(dparams) {
    w_.assign(f.params.begin(), f.params.end());
    build_segments();
    thresh_.resize(static_cast<size_t>(2 * Hq));
    pm_l_.resize(static_cast<size_t>(Hq));
    for (int64_t h = 0; h < Hq; ++h) {
      const double* w = w_.data() + h * W_;
      const double c = softplus(w[3 * m_ + 1]), L = softplus(w[3 * m_ + 2]);
      thresh_[2 * h] = L, thresh_[2 * h + 1] = c;
      pm_l_[h] = std::max(std::log1p(c * L), 1e-300);
    }
    int64_t lo = 0, hi = 0;
    if (!visible_offset_range(pl, int64_t{1} << 40, &lo, &hi)) return;  // nothing visible
    const int64_t dmax = std::max(std::abs(lo), std::abs(hi));
    if ((dmax + 1) * Hq > (int64_t{1} << 21)) return;
    dmax_ = dmax;
    psi_.resize(static_cast<size_t>(Hq * (dmax + 1)));
    for (int64_t h = 0; h < Hq; ++h) {
      const double c = softplus(w_[h * W_ + 3 * m_ + 1]);
      for (int64_t d = 0; d <= dmax; ++d) psi_[h * (dmax + 1) + d] = std::log1p(c * double(d));
    }
  }
  double value(int64_t h, int64_t qp, int64_t kp) const override {
    const double* w = w_.data() + h * W_;
    const double x = input(w, qp, kp).x;
    double out = w[3 * m_];
    for (int64_t u = 0; u < m_; ++u) out += w[2 * m_ + u] * std::max(0.0, w[u] * x + w[m_ + u]);
    return out;
  }
  void add_row(int64_t h, int64_t qp, const int64_t* kpos, int64_t n, bool contiguous,
               Real* row) const override {
    if constexpr (std::is_same_v<Real, float>)
      if (!psi_.empty() && contiguous && n > 0 && std::llabs(kpos[0] - qp) <= dmax_ &&
          std::llabs(kpos[n - 1] - qp) <= dmax_)
        return add_row_linear(h, qp, kpos[0] - qp, n, row);
    if (psi_.empty()) {
      for (int64_t j = 0; j < n; ++j) row[j] += static_cast<Real>(value(h, qp, kpos[j]));
      return;
    }
    const double* w = w_.data() + h * W_;
    const double* psi = psi_.data() + h * (dmax_ + 1);
    // As input(): M = max(L, qpos), psi(M) floored at 1e-300.
    const double c = softplus(w[3 * m_ + 1]), L = softplus(w[3 * m_ + 2]);
    const double M = L > double(qp) ? L : double(qp);
    const double pm = std::max(std::log1p(c * M), 1e-300);
    constexpr int64_t kB = 64;
    double p[kB], acc[kB];
    for (int64_t j0 = 0; j0 < n; j0 += kB) {
      const int64_t nb = std::min(kB, n - j0);
      // d = 0: psi = 0, x = 0 as in input(); past the table (a pad key, masked anyway): input(),
      // whose x = p / pm with p = x pm would not round back, so those blocks run the scalar MLP.
      const int64_t r0 = kpos[j0] - qp;  // consecutive keys: offsets r0, r0 + 1, ...
      if (contiguous && std::llabs(r0) <= dmax_ && std::llabs(r0 + nb - 1) <= dmax_) {
        // Keys behind the query (d = -r decreasing), then at or ahead of it (d = r): no branch;
        // x = psi / pm and the MLP in vectors (fire_mlp_f64: value()'s operations and bits).
        const int64_t behind = std::clamp<int64_t>(-r0, 0, nb);
        for (int64_t j = 0; j < behind; ++j) p[j] = psi[-r0 - j];
        for (int64_t j = behind; j < nb; ++j) p[j] = psi[r0 + j];
        fire_mlp_f64(p, nb, pm, w, m_, acc);
      } else {
        for (int64_t j = 0; j < nb; ++j) acc[j] = value(h, qp, kpos[j0 + j]);
      }
      for (int64_t j = 0; j < nb; ++j) row[j0 + j] += static_cast<Real>(acc[j]);
    }
  }
  int64_t grad_size() const override { return dparams_ ? Hq_ * W_ : 0; }
  void add_grad(int64_t h, int64_t qp, int64_t kp, double ds, double* grad) const override {
    const double* w = w_.data() + h * W_;
    double* gw = grad + h * W_;
    const in z = input(w, qp, kp);
    double dx = 0;  // d bias / d x
    for (int64_t u = 0; u < m_; ++u) {
      const double pre = w[u] * z.x + w[m_ + u];
      if (pre <= 0) continue;             // relu' = 0 (the kink at 0 taken as 0)
      gw[2 * m_ + u] += ds * pre;         // d/dw2_u = relu(pre)
      gw[u] += ds * w[2 * m_ + u] * z.x;  // d/dw1_u = w2_u x
      gw[m_ + u] += ds * w[2 * m_ + u];   // d/db1_u = w2_u
      dx += w[2 * m_ + u] * w[u];
    }
    gw[3 * m_] += ds;  // d/db2
    gw[3 * m_ + 1] += ds * dx * z.dx_dc * sigmoid(w[3 * m_ + 1]);
    gw[3 * m_ + 2] += ds * dx * z.dx_dL * sigmoid(w[3 * m_ + 2]);
  }
  void store_grad(const double* grad) const override {
    for (int64_t x = 0; x < Hq_ * W_; ++x) dparams_[x] = static_cast<Real>(grad[x]);
  }

 private:
  struct in {
    double x, dx_dc, dx_dL;
  };
  // x = psi(d) / psi(M) and its derivatives in c and L (psi'_c(y) = y / (c y + 1)):
  //   dx/dc = (d / (c d + 1) - x M / (c M + 1)) / psi(M)
  //   dx/dL = -x c / ((c M + 1) psi(M)) when L > qpos (M = L), else 0
  in input(const double* w, int64_t qp, int64_t kp) const {
    const double c = softplus(w[3 * m_ + 1]), L = softplus(w[3 * m_ + 2]);
    const double d = double(std::llabs(qp - kp));
    if (d == 0) return {0.0, 0.0, 0.0};  // psi(0) = 0 for every c and L
    const bool thresh = L > double(qp);
    const double M = thresh ? L : double(qp);
    const double pm = std::max(std::log1p(c * M), 1e-300);  // > 0 even if c M underflows
    const double x = std::log1p(c * d) / pm;
    in r;
    r.x = x;
    r.dx_dc = (d / (c * d + 1) - x * M / (c * M + 1)) / pm;
    r.dx_dL = thresh ? -x * c / ((c * M + 1) * pm) : 0.0;
    return r;
  }
  // Per head, the kinks of its relus sorted (the units with w1 = 0 have none) and the line of each
  // segment between them: seg_[h] indexes kink_ (K kinks) and line_ (K + 1 pairs alpha, beta).
  void build_segments() {
    seg_.assign(static_cast<size_t>(Hq_ + 1), 0);
    for (int64_t h = 0; h < Hq_; ++h) {
      const double* w = w_.data() + h * W_;
      std::vector<double> t;
      for (int64_t u = 0; u < m_; ++u)
        if (w[u] != 0) t.push_back(-w[m_ + u] / w[u]);
      std::sort(t.begin(), t.end());
      const size_t K = t.size();
      for (size_t s = 0; s <= K; ++s) {
        // A point inside segment s decides which units are on there.
        const double x = K == 0   ? 0.0
                         : s == 0 ? t[0] - std::max(1.0, std::abs(t[0]))
                         : s == K ? t[K - 1] + std::max(1.0, std::abs(t[K - 1]))
                                  : t[s - 1] + 0.5 * (t[s] - t[s - 1]);
        double alpha = w[3 * m_], beta = 0;
        for (int64_t u = 0; u < m_; ++u)
          if (w[u] * x + w[m_ + u] > 0)
            alpha += w[2 * m_ + u] * w[m_ + u], beta += w[2 * m_ + u] * w[u];
        line_.push_back(alpha);
        line_.push_back(beta);
      }
      kink_.insert(kink_.end(), t.begin(), t.end());
      seg_[h + 1] = seg_[h] + static_cast<int64_t>(K);
    }
  }
  // The segment of x for head h: how many of its kinks lie below x.
  int64_t segment(int64_t h, double x) const {
    const double* t = kink_.data() + seg_[h];
    return std::lower_bound(t, t + (seg_[h + 1] - seg_[h]), x) - t;
  }
  const double* line(int64_t h, int64_t s) const { return line_.data() + 2 * (seg_[h] + h + s); }
  // The float32 row over the n consecutive keys at offsets r0, r0 + 1, ... (all in the table):
  // runs of one segment by add_linear_row_f32, a run across kinks key by key.
  void add_row_linear(int64_t h, int64_t qp, int64_t r0, int64_t n, float* row) const {
    const double* psi = psi_.data() + h * (dmax_ + 1);
    // psi(M) as input() has it: log(c L + 1) per head, or the table's log(c qpos + 1).
    const double L = thresh_[2 * h], c = thresh_[2 * h + 1];
    const double pm = L > double(qp) ? pm_l_[h]
                      : qp <= dmax_  ? std::max(psi[qp], 1e-300)
                                     : std::max(std::log1p(c * double(qp)), 1e-300);
    constexpr int64_t kB = 64;
    double p[kB];
    for (int64_t j0 = 0; j0 < n; j0 += kB) {
      const int64_t nb = std::min(kB, n - j0), r = r0 + j0;
      // Keys behind the query (d = -r decreasing), then at or ahead of it (d = r increasing):
      // x is monotone on each part, so its ends give its segments.
      const int64_t behind = std::clamp<int64_t>(-r, 0, nb);
      for (int64_t j = 0; j < behind; ++j) p[j] = psi[-r - j];
      for (int64_t j = behind; j < nb; ++j) p[j] = psi[r + j];
      for (auto [a, b] : {std::pair{int64_t{0}, behind}, std::pair{behind, nb}}) {
        if (a == b) continue;
        const int64_t s0 = segment(h, p[a] / pm), s1 = segment(h, p[b - 1] / pm);
        if (s0 == s1) {
          const double* ln = line(h, s0);
          add_linear_row_f32(row + j0 + a, ln[0], ln[1] / pm, p + a, b - a);
          continue;
        }
        for (int64_t j = a; j < b; ++j) {
          const double* ln = line(h, segment(h, p[j] / pm));
          row[j0 + j] += static_cast<float>(ln[0] + ln[1] / pm * p[j]);
        }
      }
    }
  }
  int64_t m_, W_, Hq_;
  Real* dparams_;
  std::vector<int64_t> seg_;    // (Hq + 1,): head h's kinks are kink_[seg_[h], seg_[h + 1])
  std::vector<double> kink_;    // sorted per head
  std::vector<double> line_;    // per head and segment: alpha, beta
  std::vector<double> thresh_;  // per head: L, c
  std::vector<double> pm_l_;    // per head: psi(L) = log(c L + 1), at least 1e-300
  std::vector<double> w_;       // (Hq, 3m + 3)
  int64_t dmax_ = -1;           // psi_ covers distances 0 .. dmax_
  std::vector<double> psi_;     // (Hq, dmax + 1): log(c_h d + 1); empty = per pair
};

template <typename S>
class fire_hook final : public position_hook<S> {
 public:
  fire_hook(int64_t m, int64_t H) : m_(m), H_(H) {}
  pos_scheme scheme() const override { return pos_scheme::fire; }
  std::vector<position_tensor> tensors() const override {
    return {{"fire", H_, 3 * m_ + 3, true, false}};
  }
  attention_position<S> attention(const S* const* t) const override {
    attention_position<S> p;
    p.fire = {m_, std::span<const S>(t[0], H_ * (3 * m_ + 3))};
    return p;
  }
  void bind_grads(S* const* dt, attention_grads<S>& g) const override { g.dfire = dt[0]; }
  std::vector<int> attention_grad_tensors() const override { return {0}; }

 private:
  int64_t m_, H_;
};

}  // namespace

template <typename S>
std::unique_ptr<position_hook<S>> make_fire_hook(const position_options& o,
                                                 const position_shape& shape) {
  if (o.fire_hidden < 1 || o.fire_hidden > 4096)
    fail("fire_hidden must be in [1, 4096], got {}", o.fire_hidden);
  return std::make_unique<fire_hook<S>>(o.fire_hidden, shape.n_heads);
}

template <typename Real>
void add_fire_terms(const attention_params<Real>& p, const attention_plan& pl,
                    const attention_grads<Real>* g, engine_terms<Real>& t) {
  if (!p.pos.has_fire()) {
    if (g && g->dfire)
      fail(
          "attention backward: dfire was requested but the FIRE hook is off (pos.fire.params "
          "is empty)");
    return;
  }
  const auto& f = p.pos.fire;
  if (f.hidden < 1 || f.hidden > 4096) fail("fire hidden must be in [1, 4096], got {}", f.hidden);
  const int64_t W = 3 * f.hidden + 3;
  if (static_cast<int64_t>(f.params.size()) != p.Hq * W)
    fail("fire params must have shape (Hq, 3 hidden + 3) = ({}, {}), i.e. {} values, got {}", p.Hq,
         W, p.Hq * W, f.params.size());
  for (size_t x = 0; x < f.params.size(); ++x)
    if (!std::isfinite(double(f.params[x])))
      fail("fire params must be finite, got {} at ({}, {})", double(f.params[x]), x / W, x % W);
  t.biases.push_back(std::make_unique<fire_bias_term<Real>>(f, p.Hq, pl, g ? g->dfire : nullptr));
}

// What the declaration of fire points at (schemes.cpp; hooks.hpp, scheme_impl).
POSENC_SCHEME_ON(fire, p.has_fire())
extern const scheme_impl fire_impl;
const scheme_impl fire_impl = {POSENC_BOTH(fire_on), POSENC_BOTH(add_fire_terms), POSENC_NONE,
                               POSENC_BOTH(make_fire_hook)};

}  // namespace posenc::detail
