// posenc table / posenc freqs: the sinusoidal position table and its frequencies.
//
//   posenc table --width 4 --positions 0:3            # aligned text, one row per position
//   posenc table --width 8 --positions 0,5,9 --format json
//   posenc table --width 512 --positions 0:2048 --dtype float32 --out pe.npy
//   posenc freqs --width 20 --format csv
#include <cstdio>
#include <memory>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cli.hpp"
#include "posenc/core/error.hpp"
#include "posenc/core/file.hpp"
#include "posenc/core/npy.hpp"
#include "posenc/encodings/sinusoidal.hpp"

namespace posenc::cli {
namespace {

struct table_opts {
  out_format format = out_format::text;
  int64_t width = 0;
  std::string positions;
  double base = 10000.0;
  std::string layout = "interleaved";
  std::string denominator = "width";
  std::string dtype = "float64";
  std::string out;
};

struct freqs_opts {
  out_format format = out_format::text;
  int64_t width = 0;
  double base = 10000.0;
  std::string denominator = "width";
};

std::string formula(sin_denominator d) {
  return d == sin_denominator::width ? "omega_r = base^(-2r/d)" : "omega_r = base^(-r/(d/2-1))";
}

// Writes `text` to `path` atomically, or prints it when path is empty.
void emit(const std::string& path, const std::string& text) {
  if (path.empty()) {
    std::fwrite(text.data(), 1, text.size(), stdout);
    std::fflush(stdout);
  } else {
    write_file_atomic(path, text);
  }
}

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// The table as JSON: the parameters, the positions and one array of d values per position.
std::string table_json(const sinusoidal_params& p, const std::vector<int64_t>& pos,
                       const std::vector<double>& table) {
  const int64_t n = static_cast<int64_t>(pos.size()), d = p.width;
  nlohmann::ordered_json j;
  j["width"] = p.width;
  j["base"] = p.base;
  j["layout"] = sin_layout_name(p.layout);
  j["denominator"] = sin_denominator_name(p.denominator);
  j["positions"] = pos;
  auto rows = nlohmann::ordered_json::array();
  for (int64_t i = 0; i < n; ++i) {
    auto row = nlohmann::ordered_json::array();
    for (int64_t c = 0; c < d; ++c) row.push_back(table[static_cast<size_t>(i * d + c)]);
    rows.push_back(std::move(row));
  }
  j["table"] = std::move(rows);
  return j.dump() + "\n";
}

// The table as CSV: a row of channel labels ("sin_r0"), then one row per position.
std::string table_csv(const std::vector<int64_t>& pos, const std::vector<std::string>& label,
                      const std::vector<double>& table, int64_t d, bool f32) {
  const int64_t n = static_cast<int64_t>(pos.size());
  auto val = [&](int64_t i, int64_t c) {
    const double v = table[static_cast<size_t>(i * d + c)];
    return f32 ? fmt::format("{}", static_cast<float>(v)) : num(v);
  };
  fmt::memory_buffer b;
  fmt::format_to(std::back_inserter(b), "position");
  for (const auto& l : label) {
    std::string h = l;
    h[3] = '_';  // "sin_r0"
    fmt::format_to(std::back_inserter(b), ",{}", h);
  }
  fmt::format_to(std::back_inserter(b), "\n");
  for (int64_t i = 0; i < n; ++i) {
    fmt::format_to(std::back_inserter(b), "{}", pos[static_cast<size_t>(i)]);
    for (int64_t c = 0; c < d; ++c) fmt::format_to(std::back_inserter(b), ",{}", val(i, c));
    fmt::format_to(std::back_inserter(b), "\n");
  }
  return fmt::to_string(b);
}

// The table as aligned text columns; dtype names the table's element type in the header.
std::string table_text(const sinusoidal_params& p, const std::vector<int64_t>& pos,
                       const std::vector<std::string>& label, const std::vector<double>& table,
                       const std::string& dtype) {
  const int64_t n = static_cast<int64_t>(pos.size()), d = p.width;
  // Aligned columns for reading: a channel-number row, a (sin|cos, pair) row, then one row
  // per position with 6 decimals. CSV and JSON carry the full precision.
  fmt::memory_buffer b;
  fmt::format_to(std::back_inserter(b),
                 "# sinusoidal positions: width {}, base {}, layout {}, {} ({}), {}\n", d,
                 num(p.base), sin_layout_name(p.layout), sin_denominator_name(p.denominator),
                 formula(p.denominator), dtype);
  fmt::format_to(std::back_inserter(b), "{:>10}", "channel");
  for (int64_t c = 0; c < d; ++c) fmt::format_to(std::back_inserter(b), " {:>10}", c);
  fmt::format_to(std::back_inserter(b), "\n{:>10}", "position");
  for (const auto& l : label) fmt::format_to(std::back_inserter(b), " {:>10}", l);
  fmt::format_to(std::back_inserter(b), "\n");
  for (int64_t i = 0; i < n; ++i) {
    fmt::format_to(std::back_inserter(b), "{:>10}", pos[static_cast<size_t>(i)]);
    for (int64_t c = 0; c < d; ++c)
      fmt::format_to(std::back_inserter(b), " {:>10.6f}", table[static_cast<size_t>(i * d + c)]);
    fmt::format_to(std::back_inserter(b), "\n");
  }
  return fmt::to_string(b);
}

void run_table(const table_opts& o) {
  sinusoidal_params p;
  p.width = o.width;
  p.base = o.base;
  p.layout = parse_sin_layout(o.layout, "--layout");
  p.denominator = parse_sin_denominator(o.denominator, "--denominator");
  if (o.dtype != "float32" && o.dtype != "float64")
    fail("--dtype must be one of float32, float64; got '{}'", o.dtype);
  sinusoidal_validate(p);
  const auto pos = parse_positions(o.positions, "--positions");
  const bool f32 = o.dtype == "float32";
  const int64_t n = static_cast<int64_t>(pos.size()), d = p.width;
  checked_bytes("--positions x --width table", static_cast<unsigned long long>(n),
                static_cast<unsigned long long>(d), 1, sizeof(double));

  // table: (N, d) row-major in double; float32 values are the float table widened exactly.
  std::vector<double> table(static_cast<size_t>(n * d));
  std::vector<float> table32;
  if (f32) {
    table32.resize(table.size());
    sinusoidal_table(p, pos, std::span<float>(table32));
    for (size_t i = 0; i < table.size(); ++i) table[i] = table32[i];
  } else {
    sinusoidal_table(p, pos, std::span<double>(table));
  }

  if (!o.out.empty() && ends_with(o.out, ".npy")) {
    npy_array a = f32 ? make_npy<float>({n, d}) : make_npy<double>({n, d});
    if (f32)
      std::copy(table32.begin(), table32.end(), a.as<float>());
    else
      std::copy(table.begin(), table.end(), a.as<double>());
    write_npy(o.out, a);
    return;
  }

  // Channel labels in layout order: "sin r0", "cos r0", ...
  std::vector<std::string> label(static_cast<size_t>(d));
  for (int64_t r = 0; r < d / 2; ++r) {
    label[static_cast<size_t>(sinusoidal_channel(p, r, false))] = fmt::format("sin r{}", r);
    label[static_cast<size_t>(sinusoidal_channel(p, r, true))] = fmt::format("cos r{}", r);
  }

  std::string text;
  if (o.format == out_format::json) {
    text = table_json(p, pos, table);
  } else if (o.format == out_format::csv) {
    text = table_csv(pos, label, table, d, f32);
  } else {
    text = table_text(p, pos, label, table, o.dtype);
  }
  emit(o.out, text);
}

void run_freqs(const freqs_opts& o) {
  sinusoidal_params p;
  p.width = o.width;
  p.base = o.base;
  p.denominator = parse_sin_denominator(o.denominator, "--denominator");
  sinusoidal_validate(p);
  const auto w = sinusoidal_frequencies(p);
  const auto l = sinusoidal_wavelengths(p);
  const int64_t half = p.width / 2;
  if (o.format == out_format::json) {
    nlohmann::ordered_json j;
    j["width"] = p.width;
    j["base"] = p.base;
    j["denominator"] = sin_denominator_name(p.denominator);
    auto pairs = nlohmann::ordered_json::array();
    for (int64_t r = 0; r < half; ++r)
      pairs.push_back({{"r", r},
                       {"omega", w[static_cast<size_t>(r)]},
                       {"wavelength", l[static_cast<size_t>(r)]}});
    j["pairs"] = std::move(pairs);
    std::printf("%s\n", j.dump().c_str());
  } else if (o.format == out_format::csv) {
    std::printf("r,omega,wavelength\n");
    for (int64_t r = 0; r < half; ++r)
      std::printf("%lld,%s,%s\n", static_cast<long long>(r), num(w[static_cast<size_t>(r)]).c_str(),
                  num(l[static_cast<size_t>(r)]).c_str());
  } else {
    std::printf("# sinusoidal frequencies: width %lld, base %s, %s (%s)\n",
                static_cast<long long>(p.width), num(p.base).c_str(),
                sin_denominator_name(p.denominator), formula(p.denominator).c_str());
    std::printf("# interleaved layout: pair r is channels 2r (sin) and 2r+1 (cos)\n");
    std::printf("%6s %10s %22s %22s\n", "r", "channels", "omega", "wavelength");
    for (int64_t r = 0; r < half; ++r) {
      const std::string ch = fmt::format("{}/{}", 2 * r, 2 * r + 1);
      std::printf("%6lld %10s %22.15g %22.15g\n", static_cast<long long>(r), ch.c_str(),
                  w[static_cast<size_t>(r)], l[static_cast<size_t>(r)]);
    }
  }
  std::fflush(stdout);
}

const bool registered_table = register_command(10, [](CLI::App& app) {
  auto o = std::make_shared<table_opts>();
  auto* sub = app.add_subcommand("table", "Sinusoidal absolute position table (Vaswani 2017)");
  sub->add_option("--width", o->width, "Channels d per position (even, >= 2)")->required();
  sub->add_option("--positions", o->positions, "Positions: A:B (half-open) or a,b,c")->required();
  sub->add_option("--base", o->base, "Frequency base (finite, > 1)")->default_str("10000");
  sub->add_option("--layout", o->layout, "Channel layout: interleaved or halves")
      ->default_str("interleaved");
  sub->add_option("--denominator", o->denominator,
                  "Frequency exponent: width (2r/d) or half-minus-one (r/(d/2-1))")
      ->default_str("width");
  sub->add_option("--dtype", o->dtype, "Output precision: float32 or float64")
      ->default_str("float64");
  sub->add_option("--out", o->out,
                  "Write to this file atomically instead of stdout (.npy: binary (N, d) array)");
  add_format_option(sub, o->format);
  sub->callback([o] { run_table(*o); });
});

const bool registered_freqs = register_command(11, [](CLI::App& app) {
  auto o = std::make_shared<freqs_opts>();
  auto* sub = app.add_subcommand("freqs", "Frequencies and wavelengths of the sinusoidal pairs");
  sub->add_option("--width", o->width, "Channels d per position (even, >= 2)")->required();
  sub->add_option("--base", o->base, "Frequency base (finite, > 1)")->default_str("10000");
  sub->add_option("--denominator", o->denominator,
                  "Frequency exponent: width (2r/d) or half-minus-one (r/(d/2-1))")
      ->default_str("width");
  add_format_option(sub, o->format);
  sub->callback([o] { run_freqs(*o); });
});

}  // namespace
}  // namespace posenc::cli
