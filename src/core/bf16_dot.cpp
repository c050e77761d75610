// vdpbf16ps block products (src/core/bf16_dot.hpp). Compiled for any x86-64 target: the
// functions carry the AVX512_BF16 target themselves and run only where bf16_dot_cpu() says so.
#include "bf16_dot.hpp"

#include <algorithm>
#include <cstring>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define POSENC_HAVE_BF16_DOT 1
#include <immintrin.h>
#define POSENC_BF16_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16")))
#else
#define POSENC_HAVE_BF16_DOT 0
#endif

namespace posenc::detail {

#if POSENC_HAVE_BF16_DOT

bool bf16_dot_cpu() {
  static const bool ok = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                         __builtin_cpu_supports("avx512bf16");
  return ok;
}

namespace {

// One register block: MR rows x NV vectors of 16 float32 lanes.
template <int MR, int NV>
POSENC_BF16_TARGET inline void Micro(const uint16_t* A, int64_t lda, const uint16_t* B, int64_t ldb,
                                     float* C, int64_t ldc, int64_t K2, const float* beta,
                                     float post) {
  __m512 c[MR][NV];
  for (int r = 0; r < MR; ++r)
    for (int v = 0; v < NV; ++v)
      c[r][v] = beta && beta[r] != 0.0f
                    ? _mm512_mul_ps(_mm512_set1_ps(beta[r]), _mm512_loadu_ps(C + r * ldc + v * 16))
                    : _mm512_setzero_ps();
  for (int64_t kk = 0; kk < K2; ++kk) {
    const uint16_t* b = B + 2 * kk * ldb;
    __m512bh bv[NV];
    for (int v = 0; v < NV; ++v) bv[v] = (__m512bh)_mm512_loadu_si512(b + v * 32);
    for (int r = 0; r < MR; ++r) {
      uint32_t pair;
      std::memcpy(&pair, A + 2 * (r * lda + kk), sizeof pair);
      const __m512bh a = (__m512bh)_mm512_set1_epi32(static_cast<int>(pair));
      for (int v = 0; v < NV; ++v) c[r][v] = _mm512_dpbf16_ps(c[r][v], a, bv[v]);
    }
  }
  const __m512 vpost = _mm512_set1_ps(post);
  for (int r = 0; r < MR; ++r)
    for (int v = 0; v < NV; ++v)
      _mm512_storeu_ps(C + r * ldc + v * 16, beta ? c[r][v] : _mm512_mul_ps(vpost, c[r][v]));
}

// Rows in strips of 6, then 4, 2, 1, for one column strip of NV vectors.
template <int NV>
POSENC_BF16_TARGET void Strip(int64_t rows, const uint16_t* A, int64_t lda, const uint16_t* B,
                              int64_t ldb, float* C, int64_t ldc, int64_t K2, const float* beta,
                              float post) {
  int64_t r = 0;
  auto strips = [&](auto mr) POSENC_BF16_TARGET {
    constexpr int MR = decltype(mr)::value;
    for (; r + MR <= rows; r += MR)
      Micro<MR, NV>(A + 2 * r * lda, lda, B, ldb, C + r * ldc, ldc, K2, beta ? beta + r : nullptr,
                    post);
  };
  strips(std::integral_constant<int, 6>());
  strips(std::integral_constant<int, 4>());
  strips(std::integral_constant<int, 2>());
  strips(std::integral_constant<int, 1>());
}

}  // namespace

POSENC_BF16_TARGET void bf16_gemm(int64_t rows, int64_t ncols, const uint16_t* A, int64_t lda,
                                  const uint16_t* B, int64_t ldb, float* C, int64_t ldc, int64_t K2,
                                  const float* beta, float post) {
  int64_t c0 = 0;
  for (; c0 + 64 <= ncols; c0 += 64)
    Strip<4>(rows, A, lda, B + 2 * c0, ldb, C + c0, ldc, K2, beta, post);
  if (c0 + 32 <= ncols) {
    Strip<2>(rows, A, lda, B + 2 * c0, ldb, C + c0, ldc, K2, beta, post);
    c0 += 32;
  }
  if (c0 + 16 <= ncols) Strip<1>(rows, A, lda, B + 2 * c0, ldb, C + c0, ldc, K2, beta, post);
}

POSENC_BF16_TARGET void bf16_round(const float* src, uint16_t* dst, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m256bh h = _mm512_cvtneps_pbh(_mm512_loadu_ps(src + i));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i), (__m256i)h);
  }
  if (i < n) {  // the tail through a zero-padded vector: the same instruction, the same bits
    alignas(64) float tail[16] = {};
    alignas(32) uint16_t out[16];
    std::copy(src + i, src + n, tail);
    const __m256bh h = _mm512_cvtneps_pbh(_mm512_load_ps(tail));
    _mm256_store_si256(reinterpret_cast<__m256i*>(out), (__m256i)h);
    std::copy(out, out + (n - i), dst + i);
  }
}

POSENC_BF16_TARGET float bf16_dot_chains(int64_t iters) {
  __m512 c[kBf16DotChains];
  for (auto& x : c) x = _mm512_setzero_ps();
  const __m512bh a = (__m512bh)_mm512_set1_epi16(0x3a80);  // bfloat16 2^-10 in both halves
  for (int64_t it = 0; it < iters; ++it)
    for (auto& x : c) x = _mm512_dpbf16_ps(x, a, a);
  __m512 sum = c[0];
  for (int j = 1; j < kBf16DotChains; ++j) sum = _mm512_add_ps(sum, c[j]);
  // The sixteen lanes summed through memory: GCC 12's _mm512_reduce_add_ps passes
  // _mm256_undefined_pd() to an extract and warns (-Wuninitialized) inside its own header.
  alignas(64) float lanes[16];
  _mm512_store_ps(lanes, sum);
  float total = 0.0f;
  for (float v : lanes) total += v;
  return total;
}

#else  // not x86-64: never called (bf16_dot_cpu() is false)

bool bf16_dot_cpu() {
  return false;
}
void bf16_gemm(int64_t, int64_t, const uint16_t*, int64_t, const uint16_t*, int64_t, float*,
               int64_t, int64_t, const float*, float) {}
void bf16_round(const float*, uint16_t*, int64_t) {}
float bf16_dot_chains(int64_t) {
  return 0;
}

#endif

}  // namespace posenc::detail
