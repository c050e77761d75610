// The learned table case table: inputs, both modes and the named lists
// (include/posenc/verify/learned_cases.hpp holds the derivations).
#include "posenc/verify/learned_cases.hpp"

#include <fmt/format.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <utility>

#include "posenc/core/rng.hpp"

namespace posenc::learned_cases {

namespace {
constexpr double kU = 0x1p-53;
constexpr double kUf = 0x1p-24;
constexpr double kInf = std::numeric_limits<double>::infinity();
}  // namespace

std::string describe(const spec& c) {
  return fmt::format("rows={} width={} N={}{} seed={}", c.rows, c.width, c.N,
                     c.positions.empty() ? " (drawn)" : " (given)", c.seed);
}

void build(fixture& fx, const spec& c) {
  fx.t = learned_init(c.rows, c.width, c.seed, 1.0);
  rng r(c.seed ^ 0x1EA);
  if (!c.positions.empty()) {
    fx.pos = c.positions;
  } else {
    fx.pos.resize(static_cast<size_t>(c.N));
    for (auto& p : fx.pos) p = static_cast<int64_t>(r.below(static_cast<uint64_t>(c.rows)));
  }
  auto fill = [&](std::vector<float>& a, int64_t n) {
    a.resize(static_cast<size_t>(n));
    for (auto& x : a) x = static_cast<float>(r.normal());
  };
  fill(fx.e, c.N * c.width);
  fill(fx.g, c.N * c.width);
  fill(fx.g0, c.rows * c.width);
}

check_result check_case(const spec& c) {
  fixture fx;
  build(fx, c);
  const size_t N = fx.pos.size(), W = static_cast<size_t>(c.width);
  const auto& P = fx.t.weights;
  double worst = 0;
  std::string at;
  auto take = [&](double r, std::string where) {
    if (std::isnan(worst)) return;
    if (std::isnan(r) || r > worst || at.empty()) worst = r, at = std::move(where);
  };
  // Lookup and add_positions: bit for bit against the formulas.
  std::vector<float> look(N * W), h(N * W), h_in = fx.e;
  learned_lookup(fx.t, fx.pos, look);
  add_positions(fx.e, fx.t, fx.pos, h);
  add_positions(h_in, fx.t, fx.pos, h_in);  // in place
  int64_t differ = 0;
  std::string first;
  for (size_t n = 0; n < N; ++n)
    for (size_t ch = 0; ch < W; ++ch) {
      const size_t i = n * W + ch;
      const float row = P[static_cast<size_t>(fx.pos[n]) * W + ch];
      const float sum = fx.e[i] + row;
      // NOLINTNEXTLINE(bugprone-suspicious-memory-comparison): bitwise equality is the claim
      const bool same_bits = std::memcmp(&look[i], &row, sizeof(float)) == 0;
      const bool ok = same_bits && h[i] == sum && h_in[i] == sum;
      if (ok) continue;
      ++differ;
      if (first.empty())
        first = fmt::format(
            "position {} (row {}) channel {}: lookup {:.9g} want {:.9g}, add {:.9g} "
            "and in place {:.9g} want {:.9g}",
            n, fx.pos[n], ch, look[i], row, h[i], h_in[i], sum);
    }
  take(differ ? kInf : 0, differ ? fmt::format("{} differing elements; first {}", differ, first)
                                 : std::string("lookup and add_positions exact"));
  // Backward: within k u_f (|G0| + sum |terms|) of the exact accumulation.
  learned_table grad{c.rows, c.width, fx.g0};
  learned_lookup_backward(fx.g, fx.pos, grad);
  std::vector<double> exact(fx.g0.begin(), fx.g0.end()), mag(exact.size()), k(c.rows, 0);
  for (size_t i = 0; i < mag.size(); ++i) mag[i] = std::fabs(exact[i]);
  for (size_t n = 0; n < N; ++n) {
    const auto row = static_cast<size_t>(fx.pos[n]);
    ++k[row];
    for (size_t ch = 0; ch < W; ++ch) {
      exact[row * W + ch] += fx.g[n * W + ch];
      mag[row * W + ch] += std::fabs(fx.g[n * W + ch]);
    }
  }
  for (size_t i = 0; i < exact.size(); ++i) {
    const double ku = k[i / W] * kUf;
    const double tol = ku / (1 - ku) * mag[i] + 0x1p-1074;
    take(std::fabs(grad.weights[i] - exact[i]) / tol,
         fmt::format("backward entry (row {}, channel {}): {:.9g}, exact {:.17g}, tol {:.3g}",
                     i / W, i % W, grad.weights[i], exact[i], tol));
  }
  return measured_check(
      "learned", c.name,
      fmt::format("learned_lookup and add_positions equal the formulas bit for bit, and "
                  "learned_lookup_backward is within its float accumulation bound, on {}",
                  describe(c)),
      worst, 1,
      fmt::format("max_error is the worst |error| / tol (exact parts: infinity on any "
                  "difference); backward tol = k u_f (|G0| + sum |terms|), k the row's "
                  "positions (derived in include/posenc/verify/learned_cases.hpp); worst: {}",
                  at));
}

check_result grad_case(const spec& c) {
  fixture fx;
  build(fx, c);
  auto& P = fx.t.weights;
  for (auto& w : P) w = std::round(w * 1024.0f) / 1024.0f;  // 2^-10 grid: P +- eps exact
  const size_t N = fx.pos.size(), W = static_cast<size_t>(c.width);
  const double eps = 0.125;
  learned_table an{c.rows, c.width, std::vector<float>(P.size(), 0.0f)};
  learned_lookup_backward(fx.g, fx.pos, an);
  std::vector<float> look(N * W);
  auto loss = [&] {
    learned_lookup(fx.t, fx.pos, look);
    double L = 0;
    for (size_t i = 0; i < look.size(); ++i) L += static_cast<double>(look[i]) * fx.g[i];
    return L;
  };
  std::vector<double> gabs(P.size(), 0.0), k(static_cast<size_t>(c.rows), 0.0);
  double Labs = 0;
  for (size_t n = 0; n < N; ++n) {
    const auto row = static_cast<size_t>(fx.pos[n]);
    ++k[row];
    for (size_t ch = 0; ch < W; ++ch) {
      const double ag = std::fabs(fx.g[n * W + ch]);
      gabs[row * W + ch] += ag;
      Labs += (std::fabs(P[row * W + ch]) + eps) * ag;
    }
  }
  const double n = static_cast<double>(N * W);
  double worst = 0;
  std::string at;
  for (size_t e = 0; e < P.size(); ++e) {
    const float keep = P[e];
    P[e] = static_cast<float>(keep + eps);
    const double lp = loss();
    P[e] = static_cast<float>(keep - eps);
    const double lm = loss();
    P[e] = keep;
    const double fd = (lp - lm) / (2 * eps);
    const double ku = k[e / W] * kUf;
    const double tol = n * kU * Labs / eps + ku / (1 - ku) * gabs[e] + 0x1p-1074;
    const double r = std::fabs(static_cast<double>(an.weights[e]) - fd) / tol;
    if (!std::isnan(worst) && (std::isnan(r) || r > worst || at.empty())) {
      worst = r;
      at = fmt::format("entry (row {}, channel {}): analytic {:.9g}, fd {:.17g}, tol {:.3g}", e / W,
                       e % W, an.weights[e], fd, tol);
    }
  }
  return measured_check(
      "learned", c.name + "/grad",
      fmt::format("learned_lookup_backward matches central differences of <learned_lookup(P), G> "
                  "in double for every table entry, on {}",
                  describe(c)),
      worst, 1,
      fmt::format("max_error is the worst |analytic - fd| / tol, tol = n u Labs / eps + k u_f "
                  "gabs (eps = 2^-3, exact steps on a 2^-10 grid; derived in "
                  "include/posenc/verify/learned_cases.hpp); worst at {}",
                  at));
}

std::vector<check_result> run_case(const spec& c) {
  std::vector<check_result> out;
  if (c.passes & check) out.push_back(check_case(c));
  if (c.passes & grad) out.push_back(grad_case(c));
  return out;
}

// ---- the lists ------------------------------------------------------------------------------

namespace {

spec make(int64_t rows, int64_t width, int64_t N, uint64_t seed, unsigned passes,
          const std::string& group, std::vector<int64_t> pos = {}) {
  spec c;
  c.rows = rows, c.width = width, c.N = N;
  c.positions = std::move(pos);
  c.seed = seed;
  c.passes = passes;
  c.group = group;
  c.name = fmt::format("{}/rows{}/width{}/N{}", group, rows, width, N);
  return c;
}

// Check mode: lookup and add exact, the backward within gamma_k (|G0| + sum |terms|); grad mode
// against tol_e = n u Labs / eps + gamma_{k_e} gabs_e (both derived in learned_cases.hpp).
std::vector<spec> make_full() {
  std::vector<spec> v;
  const std::string g = "table";
  v.push_back(make(1, 1, 1, 1, check | grad, g));
  v.push_back(make(10, 3, 4, 5, check | grad, g, {9, 0, 9, 4}));
  v.push_back(make(3, 17, 129, 2, check | grad, g));  // every row read about 43 times
  v.push_back(make(40, 17, 50, 3, check | grad, g));
  v.push_back(make(129, 96, 17, 4, check | grad, g));
  v.push_back(make(512, 64, 300, 11, check, g));
  v.push_back(make(1024, 59, 1000, 12, check, g));
  return v;
}

std::vector<spec> make_check() {
  std::vector<spec> v;
  const std::string g = "table";
  v.push_back(make(1, 1, 1, 6300, check | grad, g));
  v.push_back(make(3, 17, 129, 6301, check | grad, g));
  v.push_back(make(64, 59, 200, 6302, check, g));
  return v;
}

}  // namespace

const std::vector<spec>& check_cases() {
  return case_list<make_check>();
}

const std::vector<spec>& full_cases() {
  return case_list<make_full>();
}

}  // namespace posenc::learned_cases
