// posenc/verify/learned_cases.hpp: the learned table family's one case table (lookup,
// add_positions and the lookup's backward).
//
// The family has no separate fast path: learned_lookup, add_positions and
// learned_lookup_backward are the only implementations (a row copy, an add and a scatter-add).
// So check mode compares them with the formulas of learned.hpp written out here in the plainest
// form, and grad mode checks the backward against finite differences. There is no bench case: a
// row copy is not a kernel worth timing.
//
// A case is a table shape (rows, width), a number of positions N (drawn below rows, so repeats
// occur; explicit when given) and a seed; the table is learned_init(rows, width, seed, 1). The
// same cases feed `posenc check --group learned` (check_cases, after the property checks of
// learned_checks()) and ctest (full_cases: tests/test_learned.cpp), through one function per
// mode, each returning a check_result built with measured_check:
//   check_case  learned_lookup equals P[pos[n], :] and add_positions equals float(E + P[pos[n],
//               :]) (out of place and in place) bit for bit; learned_lookup_backward (into a
//               gradient that starts at G0 ~ N(0, 1)) within its float accumulation bound of the
//               exact sum G0 + sum_{n: pos[n] = r} G[n, :] in double. max_error is the worst
//               ratio |error| / tol (exact parts: infinity on any difference), tolerance 1
//   grad_case   learned_lookup_backward against central differences in double of
//               L(P) = sum_{n,c} learned_lookup(P)[n, c] G[n, c], every table entry; max_error the
//               worst |analytic - fd| / tol_e, tolerance 1
//
// ---- backward bound (derived; u_f = 2^-24): an entry adds its k terms to the float gradient
//   one at a time, each add rounding once (by <= u_f |partial sum| <= u_f (|G0| + sum |terms|)):
//   |float - exact| <= gamma_k (|G0| + sum |terms|), gamma_k = k u_f / (1 - k u_f).
// ---- grad mode (derived; u = 2^-53): the table is rounded to a 2^-10 grid and the step is
//   eps = 2^-3, so P +- eps is exact in float and L is linear in each entry: no truncation
//   error. L sums n = N width exact products (float x float fits in double) with error
//   <= n u Labs, Labs = sum (|P| + eps) |G| (both perturbed points): |fd - dL/dP_e| <=
//   n u Labs / eps. The analytic entry accumulates its k_e terms in float from 0:
//   <= gamma_{k_e} gabs_e, gabs_e = sum |G| over the positions that read row e's entry. So
//     tol_e = n u Labs / eps + gamma_{k_e} gabs_e (+ 2^-1074, so an entry no position reads
//     must be exactly 0 on both sides).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "posenc/core/check.hpp"
#include "posenc/encodings/learned.hpp"

namespace posenc::learned_cases {

// What a case is run for (bit set).
enum pass : unsigned { check = 1, grad = 2 };

struct spec {
  int64_t rows = 1, width = 1;
  int64_t N = 1;                   // positions, drawn below rows from rng(seed)
  std::vector<int64_t> positions;  // explicit (size N) when given
  uint64_t seed = 0;
  unsigned passes = check | grad;
  std::string group{};  // the list's section (a ctest selects its cases by group)
  std::string name{};   // unique within its list
};

// Every field, for messages: "rows=10 width=3 N=4 (given) seed=5".
std::string describe(const spec& c);

// Everything one case owns, drawn from rng(seed ^ 0x1EA) in this order after the table:
// positions (unless given), E, G, G0 (all N(0, 1) rounded to float).
struct fixture {
  learned_table t;              // learned_init(rows, width, seed, 1)
  std::vector<int64_t> pos;     // (N,)
  std::vector<float> e, g, g0;  // (N, width), (N, width), (rows, width)
};
void build(fixture& fx, const spec& c);

check_result check_case(const spec& c);  // group "learned", name c.name
check_result grad_case(const spec& c);   // group "learned", name c.name + "/grad"
// Every mode of c.passes, in order.
std::vector<check_result> run_case(const spec& c);

// The small list of `posenc check --group learned` (milliseconds): one row, heavy repeats, an
// awkward width, both modes.
const std::vector<spec>& check_cases();
// Everything ctest covers (tests/test_learned.cpp): tables (rows, width) from (1, 1) to
// (1024, 59) and (512, 64), N from 1 to 1000 with repeated positions, both modes.
const std::vector<spec>& full_cases();

}  // namespace posenc::learned_cases
