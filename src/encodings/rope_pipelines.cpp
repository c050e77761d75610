// The float32 angle pipelines of rope_angle: f32 (a plain float32 angle), hf_f32 (Hugging Face
// transformers) and ggml_f32 (ggml's CPU backend), each in its engine's operation order.
// docs/conventions.md ("Float32 angle pipelines") lists every operation; the test
// (tests/test_rope_pipelines.cpp) re-evaluates each in plain float arithmetic.
//
// Every line below rounds to float32 where the engine does, with one model per primitive:
//   * transformers' float32 tensor ops (+, -, *, /, reciprocal, comparisons) are IEEE float32
//     operations, a Python scalar entering one is first rounded to float32 (a wrapped number
//     takes the tensor's dtype), and `x / tensor` is `tensor.reciprocal() * x` (torch/_tensor.py
//     __rdiv__), so it rounds twice;
//   * torch's float32 pow and cos / sin (SLEEF, 1 ulp) are modelled as the correctly rounded
//     float of the double function: the same value except in the rare cases where SLEEF's last
//     bit differs (measured in docs/conventions.md);
//   * ggml calls libm's powf, logf, cosf, sinf: the same calls here (identical on the same libm).
// The build uses -ffp-contract=off, so no a * b + c below is fused.
#include "src/encodings/rope_pipelines.hpp"

#include <algorithm>
#include <climits>
#include <cmath>
#include <limits>

#include "posenc/core/error.hpp"

namespace posenc::detail {
namespace {

constexpr double kPi = 3.141592653589793238462643383279502884;

inline float F(double x) {
  return static_cast<float>(x);
}

// torch's float32 pow (tensor ** tensor, scalar ** tensor, tensor ** scalar): the correctly
// rounded power of the two float32 operands.
inline float torch_pow(float b, float e) {
  return F(std::pow(static_cast<double>(b), static_cast<double>(e)));
}

// torch.arange(0, R, 2, dtype=torch.int64).float() / R: float(2i) / float(R) in float32.
float hf_exponent(int64_t i, int64_t R) {
  return static_cast<float>(2 * i) / static_cast<float>(R);
}

// 1.0 / (base ** exponents): _compute_default_rope_parameters in float32, base a float32
// value (the Python float rounded, or dynamic's float32 tensor).
std::vector<float> hf_default(float base, int64_t R) {
  std::vector<float> inv(static_cast<size_t>(R / 2));
  for (int64_t i = 0; i < R / 2; ++i) inv[i] = 1.0f / torch_pow(base, hf_exponent(i, R));
  return inv;
}

// Llama 3.1's smoothing as transformers' _compute_llama3_parameters evaluates it on a float32
// inv_freq tensor (the Python scalars orig, low, high, s rounded to float32 where they meet a
// tensor; low_freq_wavelen = orig / low and high_freq_wavelen = orig / high are Python floats).
std::vector<float> hf_llama3(std::vector<float> inv, const rope_config& c) {
  const double orig = static_cast<double>(c.original_max_position_embeddings);
  const float low_wl = F(orig / c.low_freq_factor), high_wl = F(orig / c.high_freq_factor);
  const float s = F(c.factor), lo = F(c.low_freq_factor),
              span = F(c.high_freq_factor - c.low_freq_factor);
  const float two_pi = F(2 * kPi), origf = F(orig);
  for (auto& w : inv) {
    const float wavelen = (1.0f / w) * two_pi;         // 2 * math.pi / inv_freq
    const float llama = wavelen > low_wl ? w / s : w;  // torch.where(wavelen > low, inv / s, inv)
    const float smooth = ((1.0f / wavelen) * origf - lo) / span;
    const float smoothed = (1.0f - smooth) * llama / s + smooth * llama;
    const bool medium = !(wavelen < high_wl) && !(wavelen > low_wl);
    // Equal factors (Llama 4) leave a band of one wavelength where HF's smoothing is 0 / 0;
    // divided there, as rope_frequencies does.
    w = medium ? (span == 0.0f ? w / s : smoothed) : llama;
  }
  return inv;
}

}  // namespace

rope_hf_f32 rope_hf_f32_params(const rope_config& c, int64_t seq_len, double a) {
  rope_hf_f32 h;
  h.attention_factor = F(a);
  const int64_t R = c.rotary_dim, half = R / 2;
  const float s = F(c.factor);
  switch (c.type) {
    case rope_type::default_:
      h.inv_freq = hf_default(F(c.theta), R);
      break;
    case rope_type::linear:
      // _compute_linear_scaling_rope_parameters: inv_freq /= factor.
      h.inv_freq = hf_default(F(c.theta), R);
      for (auto& w : h.inv_freq) w = w / s;
      break;
    case rope_type::dynamic: {
      // _compute_dynamic_ntk_parameters: base * (factor * L / M - (factor - 1)) ** (R / (R-2)).
      // At initialisation L = M is a Python int and the base a Python float (double); from
      // dynamic_rope_update (L = max(position_ids) + 1 > M) L is an int64 tensor, so every
      // operation is a float32 tensor op.
      const int64_t M = c.max_position_embeddings;
      const double ex = static_cast<double>(R) / static_cast<double>(R - 2);
      float base;
      if (c.dynamic_alpha > 0 && seq_len <= M) {
        // HunYuanDenseV1RotaryEmbedding: rope_theta * alpha ** (dim / (dim - 2)), Python floats;
        // then 1.0 / (base ** (arange(0, dim, 2).float() / dim)), the default's operations.
        base = F(c.theta * std::pow(c.dynamic_alpha, ex));
      } else if (seq_len > M) {
        const float t1 = s * static_cast<float>(seq_len);
        const float t2 = t1 / static_cast<float>(M);
        const float t3 = t2 - F(c.factor - 1);
        base = F(c.theta) * torch_pow(t3, F(ex));
      } else {
        const double Md = static_cast<double>(M);
        base = F(c.theta * std::pow(c.factor * Md / Md - (c.factor - 1), ex));
      }
      h.inv_freq = hf_default(base, R);
      break;
    }
    case rope_type::yarn: {
      // _compute_yarn_parameters: pos_freqs = base ** exponents; extrapolation 1 / pos_freqs,
      // interpolation 1 / (factor * pos_freqs); low / high from Python math (floor / ceil when
      // truncate); ramp (arange(R/2).float() - low) / (high - low) clamped to [0, 1];
      // extrap_factor = 1 - ramp; inv = interp * (1 - extrap_factor) + extrap * extrap_factor.
      const double orig = static_cast<double>(c.original_max_position_embeddings > 0
                                                  ? c.original_max_position_embeddings
                                                  : c.max_position_embeddings);
      auto corr = [&](double rot) {
        return static_cast<double>(R) * std::log(orig / (rot * 2 * kPi)) / (2 * std::log(c.theta));
      };
      double low = corr(c.beta_fast), high = corr(c.beta_slow);
      if (c.truncate) low = std::floor(low), high = std::ceil(high);
      low = std::max(low, 0.0);
      high = std::min(high, static_cast<double>(R - 1));
      if (low == high) high += 0.001;
      const float lowf = F(low), spanf = F(high - low), base = F(c.theta);
      h.inv_freq.resize(static_cast<size_t>(half));
      for (int64_t i = 0; i < half; ++i) {
        const float pf = torch_pow(base, hf_exponent(i, R));
        const float extrap = 1.0f / pf;
        const float interp = 1.0f / (s * pf);
        const float ramp = std::clamp((static_cast<float>(i) - lowf) / spanf, 0.0f, 1.0f);
        const float ef = 1.0f - ramp;
        h.inv_freq[i] = interp * (1.0f - ef) + extrap * ef;
      }
      break;
    }
    case rope_type::longrope: {
      // _compute_longrope_parameters: 1.0 / (ext_factors * base ** exponents), ext_factors a
      // float32 tensor of the chosen list.
      const int64_t orig = c.original_max_position_embeddings > 0
                               ? c.original_max_position_embeddings
                               : c.max_position_embeddings;
      const auto& ext = seq_len > orig ? c.long_factor : c.short_factor;
      h.inv_freq.resize(static_cast<size_t>(half));
      for (int64_t i = 0; i < half; ++i)
        h.inv_freq[i] = 1.0f / (F(ext[i]) * torch_pow(F(c.theta), hf_exponent(i, R)));
      break;
    }
    case rope_type::llama3:
      h.inv_freq = hf_llama3(hf_default(F(c.theta), R), c);
      break;
    case rope_type::proportional: {
      // _compute_proportional_rope_parameters: 1.0 / (base ** (arange(0, 2 n, 2).float() / D))
      // for the n rotated pairs, float32 zeros after, then inv_freq /= factor (R = D here).
      const int64_t rot = c.rotated_pairs.value_or(half);
      h.inv_freq = hf_default(F(c.theta), R);
      for (int64_t i = rot; i < half; ++i) h.inv_freq[i] = 0.0f;
      for (auto& w : h.inv_freq) w = w / s;
      break;
    }
  }
  return h;
}

namespace {

// ggml_rope_yarn_corr_dim (ggml.c): n_dims * logf(n_ctx_orig / (n_rot * 2 * (float)M_PI)) /
// (2 * logf(base)), every operation in float.
float ggml_corr_dim(int64_t n_dims, int64_t n_ctx_orig, float n_rot, float base) {
  const float den = n_rot * 2.0f * static_cast<float>(kPi);
  return static_cast<float>(n_dims) * std::log(static_cast<float>(n_ctx_orig) / den) /
         (2.0f * std::log(base));
}

// convert_hf_to_gguf.py (LlamaModel, rope_freqs.weight): per-pair divisors from a float32
// inv_freq tensor: 1 below the high-frequency wavelength, factor above the low one, else
// 1 / ((1 - smooth) / factor + smooth), each a float32 0-d tensor op.
std::vector<float> ggml_llama3_factors(const rope_config& c) {
  const auto inv = hf_default(F(c.theta), c.rotary_dim);
  const double orig = static_cast<double>(c.original_max_position_embeddings);
  const float low_wl = F(orig / c.low_freq_factor), high_wl = F(orig / c.high_freq_factor);
  const float s = F(c.factor), lo = F(c.low_freq_factor),
              span = F(c.high_freq_factor - c.low_freq_factor), origf = F(orig),
              two_pi = F(2 * kPi);
  std::vector<float> ff(inv.size());
  for (size_t i = 0; i < inv.size(); ++i) {
    const float wavelen = (1.0f / inv[i]) * two_pi;
    if (wavelen < high_wl) {
      ff[i] = 1.0f;
    } else if (wavelen > low_wl || span == 0.0f) {
      ff[i] = s;
    } else {
      const float smooth = ((1.0f / wavelen) * origf - lo) / span;
      ff[i] = 1.0f / ((1.0f - smooth) / s + smooth);
    }
  }
  return ff;
}

}  // namespace

rope_ggml_f32 rope_ggml_f32_params(const rope_config& c, int64_t seq_len, double a,
                                   std::string* note) {
  rope_ggml_f32 g;
  const int64_t R = c.rotary_dim;
  note->clear();
  double base = c.theta;
  if (c.type == rope_type::dynamic) {
    // llama.cpp has no dynamic NTK: the model runs ggml with the NTK base of rope_frequencies
    // at seq_len as rope.freq_base.
    const double M = static_cast<double>(c.max_position_embeddings);
    const double L = std::max(static_cast<double>(seq_len), M);
    base = c.theta * std::pow(c.factor * L / M - (c.factor - 1),
                              static_cast<double>(R) / static_cast<double>(R - 2));
    *note = "llama.cpp has no dynamic NTK; modelled with freq_base = the NTK base at seq_len";
  }
  g.freq_base = F(base);
  // ggml_compute_forward_rope_flt: theta_scale = powf(freq_base, -2.0f/n_dims).
  g.theta_scale = std::pow(g.freq_base, -2.0f / static_cast<float>(R));
  const int64_t orig = c.original_max_position_embeddings > 0 ? c.original_max_position_embeddings
                                                              : c.max_position_embeddings;
  switch (c.type) {
    case rope_type::default_:
    case rope_type::dynamic:
      break;
    case rope_type::linear:
      // llama.cpp: rope_freq_scale = 1.0f / rope.scaling.factor.
      g.freq_scale = 1.0f / F(c.factor);
      break;
    case rope_type::yarn: {
      g.freq_scale = 1.0f / F(c.factor);
      g.ext_factor = 1.0f;
      // ggml multiplies its mscale by 1 + 0.1 logf(1 / freq_scale) (rope_yarn); the magnitude
      // passed in is HF's a divided by that factor (in double), so the product is a.
      g.attn_factor = F(a / (0.1 * std::log(c.factor) + 1.0));
      // ggml_rope_yarn_corr_dims: floorf / ceilf, clamped to [0, n_dims - 1].
      const float start = std::floor(ggml_corr_dim(R, orig, F(c.beta_fast), g.freq_base));
      const float end = std::ceil(ggml_corr_dim(R, orig, F(c.beta_slow), g.freq_base));
      g.corr_dims[0] = std::max(0.0f, start);
      g.corr_dims[1] = std::min(static_cast<float>(R - 1), end);
      if (!c.truncate)
        *note =
            "ggml always floors / ceils the YaRN correction dims (truncate = false is not "
            "representable)";
      break;
    }
    case rope_type::longrope: {
      const auto& ext = seq_len > orig ? c.long_factor : c.short_factor;
      g.freq_factors.resize(ext.size());
      for (size_t i = 0; i < ext.size(); ++i) g.freq_factors[i] = F(ext[i]);
      g.attn_factor = F(a);
      break;
    }
    case rope_type::llama3:
      g.freq_factors = ggml_llama3_factors(c);
      break;
    case rope_type::proportional: {
      // GGUF names no proportional type. Modelled as ggml would run it with n_dims = D,
      // freq_scale = 1 / factor and per-pair divisors that are 1 on the rotated pairs and
      // +inf on the others (theta / inf = 0: the identity rotation).
      g.freq_scale = 1.0f / F(c.factor);
      const int64_t rot = c.rotated_pairs.value_or(R / 2);
      g.freq_factors.assign(static_cast<size_t>(R / 2), 1.0f);
      for (int64_t i = rot; i < R / 2; ++i)
        g.freq_factors[i] = std::numeric_limits<float>::infinity();
      *note =
          "GGUF has no proportional rope type; modelled with freq_factors = inf on the unrotated "
          "pairs";
      break;
    }
  }
  return g;
}

namespace {

// ggml_rope_cache_init + rope_yarn + rope_yarn_ramp (ggml-cpu ops.cpp) for one position,
// sin_sign = 1. Writes the angle of each pair and, when c / s are given, cosf(theta) * mscale
// and sinf(theta) * mscale (mscale = magnitude, times the YaRN factor when ext_factor != 0)
// or, without own magnitude, cos / sin times `scale`.
void ggml_row(const rope_ggml_f32& g, int64_t n, int64_t pos, float* th, bool own_magnitude,
              float scale, float* c, float* s) {
  float theta = static_cast<float>(static_cast<int32_t>(pos));
  const float* ff = g.freq_factors.empty() ? nullptr : g.freq_factors.data();
  for (int64_t i = 0; i < n; ++i) {
    const float theta_extrap = theta / (ff ? ff[i] : 1.0f);
    const float theta_interp = g.freq_scale * theta_extrap;
    float t = theta_interp;
    float mscale = g.attn_factor;
    if (g.ext_factor != 0.0f) {
      const float y = (static_cast<float>(static_cast<int>(i)) - g.corr_dims[0]) /
                      std::max(0.001f, g.corr_dims[1] - g.corr_dims[0]);
      const float ramp_mix = (1 - std::min(1.0f, std::max(0.0f, y))) * g.ext_factor;
      // As ggml's x86-64 builds compile rope_yarn (-mfma, GCC's default contraction of
      // a * b + c * d into fma(a, b, c * d)): the mix and the magnitude are fused; a build
      // without FMA rounds twice and can differ by 1 ulp of the angle in the ramp zone.
      t = std::fma(theta_interp, 1 - ramp_mix, theta_extrap * ramp_mix);
      mscale *= std::fma(0.1f, std::log(1.0f / g.freq_scale), 1.0f);
    }
    if (th) th[i] = t;
    if (c) {
      const float m = own_magnitude ? mscale : scale;
      c[i] = std::cos(t) * m;
      s[i] = std::sin(t) * m;
    }
    theta *= g.theta_scale;
  }
}

}  // namespace

void rope_pipeline_check(const rope_freqs& f, rope_angle angle) {
  if (angle == rope_angle::hf_f32 &&
      (!f.hf || static_cast<int64_t>(f.hf->inv_freq.size()) != f.rotary_dim / 2))
    fail(
        "angle hf_f32 needs the float32 frequencies of rope_frequencies(config); this rope_freqs "
        "has none (built by hand)");
  if (angle == rope_angle::ggml_f32 &&
      (!f.ggml || (!f.ggml->freq_factors.empty() &&
                   static_cast<int64_t>(f.ggml->freq_factors.size()) != f.rotary_dim / 2)))
    fail(
        "angle ggml_f32 needs the ggml parameters of rope_frequencies(config); this rope_freqs "
        "has none (built by hand)");
}

void rope_pipeline_angles(const rope_freqs& f, rope_angle angle, int64_t pos, float* theta) {
  rope_pipeline_check(f, angle);
  const int64_t n = f.rotary_dim / 2;
  const float pf = static_cast<float>(pos);
  switch (angle) {
    case rope_angle::f32:
      for (int64_t i = 0; i < n; ++i) theta[i] = pf * static_cast<float>(f.inv_freq[i]);
      break;
    case rope_angle::hf_f32:
      // freqs = inv_freq[None, :, None].float() @ position_ids[:, None, :].float()
      for (int64_t i = 0; i < n; ++i) theta[i] = f.hf->inv_freq[i] * pf;
      break;
    case rope_angle::ggml_f32:
      ggml_row(*f.ggml, n, pos, theta, true, 1.0f, nullptr, nullptr);
      break;
    case rope_angle::exact:
      fail("angle exact forms no float32 angle (use f32, hf_f32 or ggml_f32)");
  }
}

void rope_pipeline_cos_sin(const rope_freqs& f, rope_angle angle, int64_t pos, bool own_magnitude,
                           double scale, float* c, float* s) {
  rope_pipeline_check(f, angle);
  const int64_t n = f.rotary_dim / 2;
  if (angle == rope_angle::f32) {
    // freqs = position.float() * float(omega); cosf / sinf; times float(a) unless a = 1.
    const float pf = static_cast<float>(pos);
    const float af = static_cast<float>(scale);
    for (int64_t i = 0; i < n; ++i) {
      const float a = pf * static_cast<float>(f.inv_freq[i]);
      const float cf = std::cos(a), sf = std::sin(a);
      c[i] = scale == 1.0 ? cf : cf * af;
      s[i] = scale == 1.0 ? sf : sf * af;
    }
  } else if (angle == rope_angle::hf_f32) {
    // cos = emb.cos() * attention_scaling, sin = emb.sin() * attention_scaling (float32).
    const float m = own_magnitude ? f.hf->attention_factor : F(scale);
    const float pf = static_cast<float>(pos);
    for (int64_t i = 0; i < n; ++i) {
      const float t = f.hf->inv_freq[i] * pf;
      c[i] = F(std::cos(static_cast<double>(t))) * m;
      s[i] = F(std::sin(static_cast<double>(t))) * m;
    }
  } else if (angle == rope_angle::ggml_f32) {
    ggml_row(*f.ggml, n, pos, nullptr, own_magnitude, F(scale), c, s);
  } else {
    fail("rope_pipeline_cos_sin: angle exact is not a float32 pipeline");
  }
}

}  // namespace posenc::detail

namespace posenc {

namespace {

// Rounds a float32 value to a binary format with p significand bits and minimum normal
// exponent emin (round to nearest even; no overflow for |v| <= 2: RoPE outputs of unit pairs
// times a magnitude). float32 itself: p = 24, emin = -126 (the identity).
double round_to(float v, int p, int emin) {
  if (v == 0 || !std::isfinite(v)) return v;
  const int e = std::max(std::ilogb(v), emin);
  const double q = std::ldexp(1.0, e - (p - 1));
  return std::nearbyint(static_cast<double>(v) / q) * q;
}

constexpr int kStoreBits[3][2] = {{24, -126}, {8, -126}, {11, -14}};  // float32, bf16, fp16

}  // namespace

void rope_angles_f32(const rope_freqs& f, rope_angle angle, int64_t pos, float* theta_out) {
  rope_validate(f);
  if (angle == rope_angle::exact)
    fail("angle must be f32, hf_f32 or ggml_f32 (exact forms no float32 angle), got exact");
  if (pos < 0) fail("positions must be >= 0, got {}", pos);
  if (angle == rope_angle::ggml_f32 && pos > INT32_MAX)
    fail("positions must be <= 2^31 - 1 in angle mode ggml_f32, got {}", pos);
  detail::rope_pipeline_angles(f, angle, pos, theta_out);
}

std::vector<rope_drift_row> rope_drift(const rope_freqs& f, rope_angle angle,
                                       std::span<const int64_t> positions) {
  rope_validate(f);
  if (angle != rope_angle::exact) detail::rope_pipeline_check(f, angle);
  const int64_t n = f.rotary_dim / 2;
  std::vector<float> th(static_cast<size_t>(n)), c(static_cast<size_t>(n)),
      s(static_cast<size_t>(n));
  std::vector<rope_drift_row> rows;
  rows.reserve(positions.size());
  const long double a = f.attention_factor;
  for (int64_t p : positions) {
    rope_cos_sin(f, angle, p, c.data(), s.data());  // validates p for the mode
    rope_drift_row r;
    r.pos = p;
    if (angle == rope_angle::exact) {
      r.angle_error = std::numeric_limits<double>::quiet_NaN();
    } else {
      detail::rope_pipeline_angles(f, angle, p, th.data());
      long double worst = 0;
      for (int64_t i = 0; i < n; ++i) {
        // p * omega_i is exact in long double's 64-bit significand for p < 2^11; beyond, its
        // rounding (<= 2^-64 relative) is far below float32's 2^-24.
        const long double exact = static_cast<long double>(p) * f.inv_freq[i];
        worst = std::max(worst, std::fabs(static_cast<long double>(th[i]) - exact));
      }
      r.angle_error = static_cast<double>(worst);
    }
    for (int64_t i = 0; i < n; ++i) {
      long double ce, se;
      rope_reference_cos_sin(p, f.inv_freq[i], &ce, &se);
      ce *= a, se *= a;
      for (int k = 0; k < 3; ++k) {
        const double cs = round_to(c[i], kStoreBits[k][0], kStoreBits[k][1]);
        const double ss = round_to(s[i], kStoreBits[k][0], kStoreBits[k][1]);
        const double e =
            static_cast<double>(std::max(std::fabs(static_cast<long double>(cs) - ce),
                                         std::fabs(static_cast<long double>(ss) - se)));
        r.output_error[k] = std::max(r.output_error[k], e);
      }
    }
    rows.push_back(r);
  }
  return rows;
}

}  // namespace posenc
