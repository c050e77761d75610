// The Shaw case table: inputs, both modes and the named lists
// (include/posenc/verify/shaw_cases.hpp holds the derivations).
#include "posenc/verify/shaw_cases.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <tuple>
#include <utility>

#include "posenc/core/rng.hpp"

namespace posenc::shaw_cases {

namespace {
constexpr double kU = 0x1p-53;
constexpr double kUf = 0x1p-24;
constexpr double kEps = 0x1p-10;

int64_t range(const spec& c) {
  return c.pos_range > 0 ? c.pos_range : 4 * c.K + 6;
}
double scale_of(const spec& c) {
  return c.scale != 0 ? c.scale : 1 / std::sqrt(static_cast<double>(c.D));
}

// The worst ratio so far, and what it was; NaN sticks.
struct worst {
  double r = 0;
  std::string at;
  void take(double ratio, const std::function<std::string()>& where) {
    if (std::isnan(r)) return;
    if (std::isnan(ratio) || ratio > r || at.empty()) {
      r = ratio;
      at = where();
    }
  }
};
}  // namespace

std::string describe(const spec& c) {
  return fmt::format("T={} S={} K={} D={} positions below {} + {} scale {:.4g} seed {}", c.T, c.S,
                     c.K, c.D, range(c), c.pos_offset, scale_of(c), c.seed);
}

void build(fixture& fx, const spec& c) {
  rng r(c.seed);
  auto pos = [&](std::vector<int64_t>& p, int64_t n) {
    p.resize(static_cast<size_t>(n));
    for (auto& x : p)
      x = static_cast<int64_t>(r.below(static_cast<uint64_t>(range(c)))) + c.pos_offset;
  };
  auto fill = [&](std::vector<double>& a, int64_t n) {
    a.resize(static_cast<size_t>(n));
    for (auto& x : a) x = r.normal();
  };
  const int64_t T = c.T, S = c.S, D = c.D, R = 2 * c.K + 1;
  pos(fx.qpos, T);
  pos(fx.kpos, S);
  fill(fx.q, T * D);
  fill(fx.k, S * D);
  fill(fx.ak, R * D);
  fill(fx.v, S * D);
  fill(fx.av, R * D);
  fill(fx.probs, T * S);
  fill(fx.gs, T * S);
  fill(fx.go, T * D);
  fx.scale = scale_of(c);
}

namespace {

// Every output of the four ops on one element type, gradients zeroed first.
template <typename Real>
struct outputs {
  std::vector<Real> s, o, dq, dk, dak, dp, dv, dav;
};

template <typename Real>
outputs<Real> run(const fixture& fx, const spec& c) {
  auto cv = [](const std::vector<double>& a) {
    std::vector<Real> r(a.size());
    for (size_t i = 0; i < a.size(); ++i) r[i] = static_cast<Real>(static_cast<float>(a[i]));
    return r;
  };
  const auto q = cv(fx.q), k = cv(fx.k), ak = cv(fx.ak), v = cv(fx.v), av = cv(fx.av),
             p = cv(fx.probs), gs = cv(fx.gs), go = cv(fx.go);
  const auto pr = fx.problem(c);
  const size_t T = static_cast<size_t>(c.T), S = static_cast<size_t>(c.S),
               D = static_cast<size_t>(c.D), R = static_cast<size_t>(2 * c.K + 1);
  outputs<Real> r{std::vector<Real>(T * S),    std::vector<Real>(T * D),
                  std::vector<Real>(T * D, 0), std::vector<Real>(S * D, 0),
                  std::vector<Real>(R * D, 0), std::vector<Real>(T * S, 0),
                  std::vector<Real>(S * D, 0), std::vector<Real>(R * D, 0)};
  shaw_scores<Real>(pr, q.data(), k.data(), ak.data(), fx.scale, r.s.data());
  shaw_scores_backward<Real>(pr, q.data(), k.data(), ak.data(), fx.scale, gs.data(), r.dq.data(),
                             r.dk.data(), r.dak.data());
  shaw_values<Real>(pr, p.data(), v.data(), av.data(), r.o.data());
  shaw_values_backward<Real>(pr, p.data(), v.data(), av.data(), go.data(), r.dp.data(), r.dv.data(),
                             r.dav.data());
  return r;
}

}  // namespace

check_result check_case(const spec& c) {
  fixture fx;
  build(fx, c);
  const auto f = run<float>(fx, c);
  const auto d = run<double>(fx, c);
  worst w;
  auto cmp = [&](const char* what, const std::vector<float>& a, const std::vector<double>& b) {
    for (size_t i = 0; i < a.size(); ++i) {
      // One rounding to float: 2^-24 |d|, plus half the smallest subnormal.
      const double tol = kUf * std::fabs(b[i]) + 0x1p-150;
      const double r = std::fabs(static_cast<double>(a[i]) - b[i]) / tol;
      w.take(r, [&] {
        return fmt::format("{}[{}]: float32 {:.9g}, float64 {:.17g}", what, i, a[i], b[i]);
      });
    }
  };
  cmp("scores", f.s, d.s);
  cmp("out", f.o, d.o);
  cmp("dq", f.dq, d.dq);
  cmp("dk", f.dk, d.dk);
  cmp("da^K", f.dak, d.dak);
  cmp("dp", f.dp, d.dp);
  cmp("dv", f.dv, d.dv);
  cmp("da^V", f.dav, d.dav);
  // Accumulation: a second float64 backward call doubles every gradient (s + s is exact).
  int64_t not_doubled = 0;
  {
    auto e = d;
    const auto pr = fx.problem(c);
    auto cv = [](const std::vector<double>& a) {
      std::vector<double> r(a.size());
      for (size_t i = 0; i < a.size(); ++i) r[i] = static_cast<float>(a[i]);
      return r;
    };
    const auto q = cv(fx.q), k = cv(fx.k), ak = cv(fx.ak), v = cv(fx.v), av = cv(fx.av),
               p = cv(fx.probs), gs = cv(fx.gs), go = cv(fx.go);
    shaw_scores_backward<double>(pr, q.data(), k.data(), ak.data(), fx.scale, gs.data(),
                                 e.dq.data(), e.dk.data(), e.dak.data());
    shaw_values_backward<double>(pr, p.data(), v.data(), av.data(), go.data(), e.dp.data(),
                                 e.dv.data(), e.dav.data());
    auto twice = [&](const std::vector<double>& once, const std::vector<double>& two) {
      for (size_t i = 0; i < once.size(); ++i) not_doubled += two[i] != 2 * once[i];
    };
    twice(d.dq, e.dq);
    twice(d.dk, e.dk);
    twice(d.dak, e.dak);
    twice(d.dp, e.dp);
    twice(d.dv, e.dv);
    twice(d.dav, e.dav);
  }
  if (not_doubled > 0)
    w.take(std::numeric_limits<double>::infinity(), [&] {
      return fmt::format("{} gradient entries not doubled by a second call", not_doubled);
    });
  return measured_check(
      "shaw", c.name,
      fmt::format("float32 shaw_scores, shaw_values and both backwards are the float64 results "
                  "rounded once, and gradients accumulate, on {}",
                  describe(c)),
      w.r, 1,
      fmt::format("max_error is the worst |float32 - float64| / (2^-24 |float64| + 2^-150) over "
                  "every output and gradient (one rounding of the same double sum; derived in "
                  "include/posenc/verify/shaw_cases.hpp); worst at {}",
                  w.at));
}

check_result grad_case(const spec& c) {
  fixture fx;
  build(fx, c);
  const auto pr = fx.problem(c);
  const int64_t T = c.T, S = c.S, D = c.D, R = 2 * c.K + 1;
  const auto uT = static_cast<size_t>(T), uS = static_cast<size_t>(S), uD = static_cast<size_t>(D),
             uR = static_cast<size_t>(R);
  const double sc = fx.scale, asc = std::fabs(sc);
  auto absd = [](const std::vector<double>& a, double add) {
    std::vector<double> r(a.size());
    for (size_t i = 0; i < a.size(); ++i) r[i] = std::fabs(a[i]) + add;
    return r;
  };
  auto dot = [](const std::vector<double>& a, const std::vector<double>& b) {
    double s = 0;
    for (size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
    return s;
  };
  const double TS = static_cast<double>(T * S), Dd = static_cast<double>(D);
  worst w;
  // One op: x the inputs it is linear in one at a time, loss() reads them, an the analytic
  // gradients, gabs the backward of the absolute values, Labs, n_L.
  auto check_inputs = [&](const char* op, std::vector<std::vector<double>*> xs,
                          std::vector<const char*> names, const std::function<double()>& loss,
                          const std::vector<std::vector<double>>& an,
                          const std::vector<std::vector<double>>& gabs, double Labs, double nL) {
    for (size_t t = 0; t < xs.size(); ++t) {
      auto& x = *xs[t];
      for (size_t e = 0; e < x.size(); ++e) {
        const double keep = x[e];
        x[e] = keep + kEps;
        const double lp = loss();
        x[e] = keep - kEps;
        const double lm = loss();
        x[e] = keep;
        const double fd = (lp - lm) / (2 * kEps);
        const double g = gabs[t][e];
        const double tol =
            nL * kU * Labs / kEps + g * kU * ((std::fabs(keep) + kEps) / kEps + TS + Dd + 4);
        const double r = std::fabs(an[t][e] - fd) / tol;
        w.take(r, [&] {
          return fmt::format("{} d{}[{}]: analytic {:.17g}, fd {:.17g}, tol {:.3g}", op, names[t],
                             e, an[t][e], fd, tol);
        });
      }
    }
  };
  {  // scores in q, k, a^K
    std::vector<double> s(uT * uS), dq(uT * uD, 0), dk(uS * uD, 0), dak(uR * uD, 0);
    shaw_scores_backward<double>(pr, fx.q.data(), fx.k.data(), fx.ak.data(), sc, fx.gs.data(),
                                 dq.data(), dk.data(), dak.data());
    const auto aq = absd(fx.q, 0), ak = absd(fx.k, 0), aak = absd(fx.ak, 0), ag = absd(fx.gs, 0);
    std::vector<double> gq(dq.size(), 0), gk(dk.size(), 0), gak(dak.size(), 0);
    shaw_scores_backward<double>(pr, aq.data(), ak.data(), aak.data(), asc, ag.data(), gq.data(),
                                 gk.data(), gak.data());
    const auto eq = absd(fx.q, kEps), ek = absd(fx.k, kEps), eak = absd(fx.ak, kEps);
    shaw_scores<double>(pr, eq.data(), ek.data(), eak.data(), asc, s.data());
    const double Labs = dot(s, ag);
    auto q = fx.q, k = fx.k, a = fx.ak;
    auto loss = [&] {
      shaw_scores<double>(pr, q.data(), k.data(), a.data(), sc, s.data());
      return dot(s, fx.gs);
    };
    check_inputs("scores", {&q, &k, &a}, {"q", "k", "a^K"}, loss, {dq, dk, dak}, {gq, gk, gak},
                 Labs, Dd + TS + 4);
  }
  {  // values in p, v, a^V
    std::vector<double> o(uT * uD), dp(uT * uS, 0), dv(uS * uD, 0), dav(uR * uD, 0);
    shaw_values_backward<double>(pr, fx.probs.data(), fx.v.data(), fx.av.data(), fx.go.data(),
                                 dp.data(), dv.data(), dav.data());
    const auto ap = absd(fx.probs, 0), av = absd(fx.v, 0), aav = absd(fx.av, 0),
               ag = absd(fx.go, 0);
    std::vector<double> gp(dp.size(), 0), gv(dv.size(), 0), gav(dav.size(), 0);
    shaw_values_backward<double>(pr, ap.data(), av.data(), aav.data(), ag.data(), gp.data(),
                                 gv.data(), gav.data());
    const auto ep = absd(fx.probs, kEps), ev = absd(fx.v, kEps), eav = absd(fx.av, kEps);
    shaw_values<double>(pr, ep.data(), ev.data(), eav.data(), o.data());
    const double Labs = dot(o, ag);
    auto p = fx.probs, v = fx.v, a = fx.av;
    auto loss = [&] {
      shaw_values<double>(pr, p.data(), v.data(), a.data(), o.data());
      return dot(o, fx.go);
    };
    check_inputs("values", {&p, &v, &a}, {"p", "v", "a^V"}, loss, {dp, dv, dav}, {gp, gv, gav},
                 Labs, static_cast<double>(S + T * D) + 4);
  }
  return measured_check(
      "shaw", c.name + "/grad",
      fmt::format("the float64 backwards of shaw_scores (q, k, a^K) and shaw_values (p, v, a^V) "
                  "match central differences for every entry, on {}",
                  describe(c)),
      w.r, 1,
      fmt::format("max_error is the worst |analytic - fd| / tol_e, tol_e = n_L u Labs / eps + "
                  "gabs_e u ((|x_e| + eps) / eps + T S + D + 4), eps = 2^-10 (linear in each "
                  "entry: no truncation; derived in include/posenc/verify/shaw_cases.hpp); "
                  "worst at {}",
                  w.at));
}

std::vector<check_result> run_case(const spec& c) {
  std::vector<check_result> out;
  if (c.passes & check) out.push_back(check_case(c));
  if (c.passes & grad) out.push_back(grad_case(c));
  return out;
}

// ---- the lists ------------------------------------------------------------------------------

namespace {

spec make(int64_t T, int64_t S, int64_t K, int64_t D, uint64_t seed, unsigned passes,
          const std::string& group, int64_t offset = 0) {
  spec c;
  c.T = T, c.S = S, c.K = K, c.D = D;
  c.pos_offset = offset;
  c.seed = seed;
  c.passes = passes;
  c.group = group;
  c.name = fmt::format("{}/T{}/S{}/K{}/D{}{}", group, T, S, K, D,
                       offset ? fmt::format("/offset{}", offset) : std::string());
  return c;
}

// Check mode against one rounding, 2^-24 |float64| + 2^-150; grad mode against tol_e = n_L u Labs /
// eps + gabs_e u ((|x_e| + eps) / eps + T S + D + 4) (both derived in shaw_cases.hpp).
std::vector<spec> make_full() {
  std::vector<spec> v;
  // grad: the shapes of the original finite-difference tests, positions below 12.
  for (auto [T, S, K, D] : {std::tuple<int64_t, int64_t, int64_t, int64_t>{4, 6, 2, 3},
                            {1, 9, 0, 5},
                            {7, 3, 4, 8},
                            {3, 5, 1, 1}}) {
    auto c = make(T, S, K, D, static_cast<uint64_t>(T * 1000 + S * 10 + K), check | grad, "grad");
    c.pos_range = 12;
    v.push_back(c);
  }
  // float32: awkward shapes, check mode.
  for (auto [T, S, K, D] : {std::tuple<int64_t, int64_t, int64_t, int64_t>{11, 19, 5, 24},
                            {1, 129, 0, 59},
                            {17, 3, 16, 80},
                            {33, 33, 1, 96},
                            {3, 17, 5, 1},
                            {129, 1, 3, 24}})
    v.push_back(make(T, S, K, D, static_cast<uint64_t>(T * 7 + S * 3 + D), check, "float32"));
  v.push_back(make(9, 13, 4, 7, 2, check, "float32", int64_t{1} << 45));
  return v;
}

std::vector<spec> make_check() {
  std::vector<spec> v;
  v.push_back(make(4, 6, 2, 3, 6200, check | grad, "shaw"));
  v.push_back(make(1, 9, 0, 5, 6201, check | grad, "shaw"));
  v.push_back(make(3, 5, 1, 1, 6202, check | grad, "shaw"));
  v.push_back(make(11, 19, 5, 24, 6203, check, "shaw"));
  v.push_back(make(17, 33, 3, 59, 6204, check, "shaw", int64_t{1} << 45));
  return v;
}

}  // namespace

const std::vector<spec>& check_cases() {
  return case_list<make_check>();
}

const std::vector<spec>& full_cases() {
  return case_list<make_full>();
}

}  // namespace posenc::shaw_cases
