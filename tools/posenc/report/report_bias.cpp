// Report section "bias": the score-bias families. An ALiBi bias heatmap per head (H = 6, a
// head count that is not a power of two, causal, 12 positions), the slope conventions side by
// side, the T5 bucket of each offset in both modes, and the alibi/t5/shaw check results.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "cli.hpp"
#include "posenc/encodings/alibi.hpp"
#include "posenc/encodings/t5_bias.hpp"
#include "report.hpp"

namespace posenc::cli {
namespace {

report_section bias_section(report_context& ctx) {
  report_section sec;
  sec.id = "bias";
  sec.title = "Score biases: ALiBi slopes and T5 buckets";

  // ALiBi heatmaps: bias(h, i, j) = -m_h (i - j) for j <= i; the future (j > i) is masked.
  const int64_t H = 6, T = 12;
  const auto press = alibi_slopes(H);
  const auto geo = alibi_slopes(H, 8.0, alibi_convention::geometric);
  doc::figure heads;
  heads.caption = doc::markup(
      "ALiBi bias per head, H = 6, causal, positions 0..11 (grey: masked future keys).");
  for (int64_t h = 0; h < H; ++h) {
    vl::heatmap hm;
    hm.title = fmt::format("ALiBi head {} (slope {}), causal", h, num(press[h]));
    hm.x_label = "key position j";
    hm.y_label = "query position i";
    hm.value_label = "bias -m (i - j)";
    hm.rows = T;
    hm.cols = T;
    hm.width = 420;
    hm.height = 360;
    hm.masked_label = "masked (j > i)";
    for (int64_t i = 0; i < T; ++i)
      for (int64_t j = 0; j < T; ++j)
        hm.values.push_back(j > i ? std::numeric_limits<double>::quiet_NaN()
                                  : alibi_bias(press[h], i, j, true));
    // One colour scale for all heads (the steepest head sets the minimum) so they compare.
    double vmin = 0;
    for (double m : press) vmin = std::min(vmin, -m * static_cast<double>(T - 1));
    hm.vmin = vmin;
    hm.vmax = 0.0;
    heads.charts.push_back(doc::save_chart(ctx.out_dir, fmt::format("alibi_head{}.vl.json", h),
                                           fmt::format("ALiBi bias head {}", h), vl::spec(hm)));
  }

  doc::table slopes;
  slopes.head = {"head", "press / Bloom / vLLM / ggml (= mpt)", "plain geometric 2^(-8(h+1)/H)"};
  for (int64_t h = 0; h < H; ++h)
    slopes.rows.push_back({std::to_string(h), num(press[h]), num(geo[h])});

  // T5 buckets against the offset kpos - qpos, (32, 128), both modes.
  vl::line_plot plot;
  plot.title = "T5 relative position buckets, num_buckets 32, max_distance 128";
  plot.x.label = "offset r = key position - query position";
  plot.y.label = "bucket";
  for (bool bidi : {true, false}) {
    vl::line_series s;
    s.name = bidi ? "bidirectional (encoder)" : "causal (decoder)";
    s.dashed = !bidi;
    for (int64_t r = -160; r <= 160; ++r) {
      s.x.push_back(static_cast<double>(r));
      s.y.push_back(static_cast<double>(t5_bucket(r, bidi)));
    }
    plot.series.push_back(s);
  }
  const doc::chart t5_chart =
      doc::save_chart(ctx.out_dir, "t5_buckets.vl.json", "T5 buckets", vl::spec(plot));

  sec.body.para(
      "ALiBi (Press et al. 2022) adds -m_h (i - j) to the scores of head h; the slopes form a "
      "geometric sequence, and for a head count that is not a power of two the reference code "
      "completes it with every other slope of the next power of two. MPT's ceil-then-shuffle "
      "formula produces the same slopes; only the plain geometric rule (some examples, mlx before "
      "its fix) differs. Positions are position ids, so padding and packing need no special case. "
      "Reproduce with `posenc alibi slopes --heads 6 --format json` and "
      "`posenc alibi bias --heads 6 --q-positions 0:12 --k-positions 0:12 --causal`.");
  sec.body.add(std::move(heads));
  sec.body.add(std::move(slopes));
  sec.body.para(
      "T5 (Raffel et al. 2020) maps the offset r = key position - query position to one of "
      "num_buckets buckets: exact for small |r|, logarithmic up to max_distance, then "
      "saturated; bidirectional attention gives each sign half the buckets (positive offsets "
      "above), causal attention sends every future key to bucket 0. Each bucket owns a learned "
      "bias per head. Reproduce with `posenc t5 buckets --offsets -160:161 --format json` (add "
      "`--causal`).");
  sec.body.fig(t5_chart, "T5 bucket against offset, both modes.");

  int n = 0, failed = 0;
  for (const auto& c : ctx.checks)
    if (c.group == "alibi" || c.group == "t5" || c.group == "shaw") {
      ++n;
      failed += !c.passed;
    }
  sec.body.para(fmt::format(
      "ALiBi, T5 and Shaw property checks: {} run, {} failed (`posenc check --group alibi "
      "--group t5 --group shaw`).",
      n, failed));
  return sec;
}

const bool registered_report_bias = register_report_section(40, "bias", bias_section);

}  // namespace
}  // namespace posenc::cli
