// posenc/verify/t5_cases.hpp: the T5 bias family's one case table (the vectorised bucket and
// bias rows of src/encodings/tables_simd.cpp against the scalar bucket and the dense reference,
// and the table gradient against finite differences).
//
// A case is a parameter set (num_buckets, max_distance, direction), a head count, explicit query
// and key positions and a seed (table weights, accumulators, the loss weights of grad mode). The
// same cases feed `posenc check --group t5` (check_cases, after the property checks of
// t5_checks()), ctest (full_cases: tests/test_tables_simd.cpp for check mode,
// tests/test_t5_bias.cpp for grad mode) and `posenc bench` (perf_cases), through one function
// per mode, each returning a check_result built with measured_check:
//   check_case  t5_bucket_row for every query against t5_bucket on every key, and t5_bias_row for
//               every head and query, written and accumulated, against t5_bias_dense: bit for bit
//               (max_error = differing elements, tolerance 0)
//   grad_case   t5_bias_backward against central differences in double of
//               L(W) = sum_{h,i,j} t5_bias_dense(W)[h,i,j] G[h,i,j] (G ~ N(0, 1) rounded to
//               float); max_error is the worst |analytic - fd| / tol over the table's entries
//               (tolerance 1)
//
// ---- check mode: exact. The row's bucket is t5_bucket's own float32 arithmetic folded into
//   thresholds (t5_bucket.hpp: the offset is monotone in n, so the count equals it for every n);
//   a bias entry is a copy of a table entry; the accumulating form adds that float to the
//   accumulator in float, as acc + dense does.
// ---- grad mode (derived; u = 2^-53, u_f = 2^-24). The weights are rounded to a 2^-10 grid and
//   the step is eps = 2^-3, so W +- eps is exact in float and L is linear in each entry: the
//   central difference has no truncation error. L sums n = H T S products of two floats (exact in
//   double) with error <= n u Labs, Labs = sum (|W_b| + eps) |G| (the magnitude at both
//   perturbed points), so |fd - dL/dW_e| <= 2 n u Labs / (2 eps) = n u Labs / eps. The analytic
//   entry sums its m <= T S terms in double (<= m u gabs_e, gabs_e = sum of |G| over the pairs
//   that copied entry e) and rounds once to float (u_f (1 + m u) gabs_e):
//     tol_e = n u Labs / eps + (u_f + 2 n u) gabs_e.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "posenc/core/check.hpp"
#include "posenc/encodings/t5_bias.hpp"

namespace posenc::t5_cases {

// What a case is run for (bit set).
enum pass : unsigned { check = 1, grad = 2 };

struct spec {
  t5_params p{};
  int64_t heads = 1;          // H
  std::vector<int64_t> qpos;  // (T,) queries, |pos| <= 2^62
  std::vector<int64_t> kpos;  // (S,) keys, |pos| <= 2^62 and |kpos - qpos| < 2^63
  uint64_t seed = 0;          // t5_init(p, H, seed, 1), then the accumulators / G
  unsigned passes = check;
  std::string group{};  // the list's section (a ctest selects its cases by group)
  std::string name{};   // unique within its list; the bench case name for perf_cases
};

// Every field, for messages: "num_buckets=32 max_distance=128 causal H=5 T=1 S=700 seed=11".
std::string describe(const spec& c);

// The case's table: t5_init(c.p, c.heads, c.seed, 1.0).
t5_bias_table table(const spec& c);

// check mode (group "t5", name c.name).
check_result check_case(const spec& c);
// grad mode (group "t5", name c.name + "/grad").
check_result grad_case(const spec& c);
// Every mode of c.passes, in order.
std::vector<check_result> run_case(const spec& c);

// The small list of `posenc check --group t5` (milliseconds): T5's defaults in both directions,
// tiny and large tables, offsets near +-2^62, a saturated row, and two finite-difference cases.
const std::vector<spec>& check_cases();
// Everything ctest covers, by group: bucket_row (8 bucket counts x 5 max distances x both
// directions where valid, 207 keys with offsets up to 2^62, queries 0, 5, -77), bias_row (700
// keys across the 256-entry chunk), saturated (rows just past, at and before the last threshold,
// sorted and not), grad (tiny tables with every bucket reached, both directions).
const std::vector<spec>& full_cases();
// The shape of `posenc bench`, named as its case: bias_row/t5/H=32/S=262144 (causal, 32 buckets,
// max distance 128, one query at S - 1 against keys 0 .. S-1, every head). Validated before
// timing by check_case on the case itself (every head, every key).
const std::vector<spec>& perf_cases();
// The perf case at the reduced size of `posenc bench --quick` (S = 4096).
spec perf_quick(const spec& c);

}  // namespace posenc::t5_cases
