// posenc bench cases for RoPE (issue 5): rope_apply_qk in place on q and k of shape (T, H, D),
// exact angles, both layouts, at T = 4096 (128 MiB of q and k), T = 32768 (1 GiB: DRAM) and
// T = 1 (decode). Bytes counted: q and k each read once and written once, 2 x 2 x T H D x 4.
//
// The shapes are the perf list of the RoPE case table (perf_cases() of
// include/posenc/verify/rope_cases.hpp), whose names are these cases' names. Validation
// (before timing): the table's reference mode on perf_validation_case() of the shape that runs
// (the tokens 0, T/3, T/2 and T-1 at their positions, same shape, layout and seed): rope_apply_qk
// against the binary128 rope_apply_reference within the bound derived in that header. The timed
// inputs are filled with bench_fill on the kernels' threads (first touch).
#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "bench.hpp"
#include "posenc/encodings/rope.hpp"
#include "posenc/verify/rope_cases.hpp"

namespace posenc::cli {
namespace {

namespace rcs = posenc::rope_cases;

struct rope_data {
  rcs::spec c;
  rope_freqs f;
  std::vector<int64_t> pos;
  std::vector<float> q, k;
};

// The table's reference mode on the case's reduced problem; "" when it passes.
std::string validate(const rcs::spec& c) {
  const auto r = rcs::check_case(rcs::perf_validation_case(c));
  if (r.passed) return "";
  return r.name + ": max_error " + std::to_string(r.max_error) + " > tolerance " +
         std::to_string(r.tolerance) + " (" + r.detail + ")";
}

bench_case make_rope(const bench_options& o, rcs::spec c) {
  const int64_t full_T = c.T;
  if (o.quick) c.T = std::min<int64_t>(c.T, 64);
  auto d = std::make_shared<rope_data>();
  d->c = c;
  d->f = rcs::freqs(c);
  d->pos.resize(static_cast<size_t>(c.T));
  for (int64_t t = 0; t < c.T; ++t) d->pos[t] = t;  // perf cases: position t for token t
  d->q.resize(static_cast<size_t>(c.T * c.H * c.D));
  d->k.resize(static_cast<size_t>(c.T * c.Hk * c.D));
  bench_fill(d->q, 1);
  bench_fill(d->k, 2);
  bench_case bc;
  bc.name = c.name;
  const double q_bytes = static_cast<double>(d->q.size()) * sizeof(float);
  const double k_bytes = static_cast<double>(d->k.size()) * sizeof(float);
  bc.bytes = 2 * (q_bytes + k_bytes);  // q and k, each read and written once
  // T = 4096: 128 MiB of q and k, compared with a copy probe over the same footprint.
  // T = 32768 (1 GiB) and T = 1 (32 KiB, cache resident: its fraction of the DRAM probe exceeds 1
  // and says only that decode is not memory bound) use the DRAM probe.
  if (full_T == 4096) bc.footprint_bytes = q_bytes + k_bytes;
  bc.validate = [c] { return validate(c); };
  bc.run = [d] {
    rope_apply_qk(d->f, d->c.layout, rope_angle::exact, d->pos, d->q.data(), d->c.H, d->k.data(),
                  d->c.Hk, d->c.T, d->c.D);
  };
  bc.note = "rope_apply_qk in place, float32, exact angles, q and k (T=" + std::to_string(c.T) +
            ", H=" + std::to_string(c.H) + ", D=" + std::to_string(c.D) + "), layout " +
            rope_layout_name(c.layout) + "; bytes = q and k read + written; cos/sin once per token";
  return bc;
}

bool register_all() {
  bool ok = true;
  int order = 10;
  for (const auto& c : rcs::perf_cases())
    ok = ok && register_bench_case(
                   {order++, c.name, [c](const bench_options& o) { return make_rope(o, c); }});
  return ok;
}

const bool registered_bench_rope = register_all();

}  // namespace
}  // namespace posenc::cli
