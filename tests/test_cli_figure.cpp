// End-to-end tests of `posenc figure` and of the sinusoidal sections of `posenc report`: run
// the built binary, parse its JSON, check the files it wrote (Vega-Lite specifications with the
// data inline, and the page that draws them; tests/test_report_browser.cpp opens such pages in
// a browser).
//
// Golden numbers are the seed formulas PE(i, 2r) = sin(i w_r), PE(i, 2r+1) = cos(i w_r),
// w_r = 10000^(-2r/d), evaluated with Python's math module and rounded to the decimals the
// report prints:
//   python3 -c "import math; print(f'{math.sin(1):.5f} {math.cos(2):.5f}')"
// (the values are listed next to each assertion).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "test_support.hpp"

namespace fs = std::filesystem;
using nlohmann::json;
using posenc::test::read_text;
using posenc::test::run_cli;
using posenc::test::temp_dir;

namespace {

size_t count(const std::string& s, const std::string& what) {
  size_t n = 0;
  for (size_t p = s.find(what); p != std::string::npos; p = s.find(what, p + 1)) ++n;
  return n;
}

// Every quoted value that follows `key` (e.g. `data-file="`) in s, in order.
std::vector<std::string> values_after(const std::string& s, const std::string& key) {
  std::vector<std::string> out;
  for (size_t p = s.find(key); p != std::string::npos; p = s.find(key, p + 1)) {
    const size_t b = p + key.size();
    out.push_back(s.substr(b, s.find('"', b) - b));
  }
  return out;
}

// Without the npm bundles (POSENC_HAVE_VEGA=0, CMakeLists.txt) `posenc figure` and `posenc
// report` stop with a message before writing anything: the tests that need the page skip.
#define SKIP_WITHOUT_VEGA()                                                           \
  if (!POSENC_HAVE_VEGA)                                                              \
  GTEST_SKIP() << "built without the figures' scripts (vega, vega-lite, vega-embed: " \
                  "scripts/install-deps)"

bool have_chromium() {
  if (const char* e = std::getenv("POSENC_CHROMIUM"); e && *e) return true;
  return fs::exists("/usr/bin/chromium") || fs::exists("/usr/bin/chromium-browser");
}

// The value of attribute `name` in the first tag of `xml` (its root), "" when absent.
std::string root_attribute(const std::string& xml, const std::string& name) {
  const size_t end = xml.find('>');
  const size_t a = xml.find(" " + name + "=\"");
  if (a == std::string::npos || a > end) return "";
  const size_t b = a + name.size() + 3;
  return xml.substr(b, xml.find('"', b) - b);
}

uint32_t big_endian_u32(const std::string& s, size_t at) {
  uint32_t v = 0;
  for (size_t i = 0; i < 4; ++i) v = (v << 8) | static_cast<unsigned char>(s[at + i]);
  return v;
}

bool dir_is_empty_or_missing(const std::string& d) {
  return !fs::exists(d) || fs::is_empty(d);
}

// The layer of a spec whose mark has type `type` (the first one).
json layer(const json& s, const std::string& type) {
  for (const auto& l : s.at("layer"))
    if (l.at("mark").at("type") == type) return l;
  return nullptr;
}

}  // namespace

TEST(CliFigure, WritesTheSpecsAndThePageThatDrawsThem) {
  SKIP_WITHOUT_VEGA();
  temp_dir t;
  const std::string out = t.file("fig");
  auto r = run_cli({"figure", "--width", "20", "--width", "50", "--out", out, "--format", "json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto j = json::parse(r.out);
  const std::vector<std::string> expected = {
      out + "/sinusoidal_table_d20.vl.json",   out + "/sinusoidal_curves_d20.vl.json",
      out + "/sinusoidal_table_d50.vl.json",   out + "/sinusoidal_curves_d50.vl.json",
      out + "/sinusoidal_frequencies.vl.json", out + "/index.html"};
  ASSERT_EQ(j.at("files").get<std::vector<std::string>>(), expected);
  std::vector<json> specs;
  for (size_t k = 0; k + 1 < expected.size(); ++k) {
    ASSERT_TRUE(fs::exists(expected[k])) << expected[k];
    specs.push_back(json::parse(read_text(expected[k])));
    EXPECT_EQ(specs.back().at("$schema"), "https://vega.github.io/schema/vega-lite/v6.json");
  }
  // Nothing else in the directory (no temporary files left behind) but the page's scripts.
  std::set<std::string> names;
  for (auto& e : fs::directory_iterator(out)) names.insert(e.path().filename().string());
  EXPECT_EQ(names.size(), expected.size() + 1);
  EXPECT_TRUE(names.count("vega"));
  for (const char* f : {"vega.min.js", "vega-lite.min.js", "vega-embed.min.js", "vega-LICENSE",
                        "vega-lite-LICENSE", "vega-embed-LICENSE"})
    EXPECT_GT(fs::file_size(fs::path(out) / "vega" / f), 1000u) << f;

  // The page: one chart per spec, in order, loading the bundled scripts.
  const std::string page = read_text(expected.back());
  std::vector<std::string> shown = values_after(page, "data-file=\"");
  ASSERT_EQ(shown.size(), 5u);
  for (size_t k = 0; k < shown.size(); ++k) EXPECT_EQ(out + "/" + shown[k], expected[k]);
  EXPECT_EQ(count(page, "class=\"vl-figure\""), 5u);
  EXPECT_EQ(values_after(page, "<script src=\""),
            (std::vector<std::string>{"vega/vega.min.js", "vega/vega-lite.min.js",
                                      "vega/vega-embed.min.js"}));

  // Heatmaps: one cell per (position, channel), default 64 positions, labelled, on the fixed
  // -1..1 diverging scale. Row 0 is PE(0) = (sin 0, cos 0, ...) = (0, 1, 0, 1, ...) exactly.
  const json& h20 = specs[0];
  const json& cells = h20.at("data").at("values");
  ASSERT_EQ(cells.size(), 64u * 20u);
  for (int jj = 0; jj < 20; ++jj) {
    EXPECT_EQ(cells[jj].at("i"), 0);
    EXPECT_EQ(cells[jj].at("j"), jj);
    EXPECT_EQ(cells[jj].at("v").get<double>(), jj % 2 ? 1.0 : 0.0) << jj;
  }
  // PE(1, 0) = sin(1) = 0.8414709848078965.
  EXPECT_NEAR(cells[20].at("v").get<double>(), 0.8414709848078965, 1e-15);
  EXPECT_EQ(h20.at("encoding").at("x").at("title"), "channel j");
  EXPECT_EQ(h20.at("encoding").at("y").at("title"), "position i");
  const json& color = h20.at("layer")[0].at("encoding").at("color");
  EXPECT_EQ(color.at("title"), "PE(i, j)");
  EXPECT_EQ(color.at("scale").at("domain"), (json{-1.0, 1.0}));
  EXPECT_EQ(specs[2].at("data").at("values").size(), 64u * 50u);

  // Curves: the first two pairs (channels 0..3) over 32 positions, sine solid, cosine dashed.
  const json& c20 = specs[1];
  EXPECT_EQ(c20.at("data").at("values").size(), 4u * 32u);
  const json line = layer(c20, "line").at("encoding");
  EXPECT_EQ(line.at("color").at("scale").at("domain")[0], "channel 0 (sin, ω = 1)");
  EXPECT_EQ(line.at("strokeDash").at("scale").at("range"), (json{{1, 0}, {7, 5}, {1, 0}, {7, 5}}));

  // Frequencies: one point per pair of each width (10 + 25), markers, log y; the last pair of
  // width 50 is 10000^(-48/50) = 1.445439770745928e-4.
  const json& fq = specs[4];
  const json& pts = fq.at("data").at("values");
  ASSERT_EQ(pts.size(), 10u + 25u);
  EXPECT_EQ(pts.back().at("series"), "width d = 50");
  EXPECT_NEAR(pts.back().at("x").get<double>(), 0.96, 1e-15);
  EXPECT_NEAR(pts.back().at("y").get<double>(), 1.445439770745928e-4, 1e-18);
  EXPECT_EQ(layer(fq, "line").at("encoding").at("y").at("scale").at("type"), "log");
  EXPECT_EQ(layer(fq, "line").at("encoding").at("y").at("title"),
            "frequency ω_r (radians per position)");
}

TEST(CliFigure, TextAndCsvListTheFiles) {
  SKIP_WITHOUT_VEGA();
  temp_dir t;
  auto r = run_cli({"figure", "--width", "8", "--positions", "16", "--out", t.path});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, t.path + "/sinusoidal_table_d8.vl.json\n" + t.path +
                       "/sinusoidal_curves_d8.vl.json\n" + t.path +
                       "/sinusoidal_frequencies.vl.json\n" + t.path + "/index.html\n");
  EXPECT_EQ(
      json::parse(read_text(t.file("sinusoidal_table_d8.vl.json"))).at("data").at("values").size(),
      16u * 8u);
  r = run_cli({"figure", "--width", "8", "--out", t.path, "--format", "csv"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out.rfind("file\n", 0), 0u);
  EXPECT_EQ(count(r.out, "\n"), 5u);
}

TEST(CliFigure, BadArgumentsExit2AndWriteNothing) {
  struct bad_case {
    std::vector<std::string> args;
    std::string must_mention;
  };
  const std::vector<bad_case> cases = {
      {{"--width", "7"}, "--width"},
      {{"--width", "0"}, "--width"},
      {{"--width", "-4"}, "--width"},
      {{"--width", "100000"}, "--width"},
      {{"--width", "20", "--width", "20"}, "--width"},
      {{"--width", "abc"}, "--width"},
      {{"--width", "20", "--positions", "1"}, "--positions"},
      {{"--width", "20", "--positions", "x"}, "--positions"},
      {{"--width", "20", "--positions", "100000"}, "--positions"},
      {{"--width", "20", "--base", "1"}, "--base"},
      {{"--width", "20", "--base", "-3"}, "--base"},
      {{"--width", "20", "--base", "inf"}, "--base"},
      {{"--width", "20", "--layout", "diagonal"}, "--layout"},
      {{"--width", "20", "--format", "xml"}, "--format"},
      {{"--width", "20", "--format", "pdf"}, "--format"},
      {{"--width", "20", "--bogus"}, "--bogus"},
      {{"--positions", "10"}, "--width"},
  };
  for (const auto& c : cases) {
    temp_dir t;
    const std::string out = t.file("fig");
    std::vector<std::string> args = {"figure"};
    args.insert(args.end(), c.args.begin(), c.args.end());
    args.insert(args.end(), {"--out", out});
    const auto r = run_cli(args);
    std::string shown;
    for (const auto& a : c.args) shown += a + " ";
    EXPECT_EQ(r.exit_code, 2) << shown;
    EXPECT_NE(r.err.find(c.must_mention), std::string::npos) << shown << ": " << r.err;
    EXPECT_TRUE(r.out.empty()) << shown;
    EXPECT_TRUE(dir_is_empty_or_missing(out)) << shown;
  }
  // Missing --out.
  const auto r = run_cli({"figure", "--width", "20"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("--out"), std::string::npos) << r.err;
}

TEST(CliFigure, OutputPathThatIsAFileIsAnError) {
  temp_dir t;
  const std::string f = t.file("plain");
  {
    std::FILE* fp = std::fopen(f.c_str(), "w");
    ASSERT_TRUE(fp);
    std::fclose(fp);
  }
  const auto r = run_cli({"figure", "--width", "20", "--out", f});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find(f), std::string::npos) << r.err;
  EXPECT_TRUE(fs::is_regular_file(f));
  EXPECT_EQ(fs::file_size(f), 0u);
}

TEST(CliReport, SinusoidalSectionsHaveNumbersAndFigures) {
  SKIP_WITHOUT_VEGA();
  temp_dir t;
  const auto r = run_cli({"report", "--out", t.path, "--quick"});
  // Exit 1 means "written, but some property check (of any family) failed"; this test is about
  // the sinusoidal sections, so both 0 and 1 are accepted as long as the files exist.
  ASSERT_TRUE(r.exit_code == 0 || r.exit_code == 1) << r.exit_code << " " << r.err;
  const std::string html = read_text(t.file("index.html"));
  const std::string md = read_text(t.file("index.md"));
  ASSERT_FALSE(html.empty());
  ASSERT_FALSE(md.empty());

  // Worked examples (library values, 5 decimals):
  //   width 4: sin 1 = 0.84147, cos 1 = 0.54030, sin 2 = 0.90930, cos 2 = -0.41615,
  //            cos 0.01 = 0.99995; wavelength 200 pi = 628.32.
  //   width 8, position 3: sin(0.3) = 0.29552, sin 3 = 0.14112, cos 3 = -0.98999,
  //            sin(0.003) = 0.00300.
  //   widths 20/50 at position 5: phases 5 * 10000^-0.1 = 1.990536, 5 * 10000^-0.04 = 3.459155;
  //            PE(5, 2) = sin(1.990536) = 0.913195, PE(5, 3) at width 50 = cos(3.459155) =
  //            -0.949999; q = 0.4: 10000^-0.4 = 0.02511886.
  //   R(1) at w = 1: [[cos 1, sin 1], [-sin 1, cos 1]] = [[0.5403, 0.8415], [-0.8415, 0.5403]].
  for (const std::string v : {"0.84147", "0.54030", "0.90930", "-0.41615", "0.99995", "628.32",
                              "0.29552", "0.14112", "-0.98999", "0.00300", "1.990536", "3.459155",
                              "0.913195", "-0.949999", "0.02511886", "-0.8415"}) {
    EXPECT_NE(md.find(v), std::string::npos) << "index.md lacks " << v;
    EXPECT_NE(html.find(v), std::string::npos) << "index.html lacks " << v;
  }
  EXPECT_NE(html.find("id=\"sinusoidal\""), std::string::npos);
  EXPECT_NE(html.find("id=\"sinusoidal-width\""), std::string::npos);
  EXPECT_NE(html.find("id=\"sinusoidal-relative\""), std::string::npos);

  // Every chart the page draws is linked from the Markdown and its spec file exists, with data;
  // the sinusoidal ones are all there.
  const std::vector<std::string> shown = values_after(html, "data-file=\"");
  const std::set<std::string> html_charts(shown.begin(), shown.end());
  EXPECT_EQ(html_charts.size(), shown.size());  // each chart once
  std::set<std::string> md_charts;
  for (size_t p = md.find("[Figure: "); p != std::string::npos; p = md.find("[Figure: ", p + 1)) {
    const size_t b = md.find("](", p), e = md.find(')', b);
    if (b != std::string::npos && e != std::string::npos)
      md_charts.insert(md.substr(b + 2, e - b - 2));
  }
  EXPECT_EQ(html_charts, md_charts);
  for (const auto& f : html_charts) {
    ASSERT_TRUE(fs::exists(t.file(f))) << f;
    const json spec = json::parse(read_text(t.file(f)));
    EXPECT_FALSE(spec.at("data").at("values").empty()) << f;
  }
  for (const std::string f : {"sinusoidal_table_d20.vl.json", "sinusoidal_table_d50.vl.json",
                              "sinusoidal_curves_d20.vl.json", "sinusoidal_curves_d50.vl.json",
                              "sinusoidal_frequencies.vl.json", "sinusoidal_dot_profile.vl.json",
                              "sinusoidal_gram_full.vl.json", "sinusoidal_gram_sine_only.vl.json"})
    EXPECT_TRUE(html_charts.count(f)) << "report does not show " << f;
  EXPECT_TRUE(fs::exists(t.file("vega/vega-embed.min.js")));
  EXPECT_NE(html.find("<figcaption>"), std::string::npos);
}

// --format svg and png: one image per figure, drawn by the page in headless Chromium. Each SVG
// is well-formed XML (Python's parser, run on every file), has the chart's size and holds the
// marks of its data (paths); each PNG has the PNG signature and an IHDR twice the SVG's size
// (the scale for print). Both lists name the images after the specifications.
TEST(CliFigure, SvgAndPngOfEveryFigure) {
  SKIP_WITHOUT_VEGA();
  if (!have_chromium()) GTEST_SKIP() << "Chromium not found (/usr/bin/chromium)";
  temp_dir t;
  const std::string out = t.file("fig");
  auto r = run_cli({"figure", "--width", "8", "--width", "12", "--positions", "16", "--out", out,
                    "--format", "svg"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::vector<std::string> names = {"sinusoidal_table_d8", "sinusoidal_curves_d8",
                                          "sinusoidal_table_d12", "sinusoidal_curves_d12",
                                          "sinusoidal_frequencies"};
  std::string listed;
  for (const auto& n : names) listed += out + "/" + n + ".vl.json\n";
  listed += out + "/index.html\n";
  for (const auto& n : names) listed += out + "/" + n + ".svg\n";
  EXPECT_EQ(r.out, listed);
  std::string files;
  std::vector<std::pair<int, int>> sizes;
  for (const auto& n : names) {
    const std::string svg = read_text(out + "/" + n + ".svg");
    ASSERT_EQ(svg.rfind("<svg", 0), 0u) << n;
    EXPECT_NE(svg.find("</svg>"), std::string::npos) << n;
    EXPECT_GT(count(svg, "<path"), 0u) << n;
    const std::string w = root_attribute(svg, "width"), h = root_attribute(svg, "height");
    ASSERT_FALSE(w.empty() || h.empty()) << n << ": " << svg.substr(0, 200);
    sizes.emplace_back(std::stoi(w), std::stoi(h));
    EXPECT_GT(sizes.back().first, 100) << n;
    files += " '" + out + "/" + n + ".svg'";
  }
  const auto xml = posenc::test::run_shell(
      "/usr/bin/python3 -c 'import sys, xml.etree.ElementTree as E; "
      "[print(E.parse(f).getroot().tag) for f in sys.argv[1:]]'" +
      files);
  ASSERT_EQ(xml.exit_code, 0) << xml.err;
  EXPECT_EQ(count(xml.out, "{http://www.w3.org/2000/svg}svg\n"), names.size()) << xml.out;
  // The sinusoidal table d = 8, 16 positions: 128 cells, each a path in the heatmap's marks.
  EXPECT_GE(count(read_text(out + "/sinusoidal_table_d8.svg"), "<path"), 128u);

  r = run_cli({"figure", "--width", "8", "--width", "12", "--positions", "16", "--out", out,
               "--format", "png"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  for (size_t k = 0; k < names.size(); ++k) {
    const std::string png = read_text(out + "/" + names[k] + ".png");
    ASSERT_GE(png.size(), 33u) << names[k];
    EXPECT_EQ(png.substr(0, 8), std::string("\x89PNG\r\n\x1a\n", 8)) << names[k];
    EXPECT_EQ(png.substr(12, 4), "IHDR") << names[k];
    EXPECT_EQ(big_endian_u32(png, 16), 2u * static_cast<uint32_t>(sizes[k].first)) << names[k];
    EXPECT_EQ(big_endian_u32(png, 20), 2u * static_cast<uint32_t>(sizes[k].second)) << names[k];
  }
}

// Without Chromium, --format svg stops before writing anything and says how to install it.
TEST(CliFigure, SvgWithoutChromiumExit2AndWritesNothing) {
  SKIP_WITHOUT_VEGA();
  temp_dir t;
  const std::string out = t.file("fig");
  // Each test runs in its own process (gtest_discover_tests): the variable ends with it.
  ::setenv("POSENC_CHROMIUM", t.file("no-such-chromium").c_str(), 1);
  const auto r = run_cli({"figure", "--width", "8", "--out", out, "--format", "svg"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("Chromium"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("scripts/install-deps"), std::string::npos) << r.err;
  EXPECT_TRUE(dir_is_empty_or_missing(out));
}

// A build configured without the npm packages (CMakeLists.txt, POSENC_HAVE_VEGA=0) has every
// command, and `posenc figure` and `posenc report` say what is missing and the command that
// installs it, exit 2 and write nothing. Runs only in such a build (cmake -S . -B build on a
// checkout without tools/posenc/report/node_modules).
TEST(CliFigure, WithoutTheScriptsFigureAndReportSayWhatIsMissing) {
  if (POSENC_HAVE_VEGA) GTEST_SKIP() << "this build has the figures' scripts";
  for (const std::string cmd : {"figure", "report"}) {
    temp_dir t;
    const std::string out = t.file("out");
    const auto r = cmd == "figure" ? run_cli({"figure", "--width", "8", "--out", out})
                                   : run_cli({"report", "--quick", "--out", out});
    EXPECT_EQ(r.exit_code, 2) << cmd;
    EXPECT_NE(r.err.find("vega, vega-lite and vega-embed"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("scripts/install-deps"), std::string::npos) << r.err;
    EXPECT_TRUE(dir_is_empty_or_missing(out)) << cmd;
  }
}
