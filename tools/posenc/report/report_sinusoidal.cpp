// Report sections for the sinusoidal absolute encoding (issue 2), orders 10-12:
//
//   10 "sinusoidal"           the construction and the seeds' worked examples (width 4 at
//                             positions 0..2, width 8 at positions 0..3), frequencies,
//                             wavelengths and the squared norm d/2;
//   11 "sinusoidal-width"     widths 20 and 50: the same channel index at position 5, the same
//                             fraction q = 0.4, and the `posenc figure` figures;
//   12 "sinusoidal-relative"  the shift rotation R(1) at omega = 1 applied to real rows, the
//                             dot product PE(0).PE(k) over k (it oscillates), and the
//                             offset-only structure of PE(i).PE(j) against the sine-only product.
//
// Every number shown is computed by the library in this run (sinusoidal_table,
// sinusoidal_frequencies, sinusoidal_wavelengths, sinusoidal_shift_rotation,
// sinusoidal_dot_profile). The only numbers typed here are the seeds' own rounded values,
// printed beside the library's for comparison.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "cli.hpp"
#include "posenc/encodings/sinusoidal.hpp"
#include "report.hpp"

namespace posenc::cli {

namespace {

// Fixed decimals, with "-0.000" printed as "0.000".
std::string fx(double v, int decimals) {
  std::string s = fmt::format("{:.{}f}", v, decimals);
  if (s[0] == '-' && s.find_first_not_of("-0.") == std::string::npos) s.erase(0, 1);
  return s;
}

using doc::table;

// Figures shown side by side (wrapping on narrow screens), each with its caption (markup).
doc::figure_row side_by_side(const std::vector<std::pair<doc::chart, std::string>>& charts) {
  doc::figure_row row;
  for (const auto& [chart, caption] : charts)
    row.figures.push_back({{chart}, doc::markup(caption)});
  return row;
}

sinusoidal_params paper(int64_t d) {
  sinusoidal_params p;
  p.width = d;
  return p;
}

std::vector<int64_t> iota(int64_t n) {
  std::vector<int64_t> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] = i;
  return v;
}

// Rows 0..n-1 of the paper-convention table as a report table with `dec` decimals.
table worked_table(int64_t d, int64_t n, int dec) {
  const auto p = paper(d);
  const auto t = sinusoidal_table(p, iota(n));  // (n, d) row-major
  table tb;
  tb.head.push_back("position i");
  for (int64_t j = 0; j < d; ++j)
    tb.head.push_back(fmt::format("ch {} = {}(i ω{})", j, j % 2 ? "cos" : "sin", j / 2));
  for (int64_t i = 0; i < n; ++i) {
    std::vector<std::string> row{std::to_string(i)};
    for (int64_t j = 0; j < d; ++j) row.push_back(fx(t[static_cast<size_t>(i * d + j)], dec));
    tb.rows.push_back(row);
  }
  return tb;
}

std::string join_fixed(const std::vector<double>& v, int dec) {
  std::string s;
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + fx(v[i], dec);
  return s;
}

int count_checks(const report_context& ctx, bool* all_passed) {
  int n = 0;
  *all_passed = true;
  for (const auto& c : ctx.checks) {
    if (c.group != "sinusoidal") continue;
    ++n;
    *all_passed &= c.passed;
  }
  return n;
}

// ---------------------------------------------------------------------------------------------

report_section construction_section(report_context& /*ctx*/) {
  doc::document b;
  b.para(
      "Attention on its own cannot tell token order: permuting the input rows only permutes the "
      "output rows. The original Transformer (Vaswani et al., 2017, section 3.5) fixes this by "
      "adding to each token embedding a vector PE(i) that depends only on the position i. Each "
      "pair of channels is a sine and a cosine of the same angle, turning at its own speed:");
  b.code(
      "PE(i, 2r)   = sin(i ω_r)\n"
      "PE(i, 2r+1) = cos(i ω_r),    ω_r = 10000^(-2r/d),   r = 0 .. d/2 - 1");
  b.para(
      "So a pair is a point on the unit circle, like the hand of a clock: the first pair turns "
      "by 1 radian per position, later pairs turn more and more slowly.");

  b.heading("Width 4, positions 0 to 2");
  const auto p4 = paper(4);
  const auto w4 = sinusoidal_frequencies(p4);
  const auto l4 = sinusoidal_wavelengths(p4);
  b.para(fmt::format(
      "With d = 4 there are two pairs. Their frequencies are ω_0 = {} and ω_1 = 10000^(-1/2) = "
      "{}, and their wavelengths 2π/ω are {} and {} positions (2π and 200π). The library's "
      "table, beside the values the seed document quotes:",
      fx(w4[0], 4), fx(w4[1], 4), fx(l4[0], 2), fx(l4[1], 2)));
  auto t4 = worked_table(4, 3, 5);
  // The seeds' rounded values ("Position Encodings: Order Must Enter Somewhere", "Construct a
  // sinusoidal encoding"); printed for comparison only.
  const std::vector<std::string> seed4 = {"(0, 1, 0, 1)", "(0.8415, 0.5403, 0.0100, 0.99995)",
                                          "(0.9093, -0.4161, 0.0200, 0.99980)"};
  t4.head.push_back("seed (rounded)");
  for (size_t i = 0; i < 3; ++i) t4.rows[i].push_back(seed4[i]);
  b.add(t4);
  const auto row4 = sinusoidal_table(p4, std::vector<int64_t>{1});
  double norm4 = 0;
  for (double v : row4) norm4 += v * v;
  b.para(fmt::format(
      "Read down a column: the first pair (channels 0, 1) changes a lot from one position to the "
      "next, the second pair (channels 2, 3) barely moves. Read along a row: each pair has "
      "squared length sin^2 + cos^2 = 1, so every position vector has squared length d/2 = 2 "
      "(measured at position 1: {}).",
      fx(norm4, 12)));

  b.heading("Width 8, positions 0 to 3");
  const auto w8 = sinusoidal_frequencies(paper(8));
  b.para(fmt::format(
      "With d = 8 the exponents 2r/d are 0, 1/4, 1/2 and 3/4, so the four frequencies are {}: "
      "each pair turns ten times more slowly than the one before it. The last pair has moved "
      "only 0.003 radians by position 3, while the first has gone almost half way round.",
      join_fixed(w8, 4)));
  b.add(worked_table(8, 4, 5));
  return {"sinusoidal", "Sinusoidal positions: the construction and worked examples", std::move(b)};
}

report_section width_section(report_context& ctx) {
  doc::document b;
  b.para(
      "A channel's frequency depends on two things: its pair index r and the total width d, "
      "through the fraction q = 2r/d (ω = 10000^(-q)). Changing d therefore changes the actual "
      "values in a channel, not just the number of channels.");

  b.heading("Same channels, different width: channels 2 and 3 at position 5");
  table same_index;
  same_index.head = {"width d",    "pair r",     "q = 2r/d",       "ω_1 (library)",
                     "phase 5ω_1", "seed phase", "PE(5, 2) = sin", "PE(5, 3) = cos"};
  const std::vector<std::string> seed_phase = {"1.99054", "3.45915"};
  int k = 0;
  for (int64_t d : {20, 50}) {
    const auto p = paper(d);
    const auto w = sinusoidal_frequencies(p);
    const auto row = sinusoidal_table(p, std::vector<int64_t>{5});
    same_index.rows.push_back({std::to_string(d), "1", fx(2.0 / d, 2), fx(w[1], 6), fx(5 * w[1], 6),
                               seed_phase[k++], fx(row[2], 6), fx(row[3], 6)});
  }
  b.add(same_index);
  b.para(
      "Channels 0 and 1 are sin(i) and cos(i) at every width, but channels 2 and 3 have exponent "
      "2/20 = 0.1 at width 20 and 2/50 = 0.04 at width 50: the wider vector gives the same "
      "channel index a higher frequency, so at position 5 it has turned further.");

  b.heading("Same place in the vector: q = 0.4");
  table same_q;
  same_q.head = {"width d", "pair r", "channels", "q", "ω (library)", "seed"};
  for (auto [d, r] : std::vector<std::pair<int64_t, int64_t>>{{20, 4}, {50, 10}}) {
    const auto p = paper(d);
    const auto w = sinusoidal_frequencies(p);
    same_q.rows.push_back(
        {std::to_string(d), std::to_string(r),
         fmt::format("{}/{}", sinusoidal_channel(p, r, false), sinusoidal_channel(p, r, true)),
         fx(2.0 * r / d, 2), fx(w[static_cast<size_t>(r)], 8), "0.025119"});
  }
  b.add(same_q);
  double n20 = 0, n50 = 0;
  for (double v : sinusoidal_table(paper(20), std::vector<int64_t>{5})) n20 += v * v;
  for (double v : sinusoidal_table(paper(50), std::vector<int64_t>{5})) n50 += v * v;
  b.para(fmt::format(
      "Holding q fixed holds the frequency fixed: channels 8/9 at width 20 and 20/21 at width 50 "
      "turn at the same speed. A wider vector samples the same frequency curve at more points "
      "(q = 0, 2/d, 4/d, ...). Every pair still has length 1, so the squared length of the whole "
      "vector grows with the number of pairs: {} at width 20 and {} at width 50 (measured at "
      "position 5).",
      fx(n20, 9), fx(n50, 9)));

  b.heading("Figures");
  const auto figs =
      sinusoidal_figures({20, 50}, 64, 10000.0, sin_layout::interleaved, sin_denominator::width);
  std::vector<std::pair<doc::chart, std::string>> heat, curves, freq;
  for (const auto& f : figs) {
    auto& dst = f.file.find("_table_") != std::string::npos    ? heat
                : f.file.find("_curves_") != std::string::npos ? curves
                                                               : freq;
    dst.push_back({doc::save_chart(ctx.out_dir, f.file, f.alt, f.spec), doc::lit(f.caption)});
  }
  b.para(
      "The tables as pictures. Each row is a position and each column a channel; compare how far "
      "to the right the stripes reach at the two widths. Reproduce with `posenc figure --width 20 "
      "--width 50 --out DIR`.");
  b.add(side_by_side(heat));
  b.add(side_by_side(curves));
  b.add(side_by_side(freq));
  return {"sinusoidal-width", "How the width d changes the encoding", std::move(b)};
}

// "A shift is a rotation": R(1) at omega = 1 applied to the rows of the width-4 table. Returns
// that table, (3, 4) row-major, whose pair 0 (omega = 1) the last part's counterexample uses.
std::vector<double> shift_rotation_part(doc::document& b) {
  b.heading("A shift is a rotation");
  b.para(
      "Moving from position i to i + k adds the angle kω to every pair. By the angle-addition "
      "identities, the new (sin, cos) pair is the old one multiplied by a 2 x 2 rotation matrix "
      "R(k) that depends on the offset k and the pair's frequency, but not on i:");
  b.code(
      "[sin((i+k)ω)]   [ cos(kω)  sin(kω)] [sin(iω)]\n"
      "[cos((i+k)ω)] = [-sin(kω)  cos(kω)] [cos(iω)]");
  const auto R = sinusoidal_shift_rotation(1.0, 1.0);  // row-major {a, b, c, e}
  auto t4 = sinusoidal_table(paper(4), iota(3));  // (3, 4); pair 0 has w = 1; not const: returned
  auto apply = [&](double s, double c) {
    return std::pair<double, double>{R[0] * s + R[1] * c, R[2] * s + R[3] * c};
  };
  const auto [s1, c1] = apply(t4[0], t4[1]);
  const auto [s2, c2] = apply(t4[4], t4[5]);
  b.para("With ω = 1 and k = 1 (the first pair, one step forward) the library gives:");
  table rt;
  rt.head = {"R(1)", "column 1", "column 2"};
  rt.rows = {{"row 1", fx(R[0], 4), fx(R[1], 4)}, {"row 2", fx(R[2], 4), fx(R[3], 4)}};
  b.add(rt);
  table ap;
  ap.head = {"start", "pair (sin, cos) at start", "R(1) times it", "table row at start + 1"};
  ap.rows = {{"position 0", fmt::format("({}, {})", fx(t4[0], 4), fx(t4[1], 4)),
              fmt::format("({}, {})", fx(s1, 4), fx(c1, 4)),
              fmt::format("({}, {})", fx(t4[4], 4), fx(t4[5], 4))},
             {"position 1", fmt::format("({}, {})", fx(t4[4], 4), fx(t4[5], 4)),
              fmt::format("({}, {})", fx(s2, 4), fx(c2, 4)),
              fmt::format("({}, {})", fx(t4[8], 4), fx(t4[9], 4))}};
  b.add(ap);
  const double err = std::max(
      {std::abs(s1 - t4[4]), std::abs(c1 - t4[5]), std::abs(s2 - t4[8]), std::abs(c2 - t4[9])});
  b.para(fmt::format(
      "The same matrix takes position 0 to 1 and position 1 to 2 (largest difference {:.1e}, "
      "rounding). This is why a fixed offset is easy to express with these encodings: one linear "
      "map per pair does it for every position. It does not force a trained model to use it.",
      err));
  return t4;
}

// "The dot product PE(0) · PE(k) oscillates": the profile at widths 20 and 50, and where it
// rises again.
void dot_profile_part(report_context& ctx, doc::document& b) {
  b.heading("The dot product PE(0) · PE(k) oscillates");
  const int64_t K = ctx.quick ? 160 : 400;
  vl::line_plot dp;
  dp.title = "PE(0) · PE(k) = Σ_r cos(k ω_r)";
  dp.x.label = "offset k (positions)";
  dp.y.label = "dot product";
  dp.ref = vl::reference_line{0.0, ""};
  std::string rises;
  for (int64_t d : {20, 50}) {
    const auto prof = sinusoidal_dot_profile(paper(d), K);  // K + 1 values, k = 0..K
    vl::line_series s;
    s.name = fmt::format("d = {}", d);
    int64_t first_rise = -1, n_rise = 0;
    for (int64_t kk = 0; kk <= K; ++kk) {
      s.x.push_back(static_cast<double>(kk));
      s.y.push_back(prof[static_cast<size_t>(kk)]);
      if (kk > 0 && prof[static_cast<size_t>(kk)] > prof[static_cast<size_t>(kk - 1)]) {
        ++n_rise;
        if (first_rise < 0) first_rise = kk;
      }
    }
    rises += fmt::format(
        "{}at width {} the curve first rises again at k = {} and rises at {} of "
        "the {} steps",
        rises.empty() ? "" : "; ", d, first_rise, n_rise, K);
    dp.series.push_back(std::move(s));
  }
  const doc::chart dot_chart = doc::save_chart(ctx.out_dir, "sinusoidal_dot_profile.vl.json",
                                               "PE(0) · PE(k) for widths 20 and 50", vl::spec(dp));
  b.para(fmt::format(
      "Summing cos(k ω_r) over the pairs gives the raw dot product between position 0 and "
      "position k. It is largest at k = 0 (where it equals d/2) but it does not simply fall as k "
      "grows: {}. So the raw dot product is not a distance that decays; it wiggles, and learned "
      "projections in a real model need not keep this identity at all.",
      rises));
  b.add(side_by_side(
      {{dot_chart,
        "PE(0) · PE(k) for widths 20 and 50, computed by the library. The fast pairs make "
        "it oscillate; it never settles into a monotone decay."}}));
}

// Spread along each diagonal i - j = const of an (n, n) row-major matrix: zero up to rounding
// when the product depends on the offset alone.
double diag_spread(const std::vector<double>& m, int64_t n) {
  double worst = 0;
  for (int64_t off = -(n - 1); off <= n - 1; ++off) {
    double lo = 1e300, hi = -1e300;
    for (int64_t i = std::max<int64_t>(0, off); i < n && i - off < n; ++i) {
      const double v = m[static_cast<size_t>(i * n + (i - off))];
      lo = std::min(lo, v), hi = std::max(hi, v);
    }
    worst = std::max(worst, hi - lo);
  }
  return worst;
}

// "Only the offset matters, if sine and cosine stay together": PE(i) · PE(j) over all channels
// and over the sine channels only, as heat maps with their diagonal spreads. t4: the width-4
// table of shift_rotation_part.
void offset_part(report_context& ctx, doc::document& b, const std::vector<double>& t4) {
  b.heading("Only the offset matters, if sine and cosine stay together");
  const int64_t d = 20, n = ctx.quick ? 40 : 64;
  const auto p = paper(d);
  const auto t = sinusoidal_table(p, iota(n));  // (n, d) row-major
  std::vector<double> full(static_cast<size_t>(n * n)), sine(static_cast<size_t>(n * n));
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      double a = 0, s = 0;  // PE(i).PE(j) over all channels; over the sine channels only
      for (int64_t r = 0; r < d / 2; ++r) {
        const int64_t cs = sinusoidal_channel(p, r, false), cc = sinusoidal_channel(p, r, true);
        const double ss = t[static_cast<size_t>(i * d + cs)] * t[static_cast<size_t>(j * d + cs)];
        s += ss;
        a += ss + t[static_cast<size_t>(i * d + cc)] * t[static_cast<size_t>(j * d + cc)];
      }
      full[static_cast<size_t>(i * n + j)] = a;
      sine[static_cast<size_t>(i * n + j)] = s;
    }
  }
  const double spread_full = diag_spread(full, n), spread_sine = diag_spread(sine, n);
  using gram = std::tuple<std::string, std::string, const std::vector<double>*>;
  std::vector<doc::chart> grams;
  for (const auto& [file, title, m] : std::vector<gram>{
           {"sinusoidal_gram_full.vl.json", "PE(i) · PE(j), width 20", &full},
           {"sinusoidal_gram_sine_only.vl.json", "Sine channels only, width 20", &sine}}) {
    vl::heatmap h;
    h.title = title;
    h.x_label = "position j";
    h.y_label = "position i";
    h.value_label = "dot product";
    h.rows = n;
    h.cols = n;
    h.values = *m;
    h.map = vl::colormap::diverging;
    h.vmin = -static_cast<double>(d) / 2;
    h.vmax = static_cast<double>(d) / 2;
    h.width = 560;
    h.height = 520;
    grams.push_back(doc::save_chart(ctx.out_dir, file, title, vl::spec(h)));
  }
  b.para(fmt::format(
      "For every pair, sin(iω)sin(jω) + cos(iω)cos(jω) = cos((i - j)ω), so PE(i) · PE(j) depends "
      "only on the offset i - j: the first picture is constant along every diagonal (largest "
      "spread along a diagonal: {:.1e}, rounding). With the sine channels alone the product is "
      "(cos((i-j)ω) - cos((i+j)ω)) / 2, which also depends on i + j: the second picture changes "
      "along its diagonals (spread up to {}).",
      spread_full, fx(spread_sine, 3)));
  b.para(fmt::format(
      "The smallest counterexample, at ω = 1: sin(1)sin(0) = {} but sin(2)sin(1) = {}, although "
      "both pairs of positions are one step apart.",
      fx(t4[4] * t4[0], 4), fx(t4[8] * t4[4], 4)));
  b.add(side_by_side(
      {{grams[0], "PE(i) · PE(j) over positions 0.." + std::to_string(n - 1) +
                      ": stripes run exactly along the diagonals, so only i - j matters."},
       {grams[1],
        "The same product using the sine channels only: the diagonals are no longer "
        "constant, so absolute position leaks in."}}));
}

report_section relative_section(report_context& ctx) {
  doc::document b;
  const std::vector<double> t4 = shift_rotation_part(b);
  dot_profile_part(ctx, b);
  offset_part(ctx, b, t4);
  bool all_passed = true;
  const int nchecks = count_checks(ctx, &all_passed);
  if (nchecks > 0)
    b.para(fmt::format(
        "These identities are also checked numerically over random widths, bases, positions and "
        "offsets by `posenc check` ({} sinusoidal checks, {}; see the table of property checks).",
        nchecks, all_passed ? "all passed" : "SOME FAILED"));
  return {"sinusoidal-relative", "Relative position inside an absolute encoding", std::move(b)};
}

const bool reg10 = register_report_section(10, "sinusoidal", construction_section);
const bool reg11 = register_report_section(11, "sinusoidal-width", width_section);
const bool reg12 = register_report_section(12, "sinusoidal-relative", relative_section);

}  // namespace
}  // namespace posenc::cli
