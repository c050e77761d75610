// The Vega-Lite specifications of the report's figures (tools/posenc/report/vegalite.hpp): the
// data each spec carries (every point, non-finite values as null), the encodings a reader sees
// (axis titles, scales, legend entries, colours, dashes), and the errors on malformed charts.
// Whether a browser draws them is tests/test_report_browser.cpp's part.
//
// The specification builder lives with the CLI (tools/posenc/), not in the library, so this test
// compiles its source file directly.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "posenc/core/error.hpp"
#include "vegalite.hpp"

using namespace posenc;
using vl::json;

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

vl::line_series ser(std::string name, std::vector<double> x, std::vector<double> y) {
  vl::line_series s;
  s.name = std::move(name);
  s.x = std::move(x);
  s.y = std::move(y);
  return s;
}

vl::line_plot simple_plot() {
  vl::line_plot p;
  p.title = "demo";
  p.x.label = "position i";
  p.y.label = "value";
  vl::line_series a = ser("sin", {}, {});
  vl::line_series b = ser("cos", {}, {});
  b.dashed = true;
  b.markers = true;
  for (int i = 0; i < 20; ++i) {
    a.x.push_back(i), a.y.push_back(std::sin(i * 0.3));
    b.x.push_back(i), b.y.push_back(std::cos(i * 0.3));
  }
  p.series = {a, b};
  p.ref = vl::reference_line{0.5, "half"};
  return p;
}

vl::heatmap simple_heatmap() {
  vl::heatmap h;
  h.title = "matrix";
  h.x_label = "column";
  h.y_label = "row";
  h.value_label = "v";
  h.rows = 3;
  h.cols = 4;
  for (int i = 0; i < 12; ++i) h.values.push_back(i * 0.5 - 1);
  return h;
}

vl::bar_chart simple_bars() {
  vl::bar_chart b;
  b.title = "fractions";
  b.y.label = "fraction of limit";
  b.categories = {"rope", "alibi", "t5"};
  b.series = {{"memory", {0.5, kNaN, 0.25}, ""}, {"compute", {kNaN, 0.75, kNaN}, ""}};
  b.ref = vl::reference_line{1.0, "limit"};
  return b;
}

// The layers whose mark has type `type`, in order.
std::vector<json> layers(const json& s, const std::string& type) {
  std::vector<json> out;
  for (const auto& l : s.at("layer"))
    if (l.at("mark").at("type") == type) out.push_back(l);
  return out;
}
// The first of them, or null.
json layer(const json& s, const std::string& type) {
  const auto all = layers(s, type);
  return all.empty() ? json(nullptr) : all.front();
}

// Message of the invalid_argument `f` throws ("" if it does not throw one).
template <typename F>
std::string error_of(F f) {
  try {
    f();
  } catch (const posenc::invalid_argument& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST(VegaLite, LinePlotCarriesEveryPointAndItsEncodings) {
  const auto p = simple_plot();
  const json s = vl::spec(p);
  EXPECT_EQ(s.at("$schema"), "https://vega.github.io/schema/vega-lite/v6.json");
  EXPECT_EQ(s.at("title").at("text"), "demo");
  EXPECT_EQ(s.at("width"), 760);
  EXPECT_EQ(s.at("height"), 440);
  const json& rows = s.at("data").at("values");
  ASSERT_EQ(rows.size(), 40u);
  EXPECT_EQ(rows[0], (json{{"series", "sin"}, {"x", 0.0}, {"y", 0.0}}));
  EXPECT_EQ(rows[21].at("series"), "cos");
  EXPECT_EQ(rows[21].at("y").get<double>(), std::cos(0.3));  // the value itself, not rounded

  const json line = layer(s, "line");
  ASSERT_FALSE(line.is_null());
  const json& enc = line.at("encoding");
  EXPECT_EQ(enc.at("x").at("title"), "position i");
  EXPECT_EQ(enc.at("y").at("title"), "value");
  EXPECT_EQ(enc.at("x").at("scale").at("type"), "linear");
  EXPECT_EQ(enc.at("color").at("scale").at("domain"), (json{"sin", "cos"}));
  EXPECT_EQ(enc.at("color").at("scale").at("range"), (json{"#0072B2", "#D55E00"}));
  // Solid sine, dashed cosine, in one legend with the colours.
  EXPECT_EQ(enc.at("strokeDash").at("scale").at("range"), (json{{1, 0}, {7, 5}}));
  EXPECT_EQ(enc.at("strokeDash").at("scale").at("domain"),
            enc.at("color").at("scale").at("domain"));

  // Markers for cos only (radius 3: area 9 pi); then every point of every series as a hover
  // target, shown only while nearest the pointer, with its values.
  const auto points = layers(s, "point");
  ASSERT_EQ(points.size(), 2u);
  EXPECT_EQ(points[0].at("transform")[0].at("filter").at("oneOf"), json{"cos"});
  EXPECT_NEAR(points[0].at("mark").at("size").get<double>(), 9 * M_PI, 1e-12);
  EXPECT_FALSE(points[1].contains("transform"));
  EXPECT_EQ(points[1].at("encoding").at("opacity").at("value"), 0);
  EXPECT_EQ(points[1].at("encoding").at("tooltip").size(), 3u);
  EXPECT_EQ(points[1].at("params")[0].at("name"), "hover");
  EXPECT_EQ(points[1].at("params")[1].at("bind"), "scales");  // zoom

  // The reference line: a dashed rule at 0.5 and its label.
  const json rule = layer(s, "rule");
  ASSERT_FALSE(rule.is_null());
  EXPECT_EQ(rule.at("data").at("values")[0].at("ref"), 0.5);
  EXPECT_EQ(layer(s, "text").at("encoding").at("text").at("value"), "half");

  // Deterministic: the same chart gives the same bytes.
  EXPECT_EQ(vl::spec(p).dump(), s.dump());
}

TEST(VegaLite, LinePlotAxesGapsAndMarkerOnlySeries) {
  vl::line_plot p;
  p.title = "log";
  p.x.kind = vl::scale::log;
  p.y.kind = vl::scale::log;
  p.x.ticks = {1, 10, 100};
  p.y.min = 1e-3;
  p.y.max = 1;
  p.series = {ser("a", {1, 10, 100}, {0.1, kNaN, 0.01})};
  vl::line_series ring = ser("ring", {10}, {0.05});
  ring.line = false;
  ring.markers = true;
  ring.marker_radius = 7;
  p.series.push_back(ring);
  const json s = vl::spec(p);
  // The NaN is a null (a gap in the line), not dropped and not zero.
  EXPECT_TRUE(s.at("data").at("values")[1].at("y").is_null());
  const json line = layer(s, "line");
  EXPECT_EQ(line.at("encoding").at("x").at("scale").at("type"), "log");
  EXPECT_EQ(line.at("encoding").at("x").at("axis").at("values"), (json{1, 10, 100}));
  EXPECT_EQ(line.at("encoding").at("y").at("scale").at("domain"), (json{1e-3, 1}));
  // The marker-only series has no line; its dots (radius 7) are larger (area pi r^2).
  EXPECT_EQ(line.at("transform")[0].at("filter").at("oneOf"), json{"a"});
  const json ring_dots = layer(s, "point");
  EXPECT_EQ(ring_dots.at("transform")[0].at("filter").at("oneOf"), json{"ring"});
  EXPECT_NEAR(ring_dots.at("mark").at("size").get<double>(), 49 * M_PI, 1e-9);
}

TEST(VegaLite, LinePlotErrorsNameTheChartAndSeries) {
  auto p = simple_plot();
  p.series[1].y.pop_back();
  EXPECT_NE(error_of([&] { vl::spec(p); }).find("'demo': series 'cos' has 20 x values but 19"),
            std::string::npos);
  p = simple_plot();
  p.y.kind = vl::scale::log;
  EXPECT_NE(error_of([&] { vl::spec(p); }).find("log y axis needs positive"), std::string::npos);
  p = simple_plot();
  p.series[1].name = "sin";
  EXPECT_NE(error_of([&] { vl::spec(p); }).find("two series are named 'sin'"), std::string::npos);
  p = simple_plot();
  for (auto& s : p.series)
    for (auto& y : s.y) y = kNaN;
  EXPECT_NE(error_of([&] { vl::spec(p); }).find("no point with finite x and y"), std::string::npos);
  p = simple_plot();
  p.series.clear();
  EXPECT_NE(error_of([&] { vl::spec(p); }).find("has no series"), std::string::npos);
  p = simple_plot();
  p.series[0].marker_radius = 0;
  EXPECT_NE(error_of([&] { vl::spec(p); }).find("marker_radius"), std::string::npos);
  p = simple_plot();
  p.width = 10;
  EXPECT_NE(error_of([&] { vl::spec(p); }).find("width x height"), std::string::npos);
  p = simple_plot();
  p.ref->value = kNaN;
  EXPECT_NE(error_of([&] { vl::spec(p); }).find("reference line"), std::string::npos);
}

TEST(VegaLite, HeatmapCellsColoursAndMask) {
  auto h = simple_heatmap();
  json s = vl::spec(h);
  const json& rows = s.at("data").at("values");
  ASSERT_EQ(rows.size(), 12u);
  EXPECT_EQ(rows[5], (json{{"i", 1}, {"j", 1}, {"v", 1.5}}));  // row-major: (1, 1) = 5 * 0.5 - 1
  EXPECT_EQ(s.at("encoding").at("x").at("title"), "column");
  EXPECT_EQ(s.at("encoding").at("y").at("title"), "row");
  EXPECT_EQ(s.at("encoding").at("y").at("scale").at("reverse"), true);  // row 0 at the top
  EXPECT_EQ(s.at("encoding").at("x").at("scale").at("domain"), (json{-0.5, 3.5}));
  ASSERT_EQ(s.at("layer").size(), 1u);  // nothing masked: no masked layer, no legend entry
  const json color = s.at("layer")[0].at("encoding").at("color");
  EXPECT_EQ(color.at("title"), "v");
  EXPECT_EQ(color.at("scale").at("scheme"), "viridis");
  EXPECT_EQ(color.at("scale").at("domain"), (json{-1.0, 4.5}));  // data min..max

  // Diverging: symmetric about 0 (max |v| = 4.5), blue negative, red positive.
  h.map = vl::colormap::diverging;
  s = vl::spec(h);
  const json dcolor = s.at("layer")[0].at("encoding").at("color").at("scale");
  EXPECT_EQ(dcolor.at("scheme"), "redblue");
  EXPECT_EQ(dcolor.at("reverse"), true);
  EXPECT_EQ(dcolor.at("domain"), (json{-4.5, 4.5}));
  h.vmin = -1;
  h.vmax = 1;
  EXPECT_EQ(vl::spec(h).at("layer")[0].at("encoding").at("color").at("scale").at("domain"),
            (json{-1.0, 1.0}));

  // Masked cells: null values, grey, with their own legend entry.
  h = simple_heatmap();
  h.values[3] = kNaN;
  h.values[7] = std::numeric_limits<double>::infinity();
  h.masked_label = "masked (j > i)";
  s = vl::spec(h);
  EXPECT_TRUE(s.at("data").at("values")[3].at("v").is_null());
  EXPECT_TRUE(s.at("data").at("values")[7].at("v").is_null());
  ASSERT_EQ(s.at("layer").size(), 2u);
  const json& masked = s.at("layer")[1];
  EXPECT_EQ(masked.at("transform")[1].at("calculate"), "\"masked (j > i)\"");
  EXPECT_EQ(masked.at("encoding").at("fill").at("scale").at("range"), json{"#c8c8c8"});
}

TEST(VegaLite, HeatmapLabelsNameRowsAndColumns) {
  auto h = simple_heatmap();  // 3 x 4
  EXPECT_FALSE(vl::spec(h).at("encoding").at("x").at("axis").contains("labelExpr"));
  h.col_labels = {"64", "128", "256", "512"};
  h.row_labels = {"0", "0.5", "1"};
  const json s = vl::spec(h);
  const json& x = s.at("encoding").at("x").at("axis");
  EXPECT_EQ(x.at("values"), (json{0, 1, 2, 3}));
  EXPECT_EQ(x.at("labelExpr"), "[\"64\",\"128\",\"256\",\"512\"][datum.value]");
  EXPECT_EQ(s.at("encoding").at("y").at("axis").at("labelExpr"),
            "[\"0\",\"0.5\",\"1\"][datum.value]");
  // The tooltip shows the labels.
  const json& tip = s.at("encoding").at("tooltip");
  EXPECT_EQ(tip[0].at("field"), "i_label");
  EXPECT_EQ(tip[1].at("field"), "j_label");
  EXPECT_EQ(s.at("transform").back().at("calculate"), "[\"64\",\"128\",\"256\",\"512\"][datum.j]");
  h.col_labels.pop_back();
  EXPECT_NE(error_of([&] { vl::spec(h); }).find("3 column and 3 row labels"), std::string::npos);
}

TEST(VegaLite, HeatmapErrors) {
  auto h = simple_heatmap();
  h.values.pop_back();
  EXPECT_NE(error_of([&] { vl::spec(h); }).find("values has 11 entries but rows x cols = 3 x 4"),
            std::string::npos);
  h = simple_heatmap();
  for (auto& v : h.values) v = kNaN;
  EXPECT_NE(error_of([&] { vl::spec(h); }).find("no finite value"), std::string::npos);
  h = simple_heatmap();
  h.vmin = 2;
  h.vmax = 1;
  EXPECT_NE(error_of([&] { vl::spec(h); }).find("vmin < vmax"), std::string::npos);
  h = simple_heatmap();
  h.rows = 0;
  EXPECT_NE(error_of([&] { vl::spec(h); }).find("rows and cols"), std::string::npos);
}

TEST(VegaLite, BarChartBarsMissingValuesAndReference) {
  const json s = vl::spec(simple_bars());
  const json& rows = s.at("data").at("values");
  ASSERT_EQ(rows.size(), 6u);
  EXPECT_EQ(rows[0], (json{{"category", "rope"}, {"series", "memory"}, {"value", 0.5}}));
  EXPECT_TRUE(rows[1].at("value").is_null());
  const json bars = layer(s, "bar");
  EXPECT_EQ(bars.at("encoding").at("x").at("sort"), (json{"rope", "alibi", "t5"}));
  EXPECT_EQ(bars.at("encoding").at("y").at("title"), "fraction of limit");
  EXPECT_EQ(bars.at("encoding").at("y").at("scale").at("zero"), true);
  EXPECT_EQ(bars.at("encoding").at("color").at("scale").at("domain"), (json{"memory", "compute"}));
  // Value labels and "n/a" are both text layers: the first labels, the second n/a.
  std::vector<json> texts;
  for (const auto& l : s.at("layer"))
    if (l.at("mark").at("type") == "text") texts.push_back(l);
  ASSERT_EQ(texts.size(), 3u);  // labels, n/a, reference label
  EXPECT_EQ(texts[0].at("encoding").at("text").at("format"), ".3g");
  EXPECT_EQ(texts[1].at("encoding").at("text").at("value"), "n/a");
  EXPECT_EQ(texts[2].at("encoding").at("text").at("value"), "limit");
  EXPECT_EQ(layer(s, "rule").at("data").at("values")[0].at("ref"), 1.0);
}

TEST(VegaLite, BarChartErrors) {
  auto b = simple_bars();
  b.series[0].values.pop_back();
  EXPECT_NE(error_of([&] { vl::spec(b); }).find("series 'memory' has 2 values but there are 3"),
            std::string::npos);
  b = simple_bars();
  b.series[1].values[1] = std::numeric_limits<double>::infinity();
  EXPECT_NE(error_of([&] { vl::spec(b); }).find("infinite value at category 'alibi'"),
            std::string::npos);
  b = simple_bars();
  b.y.kind = vl::scale::log;
  b.series[0].values[0] = 0;
  EXPECT_NE(error_of([&] { vl::spec(b); }).find("log y axis needs positive"), std::string::npos);
  b = simple_bars();
  for (auto& s : b.series)
    for (auto& v : s.values) v = kNaN;
  EXPECT_NE(error_of([&] { vl::spec(b); }).find("no finite value"), std::string::npos);
  b = simple_bars();
  b.categories.clear();
  EXPECT_NE(error_of([&] { vl::spec(b); }).find("no categories"), std::string::npos);
}

TEST(VegaLite, PaletteIsOkabeItoAndCycles) {
  EXPECT_EQ(vl::palette_color(0), "#0072B2");
  EXPECT_EQ(vl::palette_color(1), "#D55E00");
  EXPECT_EQ(vl::palette_color(7), vl::palette_color(0));
}
