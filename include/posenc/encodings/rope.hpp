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

// Angle arithmetic.
//   exact:      angle = p * omega in double-double (an exact two-product, so any integer
//               position up to 2^53 is exact), reduced mod 2*pi against a triple-double 2*pi,
//               then sin/cos in double with a first-order correction for the low word.
//               The reduction (src/core/angle.hpp) runs lane-wise in SIMD
//               (src/core/angle_simd-inl.h, called by src/encodings/rope_simd.cpp) and sine
//               and cosine of the reduced angle (|r| <= pi + 2^-40) come from one double kernel
//               (src/core/sincos_simd-inl.h, fdlibm's polynomials, < 1.8 * 2^-53), so
//               |cos, sin error| <= 2.5 * 2^-53 < 2.8e-16 absolute at every position up to 2^53
//               (derivation in src/core/angle_simd-inl.h; measured by rope_checks and
//               tests/test_rope_simd.cpp against the binary128 reference).
//   compat_f32: omega rounded to float32, position cast to float32 (exact below 2^24), angle
//               = float(p) * float(omega) in float32, then float sinf/cosf and a float multiply
//               by float(a): the float32 path of HF transformers / vLLM. Error grows like
//               angle * 2^-24 (about 0.3 rad at angle 1e7); rope_checks reports it.
enum class rope_angle { exact, compat_f32 };

// Hugging Face rope_type names: "default", "linear", "dynamic", "yarn", "longrope", "llama3".
enum class rope_type { default_, linear, dynamic, yarn, longrope, llama3 };
const char* rope_type_name(rope_type t);
// Parses an HF name (also "su" and "longrope" -> longrope, as old Phi-3 configs spell it);
// throws invalid_argument naming `what` and the allowed names.
rope_type rope_type_from_name(const std::string& name, const std::string& what = "rope_type");
const char* rope_layout_name(rope_layout l);  // "half", "interleaved"
rope_layout rope_layout_from_name(const std::string& name, const std::string& what = "layout");
const char* rope_angle_name(rope_angle a);  // "exact", "compat_f32"
rope_angle rope_angle_from_name(const std::string& name, const std::string& what = "angle");

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
};

// Throws invalid_argument naming the field (with the HF config key) for any inconsistency:
// odd or out-of-range rotary_dim, theta <= 1, factor < 1, factor lists of the wrong length or
// non-positive, missing original_max_position_embeddings where required, beta_fast <= beta_slow,
// low_freq_factor >= high_freq_factor, non-finite values.
void rope_validate(const rope_config& c);

// Frequencies and magnitude for one sequence length.
struct rope_freqs {
  int64_t head_dim = 0, rotary_dim = 0;  // D, R
  std::vector<double> inv_freq;          // (R/2,): omega_i, radians per position
  double attention_factor = 1.0;         // a: multiplies cos and sin
  rope_type type = rope_type::default_;
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
// loops for compat_f32; rope_unrotate runs the plain scalar loops.
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

// Property checks of group "rope" (see src/encodings/rope.cpp for each derivation).
std::vector<check_result> rope_checks();

}  // namespace posenc
