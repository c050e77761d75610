// tools/posenc/commands/rope_json.hpp: the explicit RoPE flags of `rope freqs`, `rope apply`,
// `rope drift` and `attend --rope` as a Hugging Face config.json object, so that every command
// reads them through rope_config_from_json (the same validation and warnings as --hf-config).
// O is the command's options struct (fields theta, partial, max_pos, ..., named after the flags)
// and given(o, "--flag") says whether a flag was on the command line.
#pragma once

#include <cstdint>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli.hpp"
#include "posenc/core/error.hpp"
#include "posenc/formats/gguf.hpp"
#include "posenc/formats/hf_config.hpp"

namespace posenc::cli {

template <typename O, typename Given>
nlohmann::json rope_flags_json(const O& o, int64_t head_dim, Given given) {
  nlohmann::json j;
  j["head_dim"] = head_dim;
  j["rope_theta"] = o.theta;
  if (given(o, "--partial")) j["partial_rotary_factor"] = o.partial;
  if (given(o, "--max-pos")) j["max_position_embeddings"] = o.max_pos;
  if (given(o, "--original-max-pos")) j["original_max_position_embeddings"] = o.original_max_pos;
  const auto type = rope_type_from_name(o.scaling, "--scaling");
  nlohmann::json rs;
  rs["rope_type"] = rope_type_name(type);
  if (given(o, "--factor")) rs["factor"] = o.factor;
  if (given(o, "--beta-fast")) rs["beta_fast"] = o.beta_fast;
  if (given(o, "--beta-slow")) rs["beta_slow"] = o.beta_slow;
  if (given(o, "--truncate")) {
    if (o.truncate != "true" && o.truncate != "false")
      fail("--truncate must be true or false, got '{}'", o.truncate);
    rs["truncate"] = o.truncate == "true";
  }
  if (given(o, "--attention-factor")) rs["attention_factor"] = o.attention_factor;
  if (given(o, "--mscale")) rs["mscale"] = o.mscale;
  if (given(o, "--mscale-all-dim")) rs["mscale_all_dim"] = o.mscale_all_dim;
  if (given(o, "--short-factor"))
    rs["short_factor"] = parse_doubles(o.short_factor, "--short-factor");
  if (given(o, "--long-factor")) rs["long_factor"] = parse_doubles(o.long_factor, "--long-factor");
  if (given(o, "--low-freq-factor")) rs["low_freq_factor"] = o.low_freq_factor;
  if (given(o, "--high-freq-factor")) rs["high_freq_factor"] = o.high_freq_factor;
  if (type != rope_type::default_ || rs.size() > 1) j["rope_scaling"] = rs;
  return j;
}

// The explicit RoPE flags but --head-dim (whose help differs per command), in `rope_json`'s
// order, bound to O's fields of the same names. Returned so that the caller can make
// --hf-config and --gguf exclude them.
template <typename O>
std::vector<CLI::Option*> add_rope_flags(CLI::App* sub, O& o) {
  std::vector<CLI::Option*> params;
  params.push_back(sub->add_option("--theta", o.theta, "rope_theta (default 10000)"));
  params.push_back(
      sub->add_option("--partial", o.partial, "partial_rotary_factor: R = D * F (default 1)"));
  params.push_back(sub->add_option("--scaling", o.scaling,
                                   "rope_type: default, linear, dynamic, yarn, longrope, llama3"));
  params.push_back(sub->add_option("--factor", o.factor, "rope_scaling.factor"));
  params.push_back(sub->add_option("--max-pos", o.max_pos, "max_position_embeddings"));
  params.push_back(sub->add_option("--original-max-pos", o.original_max_pos,
                                   "original_max_position_embeddings"));
  params.push_back(sub->add_option("--beta-fast", o.beta_fast, "yarn beta_fast (default 32)"));
  params.push_back(sub->add_option("--beta-slow", o.beta_slow, "yarn beta_slow (default 1)"));
  params.push_back(
      sub->add_option("--truncate", o.truncate, "yarn truncate: true or false (default true)"));
  params.push_back(sub->add_option("--attention-factor", o.attention_factor,
                                   "yarn / longrope attention_factor"));
  params.push_back(sub->add_option("--mscale", o.mscale, "yarn mscale"));
  params.push_back(sub->add_option("--mscale-all-dim", o.mscale_all_dim, "yarn mscale_all_dim"));
  params.push_back(
      sub->add_option("--short-factor", o.short_factor, "longrope short_factor: a,b,c (R/2)"));
  params.push_back(
      sub->add_option("--long-factor", o.long_factor, "longrope long_factor: a,b,c (R/2)"));
  params.push_back(
      sub->add_option("--low-freq-factor", o.low_freq_factor, "llama3 low_freq_factor"));
  params.push_back(
      sub->add_option("--high-freq-factor", o.high_freq_factor, "llama3 high_freq_factor"));
  return params;
}

// The config of a command that takes --hf-config, --gguf or the explicit flags (O also has
// hf_config, gguf and head_dim): read through rope_config_from_json, warnings on stderr.
template <typename O, typename Given>
rope_config rope_config_from_flags(const O& o, Given given) {
  std::vector<std::string> warnings;
  rope_config c;
  if (!o.hf_config.empty()) {
    c = rope_config_from_file(o.hf_config, &warnings);
  } else if (!o.gguf.empty()) {
    c = gguf_rope_config(gguf_read(o.gguf), &warnings).config;
  } else {
    if (!given(o, "--head-dim")) fail("--head-dim (or --hf-config or --gguf) is required");
    // Read into a local: `o.head_dim < 2` in a template makes GCC 12 ask whether head_dim
    // names a member template (-Wmissing-template-keyword).
    const int64_t head_dim = o.head_dim;
    if (head_dim < 2 || head_dim > (int64_t{1} << 20))
      fail("--head-dim must be in [2, 2^20], got {}", head_dim);
    c = rope_config_from_json(rope_flags_json(o, o.head_dim, given), &warnings);
  }
  for (const auto& w : warnings) std::fprintf(stderr, "posenc: warning: %s\n", w.c_str());
  return c;
}

}  // namespace posenc::cli
