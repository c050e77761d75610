// posenc/formats/gguf.hpp: the metadata of a GGUF file (llama.cpp's model format) and the RoPE
// configuration it describes.
//
// Layout (ggml docs/gguf.md; versions 2 and 3, little-endian only):
//   u32 magic "GGUF" | u32 version | u64 tensor_count | u64 kv_count
//   kv_count x { string key | u32 type | value }
//   tensor_count x { string name | u32 n_dims (<= 4) | n_dims x u64 ne (ne0 first) |
//                    u32 ggml_type | u64 offset (from the data section, aligned) }
//   padding to general.alignment (u32, default 32) | data section
// string = u64 length + bytes (no NUL); value types 0 u8, 1 i8, 2 u16, 3 i16, 4 u32, 5 i32,
// 6 f32, 7 bool (1 byte), 8 string, 9 array (u32 element type, u64 count, elements), 10 u64,
// 11 i64, 12 f64.
//
// The reader parses the header, the key-value section and the tensor infos, and reads a tensor's
// data only when asked (seek + read of that tensor alone): a 40 GB file costs the size of its
// metadata. Every count is bounded by the bytes left in the file before anything is allocated.
// Memory: each section is read twice, measured and then filled into storage of exactly its
// size, so nothing is reserved from a count before the bytes it declares are read; while it
// reads, the reader's heap allocations stay under 4 B + W + 16 KiB, B the bytes of metadata read
// (up to the error, or to the end of the tensor infos), W gguf_read's read window (min(1 MiB,
// file size); 0 for gguf_parse). A million one-letter keys (17 MB) peak at 2.9 B
// (tests/alloc/test_gguf_memory.cpp measures it).
// What llama.cpp's loader refuses is refused too: a duplicate key or tensor name, an array of
// arrays, a string over 2^30 bytes, an array over 2^30 elements, a tensor name of 64 bytes or more,
// a zero in ne[1..3], a tensor offset other than the end of the tensors before it (each padded to
// the alignment), and tensor data past the end of the file.
// A file that is not GGUF, is big-endian, truncated, has an unknown value or tensor type, an
// absurd count or a string past the end throws io_error naming the path, the byte offset and
// the field ("m.gguf: offset 4123: kv[7] (llama.rope.freq_base) value: truncated, need 4 bytes,
// 2 left"). Like llama.cpp's loader, every tensor's extent (offset + ggml_nbytes by type and
// dims, from the aligned data section) must lie inside the file: a file cut short inside the
// tensor data throws io_error naming the tensor, its extent and the file size.
#pragma once

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "posenc/encodings/rope.hpp"

namespace posenc {

enum class gguf_type : uint8_t {
  u8 = 0,
  i8 = 1,
  u16 = 2,
  i16 = 3,
  u32 = 4,
  i32 = 5,
  f32 = 6,
  boolean = 7,
  string = 8,
  array = 9,
  u64 = 10,
  i64 = 11,
  f64 = 12,
};
const char* gguf_type_name(gguf_type t);  // "u8", ..., "f64"

// One key-value pair, 40 bytes. Its key and value bytes live, as the file has them, in the
// arena of the gguf_file that holds it (key(), text() and numbers() read them there: valid while
// that gguf_file or a copy of it lives). Scalars keep their value; numeric arrays of up to
// max_kept_array elements keep theirs, longer arrays and arrays of strings only their element type
// and count (a tokenizer's 150,000 strings are skipped, not stored).
struct gguf_kv {
  uint64_t offset = 0;  // byte offset of the key's length field
  gguf_type type = gguf_type::u8;
  gguf_type elem_type = gguf_type::u8;  // type == array: the element type
  bool numbers_kept = false;            // type == array: numbers() holds the elements
  uint32_t count = 0;  // type == array: element count; type == string: bytes of text() (<= 2^30)
  static constexpr uint64_t max_kept_array = 65536;

  std::string_view key() const { return {key_, key_size_}; }
  // Numeric and bool scalars as a double (integer types exact up to 2^53); 0 for other types.
  double number() const;
  // Integer and bool scalars exactly (a u64 above 2^63 saturated at INT64_MAX); 0 for other types.
  int64_t integer() const;
  std::string_view text() const;  // type == string; empty for other types
  // The elements of a kept numeric or bool array as doubles; empty when not kept.
  std::vector<double> numbers() const;

 private:
  friend struct gguf_kv_access;  // the reader (gguf.cpp) fills the views
  const char* key_ = nullptr;
  const char* data_ = nullptr;  // the value's bytes: a scalar, a string, a kept array's elements
  uint32_t key_size_ = 0;
};

struct gguf_tensor_info {
  std::string name;
  std::vector<uint64_t> ne;  // dims, ne0 (contiguous) first
  uint32_t ggml_type = 0;    // 0 F32, 1 F16, 30 BF16, quantised types otherwise
  uint64_t offset = 0;       // from the start of the data section
  uint64_t info_offset = 0;  // byte offset of the tensor info in the file
};

struct gguf_file {
  std::string path;  // as opened (names the file in errors)
  uint32_t version = 0;
  uint64_t file_size = 0;
  uint64_t alignment = 32;
  uint64_t data_offset = 0;  // start of the data section
  std::vector<gguf_kv> kvs;
  std::vector<gguf_tensor_info> tensors;
  // The keys and the kept values of kvs, as the file has them (bytes the reader has read, once).
  std::shared_ptr<const char[]> arena;

  const gguf_kv* find(const std::string& key) const;
  const gguf_tensor_info* find_tensor(const std::string& name) const;
  // Typed look-ups: nullopt when absent; io_error naming the key when present with a type that
  // cannot hold the requested value (a string for a number, a negative integer for a size).
  std::optional<double> get_number(const std::string& key) const;
  std::optional<uint64_t> get_size(const std::string& key) const;
  std::optional<std::string> get_string(const std::string& key) const;
  // A bool key (GGUF type 7; io_error naming the key for another type).
  std::optional<bool> get_bool(const std::string& key) const;
};

// Parses the metadata of the GGUF file at `path` (tensor data is not read).
gguf_file gguf_read(const std::string& path);
// Parses an in-memory image of the whole file (what gguf_read does after reading it); `name`
// stands for the path in messages. The image must hold the tensor data its infos declare.
gguf_file gguf_parse(std::span<const uint8_t> bytes, const std::string& name);

// Bytes of a tensor of ggml type `type` with dims `ne` (ggml_nbytes: ne0 / block size * block
// bytes * ne1 * ...); io_error naming `what` for a type without a size (retired or private) or
// an ne0 that is not a multiple of the block size.
uint64_t gguf_tensor_bytes(uint32_t type, const std::vector<uint64_t>& ne, const std::string& what);

// Reads tensor `t` of an F32 tensor (ggml type 0) of at most 2^24 elements from the file at
// f.path by seeking to its offset (io_error for another type, a larger tensor or data past the
// end of the file).
std::vector<float> gguf_read_f32(const gguf_file& f, const gguf_tensor_info& t);
// The same from an in-memory image of the whole file.
std::vector<float> gguf_read_f32(const gguf_file& f, const gguf_tensor_info& t,
                                 std::span<const uint8_t> bytes);

// The RoPE configuration of a GGUF model, expressed as the Hugging Face config it came from
// (rope_config_from_json reads it, so validation, precedence and warnings are the --hf-config
// path's), with llama.cpp's reading of each key per architecture where it differs from the
// key's name (llama.cpp 6dafc14e50e1c248621618f3786f5005767a1d39, src/llama-model.cpp
// load_hparams, src/models/<arch>.cpp load_arch_hparams, src/llama-context.cpp):
//   arch = general.architecture; head_dim = {arch}.attention.key_length, else
//   {arch}.embedding_length / {arch}.attention.head_count; rotary_dim = {arch}.rope.dimension_count
//   (absent: llama.cpp's default, the head dim, with a note) (MLA architectures deepseek2 and
//   minicpm3: head_dim = rotary_dim, as HF's qk_rope_head_dim); theta = {arch}.rope.freq_base
//   (absent: llama.cpp's default 10000, with a note); max_position_embeddings =
//   {arch}.context_length; original = {arch}.rope.scaling.original_context_length.
//   {arch}.rope.scaling.type linear / yarn / longrope with .factor, .attn_factor (yarn and
//   longrope: HF attention_factor); legacy {arch}.rope.scale_linear = linear factor.
//   YaRN as llama.cpp reads it: the correction range is always rounded (truncate true; the
//   converter writes no truncate key); .yarn_beta_fast / .yarn_beta_slow are read only for grok
//   (default beta_fast 8) and mistral3, every other architecture uses 32 / 1;
//   .yarn_log_multiplier is read only for deepseek2 (0.1 mscale_all_dim: mscale = mscale_all_dim
//   = it / 0.1) and mistral3 (mscale_all_dim = it, mscale = 1); .yarn_attn_factor is read only
//   for grok, and replaced by the YaRN magnitude whenever the ramp is on: posenc keeps it in
//   yarn_attn_factor with a warning saying what llama.cpp does with it.
//   rope_factors_long.weight / rope_factors_short.weight (F32, R/2): longrope lists.
//   rope_freqs.weight (F32, R/2, divisors of each pair's frequency): Llama 3.x's
//   1 / ((1 - smooth) / factor + smooth). The llama3 parameters are recovered from the
//   tensor (factor = its largest entry; smooth is linear in 1/wavelength, fitted by least
//   squares; original_max_position_embeddings from the key, else the one that makes
//   low_freq_factor 1) and accepted only if they reproduce every entry within 2^-18; otherwise
//   (and when a magnitude other than 1 comes with it) the tensor becomes per-pair factors in
//   posenc's longrope form (short_factor = long_factor = the tensor), with a warning.
// Architectures (general.architecture), as llama.cpp 6dafc14e50e1c248621618f3786f5005767a1d39
// knows them (tests/golden/llama_cpp/architectures.json, read from its source by
// scripts/golden/llama_cpp_archs.py): the rope type of llama_model_rope_type gives the layout
// (NORM: interleaved; NEOX, MROPE, IMROPE: half; glm4, glm4moe and hunyuan_vl are MROPE when
// {arch}.rope.dimension_sections has sections 0 and 1 > 0), the converter's q/k permutation
// gives permuted_from_hf. invalid_argument naming the architecture and the reason for one
// llama.cpp gives no RoPE (rope type NONE: gpt2, mamba, t5, rwkv*, ...), whose graph rotates no
// query (starcoder, bert), whose per-layer rotary widths or bases posenc does not model (step35,
// deepseek4), a Granite-family file with {arch}.rope.scaling.finetuned = false (llama.cpp's
// switch that turns RoPE off), and for an architecture llama.cpp does not know (the message
// lists the known ones). deepseek2-ocr's graph rotates unscaled and cogvlm's with base 10000
// whatever the file says: posenc follows, with a warning.
// Sliding-window layers, for the architectures whose llama.cpp loader sets a layer pattern, as
// its graph rotates them (swa_table in gguf_rope.cpp, e.g. gemma2: period 2, sliding base =
// freq_base, scaled like the full layers; gemma3 when {arch}.attention.sliding_window > 0:
// period 6, sliding base 10000, unscaled; olmo2 and mellum: the full layers' base, unscaled;
// gemma4, mimo2, dflash: the per-layer array only): {arch}.attention.sliding_window_pattern (a
// u32 period P; layer i is sliding when i % P < P - 1, or i % P != 0 for modern-bert,
// smallthinker, cohere2moe; a per-layer array where the architecture reads one) and
// {arch}.rope.freq_base_swa (where the graph reads it; else ignored with a warning) override the
// defaults, each default taken with a note; {arch}.attention.key_length_swa and
// {arch}.rope.dimension_count_swa give the sliding layers' widths. Layers the graph does not
// rotate (cohere2, exaone4, exaone-moe: the full-attention layers; cohere2moe: those after the
// leading dense blocks; llama4, afmoe, smollm3: layer i when (i + 1) % 4 == 0; smallthinker with
// a window: i % 4 == 0) are listed in nope_layers with a note.
// The implicit default constructor is noexcept, as json's is: clang-tidy (14) follows json's into
// a throw of json_value(value_t) that a null json never reaches.
// NOLINTNEXTLINE(bugprone-exception-escape)
struct gguf_rope {
  std::string arch;
  nlohmann::json hf_config;  // the equivalent config.json keys
  rope_config config;        // rope_config_from_json(hf_config): the full-attention layers
  // Pair layout relative to the tensors in the file, from llama.cpp's rope type per
  // architecture: NORM (adjacent pairs, "interleaved") or NEOX ("half"); nullopt when the
  // architecture is not in posenc's table. For NORM architectures of the Llama family the
  // converter permutes the HF q/k rows, so interleaved here is HF's half on the original weights.
  std::optional<rope_layout> layout;
  bool permuted_from_hf = false;
  // llama.cpp's rope type for this file: "NORM", "NEOX", "MROPE" or "IMROPE" (IMROPE: the
  // dimension_sections are interleaved across the pairs, mrope_components(..., true)).
  std::string rope_type;
  // {arch}.rope.freq_base_swa: the sliding-window layers' base (also in hf_config as
  // rope_local_base_freq, so its "sliding_attention" layer type reads it).
  std::optional<double> freq_base_swa;
  // {arch}.rope.dimension_sections: M-RoPE pairs per position component (temporal, height,
  // width, 4th), checked to sum to rotary_dim / 2; empty when absent.
  std::vector<int64_t> dimension_sections;
  // Per-layer RoPE (see above): the sliding layers' configuration, and each layer's type
  // ("sliding_attention" / "full_attention", {arch}.block_count entries; empty when the block
  // count is absent); nullopt when llama.cpp gives every layer one RoPE for this architecture.
  std::optional<rope_config> sliding;
  std::vector<std::string> layer_types;
  std::string layer_source;  // where the pattern came from ("gemma3 default period 6", ...)
  std::string sliding_type = "sliding_attention";  // llama4: "chunked_attention"
  // Layers llama.cpp's graph does not rotate (empty when it rotates every layer or the block
  // count is absent), the rule they follow, and whether every full-attention layer is one
  // (gguf_rope_layer then refuses "full_attention").
  std::vector<int64_t> nope_layers;
  std::string nope_source;
  bool full_nope = false;
  // {arch}.rope.scaling.yarn_attn_factor as written (the config's attention_factor), and what
  // llama.cpp does with it for this architecture.
  std::optional<double> yarn_attn_factor;
  bool yarn_attn_factor_used = false;
  std::string yarn_attn_factor_note;
  // llama.cpp's defaults taken for keys the file omits, and facts of llama.cpp's reading that
  // change nothing here (no YaRN truncate key), one sentence each.
  std::vector<std::string> notes;
};
gguf_rope gguf_rope_config(const gguf_file& f, std::vector<std::string>* warnings);
// The same, reading the factor tensors from an in-memory image.
gguf_rope gguf_rope_config(const gguf_file& f, std::span<const uint8_t> bytes,
                           std::vector<std::string>* warnings);

// The RoPE of one layer type of a GGUF model: "full_attention" (or "") is r.config,
// r.sliding_type ("sliding_attention"; llama4's "chunked_attention") r.sliding.
// invalid_argument naming the allowed types for another name, naming the architecture when
// llama.cpp has no per-layer RoPE for it, and for "full_attention" when llama.cpp rotates none
// of those layers (r.full_nope).
rope_config gguf_rope_layer(const gguf_rope& r, const std::string& layer_type);

}  // namespace posenc
