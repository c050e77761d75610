// RoPE: frequencies for every scaling type, cos/sin rows in two angle modes, the rotate kernel
// (forward and inverse side by side), apply / unrotate, the binary128 reference and the
// property checks of group "rope".
#include "posenc/encodings/rope.hpp"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <numeric>
#include <type_traits>

#include "posenc/core/error.hpp"
#include "posenc/core/rng.hpp"
#include "posenc/core/threads.hpp"

namespace posenc {

namespace detail {
// Highway kernels of rope_simd.cpp (dynamic dispatch).
void rope_rotate_simd(bool interleaved, int64_t R, const float* c, const float* s, float* x,
                      int64_t H, int64_t stride, bool inverse);
void rope_rotate_simd(bool interleaved, int64_t R, const double* c, const double* s, double* x,
                      int64_t H, int64_t stride, bool inverse);
void rope_exact_row_simd(int64_t pos, const double* w, int64_t n, double scale, double* c,
                         double* s);
}  // namespace detail

// ---------------------------------------------------------------------------------------------
// Names
// ---------------------------------------------------------------------------------------------

const char* rope_type_name(rope_type t) {
  switch (t) {
    case rope_type::default_:
      return "default";
    case rope_type::linear:
      return "linear";
    case rope_type::dynamic:
      return "dynamic";
    case rope_type::yarn:
      return "yarn";
    case rope_type::longrope:
      return "longrope";
    case rope_type::llama3:
      return "llama3";
  }
  return "?";
}

rope_type rope_type_from_name(const std::string& name, const std::string& what) {
  if (name == "default") return rope_type::default_;
  if (name == "linear") return rope_type::linear;
  if (name == "dynamic") return rope_type::dynamic;
  if (name == "yarn") return rope_type::yarn;
  if (name == "longrope" || name == "su") return rope_type::longrope;
  if (name == "llama3") return rope_type::llama3;
  fail("{} must be one of default, linear, dynamic, yarn, longrope (or su), llama3, got '{}'", what,
       name);
}

const char* rope_layout_name(rope_layout l) {
  return l == rope_layout::half ? "half" : "interleaved";
}

rope_layout rope_layout_from_name(const std::string& name, const std::string& what) {
  if (name == "half") return rope_layout::half;
  if (name == "interleaved") return rope_layout::interleaved;
  fail("{} must be half or interleaved, got '{}'", what, name);
}

const char* rope_angle_name(rope_angle a) {
  return a == rope_angle::exact ? "exact" : "compat_f32";
}

rope_angle rope_angle_from_name(const std::string& name, const std::string& what) {
  if (name == "exact") return rope_angle::exact;
  if (name == "compat_f32") return rope_angle::compat_f32;
  fail("{} must be exact or compat_f32, got '{}'", what, name);
}

// ---------------------------------------------------------------------------------------------
// Validation
// ---------------------------------------------------------------------------------------------

namespace {

void require_finite(double v, const char* name) {
  if (!std::isfinite(v)) fail("{} must be finite, got {}", name, v);
}

void check_factor_list(const std::vector<double>& l, const char* name, int64_t half) {
  if (static_cast<int64_t>(l.size()) != half)
    fail("rope_scaling.{} must have rotary_dim/2 = {} entries, got {}", name, half, l.size());
  for (size_t i = 0; i < l.size(); ++i)
    if (!std::isfinite(l[i]) || l[i] <= 0)
      fail("rope_scaling.{}[{}] must be finite and > 0, got {}", name, i, l[i]);
}

}  // namespace

void rope_validate(const rope_config& c) {
  if (c.head_dim < 2) fail("head_dim must be >= 2, got {}", c.head_dim);
  if (c.rotary_dim < 2 || c.rotary_dim % 2 != 0 || c.rotary_dim > c.head_dim)
    fail(
        "rotary_dim (head_dim * partial_rotary_factor) must be even and in [2, head_dim = {}], "
        "got {}",
        c.head_dim, c.rotary_dim);
  require_finite(c.theta, "rope_theta");
  if (c.theta <= 1) fail("rope_theta must be > 1, got {}", c.theta);
  const int64_t half = c.rotary_dim / 2;
  if (c.max_position_embeddings < 0)
    fail("max_position_embeddings must be >= 0, got {}", c.max_position_embeddings);
  if (c.original_max_position_embeddings < 0)
    fail("original_max_position_embeddings must be >= 0, got {}",
         c.original_max_position_embeddings);
  if (c.type != rope_type::default_) {
    require_finite(c.factor, "rope_scaling.factor");
    if (c.factor < 1) fail("rope_scaling.factor must be >= 1, got {}", c.factor);
  }
  if (c.attention_factor) {
    require_finite(*c.attention_factor, "rope_scaling.attention_factor");
    if (*c.attention_factor <= 0)
      fail("rope_scaling.attention_factor must be > 0, got {}", *c.attention_factor);
  }
  switch (c.type) {
    case rope_type::default_:
    case rope_type::linear:
      break;
    case rope_type::dynamic:
      if (c.max_position_embeddings < 1)
        fail("max_position_embeddings must be >= 1 for rope_type dynamic, got {}",
             c.max_position_embeddings);
      if (c.rotary_dim < 4)
        fail("rotary_dim must be >= 4 for rope_type dynamic (exponent R/(R-2)), got {}",
             c.rotary_dim);
      break;
    case rope_type::yarn:
      if (c.original_max_position_embeddings < 1 && c.max_position_embeddings < 1)
        fail(
            "rope_scaling.original_max_position_embeddings (or max_position_embeddings) must be "
            ">= 1 for rope_type yarn, got {}",
            c.original_max_position_embeddings);
      require_finite(c.beta_fast, "rope_scaling.beta_fast");
      require_finite(c.beta_slow, "rope_scaling.beta_slow");
      if (c.beta_slow <= 0 || c.beta_fast <= c.beta_slow)
        fail(
            "rope_scaling.beta_fast must exceed rope_scaling.beta_slow > 0, got beta_fast={}, "
            "beta_slow={}",
            c.beta_fast, c.beta_slow);
      if (c.mscale) require_finite(*c.mscale, "rope_scaling.mscale");
      if (c.mscale_all_dim) require_finite(*c.mscale_all_dim, "rope_scaling.mscale_all_dim");
      break;
    case rope_type::longrope:
      if (c.original_max_position_embeddings < 1 && c.max_position_embeddings < 1)
        fail(
            "original_max_position_embeddings (or max_position_embeddings) must be >= 1 for "
            "rope_type longrope, got {}",
            c.original_max_position_embeddings);
      check_factor_list(c.short_factor, "short_factor", half);
      check_factor_list(c.long_factor, "long_factor", half);
      break;
    case rope_type::llama3:
      if (c.original_max_position_embeddings < 1)
        fail(
            "rope_scaling.original_max_position_embeddings must be >= 1 for rope_type llama3, "
            "got {}",
            c.original_max_position_embeddings);
      require_finite(c.low_freq_factor, "rope_scaling.low_freq_factor");
      require_finite(c.high_freq_factor, "rope_scaling.high_freq_factor");
      if (c.low_freq_factor <= 0 || c.high_freq_factor <= c.low_freq_factor)
        fail(
            "rope_scaling.high_freq_factor must exceed rope_scaling.low_freq_factor > 0, got "
            "low_freq_factor={}, high_freq_factor={}",
            c.low_freq_factor, c.high_freq_factor);
      break;
  }
}

void rope_validate(const rope_freqs& f) {
  if (f.rotary_dim < 2 || f.rotary_dim % 2 != 0 || f.rotary_dim > f.head_dim)
    fail("rope_freqs.rotary_dim must be even and in [2, head_dim = {}], got {}", f.head_dim,
         f.rotary_dim);
  if (static_cast<int64_t>(f.inv_freq.size()) != f.rotary_dim / 2)
    fail("rope_freqs.inv_freq must have rotary_dim/2 = {} entries, got {}", f.rotary_dim / 2,
         f.inv_freq.size());
  for (size_t i = 0; i < f.inv_freq.size(); ++i)
    if (!std::isfinite(f.inv_freq[i]) || f.inv_freq[i] < 0)
      fail("rope_freqs.inv_freq[{}] must be finite and >= 0, got {}", i, f.inv_freq[i]);
  if (!std::isfinite(f.attention_factor) || f.attention_factor <= 0)
    fail("rope_freqs.attention_factor must be finite and > 0, got {}", f.attention_factor);
}

// ---------------------------------------------------------------------------------------------
// Frequencies
// ---------------------------------------------------------------------------------------------

namespace {

constexpr double kPi = 3.141592653589793238462643383279502884;

// base^(2i/R), i = 0 .. R/2-1: the wavelength divisors ("pos_freqs" in HF).
std::vector<double> pos_freqs(double base, int64_t R) {
  std::vector<double> w(static_cast<size_t>(R / 2));
  for (int64_t i = 0; i < R / 2; ++i)
    w[i] = std::pow(base, static_cast<double>(2 * i) / static_cast<double>(R));
  return w;
}

// RoFormer (Su et al. 2021, eq. 34): omega_i = 1 / base^(2i/R), i = 0 .. R/2-1 (written as
// HF writes it, 1 / base^(2i/R), so double results match a double evaluation of HF's formula).
std::vector<double> default_inv_freq(double base, int64_t R) {
  auto w = pos_freqs(base, R);
  for (auto& e : w) e = 1.0 / e;
  return w;
}

// YaRN (Peng et al. 2023, eq. 17 and section 3.4): magnitude 0.1 m ln(s) + 1 for s > 1.
double yarn_get_mscale(double s, double m) {
  return s <= 1 ? 1.0 : 0.1 * m * std::log(s) + 1.0;
}

// YaRN (Peng et al. 2023, eq. 12-13 / HF find_correction_dim): the pair index whose
// wavelength completes `rotations` turns over `orig` positions: R ln(orig / (2 pi r)) / (2 ln b).
double yarn_correction_dim(double rotations, int64_t R, double base, double orig) {
  return static_cast<double>(R) * std::log(orig / (rotations * 2 * kPi)) / (2 * std::log(base));
}

}  // namespace

rope_freqs rope_frequencies(const rope_config& c, int64_t seq_len) {
  rope_validate(c);
  if (seq_len < 0) fail("seq_len must be >= 0, got {}", seq_len);
  rope_freqs f;
  f.head_dim = c.head_dim;
  f.rotary_dim = c.rotary_dim;
  f.type = c.type;
  const int64_t R = c.rotary_dim, half = R / 2;
  const double s = c.factor;
  switch (c.type) {
    case rope_type::default_:
      f.inv_freq = default_inv_freq(c.theta, R);
      break;
    case rope_type::linear:
      // Position interpolation (Chen et al. 2023, eq. 4): f'(x, m) = f(x, m / s), i.e. every
      // frequency divided by s.
      f.inv_freq = default_inv_freq(c.theta, R);
      for (auto& w : f.inv_freq) w /= s;
      break;
    case rope_type::dynamic: {
      // Dynamic NTK (bloc97 / emozilla 2023; HF _compute_dynamic_ntk_parameters):
      // base' = base * (s L / M - (s - 1))^(R / (R - 2)), L = max(seq_len, M).
      const double M = static_cast<double>(c.max_position_embeddings);
      const double L = std::max(static_cast<double>(seq_len), M);
      const double base = c.theta * std::pow(s * L / M - (s - 1),
                                             static_cast<double>(R) / static_cast<double>(R - 2));
      f.inv_freq = default_inv_freq(base, R);
      break;
    }
    case rope_type::yarn: {
      // YaRN (Peng et al. 2023, eq. 18-20; HF _compute_yarn_parameters): pairs with many
      // rotations inside the original context are extrapolated (kept), pairs with few are
      // interpolated (divided by s), with a linear ramp between correction dims low and high.
      const double orig = static_cast<double>(c.original_max_position_embeddings > 0
                                                  ? c.original_max_position_embeddings
                                                  : c.max_position_embeddings);
      double low = yarn_correction_dim(c.beta_fast, R, c.theta, orig);
      double high = yarn_correction_dim(c.beta_slow, R, c.theta, orig);
      if (c.truncate) {
        low = std::floor(low);
        high = std::ceil(high);
      }
      low = std::max(low, 0.0);
      high = std::min(high, static_cast<double>(R - 1));
      if (low == high) high += 0.001;  // HF linear_ramp_factor: avoid 0 / 0
      const auto pf = pos_freqs(c.theta, R);
      f.inv_freq.resize(static_cast<size_t>(half));
      for (int64_t i = 0; i < half; ++i) {
        const double ramp = std::clamp((static_cast<double>(i) - low) / (high - low), 0.0, 1.0);
        // HF: interp * (1 - extrap_factor) + extrap * extrap_factor, extrap_factor = 1 - ramp.
        const double extrap = 1.0 / pf[i], interp = 1.0 / (s * pf[i]);
        const double ef = 1 - ramp;
        f.inv_freq[i] = interp * (1 - ef) + extrap * ef;
      }
      if (c.attention_factor) {
        f.attention_factor = *c.attention_factor;
      } else if (c.mscale && c.mscale_all_dim && *c.mscale != 0 && *c.mscale_all_dim != 0) {
        // DeepSeek-V2 style ratio (HF: used only when both are given and nonzero).
        f.attention_factor = yarn_get_mscale(s, *c.mscale) / yarn_get_mscale(s, *c.mscale_all_dim);
      } else {
        f.attention_factor = yarn_get_mscale(s, 1.0);
      }
      break;
    }
    case rope_type::longrope: {
      // LongRoPE (Ding et al. 2024; HF _compute_longrope_parameters): omega_i = 1 / (lambda_i
      // base^(2i/R)), lambda = long_factor beyond the original context, else short_factor.
      const int64_t orig = c.original_max_position_embeddings > 0
                               ? c.original_max_position_embeddings
                               : c.max_position_embeddings;
      const auto& ext = seq_len > orig ? c.long_factor : c.short_factor;
      f.inv_freq = pos_freqs(c.theta, R);
      for (int64_t i = 0; i < half; ++i) f.inv_freq[i] = 1.0 / (ext[i] * f.inv_freq[i]);
      if (c.attention_factor) {
        f.attention_factor = *c.attention_factor;
      } else {
        f.attention_factor =
            s <= 1 ? 1.0 : std::sqrt(1 + std::log(s) / std::log(static_cast<double>(orig)));
      }
      break;
    }
    case rope_type::llama3: {
      // Llama 3.1 (Meta 2024, "The Llama 3 Herd of Models"; HF _compute_llama3_parameters):
      // wavelength lambda = 2 pi / omega; lambda < orig/high: kept; lambda > orig/low: omega/s;
      // between: (1 - g) omega / s + g omega, g = (orig / lambda - low) / (high - low).
      f.inv_freq = default_inv_freq(c.theta, R);
      const double orig = static_cast<double>(c.original_max_position_embeddings);
      const double low_wavelen = orig / c.low_freq_factor;
      const double high_wavelen = orig / c.high_freq_factor;
      for (auto& w : f.inv_freq) {
        const double wavelen = 2 * kPi / w;
        if (wavelen < high_wavelen) continue;
        if (wavelen > low_wavelen) {
          w = w / s;
        } else {
          const double g =
              (orig / wavelen - c.low_freq_factor) / (c.high_freq_factor - c.low_freq_factor);
          w = (1 - g) * w / s + g * w;
        }
      }
      break;
    }
  }
  return f;
}

// ---------------------------------------------------------------------------------------------
// cos / sin rows
// ---------------------------------------------------------------------------------------------

namespace {

// 2 pi = kTwoPi0 + kTwoPi1 + kTwoPi2 to about 2^-160 (each the rounding of the remainder;
// computed from Machin's formula with Python's decimal module at 80 digits).
constexpr double kTwoPi0 = 0x1.921fb54442d18p+2;
constexpr double kTwoPi1 = 0x1.1a62633145c07p-52;
constexpr double kTwoPi2 = -0x1.f1976b7ed8fbcp-108;
constexpr double kInvTwoPi = 0.15915494309189533577;
// Largest position the exact mode accepts: every integer up to it is a double.
constexpr int64_t kMaxExactPos = int64_t{1} << 53;

// Knuth's TwoSum: a + b = s + e exactly.
inline void two_sum(double a, double b, double& s, double& e) {
  s = a + b;
  const double bb = s - a;
  e = (a - (s - bb)) + (b - bb);
}

// Exact-mode angle: cos and sin of p * w for integer p <= 2^53.
// p * w = hi + lo exactly (fma two-product). k = round(hi / 2pi). hi - k P0 is exact
// (Sterbenz: k P0 rounds to within a factor 2 of hi) after splitting k P0 and k P1 with
// two-products; the small terms are summed with TwoSum into r = rh + rl, |rl| <= ulp(rh)/2.
// Then cos(r) = cos(rh) - sin(rh) rl, sin(r) = sin(rh) + cos(rh) rl (the dropped rl^2/2
// term is below 1e-31). Error budget: reduction <= ~2^-104 * 2pi * k relative to 2pi (P2 term
// rounding and the triple-double 2pi), plus libm cos/sin (<= 1 ulp) and the first-order
// correction, so about 2^-52 absolute in total.
inline void exact_cos_sin(int64_t pos, double w, double& c, double& s) {
  const double p = static_cast<double>(pos);
  const double hi = p * w;
  const double lo = std::fma(p, w, -hi);
  const double k = std::nearbyint(hi * kInvTwoPi);
  double rh, rl;
  if (k == 0) {
    two_sum(hi, lo, rh, rl);
  } else {
    const double a0 = k * kTwoPi0, b0 = std::fma(k, kTwoPi0, -a0);
    const double a1 = k * kTwoPi1, b1 = std::fma(k, kTwoPi1, -a1);
    const double r0 = hi - a0;  // exact
    double sum, err, acc = 0;
    two_sum(r0, -b0, sum, err);
    acc += err;
    two_sum(sum, -a1, sum, err);
    acc += err;
    two_sum(sum, lo, sum, err);
    acc += err;
    acc += -b1 - k * kTwoPi2;
    two_sum(sum, acc, rh, rl);
  }
  const double ch = std::cos(rh), sh = std::sin(rh);
  c = ch - sh * rl;
  s = sh + ch * rl;
}

void check_pos(int64_t pos, rope_angle angle) {
  if (pos < 0) fail("positions must be >= 0, got {}", pos);
  if (angle == rope_angle::exact && pos > kMaxExactPos)
    fail("positions must be <= 2^53 = {} in angle mode exact, got {}", kMaxExactPos, pos);
}

// cos/sin row with an explicit scale (a for the forward, 1/a for unrotate).
// exact: the SIMD row of rope_simd.cpp (same reduction, Highway Sin/Cos, <= 3.5 * 2^-53), or,
// with plain = true (POSENC_REFERENCE=1), the scalar exact_cos_sin above with libm.
template <typename T>
void cos_sin_row(const rope_freqs& f, rope_angle angle, int64_t pos, double scale, T* c, T* s,
                 bool plain = false) {
  const int64_t n = f.rotary_dim / 2;
  if (angle == rope_angle::exact) {
    if (plain) {
      for (int64_t i = 0; i < n; ++i) {
        double cc, ss;
        exact_cos_sin(pos, f.inv_freq[i], cc, ss);
        c[i] = static_cast<T>(scale * cc);
        s[i] = static_cast<T>(scale * ss);
      }
    } else if constexpr (std::is_same_v<T, double>) {
      detail::rope_exact_row_simd(pos, f.inv_freq.data(), n, scale, c, s);
    } else {
      // Chunks through a stack buffer: no allocation, the double values rounded once to T.
      constexpr int64_t kChunk = 64;
      double cd[kChunk], sd[kChunk];
      for (int64_t i0 = 0; i0 < n; i0 += kChunk) {
        const int64_t m = std::min(kChunk, n - i0);
        detail::rope_exact_row_simd(pos, f.inv_freq.data() + i0, m, scale, cd, sd);
        for (int64_t i = 0; i < m; ++i) {
          c[i0 + i] = static_cast<T>(cd[i]);
          s[i0 + i] = static_cast<T>(sd[i]);
        }
      }
    }
  } else {
    // HF / vLLM float32: freqs = position_ids.float() * inv_freq.float(); cos = freqs.cos() *
    // attention_scaling (all float32).
    const float pf = static_cast<float>(pos);
    const float af = static_cast<float>(scale);
    for (int64_t i = 0; i < n; ++i) {
      const float a = pf * static_cast<float>(f.inv_freq[i]);
      const float cf = std::cos(a), sf = std::sin(a);
      c[i] = static_cast<T>(scale == 1.0 ? cf : cf * af);
      s[i] = static_cast<T>(scale == 1.0 ? sf : sf * af);
    }
  }
}

}  // namespace

bool rope_reference_selected() {
  const char* e = std::getenv("POSENC_REFERENCE");
  return e && *e && std::strcmp(e, "0") != 0;
}

void rope_cos_sin(const rope_freqs& f, rope_angle angle, int64_t pos, double* cos_out,
                  double* sin_out) {
  rope_validate(f);
  check_pos(pos, angle);
  cos_sin_row(f, angle, pos, f.attention_factor, cos_out, sin_out);
}

void rope_cos_sin(const rope_freqs& f, rope_angle angle, int64_t pos, float* cos_out,
                  float* sin_out) {
  rope_validate(f);
  check_pos(pos, angle);
  cos_sin_row(f, angle, pos, f.attention_factor, cos_out, sin_out);
}

// ---------------------------------------------------------------------------------------------
// The rotate kernel: forward and inverse side by side
// ---------------------------------------------------------------------------------------------

namespace {

// The plain loops (POSENC_REFERENCE=1 and the specification of rope_simd.cpp's kernels).
template <typename T>
void rotate_impl(rope_layout layout, int64_t R, const T* __restrict__ c, const T* __restrict__ s,
                 T* x, int64_t H, int64_t stride, bool inverse) {
  const int64_t n = R / 2;
  for (int64_t h = 0; h < H; ++h) {
    T* xh = x + h * stride;
    if (layout == rope_layout::half) {
      // half: [u_0 .. u_{n-1} | v_0 .. v_{n-1}], pair i = (u_i, v_i).
      T* __restrict__ u = xh;
      T* __restrict__ v = xh + n;
      if (!inverse) {
        // forward: u' = u c - v s; v' = v c + u s
        for (int64_t i = 0; i < n; ++i) {
          const T a = u[i], b = v[i];
          u[i] = a * c[i] - b * s[i];
          v[i] = b * c[i] + a * s[i];
        }
      } else {
        // backward of "u' = u c - v s; v' = v c + u s": the transpose, sine negated.
        for (int64_t i = 0; i < n; ++i) {
          const T a = u[i], b = v[i];
          u[i] = a * c[i] + b * s[i];
          v[i] = b * c[i] - a * s[i];
        }
      }
    } else {
      // interleaved: [u_0 v_0 | u_1 v_1 | ...], pair i = (x[2i], x[2i+1]).
      T* __restrict__ y = xh;
      if (!inverse) {
        for (int64_t i = 0; i < n; ++i) {
          const T a = y[2 * i], b = y[2 * i + 1];
          y[2 * i] = a * c[i] - b * s[i];
          y[2 * i + 1] = b * c[i] + a * s[i];
        }
      } else {
        for (int64_t i = 0; i < n; ++i) {
          const T a = y[2 * i], b = y[2 * i + 1];
          y[2 * i] = a * c[i] + b * s[i];
          y[2 * i + 1] = b * c[i] - a * s[i];
        }
      }
    }
  }
}

template <typename T>
void rotate_dispatch(bool plain, rope_layout layout, int64_t R, const T* c, const T* s, T* x,
                     int64_t H, int64_t stride, bool inverse) {
  if (plain)
    rotate_impl(layout, R, c, s, x, H, stride, inverse);
  else
    detail::rope_rotate_simd(layout == rope_layout::interleaved, R, c, s, x, H, stride, inverse);
}

void check_shape_args(const rope_freqs& f, rope_angle angle, std::span<const int64_t> positions,
                      int64_t T, int64_t D) {
  rope_validate(f);
  if (D != f.head_dim) fail("D must equal head_dim = {}, got {}", f.head_dim, D);
  if (T < 0) fail("T must be >= 0, got {}", T);
  if (static_cast<int64_t>(positions.size()) != T)
    fail("positions must have shape (T,) = ({},), got ({},)", T, positions.size());
  for (int64_t p : positions) check_pos(p, angle);
}

void check_apply_args(const rope_freqs& f, rope_angle angle, std::span<const int64_t> positions,
                      const void* x, int64_t T, int64_t H, int64_t D) {
  rope_validate(f);
  if (T < 0 || H < 0 || D < 0)
    fail("x must have shape (T, H, D) with non-negative sizes, got ({}, {}, {})", T, H, D);
  if (D != f.head_dim)
    fail("x must have shape (T, H, D) with D = head_dim = {}, got ({}, {}, {})", f.head_dim, T, H,
         D);
  if (static_cast<int64_t>(positions.size()) != T)
    fail("positions must have shape (T,) = ({},), got ({},)", T, positions.size());
  checked_bytes("x", static_cast<unsigned long long>(T), static_cast<unsigned long long>(H),
                static_cast<unsigned long long>(D), 1);
  if (T * H * D > 0 && x == nullptr) fail("x must not be null for shape ({}, {}, {})", T, H, D);
  for (int64_t p : positions) check_pos(p, angle);
}

// One or two tensors sharing positions: x1: (T, H1, D), x2: (T, H2, D) (x2 may be null with
// H2 = 0). cos/sin are computed once per token and reused for all H1 + H2 heads.
template <typename T>
void apply_impl(const rope_freqs& f, rope_layout layout, rope_angle angle,
                std::span<const int64_t> positions, T* x1, int64_t H1, T* x2, int64_t H2,
                int64_t nT, int64_t D, double scale, bool inverse, bool plain) {
  if (nT == 0 || H1 + H2 == 0) return;
  const int64_t R = f.rotary_dim;
  // Enough work per thread to amortise the fork: about 16k rotated channels.
  const int64_t per_token = std::max<int64_t>(1, (H1 + H2) * R + R * 8);
  parallel_for(
      nT,
      [&](int64_t b, int64_t e) {
        // Per-thread scratch: cos, sin (R/2 each), computed once per token, reused for H heads.
        std::vector<T> cs(static_cast<size_t>(R));
        T* c = cs.data();
        T* s = cs.data() + R / 2;
        for (int64_t t = b; t < e; ++t) {
          cos_sin_row(f, angle, positions[t], scale, c, s, plain);
          if (H1 > 0) rotate_dispatch(plain, layout, R, c, s, x1 + t * H1 * D, H1, D, inverse);
          if (H2 > 0) rotate_dispatch(plain, layout, R, c, s, x2 + t * H2 * D, H2, D, inverse);
        }
      },
      std::max<int64_t>(1, 16384 / per_token));
}

// POSENC_REFERENCE=1 with exact angles: the binary128 reference, through double copies.
template <typename T>
void apply_via_reference(const rope_freqs& f, rope_layout layout,
                         std::span<const int64_t> positions, T* x, int64_t nT, int64_t H, int64_t D,
                         bool inverse) {
  const size_t n = static_cast<size_t>(nT * H * D);
  if (n == 0) return;
  std::vector<double> xd(x, x + n), yd(n);
  rope_apply_reference(f, layout, positions, xd.data(), yd.data(), nT, H, D, inverse);
  for (size_t i = 0; i < n; ++i) x[i] = static_cast<T>(yd[i]);
}

template <typename T>
void apply_entry(const rope_freqs& f, rope_layout layout, rope_angle angle,
                 std::span<const int64_t> positions, T* x1, int64_t H1, T* x2, int64_t H2,
                 int64_t nT, int64_t D, bool inverse) {
  const bool plain = rope_reference_selected();
  if (plain && angle == rope_angle::exact) {
    apply_via_reference(f, layout, positions, x1, nT, H1, D, inverse);
    if (x2) apply_via_reference(f, layout, positions, x2, nT, H2, D, inverse);
    return;
  }
  apply_impl(f, layout, angle, positions, x1, H1, x2, H2, nT, D, f.attention_factor, inverse,
             plain);
}

template <typename T>
void check_qk_args(const rope_freqs& f, rope_angle angle, std::span<const int64_t> positions,
                   const T* q, int64_t Hq, const T* k, int64_t Hk, int64_t nT, int64_t D) {
  check_shape_args(f, angle, positions, nT, D);
  if (Hq < 0) fail("Hq must be >= 0, got {}", Hq);
  if (Hk < 0) fail("Hk must be >= 0, got {}", Hk);
  checked_bytes("q", static_cast<unsigned long long>(nT), static_cast<unsigned long long>(Hq),
                static_cast<unsigned long long>(D), sizeof(T));
  checked_bytes("k", static_cast<unsigned long long>(nT), static_cast<unsigned long long>(Hk),
                static_cast<unsigned long long>(D), sizeof(T));
  const int64_t nq = nT * Hq * D, nk = nT * Hk * D;
  if (nq > 0 && q == nullptr) fail("q must not be null for shape ({}, {}, {})", nT, Hq, D);
  if (nk > 0 && k == nullptr) fail("k must not be null for shape ({}, {}, {})", nT, Hk, D);
  if (nq > 0 && nk > 0) {
    const auto qa = reinterpret_cast<uintptr_t>(q), ka = reinterpret_cast<uintptr_t>(k);
    const auto qe = qa + static_cast<uintptr_t>(nq) * sizeof(T);
    const auto ke = ka + static_cast<uintptr_t>(nk) * sizeof(T);
    if (qa < ke && ka < qe) fail("q and k must not overlap (each would be rotated twice)");
  }
}

}  // namespace

void rope_rotate(rope_layout layout, int64_t R, const float* cos, const float* sin, float* x,
                 int64_t H, int64_t head_stride, bool inverse) {
  detail::rope_rotate_simd(layout == rope_layout::interleaved, R, cos, sin, x, H, head_stride,
                           inverse);
}

void rope_rotate(rope_layout layout, int64_t R, const double* cos, const double* sin, double* x,
                 int64_t H, int64_t head_stride, bool inverse) {
  detail::rope_rotate_simd(layout == rope_layout::interleaved, R, cos, sin, x, H, head_stride,
                           inverse);
}

void rope_rotate_plain(rope_layout layout, int64_t R, const float* cos, const float* sin, float* x,
                       int64_t H, int64_t head_stride, bool inverse) {
  rotate_impl(layout, R, cos, sin, x, H, head_stride, inverse);
}

void rope_rotate_plain(rope_layout layout, int64_t R, const double* cos, const double* sin,
                       double* x, int64_t H, int64_t head_stride, bool inverse) {
  rotate_impl(layout, R, cos, sin, x, H, head_stride, inverse);
}

void rope_apply(const rope_freqs& f, rope_layout layout, rope_angle angle,
                std::span<const int64_t> positions, float* x, int64_t T, int64_t H, int64_t D,
                bool inverse) {
  check_apply_args(f, angle, positions, x, T, H, D);
  apply_entry<float>(f, layout, angle, positions, x, H, nullptr, 0, T, D, inverse);
}

void rope_apply(const rope_freqs& f, rope_layout layout, rope_angle angle,
                std::span<const int64_t> positions, double* x, int64_t T, int64_t H, int64_t D,
                bool inverse) {
  check_apply_args(f, angle, positions, x, T, H, D);
  apply_entry<double>(f, layout, angle, positions, x, H, nullptr, 0, T, D, inverse);
}

void rope_apply_qk(const rope_freqs& f, rope_layout layout, rope_angle angle,
                   std::span<const int64_t> positions, float* q, int64_t Hq, float* k, int64_t Hk,
                   int64_t T, int64_t D, bool inverse) {
  check_qk_args(f, angle, positions, q, Hq, k, Hk, T, D);
  apply_entry<float>(f, layout, angle, positions, q, Hq, k, Hk, T, D, inverse);
}

void rope_apply_qk(const rope_freqs& f, rope_layout layout, rope_angle angle,
                   std::span<const int64_t> positions, double* q, int64_t Hq, double* k, int64_t Hk,
                   int64_t T, int64_t D, bool inverse) {
  check_qk_args(f, angle, positions, q, Hq, k, Hk, T, D);
  apply_entry<double>(f, layout, angle, positions, q, Hq, k, Hk, T, D, inverse);
}

void rope_unrotate(const rope_freqs& f, rope_layout layout, rope_angle angle,
                   std::span<const int64_t> positions, float* x, int64_t T, int64_t H, int64_t D) {
  check_apply_args(f, angle, positions, x, T, H, D);
  apply_impl<float>(f, layout, angle, positions, x, H, nullptr, 0, T, D, 1.0 / f.attention_factor,
                    true, rope_reference_selected());
}

void rope_unrotate(const rope_freqs& f, rope_layout layout, rope_angle angle,
                   std::span<const int64_t> positions, double* x, int64_t T, int64_t H, int64_t D) {
  check_apply_args(f, angle, positions, x, T, H, D);
  apply_impl<double>(f, layout, angle, positions, x, H, nullptr, 0, T, D, 1.0 / f.attention_factor,
                     true, rope_reference_selected());
}

// ---------------------------------------------------------------------------------------------
// The reference
// ---------------------------------------------------------------------------------------------

namespace {
#if defined(__SIZEOF_FLOAT128__) && !defined(__aarch64__)
using wide_t = __float128;  // binary128: 113-bit significand, arithmetic in libgcc
#else
using wide_t = long double;  // binary128 on AArch64 Linux; weaker where long double == double
#endif
}  // namespace

void rope_reference_cos_sin(int64_t pos, double omega, long double* c, long double* s) {
  // p (<= 2^63, 64 bits) times omega (53 bits) is exact in binary128 for p <= 2^60; 2 pi to
  // 113 bits from the triple-double split; k = round(angle / 2 pi) via long double (exact
  // integer below 2^64). The remainder's error is <= k * 2^-113 * 2 pi + ulp, < 1e-17 for
  // angles up to 2^53.
  const wide_t two_pi =
      static_cast<wide_t>(kTwoPi0) + static_cast<wide_t>(kTwoPi1) + static_cast<wide_t>(kTwoPi2);
  const wide_t a = static_cast<wide_t>(pos) * static_cast<wide_t>(omega);
  const long double k = std::nearbyint(static_cast<long double>(a / two_pi));
  const wide_t r = a - static_cast<wide_t>(k) * two_pi;
  const long double rl = static_cast<long double>(r);
  *c = std::cos(rl);
  *s = std::sin(rl);
}

void rope_apply_reference(const rope_freqs& f, rope_layout layout,
                          std::span<const int64_t> positions, const double* x, double* y, int64_t T,
                          int64_t H, int64_t D, bool inverse) {
  check_apply_args(f, rope_angle::compat_f32, positions, x, T, H, D);
  if (T * H * D > 0 && y == nullptr) fail("y must not be null for shape ({}, {}, {})", T, H, D);
  const int64_t R = f.rotary_dim, n = R / 2;
  const long double a = f.attention_factor;
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t h = 0; h < H; ++h) {
      const double* xi = x + (t * H + h) * D;  // x: (T, H, D), D contiguous
      double* yo = y + (t * H + h) * D;
      for (int64_t d = R; d < D; ++d) yo[d] = xi[d];
      for (int64_t i = 0; i < n; ++i) {
        long double c, s;
        rope_reference_cos_sin(positions[t], f.inv_freq[i], &c, &s);
        if (inverse) s = -s;
        const int64_t iu = layout == rope_layout::half ? i : 2 * i;
        const int64_t iv = layout == rope_layout::half ? i + n : 2 * i + 1;
        const long double u = xi[iu], v = xi[iv];
        yo[iu] = static_cast<double>(a * (u * c - v * s));
        yo[iv] = static_cast<double>(a * (v * c + u * s));
      }
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Property checks
// ---------------------------------------------------------------------------------------------

namespace {

constexpr double kEps = 0x1p-53;  // unit roundoff of double

check_result make_check(std::string name, std::string claim, double err, double tol,
                        std::string detail) {
  return measured_check("rope", std::move(name), std::move(claim), err, tol, std::move(detail));
}

rope_config base_config(int64_t D, int64_t R) {
  rope_config c;
  c.head_dim = D;
  c.rotary_dim = R;
  c.theta = 10000;
  return c;
}

std::vector<double> random_vec(rng& g, size_t n) {
  std::vector<double> v(n);
  for (auto& e : v) e = g.normal();
  return v;
}

long double dotl(const double* a, const double* b, int64_t n) {
  long double s = 0;
  for (int64_t i = 0; i < n; ++i) s += static_cast<long double>(a[i]) * b[i];
  return s;
}

}  // namespace

std::vector<check_result> rope_checks() {
  std::vector<check_result> out;
  rng g(20240603);
  const int64_t T = 48, H = 3, D = 96;

  // 1. Norm preservation (a = 1). Per-component error of the exact path: cos/sin carry <= 2
  // ulp (2^-52 abs, see exact_cos_sin) and the rotation u c - v s two products and a sum
  // (3 eps relative to |u| + |v|); so | |y| / |x| - 1 | <= 2 * (2^-52 + 3 eps) = 10 eps.
  {
    auto f = rope_frequencies(base_config(D, D));
    std::vector<int64_t> pos(T);
    for (auto& p : pos) p = static_cast<int64_t>(g.below(10000000));
    auto x = random_vec(g, T * H * D);
    double err = 0;
    for (auto layout : {rope_layout::half, rope_layout::interleaved}) {
      auto y = x;
      rope_apply(f, layout, rope_angle::exact, pos, y.data(), T, H, D);
      for (int64_t r = 0; r < T * H; ++r) {
        const long double nx = std::sqrt(dotl(&x[r * D], &x[r * D], D));
        const long double ny = std::sqrt(dotl(&y[r * D], &y[r * D], D));
        err = std::max(err, static_cast<double>(std::fabs(ny / nx - 1)));
      }
    }
    out.push_back(make_check(
        "norm_preserved", "rotation preserves each head vector's norm (a = 1, exact, double)", err,
        10 * kEps,
        "positions < 1e7, D = R = 96; tol = 2 (2^-52 cos/sin + 3 eps rotation) = 10 eps"));
  }

  // 2. Relative position: q_m . k_n is unchanged when both positions shift by c (the RoFormer
  // property, Su et al. 2021 eq. 16). Each rotated vector carries <= 5 eps |x| error (as in
  // check 1), so the normalised score difference |dq.k| / (|q||k|) <= 2 * 2 * 5 eps = 20 eps.
  {
    auto c = base_config(80, 80);
    c.theta = 1e6;
    auto f = rope_frequencies(c);
    double err = 0;
    for (int trial = 0; trial < 64; ++trial) {
      auto q = random_vec(g, 80), k = random_vec(g, 80);
      const int64_t m = static_cast<int64_t>(g.below(100000)),
                    n = static_cast<int64_t>(g.below(100000)),
                    sh = static_cast<int64_t>(g.below(10000000));
      auto q1 = q, k1 = k, q2 = q, k2 = k;
      const int64_t pm = m, pn = n, pm2 = m + sh, pn2 = n + sh;
      rope_apply(f, rope_layout::half, rope_angle::exact, {&pm, 1}, q1.data(), 1, 1, 80);
      rope_apply(f, rope_layout::half, rope_angle::exact, {&pn, 1}, k1.data(), 1, 1, 80);
      rope_apply(f, rope_layout::half, rope_angle::exact, {&pm2, 1}, q2.data(), 1, 1, 80);
      rope_apply(f, rope_layout::half, rope_angle::exact, {&pn2, 1}, k2.data(), 1, 1, 80);
      const long double nq = std::sqrt(dotl(q.data(), q.data(), 80));
      const long double nk = std::sqrt(dotl(k.data(), k.data(), 80));
      const long double d = dotl(q1.data(), k1.data(), 80) - dotl(q2.data(), k2.data(), 80);
      err = std::max(err, static_cast<double>(std::fabs(d) / (nq * nk)));
    }
    out.push_back(make_check(
        "relative_shift", "q_m . k_n is unchanged when m and n shift by the same c (c < 1e7)", err,
        20 * kEps,
        "theta 1e6, D = 80; normalised by |q||k|; tol = 2 vectors x 2 (both shifts) x 5 eps"));
  }

  // 3. +k then -k: inverse(apply(x, p), p) = x for a = 1. Two rotations: 2 x 5 eps relative.
  // 4. Adjoint: <apply(x), y> = <x, inverse(y)> with a != 1 (yarn), the backward identity;
  // normalised by a |x||y|: both sides carry 5 eps |x||y| a -> tol 10 eps.
  {
    auto c = base_config(D, 64);
    auto f = rope_frequencies(c);
    std::vector<int64_t> pos(T);
    for (auto& p : pos) p = static_cast<int64_t>(g.below(1u << 30));
    auto x = random_vec(g, T * H * D);
    double err = 0;
    for (auto layout : {rope_layout::half, rope_layout::interleaved}) {
      auto y = x;
      rope_apply(f, layout, rope_angle::exact, pos, y.data(), T, H, D);
      rope_apply(f, layout, rope_angle::exact, pos, y.data(), T, H, D, true);
      for (int64_t r = 0; r < T * H; ++r) {
        const long double nx = std::sqrt(dotl(&x[r * D], &x[r * D], D));
        for (int64_t d = 0; d < D; ++d)
          err = std::max(err, static_cast<double>(std::fabs(y[r * D + d] - x[r * D + d]) / nx));
      }
    }
    out.push_back(make_check("inverse_is_identity",
                             "rotating by +p then by -p (inverse) returns x (a = 1)", err,
                             10 * kEps, "positions < 2^30, R = 64 of D = 96; tol = 2 x 5 eps"));

    auto cy = base_config(D, 64);
    cy.type = rope_type::yarn;
    cy.factor = 8;
    cy.original_max_position_embeddings = 4096;
    auto fy = rope_frequencies(cy);
    auto yv = random_vec(g, T * H * D);
    double aerr = 0;
    for (auto layout : {rope_layout::half, rope_layout::interleaved}) {
      auto fx = x, bt = yv;
      rope_apply(fy, layout, rope_angle::exact, pos, fx.data(), T, H, D);
      rope_apply(fy, layout, rope_angle::exact, pos, bt.data(), T, H, D, true);
      const long double lhs = dotl(fx.data(), yv.data(), T * H * D);
      const long double rhs = dotl(x.data(), bt.data(), T * H * D);
      const long double nx = std::sqrt(dotl(x.data(), x.data(), T * H * D));
      const long double ny = std::sqrt(dotl(yv.data(), yv.data(), T * H * D));
      aerr = std::max(aerr,
                      static_cast<double>(std::fabs(lhs - rhs) / (fy.attention_factor * nx * ny)));
    }
    out.push_back(make_check(
        "adjoint_identity",
        "<a R(p) x, y> = <x, a R(p)^T y>: inverse is the backward pass (yarn, a != 1)", aerr,
        10 * kEps, "yarn factor 8, a = 0.1 ln 8 + 1; normalised by a |x||y|; tol 2 x 5 eps"));
  }

  // 5. Composition: R(p) R(q) = R(p + q). Three rotations: tol 3 x 5 eps.
  {
    auto f = rope_frequencies(base_config(64, 64));
    double err = 0;
    for (int trial = 0; trial < 64; ++trial) {
      auto x = random_vec(g, 64);
      const int64_t p = static_cast<int64_t>(g.below(1u << 24)),
                    q = static_cast<int64_t>(g.below(1u << 24)), pq = p + q;
      auto a = x, b = x;
      rope_apply(f, rope_layout::interleaved, rope_angle::exact, {&p, 1}, a.data(), 1, 1, 64);
      rope_apply(f, rope_layout::interleaved, rope_angle::exact, {&q, 1}, a.data(), 1, 1, 64);
      rope_apply(f, rope_layout::interleaved, rope_angle::exact, {&pq, 1}, b.data(), 1, 1, 64);
      const long double nx = std::sqrt(dotl(x.data(), x.data(), 64));
      for (int i = 0; i < 64; ++i)
        err = std::max(err, static_cast<double>(std::fabs(a[i] - b[i]) / nx));
    }
    out.push_back(make_check("composition", "R(p) R(q) = R(p + q) for p, q < 2^24", err, 15 * kEps,
                             "D = R = 64; tol = 3 rotations x 5 eps"));
  }

  // 6. Layouts agree: interleaved channel 2i <-> half channel i, 2i+1 <-> i + R/2. The same
  // operations on the same values in the same order, so bit-identical (tol 0).
  // 7. Pass-through channels [R, D) are bit-exact.
  {
    const int64_t R = 24, DD = 80;
    auto f = rope_frequencies(base_config(DD, R));
    std::vector<int64_t> pos(T);
    for (auto& p : pos) p = static_cast<int64_t>(g.below(1000000));
    auto xh = random_vec(g, T * H * DD);
    auto xi = xh;
    for (int64_t r = 0; r < T * H; ++r)
      for (int64_t i = 0; i < R / 2; ++i) {
        xi[r * DD + 2 * i] = xh[r * DD + i];
        xi[r * DD + 2 * i + 1] = xh[r * DD + i + R / 2];
      }
    auto x0 = xh;
    double err = 0, perr = 0;
    for (auto angle : {rope_angle::exact, rope_angle::compat_f32}) {
      auto yh = xh, yi = xi;
      rope_apply(f, rope_layout::half, angle, pos, yh.data(), T, H, DD);
      rope_apply(f, rope_layout::interleaved, angle, pos, yi.data(), T, H, DD);
      for (int64_t r = 0; r < T * H; ++r) {
        for (int64_t i = 0; i < R / 2; ++i) {
          err = std::max(err, std::fabs(yi[r * DD + 2 * i] - yh[r * DD + i]));
          err = std::max(err, std::fabs(yi[r * DD + 2 * i + 1] - yh[r * DD + i + R / 2]));
        }
        for (int64_t d = R; d < DD; ++d) {
          perr += std::memcmp(&yh[r * DD + d], &x0[r * DD + d], sizeof(double)) != 0;
          perr += std::memcmp(&yi[r * DD + d], &x0[r * DD + d], sizeof(double)) != 0;
        }
      }
    }
    out.push_back(make_check(
        "layouts_agree", "half and interleaved agree bit for bit after the channel permutation",
        err, 0, "R = 24 of D = 80, both angle modes; same arithmetic per pair -> tol 0"));
    out.push_back(make_check("pass_through_bit_exact",
                             "channels [R, D) are untouched (count of differing values)", perr, 0,
                             "R = 24 of D = 80, both layouts and angle modes"));
  }

  // 8. rope_apply (double, exact) against the binary128 reference, normalised by a (|u|+|v|)
  // of each pair: cos/sin 2^-52 + rotation 3 eps -> tol 5 eps. float data: cos/sin rounded to
  // float (2^-24 each) and float rotation (3 x 2^-24), so tol 5 x 2^-24.
  for (int which = 0; which < 2; ++which) {
    auto c = base_config(D, D);
    c.type = rope_type::yarn;
    c.factor = 4;
    c.original_max_position_embeddings = 32768;
    auto f = rope_frequencies(c);
    std::vector<int64_t> pos(T);
    for (auto& p : pos) p = static_cast<int64_t>(g.below(10000000));
    auto x = random_vec(g, T * H * D);
    double err = 0;
    for (auto layout : {rope_layout::half, rope_layout::interleaved}) {
      std::vector<double> ref(x.size());
      rope_apply_reference(f, layout, pos, x.data(), ref.data(), T, H, D);
      std::vector<double> y(x.size());
      if (which == 0) {
        y = x;
        rope_apply(f, layout, rope_angle::exact, pos, y.data(), T, H, D);
      } else {
        std::vector<float> xf(x.begin(), x.end());
        // Compare against the reference of the float-rounded input.
        std::vector<double> xr(xf.begin(), xf.end());
        rope_apply_reference(f, layout, pos, xr.data(), ref.data(), T, H, D);
        rope_apply(f, layout, rope_angle::exact, pos, xf.data(), T, H, D);
        y.assign(xf.begin(), xf.end());
        x = xr;
      }
      const int64_t n = D / 2;
      for (int64_t r = 0; r < T * H; ++r)
        for (int64_t i = 0; i < n; ++i) {
          const int64_t iu = layout == rope_layout::half ? i : 2 * i;
          const int64_t iv = layout == rope_layout::half ? i + n : 2 * i + 1;
          const double scale =
              f.attention_factor * (std::fabs(x[r * D + iu]) + std::fabs(x[r * D + iv]) + 1e-300);
          err = std::max(err, std::fabs(y[r * D + iu] - ref[r * D + iu]) / scale);
          err = std::max(err, std::fabs(y[r * D + iv] - ref[r * D + iv]) / scale);
        }
    }
    if (which == 0)
      out.push_back(make_check("apply_vs_reference_f64",
                               "rope_apply (double, exact) matches the binary128 reference", err,
                               5 * kEps,
                               "yarn s = 4, positions < 1e7; error / (a (|u| + |v|)) per pair; "
                               "tol = 2^-52 cos/sin + 3 eps rotation = 5 eps"));
    else
      out.push_back(make_check(
          "apply_vs_reference_f32", "rope_apply (float, exact) matches the binary128 reference",
          err, 5 * 0x1p-24,
          "yarn s = 4, positions < 1e7; cos/sin rounded to float + float rotation: 5 x 2^-24"));
  }

  // 9. Angle error of each mode against the reference, positions up to 1e7 and frequencies
  // theta^(-2i/R) for theta = 1e4 and 5e5, R = 128.
  //   exact: |cos err|, |sin err| <= 2^-52 (argument exact, reduction to 2^-100, libm 1 ulp).
  //   compat_f32: the angle float(p) float(w) differs from p w by at most
  //     |p w| (2^-24 [w rounding] + 2^-24 [p rounding, 0 below 2^24] + 2^-24 [product]),
  //   and sinf/cosf and the result add 2^-23; the check reports max(err / bound) <= 1 and, in
  //   the detail, the largest absolute error seen.
  {
    double eerr = 0, cratio = 0, cabs = 0;
    const int64_t probes[] = {0, 1, 7, 100, 4095, 65537, 1000003, 8388607, 9999991, 10000000};
    for (double theta : {1e4, 5e5}) {
      auto cc = base_config(128, 128);
      cc.theta = theta;
      auto f = rope_frequencies(cc);
      std::vector<int64_t> pos(std::begin(probes), std::end(probes));
      for (int k = 0; k < 40; ++k) pos.push_back(static_cast<int64_t>(g.below(10000001)));
      std::vector<double> ce(64), se(64);
      std::vector<float> cf(64), sf(64);
      for (int64_t p : pos) {
        rope_cos_sin(f, rope_angle::exact, p, ce.data(), se.data());
        rope_cos_sin(f, rope_angle::compat_f32, p, cf.data(), sf.data());
        for (int i = 0; i < 64; ++i) {
          long double rc, rs;
          rope_reference_cos_sin(p, f.inv_freq[i], &rc, &rs);
          eerr = std::max({eerr, static_cast<double>(std::fabs(ce[i] - rc)),
                           static_cast<double>(std::fabs(se[i] - rs))});
          const double e =
              static_cast<double>(std::max(std::fabs(cf[i] - rc), std::fabs(sf[i] - rs)));
          const double bound = 3 * 0x1p-24 * static_cast<double>(p) * f.inv_freq[i] + 0x1p-23;
          cabs = std::max(cabs, e);
          cratio = std::max(cratio, e / bound);
        }
      }
    }
    out.push_back(make_check("angle_error_exact",
                             "exact-mode cos/sin error vs the binary128 reference, pos <= 1e7",
                             eerr, 2 * 0x1p-52,
                             "argument exact (two-product), reduction to ~2^-100, libm <= 1 ulp "
                             "plus first-order correction: tol 2 ulp(1) = 2^-51"));
    out.push_back(make_check(
        "angle_error_compat_f32",
        "compat_f32 cos/sin error / (3 * 2^-24 * p * w + 2^-23) at pos <= 1e7", cratio, 1.0,
        fmt::format("largest absolute cos/sin error measured: {:.3g} (float angle rounding grows "
                    "like p w 2^-24)",
                    cabs)));
  }

  // 10. Scaling identities. Linear s = 3 at position 3 p equals default at p: the angles
  // (3 p)(w / 3) and p w differ by the rounding of w / 3 (1 eps relative to the angle, which
  // is < 1e6; the products are exact in the double-double angle), so tol = 2 eps * 1e6 +
  // 2^-51 in cos/sin.
  // Dynamic at seq_len <= M equals default exactly; yarn / llama3 at factor 1 up to 3 eps.
  {
    auto base = base_config(64, 64);
    auto fd = rope_frequencies(base);
    auto cl = base;
    cl.type = rope_type::linear;
    cl.factor = 3;
    auto fl = rope_frequencies(cl);
    double err = 0;
    std::vector<double> c1(32), s1(32), c2(32), s2(32);
    for (int k = 0; k < 64; ++k) {
      const int64_t p = static_cast<int64_t>(g.below(1000000));
      rope_cos_sin(fd, rope_angle::exact, p, c1.data(), s1.data());
      rope_cos_sin(fl, rope_angle::exact, 3 * p, c2.data(), s2.data());
      for (int i = 0; i < 32; ++i)
        err = std::max({err, std::fabs(c1[i] - c2[i]), std::fabs(s1[i] - s2[i])});
    }
    out.push_back(make_check(
        "linear_is_interpolation", "linear factor 3 at position 3 p equals default at p", err,
        2 * kEps * 1e6 + 0x1p-51,
        "Chen et al. 2023 eq. 4; angle rounding 2 eps x angle (<= 1e6) + 2^-51 cos/sin"));

    double derr = 0;
    auto cdyn = base;
    cdyn.type = rope_type::dynamic;
    cdyn.factor = 2;
    cdyn.max_position_embeddings = 4096;
    auto cy = base;
    cy.type = rope_type::yarn;
    cy.factor = 1;
    cy.original_max_position_embeddings = 4096;
    auto cl3 = base;
    cl3.type = rope_type::llama3;
    cl3.factor = 1;
    cl3.original_max_position_embeddings = 8192;
    for (const auto& f2 : {rope_frequencies(cdyn, 0), rope_frequencies(cdyn, 4096),
                           rope_frequencies(cy), rope_frequencies(cl3)}) {
      for (size_t i = 0; i < fd.inv_freq.size(); ++i)
        derr = std::max(derr, std::fabs(f2.inv_freq[i] - fd.inv_freq[i]) / fd.inv_freq[i]);
      derr = std::max(derr, std::fabs(f2.attention_factor - 1));
    }
    out.push_back(make_check(
        "scaling_reduces_to_default",
        "dynamic at seq_len <= M, yarn and llama3 at factor 1 give the default frequencies", derr,
        3 * kEps,
        "dynamic reduces exactly (base (s L/M - s + 1)^x = base); the yarn ramp blend "
        "w r + w (1 - r) and the llama3 blend round twice and add: 3 eps relative"));
  }
  return out;
}

}  // namespace posenc
