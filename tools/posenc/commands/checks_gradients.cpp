// Check group "gradients" (not run by default; `posenc check --gradients`): the model ops case
// table's check list (include/posenc/verify/ops_cases.hpp): finite-difference gradient checks in
// double for every op of the lab's transformer and for the whole model with each position scheme
// (tolerance derived in include/posenc/verify/gradcheck.hpp), and the matmul and GELU fast paths
// against their references (bounds derived in ops_cases.hpp).
#include "cli.hpp"
#include "posenc/verify/gradcheck.hpp"

namespace {
const bool registered_checks_gradients =
    posenc::cli::register_check_group(80, "gradients", false, posenc::model::gradient_checks);
}
