// Registers the attention property checks (src/verify/attention_checks.cpp) with
// `posenc check` as group "attention".
#include "cli.hpp"
#include "posenc/attention/attention.hpp"
#include "posenc/verify/checks.hpp"

namespace {
const bool registered_checks_attention = posenc::cli::register_check_group(
    50, "attention", true, [] { return posenc::attention_checks(); });
}  // namespace
