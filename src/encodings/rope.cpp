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
#include "src/core/angle.hpp"
#include "src/encodings/rope_pipelines.hpp"

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
    case rope_type::proportional:
      return "proportional";
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
  if (name == "proportional") return rope_type::proportional;
  fail(
      "{} must be one of default, linear, dynamic, yarn, longrope (or su), llama3, proportional, "
      "got '{}'",
      what, name);
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
  switch (a) {
    case rope_angle::exact:
      return "exact";
    case rope_angle::f32:
      return "f32";
    case rope_angle::hf_f32:
      return "hf_f32";
    case rope_angle::ggml_f32:
      return "ggml_f32";
  }
  return "?";
}

rope_angle rope_angle_from_name(const std::string& name, const std::string& what) {
  if (name == "exact") return rope_angle::exact;
  if (name == "f32" || name == "compat_f32") return rope_angle::f32;
  if (name == "hf_f32") return rope_angle::hf_f32;
  if (name == "ggml_f32") return rope_angle::ggml_f32;
  fail("{} must be one of exact, f32 (or its former name compat_f32), hf_f32, ggml_f32, got '{}'",
       what, name);
}

std::vector<rope_angle> rope_angles() {
  return {rope_angle::exact, rope_angle::f32, rope_angle::hf_f32, rope_angle::ggml_f32};
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
  if (c.dynamic_alpha != 0 && c.type != rope_type::dynamic)
    fail("rope_scaling.alpha (Hunyuan's NTK alpha) needs rope_type dynamic, got {}",
         rope_type_name(c.type));
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
    case rope_type::proportional:
      if (c.rotated_pairs && (*c.rotated_pairs < 0 || *c.rotated_pairs > half))
        fail("rotated_pairs (partial_rotary_factor * head_dim / 2) must be in [0, {}], got {}",
             half, *c.rotated_pairs);
      break;
    case rope_type::dynamic:
      if (c.max_position_embeddings < 1)
        fail("max_position_embeddings must be >= 1 for rope_type dynamic, got {}",
             c.max_position_embeddings);
      if (c.rotary_dim < 4)
        fail("rotary_dim must be >= 4 for rope_type dynamic (exponent R/(R-2)), got {}",
             c.rotary_dim);
      require_finite(c.dynamic_alpha, "rope_scaling.alpha");
      if (c.dynamic_alpha < 0) fail("rope_scaling.alpha must be > 0, got {}", c.dynamic_alpha);
      // HunYuanDenseV1RotaryEmbedding takes its exponent and its pairs from head_dim.
      if (c.dynamic_alpha > 0 && c.rotary_dim != c.head_dim)
        fail(
            "rope_scaling.alpha needs rotary_dim = head_dim = {} (Hunyuan rotates every pair), "
            "got rotary_dim {}",
            c.head_dim, c.rotary_dim);
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
      // Equal factors (Llama 4: 1 and 1) leave no interpolation band: every wavelength is kept
      // or divided by the factor.
      if (c.low_freq_factor <= 0 || c.high_freq_factor < c.low_freq_factor)
        fail(
            "rope_scaling.high_freq_factor must be >= rope_scaling.low_freq_factor > 0, got "
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

// Dynamic NTK's frequencies for seq_len positions (f.inv_freq).
void dynamic_freqs(const rope_config& c, int64_t seq_len, rope_freqs& f) {
  const int64_t R = c.rotary_dim;
  const double s = c.factor;
  // Dynamic NTK (bloc97 / emozilla 2023; HF _compute_dynamic_ntk_parameters):
  // base' = base * (s L / M - (s - 1))^(R / (R - 2)), L = max(seq_len, M).
  const double M = static_cast<double>(c.max_position_embeddings);
  const double L = std::max(static_cast<double>(seq_len), M);
  const double ex = static_cast<double>(R) / static_cast<double>(R - 2);
  // Hunyuan's alpha (transformers' HunYuanDenseV1RotaryEmbedding): base * alpha^(R/(R-2))
  // up to max_position_embeddings; dynamic_rope_update switches to plain NTK past it.
  const double base = c.dynamic_alpha > 0 && L <= M ? c.theta * std::pow(c.dynamic_alpha, ex)
                                                    : c.theta * std::pow(s * L / M - (s - 1), ex);
  f.inv_freq = default_inv_freq(base, R);
}

// YaRN's frequencies and attention factor (f.inv_freq, f.attention_factor).
void yarn_freqs(const rope_config& c, rope_freqs& f) {
  const int64_t R = c.rotary_dim, half = R / 2;
  const double s = c.factor;
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
}

// LongRoPE's frequencies for seq_len positions and its attention factor (f.inv_freq,
// f.attention_factor).
void longrope_freqs(const rope_config& c, int64_t seq_len, rope_freqs& f) {
  const int64_t R = c.rotary_dim, half = R / 2;
  const double s = c.factor;
  // LongRoPE (Ding et al. 2024; HF _compute_longrope_parameters): omega_i = 1 / (lambda_i
  // base^(2i/R)), lambda = long_factor beyond the original context, else short_factor.
  const int64_t orig = c.original_max_position_embeddings > 0 ? c.original_max_position_embeddings
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
}

// Llama 3.1's frequencies (f.inv_freq).
void llama3_freqs(const rope_config& c, rope_freqs& f) {
  const int64_t R = c.rotary_dim;
  const double s = c.factor;
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
    if (wavelen > low_wavelen || c.high_freq_factor == c.low_freq_factor) {
      // (equal factors: the band is the single wavelength orig, where HF's 0 / 0 smoothing
      // is not a number; posenc divides there too, as just beyond it)
      w = w / s;
    } else {
      const double g =
          (orig / wavelen - c.low_freq_factor) / (c.high_freq_factor - c.low_freq_factor);
      w = (1 - g) * w / s + g * w;
    }
  }
}

}  // namespace

void rope_set_hf_inv_freq(rope_freqs& f, std::span<const float> inv_freq, const char* arg) {
  if (!f.hf)
    fail("{}: the frequencies have no hf_f32 pipeline (build them with rope_frequencies)", arg);
  const int64_t half = f.rotary_dim / 2;
  if (static_cast<int64_t>(inv_freq.size()) != half)
    fail("{} must have shape (R/2,) = ({},), got ({},)", arg, half, inv_freq.size());
  for (size_t i = 0; i < inv_freq.size(); ++i)
    if (!std::isfinite(inv_freq[i]) || inv_freq[i] < 0)
      fail("{}[{}] must be finite and >= 0, got {}", arg, i, inv_freq[i]);
  f.hf->inv_freq.assign(inv_freq.begin(), inv_freq.end());
}

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
    case rope_type::dynamic:
      dynamic_freqs(c, seq_len, f);
      break;
    case rope_type::yarn:
      yarn_freqs(c, f);
      break;
    case rope_type::longrope:
      longrope_freqs(c, seq_len, f);
      break;
    case rope_type::llama3:
      llama3_freqs(c, f);
      break;
    case rope_type::proportional: {
      // transformers' _compute_proportional_rope_parameters (Gemma 4 family): the exponent's
      // denominator is the full head dim D (= R here), not the rotated width, so the rotated
      // pairs keep the frequencies a full-width RoFormer rotation (Su et al. 2021, eq. 34)
      // gives them: omega_i = theta^(-2i/D) / s for i < rotated_pairs, and 0 for the rest,
      // which then rotate by angle 0 (the identity).
      const int64_t rot = c.rotated_pairs.value_or(half);
      f.inv_freq.assign(static_cast<size_t>(half), 0.0);
      for (int64_t i = 0; i < rot; ++i)
        f.inv_freq[i] =
            1.0 / std::pow(c.theta, static_cast<double>(2 * i) / static_cast<double>(R)) / s;
      break;
    }
  }
  f.hf = detail::rope_hf_f32_params(c, seq_len, f.attention_factor);
  f.ggml = detail::rope_ggml_f32_params(c, seq_len, f.attention_factor, &f.ggml_note);
  return f;
}

// ---------------------------------------------------------------------------------------------
// cos / sin rows
// ---------------------------------------------------------------------------------------------

namespace {

// Largest position the exact mode accepts: every integer up to it is a double.
constexpr int64_t kMaxExactPos = int64_t{1} << 53;

void check_pos(int64_t pos, rope_angle angle) {
  if (pos < 0) fail("positions must be >= 0, got {}", pos);
  if (angle == rope_angle::exact && pos > kMaxExactPos)
    fail("positions must be <= 2^53 = {} in angle mode exact, got {}", kMaxExactPos, pos);
  if (angle == rope_angle::ggml_f32 && pos > INT32_MAX)
    fail(
        "positions must be <= 2^31 - 1 = {} in angle mode ggml_f32 (ggml's int32 positions), got "
        "{}",
        INT32_MAX, pos);
}

// cos/sin row with an explicit scale (a for the forward, 1/a for unrotate).
// exact: the SIMD row of rope_simd.cpp (CosSinExact of src/core/angle_simd-inl.h, <= 2.5 *
// 2^-53), or, with plain = true (POSENC_REFERENCE=1), the scalar detail::angle_cos_sin_exact of
// src/core/angle.hpp (the same reduction, libm, <= 2^-52).
template <typename T>
void cos_sin_row(const rope_freqs& f, rope_angle angle, int64_t pos, double scale, T* c, T* s,
                 bool plain = false) {
  const int64_t n = f.rotary_dim / 2;
  if (angle == rope_angle::exact) {
    if (plain) {
      for (int64_t i = 0; i < n; ++i) {
        double cc, ss;
        detail::angle_cos_sin_exact(static_cast<double>(pos), f.inv_freq[i], cc, ss);
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
  } else if constexpr (std::is_same_v<T, float>) {
    // The float32 pipelines (src/encodings/rope_pipelines.cpp); the forward (scale = a) uses
    // the engine's own magnitude arithmetic.
    detail::rope_pipeline_cos_sin(f, angle, pos, scale == f.attention_factor, scale, c, s);
  } else {
    // Chunks through a stack buffer: the float32 values widened exactly.
    constexpr int64_t kChunk = 64;
    float cf[kChunk], sf[kChunk];
    if (n <= kChunk) {
      detail::rope_pipeline_cos_sin(f, angle, pos, scale == f.attention_factor, scale, cf, sf);
      for (int64_t i = 0; i < n; ++i) c[i] = cf[i], s[i] = sf[i];
    } else {
      std::vector<float> cv(static_cast<size_t>(n)), sv(static_cast<size_t>(n));
      detail::rope_pipeline_cos_sin(f, angle, pos, scale == f.attention_factor, scale, cv.data(),
                                    sv.data());
      for (int64_t i = 0; i < n; ++i) c[i] = cv[i], s[i] = sv[i];
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
  if (angle != rope_angle::exact) detail::rope_pipeline_check(f, angle);
  cos_sin_row(f, angle, pos, f.attention_factor, cos_out, sin_out);
}

void rope_cos_sin(const rope_freqs& f, rope_angle angle, int64_t pos, float* cos_out,
                  float* sin_out) {
  rope_validate(f);
  check_pos(pos, angle);
  if (angle != rope_angle::exact) detail::rope_pipeline_check(f, angle);
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
  if (angle != rope_angle::exact) detail::rope_pipeline_check(f, angle);
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
  if (angle != rope_angle::exact) detail::rope_pipeline_check(f, angle);
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
  const wide_t two_pi = static_cast<wide_t>(detail::kTwoPi0) +
                        static_cast<wide_t>(detail::kTwoPi1) + static_cast<wide_t>(detail::kTwoPi2);
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
  check_apply_args(f, rope_angle::f32, positions, x, T, H, D);
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

}  // namespace posenc
