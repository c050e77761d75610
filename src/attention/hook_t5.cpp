// T5 relative bias (Raffel et al. 2020, sec. 2.1): the engine's score bias
// weights[bucket(kpos - qpos), h] with the gradient of the table; and the model's hook: causal
// buckets, one learned table (buckets, H) shared by every layer.
#include <algorithm>

#include "hooks.hpp"
#include "posenc/core/error.hpp"

namespace posenc::detail {
namespace {

// Hook 2b. The bucket of an offset r = kpos - qpos is constant for |r| >= the saturation
// distance (the logarithmic branch reaches its last bucket at |r| >= max_distance; 2 *
// max_distance + num_buckets is safely past it), so offsets clamped to the call's visible range
// [lo, hi] (detail::visible_offset_range) give exactly the bucket of the unclamped offset. Per
// call: the buckets over [lo, hi] (int32), and where small enough the bias itself per head
// (Hq, hi - lo + 1) in the element type; past those sizes the bucket is computed per pair.
template <typename Real>
class t5_bias_term final : public score_bias<Real> {
 public:
  t5_bias_term(const attention_t5<Real>& t, int64_t Hq, const attention_plan& pl, Real* dtable)
      : t_(t), Hq_(Hq), dtable_(dtable) {
    const t5_params& tp = t.params;
    const int64_t sat = 2 * tp.max_distance + tp.num_buckets;
    if (!visible_offset_range(pl, sat, &lo_, &hi_)) return;  // nothing visible: never called
    span_ = hi_ - lo_ + 1;
    if (span_ > (int64_t{1} << 22)) return;
    buckets_.resize(static_cast<size_t>(span_));
    for (int64_t r = lo_; r <= hi_; ++r) buckets_[r - lo_] = static_cast<int32_t>(t5_bucket(r, tp));
    if (span_ * Hq > (int64_t{1} << 26)) return;
    lut_.resize(static_cast<size_t>(Hq * span_));
    for (int64_t h = 0; h < Hq; ++h)
      for (int64_t r = 0; r < span_; ++r) lut_[h * span_ + r] = t.weights[buckets_[r] * Hq + h];
  }
  double value(int64_t h, int64_t qp, int64_t kp) const override {
    return double(t_.weights[t5_bucket(kp - qp, t_.params) * Hq_ + h]);
  }
  void add_row(int64_t h, int64_t qp, const int64_t* kpos, int64_t n, bool contiguous,
               Real* row) const override {
    if (lut_.empty()) {
      for (int64_t j = 0; j < n; ++j) row[j] += t_.weights[bucket(kpos[j] - qp) * Hq_ + h];
      return;
    }
    const Real* lut = lut_.data() + h * span_;
    if (!contiguous) {
      for (int64_t j = 0; j < n; ++j) row[j] += lut[std::clamp(kpos[j] - qp, lo_, hi_) - lo_];
      return;
    }
    const int64_t r0 = kpos[0] - qp, r1 = r0 + n - 1;  // offsets of the row's keys, increasing
    if (r1 <= lo_ || r0 >= hi_) {                      // saturated: one value
      const Real b = lut[(r1 <= lo_ ? lo_ : hi_) - lo_];
      for (int64_t j = 0; j < n; ++j) row[j] += b;
    } else if (r0 >= lo_ && r1 <= hi_) {  // inside the table: a slice
      add_slice(row, lut + (r0 - lo_), n);
    } else {
      for (int64_t j = 0; j < n; ++j) row[j] += lut[std::clamp(r0 + j, lo_, hi_) - lo_];
    }
  }
  int64_t grad_size() const override { return dtable_ ? t_.params.num_buckets * Hq_ : 0; }
  void add_grad(int64_t h, int64_t qp, int64_t kp, double ds, double* grad) const override {
    grad[t5_bucket(kp - qp, t_.params) * Hq_ + h] += ds;
  }
  void grad_row(int64_t h, int64_t qp, const int64_t* kpos, int64_t n, const Real* ds,
                double* grad) const override {
    for (int64_t j = 0; j < n; ++j)
      if (ds[j] != Real(0)) grad[bucket(kpos[j] - qp) * Hq_ + h] += double(ds[j]);
  }
  void store_grad(const double* grad) const override {
    for (int64_t x = 0; x < grad_size(); ++x) dtable_[x] = static_cast<Real>(grad[x]);
  }

 private:
  int64_t bucket(int64_t r) const {
    return buckets_.empty() ? t5_bucket(r, t_.params) : buckets_[std::clamp(r, lo_, hi_) - lo_];
  }
  attention_t5<Real> t_;
  int64_t Hq_;
  Real* dtable_;
  int64_t lo_ = 0, hi_ = 0, span_ = 0;
  std::vector<int32_t> buckets_;  // (span,)
  std::vector<Real> lut_;         // (Hq, span)
};

template <typename S>
class t5_hook final : public position_hook<S> {
 public:
  t5_hook(t5_params tp, int64_t H) : tp_(tp), H_(H) {}
  pos_scheme scheme() const override { return pos_scheme::t5; }
  std::vector<position_tensor> tensors() const override {
    return {{"t5_table", tp_.num_buckets, H_, false, false}};
  }
  attention_position<S> attention(const S* const* t) const override {
    attention_position<S> p;
    p.t5 = {tp_, std::span<const S>(t[0], tp_.num_buckets * H_)};
    return p;
  }
  void bind_grads(S* const* dt, attention_grads<S>& g) const override { g.dt5 = dt[0]; }
  std::vector<int> attention_grad_tensors() const override { return {0}; }

 private:
  t5_params tp_;
  int64_t H_;
};

}  // namespace

template <typename S>
std::unique_ptr<position_hook<S>> make_t5_hook(const position_options& o,
                                               const position_shape& shape) {
  const t5_params tp{o.t5_buckets, o.t5_max_distance, false};
  t5_validate(tp);
  return std::make_unique<t5_hook<S>>(tp, shape.n_heads);
}

template <typename Real>
void add_t5_terms(const attention_params<Real>& p, const attention_plan& pl,
                  const attention_grads<Real>* g, engine_terms<Real>& t) {
  const attention_t5<Real>& t5 = p.pos.t5;
  if (!p.pos.has_t5()) {
    if (g && g->dt5)
      fail(
          "attention backward: dt5 was requested but the T5 hook is off (pos.t5.weights is "
          "empty)");
    return;
  }
  t5_validate(t5.params);
  const auto want = static_cast<size_t>(t5.params.num_buckets * p.Hq);
  if (t5.weights.size() != want)
    fail("t5 weights must have shape (num_buckets, Hq) = ({}, {}), i.e. {} values, got {}",
         t5.params.num_buckets, p.Hq, want, t5.weights.size());
  t.biases.push_back(std::make_unique<t5_bias_term<Real>>(t5, p.Hq, pl, g ? g->dt5 : nullptr));
}

// What the declaration of t5 points at (schemes.cpp; hooks.hpp, scheme_impl).
POSENC_SCHEME_ON(t5, p.has_t5())
extern const scheme_impl t5_impl;
const scheme_impl t5_impl = {POSENC_BOTH(t5_on), POSENC_BOTH(add_t5_terms), POSENC_NONE,
                             POSENC_BOTH(make_t5_hook)};

}  // namespace posenc::detail

namespace posenc {

attention_t5<float> attention_t5_view(const t5_bias_table& t) {
  return {t.params, t.weights};
}

}  // namespace posenc
