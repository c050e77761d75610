// posenc alibi slopes | alibi bias | t5 buckets: the score-bias families (ALiBi, T5 buckets)
// from the command line. Thin: parse, call the library, print.
#include <cmath>
#include <memory>
#include <nlohmann/json.hpp>
#include <utility>

#include "cli.hpp"
#include "posenc/core/error.hpp"
#include "posenc/encodings/alibi.hpp"
#include "posenc/encodings/t5_bias.hpp"

namespace posenc::cli {
namespace {

struct alibi_opts {
  out_format format = out_format::text;
  int64_t heads = 0;
  double max_bias = 8.0;
  std::string convention = "press";
  std::string q_positions, k_positions;
  bool causal = false;
};

struct t5_opts {
  out_format format = out_format::text;
  int64_t num_buckets = 32;
  int64_t max_distance = 128;
  bool causal = false;
  std::string offsets;
};

// Offsets (key position - query position) may be negative: "A:B" (half-open, B > A) or
// "a,b,c". At most 2^24 of them.
std::vector<int64_t> parse_offsets(const std::string& spec, const std::string& arg) {
  const size_t colon = spec.find(':');
  if (colon == std::string::npos) {
    auto v = parse_ints(spec, arg);
    if (v.size() > (size_t{1} << 24))
      fail("{} lists {} offsets; at most 2^24 are allowed", arg, v.size());
    return v;
  }
  const auto a = parse_ints(spec.substr(0, colon), arg);
  const auto b = parse_ints(spec.substr(colon + 1), arg);
  if (a.size() != 1 || b.size() != 1)
    fail("{} must be A:B (half-open range) or a,b,c, got '{}'", arg, spec);
  if (b[0] <= a[0]) fail("{} range A:B is half-open and needs B > A, got '{}'", arg, spec);
  // The width in unsigned arithmetic: B - A overflows int64 for ranges wider than 2^63.
  const uint64_t width = static_cast<uint64_t>(b[0]) - static_cast<uint64_t>(a[0]);
  if (width > (uint64_t{1} << 24))
    fail("{} range '{}' has {} offsets; at most 2^24 are allowed", arg, spec, width);
  std::vector<int64_t> out;
  for (int64_t r = a[0]; r < b[0]; ++r) out.push_back(r);
  return out;
}

void run_slopes(const alibi_opts& o) {
  const auto conv = alibi_convention_from_name(o.convention, "--convention");
  if (o.heads < 1 || o.heads > (int64_t{1} << 20))
    fail("--heads must be in [1, 2^20], got {}", o.heads);
  if (!std::isfinite(o.max_bias) || !(o.max_bias > 0))
    fail("--max-bias must be finite and > 0, got {}", o.max_bias);
  const auto m = alibi_slopes(o.heads, o.max_bias, conv);
  if (o.format == out_format::json) {
    nlohmann::ordered_json j;
    j["heads"] = o.heads;
    j["max_bias"] = o.max_bias;
    j["convention"] = alibi_convention_name(conv);
    j["slopes"] = m;
    std::printf("%s\n", j.dump(2).c_str());
  } else {
    std::printf(o.format == out_format::csv ? "head,slope\n" : "head  slope\n");
    for (size_t h = 0; h < m.size(); ++h)
      std::printf(o.format == out_format::csv ? "%zu,%s\n" : "%-5zu %s\n", h, num(m[h]).c_str());
  }
}

void run_bias(const alibi_opts& o) {
  const auto conv = alibi_convention_from_name(o.convention, "--convention");
  if (o.heads < 1 || o.heads > 4096) fail("--heads must be in [1, 4096] for bias, got {}", o.heads);
  if (!std::isfinite(o.max_bias) || !(o.max_bias > 0))
    fail("--max-bias must be finite and > 0, got {}", o.max_bias);
  const auto q = parse_positions(o.q_positions, "--q-positions");
  const auto k = parse_positions(o.k_positions, "--k-positions");
  const size_t H = static_cast<size_t>(o.heads), T = q.size(), S = k.size();
  if (static_cast<double>(H) * T * S > double(1 << 22))
    fail("--heads x --q-positions x --k-positions must be <= 2^22 entries, got {} x {} x {}", H, T,
         S);
  const auto m = alibi_slopes(o.heads, o.max_bias, conv);
  // Printed in double (alibi_bias) rather than the float dense table: it is a display of the
  // exact values.
  auto at = [&](size_t h, size_t i, size_t j) { return alibi_bias(m[h], q[i], k[j], o.causal); };
  if (o.format == out_format::json) {
    nlohmann::ordered_json j;
    j["heads"] = o.heads;
    j["max_bias"] = o.max_bias;
    j["convention"] = alibi_convention_name(conv);
    j["causal"] = o.causal;
    j["slopes"] = m;
    j["q_positions"] = q;
    j["k_positions"] = k;
    auto& b = j["bias"] = nlohmann::ordered_json::array();  // (H, T, S)
    for (size_t h = 0; h < H; ++h) {
      auto rows = nlohmann::ordered_json::array();
      for (size_t i = 0; i < T; ++i) {
        std::vector<double> row(S);
        for (size_t jj = 0; jj < S; ++jj) row[jj] = at(h, i, jj);
        rows.push_back(row);
      }
      b.push_back(rows);
    }
    std::printf("%s\n", j.dump(2).c_str());
  } else if (o.format == out_format::csv) {
    std::printf("head,q_position,k_position,bias\n");
    for (size_t h = 0; h < H; ++h)
      for (size_t i = 0; i < T; ++i)
        for (size_t jj = 0; jj < S; ++jj)
          std::printf("%zu,%lld,%lld,%s\n", h, static_cast<long long>(q[i]),
                      static_cast<long long>(k[jj]), num(at(h, i, jj)).c_str());
  } else {
    for (size_t h = 0; h < H; ++h) {
      std::printf("head %zu  slope %s%s\n", h, num(m[h]).c_str(), o.causal ? "  (causal)" : "");
      for (size_t i = 0; i < T; ++i) {
        std::printf("  q=%-6lld", static_cast<long long>(q[i]));
        for (size_t jj = 0; jj < S; ++jj) std::printf(" %10s", num(at(h, i, jj)).c_str());
        std::printf("\n");
      }
    }
  }
}

void run_buckets(const t5_opts& o) {
  const t5_params p{o.num_buckets, o.max_distance, !o.causal};
  try {
    t5_validate(p);
  } catch (const invalid_argument& e) {
    // The library names the fields (num_buckets, max_distance); name the options instead.
    std::string msg = e.what();
    for (auto [field, option] :
         {std::pair{"num_buckets", "--num-buckets"}, std::pair{"max_distance", "--max-distance"}})
      if (msg.rfind(field, 0) == 0) msg = option + msg.substr(std::string(field).size());
    throw invalid_argument(msg);
  }
  const auto r = parse_offsets(o.offsets, "--offsets");
  std::vector<int64_t> b(r.size());
  for (size_t i = 0; i < r.size(); ++i) b[i] = t5_bucket(r[i], p);
  if (o.format == out_format::json) {
    nlohmann::ordered_json j;
    j["num_buckets"] = o.num_buckets;
    j["max_distance"] = o.max_distance;
    j["bidirectional"] = !o.causal;
    j["offsets"] = r;
    j["buckets"] = b;
    std::printf("%s\n", j.dump(2).c_str());
  } else {
    std::printf(o.format == out_format::csv ? "offset,bucket\n" : "offset  bucket\n");
    for (size_t i = 0; i < r.size(); ++i)
      std::printf(o.format == out_format::csv ? "%lld,%lld\n" : "%-7lld %lld\n",
                  static_cast<long long>(r[i]), static_cast<long long>(b[i]));
  }
}

const bool registered_cmd_bias = register_command(40, [](CLI::App& app) {
  auto* alibi = app.add_subcommand("alibi", "ALiBi slopes and biases (Press et al. 2022)");
  alibi->require_subcommand(1);
  {
    auto o = std::make_shared<alibi_opts>();
    auto* sub = alibi->add_subcommand("slopes", "Per-head slopes for H heads");
    add_format_option(sub, o->format);
    sub->add_option("--heads", o->heads, "Number of heads H >= 1")->required();
    sub->add_option("--max-bias", o->max_bias, "max_bias b: slopes 2^(-b k / n) (default 8)");
    sub->add_option("--convention", o->convention,
                    "press (default; Bloom, vLLM, ggml), mpt (same values, MPT's formula), "
                    "geometric (2^(-b(h+1)/H))");
    sub->callback([o] { run_slopes(*o); });
  }
  {
    auto o = std::make_shared<alibi_opts>();
    auto* sub = alibi->add_subcommand("bias", "Bias matrix -slope*(i-j) or -slope*|i-j| per head");
    add_format_option(sub, o->format);
    sub->add_option("--heads", o->heads, "Number of heads H >= 1")->required();
    sub->add_option("--max-bias", o->max_bias, "max_bias b (default 8)");
    sub->add_option("--convention", o->convention, "press, mpt or geometric");
    sub->add_option("--q-positions", o->q_positions, "Query position ids: A:B or a,b,c")
        ->required();
    sub->add_option("--k-positions", o->k_positions, "Key position ids: A:B or a,b,c")->required();
    sub->add_flag("--causal", o->causal, "Causal form -slope*(i-j) (default |i-j|)");
    sub->callback([o] { run_bias(*o); });
  }
  auto* t5 = app.add_subcommand("t5", "T5 relative position buckets (Raffel et al. 2020)");
  t5->require_subcommand(1);
  {
    auto o = std::make_shared<t5_opts>();
    auto* sub = t5->add_subcommand("buckets", "Bucket of each offset = key pos - query pos");
    add_format_option(sub, o->format);
    sub->add_option("--num-buckets", o->num_buckets, "Total buckets (default 32)");
    sub->add_option("--max-distance", o->max_distance, "Saturation distance (default 128)");
    sub->add_flag("--causal", o->causal, "Decoder (unidirectional) buckets");
    sub->add_option("--offsets", o->offsets, "Offsets: A:B (half-open, may be negative) or a,b,c")
        ->required();
    sub->callback([o] { run_buckets(*o); });
  }
});

}  // namespace
}  // namespace posenc::cli
