// posenc bench cases for the tables and bias rows (issue 5):
//   sinusoidal_table/N=65536/d=1024  float32 table of positions 0 .. N-1 (paper convention),
//                                    bytes = the table written once (N d 4);
//   bias_row/alibi/H=32/S=262144     alibi_bias_row for one query against S keys, every head;
//   bias_row/t5/H=32/S=262144        t5_bias_row likewise (32 buckets, max_distance 128);
//                                    bytes = rows written (H S 4) + key ids read per head (H S 8).
// The sinusoidal and ALiBi cases are perf_cases() of the case table
// (include/posenc/verify/table_cases.hpp), whose names are these cases' names, and are
// validated before timing by its check on perf_validation_case(): the table's rows 0, 1, N/3 and
// N-1 against the long double reference within 2 bound + 2^-25; every ALiBi head and key bit for
// bit against alibi_bias rounded to float. The T5 case is perf_cases() of the T5 case table
// (include/posenc/verify/t5_cases.hpp), validated by its check_case on the case itself: every
// head and key's bucket and bias bit for bit against t5_bucket and t5_bias_dense.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "bench.hpp"
#include "posenc/encodings/alibi.hpp"
#include "posenc/encodings/sinusoidal.hpp"
#include "posenc/encodings/t5_bias.hpp"
#include "posenc/verify/t5_cases.hpp"
#include "posenc/verify/table_cases.hpp"

namespace posenc::cli {
namespace {

namespace tcs = posenc::table_cases;

// The perf case named name, at the --quick size when asked.
tcs::spec perf_case(const bench_options& o, const std::string& name) {
  for (const auto& c : tcs::perf_cases())
    if (c.name == name) return o.quick ? tcs::perf_quick(c) : c;
  return {};
}

std::string validate(const tcs::spec& c) {
  const auto r = tcs::check_case(tcs::perf_validation_case(c));
  if (r.passed) return "";
  return r.name + ": max_error " + std::to_string(r.max_error) + " > tolerance " +
         std::to_string(r.tolerance) + " (" + r.detail + ")";
}

struct sin_data {
  sinusoidal_params p;
  std::vector<int64_t> pos;
  std::vector<float> out;
};

bench_case make_sinusoidal(const bench_options& o, const std::string& name) {
  const auto c = perf_case(o, name);
  auto d = std::make_shared<sin_data>();
  const int64_t N = c.iota_n, w = c.p.width;
  d->p = c.p;
  d->pos.resize(static_cast<size_t>(N));
  for (int64_t i = 0; i < N; ++i) d->pos[static_cast<size_t>(i)] = i;
  d->out.resize(static_cast<size_t>(N * w));
  bench_case bc;
  bc.name = name;
  bc.bytes = static_cast<double>(N * w) * sizeof(float);
  bc.validate = [c] { return validate(c); };
  bc.run = [d] { sinusoidal_table(d->p, d->pos, std::span<float>(d->out)); };
  bc.note = "sinusoidal_table float32, positions 0.." + std::to_string(N - 1) +
            ", d = 1024, interleaved [sin cos]; bytes = table written";
  return bc;
}

struct bias_data {
  int64_t H, S;
  std::vector<double> slopes;
  std::vector<int64_t> kpos;
  std::vector<float> out;  // (H, S)
  int64_t qpos;
};

bench_case make_bias(const bench_options& o, const std::string& name) {
  const auto c = perf_case(o, name);  // the case table's shape: keys, query and slopes
  auto d = std::make_shared<bias_data>();
  d->H = static_cast<int64_t>(c.slopes.size());
  d->S = c.n;
  d->slopes = c.slopes;
  d->kpos = c.kpos;
  d->qpos = *c.qpos;
  d->out.resize(static_cast<size_t>(d->H * d->S));
  bench_case bc;
  bc.name = name;
  bc.bytes = static_cast<double>(d->H * d->S) * (sizeof(float) + sizeof(int64_t));
  bc.run = [d] {
    for (int64_t h = 0; h < d->H; ++h)
      alibi_bias_row(d->slopes[static_cast<size_t>(h)], d->qpos, d->kpos.data(), d->S, true,
                     d->out.data() + h * d->S);
  };
  // Validated by the case table (bit for bit against alibi_bias rounded to float).
  bc.validate = [c] { return validate(c); };
  bc.note =
      "alibi_bias_row (causal), 1 query x S keys x 32 heads, one thread; bytes = rows written + "
      "key ids read";
  return bc;
}

struct t5_data {
  t5_bias_table table;
  t5_row_plan plan;
  std::vector<int64_t> kpos;
  std::vector<float> out;  // (H, S)
  int64_t qpos;
};

bench_case make_t5(const bench_options& o, const std::string& name) {
  t5_cases::spec c;
  for (const auto& e : t5_cases::perf_cases())
    if (e.name == name) c = o.quick ? t5_cases::perf_quick(e) : e;
  auto d = std::make_shared<t5_data>();
  d->table = t5_cases::table(c);
  d->plan = t5_plan_rows(c.p);
  d->kpos = c.kpos;
  d->qpos = c.qpos.at(0);
  const int64_t H = c.heads, S = static_cast<int64_t>(c.kpos.size());
  d->out.resize(static_cast<size_t>(H * S));
  bench_case bc;
  bc.name = name;
  bc.bytes = static_cast<double>(H * S) * (sizeof(float) + sizeof(int64_t));
  bc.run = [d, H, S] {
    for (int64_t h = 0; h < H; ++h)
      t5_bias_row(d->table, d->plan, h, d->qpos, d->kpos.data(), S, d->out.data() + h * S);
  };
  // Exact: the case table's check of the case itself (every head and key, bit for bit).
  bc.validate = [c] {
    const auto r = t5_cases::check_case(c);
    return r.passed ? std::string() : r.name + ": " + r.detail;
  };
  bc.note =
      "t5_bias_row (causal, 32 buckets, M = 128), 1 query x S keys x 32 heads, one thread; bytes "
      "= rows written + key ids read";
  return bc;
}

const bool registered_bench_tables =
    register_bench_case({30, "sinusoidal_table/N=65536/d=1024",
                         [](const bench_options& o) {
                           return make_sinusoidal(o, "sinusoidal_table/N=65536/d=1024");
                         }}) &&
    register_bench_case(
        {31, "bias_row/alibi/H=32/S=262144",
         [](const bench_options& o) { return make_bias(o, "bias_row/alibi/H=32/S=262144"); }}) &&
    register_bench_case({32, "bias_row/t5/H=32/S=262144", [](const bench_options& o) {
                           return make_t5(o, "bias_row/t5/H=32/S=262144");
                         }});

}  // namespace
}  // namespace posenc::cli
