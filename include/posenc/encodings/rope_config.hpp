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

// Reads and parses `path`; io_error if unreadable or not JSON.
rope_config rope_config_from_file(const std::string& path, std::vector<std::string>* warnings);

}  // namespace posenc
