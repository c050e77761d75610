// posenc/formats/hf_config.hpp: a RoPE configuration from a Hugging Face config.json.
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

#include <array>
#include <nlohmann/json.hpp>
#include <optional>
#include <span>
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

// The config.json fragment that rope_config_from_json reads back as `c` (round trip: the same
// fields, the same frequencies): head_dim, partial_rotary_factor (when R < D), rope_theta,
// max_position_embeddings (when set) and, for a scaling type, rope_scaling with rope_type and
// that type's fields. The lab writes each context-extension method's config this way, so that
// `posenc rope freqs --hf-config` prints the frequencies the lab's model ran with.
nlohmann::ordered_json rope_config_to_json(const rope_config& c);

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
  std::vector<std::string> defaults;  // one note per key the model class supplied (see below)
};
rope_layer_plan hf_layer_plan(const nlohmann::json& config);

// The RoPE configuration of one layer type ("" = the config's one configuration, as
// rope_config_from_json). An unknown layer type throws invalid_argument naming the allowed
// ones; errors inside a per-type block name it ("rope_parameters.full_attention.factor ...").
rope_config rope_config_from_json(const nlohmann::json& config, const std::string& layer_type,
                                  std::vector<std::string>* warnings);
rope_config rope_config_from_file(const std::string& path, const std::string& layer_type,
                                  std::vector<std::string>* warnings);

// ---- transformers' class defaults ----------------------------------------------------------
// A published config.json leaves out what transformers' config class supplies (Gemma 3's
// 4B/12B/27B text_config blocks give no rope_theta, rope_local_base_freq or head_dim; the class
// makes them 1,000,000, 10,000 and 256). Every reader above first fills each missing RoPE key
// from the class of the config's model_type (a text_config without one takes its composite's
// text class: gemma3 -> gemma3_text, qwen2_vl -> qwen2_vl_text, ...), and says so: one note per
// key taken, pushed with the warnings (CLI stderr, Python UserWarning) and kept in
// rope_layer_plan::defaults (`posenc rope layers`). Keys: rope_theta (default_theta),
// rope_local_base_freq (Gemma 3), head_dim (a fixed class default, else hidden_size /
// num_attention_heads, each of those from the class when missing), qk_rope_head_dim (MLA),
// partial_rotary_factor, max_position_embeddings, num_hidden_layers, layer_types (the class's
// pattern), and the whole rope_parameters block where the class builds one (gpt-oss's YaRN,
// Gemma 4's per-layer-type block). Values read from transformers c49429ed (2026-08-16),
// src/formats/hf_class_defaults.cpp; a model_type not in the table gets nothing filled in.
enum class hf_layer_pattern {
  none,                      // the class builds no layer_types (or none that changes RoPE)
  every_nth_full,            // layer i full when (i + 1) % period == 0, else sliding
  every_nth_full_last_full,  // the same, and the last layer forced full (Gemma 4)
  qwen_window,               // sliding from max_window_layers (period) on, if use_sliding_window
  all_sliding,               // every layer sliding when sliding_window is set (Ministral)
  nope_chunked,              // RoPE layers chunked_attention, NoPE layers full (Llama 4)
  nope_sliding,              // NoPE layers sliding if use_sliding_window, else full (SmolLM3)
  unmodelled,                // the class builds a pattern posenc does not model: a config
                             // must state layer_types for a layer plan (generated rows)
};
const char* hf_layer_pattern_name(hf_layer_pattern p);

struct hf_class_defaults {
  const char* model_type;  // "gemma3_text"
  const char* class_name;  // "Gemma3TextConfig"
  double theta;            // default_theta: rope_theta when missing
  double local_theta;      // sliding layers' base (Gemma 3/4), 0 = none
  int64_t head_dim;        // 0 = hidden_size / num_attention_heads
  int64_t hidden_size, num_attention_heads, num_hidden_layers, max_position_embeddings;
  double partial_rotary_factor;  // 0 = the class supplies none
  hf_layer_pattern pattern;
  int64_t pattern_period;    // every_nth_full*: the period; qwen_window: max_window_layers;
                             // nope_*: the default no_rope_layer_interval
  int64_t qk_rope_head_dim;  // MLA's rotary head dim, 0 = not an MLA class
  const char* rope_block;    // the RoPE block the class builds (JSON), nullptr = a plain default
};
std::span<const hf_class_defaults> hf_class_defaults_table();
const hf_class_defaults* hf_class_defaults_for(const std::string& model_type);  // null: unknown
// Whether transformers' class of this model type (or decoder text type) is among those swept
// (tests/golden/transformers/sweep.json): its rotary embedding held against posenc, or refused.
bool hf_swept_model_type(const std::string& model_type);
// Whether that swept class rotates adjacent pairs (2i, 2i + 1) rather than halves, as the sweep
// measured it by calling the modeling file's own apply function.
bool hf_swept_rotation_interleaved(const std::string& model_type);
// Whether the swept model type's default rotary rotates the whole head_dim although the config
// says partial_rotary_factor (measured: tests/golden/transformers/variants.json's probe).
bool hf_swept_ignores_partial(const std::string& model_type);
const char* hf_swept_commit();  // the transformers commit the sweep ran
// The M-RoPE sections the swept class's rotary module applies when the config states none, and
// whether it interleaves them (measured on (3, T) ids: tests/golden/transformers/variants.json's
// mrope_probe). false when the class has none.
bool hf_swept_mrope_default(const std::string& model_type, std::array<int64_t, 3>* section,
                            bool* interleaved);
// The class's layer_types for num_layers layers (empty for pattern none); j supplies the keys
// the pattern reads (sliding_window_pattern, use_sliding_window, max_window_layers,
// sliding_window).
std::vector<std::string> hf_default_layer_types(const hf_class_defaults& d, const nlohmann::json& j,
                                                int64_t num_layers);
// config (the text part) with every missing key its class supplies filled in; outer_model_type is
// the enclosing multimodal config's model_type ("" when none). The layer keys (num_hidden_layers,
// layer_types) are filled only when `layers` (a layer plan or a layer-type query);
// max_position_embeddings only when a scaling that reads it is on (yarn, longrope, dynamic,
// llama3). notes (may be null) receives one line per default taken.
nlohmann::json hf_apply_class_defaults(const nlohmann::json& config,
                                       const std::string& outer_model_type, bool layers,
                                       std::vector<std::string>* notes);

// Dual Chunk Attention as Qwen2.5-1M's config.json states it (An et al. 2024; run by vLLM,
// ignored by transformers): "dual_chunk_attention_config": {"chunk_size", "local_size",
// "original_max_position_embeddings"} at the top level or in text_config. present = false when
// the key is absent. Throws invalid_argument naming the key for a value that is not a
// non-negative integer or for local_size >= chunk_size; a missing
// original_max_position_embeddings reads as 0 (no length scaling) with a warning (vLLM's
// prefill needs it).
struct hf_dca_config {
  bool present = false;
  int64_t chunk_size = 0, local_size = 0, original_max_position_embeddings = 0;
};
hf_dca_config hf_dca_config_from_json(const nlohmann::json& config,
                                      std::vector<std::string>* warnings);

// Reads and parses a config.json; io_error if unreadable or not JSON.
nlohmann::json hf_config_read(const std::string& path);

}  // namespace posenc
