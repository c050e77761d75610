// posenc rope freqs | rope apply: RoPE frequencies for a model config or explicit parameters,
// and the rotation of a (T, H, D) .npy tensor at given positions. Thin: parse, call the
// library, print.
#include <algorithm>
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>

#include "cli.hpp"
#include "posenc/core/error.hpp"
#include "posenc/core/npy.hpp"
#include "posenc/encodings/rope.hpp"
#include "posenc/encodings/rope_config.hpp"

namespace posenc::cli {
namespace {

// Either --hf-config FILE or explicit parameters, which are turned into the equivalent
// config.json keys and read by the same code (same validation, precedence and warnings).
struct rope_params {
  std::string hf_config;
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
  params.push_back(sub->add_option("--theta", p.theta, "rope_theta (default 10000)"));
  params.push_back(
      sub->add_option("--partial", p.partial, "partial_rotary_factor: R = D * F (default 1)"));
  params.push_back(sub->add_option("--scaling", p.scaling,
                                   "rope_type: default, linear, dynamic, yarn, longrope, llama3"));
  params.push_back(sub->add_option("--factor", p.factor, "rope_scaling.factor"));
  params.push_back(sub->add_option("--max-pos", p.max_pos, "max_position_embeddings"));
  params.push_back(sub->add_option("--original-max-pos", p.original_max_pos,
                                   "original_max_position_embeddings"));
  params.push_back(sub->add_option("--beta-fast", p.beta_fast, "yarn beta_fast (default 32)"));
  params.push_back(sub->add_option("--beta-slow", p.beta_slow, "yarn beta_slow (default 1)"));
  params.push_back(
      sub->add_option("--truncate", p.truncate, "yarn truncate: true or false (default true)"));
  params.push_back(sub->add_option("--attention-factor", p.attention_factor,
                                   "yarn / longrope attention_factor"));
  params.push_back(sub->add_option("--mscale", p.mscale, "yarn mscale"));
  params.push_back(sub->add_option("--mscale-all-dim", p.mscale_all_dim, "yarn mscale_all_dim"));
  params.push_back(
      sub->add_option("--short-factor", p.short_factor, "longrope short_factor: a,b,c (R/2)"));
  params.push_back(
      sub->add_option("--long-factor", p.long_factor, "longrope long_factor: a,b,c (R/2)"));
  params.push_back(
      sub->add_option("--low-freq-factor", p.low_freq_factor, "llama3 low_freq_factor"));
  params.push_back(
      sub->add_option("--high-freq-factor", p.high_freq_factor, "llama3 high_freq_factor"));
  for (auto* o : params) cfg->excludes(o);
  sub->add_option("--seq-len", p.seq_len, "Current sequence length (drives dynamic and longrope)");
}

bool given(const rope_params& p, const char* name) {
  return p.sub->count(name) > 0;
}

// Builds the config and prints any precedence warnings on stderr.
rope_config make_config(const rope_params& p) {
  std::vector<std::string> warnings;
  rope_config c;
  if (!p.hf_config.empty()) {
    c = rope_config_from_file(p.hf_config, &warnings);
  } else {
    if (!given(p, "--head-dim")) fail("--head-dim (or --hf-config) is required");
    if (p.head_dim < 2 || p.head_dim > (int64_t{1} << 20))
      fail("--head-dim must be in [2, 2^20], got {}", p.head_dim);
    nlohmann::json j;
    j["head_dim"] = p.head_dim;
    j["rope_theta"] = p.theta;
    if (given(p, "--partial")) j["partial_rotary_factor"] = p.partial;
    if (given(p, "--max-pos")) j["max_position_embeddings"] = p.max_pos;
    if (given(p, "--original-max-pos")) j["original_max_position_embeddings"] = p.original_max_pos;
    const auto type = rope_type_from_name(p.scaling, "--scaling");
    nlohmann::json rs;
    rs["rope_type"] = rope_type_name(type);
    if (given(p, "--factor")) rs["factor"] = p.factor;
    if (given(p, "--beta-fast")) rs["beta_fast"] = p.beta_fast;
    if (given(p, "--beta-slow")) rs["beta_slow"] = p.beta_slow;
    if (given(p, "--truncate")) {
      if (p.truncate != "true" && p.truncate != "false")
        fail("--truncate must be true or false, got '{}'", p.truncate);
      rs["truncate"] = p.truncate == "true";
    }
    if (given(p, "--attention-factor")) rs["attention_factor"] = p.attention_factor;
    if (given(p, "--mscale")) rs["mscale"] = p.mscale;
    if (given(p, "--mscale-all-dim")) rs["mscale_all_dim"] = p.mscale_all_dim;
    if (given(p, "--short-factor"))
      rs["short_factor"] = parse_doubles(p.short_factor, "--short-factor");
    if (given(p, "--long-factor"))
      rs["long_factor"] = parse_doubles(p.long_factor, "--long-factor");
    if (given(p, "--low-freq-factor")) rs["low_freq_factor"] = p.low_freq_factor;
    if (given(p, "--high-freq-factor")) rs["high_freq_factor"] = p.high_freq_factor;
    if (type != rope_type::default_ || rs.size() > 1) j["rope_scaling"] = rs;
    c = rope_config_from_json(j, &warnings);
  }
  for (const auto& w : warnings) std::fprintf(stderr, "posenc: warning: %s\n", w.c_str());
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
    j["seq_len"] = seq_len;
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
  if (p.shape.size() != 1 || p.shape[0] != T)
    fail("--positions must have shape (T,) = ({},) to match --x {}, got {}", T, x.shape_str(),
         p.shape_str());
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
  if (x.type == dtype::f32)
    rope_apply(f, layout, angle, pos, x.as<float>(), T, H, D);
  else
    rope_apply(f, layout, angle, pos, x.as<double>(), T, H, D);
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

const bool registered = register_command(30, [](CLI::App& app) {
  auto* rope = app.add_subcommand("rope", "Rotary position embedding (RoPE) and its scalings");
  rope->require_subcommand(1);

  auto fo = std::make_shared<freqs_opts>();
  auto* fs = rope->add_subcommand(
      "freqs", "Frequencies inv_freq (R/2) and attention factor for a config or parameters");
  add_rope_params(fs, fo->p);
  add_format_option(fs, fo->format);
  fs->callback([fo] { run_freqs(*fo); });

  auto ao = std::make_shared<apply_opts>();
  auto* as = rope->add_subcommand(
      "apply", "Rotate X (T, H, D) float32/float64 .npy at positions P (T,) int64 .npy");
  as->add_option("--x", ao->x, "Input .npy, shape (T, H, D), float32 or float64")->required();
  as->add_option("--positions", ao->positions, "Positions .npy, shape (T,), int64")->required();
  as->add_option("--out", ao->out, "Output .npy (X's dtype), written atomically")->required();
  as->add_option("--layout", ao->layout, "Pair layout: half (NeoX) or interleaved (GPT-J)")
      ->required();
  as->add_option("--angle", ao->angle, "Angle mode: exact or compat_f32")->default_str("exact");
  add_rope_params(as, ao->p);
  add_format_option(as, ao->format);
  as->callback([ao] { run_apply(*ao); });
});

}  // namespace
}  // namespace posenc::cli
