// posenc check: runs every registered property check group and prints each result with its
// measured maximum error. Exit code 1 if any check fails.
#include <nlohmann/json.hpp>

#include "cli.hpp"
#include "posenc/core/error.hpp"

namespace posenc::cli {
namespace {

struct check_opts {
  out_format format = out_format::text;
  std::vector<std::string> groups;
  bool gradients = false;
};

void run_check(const check_opts& o) {
  for (const auto& g : o.groups) {
    bool known = false;
    std::string names;
    for (const auto& cg : check_groups()) {
      known |= cg.name == g;
      names += (names.empty() ? "" : ", ") + cg.name;
    }
    if (!known) fail("--group must be one of {}, got '{}'", names, g);
  }
  std::vector<check_result> all;
  for (const auto& cg : check_groups()) {
    bool selected = o.groups.empty()
                        ? (cg.by_default || (o.gradients && cg.name == "gradients"))
                        : std::find(o.groups.begin(), o.groups.end(), cg.name) != o.groups.end();
    if (o.gradients && cg.name == "gradients") selected = true;
    if (!selected) continue;
    auto r = cg.run();
    all.insert(all.end(), r.begin(), r.end());
  }
  int failed = 0;
  for (const auto& c : all) failed += !c.passed;
  if (o.format == out_format::json) {
    nlohmann::ordered_json j;
    j["checks"] = nlohmann::json::array();
    for (const auto& c : all) {
      j["checks"].push_back({{"group", c.group},
                             {"name", c.name},
                             {"passed", c.passed},
                             {"max_error", c.max_error},
                             {"tolerance", c.tolerance},
                             {"claim", c.claim},
                             {"detail", c.detail}});
    }
    j["passed"] = failed == 0;
    std::printf("%s\n", j.dump(2).c_str());
  } else if (o.format == out_format::csv) {
    std::printf("group,name,passed,max_error,tolerance\n");
    for (const auto& c : all)
      std::printf("%s,%s,%s,%s,%s\n", c.group.c_str(), c.name.c_str(), c.passed ? "true" : "false",
                  num(c.max_error).c_str(), num(c.tolerance).c_str());
  } else {
    for (const auto& c : all) {
      std::printf("%s  %-10s %-42s max_error %-10.3g tolerance %.3g\n", c.passed ? "PASS" : "FAIL",
                  c.group.c_str(), c.name.c_str(), c.max_error, c.tolerance);
      if (!c.passed && !c.detail.empty()) std::printf("      %s\n", c.detail.c_str());
    }
    std::printf("%zu checks, %d failed\n", all.size(), failed);
  }
  std::fflush(stdout);
  if (failed) throw exit_with{1};
}

const bool registered_cmd_check = register_command(90, [](CLI::App& app) {
  auto o = std::make_shared<check_opts>();
  auto* sub = app.add_subcommand("check", "Run the property checks; exit 1 if any fails");
  add_format_option(sub, o->format);
  sub->add_option("--group", o->groups, "Run only these check groups (repeatable)");
  sub->add_flag("--gradients", o->gradients, "Also run the finite-difference gradient checks");
  sub->callback([o] { run_check(*o); });
});

}  // namespace
}  // namespace posenc::cli
