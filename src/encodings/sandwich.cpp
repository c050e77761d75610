// Sandwich's bias (posenc/encodings/sandwich.hpp), Chi et al. 2023, sec. 5.
#include "posenc/encodings/sandwich.hpp"

#include <cmath>
#include <cstdint>
#include <vector>

#include "posenc/core/error.hpp"
#include "posenc/core/threads.hpp"

namespace posenc {

namespace {

// w_i = 10000^(-2i / d'), i = 1 .. d'/2.
double sandwich_freq(int64_t i, int64_t dim) {
  return std::pow(10000.0, -2.0 * double(i) / double(dim));
}

// sum_i cos(r w_i), i = 1 .. d'/2 in order, w(i) giving w_i: the same sum whether the frequencies
// come through pow each time (per pair) or from a table made once (sandwich_bias_table).
template <typename W>
double sandwich_cos_sum(int64_t offset, int64_t dim, W w) {
  const double r = static_cast<double>(offset);
  double sum = 0;
  for (int64_t i = 1; i <= dim / 2; ++i) sum += std::cos(r * w(i));
  return sum;
}

}  // namespace

double sandwich_inner(int64_t offset, int64_t dim) {
  return sandwich_cos_sum(offset, dim, [dim](int64_t i) { return sandwich_freq(i, dim); });
}

double sandwich_ratio(int64_t h, int64_t H) {
  return 8.0 * double(h + 1) / double(H);
}

double sandwich_bias(int64_t h, int64_t H, int64_t qpos, int64_t kpos, int64_t dim) {
  const int64_t pairs = dim / 2;  // d'/2 cosines, the inner product at offset 0 (dim is even)
  return (sandwich_inner(kpos - qpos, dim) - double(pairs)) / sandwich_ratio(h, H);
}

// The frequencies once per table instead of once per offset, and the offsets over the threads
// (d'/2 cosines each): the same values and sums as sandwich_bias, so the same bits.
std::vector<double> sandwich_bias_table(int64_t H, int64_t lo, int64_t hi, int64_t dim) {
  const int64_t n = hi - lo + 1;
  const int64_t pairs = dim / 2;  // d'/2 cosines (dim is even)
  std::vector<double> out(static_cast<size_t>(H * n));
  std::vector<double> w(static_cast<size_t>(pairs));
  for (int64_t i = 1; i <= pairs; ++i) w[static_cast<size_t>(i - 1)] = sandwich_freq(i, dim);
  parallel_for(
      n,
      [&](int64_t b, int64_t e) {
        for (int64_t x = b; x < e; ++x) {
          const double c =
              sandwich_cos_sum(lo + x, dim,
                               [&](int64_t i) { return w[static_cast<size_t>(i - 1)]; }) -
              double(pairs);
          for (int64_t h = 0; h < H; ++h) out[h * n + x] = c / sandwich_ratio(h, H);
        }
      },
      256);
  return out;
}

void sandwich_check_dim(double dim) {
  if (!(dim >= 2 && dim <= 1 << 20) || std::fmod(dim, 2) != 0)
    fail("sandwich_dim must be an even integer in [2, 2^20], got {}", dim);
}

}  // namespace posenc
