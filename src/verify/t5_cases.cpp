// The T5 bias case table: the checks of both modes and the named lists
// (include/posenc/verify/t5_cases.hpp holds the derivations).
#include "posenc/verify/t5_cases.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <limits>
#include <utility>

#include "posenc/core/rng.hpp"

namespace posenc::t5_cases {

namespace {
constexpr double kU = 0x1p-53;
constexpr double kUf = 0x1p-24;
constexpr int64_t kBig = int64_t{1} << 62;
}  // namespace

std::string describe(const spec& c) {
  return fmt::format("num_buckets={} max_distance={} {} H={} T={} S={} seed={}", c.p.num_buckets,
                     c.p.max_distance, c.p.bidirectional ? "bidirectional" : "causal", c.heads,
                     c.qpos.size(), c.kpos.size(), c.seed);
}

t5_bias_table table(const spec& c) {
  return t5_init(c.p, c.heads, c.seed, 1.0);
}

check_result check_case(const spec& c) {
  const auto t = table(c);
  const auto plan = t5_plan_rows(c.p);
  const int64_t H = c.heads, T = static_cast<int64_t>(c.qpos.size()),
                S = static_cast<int64_t>(c.kpos.size());
  int64_t bad = 0;
  std::string first;
  // Buckets: every query's row against the scalar bucket of every key.
  std::vector<int32_t> b(static_cast<size_t>(S));
  for (int64_t i = 0; i < T; ++i) {
    const int64_t q = c.qpos[static_cast<size_t>(i)];
    t5_bucket_row(plan, q, c.kpos.data(), S, b.data());
    for (int64_t j = 0; j < S; ++j) {
      const int64_t r = c.kpos[static_cast<size_t>(j)] - q;
      const int64_t want = t5_bucket(r, c.p);
      if (b[static_cast<size_t>(j)] == want) continue;
      ++bad;
      if (first.empty())
        first = fmt::format("bucket of offset {} (query {}, key {}): row {}, t5_bucket {}", r, i, j,
                            b[static_cast<size_t>(j)], want);
    }
  }
  // Bias rows, written and accumulated, against the dense reference (H, T, S).
  std::vector<float> dense(static_cast<size_t>(H * T * S));
  t5_bias_dense(t, c.qpos, c.kpos, dense.data());
  rng g(c.seed ^ 0xACC);
  std::vector<float> row(static_cast<size_t>(S)), acc(static_cast<size_t>(S)), acc0;
  for (int64_t h = 0; h < H; ++h)
    for (int64_t i = 0; i < T; ++i) {
      for (auto& e : acc) e = static_cast<float>(g.normal());
      acc0 = acc;
      const int64_t q = c.qpos[static_cast<size_t>(i)];
      t5_bias_row(t, plan, h, q, c.kpos.data(), S, row.data());
      t5_bias_row(t, plan, h, q, c.kpos.data(), S, acc.data(), true);
      const float* want = dense.data() + (h * T + i) * S;
      for (int64_t j = 0; j < S; ++j) {
        const auto J = static_cast<size_t>(j);
        // NOLINTNEXTLINE(bugprone-suspicious-memory-comparison): bitwise equality is the claim
        const bool ok_row = std::memcmp(&row[J], &want[j], sizeof(float)) == 0;
        const bool ok_acc = acc[J] == acc0[J] + want[j];
        if (ok_row && ok_acc) continue;
        bad += !ok_row + !ok_acc;
        if (first.empty())
          first = fmt::format(
              "head {} query {} key {}: row {:.9g}, accumulated {:.9g}, want {:.9g} and {:.9g}", h,
              i, j, row[J], acc[J], want[j], acc0[J] + want[j]);
      }
    }
  return measured_check(
      "t5", c.name,
      fmt::format("t5_bucket_row equals t5_bucket, and t5_bias_row (written and accumulated) "
                  "equals t5_bias_dense, bit for bit, on {}",
                  describe(c)),
      static_cast<double>(bad), 0,
      fmt::format("max_error is the count of differing elements{}",
                  first.empty() ? std::string() : "; first at " + first));
}

check_result grad_case(const spec& c) {
  auto t = table(c);
  // On a 2^-10 grid (|W| < 2^13): W +- eps is exact in float.
  for (auto& w : t.weights) w = std::round(w * 1024.0f) / 1024.0f;
  const int64_t H = c.heads, T = static_cast<int64_t>(c.qpos.size()),
                S = static_cast<int64_t>(c.kpos.size());
  const size_t n = static_cast<size_t>(H * T * S);
  rng g(c.seed ^ 0x6AD);
  std::vector<float> G(n);
  for (auto& e : G) e = static_cast<float>(g.normal());
  std::vector<float> an(t.weights.size(), 0.0f);
  t5_bias_backward(t, c.qpos, c.kpos, G.data(), an.data());
  const double eps = 0.125;
  std::vector<float> bias(n);
  auto loss = [&] {
    t5_bias_dense(t, c.qpos, c.kpos, bias.data());
    double L = 0;
    for (size_t e = 0; e < n; ++e) L += static_cast<double>(bias[e]) * G[e];
    return L;
  };
  // Magnitudes of the derivation: Labs at the perturbed points, gabs per table entry.
  std::vector<double> gabs(t.weights.size(), 0.0);
  double Labs = 0;
  for (int64_t i = 0; i < T; ++i)
    for (int64_t j = 0; j < S; ++j) {
      const auto b =
          t5_bucket(c.kpos[static_cast<size_t>(j)] - c.qpos[static_cast<size_t>(i)], c.p);
      for (int64_t h = 0; h < H; ++h) {
        const double ag = std::fabs(G[static_cast<size_t>((h * T + i) * S + j)]);
        const auto e = static_cast<size_t>(b * H + h);
        gabs[e] += ag;
        Labs += (std::fabs(t.weights[e]) + eps) * ag;
      }
    }
  const double nn = static_cast<double>(n);
  double worst = 0;
  std::string at;
  for (size_t e = 0; e < t.weights.size(); ++e) {
    const float keep = t.weights[e];
    t.weights[e] = static_cast<float>(keep + eps);
    const double lp = loss();
    t.weights[e] = static_cast<float>(keep - eps);
    const double lm = loss();
    t.weights[e] = keep;
    const double fd = (lp - lm) / (2 * eps);
    const double tol = nn * kU * Labs / eps + (kUf + 2 * nn * kU) * gabs[e];
    const double r = std::fabs(static_cast<double>(an[e]) - fd) / tol;
    if (!std::isnan(worst) && (std::isnan(r) || r > worst || at.empty())) {
      worst = r;
      at = fmt::format("entry (bucket {}, head {}): analytic {:.17g}, fd {:.17g}, tol {:.3g}",
                       e / static_cast<size_t>(H), e % static_cast<size_t>(H), an[e], fd, tol);
    }
  }
  return measured_check(
      "t5", c.name + "/grad",
      fmt::format("t5_bias_backward matches central differences of <t5_bias_dense(W), G> in "
                  "double for every table entry, on {}",
                  describe(c)),
      worst, 1,
      fmt::format("max_error is the worst |analytic - fd| / tol, tol = n u Labs / eps + (u_f + "
                  "2 n u) gabs (eps = 2^-3, exact steps; derived in "
                  "include/posenc/verify/t5_cases.hpp); worst at {}",
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

std::string pname(const t5_params& p) {
  return fmt::format("N{}/M{}/{}", p.num_buckets, p.max_distance,
                     p.bidirectional ? "bidir" : "causal");
}

spec make(const t5_params& p, int64_t H, std::vector<int64_t> q, std::vector<int64_t> k,
          uint64_t seed, unsigned passes, const std::string& group, const std::string& name) {
  spec c;
  c.p = p;
  c.heads = H;
  c.qpos = std::move(q);
  c.kpos = std::move(k);
  c.seed = seed;
  c.passes = passes;
  c.group = group;
  c.name = name;
  return c;
}

// Keys 0, 1, 2, +-2^62 and their neighbours, then `drawn` more of every magnitude below 2^40,
// either sign; clamped to |k| <= 2^62 - 100 so every offset from queries 0, 5, -77 fits.
std::vector<int64_t> awkward_keys(rng& g, int drawn) {
  std::vector<int64_t> k = {0, 1, 2, kBig, -kBig, kBig - 1, 1 - kBig};
  for (int i = 0; i < drawn; ++i) {
    const auto mag = static_cast<int64_t>(g.below(uint64_t{1} << (i % 40)));
    k.push_back(g.below(2) ? mag : -mag);
  }
  for (auto& x : k) x = std::clamp(x, 100 - kBig, kBig - 100);
  return k;
}

// Rows whose nearest key lies at n = edge from the query (edge around the last threshold, where
// t5_bias_row's one-bucket shortcut starts), 300 keys 7 apart, the last 200 reversed.
std::vector<int64_t> saturated_keys(int64_t q, int64_t edge, int64_t dir) {
  std::vector<int64_t> k;
  for (int64_t j = 0; j < 300; ++j) k.push_back(q + dir * (edge + 7 * j));
  std::reverse(k.begin() + 100, k.end());
  return k;
}

std::vector<int64_t> iota(int64_t n, int64_t a = 1, int64_t b = 0) {
  std::vector<int64_t> v(static_cast<size_t>(n));
  for (int64_t j = 0; j < n; ++j) v[static_cast<size_t>(j)] = a * j + b;
  return v;
}

void add_saturated(std::vector<spec>& v, const std::string& group) {
  for (bool bidir : {false, true}) {
    const t5_params p{32, 128, bidir};
    const int64_t last = t5_plan_rows(p).gt.back();  // n > last: the last bucket
    for (int64_t q : {int64_t{0}, int64_t{1000000}})
      for (int64_t edge : {last + 1, last, last - 1})
        for (int64_t dir : {-1, 1})
          v.push_back(make(p, 1, {q}, saturated_keys(q, edge, dir), 12, check, group,
                           fmt::format("{}/{}/q{}/edge{}/dir{}", group, pname(p), q, edge, dir)));
  }
  // Keys 0 .. 599 all beyond 128 behind the query: every chunk is one bucket.
  v.push_back(
      make({32, 128, false}, 3, {5000}, iota(600), 2, check, group, group + "/constant_fill/H3"));
}

// Check mode is exact (tolerance 0: bucket thresholds and table copies, t5_cases.hpp); grad mode
// runs against tol_e = n u Labs / eps + (u_f + 2 n u) gabs_e (derived in t5_cases.hpp).
std::vector<spec> make_full() {
  std::vector<spec> v;
  {  // bucket_row: one stream (seed 4) across every parameter set.
    rng g(4);
    for (bool bidir : {true, false})
      for (int64_t nb : {2, 4, 6, 8, 32, 33, 64, 320})
        for (int64_t M : {3, 20, 128, 1000, 1 << 20}) {
          const t5_params p{nb, M, bidir};
          if (bidir && (nb % 2 || nb < 4)) continue;
          const int64_t half = bidir ? nb / 2 : nb;
          if (M <= half / 2) continue;  // t5_validate: max_distance > max_exact
          v.push_back(make(p, 2, {0, 5, -77}, awkward_keys(g, 200), 4, check, "bucket_row",
                           "bucket_row/" + pname(p)));
        }
  }
  // bias_row: 700 keys 3 apart from -50 (more than the 256-entry chunk), one query at 900.
  v.push_back(make({32, 128, false}, 5, {900}, iota(700, 3, -50), 11, check, "bias_row",
                   "bias_row/N32/M128/causal/S700"));
  v.push_back(make({32, 128, true}, 4, {-3, 0, 250, 900}, iota(700, 3, -50), 13, check, "bias_row",
                   "bias_row/N32/M128/bidir/S700"));
  add_saturated(v, "saturated");
  // grad: tiny tables so that every bucket is reached by some pair, queries repeated.
  for (bool bidir : {true, false}) {
    const t5_params p{8, 12, bidir};
    v.push_back(make(p, 3, {0, 3, 3, 10, 40}, {0, 1, 2, 5, 9, 20, 41}, 42, check | grad, "grad",
                     "grad/" + pname(p) + "/H3"));
  }
  v.push_back(make({16, 40, true}, 4, iota(17, 7), iota(29, 4, 3), 7, check | grad, "grad",
                   "grad/N16/M40/bidir/H4/T17/S29"));
  v.push_back(make({16, 40, false}, 4, iota(17, 7), iota(29, 4, 3), 7, check | grad, "grad",
                   "grad/N16/M40/causal/H4/T17/S29"));
  return v;
}

std::vector<spec> make_check() {
  std::vector<spec> v;
  rng g(6100);
  for (const t5_params& p :
       {t5_params{32, 128, true}, t5_params{32, 128, false}, t5_params{10, 20, true},
        t5_params{2, 5, false}, t5_params{320, 1000, true}})
    v.push_back(
        make(p, 3, {0, 5, -77}, awkward_keys(g, 60), 6100, check, "t5", "rows/" + pname(p)));
  {
    const t5_params p{32, 128, false};
    const int64_t last = t5_plan_rows(p).gt.back();
    v.push_back(make(p, 2, {1000000}, saturated_keys(1000000, last, -1), 6101, check, "t5",
                     "rows/saturated/" + pname(p)));
  }
  for (bool bidir : {true, false}) {
    const t5_params p{8, 12, bidir};
    v.push_back(make(p, 3, {0, 3, 3, 10, 40}, {0, 1, 2, 5, 9, 20, 41}, 6102, grad, "t5",
                     "table/" + pname(p)));
  }
  return v;
}

std::vector<spec> make_perf() {
  const int64_t S = 262144;
  // The last query of a causal prefill: distances 0 .. S-1.
  return {
      make({32, 128, false}, 32, {S - 1}, iota(S), 7, check, "t5", "bias_row/t5/H=32/S=262144")};
}

}  // namespace

const std::vector<spec>& check_cases() {
  return case_list<make_check>();
}

const std::vector<spec>& full_cases() {
  return case_list<make_full>();
}

const std::vector<spec>& perf_cases() {
  return case_list<make_perf>();
}

spec perf_quick(const spec& c) {
  spec r = c;
  const int64_t S = 4096;
  r.kpos = iota(S);
  r.qpos = {S - 1};
  return r;
}

}  // namespace posenc::t5_cases
