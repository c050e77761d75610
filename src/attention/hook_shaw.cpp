// Shaw et al. (2018) relative positions: a scheme reached by name whose parameters are the tables
// `shaw_keys` a^K (eq. 4, in the scores) and `shaw_values` a^V (eq. 3, in the values), (C, D)
// each with C = 2K + 1 rows shared by the heads, row clip(kpos - qpos, -K, K) + K, and their
// gradients: the engine's hooks 2a and 3 (relative_vectors); the model's hook, tables per layer.
#include <cmath>

#include "hooks.hpp"
#include "named_schemes.hpp"
#include "posenc/attention/position_hook.hpp"
#include "posenc/core/error.hpp"
#include "posenc/encodings/shaw.hpp"

namespace posenc::detail {
namespace {

template <typename Real>
class shaw_vectors final : public relative_vectors<Real> {
 public:
  explicit shaw_vectors(int64_t K) : K_(K) {}
  int64_t index(int64_t qp, int64_t kp) const override { return shaw_index(qp, kp, K_); }
  void index_row(int64_t qp, const int64_t* kpos, int64_t n, int64_t* c) const override {
    for (int64_t j = 0; j < n; ++j) c[j] = shaw_index(qp, kpos[j], K_);
  }

 private:
  int64_t K_;
};

// The tables of a call (named_call: tensors a^K, a^V; args: shaw_clip), checked: the same odd
// number of rows C = 2K + 1, K as shaw_clip when given, finite values.
template <typename Real>
std::unique_ptr<relative_vectors<Real>> shaw_term(const named_call<Real>& c) {
  const auto rows = [&](size_t x) {
    return c.D > 0 ? static_cast<int64_t>(c.tensors[x].size()) / c.D : 0;
  };
  const int64_t C = rows(0);
  if (rows(1) != C) fail("shaw_values must have the rows of shaw_keys ({}), got {}", C, rows(1));
  if (C % 2 != 1 || C > 2 * (int64_t{1} << 20) + 1)
    fail("shaw_keys must have an odd number of rows C = 2K + 1 (K in [0, 2^20]), got {}", C);
  const int64_t K = (C - 1) / 2;
  if (c.args[0] != -1 && c.args[0] != double(K))
    fail("shaw_clip = {} does not match the tables' {} rows (2K + 1 with K = {})", c.args[0], C, K);
  for (size_t x = 0; x < 2; ++x)
    for (size_t e = 0; e < c.tensors[x].size(); ++e)
      if (!std::isfinite(double(c.tensors[x][e])))
        fail("{} must be finite, got {} at ({}, {})", x == 0 ? "shaw_keys" : "shaw_values",
             double(c.tensors[x][e]), e / c.D, e % c.D);
  auto r = std::make_unique<shaw_vectors<Real>>(K);
  r->C = C;
  r->keys = c.tensors[0].data();
  r->values = c.tensors[1].data();
  r->dkeys = c.grads[0];
  r->dvalues = c.grads[1];
  return r;
}

// The case tables' draws: a^K and a^V of N(0, 1/4) entries, K = shaw_clip (8 unless given; the
// tables run K = 3: case_args), keys first. The tolerances read the tables themselves (|a^K|
// rows, max |a^V|), not a bound on a bias's derivative.
double shaw_case_draw(std::span<const double> args, int64_t, int64_t D, double,
                      const std::function<double()>& normal, std::vector<std::vector<double>>& t) {
  const int64_t K = args[0] >= 0 ? static_cast<int64_t>(args[0]) : 8;
  t.assign(2, std::vector<double>(static_cast<size_t>((2 * K + 1) * D)));
  for (auto& tab : t)
    for (auto& x : tab) x = 0.5 * normal();
  return 0;
}

// The model's hook: tables (2K + 1, D) per layer, "shaw_k" and "shaw_v" (K = shaw_clip among the
// lab's options, 16 by default).
template <typename S>
class shaw_hook final : public position_hook<S> {
 public:
  shaw_hook(pos_scheme id, int64_t K, int64_t D) : id_(id), K_(K), D_(D) {}
  pos_scheme scheme() const override { return id_; }
  std::vector<position_tensor> tensors() const override {
    return {{"shaw_k", 2 * K_ + 1, D_, true, false}, {"shaw_v", 2 * K_ + 1, D_, true, false}};
  }
  attention_position<S> attention(const S* const* t) const override {
    attention_position<S> p;
    p.named.push_back({"shaw", {{"shaw_clip", double(K_)}}});
    for (int x = 0; x < 2; ++x) {
      named_tensor v{x == 0 ? "shaw_keys" : "shaw_values", {2 * K_ + 1, D_}, {}, {}};
      if constexpr (std::is_same_v<S, float>)
        v.f32 = std::span<const float>(t[x], size());
      else
        v.f64 = std::span<const double>(t[x], size());
      p.named.back().tensors.push_back(std::move(v));
    }
    return p;
  }
  void bind_grads(S* const* dt, attention_grads<S>& g) const override {
    g.named.push_back({"shaw_keys", std::span<S>(dt[0], size())});
    g.named.push_back({"shaw_values", std::span<S>(dt[1], size())});
  }
  std::vector<int> attention_grad_tensors() const override { return {0, 1}; }

 private:
  size_t size() const { return static_cast<size_t>((2 * K_ + 1) * D_); }
  pos_scheme id_;
  int64_t K_, D_;
};

template <typename S>
std::unique_ptr<position_hook<S>> shaw_hook_of(pos_scheme id, const position_options& o,
                                               const position_shape& shape) {
  double K = named_option(o, "shaw_clip", -1);
  if (K == -1) K = 16;
  if (!(K >= 0 && K <= 4096 && K == std::floor(K)))
    fail("shaw_clip must be an integer in [0, 4096], got {}", K);
  return std::make_unique<shaw_hook<S>>(id, static_cast<int64_t>(K), shape.d_model / shape.n_heads);
}

}  // namespace

extern const named_bias shaw_tables_decl;
const named_bias shaw_tables_decl = {
    .relative_f32 = &shaw_term<float>,
    .relative_f64 = &shaw_term<double>,
    .case_draw = &shaw_case_draw,
    .case_args = {{"shaw_clip", 3}},
    .hook_f32 = &shaw_hook_of<float>,
    .hook_f64 = &shaw_hook_of<double>,
};

}  // namespace posenc::detail
