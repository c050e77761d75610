// Learned table: the property checks of group "learned" (learned_checks()). Each check is one
// function (two where they share their data), called in order by learned_checks(); after them come
// the results of the case table's small list (check_cases() of
// include/posenc/verify/learned_cases.hpp: lookup, add and backward against their formulas,
// and the backward against finite differences). `posenc check`, the report and the tests all read
// this one list.
#include "posenc/encodings/learned.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include <fmt/format.h>

#include "posenc/core/error.hpp"
#include "posenc/core/file.hpp"
#include "posenc/core/rng.hpp"
#include "posenc/verify/checks.hpp"
#include "posenc/verify/learned_cases.hpp"

namespace posenc {

namespace {

constexpr int64_t rows = 512, width = 64;

// A measured check that must also satisfy the boolean `passed` (an exactness condition).
check_result make(std::string name, std::string claim, bool passed, double max_error, double tol,
                  std::string detail) {
  auto c = measured_check("learned", std::move(name), std::move(claim), max_error, tol,
                          std::move(detail));
  c.passed = c.passed && passed;
  return c;
}

// Reproducible: the same seed gives the bit-identical table; another seed does not.
void init_reproducible(std::vector<check_result>& out) {
  const auto a = learned_init(rows, width, 1234), b = learned_init(rows, width, 1234);
  const auto c = learned_init(rows, width, 1235);
  const bool same = a.weights == b.weights, differ = a.weights != c.weights;
  out.push_back(make(
      "init_reproducible", "learned_init(seed) is bit-identical across calls", same && differ, 0, 0,
      fmt::format("seed 1234 twice identical: {}; seed 1235 differs: {}", same, differ)));
}

// N(0, 0.02): with n = 32768 draws the sample mean has standard error 0.02 / sqrt(n) =
// 1.1e-4 and the sample standard deviation 0.02 / sqrt(2n) = 7.8e-5; 5 sigma each.
void init_distribution(std::vector<check_result>& out) {
  const auto t = learned_init(rows, width, 7);
  double s = 0, s2 = 0;
  for (float v : t.weights) {
    s += v;
    s2 += static_cast<double>(v) * v;
  }
  const double n = static_cast<double>(t.weights.size());
  const double mean = s / n, sd = std::sqrt(s2 / n - mean * mean);
  const double em = std::abs(mean) / (5 * 0.02 / std::sqrt(n));
  const double es = std::abs(sd - 0.02) / (5 * 0.02 / std::sqrt(2 * n));
  out.push_back(make("init_distribution", "learned_init draws N(0, 0.02^2)", true, std::max(em, es),
                     1.0,
                     fmt::format("mean {:.3e}, stddev {:.6f} over {} draws; max_error is the "
                                 "larger deviation in units of 5 standard errors",
                                 mean, sd, t.weights.size())));
}

// Adjoint identity <lookup(P), G> = <P, lookup^T(G)>: both sides are sums of the same
// products P[pos[n], c] * G[n, c] (exact in double, since float*float fits in 48 bits) in a
// different order; double summation of M terms of size <= S errs by <= M * S * 2^-53 each.
void lookup_backward_adjoint(std::vector<check_result>& out) {
  const auto t = learned_init(rows, width, 11);
  rng g(12);
  const int64_t n = 300;
  std::vector<int64_t> pos(static_cast<size_t>(n));
  for (auto& p : pos) p = static_cast<int64_t>(g.below(static_cast<uint64_t>(rows)));
  std::vector<float> gout(static_cast<size_t>(n * width)), look(gout.size());
  for (auto& v : gout) v = static_cast<float>(g.normal());
  learned_lookup(t, pos, look);
  learned_table grad{rows, width, std::vector<float>(t.weights.size(), 0.0f)};
  learned_lookup_backward(gout, pos, grad);
  double lhs = 0, rhs = 0, abs_sum = 0;
  for (size_t i = 0; i < look.size(); ++i) {
    lhs += static_cast<double>(look[i]) * gout[i];
    abs_sum += std::abs(static_cast<double>(look[i]) * gout[i]);
  }
  for (size_t i = 0; i < t.weights.size(); ++i)
    rhs += static_cast<double>(t.weights[i]) * grad.weights[i];
  // grad accumulates in float: an entry that sums k float terms errs by <= (k - 1) 2^-24
  // times the sum of their magnitudes, so rhs moves by <= (kmax - 1) 2^-24 abs_sum, kmax the
  // largest multiplicity of a position; the two double sums add 2 M 2^-53 abs_sum.
  std::vector<int64_t> mult(static_cast<size_t>(rows), 0);
  int64_t kmax = 0;
  for (int64_t p : pos) kmax = std::max(kmax, ++mult[static_cast<size_t>(p)]);
  const double m = static_cast<double>(look.size());
  const double tol = abs_sum * (static_cast<double>(kmax - 1) * 0x1.0p-24 + 2 * m * 0x1.0p-53);
  out.push_back(make("lookup_backward_adjoint",
                     "<lookup(P), G> = <P, lookup_backward(G)> (backward is the transpose)", true,
                     std::abs(lhs - rhs), tol, fmt::format("lhs {:.12g}, rhs {:.12g}", lhs, rhs)));
}

// Save/load round trip is bit-exact, and every single-byte corruption, truncation or extra
// byte is detected (never garbage rows).
void save_load_detects_corruption(std::vector<check_result>& out) {
  const auto t = learned_init(33, 7, 5);
  const auto bytes = learned_serialize(t);
  const auto back = learned_parse(bytes, "<memory>");
  const bool round = back.rows == t.rows && back.width == t.width && back.weights == t.weights;
  int64_t undetected = 0, tried = 0;
  for (size_t i = 0; i < bytes.size(); ++i) {
    auto bad = bytes;
    bad[i] ^= std::byte{0x5A};
    ++tried;
    try {
      learned_parse(bad, "<memory>");
      ++undetected;
    } catch (const io_error&) {
    }
  }
  for (size_t len : {size_t{0}, size_t{39}, size_t{40}, bytes.size() - 1, bytes.size() + 1}) {
    auto bad = bytes;
    bad.resize(len);
    ++tried;
    try {
      learned_parse(bad, "<memory>");
      ++undetected;
    } catch (const io_error&) {
    }
  }
  out.push_back(make("save_load_detects_corruption",
                     "save/load round-trips bit-exactly; any flipped byte, truncation or "
                     "trailing byte is an io_error",
                     round, static_cast<double>(undetected), 0,
                     fmt::format("round trip exact: {}; {} corrupted files, {} undetected", round,
                                 tried, undetected)));
}

}  // namespace

std::vector<check_result> learned_checks() {
  std::vector<check_result> out;
  init_reproducible(out);
  init_distribution(out);
  lookup_backward_adjoint(out);
  save_load_detects_corruption(out);
  for (const auto& c : learned_cases::check_cases())
    for (auto& r : learned_cases::run_case(c)) out.push_back(std::move(r));
  return out;
}

}  // namespace posenc
