// Forgetting Attention (Lin et al. 2025): a score bias reached by name whose parameter is a
// tensor, the log forget gates `fox` (S, Hq) of the key tokens, with its gradient; the formula
// and the gradient's running sums are the family file's (posenc/encodings/forgetting.hpp).
// The bias is of token indices (score_bias::by_token): query i is token S - T + i.
#include <cmath>

#include "attention_plan.hpp"
#include "engine_terms.hpp"
#include "named_schemes.hpp"
#include "posenc/attention/position_hook.hpp"
#include "posenc/core/error.hpp"
#include "posenc/encodings/forgetting.hpp"

namespace posenc::detail {
namespace {

// c (Hq, S) in double, computed once per call; a row adds c_qt - c_kt rounded once to Real (the
// bits of value()), and the gradient accumulates dc, whose reverse running sum store_grad
// rounds into the gates' gradient.
template <typename Real>
class fox_bias_term final : public score_bias<Real> {
 public:
  explicit fox_bias_term(const named_call<Real>& c)
      : S_(c.S), Hq_(c.Hq), dgates_(c.grads[0]), c_(fox_running_sums(c.tensors[0], c.S, c.Hq)) {
    if (c.T > c.S)
      fail(
          "fox: the queries must be the last T of the S key tokens (T = {} <= S = {}): the gates "
          "are the key tokens'",
          c.T, c.S);
    this->by_token = true;
  }
  double value(int64_t h, int64_t qt, int64_t kt) const override {
    return fox_bias(c_, S_, h, qt, kt);
  }
  void add_row(int64_t h, int64_t qt, const int64_t* kt, int64_t n, bool,
               Real* row) const override {
    if (n <= 0) return;
    const double cq = c_[h * S_ + qt];
    const double* ck = c_.data() + h * S_ + kt[0];  // by_token: kt[j] = kt[0] + j
    if constexpr (std::is_same_v<Real, float>)
      add_diff_row_f32(row, cq, ck, n);  // the loop below in vectors, its bits
    else
      for (int64_t j = 0; j < n; ++j) row[j] += static_cast<Real>(cq - ck[j]);
  }
  int64_t grad_size() const override { return dgates_ ? S_ * Hq_ : 0; }
  void add_grad(int64_t h, int64_t qt, int64_t kt, double ds, double* grad) const override {
    grad[h * S_ + qt] += ds;
    grad[h * S_ + kt] -= ds;
  }
  void grad_row(int64_t h, int64_t qt, const int64_t* kt, int64_t n, const Real* ds,
                double* grad) const override {
    if (n <= 0) return;
    double row = 0;
    double* gk = grad + h * S_ + kt[0];
    for (int64_t j = 0; j < n; ++j) {
      row += double(ds[j]);
      gk[j] -= double(ds[j]);
    }
    grad[h * S_ + qt] += row;
  }
  void store_grad(const double* grad) const override {
    const auto g = fox_gate_grad(std::span<const double>(grad, S_ * Hq_), S_, Hq_);
    for (size_t x = 0; x < g.size(); ++x) dgates_[x] = static_cast<Real>(g[x]);
  }

 private:
  int64_t S_, Hq_;
  Real* dgates_;
  std::vector<double> c_;  // (Hq, S)
};

template <typename Real>
std::unique_ptr<score_bias<Real>> make_term(const named_call<Real>& c) {
  return std::make_unique<fox_bias_term<Real>>(c);
}

// The model's hook: per layer a tensor fox_gate (C + 1, H), rows 0 .. C-1 the weights w and row C
// the bias b of the gate's logits z = x w + b from the layer's normalised input x (the paper's
// f_t = sigmoid(w^T x_t + b), one per head); log f = log sigmoid(z) is the engine's `fox`.
// d log f / dz = sigmoid(-z).
template <typename S>
class fox_hook final : public position_hook<S> {
 public:
  fox_hook(pos_scheme id, int64_t C, int64_t H) : id_(id), C_(C), H_(H) {}
  pos_scheme scheme() const override { return id_; }
  std::vector<position_tensor> tensors() const override {
    return {{"fox_gate", C_ + 1, H_, true, false}};
  }
  attention_position<S> attention(const S* const*) const override {
    attention_position<S> p;
    p.named.push_back({"fox", {}, {named_tensor{"fox", {}, {}, {}}}});
    return p;
  }
  int64_t token_cols() const override { return H_; }
  void token_forward(const S* const* t, const S* x, int64_t N, int64_t C, S* out) const override {
    for (int64_t n = 0; n < N; ++n)
      for (int64_t h = 0; h < H_; ++h)
        out[n * H_ + h] = static_cast<S>(fox_log_gate(logit(t[0], x, n, C, h)));
  }
  void token_backward(const S* const* t, const S* x, const S* dout, int64_t N, int64_t C,
                      S* const* dt, S* dx) const override {
    const S* w = t[0];
    S* dw = dt[0];
    for (int64_t n = 0; n < N; ++n)
      for (int64_t h = 0; h < H_; ++h) {
        const double z = logit(w, x, n, C, h);
        const double dz = double(dout[n * H_ + h]) / (1 + std::exp(z));  // times sigmoid(-z)
        for (int64_t c = 0; c < C; ++c) {
          dw[c * H_ + h] += static_cast<S>(double(x[n * C + c]) * dz);
          dx[n * C + c] += static_cast<S>(dz * double(w[c * H_ + h]));
        }
        dw[C * H_ + h] += static_cast<S>(dz);
      }
  }

 private:
  double logit(const S* w, const S* x, int64_t n, int64_t C, int64_t h) const {
    double z = double(w[C * H_ + h]);
    for (int64_t c = 0; c < C; ++c) z += double(x[n * C + c]) * double(w[c * H_ + h]);
    return z;
  }
  pos_scheme id_;
  int64_t C_, H_;
};

template <typename S>
std::unique_ptr<position_hook<S>> make_hook(pos_scheme id, const position_options&,
                                            const position_shape& shape) {
  return std::make_unique<fox_hook<S>>(id, shape.d_model, shape.n_heads);
}

}  // namespace

extern const named_bias fox_bias_decl;
// Case draws: log sigmoid(1 + 2 z) - 0.01, gates from nearly shut to 0.99 open (log f <= -0.01,
// so that the finite differences' steps of 1e-3 keep every value a log gate). Each pair's bias
// has derivative 1 for the gates strictly between key and query, 0 for the others.
const named_bias fox_bias_decl = {
    .term_f32 = &make_term<float>,
    .term_f64 = &make_term<double>,
    .by_token = true,
    .draw = [](int, double z) { return fox_log_gate(1 + 2 * z) - 0.01; },
    .grad_bound = 1.0,
    .hook_f32 = &make_hook<float>,
    .hook_f64 = &make_hook<double>,
};

}  // namespace posenc::detail
