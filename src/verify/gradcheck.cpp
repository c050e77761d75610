// Finite-difference gradient checks in double (see gradcheck.hpp for the error bound); the
// group "gradients" runs the model ops case table (include/posenc/verify/ops_cases.hpp).
#include "posenc/verify/gradcheck.hpp"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "posenc/core/rng.hpp"
#include "posenc/core/threads.hpp"
#include "posenc/verify/ops_cases.hpp"

namespace posenc::model {

double finite_difference_error(std::vector<double>& x, const std::function<double()>& f,
                               const std::vector<double>& analytic) {
  double scale = gradcheck_floor;
  for (double g : analytic) scale = std::max(scale, std::abs(g));
  double worst = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    const double x0 = x[i];
    x[i] = x0 + gradcheck_step;
    const double fp = f();
    x[i] = x0 - gradcheck_step;
    const double fm = f();
    x[i] = x0;
    const double fd = (fp - fm) / (2 * gradcheck_step);
    const double e = std::abs(fd - analytic[i]) / scale;
    if (!(e <= worst)) worst = e;  // keeps NaN
  }
  return worst;
}

model_config gradcheck_model_config(pos_scheme s, norm_kind n) {
  model_config c;
  c.vocab = 7;
  c.d_model = 8;
  c.n_heads = 2;
  c.n_layers = 2;
  c.d_ff = 12;
  c.scheme = s;
  c.norm = n;
  c.pos = position_options_for_gradcheck();
  c.pos.max_positions = 16;
  c.init_std = 0.3;
  return c;
}

batch gradcheck_batch() {
  batch b;
  b.B = 2;
  b.T = 5;
  b.tokens = {1, 4, 2, 6, 0, 3, 3, 5, 1, 2};
  b.positions = {0, 1, 2, 3, 4, 1, 3, 4, 8, 12};
  b.targets = {4, 2, -1, 0, 5, 3, 5, -1, 2, 6};
  return b;
}

double model_gradient_error(const model_config& c, uint64_t seed) {
  transformer<double> m(c);
  m.init(seed);
  const batch b = gradcheck_batch();
  m.forward(b);
  m.backward();
  const std::vector<double> g = m.grads();
  double worst = 0;
  for (const auto& t : m.layout().tensors) {
    std::vector<double> x(m.params().begin() + t.offset, m.params().begin() + t.offset + t.size);
    std::vector<double> an(g.begin() + t.offset, g.begin() + t.offset + t.size);
    auto f = [&] {
      std::copy(x.begin(), x.end(), m.params().begin() + t.offset);
      return m.forward(b);
    };
    const double e = finite_difference_error(x, f, an);
    std::copy(x.begin(), x.end(), m.params().begin() + t.offset);
    if (!(e <= worst)) worst = e;
  }
  return worst;
}

std::vector<check_result> gradient_checks() {
  // The models here are tiny: one thread avoids an OpenMP barrier per op on a shared machine
  // (thread-count independence is tested separately in tests/test_model_grad.cpp).
  const int threads = num_threads();
  set_num_threads(1);
  struct restore {
    int n;
    ~restore() { set_num_threads(n); }
  } restore_threads{threads};
  std::vector<check_result> out;
  for (const auto& c : ops_cases::check_cases())
    for (auto& r : ops_cases::run_case(c)) out.push_back(std::move(r));
  return out;
}

}  // namespace posenc::model
