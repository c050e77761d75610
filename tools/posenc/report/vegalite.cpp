// Vega-Lite specifications of the report's figures: see vegalite.hpp for the contract.
#include "vegalite.hpp"

#include <fmt/format.h>
#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <numbers>
#include <set>

#include "posenc/core/error.hpp"

namespace posenc::vl {
namespace {

// Okabe and Ito (2008), "Color Universal Design", without black (kept for text and rings) and
// with the yellow last (lowest contrast on white).
constexpr std::array<const char*, 7> kOkabeIto = {"#0072B2", "#D55E00", "#009E73", "#CC79A7",
                                                  "#E69F00", "#56B4E9", "#F0E442"};
constexpr const char* kFont = "DejaVu Sans, Helvetica, Arial, sans-serif";
constexpr const char* kMaskedColor = "#c8c8c8";  // grey: outside viridis and RdBu alike

bool finite(double v) {
  return std::isfinite(v);
}

// A number for the data: non-finite values become null (see the file comment of the header).
json value(double v) {
  return finite(v) ? json(v) : json(nullptr);
}

void validate_size(const char* kind, const std::string& title, int w, int h) {
  if (w < 200 || h < 150 || w > 20000 || h > 20000)
    fail("{} '{}': width x height must be within 200..20000 x 150..20000 pixels, got {} x {}", kind,
         title, w, h);
}

// The parts every chart shares: schema, title, size (the whole figure, axes and legend
// included), fonts.
json frame(const std::string& title, int width, int height) {
  json s;
  s["$schema"] = "https://vega.github.io/schema/vega-lite/v6.json";
  // Anchored at the left edge of the whole figure: a title wider than the plot stays in view.
  if (!title.empty()) s["title"] = {{"text", title}, {"anchor", "start"}, {"frame", "bounds"}};
  s["width"] = width;
  s["height"] = height;
  s["autosize"] = {{"type", "fit"}, {"contains", "padding"}};
  s["padding"] = 8;
  s["config"] = {{"font", kFont},
                 {"title", {{"fontSize", 15}}},
                 {"axis", {{"titleFontSize", 13}, {"labelFontSize", 11}}},
                 {"legend", {{"labelFontSize", 12}, {"labelLimit", 0}}}};
  return s;
}

// Drag to pan, scroll to zoom the scales of `encodings`, double-click to reset.
json zoom(std::vector<std::string> encodings) {
  return {{"name", "zoom"},
          {"select", {{"type", "interval"}, {"encodings", std::move(encodings)}}},
          {"bind", "scales"}};
}

// A quantitative position channel over `field` for an axis.
json position(const std::string& field, const axis& a, bool nice) {
  json scale = {{"type", a.kind == scale::log ? "log" : "linear"}};
  if (a.kind == scale::linear) scale["zero"] = false;
  if (a.min && a.max) {
    scale["domain"] = {*a.min, *a.max};
  } else if (a.min) {
    scale["domainMin"] = *a.min;
  } else if (a.max) {
    scale["domainMax"] = *a.max;
  }
  scale["nice"] = nice && !(a.min && a.max);  // a free end is extended to a round value
  json c = {{"field", field}, {"type", "quantitative"}, {"title", a.label}, {"scale", scale}};
  if (!a.ticks.empty()) c["axis"] = {{"values", a.ticks}};
  return c;
}

// A dashed horizontal rule at ref.value with its label at the right end (two layers). It has
// its own one-row data; its y values join the shared y scale, so the line is always in range.
void add_reference(json& layers, const reference_line& ref) {
  const json data = {{"values", json::array({{{"ref", ref.value}}})}};
  const json y = {{"field", "ref"}, {"type", "quantitative"}};
  layers.push_back(
      {{"data", data},
       {"mark",
        {{"type", "rule"}, {"color", "#444444"}, {"strokeWidth", 1.5}, {"strokeDash", {7, 4}}}},
       {"encoding", {{"y", y}}}});
  if (!ref.label.empty())
    layers.push_back(
        {{"data", data},
         {"mark",
          {{"type", "text"},
           {"align", "right"},
           {"baseline", "bottom"},
           {"dx", -4},
           {"dy", -3},
           {"color", "#333333"}}},
         {"encoding", {{"y", y}, {"x", {{"value", "width"}}}, {"text", {{"value", ref.label}}}}}});
}

void check_reference(const char* kind, const std::string& title, const reference_line& ref,
                     bool log) {
  if (!finite(ref.value) || (log && ref.value <= 0))
    fail("{} '{}': reference line at y = {} cannot be drawn on this axis", kind, title, ref.value);
}

void check_distinct(const char* kind, const std::string& title,
                    const std::vector<std::string>& names) {
  std::set<std::string> seen;
  for (const auto& n : names)
    if (!seen.insert(n).second)
      fail("{} '{}': two series are named '{}'; each series needs its own name", kind, title, n);
}

}  // namespace

std::string palette_color(size_t i) {
  return kOkabeIto[i % kOkabeIto.size()];
}

// ---------------------------------------------------------------------------------------------
// Line plot: one row per point {series, x, y}; a line layer (series with lines), a point layer
// (markers, and the hover targets of every series), the reference line.

namespace {

// The line plot's legend; adds the rows it takes below the plot to height when it goes there.
json line_plot_legend(const line_plot& p, const std::vector<std::string>& names, int& height) {
  // One legend: colour and dash share the field, the title and the domain, so Vega-Lite merges
  // them and every entry shows its series' colour and dash. On the right, unless the names would
  // take more than a third of the width (about 7 pixels a character): then below, in two columns
  // where they fit.
  size_t longest = 0;
  for (const auto& n : names) longest = std::max(longest, n.size());
  json legend = {{"symbolType", "stroke"}, {"symbolStrokeWidth", 2.5}};
  if (7.0 * static_cast<double>(longest) > p.width / 3.0) {
    const int columns = 2 * (7.0 * static_cast<double>(longest) + 40) < p.width ? 2 : 1;
    legend["orient"] = "bottom";
    legend["direction"] = "vertical";
    legend["columns"] = columns;
    // Room for the legend's rows (about 17 pixels each) below a plot of the requested height.
    height += 17 * static_cast<int>((names.size() + columns - 1) / columns) + 12;
  }
  return legend;
}

// Markers: one layer per marker size, in the order of the series (the first drawn underneath).
void add_line_marker_layers(json& layers, const line_plot& p, const json& x, const json& y,
                            const json& color) {
  for (size_t si = 0; si < p.series.size(); ++si) {
    const auto& s = p.series[si];
    if (!s.markers || (si > 0 && std::any_of(p.series.begin(), p.series.begin() + si, [&](auto& e) {
                         return e.markers && e.marker_radius == s.marker_radius;
                       })))
      continue;
    std::vector<std::string> same;
    for (const auto& e : p.series)
      if (e.markers && e.marker_radius == s.marker_radius) same.push_back(e.name);
    layers.push_back(
        {{"transform", json::array({{{"filter", {{"field", "series"}, {"oneOf", same}}}}})},
         {"mark",
          {{"type", "point"},
           {"filled", true},
           {"opacity", 1},
           {"size", std::numbers::pi * s.marker_radius * s.marker_radius},  // area, px^2
           {"clip", true}}},
         {"encoding", {{"x", x}, {"y", y}, {"color", color}}}});
  }
}

// Every point is a hover target: the one nearest the pointer is shown, with its values.
void add_line_hover_layer(json& layers, const json& x, const json& y, const json& color,
                          const json& tooltip) {
  layers.push_back(
      {{"mark", {{"type", "point"}, {"filled", true}, {"size", 60}, {"clip", true}}},
       {"encoding",
        {{"x", x},
         {"y", y},
         {"color", color},
         {"opacity",
          {{"condition", {{"param", "hover"}, {"empty", false}, {"value", 1}}}, {"value", 0}}},
         {"tooltip", tooltip}}},
       {"params", json::array({{{"name", "hover"},
                                {"select",
                                 {{"type", "point"},
                                  {"on", "pointerover"},
                                  {"nearest", true},
                                  {"clear", "pointerout"}}}},
                               zoom({"x", "y"})})}});
}

}  // namespace

json spec(const line_plot& p) {
  validate_size("line plot", p.title, p.width, p.height);
  if (p.series.empty()) fail("line plot '{}' has no series", p.title);
  std::vector<std::string> names, colors, lined;
  json dashes = json::array(), rows = json::array();
  bool any = false;
  for (size_t si = 0; si < p.series.size(); ++si) {
    const auto& s = p.series[si];
    if (!(s.marker_radius >= 0.5 && s.marker_radius <= 20))
      fail("line plot '{}': series '{}' has marker_radius {}; it must be in 0.5..20", p.title,
           s.name, s.marker_radius);
    if (s.x.size() != s.y.size())
      fail("line plot '{}': series '{}' has {} x values but {} y values; they must match", p.title,
           s.name, s.x.size(), s.y.size());
    if (!s.line && !s.markers)
      fail("line plot '{}': series '{}' has neither a line nor markers", p.title, s.name);
    for (size_t i = 0; i < s.x.size(); ++i) {
      const double x = s.x[i], y = s.y[i];
      if (p.x.kind == scale::log && finite(x) && x <= 0)
        fail(
            "line plot '{}': series '{}' has x = {} at index {}; a log x axis needs positive "
            "values",
            p.title, s.name, x, i);
      if (p.y.kind == scale::log && finite(y) && y <= 0)
        fail(
            "line plot '{}': series '{}' has y = {} at index {}; a log y axis needs positive "
            "values",
            p.title, s.name, y, i);
      any |= finite(x) && finite(y);
      rows.push_back({{"series", s.name}, {"x", value(x)}, {"y", value(y)}});
    }
    names.push_back(s.name);
    colors.push_back(s.color.empty() ? palette_color(si) : s.color);
    dashes.push_back(s.dashed ? json{7, 5} : json{1, 0});
    if (s.line) lined.push_back(s.name);
  }
  check_distinct("line plot", p.title, names);
  if (!any) fail("line plot '{}' has no point with finite x and y", p.title);
  if (p.ref) check_reference("line plot", p.title, *p.ref, p.y.kind == scale::log);
  for (const auto* a : {&p.x, &p.y})
    if (a->kind == scale::log && ((a->min && !(*a->min > 0)) || (a->max && !(*a->max > 0))))
      fail("line plot '{}': the log axis '{}' needs a positive fixed range", p.title, a->label);

  const json x = position("x", p.x, false), y = position("y", p.y, true);
  int height = p.height;
  const json legend = line_plot_legend(p, names, height);
  const json color = {{"field", "series"},
                      {"type", "nominal"},
                      {"title", nullptr},
                      {"scale", {{"domain", names}, {"range", colors}}},
                      {"legend", legend}};
  const json dash = {{"field", "series"},
                     {"type", "nominal"},
                     {"title", nullptr},
                     {"scale", {{"domain", names}, {"range", dashes}}}};
  const json tooltip =
      json::array({{{"field", "series"}, {"type", "nominal"}},
                   {{"field", "x"}, {"type", "quantitative"}, {"title", p.x.label}},
                   {{"field", "y"}, {"type", "quantitative"}, {"title", p.y.label}}});
  json layers = json::array();
  if (!lined.empty())
    layers.push_back(
        {{"transform", json::array({{{"filter", {{"field", "series"}, {"oneOf", lined}}}}})},
         {"mark",
          {{"type", "line"},
           {"strokeWidth", 2},
           {"strokeJoin", "round"},
           {"strokeCap", "round"},
           {"clip", true}}},
         {"encoding", {{"x", x}, {"y", y}, {"color", color}, {"strokeDash", dash}}}});
  add_line_marker_layers(layers, p, x, y, color);
  add_line_hover_layer(layers, x, y, color, tooltip);
  if (p.ref) add_reference(layers, *p.ref);

  json s = frame(p.title, p.width, height);
  s["data"] = {{"values", std::move(rows)}};
  s["layer"] = std::move(layers);
  return s;
}

// ---------------------------------------------------------------------------------------------
// Heatmap: one row per cell {i, j, v}; cell (i, j) spans [j - 0.5, j + 0.5] x [i - 0.5, i + 0.5]
// on quantitative axes (so that they zoom), with the ticks at the cell centres.

namespace {

// A heatmap's sizes, labels and values against each other (the file comment's errors).
void validate_heatmap(const heatmap& h) {
  validate_size("heatmap", h.title, h.width, h.height);
  if (h.rows <= 0 || h.cols <= 0 || h.rows > 4096 || h.cols > 4096)
    fail("heatmap '{}': rows and cols must be in 1..4096, got {} x {}", h.title, h.rows, h.cols);
  if ((!h.col_labels.empty() && static_cast<int64_t>(h.col_labels.size()) != h.cols) ||
      (!h.row_labels.empty() && static_cast<int64_t>(h.row_labels.size()) != h.rows))
    fail(
        "heatmap '{}': {} column and {} row labels for {} x {} cells (give one per column / row, "
        "or none)",
        h.title, h.col_labels.size(), h.row_labels.size(), h.rows, h.cols);
  if (static_cast<int64_t>(h.values.size()) != h.rows * h.cols)
    fail("heatmap '{}': values has {} entries but rows x cols = {} x {} = {}", h.title,
         h.values.size(), h.rows, h.cols, h.rows * h.cols);
}

// The x or y encoding of a heatmap's cells: indices 0..n-1 centred in their cells, or with
// names one tick per cell labelled by name.
json heatmap_cells(const std::string& field, const std::string& label, int64_t n, bool reverse,
                   const std::vector<std::string>& names) {
  json axis = {{"tickMinStep", 1}, {"format", "d"}, {"grid", false}};
  if (!names.empty()) {  // one tick per cell, labelled by name
    json at = json::array();
    for (int64_t k = 0; k < n; ++k) at.push_back(k);
    axis["values"] = at;
    axis["labelExpr"] = fmt::format("{}[datum.value]", json(names).dump());
  }
  return json{{"field", field + "0"},
              {"type", "quantitative"},
              {"title", label},
              {"scale",
               {{"domain", {-0.5, static_cast<double>(n) - 0.5}},
                {"nice", false},
                {"zero", false},
                {"reverse", reverse}}},
              {"axis", axis}};
}

}  // namespace

json spec(const heatmap& h) {
  validate_heatmap(h);
  double lo = std::numeric_limits<double>::infinity(), hi = -lo, amax = 0;
  bool any_masked = false;
  for (double v : h.values) {
    if (!finite(v)) {
      any_masked = true;
      continue;
    }
    lo = std::min(lo, v), hi = std::max(hi, v), amax = std::max(amax, std::abs(v));
  }
  if (!(lo <= hi)) fail("heatmap '{}' has no finite value (every cell is masked)", h.title);
  if (h.map == colormap::diverging) {
    lo = amax == 0 ? -1 : -amax;
    hi = amax == 0 ? 1 : amax;
  } else if (lo == hi) {
    const double d = lo == 0 ? 0.5 : std::abs(lo) * 0.1;
    lo -= d, hi += d;
  }
  if (h.vmin) lo = *h.vmin;
  if (h.vmax) hi = *h.vmax;
  if (!finite(lo) || !finite(hi) || !(lo < hi))
    fail("heatmap '{}': colour range needs finite vmin < vmax, got {} .. {}", h.title, lo, hi);

  json rows = json::array();
  for (int64_t i = 0; i < h.rows; ++i)
    for (int64_t j = 0; j < h.cols; ++j)
      rows.push_back({{"i", i}, {"j", j}, {"v", value(h.values[i * h.cols + j])}});

  json color_scale = {{"scheme", h.map == colormap::sequential ? "viridis" : "redblue"},
                      {"domain", {lo, hi}},
                      {"clamp", true}};
  if (h.map == colormap::diverging) color_scale["reverse"] = true;
  json layers = json::array();
  layers.push_back({{"transform", json::array({{{"filter", "isValid(datum.v)"}}})},
                    {"mark", {{"type", "rect"}, {"clip", true}}},
                    {"encoding",
                     {{"color",
                       {{"field", "v"},
                        {"type", "quantitative"},
                        {"title", h.value_label},
                        {"scale", color_scale}}}}},
                    {"params", json::array({zoom({"x", "y"})})}});
  if (any_masked)
    layers.push_back(
        {{"transform", json::array({{{"filter", "!isValid(datum.v)"}},
                                    {{"calculate", json(h.masked_label).dump()}, {"as", "cell"}}})},
         {"mark", {{"type", "rect"}, {"clip", true}}},
         {"encoding",
          {{"fill",
            {{"field", "cell"},
             {"type", "nominal"},
             {"title", nullptr},
             {"scale", {{"range", json::array({kMaskedColor})}}}}}}}});

  json s = frame(h.title, h.width, h.height);
  s["data"] = {{"values", std::move(rows)}};
  s["transform"] = json::array({{{"calculate", "datum.j - 0.5"}, {"as", "j0"}},
                                {{"calculate", "datum.j + 0.5"}, {"as", "j1"}},
                                {{"calculate", "datum.i - 0.5"}, {"as", "i0"}},
                                {{"calculate", "datum.i + 0.5"}, {"as", "i1"}}});
  // The tooltip names a labelled row or column by its label.
  auto tip = [&](const char* field, const std::string& title,
                 const std::vector<std::string>& names) {
    if (names.empty()) return json{{"field", field}, {"type", "quantitative"}, {"title", title}};
    const std::string as = std::string(field) + "_label";
    s["transform"].push_back(
        {{"calculate", fmt::format("{}[datum.{}]", json(names).dump(), field)}, {"as", as}});
    return json{{"field", as}, {"type", "nominal"}, {"title", title}};
  };
  s["encoding"] = {
      {"x", heatmap_cells("j", h.x_label, h.cols, false, h.col_labels)},
      {"x2", {{"field", "j1"}}},
      {"y", heatmap_cells("i", h.y_label, h.rows, true, h.row_labels)},
      {"y2", {{"field", "i1"}}},
      {"tooltip",
       json::array({tip("i", h.y_label, h.row_labels),
                    tip("j", h.x_label, h.col_labels),
                    {{"field", "v"}, {"type", "quantitative"}, {"title", h.value_label}}})}};
  s["layer"] = std::move(layers);
  return s;
}

// ---------------------------------------------------------------------------------------------
// Bar chart: one row per bar {category, series, value}; bars, their value labels, "n/a" where a
// value is missing, the reference line.

namespace {

// The bar chart's x encoding: the categories in their order.
json bar_category_axis(const bar_chart& b) {
  // Category labels are turned when the longest does not fit its slot (about 6.6 pixels per
  // character at 11 pixels; the plot takes about 80% of the width).
  size_t longest = 0;
  for (const auto& c : b.categories) longest = std::max(longest, c.size());
  const bool turn = static_cast<double>(longest) * 6.6 >
                    0.8 * b.width / static_cast<double>(b.categories.size()) - 6;
  json x = {{"field", "category"},
            {"type", "nominal"},
            {"title", b.x_label.empty() ? json(nullptr) : json(b.x_label)},
            {"sort", b.categories},
            {"axis", {{"labelAngle", turn ? -30 : 0}, {"labelLimit", 0}}}};
  if (turn) x["axis"]["labelAlign"] = "right";
  return x;
}

}  // namespace

json spec(const bar_chart& b) {
  validate_size("bar chart", b.title, b.width, b.height);
  if (b.categories.empty()) fail("bar chart '{}' has no categories", b.title);
  if (b.series.empty()) fail("bar chart '{}' has no series", b.title);
  const bool logy = b.y.kind == scale::log;
  std::vector<std::string> names, colors;
  json rows = json::array();
  bool any = false, any_missing = false;
  for (size_t si = 0; si < b.series.size(); ++si) {
    const auto& s = b.series[si];
    if (s.values.size() != b.categories.size())
      fail("bar chart '{}': series '{}' has {} values but there are {} categories", b.title, s.name,
           s.values.size(), b.categories.size());
    for (size_t i = 0; i < s.values.size(); ++i) {
      const double v = s.values[i];
      if (std::isinf(v))
        fail("bar chart '{}': series '{}' has an infinite value at category '{}'", b.title, s.name,
             b.categories[i]);
      if (logy && finite(v) && v <= 0)
        fail(
            "bar chart '{}': series '{}' has value {} at category '{}'; a log y axis needs "
            "positive values",
            b.title, s.name, v, b.categories[i]);
      any |= finite(v);
      any_missing |= !finite(v);
      rows.push_back({{"category", b.categories[i]}, {"series", s.name}, {"value", value(v)}});
    }
    names.push_back(s.name);
    colors.push_back(s.color.empty() ? palette_color(si) : s.color);
  }
  check_distinct("bar chart", b.title, names);
  if (!any) fail("bar chart '{}' has no finite value", b.title);
  if (b.ref) check_reference("bar chart", b.title, *b.ref, logy);

  const json x = bar_category_axis(b);
  const json x_offset = {{"field", "series"}, {"type", "nominal"}, {"sort", names}};
  json y = position("value", b.y, true);
  if (!logy) y["scale"]["zero"] = true;  // bars start at 0
  const json valid = json::array({{{"filter", "isValid(datum.value)"}}});

  json layers = json::array();
  layers.push_back(
      {{"transform", valid},
       {"mark", {{"type", "bar"}}},
       {"encoding",
        {{"x", x},
         {"xOffset", x_offset},
         {"y", y},
         {"color",
          {{"field", "series"},
           {"type", "nominal"},
           {"title", nullptr},
           {"scale", {{"domain", names}, {"range", colors}}},
           {"legend", {{"orient", "bottom"}, {"direction", "vertical"}}}}},
         {"tooltip",
          json::array({{{"field", "category"}, {"type", "nominal"}},
                       {{"field", "series"}, {"type", "nominal"}},
                       {{"field", "value"}, {"type", "quantitative"}, {"title", b.y.label}}})}}},
       {"params", json::array({zoom({"y"})})}});
  if (b.value_labels)
    layers.push_back(
        {{"transform", valid},
         {"mark",
          {{"type", "text"}, {"baseline", "bottom"}, {"dy", -3}, {"fontSize", 10}, {"clip", true}}},
         {"encoding",
          {{"x", x},
           {"xOffset", x_offset},
           {"y", y},
           {"text", {{"field", "value"}, {"type", "quantitative"}, {"format", ".3g"}}}}}});
  if (any_missing)
    layers.push_back(
        {{"transform", json::array({{{"filter", "!isValid(datum.value)"}}})},
         {"mark",
          {{"type", "text"},
           {"baseline", "bottom"},
           {"dy", -3},
           {"fontSize", 9},
           {"color", "#666666"}}},
         {"encoding",
          {{"x", x},
           {"xOffset", x_offset},
           {"y", logy ? json{{"value", "height"}} : json{{"datum", 0}, {"type", "quantitative"}}},
           {"text", {{"value", "n/a"}}}}}});
  if (b.ref) add_reference(layers, *b.ref);

  json s = frame(b.title, b.width, b.height);
  s["data"] = {{"values", std::move(rows)}};
  s["layer"] = std::move(layers);
  return s;
}

}  // namespace posenc::vl
