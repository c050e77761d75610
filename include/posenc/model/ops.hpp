// posenc/model/ops.hpp: the layer ops of the lab's decoder-only transformer, each forward with
// its backward beside it (llm.c style). Templates over the scalar S in {float, double}: the
// training runs in float, the finite-difference gradient checks (tests/test_model_grad.cpp,
// `posenc check --gradients`) run the same code in double.
//
// Conventions for every op below:
//   - buffers are row-major; a shape comment names the contiguous dimension last;
//   - backward ops ACCUMULATE (+=) into parameter gradients and into input gradients, so a
//     residual branch and its skip path can share one gradient buffer; callers zero first;
//   - inputs are validated by the model (transformer.cpp) at its API boundary; these kernels
//     assume consistent sizes and never allocate (except where a scratch span is a parameter);
//   - sums run in a fixed order per output element, so results are bitwise identical for a
//     given thread count (and, for these ops, across thread counts: no reduction crosses a
//     thread boundary).
#pragma once

#include <cstdint>
#include <span>

namespace posenc::model {

// ---- matrix products -----------------------------------------------------------------------
// c(M, N) (+)= a(M, K) @ b(K, N). All row-major with leading dimensions lda, ldb, ldc.
// Blocked over K and N so a panel of b stays in cache; the innermost loop runs over N
// (contiguous in b and c) and vectorises. Rows of c are split across threads.
// accumulate = false overwrites c.
template <typename S>
void matmul_nn(const S* a, int64_t lda, const S* b, int64_t ldb, S* c, int64_t ldc, int64_t M,
               int64_t K, int64_t N, bool accumulate);
// c(M, N) (+)= a(M, K) @ b(N, K)^T: each c[i, j] is a dot product of two contiguous rows.
template <typename S>
void matmul_nt(const S* a, int64_t lda, const S* b, int64_t ldb, S* c, int64_t ldc, int64_t M,
               int64_t K, int64_t N, bool accumulate);
// c(M, N) (+)= a(K, M)^T @ b(K, N): the weight gradient x^T dy. Rows of c (columns of a) are
// split across threads; each c[i, :] sums over k in order 0..K-1.
template <typename S>
void matmul_tn(const S* a, int64_t lda, const S* b, int64_t ldb, S* c, int64_t ldc, int64_t M,
               int64_t K, int64_t N, bool accumulate);

// ---- linear --------------------------------------------------------------------------------
// y = x W + b.  x: (N, in), W: (in, out), b: (out) or null, y: (N, out).
template <typename S>
void linear_forward(const S* x, const S* w, const S* b, S* y, int64_t n, int64_t in, int64_t out);
// Backward of `y = x W + b`: dx += dy W^T, dW += x^T dy, db += sum_rows dy. dx may be null
// (input needs no gradient), db null when there is no bias.
template <typename S>
void linear_backward(const S* x, const S* w, const S* dy, S* dx, S* dw, S* db, int64_t n,
                     int64_t in, int64_t out);

// ---- normalisation -------------------------------------------------------------------------
// LayerNorm (Ba et al. 2016, eq. 15-16): y = (x - mu) / sqrt(var + eps) * g + b, mu and var
// (biased) over the C channels of each row. x, y: (N, C); g, b: (C). Saves mean and rstd: (N).
template <typename S>
void layernorm_forward(const S* x, const S* g, const S* b, S* y, S* mean, S* rstd, int64_t n,
                       int64_t c, double eps);
// Backward of `y = (x - mu) * rstd * g + b` with xhat = (x - mu) rstd:
//   dg += sum_rows dy xhat, db += sum_rows dy,
//   dx += rstd (dy g - mean_c(dy g) - xhat mean_c(dy g xhat)).
// dg/db are summed over rows in a fixed order on one thread (C is small).
template <typename S>
void layernorm_backward(const S* x, const S* g, const S* mean, const S* rstd, const S* dy, S* dx,
                        S* dg, S* db, int64_t n, int64_t c);

// RMSNorm (Zhang and Sennrich 2019, eq. 4): y = x / sqrt(mean_c(x^2) + eps) * g. Saves rstd.
template <typename S>
void rmsnorm_forward(const S* x, const S* g, S* y, S* rstd, int64_t n, int64_t c, double eps);
// Backward of `y = x * rstd * g`, rstd = (mean_c(x^2) + eps)^(-1/2):
//   dg += sum_rows dy x rstd,  dx += rstd (dy g) - x rstd^3 mean_c(dy g x).
template <typename S>
void rmsnorm_backward(const S* x, const S* g, const S* rstd, const S* dy, S* dx, S* dg, int64_t n,
                      int64_t c);

// ---- GELU ----------------------------------------------------------------------------------
// Hendrycks and Gimpel (2016), tanh form used by GPT-2:
//   gelu(u) = 0.5 u (1 + tanh(sqrt(2/pi) (u + 0.044715 u^3))).  u, y: (n).
template <typename S>
void gelu_forward(const S* u, S* y, int64_t n);
// Backward of the line above: with t = tanh(a), a = sqrt(2/pi)(u + 0.044715 u^3),
//   dgelu/du = 0.5 (1 + t) + 0.5 u (1 - t^2) sqrt(2/pi) (1 + 3 * 0.044715 u^2);  du += dy * that.
template <typename S>
void gelu_backward(const S* u, const S* dy, S* du, int64_t n);

// ---- embedding (token table and learned position table) -------------------------------------
// y[i, :] (+)= table[idx[i], :]. table: (rows, C), y: (N, C). idx must be in [0, rows): the
// model rejects anything else before calling (a learned position table has no row past its
// length and is never clamped).
template <typename S>
void embedding_forward(const S* table, const int64_t* idx, S* y, int64_t n, int64_t c,
                       bool accumulate);
// Backward of `y[i, :] = table[idx[i], :]`: dtable[idx[i], :] += dy[i, :], rows in order
// i = 0..N-1 on one thread (repeated indices must not race).
template <typename S>
void embedding_backward(const int64_t* idx, const S* dy, S* dtable, int64_t n, int64_t c);

// ---- cross-entropy -------------------------------------------------------------------------
// Mean negative log-likelihood over the rows with target >= 0 (target < 0 = not scored):
//   loss = -(1/M) sum_{i: t_i >= 0} log softmax(logits_i)[t_i],  M = #scored rows.
// logits: (N, V). Writes probs (N, V) = softmax(logits) (used by the backward and for
// accuracy), per-row nll (N) (0 for unscored rows) and returns the loss in double (0 if M = 0).
template <typename S>
double cross_entropy_forward(const S* logits, const int64_t* targets, S* probs, S* nll, int64_t n,
                             int64_t v);
// Backward of the line above: dlogits[i, :] = (probs[i, :] - onehot(t_i)) * scale for scored
// rows (scale = 1/M from the caller), 0 for the others. Overwrites dlogits.
template <typename S>
void cross_entropy_backward(const S* probs, const int64_t* targets, S* dlogits, int64_t n,
                            int64_t v, double scale);

}  // namespace posenc::model
