// Shaw et al. (2018) relative positions: a^K in the scores (eq. 4) and a^V in the values
// (eq. 3), row clip(kpos - qpos, -K, K) + K of tables (2K+1, D) shared by the heads: the
// engine's hooks 2a and 3; and the model's hook, tables per layer.
#include "hooks.hpp"
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

template <typename S>
class shaw_hook final : public position_hook<S> {
 public:
  shaw_hook(int64_t K, int64_t D) : K_(K), D_(D) {}
  pos_scheme scheme() const override { return pos_scheme::shaw; }
  std::vector<position_tensor> tensors() const override {
    return {{"shaw_k", 2 * K_ + 1, D_, true, false}, {"shaw_v", 2 * K_ + 1, D_, true, false}};
  }
  attention_position<S> attention(const S* const* t) const override {
    attention_position<S> p;
    const size_t n = static_cast<size_t>((2 * K_ + 1) * D_);
    p.shaw = {K_, std::span<const S>(t[0], n), std::span<const S>(t[1], n)};
    return p;
  }
  void bind_grads(S* const* dt, attention_grads<S>& g) const override {
    g.dshaw_keys = dt[0];
    g.dshaw_values = dt[1];
  }
  std::vector<int> attention_grad_tensors() const override { return {0, 1}; }

 private:
  int64_t K_, D_;
};

}  // namespace

template <typename S>
std::unique_ptr<position_hook<S>> make_shaw_hook(const position_options& o,
                                                 const position_shape& shape) {
  if (o.shaw_clip < 0 || o.shaw_clip > 4096)
    fail("shaw_clip must be in [0, 4096], got {}", o.shaw_clip);
  return std::make_unique<shaw_hook<S>>(o.shaw_clip, shape.d_model / shape.n_heads);
}

template <typename Real>
void add_shaw_terms(const attention_params<Real>& p, const attention_plan&,
                    const attention_grads<Real>* g, engine_terms<Real>& t) {
  const attention_shaw<Real>& sh = p.pos.shaw;
  if (!p.pos.has_shaw() && sh.values.empty()) {
    if (g && (g->dshaw_keys || g->dshaw_values))
      fail(
          "attention backward: dshaw_keys/dshaw_values were requested but the Shaw hook is off "
          "(pos.shaw.keys is empty)");
    return;
  }
  const int64_t K = sh.clip;
  if (K < 0 || K > (int64_t{1} << 20)) fail("shaw clip K must be in [0, 2^20], got {}", K);
  const auto want = static_cast<size_t>((2 * K + 1) * p.D);
  if (sh.keys.size() != want)
    fail("shaw keys must have shape (2K+1, D) = ({}, {}), got {} values", 2 * K + 1, p.D,
         sh.keys.size());
  if (sh.values.size() != want)
    fail("shaw values must have shape (2K+1, D) = ({}, {}), got {} values", 2 * K + 1, p.D,
         sh.values.size());
  if (t.relative) fail("attention: two pairs of relative tables are on; at most one is allowed");
  auto r = std::make_unique<shaw_vectors<Real>>(K);
  r->C = 2 * K + 1;
  r->keys = sh.keys.data();
  r->values = sh.values.data();
  if (g) {
    r->dkeys = g->dshaw_keys;
    r->dvalues = g->dshaw_values;
  }
  t.relative = std::move(r);
}

// What the declaration of shaw points at (schemes.cpp; hooks.hpp, scheme_impl).
POSENC_SCHEME_ON(shaw, p.has_shaw())
extern const scheme_impl shaw_impl;
const scheme_impl shaw_impl = {POSENC_BOTH(shaw_on), POSENC_BOTH(add_shaw_terms), POSENC_NONE,
                               POSENC_BOTH(make_shaw_hook)};

}  // namespace posenc::detail

namespace posenc {

attention_shaw<float> attention_shaw_view(const shaw_tables& t) {
  return {t.clip, t.keys, t.values};
}

}  // namespace posenc
