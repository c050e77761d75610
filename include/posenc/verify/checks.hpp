// posenc/verify/checks.hpp: the property checks of each family, the groups of `posenc check`.
// Like the case tables (include/posenc/*/..._cases.hpp) and the model's gradient checks
// (posenc/verify/gradcheck.hpp), they are verification scaffolding: built into posenc_verify,
// which the CLI and the tests link, not into the installed library (libposenc.a), and not
// installed. Each returns one check_result per property, with how its tolerance was derived.
#pragma once

#include <vector>

#include "posenc/core/check.hpp"

namespace posenc {

// Group "sinusoidal": the properties of the sinusoidal table (the seeds' section 5).
std::vector<check_result> sinusoidal_checks();
// Group "learned": reproducible init, statistics of N(0, 0.02), lookup/backward adjoint
// identity, save/load round trip, corruption detected.
std::vector<check_result> learned_checks();
// Group "rope" (src/verify/rope_checks.cpp gives each derivation).
std::vector<check_result> rope_checks();
// Groups "alibi", "t5" and "shaw".
std::vector<check_result> alibi_checks();
std::vector<check_result> t5_checks();
std::vector<check_result> shaw_checks();
// Group "attention": where order enters attention, measured on the engine
// (src/verify/attention_checks.cpp), then the attention case table's check list.
std::vector<check_result> attention_checks();

}  // namespace posenc
