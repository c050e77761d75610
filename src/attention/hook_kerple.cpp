// Kerple (Chi et al. 2022): the engine's score bias from the logarithmic or power kernel of the
// distance d = |qpos - kpos| with learned per-head r1, r2, with the gradient of its parameters;
// and the model's hook: one (2, H) parameter tensor per layer.
//   log:   bias_h = -r1 log(1 + r2 d),  r1 = softplus(a1), r2 = softplus(a2)
//   power: bias_h = -r1 d^r2,           r1 = softplus(a1), r2 = 2 sigmoid(a2)   (0 < r2 < 2)
#include <cmath>
#include <cstdlib>

#include "hooks.hpp"
#include "posenc/core/error.hpp"

namespace posenc::detail {
namespace {

// Hook 2b. Per head, r1, r2 and their derivatives with respect to a1, a2 are computed once per
// call in double. The bias depends on the offset r = kpos - qpos alone, so the fast row is a
// per-call table (offset_table, hooks.hpp: value() rounded once to Real per head and visible
// offset, where small enough); a row of consecutive keys adds a slice of it, with the bits of
// value(). Offsets outside the range (a pad key inside a row, masked anyway) take value() itself.
template <typename Real>
class kerple_bias_term final : public score_bias<Real> {
 public:
  kerple_bias_term(const attention_kerple<Real>& k, int64_t Hq, const attention_plan& pl,
                   Real* dparams)
      : power_(k.kernel == kerple_kernel::power), Hq_(Hq), dparams_(dparams) {
    r1_.resize(Hq), r2_.resize(Hq), dr1_.resize(Hq), dr2_.resize(Hq);
    for (int64_t h = 0; h < Hq; ++h) {
      const double a1 = double(k.params[h]), a2 = double(k.params[Hq + h]);
      r1_[h] = softplus(a1);
      dr1_[h] = sigmoid(a1);
      if (power_) {
        const double s = sigmoid(a2);
        r2_[h] = 2 * s;
        dr2_[h] = 2 * s * (1 - s);
      } else {
        r2_[h] = softplus(a2);
        dr2_[h] = sigmoid(a2);
      }
    }
    table_.build(pl, Hq, [&](int64_t h, int64_t r) { return value(h, 0, r); });
  }
  double value(int64_t h, int64_t qp, int64_t kp) const override {
    const double d = double(std::llabs(qp - kp));
    if (power_) return d == 0 ? 0.0 : -r1_[h] * std::pow(d, r2_[h]);
    return -r1_[h] * std::log1p(r2_[h] * d);
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
    double g1, g2;
    if (power_) {
      if (d == 0) return;
      const double p = std::pow(d, r2_[h]);
      g1 = -p;
      g2 = -r1_[h] * p * std::log(d);
    } else {
      g1 = -std::log1p(r2_[h] * d);
      g2 = -r1_[h] * d / (1 + r2_[h] * d);
    }
    grad[h] += ds * g1 * dr1_[h];
    grad[Hq_ + h] += ds * g2 * dr2_[h];
  }
  void store_grad(const double* grad) const override {
    for (int64_t x = 0; x < 2 * Hq_; ++x) dparams_[x] = static_cast<Real>(grad[x]);
  }

 private:
  bool power_;
  int64_t Hq_;
  Real* dparams_;
  std::vector<double> r1_, r2_, dr1_, dr2_;  // (Hq,) each
  offset_table<Real> table_;                 // empty = per pair
};

template <typename S>
class kerple_hook final : public position_hook<S> {
 public:
  kerple_hook(bool power, int64_t H) : power_(power), H_(H) {}
  pos_scheme scheme() const override { return pos_scheme::kerple; }
  std::vector<position_tensor> tensors() const override { return {{"kerple", 2, H_, true, false}}; }
  attention_position<S> attention(const S* const* t) const override {
    attention_position<S> p;
    p.kerple = {power_ ? kerple_kernel::power : kerple_kernel::log,
                std::span<const S>(t[0], 2 * H_)};
    return p;
  }
  void bind_grads(S* const* dt, attention_grads<S>& g) const override { g.dkerple = dt[0]; }
  std::vector<int> attention_grad_tensors() const override { return {0}; }

 private:
  bool power_;
  int64_t H_;
};

}  // namespace

template <typename S>
std::unique_ptr<position_hook<S>> make_kerple_hook(const position_options& o,
                                                   const position_shape& shape) {
  return std::make_unique<kerple_hook<S>>(o.kerple_power, shape.n_heads);
}

template <typename Real>
void add_kerple_terms(const attention_params<Real>& p, const attention_plan& pl,
                      const attention_grads<Real>* g, engine_terms<Real>& t) {
  if (!p.pos.has_kerple()) {
    if (g && g->dkerple)
      fail(
          "attention backward: dkerple was requested but the Kerple hook is off "
          "(pos.kerple.params is empty)");
    return;
  }
  const auto& k = p.pos.kerple;
  if (static_cast<int64_t>(k.params.size()) != 2 * p.Hq)
    fail("kerple params must have shape (2, Hq) = (2, {}), i.e. {} values, got {}", p.Hq, 2 * p.Hq,
         k.params.size());
  if (k.kernel != kerple_kernel::log && k.kernel != kerple_kernel::power)
    fail("kerple kernel must be log or power, got {}", static_cast<int>(k.kernel));
  for (size_t x = 0; x < k.params.size(); ++x)
    if (!std::isfinite(double(k.params[x])))
      fail("kerple params must be finite, got {} at ({}, {})", double(k.params[x]), x / p.Hq,
           x % p.Hq);
  t.biases.push_back(
      std::make_unique<kerple_bias_term<Real>>(k, p.Hq, pl, g ? g->dkerple : nullptr));
}

// What the declaration of kerple points at (schemes.cpp; hooks.hpp, scheme_impl).
POSENC_SCHEME_ON(kerple, p.has_kerple())
extern const scheme_impl kerple_impl;
const scheme_impl kerple_impl = {POSENC_BOTH(kerple_on), POSENC_BOTH(add_kerple_terms), POSENC_NONE,
                                 POSENC_BOTH(make_kerple_hook)};

}  // namespace posenc::detail
