// Registers the score-bias families' property checks with `posenc check`.
#include "cli.hpp"
#include "posenc/encodings/alibi.hpp"
#include "posenc/encodings/shaw.hpp"
#include "posenc/encodings/t5_bias.hpp"
#include "posenc/verify/checks.hpp"

namespace {
const bool registered_alibi =
    posenc::cli::register_check_group(40, "alibi", true, [] { return posenc::alibi_checks(); });
const bool registered_t5 =
    posenc::cli::register_check_group(41, "t5", true, [] { return posenc::t5_checks(); });
const bool registered_shaw =
    posenc::cli::register_check_group(42, "shaw", true, [] { return posenc::shaw_checks(); });
}  // namespace
