// posenc/encodings/forgetting.hpp: Forgetting Attention (Lin et al. 2025, "Forgetting
// Transformer: Softmax Attention with a Forget Gate", ICLR 2025, sec. 2).
//
// Each token t carries a forget gate per head, f_t = sigmoid(w_h . x_t + b_h) in (0, 1), computed
// by the model from its input. The score of query token i and key token j <= i gains the log of
// every gate between them (eq. 3 of the paper, its D matrix):
//   s_ij += sum_{l = j+1 .. i} log f_l = c_i - c_j,   c_t = sum_{l <= t} log f_l
// so it is a score bias of the tokens, not of their positions: a row term minus a column term.
// Being a difference of running sums, it is unchanged by any constant added to every c (c_0's
// own gate cancels) and by tokens outside [j + 1, i]: packed documents and a KV cache need no
// special rule, as long as the gates are those of the tokens in their order.
//
// The gradient of the gates (for dS, the gradient of the scores): with
//   dc_t = sum_j dS_tj [t is a query] - sum_i dS_it   (the pairs where t is query, resp. key)
//   d log f_l = sum_{t >= l} dc_t                      (a reverse running sum)
// Causal only: for j > i the sum is empty and the paper defines no bias.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace posenc {

// The running sums c (H, S) head-major, in double, of log gates (S, H) row-major (token-major, as
// the model emits them): c[h * S + t] = sum_{l = 0 .. t} log_f[l * H + h], summed in order of l.
// Throws invalid_argument naming `fox` unless every value is finite and <= 0 (a log of a gate in
// (0, 1]; a value in (0, 1) is most likely the gate itself rather than its log, and is named so).
template <typename Real>
std::vector<double> fox_running_sums(std::span<const Real> log_f, int64_t S, int64_t H);

// The bias of query token qt and key token kt <= qt of head h: c_qt - c_kt.
inline double fox_bias(std::span<const double> c, int64_t S, int64_t h, int64_t qt, int64_t kt) {
  return c[h * S + qt] - c[h * S + kt];
}

// The gates' gradient from that of the running sums: out[l * H + h] = sum_{t >= l} dc[h * S + t]
// (dc (H, S) head-major, out (S, H) token-major), summed from t = S - 1 down, in double.
std::vector<double> fox_gate_grad(std::span<const double> dc, int64_t S, int64_t H);

// log f = log sigmoid(z), without overflow: -log1p(exp(-z)) for z >= 0, z - log1p(exp(z)) below.
double fox_log_gate(double z);

}  // namespace posenc
