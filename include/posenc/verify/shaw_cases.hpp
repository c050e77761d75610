// posenc/verify/shaw_cases.hpp: the Shaw family's one case table (the single-head relative
// key and value ops of shaw.hpp, forward and backward).
//
// The family has no separate fast path: shaw_scores, shaw_values and their backwards are the
// reference (double accumulation), instantiated for float and double; the fused Shaw path of the
// attention engine is checked against them by the attention case table
// (include/posenc/verify/attention_cases.hpp). So check mode compares the float32
// instantiation, the one the models run, with the double one on the same float-valued inputs,
// and grad mode checks the double backwards against finite differences.
//
// A case is a shape (T queries, S keys, clip K, head dim D), its positions (drawn below
// pos_range, plus pos_offset) and a seed; build() draws its inputs. The same cases feed `posenc
// check --group shaw` (check_cases, after the property checks of shaw_checks()) and ctest
// (full_cases: tests/test_shaw.cpp), through one function per mode, each returning a
// check_result built with measured_check (max_error the worst ratio |error| / tol over every
// compared entry, tolerance 1). There is no bench case: nothing here is a kernel worth timing
// (the engine's Shaw cases are).
//   check_case  float32 scores, values and both backwards (every gradient) against the float64
//               ones; and a second backward call doubles every float64 gradient bit for bit
//               (gradients accumulate)
//   grad_case   the float64 backwards against central differences of
//               Ls = sum_ij scores_ij Gs_ij (in q, k, a^K) and Lo = sum_id out_id Go_id (in p,
//               v, a^V), every entry
//
// ---- check mode: one rounding (derived). Both instantiations accumulate every output and
//   gradient entry in double, in the same order, from the same (float-valued) inputs: the double
//   sums are identical, and the float entry is the double one rounded once to float (gradients
//   start from zero, 0 + s is exact): |f - d| <= 2^-24 |d|, so tol = 2^-24 |d| (d = 0 gives f =
//   0).
// ---- grad mode (derived; u = 2^-53, eps = 2^-10). Ls is linear in each single entry of q, k and
//   a^K, Lo in each entry of p, v and a^V, so the central difference has no truncation error.
//   A loss sums n_L = inner + outer + 4 rounded terms (scores: D-term dot products, the
//   k + a^K add, the scale, then T S terms; outputs: S-term sums, the v + a^V add, then T D
//   terms): |L~ - L| <= n_L u Labs, Labs the loss of the absolute values at |x| + eps (it bounds
//   every term at both perturbed points); the difference of two such losses over 2 eps errs by
//   <= n_L u Labs / eps. The step x +- eps rounds (u (|x| + eps) each), which moves the quotient
//   by <= gabs_e u (|x_e| + eps) / eps, gabs_e the backward of the absolute values (it bounds
//   |dL/dx_e| and the sum of the terms of the analytic entry). The analytic entry sums at most
//   T S + D terms in double: <= (T S + D + 4) u gabs_e. So
//     tol_e = n_L u Labs / eps + gabs_e u ((|x_e| + eps) / eps + T S + D + 4).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "posenc/core/check.hpp"
#include "posenc/encodings/shaw.hpp"

namespace posenc::shaw_cases {

// What a case is run for (bit set).
enum pass : unsigned { check = 1, grad = 2 };

struct spec {
  int64_t T = 1, S = 1, K = 0, D = 1;
  int64_t pos_range = 0;   // positions drawn below this; 0: 4 K + 6 (clipped and unclipped pairs)
  int64_t pos_offset = 0;  // added to every position (far from the origin)
  double scale = 0;        // 0: 1 / sqrt(D)
  uint64_t seed = 0;
  unsigned passes = check | grad;
  std::string group{};  // the list's section (a ctest selects its cases by group)
  std::string name{};   // unique within its list
};

// Every field, for messages: "T=4 S=6 K=2 D=3 positions below 14 + 0 scale 0.577 seed 4062".
std::string describe(const spec& c);

// Everything one case owns, drawn from rng(seed) in this order: qpos, kpos, q, k, a^K, v, a^V,
// probs, Gs, Go (all N(0, 1); probs are any weights, the ops do not need softmax rows).
struct fixture {
  std::vector<int64_t> qpos, kpos;   // (T,), (S,)
  std::vector<double> q, k, ak;      // (T, D), (S, D), (2K+1, D)
  std::vector<double> v, av, probs;  // (S, D), (2K+1, D), (T, S)
  std::vector<double> gs, go;        // (T, S), (T, D): the loss weights
  double scale = 0;
  shaw_problem problem(const spec& c) const { return {qpos, kpos, c.K, c.D}; }
};
void build(fixture& fx, const spec& c);

check_result check_case(const spec& c);  // group "shaw", name c.name
check_result grad_case(const spec& c);   // group "shaw", name c.name + "/grad"
// Every mode of c.passes, in order.
std::vector<check_result> run_case(const spec& c);

// The small list of `posenc check --group shaw` (milliseconds): K = 0, clipped and unclipped
// pairs, head dims 1, 24 and 59, positions near 2^45, both modes.
const std::vector<spec>& check_cases();
// Everything ctest covers (tests/test_shaw.cpp), by group: grad (the finite-difference shapes
// (T, S, K, D) = (4, 6, 2, 3), (1, 9, 0, 5), (7, 3, 4, 8), (3, 5, 1, 1)), float32 (awkward
// shapes T, S in 1, 3, 17, 33, 129; D in 1, 24, 59, 80, 96; K in 0, 1, 5, 16; positions near
// 2^45).
const std::vector<spec>& full_cases();

}  // namespace posenc::shaw_cases
