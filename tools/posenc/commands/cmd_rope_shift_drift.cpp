// posenc rope shift-drift: how far keys drift when an engine re-rotates its cached keys at every
// context shift (llama.cpp's K-shift), against keys rotated once at their final positions, in
// float32, bfloat16 and float16 storage (kv_shift_drift in include/posenc/attention/kv_cache.hpp).
// Thin: parse, call the library, print. Attached under `posenc rope` (registered after it).
#include <fmt/format.h>

#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>

#include "cli.hpp"
#include "posenc/attention/kv_cache.hpp"
#include "posenc/core/error.hpp"
#include "posenc/formats/gguf.hpp"
#include "posenc/formats/hf_config.hpp"
#include "rope_json.hpp"

namespace posenc::cli {
namespace {

struct shift_drift_opts {
  std::string hf_config, gguf, shifts = "1,10,100,1000", angle = "exact", layout = "half";
  int64_t head_dim = 0, max_pos = 0, original_max_pos = 0, seq_len = 0, keys = 64, delta = -256;
  uint64_t seed = 0;
  double theta = 10000, partial = 1, factor = 1, beta_fast = 32, beta_slow = 1;
  double attention_factor = 1, mscale = 1, mscale_all_dim = 1, low_freq_factor = 1,
         high_freq_factor = 4;
  std::string scaling = "default", truncate = "true", short_factor, long_factor;
  out_format format = out_format::text;
  CLI::App* sub = nullptr;
};

bool shift_given(const shift_drift_opts& o, const char* name) {
  return o.sub->count(name) > 0;
}

rope_config shift_config(const shift_drift_opts& o) {
  rope_config c =  // not const: the return moves it
      rope_config_from_flags(o, [](const auto& x, const char* n) { return shift_given(x, n); });
  if (!c.mrope_section.empty())
    fail(
        "rope shift-drift: an M-RoPE config (mrope_section) has three ids per token; the cache "
        "moves only 1-D RoPE keys");
  return c;
}

void run_shift_drift(const shift_drift_opts& o) {
  const auto counts = parse_ints(o.shifts, "--shifts");
  if (o.seq_len < 0) fail("--seq-len must be >= 0, got {}", o.seq_len);
  const auto c = shift_config(o);
  const auto f = rope_frequencies(c, o.seq_len);
  const auto layout = rope_layout_from_name(o.layout, "--layout");
  const auto angle = rope_angle_from_name(o.angle, "--angle");
  const auto rows = kv_shift_drift(f, layout, angle, o.keys, o.delta, counts, o.seed);
  const char* what =
      "drift: rerotate-mode keys (re-rotated at every shift, rounded to the storage each time) "
      "against keys rotated once at their final positions in the same storage; once: those "
      "keys against the float64 rotation (one rounding)";
  if (o.format == out_format::json) {
    nlohmann::ordered_json j;
    j["scaling"] = rope_type_name(f.type);
    j["head_dim"] = f.head_dim;
    j["rotary_dim"] = f.rotary_dim;
    j["theta"] = c.theta;
    j["attention_factor"] = f.attention_factor;
    j["layout"] = rope_layout_name(layout);
    j["angle"] = rope_angle_name(angle);
    j["keys"] = o.keys;
    j["delta"] = o.delta;
    j["seed"] = o.seed;
    j["measure"] = what;
    j["rows"] = nlohmann::ordered_json::array();
    for (const auto& r : rows)
      j["rows"].push_back({{"storage", name(r.storage)},
                           {"shifts", r.shifts},
                           {"drift_max", r.drift_max},
                           {"drift_rms", r.drift_rms},
                           {"once_max", r.once_max},
                           {"once_rms", r.once_rms}});
    std::printf("%s\n", j.dump(2).c_str());
    return;
  }
  if (o.format == out_format::csv) {
    std::printf("storage,shifts,drift_max,drift_rms,once_max,once_rms\n");
    for (const auto& r : rows)
      std::printf("%s,%lld,%s,%s,%s,%s\n", name(r.storage).c_str(),
                  static_cast<long long>(r.shifts), num(r.drift_max).c_str(),
                  num(r.drift_rms).c_str(), num(r.once_max).c_str(), num(r.once_rms).c_str());
    return;
  }
  std::printf(
      "# rope shift-drift: scaling %s, head_dim %lld, rotary_dim %lld, theta %s, layout %s, angle "
      "%s; %lld keys of N(0, 1) entries (seed %llu), shifted by %lld each time\n# %s\n",
      rope_type_name(f.type), static_cast<long long>(f.head_dim),
      static_cast<long long>(f.rotary_dim), num(c.theta).c_str(), rope_layout_name(layout),
      rope_angle_name(angle), static_cast<long long>(o.keys),
      static_cast<unsigned long long>(o.seed), static_cast<long long>(o.delta), what);
  std::printf("%-9s %8s %11s %11s %11s %11s %9s\n", "storage", "shifts", "drift_max", "drift_rms",
              "once_max", "once_rms", "rms/once");
  for (const auto& r : rows)
    std::printf("%-9s %8lld %11s %11s %11s %11s %9s\n", name(r.storage).c_str(),
                static_cast<long long>(r.shifts), err_str(r.drift_max).c_str(),
                err_str(r.drift_rms).c_str(), err_str(r.once_max).c_str(),
                err_str(r.once_rms).c_str(),
                r.once_rms > 0 ? fmt::format("{:.1f}", r.drift_rms / r.once_rms).c_str() : "-");
}

// Order 32: after `rope` (30) and `rope drift` (31).
const bool registered_cmd_rope_shift_drift = register_command(32, [](CLI::App& app) {
  auto* rope = app.get_subcommand("rope");
  auto o = std::make_shared<shift_drift_opts>();
  auto* sub = rope->add_subcommand(
      "shift-drift",
      "Drift of cached keys re-rotated at every context shift (llama.cpp's K-shift) against one "
      "rotation at their final positions, float32 / bfloat16 / float16 storage");
  o->sub = sub;
  sub->add_option("--shifts", o->shifts, "Shift counts to report, increasing: a,b,c")
      ->capture_default_str();
  sub->add_option("--delta", o->delta,
                  "Position change per shift (llama.cpp's context shift: minus the tokens "
                  "discarded)")
      ->capture_default_str();
  sub->add_option("--keys", o->keys, "Keys in the cache")->capture_default_str();
  sub->add_option("--seed", o->seed, "Seed of the keys")->capture_default_str();
  sub->add_option("--angle", o->angle, "Angle pipeline: exact, f32, hf_f32, ggml_f32")
      ->capture_default_str();
  sub->add_option("--layout", o->layout, "Pair layout: half or interleaved")->capture_default_str();
  auto* cfg = sub->add_option("--hf-config", o->hf_config, "Hugging Face config.json");
  auto* gg = sub->add_option("--gguf", o->gguf, "GGUF model file (llama.cpp)");
  gg->excludes(cfg);
  std::vector<CLI::Option*> params;
  params.push_back(sub->add_option("--head-dim", o->head_dim, "Head dim D"));
  for (auto* f : add_rope_flags(sub, *o)) params.push_back(f);
  for (auto* p : params) cfg->excludes(p), gg->excludes(p);
  sub->add_option("--seq-len", o->seq_len, "Sequence length (drives dynamic and longrope)");
  add_format_option(sub, o->format);
  sub->callback([o] { run_shift_drift(*o); });
});

}  // namespace
}  // namespace posenc::cli
