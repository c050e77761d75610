// iRoPE, Llama 4's layer recipe (Meta 2025, "The Llama 4 herd"): RoPE (Su et al. 2021) on three
// of every four layers, NoPE (Kazemnejad et al. 2023) on the fourth, where the queries get the
// temperature tuning s(pos) = log(floor((pos + 1) / floor_scale) + 1) * attn_scale + 1
// (attention_temperature). Layer l is NoPE when (l + 1) % interval == 0, as transformers'
// no_rope_layers default. Only the engine hook differs by layer; no tensors, no input term.
#include <cmath>

#include "hooks.hpp"
#include "posenc/core/error.hpp"

namespace posenc::detail {
namespace {

template <typename S>
class irope_hook final : public position_hook<S> {
 public:
  irope_hook(rope_freqs f, int64_t interval, attention_temperature t)
      : freqs_(std::move(f)), interval_(interval), temp_(t) {}
  pos_scheme scheme() const override { return pos_scheme::irope; }
  // Without a layer index: the RoPE layers' hook.
  attention_position<S> attention(const S* const* t) const override {
    return layer_attention(0, t);
  }
  attention_position<S> layer_attention(int64_t layer, const S* const*) const override {
    attention_position<S> p;
    if ((layer + 1) % interval_ == 0) {
      if (temp_.on()) p.named.push_back(temperature_scheme(temp_));
    } else {
      p.named.push_back(rope_scheme(freqs_));
    }
    return p;
  }

 private:
  rope_freqs freqs_;
  int64_t interval_;
  attention_temperature temp_;
};

}  // namespace

template <typename S>
std::unique_ptr<position_hook<S>> make_irope_hook(const position_options& o,
                                                  const position_shape& shape) {
  rope_freqs freqs = lab_rope_freqs(o, shape, "irope");
  if (o.irope_interval < 2)
    fail("irope_interval must be >= 2 (1 would make every layer NoPE), got {}", o.irope_interval);
  if (shape.n_layers > 0 && shape.n_layers < o.irope_interval)
    fail(
        "irope with {} layers has no NoPE layer (layer l is NoPE when (l + 1) % {} == 0): use at "
        "least {} layers",
        shape.n_layers, o.irope_interval, o.irope_interval);
  if (!std::isfinite(o.irope_floor_scale) || o.irope_floor_scale < 0)
    fail("irope_floor_scale must be finite and >= 0 (0 = no temperature tuning), got {}",
         o.irope_floor_scale);
  if (!std::isfinite(o.irope_attn_scale) || o.irope_attn_scale < 0)
    fail("irope_attn_scale must be finite and >= 0, got {}", o.irope_attn_scale);
  attention_temperature t;
  if (o.irope_floor_scale > 0) t = {o.irope_floor_scale, o.irope_attn_scale};
  return std::make_unique<irope_hook<S>>(std::move(freqs), o.irope_interval, t);
}

// What the declaration of irope points at (schemes.cpp; hooks.hpp, scheme_impl).
extern const scheme_impl irope_impl;
const scheme_impl irope_impl = {POSENC_BOTH(make_irope_hook)};

}  // namespace posenc::detail
