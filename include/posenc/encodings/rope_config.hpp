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
#include <optional>
#include <string>
#include <vector>

#include "posenc/encodings/rope.hpp"

namespace posenc {

// Parses an already-loaded config.json (a multimodal config's text_config when the top level has
// neither head_dim nor hidden_size). warnings (may be null) receives one line per precedence
// decision the user should know about.
rope_config rope_config_from_json(const nlohmann::json& config, std::vector<std::string>* warnings);

// The pair layout transformers uses for the config's model class, relative to the
// checkpoint's q/k rows: interleaved (rotate_every_two) for gptj, codegen, cohere, cohere2 and
// the DeepSeek-V2/V3 rope heads (stored interleaved, permuted at run time), half
// (rotate_half) for every other named class; nullopt when the config names no class.
std::optional<rope_layout> hf_rope_layout(const nlohmann::json& config);

// Reads and parses `path`; io_error if unreadable or not JSON.
rope_config rope_config_from_file(const std::string& path, std::vector<std::string>* warnings);

// ---- Per-layer conventions -----------------------------------------------------------------
// Which layer has which RoPE, as transformers reads a config:
//   layer_types (list, one per layer), else sliding_window_pattern P (layer i is
//     "full_attention" when (i + 1) % P == 0, else "sliding_attention"; Gemma 3 defaults to
//     P = 6), else Gemma 2's alternation (even layers sliding, odd full);
//   per-layer-type rope_parameters ({"sliding_attention": {...}, "full_attention": {...}});
//   Gemma 3's legacy keys: rope_local_base_freq is the sliding layers' base (no scaling),
//     rope_theta and rope_scaling the full layers';
//   Gemma 4's global_head_dim is the full layers' head dim.
// NoPE layers (SmolLM3, Llama 4): no_rope_layers[i] = 1 applies RoPE in layer i, 0 skips it;
// without the list, layer i is NoPE when (i + 1) % no_rope_layer_interval == 0 (default 4;
// nope_layer_interval is read as an alias).
// Llama 4's temperature tuning (attn_temperature_tuning, floor_scale, attn_scale) scales the
// queries of NoPE layers by log(floor((pos + 1) / floor_scale) + 1) * attn_scale + 1.
struct rope_layer_plan {
  std::vector<std::string> layer_types;  // (num_hidden_layers,) or empty when not stated
  std::vector<std::string> types;        // distinct layer types, in order of first appearance
  std::string source;                    // the key the types came from
  std::vector<bool> rope_layers;         // (num_hidden_layers,): false = NoPE; empty = all RoPE
  std::string nope_source;               // the key the NoPE layers came from
  bool temperature_tuning = false;       // attn_temperature_tuning (Llama 4 default true)
  double floor_scale = 8192, attn_scale = 0.1;
};
rope_layer_plan hf_layer_plan(const nlohmann::json& config);

// The RoPE configuration of one layer type ("" = the config's one configuration, as
// rope_config_from_json). An unknown layer type throws invalid_argument naming the allowed
// ones; errors inside a per-type block name it ("rope_parameters.full_attention.factor ...").
rope_config rope_config_from_json(const nlohmann::json& config, const std::string& layer_type,
                                  std::vector<std::string>* warnings);
rope_config rope_config_from_file(const std::string& path, const std::string& layer_type,
                                  std::vector<std::string>* warnings);

// Reads and parses a config.json; io_error if unreadable or not JSON.
nlohmann::json hf_config_read(const std::string& path);

}  // namespace posenc
