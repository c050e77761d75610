// tools/posenc/cli.hpp: how a command file plugs into the posenc executable.
//
// Each command lives in its own tools/posenc/commands/cmd_<name>.cpp and registers itself at static
// initialisation:
//
//   static const bool registered = posenc::cli::register_command(20, [](CLI::App& app) {
//     auto* sub = app.add_subcommand("table", "Sinusoidal position table");
//     ...
//     sub->callback([=] { ... });
//   });
//
// Errors: throw posenc::invalid_argument / posenc::io_error (printed, exit code 2) or
// posenc::cli::exit_with{1} for a command that ran but must report failure (e.g. check).
#pragma once

#include <CLI/CLI.hpp>
#include <functional>
#include <string>
#include <vector>

#include "posenc/core/check.hpp"

namespace posenc::cli {

// Registers a command; `order` sorts the subcommands in --help.
bool register_command(int order, std::function<void(CLI::App&)> setup);
void setup_all(CLI::App& app);

// Thrown by a command callback to end with a given exit code after printing its output.
struct exit_with {
  int code;
};

enum class out_format { text, csv, json };

// Adds `--format text|csv|json` (default text) to a subcommand.
void add_format_option(CLI::App* sub, out_format& f);

// Parses "A:B" (half-open range) or "a,b,c" into int64 positions; names `arg` in errors.
// Negative values are rejected.
std::vector<int64_t> parse_positions(const std::string& spec, const std::string& arg);
// Parses "a,b,c" into doubles / int64; names `arg` in errors.
std::vector<double> parse_doubles(const std::string& spec, const std::string& arg);
std::vector<int64_t> parse_ints(const std::string& spec, const std::string& arg);

// Formats a double for text/CSV output: shortest representation that round-trips.
std::string num(double v);

// Check groups: `posenc check` runs every default group; others (e.g. gradients) on request.
struct check_group {
  int order;
  std::string name;
  bool by_default;
  std::function<std::vector<check_result>()> run;
};
bool register_check_group(int order, std::string name, bool by_default,
                          std::function<std::vector<check_result>()> run);
const std::vector<check_group>& check_groups();  // sorted by order

}  // namespace posenc::cli
