// The float32 angle pipelines of rope_angle (f32, hf_f32, ggml_f32): each one's frequencies,
// angles and cos / sin against an independent float32 evaluation written here in the engine's
// operation order, and rope_drift's angle error against the test's own measurement and a bound
// derived a priori from the operation count.
//
// The independent evaluations below follow the published sources, not the library code:
//   transformers (modeling_rope_utils.py, LlamaRotaryEmbedding): tensors as std::vector<float>,
//   each torch op as a loop ("Tensor" helpers); a Python scalar meeting a tensor is rounded to
//   float32; `x / t` is t.reciprocal() * x (torch/_tensor.py __rdiv__); float32 pow and cos /
//   sin are the correctly rounded float of the double function (the model the library states);
//   ggml (ggml-cpu ops.cpp ggml_rope_cache_init, rope_yarn, rope_yarn_ramp; ggml.c
//   ggml_rope_yarn_corr_dims) and convert_hf_to_gguf.py (Llama 3 rope_freqs): plain float code
//   calling libm's powf, logf, cosf, sinf, as ggml does.
// Everything is compared bit for bit: both sides round the same operations in the same order.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <nlohmann/json.hpp>
#include <numbers>
#include <vector>

#include "posenc/core/error.hpp"
#include "posenc/encodings/rope.hpp"
#include "posenc/formats/hf_config.hpp"

using namespace posenc;
using nlohmann::json;

namespace {

constexpr double kU = 0x1p-24;  // float32 unit roundoff

// ---- transformers: float32 tensors ------------------------------------------------------------
using Tensor = std::vector<float>;

float f32(double x) {
  return static_cast<float>(x);
}

Tensor arange_float(int64_t start, int64_t end, int64_t step) {  // torch.arange(...).float()
  Tensor t;
  for (int64_t v = start; v < end; v += step) t.push_back(static_cast<float>(v));
  return t;
}
Tensor div(const Tensor& a, double scalar) {  // tensor / python number
  Tensor r(a.size());
  for (size_t i = 0; i < a.size(); ++i) r[i] = a[i] / f32(scalar);
  return r;
}
Tensor mul(const Tensor& a, double scalar) {  // tensor * python number
  Tensor r(a.size());
  for (size_t i = 0; i < a.size(); ++i) r[i] = a[i] * f32(scalar);
  return r;
}
Tensor mul(const Tensor& a, const Tensor& b) {
  Tensor r(a.size());
  for (size_t i = 0; i < a.size(); ++i) r[i] = a[i] * b[i];
  return r;
}
Tensor add(const Tensor& a, const Tensor& b) {
  Tensor r(a.size());
  for (size_t i = 0; i < a.size(); ++i) r[i] = a[i] + b[i];
  return r;
}
Tensor rdiv(double scalar, const Tensor& a) {  // python number / tensor = reciprocal * number
  Tensor r(a.size());
  for (size_t i = 0; i < a.size(); ++i) r[i] = (1.0f / a[i]) * f32(scalar);
  return r;
}
Tensor rsub(double scalar, const Tensor& a) {  // python number - tensor
  Tensor r(a.size());
  for (size_t i = 0; i < a.size(); ++i) r[i] = f32(scalar) - a[i];
  return r;
}
Tensor sub(const Tensor& a, double scalar) {
  Tensor r(a.size());
  for (size_t i = 0; i < a.size(); ++i) r[i] = a[i] - f32(scalar);
  return r;
}
Tensor rpow(float base, const Tensor& e) {  // base ** tensor (float32 base)
  Tensor r(e.size());
  for (size_t i = 0; i < e.size(); ++i)
    r[i] = f32(std::pow(static_cast<double>(base), static_cast<double>(e[i])));
  return r;
}
Tensor clamp01(const Tensor& a) {
  Tensor r(a.size());
  for (size_t i = 0; i < a.size(); ++i) r[i] = std::min(1.0f, std::max(0.0f, a[i]));
  return r;
}

// _compute_default_rope_parameters with a float32 base.
Tensor hf_default(float base, int64_t dim) {
  return rdiv(1.0, rpow(base, div(arange_float(0, dim, 2), static_cast<double>(dim))));
}

// The HF rope_init_fn of each type, written after modeling_rope_utils.py.
Tensor hf_inv_freq(const rope_config& c, int64_t seq_len) {
  const int64_t dim = c.rotary_dim;
  const double factor = c.factor;
  switch (c.type) {
    case rope_type::default_:
      return hf_default(f32(c.theta), dim);
    case rope_type::linear:
      return div(hf_default(f32(c.theta), dim), factor);
    case rope_type::dynamic: {
      const int64_t M = c.max_position_embeddings;
      const double ex = static_cast<double>(dim) / static_cast<double>(dim - 2);
      if (seq_len > M) {  // seq_len an int64 tensor: float32 ops throughout
        float b = f32(factor) * static_cast<float>(seq_len);
        b = b / f32(static_cast<double>(M));
        b = b - f32(factor - 1);
        b = f32(std::pow(static_cast<double>(b), static_cast<double>(f32(ex))));
        b = f32(c.theta) * b;
        return hf_default(b, dim);
      }
      const double base =
          c.theta *
          std::pow(factor * static_cast<double>(M) / static_cast<double>(M) - (factor - 1), ex);
      return hf_default(f32(base), dim);
    }
    case rope_type::yarn: {
      const double base = c.theta;
      const double orig = static_cast<double>(c.original_max_position_embeddings);
      auto find_dim = [&](double rot) {
        return (static_cast<double>(dim) * std::log(orig / (rot * 2 * std::numbers::pi))) /
               (2 * std::log(base));
      };
      double low = find_dim(c.beta_fast), high = find_dim(c.beta_slow);
      if (c.truncate) low = std::floor(low), high = std::ceil(high);
      low = std::max(low, 0.0), high = std::min(high, static_cast<double>(dim - 1));
      if (low == high) high += 0.001;
      const Tensor pos_freqs = rpow(f32(base), div(arange_float(0, dim, 2), double(dim)));
      const Tensor extrap = rdiv(1.0, pos_freqs);
      const Tensor interp = rdiv(1.0, mul(pos_freqs, factor));
      const Tensor ramp = clamp01(div(sub(arange_float(0, dim / 2, 1), low), high - low));
      const Tensor ef = rsub(1.0, ramp);
      return add(mul(interp, rsub(1.0, ef)), mul(extrap, ef));
    }
    case rope_type::longrope: {
      const int64_t orig = c.original_max_position_embeddings;
      const auto& l = seq_len > orig ? c.long_factor : c.short_factor;
      Tensor ext(l.begin(), l.end());  // torch.tensor(list, dtype=float32)
      const Tensor shape = div(arange_float(0, dim, 2), double(dim));
      return rdiv(1.0, mul(ext, rpow(f32(c.theta), shape)));
    }
    case rope_type::llama3: {
      const Tensor inv = hf_default(f32(c.theta), dim);
      const double old = static_cast<double>(c.original_max_position_embeddings);
      const double low_wl = old / c.low_freq_factor, high_wl = old / c.high_freq_factor;
      const Tensor wavelen = rdiv(2 * std::numbers::pi, inv);
      Tensor llama(inv.size());
      for (size_t i = 0; i < inv.size(); ++i)
        llama[i] = wavelen[i] > f32(low_wl) ? inv[i] / f32(factor) : inv[i];
      const Tensor smooth =
          div(sub(rdiv(old, wavelen), c.low_freq_factor), c.high_freq_factor - c.low_freq_factor);
      const Tensor smoothed = add(div(mul(rsub(1.0, smooth), llama), factor), mul(smooth, llama));
      Tensor out(inv.size());
      for (size_t i = 0; i < inv.size(); ++i) {
        const bool medium = !(wavelen[i] < f32(high_wl)) && !(wavelen[i] > f32(low_wl));
        out[i] = medium ? smoothed[i] : llama[i];
      }
      return out;
    }
    case rope_type::proportional: {
      // The rotated pairs of the default over dim = head_dim, float32 zeros after, / factor.
      Tensor inv = hf_default(f32(c.theta), dim);
      for (size_t i = static_cast<size_t>(c.rotated_pairs.value_or(dim / 2)); i < inv.size(); ++i)
        inv[i] = 0;
      return div(inv, factor);
    }
  }
  return {};
}

// ---- ggml: plain float code ---------------------------------------------------------------------
struct ggml_ref {
  float freq_base, freq_scale = 1, ext_factor = 0, attn_factor = 1, corr[2] = {0, 0};
  std::vector<float> ff;
  int n_dims;
};

float corr_dim(int n_dims, int n_ctx_orig, float n_rot, float base) {
  return n_dims * logf(n_ctx_orig / (n_rot * 2 * (float)M_PI)) / (2 * logf(base));
}

// convert_hf_to_gguf.py, LlamaModel: rope_freqs.weight from torch float32 scalars.
std::vector<float> llama3_rope_freqs(const rope_config& c) {
  const Tensor freqs = hf_default(f32(c.theta), c.rotary_dim);
  const double old = static_cast<double>(c.original_max_position_embeddings);
  const double low_wl = old / c.low_freq_factor, high_wl = old / c.high_freq_factor;
  std::vector<float> out;
  for (float freq : freqs) {
    const float wavelen = (1.0f / freq) * f32(2 * std::numbers::pi);
    if (wavelen < f32(high_wl)) {
      out.push_back(1.0f);
    } else if (wavelen > f32(low_wl)) {
      out.push_back(f32(c.factor));
    } else {
      const float smooth = ((1.0f / wavelen) * f32(old) - f32(c.low_freq_factor)) /
                           f32(c.high_freq_factor - c.low_freq_factor);
      const float t = (f32(1.0) - smooth) / f32(c.factor) + smooth;
      out.push_back((1.0f / t) * 1.0f);
    }
  }
  return out;
}

ggml_ref ggml_params(const rope_config& c, double a) {
  ggml_ref g;
  g.n_dims = static_cast<int>(c.rotary_dim);
  g.freq_base = f32(c.theta);
  const int orig =
      static_cast<int>(c.original_max_position_embeddings > 0 ? c.original_max_position_embeddings
                                                              : c.max_position_embeddings);
  if (c.type == rope_type::linear) g.freq_scale = 1.0f / f32(c.factor);
  if (c.type == rope_type::yarn) {
    g.freq_scale = 1.0f / f32(c.factor);
    g.ext_factor = 1.0f;
    g.attn_factor = f32(a / (0.1 * std::log(c.factor) + 1.0));
    const float start = floorf(corr_dim(g.n_dims, orig, f32(c.beta_fast), g.freq_base));
    const float end = ceilf(corr_dim(g.n_dims, orig, f32(c.beta_slow), g.freq_base));
    g.corr[0] = std::max(0.0f, start);
    g.corr[1] = std::min(static_cast<float>(g.n_dims - 1), end);
  }
  if (c.type == rope_type::longrope) {
    for (double v : c.short_factor) g.ff.push_back(f32(v));  // seq_len 0: short factors
    g.attn_factor = f32(a);
  }
  if (c.type == rope_type::llama3) g.ff = llama3_rope_freqs(c);
  return g;
}

// ggml_rope_cache_init for one position: angles, cos, sin.
void ggml_cache(const ggml_ref& g, int32_t p, std::vector<float>& th, std::vector<float>& cs,
                std::vector<float>& sn) {
  const float theta_scale = powf(g.freq_base, -2.0f / g.n_dims);
  float theta = p;
  th.clear(), cs.clear(), sn.clear();
  for (int i0 = 0; i0 < g.n_dims; i0 += 2) {
    const int pair = i0 / 2;  // i0 is even, as in ggml's i0 / 2
    const float ff = g.ff.empty() ? 1.0f : g.ff[pair];
    const float theta_extrap = theta / ff;
    const float theta_interp = g.freq_scale * theta_extrap;
    float t = theta_interp, mscale = g.attn_factor;
    if (g.ext_factor != 0.0f) {
      const float y =
          (static_cast<float>(pair) - g.corr[0]) / std::max(0.001f, g.corr[1] - g.corr[0]);
      const float ramp_mix = (1 - std::min(1.0f, std::max(0.0f, y))) * g.ext_factor;
      // ggml's x86-64 build (-mfma): GCC contracts a * b + c * d to fma(a, b, c * d).
      t = fmaf(theta_interp, 1 - ramp_mix, theta_extrap * ramp_mix);
      mscale *= fmaf(0.1f, logf(1.0f / g.freq_scale), 1.0f);
    }
    th.push_back(t);
    cs.push_back(cosf(t) * mscale);
    sn.push_back(sinf(t) * mscale);
    theta *= theta_scale;
  }
}

// ---- configs ------------------------------------------------------------------------------------
struct named_config {
  std::string name;
  rope_config c;
  int64_t seq_len;
};

rope_config from_json(const json& j) {
  std::vector<std::string> w;
  return rope_config_from_json(j, &w);
}

rope_config from_file(const std::string& name) {
  std::vector<std::string> w;
  return rope_config_from_file(std::string(POSENC_SOURCE_DIR) + "/tests/data/rope/" + name, &w);
}

std::vector<named_config> configs() {
  std::vector<named_config> v;
  v.push_back({"llama2_default", from_file("llama2_7b.json"), 0});
  v.push_back({"linear_4",
               from_json({{"head_dim", 128},
                          {"rope_theta", 10000.0},
                          {"rope_scaling", {{"rope_type", "linear"}, {"factor", 4.0}}}}),
               0});
  const json dyn = {{"head_dim", 128},
                    {"rope_theta", 10000.0},
                    {"max_position_embeddings", 4096},
                    {"rope_scaling", {{"rope_type", "dynamic"}, {"factor", 2.0}}}};
  v.push_back({"dynamic_init", from_json(dyn), 0});
  v.push_back({"dynamic_10000", from_json(dyn), 10000});
  v.push_back({"yarn_deepseek_mscale", from_file("deepseek_v2.json"), 0});
  v.push_back({"yarn_qwen", from_file("qwen2_5_7b_yarn.json"), 0});
  v.push_back({"yarn_truncate_false",
               from_json({{"head_dim", 128},
                          {"rope_theta", 1000000.0},
                          {"rope_scaling",
                           {{"rope_type", "yarn"},
                            {"factor", 8.0},
                            {"original_max_position_embeddings", 8192},
                            {"truncate", false}}}}),
               0});
  v.push_back({"longrope_short", from_file("phi3_vision_128k_longrope.json"), 0});
  v.push_back({"longrope_long", from_file("phi3_vision_128k_longrope.json"), 131072});
  v.push_back({"llama3", from_file("llama3_1_8b.json"), 0});
  // Gemma 4's global layers: 64 of 256 pairs rotate, the exponent over the full head dim.
  v.push_back({"proportional",
               from_json({{"head_dim", 512},
                          {"rope_parameters",
                           {{"rope_type", "proportional"},
                            {"rope_theta", 1000000.0},
                            {"factor", 2.0},
                            {"partial_rotary_factor", 0.25}}}}),
               0});
  return v;
}

const std::vector<int64_t> kPositions = {0,       1,        2,        7,         4095,     65537,
                                         1000003, 16777215, 16777217, 100000007, INT32_MAX};

bool same_bits(float a, float b) {
  // NOLINTNEXTLINE(bugprone-suspicious-memory-comparison): bitwise equality is the claim
  return std::memcmp(&a, &b, sizeof(float)) == 0;
}

}  // namespace

TEST(RopePipelines, HfInvFreqMatchesFloat32Evaluation) {
  for (const auto& nc : configs()) {
    SCOPED_TRACE(nc.name);
    const auto f = rope_frequencies(nc.c, nc.seq_len);
    ASSERT_TRUE(f.hf.has_value());
    const Tensor want = hf_inv_freq(nc.c, nc.seq_len);
    ASSERT_EQ(want.size(), f.hf->inv_freq.size());
    for (size_t i = 0; i < want.size(); ++i)
      EXPECT_TRUE(same_bits(f.hf->inv_freq[i], want[i]))
          << "pair " << i << ": " << f.hf->inv_freq[i] << " vs " << want[i];
    EXPECT_TRUE(same_bits(f.hf->attention_factor, f32(f.attention_factor)));
  }
}

TEST(RopePipelines, HfCosSinMatchFloat32Evaluation) {
  // LlamaRotaryEmbedding.forward: freqs = inv_freq.float() @ position_ids.float(); cos =
  // emb.cos() * attention_scaling, sin likewise (float32).
  for (const auto& nc : configs()) {
    SCOPED_TRACE(nc.name);
    const auto f = rope_frequencies(nc.c, nc.seq_len);
    const Tensor inv = hf_inv_freq(nc.c, nc.seq_len);
    const int64_t n = f.rotary_dim / 2;
    std::vector<float> c(n), s(n), th(n);
    for (int64_t p : kPositions) {
      rope_cos_sin(f, rope_angle::hf_f32, p, c.data(), s.data());
      rope_angles_f32(f, rope_angle::hf_f32, p, th.data());
      for (int64_t i = 0; i < n; ++i) {
        const float t = inv[i] * static_cast<float>(p);
        const float a = f32(f.attention_factor);
        ASSERT_TRUE(same_bits(th[i], t)) << "p " << p << " pair " << i;
        ASSERT_TRUE(same_bits(c[i], f32(std::cos(static_cast<double>(t))) * a))
            << "p " << p << " pair " << i;
        ASSERT_TRUE(same_bits(s[i], f32(std::sin(static_cast<double>(t))) * a))
            << "p " << p << " pair " << i;
      }
    }
  }
}

TEST(RopePipelines, GgmlMatchesFloat32Evaluation) {
  for (const auto& nc : configs()) {
    if (nc.c.type == rope_type::dynamic || nc.seq_len != 0) continue;  // below
    // GGUF has no proportional type: modelled (inf factors, with a note), not evaluated here.
    if (nc.c.type == rope_type::proportional) continue;
    SCOPED_TRACE(nc.name);
    const auto f = rope_frequencies(nc.c, nc.seq_len);
    ASSERT_TRUE(f.ggml.has_value());
    const ggml_ref g = ggml_params(nc.c, f.attention_factor);
    EXPECT_TRUE(same_bits(f.ggml->theta_scale, powf(g.freq_base, -2.0f / g.n_dims)));
    EXPECT_TRUE(same_bits(f.ggml->freq_scale, g.freq_scale));
    EXPECT_TRUE(same_bits(f.ggml->attn_factor, g.attn_factor));
    EXPECT_TRUE(same_bits(f.ggml->corr_dims[0], g.corr[0]));
    EXPECT_TRUE(same_bits(f.ggml->corr_dims[1], g.corr[1]));
    ASSERT_EQ(f.ggml->freq_factors.size(), g.ff.size());
    for (size_t i = 0; i < g.ff.size(); ++i)
      EXPECT_TRUE(same_bits(f.ggml->freq_factors[i], g.ff[i])) << "factor " << i;
    EXPECT_EQ(f.ggml_note.empty(), nc.c.truncate) << f.ggml_note;
    const int64_t n = f.rotary_dim / 2;
    std::vector<float> c(n), s(n), th(n), wt, wc, ws;
    for (int64_t p : kPositions) {
      rope_cos_sin(f, rope_angle::ggml_f32, p, c.data(), s.data());
      rope_angles_f32(f, rope_angle::ggml_f32, p, th.data());
      ggml_cache(g, static_cast<int32_t>(p), wt, wc, ws);
      for (int64_t i = 0; i < n; ++i) {
        ASSERT_TRUE(same_bits(th[i], wt[i])) << "p " << p << " pair " << i;
        ASSERT_TRUE(same_bits(c[i], wc[i])) << "p " << p << " pair " << i;
        ASSERT_TRUE(same_bits(s[i], ws[i])) << "p " << p << " pair " << i;
      }
    }
  }
}

TEST(RopePipelines, GgmlDynamicUsesTheNtkBase) {
  const auto nc = configs()[3];  // dynamic_10000
  ASSERT_EQ(nc.name, "dynamic_10000");
  const auto f = rope_frequencies(nc.c, nc.seq_len);
  // base' = theta (s L / M - (s - 1))^(R / (R - 2)) = 1e4 (2 * 10000 / 4096 - 1)^(128/126).
  const double base = 1e4 * std::pow(2.0 * 10000 / 4096 - 1, 128.0 / 126.0);
  EXPECT_TRUE(same_bits(f.ggml->freq_base, f32(base)));
  EXPECT_TRUE(same_bits(f.ggml->theta_scale, powf(f32(base), -2.0f / 128)));
  EXPECT_FALSE(f.ggml_note.empty());
}

TEST(RopePipelines, F32IsThePlainFloatAngle) {
  for (const auto& nc : configs()) {
    SCOPED_TRACE(nc.name);
    const auto f = rope_frequencies(nc.c, nc.seq_len);
    const int64_t n = f.rotary_dim / 2;
    std::vector<float> c(n), s(n), th(n);
    for (int64_t p : kPositions) {
      rope_cos_sin(f, rope_angle::f32, p, c.data(), s.data());
      rope_angles_f32(f, rope_angle::f32, p, th.data());
      for (int64_t i = 0; i < n; ++i) {
        const float t = static_cast<float>(p) * static_cast<float>(f.inv_freq[i]);
        const float a = f32(f.attention_factor);
        ASSERT_TRUE(same_bits(th[i], t));
        ASSERT_TRUE(same_bits(c[i], f.attention_factor == 1 ? cosf(t) : cosf(t) * a));
        ASSERT_TRUE(same_bits(s[i], f.attention_factor == 1 ? sinf(t) : sinf(t) * a));
      }
    }
  }
}

TEST(RopePipelines, HfDiffersFromRoundedDoubleWhereTheIssueSaysSo) {
  // Llama 2 (theta 1e4, R = 128): transformers' float32 inv_freq is not posenc's double one
  // rounded, so hf_f32 and f32 are distinct pipelines.
  const auto f = rope_frequencies(from_file("llama2_7b.json"));
  int differ = 0, max_ulps = 0;
  for (size_t i = 0; i < f.inv_freq.size(); ++i) {
    const float r = f32(f.inv_freq[i]);
    if (!same_bits(r, f.hf->inv_freq[i])) ++differ;
    int32_t a, b;
    std::memcpy(&a, &r, 4), std::memcpy(&b, &f.hf->inv_freq[i], 4);
    max_ulps = std::max(max_ulps, std::abs(a - b));
  }
  // Issue 11 counted 19 with the real transformers code (PyTorch's own float32 pow): the same
  // count here confirms the operation order (an independent figure, not produced by posenc).
  EXPECT_EQ(differ, 19);
  // R = 128 makes every exponent 2i/R exact in float, so transformers' value is within
  // 2u relative of omega (pow and the reciprocal, each rounded once) and RN(omega) within u:
  // at most 3u relative, i.e. at most 3 ulp apart.
  EXPECT_LE(max_ulps, 3);
}

TEST(RopePipelines, NamesAndAliases) {
  EXPECT_EQ(rope_angle_from_name("f32"), rope_angle::f32);
  EXPECT_EQ(rope_angle_from_name("compat_f32"), rope_angle::f32);
  EXPECT_EQ(rope_angle_from_name("hf_f32"), rope_angle::hf_f32);
  EXPECT_EQ(rope_angle_from_name("ggml_f32"), rope_angle::ggml_f32);
  for (auto a : rope_angles()) EXPECT_EQ(rope_angle_from_name(rope_angle_name(a)), a);
  try {
    rope_angle_from_name("bf16", "--angle");
    FAIL() << "no throw";
  } catch (const invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("--angle must be one of exact, f32"), std::string::npos)
        << e.what();
  }
}

TEST(RopePipelines, HandBuiltFreqsAreRefusedByEnginePipelines) {
  rope_freqs f;
  f.head_dim = f.rotary_dim = 4;
  f.inv_freq = {1.0, 0.01};
  std::vector<float> c(2), s(2);
  EXPECT_NO_THROW(rope_cos_sin(f, rope_angle::f32, 3, c.data(), s.data()));
  EXPECT_THROW(rope_cos_sin(f, rope_angle::hf_f32, 3, c.data(), s.data()), invalid_argument);
  EXPECT_THROW(rope_cos_sin(f, rope_angle::ggml_f32, 3, c.data(), s.data()), invalid_argument);
  std::vector<float> x(4, 1.0f);
  const std::vector<int64_t> pos = {1};
  EXPECT_THROW(rope_apply(f, rope_layout::half, rope_angle::hf_f32, pos, x.data(), 1, 1, 4),
               invalid_argument);
  const auto g = rope_frequencies(from_file("llama2_7b.json"));
  std::vector<float> c2(64), s2(64);
  EXPECT_THROW(rope_cos_sin(g, rope_angle::ggml_f32, int64_t{1} << 31, c2.data(), s2.data()),
               invalid_argument);
  EXPECT_NO_THROW(rope_cos_sin(g, rope_angle::hf_f32, int64_t{1} << 31, c2.data(), s2.data()));
  EXPECT_THROW(rope_angles_f32(g, rope_angle::exact, 1, c2.data()), invalid_argument);
}

TEST(RopePipelines, ApplyUsesThePipelineRow) {
  // rope_apply with a pipeline rotates with exactly the row rope_cos_sin returns; unrotate
  // with a != 1 undoes it within float rounding.
  const auto f = rope_frequencies(from_file("deepseek_v2.json"));
  const int64_t D = f.head_dim, R = f.rotary_dim, n = R / 2;
  for (auto angle : {rope_angle::hf_f32, rope_angle::ggml_f32}) {
    std::vector<float> x(static_cast<size_t>(D)), y;
    for (int64_t d = 0; d < D; ++d) x[d] = static_cast<float>((7 * d) % 11 - 5) / 4;
    y = x;
    const std::vector<int64_t> pos = {70000};
    rope_apply(f, rope_layout::half, angle, pos, y.data(), 1, 1, D);
    std::vector<float> c(n), s(n);
    rope_cos_sin(f, angle, 70000, c.data(), s.data());
    std::vector<float> want = x;
    rope_rotate_plain(rope_layout::half, R, c.data(), s.data(), want.data(), 1, D, false);
    for (int64_t d = 0; d < D; ++d) {
      // The SIMD rotation may fuse u c - v s: plain RN(RN(u c) - RN(v s)) against fused
      // RN(u c - RN(v s)) differ by <= u |u c| + 2 u |v s| + 2 u |u c - v s| <= 4 u (|u c| +
      // |v s|) (v' = v c + u s likewise with the roles swapped).
      const int64_t i = d < R ? d % n : 0;
      const double uu = x[i], vv = x[i + n];
      const double terms = d < n ? std::fabs(uu * c[i]) + std::fabs(vv * s[i])
                                 : std::fabs(vv * c[i]) + std::fabs(uu * s[i]);
      const double tol = d < R ? 4 * kU * terms : 0.0;
      EXPECT_LE(std::fabs(y[d] - want[d]), tol) << "channel " << d;
    }
    rope_unrotate(f, rope_layout::half, angle, pos, y.data(), 1, 1, D);
    // a = 1 here. Forward: cos / sin rounded (u each) and the float rotation (3 u); the unit
    // rows of the unrotate again 2 u and 3 u; c^2 + s^2 = 1 + 2 u: <= 12 u (|u| + |v|), and
    // |u| + |v| <= 2.5 for these x.
    for (int64_t d = 0; d < D; ++d) EXPECT_NEAR(y[d], x[d], 12 * kU * 2.5) << "channel " << d;
  }
}

// ---- drift against the test's measurement and the derived bound --------------------------------

namespace {

// Angle of pipeline `angle` at p for pair i, evaluated here.
struct test_pipeline {
  Tensor hf;
  ggml_ref g;
};

// A priori bound on |theta_i(p) - p omega_i| for each pipeline, first order in u with a
// 1e-4 relative allowance for the second-order terms (at most k u with k < 2000 here).
// u_p = u when p > 2^24 (float(p) rounds), else 0. e = 2i / R.
//   hf default:  pf = RN(RN(b)^RN(e)): ln error e u (exponent) + e u (base) + u (pow); 1 / pf:
//                + u; so eps_def = (e (ln b + 1) + 2) u; angle RN(inv * RN(p)): + u + u_p.
//   hf linear:   + 2 u (RN(s), division).   longrope: (e (ln b + 1) + 4) u (ext, product).
//   hf llama3:   divided pairs + 2 u, the smoothed band + 5 u + (s - 1) dg with dg = (high (eps_def
//   + 5 u) + low u) /
//                (high - low) + 3 u: the smooth factor's error moves omega by dg (1 - 1/s) omega
//                / ((1 - g)/s + g) <= (s - 1) dg omega.
//   hf yarn (truncate): inside the ramp eps_def + (6 + s) u: interp + 2 u, the ramp terms
//                1 - ef and ef off by 2 u and u absolute, weighted by interp / omega <= 1 and
//                extrap / omega <= s; below the ramp eps_def, above it eps_def + 2 u.
//   f32:         RN(RN(p) RN(omega)): 2 u + u_p.
//   ggml:        theta_i = RN(p) ts^i (1 + u)^i with ts = RN(powf(RN(b), RN(-2/R))) off by
//                eps_ts = 2 u (powf < 1 ulp) + (2/R)(ln b + 1) u relative; so u_p + i (eps_ts +
//                u); linear: + 3 u (RN(1 / RN(s)), product); freq factors: + 2 u (longrope);
//                YaRN: theta_interp = RN(RN(1 / RN(s)) theta_extrap) + 3 u; the mix weights
//                ramp_mix = RN(1 - clamp(y)) and RN(1 - ramp_mix) off by 2 u and 3 u absolute,
//                weighted by theta_extrap / theta <= s and theta_interp / theta <= 1, products
//                and sum 2 u: + (8 + 2 s) u inside the ramp, + 3 u above it, 0 below;
//                Llama 3's converter factors: divided pairs + 2 u + 2 u (RN(s), the division),
//                the smoothed band + 7 u + (s - 1) dg (as hf llama3, plus RN(1/t) and the
//                division).
double angle_bound(const rope_config& c, rope_angle angle, int64_t p, int64_t i, double omega) {
  const double u = kU, up = p > (int64_t{1} << 24) ? u : 0.0;
  const int64_t R = c.rotary_dim;
  const double e = 2.0 * static_cast<double>(i) / static_cast<double>(R);
  const double lnb = std::log(c.theta), s = c.factor;
  const double eps_def = (e * (lnb + 1) + 2) * u;
  const double high = c.high_freq_factor, low = c.low_freq_factor;
  const double dg = (high * (eps_def + 5 * u) + low * u) / (high - low) + 3 * u;
  // Llama 3: which band the pair is in, by its exact wavelength 2 pi b^e (margins 1e-4
  // relative, far above the float wavelength's error): kept pairs add nothing, divided pairs
  // 2 u (RN(s), the division), the smoothed band 5 u + (s - 1) dg.
  double llama3_extra = 0;
  if (c.type == rope_type::llama3) {
    const double orig = static_cast<double>(c.original_max_position_embeddings);
    const double lam = 2 * std::numbers::pi * std::pow(c.theta, e);
    if (lam > orig / low * (1 + 1e-4))
      llama3_extra = 2 * u;
    else if (lam >= orig / high * (1 - 1e-4))
      llama3_extra = 5 * u + (s - 1) * dg;
  }
  // YaRN: 0 below the ramp (i <= low), 2 above it (i >= high), 1 inside; low / high are HF's
  // truncated correction dims (ggml's float ones must agree, else its ramp differs by design).
  int yarn_band = 0;
  if (c.type == rope_type::yarn) {
    const double orig = static_cast<double>(c.original_max_position_embeddings);
    auto find_dim = [&](double rot) {
      return (static_cast<double>(R) * std::log(orig / (rot * 2 * std::numbers::pi))) /
             (2 * std::log(c.theta));
    };
    const double lo = std::max(std::floor(find_dim(c.beta_fast)), 0.0);
    const double hi = std::min(std::ceil(find_dim(c.beta_slow)), static_cast<double>(R - 1));
    const double di = static_cast<double>(i);
    yarn_band = di <= lo ? 0 : di >= hi ? 2 : 1;
  }
  double rel = 0;
  if (angle == rope_angle::f32) {
    rel = 2 * u + up;
  } else if (angle == rope_angle::hf_f32) {
    switch (c.type) {
      case rope_type::default_:
      case rope_type::dynamic:
        rel = eps_def;
        break;
      case rope_type::linear:
      case rope_type::proportional:
        rel = eps_def + 2 * u;
        break;
      case rope_type::longrope:
        rel = (e * (lnb + 1) + 4) * u;
        break;
      case rope_type::llama3:
        rel = eps_def + llama3_extra;
        break;
      case rope_type::yarn:
        // Outside the ramp (ramp 0 or 1 exactly) one term is multiplied by 0: extrap alone
        // (eps_def) below HF's low correction dim, interp alone (eps_def + 2 u) above high.
        rel = yarn_band == 0 ? eps_def : yarn_band == 2 ? eps_def + 2 * u : eps_def + (6 + s) * u;
        break;
    }
    rel += u + up;
  } else {
    const double eps_ts = 2 * u + (2.0 / static_cast<double>(R)) * (lnb + 1) * u;
    rel = up + static_cast<double>(i) * (eps_ts + u);
    if (c.type == rope_type::linear) rel += 3 * u;
    if (c.type == rope_type::yarn)
      rel += yarn_band == 0 ? 0 : yarn_band == 2 ? 3 * u : (8 + 2 * s) * u;
    if (c.type == rope_type::longrope) rel += 2 * u;
    if (c.type == rope_type::llama3) rel += llama3_extra == 0 ? 0 : llama3_extra + 2 * u;
  }
  return static_cast<double>(p) * omega * rel * (1 + 1e-4);
}

}  // namespace

TEST(RopePipelines, DriftEqualsTheMeasuredAngleErrorAndStaysWithinTheDerivedBound) {
  std::vector<int64_t> pos = {0, 1, 10, 1000, 70000, 1000000, 16777216, 16777219, 200000000};
  for (const auto& nc : configs()) {
    // The bound covers the types analysed above at their static frequencies; dynamic's
    // float32 base (L > M) and YaRN without truncation are checked bit for bit only (above).
    if (nc.seq_len > 0 && nc.c.type == rope_type::dynamic) continue;
    if (nc.c.type == rope_type::yarn && !nc.c.truncate) continue;
    SCOPED_TRACE(nc.name);
    const auto f = rope_frequencies(nc.c, nc.seq_len);
    const int64_t n = f.rotary_dim / 2;
    const Tensor hf = hf_inv_freq(nc.c, nc.seq_len);
    for (auto angle : {rope_angle::f32, rope_angle::hf_f32, rope_angle::ggml_f32}) {
      if (angle == rope_angle::ggml_f32 && nc.seq_len > 0) continue;
      // The test's ggml model has no proportional type (GGUF names none).
      if (angle == rope_angle::ggml_f32 && nc.c.type == rope_type::proportional) continue;
      SCOPED_TRACE(rope_angle_name(angle));
      const auto rows = rope_drift(f, angle, pos);
      ASSERT_EQ(rows.size(), pos.size());
      const ggml_ref g = ggml_params(nc.c, f.attention_factor);
      std::vector<float> wt, wc, ws;
      double worst_ratio = 0;
      for (size_t k = 0; k < pos.size(); ++k) {
        const int64_t p = pos[k];
        if (angle == rope_angle::ggml_f32) ggml_cache(g, static_cast<int32_t>(p), wt, wc, ws);
        long double measured = 0;
        for (int64_t i = 0; i < n; ++i) {
          float t;
          if (angle == rope_angle::f32)
            t = static_cast<float>(p) * f32(f.inv_freq[i]);
          else if (angle == rope_angle::hf_f32)
            t = hf[i] * static_cast<float>(p);
          else
            t = wt[i];
          const long double err =
              std::fabs(static_cast<long double>(t) - static_cast<long double>(p) * f.inv_freq[i]);
          measured = std::max(measured, err);
          const double b = angle_bound(nc.c, angle, p, i, f.inv_freq[i]);
          EXPECT_LE(static_cast<double>(err), b) << "p " << p << " pair " << i;
          if (b > 0) worst_ratio = std::max(worst_ratio, static_cast<double>(err) / b);
        }
        EXPECT_EQ(rows[k].pos, p);
        EXPECT_NEAR(rows[k].angle_error, static_cast<double>(measured),
                    1e-12 * static_cast<double>(measured) + 1e-300)
            << "p " << p;
      }
      // The bound is attained within a small factor (it is not vacuous): at least 1/16 of it.
      EXPECT_GT(worst_ratio, 1.0 / 16) << "bound far from the measured drift";
    }
  }
}

TEST(RopePipelines, DriftOutputErrorFollowsStorageRounding) {
  const auto f = rope_frequencies(from_file("llama2_7b.json"));
  const std::vector<int64_t> pos = {1, 4095, 1000000};
  const auto ex = rope_drift(f, rope_angle::exact, pos);
  for (const auto& r : ex) {
    EXPECT_TRUE(std::isnan(r.angle_error));
    // The exact row rounded once: half an ulp of values <= 1 in each format.
    // Values in [0.5, 1] have half-ulps 2^-25 (float32), 2^-9 (bfloat16), 2^-12 (float16);
    // smaller values less. bf16 / fp16 round the float32 value: + 2^-25 (two roundings).
    EXPECT_LE(r.output_error[0], 0x1p-25 + 3e-16);
    EXPECT_LE(r.output_error[1], 0x1p-9 + 0x1p-25 + 3e-16);
    EXPECT_LE(r.output_error[2], 0x1p-12 + 0x1p-25 + 3e-16);
    EXPECT_GT(r.output_error[1], r.output_error[0]);
  }
  // At 1e6 the float32 angles are off by ~1e-2 rad: the output error follows the angle error
  // (|cos a - cos b| <= |a - b|) and exceeds bf16's rounding.
  const auto hf = rope_drift(f, rope_angle::hf_f32, pos);
  EXPECT_LE(hf[2].output_error[0], hf[2].angle_error + 0x1p-23);
  EXPECT_GT(hf[2].output_error[0], 0x1p-8);
  EXPECT_GT(hf[2].angle_error, hf[1].angle_error);
}
