// The SVG plotting toolkit (tools/posenc/report/svg.hpp): well-formed XML, escaping, tick choice,
// NaN / masked handling, log-axis validation, colour maps, determinism.
//
// The toolkit lives with the CLI (tools/posenc/), not in the library, so this test compiles its
// single source file directly.
#include <gtest/gtest.h>
#include <rapidcheck.h>
#include <rapidcheck/gtest.h>

#include <cmath>
#include <sstream>
#include <string>
#include <vector>

#include "posenc/core/error.hpp"
#include "svg.hpp"
#include "xml_check.hpp"

using namespace posenc;
using posenc::test::values_after;
using posenc::test::xml_problem;

namespace {

svg::line_series ser(std::string name, std::vector<double> x, std::vector<double> y) {
  svg::line_series s;
  s.name = std::move(name);
  s.x = std::move(x);
  s.y = std::move(y);
  return s;
}

size_t count(const std::string& s, const std::string& what) {
  size_t n = 0;
  for (size_t p = s.find(what); p != std::string::npos; p = s.find(what, p + 1)) ++n;
  return n;
}

svg::line_plot simple_plot() {
  svg::line_plot p;
  p.title = "demo";
  p.x.label = "position i";
  p.y.label = "value";
  svg::line_series a = ser("sin", {}, {});
  svg::line_series b = ser("cos", {}, {});
  b.dashed = true;
  b.markers = true;
  for (int i = 0; i < 20; ++i) {
    a.x.push_back(i), a.y.push_back(std::sin(i * 0.3));
    b.x.push_back(i), b.y.push_back(std::cos(i * 0.3));
  }
  p.series = {a, b};
  p.ref = svg::reference_line{0.5, "half"};
  return p;
}

svg::heatmap simple_heatmap() {
  svg::heatmap h;
  h.title = "matrix";
  h.x_label = "column";
  h.y_label = "row";
  h.value_label = "value";
  h.rows = 3;
  h.cols = 4;
  for (int i = 0; i < 12; ++i) h.values.push_back(i - 5.5);
  return h;
}

svg::bar_chart simple_bars() {
  svg::bar_chart b;
  b.title = "fraction of limit";
  b.y.label = "fraction";
  b.categories = {"rope", "alibi", "t5"};
  b.series = {{"fast", {0.8, 0.5, 0.3}, ""}, {"reference", {0.1, 0.05, 0.02}, ""}};
  b.ref = svg::reference_line{1.0, "machine limit"};
  return b;
}

// The cell rectangles of a heatmap: the fills inside its first <g stroke="none"> group.
std::vector<std::string> cell_fills(const std::string& s) {
  size_t a = s.find("<g stroke=\"none\">");
  size_t e = s.find("</g>", a);
  std::string g = s.substr(a, e - a);
  return values_after(g, "fill=\"");
}

}  // namespace

TEST(SvgXmlChecker, CatchesMalformedDocuments) {
  // The checker itself must be able to fail, or the well-formedness tests below prove nothing.
  EXPECT_EQ(xml_problem("<svg><g></g></svg>"), "");
  EXPECT_NE(xml_problem("<svg><g></svg>"), "");
  EXPECT_NE(xml_problem("<svg a=1></svg>"), "");
  EXPECT_NE(xml_problem("<svg>a & b</svg>"), "");
  EXPECT_NE(xml_problem("<svg a=\"<\"></svg>"), "");
  EXPECT_NE(xml_problem("<svg></svg><svg></svg>"), "");
}

TEST(Svg, EscapeReplacesMarkupCharacters) {
  EXPECT_EQ(svg::escape("a<b & \"c\" 'd'>"), "a&lt;b &amp; &quot;c&quot; &#39;d&#39;&gt;");
  EXPECT_EQ(svg::escape("plain text"), "plain text");
  EXPECT_EQ(svg::escape(std::string("bell\x07")), "bell ");  // control chars are not XML
}

TEST(Svg, LinePlotIsWellFormedAndEscapesText) {
  auto p = simple_plot();
  p.title = "PE(i) & <friends> \"quoted\"";
  p.series[0].name = "a<b";
  p.x.label = "i & j";
  const std::string s = svg::render(p);
  EXPECT_EQ(xml_problem(s), "") << s;
  EXPECT_EQ(s.rfind("<?xml", 0), 0u);
  EXPECT_NE(s.find("<svg xmlns=\"http://www.w3.org/2000/svg\""), std::string::npos);
  EXPECT_NE(s.find("PE(i) &amp; &lt;friends&gt; &quot;quoted&quot;"), std::string::npos);
  EXPECT_NE(s.find(">a&lt;b<"), std::string::npos);
  EXPECT_NE(s.find(">i &amp; j<"), std::string::npos);
  EXPECT_EQ(s.find("<friends>"), std::string::npos);
  // Two series, one dashed with markers, a dashed reference line with its label.
  EXPECT_EQ(count(s, "<polyline"), 2u);
  EXPECT_EQ(count(s, "<circle"), 20u + 1u);  // 20 markers + 1 legend marker
  EXPECT_NE(s.find(">half<"), std::string::npos);
}

TEST(Svg, LinePlotPointsFollowTheData) {
  // y = x: pixel x must increase and pixel y decrease along the polyline.
  svg::line_plot p;
  svg::line_series s = ser("", {0, 1, 2, 3, 4}, {0, 1, 2, 3, 4});
  p.series = {s};
  const std::string out = svg::render(p);
  const auto lines = values_after(out, "<polyline points=\"");
  ASSERT_EQ(lines.size(), 1u);
  std::vector<std::pair<double, double>> pts;
  std::istringstream in(lines[0]);
  std::string tok;
  while (in >> tok) {
    const size_t comma = tok.find(',');
    ASSERT_NE(comma, std::string::npos) << tok;
    pts.emplace_back(std::stod(tok.substr(0, comma)), std::stod(tok.substr(comma + 1)));
  }
  ASSERT_EQ(pts.size(), 5u);
  for (size_t i = 1; i < pts.size(); ++i) {
    EXPECT_GT(pts[i].first, pts[i - 1].first);
    EXPECT_LT(pts[i].second, pts[i - 1].second);
    // Equal data steps give equal pixel steps (linear axes), to the printed 0.01 px.
    EXPECT_NEAR(pts[i].first - pts[i - 1].first, pts[1].first - pts[0].first, 0.02);
    EXPECT_NEAR(pts[i].second - pts[i - 1].second, pts[1].second - pts[0].second, 0.02);
  }
}

TEST(Svg, RenderingIsDeterministic) {
  EXPECT_EQ(svg::render(simple_plot()), svg::render(simple_plot()));
  EXPECT_EQ(svg::render(simple_heatmap()), svg::render(simple_heatmap()));
  EXPECT_EQ(svg::render(simple_bars()), svg::render(simple_bars()));
}

TEST(Svg, NiceTicksKnownCases) {
  // (hi - lo) / (target - 1) = 0.2 -> step 0.2.
  auto t = svg::nice_ticks(0, 1, 6);
  ASSERT_EQ(t.size(), 6u);
  for (size_t i = 0; i < t.size(); ++i) EXPECT_NEAR(t[i], 0.2 * i, 1e-12);
  // 63 / 7 = 9 -> next nice step 10: 0, 10, ..., 70.
  t = svg::nice_ticks(0, 63, 8);
  ASSERT_EQ(t.size(), 8u);
  EXPECT_EQ(t.front(), 0);
  EXPECT_EQ(t.back(), 70);
  // 2 / 4 = 0.5: -1, -0.5, 0, 0.5, 1; zero is exactly zero.
  t = svg::nice_ticks(-1, 1, 5);
  ASSERT_EQ(t.size(), 5u);
  EXPECT_EQ(t[2], 0.0);
  EXPECT_FALSE(std::signbit(t[2]));
  // A single value is widened.
  t = svg::nice_ticks(3, 3, 5);
  EXPECT_LT(t.front(), 3);
  EXPECT_GT(t.back(), 3);
  EXPECT_THROW(svg::nice_ticks(1, 0, 5), posenc::invalid_argument);
  EXPECT_THROW(svg::nice_ticks(0, NAN, 5), posenc::invalid_argument);
  EXPECT_THROW(svg::nice_ticks(0, 1, 1), posenc::invalid_argument);
}

RC_GTEST_PROP(SvgProp, NiceTicksCoverTheRangeWithANiceStep, ()) {
  const double lo = *rc::gen::inRange(-1000000, 1000000) / 1000.0;
  // Spans from 1e-6 to 1e3, but at least 1e-6 |lo|: narrower intervals far from zero are
  // below what double tick arithmetic (relative error ~1e-16 |lo|) can resolve at 1e-9 step.
  const double span = std::max(*rc::gen::inRange(1, 1000000000) / 1e6, 1e-6 * std::abs(lo));
  const int target = *rc::gen::inRange(2, 12);
  const double hi = lo + span;
  const auto t = svg::nice_ticks(lo, hi, target);
  RC_ASSERT(t.size() >= 2u);
  const double step = t[1] - t[0];
  // Cover [lo, hi] with no more than one step to spare on either side.
  RC_ASSERT(t.front() <= lo + 1e-9 * step);
  RC_ASSERT(t.back() >= hi - 1e-9 * step);
  RC_ASSERT(t.front() > lo - step * (1 + 1e-9));
  RC_ASSERT(t.back() < hi + step * (1 + 1e-9));
  // Step is m * 10^k with m in {1, 2, 2.5, 5}; at least the requested density.
  const double pow10 = std::pow(10.0, std::floor(std::log10(step) + 1e-12));
  double nominal = 0;
  for (double m : {1.0, 2.0, 2.5, 5.0, 10.0})
    if (std::abs(step / pow10 - m) < 1e-6) nominal = m * pow10;
  RC_ASSERT(nominal > 0);
  RC_ASSERT(step >= (hi - lo) / (target - 1) * (1 - 1e-9));
  // Evenly spaced; every tick an integer multiple of the nominal step (t[1] - t[0] itself
  // carries the cancellation error of two values of size |lo|).
  for (size_t i = 1; i < t.size(); ++i) RC_ASSERT(std::abs(t[i] - t[i - 1] - step) <= 1e-6 * step);
  for (double v : t) RC_ASSERT(std::abs(v / nominal - std::round(v / nominal)) < 1e-6);
}

TEST(Svg, LogTicks) {
  auto t = svg::log_ticks(1e-4, 1);
  ASSERT_EQ(t.size(), 5u);
  EXPECT_DOUBLE_EQ(t.front(), 1e-4);
  EXPECT_DOUBLE_EQ(t.back(), 1);
  // Within one decade: 1-2-5 subdivisions.
  t = svg::log_ticks(0.02, 0.07);
  ASSERT_EQ(t.size(), 4u);
  EXPECT_DOUBLE_EQ(t[0], 0.01);
  EXPECT_DOUBLE_EQ(t[1], 0.02);
  EXPECT_DOUBLE_EQ(t[2], 0.05);
  EXPECT_DOUBLE_EQ(t[3], 0.1);
  // 40 decades are thinned to every 5th, still covering the range.
  t = svg::log_ticks(1e-20, 1e20);
  EXPECT_LE(t.size(), 10u);
  EXPECT_LE(t.front(), 1e-20);
  EXPECT_GE(t.back(), 1e20);
  EXPECT_THROW(svg::log_ticks(0, 1), posenc::invalid_argument);
  EXPECT_THROW(svg::log_ticks(-1, 1), posenc::invalid_argument);
}

TEST(Svg, FormatTick) {
  EXPECT_EQ(svg::format_tick(0.1 + 0.2, 0.1), "0.3");
  EXPECT_EQ(svg::format_tick(-0.0, 1), "0");
  EXPECT_EQ(svg::format_tick(-1e-17, 0.5), "0");  // rounding noise next to zero
  EXPECT_EQ(svg::format_tick(2.5, 2.5), "2.5");
  EXPECT_EQ(svg::format_tick(70, 10), "70");
  EXPECT_EQ(svg::format_tick(-0.75, 0.25), "-0.75");
  EXPECT_EQ(svg::format_tick(1e-7, 1e-7), "1e-07");
  EXPECT_EQ(svg::format_tick(2e7, 1e7), "2e+07");
}

TEST(Svg, LogAxisRejectsNonPositiveValues) {
  svg::line_plot p;
  p.title = "frequencies";
  p.y.kind = svg::scale::log;
  p.series = {ser("width 20", {0, 1, 2}, {1, 0.5, 0})};
  try {
    svg::render(p);
    FAIL() << "expected invalid_argument";
  } catch (const posenc::invalid_argument& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("log y axis"), std::string::npos) << m;
    EXPECT_NE(m.find("width 20"), std::string::npos) << m;
    EXPECT_NE(m.find("index 2"), std::string::npos) << m;
  }
  p.series[0].y = {1, -0.5, 2};
  EXPECT_THROW(svg::render(p), posenc::invalid_argument);
  // The same values on a linear axis are fine; positive values on a log axis are fine.
  p.y.kind = svg::scale::linear;
  EXPECT_NO_THROW(svg::render(p));
  p.y.kind = svg::scale::log;
  p.series[0].y = {1, 1e-3, 1e-6};
  const std::string s = svg::render(p);
  EXPECT_EQ(xml_problem(s), "");
  EXPECT_NE(s.find(">0.001<"), std::string::npos);   // a decade tick printed plainly
  EXPECT_NE(s.find("10<tspan"), std::string::npos);  // 1e-6 as a power of ten
  // A log x axis and a log bar chart validate the same way.
  p.x.kind = svg::scale::log;
  EXPECT_THROW(svg::render(p), posenc::invalid_argument);  // x = 0
  auto b = simple_bars();
  b.y.kind = svg::scale::log;
  b.series[0].values[1] = 0;
  EXPECT_THROW(svg::render(b), posenc::invalid_argument);
}

TEST(Svg, LinePlotValidation) {
  svg::line_plot p;
  EXPECT_THROW(svg::render(p), posenc::invalid_argument);  // no series
  p.series = {ser("a", {0, 1}, {0})};
  EXPECT_THROW(svg::render(p), posenc::invalid_argument);  // length mismatch
  p.series = {ser("a", {NAN, NAN}, {0, 1})};
  EXPECT_THROW(svg::render(p), posenc::invalid_argument);  // no finite point
  p.series = {ser("a", {0, 1}, {0, 1})};
  p.series[0].marker_radius = 0;
  EXPECT_THROW(svg::render(p), posenc::invalid_argument);  // invisible markers
  p.series[0].marker_radius = 3;
  p.width = 10;
  EXPECT_THROW(svg::render(p), posenc::invalid_argument);  // too small
}

TEST(Svg, NaNBreaksALineIntoSegments) {
  svg::line_plot p;
  p.series = {ser("a", {0, 1, 2, 3, 4, 5}, {0, 1, NAN, 3, 4, 5})};
  const std::string s = svg::render(p);
  EXPECT_EQ(xml_problem(s), "");
  EXPECT_EQ(count(s, "<polyline"), 2u);
  EXPECT_EQ(s.find("nan"), std::string::npos);
}

TEST(Svg, HeatmapCellsAndColourBar) {
  auto h = simple_heatmap();
  std::string s = svg::render(h);
  EXPECT_EQ(xml_problem(s), "") << s;
  const auto fills = cell_fills(s);
  ASSERT_EQ(fills.size(), 12u);
  // Sequential: smallest value gets the first viridis colour, largest the last.
  EXPECT_EQ(fills.front(), "#440154");
  EXPECT_EQ(fills.back(), "#fde725");
  EXPECT_NE(s.find("linearGradient"), std::string::npos);
  EXPECT_NE(s.find(">value<"), std::string::npos);
  EXPECT_EQ(s.find(">masked<"), std::string::npos);  // nothing masked: no legend entry
  // Diverging: default range symmetric about 0, so 0 is the centre (white) colour.
  h.map = svg::colormap::diverging;
  h.values[5] = 0;
  s = svg::render(h);
  EXPECT_EQ(cell_fills(s)[5], "#f7f7f7");
  EXPECT_EQ(cell_fills(s).front(), "#2166ac");  // -5.5 = -max|v|
  // Explicit range clamps.
  h.vmin = -1;
  h.vmax = 1;
  s = svg::render(h);
  EXPECT_EQ(cell_fills(s).back(), "#b2182b");
}

TEST(Svg, HeatmapMasksNonFiniteCells) {
  auto h = simple_heatmap();
  h.values[1] = NAN;
  h.values[2] = -INFINITY;
  h.masked_label = "future (causal mask)";
  const std::string s = svg::render(h);
  EXPECT_EQ(xml_problem(s), "");
  const auto fills = cell_fills(s);
  EXPECT_EQ(fills[1], "url(#masked)");
  EXPECT_EQ(fills[2], "url(#masked)");
  EXPECT_NE(fills[0], "url(#masked)");
  EXPECT_NE(s.find("<pattern id=\"masked\""), std::string::npos);
  EXPECT_NE(s.find(">future (causal mask)<"), std::string::npos);
  EXPECT_EQ(s.find("nan"), std::string::npos);
  // All masked: still renders.
  for (auto& v : h.values) v = NAN;
  EXPECT_EQ(xml_problem(svg::render(h)), "");
}

TEST(Svg, HeatmapLabelsAndAnnotations) {
  auto h = simple_heatmap();
  h.row_labels = {"q0", "q1", "q<2>"};
  h.col_labels = {"k0", "k1", "k2", "k3"};
  h.annotate = true;
  h.annotate_digits = 1;
  const std::string s = svg::render(h);
  EXPECT_EQ(xml_problem(s), "");
  EXPECT_NE(s.find(">q&lt;2&gt;<"), std::string::npos);
  EXPECT_NE(s.find(">k3<"), std::string::npos);
  EXPECT_NE(s.find(">-5.5<"), std::string::npos);
  EXPECT_NE(s.find(">5.5<"), std::string::npos);
  // A big matrix labels only a readable subset of rows and columns.
  svg::heatmap big;
  big.rows = 300;
  big.cols = 64;
  big.values.assign(300 * 64, 1.0);
  const std::string b = svg::render(big);
  EXPECT_EQ(xml_problem(b), "");
  EXPECT_NE(b.find(">50<"), std::string::npos);
  EXPECT_EQ(b.find(">51<"), std::string::npos);
}

TEST(Svg, HeatmapValidation) {
  auto h = simple_heatmap();
  h.values.pop_back();
  EXPECT_THROW(svg::render(h), posenc::invalid_argument);
  h = simple_heatmap();
  h.row_labels = {"a"};
  EXPECT_THROW(svg::render(h), posenc::invalid_argument);
  h = simple_heatmap();
  h.vmin = 2;
  h.vmax = 1;
  EXPECT_THROW(svg::render(h), posenc::invalid_argument);
  h = simple_heatmap();
  h.rows = 0;
  EXPECT_THROW(svg::render(h), posenc::invalid_argument);
}

TEST(Svg, BarChart) {
  auto b = simple_bars();
  std::string s = svg::render(b);
  EXPECT_EQ(xml_problem(s), "") << s;
  EXPECT_NE(s.find(">machine limit<"), std::string::npos);
  EXPECT_NE(s.find("stroke-dasharray"), std::string::npos);
  EXPECT_NE(s.find(">0.8<"), std::string::npos);  // value label
  EXPECT_NE(s.find(">alibi<"), std::string::npos);
  EXPECT_NE(s.find(">reference<"), std::string::npos);  // legend
  b.series[1].values[2] = NAN;
  s = svg::render(b);
  EXPECT_EQ(xml_problem(s), "");
  EXPECT_NE(s.find(">n/a<"), std::string::npos);
  b.series[1].values.pop_back();
  EXPECT_THROW(svg::render(b), posenc::invalid_argument);
  b = simple_bars();
  b.categories.clear();
  EXPECT_THROW(svg::render(b), posenc::invalid_argument);
}

TEST(Svg, ColourMapsAndPalette) {
  EXPECT_EQ(svg::colormap_color(svg::colormap::sequential, 0), "#440154");
  EXPECT_EQ(svg::colormap_color(svg::colormap::sequential, 1), "#fde725");
  EXPECT_EQ(svg::colormap_color(svg::colormap::sequential, 2), "#fde725");  // clamped
  EXPECT_EQ(svg::colormap_color(svg::colormap::diverging, 0.5), "#f7f7f7");
  EXPECT_EQ(svg::palette_color(0), "#0072B2");
  EXPECT_EQ(svg::palette_color(8), svg::palette_color(0));
}
