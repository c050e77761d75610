// Llama 4's attention temperature tuning (Meta 2025, "The Llama 4 herd"; transformers'
// Llama4TextAttention, attn_temperature_tuning on the NoPE layers) as the engine's hook 1:
// q' = s(qpos) q with s(p) = log(floor((p + 1) / floor_scale) + 1) * attn_scale + 1, k' = k.
// A diagonal map, so its transpose (the backward, dq = s(qpos) dq') is itself.
#include <cmath>

#include "hooks.hpp"
#include "posenc/core/error.hpp"

namespace posenc {

double attention_temperature_scale(const attention_temperature& t, int64_t pos) {
  return std::log(std::floor((static_cast<double>(pos) + 1.0) / t.floor_scale) + 1.0) *
             t.attn_scale +
         1.0;
}

namespace detail {
namespace {

class temperature_transform final : public qk_transform {
 public:
  explicit temperature_transform(const attention_temperature& t) : t_(t) {}
  void apply(std::span<const int64_t> pos, float* x, int64_t n, int64_t H, int64_t D, bool key,
             bool) const override {
    scale(pos, x, n, H * D, key);
  }
  void apply(std::span<const int64_t> pos, double* x, int64_t n, int64_t H, int64_t D, bool key,
             bool) const override {
    scale(pos, x, n, H * D, key);
  }

 private:
  // x (n, H * D): row t times s(pos_t), the scale rounded once to the element type; keys are
  // left as they are.
  template <typename Real>
  void scale(std::span<const int64_t> pos, Real* x, int64_t n, int64_t row, bool key) const {
    if (key) return;
    for (int64_t t = 0; t < n; ++t) {
      const Real s = static_cast<Real>(attention_temperature_scale(t_, pos[t]));
      if (s == Real(1)) continue;
      Real* r = x + t * row;
      for (int64_t d = 0; d < row; ++d) r[d] *= s;
    }
  }
  attention_temperature t_;
};

}  // namespace

template <typename Real>
void add_temperature_terms(const attention_params<Real>& p, const attention_plan&,
                           const attention_grads<Real>*, engine_terms<Real>& t) {
  const attention_temperature& a = p.pos.temperature;
  if (a.floor_scale == 0 && a.attn_scale == 0) return;
  if (!std::isfinite(a.floor_scale) || a.floor_scale <= 0)
    fail("pos.temperature.floor_scale must be finite and > 0, got {}", a.floor_scale);
  if (!std::isfinite(a.attn_scale) || a.attn_scale < 0)
    fail("pos.temperature.attn_scale must be finite and >= 0, got {}", a.attn_scale);
  if (t.transform)
    fail(
        "attention: pos.temperature and pos.rope are both on; at most one q/k transform is "
        "allowed (Llama 4 tunes the temperature on its NoPE layers only)");
  t.transform = std::make_unique<temperature_transform>(a);
  // Keys are not transformed, so keys from a cache need nothing either.
  t.transform->keys_transformed = true;
}
POSENC_INSTANTIATE_TERMS(temperature)

}  // namespace detail
}  // namespace posenc
