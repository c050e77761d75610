// RoPE on q and k (Su et al. 2021): the engine's hook 1, half layout, rotary width = head dim,
// exact angles. Its backward is the engine's (the rotation with the sine negated).
#include <cmath>

#include "hooks.hpp"
#include "posenc/core/error.hpp"

namespace posenc::detail {
namespace {

template <typename S>
class rope_hook final : public position_hook<S> {
 public:
  explicit rope_hook(rope_freqs f) : freqs_(std::move(f)) {}
  pos_scheme scheme() const override { return pos_scheme::rope; }
  attention_position<S> attention(const S* const*) const override {
    attention_position<S> p;
    p.rope.freqs = &freqs_;
    p.rope.layout = rope_layout::half;
    p.rope.angle = rope_angle::exact;
    return p;
  }

 private:
  rope_freqs freqs_;
};

}  // namespace

template <typename S>
std::unique_ptr<position_hook<S>> make_rope_hook(const position_options& o,
                                                 const position_shape& shape) {
  const int64_t D = shape.d_model / shape.n_heads;
  if (D % 2 != 0) fail("rope needs an even head dim d_model / n_heads, got {}", D);
  if (!(o.rope_theta > 1) || !std::isfinite(o.rope_theta))
    fail("rope_theta must be finite and > 1, got {}", o.rope_theta);
  rope_config rc;
  rc.head_dim = D;
  rc.rotary_dim = D;
  rc.theta = o.rope_theta;
  return std::make_unique<rope_hook<S>>(rope_frequencies(rc));
}
POSENC_INSTANTIATE_HOOK(rope)

}  // namespace posenc::detail
