// Shaw et al. (2018) relative positions: a^K in the scores (eq. 4) and a^V in the values
// (eq. 3), tables (2K+1, D) per layer shared by the heads.
#include "hooks.hpp"
#include "posenc/core/error.hpp"

namespace posenc::detail {
namespace {

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
POSENC_INSTANTIATE_HOOK(shaw)

}  // namespace posenc::detail
