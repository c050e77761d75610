// The table kernels' case table: inputs, the derived bounds, the check and the named lists
// (include/posenc/verify/table_cases.hpp holds the derivations).
#include "posenc/verify/table_cases.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <limits>
#include <span>
#include <utility>

#include "posenc/encodings/alibi.hpp"

namespace posenc::table_cases {

namespace {
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

const char* layout_name(sin_layout l) {
  return l == sin_layout::interleaved ? "interleaved" : "halves";
}
const char* den_name(sin_denominator d) {
  return d == sin_denominator::width ? "width" : "half_minus_one";
}
}  // namespace

const char* name(kind k) {
  return k == kind::sinusoidal ? "sinusoidal" : "alibi_row";
}

std::string describe(const spec& c) {
  if (c.k == kind::sinusoidal) {
    const std::string pos = c.positions.empty() ? fmt::format("0..{}", c.iota_n - 1)
                                                : fmt::format("{} given", c.positions.size());
    return fmt::format(
        "kind=sinusoidal width={} layout={} denominator={} base={} positions={} "
        "bound_position={} abs_tol={} dtypes={}",
        c.p.width, layout_name(c.p.layout), den_name(c.p.denominator), c.p.base, pos,
        c.bound_position, c.abs_tol, c.dtypes);
  }
  return fmt::format("kind=alibi_row n={} keys={} q={} slopes={} causal flags={} seed={}", c.n,
                     c.kpos.empty() ? "drawn" : "given",
                     c.qpos ? std::to_string(*c.qpos) : std::string("drawn"), c.slopes.size(),
                     c.causal.size(), c.seed);
}

void draw(fixture& fx, const spec& c, rng& g) {
  if (c.k == kind::sinusoidal) {
    if (!c.positions.empty()) {
      fx.pos = c.positions;
    } else {
      fx.pos.resize(static_cast<size_t>(c.iota_n));
      for (int64_t i = 0; i < c.iota_n; ++i) fx.pos[static_cast<size_t>(i)] = i;
    }
    return;
  }
  if (!c.kpos.empty()) {
    fx.kpos = c.kpos;
  } else {
    fx.kpos.resize(static_cast<size_t>(c.n));
    for (auto& k : fx.kpos) k = static_cast<int64_t>(g.below(1u << 20));
    if (c.n > 2) fx.kpos[1] = (int64_t{1} << 53) - 5;  // huge distance (exact in double)
  }
  fx.qpos = c.qpos ? *c.qpos : static_cast<int64_t>(g.below(1u << 20));
  fx.acc.resize(c.causal.size() * c.slopes.size() * static_cast<size_t>(c.n));
  for (auto& e : fx.acc) e = static_cast<float>(g.normal());
}

void build(fixture& fx, const spec& c) {
  rng g = c.stream ? *c.stream : rng(c.seed);
  draw(fx, c, g);
}

namespace {

// The worst |fast - ref| / tol of one element type, and where.
template <typename Real>
std::pair<double, size_t> sin_worst(const spec& c, const std::vector<int64_t>& pos,
                                    const std::vector<double>& ref, double tol) {
  std::vector<Real> fast(ref.size());
  sinusoidal_table(c.p, pos, std::span<Real>(fast));
  double worst = 0;
  size_t at = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    const double v = static_cast<double>(fast[i]);
    const double r = std::isfinite(v) ? std::fabs(v - ref[i]) / tol : kNaN;
    if (std::isnan(worst)) break;
    if (std::isnan(r) || r > worst) worst = r, at = i;
  }
  return {worst, at};
}

check_result check_sinusoidal(const spec& c, const fixture& fx) {
  const size_t w = static_cast<size_t>(c.p.width);
  std::vector<double> ref(fx.pos.size() * w);
  sinusoidal_table_reference(c.p, fx.pos, ref);
  // The derived tolerances of the header: 2 bound (float64), 2 bound + 2^-25 (float32); the
  // tight bound abs_tol when given.
  const double tol64 =
      c.abs_tol > 0 ? c.abs_tol : 2 * sinusoidal_entry_error_bound(c.p, c.bound_position);
  const double tol32 = tol64 + 0x1p-25;
  double worst = 0;
  std::string at, per;
  auto take = [&](const char* ty, std::pair<double, size_t> r, double tol) {
    per += fmt::format("{}{} {:.3g} (tol {:.3g})", per.empty() ? "" : ", ", ty, r.first, tol);
    if (std::isnan(worst)) return;
    if (std::isnan(r.first) || r.first > worst || at.empty()) {
      worst = r.first;
      at = fmt::format("{} position {} channel {} (reference {:.17g})", ty, fx.pos[r.second / w],
                       r.second % w, ref[r.second]);
    }
  };
  if (c.dtypes & f64) take("float64", sin_worst<double>(c, fx.pos, ref, tol64), tol64);
  if (c.dtypes & f32) take("float32", sin_worst<float>(c, fx.pos, ref, tol32), tol32);
  return measured_check(
      c.group, c.name,
      fmt::format("sinusoidal_table (fast path) matches the long double reference within the "
                  "derived bound, on {}",
                  describe(c)),
      worst, 1,
      fmt::format("max_error is the worst |fast - reference| / tol, tol = {} (+ 2^-25 for "
                  "float32); per type: {}; worst at {}; bounds derived in "
                  "include/posenc/verify/table_cases.hpp",
                  c.abs_tol > 0 ? "13 * 2^-53" : "2 sinusoidal_entry_error_bound", per, at));
}

check_result check_alibi(const spec& c, const fixture& fx) {
  const int64_t n = c.n;
  int64_t bad = 0;
  std::string first;
  size_t row = 0;
  for (bool causal : c.causal)
    for (double slope : c.slopes) {
      std::vector<float> out(static_cast<size_t>(n));
      const auto first_acc = fx.acc.begin() + static_cast<std::ptrdiff_t>(row) * n;
      std::vector<float> acc(first_acc, first_acc + n);
      const auto acc0 = acc;
      ++row;
      alibi_bias_row(slope, fx.qpos, fx.kpos.data(), n, causal, out.data());
      alibi_bias_row(slope, fx.qpos, fx.kpos.data(), n, causal, acc.data(), true);
      for (int64_t j = 0; j < n; ++j) {
        const float want = static_cast<float>(alibi_bias(slope, fx.qpos, fx.kpos[j], causal));
        // NOLINTNEXTLINE(bugprone-suspicious-memory-comparison): bitwise equality is the claim
        const bool ok_out = std::memcmp(&out[j], &want, sizeof(float)) == 0;
        const bool ok_acc = acc[j] == acc0[j] + want;
        if (ok_out && ok_acc) continue;
        bad += !ok_out + !ok_acc;
        if (first.empty())
          first = fmt::format(
              "slope {} causal {} key {} (k {}, q {}): row {:.9g}, accumulated {:.9g}, want "
              "{:.9g} and {:.9g}",
              slope, causal, j, fx.kpos[j], fx.qpos, out[j], acc[j], want, acc0[j] + want);
      }
    }
  return measured_check(
      c.group, c.name,
      fmt::format("alibi_bias_row (written and accumulated) equals alibi_bias rounded to float bit "
                  "for bit, on {}",
                  describe(c)),
      static_cast<double>(bad), 0,
      fmt::format("max_error is the count of differing elements{}",
                  first.empty() ? std::string() : "; first at " + first));
}

}  // namespace

check_result check_case(const spec& c) {
  fixture fx;
  build(fx, c);
  return c.k == kind::sinusoidal ? check_sinusoidal(c, fx) : check_alibi(c, fx);
}

// ---- the lists ------------------------------------------------------------------------------

namespace {

constexpr sin_layout kLayouts[] = {sin_layout::interleaved, sin_layout::halves};
constexpr sin_denominator kDens[] = {sin_denominator::width, sin_denominator::half_minus_one};

// Positions 0, 1, 2, 3, 17, 129, 1e7, 2^40 + 3, 2^53 - 1, 2^53 and `drawn` more below 2^31.
std::vector<int64_t> awkward_positions(rng& g, int drawn) {
  std::vector<int64_t> pos = {0,
                              1,
                              2,
                              3,
                              17,
                              129,
                              10000000,
                              (int64_t{1} << 40) + 3,
                              (int64_t{1} << 53) - 1,
                              int64_t{1} << 53};
  for (int i = 0; i < drawn; ++i) pos.push_back(static_cast<int64_t>(g.below(1u << 31)));
  return pos;
}

std::string sin_name(const spec& c) {
  return fmt::format("w{}/{}/{}", c.p.width, layout_name(c.p.layout), den_name(c.p.denominator));
}

spec sinusoidal(int64_t w, sin_layout l, sin_denominator d, std::vector<int64_t> pos,
                const std::string& section) {
  spec c;
  c.p.width = w;
  c.p.layout = l;
  c.p.denominator = d;
  c.p.base = w == 130 ? 5e5 : 1e4;
  c.positions = std::move(pos);
  c.bound_position = int64_t{1} << 53;
  c.seed = 1;
  c.group = "sinusoidal";
  c.name = section + "/" + sin_name(c);
  return c;
}

const std::vector<double> kSlopes = {0.5, 1.0 / 256, 0.0883883476483184};

// Adds c with the stream at g's state, then advances g past c's draws.
void chain(std::vector<spec>& v, spec c, rng& g) {
  c.stream = g;
  fixture tmp;
  draw(tmp, c, g);
  v.push_back(std::move(c));
}

std::vector<spec> make_full() {
  std::vector<spec> v;
  // sinusoidal_bound (seed 1): one draw of positions for every width x layout x denominator.
  {
    rng g(1);
    const auto pos = awkward_positions(g, 20);
    for (int64_t w : {2, 6, 10, 18, 64, 130, 1024})
      for (auto l : kLayouts)
        for (auto d : kDens) v.push_back(sinusoidal(w, l, d, pos, "sinusoidal_bound"));
  }
  // sinusoidal_tight: width 1024 (paper convention), positions 0 .. 4095, float64.
  {
    spec c;
    c.p.width = 1024;
    c.iota_n = 4096;
    c.bound_position = 4095;
    c.abs_tol = 13 * 0x1p-53;
    c.dtypes = f64;
    c.group = "sinusoidal";
    c.name = "sinusoidal_tight/" + sin_name(c);
    v.push_back(c);
  }
  // alibi_row (seed 3): one stream across n, each case drawing keys, query and accumulators.
  {
    rng g(3);
    for (int64_t n : {0, 1, 3, 4, 5, 17, 129, 1000}) {
      spec c;
      c.k = kind::alibi_row;
      c.n = n;
      c.slopes = kSlopes;
      c.seed = 3;
      c.group = "alibi";
      c.name = fmt::format("alibi_row/n{}", n);
      chain(v, c, g);
    }
  }
  return v;
}

std::vector<spec> make_check() {
  std::vector<spec> v;
  {
    rng g(6000);
    const auto pos = awkward_positions(g, 6);
    for (int64_t w : {2, 64, 130})
      for (auto l : kLayouts)
        for (auto d : kDens) {
          auto c = sinusoidal(w, l, d, pos, "table");
          c.seed = 6000;
          v.push_back(std::move(c));
        }
  }
  {
    rng g(6001);
    for (int64_t n : {1, 5, 17, 129}) {
      spec c;
      c.k = kind::alibi_row;
      c.n = n;
      c.slopes = kSlopes;
      c.seed = 6001;
      c.group = "alibi";
      c.name = fmt::format("row/n{}", n);
      chain(v, c, g);
    }
  }
  return v;
}

std::vector<spec> make_perf() {
  std::vector<spec> v;
  {
    spec c;
    c.p.width = 1024;
    c.iota_n = 65536;
    c.bound_position = 65536;
    c.dtypes = f32;
    c.group = "sinusoidal";
    c.name = "sinusoidal_table/N=65536/d=1024";
    v.push_back(c);
  }
  {
    const int64_t S = 262144;
    spec c;
    c.k = kind::alibi_row;
    c.n = S;
    c.kpos.resize(static_cast<size_t>(S));
    for (int64_t j = 0; j < S; ++j) c.kpos[static_cast<size_t>(j)] = j;
    c.qpos = S - 1;  // the last query of a causal prefill: distances 0 .. S-1
    c.slopes = alibi_slopes(32);
    c.causal = {true};
    c.seed = 7;
    c.group = "alibi";
    c.name = "bias_row/alibi/H=32/S=262144";
    v.push_back(c);
  }
  return v;
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
  if (c.k == kind::sinusoidal) {
    r.iota_n = 256;
    r.bound_position = 256;
  } else {
    r.n = 4096;
    r.kpos.resize(4096);
    r.qpos = 4095;
  }
  return r;
}

spec perf_validation_case(const spec& c) {
  if (c.k != kind::sinusoidal) return c;
  spec r = c;
  const int64_t N = c.positions.empty() ? c.iota_n : static_cast<int64_t>(c.positions.size());
  std::vector<int64_t> rows = {0, 1, N / 3, N - 1};
  r.positions.clear();
  for (int64_t i : rows) r.positions.push_back(c.positions.empty() ? i : c.positions[i]);
  r.bound_position = N;
  r.name = c.name + "/validation_rows4";
  return r;
}

}  // namespace posenc::table_cases
