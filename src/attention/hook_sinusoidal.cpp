// Sinusoidal positions at the input: x_0 = E[token] + a PE(pos) (Vaswani et al. 2017, sec. 3.5;
// interleaved sin/cos, base 10000, denominator d_model), no parameters.
#include <vector>

#include "hooks.hpp"
#include "posenc/core/error.hpp"
#include "posenc/encodings/sinusoidal.hpp"

namespace posenc::detail {
namespace {

template <typename S>
class sinusoidal_hook final : public position_hook<S> {
 public:
  sinusoidal_hook(double amplitude, int64_t C) : a_(amplitude), C_(C) {}
  pos_scheme scheme() const override { return pos_scheme::sinusoidal; }
  void input_forward(std::span<const int64_t> pos, const S* const*, S* x) const override {
    std::vector<double> tab(pos.size() * C_);
    sinusoidal_table(
        sinusoidal_params{C_, 10000.0, sin_layout::interleaved, sin_denominator::width}, pos,
        std::span<double>(tab));
    for (size_t i = 0; i < tab.size(); ++i) x[i] += static_cast<S>(a_ * tab[i]);
  }

 private:
  double a_;
  int64_t C_;
};

}  // namespace

template <typename S>
std::unique_ptr<position_hook<S>> make_sinusoidal_hook(const position_options& o,
                                                       const position_shape& shape) {
  if (shape.d_model % 2 != 0) fail("sinusoidal needs an even d_model, got {}", shape.d_model);
  if (!std::isfinite(o.input_amplitude))
    fail("sinusoidal input amplitude must be finite, got {}", o.input_amplitude);
  return std::make_unique<sinusoidal_hook<S>>(o.input_amplitude, shape.d_model);
}

// What the declaration of sinusoidal points at (schemes.cpp; hooks.hpp, scheme_impl).
extern const scheme_impl sinusoidal_impl;
const scheme_impl sinusoidal_impl = {POSENC_BOTH(make_sinusoidal_hook)};

}  // namespace posenc::detail
