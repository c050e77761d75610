// NoPE: no position information beyond the causal mask (Kazemnejad et al. 2023).
#include "hooks.hpp"

namespace posenc::detail {
namespace {

template <typename S>
class nope_hook final : public position_hook<S> {
 public:
  pos_scheme scheme() const override { return pos_scheme::nope; }
};

}  // namespace

template <typename S>
std::unique_ptr<position_hook<S>> make_nope_hook(const position_options&, const position_shape&) {
  return std::make_unique<nope_hook<S>>();
}

// What the declaration of nope points at (schemes.cpp; hooks.hpp, scheme_impl).
extern const scheme_impl nope_impl;
const scheme_impl nope_impl = {POSENC_BOTH(make_nope_hook)};

}  // namespace posenc::detail
