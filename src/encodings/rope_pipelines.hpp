// src/encodings/rope_pipelines.hpp (private): the float32 angle pipelines of rope.hpp's
// rope_angle (f32, hf_f32, ggml_f32): their parameters from a config and their rows.
#pragma once

#include <cstdint>
#include <string>

#include "posenc/encodings/rope.hpp"

namespace posenc::detail {

// transformers' float32 inv_freq and magnitude for `c` at `seq_len` (c validated); a is the
// attention factor of rope_frequencies (computed in Python floats by transformers).
rope_hf_f32 rope_hf_f32_params(const rope_config& c, int64_t seq_len, double a);

// ggml's parameters for `c` at `seq_len`, as llama.cpp passes them for a GGUF converted from
// the config; *note receives the ways the ggml model cannot follow the config (else empty).
rope_ggml_f32 rope_ggml_f32_params(const rope_config& c, int64_t seq_len, double a,
                                   std::string* note);

// Throws invalid_argument when f lacks the quantities of hf_f32 / ggml_f32 (built by hand).
void rope_pipeline_check(const rope_freqs& f, rope_angle angle);

// The pipeline's float32 angles at pos (angle f32, hf_f32 or ggml_f32; f checked by the
// caller, pos in range).
void rope_pipeline_angles(const rope_freqs& f, rope_angle angle, int64_t pos, float* theta);

// The pipeline's cos / sin row. own_magnitude: the engine's own magnitude arithmetic (the
// forward); else unit cos / sin times float(scale) (rope_unrotate's 1 / a).
void rope_pipeline_cos_sin(const rope_freqs& f, rope_angle angle, int64_t pos, bool own_magnitude,
                           double scale, float* c, float* s);

}  // namespace posenc::detail
