// posenc/encodings/rope.hpp: rotary position embedding (RoPE) with every scaling convention in
// public use, both pair layouts, two angle modes, forward and inverse, and a plain reference.
//
// RoPE (Su et al. 2021, "RoFormer", eq. 34) rotates each channel pair of a query or key by
// pos * omega_i, with omega_i = theta^(-2i/R), i = 0 .. R/2-1, so that q_m . k_n depends only on
// m - n. Scaling types change only the frequencies omega_i (and a magnitude factor a that
// multiplies cos and sin, as Hugging Face transformers and vLLM do); the rotate loop is shared.
//
// Layouts (R = rotary width, D = head dim, channels [R, D) pass through bit-exactly):
//   half:        pairs (x[i], x[i + R/2])   [x0 .. x_{R/2-1} | x_{R/2} .. x_{R-1} | pass D-R]
//                NeoX, HF rotate_half, vLLM is_neox_style=True, ggml NEOX, FA interleaved=False
//   interleaved: pairs (x[2i], x[2i + 1])   [x0 x1 | x2 x3 | ... | x_{R-2} x_{R-1} | pass D-R]
//                GPT-J, RoFormer, Meta llama, vLLM is_neox_style=False, FA interleaved=True
// For pair (u, v) with frequency omega_i at position p:
//   u' = a (u cos(p omega_i) - v sin(p omega_i))
//   v' = a (v cos(p omega_i) + u sin(p omega_i))
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "posenc/core/check.hpp"

namespace posenc {

enum class rope_layout { half, interleaved };

// Angle arithmetic: the exact mode and three float32 pipelines, each the operation order of an
// engine's published source (docs/conventions.md, "Float32 angle pipelines").
//   exact:    angle = p * omega in double-double (an exact two-product, so any integer
//             position up to 2^53 is exact), reduced mod 2*pi against a triple-double 2*pi,
//             then sin/cos in double with a first-order correction for the low word.
//             The reduction (src/core/angle.hpp) runs lane-wise in SIMD
//             (src/core/angle_simd-inl.h, called by src/encodings/rope_simd.cpp) and sine
//             and cosine of the reduced angle (|r| <= pi + 2^-40) come from one double kernel
//             (src/core/sincos_simd-inl.h, fdlibm's polynomials, < 1.8 * 2^-53), so
//             |cos, sin error| <= 2.5 * 2^-53 < 2.8e-16 absolute at every position up to 2^53
//             (derivation in src/core/angle_simd-inl.h; measured by rope_checks and
//             tests/test_rope_simd.cpp against the binary128 reference).
//   f32:      a plain float32 angle: omega rounded to float32, position cast to float32 (exact
//             below 2^24), angle = float(p) * float(omega) in float32, then float sinf/cosf and
//             a float multiply by float(a). Error grows like angle * 2^-24 (about 0.3 rad at
//             angle 1e7); rope_checks reports it. Spelled compat_f32 before; rope_angle_from_name
//             still accepts that name.
//   hf_f32:   Hugging Face transformers' float32 pipeline: inv_freq from float32 tensor
//             arithmetic (base ** (arange(0, R, 2).float() / R), then the rope type's scaling
//             formula in float32, modeling_rope_utils.py), angle = inv_freq * float(p) in
//             float32, cos/sin in float32 times float(attention_scaling) (LlamaRotaryEmbedding).
//   ggml_f32: ggml's CPU pipeline (ggml-cpu ops.cpp, ggml_rope_cache_init / rope_yarn): theta
//             starts at float(p) and is multiplied by theta_scale = powf(base, -2/R) once per
//             pair, divided by the per-pair freq factor (LongRoPE factors, Llama 3's rope_freqs
//             as convert_hf_to_gguf.py writes it), scaled by freq_scale = 1/s, YaRN ramp mix
//             and magnitude in float; positions are int32 as in ggml.
// hf_f32 and ggml_f32 need the rope_freqs of rope_frequencies (they read its hf / ggml members);
// a rope_freqs built by hand is refused for them.
enum class rope_angle { exact, f32, hf_f32, ggml_f32, compat_f32 = f32 };

// Hugging Face rope_type names: "default", "linear", "dynamic", "yarn", "longrope", "llama3",
// "proportional".
enum class rope_type { default_, linear, dynamic, yarn, longrope, llama3, proportional };
const char* rope_type_name(rope_type t);
// Parses an HF name (also "su" and "longrope" -> longrope, as old Phi-3 configs spell it);
// throws invalid_argument naming `what` and the allowed names.
rope_type rope_type_from_name(const std::string& name, const std::string& what = "rope_type");
const char* rope_layout_name(rope_layout l);  // "half", "interleaved"
rope_layout rope_layout_from_name(const std::string& name, const std::string& what = "layout");
const char* rope_angle_name(rope_angle a);  // "exact", "f32", "hf_f32", "ggml_f32"
// Accepts those names and "compat_f32" (the former name of f32); throws invalid_argument naming
// `what` and the allowed names.
rope_angle rope_angle_from_name(const std::string& name, const std::string& what = "angle");
// The four modes in a fixed order: exact, f32, hf_f32, ggml_f32.
std::vector<rope_angle> rope_angles();

// Parameters, named as in HF config.json. Only the fields of `type` are read.
struct rope_config {
  int64_t head_dim = 0;    // D
  int64_t rotary_dim = 0;  // R: even, 2 <= R <= D (head_dim * partial_rotary_factor)
  double theta = 10000;    // rope_theta: base of the frequencies, > 1
  rope_type type = rope_type::default_;
  double factor = 1;  // scale s (linear, dynamic, yarn, longrope, llama3), >= 1
  // Context length the model is configured for (dynamic: the length where NTK starts).
  int64_t max_position_embeddings = 0;
  // Pretraining context length (yarn, longrope, llama3); 0 = not given (yarn falls back to
  // max_position_embeddings, as HF does).
  int64_t original_max_position_embeddings = 0;
  // yarn (Peng et al. 2023): ramp between the correction dims of beta_fast / beta_slow
  // rotations; truncate floors / ceils them (HF default true).
  double beta_fast = 32, beta_slow = 1;
  bool truncate = true;
  // yarn and longrope: explicit magnitude a (wins); else yarn uses
  // get_mscale(s, mscale) / get_mscale(s, mscale_all_dim) when both are given and nonzero,
  // else 0.1 ln(s) + 1; longrope uses sqrt(1 + ln(s) / ln(original)).
  std::optional<double> attention_factor, mscale, mscale_all_dim;
  // longrope (Ding et al. 2024): per-pair divisors, R/2 each; long_factor is used when the
  // sequence length exceeds original_max_position_embeddings.
  std::vector<double> short_factor, long_factor;
  // llama3 (Meta, Llama 3.1): wavelengths above original/low_freq_factor are divided by
  // factor, below original/high_freq_factor kept, smoothly interpolated in between.
  double low_freq_factor = 1, high_freq_factor = 4;
  // dynamic with Hunyuan's NTK alpha (rope_scaling.alpha of hunyuan_v1_dense / hunyuan_v1_moe;
  // transformers' HunYuanDenseV1RotaryEmbedding): within max_position_embeddings the base is
  // theta * alpha^(R / (R - 2)) and factor is not used; past it, dynamic_rope_update recomputes
  // plain dynamic NTK from theta. 0 = no alpha (plain dynamic NTK at every length).
  double dynamic_alpha = 0;
  // Ministral 3 and Mistral 4 (rope_parameters.llama_4_scaling_beta, read for those classes
  // only: transformers' get_llama_4_attn_scale): after RoPE, every layer scales its queries by
  // 1 + beta * log(1 + floor(pos / original_max_position_embeddings)). Not a frequency: the
  // attention's query temperature (attention_temperature with floor_scale =
  // llama_4_scaling_floor, attn_scale = beta, position_offset 0). 0 = none. The floor is
  // original_max_position_embeddings in transformers; a GGUF file gives llama.cpp's
  // (n_ctx_orig_yarn for mistral3, attention.temperature_length for deepseek2).
  double llama_4_scaling_beta = 0;
  int64_t llama_4_scaling_floor = 0;  // > 0 when llama_4_scaling_beta > 0
  // proportional (transformers' Gemma 4 family): every one of the D/2 pairs carries a
  // frequency (rotary_dim = head_dim), but only the first rotated_pairs rotate:
  // omega_i = 1 / (factor * theta^(2i/D)) for i < rotated_pairs, 0 (the identity) after.
  // rotated_pairs = floor(partial_rotary_factor * D / 2), in [0, D/2]; unset means D/2.
  std::optional<int64_t> rotated_pairs;
  // M-RoPE (Qwen2-VL): pairs per position component (temporal, height, width), summing to R/2;
  // empty = 1-D RoPE. mrope_interleaved: Qwen3-VL's layout of the components (mrope_components).
  std::vector<int64_t> mrope_section;
  bool mrope_interleaved = false;
};

// Throws invalid_argument naming the field (with the HF config key) for any inconsistency:
// odd or out-of-range rotary_dim, theta <= 1, factor < 1, factor lists of the wrong length or
// non-positive, missing original_max_position_embeddings where required, beta_fast <= beta_slow,
// low_freq_factor >= high_freq_factor, non-finite values.
void rope_validate(const rope_config& c);

// transformers' float32 quantities (angle mode hf_f32).
struct rope_hf_f32 {
  std::vector<float> inv_freq;    // (R/2,): the float32 inv_freq buffer of the rotary module
  float attention_factor = 1.0f;  // float(attention_scaling)
};

// ggml's float32 parameters (angle mode ggml_f32), as llama.cpp passes them for a GGUF
// converted from the same config.json.
struct rope_ggml_f32 {
  float freq_base = 10000.0f;       // rope.freq_base (dynamic: the NTK base at seq_len)
  float theta_scale = 1.0f;         // powf(freq_base, -2.0f / R)
  float freq_scale = 1.0f;          // 1.0f / s for linear and yarn, else 1
  float ext_factor = 0.0f;          // 1 for yarn (the ramp mix and magnitude are on), else 0
  float attn_factor = 1.0f;         // ggml's mscale before the YaRN magnitude
  float corr_dims[2] = {0, 0};      // ggml_rope_yarn_corr_dims (floor / ceil always)
  std::vector<float> freq_factors;  // (R/2,) divisors (LongRoPE, Llama 3 rope_freqs) or empty
};

// Frequencies and magnitude for one sequence length.
struct rope_freqs {
  int64_t head_dim = 0, rotary_dim = 0;  // D, R
  std::vector<double> inv_freq;          // (R/2,): omega_i, radians per position
  double attention_factor = 1.0;         // a: multiplies cos and sin
  rope_type type = rope_type::default_;
  // The float32 pipelines' own quantities, filled by rope_frequencies (absent when built by
  // hand: angle modes hf_f32 and ggml_f32 then throw invalid_argument).
  std::optional<rope_hf_f32> hf;
  std::optional<rope_ggml_f32> ggml;
  // Limits of the ggml model that make it differ from the config by design, not by rounding
  // (e.g. truncate = false: ggml always floors / ceils the YaRN correction dims); empty if none.
  std::string ggml_note;
};

// Computes omega_i and a for `c` (validated first). seq_len is the current total sequence
// length (cached + new tokens) and matters only for:
//   dynamic:  base' = theta * (s * L / M - (s - 1))^(R / (R - 2)) with L = max(seq_len, M),
//             M = max_position_embeddings (HF _compute_dynamic_ntk_parameters); seq_len = 0
//             means L = M, i.e. the unscaled frequencies (HF at initialisation).
//   longrope: long_factor when seq_len > original_max_position_embeddings, else short_factor;
//             seq_len = 0 selects short_factor (HF at initialisation).
// Throws invalid_argument for a bad config or seq_len < 0.
rope_freqs rope_frequencies(const rope_config& c, int64_t seq_len = 0);

// Checks f is usable (R even, 2 <= R <= D, inv_freq has R/2 finite entries, a finite).
void rope_validate(const rope_freqs& f);

// Angle mode hf_f32 with the engine's own float32 inv_freq buffer (transformers'
// `rotary_emb.inv_freq`, (R/2,)) in place of posenc's model of it. The model rounds torch's
// float32 pow correctly; torch's CPU pow (SLEEF, 1 ulp) differs from that in the last bit for
// about one pair in 64-128 (tests/golden/transformers: pair 37 of R = 128 at theta 1e6, pair 111
// of R = 256 at theta 1e4, ...), and a 1-ulp inv_freq moves cos / sin at position p by up to
// p * ulp(omega). Given the buffer, hf_f32's angles and cos / sin are the engine's own, bit for
// bit up to the cos / sin rounding. f must come from rope_frequencies (f.hf set); every entry
// finite and >= 0. Throws invalid_argument naming `arg` otherwise.
void rope_set_hf_inv_freq(rope_freqs& f, std::span<const float> inv_freq,
                          const char* arg = "hf_inv_freq");

// The float32 angles a pipeline forms before cos / sin: theta_out[i], i < R/2, for
// angle f32, hf_f32 or ggml_f32 (exact forms no float angle: invalid_argument). pos >= 0, and
// <= 2^31 - 1 for ggml_f32 (int32 positions).
void rope_angles_f32(const rope_freqs& f, rope_angle angle, int64_t pos, float* theta_out);

// Drift of a float32 pipeline against the exact mode at each position (rope drift, the report):
//   angle_error: max_i |theta_i(p) - p omega_i| (the unreduced float32 angle of
//                rope_angles_f32 against the exact product in long double); NaN for exact;
//   output_error[k]: max_i over both outputs of the rotated unit pair (u, v) = (1, 0), i.e.
//                a cos and a sin, of |stored - exact|: the pipeline's float32 cos / sin row
//                rounded to the storage type k (0 float32, 1 bfloat16, 2 float16; round to
//                nearest even) against the binary128-reduced a cos(p omega_i), a sin(p omega_i).
struct rope_drift_row {
  int64_t pos = 0;
  double angle_error = 0;
  double output_error[3] = {0, 0, 0};
};
std::vector<rope_drift_row> rope_drift(const rope_freqs& f, rope_angle angle,
                                       std::span<const int64_t> positions);

// cos/sin of one position row: cos_out[i] = a cos(pos omega_i), sin_out[i] = a sin(pos omega_i),
// i < R/2. pos >= 0 (else invalid_argument). The float overload of `exact` rounds the double
// values once.
void rope_cos_sin(const rope_freqs& f, rope_angle angle, int64_t pos, double* cos_out,
                  double* sin_out);
void rope_cos_sin(const rope_freqs& f, rope_angle angle, int64_t pos, float* cos_out,
                  float* sin_out);

// The rotate kernel for one token: x holds H heads of one token, head h at x + h * head_stride,
// each with D >= R channels; only channels [0, R) are touched. cos, sin: (R/2,) from
// rope_cos_sin. inverse negates the sine (the transpose). No validation, no allocation.
// The SIMD kernel (Highway, best target at run time: AVX2 8 floats / 4 doubles per vector here);
// each output is u c -/+ v s with one fused multiply-add, so it may differ from the plain loop by
// one rounding (<= 1 ulp of |u c| + |v s|). Channels [R, D) and the gaps between heads of a
// strided row are never read or written.
void rope_rotate(rope_layout layout, int64_t R, const float* cos, const float* sin, float* x,
                 int64_t H, int64_t head_stride, bool inverse);
void rope_rotate(rope_layout layout, int64_t R, const double* cos, const double* sin, double* x,
                 int64_t H, int64_t head_stride, bool inverse);
// The plain scalar loops the SIMD kernel is tested against (what POSENC_REFERENCE=1 runs).
void rope_rotate_plain(rope_layout layout, int64_t R, const float* cos, const float* sin, float* x,
                       int64_t H, int64_t head_stride, bool inverse);
void rope_rotate_plain(rope_layout layout, int64_t R, const double* cos, const double* sin,
                       double* x, int64_t H, int64_t head_stride, bool inverse);

// True when the environment variable POSENC_REFERENCE is set to anything but "" or "0" (read
// at every call). Then rope_apply / rope_apply_qk run the binary128 rope_apply_reference for
// angle mode exact (through double copies, rounded once to the data type) and the plain scalar
// loops for the float32 pipelines; rope_unrotate runs the plain scalar loops.
bool rope_reference_selected();

// In place on x: (T, H, D), D contiguous, token t at position positions[t] (any order, >= 0).
// cos/sin are computed once per token and reused across heads; tokens run on parallel_for.
// Forward: x <- a R(p) x on channels [0, R); channels [R, D) untouched (bit-exact).
// inverse = true applies the transpose a R(p)^T = a R(-p): the backward pass of the forward
// (dL/dx = a R(p)^T dL/dy). With a = 1 it undoes the forward; with a != 1 it does not (use
// rope_unrotate for that). float data is rotated in float with float cos/sin; double in double.
// Throws invalid_argument for bad shapes (positions.size() != T, D < R, negative sizes),
// negative positions, a null x with nonzero size, or a bad f.
void rope_apply(const rope_freqs& f, rope_layout layout, rope_angle angle,
                std::span<const int64_t> positions, float* x, int64_t T, int64_t H, int64_t D,
                bool inverse = false);
void rope_apply(const rope_freqs& f, rope_layout layout, rope_angle angle,
                std::span<const int64_t> positions, double* x, int64_t T, int64_t H, int64_t D,
                bool inverse = false);

// M-RoPE (Wang et al. 2024, "Qwen2-VL", section 2.1 "Multimodal Rotary Position Embedding"):
// every token has three position ids (temporal, height, width); pair i (i < R/2, frequency
// omega_i) turns by pos[c_i] omega_i, where c_i is the component of the pair.
// mrope_components gives c_i (0 t, 1 h, 2 w) for section = (s_t, s_h, s_w), s_t + s_h + s_w = R/2:
//   contiguous (Qwen2-VL, Qwen2.5-VL): pairs [0, s_t) temporal, [s_t, s_t + s_h) height,
//                the rest width;
//   interleaved (Qwen3-VL, mrope_interleaved): pair i is height when i % 3 == 1 and
//                i < 3 s_h, width when i % 3 == 2 and i < 3 s_w, else temporal
//                (t h w t h w ... then the remaining temporal pairs).
// Throws invalid_argument naming mrope_section when it has not 3 non-negative entries summing to
// R/2 (`half`), or when an interleaved component does not fit in the R/2 pairs.
std::vector<int> mrope_components(std::span<const int64_t> section, bool interleaved, int64_t half);

// In place on x: (T, H, D) as rope_apply, with positions (3, T) row-major (row c = component c of
// every token) and component (R/2,) from mrope_components. Each pair is rotated exactly as
// rope_apply rotates it at the position of its component (same angle modes, same kernels;
// channels [R, D) untouched). A text token has the same id in all three rows, and then the
// result is rope_apply's at that id, bit for bit. Throws invalid_argument for positions of
// another size, component of another size or with entries outside [0, 2], or as rope_apply.
void mrope_apply(const rope_freqs& f, std::span<const int> component, rope_layout layout,
                 rope_angle angle, std::span<const int64_t> positions, float* x, int64_t T,
                 int64_t H, int64_t D, bool inverse = false);
void mrope_apply(const rope_freqs& f, std::span<const int> component, rope_layout layout,
                 rope_angle angle, std::span<const int64_t> positions, double* x, int64_t T,
                 int64_t H, int64_t D, bool inverse = false);

// Fused q and k: the same rotation as rope_apply on q: (T, Hq, D) and k: (T, Hk, D) (both D
// contiguous, token t of both at positions[t]), with cos/sin computed once per token and used
// for all Hq + Hk heads (GQA: Hk may differ from Hq). One pass over each tensor; tokens run on
// parallel_for. Results are bit-identical to rope_apply on q and then on k. q may be null when
// Hq = 0 and k when Hk = 0. Throws invalid_argument like rope_apply, and when q and k overlap
// in memory (each would be rotated twice).
void rope_apply_qk(const rope_freqs& f, rope_layout layout, rope_angle angle,
                   std::span<const int64_t> positions, float* q, int64_t Hq, float* k, int64_t Hk,
                   int64_t T, int64_t D, bool inverse = false);
void rope_apply_qk(const rope_freqs& f, rope_layout layout, rope_angle angle,
                   std::span<const int64_t> positions, double* q, int64_t Hq, double* k, int64_t Hk,
                   int64_t T, int64_t D, bool inverse = false);

// The true inverse of rope_apply's forward: x <- R(p)^T x / a. For re-rotating cached keys
// (undo with the old frequencies, then rope_apply with the new ones). Same contract otherwise.
void rope_unrotate(const rope_freqs& f, rope_layout layout, rope_angle angle,
                   std::span<const int64_t> positions, float* x, int64_t T, int64_t H, int64_t D);
void rope_unrotate(const rope_freqs& f, rope_layout layout, rope_angle angle,
                   std::span<const int64_t> positions, double* x, int64_t T, int64_t H, int64_t D);

// The specification, out of place (y may not alias x): plain loops over (t, h, i); each angle
// p * omega_i is formed exactly and reduced mod 2*pi in binary128 (__float128 where the
// compiler has it, else long double), then sinl/cosl and the rotation in long double.
// Error <= ~1e-18 relative to |x| for positions up to 2^53. Channels [R, D) are copied.
void rope_apply_reference(const rope_freqs& f, rope_layout layout,
                          std::span<const int64_t> positions, const double* x, double* y, int64_t T,
                          int64_t H, int64_t D, bool inverse = false);

// Reference cos/sin of one angle p * omega (binary128 reduction, long double sin/cos).
void rope_reference_cos_sin(int64_t pos, double omega, long double* c, long double* s);

}  // namespace posenc
