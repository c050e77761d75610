// posenc schemes: the declaration of every position scheme (posenc/attention/schemes.hpp), as
// text (a Markdown table: docs/schemes.md is this output), JSON, or the verdict of the
// combination rule for a list of schemes.
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "cli.hpp"
#include "posenc/attention/schemes.hpp"
#include "posenc/core/error.hpp"

namespace posenc::cli {
namespace {

struct schemes_opts {
  out_format format = out_format::text;
  std::vector<std::string> combine;
};

void run_schemes(const schemes_opts& o) {
  if (!o.combine.empty()) {
    check_scheme_combination(o.combine);  // throws naming the pair that conflicts
    std::printf("ok: %zu schemes combine\n", o.combine.size());
    return;
  }
  if (o.format == out_format::csv)
    fail("--format must be text (a Markdown table) or json for posenc schemes, got csv");
  const std::string out = o.format == out_format::json ? schemes_json() : schemes_markdown();
  std::fputs(out.c_str(), stdout);
  if (o.format == out_format::json) std::fputs("\n", stdout);
}

const bool registered_cmd_schemes = register_command(45, [](CLI::App& app) {
  auto o = std::make_shared<schemes_opts>();
  auto* sub = app.add_subcommand(
      "schemes", "Every position scheme as declared: where it enters, properties, parameters");
  add_format_option(sub, o->format);
  sub->add_option("--combine", o->combine,
                  "Check whether these schemes may be on in one attention call (e.g. "
                  "--combine cope mrope); exit 2 naming the pair that conflicts");
  sub->callback([o] { run_schemes(*o); });
});

}  // namespace
}  // namespace posenc::cli
