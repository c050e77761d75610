// posenc/verify/gradcheck.hpp: finite-difference gradient checks in double for every op of the
// lab's transformer and for the whole model with each position scheme (`posenc check
// --gradients`, tests/test_model_grad.cpp).
//
// Method: central differences g_fd = (f(x + h e_i) - f(x - h e_i)) / 2h with h = 1e-6, element
// by element, against the analytic backward; f is a scalar loss (<y, w> for a fixed random w,
// or the model's cross-entropy). Error of one element, normalised per tensor:
//   e = |g_fd - g| / max(max_i |g_i|, 1e-3).
// Bound: rounding in f contributes <= 4 eps |f| / 2h ~ 4 * 1.1e-16 * 3 / 2e-6 ~ 7e-10, the
// truncation h^2 |f'''| / 6 ~ 1.7e-13 |f'''| (<= 2e-10 for |f'''| <= 1e3), so |g_fd - g| <~
// 1e-9 and e <~ 1e-6 with the 1e-3 floor; the checks use tolerance 1e-5. A missing or wrong
// term shows up as e of order 1e-2..1.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "posenc/core/check.hpp"
#include "posenc/model/transformer.hpp"

namespace posenc::model {

inline constexpr double gradcheck_step = 1e-6;
inline constexpr double gradcheck_floor = 1e-3;
inline constexpr double gradcheck_tolerance = 1e-5;

// Max normalised error (see above) between central differences of f with respect to x and
// `analytic` (same size as x). f reads x; x is restored on return.
double finite_difference_error(std::vector<double>& x, const std::function<double()>& f,
                               const std::vector<double>& analytic);

// The tiny model used by the whole-model checks: V = 7, C = 8, H = 2, L = 2, F = 12, T5 with
// 8 buckets / max distance 16, Shaw clip 2, learned table of 16 rows.
model_config gradcheck_model_config(pos_scheme s, norm_kind n);
// The fixed batch of those checks: B = 2, T = 5, positions {0,1,2,3,4} and {1,3,4,8,12} (so
// relative offsets reach several T5 buckets and exceed the Shaw clip), some targets unscored.
batch gradcheck_batch();

// Whole-model check: largest per-tensor normalised error over every parameter of a
// transformer<double> initialised from `seed` with init_std 0.3 (so attention is far from
// uniform and every path carries gradient).
double model_gradient_error(const model_config& c, uint64_t seed);

// Group "gradients": the model ops case table's check list (include/posenc/verify/ops_cases.hpp)
// on one thread: linear, LayerNorm, RMSNorm, GELU, embedding, cross-entropy, the matmul adjoint
// identities and the whole model for every scheme and both norms in grad mode, float-vs-double
// agreement of the forward, and the matmul and GELU fast paths against their references.
std::vector<check_result> gradient_checks();

}  // namespace posenc::model
