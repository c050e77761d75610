// posenc/encodings/axial_rope.hpp: RoPE over several position axes, for images (row, column)
// and video or diffusion transformers (frame, row, column).
//
// A token has one id per axis; pair i of the rotary channels turns by the id of its axis a_i at
// its own frequency omega_i. Two conventions in use:
//   2-D, Pixtral (transformers' PixtralRotaryEmbedding): the 1-D frequencies
//     w_k = theta^(-2k/D), k < D/2, are dealt out alternately: the first D/4 pairs turn by the
//     patch's row at w_0, w_2, w_4, ... (the even ones), the last D/4 by its column at w_1, w_3,
//     ... (the odd ones); half layout (rotate_half) in transformers, interleaved pairs in
//     mistral-inference and vLLM's Pixtral (view_as_complex; the q/k rows are permuted
//     between the two checkpoints' layouts), the same frequencies either way.
//   N-axis, axes_dim (FLUX's EmbedND, diffusers' FluxPosEmbed): axis a owns axes_dim[a] channels
//     (axes_dim[a] / 2 pairs) in channel order, at omega_{a,i} = theta_a^(-2i / axes_dim[a]);
//     interleaved pairs (x[2i], x[2i + 1]).
// Both run on M-RoPE's machinery (mrope_apply, the engine's M-RoPE, mrope_scheme, posenc.torch):
// the axes are M-RoPE's three components 0, 1, 2 with contiguous sections, and the rope_freqs
// lists each pair's own frequency. Hence at most 3 axes (FLUX uses 3, Pixtral 2). Ids are
// (3, n) row-major, row a = axis a (Pixtral: row 0 unused, 1 = patch row, 2 = patch column;
// axial_grid_ids). The frequencies are exact (double, angle modes exact and f32; the
// engine-specific float32 pipelines hf_f32 and ggml_f32 model 1-D configs only).
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <vector>

#include "posenc/encodings/rope.hpp"

namespace posenc {

struct axial_rope {
  rope_freqs freqs;                  // inv_freq (R/2,), head_dim = rotary_dim = D, a = 1
  std::array<int64_t, 3> section{};  // pairs per axis (M-RoPE's contiguous sections)
  rope_layout layout = rope_layout::half;
  int64_t axes = 0;  // axes in use (2 or 3)
};

// Pixtral's 2-D RoPE for head dim D (a multiple of 4) and base theta > 1: section (0, D/4, D/4),
// in `layout` (half: transformers; interleaved: mistral-inference, vLLM). Throws
// invalid_argument naming the argument.
axial_rope axial_rope_2d(int64_t head_dim, double theta, rope_layout layout = rope_layout::half);

// FLUX-style N-axis RoPE: axes_dim (1 to 3 entries, each even and >= 2; head dim = their sum)
// and one theta per axis (or one for all); interleaved layout. Throws invalid_argument naming
// the argument.
axial_rope axial_rope_nd(std::span<const int64_t> axes_dim, std::span<const double> theta);

// Ids of a rows x cols grid of patches in row-major order (patch p = r cols + c), as (3, n)
// row-major with n = rows * cols: row 0 the frame (all `frame`), row 1 r, row 2 c. rows, cols
// >= 1, frame >= 0.
std::vector<int64_t> axial_grid_ids(int64_t rows, int64_t cols, int64_t frame = 0);

// The pairs' axes (R/2,) for mrope_apply: section[0] zeros, then ones, then twos.
std::vector<int> axial_components(const axial_rope& a);

}  // namespace posenc
