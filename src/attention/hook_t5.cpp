// T5 relative bias (Raffel et al. 2020, sec. 2.1): a score bias reached by name whose parameter
// is the learned table `t5_table` (num_buckets, Hq), with its gradient: bias(h, qpos, kpos) =
// t5_table[bucket(kpos - qpos), h], the buckets of the family file (posenc/encodings/t5_bias.hpp)
// with t5_max_distance and, by default, bidirectional buckets exactly when the attention is not
// causal (an encoder's; a decoder's are causal). num_buckets is the table's own extent
// (t5_num_buckets, when given, is checked against it). The model's hook: causal buckets, one
// table (buckets, H) shared by every layer (Raffel et al. 2020 share it too).
#include <algorithm>
#include <cmath>

#include "hooks.hpp"
#include "named_schemes.hpp"
#include "posenc/attention/position_hook.hpp"
#include "posenc/core/error.hpp"
#include "posenc/encodings/t5_bias.hpp"

namespace posenc::detail {
namespace {

// The buckets of a call (named_call: args t5_num_buckets, t5_max_distance, t5_bidirectional after
// the table), checked against the table's rows; errors name the keywords.
template <typename Real>
t5_params t5_params_of(const named_call<Real>& c) {
  const auto rows = c.Hq > 0 ? static_cast<int64_t>(c.tensors[0].size()) / c.Hq : 0;
  if (c.args[0] != 0 && c.args[0] != double(rows))
    fail("t5_table must have t5_num_buckets = {} rows, got shape ({}, {})", c.args[0], rows, c.Hq);
  const t5_params tp{rows, static_cast<int64_t>(c.args[1]), named_bool(c.args[2], c.causal)};
  try {
    t5_validate(tp);
  } catch (const invalid_argument& e) {
    fail("t5_table ({} rows) with t5_max_distance = {}: {}", rows, tp.max_distance, e.what());
  }
  for (size_t x = 0; x < c.tensors[0].size(); ++x)
    if (!std::isfinite(double(c.tensors[0][x])))
      fail("t5_table must be finite, got {} at ({}, {})", double(c.tensors[0][x]), x / c.Hq,
           x % c.Hq);
  return tp;
}

// Hook 2b. The bucket of an offset r = kpos - qpos is constant for |r| >= the saturation
// distance (the logarithmic branch reaches its last bucket at |r| >= max_distance; 2 *
// max_distance + num_buckets is safely past it), so offsets clamped to the call's visible range
// [lo, hi] (detail::visible_offset_range) give exactly the bucket of the unclamped offset. Per
// call: the buckets over [lo, hi] (int32), and where small enough the bias itself per head
// (Hq, hi - lo + 1) in the element type; past those sizes the bucket is computed per pair.
template <typename Real>
class t5_bias_term final : public score_bias<Real> {
 public:
  explicit t5_bias_term(const named_call<Real>& c)
      : tp_(t5_params_of(c)), w_(c.tensors[0]), Hq_(c.Hq), dtable_(c.grads[0]) {
    const int64_t sat = 2 * tp_.max_distance + tp_.num_buckets;
    if (!c.plan || !visible_offset_range(*c.plan, sat, &lo_, &hi_)) return;  // per pair
    span_ = hi_ - lo_ + 1;
    if (span_ > (int64_t{1} << 22)) return;
    buckets_.resize(static_cast<size_t>(span_));
    for (int64_t r = lo_; r <= hi_; ++r)
      buckets_[r - lo_] = static_cast<int32_t>(t5_bucket(r, tp_));
    if (span_ * Hq_ > (int64_t{1} << 26)) return;
    lut_.resize(static_cast<size_t>(Hq_ * span_));
    for (int64_t h = 0; h < Hq_; ++h)
      for (int64_t r = 0; r < span_; ++r) lut_[h * span_ + r] = w_[buckets_[r] * Hq_ + h];
  }
  double value(int64_t h, int64_t qp, int64_t kp) const override {
    return double(w_[t5_bucket(kp - qp, tp_) * Hq_ + h]);
  }
  void add_row(int64_t h, int64_t qp, const int64_t* kpos, int64_t n, bool contiguous,
               Real* row) const override {
    if (lut_.empty()) {
      for (int64_t j = 0; j < n; ++j) row[j] += w_[bucket(kpos[j] - qp) * Hq_ + h];
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
  int64_t grad_size() const override { return dtable_ ? tp_.num_buckets * Hq_ : 0; }
  void add_grad(int64_t h, int64_t qp, int64_t kp, double ds, double* grad) const override {
    grad[t5_bucket(kp - qp, tp_) * Hq_ + h] += ds;
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
    return buckets_.empty() ? t5_bucket(r, tp_) : buckets_[std::clamp(r, lo_, hi_) - lo_];
  }
  t5_params tp_;
  std::span<const Real> w_;  // (num_buckets, Hq)
  int64_t Hq_;
  Real* dtable_;
  int64_t lo_ = 0, hi_ = 0, span_ = 0;
  std::vector<int32_t> buckets_;  // (span,)
  std::vector<Real> lut_;         // (Hq, span)
};

template <typename Real>
std::unique_ptr<score_bias<Real>> t5_term(const named_call<Real>& c) {
  return std::make_unique<t5_bias_term<Real>>(c);
}

// The case tables' draws: a table (num_buckets, Hq) of N(0, 1) entries, 32 rows unless
// t5_num_buckets says otherwise (the bench's case: T5's own 32 buckets); a pair's bias is one
// entry, so |d bias / d entry| <= 1.
double t5_case_draw(std::span<const double> args, int64_t Hq, int64_t, double,
                    const std::function<double()>& normal, std::vector<std::vector<double>>& t) {
  const int64_t rows = args[0] != 0 ? static_cast<int64_t>(args[0]) : 32;
  t.assign(1, std::vector<double>(static_cast<size_t>(rows * Hq)));
  for (auto& x : t[0]) x = normal();
  return 1;
}

// The model's hook: causal buckets unless t5_bidirectional (t5_num_buckets, 32 by default;
// t5_max_distance, 128), one table shared by every layer.
template <typename S>
std::unique_ptr<position_hook<S>> t5_hook_of(pos_scheme id, const position_options& o,
                                             const position_shape& shape) {
  const double given = named_option(o, "t5_num_buckets", 0);
  const double rows = given != 0 ? given : 32.0;
  const double md = named_option(o, "t5_max_distance", 128);
  const double bidi = named_option(o, "t5_bidirectional", 0);
  for (const auto& [name, v] :
       {std::pair{"t5_num_buckets", rows}, std::pair{"t5_max_distance", md}})
    if (!(v >= 1 && v <= 0x1p30 && v == std::floor(v)))
      fail("{} must be an integer in [1, 2^30], got {}", name, v);
  if (!(bidi == 0 || bidi == 1)) fail("t5_bidirectional must be a bool (0 or 1), got {}", bidi);
  const t5_params tp{static_cast<int64_t>(rows), static_cast<int64_t>(md), bidi == 1};
  t5_validate(tp);
  return make_tensor_hook<S>(
      id, "t5", {{"t5_num_buckets", rows}, {"t5_max_distance", md}, {"t5_bidirectional", bidi}},
      "t5_table", tp.num_buckets, shape.n_heads, false);
}

}  // namespace

extern const named_bias t5_bias_decl;
const named_bias t5_bias_decl = {
    .term_f32 = &t5_term<float>,
    .term_f64 = &t5_term<double>,
    .case_draw = &t5_case_draw,
    // 16 buckets and max_distance 20: the tables' calls of a few dozen positions reach the exact,
    // the logarithmic and the saturated buckets.
    .case_args = {{"t5_num_buckets", 16}, {"t5_max_distance", 20}},
    .hook_f32 = &t5_hook_of<float>,
    .hook_f64 = &t5_hook_of<double>,
};

}  // namespace posenc::detail
