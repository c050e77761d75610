// CoPE (Golovneva et al. 2024): validation of the engine's CoPE member (its path is
// attention_cope.cpp: positions depend on q and k, so it is no q/k transform and no score bias)
// and the model's hook: one (npos, D) embedding table per layer, shared by the heads as in the
// paper.
#include <cmath>

#include "hooks.hpp"
#include "posenc/core/error.hpp"

namespace posenc::detail {
namespace {

template <typename S>
class cope_hook final : public position_hook<S> {
 public:
  cope_hook(int64_t npos, int64_t D) : P_(npos), D_(D) {}
  pos_scheme scheme() const override { return pos_scheme::cope; }
  std::vector<position_tensor> tensors() const override { return {{"cope", P_, D_, true, false}}; }
  attention_position<S> attention(const S* const* t) const override {
    attention_position<S> p;
    p.cope = {P_, std::span<const S>(t[0], P_ * D_)};
    return p;
  }
  void bind_grads(S* const* dt, attention_grads<S>& g) const override { g.dcope = dt[0]; }
  std::vector<int> attention_grad_tensors() const override { return {0}; }

 private:
  int64_t P_, D_;
};

}  // namespace

template <typename S>
std::unique_ptr<position_hook<S>> make_cope_hook(const position_options& o,
                                                 const position_shape& shape) {
  if (o.cope_npos < 1 || o.cope_npos > (int64_t(1) << 20))
    fail("cope_npos must be in [1, 2^20], got {}", o.cope_npos);
  return std::make_unique<cope_hook<S>>(o.cope_npos, shape.d_model / shape.n_heads);
}

template <typename Real>
void add_cope_terms(const attention_params<Real>& p, const attention_plan&,
                    const attention_grads<Real>* g, engine_terms<Real>&) {
  const auto& c = p.pos.cope;
  if (!p.pos.has_cope()) {
    if (g && g->dcope)
      fail(
          "attention backward: dcope was requested but CoPE is off (pos.cope.emb is "
          "empty)");
    return;
  }
  if (p.kv != kv_storage::f32)
    fail(
        "attention: CoPE runs its own double path and needs float32 or float64 k and v, got kv = "
        "{}",
        name(p.kv));
  if (p.q_storage != kv_storage::f32)
    fail(
        "attention: CoPE runs its own double path and needs float32 or float64 q, got q_storage "
        "= {}",
        name(p.q_storage));
  if ((c.npos < 1) || (c.npos > (int64_t(1) << 20)))
    fail("cope npos must be in [1, 2^20], got {}", c.npos);
  if (static_cast<int64_t>(c.emb.size()) != c.npos * p.D)
    fail("cope emb must have shape (npos, D) = ({}, {}), i.e. {} values, got {}", c.npos, p.D,
         c.npos * p.D, c.emb.size());
  for (size_t x = 0; x < c.emb.size(); ++x)
    if (!std::isfinite(double(c.emb[x])))
      fail("cope emb must be finite, got {} at ({}, {})", double(c.emb[x]), x / p.D, x % p.D);
  if (!p.causal)
    fail(
        "cope needs causal attention (causal = true): its positions count the keys up to the "
        "query (Golovneva et al. 2024)");
  // No other scheme is on: make_engine_terms checked the declarations' rule (schemes.hpp)
  // before this hook runs.
}

// What the declaration of cope points at (schemes.cpp; hooks.hpp, scheme_impl).
POSENC_SCHEME_ON(cope, p.has_cope())
extern const scheme_impl cope_impl;
const scheme_impl cope_impl = {POSENC_BOTH(cope_on), POSENC_BOTH(add_cope_terms), POSENC_NONE,
                               POSENC_BOTH(make_cope_hook)};

}  // namespace posenc::detail
