// End-to-end tests of `posenc figure` and of the sinusoidal sections of `posenc report`: run
// the built binary, parse its JSON, check the files it wrote.
//
// Golden numbers are the seed formulas PE(i, 2r) = sin(i w_r), PE(i, 2r+1) = cos(i w_r),
// w_r = 10000^(-2r/d), evaluated with Python's math module and rounded to the decimals the
// report prints:
//   python3 -c "import math; print(f'{math.sin(1):.5f} {math.cos(2):.5f}')"
// (the values are listed next to each assertion).
#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "xml_check.hpp"

#include "test_support.hpp"

namespace fs = std::filesystem;
using posenc::test::read_text;
using posenc::test::run_cli;
using posenc::test::temp_dir;
using posenc::test::values_after;
using posenc::test::xml_problem;

namespace {

size_t count(const std::string& s, const std::string& what) {
  size_t n = 0;
  for (size_t p = s.find(what); p != std::string::npos; p = s.find(what, p + 1)) ++n;
  return n;
}

// Fills of the heatmap cells (the first <g stroke="none"> group), row-major.
std::vector<std::string> cell_fills(const std::string& s) {
  const size_t a = s.find("<g stroke=\"none\">");
  if (a == std::string::npos) return {};
  const std::string g = s.substr(a, s.find("</g>", a) - a);
  return values_after(g, "fill=\"");
}

bool dir_is_empty_or_missing(const std::string& d) {
  return !fs::exists(d) || fs::is_empty(d);
}

}  // namespace

TEST(CliFigure, WritesTheExpectedWellFormedSvgs) {
  temp_dir t;
  const std::string out = t.file("fig");
  auto r = run_cli({"figure", "--width", "20", "--width", "50", "--out", out, "--format", "json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  const std::vector<std::string> expected = {
      out + "/sinusoidal_table_d20.svg", out + "/sinusoidal_curves_d20.svg",
      out + "/sinusoidal_table_d50.svg", out + "/sinusoidal_curves_d50.svg",
      out + "/sinusoidal_frequencies.svg"};
  ASSERT_EQ(j.at("files").get<std::vector<std::string>>(), expected);
  for (const auto& f : expected) {
    ASSERT_TRUE(fs::exists(f)) << f;
    const std::string s = read_text(f);
    EXPECT_EQ(s.rfind("<?xml", 0), 0u) << f;
    EXPECT_NE(s.find("<svg xmlns=\"http://www.w3.org/2000/svg\""), std::string::npos) << f;
    EXPECT_EQ(xml_problem(s), "") << f;
  }
  // Nothing else in the directory (no temporary files left behind).
  size_t n = 0;
  for (auto& e : fs::directory_iterator(out)) n += e.is_regular_file();
  EXPECT_EQ(n, expected.size());

  // Heatmaps: one cell per (position, channel), default 64 positions; labelled and with a
  // colour bar.
  const std::string h20 = read_text(expected[0]);
  const auto cells = cell_fills(h20);
  ASSERT_EQ(cells.size(), 64u * 20u);
  EXPECT_NE(h20.find(">position i<"), std::string::npos);
  EXPECT_NE(h20.find(">channel j<"), std::string::npos);
  EXPECT_NE(h20.find("<linearGradient id=\"cbar\""), std::string::npos);
  // Row 0 is PE(0) = (sin 0, cos 0, ...) = (0, 1, 0, 1, ...): on the fixed -1..1 diverging
  // scale 0 is the centre colour and 1 the top (ColorBrewer RdBu #f7f7f7 and #b2182b).
  for (int jj = 0; jj < 20; ++jj) EXPECT_EQ(cells[jj], jj % 2 ? "#b2182b" : "#f7f7f7") << jj;
  EXPECT_EQ(cell_fills(read_text(expected[2])).size(), 64u * 50u);

  // Curves: the first two pairs (channels 0..3), sine solid and cosine dashed.
  const std::string c20 = read_text(expected[1]);
  EXPECT_EQ(count(c20, "<polyline"), 4u);
  EXPECT_EQ(count(c20, "stroke-dasharray=\"7 5\""), 2u);
  EXPECT_NE(c20.find(">channel 0 (sin, ω = 1)<"), std::string::npos);

  // Frequencies: one marker per pair of each width (10 + 25) plus two legend markers; log axis
  // down to 10000^(-48/50) = 1.45e-4, so the 1e-4 decade is labelled.
  const std::string fq = read_text(expected[4]);
  EXPECT_EQ(count(fq, "<circle"), 10u + 25u + 2u);
  EXPECT_NE(fq.find(">0.0001<"), std::string::npos);
  EXPECT_NE(fq.find(">width d = 50<"), std::string::npos);
}

TEST(CliFigure, TextAndCsvListTheFiles) {
  temp_dir t;
  auto r = run_cli({"figure", "--width", "8", "--positions", "16", "--out", t.path});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, t.path + "/sinusoidal_table_d8.svg\n" + t.path + "/sinusoidal_curves_d8.svg\n" +
                       t.path + "/sinusoidal_frequencies.svg\n");
  EXPECT_EQ(cell_fills(read_text(t.file("sinusoidal_table_d8.svg"))).size(), 16u * 8u);
  r = run_cli({"figure", "--width", "8", "--out", t.path, "--format", "csv"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out.rfind("file\n", 0), 0u);
  EXPECT_EQ(count(r.out, "\n"), 4u);
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

  // Every image either file references exists and is a well-formed SVG; the sinusoidal ones
  // are all there.
  std::set<std::string> html_imgs, md_imgs;
  for (const auto& f : values_after(html, "<img src=\"")) html_imgs.insert(f);
  // Markdown images: ![alt](file)
  for (size_t p = md.find("!["); p != std::string::npos; p = md.find("![", p + 1)) {
    const size_t b = md.find("](", p), e = md.find(')', b);
    if (b != std::string::npos && e != std::string::npos)
      md_imgs.insert(md.substr(b + 2, e - b - 2));
  }
  EXPECT_EQ(html_imgs, md_imgs);
  for (const auto& f : html_imgs) {
    ASSERT_TRUE(fs::exists(t.file(f))) << f;
    if (f.size() > 4 && f.substr(f.size() - 4) == ".svg") {
      EXPECT_EQ(xml_problem(read_text(t.file(f))), "") << f;
    }
  }
  for (const std::string f :
       {"sinusoidal_table_d20.svg", "sinusoidal_table_d50.svg", "sinusoidal_curves_d20.svg",
        "sinusoidal_curves_d50.svg", "sinusoidal_frequencies.svg", "sinusoidal_dot_profile.svg",
        "sinusoidal_gram_full.svg", "sinusoidal_gram_sine_only.svg"})
    EXPECT_TRUE(html_imgs.count(f)) << "report does not show " << f;
  EXPECT_NE(html.find("<figcaption>"), std::string::npos);
}
