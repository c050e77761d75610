// Registers the absolute-encoding property checks with `posenc check`: the sinusoidal
// identities of issue 2 section 5 and the learned table's checks.
#include "cli.hpp"
#include "posenc/encodings/learned.hpp"
#include "posenc/encodings/sinusoidal.hpp"
#include "posenc/verify/checks.hpp"

namespace posenc::cli {
namespace {

const bool registered_sinusoidal = register_check_group(10, "sinusoidal", true, sinusoidal_checks);
const bool registered_learned = register_check_group(11, "learned", true, learned_checks);

}  // namespace
}  // namespace posenc::cli
