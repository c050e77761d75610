// Sinusoidal absolute encoding (Vaswani et al. 2017, sec. 3.5): frequencies, tables, the
// per-pair shift rotation, and the property checks of issue 2 section 5.
#include "posenc/encodings/sinusoidal.hpp"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <numbers>

#include <fmt/format.h>

#include "posenc/core/error.hpp"
#include "posenc/core/threads.hpp"
#include "src/core/angle.hpp"

namespace posenc {

namespace detail {
// Highway rows of tables_simd.cpp (dynamic dispatch).
void sinusoidal_rows_simd(const double* w_hi, const double* w_lo, int64_t half,
                          const int64_t* positions, int64_t b, int64_t e, bool interleaved,
                          float* out);
void sinusoidal_rows_simd(const double* w_hi, const double* w_lo, int64_t half,
                          const int64_t* positions, int64_t b, int64_t e, bool interleaved,
                          double* out);
}  // namespace detail

namespace {

constexpr double u53 = 0x1.0p-53;  // unit roundoff of double
constexpr double u64 = 0x1.0p-64;  // unit roundoff of x87 long double (64-bit significand)
constexpr int64_t max_position = int64_t{1} << 53;  // every int64 up to here is exact in double

// Exponent e_r with omega_r = base^(-e_r):
//   width:          e_r = 2r / d             (Vaswani et al. 2017, sec. 3.5)
//   half_minus_one: e_r = r / max(d/2 - 1, 1) (tensor2tensor get_timing_signal_1d)
long double exponent_ld(const sinusoidal_params& p, int64_t r) {
  if (p.denominator == sin_denominator::width) {
    return static_cast<long double>(2 * r) / static_cast<long double>(p.width);
  }
  const int64_t den = std::max<int64_t>(p.width / 2 - 1, 1);
  return static_cast<long double>(r) / static_cast<long double>(den);
}

// omega_r = exp(-e_r ln(base)) in long double. Relative error <= (4 ln(base) + 2) * 2^-64:
// logl and expl within 1 ulp (2^-63), the division and product each 2^-64, and an absolute
// error ln(base) * 2^-62 in the argument of expl becomes that relative error in omega.
long double omega_ld(const sinusoidal_params& p, int64_t r) {
  return std::exp(-exponent_ld(p, r) * std::log(static_cast<long double>(p.base)));
}

// omega as a double-double: hi = nearest double, lo = nearest double to the rest.
struct omega_dd {
  double hi, lo;
};

std::vector<omega_dd> omegas_dd(const sinusoidal_params& p) {
  const int64_t half = p.width / 2;
  std::vector<omega_dd> w(static_cast<size_t>(half));
  for (int64_t r = 0; r < half; ++r) {
    const long double o = omega_ld(p, r);
    const double hi = static_cast<double>(o);
    w[static_cast<size_t>(r)] = {hi, static_cast<double>(o - hi)};
  }
  return w;
}

// pos * omega reduced to about [-pi, pi]: detail::angle_reduce_cw (src/core/angle.hpp), within
// 8 * 2^-53 of x * (w.hi + w.lo) mod 2pi for integer x <= 2^53, plus terms of relative size
// 2^-105 of x * omega that the 2^-64 slack in sinusoidal_entry_error_bound absorbs.
inline double reduced_angle(double x, omega_dd w) {
  return detail::angle_reduce_cw(x, w.hi, w.lo);
}

void validate_positions(std::span<const int64_t> positions) {
  for (size_t i = 0; i < positions.size(); ++i) {
    const int64_t v = positions[i];
    if (v < 0) fail("positions[{}] must be non-negative, got {}", i, v);
    if (v > max_position)
      fail("positions[{}] must be <= 2^53 = {} (exact in double), got {}", i, max_position, v);
  }
}

void validate_table(const sinusoidal_params& p, std::span<const int64_t> positions, size_t out_size,
                    size_t elem_bytes) {
  sinusoidal_validate(p);
  validate_positions(positions);
  checked_bytes("sinusoidal table", positions.size(), static_cast<unsigned long long>(p.width), 1,
                elem_bytes);
  const size_t want = positions.size() * static_cast<size_t>(p.width);
  if (out_size != want)
    fail("out must have positions.size() x width = {} x {} = {} elements, got {}", positions.size(),
         p.width, want, out_size);
}

// Kernel: rows [b, e) of the table. out: (N, d) row-major, d contiguous.
template <typename T>
void table_rows(const sinusoidal_params& p, const std::vector<omega_dd>& w,
                std::span<const int64_t> positions, T* out, int64_t b, int64_t e) {
  const int64_t d = p.width, half = d / 2;
  const bool inter = p.layout == sin_layout::interleaved;
  for (int64_t n = b; n < e; ++n) {
    const double x = static_cast<double>(positions[static_cast<size_t>(n)]);
    T* row = out + n * d;
    for (int64_t r = 0; r < half; ++r) {
      const double a = reduced_angle(x, w[static_cast<size_t>(r)]);
      const T s = static_cast<T>(std::sin(a)), c = static_cast<T>(std::cos(a));
      if (inter) {
        row[2 * r] = s;
        row[2 * r + 1] = c;
      } else {
        row[r] = s;
        row[half + r] = c;
      }
    }
  }
}

bool reference_selected() {
  const char* e = std::getenv("POSENC_REFERENCE");
  return e && *e && std::strcmp(e, "0") != 0;
}

// The table: position rows in parallel. Default: the Highway rows of tables_simd.cpp (the same
// reduction lane-wise, then SinCosReduced); POSENC_REFERENCE=1: the plain rows above (libm).
template <typename T>
void table_impl(const sinusoidal_params& p, std::span<const int64_t> positions, std::span<T> out) {
  validate_table(p, positions, out.size(), sizeof(T));
  const auto w = omegas_dd(p);
  const int64_t n = static_cast<int64_t>(positions.size());
  if (reference_selected()) {
    // About 40 ns per pair: give each thread at least ~64k pairs.
    const int64_t min_rows = std::max<int64_t>(1, 65536 / std::max<int64_t>(p.width / 2, 1));
    parallel_for(
        n, [&](int64_t b, int64_t e) { table_rows(p, w, positions, out.data(), b, e); }, min_rows);
    return;
  }
  // w: (half,) as two arrays (hi, lo) for vector loads.
  const int64_t half = p.width / 2;
  std::vector<double> whi(static_cast<size_t>(half)), wlo(static_cast<size_t>(half));
  for (int64_t r = 0; r < half; ++r) {
    whi[static_cast<size_t>(r)] = w[static_cast<size_t>(r)].hi;
    wlo[static_cast<size_t>(r)] = w[static_cast<size_t>(r)].lo;
  }
  // About 2 ns per pair vectorised: each thread gets at least ~16k pairs.
  const int64_t min_rows = std::max<int64_t>(1, 16384 / std::max<int64_t>(half, 1));
  const bool inter = p.layout == sin_layout::interleaved;
  parallel_for(
      n,
      [&](int64_t b, int64_t e) {
        detail::sinusoidal_rows_simd(whi.data(), wlo.data(), half, positions.data(), b, e, inter,
                                     out.data());
      },
      min_rows);
}

}  // namespace

namespace detail {
// omega_ld for sinusoidal_checks.cpp, whose independent values use the same long double omega.
long double sinusoidal_omega_ld(const sinusoidal_params& p, int64_t r) {
  return omega_ld(p, r);
}
}  // namespace detail

const char* sin_layout_name(sin_layout l) {
  return l == sin_layout::interleaved ? "interleaved" : "halves";
}

const char* sin_denominator_name(sin_denominator d) {
  return d == sin_denominator::width ? "width" : "half-minus-one";
}

sin_layout parse_sin_layout(const std::string& s, const std::string& arg) {
  if (s == "interleaved") return sin_layout::interleaved;
  if (s == "halves") return sin_layout::halves;
  fail("{} must be one of interleaved, halves; got '{}'", arg, s);
}

sin_denominator parse_sin_denominator(const std::string& s, const std::string& arg) {
  if (s == "width") return sin_denominator::width;
  if (s == "half-minus-one") return sin_denominator::half_minus_one;
  fail("{} must be one of width, half-minus-one; got '{}'", arg, s);
}

void sinusoidal_validate(const sinusoidal_params& p) {
  if (p.width < 2 || p.width % 2 != 0 || p.width > sinusoidal_max_width)
    fail("width must be even and in [2, {}], got {}", sinusoidal_max_width, p.width);
  if (!std::isfinite(p.base) || !(p.base > 1.0))
    fail("base must be a finite number > 1, got {}", p.base);
}

std::vector<double> sinusoidal_frequencies(const sinusoidal_params& p) {
  sinusoidal_validate(p);
  std::vector<double> w(static_cast<size_t>(p.width / 2));
  for (int64_t r = 0; r < p.width / 2; ++r)
    w[static_cast<size_t>(r)] = static_cast<double>(omega_ld(p, r));
  return w;
}

std::vector<double> sinusoidal_wavelengths(const sinusoidal_params& p) {
  sinusoidal_validate(p);
  std::vector<double> l(static_cast<size_t>(p.width / 2));
  for (int64_t r = 0; r < p.width / 2; ++r)
    l[static_cast<size_t>(r)] =
        static_cast<double>(2.0L * std::numbers::pi_v<long double> / omega_ld(p, r));
  return l;
}

int64_t sinusoidal_channel(const sinusoidal_params& p, int64_t r, bool is_cos) {
  sinusoidal_validate(p);
  if (r < 0 || r >= p.width / 2)
    fail("r must be a pair index in [0, {}] for width {}, got {}", p.width / 2 - 1, p.width, r);
  if (p.layout == sin_layout::interleaved) return 2 * r + (is_cos ? 1 : 0);
  return r + (is_cos ? p.width / 2 : 0);
}

std::array<double, 4> sinusoidal_shift_rotation(double omega, double k) {
  // (sin, cos)(pos + k) = [[cos kw, sin kw], [-sin kw, cos kw]] (sin, cos)(pos): the seeds'
  // angle-addition identities grouped as a matrix.
  const double a = omega * k;
  const double s = std::sin(a), c = std::cos(a);
  return {c, s, -s, c};
}

void sinusoidal_table(const sinusoidal_params& p, std::span<const int64_t> positions,
                      std::span<double> out) {
  table_impl(p, positions, out);
}

void sinusoidal_table(const sinusoidal_params& p, std::span<const int64_t> positions,
                      std::span<float> out) {
  table_impl(p, positions, out);
}

std::vector<double> sinusoidal_table(const sinusoidal_params& p,
                                     std::span<const int64_t> positions) {
  sinusoidal_validate(p);
  checked_bytes("sinusoidal table", positions.size(), static_cast<unsigned long long>(p.width), 1,
                sizeof(double));
  std::vector<double> out(positions.size() * static_cast<size_t>(p.width));
  sinusoidal_table(p, positions, std::span<double>(out));
  return out;
}

double sinusoidal_entry_error_bound(const sinusoidal_params& p, int64_t max_pos) {
  sinusoidal_validate(p);
  // 8 * 2^-53 for the reduced angle (reduced_angle), 2 * 2^-53 for sin/cos (SinCosReduced of
  // src/core/sincos_simd-inl.h: < 1.8 * 2^-53; glibc on the plain path: < 1 ulp); omega_0 = 1 is
  // the largest frequency, and omega's relative error (4 ln(base) + 2) * 2^-64 (omega_ld) plus
  // 2^-64 of slack for the double-double tail multiplies the angle max_pos * omega.
  const double pos = static_cast<double>(std::max<int64_t>(max_pos, 0));
  return 10 * u53 + pos * (4 * std::log(p.base) + 3) * u64;
}

void sinusoidal_table_reference(const sinusoidal_params& p, std::span<const int64_t> positions,
                                std::span<double> out) {
  validate_table(p, positions, out.size(), sizeof(double));
  const int64_t d = p.width, half = d / 2;
  for (size_t n = 0; n < positions.size(); ++n) {
    for (int64_t r = 0; r < half; ++r) {
      // PE(pos, 2r) = sin(pos / base^(2r/d)), PE(pos, 2r+1) = cos(...) (Vaswani et al. 2017,
      // sec. 3.5), in long double.
      const long double theta = static_cast<long double>(positions[n]) * omega_ld(p, r);
      const double s = static_cast<double>(std::sin(theta));
      const double c = static_cast<double>(std::cos(theta));
      double* row = out.data() + n * static_cast<size_t>(d);
      if (p.layout == sin_layout::interleaved) {
        row[2 * r] = s;
        row[2 * r + 1] = c;
      } else {
        row[r] = s;
        row[half + r] = c;
      }
    }
  }
}

void add_positions(std::span<const float> token_embeddings, const sinusoidal_params& p,
                   std::span<const int64_t> positions, std::span<float> out) {
  sinusoidal_validate(p);
  const size_t want = positions.size() * static_cast<size_t>(p.width);
  if (token_embeddings.size() != want)
    fail("token_embeddings must have positions.size() x width = {} x {} = {} elements, got {}",
         positions.size(), p.width, want, token_embeddings.size());
  validate_table(p, positions, out.size(), sizeof(float));
  const auto w = omegas_dd(p);
  const int64_t d = p.width, half = d / 2;
  const bool inter = p.layout == sin_layout::interleaved;
  // h = E + PE, one row at a time; out may alias token_embeddings (each element is read
  // before it is written).
  parallel_for(
      static_cast<int64_t>(positions.size()),
      [&](int64_t b, int64_t e) {
        for (int64_t n = b; n < e; ++n) {
          const double x = static_cast<double>(positions[static_cast<size_t>(n)]);
          const float* in = token_embeddings.data() + n * d;
          float* o = out.data() + n * d;
          for (int64_t r = 0; r < half; ++r) {
            const double a = reduced_angle(x, w[static_cast<size_t>(r)]);
            const int64_t cs = inter ? 2 * r : r, cc = inter ? 2 * r + 1 : half + r;
            o[cs] = static_cast<float>(static_cast<double>(in[cs]) + std::sin(a));
            o[cc] = static_cast<float>(static_cast<double>(in[cc]) + std::cos(a));
          }
        }
      },
      64);
}

std::vector<double> sinusoidal_dot_profile(const sinusoidal_params& p, int64_t max_offset) {
  sinusoidal_validate(p);
  if (max_offset < 0 || max_offset > (int64_t{1} << 24))
    fail("max_offset must be in [0, {}], got {}", int64_t{1} << 24, max_offset);
  // PE(0) . PE(k) = sum_r [sin 0 sin(k w) + cos 0 cos(k w)] = sum_r cos(k w_r).
  const auto w = omegas_dd(p);
  std::vector<double> prof(static_cast<size_t>(max_offset + 1));
  for (int64_t k = 0; k <= max_offset; ++k) {
    double s = 0;
    for (const auto& wr : w) s += std::cos(reduced_angle(static_cast<double>(k), wr));
    prof[static_cast<size_t>(k)] = s;
  }
  return prof;
}

sinusoidal_distance_stats sinusoidal_distances(const sinusoidal_params& p, int64_t n) {
  sinusoidal_validate(p);
  if (n < 2 || n > 16384) fail("n must be in [2, 16384], got {}", n);
  std::vector<int64_t> pos(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) pos[static_cast<size_t>(i)] = i;
  const auto t = sinusoidal_table(p, pos);  // (n, d)
  const int64_t d = p.width;
  auto dist = [&](int64_t i, int64_t j) {
    double s = 0;
    for (int64_t c = 0; c < d; ++c) {
      const double diff = t[static_cast<size_t>(i * d + c)] - t[static_cast<size_t>(j * d + c)];
      s += diff * diff;
    }
    return std::sqrt(s);
  };
  sinusoidal_distance_stats st;
  st.min_pairwise = std::numeric_limits<double>::infinity();
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t j = i + 1; j < n; ++j) {
      const double v = dist(i, j);
      if (v < st.min_pairwise) st = {v, i, j, st.max_neighbour};
      if (j == i + 1) st.max_neighbour = std::max(st.max_neighbour, v);
    }
  }
  return st;
}

}  // namespace posenc
