// Forgetting Attention's running sums and their gradient (posenc/encodings/forgetting.hpp).
#include "posenc/encodings/forgetting.hpp"

#include <cmath>

#include "posenc/core/error.hpp"

namespace posenc {

template <typename Real>
std::vector<double> fox_running_sums(std::span<const Real> log_f, int64_t S, int64_t H) {
  if (S < 0 || H < 1) fail("fox: S = {} and H = {} must be >= 0 and >= 1", S, H);
  if (static_cast<int64_t>(log_f.size()) != S * H)
    fail("fox must have shape (S, Hq) = ({}, {}), i.e. {} values, got {}", S, H, S * H,
         log_f.size());
  std::vector<double> c(static_cast<size_t>(S * H));
  for (int64_t h = 0; h < H; ++h) {
    double run = 0;
    for (int64_t t = 0; t < S; ++t) {
      const double x = double(log_f[t * H + h]);
      if (!std::isfinite(x) || x > 0)
        fail("fox must hold log forget gates, finite and <= 0, got {} at (token {}, head {}){}", x,
             t, h,
             x > 0 && x < 1 ? ": a value in (0, 1) looks like the gate f itself; pass log f" : "");
      run += x;
      c[h * S + t] = run;
    }
  }
  return c;
}
template std::vector<double> fox_running_sums<float>(std::span<const float>, int64_t, int64_t);
template std::vector<double> fox_running_sums<double>(std::span<const double>, int64_t, int64_t);

std::vector<double> fox_gate_grad(std::span<const double> dc, int64_t S, int64_t H) {
  if (static_cast<int64_t>(dc.size()) != S * H)
    fail("fox_gate_grad: dc must have H * S = {} values, got {}", S * H, dc.size());
  std::vector<double> out(static_cast<size_t>(S * H));
  for (int64_t h = 0; h < H; ++h) {
    double run = 0;
    for (int64_t t = S - 1; t >= 0; --t) {
      run += dc[h * S + t];
      out[t * H + h] = run;
    }
  }
  return out;
}

double fox_log_gate(double z) {
  return z >= 0 ? -std::log1p(std::exp(-z)) : z - std::log1p(std::exp(z));
}

}  // namespace posenc
