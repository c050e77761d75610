// posenc rope freqs | rope apply | rope diff: RoPE frequencies for a model config (Hugging Face
// config.json or GGUF) or explicit parameters, the rotation of a (T, H, D) .npy tensor at given
// positions, and the comparison of two such configurations pair by pair. Thin: parse, call the
// library, print.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>

#include "cli.hpp"
#include "posenc/core/error.hpp"
#include "posenc/core/file.hpp"
#include "posenc/core/npy.hpp"
#include "posenc/encodings/rope.hpp"
#include "posenc/formats/gguf.hpp"
#include "posenc/formats/hf_config.hpp"
#include "rope_json.hpp"

namespace posenc::cli {
namespace {

// Either --hf-config FILE, --gguf FILE or explicit parameters, which are turned into the
// equivalent config.json keys and read by the same code (same validation, precedence and
// warnings). A GGUF file's metadata is mapped to those keys too (formats/gguf.hpp).
struct rope_params {
  std::string hf_config, gguf;
  std::string layer_type;  // --layer-type: one layer type's RoPE of a per-layer config
  int64_t head_dim = 0;
  double theta = 10000, partial = 1, factor = 1;
  std::string scaling = "default";
  int64_t max_pos = 0, original_max_pos = 0;
  double beta_fast = 32, beta_slow = 1;
  std::string truncate = "true";
  double attention_factor = 1, mscale = 1, mscale_all_dim = 1;
  std::string short_factor, long_factor;
  double low_freq_factor = 1, high_freq_factor = 4;
  int64_t seq_len = -1;  // -1: not given
  CLI::App* sub = nullptr;
  // Explicit parameters set from a `params:` spec of rope diff (flag names with "--").
  std::set<std::string> set_names;
};

struct freqs_opts {
  rope_params p;
  out_format format = out_format::text;
};

struct apply_opts {
  rope_params p;
  out_format format = out_format::text;
  std::string x, positions, out, layout, angle = "exact";
};

void add_rope_params(CLI::App* sub, rope_params& p) {
  p.sub = sub;
  auto* cfg = sub->add_option("--hf-config", p.hf_config,
                              "Hugging Face config.json (rope_theta, rope_scaling or "
                              "rope_parameters, partial_rotary_factor, head_dim, ...)");
  std::vector<CLI::Option*> params;
  params.push_back(sub->add_option("--head-dim", p.head_dim, "Head dim D"));
  for (auto* f : add_rope_flags(sub, p)) params.push_back(f);
  auto* lt = sub->add_option("--layer-type", p.layer_type,
                             "Layer type of a per-layer config (e.g. sliding_attention or "
                             "full_attention; posenc rope layers lists them); needs --hf-config "
                             "or --gguf");
  auto* gg = sub->add_option("--gguf", p.gguf,
                             "GGUF model file (llama.cpp): RoPE keys and factor tensors, read "
                             "without loading the weights");
  gg->excludes(cfg);
  for (auto* o : params) cfg->excludes(o), gg->excludes(o), lt->excludes(o);
  sub->add_option("--seq-len", p.seq_len, "Current sequence length (drives dynamic and longrope)");
}

bool given(const rope_params& p, const char* name) {
  return p.sub ? p.sub->count(name) > 0 : p.set_names.count(name) > 0;
}

void print_warnings(const std::vector<std::string>& warnings, const std::string& prefix = "") {
  for (const auto& w : warnings)
    std::fprintf(stderr, "posenc: warning: %s%s\n", prefix.c_str(), w.c_str());
}

// llama.cpp's defaults taken for the keys a GGUF file omits (gguf_rope::notes).
void print_notes(const std::vector<std::string>& notes, const std::string& prefix = "") {
  for (const auto& n : notes)
    std::fprintf(stderr, "posenc: note: %s%s\n", prefix.c_str(), n.c_str());
}

// Builds the config and prints any precedence warnings on stderr.
rope_config make_config(const rope_params& p, const std::string& prefix = "") {
  std::vector<std::string> warnings;
  rope_config c;
  if (!p.layer_type.empty() && p.hf_config.empty() && p.gguf.empty())
    fail("--layer-type needs --hf-config (a per-layer config.json) or --gguf");
  if (!p.hf_config.empty()) {
    c = rope_config_from_file(p.hf_config, p.layer_type, &warnings);
  } else if (!p.gguf.empty()) {
    const auto g = gguf_rope_config(gguf_read(p.gguf), &warnings);
    print_notes(g.notes, prefix);
    try {
      c = gguf_rope_layer(g, p.layer_type);
    } catch (const invalid_argument& e) {
      throw invalid_argument(fmt::format("--layer-type: {}: {}", p.gguf, e.what()));
    }
  } else {
    if (!given(p, "--head-dim")) fail("--head-dim (or --hf-config or --gguf) is required");
    if (p.head_dim < 2 || p.head_dim > (int64_t{1} << 20))
      fail("--head-dim must be in [2, 2^20], got {}", p.head_dim);
    const nlohmann::json j =
        rope_flags_json(p, p.head_dim, [](const auto& x, const char* n) { return given(x, n); });
    c = rope_config_from_json(j, &warnings);
  }
  print_warnings(warnings, prefix);
  return c;
}

void run_freqs(const freqs_opts& o) {
  const auto c = make_config(o.p);
  if (given(o.p, "--seq-len") && o.p.seq_len < 0)
    fail("--seq-len must be >= 0, got {}", o.p.seq_len);
  const int64_t seq_len = std::max<int64_t>(o.p.seq_len, 0);
  const auto f = rope_frequencies(c, seq_len);
  if (o.format == out_format::json) {
    nlohmann::ordered_json j;
    j["rotary_dim"] = f.rotary_dim;
    j["inv_freq"] = f.inv_freq;
    j["attention_factor"] = f.attention_factor;
    j["scaling"] = rope_type_name(f.type);
    j["head_dim"] = f.head_dim;
    j["theta"] = c.theta;
    j["factor"] = c.factor;
    if (c.dynamic_alpha > 0) j["alpha"] = c.dynamic_alpha;
    if (c.llama_4_scaling_beta > 0) {
      j["llama_4_scaling_beta"] = c.llama_4_scaling_beta;
      j["llama_4_scaling_floor"] = c.llama_4_scaling_floor;
    }
    j["seq_len"] = seq_len;
    if (!o.p.layer_type.empty()) j["layer_type"] = o.p.layer_type;
    std::printf("%s\n", j.dump(2).c_str());
  } else if (o.format == out_format::csv) {
    std::printf("pair,inv_freq,wavelength\n");
    for (size_t i = 0; i < f.inv_freq.size(); ++i)
      std::printf("%zu,%s,%s\n", i, num(f.inv_freq[i]).c_str(),
                  num(2 * 3.14159265358979323846 / f.inv_freq[i]).c_str());
  } else {
    std::printf(
        "scaling %s, head_dim %lld, rotary_dim %lld, theta %s, factor %s, "
        "attention_factor %s, seq_len %lld\n",
        rope_type_name(f.type), static_cast<long long>(f.head_dim),
        static_cast<long long>(f.rotary_dim), num(c.theta).c_str(), num(c.factor).c_str(),
        num(f.attention_factor).c_str(), static_cast<long long>(seq_len));
    if (c.dynamic_alpha > 0)
      std::printf("alpha %s: base theta * alpha^(R/(R-2)) up to max_position_embeddings %lld\n",
                  num(c.dynamic_alpha).c_str(), static_cast<long long>(c.max_position_embeddings));
    if (c.llama_4_scaling_beta > 0)
      std::printf(
          "llama_4_scaling_beta %s: attention scales its rotated queries by 1 + beta * log(1 + "
          "floor(pos / %lld)) (posenc attend --hf-config applies it)\n",
          num(c.llama_4_scaling_beta).c_str(), static_cast<long long>(c.llama_4_scaling_floor));
    if (!o.p.layer_type.empty()) std::printf("layer type %s\n", o.p.layer_type.c_str());
    for (size_t i = 0; i < f.inv_freq.size(); ++i)
      std::printf("%4zu  inv_freq %-24s wavelength %s\n", i, num(f.inv_freq[i]).c_str(),
                  num(2 * 3.14159265358979323846 / f.inv_freq[i]).c_str());
  }
}

void run_apply(const apply_opts& o) {
  const auto layout = rope_layout_from_name(o.layout, "--layout");
  const auto angle = rope_angle_from_name(o.angle, "--angle");
  if (o.out.empty()) fail("--out must name a file, got an empty value");
  const auto c = make_config(o.p);
  auto x = read_npy(o.x);
  if (x.type != dtype::f32 && x.type != dtype::f64)
    fail("--x must be float32 or float64, got {} in {}", dtype_name(x.type), o.x);
  if (x.shape.size() != 3) fail("--x must have shape (T, H, D), got {} in {}", x.shape_str(), o.x);
  const auto p = read_npy(o.positions);
  if (p.type != dtype::i64 && p.type != dtype::i32)
    fail("--positions must be int64 (or int32), got {} in {}", dtype_name(p.type), o.positions);
  const int64_t T = x.shape[0], H = x.shape[1], D = x.shape[2];
  // (3, T): M-RoPE ids (temporal, height, width) for a config with mrope_section.
  const bool three = p.shape.size() == 2 && p.shape[0] == 3 && p.shape[1] == T;
  if (!three && (p.shape.size() != 1 || p.shape[0] != T))
    fail(
        "--positions must have shape (T,) = ({},) or, for M-RoPE, (3, T) = (3, {}) to match --x "
        "{}, got {}",
        T, T, x.shape_str(), p.shape_str());
  if (three && c.mrope_section.empty())
    fail(
        "--positions of shape (3, T) need an M-RoPE config (mrope_section in rope_scaling or "
        "rope_parameters), got a 1-D RoPE config");
  if (D != c.head_dim)
    fail("--x must have shape (T, H, D) with D = head_dim = {}, got {}", c.head_dim, x.shape_str());
  const auto pos = p.to_i64();
  for (int64_t v : pos)
    if (v < 0) fail("--positions must be >= 0, got {}", v);
  // Like HF's forward (dynamic_rope_update), the sequence length defaults to max position + 1.
  if (given(o.p, "--seq-len") && o.p.seq_len < 0)
    fail("--seq-len must be >= 0, got {}", o.p.seq_len);
  int64_t seq_len = o.p.seq_len;
  if (seq_len < 0) seq_len = pos.empty() ? 0 : *std::max_element(pos.begin(), pos.end()) + 1;
  const auto f = rope_frequencies(c, seq_len);
  if (three) {
    const auto comp = mrope_components(c.mrope_section, c.mrope_interleaved, f.rotary_dim / 2);
    if (x.type == dtype::f32)
      mrope_apply(f, comp, layout, angle, pos, x.as<float>(), T, H, D);
    else
      mrope_apply(f, comp, layout, angle, pos, x.as<double>(), T, H, D);
  } else if (x.type == dtype::f32) {
    rope_apply(f, layout, angle, pos, x.as<float>(), T, H, D);
  } else {
    rope_apply(f, layout, angle, pos, x.as<double>(), T, H, D);
  }
  write_npy(o.out, x);
  if (o.format == out_format::json) {
    nlohmann::ordered_json j;
    j["out"] = o.out;
    j["shape"] = x.shape;
    j["dtype"] = dtype_name(x.type);
    j["layout"] = rope_layout_name(layout);
    j["angle"] = rope_angle_name(angle);
    j["scaling"] = rope_type_name(f.type);
    j["rotary_dim"] = f.rotary_dim;
    j["attention_factor"] = f.attention_factor;
    j["seq_len"] = seq_len;
    std::printf("%s\n", j.dump(2).c_str());
  } else if (o.format == out_format::csv) {
    std::printf("out,T,H,D,dtype,layout,angle,scaling,rotary_dim,attention_factor,seq_len\n");
    std::printf("%s,%lld,%lld,%lld,%s,%s,%s,%s,%lld,%s,%lld\n", o.out.c_str(),
                static_cast<long long>(T), static_cast<long long>(H), static_cast<long long>(D),
                dtype_name(x.type), rope_layout_name(layout), rope_angle_name(angle),
                rope_type_name(f.type), static_cast<long long>(f.rotary_dim),
                num(f.attention_factor).c_str(), static_cast<long long>(seq_len));
  } else {
    std::printf(
        "wrote %s: %s %s, layout %s, angle %s, scaling %s, rotary_dim %lld, "
        "attention_factor %s, seq_len %lld\n",
        o.out.c_str(), dtype_name(x.type), x.shape_str().c_str(), rope_layout_name(layout),
        rope_angle_name(angle), rope_type_name(f.type), static_cast<long long>(f.rotary_dim),
        num(f.attention_factor).c_str(), static_cast<long long>(seq_len));
  }
}

// ---- rope diff -------------------------------------------------------------------------------

// One side of a comparison: where it came from, its config, frequencies and pair layout
// relative to the checkpoint's q/k rows.
struct diff_side {
  std::string name;  // "A" or "B"
  std::string spec;  // as given
  std::string kind;  // hf, gguf, params
  rope_config c;
  rope_freqs f;
  std::optional<rope_layout> layout;
  std::string layout_note;
  // gguf: the architecture, and a yarn_attn_factor llama.cpp does not apply (with its note).
  std::string arch;
  std::optional<double> unused_yarn_attn_factor;
  std::string yarn_attn_factor_note;
};

// "k=v,k=v" with the flag names of rope freqs (without "--"); list values separated by ';'.
rope_params parse_params_spec(const std::string& spec, std::optional<rope_layout>* layout) {
  rope_params p;
  static const std::set<std::string> keys = {
      "head-dim",         "theta",        "partial",          "scaling",
      "factor",           "max-pos",      "original-max-pos", "beta-fast",
      "beta-slow",        "truncate",     "attention-factor", "mscale",
      "mscale-all-dim",   "short-factor", "long-factor",      "low-freq-factor",
      "high-freq-factor", "layout"};
  std::string allowed;
  for (const auto& k : keys) allowed += (allowed.empty() ? "" : ", ") + k;
  size_t pos = 0;
  while (pos < spec.size()) {
    size_t comma = spec.find(',', pos);
    if (comma == std::string::npos) comma = spec.size();
    const std::string tok = spec.substr(pos, comma - pos);
    pos = comma + 1;
    const size_t eq = tok.find('=');
    if (eq == std::string::npos || eq == 0)
      fail("each parameter must be key=value, got '{}' in '{}'", tok, spec);
    const std::string k = tok.substr(0, eq), v = tok.substr(eq + 1);
    if (!keys.count(k)) fail("unknown parameter '{}'; allowed: {}", k, allowed);
    const std::string& what = k;
    auto number = [&]() {
      const auto d = parse_doubles(v, what);
      if (d.size() != 1) fail("{} must be one number, got '{}'", what, v);
      return d[0];
    };
    auto integer = [&]() {
      const auto d = parse_ints(v, what);
      if (d.size() != 1) fail("{} must be one integer, got '{}'", what, v);
      return d[0];
    };
    auto list = [&]() {
      std::string t = v;
      std::replace(t.begin(), t.end(), ';', ',');
      return t;
    };
    if (k == "head-dim")
      p.head_dim = integer();
    else if (k == "theta")
      p.theta = number();
    else if (k == "partial")
      p.partial = number();
    else if (k == "scaling")
      p.scaling = v;
    else if (k == "factor")
      p.factor = number();
    else if (k == "max-pos")
      p.max_pos = integer();
    else if (k == "original-max-pos")
      p.original_max_pos = integer();
    else if (k == "beta-fast")
      p.beta_fast = number();
    else if (k == "beta-slow")
      p.beta_slow = number();
    else if (k == "truncate")
      p.truncate = v;
    else if (k == "attention-factor")
      p.attention_factor = number();
    else if (k == "mscale")
      p.mscale = number();
    else if (k == "mscale-all-dim")
      p.mscale_all_dim = number();
    else if (k == "short-factor")
      p.short_factor = list();
    else if (k == "long-factor")
      p.long_factor = list();
    else if (k == "low-freq-factor")
      p.low_freq_factor = number();
    else if (k == "high-freq-factor")
      p.high_freq_factor = number();
    else if (k == "layout")
      *layout = rope_layout_from_name(v, what);
    p.set_names.insert("--" + k);
  }
  return p;
}

bool file_starts_with_gguf(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  char m[4] = {};
  return in.read(m, 4) && std::string(m, 4) == "GGUF";
}

diff_side make_side(const std::string& name, const std::string& spec, int64_t seq_len) {
  diff_side s;
  s.name = name;
  s.spec = spec;
  std::string kind, rest = spec;
  for (const char* k : {"hf", "gguf", "params"}) {
    const std::string pre = std::string(k) + ":";
    if (spec.rfind(pre, 0) == 0) kind = k, rest = spec.substr(pre.size());
  }
  if (kind.empty()) kind = file_starts_with_gguf(spec) ? "gguf" : "hf";
  if (rest.empty())
    fail("a side must be hf:CONFIG.json, gguf:MODEL.gguf, params:KEY=VALUE,... or a file, got '{}'",
         spec);
  s.kind = kind;
  std::vector<std::string> warnings;
  const std::string prefix = name + ": ";
  if (kind == "hf") {
    s.c = rope_config_from_file(rest, &warnings);
    s.layout = hf_rope_layout(hf_config_read(rest));
    s.layout_note = s.layout ? "transformers, by model_type" : "config names no model class";
  } else if (kind == "gguf") {
    const auto g = gguf_rope_config(gguf_read(rest), &warnings);
    print_notes(g.notes, prefix);
    s.c = g.config;
    s.layout = g.layout;
    s.arch = g.arch;
    if (g.yarn_attn_factor && !g.yarn_attn_factor_used) {
      s.unused_yarn_attn_factor = g.yarn_attn_factor;
      s.yarn_attn_factor_note = g.yarn_attn_factor_note;
    }
    if (!g.layout) {
      s.layout_note = fmt::format("architecture {} not in posenc's table", g.arch);
    } else if (g.permuted_from_hf) {
      // ggml NORM on q/k rows that llama.cpp's converter permuted from HF's half layout: the
      // rotation of the original checkpoint's pairs is HF's half.
      s.layout = rope_layout::half;
      s.layout_note =
          fmt::format("arch {}: ggml NORM on q/k rows permuted by the converter", g.arch);
    } else {
      s.layout_note =
          fmt::format("arch {}: ggml {}", g.arch, *g.layout == rope_layout::half ? "NEOX" : "NORM");
    }
  } else {
    rope_params p = parse_params_spec(rest, &s.layout);
    s.c = make_config(p, prefix);
    s.layout_note = s.layout ? "given" : "not given";
  }
  print_warnings(warnings, prefix);
  s.f = rope_frequencies(s.c, seq_len);
  return s;
}

struct diff_opts {
  std::string a, b;
  int64_t seq_len = 0;
  bool all = false;
  out_format format = out_format::text;
};

// Relative tolerance for "equivalent within float32": two float32 roundings of one value
// differ by at most 2 * 2^-24 relative.
constexpr double f32_rel = 0x1p-23;

bool close(double x, double y, double rel = f32_rel) {
  return std::fabs(x - y) <= rel * std::max(std::fabs(x), std::fabs(y));
}

bool all_close(const std::vector<double>& x, const std::vector<double>& y) {
  if (x.size() != y.size()) return false;
  for (size_t i = 0; i < x.size(); ++i)
    if (!close(x[i], y[i])) return false;
  return true;
}

std::string side_summary(const diff_side& s) {
  return fmt::format(
      "scaling {}, head_dim {}, rotary_dim {}, theta {}, factor {}, attention_factor {}, "
      "layout {} ({})",
      rope_type_name(s.c.type), s.c.head_dim, s.c.rotary_dim, num(s.c.theta), num(s.c.factor),
      num(s.f.attention_factor), s.layout ? rope_layout_name(*s.layout) : "unknown", s.layout_note);
}

// Frequencies of a longrope side with the other factor list than the one seq_len selected.
std::optional<std::vector<double>> longrope_other(const diff_side& s, int64_t seq_len) {
  if (s.c.type != rope_type::longrope) return std::nullopt;
  const int64_t orig = s.c.original_max_position_embeddings > 0
                           ? s.c.original_max_position_embeddings
                           : s.c.max_position_embeddings;
  const bool uses_long = seq_len > orig;
  return rope_frequencies(s.c, uses_long ? 0 : orig + 1).inv_freq;
}

// YaRN truncate: HF's truncate = false keeps the correction range's boundaries fractional;
// llama.cpp (GGUF, no truncate key) always floors / ceils them. A and B are yarn sides of one
// rotary width with other truncate values; ratio is B/A per pair.
std::string yarn_truncate_cause(const diff_side& A, const diff_side& B,
                                const std::vector<double>& ratio) {
  const auto* rounded = A.c.truncate ? &A : &B;
  const auto* exact = rounded == &A ? &B : &A;
  const auto& c = exact->c;
  const auto dim = [&](double beta) {
    return static_cast<double>(c.rotary_dim) *
           std::log(static_cast<double>(c.original_max_position_embeddings > 0
                                            ? c.original_max_position_embeddings
                                            : c.max_position_embeddings) /
                    (beta * 2 * 3.14159265358979323846)) /
           (2 * std::log(c.theta));
  };
  const double lo = dim(c.beta_fast), hi = dim(c.beta_slow);
  size_t first = ratio.size(), last = 0, worst = 0;
  double worst_rel = 0;
  for (size_t i = 0; i < ratio.size(); ++i) {
    if (close(ratio[i], 1)) continue;
    first = std::min(first, i), last = i;
    if (std::fabs(ratio[i] - 1) > worst_rel) worst_rel = std::fabs(ratio[i] - 1), worst = i;
  }
  const auto side_says = [](const diff_side& x) {
    if (x.kind == "gguf")
      return fmt::format(
          "{} rounds them (GGUF has no truncate key: llama.cpp always floors / "
          "ceils the correction range)",
          x.name);
    if (x.kind == "hf")
      return fmt::format("{} has truncate {} in config.json", x.name,
                         x.c.truncate ? "true" : "false");
    return fmt::format("{} has truncate {}", x.name, x.c.truncate ? "true" : "false");
  };
  return fmt::format(
      "YaRN truncate: {}, {}: the correction range [{}, {}] (pairs) is kept fractional in {} "
      "and rounded to [{}, {}] in {}; pairs {}-{} differ, max |B/A - 1| = {} at pair {}",
      side_says(*exact), side_says(*rounded), num(lo), num(hi), exact->name,
      num(std::max(std::floor(lo), 0.0)),
      num(std::min(std::ceil(hi), static_cast<double>(c.rotary_dim - 1))), rounded->name, first,
      last, num(worst_rel), worst);
}

// LongRoPE: the other list of one side gives the other side's frequencies.
void longrope_swap_causes(const diff_side& A, const diff_side& B, int64_t seq_len,
                          std::vector<std::string>& out) {
  for (const auto* x : {&A, &B}) {
    const auto* y = x == &A ? &B : &A;
    if (auto other = longrope_other(*x, seq_len); other && all_close(*other, y->f.inv_freq))
      out.push_back(
          fmt::format("LongRoPE long/short swapped: {}'s {} gives {}'s frequencies at seq_len {} "
                      "(factor lists exchanged, or the switch at another length)",
                      x->name,
                      seq_len > (x->c.original_max_position_embeddings > 0
                                     ? x->c.original_max_position_embeddings
                                     : x->c.max_position_embeddings)
                          ? "short_factor"
                          : "long_factor",
                      y->name, seq_len));
  }
}

// Every pair's frequency off by one ratio r = B/A (of two linear-type sides, r = s_A / s_B).
std::string uniform_ratio_cause(const diff_side& A, const diff_side& B, double r) {
  const double sa = A.c.factor, sb = B.c.factor;
  std::string what =
      fmt::format("every pair's frequency differs by the same ratio B/A = {}", num(r));
  // One factor the other's square is a factor applied twice; r equal to one side's factor (or
  // its inverse) is a factor not applied.
  const auto twice = [&](double s, double s2) {
    return s > 1 && close(s2, s * s, 0x1p-20) && close(r, sa / sb, 0x1p-20);
  };
  if (twice(sa, sb) || twice(sb, sa)) {
    const bool b_twice = sb > sa;
    what += fmt::format("; factor {} applied twice in {} ({} = {}^2)", num(b_twice ? sa : sb),
                        b_twice ? "B" : "A", num(b_twice ? sb : sa), num(b_twice ? sa : sb));
  } else {
    for (double s : {sa, sb}) {
      if (s == 1) continue;
      if (close(r, 1 / s, 0x1p-20) || close(r, s, 0x1p-20)) {
        what += fmt::format("; factor {} applied on one side only (linear scaling not applied)",
                            num(s));
        break;
      }
    }
  }
  return what;
}

// High frequencies agree, low ones do not: a factor applied to the low frequencies only.
std::string low_frequency_cause(const diff_side& A, const diff_side& B,
                                const std::vector<double>& ratio) {
  const size_t n = ratio.size();
  const auto* scaled = ratio[n - 1] < 1 ? &B : &A;
  const auto* plain = scaled == &A ? &B : &A;
  if (A.c.theta != B.c.theta)
    return fmt::format("rope_theta differs: {} in A, {} in B", num(A.c.theta), num(B.c.theta));
  if (scaled->c.type == rope_type::llama3)
    return fmt::format(
        "Llama 3.1 smoothing missing in {}: {} is llama3 (factor {}, low_freq_factor {}, "
        "high_freq_factor {}), {} is {}{}",
        plain->name, scaled->name, num(scaled->c.factor), num(scaled->c.low_freq_factor),
        num(scaled->c.high_freq_factor), plain->name, rope_type_name(plain->c.type),
        plain->c.type == rope_type::llama3 ? " with other llama3 parameters" : "");
  if (scaled->c.type == rope_type::yarn)
    return fmt::format("YaRN ramp missing in {}: {} is yarn (factor {}), {} is {}", plain->name,
                       scaled->name, num(scaled->c.factor), plain->name,
                       rope_type_name(plain->c.type));
  size_t i = 0;
  while (i < n && close(ratio[i], 1)) ++i;
  return fmt::format(
      "only the low frequencies differ (pair {} onwards): a factor applied to the "
      "low-frequency pairs on one side only (Llama 3.1 smoothing or a YaRN ramp)",
      i);
}

// Frequencies that differ between sides of one rotary width (YaRN's truncate aside).
void frequency_causes(const diff_side& A, const diff_side& B, int64_t seq_len,
                      const std::vector<double>& ratio, std::vector<std::string>& out) {
  longrope_swap_causes(A, B, seq_len, out);
  const size_t n = ratio.size();
  bool uniform = true;
  for (double r : ratio) uniform = uniform && close(r, ratio[0], 0x1p-20);
  if (uniform)
    out.push_back(uniform_ratio_cause(A, B, ratio[0]));
  else if (n >= 2 && close(ratio[0], 1, 0x1p-20) && !close(ratio[n - 1], 1, 0x1p-20))
    out.push_back(low_frequency_cause(A, B, ratio));
  else if (A.c.theta != B.c.theta)
    out.push_back(
        fmt::format("rope_theta differs: {} in A, {} in B", num(A.c.theta), num(B.c.theta)));
}

// Attention factors that differ: the magnitude each known convention gives, named where one
// side's factor matches it.
std::string attention_factor_cause(const diff_side& A, const diff_side& B) {
  const auto& a = A.f;
  const auto& b = B.f;
  const double lo = std::min(a.attention_factor, b.attention_factor);
  const double hi = std::max(a.attention_factor, b.attention_factor);
  const auto* big = a.attention_factor > b.attention_factor ? &A : &B;
  const auto* small = big == &A ? &B : &A;
  std::string what = fmt::format("attention factor {} in A, {} in B", num(a.attention_factor),
                                 num(b.attention_factor));
  bool named = false;
  // A GGUF's yarn_attn_factor (the config's attention_factor) that llama.cpp does not apply.
  for (const auto* x : {&A, &B}) {
    const auto* y = x == &A ? &B : &A;
    if (named || !x->unused_yarn_attn_factor) continue;
    if (close(y->f.attention_factor, *x->unused_yarn_attn_factor, 0x1p-20)) {
      what += fmt::format("; {} (arch {}): {}", x->name, x->arch, x->yarn_attn_factor_note);
      named = true;
    }
  }
  // DeepSeek: HF's magnitude is get_mscale(s, mscale) / get_mscale(s, mscale_all_dim); a
  // conversion that drops the pair (GGUF yarn_log_multiplier) falls back to 0.1 ln s + 1.
  for (const auto* x : {&A, &B}) {
    const auto* y = x == &A ? &B : &A;
    if (named || x->c.type != rope_type::yarn || !x->c.mscale || !x->c.mscale_all_dim ||
        x->c.attention_factor || x->c.factor <= 1)
      continue;
    const double m = 0.1 * std::log(x->c.factor) + 1;
    if (close(y->f.attention_factor, m, 0x1p-20)) {
      what += fmt::format(
          "; DeepSeek mscale: {} uses get_mscale({}, mscale = {}) / get_mscale({}, "
          "mscale_all_dim = {}) = {}, {} the default 0.1 ln({}) + 1 (mscale / mscale_all_dim, "
          "GGUF yarn_log_multiplier, dropped in conversion)",
          x->name, num(x->c.factor), num(*x->c.mscale), num(x->c.factor), num(*x->c.mscale_all_dim),
          num(x->f.attention_factor), y->name, num(x->c.factor));
      named = true;
    }
  }
  for (const auto* x : {&A, &B}) {
    if (named || x->c.factor <= 1) continue;
    const double m = 0.1 * std::log(x->c.factor) + 1;  // YaRN's default magnitude
    if (close(hi, m, 0x1p-20) && close(lo, 1, 0x1p-20))
      what += fmt::format("; YaRN magnitude 0.1 ln({}) + 1 = {} missing in {}", num(x->c.factor),
                          num(m), small->name),
          named = true;
    else if (close(hi, m * m, 0x1p-20) && close(lo, m, 0x1p-20))
      what += fmt::format("; YaRN magnitude {} applied twice in {}", num(m), big->name),
          named = true;
    else if (close(hi, m * m, 0x1p-20) && close(lo, 1, 0x1p-20))
      what += fmt::format("; YaRN magnitude {} applied twice in {} and missing in {}", num(m),
                          big->name, small->name),
          named = true;
    const int64_t orig = x->c.original_max_position_embeddings;
    if (!named && orig > 1) {
      const double l = std::sqrt(1 + std::log(x->c.factor) / std::log(static_cast<double>(orig)));
      if (close(hi, l, 0x1p-20) && close(lo, 1, 0x1p-20))
        what += fmt::format("; LongRoPE magnitude sqrt(1 + ln {} / ln {}) = {} missing in {}",
                            num(x->c.factor), orig, num(l), small->name),
            named = true;
    }
  }
  return what;
}

// The known patterns behind a difference, most specific first.
std::vector<std::string> likely_causes(const diff_side& A, const diff_side& B, int64_t seq_len,
                                       const std::vector<double>& ratio, bool freqs_same,
                                       bool attn_same) {
  std::vector<std::string> out;
  if (A.c.rotary_dim != B.c.rotary_dim)
    out.push_back(
        fmt::format("partial rotary width lost: rotary_dim {} in A, {} in B (head_dim {} / {}); "
                    "partial_rotary_factor applied on one side only",
                    A.c.rotary_dim, B.c.rotary_dim, A.c.head_dim, B.c.head_dim));
  if (A.layout && B.layout && *A.layout != *B.layout)
    out.push_back(fmt::format(
        "NeoX/GPT-J layout: A pairs {} ({}), B pairs {} ({}); a q/k permutation missing or "
        "applied twice in conversion",
        rope_layout_name(*A.layout),
        *A.layout == rope_layout::half ? "x[i], x[i+R/2]" : "x[2i], x[2i+1]",
        rope_layout_name(*B.layout),
        *B.layout == rope_layout::half ? "x[i], x[i+R/2]" : "x[2i], x[2i+1]"));
  if (!freqs_same && A.c.rotary_dim == B.c.rotary_dim && A.c.type == rope_type::yarn &&
      B.c.type == rope_type::yarn && A.c.truncate != B.c.truncate)
    out.push_back(yarn_truncate_cause(A, B, ratio));
  else if (!freqs_same && A.c.rotary_dim == B.c.rotary_dim)
    frequency_causes(A, B, seq_len, ratio, out);
  if (!attn_same) out.push_back(attention_factor_cause(A, B));
  return out;
}

// One side of the diff as --format json prints it.
nlohmann::ordered_json diff_side_json(const diff_side& s) {
  nlohmann::ordered_json x;
  x["spec"] = s.spec;
  x["kind"] = s.kind;
  x["scaling"] = rope_type_name(s.c.type);
  x["head_dim"] = s.c.head_dim;
  x["rotary_dim"] = s.c.rotary_dim;
  x["theta"] = s.c.theta;
  x["factor"] = s.c.factor;
  x["attention_factor"] = s.f.attention_factor;
  x["layout"] = s.layout ? nlohmann::ordered_json(rope_layout_name(*s.layout)) : nullptr;
  x["layout_note"] = s.layout_note;
  return x;
}

// Each pair's inverse frequency in A and B and their ratio, as --format json prints them.
nlohmann::ordered_json diff_pairs_json(const diff_side& A, const diff_side& B,
                                       const std::vector<double>& ratio) {
  nlohmann::ordered_json pairs = nlohmann::ordered_json::array();
  for (size_t i = 0; i < ratio.size(); ++i)
    pairs.push_back({{"pair", i},
                     {"a", A.f.inv_freq[i]},
                     {"b", B.f.inv_freq[i]},
                     {"ratio", ratio[i]},
                     {"differs", !close(A.f.inv_freq[i], B.f.inv_freq[i])}});
  return pairs;
}

void run_diff(const diff_opts& o) {
  if (o.seq_len < 0) fail("--seq-len must be >= 0, got {}", o.seq_len);
  // Errors name the side they come from.
  const auto side = [&](const char* name, const std::string& spec) {
    try {
      return make_side(name, spec, o.seq_len);
    } catch (const invalid_argument& e) {
      throw invalid_argument(fmt::format("{} ({}): {}", name, spec, e.what()));
    } catch (const io_error& e) {
      throw io_error(fmt::format("{} ({}): {}", name, spec, e.what()));
    }
  };
  const auto A = side("A", o.a);
  const auto B = side("B", o.b);
  const size_t n = std::min(A.f.inv_freq.size(), B.f.inv_freq.size());
  std::vector<double> ratio(n);
  size_t n_diff = 0, worst = 0;
  double worst_rel = 0;
  for (size_t i = 0; i < n; ++i) {
    ratio[i] = B.f.inv_freq[i] / A.f.inv_freq[i];
    const double rel = std::fabs(ratio[i] - 1);
    if (!close(A.f.inv_freq[i], B.f.inv_freq[i])) ++n_diff;
    if (rel > worst_rel) worst_rel = rel, worst = i;
  }
  const bool freqs_same = n_diff == 0 && A.f.inv_freq.size() == B.f.inv_freq.size();
  const bool attn_same = close(A.f.attention_factor, B.f.attention_factor);
  const bool width_same = A.c.rotary_dim == B.c.rotary_dim;
  const bool layout_same = !A.layout || !B.layout || *A.layout == *B.layout;
  const bool equivalent = freqs_same && attn_same && width_same && layout_same;
  const auto causes = equivalent ? std::vector<std::string>{}
                                 : likely_causes(A, B, o.seq_len, ratio, freqs_same, attn_same);
  const char* verdict = equivalent ? "equivalent within float32" : "differ";

  if (o.format == out_format::json) {
    nlohmann::ordered_json j;
    for (const auto* s : {&A, &B}) j[s->name] = diff_side_json(*s);
    j["seq_len"] = o.seq_len;
    j["tolerance"] = f32_rel;
    j["pairs"] = diff_pairs_json(A, B, ratio);
    j["pairs_differing"] = n_diff;
    j["max_rel_difference"] = worst_rel;
    j["attention_factor_same"] = attn_same;
    j["rotary_dim_same"] = width_same;
    j["layout_same"] = layout_same;
    j["verdict"] = verdict;
    j["likely_causes"] = causes;
    std::printf("%s\n", j.dump(2).c_str());
  } else if (o.format == out_format::csv) {
    std::printf("pair,inv_freq_a,inv_freq_b,ratio,differs\n");
    for (size_t i = 0; i < n; ++i)
      std::printf("%zu,%s,%s,%s,%s\n", i, num(A.f.inv_freq[i]).c_str(),
                  num(B.f.inv_freq[i]).c_str(), num(ratio[i]).c_str(),
                  close(A.f.inv_freq[i], B.f.inv_freq[i]) ? "false" : "true");
  } else {
    std::printf("A  %s\n   %s\n", A.spec.c_str(), side_summary(A).c_str());
    std::printf("B  %s\n   %s\n", B.spec.c_str(), side_summary(B).c_str());
    std::printf("seq_len %lld; tolerance |B/A - 1| <= 2^-23 (float32)\n",
                static_cast<long long>(o.seq_len));
    std::printf("pairs: %zu of %zu differ, max |B/A - 1| = %s at pair %zu\n", n_diff, n,
                num(worst_rel).c_str(), worst);
    if (n_diff > 0 || o.all) {
      std::printf("%6s  %-24s %-24s %s\n", "pair", "inv_freq A", "inv_freq B", "B/A");
      for (size_t i = 0; i < n; ++i)
        if (o.all || !close(A.f.inv_freq[i], B.f.inv_freq[i]))
          std::printf("%6zu  %-24s %-24s %s\n", i, num(A.f.inv_freq[i]).c_str(),
                      num(B.f.inv_freq[i]).c_str(), num(ratio[i]).c_str());
    }
    std::printf("attention_factor: %s vs %s (%s)\n", num(A.f.attention_factor).c_str(),
                num(B.f.attention_factor).c_str(), attn_same ? "same" : "differs");
    std::printf("rotary_dim: %lld vs %lld (%s)\n", static_cast<long long>(A.c.rotary_dim),
                static_cast<long long>(B.c.rotary_dim), width_same ? "same" : "differs");
    std::printf("layout: %s vs %s (%s)\n", A.layout ? rope_layout_name(*A.layout) : "unknown",
                B.layout ? rope_layout_name(*B.layout) : "unknown",
                !A.layout || !B.layout ? "not compared"
                : layout_same          ? "same"
                                       : "differs");
    std::printf("verdict: %s\n", verdict);
    for (const auto& c : causes) std::printf("likely cause: %s\n", c.c_str());
  }
  if (!equivalent) throw exit_with{1};
}

struct layers_opts {
  std::string hf_config;
  out_format format = out_format::text;
};

// "0-4, 6-10, 12" for a sorted list of layer indices.
std::string ranges(const std::vector<int64_t>& v) {
  std::string out;
  for (size_t i = 0; i < v.size();) {
    size_t j = i;
    while (j + 1 < v.size() && v[j + 1] == v[j] + 1) ++j;
    if (!out.empty()) out += ", ";
    out += j == i ? fmt::format("{}", v[i]) : fmt::format("{}-{}", v[i], v[j]);
    i = j + 1;
  }
  return out.empty() ? "none" : out;
}

void run_layers(const layers_opts& o) {
  const auto j = hf_config_read(o.hf_config);
  rope_layer_plan plan;
  std::vector<std::string> warnings;
  std::vector<rope_config> configs;
  try {
    plan = hf_layer_plan(j);
    for (const auto& t : plan.types) configs.push_back(rope_config_from_json(j, t, &warnings));
    if (plan.types.empty()) configs.push_back(rope_config_from_json(j, "", &warnings));
  } catch (const invalid_argument& e) {
    throw invalid_argument(fmt::format("{}: {}", o.hf_config, e.what()));
  }
  // Each layer type's reading repeats the class defaults' notes: print each line once.
  std::vector<std::string> once;
  for (const auto& w : warnings)
    if (std::find(once.begin(), once.end(), w) == once.end()) once.push_back(w);
  print_warnings(once);
  const auto layers_of = [&](const std::string& t) {
    std::vector<int64_t> v;
    for (size_t i = 0; i < plan.layer_types.size(); ++i)
      if (plan.layer_types[i] == t) v.push_back(static_cast<int64_t>(i));
    return v;
  };
  std::vector<int64_t> nope;
  for (size_t i = 0; i < plan.rope_layers.size(); ++i)
    if (!plan.rope_layers[i]) nope.push_back(static_cast<int64_t>(i));
  const auto summary = [](const rope_config& c) {
    return fmt::format(
        "rope_type {}, theta {}, factor {}, head_dim {}, rotary_dim {}{}", rope_type_name(c.type),
        num(c.theta), num(c.factor), c.head_dim, c.rotary_dim,
        c.rotated_pairs ? fmt::format(", rotated pairs {}", *c.rotated_pairs) : std::string());
  };
  if (o.format == out_format::json) {
    nlohmann::ordered_json out;
    out["source"] = plan.source;
    out["num_layers"] = plan.layer_types.size();
    out["defaults"] = plan.defaults;
    nlohmann::ordered_json types = nlohmann::ordered_json::array();
    for (size_t k = 0; k < configs.size(); ++k) {
      const auto& c = configs[k];
      nlohmann::ordered_json t;
      t["layer_type"] = plan.types.empty() ? nlohmann::ordered_json(nullptr)
                                           : nlohmann::ordered_json(plan.types[k]);
      t["layers"] = plan.types.empty() ? std::vector<int64_t>{} : layers_of(plan.types[k]);
      t["scaling"] = rope_type_name(c.type);
      t["theta"] = c.theta;
      t["factor"] = c.factor;
      t["head_dim"] = c.head_dim;
      t["rotary_dim"] = c.rotary_dim;
      if (c.rotated_pairs) t["rotated_pairs"] = *c.rotated_pairs;
      if (c.llama_4_scaling_beta > 0) {
        t["llama_4_scaling_beta"] = c.llama_4_scaling_beta;
        t["llama_4_scaling_floor"] = c.llama_4_scaling_floor;
      }
      types.push_back(t);
    }
    out["types"] = types;
    out["nope_layers"] = nope;
    out["nope_source"] = plan.nope_source;
    out["attn_temperature_tuning"] = plan.temperature_tuning && !nope.empty();
    out["floor_scale"] = plan.floor_scale;
    out["attn_scale"] = plan.attn_scale;
    std::printf("%s\n", out.dump(2).c_str());
    return;
  }
  if (plan.types.empty()) {
    std::printf("one RoPE configuration for every layer: %s\n", summary(configs[0]).c_str());
  } else {
    std::printf("layer types from %s, %zu layers\n", plan.source.c_str(), plan.layer_types.size());
    for (size_t k = 0; k < plan.types.size(); ++k)
      std::printf("%-20s %s\n%-20s layers: %s\n", plan.types[k].c_str(),
                  summary(configs[k]).c_str(), "", ranges(layers_of(plan.types[k])).c_str());
  }
  if (!plan.nope_source.empty()) {
    std::printf("NoPE layers (from %s): %s\n", plan.nope_source.c_str(), ranges(nope).c_str());
    if (plan.temperature_tuning && !nope.empty())
      std::printf(
          "attention temperature tuning on NoPE layers: q *= log(floor((pos + 1) / %s) + 1) * "
          "%s + 1\n",
          num(plan.floor_scale).c_str(), num(plan.attn_scale).c_str());
  }
  // Ministral 3 / Mistral 4: every layer scales its rotated queries.
  for (const auto& c : configs)
    if (c.llama_4_scaling_beta > 0) {
      std::printf(
          "query scale on every layer, after RoPE (llama_4_scaling_beta): q *= 1 + %s * log(1 + "
          "floor(pos / %lld))\n",
          num(c.llama_4_scaling_beta).c_str(), static_cast<long long>(c.llama_4_scaling_floor));
      break;
    }
  // a default the class supplied ("X is missing; took ..."), else a note on what was checked
  for (const auto& d : plan.defaults)
    std::printf("%s: %s\n", d.find(" is missing; took ") != std::string::npos ? "default" : "note",
                d.c_str());
}

const bool registered_cmd_rope = register_command(30, [](CLI::App& app) {
  auto* rope = app.add_subcommand("rope", "Rotary position embedding (RoPE) and its scalings");
  rope->require_subcommand(1);

  auto fo = std::make_shared<freqs_opts>();
  auto* fs = rope->add_subcommand(
      "freqs", "Frequencies inv_freq (R/2) and attention factor for a config or parameters");
  add_rope_params(fs, fo->p);
  add_format_option(fs, fo->format);
  fs->callback([fo] { run_freqs(*fo); });

  auto lo = std::make_shared<layers_opts>();
  auto* ls = rope->add_subcommand(
      "layers", "Layer types of a config.json, which layers use each, their RoPE, NoPE layers");
  ls->add_option("--hf-config", lo->hf_config, "Hugging Face config.json")->required();
  add_format_option(ls, lo->format);
  ls->callback([lo] { run_layers(*lo); });

  auto ao = std::make_shared<apply_opts>();
  auto* as = rope->add_subcommand(
      "apply", "Rotate X (T, H, D) float32/float64 .npy at positions P (T,) int64 .npy");
  as->add_option("--x", ao->x, "Input .npy, shape (T, H, D), float32 or float64")->required();
  as->add_option("--positions", ao->positions,
                 "Positions .npy, shape (T,), int64; (3, T) for an M-RoPE config (mrope_section)")
      ->required();
  as->add_option("--out", ao->out, "Output .npy (X's dtype), written atomically")->required();
  as->add_option("--layout", ao->layout, "Pair layout: half (NeoX) or interleaved (GPT-J)")
      ->required();
  as->add_option("--angle", ao->angle,
                 "Angle mode: exact, f32 (alias compat_f32), hf_f32 or ggml_f32")
      ->default_str("exact");
  add_rope_params(as, ao->p);
  add_format_option(as, ao->format);
  as->callback([ao] { run_apply(*ao); });

  auto d = std::make_shared<diff_opts>();
  auto* ds = rope->add_subcommand(
      "diff",
      "Compare two RoPE configurations pair by pair (exit 0 equivalent, 1 differ, 2 bad input)");
  ds->footer(
      "Each side is one of:\n"
      "  hf:CONFIG.json          a Hugging Face config.json (as --hf-config)\n"
      "  gguf:MODEL.gguf         a GGUF file (as --gguf)\n"
      "  params:KEY=VALUE,...    explicit parameters: the rope freqs flags without '--'\n"
      "                          (head-dim, theta, partial, scaling, factor, max-pos,\n"
      "                          original-max-pos, beta-fast, beta-slow, truncate,\n"
      "                          attention-factor, mscale, mscale-all-dim, low-freq-factor,\n"
      "                          high-freq-factor, short-factor, long-factor with values\n"
      "                          separated by ';') and layout=half|interleaved\n"
      "  FILE                    a GGUF file if it starts with 'GGUF', else a config.json\n"
      "Equivalent within float32: every pair's inv_freq and the attention factor agree to\n"
      "2^-23 relative, the rotary widths are equal, and the layouts (relative to the\n"
      "checkpoint's q/k rows) agree where both are known.\n"
      "Example: posenc rope diff hf:config.json gguf:model.gguf");
  ds->add_option("A", d->a, "First side (reference)")->required();
  ds->add_option("B", d->b, "Second side")->required();
  ds->add_option("--seq-len", d->seq_len,
                 "Sequence length for both sides (dynamic and longrope; default 0)");
  ds->add_flag("--all", d->all, "List every pair, not only those that differ");
  add_format_option(ds, d->format);
  ds->callback([d] { run_diff(*d); });
});

}  // namespace
}  // namespace posenc::cli
