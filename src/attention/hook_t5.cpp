// T5 relative bias (Raffel et al. 2020, sec. 2.1): causal buckets of kpos - qpos, one learned
// table (buckets, H) shared by every layer.
#include "hooks.hpp"

namespace posenc::detail {
namespace {

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
POSENC_INSTANTIATE_HOOK(t5)

}  // namespace posenc::detail
