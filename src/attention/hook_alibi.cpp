// ALiBi (Press et al. 2022): the engine's score bias -m_h (qpos - kpos) (causal) or
// -m_h |qpos - kpos| (eq. in sec. 3), with the gradient of the slopes for learned-slope
// variants; and the model's hook: Press's slopes for H heads, fixed (not trained).
#include <cmath>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "hooks.hpp"
#include "posenc/core/error.hpp"
#include "posenc/encodings/alibi.hpp"

namespace posenc::detail {
namespace {

// Queries from which a call tabulates the bias (below).
constexpr int64_t kMinTableQueries = 16;

// Hook 2b. d bias / d m_h = alibi_bias(1, qpos, kpos) (the bias is linear in the slope).
// The bias depends on the offset r = kpos - qpos alone. In float32 a row of consecutive keys
// (every row of a prefill of kMinTableQueries queries or more) adds a slice of a per-call table
// (offset_table: alibi_bias rounded once to float per head and visible offset, the bits of the
// formula). Other rows, and float64, take the formula (vectorised in float32, the same bits).
template <typename Real>
class alibi_bias_term final : public score_bias<Real> {
 public:
  alibi_bias_term(std::span<const double> slopes, bool causal, const attention_plan& pl,
                  double* dslopes)
      : slopes_(slopes), causal_(causal), dslopes_(dslopes) {
    // Each entry serves at most one row per query: a decode step (few queries) would build as
    // many entries as it adds, so it keeps the formula.
    if (std::is_same_v<Real, float> && static_cast<int64_t>(pl.qpos.size()) >= kMinTableQueries)
      table_.build(pl, static_cast<int64_t>(slopes.size()),
                   [&](int64_t h, int64_t r) { return alibi_bias(slopes[h], 0, r, causal); });
  }
  double value(int64_t h, int64_t qp, int64_t kp) const override {
    return alibi_bias(slopes_[h], qp, kp, causal_);
  }
  void add_row(int64_t h, int64_t qp, const int64_t* kpos, int64_t n, bool contiguous,
               Real* row) const override {
    if constexpr (std::is_same_v<Real, float>) {
      if (const float* slice = contiguous && n > 0 ? table_.slice(h, kpos[0] - qp, n) : nullptr) {
        add_slice(row, slice, n);
        return;
      }
      alibi_bias_row(slopes_[h], qp, kpos, n, causal_, row, true);  // vectorised, same bits
    } else {
      for (int64_t j = 0; j < n; ++j) row[j] += alibi_bias(slopes_[h], qp, kpos[j], causal_);
    }
  }
  int64_t grad_size() const override { return dslopes_ ? static_cast<int64_t>(slopes_.size()) : 0; }
  void add_grad(int64_t h, int64_t qp, int64_t kp, double ds, double* grad) const override {
    grad[h] += ds * alibi_bias(1.0, qp, kp, causal_);
  }
  void grad_row(int64_t h, int64_t qp, const int64_t* kpos, int64_t n, const Real* ds,
                double* grad) const override {
    double sum = 0;
    for (int64_t j = 0; j < n; ++j) sum += double(ds[j]) * alibi_bias(1.0, qp, kpos[j], causal_);
    grad[h] += sum;
  }
  void store_grad(const double* grad) const override {
    std::copy(grad, grad + slopes_.size(), dslopes_);
  }

 private:
  std::span<const double> slopes_;
  bool causal_;
  double* dslopes_;
  offset_table<float> table_;  // float32 prefill calls; empty = the formula
};

template <typename S>
class alibi_hook final : public position_hook<S> {
 public:
  explicit alibi_hook(int64_t H) : slopes_(alibi_slopes(H)) {}
  pos_scheme scheme() const override { return pos_scheme::alibi; }
  attention_position<S> attention(const S* const*) const override {
    attention_position<S> p;
    p.alibi = slopes_;
    return p;
  }

 private:
  std::vector<double> slopes_;
};

}  // namespace

template <typename S>
std::unique_ptr<position_hook<S>> make_alibi_hook(const position_options&,
                                                  const position_shape& shape) {
  return std::make_unique<alibi_hook<S>>(shape.n_heads);
}

template <typename Real>
void add_alibi_terms(const attention_params<Real>& p, const attention_plan& pl,
                     const attention_grads<Real>* g, engine_terms<Real>& t) {
  const std::span<const double> slopes = p.pos.alibi;
  if (slopes.empty()) {
    if (g && g->dalibi)
      fail(
          "attention backward: dalibi was requested but the ALiBi hook is off (pos.alibi is "
          "empty)");
    return;
  }
  if (static_cast<int64_t>(slopes.size()) != p.Hq)
    fail("alibi slopes must have shape (Hq,) = ({},), got ({},)", p.Hq, slopes.size());
  for (size_t h = 0; h < slopes.size(); ++h)
    if (!std::isfinite(slopes[h]))
      fail("alibi slopes must be finite, got {} for head {}", slopes[h], h);
  t.biases.push_back(
      std::make_unique<alibi_bias_term<Real>>(slopes, p.causal, pl, g ? g->dalibi : nullptr));
}

// What the declaration of alibi points at (schemes.cpp; hooks.hpp, scheme_impl).
POSENC_SCHEME_ON(alibi, !p.alibi.empty())
extern const scheme_impl alibi_impl;
const scheme_impl alibi_impl = {POSENC_BOTH(alibi_on), POSENC_BOTH(add_alibi_terms), POSENC_NONE,
                                POSENC_BOTH(make_alibi_hook)};

}  // namespace posenc::detail
