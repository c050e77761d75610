// ALiBi (Press et al. 2022): a score bias reached by name, -m_h (qpos - kpos) (causal) or
// -m_h |qpos - kpos| (sec. 3), whose switch `alibi` is True (the slopes of the family file,
// posenc/encodings/alibi.hpp, for Hq heads from alibi_max_bias and alibi_convention) or the
// slopes (Hq,) themselves, in float64 in every call (dtype "bool | tensor64"), with their
// gradient for learned-slope variants. The model's hook is the generic one: Press's slopes, fixed.
#include <cmath>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "hooks.hpp"
#include "named_schemes.hpp"
#include "posenc/core/error.hpp"
#include "posenc/encodings/alibi.hpp"

namespace posenc::detail {
namespace {

// Queries from which a call tabulates the bias (below).
constexpr int64_t kMinTableQueries = 16;

// The slopes a call runs with: given, checked finite; else derived from args (alibi_max_bias,
// the index of alibi_convention).
std::vector<double> alibi_slopes_of(std::span<const double> given, std::span<const double> args,
                                    int64_t Hq) {
  for (size_t h = 0; h < given.size(); ++h)
    if (!std::isfinite(given[h]))
      fail("alibi slopes must be finite, got {} for head {}", given[h], h);
  if (!given.empty()) return {given.begin(), given.end()};
  return alibi_slopes(Hq, args[0], static_cast<alibi_convention>(static_cast<int>(args[1])));
}

// alibi_max_bias finite and > 0 (alibi_slopes' own check, named for the keyword).
void alibi_check(std::span<const double> args, int64_t) {
  if (!(std::isfinite(args[0]) && args[0] > 0))
    fail("alibi_max_bias must be finite and > 0, got {}", args[0]);
}

// Hook 2b. d bias / d m_h = alibi_bias(1, qpos, kpos) (the bias is linear in the slope).
// The bias depends on the offset r = kpos - qpos alone. In float32 a row of consecutive keys
// (every row of a prefill of kMinTableQueries queries or more) adds a slice of a per-call table
// (offset_table: alibi_bias rounded once to float per head and visible offset, the bits of the
// formula). Other rows, and float64, take the formula (vectorised in float32, the same bits).
template <typename Real>
class alibi_bias_term final : public score_bias<Real> {
 public:
  explicit alibi_bias_term(const named_call<Real>& c)
      : slopes_(alibi_slopes_of(c.tensors64[0], c.args, c.Hq)),
        causal_(c.causal),
        dslopes_(c.grads64[0]) {
    // Each entry serves at most one row per query: a decode step (few queries) would build as
    // many entries as it adds, so it keeps the formula.
    if (std::is_same_v<Real, float> && c.plan &&
        static_cast<int64_t>(c.plan->qpos.size()) >= kMinTableQueries)
      table_.build(*c.plan, c.Hq,
                   [&](int64_t h, int64_t r) { return alibi_bias(slopes_[h], 0, r, causal_); });
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
  std::vector<double> slopes_;
  bool causal_;
  double* dslopes_;
  offset_table<float> table_;  // float32 prefill calls; empty = the formula
};

template <typename Real>
std::unique_ptr<score_bias<Real>> alibi_term(const named_call<Real>& c) {
  return std::make_unique<alibi_bias_term<Real>>(c);
}

// The case tables' slopes: those of the parameters (no draw), and |d bias / d m_h| = the
// distance, <= dmax.
double alibi_case_draw(std::span<const double> args, int64_t Hq, int64_t, double dmax,
                       const std::function<double()>&, std::vector<std::vector<double>>& t) {
  t.assign(1, alibi_slopes_of({}, args, Hq));
  return dmax;
}

}  // namespace

extern const named_bias alibi_bias_decl;
const named_bias alibi_bias_decl = {
    .check = &alibi_check,
    .term_f32 = &alibi_term<float>,
    .term_f64 = &alibi_term<double>,
    .case_draw = &alibi_case_draw,
};

}  // namespace posenc::detail
