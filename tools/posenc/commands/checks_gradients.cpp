// Check group "gradients" (not run by default; `posenc check --gradients`): finite-difference
// gradient checks in double for every op of the lab's transformer and for the whole model with
// each position scheme. See include/posenc/model/gradcheck.hpp for the derivation of the
// tolerance.
#include "cli.hpp"
#include "posenc/model/gradcheck.hpp"

namespace {
const bool registered =
    posenc::cli::register_check_group(80, "gradients", false, posenc::model::gradient_checks);
}
