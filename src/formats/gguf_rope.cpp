// The RoPE configuration of a GGUF model as the Hugging Face config.json keys it came from
// (mapping in include/posenc/formats/gguf.hpp; the converter facts in docs/conventions.md,
// "GGUF").
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <set>
#include <tuple>

#include "posenc/core/error.hpp"
#include "posenc/formats/gguf.hpp"
#include "posenc/formats/hf_config.hpp"

namespace posenc {
namespace {

using nlohmann::json;
constexpr double two_pi = 6.283185307179586476925286766559;

// The tables below were read from llama.cpp 6dafc14e50e1c248621618f3786f5005767a1d39 by
// scripts/golden/llama_cpp_archs.py, which writes tests/golden/llama_cpp/architectures.json;
// tests/test_gguf_archs.cpp holds every row against that file.

// llama.cpp's rope type per architecture (6dafc14, src/llama-model.cpp llama_model_rope_type):
// NORM rotates adjacent pairs ("interleaved"), NEOX the two halves ("half"); MROPE and IMROPE
// rotate the halves too, with M-RoPE sections (IMROPE: interleaved across the pairs, Qwen3-VL).
// glm4, glm4moe and hunyuan_vl switch to MROPE when the file has rope sections
// (hparams.use_mrope(): sections 0 and 1 both > 0, src/llama-hparams.cpp). `permuted`: the
// HF -> GGUF converter (convert_hf_to_gguf.py and its conversion package, 6dafc14) permutes the
// q/k rows of Hugging Face checkpoints of this architecture (LlamaModel.permute and its copies:
// HF's halves become adjacent pairs).
enum class rt { norm, neox, mrope, imrope };
struct arch_rope {
  const char* arch;
  rt type;                // without rope sections
  rt type_with_sections;  // with rope sections 0 and 1 > 0
  bool permuted;
};
constexpr arch_rope arch_table[] = {
    {"llama", rt::norm, rt::norm, true},
    {"llama4", rt::norm, rt::norm, false},
    {"deci", rt::norm, rt::norm, true},
    {"falcon", rt::neox, rt::neox, false},
    {"baichuan", rt::norm, rt::norm, true},
    {"grok", rt::neox, rt::neox, false},
    {"gptneox", rt::neox, rt::neox, false},
    {"modern-bert", rt::neox, rt::neox, false},
    {"nomic-bert", rt::neox, rt::neox, false},
    {"nomic-bert-moe", rt::neox, rt::neox, false},
    {"neo-bert", rt::norm, rt::norm, false},
    {"jina-bert-v3", rt::neox, rt::neox, false},
    {"eurobert", rt::neox, rt::neox, false},
    {"stablelm", rt::neox, rt::neox, false},
    {"qwen", rt::neox, rt::neox, false},
    {"qwen2", rt::neox, rt::neox, false},
    {"qwen2moe", rt::neox, rt::neox, false},
    {"qwen2vl", rt::mrope, rt::mrope, false},
    {"qwen3", rt::neox, rt::neox, false},
    {"qwen3moe", rt::neox, rt::neox, false},
    {"qwen3next", rt::neox, rt::neox, false},
    {"qwen3vl", rt::imrope, rt::imrope, false},
    {"qwen3vlmoe", rt::imrope, rt::imrope, false},
    {"qwen35", rt::imrope, rt::imrope, false},
    {"qwen35moe", rt::imrope, rt::imrope, false},
    {"phi2", rt::neox, rt::neox, false},
    {"phi3", rt::neox, rt::neox, false},
    {"phimoe", rt::neox, rt::neox, false},
    {"plamo", rt::neox, rt::neox, false},
    {"plamo2", rt::neox, rt::neox, false},
    {"plamo3", rt::neox, rt::neox, false},
    {"codeshell", rt::neox, rt::neox, false},
    {"orion", rt::neox, rt::neox, false},
    {"internlm2", rt::norm, rt::norm, true},
    {"minicpm", rt::norm, rt::norm, true},
    {"minicpm3", rt::neox, rt::neox, false},
    {"gemma", rt::neox, rt::neox, false},
    {"gemma2", rt::neox, rt::neox, false},
    {"gemma3", rt::neox, rt::neox, false},
    {"gemma3n", rt::neox, rt::neox, false},
    {"gemma4", rt::neox, rt::neox, false},
    {"gemma4-assistant", rt::neox, rt::neox, false},
    {"gemma-embedding", rt::neox, rt::neox, false},
    {"starcoder2", rt::neox, rt::neox, false},
    {"falcon-h1", rt::neox, rt::neox, false},
    {"xverse", rt::norm, rt::norm, true},
    {"command-r", rt::norm, rt::norm, false},
    {"cohere2", rt::norm, rt::norm, false},
    {"cohere2moe", rt::norm, rt::norm, false},
    {"dbrx", rt::neox, rt::neox, false},
    {"olmo", rt::norm, rt::norm, true},
    {"olmo2", rt::neox, rt::neox, false},
    {"olmoe", rt::neox, rt::neox, false},
    {"openelm", rt::neox, rt::neox, false},
    {"arctic", rt::norm, rt::norm, true},
    {"deepseek", rt::norm, rt::norm, true},
    {"deepseek2", rt::norm, rt::norm, false},
    {"deepseek2-ocr", rt::norm, rt::norm, false},
    {"deepseek32", rt::norm, rt::norm, false},
    {"chatglm", rt::norm, rt::norm, false},
    {"glm4", rt::norm, rt::mrope, false},
    {"glm4moe", rt::neox, rt::mrope, false},
    {"glm-dsa", rt::norm, rt::norm, false},
    {"bitnet", rt::neox, rt::neox, false},
    {"jais2", rt::neox, rt::neox, false},
    {"nemotron", rt::neox, rt::neox, false},
    {"exaone", rt::neox, rt::neox, false},
    {"exaone4", rt::neox, rt::neox, false},
    {"exaone-moe", rt::neox, rt::neox, false},
    {"granite", rt::norm, rt::norm, true},
    {"granitemoe", rt::norm, rt::norm, true},
    {"granitehybrid", rt::norm, rt::norm, true},
    {"chameleon", rt::norm, rt::norm, true},
    {"plm", rt::norm, rt::norm, false},
    {"bailingmoe", rt::norm, rt::norm, true},
    {"bailingmoe2", rt::neox, rt::neox, false},
    {"dots1", rt::neox, rt::neox, false},
    {"arcee", rt::norm, rt::norm, true},
    {"afmoe", rt::neox, rt::neox, false},
    {"ernie4_5", rt::norm, rt::norm, false},
    {"ernie4_5-moe", rt::norm, rt::norm, false},
    {"hunyuan-moe", rt::neox, rt::neox, false},
    {"hunyuan-dense", rt::neox, rt::neox, false},
    {"hunyuan_vl", rt::neox, rt::mrope, false},
    {"smollm3", rt::norm, rt::norm, true},
    {"gpt-oss", rt::neox, rt::neox, false},
    {"lfm2", rt::neox, rt::neox, false},
    {"lfm2moe", rt::neox, rt::neox, false},
    {"dream", rt::neox, rt::neox, false},
    {"smallthinker", rt::neox, rt::neox, false},
    {"llada", rt::norm, rt::norm, true},
    {"llada-moe", rt::neox, rt::neox, false},
    {"seed_oss", rt::neox, rt::neox, false},
    {"grovemoe", rt::neox, rt::neox, false},
    {"apertus", rt::neox, rt::neox, false},
    {"minimax-m2", rt::neox, rt::neox, false},
    {"cogvlm", rt::neox, rt::neox, false},
    {"rnd1", rt::neox, rt::neox, false},
    {"pangu-embedded", rt::neox, rt::neox, false},
    {"mistral3", rt::norm, rt::norm, true},
    {"mistral4", rt::norm, rt::norm, false},
    {"paddleocr", rt::mrope, rt::mrope, false},
    {"mimo2", rt::neox, rt::neox, false},
    {"llama-embed", rt::norm, rt::norm, true},
    {"maincoder", rt::norm, rt::norm, false},
    {"talkie", rt::neox, rt::neox, false},
    {"mellum", rt::neox, rt::neox, false},
    {"eagle3", rt::norm, rt::norm, true},
    {"dflash", rt::neox, rt::neox, false},
};

const char* rt_name(rt t) {
  switch (t) {
    case rt::norm:
      return "NORM";
    case rt::neox:
      return "NEOX";
    case rt::mrope:
      return "MROPE";
    case rt::imrope:
      return "IMROPE";
  }
  return "?";
}

// Architectures llama.cpp (6dafc14) knows whose RoPE posenc does not read, each with the reason:
// the rope type NONE (src/llama-model.cpp llama_model_rope_type), graphs that rotate no query
// (src/models/<arch>.cpp), and per-layer rotary widths or bases posenc does not model.
struct arch_refused {
  const char* arch;
  const char* reason;
};
constexpr const char* no_rope =
    "llama.cpp gives it no RoPE (llama_model_rope_type: LLAMA_ROPE_TYPE_NONE)";
constexpr arch_refused refused_table[] = {
    {"clip", no_rope},
    {"gpt2", no_rope},
    {"gptj", no_rope},
    {"mpt", no_rope},
    {"refact", no_rope},
    {"jina-bert-v2", no_rope},
    {"bloom", no_rope},
    {"mamba", no_rope},
    {"mamba2", no_rope},
    {"jamba", no_rope},
    {"t5", no_rope},
    {"t5encoder", no_rope},
    {"jais", no_rope},
    {"nemotron_h", no_rope},
    {"nemotron_h_moe", no_rope},
    {"rwkv6", no_rope},
    {"rwkv6qwen2", no_rope},
    {"rwkv7", no_rope},
    {"arwkv7", no_rope},
    {"wavtokenizer-dec", no_rope},
    {"kimi-linear", no_rope},
    {"starcoder",
     "llama.cpp's rope type is NORM but its graph rotates no query (src/models/starcoder.cpp: "
     "learned absolute position embeddings)"},
    {"bert",
     "llama.cpp's rope type is NEOX but its graph rotates no query for bert (src/models/bert.cpp "
     "rotates only for nomic-bert, nomic-bert-moe and jina-bert-v3: bert has learned absolute "
     "position embeddings)"},
    {"step35",
     "llama.cpp halves the full-attention layers' rotary width (n_rot_full / 2, "
     "src/models/step35.cpp) and rotates the sliding layers with the whole width: per-layer "
     "rotary widths posenc's GGUF reading does not model"},
    {"deepseek4",
     "llama.cpp rotates each layer with a base and scale chosen by its compression ratio "
     "(src/models/deepseek4.cpp: {arch}.attention.compress_rope_freq_base, unscaled otherwise): "
     "per-layer bases posenc's GGUF reading does not model"},
};

// llama.cpp's sliding-window layers per architecture (6dafc14, src/models/<arch>.cpp
// load_arch_hparams and the graph): the pattern set_swa_pattern gives (period P: layer i is sliding
// when i % P < P - 1; dense_first: when i % P != 0; per_layer: only the per-layer array
// {arch}.attention.sliding_window_pattern), whether the key may be such an array (read, one
// entry per layer, nonzero = sliding), when the pattern exists at all, the sliding layers' base
// (the full layers' freq_base, else llama_hparams' 10000) and scale (the full layers', else 1)
// as the graph applies them, and whether the graph reads {arch}.rope.freq_base_swa
// (model.get_rope_freq_base per layer; cohere2, olmo2, exaone-moe, cohere2moe, mellum and dflash
// pass freq_base to every layer, olmo2 and mellum the scale 1 to the sliding ones).
enum class swa_kind { period, dense_first, per_layer };
enum class swa_when { always, window_positive, window_not_zero };
struct arch_swa {
  const char* arch;
  swa_kind kind;
  uint32_t period;       // the default period (0 for per_layer)
  bool array_key;        // {arch}.attention.sliding_window_pattern may be a per-layer array
  swa_when when;         // always; {arch}.attention.sliding_window > 0; absent or > 0
  uint32_t block_count;  // the pattern only for this {arch}.block_count (exaone4: 64); 0 = any
  bool base_from_full;
  bool scaled;
  bool base_key;           // the graph rotates the sliding layers with {arch}.rope.freq_base_swa
  const char* layer_type;  // the sliding layers' name (llama4: chunked attention)
};
using sk = swa_kind;
using sw = swa_when;
constexpr arch_swa swa_table[] = {
    {"gemma2", sk::period, 2, false, sw::always, 0, true, true, true, "sliding_attention"},
    {"gemma3", sk::period, 6, false, sw::window_positive, 0, false, false, true,
     "sliding_attention"},
    {"gemma3n", sk::period, 5, false, sw::always, 0, false, false, true, "sliding_attention"},
    {"gemma4", sk::per_layer, 0, true, sw::always, 0, false, false, true, "sliding_attention"},
    {"gemma4-assistant", sk::per_layer, 0, true, sw::always, 0, false, false, true,
     "sliding_attention"},
    {"gemma-embedding", sk::period, 6, false, sw::always, 0, false, false, true,
     "sliding_attention"},
    {"gpt-oss", sk::period, 2, false, sw::always, 0, true, true, true, "sliding_attention"},
    {"cohere2", sk::period, 4, false, sw::always, 0, true, true, false, "sliding_attention"},
    {"cohere2moe", sk::dense_first, 4, true, sw::always, 0, true, true, false, "sliding_attention"},
    {"olmo2", sk::period, 4, false, sw::window_positive, 0, true, false, false,
     "sliding_attention"},
    {"plamo3", sk::period, 8, false, sw::window_positive, 0, false, false, true,
     "sliding_attention"},
    {"modern-bert", sk::dense_first, 3, false, sw::window_positive, 0, false, false, true,
     "sliding_attention"},
    {"exaone4", sk::period, 4, false, sw::always, 64, true, true, false, "sliding_attention"},
    {"exaone-moe", sk::period, 4, false, sw::always, 0, true, true, false, "sliding_attention"},
    {"afmoe", sk::period, 4, false, sw::window_positive, 0, true, true, true, "sliding_attention"},
    {"llama4", sk::period, 4, false, sw::window_not_zero, 0, true, true, true, "chunked_attention"},
    {"smallthinker", sk::dense_first, 4, false, sw::window_positive, 0, true, true, true,
     "sliding_attention"},
    {"mellum", sk::period, 4, true, sw::window_positive, 0, true, false, false,
     "sliding_attention"},
    {"mimo2", sk::per_layer, 0, true, sw::always, 0, false, false, true, "sliding_attention"},
    {"dflash", sk::per_layer, 0, true, sw::window_positive, 0, true, true, false,
     "sliding_attention"},
};

// Layers llama.cpp's graph does not rotate (6dafc14, src/models/<arch>.cpp): sliding_only
// (the layers that are not sliding get no RoPE while the pattern is on: cohere2, exaone4,
// exaone-moe), sliding_or_dense_lead (and the first {arch}.leading_dense_block_count layers
// rotate: cohere2moe), step_plus_one (layer il has none when (il + 1) % step == 0), step (when
// il % step == 0), with the step n_no_rope_layer_step (llama_hparams' 4) replaced by the block
// count where the loader says so (llama4 with {arch}.attention.sliding_window = 0, smallthinker
// without a positive one; smallthinker's graph then rotates every layer), and finetuned_switch
// (Granite: no layer rotates when {arch}.rope.scaling.finetuned is false).
enum class nope_rule { sliding_only, sliding_or_dense_lead, step_plus_one, step, finetuned_switch };
struct arch_nope {
  const char* arch;
  nope_rule rule;
  uint32_t step;
};
using nr = nope_rule;
constexpr arch_nope nope_table[] = {
    {"cohere2", nr::sliding_only, 0},              // rotates only when is_swa
    {"exaone4", nr::sliding_only, 0},              // is_swa || swa_type == NONE
    {"exaone-moe", nr::sliding_only, 0},           // rotates only when is_local_layer
    {"cohere2moe", nr::sliding_or_dense_lead, 0},  // is_swa || il < n_layer_dense_lead
    {"llama4", nr::step_plus_one, 4},
    {"afmoe", nr::step_plus_one, 4},
    {"smollm3", nr::step_plus_one, 4},
    {"smallthinker", nr::step, 4},
    {"granite", nr::finetuned_switch, 0},  // src/models/granite.cpp
    {"granitemoe", nr::finetuned_switch, 0},
    {"granitehybrid", nr::finetuned_switch, 0},  // src/models/granite-hybrid.cpp
    {"minicpm", nr::finetuned_switch, 0},        // llama_model_granite's graph
};

// Graphs that rotate with fixed arguments instead of the file's (6dafc14, src/models/<arch>.cpp):
// deepseek2-ocr passes freq_scale 1, ext_factor 0, attn_factor 1; cogvlm calls ggml_rope
// (base 10000, scale 1).
struct arch_fixed {
  const char* arch;
  double base;  // 0: the file's freq_base
  const char* source;
};
constexpr arch_fixed fixed_table[] = {
    {"deepseek2-ocr", 0, "src/models/deepseek2.cpp: freq_scale 1, ext_factor 0, attn_factor 1"},
    {"cogvlm", 10000, "src/models/cogvlm.cpp: ggml_rope, base 10000, scale 1"},
};

template <class Row, size_t N>
const Row* find_row(const Row (&table)[N], const std::string& arch) {
  for (const auto& row : table)
    if (arch == row.arch) return &row;
  return nullptr;
}

// The implicit default constructor is noexcept, as json's is: clang-tidy (14) follows json's into
// a throw of json_value(value_t) that a null json never reaches.
// NOLINTNEXTLINE(bugprone-exception-escape)
struct fit_result {
  bool ok = false;
  json scaling;  // the rope_scaling block
};

// Recovers Llama 3.1's parameters from the per-pair divisors d (see gguf.hpp) and checks that
// they reproduce every entry.
fit_result fit_llama3(const std::vector<float>& d, double theta, int64_t R, int64_t head_dim,
                      std::optional<uint64_t> orig_key) {
  fit_result out;
  const size_t n = d.size();
  double s = 0;
  for (float v : d) {
    if (!std::isfinite(v) || v <= 0) return out;
    s = std::max(s, static_cast<double>(v));
  }
  if (s <= 1) return out;
  std::vector<double> omega(n), xs, sms;
  for (size_t i = 0; i < n; ++i)
    omega[i] = std::pow(theta, -2.0 * static_cast<double>(i) / static_cast<double>(R));
  const double tol = 1e-6;
  for (size_t i = 0; i < n; ++i) {
    const double v = d[i];
    if (v < 1 - tol) return out;  // llama3 never raises a frequency
    if (v > 1 + tol && v < s * (1 - tol)) {
      xs.push_back(omega[i] / two_pi);
      sms.push_back((1 / v - 1 / s) / (1 - 1 / s));
    }
  }
  double orig = 0, low = 1, high = 4;
  if (xs.size() >= 2) {
    // smooth = A x - B with A = orig / (high - low), B = low / (high - low).
    double mx = 0, my = 0;
    for (size_t i = 0; i < xs.size(); ++i) mx += xs[i], my += sms[i];
    mx /= static_cast<double>(xs.size()), my /= static_cast<double>(xs.size());
    double sxx = 0, sxy = 0;
    for (size_t i = 0; i < xs.size(); ++i)
      sxx += (xs[i] - mx) * (xs[i] - mx), sxy += (xs[i] - mx) * (sms[i] - my);
    if (!(sxx > 0)) return out;
    const double A = sxy / sxx, B = A * mx - my;
    if (!(A > 0)) return out;
    if (orig_key) {
      orig = static_cast<double>(*orig_key);
    } else {
      if (!(B > 0)) return out;
      orig = std::round(A / B);
    }
    low = B * orig / A;
    high = low + orig / A;
    // Published configs use small integers; snap fitted values that are one within rounding.
    for (double* p : {&low, &high})
      if (std::fabs(*p - std::round(*p)) < 1e-5 * std::max(1.0, std::fabs(*p))) *p = std::round(*p);
  } else {
    orig = orig_key ? static_cast<double>(*orig_key) : 8192.0;  // the converter's default
  }
  if (!(orig >= 1 && orig < 9.0e15 && low > 0 && high > low)) return out;
  json sc = {{"rope_type", "llama3"},
             {"factor", s},
             {"low_freq_factor", low},
             {"high_freq_factor", high},
             {"original_max_position_embeddings", static_cast<int64_t>(orig)}};
  try {
    json j = {
        {"head_dim", head_dim}, {"rotary_dim", R}, {"rope_theta", theta}, {"rope_scaling", sc}};
    std::vector<std::string> w;
    const auto f = rope_frequencies(rope_config_from_json(j, &w));
    for (size_t i = 0; i < n; ++i) {
      const double want = omega[i] / static_cast<double>(d[i]);
      if (std::fabs(f.inv_freq[i] - want) > std::ldexp(want, -18)) return out;
    }
  } catch (const invalid_argument&) {
    return out;
  }
  out.ok = true;
  out.scaling = sc;
  return out;
}

// The conversion of one GGUF file, one group of keys per method, called by convert() in this
// order (the order of the notes and warnings): head_dim and rotary width, base and context
// lengths, scaling type and factor, the sliding layers' base, the M-RoPE sections, the scaling
// block per type (YaRN's keys in their own methods), the LongRoPE / Llama 3.1 tensors, the
// config, the sliding layers.
class converter {
 public:
  converter(const gguf_file& f,
            const std::function<std::vector<float>(const gguf_tensor_info&)>& read,
            std::vector<std::string>* warnings)
      : f_(f), read_(read), warnings_(warnings) {
    const auto arch = f.get_string("general.architecture");
    if (!arch) fail_io("{}: general.architecture is missing (every GGUF model names it)", f.path);
    // Every key of the model is named after it: one that is empty, longer than 64 bytes or holds
    // bytes outside printable ASCII names no architecture of llama.cpp (which refuses it as
    // unknown), and would make every later message unreadable.
    const bool printable =
        !arch->empty() && arch->size() <= 64 &&
        std::all_of(arch->begin(), arch->end(), [](char ch) {
          return static_cast<unsigned char>(ch) >= 0x21 && static_cast<unsigned char>(ch) < 0x7f;
        });
    if (!printable)
      fail_io(
          "{}: offset {}: general.architecture = {} is not an architecture name: llama.cpp's are "
          "1 to 64 printable ASCII bytes without spaces (llama, qwen2, gptneox, ...)",
          f.path, f.find("general.architecture")->offset, quote_bytes(*arch));
    r_.arch = *arch;
    k_ = r_.arch + ".";
  }

  gguf_rope run() {
    read_arch();
    read_dims();
    read_base();
    read_type();
    read_swa_base();
    read_sections();
    if (auto ext = f_.get_number(key("rope.scaling.yarn_ext_factor")); ext && *ext == 0)
      warnings_->push_back(
          fmt::format("{} = 0 turns llama.cpp's YaRN ramp off; posenc follows HF, "
                      "where yarn always ramps",
                      key("rope.scaling.yarn_ext_factor")));
    read_scaling();
    if (const auto* t_freqs = f_.find_tensor("rope_freqs.weight")) read_freqs(*t_freqs);
    if (!sc_.is_null()) j_["rope_scaling"] = sc_;
    make_config();
    read_query_scale();
    read_sliding();
    read_nope();
    return std::move(r_);
  }

 private:
  static constexpr uint64_t max_dim = uint64_t{1} << 20;

  std::string key(const char* suffix) const { return k_ + suffix; }
  std::optional<uint64_t> size_key(const char* suffix, uint64_t lo, uint64_t hi) const {
    auto v = f_.get_size(key(suffix));
    if (v && (*v < lo || *v > hi))
      fail_io("{}: offset {}: {} must be in [{}, {}], got {}", f_.path,
              f_.find(key(suffix))->offset, key(suffix), lo, hi, *v);
    return v;
  }

  // head_dim and rotary width
  void read_dims() {
    const auto key_length = size_key("attention.key_length", 2, max_dim);
    const auto heads = size_key("attention.head_count", 1, max_dim);
    const auto embd = size_key("embedding_length", 1, uint64_t{1} << 40);
    auto rot = size_key("rope.dimension_count", 2, max_dim);
    if (key_length) {
      head_dim_ = static_cast<int64_t>(*key_length);
    } else if (heads && embd) {
      if (*embd % *heads != 0)
        fail_io("{}: {} = {} is not a multiple of {} = {}; head_dim cannot be derived", f_.path,
                key("embedding_length"), *embd, key("attention.head_count"), *heads);
      head_dim_ = static_cast<int64_t>(*embd / *heads);
    } else if (rot) {
      head_dim_ = static_cast<int64_t>(*rot);
    } else {
      fail_io("{}: none of {}, {} / {}, {} is present; the head dim is unknown", f_.path,
              key("attention.key_length"), key("embedding_length"), key("attention.head_count"),
              key("rope.dimension_count"));
    }
    // llama.cpp's defaults for omitted keys, llama_model_base::load_hparams (llama.cpp
    // 6dafc14e50e1c248621618f3786f5005767a1d39): n_rot = the head dim, freq_base = 10000.
    if (!rot && (key_length || (heads && embd)))
      r_.notes.push_back(fmt::format(
          "{} is absent: llama.cpp's default, the head dim {} ({}), taken as the rotary width",
          key("rope.dimension_count"), head_dim_,
          key_length ? key("attention.key_length")
                     : key("embedding_length") + " / " + key("attention.head_count")));
    R_ = rot ? static_cast<int64_t>(*rot) : head_dim_;
    if (R_ < head_dim_ && (r_.arch == "deepseek2" || r_.arch == "minicpm3")) head_dim_ = R_;  // MLA
  }

  // Base and context lengths.
  void read_base() {
    j_["head_dim"] = head_dim_;
    j_["rotary_dim"] = R_;
    const auto theta_key = f_.get_number(key("rope.freq_base"));
    if (!theta_key)
      r_.notes.push_back(fmt::format(
          "{} is absent: llama.cpp's default base 10000 taken (GPT-NeoX and Phi-2 conversions "
          "write none)",
          key("rope.freq_base")));
    theta_ = theta_key.value_or(10000.0);
    j_["rope_theta"] = theta_;
    if (auto ctx = size_key("context_length", 0, uint64_t{1} << 53))
      j_["max_position_embeddings"] = *ctx;
    orig_ = size_key("rope.scaling.original_context_length", 0, uint64_t{1} << 53);
    if (orig_ && *orig_ > 0) j_["original_max_position_embeddings"] = *orig_;
  }

  // Scaling type, factor and attention factor.
  void read_type() {
    if (auto t = f_.get_string(key("rope.scaling.type"))) type_ = *t;
    factor_ = f_.get_number(key("rope.scaling.factor"));
    attn_ = f_.get_number(key("rope.scaling.attn_factor"));
    if (auto lin = f_.get_number(key("rope.scale_linear"))) {
      // Legacy key: the linear factor.
      if (type_ == "none" || type_ == "linear") {
        type_ = "linear";
        if (!factor_) factor_ = lin;
      } else if (*lin != 1) {
        warnings_->push_back(fmt::format("{} = {} is ignored: {} = {} wins",
                                         key("rope.scale_linear"), *lin, key("rope.scaling.type"),
                                         type_));
      }
    }
  }

  // Sliding-window layers' base (llama.cpp: Gemma 3 and others): the config.json key it comes
  // from, so rope_config_from_json(hf_config, "sliding_attention") gives those layers' RoPE.
  void read_swa_base() {
    if (auto swa = f_.get_number(key("rope.freq_base_swa"))) {
      if (!std::isfinite(*swa) || *swa <= 1)
        fail_io("{}: offset {}: {} must be finite and > 1, got {}", f_.path,
                f_.find(key("rope.freq_base_swa"))->offset, key("rope.freq_base_swa"), *swa);
      r_.freq_base_swa = *swa;
      j_["rope_local_base_freq"] = *swa;
    }
  }

  // M-RoPE sections (Qwen2-VL): pairs per position component (temporal, height, width, and a
  // fourth that Qwen2-VL leaves 0); they split the R/2 pairs, so they must sum to R/2.
  void read_sections() {
    const auto* kv = f_.find(key("rope.dimension_sections"));
    if (!kv) return;
    const bool integers = kv->elem_type != gguf_type::f32 && kv->elem_type != gguf_type::f64 &&
                          kv->elem_type != gguf_type::string && kv->elem_type != gguf_type::array &&
                          kv->elem_type != gguf_type::boolean;
    if (kv->type != gguf_type::array || !integers || !kv->numbers_kept || kv->count > 8)
      fail_io("{}: offset {}: {} must be an array of at most 8 integers, got {}{}", f_.path,
              kv->offset, kv->key(), gguf_type_name(kv->type),
              kv->type == gguf_type::array
                  ? fmt::format(" of {} {}", kv->count, gguf_type_name(kv->elem_type))
                  : std::string());
    int64_t sum = 0;
    for (double v : kv->numbers()) {
      if (v < 0 || v > static_cast<double>(max_dim))
        fail_io("{}: offset {}: {} entries must be in [0, {}], got {}", f_.path, kv->offset,
                kv->key(), max_dim, v);
      r_.dimension_sections.push_back(static_cast<int64_t>(v));
      sum += static_cast<int64_t>(v);
    }
    if (sum != R_ / 2)
      fail_io("{}: offset {}: {} must sum to rotary_dim / 2 = {} ({} = {}), got {}", f_.path,
              kv->offset, kv->key(), R_ / 2, key("rope.dimension_count"), R_, sum);
    warnings_->push_back(fmt::format(
        "{} = [{}] read (M-RoPE pairs per position component{}); the frequencies below are the "
        "1-D RoPE of one component",
        kv->key(), fmt::join(r_.dimension_sections, ", "),
        arch_->type == rt::imrope ? ", interleaved across the pairs: llama.cpp's IMROPE" : ""));
  }

  // The rope_scaling block of the scaling type (the rope_freqs tensor aside).
  void read_scaling() {
    const auto* t_long = f_.find_tensor("rope_factors_long.weight");
    const auto* t_short = f_.find_tensor("rope_factors_short.weight");
    if (type_ == "none") {
      if (t_long || t_short) type_ = "longrope";  // converters for Phi-3 write only the tensors
    }
    if (type_ == "linear") {
      if (!factor_)
        fail_io("{}: {} is linear but {} is missing", f_.path, key("rope.scaling.type"),
                key("rope.scaling.factor"));
      sc_ = {{"rope_type", "linear"}, {"factor", *factor_}};
    } else if (type_ == "yarn") {
      read_yarn();
    } else if (type_ == "longrope") {
      read_longrope(t_long, t_short);
    } else if (type_ != "none") {
      fail_io(
          "{}: {} = '{}' is not a rope scaling type posenc knows (none, linear, yarn, longrope)",
          f_.path, key("rope.scaling.type"), type_);
    }
  }

  // YaRN: factor, original length, truncate, then the keys llama.cpp reads per architecture.
  void read_yarn() {
    if (!factor_)
      fail_io("{}: {} is yarn but {} is missing", f_.path, key("rope.scaling.type"),
              key("rope.scaling.factor"));
    sc_ = {{"rope_type", "yarn"}, {"factor", *factor_}};
    if (orig_ && *orig_ > 0) sc_["original_max_position_embeddings"] = *orig_;
    // llama.cpp always rounds the correction range (ggml_rope_yarn_corr_dims floors and
    // ceils); the converter writes no truncate key.
    sc_["truncate"] = true;
    r_.notes.push_back(fmt::format(
        "{} = yarn: truncate true taken: GGUF has no truncate key and llama.cpp always rounds the "
        "correction-range boundaries (floor / ceil)",
        key("rope.scaling.type")));
    read_yarn_betas();
    read_yarn_log_multiplier();
    read_yarn_attn_factor();
    if (attn_ && !r_.yarn_attn_factor_used) sc_["attention_factor"] = *attn_;
  }

  // Betas: read only by grok (default beta_fast 8 for old files) and mistral3; every other
  // architecture keeps llama_hparams' 32 / 1 whatever the file says.
  void read_yarn_betas() {
    const bool reads_betas = r_.arch == "grok" || r_.arch == "mistral3";
    for (const auto& [suffix, hf_key, dflt] :
         {std::tuple{"rope.scaling.yarn_beta_fast", "beta_fast", r_.arch == "grok" ? 8.0 : 32.0},
          std::tuple{"rope.scaling.yarn_beta_slow", "beta_slow", 1.0}}) {
      const auto b = f_.get_number(key(suffix));
      if (reads_betas && b) {
        sc_[hf_key] = *b;
      } else {
        sc_[hf_key] = dflt;
        if (b && *b != dflt)
          warnings_->push_back(fmt::format(
              "{} = {} is written but llama.cpp reads the YaRN betas only for grok and mistral3; "
              "for {} it uses {} = {} (posenc follows llama.cpp)",
              key(suffix), *b, r_.arch, hf_key, dflt));
        else if (!b && reads_betas && dflt != 32 && dflt != 1)
          r_.notes.push_back(fmt::format("{} is absent: llama.cpp's {} default {} = {} taken",
                                         key(suffix), r_.arch, hf_key, dflt));
      }
    }
  }

  void read_yarn_log_multiplier() {
    const auto lm = f_.get_number(key("rope.scaling.yarn_log_multiplier"));
    if (!lm || *lm == 0) return;
    // llama_context: mscale_all_dims = rope_yarn_log_mul, mscale = 1 except for deepseek2,
    // whose loader divides the key by 0.1 and whose mscale is mscale_all_dims; the magnitude
    // is get_mscale(s, mscale) / get_mscale(s, mscale_all_dims). Only deepseek2 and mistral3
    // read the key.
    if (r_.arch == "deepseek2") {
      sc_["mscale"] = *lm / 0.1;
      sc_["mscale_all_dim"] = *lm / 0.1;
      warnings_->push_back(fmt::format(
          "{} = {} read as mscale = mscale_all_dim = {} (deepseek2: llama.cpp divides it by "
          "0.1); the attention-level softmax factor get_mscale(factor, mscale_all_dim)^2 is "
          "not part of RoPE",
          key("rope.scaling.yarn_log_multiplier"), *lm, *lm / 0.1));
    } else if (r_.arch == "mistral3") {
      sc_["mscale"] = 1.0;
      sc_["mscale_all_dim"] = *lm;
      r_.notes.push_back(fmt::format(
          "{} = {} read as mscale_all_dim = {} with mscale = 1 (mistral3: llama.cpp takes the "
          "key unscaled; only deepseek2's is 0.1 mscale_all_dim)",
          key("rope.scaling.yarn_log_multiplier"), *lm, *lm));
    } else {
      warnings_->push_back(fmt::format(
          "{} = {} is not read by llama.cpp for {} (only deepseek2 and mistral3 read it); "
          "ignored, as llama.cpp does",
          key("rope.scaling.yarn_log_multiplier"), *lm, r_.arch));
    }
  }

  void read_yarn_attn_factor() {
    const auto ya = f_.get_number(key("rope.scaling.yarn_attn_factor"));
    if (!ya) return;
    // The converter writes the config's attention_factor here; llama.cpp reads the key only
    // for grok (llama_model_grok::load_arch_hparams), and llama_context replaces it by the
    // YaRN magnitude whenever the ramp is on (yarn_ext_factor != 0).
    r_.yarn_attn_factor = *ya;
    const auto ext = f_.get_number(key("rope.scaling.yarn_ext_factor"));
    const double s = *factor_;
    const double m = s > 1 ? 0.1 * std::log(s) + 1 : 1.0;
    if (r_.arch == "grok" && ext && *ext == 0) {
      r_.yarn_attn_factor_used = true;
      r_.yarn_attn_factor_note = fmt::format(
          "{} = {} is used by llama.cpp for grok: with {} = 0 (ramp off) the magnitude is {} "
          "times {}",
          key("rope.scaling.yarn_attn_factor"), *ya, key("rope.scaling.yarn_ext_factor"), *ya,
          key("rope.scaling.attn_factor"));
      sc_["attention_factor"] = *ya * attn_.value_or(1.0);
    } else {
      r_.yarn_attn_factor_note = fmt::format(
          "{} = {} (the config's attention_factor, written by llama.cpp's converter) is {}; "
          "llama.cpp uses the YaRN magnitude 0.1 ln({}) + 1 = {} (posenc follows llama.cpp)",
          key("rope.scaling.yarn_attn_factor"), *ya,
          r_.arch == "grok"
              ? "read by llama.cpp for grok but replaced whenever the YaRN ramp is on "
                "(yarn_ext_factor != 0)"
              : fmt::format("ignored by llama.cpp for {} (it reads the key only for grok)",
                            r_.arch),
          s, m);
    }
    warnings_->push_back(r_.yarn_attn_factor_note);
  }

  // A tensor of R/2 per-pair factors, as doubles.
  std::vector<double> read_half(const gguf_tensor_info* t) const {
    auto v = read_(*t);
    if (static_cast<int64_t>(v.size()) != R_ / 2)
      fail_io("{}: offset {}: tensor {} must have rotary_dim/2 = {} entries ({} = {}), got {}",
              f_.path, t->info_offset, t->name, R_ / 2, key("rope.dimension_count"), R_, v.size());
    return std::vector<double>(v.begin(), v.end());
  }

  // LongRoPE: both factor tensors.
  void read_longrope(const gguf_tensor_info* t_long, const gguf_tensor_info* t_short) {
    if (!t_long || !t_short)
      fail_io(
          "{}: rope type longrope needs both tensors rope_factors_long.weight and "
          "rope_factors_short.weight, found {}",
          f_.path,
          t_long    ? "only the long one"
          : t_short ? "only the short one"
                    : "neither");
    sc_ = {{"rope_type", "longrope"},
           {"short_factor", read_half(t_short)},
           {"long_factor", read_half(t_long)}};
    if (factor_) sc_["factor"] = *factor_;
    if (attn_) sc_["attention_factor"] = *attn_;
  }

  // rope_freqs.weight: Llama 3.1's parameters when they reproduce it, plain RoPE when every
  // divisor is 1, else per-pair factors in posenc's longrope form.
  void read_freqs(const gguf_tensor_info& t_freqs) {
    if (type_ == "longrope")
      fail_io("{}: both rope_freqs.weight and the LongRoPE factor tensors are present", f_.path);
    const auto d = read_(t_freqs);
    if (static_cast<int64_t>(d.size()) != R_ / 2)
      fail_io("{}: offset {}: tensor rope_freqs.weight must have rotary_dim/2 = {} entries, got {}",
              f_.path, t_freqs.info_offset, R_ / 2, d.size());
    const double a = attn_.value_or(1.0);
    auto fit = type_ == "none" && a == 1 ? fit_llama3(d, theta_, R_, head_dim_,
                                                      orig_ && *orig_ > 0 ? orig_ : std::nullopt)
                                         : fit_result{};
    bool all_one = true;
    for (float v : d) all_one = all_one && v == 1.0f;
    if (fit.ok) {
      sc_ = fit.scaling;
    } else if (all_one && type_ == "none" && a == 1) {
      // Every divisor 1: plain RoPE.
    } else {
      // Per-pair divisors in posenc's longrope form: the same list for short and long, the
      // magnitude explicit.
      std::vector<double> dd(d.begin(), d.end());
      const double s = factor_.value_or(1.0);
      if (type_ != "none")
        warnings_->push_back(fmt::format(
            "rope_freqs.weight comes with {} = {}; llama.cpp divides each pair's frequency by the "
            "tensor and then applies the {} scaling; posenc models the tensor alone",
            key("rope.scaling.type"), type_, type_));
      warnings_->push_back(fmt::format(
          "rope_freqs.weight does not follow Llama 3.1's formula (or comes with a magnitude {}); "
          "represented as per-pair factors: longrope with short_factor = long_factor = the tensor",
          a));
      sc_ = {{"rope_type", "longrope"},
             {"factor", std::max(1.0, s)},
             {"short_factor", dd},
             {"long_factor", dd},
             {"attention_factor", a}};
      if (!j_.contains("original_max_position_embeddings"))
        j_["original_max_position_embeddings"] =
            j_.contains("max_position_embeddings") ? j_["max_position_embeddings"] : json(1);
    }
  }

  // The architecture: refused by name (no RoPE in llama.cpp, or one posenc does not model) or
  // not known to llama.cpp at the pinned commit; Granite's switch that turns RoPE off.
  void read_arch() {
    if (const auto* row = find_row(refused_table, r_.arch))
      fail(
          "{}: general.architecture = '{}': {}; posenc reads the RoPE of llama.cpp's NORM, NEOX, "
          "MROPE and IMROPE architectures",
          f_.path, r_.arch, row->reason);
    arch_ = find_row(arch_table, r_.arch);
    if (!arch_) {
      std::vector<std::string> names;
      for (const auto& row : arch_table) names.emplace_back(row.arch);
      fail(
          "{}: general.architecture = '{}' is not an architecture of llama.cpp "
          "6dafc14e50e1c248621618f3786f5005767a1d39 (src/llama-arch.cpp); posenc reads the RoPE "
          "of: {}",
          f_.path, r_.arch, fmt::join(names, ", "));
    }
    nope_ = find_row(nope_table, r_.arch);
    if (nope_ && nope_->rule == nr::finetuned_switch) {
      if (auto on = f_.get_bool(key("rope.scaling.finetuned")); on && !*on)
        fail(
            "{}: {} = false: llama.cpp's {} graph rotates no layer then (src/models/granite.cpp "
            "and granite-hybrid.cpp use rope_finetuned as the RoPE switch); there is no RoPE to "
            "read",
            f_.path, key("rope.scaling.finetuned"), r_.arch);
    }
  }

  // The layout of the architecture and the config of the recovered keys.
  void make_config() {
    // hparams.use_mrope(): sections 0 and 1 both > 0.
    const auto& sec = r_.dimension_sections;
    const bool mrope = sec.size() >= 2 && sec[0] > 0 && sec[1] > 0;
    const rt type = mrope ? arch_->type_with_sections : arch_->type;
    r_.rope_type = rt_name(type);
    r_.layout = type == rt::norm ? rope_layout::interleaved : rope_layout::half;
    r_.permuted_from_hf = arch_->permuted;
    if (type != arch_->type)
      r_.notes.push_back(fmt::format(
          "{} has rope sections 0 and 1 > 0: llama.cpp rotates {} as {} (NEOX pairs) instead of {}",
          key("rope.dimension_sections"), r_.arch, rt_name(type), rt_name(arch_->type)));
    if (const auto* fx = find_row(fixed_table, r_.arch)) {
      if (fx->base > 0 && theta_ != fx->base) {
        warnings_->push_back(
            fmt::format("{} = {} is not used by llama.cpp's {} graph ({}); base {} taken",
                        key("rope.freq_base"), theta_, r_.arch, fx->source, fx->base));
        theta_ = fx->base;
        j_["rope_theta"] = fx->base;
      }
      if (j_.contains("rope_scaling")) {
        warnings_->push_back(fmt::format(
            "the {} scaling is not applied by llama.cpp's {} graph ({}); dropped",
            j_["rope_scaling"].value("rope_type", std::string("rope")), r_.arch, fx->source));
        j_.erase("rope_scaling");
      }
    }
    r_.hf_config = j_;
    try {
      r_.config = rope_config_from_json(j_, warnings_);
    } catch (const invalid_argument& e) {
      throw invalid_argument(fmt::format("{}: {}", f_.path, e.what()));
    }
  }

  // The query scale by position (llama_graph's build_inp_attn_scale, offset 0): mistral3 reads
  // {arch}.attention.temperature_scale with n_ctx_orig_yarn (rope.scaling.original_context_length,
  // else context_length) as the positions per step; deepseek2 (Mistral Large 3) and mistral4
  // (deepseek2's loader) the scale and {arch}.attention.temperature_length. Other architectures
  // do not read the keys (llama4's constants 0.1, 8192, offset 1 are built in and apply to its
  // NoPE layers, outside the RoPE config).
  void read_query_scale() {
    const auto scale_key = key("attention.temperature_scale");
    const auto length_key = key("attention.temperature_length");
    const auto scale = f_.get_number(scale_key);
    const bool reads = r_.arch == "mistral3" || r_.arch == "deepseek2" || r_.arch == "mistral4";
    if (!reads) {
      for (const auto& k : {scale_key, length_key})
        if (f_.find(k))
          warnings_->push_back(fmt::format(
              "{} is not read by llama.cpp for {} (only mistral3, deepseek2 and mistral4 read it); "
              "ignored, as llama.cpp does",
              k, r_.arch));
      return;
    }
    if (!scale || *scale == 0) return;
    if (!std::isfinite(*scale) || *scale < 0)
      fail_io("{}: offset {}: {} must be finite and >= 0, got {}", f_.path,
              f_.find(scale_key)->offset, scale_key, *scale);
    uint64_t floor = 0;
    std::string from;
    if (r_.arch == "mistral3") {
      const auto ctx = size_key("context_length", 0, uint64_t{1} << 53);
      floor = orig_ ? *orig_ : ctx.value_or(0);
      from = orig_ ? key("rope.scaling.original_context_length") : key("context_length");
    } else {
      floor = size_key("attention.temperature_length", 0, uint64_t{1} << 53).value_or(0);
      from = length_key;
    }
    if (floor == 0)
      fail(
          "{}: {} = {} needs {} > 0 (the positions per step of the query scale; llama.cpp "
          "refuses the file)",
          f_.path, scale_key, *scale, from);
    r_.config.llama_4_scaling_beta = *scale;
    r_.config.llama_4_scaling_floor = static_cast<int64_t>(floor);
    r_.notes.push_back(fmt::format(
        "{} = {}: llama.cpp scales the rotated queries of every layer by 1 + {} * log(1 + "
        "floor(pos / {})) ({} = {})",
        scale_key, *scale, *scale, floor, from, floor));
  }

  // Whether llama.cpp's loader sets the sliding pattern for this file (the row's condition).
  bool pattern_on(const arch_swa& swa) {
    const auto window = size_key("attention.sliding_window", 0, uint64_t{1} << 53);
    if (swa.when == sw::window_positive && (!window || *window == 0)) return false;
    if (swa.when == sw::window_not_zero && window && *window == 0) return false;
    if (swa.block_count) {
      const auto n = size_key("block_count", 0, uint64_t{1} << 20);
      if (!n || *n != swa.block_count) {
        r_.notes.push_back(fmt::format(
            "llama.cpp sets {}'s sliding-window layers only for {} = {} ({} here): one RoPE for "
            "every layer",
            r_.arch, key("block_count"), swa.block_count,
            n ? std::to_string(*n) : std::string("absent")));
        return false;
      }
    }
    return true;
  }

  // Each layer's type from the per-layer array {arch}.attention.sliding_window_pattern
  // (llama_model_loader::get_key_or_arr: one bool, u32 or i32 entry per layer, nonzero =
  // sliding; a u32 scalar stands for every layer).
  void read_pattern_array(const gguf_kv& kv, const arch_swa& swa, uint64_t n) {
    std::vector<bool> sliding;
    if (kv.type == gguf_type::array) {
      const bool allowed = kv.elem_type == gguf_type::boolean || kv.elem_type == gguf_type::u32 ||
                           kv.elem_type == gguf_type::i32;
      if (!allowed || !kv.numbers_kept || kv.count != n)
        fail_io("{}: offset {}: {} must be an array of {} = {} bool, u32 or i32 entries, got {} {}",
                f_.path, kv.offset, kv.key(), key("block_count"), n, kv.count,
                gguf_type_name(kv.elem_type));
      for (double v : kv.numbers()) sliding.push_back(v != 0);
    } else {
      sliding.assign(n, *f_.get_size(std::string(kv.key())) != 0);
    }
    for (bool s : sliding) r_.layer_types.push_back(s ? swa.layer_type : "full_attention");
    r_.layer_source = fmt::format("{} (one entry per layer)", kv.key());
  }

  // Sliding-window layers, as llama.cpp's loader sets them and its graph rotates them.
  void read_sliding() {
    const arch_swa* swa = find_row(swa_table, r_.arch);
    if (!swa || !pattern_on(*swa)) return;
    const auto n = size_key("block_count", 0, uint64_t{1} << 20);
    const auto* kv = f_.find(key("attention.sliding_window_pattern"));
    const bool per_layer = kv && (kv->type == gguf_type::array || swa->kind == sk::per_layer);
    if (per_layer && swa->array_key) {
      if (!n)
        fail_io("{}: {} is a per-layer pattern but {} is absent", f_.path, kv->key(),
                key("block_count"));
      read_pattern_array(*kv, *swa, *n);
    } else if (swa->kind == sk::per_layer) {
      // No array: llama.cpp leaves every layer dense.
      r_.notes.push_back(fmt::format(
          "{} is absent: llama.cpp's {} reads the sliding layers only from that per-layer array, "
          "so every layer is full attention with one RoPE",
          key("attention.sliding_window_pattern"), r_.arch));
      return;
    } else {
      uint32_t period = swa->period;
      const bool dense_first = swa->kind == sk::dense_first;
      if (kv && kv->type != gguf_type::array) {
        const auto p = size_key("attention.sliding_window_pattern", 0, uint64_t{1} << 20);
        period = static_cast<uint32_t>(*p);
        r_.layer_source = fmt::format("{} = {}", key("attention.sliding_window_pattern"), period);
      } else {
        r_.layer_source = fmt::format("llama.cpp's {} default period {}", r_.arch, period);
        r_.notes.push_back(fmt::format(
            "{} is {}: llama.cpp's {} default period {} taken (layer i is {} when {})",
            key("attention.sliding_window_pattern"),
            kv ? "a per-layer array, which llama.cpp's loader skips for this architecture"
               : "absent",
            r_.arch, period, swa->layer_type,
            dense_first ? fmt::format("i % {} != 0", period)
                        : fmt::format("i % {} < {}", period, period - 1)));
      }
      if (n)
        for (uint64_t i = 0; i < *n; ++i) {
          const bool s = period == 0 || (dense_first ? i % period != 0 : i % period < period - 1);
          r_.layer_types.push_back(s ? swa->layer_type : "full_attention");
        }
    }
    double base = swa->base_from_full ? theta_ : 10000.0;
    if (!swa->base_key) {
      // The graph passes freq_base to the sliding layers (every such row has base_from_full).
      if (r_.freq_base_swa)
        warnings_->push_back(fmt::format(
            "{} = {} is not used by llama.cpp's {} graph, which rotates the sliding layers with "
            "{} = {}; ignored",
            key("rope.freq_base_swa"), *r_.freq_base_swa, r_.arch, key("rope.freq_base"), theta_));
    } else if (r_.freq_base_swa) {
      base = *r_.freq_base_swa;
    } else {
      r_.notes.push_back(
          fmt::format("{} is absent: llama.cpp's {} default sliding-layer base {} taken ({})",
                      key("rope.freq_base_swa"), r_.arch, base,
                      swa->base_from_full ? "the full layers' freq_base" : "llama_hparams' 10000"));
    }
    json sj = j_;
    sj["rope_theta"] = base;
    sj.erase("rope_local_base_freq");
    if (!swa->scaled) sj.erase("rope_scaling");  // freq_scale 1: unscaled
    // The sliding layers' head and rotary widths (llama_model_base::load_hparams reads them for
    // every architecture; each defaults to the full layers').
    if (auto k = size_key("attention.key_length_swa", 2, max_dim)) sj["head_dim"] = *k;
    if (auto rot = size_key("rope.dimension_count_swa", 2, max_dim)) sj["rotary_dim"] = *rot;
    try {
      r_.sliding = rope_config_from_json(sj, warnings_);
    } catch (const invalid_argument& e) {
      throw invalid_argument(fmt::format("{}: sliding layers: {}", f_.path, e.what()));
    }
    r_.sliding_type = swa->layer_type;
  }

  // Layers llama.cpp's graph does not rotate (nope_table).
  void read_nope() {
    if (!nope_ || nope_->rule == nr::finetuned_switch) return;
    const auto n = size_key("block_count", 0, uint64_t{1} << 20);
    const auto window = size_key("attention.sliding_window", 0, uint64_t{1} << 53);
    uint64_t step = nope_->step;
    std::string rule;
    std::function<bool(uint64_t)> nope;
    const auto type_of = [&](uint64_t i) {
      return i < r_.layer_types.size() ? r_.layer_types[i] : std::string();
    };
    switch (nope_->rule) {
      case nr::sliding_only:
        if (!r_.sliding) return;
        rule = "the layers that are not sliding";
        nope = [&](uint64_t i) { return type_of(i) == "full_attention"; };
        r_.full_nope = true;
        break;
      case nr::sliding_or_dense_lead: {
        if (!r_.sliding) return;
        const auto lead = size_key("leading_dense_block_count", 0, uint64_t{1} << 20).value_or(0);
        rule = fmt::format("the full-attention layers from {} = {} on",
                           key("leading_dense_block_count"), lead);
        nope = [&, lead](uint64_t i) { return i >= lead && type_of(i) == "full_attention"; };
        r_.full_nope = lead == 0;
        break;
      }
      case nr::step_plus_one:
        if (r_.arch == "llama4" && window && *window == 0) {
          if (!n) return;
          step = *n;  // llama4's loader: n_no_rope_layer_step = n_layer
        }
        rule = fmt::format("layer i when (i + 1) % {} == 0", step);
        nope = [step](uint64_t i) { return (i + 1) % step == 0; };
        break;
      case nr::step:
        // smallthinker: without a positive window the step is n_layer and every layer rotates.
        if (!window || *window == 0) return;
        rule = fmt::format("layer i when i % {} == 0", step);
        nope = [step](uint64_t i) { return i % step == 0; };
        break;
      case nr::finetuned_switch:
        return;
    }
    if (n)
      for (uint64_t i = 0; i < *n; ++i)
        if (nope(i)) r_.nope_layers.push_back(static_cast<int64_t>(i));
    // Every full-attention layer without RoPE (afmoe, llama4, smallthinker: the step meets the
    // period).
    if (!r_.full_nope && r_.sliding && n) {
      bool all = false;
      for (uint64_t i = 0; i < *n; ++i)
        if (type_of(i) == "full_attention") {
          all = nope(i);
          if (!all) break;
        }
      r_.full_nope = all;
    }
    r_.nope_source = fmt::format("src/models/{}.cpp: no RoPE on {}", r_.arch, rule);
    r_.notes.push_back(fmt::format(
        "llama.cpp's {} graph applies no RoPE to {}{}", r_.arch, rule,
        n ? fmt::format(" (layers {})", fmt::join(r_.nope_layers, ", "))
          : fmt::format(" ({} is absent: the layers are not listed)", key("block_count"))));
  }

  const gguf_file& f_;
  const std::function<std::vector<float>(const gguf_tensor_info&)>& read_;
  std::vector<std::string>* warnings_;
  gguf_rope r_;
  std::string k_;  // "<arch>.", the prefix of the architecture's keys
  json j_;         // the config.json keys recovered so far
  json sc_;        // its rope_scaling block (null: none)
  int64_t head_dim_ = 0, R_ = 0;
  double theta_ = 10000.0;
  std::optional<uint64_t> orig_;  // rope.scaling.original_context_length
  std::string type_ = "none";     // rope.scaling.type (or what the legacy keys imply)
  std::optional<double> factor_, attn_;
  const arch_rope* arch_ = nullptr;  // the row of arch_table
  const arch_nope* nope_ = nullptr;  // the row of nope_table, if any
};

gguf_rope convert(const gguf_file& f,
                  const std::function<std::vector<float>(const gguf_tensor_info&)>& read,
                  std::vector<std::string>* warnings) {
  std::vector<std::string> local;
  if (!warnings) warnings = &local;
  return converter(f, read, warnings).run();
}

}  // namespace

rope_config gguf_rope_layer(const gguf_rope& r, const std::string& layer_type) {
  if (layer_type.empty()) return r.config;
  if (!r.sliding)
    fail(
        "layer type '{}': architecture {} has one RoPE for every layer in llama.cpp (no "
        "sliding-window layer pattern{}{}); omit the layer type",
        layer_type, r.arch,
        r.freq_base_swa ? fmt::format(": {}.rope.freq_base_swa = {} is not read for it", r.arch,
                                      *r.freq_base_swa)
                        : std::string(),
        r.nope_source.empty() ? std::string() : "; " + r.nope_source);
  if (layer_type == "full_attention") {
    if (r.full_nope)
      fail(
          "layer type 'full_attention': llama.cpp applies no RoPE to {}'s full-attention layers "
          "({})",
          r.arch, r.nope_source);
    return r.config;
  }
  if (layer_type == r.sliding_type) return *r.sliding;
  fail("layer type must be one of {}, full_attention (architecture {}), got '{}'", r.sliding_type,
       r.arch, layer_type);
}

gguf_rope gguf_rope_config(const gguf_file& f, std::vector<std::string>* warnings) {
  return convert(
      f, [&](const gguf_tensor_info& t) { return gguf_read_f32(f, t); }, warnings);
}

gguf_rope gguf_rope_config(const gguf_file& f, std::span<const uint8_t> bytes,
                           std::vector<std::string>* warnings) {
  return convert(
      f, [&](const gguf_tensor_info& t) { return gguf_read_f32(f, t, bytes); }, warnings);
}

}  // namespace posenc
