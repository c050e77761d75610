// Registers the RoPE property checks (posenc::rope_checks) with `posenc check` as group "rope".
#include "cli.hpp"
#include "posenc/encodings/rope.hpp"
#include "posenc/verify/checks.hpp"

namespace {
const bool registered_rope =
    posenc::cli::register_check_group(30, "rope", true, [] { return posenc::rope_checks(); });
}  // namespace
