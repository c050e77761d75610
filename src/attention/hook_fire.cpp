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
#include "named_schemes.hpp"
#include "posenc/attention/position_hook.hpp"
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
// (posenc check's fire_float_row_within_bound).
template <typename Real>
class fire_bias_term final : public score_bias<Real> {
 public:
  // From the call's fire (Hq, W): m = (W - 3) / 3, checked against fire_hidden when that is not 0.
  explicit fire_bias_term(const named_call<Real>& c)
      : m_(hidden_of(c)), W_(3 * m_ + 3), Hq_(c.Hq), dparams_(c.grads[0]) {
    const int64_t Hq = Hq_;
    w_.assign(c.tensors[0].begin(), c.tensors[0].end());
    for (size_t x = 0; x < w_.size(); ++x)
      if (!std::isfinite(w_[x]))
        fail("fire must be finite, got {} at ({}, {})", w_[x], x / W_, x % W_);
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
    if (!c.plan || !visible_offset_range(*c.plan, int64_t{1} << 40, &lo, &hi)) return;
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
  static int64_t hidden_of(const named_call<Real>& c) {
    const int64_t W = c.Hq > 0 ? static_cast<int64_t>(c.tensors[0].size()) / c.Hq : 0;
    if (W < 6 || W % 3 != 0 || W > 3 * 4096 + 3)
      fail(
          "fire must have shape (Hq, 3 m + 3) with m, the hidden units, in [1, 4096], got width "
          "{}",
          W);
    const int64_t m = (W - 3) / 3;
    if (c.args[0] != 0 && c.args[0] != double(m))
      fail("fire_hidden = {} does not match fire's width {} = 3 m + 3 (m = {})", c.args[0], W, m);
    return m;
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

template <typename Real>
std::unique_ptr<score_bias<Real>> fire_term(const named_call<Real>& c) {
  return std::make_unique<fire_bias_term<Real>>(c);
}

// The case tables' draws (m = fire_hidden, else 4): per head w1, b1, w2 ~ N(0, 1),
// b2 ~ N(0, 1/4), a_c ~ N(0, 1), a_L ~ 8 + N(0, 16) (L around 8, inside the tables' positions);
// the bound on the bias's derivatives over distances d <= dmax (Li et al. 2023's
// f(psi(d) / psi(max(L, i)))): x <= X = psi(dmax) / psi(L); per parameter relu <= |w1| X + |b1|,
// |w2| X, |w2|, 1, and through x: sum |w2 w1| times |dx/dc| <= (1 + X) / (c psi(L)),
// |dx/dL| <= X c / psi(L).
double fire_case_draw(std::span<const double> args, int64_t Hq, int64_t, double dmax,
                      const std::function<double()>& normal, std::vector<std::vector<double>>& t) {
  const int64_t m = args[0] != 0 ? static_cast<int64_t>(args[0]) : 4, W = 3 * m + 3;
  t.assign(1, std::vector<double>(static_cast<size_t>(Hq * W)));
  double G = 0;
  for (int64_t h = 0; h < Hq; ++h) {
    double* w = t[0].data() + h * W;
    for (int64_t e = 0; e < 3 * m; ++e) w[e] = normal();
    w[3 * m] = 0.5 * normal();
    w[3 * m + 1] = normal();
    {
      // max(L, qpos) has a kink where L meets a query position, an integer: L = softplus(a_L)
      // stays at least 0.05 from every integer, where the finite differences (steps of 1e-3 and
      // 2e-3 in a_L, dL/da_L < 1) stay on one side of it.
      double aL = 8 + 4 * normal();
      const double L = softplus(aL), n = std::round(L);
      if (std::abs(L - n) < 0.05) aL = std::log(std::expm1(L >= n ? n + 0.05 : n - 0.05));
      w[3 * m + 2] = aL;
    }
    const double cc = softplus(w[3 * m + 1]), L = softplus(w[3 * m + 2]);
    const double pl = std::max(std::log1p(cc * L), 1e-300), X = std::log1p(cc * dmax) / pl;
    // relu has a kink at 0, where finite differences are meaningless: b1 keeps every
    // pre-activation w1 x + b1 at least 0.1 away from 0 for all x in [0, X], even units always
    // on, odd units always off, so both branches are covered.
    for (int64_t u = 0; u < m; ++u) {
      const double off = std::abs(w[u]) * X + 0.1 + 0.5 * std::abs(normal());
      w[m + u] = u % 2 == 0 ? off : -off;
    }
    double sw = 0;
    for (int64_t u = 0; u < m; ++u) {
      const double w1 = std::abs(w[u]), b1 = std::abs(w[m + u]), w2 = std::abs(w[2 * m + u]);
      sw += w2 * w1;
      G = std::max({G, w1 * X + b1, w2 * X, w2, 1.0});
    }
    G = std::max({G, sw * (1 + X) / (cc * pl), sw * X * cc / pl});
  }
  return G;
}

// The model's hook: one (H, 3m + 3) tensor per layer, m from the options (fire_hidden; 0 or unset
// = 32, Li et al. 2023's).
template <typename S>
std::unique_ptr<position_hook<S>> fire_hook_of(pos_scheme id, const position_options& o,
                                               const position_shape& shape) {
  double m = named_option(o, "fire_hidden", 0);
  if (m == 0) m = 32;
  if (!(m >= 1 && m <= 4096 && m == std::floor(m)))
    fail("fire_hidden must be an integer in [1, 4096], got {}", m);
  const auto mi = static_cast<int64_t>(m);
  return make_tensor_hook<S>(id, "fire", {{"fire_hidden", m}}, "fire", shape.n_heads, 3 * mi + 3);
}

}  // namespace

extern const named_bias fire_bias_decl;
const named_bias fire_bias_decl = {
    .term_f32 = &fire_term<float>,
    .term_f64 = &fire_term<double>,
    .case_draw = &fire_case_draw,
    .hook_f32 = &fire_hook_of<float>,
    .hook_f64 = &fire_hook_of<double>,
};

}  // namespace posenc::detail
