// Kerple (Chi et al. 2022): a score bias reached by name (named_schemes.hpp) whose parameter is
// the tensor `kerple` (2, Hq) of trained rows a1, a2, with its gradient, and a choice of kernel
// `kerple_kernel` (log or power) of the distance d = |qpos - kpos|:
//   log:   bias_h = -r1 log(1 + r2 d),  r1 = softplus(a1), r2 = softplus(a2)
//   power: bias_h = -r1 d^r2,           r1 = softplus(a1), r2 = 2 sigmoid(a2)   (0 < r2 < 2)
// The paper keeps r1, r2 positive by clamping them after each step; here a1, a2 are unconstrained
// reals mapped onto the allowed range, so every finite value is valid and the gradient exact.
// The model's hook holds one (2, H) tensor per layer.
#include <cmath>
#include <cstdlib>

#include "hooks.hpp"
#include "named_schemes.hpp"
#include "posenc/attention/position_hook.hpp"
#include "posenc/core/error.hpp"

namespace posenc::detail {
namespace {

// r1, r2 and their derivatives by a1, a2 for one head (log or power kernel).
struct kerple_head {
  double r1, r2, dr1, dr2;
};
kerple_head kerple_of(bool power, double a1, double a2) {
  kerple_head k{softplus(a1), 0, sigmoid(a1), 0};
  if (power) {
    const double s = sigmoid(a2);
    k.r2 = 2 * s;
    k.dr2 = 2 * s * (1 - s);
  } else {
    k.r2 = softplus(a2);
    k.dr2 = sigmoid(a2);
  }
  return k;
}

// Hook 2b. Per head, r1, r2 and their derivatives with respect to a1, a2 are computed once per
// call in double. The bias depends on the offset r = kpos - qpos alone, so the fast row is a
// per-call table (offset_table, hooks.hpp: value() rounded once to Real per head and visible
// offset, where small enough); a row of consecutive keys adds a slice of it, with the bits of
// value(). Offsets outside the range (a pad key inside a row, masked anyway) take value() itself.
template <typename Real>
class kerple_bias_term final : public score_bias<Real> {
 public:
  explicit kerple_bias_term(const named_call<Real>& c)
      : power_(c.args[0] == 1), Hq_(c.Hq), dparams_(c.grads[0]) {
    const std::span<const Real> a = c.tensors[0];
    for (size_t x = 0; x < a.size(); ++x)
      if (!std::isfinite(double(a[x])))
        fail("kerple must be finite, got {} at ({}, {})", double(a[x]), x / Hq_, x % Hq_);
    k_.resize(Hq_);
    for (int64_t h = 0; h < Hq_; ++h) k_[h] = kerple_of(power_, double(a[h]), double(a[Hq_ + h]));
    if (c.plan) table_.build(*c.plan, Hq_, [&](int64_t h, int64_t r) { return value(h, 0, r); });
  }
  double value(int64_t h, int64_t qp, int64_t kp) const override {
    const double d = double(std::llabs(qp - kp));
    if (power_) return d == 0 ? 0.0 : -k_[h].r1 * std::pow(d, k_[h].r2);
    return -k_[h].r1 * std::log1p(k_[h].r2 * d);
  }
  void add_row(int64_t h, int64_t qp, const int64_t* kpos, int64_t n, bool contiguous,
               Real* row) const override {
    if (const Real* slice = contiguous && n > 0 ? table_.slice(h, kpos[0] - qp, n) : nullptr) {
      add_slice(row, slice, n);
      return;
    }
    const Real* lut = table_.lut.data() + h * table_.span;
    for (int64_t j = 0; j < n; ++j) {
      const int64_t r = kpos[j] - qp;
      row[j] += table_.holds(r) ? lut[r - table_.lo] : static_cast<Real>(value(h, qp, kpos[j]));
    }
  }
  int64_t grad_size() const override { return dparams_ ? 2 * Hq_ : 0; }
  // log:   d bias/d r1 = -log(1 + r2 d),  d bias/d r2 = -r1 d / (1 + r2 d)
  // power: d bias/d r1 = -d^r2,           d bias/d r2 = -r1 d^r2 log d   (0 at d = 0)
  void add_grad(int64_t h, int64_t qp, int64_t kp, double ds, double* grad) const override {
    const double d = double(std::llabs(qp - kp));
    const kerple_head& k = k_[h];
    double g1, g2;
    if (power_) {
      if (d == 0) return;
      const double p = std::pow(d, k.r2);
      g1 = -p;
      g2 = -k.r1 * p * std::log(d);
    } else {
      g1 = -std::log1p(k.r2 * d);
      g2 = -k.r1 * d / (1 + k.r2 * d);
    }
    grad[h] += ds * g1 * k.dr1;
    grad[Hq_ + h] += ds * g2 * k.dr2;
  }
  void store_grad(const double* grad) const override {
    for (int64_t x = 0; x < 2 * Hq_; ++x) dparams_[x] = static_cast<Real>(grad[x]);
  }

 private:
  bool power_;
  int64_t Hq_;
  Real* dparams_;
  std::vector<kerple_head> k_;  // (Hq,)
  offset_table<Real> table_;    // empty = per pair
};

template <typename Real>
std::unique_ptr<score_bias<Real>> kerple_term(const named_call<Real>& c) {
  return std::make_unique<kerple_bias_term<Real>>(c);
}

// The case tables' draws: per head a1 ~ N(0, 1), a2 ~ N(0, 1) (N(-1, 1) for the power kernel,
// r2 mostly below 1); the bound on the bias's derivatives over distances d <= dmax (Chi et al.
// 2022's kernels): log: |db/da1| <= log(1 + r2 dmax), |db/da2| <= r1 min(dmax, 1/r2); power:
// |db/da1| <= dmax^r2, |db/da2| <= r1 dmax^r2 |log dmax| / 2.
double kerple_case_draw(std::span<const double> args, int64_t Hq, int64_t, double dmax,
                        const std::function<double()>& normal,
                        std::vector<std::vector<double>>& t) {
  const bool power = args[0] == 1;
  t.assign(1, std::vector<double>(static_cast<size_t>(2 * Hq)));
  for (int64_t h = 0; h < Hq; ++h) {
    t[0][h] = normal();
    t[0][Hq + h] = power ? normal() - 1 : normal();
  }
  double G = 0;
  for (int64_t h = 0; h < Hq; ++h) {
    const kerple_head k = kerple_of(power, t[0][h], t[0][Hq + h]);
    if (power) {
      const double pw = dmax > 0 ? std::pow(dmax, k.r2) : 0.0;
      G = std::max({G, pw, k.r1 * pw * std::abs(std::log(std::max(dmax, 1.0))) / 2});
    } else {
      G = std::max({G, std::log1p(k.r2 * dmax), k.r1 * std::min(dmax, 1 / k.r2)});
    }
  }
  return G;
}

// The model's hook: one (2, H) tensor per layer, the kernel from the options (kerple_kernel, the
// index of log or power; log by default).
template <typename S>
std::unique_ptr<position_hook<S>> kerple_hook_of(pos_scheme id, const position_options& o,
                                                 const position_shape& shape) {
  return make_tensor_hook<S>(id, "kerple", {{"kerple_kernel", named_option(o, "kerple_kernel", 0)}},
                             "kerple", 2, shape.n_heads);
}

}  // namespace

extern const named_bias kerple_bias_decl;
const named_bias kerple_bias_decl = {
    .term_f32 = &kerple_term<float>,
    .term_f64 = &kerple_term<double>,
    .case_draw = &kerple_case_draw,
    .hook_f32 = &kerple_hook_of<float>,
    .hook_f64 = &kerple_hook_of<double>,
};

}  // namespace posenc::detail
