// The report as its readers see it: `posenc report` output from a small run (worked examples,
// checks, a tiny bench.json and a tiny lab run) opened in a real browser (headless Chromium).
//
// The test copies index.html and injects, as the first child of <head> (before any script of
// the page can run), a hook script that
//   - records console errors: window.onerror (uncaught exceptions and resources that fail to
//     load, caught in the capture phase), unhandled promise rejections and console.error;
//   - on load, checks every figure (<img>, <object>, <embed>, inline <svg>): an image must have
//     loaded (complete, naturalWidth > 0); an SVG file must be readable, parse as SVG, and
//     draw something: at least one path/line/rect/circle/ellipse/polyline/polygon outside
//     <defs> with a nonzero bounding box (getBBox, measured after importing it into the page)
//     and visible paint (a stroke, or a fill other than the white background);
//   - checks that every table row has as many cells as the header row;
//   - writes its verdict as percent-encoded JSON into <pre id="posenc-browser-verdict">, which
//     `chromium --dump-dom` prints.
// Each test leaves its copy of the report and the verdict (browser-verdict.json) in
// <test binary dir>/test_report_browser_out/<case>/, and a screenshot of the unmodified page
// in test_report_browser_out/report.png.
//
// The checker is shown to fail: the negative tests break a copy of the same report (a figure
// deleted, a figure truncated so it does not parse, a figure with nothing drawn, a script that
// throws and one that calls console.error) and expect each break to be named in the verdict.
//
// Skipped (GTEST_SKIP) only when Chromium is missing or cannot start; set POSENC_CHROMIUM to
// use another binary. No network is used: every page is a file:// URL.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "test_support.hpp"

namespace fs = std::filesystem;
using posenc::test::read_text;
using posenc::test::run_cli;
using posenc::test::temp_dir;

namespace {

// Installed before the page's own scripts; see the file comment.
const char* const kHook = R"JS(
(function () {
  'use strict';
  var errors = [];
  window.addEventListener('error', function (e) {
    var t = e.target;
    if (t && t !== window && t.nodeType === 1) {
      errors.push('failed to load <' + t.tagName.toLowerCase() + '> ' +
                  (t.getAttribute('src') || t.getAttribute('data') || t.getAttribute('href')));
    } else {
      errors.push('uncaught: ' + e.message + ' (' + e.filename + ':' + e.lineno + ')');
    }
  }, true);
  window.addEventListener('unhandledrejection', function (e) {
    errors.push('unhandled rejection: ' + e.reason);
  });
  var consoleError = console.error;
  console.error = function () {
    errors.push('console.error: ' + Array.prototype.map.call(arguments, String).join(' '));
    return consoleError.apply(console, arguments);
  };

  function painted(v) {
    return !!v && v !== 'none' && v !== 'transparent' && !/rgba\([^)]*,\s*0\)$/.test(v);
  }
  // Shapes with a nonzero bounding box and visible paint (the white background does not count).
  function marks(svg) {
    var n = 0;
    var els = svg.querySelectorAll('path,line,rect,circle,ellipse,polyline,polygon');
    for (var i = 0; i < els.length; i++) {
      var el = els[i];
      if (el.closest('defs,clipPath,mask,pattern,marker,symbol')) continue;
      var b;
      try { b = el.getBBox(); } catch (err) { continue; }
      if (!(b.width > 0 || b.height > 0)) continue;
      var cs = getComputedStyle(el);
      if (cs.display === 'none' || cs.visibility === 'hidden' || cs.opacity === '0') continue;
      var stroke = painted(cs.stroke) && parseFloat(cs.strokeWidth) > 0;
      var fill = painted(cs.fill) && cs.fill !== 'rgb(255, 255, 255)';
      var open = el.localName === 'line' || el.localName === 'polyline';
      if (open ? stroke : (stroke || fill)) n++;
    }
    return n;
  }
  function readText(url) {
    return new Promise(function (resolve) {
      var x = new XMLHttpRequest();
      x.open('GET', url);
      x.onload = function () {
        resolve(x.status === 0 || x.status === 200 ? x.responseText : null);
      };
      x.onerror = function () { resolve(null); };
      try { x.send(); } catch (err) { resolve(null); }
    });
  }
  function checkSvg(name, text, problems, drawn) {
    var doc = new DOMParser().parseFromString(text, 'image/svg+xml');
    var pe = doc.getElementsByTagName('parsererror');
    if (pe.length || !doc.documentElement || doc.documentElement.localName !== 'svg') {
      problems.push(name + ': does not parse as SVG' +
                    (pe.length ? ' (' + pe[0].textContent.slice(0, 160) + ')' : ''));
      return;
    }
    var holder = document.createElement('div');
    holder.style.cssText = 'position:absolute;left:-20000px;top:0;width:4000px;height:4000px';
    holder.appendChild(document.importNode(doc.documentElement, true));
    document.body.appendChild(holder);
    var n = marks(holder.firstChild);
    holder.remove();
    drawn[name] = n;
    if (!n) problems.push(name + ': nothing drawn (no shape with nonzero extent and paint)');
  }
  function checkFigure(el, problems, drawn) {
    var tag = el.localName;
    var name = el.getAttribute(tag === 'object' ? 'data' : 'src') || '(no source)';
    var url = tag === 'object' ? el.data : el.src;
    if (tag === 'img' && !(el.complete && el.naturalWidth > 0))
      problems.push(name + ': image did not load (naturalWidth 0)');
    if (!/\.svg([?#]|$)/i.test(name)) return Promise.resolve();
    return readText(url).then(function (text) {
      if (text === null) problems.push(name + ': could not be read');
      else checkSvg(name, text, problems, drawn);
    });
  }
  window.addEventListener('load', function () {
    var problems = [], drawn = {};
    var figs = Array.prototype.slice.call(document.querySelectorAll('img,object,embed'));
    var inline = Array.prototype.filter.call(document.querySelectorAll('svg'), function (s) {
      return !s.parentElement.closest('svg');
    });
    inline.forEach(function (s, i) {
      drawn['inline svg ' + i] = marks(s);
      if (!marks(s)) problems.push('inline svg ' + i + ': nothing drawn');
    });
    // Tables as parsed by the browser: every row as wide as the header (text that was not
    // escaped would add or swallow cells).
    var tables = document.querySelectorAll('table');
    Array.prototype.forEach.call(tables, function (t, ti) {
      var width = t.rows.length ? t.rows[0].cells.length : 0;
      for (var r = 1; r < t.rows.length; r++) {
        if (t.rows[r].cells.length !== width) {
          problems.push('table ' + ti + ' row ' + r + ': ' + t.rows[r].cells.length +
                        ' cells, header ' + width);
          break;
        }
      }
    });
    Promise.all(figs.map(function (f) { return checkFigure(f, problems, drawn); }))
      .then(function () {
        // One task later, so that errors from the page's own load handlers are recorded.
        setTimeout(function () {
          var pre = document.createElement('pre');
          pre.id = 'posenc-browser-verdict';
          pre.style.display = 'none';
          pre.textContent = encodeURIComponent(JSON.stringify(
              {figures: figs.length + inline.length, tables: tables.length, drawn: drawn,
               problems: problems, errors: errors}));
          document.body.appendChild(pre);
        }, 0);
      });
  });
})();
)JS";

std::string quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += (c == '\'') ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

struct shell_result {
  int exit_code;
  std::string out, err;
};

shell_result run_shell(const std::string& cmd) {
  temp_dir d;
  const std::string full =
      cmd + " >" + quote(d.file("out")) + " 2>" + quote(d.file("err")) + " </dev/null";
  const int status = std::system(full.c_str());
  return {WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status),
          read_text(d.file("out")), read_text(d.file("err"))};
}

std::string tail(const std::string& s, size_t n = 1500) {
  return s.size() > n ? "..." + s.substr(s.size() - n) : s;
}

void write_text(const fs::path& p, const std::string& s) {
  std::ofstream f(p, std::ios::binary);
  f << s;
}

std::string chromium_binary() {
  if (const char* e = std::getenv("POSENC_CHROMIUM"); e && *e) return e;
  for (const char* p : {"/usr/bin/chromium", "/usr/bin/chromium-browser"})
    if (::access(p, X_OK) == 0) return p;
  return "";
}

// One headless Chromium run with a fresh profile (removed afterwards); `args` are already
// quoted. Never touches the network: file:// pages, background services off.
shell_result chromium(const std::string& args) {
  temp_dir profile;
  return run_shell("timeout 120 " + quote(chromium_binary()) +
                   " --headless --no-sandbox --disable-gpu --disable-quic --no-first-run"
                   " --disable-background-networking --disable-component-update --disable-sync"
                   " --disable-extensions --disable-dev-shm-usage --hide-scrollbars"
                   " --user-data-dir=" +
                   quote(profile.path) + " " + args);
}

std::string file_url(const fs::path& p) {
  return "file://" + fs::absolute(p).lexically_normal().string();
}

std::string percent_decode(const std::string& s) {
  std::string o;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '%' && i + 2 < s.size()) {
      o += static_cast<char>(std::stoi(s.substr(i + 1, 2), nullptr, 16));
      i += 2;
    } else {
      o += s[i];
    }
  }
  return o;
}

size_t count(const std::string& s, const std::string& what) {
  size_t n = 0;
  for (size_t p = s.find(what); p != std::string::npos; p = s.find(what, p + 1)) ++n;
  return n;
}

// Markdown tables keep their columns: every line of a table (a run of lines starting with
// '|') has as many unescaped '|' as its first line. "" when so, else the first bad line.
std::string markdown_table_problem(const std::string& md) {
  size_t want = 0, line_no = 0, pos = 0;
  while (pos < md.size()) {
    size_t end = md.find('\n', pos);
    if (end == std::string::npos) end = md.size();
    const std::string line = md.substr(pos, end - pos);
    ++line_no;
    pos = end + 1;
    if (line.empty() || line[0] != '|') {
      want = 0;
      continue;
    }
    size_t bars = 0;
    for (size_t i = 0; i < line.size(); ++i)
      bars += line[i] == '|' && (i == 0 || line[i - 1] != '\\');
    if (want == 0) want = bars;
    if (bars != want)
      return "line " + std::to_string(line_no) + " has " + std::to_string(bars - 1) +
             " cells, its table " + std::to_string(want - 1) + ": " + line;
  }
  return "";
}

struct verdict {
  std::string failure;  // non-empty when no verdict could be obtained (with Chromium's output)
  int figures = 0;
  std::vector<std::string> problems, errors;
  nlohmann::json raw;
};

// Opens DIR/index.html, with the hook injected, in Chromium and returns the hook's verdict.
verdict check_page(const fs::path& dir) {
  verdict v;
  std::string html = read_text((dir / "index.html").string());
  const size_t head = html.find("<head");
  const size_t open_end = head == std::string::npos ? head : html.find('>', head);
  if (open_end == std::string::npos) {
    v.failure = "index.html has no <head>";
    return v;
  }
  html.insert(open_end + 1, std::string("<script>") + kHook + "</script>");
  const fs::path page = dir / "index.browser-test.html";
  write_text(page, html);
  const std::string args =
      "--allow-file-access-from-files --virtual-time-budget=15000 --dump-dom " +
      quote(file_url(page));
  auto r = chromium(args);
  // One more try when Chromium itself gave up (killed or crashed on a loaded machine); a page
  // that ran but found problems is never retried.
  if (r.out.find("posenc-browser-verdict") == std::string::npos) r = chromium(args);
  fs::remove(page);
  const std::string mark = "<pre id=\"posenc-browser-verdict\"";
  const size_t a = r.out.find(mark);
  const size_t b = a == std::string::npos ? a : r.out.find('>', a);
  const size_t e = b == std::string::npos ? b : r.out.find("</pre>", b);
  if (e == std::string::npos) {
    v.failure = "no verdict in the page (exit " + std::to_string(r.exit_code) +
                ")\nstdout: " + tail(r.out) + "\nstderr: " + tail(r.err);
    return v;
  }
  v.raw = nlohmann::json::parse(percent_decode(r.out.substr(b + 1, e - b - 1)));
  write_text(dir / "browser-verdict.json", v.raw.dump(1) + "\n");  // for inspection
  v.figures = v.raw.at("figures").get<int>();
  v.problems = v.raw.at("problems").get<std::vector<std::string>>();
  v.errors = v.raw.at("errors").get<std::vector<std::string>>();
  return v;
}

bool any_contains(const std::vector<std::string>& v, const std::string& a, const std::string& b) {
  for (const auto& s : v)
    if (s.find(a) != std::string::npos && s.find(b) != std::string::npos) return true;
  return false;
}

// The output folder, beside the test binary in the build tree.
fs::path out_root() {
  return fs::read_symlink("/proc/self/exe").parent_path() / "test_report_browser_out";
}

class ReportBrowser : public ::testing::Test {
 protected:
  static std::string skip_reason_;    // Chromium cannot start: why (browser tests skip)
  static std::string setup_failure_;  // the report could not be produced: why
  static temp_dir* generated_;        // this process's generated report, removed at the end
  static fs::path report_;            // generated_/report

  // Each test process (ctest runs one per test, possibly in parallel) generates its own report
  // in a temporary directory; each test works on its own copy under out_root(), so parallel
  // tests never share a file.
  static void SetUpTestSuite() {
    generated_ = new temp_dir;
    // A small run: a few bench cases, a tiny lab comparison, then the report over both.
    report_ = fs::path(generated_->path) / "report";
    fs::create_directories(report_);
    const std::string dir = report_.string();
    // One memory-bound and one compute-bound case, so both bar series are drawn.
    const auto bench =
        run_cli({"bench", "--quick", "--filter", "rope/T=1/", "--filter", "scheme=alibi", "--reps",
                 "1", "--min-seconds", "0.01", "--threads", "1", "--out", dir + "/bench.json"});
    if (bench.exit_code != 0) {
      setup_failure_ = "posenc bench failed: " + tail(bench.err);
      return;
    }
    const auto lab = run_cli({"lab",
                              "--task",
                              "passkey",
                              "--schemes",
                              "alibi,learned",
                              "--steps",
                              "5",
                              "--train-len",
                              "16:32",
                              "--eval-lens",
                              "32,64",
                              "--d-model",
                              "16",
                              "--seeds",
                              "1",
                              "--eval-samples",
                              "4",
                              "--threads",
                              "1",
                              "--no-progress",
                              "--out",
                              dir + "/lab"});
    if (lab.exit_code != 0) {
      setup_failure_ = "posenc lab failed: " + tail(lab.err);
      return;
    }
    // Exit 1 means "written, but some property check failed": the page is still complete.
    const auto rep = run_cli({"report", "--out", dir, "--quick"});
    if (rep.exit_code != 0 && rep.exit_code != 1) {
      setup_failure_ = "posenc report failed: " + tail(rep.err);
      return;
    }

    // Can Chromium start at all? Only this decides a skip.
    if (chromium_binary().empty()) {
      skip_reason_ = "Chromium not found (/usr/bin/chromium; set POSENC_CHROMIUM)";
      return;
    }
    const fs::path probe_page = fs::path(generated_->path) / "probe.html";
    write_text(probe_page, "<!DOCTYPE html><p id=\"probe\">posenc-probe-ok</p>");
    const auto probe = chromium("--dump-dom " + quote(file_url(probe_page)));
    fs::remove(probe_page);
    if (probe.out.find("posenc-probe-ok") == std::string::npos)
      skip_reason_ = "Chromium (" + chromium_binary() + ") could not start headless: exit " +
                     std::to_string(probe.exit_code) + "\n" + tail(probe.err);
  }
  static void TearDownTestSuite() {
    delete generated_;
    generated_ = nullptr;
  }

  void SetUp() override { ASSERT_EQ(setup_failure_, ""); }

  // A fresh copy of the report, out_root()/name (kept after the test for inspection).
  static fs::path copy_report(const std::string& name) {
    const fs::path dst = out_root() / name;
    std::error_code ec;
    fs::remove_all(dst, ec);
    fs::create_directories(dst.parent_path());
    fs::copy(report_, dst, fs::copy_options::recursive);
    return dst;
  }
};

std::string ReportBrowser::skip_reason_;
std::string ReportBrowser::setup_failure_;
temp_dir* ReportBrowser::generated_ = nullptr;
fs::path ReportBrowser::report_;

// Browser tests start with this: skipped, with the reason, only where Chromium cannot start.
#define REQUIRE_BROWSER() \
  if (!skip_reason_.empty()) GTEST_SKIP() << skip_reason_

// A figure file that the page shows (the first SVG <img>).
std::string first_svg_figure(const fs::path& dir) {
  const std::string html = read_text((dir / "index.html").string());
  const size_t a = html.find("<img src=\"");
  if (a == std::string::npos) return "";
  const size_t s = a + 10;
  return html.substr(s, html.find('"', s) - s);
}

}  // namespace

TEST_F(ReportBrowser, EveryFigureLoadsAndDrawsWithoutConsoleErrors) {
  REQUIRE_BROWSER();
  const fs::path dir = copy_report("report");
  const std::string html = read_text((dir / "index.html").string());
  // The small run rendered the optional sections from their inputs, not their fallbacks.
  EXPECT_NE(html.find("bench_fractions.svg"), std::string::npos);
  EXPECT_NE(html.find("lab_length.svg"), std::string::npos);
  EXPECT_NE(html.find("Numbers from <code>lab/results.json</code>"), std::string::npos);

  const auto v = check_page(dir);
  ASSERT_EQ(v.failure, "");
  EXPECT_TRUE(v.problems.empty()) << v.raw.dump(1);
  EXPECT_TRUE(v.errors.empty()) << v.raw.dump(1);
  // Every <img> of the page was looked at (the checker did not silently find nothing).
  EXPECT_EQ(v.figures, static_cast<int>(count(html, "<img ")));
  EXPECT_GE(v.figures, 20);
  EXPECT_EQ(v.raw.at("drawn").size(), static_cast<size_t>(v.figures));

  EXPECT_EQ(v.raw.at("tables").get<size_t>(), count(html, "<table>"));

  // The screenshot of the page as a reader sees it (no hook injected).
  const fs::path png = out_root() / "report.png";
  fs::remove(png);
  const auto r = chromium("--screenshot=" + quote(png.string()) +
                          " --window-size=1280,4000 --virtual-time-budget=5000 " +
                          quote(file_url(dir / "index.html")));
  ASSERT_TRUE(fs::exists(png)) << "exit " << r.exit_code << "\n" << tail(r.err);
  const std::string bytes = read_text(png.string());
  EXPECT_EQ(bytes.substr(0, 8), "\x89PNG\r\n\x1a\n");
  EXPECT_GT(bytes.size(), 10000u);
}

TEST_F(ReportBrowser, FailsOnAMissingFigure) {
  REQUIRE_BROWSER();
  const fs::path dir = copy_report("broken_missing_figure");
  const std::string fig = first_svg_figure(dir);
  ASSERT_NE(fig, "");
  fs::remove(dir / fig);
  const auto v = check_page(dir);
  ASSERT_EQ(v.failure, "");
  EXPECT_TRUE(any_contains(v.problems, fig, "did not load")) << v.raw.dump(1);
  EXPECT_TRUE(any_contains(v.problems, fig, "could not be read")) << v.raw.dump(1);
  EXPECT_TRUE(any_contains(v.errors, fig, "failed to load")) << v.raw.dump(1);
}

TEST_F(ReportBrowser, FailsOnAFigureThatDoesNotParse) {
  REQUIRE_BROWSER();
  const fs::path dir = copy_report("broken_unparsable_figure");
  const std::string fig = first_svg_figure(dir);
  ASSERT_NE(fig, "");
  const std::string svg = read_text((dir / fig).string());
  write_text(dir / fig, svg.substr(0, svg.size() / 2));  // cut off mid-document
  const auto v = check_page(dir);
  ASSERT_EQ(v.failure, "");
  EXPECT_TRUE(any_contains(v.problems, fig, "does not parse")) << v.raw.dump(1);
  EXPECT_TRUE(any_contains(v.problems, fig, "did not load")) << v.raw.dump(1);
}

TEST_F(ReportBrowser, FailsOnAFigureWithNothingDrawn) {
  REQUIRE_BROWSER();
  const fs::path dir = copy_report("broken_empty_figure");
  const std::string fig = first_svg_figure(dir);
  ASSERT_NE(fig, "");
  // A valid SVG with a size, a white background, a title and a zero-width bar: it loads and
  // parses, but shows nothing.
  write_text(
      dir / fig,
      "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"400\" height=\"300\" "
      "viewBox=\"0 0 400 300\">\n<rect x=\"0\" y=\"0\" width=\"400\" height=\"300\" "
      "fill=\"#ffffff\"/>\n<rect x=\"10\" y=\"10\" width=\"0\" height=\"0\" fill=\"#36c\"/>\n"
      "<text x=\"200\" y=\"20\">empty</text>\n</svg>\n");
  const auto v = check_page(dir);
  ASSERT_EQ(v.failure, "");
  EXPECT_TRUE(any_contains(v.problems, fig, "nothing drawn")) << v.raw.dump(1);
  EXPECT_EQ(v.problems.size(), 1u) << v.raw.dump(1);  // it loads; only the drawing is missing
}

TEST_F(ReportBrowser, FailsOnConsoleErrors) {
  REQUIRE_BROWSER();
  const fs::path dir = copy_report("broken_script");
  std::string html = read_text((dir / "index.html").string());
  const size_t body = html.find("</body>");
  ASSERT_NE(body, std::string::npos);
  html.insert(body,
              "<script>posenc_no_such_function();</script>\n"
              "<script>console.error('posenc deliberate console error');</script>\n");
  write_text(dir / "index.html", html);
  const auto v = check_page(dir);
  ASSERT_EQ(v.failure, "");
  EXPECT_TRUE(any_contains(v.errors, "uncaught", "posenc_no_such_function")) << v.raw.dump(1);
  EXPECT_TRUE(any_contains(v.errors, "console.error", "posenc deliberate")) << v.raw.dump(1);
  EXPECT_TRUE(v.problems.empty()) << v.raw.dump(1);
}

TEST_F(ReportBrowser, FailsOnATableRowWithAnExtraCell) {
  REQUIRE_BROWSER();
  const fs::path dir = copy_report("broken_table");
  std::string html = read_text((dir / "index.html").string());
  const size_t td = html.find("<td>");
  ASSERT_NE(td, std::string::npos);
  html.insert(td, "<td>extra</td>");
  write_text(dir / "index.html", html);
  const auto v = check_page(dir);
  ASSERT_EQ(v.failure, "");
  EXPECT_TRUE(any_contains(v.problems, "table 0 row 1", "cells, header")) << v.raw.dump(1);
  EXPECT_EQ(v.problems.size(), 1u) << v.raw.dump(1);
}

// The Markdown twin of the page (no browser needed): every table keeps its columns, every
// figure of the HTML is there too, and the checker itself rejects a broken table.
TEST_F(ReportBrowser, MarkdownTablesKeepTheirColumns) {
  const std::string md = read_text((report_ / "index.md").string());
  const std::string html = read_text((report_ / "index.html").string());
  EXPECT_EQ(markdown_table_problem(md), "");
  EXPECT_EQ(count(md, "\n|---"), count(html, "<table>"));
  EXPECT_EQ(count(md, "]("), count(html, "<img ") + count(html, "<li><a "));  // images + contents
  EXPECT_NE(markdown_table_problem("| a | b |\n|---|---|\n| x | y | z |\n"), "");
  EXPECT_EQ(markdown_table_problem("| a | b |\n|---|---|\n| x \\| y | z |\n"), "");
}
