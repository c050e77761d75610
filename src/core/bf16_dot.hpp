// The bfloat16 block product of attention_products::bf16 (src/core/bf16_dot.cpp): vdpbf16ps
// (AVX512_BF16), written with intrinsics because Highway 1.0 has no bfloat16 dot product.
//
// Operands are bfloat16 arrays read in pairs (elements 2t and 2t + 1; strides count pairs): each
// float32 lane of vdpbf16ps multiplies
// one pair of A by the same lane's pair of B and adds both products to its accumulator. A
// bfloat16 product is exact in float32 (8 + 8 significant bits), so each pair adds two exact
// products to the float32 sum, rounding after each (Intel SDM, VDPBF16PS: odd element first,
// round to nearest even; denormal inputs and outputs are flushed to zero).
#pragma once

#include <cstdint>

namespace posenc::detail {

// True when this CPU executes vdpbf16ps and vcvtneps2bf16 (AVX512_BF16 with AVX512F and BW).
bool bf16_dot_cpu();

// C(rows x ncols) = post * A . B (beta == nullptr) or beta_r * C + A . B, over K2 pairs (a row
// with beta_r = 0 takes C = A . B without reading C, which may then hold anything):
// A row r at pair A + r * lda (K2 pairs), B pair-row kk at pair B + kk * ldb (ncols pairs: lane
// n holds B(2kk, n), B(2kk + 1, n)), C row r at C + r * ldc. ncols a multiple of 16. Register
// blocks of 6 rows x 4 vectors of 16 lanes (24 accumulators: latency x 2 ports with room for the 4
// B loads and the A broadcast), then 4, 2 and 1 rows and 2 and 1 vectors. Each output accumulates
// kk = 0 .. K2-1 in order: the bits do not depend on rows, blocking or threads. Only when
// bf16_dot_cpu().
void bf16_gemm(int64_t rows, int64_t ncols, const uint16_t* A, int64_t lda, const uint16_t* B,
               int64_t ldb, float* C, int64_t ldc, int64_t K2, const float* beta, float post);

// dst[0, n) = src[0, n) rounded to bfloat16 (vcvtneps2bf16: to nearest even, denormals to
// zero; NaN stays NaN). Only when bf16_dot_cpu().
void bf16_round(const float* src, uint16_t* dst, int64_t n);

// The bfloat16 peak probe's loop (posenc::measure_bf16_dot_peak), once, on the calling thread:
// kBf16DotChains independent 16-lane accumulators, each updated `iters` times by vdpbf16ps with
// pairs (2^-10, 2^-10) . (2^-10, 2^-10), i.e. += 2^-19 per lane (exact far beyond any count the
// probe runs). Returns the sum of every lane. Only when bf16_dot_cpu().
inline constexpr int kBf16DotChains = 16;
float bf16_dot_chains(int64_t iters);

}  // namespace posenc::detail
