// posenc bench cases for the lab model's ops (one thread's share of a training step, run on the
// bench's threads):
//   model/matmul_nn/M=2048/K=64/N=256  matmul_nn, float32: the lab MLP's up projection at 32
//                                      sequences of 64 tokens; flops = 2 M K N (limit: peak)
//   model/gelu/n=524288                gelu_forward, float32: its activation; bytes = n read +
//                                      n written (limit: bandwidth, probe of that footprint)
// The shapes are perf_cases() of the model ops case table (include/posenc/verify/ops_cases.hpp),
// whose names are these cases' names, validated before timing by its check_case on the case
// itself: the matmul against a plain long double loop, the GELU against the formula, within the
// bounds derived there.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "bench.hpp"
#include "posenc/model/ops.hpp"
#include "posenc/verify/ops_cases.hpp"

namespace posenc::cli {
namespace {

namespace ocs = posenc::model::ops_cases;

ocs::spec perf_case(const bench_options& o, const std::string& name) {
  for (const auto& c : ocs::perf_cases())
    if (c.name == name) return o.quick ? ocs::perf_quick(c) : c;
  return {};
}

std::string validate(const ocs::spec& c) {
  const auto r = ocs::check_case(c);
  if (r.passed) return "";
  return r.name + ": max_error " + std::to_string(r.max_error) + " > tolerance " +
         std::to_string(r.tolerance) + " (" + r.detail + ")";
}

struct mm_data {
  std::vector<float> a, b, c;
};

bench_case make_matmul(const bench_options& o, const std::string& name) {
  const auto c = perf_case(o, name);
  auto d = std::make_shared<mm_data>();
  const int64_t M = c.M, K = c.K, N = c.N;
  d->a.resize(static_cast<size_t>(M * K));
  d->b.resize(static_cast<size_t>(K * N));
  d->c.resize(static_cast<size_t>(M * N));
  bench_fill(d->a, 1);
  bench_fill(d->b, 2);
  bench_case bc;
  bc.name = name;
  bc.flops = 2.0 * static_cast<double>(M) * static_cast<double>(K) * static_cast<double>(N);
  bc.limit = "peak";
  bc.validate = [c] { return validate(c); };
  bc.run = [d, M, K, N] {
    model::matmul_nn(d->a.data(), K, d->b.data(), N, d->c.data(), N, M, K, N, false);
  };
  bc.note = "matmul_nn float32 (M, K) x (K, N), the lab MLP's up projection; flops = 2 M K N";
  return bc;
}

struct gelu_data {
  std::vector<float> u, y;
};

bench_case make_gelu(const bench_options& o, const std::string& name) {
  const auto c = perf_case(o, name);
  auto d = std::make_shared<gelu_data>();
  const int64_t n = c.N;
  d->u.resize(static_cast<size_t>(n));
  d->y.resize(static_cast<size_t>(n));
  bench_fill(d->u, 3);
  bench_fill(d->y, 4);
  bench_case bc;
  bc.name = name;
  bc.bytes = 2.0 * static_cast<double>(n) * sizeof(float);
  bc.footprint_bytes = bc.bytes;
  bc.validate = [c] { return validate(c); };
  bc.run = [d, n] { model::gelu_forward(d->u.data(), d->y.data(), n); };
  bc.note = "gelu_forward float32 (tanh form, Highway); bytes = input read + output written";
  return bc;
}

const bool registered_bench_model =
    register_bench_case({60, "model/matmul_nn/M=2048/K=64/N=256",
                         [](const bench_options& o) {
                           return make_matmul(o, "model/matmul_nn/M=2048/K=64/N=256");
                         }}) &&
    register_bench_case({61, "model/gelu/n=524288", [](const bench_options& o) {
                           return make_gelu(o, "model/gelu/n=524288");
                         }});

}  // namespace
}  // namespace posenc::cli
