// Sandwich's bias (posenc/encodings/sandwich.hpp), Chi et al. 2023, sec. 5.
#include "posenc/encodings/sandwich.hpp"

#include <cmath>

#include "posenc/core/error.hpp"

namespace posenc {

double sandwich_inner(int64_t offset, int64_t dim) {
  // w_i = 10000^(-2i / d'), i = 1 .. d'/2, each through pow once.
  const double r = static_cast<double>(offset);
  double sum = 0;
  for (int64_t i = 1; i <= dim / 2; ++i)
    sum += std::cos(r * std::pow(10000.0, -2.0 * double(i) / double(dim)));
  return sum;
}

double sandwich_ratio(int64_t h, int64_t H) {
  return 8.0 * double(h + 1) / double(H);
}

double sandwich_bias(int64_t h, int64_t H, int64_t qpos, int64_t kpos, int64_t dim) {
  return (sandwich_inner(kpos - qpos, dim) - double(dim / 2)) / sandwich_ratio(h, H);
}

std::vector<double> sandwich_bias_table(int64_t H, int64_t lo, int64_t hi, int64_t dim) {
  const int64_t n = hi - lo + 1;
  std::vector<double> out(static_cast<size_t>(H * n));
  for (int64_t r = lo; r <= hi; ++r) {
    const double c = sandwich_inner(r, dim) - double(dim / 2);
    for (int64_t h = 0; h < H; ++h) out[h * n + (r - lo)] = c / sandwich_ratio(h, H);
  }
  return out;
}

void sandwich_check_dim(double dim) {
  if (!(dim >= 2 && dim <= 1 << 20) || std::fmod(dim, 2) != 0)
    fail("sandwich_dim must be an even integer in [2, 2^20], got {}", dim);
}

}  // namespace posenc
