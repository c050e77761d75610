// posenc rope drift: how far each float32 angle pipeline (f32, hf_f32, ggml_f32) drifts from
// the exact mode by position, for a config (Hugging Face config.json, GGUF) or explicit
// parameters: the worst angle error over the pairs and the worst error of the rotated values
// stored as float32, bfloat16 and float16 (rope_drift in include/posenc/encodings/rope.hpp).
// Thin: parse, call the library, print. Attached under `posenc rope` (registered after it).
#include <fmt/format.h>
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>

#include "cli.hpp"
#include "posenc/core/error.hpp"
#include "posenc/encodings/rope.hpp"
#include "posenc/formats/gguf.hpp"
#include "posenc/formats/hf_config.hpp"
#include "rope_json.hpp"

namespace posenc::cli {
namespace {

constexpr int64_t kMaxDriftPositions = 100000;
constexpr const char* kStorage[3] = {"float32", "bfloat16", "float16"};

struct drift_opts {
  std::string hf_config, gguf, positions, angles = "f32,hf_f32,ggml_f32";
  int64_t head_dim = 0, max_pos = 0, original_max_pos = 0, seq_len = -1;
  double theta = 10000, partial = 1, factor = 1, beta_fast = 32, beta_slow = 1;
  double attention_factor = 1, mscale = 1, mscale_all_dim = 1, low_freq_factor = 1,
         high_freq_factor = 4;
  std::string scaling = "default", truncate = "true", short_factor, long_factor;
  out_format format = out_format::text;
  CLI::App* sub = nullptr;
};

bool given(const drift_opts& o, const char* name) {
  return o.sub->count(name) > 0;
}

// --hf-config, --gguf, or explicit parameters (the same validation and warnings as
// `rope freqs`).
rope_config make_config(const drift_opts& o) {
  return rope_config_from_flags(o, [](const auto& x, const char* n) { return given(x, n); });
}

// "A:B:log": 0 when A = 0, then round(10^(k/10)) for every k whose value lies in [max(A, 1),
// B), and B - 1 (ten points per decade, duplicates dropped); anything else as parse_positions.
std::vector<int64_t> drift_positions(const std::string& spec) {
  const std::string suffix = ":log";
  std::vector<int64_t> out;
  if (spec.size() > suffix.size() &&
      spec.compare(spec.size() - suffix.size(), suffix.size(), suffix) == 0) {
    const std::string ab = spec.substr(0, spec.size() - suffix.size());
    const size_t colon = ab.find(':');
    if (colon == std::string::npos)
      fail("--positions A:B:log needs a range A:B before ':log', got '{}'", spec);
    const auto a_v = parse_ints(ab.substr(0, colon), "--positions");
    const auto b_v = parse_ints(ab.substr(colon + 1), "--positions");
    if (a_v.size() != 1 || b_v.size() != 1)
      fail("--positions A:B:log needs two integers A and B, got '{}'", spec);
    const int64_t a = a_v[0], b = b_v[0];
    if (a < 0) fail("--positions must be non-negative, got start {} in '{}'", a, spec);
    if (b <= a) fail("--positions range A:B is half-open and needs B > A, got '{}'", spec);
    std::set<int64_t> s;
    if (a == 0) s.insert(0);
    for (int k = 0; k <= 400; ++k) {
      const double v = std::round(std::pow(10.0, k / 10.0));
      if (v >= 9.2e18) break;
      const auto p = static_cast<int64_t>(v);
      if (p >= std::max<int64_t>(a, 1) && p < b) s.insert(p);
    }
    s.insert(b - 1);
    out.assign(s.begin(), s.end());
  } else {
    const size_t colon = spec.find(':');
    if (colon != std::string::npos) {  // refuse a long range before it is materialised
      const auto a_v = parse_ints(spec.substr(0, colon), "--positions");
      const auto b_v = parse_ints(spec.substr(colon + 1), "--positions");
      if (a_v.size() == 1 && b_v.size() == 1 && b_v[0] > a_v[0] &&
          static_cast<uint64_t>(b_v[0]) - static_cast<uint64_t>(a_v[0]) >
              static_cast<uint64_t>(kMaxDriftPositions))
        fail("--positions range '{}' has more than {} positions (use A:B:log)", spec,
             kMaxDriftPositions);
    }
    out = parse_positions(spec, "--positions");
  }
  if (out.empty()) fail("--positions must give at least one position, got '{}'", spec);
  if (static_cast<int64_t>(out.size()) > kMaxDriftPositions)
    fail("--positions gives {} positions; rope drift takes at most {} (use A:B:log)", out.size(),
         kMaxDriftPositions);
  return out;
}

std::vector<rope_angle> parse_angles(const std::string& spec) {
  std::vector<rope_angle> v;
  size_t pos = 0;
  while (pos <= spec.size()) {
    const size_t c = spec.find(',', pos);
    const std::string tok = spec.substr(pos, c == std::string::npos ? std::string::npos : c - pos);
    const auto a = rope_angle_from_name(tok, "--angles");
    if (a == rope_angle::exact)
      fail("--angles must list float32 pipelines (f32, hf_f32, ggml_f32); exact is the reference");
    if (std::find(v.begin(), v.end(), a) == v.end()) v.push_back(a);
    if (c == std::string::npos) break;
    pos = c + 1;
  }
  return v;
}

std::string err_str(double v) {
  return std::isnan(v) ? "-" : fmt::format("{:.3g}", v);
}

void run_drift(const drift_opts& o) {
  const auto angles = parse_angles(o.angles);
  const auto pos = drift_positions(o.positions);
  const auto c = make_config(o);
  if (given(o, "--seq-len") && o.seq_len < 0) fail("--seq-len must be >= 0, got {}", o.seq_len);
  // Like HF's forward (dynamic_rope_update) and `rope apply`: max position + 1 by default.
  const int64_t seq_len =
      o.seq_len >= 0 ? o.seq_len : *std::max_element(pos.begin(), pos.end()) + 1;
  const auto f = rope_frequencies(c, seq_len);
  std::vector<rope_angle> all = {rope_angle::exact};
  all.insert(all.end(), angles.begin(), angles.end());
  std::vector<std::vector<rope_drift_row>> rows;
  for (auto a : all) rows.push_back(rope_drift(f, a, pos));

  if (o.format == out_format::json) {
    nlohmann::ordered_json j;
    j["scaling"] = rope_type_name(f.type);
    j["head_dim"] = f.head_dim;
    j["rotary_dim"] = f.rotary_dim;
    j["theta"] = c.theta;
    j["factor"] = c.factor;
    j["attention_factor"] = f.attention_factor;
    j["seq_len"] = seq_len;
    j["storage"] = {kStorage[0], kStorage[1], kStorage[2]};
    j["pipelines"] = nlohmann::ordered_json::array();
    for (size_t k = 0; k < all.size(); ++k) {
      nlohmann::ordered_json p;
      p["angle"] = rope_angle_name(all[k]);
      if (all[k] == rope_angle::ggml_f32 && !f.ggml_note.empty()) p["note"] = f.ggml_note;
      p["rows"] = nlohmann::ordered_json::array();
      for (const auto& r : rows[k]) {
        nlohmann::ordered_json e;
        e["pos"] = r.pos;
        if (std::isnan(r.angle_error))
          e["angle_error"] = nullptr;
        else
          e["angle_error"] = r.angle_error;
        e["output_error"] = {{kStorage[0], r.output_error[0]},
                             {kStorage[1], r.output_error[1]},
                             {kStorage[2], r.output_error[2]}};
        p["rows"].push_back(e);
      }
      j["pipelines"].push_back(p);
    }
    std::printf("%s\n", j.dump(2).c_str());
    return;
  }
  if (o.format == out_format::csv) {
    std::printf("angle,pos,angle_error,out_float32,out_bfloat16,out_float16\n");
    for (size_t k = 0; k < all.size(); ++k)
      for (const auto& r : rows[k])
        std::printf("%s,%lld,%s,%s,%s,%s\n", rope_angle_name(all[k]), static_cast<long long>(r.pos),
                    std::isnan(r.angle_error) ? "" : num(r.angle_error).c_str(),
                    num(r.output_error[0]).c_str(), num(r.output_error[1]).c_str(),
                    num(r.output_error[2]).c_str());
    return;
  }
  std::printf(
      "# rope drift against exact: scaling %s, head_dim %lld, rotary_dim %lld, theta %s, factor "
      "%s, attention_factor %s, seq_len %lld, %zu positions in [%lld, %lld]\n",
      rope_type_name(f.type), static_cast<long long>(f.head_dim),
      static_cast<long long>(f.rotary_dim), num(c.theta).c_str(), num(c.factor).c_str(),
      num(f.attention_factor).c_str(), static_cast<long long>(seq_len), pos.size(),
      static_cast<long long>(pos.front()), static_cast<long long>(pos.back()));
  std::printf(
      "# angle_error: max over pairs |theta - p omega| (rad); out_*: max |stored - exact| of a "
      "cos, a sin (the rotated unit pair) stored as float32 / bfloat16 / float16\n");
  std::printf("worst over positions:\n%-9s %-11s %-11s %-10s %-10s %-10s\n", "angle", "angle_error",
              "at_pos", "out_f32", "out_bf16", "out_f16");
  for (size_t k = 0; k < all.size(); ++k) {
    const auto& rs = rows[k];
    size_t wa = 0;
    double wo[3] = {0, 0, 0};
    for (size_t i = 0; i < rs.size(); ++i) {
      if (!std::isnan(rs[i].angle_error) && rs[i].angle_error > rs[wa].angle_error) wa = i;
      for (int s = 0; s < 3; ++s) wo[s] = std::max(wo[s], rs[i].output_error[s]);
    }
    const bool ex = all[k] == rope_angle::exact;
    std::printf("%-9s %-11s %-11s %-10s %-10s %-10s\n", rope_angle_name(all[k]),
                ex ? "-" : err_str(rs[wa].angle_error).c_str(),
                ex ? "-" : std::to_string(rs[wa].pos).c_str(), err_str(wo[0]).c_str(),
                err_str(wo[1]).c_str(), err_str(wo[2]).c_str());
  }
  if (!f.ggml_note.empty() && std::find(all.begin(), all.end(), rope_angle::ggml_f32) != all.end())
    std::printf("note: ggml_f32: %s\n", f.ggml_note.c_str());
  std::printf("by position (angle_error per pipeline; out_f32 per pipeline):\n%-12s", "pos");
  for (size_t k = 1; k < all.size(); ++k) std::printf(" %-10s", rope_angle_name(all[k]));
  for (size_t k = 0; k < all.size(); ++k)
    std::printf(" %-10s", fmt::format("out:{}", rope_angle_name(all[k])).c_str());
  std::printf("\n");
  for (size_t i = 0; i < pos.size(); ++i) {
    std::printf("%-12lld", static_cast<long long>(pos[i]));
    for (size_t k = 1; k < all.size(); ++k)
      std::printf(" %-10s", err_str(rows[k][i].angle_error).c_str());
    for (size_t k = 0; k < all.size(); ++k)
      std::printf(" %-10s", err_str(rows[k][i].output_error[0]).c_str());
    std::printf("\n");
  }
}

// Order 31: after `rope` (30), so the subcommand exists to attach to.
const bool registered_cmd_rope_drift = register_command(31, [](CLI::App& app) {
  auto* rope = app.get_subcommand("rope");
  auto o = std::make_shared<drift_opts>();
  auto* sub = rope->add_subcommand(
      "drift",
      "Angle and output error of the float32 pipelines (f32, hf_f32, ggml_f32) against exact, "
      "by position");
  o->sub = sub;
  sub->add_option("--positions", o->positions,
                  "Positions: A:B:log (10 per decade, with 0 and B-1), A:B or a,b,c")
      ->required();
  sub->add_option("--angles", o->angles,
                  "Pipelines to compare, comma-separated: f32, hf_f32, ggml_f32 (default all)");
  auto* cfg = sub->add_option("--hf-config", o->hf_config, "Hugging Face config.json");
  auto* gg = sub->add_option("--gguf", o->gguf, "GGUF model file (llama.cpp)");
  gg->excludes(cfg);
  std::vector<CLI::Option*> params;
  params.push_back(sub->add_option("--head-dim", o->head_dim, "Head dim D"));
  for (auto* f : add_rope_flags(sub, *o)) params.push_back(f);
  for (auto* p : params) cfg->excludes(p), gg->excludes(p);
  sub->add_option("--seq-len", o->seq_len,
                  "Sequence length (drives dynamic and longrope; default max position + 1)");
  add_format_option(sub, o->format);
  sub->callback([o] { run_drift(*o); });
});

}  // namespace
}  // namespace posenc::cli
