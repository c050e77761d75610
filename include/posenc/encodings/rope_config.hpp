// posenc/encodings/rope_config.hpp: a RoPE configuration from a Hugging Face config.json.
//
// Keys read (top level unless noted):
//   rope_theta (alias rotary_emb_base, GPT-NeoX), default 10000
//   partial_rotary_factor (alias rotary_pct, GPT-NeoX), default 1: R = head_dim * factor,
//     which must be an even integer
//   head_dim, else hidden_size / num_attention_heads (must divide)
//   max_position_embeddings, original_max_position_embeddings
//   rope_scaling (key "type" or "rope_type"), or the newer rope_parameters (which may also
//     carry rope_theta and partial_rotary_factor); rope_parameters wins when both are present.
// Precedence (issue 3): an explicit `factor` wins. When original_max_position_embeddings is
// known and max_position_embeddings / original_max_position_embeddings differs from it, a
// warning is pushed (HF versions have instead replaced factor by that ratio, silently turning
// YaRN off for configs whose two lengths are equal). Without `factor`, yarn and longrope use
// that ratio. original_max_position_embeddings inside rope_scaling wins over the top-level one.
// Sizes are bounded: head_dim (and qk_rope_head_dim) in [2, 2^20], lengths in [0, 2^53].
// partial_rotary_factor follows the model class (model_type, else architectures): for
// rope_type default, transformers' Llama rotary class ignores it (posenc does too, with a
// warning); GPT-NeoX, Phi, Phi-3, StableLM and Persimmon apply it; an unknown class applies it
// with a warning; a config naming no class (explicit parameters) applies it silently.
// An inconsistent config throws invalid_argument naming the key ("rope_scaling.factor must be
// >= 1, got 0.5"); nothing is guessed silently.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "posenc/encodings/rope.hpp"

namespace posenc {

// Parses an already-loaded config.json. warnings (may be null) receives one line per
// precedence decision the user should know about.
rope_config rope_config_from_json(const nlohmann::json& config, std::vector<std::string>* warnings);

// The pair layout transformers uses for the config's model class, relative to the
// checkpoint's q/k rows: interleaved (rotate_every_two) for gptj, codegen, cohere, cohere2 and
// the DeepSeek-V2/V3 rope heads (stored interleaved, permuted at run time), half
// (rotate_half) for every other named class; nullopt when the config names no class.
std::optional<rope_layout> hf_rope_layout(const nlohmann::json& config);

// Reads and parses `path`; io_error if unreadable or not JSON.
rope_config rope_config_from_file(const std::string& path, std::vector<std::string>* warnings);

}  // namespace posenc
