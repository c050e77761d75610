// posenc rope compare: another engine's RoPE output (.npy) against posenc's, under each angle
// pipeline (exact, f32, hf_f32, ggml_f32), with the verdict and hints of rope_compare
// (include/posenc/encodings/rope_compare.hpp; the same code as posenc.compare in Python).
// Exit 0 ok (also "ok as hf_f32" and the like), 1 mismatch, 2 bad input. Thin: read the files,
// call the library, print. Attached under `posenc rope` (registered after it).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>

#include "cli.hpp"
#include "posenc/core/error.hpp"
#include "posenc/core/npy.hpp"
#include "posenc/encodings/rope.hpp"
#include "posenc/encodings/rope_compare.hpp"
#include "posenc/formats/gguf.hpp"
#include "posenc/formats/hf_config.hpp"
#include "rope_json.hpp"

namespace posenc::cli {
namespace {

struct compare_opts {
  std::string actual, x, positions, expected, layout = "half", angle = "exact";
  std::string hf_config, gguf;
  std::string layer_type;  // --layer-type: one layer type's RoPE of a per-layer config
  double rtol = -1, atol = 0;
  int64_t head_dim = 0, max_pos = 0, original_max_pos = 0, seq_len = -1;
  double theta = 10000, partial = 1, factor = 1, beta_fast = 32, beta_slow = 1;
  double attention_factor = 1, mscale = 1, mscale_all_dim = 1, low_freq_factor = 1,
         high_freq_factor = 4;
  std::string scaling = "default", truncate = "true", short_factor, long_factor;
  out_format format = out_format::text;
  CLI::App* sub = nullptr;
};

bool given(const compare_opts& o, const char* name) {
  return o.sub->count(name) > 0;
}

constexpr const char* kRopeFlags[] = {
    "--head-dim",        "--theta",        "--partial",          "--scaling",
    "--factor",          "--max-pos",      "--original-max-pos", "--beta-fast",
    "--beta-slow",       "--truncate",     "--attention-factor", "--mscale",
    "--mscale-all-dim",  "--short-factor", "--long-factor",      "--low-freq-factor",
    "--high-freq-factor"};

// --hf-config, --gguf, or the rope flags (head dim D of --actual unless --head-dim); none of
// them: no config (then --expected is compared as given).
std::optional<rope_config> make_config(const compare_opts& o, int64_t D) {
  std::vector<std::string> warnings;
  std::optional<rope_config> c;
  if (!o.layer_type.empty() && o.hf_config.empty() && o.gguf.empty())
    fail("--layer-type needs --hf-config (a per-layer config.json) or --gguf");
  if (!o.hf_config.empty()) {
    c = rope_config_from_file(o.hf_config, o.layer_type, &warnings);
  } else if (!o.gguf.empty()) {
    const auto g = gguf_rope_config(gguf_read(o.gguf), &warnings);
    try {
      c = gguf_rope_layer(g, o.layer_type);
    } catch (const invalid_argument& e) {
      throw invalid_argument(fmt::format("--layer-type: {}: {}", o.gguf, e.what()));
    }
  } else if (std::any_of(std::begin(kRopeFlags), std::end(kRopeFlags),
                         [&](const char* f) { return given(o, f); })) {
    const int64_t hd = given(o, "--head-dim") ? o.head_dim : D;
    if (hd < 2 || hd > (int64_t{1} << 20)) fail("--head-dim must be in [2, 2^20], got {}", hd);
    const nlohmann::json j =
        rope_flags_json(o, hd, [](const auto& x, const char* n) { return given(x, n); });
    c = rope_config_from_json(j, &warnings);
  }
  for (const auto& w : warnings) std::fprintf(stderr, "posenc: warning: %s\n", w.c_str());
  return c;
}

// Float data as doubles and its unit roundoff; `arg` names the flag in errors.
std::vector<double> float_values(const npy_array& a, const std::string& arg,
                                 const std::string& path, double* u) {
  switch (a.type) {
    case dtype::f64:
      if (u) *u = 0x1p-53;
      break;
    case dtype::f32:
      if (u) *u = 0x1p-24;
      break;
    case dtype::f16:
      if (u) *u = 0x1p-11;
      break;
    default:
      fail("{} must be float64, float32 or float16, got {} in {}", arg, dtype_name(a.type), path);
  }
  return a.to_f64();
}

nlohmann::ordered_json fit_json(const rope_compare_fit& f) {
  nlohmann::ordered_json j;
  j["angle"] = rope_angle_name(f.angle);
  if (!f.hint.empty()) j["hint"] = f.hint;
  if (!f.detail.empty()) j["detail"] = f.detail;
  j["ok"] = f.ok;
  j["max_error"] = f.max_error;
  j["max_ratio"] = f.max_ratio;
  j["sum_error"] = f.sum_error;
  j["rtol"] = f.rtol;
  j["eps"] = f.eps;
  j["identical"] = f.identical;
  j["compared"] = f.compared;
  return j;
}

// rope_compare's result as --format json prints it.
nlohmann::ordered_json compare_result_json(const rope_compare_result& r) {
  nlohmann::ordered_json j;
  j["ok"] = r.ok;
  j["verdict"] = r.verdict;
  // null when nothing matched (a const char* null would be read as a string).
  const char* pipeline =
      r.match ? rope_angle_name(r.match->angle) : (r.ok ? rope_angle_name(r.reference) : nullptr);
  j["pipeline"] = pipeline ? nlohmann::ordered_json(pipeline) : nlohmann::ordered_json(nullptr);
  j["reference"] = rope_angle_name(r.reference);
  j["max_error"] = r.max_error;
  j["max_ratio"] = r.max_ratio;
  j["tolerance"] = r.tolerance;
  j["rtol"] = r.rtol;
  j["atol"] = r.atol;
  j["angle_rtol"] = r.angle_rtol;
  j["worst"] = r.worst;
  j["worst_position"] = r.worst_position ? nlohmann::ordered_json(*r.worst_position) : nullptr;
  j["worst_pair"] = r.worst_pair ? nlohmann::ordered_json(*r.worst_pair) : nullptr;
  j["match"] = r.match ? fit_json(*r.match) : nlohmann::ordered_json(nullptr);
  j["pipelines"] = nlohmann::ordered_json::array();
  for (const auto& p : r.pipelines) j["pipelines"].push_back(fit_json(p));
  j["hint_fits"] = nlohmann::ordered_json::array();
  for (const auto& h : r.hints) j["hint_fits"].push_back(fit_json(h));
  j["hints"] = rope_compare_hints(r);
  j["ratio_by_t"] = r.ratio_by_t;
  return j;
}

void run_compare(const compare_opts& o) {
  const auto layout = rope_layout_from_name(o.layout, "--layout");
  const auto angle = rope_angle_from_name(o.angle, "--angle");
  if (given(o, "--rtol") && !(o.rtol >= 0 && std::isfinite(o.rtol)))
    fail("--rtol must be finite and >= 0, got {}", o.rtol);
  const auto a = read_npy(o.actual);
  rope_compare_input in;
  const auto av = float_values(a, "--actual", o.actual, &in.actual_u);
  if (a.shape.size() != 3 && a.shape.size() != 4)
    fail("--actual must have shape (T, H, D) or (B, T, H, D), got {} in {}", a.shape_str(),
         o.actual);
  const bool four = a.shape.size() == 4;
  in.B = four ? a.shape[0] : 1;
  in.T = a.shape[four ? 1 : 0];
  in.H = a.shape[four ? 2 : 1];
  in.D = a.shape[four ? 3 : 2];
  in.actual = av;
  std::vector<double> ev, xv;
  if (!o.expected.empty()) {
    const auto e = read_npy(o.expected);
    ev = float_values(e, "--expected", o.expected, &in.expected_u);
    if (e.shape != a.shape)
      fail("--expected must have the shape of --actual {}, got {} in {}", a.shape_str(),
           e.shape_str(), o.expected);
    in.expected = ev;
  }
  if (!o.x.empty()) {
    const auto x = read_npy(o.x);
    xv = float_values(x, "--x", o.x, nullptr);
    if (x.shape != a.shape)
      fail("--x must have the shape of --actual {}, got {} in {}", a.shape_str(), x.shape_str(),
           o.x);
    in.x = xv;
  }
  std::vector<int64_t> pos;
  if (!o.positions.empty()) {
    const auto p = read_npy(o.positions);
    if (p.type != dtype::i64 && p.type != dtype::i32)
      fail("--positions must be int64 (or int32), got {} in {}", dtype_name(p.type), o.positions);
    const auto pv = p.to_i64();
    const bool per_token = p.shape.size() == 2 && p.shape[0] == in.B && p.shape[1] == in.T;
    const bool shared = p.shape.size() == 1 && p.shape[0] == in.T;
    if (!per_token && !shared)
      fail("--positions must have shape (T,) = ({},){} to match --actual {}, got {}", in.T,
           four ? fmt::format(" or (B, T) = ({}, {})", in.B, in.T) : "", a.shape_str(),
           p.shape_str());
    for (int64_t b = 0; b < (shared ? in.B : 1); ++b) pos.insert(pos.end(), pv.begin(), pv.end());
    in.positions = pos;
  }
  in.cfg = make_config(o, in.D);
  if (o.expected.empty() && (o.x.empty() || !in.cfg))
    fail(
        "--x and a config (--hf-config, --gguf or the rope flags) are required without "
        "--expected");
  in.layout = layout;
  in.angle = angle;
  if (given(o, "--rtol")) in.rtol = o.rtol;
  in.atol = o.atol;
  if (given(o, "--seq-len") && o.seq_len < 0) fail("--seq-len must be >= 0, got {}", o.seq_len);
  in.seq_len = o.seq_len;
  const auto r = rope_compare(in);

  if (o.format == out_format::json) {
    const nlohmann::ordered_json j = compare_result_json(r);
    std::printf("%s\n", j.dump(2).c_str());
  } else if (o.format == out_format::csv) {
    std::printf("ok,verdict,pipeline,max_error,max_ratio,pipeline_max_error,pipeline_max_ratio\n");
    std::printf(
        "%d,\"%s\",%s,%s,%s,%s,%s\n", r.ok ? 1 : 0, r.verdict.c_str(),
        r.match ? rope_angle_name(r.match->angle) : (r.ok ? rope_angle_name(r.reference) : ""),
        num(r.max_error).c_str(), num(r.max_ratio).c_str(),
        r.match ? num(r.match->max_error).c_str() : "",
        r.match ? num(r.match->max_ratio).c_str() : "");
  } else {
    std::printf("%s\n", rope_compare_text(r).c_str());
  }
  if (!r.ok) throw exit_with{1};
}

// Order 32: after `rope` (30), so the subcommand exists to attach to.
const bool registered_cmd_rope_compare = register_command(32, [](CLI::App& app) {
  auto* rope = app.get_subcommand("rope");
  auto o = std::make_shared<compare_opts>();
  auto* sub = rope->add_subcommand(
      "compare",
      "Another engine's RoPE output against posenc's under exact, f32, hf_f32 and ggml_f32 "
      "angles, with hints (exit 0 ok, 1 mismatch, 2 bad input)");
  o->sub = sub;
  sub->footer(
      "The engine's output --actual and input --x are (T, H, D) or (B, T, H, D) float .npy\n"
      "files, --positions (T,) or (B, T) int64. Without --expected, posenc's exact output is\n"
      "recomputed from --x; an engine that is not within tolerance of it but is of one of\n"
      "posenc's float32 pipelines is reported \"ok as transformers' float32 (hf_f32)\" (or f32,\n"
      "ggml_f32), with its distance to exact shown separately. Tolerances:\n"
      "include/posenc/encodings/rope_compare.hpp.\n"
      "Example: posenc rope compare --actual q_rot.npy --x q.npy --positions pos.npy "
      "--hf-config config.json");
  sub->add_option("--actual", o->actual, "The engine's output .npy, (T, H, D) or (B, T, H, D)")
      ->required();
  sub->add_option("--x", o->x, "The engine's input .npy (the shape of --actual)");
  sub->add_option("--positions", o->positions,
                  "Positions .npy, (T,) or (B, T) int64 (default 0 .. T-1 per sequence)");
  sub->add_option("--expected", o->expected,
                  "posenc's output .npy in mode --angle (default: recomputed from --x)");
  sub->add_option("--layout", o->layout, "Pair layout: half (NeoX) or interleaved (GPT-J)")
      ->default_str("half");
  sub->add_option("--angle", o->angle,
                  "Angle mode of the reference: exact, f32, hf_f32 or ggml_f32")
      ->default_str("exact");
  sub->add_option("--rtol", o->rtol, "Replaces every mode's derived rtol");
  sub->add_option("--atol", o->atol, "Absolute tolerance added to every entry (default 0)");
  auto* cfg = sub->add_option("--hf-config", o->hf_config, "Hugging Face config.json");
  auto* gg = sub->add_option("--gguf", o->gguf, "GGUF model file (llama.cpp)");
  gg->excludes(cfg);
  std::vector<CLI::Option*> params;
  params.push_back(sub->add_option("--head-dim", o->head_dim, "Head dim D (default: of --actual)"));
  for (auto* f : add_rope_flags(sub, *o)) params.push_back(f);
  auto* lt = sub->add_option("--layer-type", o->layer_type,
                             "Layer type of a per-layer config (e.g. sliding_attention or "
                             "full_attention; posenc rope layers lists them); needs --hf-config "
                             "or --gguf");
  for (auto* p : params) cfg->excludes(p), gg->excludes(p), lt->excludes(p);
  sub->add_option("--seq-len", o->seq_len,
                  "Sequence length for the frequencies (dynamic, longrope; default max position "
                  "+ 1)");
  add_format_option(sub, o->format);
  sub->callback([o] { run_compare(*o); });
});

}  // namespace
}  // namespace posenc::cli
