// The report as its readers see it: `posenc report` output from a small run (worked examples,
// checks, a tiny bench.json, a tiny lab run and a tiny --preset extend run) opened in a real
// browser (headless Chromium). The figures are Vega-Lite charts that the page draws with vega-embed
// (SVG renderer) from the specifications it embeds, with the scripts the report bundles in vega/.
//
// The test copies index.html and injects, as the first child of <head> (before any script of
// the page can run), a hook script that
//   - records console errors: window.onerror (uncaught exceptions and resources that fail to
//     load, caught in the capture phase), unhandled promise rejections and console.error; and
//     console.warn separately (Vega's warnings, e.g. an empty or infinite scale domain);
//   - once the page has drawn its charts (window.posencFigures settles), checks every chart
//     (<div class="vl-figure">): Vega drew an SVG in its place, every data layer of it (the
//     SVG groups of role "mark" of one layer: bars, lines, points, cells, text; axes, legends
//     and titles are not data layers) holds at least one item, and at least one item has a
//     nonzero bounding box and visible paint (a stroke, or a fill other than the white
//     background);
//   - checks that every table row has as many cells as the header row;
//   - writes its verdict as percent-encoded JSON into <pre id="posenc-browser-verdict">, which
//     `chromium --dump-dom` prints.
// Each test leaves its copy of the report and the verdict (browser-verdict.json) in
// <test binary dir>/test_report_browser_out/<case>/, and a screenshot of the unmodified page
// in test_report_browser_out/report.png.
//
// ChartsShowValuesOnHoverAndZoom hovers over and scrolls two charts and reads the tooltip and the
// axes. The checker is shown to fail: the negative tests break a copy of the same report (a chart
// whose data is emptied, a spec that does not parse, a spec Vega-Lite rejects, a missing
// library script, a script that throws and one that calls console.error, a table row with an
// extra cell) and expect each break to be named in the verdict.
//
// Skipped (GTEST_SKIP) only when Chromium is missing or cannot start; set POSENC_CHROMIUM to
// use another binary. No network is used: every page is a file:// URL and the scripts are the
// report's own copies.
#include <fcntl.h>
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <sys/file.h>
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
  var errors = [], warnings = [];
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
  var consoleError = console.error, consoleWarn = console.warn;
  function text(args) { return Array.prototype.map.call(args, String).join(' '); }
  console.error = function () {
    errors.push('console.error: ' + text(arguments));
    return consoleError.apply(console, arguments);
  };
  console.warn = function () {
    warnings.push('console.warn: ' + text(arguments));
    return consoleWarn.apply(console, arguments);
  };

  function painted(v) {
    return !!v && v !== 'none' && v !== 'transparent' && !/rgba\([^)]*,\s*0\)$/.test(v);
  }
  function visible(el) {
    var cs = getComputedStyle(el);
    if (cs.display === 'none' || cs.visibility === 'hidden' || cs.opacity === '0') return false;
    if (el.closest('[opacity="0"]')) return false;
    var stroke = painted(cs.stroke) && parseFloat(cs.strokeWidth) > 0 &&
                 cs.strokeOpacity !== '0';
    var fill = painted(cs.fill) && cs.fill !== 'rgb(255, 255, 255)' && cs.fillOpacity !== '0';
    return stroke || fill;
  }
  // One chart: the data layers Vega drew into its SVG and their items. A layer that draws one
  // mark per series (lines) is one SVG group per series, all with the layer's class: the groups
  // of one class together are the layer.
  function checkChart(name, container, problems, drawn) {
    var svg = container.querySelector('svg.marks');
    if (!svg) {
      problems.push(name + ': not drawn (' + (container.textContent || 'empty').slice(0, 200) +
                    ')');
      return;
    }
    var layers = {}, extent = 0, shown = 0;
    Array.prototype.forEach.call(svg.querySelectorAll('g.role-mark'), function (g) {
      if (g.parentElement.closest('.role-axis,.role-legend,.role-title')) return;
      var layer = g.getAttribute('class');
      layers[layer] = (layers[layer] || 0) + g.childElementCount;
      for (var el = g.firstElementChild; el; el = el.nextElementSibling) {
        var b;
        try { b = el.getBBox(); } catch (err) { continue; }
        if (!(b.width > 0 || b.height > 0)) continue;
        extent++;
        if (!shown && visible(el)) shown = 1;
      }
    });
    var names = Object.keys(layers);
    if (!names.length) problems.push(name + ': no data layer drawn');
    names.forEach(function (layer) {
      if (!layers[layer]) problems.push(name + ': layer ' + layer + ' drew nothing');
    });
    drawn[name] = extent;
    if (!shown) problems.push(name + ': nothing visible drawn');
  }
  window.addEventListener('load', function () {
    var probe = null;
    Promise.resolve(window.posencFigures).then(function () {
      // A test's own look at the drawn page (ChartsShowValuesOnHoverAndZoom), if it set one.
      return typeof window.posencProbe === 'function' ? window.posencProbe() : null;
    }).then(function (result) {
      probe = result;
      // One task later, so that errors from the page's own handlers are recorded.
      setTimeout(function () {
        var problems = [], drawn = {};
        var specs = document.querySelectorAll('script.vl-spec');
        var charts = document.querySelectorAll('.vl-figure');
        Array.prototype.forEach.call(specs, function (s) {
          var c = document.getElementById(s.getAttribute('data-figure'));
          var name = s.getAttribute('data-file');
          if (!c) problems.push(name + ': no element to draw into');
          else checkChart(name, c, problems, drawn);
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
        var pre = document.createElement('pre');
        pre.id = 'posenc-browser-verdict';
        pre.style.display = 'none';
        pre.textContent = encodeURIComponent(JSON.stringify(
            {figures: charts.length, specs: specs.length, tables: tables.length, drawn: drawn,
             problems: problems, errors: errors, warnings: warnings, probe: probe}));
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

// NOLINTNEXTLINE(bugprone-exception-escape): json's noexcept default constructor cannot throw
struct verdict {
  std::string failure;  // non-empty when no verdict could be obtained (with Chromium's output)
  int figures = 0;
  std::vector<std::string> problems, errors, warnings;
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
  v.warnings = v.raw.at("warnings").get<std::vector<std::string>>();
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

// The report the tests open is generated once per posenc binary, not once per test process:
// ctest runs each test of this suite as its own process (ten of them, two at a time), and
// generating the report (a small bench, a tiny lab run, `posenc report`) is most of a test's
// time, under the sanitizers most of all. The first process to get the lock generates it into
// out_root()/input/ and writes the binary's identity (path, size, modification time) to
// input.stamp; the others (and later runs with the same binary) copy it. A rebuilt binary
// regenerates it.
std::string binary_stamp() {
  const fs::path bin = posenc::test::posenc_bin();
  std::error_code ec;
  const auto size = fs::file_size(bin, ec);
  const auto mtime = fs::last_write_time(bin, ec).time_since_epoch().count();
  return bin.string() + " " + std::to_string(size) + " " + std::to_string(mtime) + "\n";
}

// Generates the report into DIR (created); "" on success, else why not.
std::string generate_report(const fs::path& report) {
  fs::create_directories(report);
  const std::string dir = report.string();
  // One memory-bound and one compute-bound case, so both bar series are drawn.
  const auto bench =
      run_cli({"bench", "--quick", "--filter", "rope/T=1/", "--filter", "scheme=alibi", "--reps",
               "1", "--min-seconds", "0.01", "--threads", "1", "--out", dir + "/bench.json"});
  if (bench.exit_code != 0) return "posenc bench failed: " + tail(bench.err);
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
  if (lab.exit_code != 0) return "posenc lab failed: " + tail(lab.err);
  // A tiny context-extension run on a generated corpus, for the extend figures.
  {
    std::string train, held;
    for (int i = 0; i < 4000; ++i) train += static_cast<char>('a' + (i * 7 + i / 5) % 9);
    for (int i = 0; i < 1400; ++i) held += static_cast<char>('a' + (i * 5 + i / 3) % 9);
    std::ofstream(dir + "/extend_train.txt") << train;
    std::ofstream(dir + "/extend_held.txt") << held;
  }
  const auto ext = run_cli({"lab",
                            "--preset",
                            "extend",
                            "--file",
                            dir + "/extend_train.txt",
                            "--eval-file",
                            dir + "/extend_held.txt",
                            "--train-len",
                            "16",
                            "--steps",
                            "3",
                            "--finetune-steps",
                            "2",
                            "--search-budget",
                            "3",
                            "--seeds",
                            "1",
                            "--d-model",
                            "16",
                            "--layers",
                            "1",
                            "--heads",
                            "2",
                            "--d-ff",
                            "32",
                            "--eval-chars",
                            "600",
                            "--needle-samples",
                            "2",
                            "--threads",
                            "1",
                            "--no-progress",
                            "--out",
                            dir + "/extend"});
  if (ext.exit_code != 0) return "posenc lab --preset extend failed: " + tail(ext.err);
  // Exit 1 means "written, but some property check failed": the page is still complete.
  const auto rep = run_cli({"report", "--out", dir, "--quick"});
  if (rep.exit_code != 0 && rep.exit_code != 1) return "posenc report failed: " + tail(rep.err);
  return "";
}

class ReportBrowser : public ::testing::Test {
 protected:
  static std::string skip_reason_;    // Chromium cannot start: why (browser tests skip)
  static std::string setup_failure_;  // the report could not be produced: why
  static fs::path report_;            // out_root()/input: the generated report, read only

  static void SetUpTestSuite() {
    if (!POSENC_HAVE_VEGA) {
      skip_reason_ =
          "built without the figures' scripts (vega, vega-lite, vega-embed: "
          "scripts/install-deps)";
      return;
    }
    fs::create_directories(out_root());
    report_ = out_root() / "input";
    const fs::path stamp = out_root() / "input.stamp";
    {
      // Held until the report is complete: a process that waits finds it complete.
      const int lock = ::open((out_root() / "input.lock").c_str(), O_RDWR | O_CREAT, 0644);
      if (lock < 0 || ::flock(lock, LOCK_EX) != 0) {
        setup_failure_ = "cannot lock " + (out_root() / "input.lock").string();
        if (lock >= 0) ::close(lock);
        return;
      }
      const std::string want = binary_stamp();
      if (!fs::exists(stamp) || read_text(stamp.string()) != want) {
        std::error_code ec;
        fs::remove(stamp, ec);
        fs::remove_all(report_, ec);
        setup_failure_ = generate_report(report_);
        if (setup_failure_.empty()) write_text(stamp, want);
      }
      ::close(lock);  // releases the lock
      if (!setup_failure_.empty()) return;
    }

    // Can Chromium start at all? Only this decides a skip.
    if (chromium_binary().empty()) {
      skip_reason_ = "Chromium not found (/usr/bin/chromium; set POSENC_CHROMIUM)";
      return;
    }
    temp_dir probe_dir;
    const fs::path probe_page = fs::path(probe_dir.path) / "probe.html";
    write_text(probe_page, "<!DOCTYPE html><p id=\"probe\">posenc-probe-ok</p>");
    const auto probe = chromium("--dump-dom " + quote(file_url(probe_page)));
    if (probe.out.find("posenc-probe-ok") == std::string::npos)
      skip_reason_ = "Chromium (" + chromium_binary() + ") could not start headless: exit " +
                     std::to_string(probe.exit_code) + "\n" + tail(probe.err);
  }

  void SetUp() override { ASSERT_EQ(setup_failure_, ""); }

  // A fresh copy of the report, out_root()/name (kept after the test for inspection).
  static fs::path copy_report(const std::string& name) {
    fs::path dst = out_root() / name;
    std::error_code ec;
    fs::remove_all(dst, ec);
    fs::create_directories(dst.parent_path());
    fs::copy(report_, dst, fs::copy_options::recursive);
    return dst;
  }
};

std::string ReportBrowser::skip_reason_;
std::string ReportBrowser::setup_failure_;
fs::path ReportBrowser::report_;

// Browser tests start with this: skipped, with the reason, only where Chromium cannot start.
#define REQUIRE_BROWSER() \
  if (!skip_reason_.empty()) GTEST_SKIP() << skip_reason_

// The checker's own tests (a broken copy of the report, the hover and zoom interaction) run
// Chromium and the hook's JavaScript on the report generated in SetUpTestSuite: no posenc code
// runs in them, so the sanitizers have nothing to see, and each costs 7-15 s of CPU in
// Chromium. The sanitizer build (POSENC_SANITIZED) generates the report under the sanitizers
// and checks it in EveryFigureDrawsWithoutConsoleErrors and MarkdownTablesKeepTheirColumns, and
// skips these; the Release build runs them all.
#define REQUIRE_BROWSER_CHECKER_TEST()                                                         \
  REQUIRE_BROWSER();                                                                           \
  if (std::getenv("POSENC_SANITIZED"))                                                         \
  GTEST_SKIP() << "runs only Chromium and the checker's JavaScript (no posenc code): Release " \
                  "build only"

// Each chart's specification in a page: where its JSON text starts and ends, and its file.
struct spec_at {
  size_t begin = 0, end = 0;
  std::string file;
};
std::vector<spec_at> specs_in(const std::string& html) {
  std::vector<spec_at> out;
  const std::string tag = "<script type=\"application/json\" class=\"vl-spec\"";
  for (size_t t = html.find(tag); t != std::string::npos; t = html.find(tag, t + 1)) {
    spec_at at;
    const size_t f = html.find("data-file=\"", t) + 11;
    at.file = html.substr(f, html.find('"', f) - f);
    at.begin = html.find('>', t) + 1;
    at.end = html.find("</script>", at.begin);
    if (at.end == std::string::npos) break;
    out.push_back(at);
  }
  return out;
}

// Replaces the first chart's specification in DIR/index.html by edit(its JSON text); returns
// the chart's file name ("" when the page has no chart).
template <typename F>
std::string break_first_spec(const fs::path& dir, F edit) {
  std::string html = read_text((dir / "index.html").string());
  const auto specs = specs_in(html);
  if (specs.empty()) return "";
  const spec_at& at = specs.front();
  html.replace(at.begin, at.end - at.begin, edit(html.substr(at.begin, at.end - at.begin)));
  write_text(dir / "index.html", html);
  return at.file;
}

// Keeps the first n charts of DIR/index.html and removes the others (each chart's element and
// its specification; captions and tables stay). The checker's negative tests break the first
// chart or the page as a whole: a page of a few charts shows the checker finding the break, and
// the charts left must still pass, in a fraction of the time the whole report takes to draw
// (the report's two dozen charts are drawn by EveryFigureDrawsWithoutConsoleErrors).
void keep_first_charts(const fs::path& dir, size_t n) {
  std::string html = read_text((dir / "index.html").string());
  const std::string div = "<div class=\"vl-figure\"", end = "</script>\n";
  size_t seen = 0;
  for (size_t at = html.find(div); at != std::string::npos; at = html.find(div, at)) {
    if (seen++ < n) {
      at += div.size();
      continue;
    }
    const size_t e = html.find(end, at);
    ASSERT_NE(e, std::string::npos) << "a chart without its specification";
    html.erase(at, e + end.size() - at);
  }
  write_text(dir / "index.html", html);
}

}  // namespace

TEST_F(ReportBrowser, EveryFigureDrawsWithoutConsoleErrors) {
  REQUIRE_BROWSER();
  const fs::path dir = copy_report("report");
  const std::string html = read_text((dir / "index.html").string());
  // The small run rendered the optional sections from their inputs, not their fallbacks.
  EXPECT_NE(html.find("data-file=\"bench_fractions.vl.json\""), std::string::npos);
  EXPECT_NE(html.find("data-file=\"lab_length.vl.json\""), std::string::npos);
  EXPECT_NE(html.find("Numbers from <code>lab/results.json</code>"), std::string::npos);
  for (const char* f : {"lab_extend_scaling_zero_shot", "lab_extend_scaling_finetuned",
                        "lab_extend_per_pair", "lab_extend_trained", "lab_needles_yarn___fine-tune",
                        "lab_needles_alibi", "lab_needles_rope__trained_"})
    EXPECT_NE(html.find(fmt::format("data-file=\"{}.vl.json\"", f)), std::string::npos) << f;

  // Each chart's spec file beside the page is the spec the page draws.
  const auto specs = specs_in(html);
  for (const auto& at : specs) {
    ASSERT_TRUE(fs::exists(dir / at.file)) << at.file;
    EXPECT_EQ(nlohmann::json::parse(read_text((dir / at.file).string())),
              nlohmann::json::parse(html.substr(at.begin, at.end - at.begin)))
        << at.file;
  }

  const auto v = check_page(dir);
  ASSERT_EQ(v.failure, "");
  EXPECT_TRUE(v.problems.empty()) << v.raw.dump(1);
  EXPECT_TRUE(v.errors.empty()) << v.raw.dump(1);
  EXPECT_TRUE(v.warnings.empty()) << v.raw.dump(1);
  // Every chart of the page was looked at (the checker did not silently find nothing), and each
  // drew at least one item per data layer.
  EXPECT_EQ(v.figures, static_cast<int>(count(html, "class=\"vl-figure\"")));
  EXPECT_EQ(v.raw.at("specs").get<size_t>(), specs.size());
  EXPECT_EQ(static_cast<size_t>(v.figures), specs.size());
  EXPECT_GE(v.figures, 20);
  EXPECT_EQ(v.raw.at("drawn").size(), static_cast<size_t>(v.figures));

  EXPECT_EQ(v.raw.at("tables").get<size_t>(), count(html, "<table>"));

  // The screenshot of the page as a reader sees it (no hook injected).
  const fs::path png = out_root() / "report.png";
  fs::remove(png);
  const auto r = chromium("--screenshot=" + quote(png.string()) +
                          " --window-size=1280,4000 --virtual-time-budget=15000 " +
                          quote(file_url(dir / "index.html")));
  ASSERT_TRUE(fs::exists(png)) << "exit " << r.exit_code << "\n" << tail(r.err);
  const std::string bytes = read_text(png.string());
  EXPECT_EQ(bytes.substr(0, 8), "\x89PNG\r\n\x1a\n");
  EXPECT_GT(bytes.size(), 10000u);
}

// A chart whose data is emptied still gets axes, a title and its reference line, but no data
// layer draws anything.
TEST_F(ReportBrowser, FailsOnAFigureWithNoData) {
  REQUIRE_BROWSER_CHECKER_TEST();
  const fs::path dir = copy_report("broken_no_data");
  keep_first_charts(dir, 3);
  const std::string fig = break_first_spec(dir, [](const std::string& text) {
    auto j = nlohmann::ordered_json::parse(text);
    j["data"]["values"] = nlohmann::ordered_json::array();
    return j.dump();
  });
  ASSERT_NE(fig, "");
  const auto v = check_page(dir);
  ASSERT_EQ(v.failure, "");
  EXPECT_TRUE(any_contains(v.problems, fig, "drew nothing")) << v.raw.dump(1);
  for (const auto& p : v.problems)  // only the broken chart
    EXPECT_NE(p.find(fig), std::string::npos) << v.raw.dump(1);
}

TEST_F(ReportBrowser, FailsOnASpecThatDoesNotParse) {
  REQUIRE_BROWSER_CHECKER_TEST();
  const fs::path dir = copy_report("broken_unparsable_spec");
  keep_first_charts(dir, 3);
  const std::string fig = break_first_spec(
      dir, [](const std::string& text) { return text.substr(0, text.size() / 2); });
  ASSERT_NE(fig, "");
  const auto v = check_page(dir);
  ASSERT_EQ(v.failure, "");
  EXPECT_TRUE(any_contains(v.problems, fig, "not drawn")) << v.raw.dump(1);
  EXPECT_TRUE(any_contains(v.errors, "console.error", fig)) << v.raw.dump(1);
  EXPECT_EQ(v.problems.size(), 1u) << v.raw.dump(1);  // the other charts still draw
}

TEST_F(ReportBrowser, FailsOnASpecVegaLiteRejects) {
  REQUIRE_BROWSER_CHECKER_TEST();
  const fs::path dir = copy_report("broken_rejected_spec");
  keep_first_charts(dir, 3);
  const std::string fig = break_first_spec(dir, [](const std::string& text) {
    auto j = nlohmann::ordered_json::parse(text);
    j["layer"][0]["mark"]["type"] = "no-such-mark";
    return j.dump();
  });
  ASSERT_NE(fig, "");
  const auto v = check_page(dir);
  ASSERT_EQ(v.failure, "");
  EXPECT_TRUE(any_contains(v.problems, fig, "not drawn")) << v.raw.dump(1);
  EXPECT_TRUE(any_contains(v.errors, "console.error", fig)) << v.raw.dump(1);
  EXPECT_EQ(v.problems.size(), 1u) << v.raw.dump(1);
}

TEST_F(ReportBrowser, FailsOnAMissingLibrary) {
  REQUIRE_BROWSER_CHECKER_TEST();
  const fs::path dir = copy_report("broken_missing_library");
  ASSERT_TRUE(fs::remove(dir / "vega" / "vega-embed.min.js"));
  const auto v = check_page(dir);
  ASSERT_EQ(v.failure, "");
  EXPECT_TRUE(any_contains(v.errors, "failed to load <script>", "vega-embed.min.js"))
      << v.raw.dump(1);
  EXPECT_TRUE(any_contains(v.errors, "console.error", "vegaEmbed is not defined")) << v.raw.dump(1);
  EXPECT_EQ(v.problems.size(), static_cast<size_t>(v.figures)) << v.raw.dump(1);  // every chart
  EXPECT_GE(v.figures, 20);
}

// What a reader does with a chart: the pointer over a line plot and over a heatmap shows the
// values of the nearest point or the cell (Vega's tooltip), and the scroll wheel zooms (the axis
// labels change). The events are dispatched at the element under a point inside the plot.
const char* const kInteractionProbe = R"JS(<script>
window.posencProbe = function () {
  function wait(ms) { return new Promise(function (r) { setTimeout(r, ms); }); }
  function labels(el) {
    return Array.prototype.map.call(el.querySelectorAll('.role-axis-label text'),
                                    function (t) { return t.textContent; }).join(' ');
  }
  function probe(file) {
    var s = document.querySelector('script.vl-spec[data-file="' + file + '"]');
    var el = document.getElementById(s.getAttribute('data-figure'));
    el.scrollIntoView();
    var r = el.querySelector('svg.marks').getBoundingClientRect();
    var x = r.left + r.width * 0.4, y = r.top + r.height * 0.45;
    var target = document.elementFromPoint(x, y);
    var at = {bubbles: true, cancelable: true, clientX: x, clientY: y, view: window};
    ['pointerover', 'pointermove'].forEach(function (type) {
      target.dispatchEvent(new PointerEvent(type, Object.assign({pointerType: 'mouse'}, at)));
    });
    var out = {};
    return wait(300).then(function () {
      var tip = document.getElementById('vg-tooltip-element');
      out.tooltip = tip && /\bvisible\b/.test(tip.className) ? tip.textContent : '';
      out.before = labels(el);
      target.dispatchEvent(new WheelEvent('wheel', Object.assign({deltaY: -500}, at)));
      return wait(300);
    }).then(function () {
      out.after = labels(el);
      target.dispatchEvent(new PointerEvent('pointerout', Object.assign({pointerType: 'mouse'}, at)));
      return out;
    });
  }
  var result = {};
  return probe('rope_freqs.vl.json').then(function (line) {
    result.line = line;
    return probe('attention_alibi.vl.json');
  }).then(function (cells) {
    result.heatmap = cells;
    return result;
  });
};
</script>
)JS";

TEST_F(ReportBrowser, ChartsShowValuesOnHoverAndZoom) {
  REQUIRE_BROWSER_CHECKER_TEST();
  const fs::path dir = copy_report("interaction");
  std::string html = read_text((dir / "index.html").string());
  const size_t body = html.find("</body>");
  ASSERT_NE(body, std::string::npos);
  html.insert(body, kInteractionProbe);
  write_text(dir / "index.html", html);
  const auto v = check_page(dir);
  ASSERT_EQ(v.failure, "");
  EXPECT_TRUE(v.problems.empty()) << v.raw.dump(1);
  EXPECT_TRUE(v.errors.empty()) << v.raw.dump(1);
  const auto& p = v.raw.at("probe");
  ASSERT_TRUE(p.is_object()) << v.raw.dump(1);
  // The line plot's tooltip names a series and both axes; the heatmap's the query, key and p.
  const std::string line_tip = p.at("line").at("tooltip");
  EXPECT_NE(line_tip.find("series"), std::string::npos) << line_tip;
  EXPECT_NE(line_tip.find("pair index i"), std::string::npos) << line_tip;
  EXPECT_NE(line_tip.find("inv_freq omega_i"), std::string::npos) << line_tip;
  const std::string cell_tip = p.at("heatmap").at("tooltip");
  EXPECT_NE(cell_tip.find("query i"), std::string::npos) << cell_tip;
  EXPECT_NE(cell_tip.find("key j"), std::string::npos) << cell_tip;
  EXPECT_NE(cell_tip.find("p(i, j)"), std::string::npos) << cell_tip;
  // Scrolling zoomed both: the axes show other ticks.
  for (const char* chart : {"line", "heatmap"}) {
    EXPECT_NE(p.at(chart).at("before"), "") << chart;
    EXPECT_NE(p.at(chart).at("before"), p.at(chart).at("after")) << chart << v.raw.dump(1);
  }
}

TEST_F(ReportBrowser, FailsOnConsoleErrors) {
  REQUIRE_BROWSER_CHECKER_TEST();
  const fs::path dir = copy_report("broken_script");
  keep_first_charts(dir, 3);
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
  REQUIRE_BROWSER_CHECKER_TEST();
  const fs::path dir = copy_report("broken_table");
  keep_first_charts(dir, 3);
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
// chart of the HTML is linked (its spec file), and the checker itself rejects a broken table.
TEST_F(ReportBrowser, MarkdownTablesKeepTheirColumns) {
  const std::string md = read_text((report_ / "index.md").string());
  const std::string html = read_text((report_ / "index.html").string());
  EXPECT_EQ(markdown_table_problem(md), "");
  EXPECT_EQ(count(md, "\n|---"), count(html, "<table>"));
  EXPECT_EQ(count(md, "[Figure: "), count(html, "class=\"vl-figure\""));
  EXPECT_EQ(count(md, "]("), count(html, "class=\"vl-figure\"") + count(html, "<li><a "));
  EXPECT_NE(markdown_table_problem("| a | b |\n|---|---|\n| x | y | z |\n"), "");
  EXPECT_EQ(markdown_table_problem("| a | b |\n|---|---|\n| x \\| y | z |\n"), "");
}
