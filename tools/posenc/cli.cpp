#include "cli.hpp"

#include <fmt/format.h>
#include <algorithm>
#include <charconv>
#include <cmath>

#include "posenc/core/error.hpp"

namespace posenc::cli {
namespace {

struct entry {
  int order;
  std::function<void(CLI::App&)> setup;
};
std::vector<entry>& registry() {
  static std::vector<entry> r;
  return r;
}
std::vector<check_group>& groups() {
  static std::vector<check_group> g;
  return g;
}

int64_t parse_i64(const std::string& tok, const std::string& arg, const std::string& spec) {
  int64_t v = 0;
  const char* b = tok.data();
  const char* e = tok.data() + tok.size();
  while (b < e && *b == ' ') ++b;
  while (e > b && e[-1] == ' ') --e;
  auto [p, ec] = std::from_chars(b, e, v);
  if (b == e || ec != std::errc() || p != e)
    fail("{} must be integers, got '{}' in '{}'", arg, tok, spec);
  return v;
}

}  // namespace

bool register_command(int order, std::function<void(CLI::App&)> setup) {
  registry().push_back({order, std::move(setup)});
  return true;
}

void setup_all(CLI::App& app) {
  auto r = registry();
  std::stable_sort(r.begin(), r.end(), [](auto& a, auto& b) { return a.order < b.order; });
  for (auto& e : r) e.setup(app);
}

void add_format_option(CLI::App* sub, out_format& f) {
  static const std::map<std::string, out_format> m = {
      {"text", out_format::text}, {"csv", out_format::csv}, {"json", out_format::json}};
  sub->add_option("--format", f, "Output format: text, csv or json")
      ->transform(CLI::CheckedTransformer(m, CLI::ignore_case))
      ->default_str("text");
}

std::vector<int64_t> parse_ints(const std::string& spec, const std::string& arg) {
  std::vector<int64_t> out;
  size_t pos = 0;
  if (spec.empty()) fail("{} must be a comma-separated list of integers, got an empty value", arg);
  while (pos <= spec.size()) {
    size_t c = spec.find(',', pos);
    std::string tok = spec.substr(pos, c == std::string::npos ? std::string::npos : c - pos);
    out.push_back(parse_i64(tok, arg, spec));
    if (c == std::string::npos) break;
    pos = c + 1;
  }
  return out;
}

std::vector<int64_t> parse_positions(const std::string& spec, const std::string& arg) {
  std::vector<int64_t> out;
  size_t colon = spec.find(':');
  if (colon != std::string::npos) {
    int64_t a = parse_i64(spec.substr(0, colon), arg, spec);
    int64_t b = parse_i64(spec.substr(colon + 1), arg, spec);
    if (a < 0) fail("{} must be non-negative, got start {} in '{}'", arg, a, spec);
    if (b <= a) fail("{} range A:B is half-open and needs B > A, got '{}'", arg, spec);
    if (b - a > (int64_t{1} << 26))
      fail("{} range '{}' has {} positions; at most {} are allowed", arg, spec, b - a,
           int64_t{1} << 26);
    for (int64_t p = a; p < b; ++p) out.push_back(p);
    return out;
  }
  out = parse_ints(spec, arg);
  for (int64_t p : out)
    if (p < 0) fail("{} must be non-negative, got {}", arg, p);
  return out;
}

std::vector<double> parse_doubles(const std::string& spec, const std::string& arg) {
  std::vector<double> out;
  size_t pos = 0;
  while (pos <= spec.size()) {
    size_t c = spec.find(',', pos);
    std::string tok = spec.substr(pos, c == std::string::npos ? std::string::npos : c - pos);
    double v = 0;
    auto [p, ec] = std::from_chars(tok.data(), tok.data() + tok.size(), v);
    if (tok.empty() || ec != std::errc() || p != tok.data() + tok.size())
      fail("{} must be numbers, got '{}' in '{}'", arg, tok, spec);
    out.push_back(v);
    if (c == std::string::npos) break;
    pos = c + 1;
  }
  return out;
}

std::string num(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  return fmt::format("{}", v);
}

bool register_check_group(int order, std::string name, bool by_default,
                          std::function<std::vector<check_result>()> run) {
  groups().push_back({order, std::move(name), by_default, std::move(run)});
  std::stable_sort(groups().begin(), groups().end(),
                   [](auto& a, auto& b) { return a.order < b.order; });
  return true;
}

const std::vector<check_group>& check_groups() {
  return groups();
}

}  // namespace posenc::cli
