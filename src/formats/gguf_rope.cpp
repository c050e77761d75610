// The RoPE configuration of a GGUF model as the Hugging Face config.json keys it came from
// (mapping in include/posenc/formats/gguf.hpp; the converter facts in docs/conventions.md,
// "GGUF").
#include <fmt/ranges.h>

#include <cmath>
#include <functional>
#include <set>
#include <tuple>

#include "posenc/core/error.hpp"
#include "posenc/encodings/rope_config.hpp"
#include "posenc/formats/gguf.hpp"

namespace posenc {
namespace {

using nlohmann::json;
constexpr double two_pi = 6.283185307179586476925286766559;

// llama.cpp's rope type per architecture (llama_model_rope_type): NORM rotates adjacent pairs,
// NEOX the two halves. Architectures whose HF q/k rows the converter permutes for NORM.
struct arch_rope {
  const char* arch;
  rope_layout layout;
  bool permuted;
};
constexpr arch_rope arch_table[] = {
    {"llama", rope_layout::interleaved, true},
    {"llama4", rope_layout::interleaved, true},
    {"deci", rope_layout::interleaved, true},
    {"baichuan", rope_layout::interleaved, true},
    {"minicpm", rope_layout::interleaved, true},
    {"granite", rope_layout::interleaved, true},
    {"granitemoe", rope_layout::interleaved, true},
    {"arcee", rope_layout::interleaved, true},
    {"mistral3", rope_layout::interleaved, true},  // LLM_ARCH_MISTRAL3: NORM; LlamaModel permutes
    {"command-r", rope_layout::interleaved, false},
    {"cohere2", rope_layout::interleaved, false},
    {"deepseek2", rope_layout::interleaved, false},
    {"falcon", rope_layout::half, false},
    {"gptneox", rope_layout::half, false},
    {"stablelm", rope_layout::half, false},
    {"qwen", rope_layout::half, false},
    {"qwen2", rope_layout::half, false},
    {"qwen2moe", rope_layout::half, false},
    {"qwen3", rope_layout::half, false},
    {"qwen3moe", rope_layout::half, false},
    {"phi2", rope_layout::half, false},
    {"phi3", rope_layout::half, false},
    {"phimoe", rope_layout::half, false},
    {"gemma", rope_layout::half, false},
    {"gemma2", rope_layout::half, false},
    {"gemma3", rope_layout::half, false},
    {"starcoder2", rope_layout::half, false},
    {"olmo2", rope_layout::half, false},
    {"olmoe", rope_layout::half, false},
    {"nemotron", rope_layout::half, false},
    {"exaone", rope_layout::half, false},
    {"minicpm3", rope_layout::half, false},
    {"gpt-oss", rope_layout::half, false},
    {"grok", rope_layout::half, false},
    {"qwen2vl", rope_layout::half, false},  // ggml MROPE: NEOX pairs, sections per component
};

// llama.cpp's sliding-window layers per architecture (src/models/<arch>.cpp
// load_arch_hparams, llama.cpp 6dafc14e50e1c248621618f3786f5005767a1d39): the default period of
// set_swa_pattern (layer i is sliding when i % P < P - 1), whether the sliding layers' base
// defaults to freq_base (else llama_hparams' 10000) and share the full layers' scaling (else
// freq_scale_swa = 1), and whether the pattern exists only with a sliding_window key > 0.
struct arch_swa {
  const char* arch;
  uint32_t period;
  bool base_from_full;
  bool scaled;
  bool needs_window;
};
constexpr arch_swa swa_table[] = {
    {"gemma2", 2, true, true, false},
    {"gemma3", 6, false, false, true},
    {"gpt-oss", 2, true, true, false},
    {"cohere2", 4, true, true, false},
};

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
    r_.arch = *arch;
    k_ = r_.arch + ".";
  }

  gguf_rope run() {
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
    read_sliding();
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
              kv->offset, kv->key, gguf_type_name(kv->type),
              kv->type == gguf_type::array
                  ? fmt::format(" of {} {}", kv->count, gguf_type_name(kv->elem_type))
                  : std::string());
    int64_t sum = 0;
    for (double v : kv->numbers) {
      if (v < 0 || v > static_cast<double>(max_dim))
        fail_io("{}: offset {}: {} entries must be in [0, {}], got {}", f_.path, kv->offset,
                kv->key, max_dim, v);
      r_.dimension_sections.push_back(static_cast<int64_t>(v));
      sum += static_cast<int64_t>(v);
    }
    if (sum != R_ / 2)
      fail_io("{}: offset {}: {} must sum to rotary_dim / 2 = {} ({} = {}), got {}", f_.path,
              kv->offset, kv->key, R_ / 2, key("rope.dimension_count"), R_, sum);
    warnings_->push_back(fmt::format(
        "{} = [{}] read (M-RoPE pairs per position component); the frequencies below are the "
        "1-D RoPE of one component",
        kv->key, fmt::join(r_.dimension_sections, ", ")));
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

  // The layout of the architecture and the config of the recovered keys.
  void make_config() {
    for (const auto& row : arch_table)
      if (r_.arch == row.arch) {
        r_.layout = row.layout;
        r_.permuted_from_hf = row.permuted;
      }
    r_.hf_config = j_;
    try {
      r_.config = rope_config_from_json(j_, warnings_);
    } catch (const invalid_argument& e) {
      throw invalid_argument(fmt::format("{}: {}", f_.path, e.what()));
    }
  }

  // Sliding-window layers, as llama.cpp's loader sets them for this architecture.
  void read_sliding() {
    const arch_swa* swa = nullptr;
    for (const auto& row : swa_table)
      if (r_.arch == row.arch) swa = &row;
    if (swa && swa->needs_window) {
      const auto window = size_key("attention.sliding_window", 0, uint64_t{1} << 53);
      if (!window || *window == 0) swa = nullptr;  // gemma3 without a window: one RoPE
    }
    if (!swa) return;
    uint32_t period = swa->period;
    std::string source = fmt::format("llama.cpp's {} default period {}", r_.arch, swa->period);
    if (const auto* kv = f_.find(key("attention.sliding_window_pattern"));
        kv && kv->type != gguf_type::array) {
      const auto p = size_key("attention.sliding_window_pattern", 0, uint64_t{1} << 20);
      period = static_cast<uint32_t>(*p);
      source = fmt::format("{} = {}", key("attention.sliding_window_pattern"), period);
    } else {
      r_.notes.push_back(fmt::format(
          "{} is {}: llama.cpp's {} default period {} taken (layer i is sliding when i % {} < {})",
          key("attention.sliding_window_pattern"),
          kv ? "a per-layer array, which llama.cpp's loader skips for this architecture" : "absent",
          r_.arch, period, period, period - 1));
    }
    double base = swa->base_from_full ? theta_ : 10000.0;
    if (r_.freq_base_swa) {
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
    if (!swa->scaled) sj.erase("rope_scaling");  // freq_scale_swa = 1: unscaled
    try {
      r_.sliding = rope_config_from_json(sj, warnings_);
    } catch (const invalid_argument& e) {
      throw invalid_argument(fmt::format("{}: sliding layers: {}", f_.path, e.what()));
    }
    r_.layer_source = source;
    if (auto n = size_key("block_count", 0, uint64_t{1} << 20))
      for (uint64_t i = 0; i < *n; ++i)
        r_.layer_types.push_back(period == 0 || i % period < period - 1 ? "sliding_attention"
                                                                        : "full_attention");
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
        "sliding-window layer pattern{}); omit the layer type",
        layer_type, r.arch,
        r.freq_base_swa ? fmt::format(": {}.rope.freq_base_swa = {} is not read for it", r.arch,
                                      *r.freq_base_swa)
                        : std::string());
  if (layer_type == "full_attention") return r.config;
  if (layer_type == "sliding_attention") return *r.sliding;
  fail("layer type must be one of sliding_attention, full_attention (architecture {}), got '{}'",
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
