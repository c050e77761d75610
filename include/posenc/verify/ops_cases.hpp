// posenc/verify/ops_cases.hpp: the lab model's ops family's one case table (ops.hpp: matmuls,
// linear, norms, GELU, embedding, cross-entropy; and the whole model per position scheme).
//
// A case is an op, its shape and a seed (and, for the whole model, a scheme and a norm). The
// same cases feed `posenc check --gradients` (check_cases, group "gradients"), ctest
// (full_cases: tests/test_model_grad.cpp) and `posenc bench` (perf_cases:
// tools/posenc/bench/bench_model.cpp), through one function per mode, each returning a
// check_result built with measured_check:
//   check_case  a fast path against its plain reference, float32 and/or float64:
//                 matmul_nn / _nt / _tn  the blocked, register-tiled, threaded kernels against a
//                                        plain triple loop in long double (max_error the worst
//                                        |c - ref| / tol, tolerance 1)
//                 gelu                   the Highway kernels (forward, and the backward
//                                        accumulating into du = 0.25) against the formula in long
//                                        double with std::tanh (worst |err| / tol, tolerance 1)
//                 model_float            the float transformer's loss against the double one on
//                                        the same parameters, every scheme (relative difference)
//               The other ops have no separate fast path: their single implementation, run in
//               double, is checked in grad mode only.
//   grad_case   the backward against central finite differences in double (gradcheck.hpp:
//               finite_difference_error, h = 1e-6, error normalised per tensor by max(max |g|,
//               1e-3), tolerance gradcheck_tolerance = 1e-5, derivation there): linear, layernorm,
//               rmsnorm, gelu, embedding (a repeated index), cross_entropy (an unscored row), the
//               whole model (every parameter); and matmul_adjoint, the identities <A B, C> =
//               <B, A^T C> = <A, C B^T> of the three matmuls (their backwards are each other),
//               relative to sum |A_ik B_kj C_ij| against 2 gamma_n, n = max(K + M N, M + K N,
//               N + M K) + 1 (each side: an inner sum, then an outer dot, in double).
//
// ---- matmul bound (derived; u_T the unit roundoff of the element type). c_ij = c0_ij (when
//   accumulating) + sum_k a_ik b_kj: K products and K adds, in any association (the kernels'
//   blocked and 8-way split sums included), err by <= gamma_{K+1}(u_T) mag_ij, gamma_n = n u /
//   (1 - n u), mag_ij = |c0_ij| + sum_k |a_ik| |b_kj|; the long double reference errs by
//   <= gamma_{K+1}(2^-64) mag_ij. tol_ij = (gamma_{K+1}(u_T) + gamma_{K+1}(2^-64)) mag_ij +
//   2^-1074.
// ---- GELU bound (derived; u the element type's unit roundoff): z carries <= 5u relative
//   error and |d tanh/dz| z <= 0.45, so with Tanh's own error of a few ulp |t - tanh| <= 8u;
//   y = 0.5 x (1 + t) adds 3 roundings: |y - y*| <= 0.5 |x| (8u + 2 * 3u) <= 8u |x|. The
//   derivative has t in two places and x^2 terms: |g - g*| <= 32u (1 + x^2), times |dy|, plus
//   the accumulating add (<= u |du| <= 2u here). A wrong coefficient or sign is O(0.1).
// ---- model_float: two layers of width 8 in float, each op rounding at 2^-24 ~ 6e-8 relative;
//   about 30 dependent ops (norms, 3 matmuls per block, softmax, cross-entropy) amplify this to
//   <~ 30 * 6e-8 * condition (<~ 10) ~ 2e-5 in the loss: tolerance 1e-4.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "posenc/core/check.hpp"
#include "posenc/model/transformer.hpp"

namespace posenc::model::ops_cases {

enum class op {
  matmul_nn,
  matmul_nt,
  matmul_tn,
  gelu,
  linear,
  layernorm,
  rmsnorm,
  embedding,
  cross_entropy,
  matmul_adjoint,
  model,
  model_float
};
const char* name(op o);

// What a case is run for (bit set).
enum pass : unsigned { check = 1, grad = 2 };
// Element types check_case runs a case in (bit set).
enum dtype_bits : unsigned { f32 = 1, f64 = 2 };

struct spec {
  op o = op::matmul_nn;
  // matmul_*, matmul_adjoint: c (M, N) from a and b over K; linear: n = M, in = K, out = N;
  // layernorm, rmsnorm: n = M rows of N channels; gelu: N elements; embedding: M indices into K
  // rows of N channels; cross_entropy: M rows of N classes.
  int64_t M = 1, K = 1, N = 1;
  int64_t pad = 0;          // matmul_*: every leading dimension is the row length + pad
  bool accumulate = false;  // matmul_*: c (+)= with c0 ~ N(0, 1)
  pos_scheme scheme = pos_scheme::nope;   // model
  norm_kind norm = norm_kind::layernorm;  // model
  uint64_t seed = 0;
  unsigned passes = check;
  unsigned dtypes = f32 | f64;
  std::string group{};  // the list's section (a ctest selects its cases by group)
  std::string name{};   // unique within its list; the bench case name for perf_cases
};

// Every field that matters for the op, for messages.
std::string describe(const spec& c);

check_result check_case(const spec& c);  // group "gradients", name c.name
check_result grad_case(const spec& c);   // group "gradients", name c.name
// Every mode of c.passes, in order.
std::vector<check_result> run_case(const spec& c);

// The list of `posenc check --gradients` (a few seconds: the whole-model checks dominate): every
// op in grad mode (names linear, layernorm, rmsnorm, gelu, embedding, cross_entropy,
// matmul_adjoint, model_<scheme>[_rmsnorm] for every scheme and both norms), float_vs_double,
// and the fast paths in check mode on awkward shapes.
const std::vector<spec>& check_cases();
// Everything ctest covers beyond check_cases, by group: matmul (M in 1, 3, 4, 17; K in 1, 59,
// 300; N in 1, 16, 37, 129, strided and accumulating, float32 and float64), gelu (lengths 1, 3,
// 7, 8, 9, 15, 17, 100 over [-8, 8]), model (every scheme with RMSNorm from another seed).
const std::vector<spec>& full_cases();
// The shapes of `posenc bench`, named as its cases: model/matmul_nn/M=2048/K=64/N=256 (the lab
// MLP's up projection at 32 sequences of 64 tokens, float32) and model/gelu/n=524288 (its
// activation). Validated before timing by check_case on the case itself.
const std::vector<spec>& perf_cases();
// The perf case at the reduced size of `posenc bench --quick` (M = 64; n = 4096).
spec perf_quick(const spec& c);

}  // namespace posenc::model::ops_cases
