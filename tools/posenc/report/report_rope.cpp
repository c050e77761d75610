// Report section "rope": the frequency schedule of each RoPE scaling type (log10 omega_i
// against pair index i) for one head configuration, with each type's attention factor, the
// drift of the float32 angle pipelines against the exact mode, the drift of keys re-rotated at
// every context shift, and the RoPE check results.
#include <fmt/format.h>

#include <cmath>

#include "cli.hpp"
#include "posenc/attention/kv_cache.hpp"
#include "posenc/encodings/rope.hpp"
#include "report.hpp"

namespace posenc::cli {
namespace {

// The drift of each float32 angle pipeline against the exact mode (rope_drift): worst angle
// error over the pairs by position, log-log, one curve per pipeline, and a table of the angle
// and stored-output errors at three positions.
void add_drift(report_context& ctx, doc::document& body, rope_config c) {
  // Positions 1 .. 10^6, ten per decade (position 0 has no error and no place on a log axis).
  std::vector<int64_t> pos;
  for (int k = 0; k <= 60; ++k) {
    const auto p = static_cast<int64_t>(std::llround(std::pow(10.0, k / 10.0)));
    if (pos.empty() || p != pos.back()) pos.push_back(p);
  }
  c.type = rope_type::default_;
  const auto f = rope_frequencies(c, 0);
  vl::line_plot plot;
  plot.title = "Float32 angle drift against exact, D = R = 128, theta = 1e4 (Llama 2)";
  plot.x.label = "position p";
  plot.x.kind = vl::scale::log;
  plot.y.label = "worst angle error over pairs (rad)";
  plot.y.kind = vl::scale::log;
  doc::table table;
  table.head = {"pipeline", "angle error at 1e4", "at 1e5", "at 1e6",
                "output error at 1e6, float32 / bfloat16 / float16 storage"};
  const std::vector<int64_t> at = {10000, 100000, 1000000};
  for (auto angle : {rope_angle::f32, rope_angle::hf_f32, rope_angle::ggml_f32}) {
    const auto rows = rope_drift(f, angle, pos);
    vl::line_series ser;
    ser.name = rope_angle_name(angle);
    for (const auto& r : rows)
      if (r.angle_error > 0) {  // exact at a few small positions: no point on a log axis
        ser.x.push_back(static_cast<double>(r.pos));
        ser.y.push_back(r.angle_error);
      }
    plot.series.push_back(ser);
    const auto tr = rope_drift(f, angle, at);
    table.rows.push_back({rope_angle_name(angle), fmt::format("{:.3g}", tr[0].angle_error),
                          fmt::format("{:.3g}", tr[1].angle_error),
                          fmt::format("{:.3g}", tr[2].angle_error),
                          fmt::format("{:.3g} / {:.3g} / {:.3g}", tr[2].output_error[0],
                                      tr[2].output_error[1], tr[2].output_error[2])});
  }
  const auto ex = rope_drift(f, rope_angle::exact, at);
  table.rows.push_back({"exact (storage rounding only)", "-", "-", "-",
                        fmt::format("{:.3g} / {:.3g} / {:.3g}", ex[2].output_error[0],
                                    ex[2].output_error[1], ex[2].output_error[2])});
  body.para(
      "Float32 angle pipelines against the exact mode: f32 rounds posenc's frequency and the "
      "position to float32 and multiplies; hf_f32 is Hugging Face transformers' float32 "
      "pipeline (inv_freq from float32 tensor arithmetic, angle inv_freq x position in float32); "
      "ggml_f32 is ggml's CPU pipeline (theta_scale = powf(base, -2/R), each pair's angle by "
      "repeated multiplication in float). The error grows linearly with the position: at 10^6 "
      "tokens every pipeline is off by a few hundredths of a radian, which is float32 noise, "
      "not a bug; a difference far above these curves is. Reproduce with `posenc rope drift "
      "--head-dim 128 --positions 0:1000000:log`.");
  body.fig(doc::save_chart(ctx.out_dir, "rope_drift.vl.json", "RoPE float32 angle drift",
                           vl::spec(plot)),
           "worst angle error over the pairs against position, log-log, one curve per "
           "pipeline.");
  body.add(std::move(table));
}

// Keys re-rotated at every context shift (llama.cpp's K-shift) against keys rotated once at
// their final positions (kv_shift_drift): one row per storage and number of shifts.
void add_shift_drift(report_context& ctx, doc::document& body) {
  rope_config c;
  c.head_dim = c.rotary_dim = 128;
  c.theta = 500000;
  const auto f = rope_frequencies(c, 0);
  // --quick (tests): 8 keys and up to 100 shifts, the same table shape.
  const std::vector<int64_t> counts =
      ctx.quick ? std::vector<int64_t>{1, 10, 100} : std::vector<int64_t>{1, 10, 100, 1000};
  const int64_t keys = ctx.quick ? 8 : 64;
  const auto rows = kv_shift_drift(f, rope_layout::half, rope_angle::exact, keys, -2048, counts);
  doc::table table;
  table.head = {"storage",           "shifts",
                "drift: max",        "drift: rms",
                "one rotation: rms", "drift rms / one rotation rms"};
  for (const auto& r : rows)
    table.rows.push_back({name(r.storage), std::to_string(r.shifts),
                          fmt::format("{:.3g}", r.drift_max), fmt::format("{:.3g}", r.drift_rms),
                          fmt::format("{:.3g}", r.once_rms),
                          fmt::format("{:.1f}", r.drift_rms / r.once_rms)});
  body.heading("Context shift: keys re-rotated in the cache", 3);
  body.para(
      "When the window is full, llama.cpp drops the oldest tokens and turns every cached key "
      "back by the number dropped (its K-shift: RoPE of the stored, already rotated key, then "
      "stored again in the cache's format). Each shift rounds once more. The table: " +
      std::to_string(keys) +
      " keys "
      "(head dim 128, theta 5e5, N(0, 1) entries) shifted by -2048 again and again in a "
      "rerotate-mode `kv_cache`, against the same keys rotated once at their final positions "
      "(an exact-mode cache, which keeps the keys as appended and rotates them afresh at each "
      "edit: bit for bit one rotation, tested). The last column says how many single roundings "
      "the drift is worth. Reproduce with `posenc rope shift-drift --head-dim 128 --theta 500000 "
      "--delta -2048`.");
  body.add(std::move(table));
}

report_section rope_section(report_context& ctx) {
  // One head of a Llama-2-like model: D = R = 128, theta 1e4, original context 4096, every
  // scaling extending it 8x to 32768.
  const int64_t D = 128, orig = 4096, target = 32768;
  const double s = 8;
  rope_config base;
  base.head_dim = D;
  base.rotary_dim = D;
  base.theta = 10000;
  base.max_position_embeddings = orig;
  base.original_max_position_embeddings = orig;

  struct entry {
    std::string label;
    rope_config c;
    int64_t seq_len;
  };
  std::vector<entry> entries;
  entries.push_back({"default", base, 0});
  auto lin = base;
  lin.type = rope_type::linear;
  lin.factor = s;
  entries.push_back({"linear (PI), s = 8", lin, 0});
  auto dyn = base;
  dyn.type = rope_type::dynamic;
  dyn.factor = s;
  entries.push_back({"dynamic NTK, s = 8 at L = 32768", dyn, target});
  auto yarn = base;
  yarn.type = rope_type::yarn;
  yarn.factor = s;
  entries.push_back({"yarn, s = 8", yarn, 0});
  auto l3 = base;
  l3.type = rope_type::llama3;
  l3.factor = s;
  entries.push_back({"llama3, s = 8 (low 1, high 4)", l3, 0});
  // LongRoPE's factors come from a search per model; this illustrative long_factor rises
  // linearly from 1 (fastest pair) to s (slowest pair), short_factor is all ones.
  auto lr = base;
  lr.type = rope_type::longrope;
  lr.factor = s;
  lr.max_position_embeddings = target;
  const int64_t pairs = D / 2;
  for (int64_t i = 0; i < pairs; ++i) {
    lr.short_factor.push_back(1.0);
    lr.long_factor.push_back(1.0 + (s - 1) * static_cast<double>(i) / double(pairs - 1));
  }
  entries.push_back({"longrope (illustrative linear long_factor), L = 32768", lr, target});

  vl::line_plot plot;
  plot.title = "RoPE frequency schedules, D = R = 128, theta = 1e4, 4096 -> 32768";
  plot.x.label = "pair index i";
  plot.y.label = "inv_freq omega_i (radians per position)";
  plot.y.kind = vl::scale::log;
  doc::table table;
  table.head = {"scaling", "omega_0", "omega_{R/2-1}", "attention factor a"};
  for (size_t k = 0; k < entries.size(); ++k) {
    const auto f = rope_frequencies(entries[k].c, entries[k].seq_len);
    vl::line_series ser;
    ser.name = entries[k].label;
    for (size_t i = 0; i < f.inv_freq.size(); ++i) {
      ser.x.push_back(static_cast<double>(i));
      ser.y.push_back(f.inv_freq[i]);
    }
    ser.dashed = k == 0;
    plot.series.push_back(ser);
    const double last = f.inv_freq.back();
    table.rows.push_back(
        {entries[k].label, num(f.inv_freq[0]), num(last), num(f.attention_factor)});
  }
  const doc::chart freqs_chart = doc::save_chart(ctx.out_dir, "rope_freqs.vl.json",
                                                 "RoPE frequency schedules", vl::spec(plot));

  report_section sec;
  sec.id = "rope";
  sec.title = "RoPE: frequency schedules of the scaling types";
  sec.body.para(
      "Every RoPE scaling type changes only the per-pair frequencies omega_i (and a magnitude "
      "a multiplying cos and sin); the rotation is shared. Linear interpolation divides every "
      "frequency by s; dynamic NTK raises the base; YaRN keeps the fast pairs (many rotations "
      "inside the original context) and interpolates the slow ones with a ramp between; Llama "
      "3.1 does the same by wavelength with a smooth blend; LongRoPE divides by a searched "
      "per-pair factor. Reproduce one row with `posenc rope freqs --head-dim 128 "
      "--scaling yarn --factor 8 --original-max-pos 4096 --format json`.");
  sec.body.fig(freqs_chart, "log inv_freq against pair index for each scaling type.");
  sec.body.add(std::move(table));
  add_drift(ctx, sec.body, base);
  add_shift_drift(ctx, sec.body);
  int n = 0, failed = 0;
  for (const auto& c : ctx.checks)
    if (c.group == "rope") {
      ++n;
      failed += !c.passed;
    }
  sec.body.para(
      fmt::format("RoPE property checks: {} run, {} failed (see the checks table; "
                  "`posenc check --group rope`).",
                  n, failed));
  return sec;
}

const bool registered_report_rope = register_report_section(30, "rope", rope_section);

}  // namespace
}  // namespace posenc::cli
