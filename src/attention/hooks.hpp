// src/attention/hooks.hpp (private): one factory per scheme, each defined in its own
// hook_<scheme>.cpp; the registry in position_hook.cpp maps a pos_scheme to its factory.
#pragma once

#include <memory>

#include "posenc/attention/position_hook.hpp"

namespace posenc::detail {

#define POSENC_DECLARE_HOOK(name)                                                 \
  template <typename S>                                                           \
  std::unique_ptr<position_hook<S>> make_##name##_hook(const position_options& o, \
                                                       const position_shape& shape);
POSENC_DECLARE_HOOK(nope)
POSENC_DECLARE_HOOK(sinusoidal)
POSENC_DECLARE_HOOK(learned)
POSENC_DECLARE_HOOK(rope)
POSENC_DECLARE_HOOK(alibi)
POSENC_DECLARE_HOOK(t5)
POSENC_DECLARE_HOOK(shaw)
#undef POSENC_DECLARE_HOOK

// Explicit instantiation of a factory for float and double.
#define POSENC_INSTANTIATE_HOOK(name)                                         \
  template std::unique_ptr<position_hook<float>> make_##name##_hook<float>(   \
      const position_options&, const position_shape&);                        \
  template std::unique_ptr<position_hook<double>> make_##name##_hook<double>( \
      const position_options&, const position_shape&);

}  // namespace posenc::detail
