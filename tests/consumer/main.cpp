// The consumer project's program: a few calls through the installed headers and library,
// checked against values derived by hand from the formulas (not by posenc). Exit 0 when all
// agree, 1 otherwise.
#include <cmath>
#include <cstdio>
#include <vector>

#include "posenc/attention/attention.hpp"
#include "posenc/encodings/alibi.hpp"
#include "posenc/encodings/rope.hpp"

int main() {
  int failures = 0;
  auto expect = [&](const char* what, double got, double want, double tol) {
    const bool ok = std::fabs(got - want) <= tol;
    std::printf("%s  %s = %.17g (expected %.17g)\n", ok ? "ok  " : "FAIL", what, got, want);
    failures += ok ? 0 : 1;
  };

  // ALiBi, 8 heads (Press et al. 2022): slopes 2^-1 .. 2^-8, exact powers of two.
  const auto slopes = posenc::alibi_slopes(8);
  for (int h = 0; h < 8; ++h) expect("alibi slope", slopes[h], std::ldexp(1.0, -(h + 1)), 0);

  // RoPE, D = 4, theta 10000, half layout: pairs (x0, x2) with omega 1 and (x1, x3) with omega
  // 1/100. x = (1, 1, 0, 0) at position 3 -> (cos 3, cos 0.03, sin 3, sin 0.03).
  posenc::rope_config c;
  c.head_dim = 4, c.rotary_dim = 4, c.theta = 10000;
  const auto f = posenc::rope_frequencies(c);
  std::vector<double> x = {1, 1, 0, 0};
  const std::vector<int64_t> pos = {3};
  posenc::rope_apply(f, posenc::rope_layout::half, posenc::rope_angle::exact, pos, x.data(), 1, 1,
                     4);
  expect("rope x0", x[0], std::cos(3.0), 4e-16);
  expect("rope x1", x[1], std::cos(0.03), 4e-16);
  expect("rope x2", x[2], std::sin(3.0), 4e-16);
  expect("rope x3", x[3], std::sin(0.03), 4e-16);

  // Attention with one key: the softmax weight is 1, so the output is v.
  std::vector<double> q = {0.5, -1}, k = {2, 3}, v = {7, -4}, out(2);
  posenc::attention_params<double> p;
  p.q = q.data(), p.k = k.data(), p.v = v.data(), p.out = out.data();
  p.T = p.S = p.Hq = p.Hkv = 1, p.D = 2;
  posenc::attention_forward(p);
  expect("attention out0", out[0], 7, 0);
  expect("attention out1", out[1], -4, 0);

  std::printf("%s\n", failures ? "consumer: FAILED" : "consumer: all checks passed");
  return failures ? 1 : 0;
}
