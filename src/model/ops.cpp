// Layer ops of the lab's transformer, forward and backward side by side. See ops.hpp for the
// contracts. Sums are accumulated in S (float for training, double for the gradient checks);
// normalisation statistics and the softmax normaliser are accumulated in double.
#include "posenc/model/ops.hpp"

#include <algorithm>
#include <cmath>
#include <vector>

#include "posenc/core/threads.hpp"

namespace posenc::detail {
// The GELU kernels of ops_simd.cpp (Highway dynamic dispatch).
void gelu_forward_simd(const float* u, float* y, int64_t n);
void gelu_forward_simd(const double* u, double* y, int64_t n);
void gelu_backward_simd(const float* u, const float* dy, float* du, int64_t n);
void gelu_backward_simd(const double* u, const double* dy, double* du, int64_t n);
}  // namespace posenc::detail

namespace posenc::model {
namespace {

constexpr int64_t k_block = 256;  // rows of b kept hot while a block of c rows is updated

// Minimum rows per thread so an OpenMP region is not opened for a few hundred flops.
int64_t rows_per_thread(int64_t work_per_row) {
  const int64_t target = 16384;  // multiply-adds per thread share, at least
  return std::max<int64_t>(1, target / std::max<int64_t>(1, work_per_row));
}

// Four rows by W columns of c, accumulated over k in [k0, k1) in increasing k: the same sums in
// the same order as the plain loop "for k: for j: c[j] += a_k b_kj", with the 4 x W tile held
// in registers across the k loop instead of loaded and stored at every k (bit-identical
// results, several times fewer memory operations). Row r's a at k is a[r * a_row + k * a_k].
template <typename S, int W>
inline void tile4(const S* a, int64_t a_row, int64_t a_k, const S* b, int64_t ldb, S* c,
                  int64_t ldc, int64_t k0, int64_t k1) {
  S acc[4][W];
  for (int r = 0; r < 4; ++r)
    for (int jj = 0; jj < W; ++jj) acc[r][jj] = c[r * ldc + jj];
  for (int64_t k = k0; k < k1; ++k) {
    const S* bk = b + k * ldb;
    const S a0 = a[k * a_k], a1 = a[a_row + k * a_k];
    const S a2 = a[2 * a_row + k * a_k], a3 = a[3 * a_row + k * a_k];
    for (int jj = 0; jj < W; ++jj) {
      const S bv = bk[jj];
      acc[0][jj] += a0 * bv;
      acc[1][jj] += a1 * bv;
      acc[2][jj] += a2 * bv;
      acc[3][jj] += a3 * bv;
    }
  }
  for (int r = 0; r < 4; ++r)
    for (int jj = 0; jj < W; ++jj) c[r * ldc + jj] = acc[r][jj];
}

// Columns [0, N) of four rows of c: tiles of 64 bytes of columns, then the remaining columns by
// the plain loop (same order of sums). Measured on the lab's model (SSE2 baseline build): 16
// float columns train 2x faster than 8 and as fast as 32.
template <typename S>
inline void rows4(const S* a, int64_t a_row, int64_t a_k, const S* b, int64_t ldb, S* c,
                  int64_t ldc, int64_t N, int64_t k0, int64_t k1) {
  constexpr int W = 64 / sizeof(S);
  int64_t j = 0;
  for (; j + W <= N; j += W) tile4<S, W>(a, a_row, a_k, b + j, ldb, c + j, ldc, k0, k1);
  if (j == N) return;
  for (int64_t k = k0; k < k1; ++k) {
    const S* bk = b + k * ldb;
    for (int r = 0; r < 4; ++r) {
      const S ar = a[r * a_row + k * a_k];
      S* cr = c + r * ldc;
      for (int64_t jj = j; jj < N; ++jj) cr[jj] += ar * bk[jj];
    }
  }
}

}  // namespace

template <typename S>
void matmul_nn(const S* a, int64_t lda, const S* b, int64_t ldb, S* c, int64_t ldc, int64_t M,
               int64_t K, int64_t N, bool accumulate) {
  parallel_for(
      M,
      [&](int64_t r0, int64_t r1) {
        if (!accumulate)
          for (int64_t i = r0; i < r1; ++i) std::fill(c + i * ldc, c + i * ldc + N, S(0));
        for (int64_t k0 = 0; k0 < K; k0 += k_block) {
          const int64_t k1 = std::min(K, k0 + k_block);
          int64_t i = r0;
          // Four rows of c share each load of a row of b; their tiles stay in registers.
          for (; i + 4 <= r1; i += 4)
            rows4(a + i * lda, lda, 1, b, ldb, c + i * ldc, ldc, N, k0, k1);
          for (; i < r1; ++i) {
            S* ci = c + i * ldc;
            for (int64_t k = k0; k < k1; ++k) {
              const S ai = a[i * lda + k];
              const S* bk = b + k * ldb;
              for (int64_t j = 0; j < N; ++j) ci[j] += ai * bk[j];
            }
          }
        }
      },
      rows_per_thread(K * N));
}

template <typename S>
void matmul_nt(const S* a, int64_t lda, const S* b, int64_t ldb, S* c, int64_t ldc, int64_t M,
               int64_t K, int64_t N, bool accumulate) {
  parallel_for(
      M,
      [&](int64_t r0, int64_t r1) {
        for (int64_t i = r0; i < r1; ++i) {
          const S* ai = a + i * lda;
          for (int64_t j = 0; j < N; ++j) {
            const S* bj = b + j * ldb;
            // Eight independent partial sums: a fixed association the compiler can vectorise
            // without reassociating (no -ffast-math needed).
            S acc[8] = {};
            int64_t k = 0;
            for (; k + 8 <= K; k += 8)
              for (int l = 0; l < 8; ++l) acc[l] += ai[k + l] * bj[k + l];
            S s = ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
            for (; k < K; ++k) s += ai[k] * bj[k];
            c[i * ldc + j] = accumulate ? c[i * ldc + j] + s : s;
          }
        }
      },
      rows_per_thread(K * N));
}

template <typename S>
void matmul_tn(const S* a, int64_t lda, const S* b, int64_t ldb, S* c, int64_t ldc, int64_t M,
               int64_t K, int64_t N, bool accumulate) {
  parallel_for(
      M,
      [&](int64_t r0, int64_t r1) {
        if (!accumulate)
          for (int64_t i = r0; i < r1; ++i) std::fill(c + i * ldc, c + i * ldc + N, S(0));
        int64_t i = r0;
        for (; i + 4 <= r1; i += 4) rows4(a + i, 1, lda, b, ldb, c + i * ldc, ldc, N, 0, K);
        for (; i < r1; ++i) {
          S* ci = c + i * ldc;
          for (int64_t k = 0; k < K; ++k) {
            const S ai = a[k * lda + i];
            const S* bk = b + k * ldb;
            for (int64_t j = 0; j < N; ++j) ci[j] += ai * bk[j];
          }
        }
      },
      rows_per_thread(K * N));
}

// ---- linear --------------------------------------------------------------------------------

template <typename S>
void linear_forward(const S* x, const S* w, const S* b, S* y, int64_t n, int64_t in, int64_t out) {
  // y = x W + b
  if (b) {
    for (int64_t i = 0; i < n; ++i) std::copy(b, b + out, y + i * out);
    matmul_nn(x, in, w, out, y, out, n, in, out, true);
  } else {
    matmul_nn(x, in, w, out, y, out, n, in, out, false);
  }
}

template <typename S>
void linear_backward(const S* x, const S* w, const S* dy, S* dx, S* dw, S* db, int64_t n,
                     int64_t in, int64_t out) {
  // forward: y = x W + b
  if (dx) {
    // dx += dy W^T as a row-times-matrix product against W^T (out, in), built once per call:
    // the register-tiled form of matmul_nn instead of one dot product per element.
    thread_local std::vector<S> wt;
    wt.resize(static_cast<size_t>(in * out));
    for (int64_t i = 0; i < in; ++i)
      for (int64_t j = 0; j < out; ++j) wt[j * in + i] = w[i * out + j];
    matmul_nn(dy, out, wt.data(), in, dx, in, n, out, in, true);
  }
  matmul_tn(x, in, dy, out, dw, out, in, n, out, true);  // dW += x^T dy
  if (db)
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < out; ++j) db[j] += dy[i * out + j];  // db += sum_rows dy
}

// ---- LayerNorm -----------------------------------------------------------------------------

template <typename S>
void layernorm_forward(const S* x, const S* g, const S* b, S* y, S* mean, S* rstd, int64_t n,
                       int64_t c, double eps) {
  parallel_for(
      n,
      [&](int64_t r0, int64_t r1) {
        for (int64_t i = r0; i < r1; ++i) {
          const S* xi = x + i * c;
          double mu = 0;
          for (int64_t j = 0; j < c; ++j) mu += xi[j];
          mu /= static_cast<double>(c);
          double var = 0;
          for (int64_t j = 0; j < c; ++j) var += (xi[j] - mu) * (xi[j] - mu);
          var /= static_cast<double>(c);
          const double rs = 1.0 / std::sqrt(var + eps);
          mean[i] = static_cast<S>(mu);
          rstd[i] = static_cast<S>(rs);
          S* yi = y + i * c;
          // y = (x - mu) / sqrt(var + eps) * g + b
          for (int64_t j = 0; j < c; ++j) yi[j] = static_cast<S>((xi[j] - mu) * rs) * g[j] + b[j];
        }
      },
      64);
}

template <typename S>
void layernorm_backward(const S* x, const S* g, const S* mean, const S* rstd, const S* dy, S* dx,
                        S* dg, S* db, int64_t n, int64_t c) {
  // forward: y = (x - mu) * rstd * g + b
  parallel_for(
      n,
      [&](int64_t r0, int64_t r1) {
        for (int64_t i = r0; i < r1; ++i) {
          const S* xi = x + i * c;
          const S* dyi = dy + i * c;
          const double mu = mean[i], rs = rstd[i];
          double m1 = 0, m2 = 0;  // mean_c(dy g), mean_c(dy g xhat)
          for (int64_t j = 0; j < c; ++j) {
            const double dxh = static_cast<double>(dyi[j]) * g[j];
            m1 += dxh;
            m2 += dxh * (xi[j] - mu) * rs;
          }
          m1 /= static_cast<double>(c);
          m2 /= static_cast<double>(c);
          S* dxi = dx + i * c;
          for (int64_t j = 0; j < c; ++j) {
            const double xh = (xi[j] - mu) * rs;
            dxi[j] += static_cast<S>(rs * (static_cast<double>(dyi[j]) * g[j] - m1 - xh * m2));
          }
        }
      },
      64);
  for (int64_t i = 0; i < n; ++i) {
    const S* xi = x + i * c;
    const S* dyi = dy + i * c;
    for (int64_t j = 0; j < c; ++j) {
      dg[j] += dyi[j] * static_cast<S>((xi[j] - mean[i]) * rstd[i]);
      db[j] += dyi[j];
    }
  }
}

// ---- RMSNorm -------------------------------------------------------------------------------

template <typename S>
void rmsnorm_forward(const S* x, const S* g, S* y, S* rstd, int64_t n, int64_t c, double eps) {
  parallel_for(
      n,
      [&](int64_t r0, int64_t r1) {
        for (int64_t i = r0; i < r1; ++i) {
          const S* xi = x + i * c;
          double ms = 0;
          for (int64_t j = 0; j < c; ++j) ms += static_cast<double>(xi[j]) * xi[j];
          const double rs = 1.0 / std::sqrt(ms / static_cast<double>(c) + eps);
          rstd[i] = static_cast<S>(rs);
          S* yi = y + i * c;
          // y = x * rstd * g
          for (int64_t j = 0; j < c; ++j) yi[j] = static_cast<S>(xi[j] * rs) * g[j];
        }
      },
      64);
}

template <typename S>
void rmsnorm_backward(const S* x, const S* g, const S* rstd, const S* dy, S* dx, S* dg, int64_t n,
                      int64_t c) {
  // forward: y = x * rstd * g
  parallel_for(
      n,
      [&](int64_t r0, int64_t r1) {
        for (int64_t i = r0; i < r1; ++i) {
          const S* xi = x + i * c;
          const S* dyi = dy + i * c;
          const double rs = rstd[i];
          double m = 0;  // mean_c(dy g x)
          for (int64_t j = 0; j < c; ++j) m += static_cast<double>(dyi[j]) * g[j] * xi[j];
          m /= static_cast<double>(c);
          S* dxi = dx + i * c;
          for (int64_t j = 0; j < c; ++j)
            dxi[j] += static_cast<S>(rs * dyi[j] * g[j] - xi[j] * rs * rs * rs * m);
        }
      },
      64);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < c; ++j) dg[j] += dy[i * c + j] * static_cast<S>(x[i * c + j] * rstd[i]);
}

// ---- GELU ----------------------------------------------------------------------------------
// Hendrycks and Gimpel (2016), tanh approximation; formulas in ops.hpp and ops_simd.cpp.

template <typename S>
void gelu_forward(const S* u, S* y, int64_t n) {
  // Element-wise: the thread split cannot change a result. SIMD kernel in ops_simd.cpp.
  parallel_for(
      n, [&](int64_t r0, int64_t r1) { detail::gelu_forward_simd(u + r0, y + r0, r1 - r0); }, 4096);
}

template <typename S>
void gelu_backward(const S* u, const S* dy, S* du, int64_t n) {
  parallel_for(
      n,
      [&](int64_t r0, int64_t r1) {
        detail::gelu_backward_simd(u + r0, dy + r0, du + r0, r1 - r0);
      },
      4096);
}

// ---- embedding -----------------------------------------------------------------------------

template <typename S>
void embedding_forward(const S* table, const int64_t* idx, S* y, int64_t n, int64_t c,
                       bool accumulate) {
  for (int64_t i = 0; i < n; ++i) {
    const S* row = table + idx[i] * c;
    S* yi = y + i * c;
    if (accumulate)
      for (int64_t j = 0; j < c; ++j) yi[j] += row[j];
    else
      std::copy(row, row + c, yi);
  }
}

template <typename S>
void embedding_backward(const int64_t* idx, const S* dy, S* dtable, int64_t n, int64_t c) {
  // forward: y[i, :] = table[idx[i], :]
  for (int64_t i = 0; i < n; ++i) {
    S* row = dtable + idx[i] * c;
    const S* dyi = dy + i * c;
    for (int64_t j = 0; j < c; ++j) row[j] += dyi[j];
  }
}

// ---- cross-entropy -------------------------------------------------------------------------

template <typename S>
double cross_entropy_forward(const S* logits, const int64_t* targets, S* probs, S* nll, int64_t n,
                             int64_t v) {
  parallel_for(
      n,
      [&](int64_t r0, int64_t r1) {
        for (int64_t i = r0; i < r1; ++i) {
          const S* li = logits + i * v;
          S* pi = probs + i * v;
          S mx = li[0];
          for (int64_t j = 1; j < v; ++j) mx = std::max(mx, li[j]);
          double z = 0;
          for (int64_t j = 0; j < v; ++j) {
            const double e = std::exp(static_cast<double>(li[j] - mx));
            pi[j] = static_cast<S>(e);
            z += e;
          }
          const double inv = 1.0 / z;
          for (int64_t j = 0; j < v; ++j) pi[j] = static_cast<S>(pi[j] * inv);
          // -log softmax(l)[t] = log z + mx - l[t]
          nll[i] = targets[i] >= 0
                       ? static_cast<S>(std::log(z) + static_cast<double>(mx - li[targets[i]]))
                       : S(0);
        }
      },
      16);
  double sum = 0;
  int64_t m = 0;
  for (int64_t i = 0; i < n; ++i)
    if (targets[i] >= 0) {
      sum += nll[i];
      ++m;
    }
  return m ? sum / static_cast<double>(m) : 0.0;
}

template <typename S>
void cross_entropy_backward(const S* probs, const int64_t* targets, S* dlogits, int64_t n,
                            int64_t v, double scale) {
  // forward: loss = -(1/M) sum_i log softmax(logits_i)[t_i]
  parallel_for(
      n,
      [&](int64_t r0, int64_t r1) {
        for (int64_t i = r0; i < r1; ++i) {
          S* di = dlogits + i * v;
          if (targets[i] < 0) {
            std::fill(di, di + v, S(0));
            continue;
          }
          const S* pi = probs + i * v;
          for (int64_t j = 0; j < v; ++j) di[j] = static_cast<S>(pi[j] * scale);
          di[targets[i]] -= static_cast<S>(scale);
        }
      },
      16);
}

// NOLINTBEGIN(bugprone-macro-parentheses): the argument is a type, spliced into template arguments
// and declarations, where parentheses are not allowed
#define POSENC_MODEL_OPS(S)                                                                       \
  template void matmul_nn<S>(const S*, int64_t, const S*, int64_t, S*, int64_t, int64_t, int64_t, \
                             int64_t, bool);                                                      \
  template void matmul_nt<S>(const S*, int64_t, const S*, int64_t, S*, int64_t, int64_t, int64_t, \
                             int64_t, bool);                                                      \
  template void matmul_tn<S>(const S*, int64_t, const S*, int64_t, S*, int64_t, int64_t, int64_t, \
                             int64_t, bool);                                                      \
  template void linear_forward<S>(const S*, const S*, const S*, S*, int64_t, int64_t, int64_t);   \
  template void linear_backward<S>(const S*, const S*, const S*, S*, S*, S*, int64_t, int64_t,    \
                                   int64_t);                                                      \
  template void layernorm_forward<S>(const S*, const S*, const S*, S*, S*, S*, int64_t, int64_t,  \
                                     double);                                                     \
  template void layernorm_backward<S>(const S*, const S*, const S*, const S*, const S*, S*, S*,   \
                                      S*, int64_t, int64_t);                                      \
  template void rmsnorm_forward<S>(const S*, const S*, S*, S*, int64_t, int64_t, double);         \
  template void rmsnorm_backward<S>(const S*, const S*, const S*, const S*, S*, S*, int64_t,      \
                                    int64_t);                                                     \
  template void gelu_forward<S>(const S*, S*, int64_t);                                           \
  template void gelu_backward<S>(const S*, const S*, S*, int64_t);                                \
  template void embedding_forward<S>(const S*, const int64_t*, S*, int64_t, int64_t, bool);       \
  template void embedding_backward<S>(const int64_t*, const S*, S*, int64_t, int64_t);            \
  template double cross_entropy_forward<S>(const S*, const int64_t*, S*, S*, int64_t, int64_t);   \
  template void cross_entropy_backward<S>(const S*, const int64_t*, S*, int64_t, int64_t, double);
// NOLINTEND(bugprone-macro-parentheses)

POSENC_MODEL_OPS(float)
POSENC_MODEL_OPS(double)

}  // namespace posenc::model
