// The RoPE case table: inputs, the derived bounds, check mode and the named lists
// (include/posenc/verify/rope_cases.hpp holds the derivations).
#include "posenc/verify/rope_cases.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>
#include <utility>

namespace posenc::rope_cases {

namespace {
constexpr double kU = 0x1p-53;
constexpr double kUf = 0x1p-24;
constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

int64_t key_heads(const spec& c) {
  return c.m == mode::fused || c.e == entry::apply_qk ? c.Hk : 0;
}

// Index of the partner of channel d (< R) in its pair.
int64_t partner(rope_layout l, int64_t R, int64_t d) {
  if (l == rope_layout::interleaved) return d ^ 1;
  return d < R / 2 ? d + R / 2 : d - R / 2;
}

template <typename Real>
const char* type_name() {
  return std::is_same_v<Real, float> ? "float32" : "float64";
}

template <typename Real>
std::vector<Real> to(const std::vector<double>& v) {
  return std::vector<Real>(v.begin(), v.end());
}
}  // namespace

const char* name(mode m) {
  const char* n[] = {"reference", "plain", "fused"};
  return n[static_cast<int>(m)];
}

const char* name(entry e) {
  const char* n[] = {"apply", "apply_qk", "unrotate"};
  return n[static_cast<int>(e)];
}

std::string describe(const spec& c) {
  std::string pos = c.positions.empty()
                        ? (c.pos_max > 0 ? fmt::format("below {}", c.pos_max) : std::string("t"))
                        : fmt::format("[{}]", fmt::join(c.positions, ", "));
  return fmt::format(
      "mode={} entry={} T={} H={} Hk={} D={} R={} layout={} angle={} inverse={} theta={} "
      "factor={} positions={} head_stride={} seed={}",
      name(c.m), c.m == mode::fused ? "apply_qk" : name(c.e), c.T, c.H, key_heads(c), c.D, c.R,
      rope_layout_name(c.layout), rope_angle_name(c.angle), c.inverse, c.theta, c.factor, pos,
      c.head_stride, c.seed);
}

rope_freqs freqs(const spec& c) {
  rope_config rc;
  rc.head_dim = c.D;
  rc.rotary_dim = c.R;
  rc.theta = c.theta;
  if (c.factor != 1) {
    rc.type = rope_type::yarn;
    rc.factor = c.factor;
    rc.original_max_position_embeddings = 4096;
  }
  return rope_frequencies(rc);
}

void draw(fixture& fx, const spec& c, rng& g) {
  const auto normals = [&](std::vector<double>& v, int64_t n) {
    v.resize(static_cast<size_t>(n));
    for (auto& e : v) e = g.normal();
  };
  const int64_t T = c.m == mode::plain ? 1 : c.T;
  if (!c.positions.empty()) {
    fx.pos = c.positions;
  } else {
    fx.pos.resize(static_cast<size_t>(T));
    for (int64_t t = 0; t < T; ++t)
      fx.pos[t] =
          c.pos_max > 0 ? static_cast<int64_t>(g.below(static_cast<uint64_t>(c.pos_max))) : t;
  }
  if (c.m == mode::plain) {
    normals(fx.x, c.H * c.head_stride);
    return;
  }
  const int64_t Hk = key_heads(c);
  normals(fx.x, c.T * c.H * c.D);
  if (Hk > 0) normals(fx.k, c.T * Hk * c.D);
  if (c.m == mode::fused) {
    normals(fx.x64, c.T * c.H * c.D);
    normals(fx.k64, c.T * Hk * c.D);
  }
}

void build(fixture& fx, const spec& c) {
  fx.f = freqs(c);
  rng g = c.stream ? *c.stream : rng(c.seed);
  draw(fx, c, g);
}

template <typename Real>
double reference_unit() {
  return std::is_same_v<Real, float> ? 3 * kUf + 5.5 * kU : 5.5 * kU;
}
template double reference_unit<float>();
template double reference_unit<double>();

namespace {

// reference_ratio with the index of the worst element.
template <typename Real>
std::pair<double, int64_t> worst_ratio(rope_layout l, int64_t R, int64_t D, double scale,
                                       std::span<const Real> x, std::span<const Real> y,
                                       std::span<const double> ref) {
  double worst = 0;
  int64_t at = 0;
  const int64_t rows = static_cast<int64_t>(x.size()) / D;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t d = 0; d < D; ++d) {
      const int64_t e = r * D + d;
      double ratio;
      if (d >= R) {
        // NOLINTNEXTLINE(bugprone-suspicious-memory-comparison): bitwise equality is the claim
        ratio = std::memcmp(&y[e], &x[e], sizeof(Real)) == 0 ? 0 : kInf;
      } else {
        const double mag = std::fabs(static_cast<double>(x[e])) +
                           std::fabs(static_cast<double>(x[r * D + partner(l, R, d)]));
        const double bound = reference_unit<Real>() * scale * mag + 1e-300;
        ratio = std::isfinite(static_cast<double>(y[e]))
                    ? std::fabs(static_cast<double>(y[e]) - ref[e]) / bound
                    : kNaN;
      }
      if (std::isnan(worst)) continue;
      if (std::isnan(ratio) || ratio > worst) worst = ratio, at = e;
    }
  return {worst, at};
}

}  // namespace

template <typename Real>
double reference_ratio(rope_layout l, int64_t R, int64_t D, double scale, std::span<const Real> x,
                       std::span<const Real> y, std::span<const double> ref) {
  return worst_ratio<Real>(l, R, D, scale, x, y, ref).first;
}
template double reference_ratio<float>(rope_layout, int64_t, int64_t, double,
                                       std::span<const float>, std::span<const float>,
                                       std::span<const double>);
template double reference_ratio<double>(rope_layout, int64_t, int64_t, double,
                                        std::span<const double>, std::span<const double>,
                                        std::span<const double>);

namespace {

// The worst ratio seen, where, and the worst per quantity. A NaN ratio sticks: measured_check
// fails it.
struct tracker {
  double worst = 0;
  std::string at;
  std::vector<std::pair<std::string, double>> per;
  void add(const std::string& what, double ratio, const std::string& where) {
    per.emplace_back(what, ratio);
    if (std::isnan(worst)) return;
    if (std::isnan(ratio) || ratio > worst || at.empty()) worst = ratio, at = where;
  }
  std::string summary() const {
    std::string s;
    for (const auto& [what, r] : per)
      s += fmt::format("{}{} {:.3g}", s.empty() ? "" : ", ", what, r);
    return s;
  }
};

// One tensor of reference mode: x (rows of width D) through the entry, y its output.
template <typename Real>
void compare_reference(tracker& tr, const std::string& what, const spec& c, const rope_freqs& fr,
                       bool inverse, const std::vector<int64_t>& pos, const std::vector<Real>& x,
                       const std::vector<Real>& y, int64_t H) {
  const std::vector<double> xr(x.begin(), x.end());
  std::vector<double> ref(xr.size());
  rope_apply_reference(fr, c.layout, pos, xr.data(), ref.data(), c.T, H, c.D, inverse);
  const auto w =
      worst_ratio<Real>(c.layout, c.R, c.D, fr.attention_factor, std::span<const Real>(x),
                        std::span<const Real>(y), std::span<const double>(ref));
  const int64_t e = w.second;
  tr.add(what, w.first,
         fmt::format("{} token {} head {} channel {}: kernel {:.17g}, reference {:.17g}, x {:.17g}",
                     what, e / c.D / H, (e / c.D) % H, e % c.D, static_cast<double>(y[e]), ref[e],
                     static_cast<double>(x[e])));
}

template <typename Real>
void run_reference(tracker& tr, const spec& c, const fixture& fx) {
  const std::string ty = type_name<Real>();
  // rope_unrotate applies R(p)^T / a: the reference is the transpose with magnitude 1 / a (the
  // same double the kernel's cos/sin rows are scaled by).
  rope_freqs fr = fx.f;
  bool inverse = c.inverse;
  if (c.e == entry::unrotate) {
    fr.attention_factor = 1.0 / fx.f.attention_factor;
    inverse = true;
  }
  const auto x = to<Real>(fx.x);
  auto y = x;
  switch (c.e) {
    case entry::apply:
      rope_apply(fx.f, c.layout, rope_angle::exact, fx.pos, y.data(), c.T, c.H, c.D, c.inverse);
      break;
    case entry::unrotate:
      rope_unrotate(fx.f, c.layout, rope_angle::exact, fx.pos, y.data(), c.T, c.H, c.D);
      break;
    case entry::apply_qk: {
      const auto k = to<Real>(fx.k);
      auto yk = k;
      rope_apply_qk(fx.f, c.layout, rope_angle::exact, fx.pos, y.data(), c.H, yk.data(), c.Hk, c.T,
                    c.D, c.inverse);
      compare_reference<Real>(tr, ty + " k", c, fr, inverse, fx.pos, k, yk, c.Hk);
      break;
    }
  }
  compare_reference<Real>(tr, ty + (c.e == entry::apply_qk ? " q" : " x"), c, fr, inverse, fx.pos,
                          x, y, c.H);
}

template <typename Real>
void run_plain(tracker& tr, const spec& c, const fixture& fx) {
  const double u = std::numeric_limits<Real>::epsilon() / 2;
  const int64_t H = c.H, S = c.head_stride, R = c.R;
  const auto buf = to<Real>(fx.x);
  std::vector<Real> cs(R / 2), sn(R / 2);
  rope_cos_sin(fx.f, rope_angle::exact, fx.pos[0], cs.data(), sn.data());
  auto a = buf, b = buf;
  rope_rotate(c.layout, R, cs.data(), sn.data(), a.data(), H, S, c.inverse);
  rope_rotate_plain(c.layout, R, cs.data(), sn.data(), b.data(), H, S, c.inverse);
  double worst = 0;
  int64_t at = 0;
  for (int64_t h = 0; h < H; ++h)
    for (int64_t d = 0; d < S; ++d) {
      const int64_t e = h * S + d;
      double ratio;
      if (d >= R) {
        // NOLINTNEXTLINE(bugprone-suspicious-memory-comparison): bitwise equality is the claim
        ratio = std::memcmp(&a[e], &buf[e], sizeof(Real)) == 0 ? 0 : kInf;
      } else {
        const double mag = std::fabs(static_cast<double>(buf[e])) +
                           std::fabs(static_cast<double>(buf[h * S + partner(c.layout, R, d)]));
        const double diff = std::fabs(static_cast<double>(a[e]) - static_cast<double>(b[e]));
        ratio = std::isfinite(diff) ? diff / (4 * u * mag + 1e-300) : kNaN;
      }
      if (std::isnan(worst)) continue;
      if (std::isnan(ratio) || ratio > worst) worst = ratio, at = e;
    }
  tr.add(std::string(type_name<Real>()) + " x", worst,
         fmt::format("{} head {} channel {}: rope_rotate {:.17g}, rope_rotate_plain {:.17g}",
                     type_name<Real>(), at / S, at % S, static_cast<double>(a[at]),
                     static_cast<double>(b[at])));
}

// Elements of a and b that differ (bitwise).
template <typename Real>
int64_t differing(const std::vector<Real>& a, const std::vector<Real>& b) {
  int64_t n = 0;
  // NOLINTNEXTLINE(bugprone-suspicious-memory-comparison): bitwise equality is the claim
  for (size_t i = 0; i < a.size(); ++i) n += std::memcmp(&a[i], &b[i], sizeof(Real)) != 0;
  return n;
}

template <typename Real>
void run_fused(tracker& tr, const spec& c, const fixture& fx) {
  const std::string ty = type_name<Real>();
  const bool f32_run = std::is_same_v<Real, float>;
  const auto q0 = to<Real>(f32_run ? fx.x : fx.x64), k0 = to<Real>(f32_run ? fx.k : fx.k64);
  for (bool inverse : {false, true}) {
    auto q = q0, k = k0, q1 = q0, k1 = k0;
    rope_apply_qk(fx.f, c.layout, c.angle, fx.pos, q.data(), c.H, k.data(), c.Hk, c.T, c.D,
                  inverse);
    rope_apply(fx.f, c.layout, c.angle, fx.pos, q1.data(), c.T, c.H, c.D, inverse);
    rope_apply(fx.f, c.layout, c.angle, fx.pos, k1.data(), c.T, c.Hk, c.D, inverse);
    const std::string dir = inverse ? " inverse" : " forward";
    const int64_t nq = differing(q, q1), nk = differing(k, k1);
    tr.add(ty + dir + " q", static_cast<double>(nq),
           fmt::format("{}{}: {} of {} q and {} of {} k elements differ", ty, dir, nq, q.size(), nk,
                       k.size()));
    tr.add(ty + dir + " k", static_cast<double>(nk),
           fmt::format("{}{}: {} of {} q and {} of {} k elements differ", ty, dir, nq, q.size(), nk,
                       k.size()));
  }
}

template <typename Real>
void run(tracker& tr, const spec& c, const fixture& fx) {
  switch (c.m) {
    case mode::reference:
      run_reference<Real>(tr, c, fx);
      break;
    case mode::plain:
      run_plain<Real>(tr, c, fx);
      break;
    case mode::fused:
      run_fused<Real>(tr, c, fx);
      break;
  }
}

}  // namespace

check_result check_case(const spec& c) {
  fixture fx;
  build(fx, c);
  tracker tr;
  if (c.dtypes & f32) run<float>(tr, c, fx);
  if (c.dtypes & f64) run<double>(tr, c, fx);
  const std::string types = (c.dtypes & f32) && (c.dtypes & f64) ? "float32 and float64"
                            : (c.dtypes & f32)                   ? "float32"
                                                                 : "float64";
  std::string claim, how;
  double tol = 1;
  switch (c.m) {
    case mode::reference:
      claim = fmt::format(
          "rope_{} ({}, exact angles) matches the binary128 reference within the derived "
          "per-pair bound, pass-through channels bit-exact, on {}",
          name(c.e), types, describe(c));
      how =
          "max_error is the worst |kernel - reference| / (unit a (|x_u| + |x_v|)), unit = "
          "5.5 u (float64), 3 u_f + 5.5 u (float32)";
      break;
    case mode::plain:
      claim = fmt::format(
          "rope_rotate (SIMD) matches rope_rotate_plain on the same cos/sin row within one "
          "rounding per product ({}), untouched channels and gaps bit-exact, on {}",
          types, describe(c));
      how = "max_error is the worst |simd - plain| / (4 u_T (|x_u| + |x_v|))";
      break;
    case mode::fused:
      tol = 0;
      claim = fmt::format(
          "rope_apply_qk equals rope_apply on q and then on k bit for bit ({}, forward and "
          "inverse), on {}",
          types, describe(c));
      how = "max_error is the largest count of differing elements";
      break;
  }
  return measured_check("rope", c.name, claim, tr.worst, tol,
                        fmt::format("{}; per quantity: {}; worst at {}; bounds derived in "
                                    "include/posenc/verify/rope_cases.hpp",
                                    how, tr.summary(), tr.at));
}

// ---- the lists ------------------------------------------------------------------------------

namespace {

// Odd pass-through widths (59 - 58 = 1, 59 - 32 = 27, 80 - 24 = 56, 96 - 64 = 32), R/2 odd
// (29, 45: vector tails) and the model shapes.
struct dr {
  int64_t D, R;
};
constexpr dr kShapes[] = {{32, 32}, {59, 58}, {59, 32},   {80, 80}, {80, 24},
                          {96, 96}, {96, 64}, {128, 128}, {128, 90}};
constexpr rope_layout kLayouts[] = {rope_layout::half, rope_layout::interleaved};

std::string shape_name(const spec& c) {
  std::string s = c.m == mode::reference ? fmt::format("reference/{}", name(c.e)) : name(c.m);
  s += fmt::format("/T{}_H{}", c.T, c.H);
  if (c.m == mode::fused || c.e == entry::apply_qk) s += fmt::format("_Hk{}", c.Hk);
  s += fmt::format("_D{}_R{}/{}", c.D, c.R, rope_layout_name(c.layout));
  if (c.m == mode::fused) s += std::string("/") + rope_angle_name(c.angle);
  if (c.inverse) s += "/inverse";
  if (c.factor != 1) s += "/yarn";
  if (c.dtypes == f32) s += "/f32";
  if (c.dtypes == f64) s += "/f64";
  return s;
}

// Adds c with the stream at g's state, then advances g past c's draws.
void chain(std::vector<spec>& v, spec c, rng& g) {
  c.stream = g;
  fixture tmp;
  draw(tmp, c, g);
  c.name = c.group + "/" + shape_name(c);
  v.push_back(std::move(c));
}

std::vector<spec> make_full() {
  std::vector<spec> v;
  // awkward_shapes (tests/test_rope_simd.cpp, seed 77): every shape x T x H (the largest T H
  // only for R = 128, to keep the ASan run short) x layout, forward and inverse on the same
  // data, half of them with a != 1 (yarn).
  {
    rng g(77);
    for (const auto& sh : kShapes)
      for (int64_t T : {1, 3, 17, 129})
        for (int64_t H : {1, 3, 32}) {
          if (T * H > 129 && sh.R != 128) continue;
          for (auto l : kLayouts) {
            const bool scaled = (T + H) % 2 == 1;
            spec c;
            c.T = T, c.H = H, c.D = sh.D, c.R = sh.R, c.layout = l;
            c.theta = scaled ? 5e5 : 1e4;
            c.factor = scaled ? 4.0 : 1.0;
            c.seed = 77;
            c.group = "awkward_shapes";
            c.stream = g;
            fixture tmp;
            draw(tmp, c, g);
            for (bool inverse : {false, true}) {
              c.inverse = inverse;
              c.name = c.group + "/" + shape_name(c);
              v.push_back(c);
            }
          }
        }
  }
  // huge_positions (seed 12): positions near 1e7 and 2^40, one draw of x for both layouts.
  for (auto l : kLayouts) {
    spec c;
    c.T = 4, c.H = 3, c.D = 96, c.R = 80, c.theta = 1e6, c.layout = l;
    c.positions = {10000000, 9999991, int64_t{1} << 40, (int64_t{1} << 40) + 12345};
    c.seed = 12;
    c.group = "huge_positions";
    c.name = c.group + "/" + shape_name(c);
    v.push_back(c);
  }
  // plain_strided: 5 heads embedded in rows of D + 7, cos/sin of position 123457; float32 on
  // the stream of seed 3, float64 on seed 4.
  for (unsigned dt : {unsigned(f32), unsigned(f64)}) {
    rng g(dt == f32 ? 3 : 4);
    for (const auto& sh : kShapes)
      for (auto l : kLayouts)
        for (bool inverse : {false, true}) {
          spec c;
          c.m = mode::plain;
          c.H = 5, c.D = sh.D, c.R = sh.R, c.head_stride = sh.D + 7, c.layout = l;
          c.inverse = inverse;
          c.positions = {123457};
          c.dtypes = dt;
          c.seed = dt == f32 ? 3 : 4;
          c.group = "plain_strided";
          chain(v, c, g);
        }
  }
  // fused_qk (seed 21): GQA (Hq = 8, Hk = 2), R = 24 of D = 80, yarn factor 2, positions below
  // 2^24, both layouts and angle modes.
  {
    rng g(21);
    for (auto l : kLayouts)
      for (auto angle : {rope_angle::exact, rope_angle::f32}) {
        spec c;
        c.m = mode::fused;
        c.T = 37, c.H = 8, c.Hk = 2, c.D = 80, c.R = 24, c.layout = l, c.angle = angle;
        c.theta = 1e6, c.factor = 2;
        c.pos_max = int64_t{1} << 24;
        c.seed = 21;
        c.group = "fused_qk";
        chain(v, c, g);
      }
  }
  // apply_qk_reference (seed 22) and unrotate_reference (seed 23): every shape x layout at
  // T = 17, the fused entry with GQA heads, rope_unrotate with a != 1 every other case.
  for (entry e : {entry::apply_qk, entry::unrotate}) {
    const uint64_t seed = e == entry::apply_qk ? 22 : 23;
    rng g(seed);
    int n = 0;
    for (const auto& sh : kShapes)
      for (auto l : kLayouts) {
        spec c;
        c.e = e;
        c.T = 17, c.H = e == entry::apply_qk ? 4 : 3, c.Hk = e == entry::apply_qk ? 2 : 0;
        c.D = sh.D, c.R = sh.R, c.layout = l;
        c.inverse = e == entry::apply_qk && n % 3 == 2;
        c.theta = n % 2 ? 5e5 : 1e4, c.factor = n % 2 ? 4.0 : 1.0;
        c.seed = seed;
        c.group = e == entry::apply_qk ? "apply_qk_reference" : "unrotate_reference";
        chain(v, c, g);
        ++n;
      }
  }
  return v;
}

std::vector<spec> make_check() {
  std::vector<spec> v;
  uint64_t seed = 5000;
  auto add = [&](spec c) {
    c.seed = seed++;
    c.group = "check";
    c.name = shape_name(c);
    v.push_back(std::move(c));
  };
  auto ref = [&](entry e, int64_t T, int64_t H, int64_t Hk, int64_t D, int64_t R, rope_layout l,
                 bool inverse, double factor) {
    spec c;
    c.e = e;
    c.T = T, c.H = H, c.Hk = Hk, c.D = D, c.R = R, c.layout = l, c.inverse = inverse;
    c.theta = factor != 1 ? 5e5 : 1e4, c.factor = factor;
    add(c);
  };
  ref(entry::apply, 3, 3, 0, 59, 58, rope_layout::half, false, 4);
  ref(entry::apply, 5, 2, 0, 80, 24, rope_layout::interleaved, true, 1);
  ref(entry::apply, 17, 8, 0, 128, 128, rope_layout::half, false, 1);
  ref(entry::apply_qk, 5, 4, 2, 96, 64, rope_layout::interleaved, false, 4);
  ref(entry::apply_qk, 3, 2, 1, 59, 32, rope_layout::half, true, 1);
  ref(entry::unrotate, 4, 3, 0, 80, 24, rope_layout::half, false, 4);
  ref(entry::unrotate, 4, 3, 0, 96, 96, rope_layout::interleaved, false, 1);
  {
    spec c;
    c.T = 4, c.H = 3, c.D = 96, c.R = 80, c.theta = 1e6, c.layout = rope_layout::interleaved;
    c.positions = {10000000, 9999991, int64_t{1} << 40, (int64_t{1} << 40) + 12345};
    add(c);
  }
  for (auto l : kLayouts) {
    spec c;
    c.m = mode::plain;
    c.H = 3, c.D = 59, c.R = l == rope_layout::half ? 58 : 32, c.head_stride = 66, c.layout = l;
    c.inverse = l == rope_layout::interleaved;
    c.positions = {123457};
    add(c);
  }
  for (auto angle : {rope_angle::exact, rope_angle::f32}) {
    spec c;
    c.m = mode::fused;
    c.T = 7, c.H = 4, c.Hk = 2, c.D = 80, c.R = 24, c.angle = angle, c.theta = 1e6, c.factor = 2;
    c.layout = angle == rope_angle::exact ? rope_layout::half : rope_layout::interleaved;
    c.pos_max = int64_t{1} << 24;
    add(c);
  }
  return v;
}

std::vector<spec> make_perf() {
  std::vector<spec> v;
  for (int64_t T : {4096, 32768, 1})
    for (auto l : kLayouts) {
      spec c;
      c.e = entry::apply_qk;
      c.T = T, c.H = 32, c.Hk = 32, c.D = 128, c.R = 128, c.layout = l;
      c.pos_max = 0;
      c.dtypes = f32;
      c.seed = 11;
      c.group = "rope";
      c.name = fmt::format("rope/T={}/H=32/D=128/layout={}", T, rope_layout_name(l));
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

spec perf_validation_case(const spec& c) {
  spec r = c;
  std::vector<int64_t> tokens = {0, c.T / 3, c.T / 2, c.T - 1};
  std::sort(tokens.begin(), tokens.end());
  tokens.erase(std::unique(tokens.begin(), tokens.end()), tokens.end());
  r.positions.clear();
  for (int64_t t : tokens) r.positions.push_back(c.positions.empty() ? t : c.positions[t]);
  r.T = static_cast<int64_t>(r.positions.size());
  r.m = mode::reference;
  r.stream.reset();
  r.name = fmt::format("{}/validation_T{}", c.name, r.T);
  return r;
}

}  // namespace posenc::rope_cases
